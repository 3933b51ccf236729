/* Option parsing, output-path checks and the tokenizer lookup shared by the subcommands. */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "caldrix: %s: \"%s\" is not an integer in [%ld, %ld]\n", opt, s ? s : "", lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || isnan(v) || v < lo || v > hi) {
        fprintf(stderr, "caldrix: %s: \"%s\" is not a number in [%g, %g]\n", opt, s ? s : "", lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_lora(const char *cmd, const char *v, char **name, char **path, float *scale)
{
    const char *dir = v, *eq = name ? strchr(v, '=') : NULL;
    if (eq && memchr(v, '/', (size_t)(eq - v)))
        eq = NULL; /* a path holding '=' */
    if (eq)
        dir = eq + 1;
    /* DIR:SCALE when what follows the last ':' is a number; else the whole is the path */
    const char *c = strrchr(dir, ':');
    char *end = NULL;
    double sc = c ? strtod(c + 1, &end) : 1.0;
    const bool has_scale = c && c[1] && end && !*end;
    if (has_scale && !(isfinite(sc) && fabs(sc) <= 1e6)) {
        fprintf(stderr, "%s: --lora %s: the scale is not a finite number (of magnitude at most 1e6)\n", cmd, v);
        return -1;
    }
    const size_t dl = has_scale ? (size_t)(c - dir) : strlen(dir);
    if (!dl || (eq && eq == v)) {
        fprintf(stderr, "%s: --lora %s: %s is empty (--lora %sDIR[:SCALE])\n", cmd, v, dl ? "the name" : "the path",
                name ? "NAME=" : "");
        return -1;
    }
    *path = strndup(dir, dl);
    *scale = has_scale ? (float)sc : 1.0f;
    if (!name)
        return *path ? 0 : -1;
    if (eq) {
        *name = strndup(v, (size_t)(eq - v));
    } else { /* DIR's last part, without .gguf */
        size_t n = dl;
        while (n > 1 && dir[n - 1] == '/')
            n--;
        const char *b = dir + n;
        while (b > dir && b[-1] != '/')
            b--;
        size_t len = (size_t)(dir + n - b);
        if (len > 5 && !strncmp(b + len - 5, ".gguf", 5))
            len -= 5;
        *name = strndup(b, len);
    }
    for (const char *q = *name; q && *q; q++)
        if ((unsigned char)*q < 0x20 || *q == '"' || *q == '\\' || *q == 0x7f) {
            fprintf(stderr, "%s: --lora %s: a quote, a backslash or a control character cannot go in a name\n", cmd, v);
            free(*name);
            free(*path);
            *name = *path = NULL;
            return -1;
        }
    return *path && *name ? 0 : -1;
}

int cli_parse_bytes(const char *opt, const char *s, uint64_t *out)
{
    if (!cdx_parse_bytes(s, out) || !*out) {
        fprintf(stderr, "caldrix: %s: \"%s\" is not a byte count (a positive number, optionally with a K, M, G or T "
                        "suffix: 512M, 8G, 1.5GiB)\n", opt, s ? s : "");
        return -1;
    }
    return 0;
}

int cli_parse_json_object(const char *cmd, const char *opt, const char *s, json_t **out)
{
    json_error_t je;
    json_t *v = json_loads(s ? s : "", JSON_DECODE_ANY, &je);
    if (!v || !json_is_object(v)) {
        fprintf(stderr, "%s: %s: %s: %s\n", cmd, opt, v ? "expected a JSON object" : je.text, s ? s : "");
        json_decref(v);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_engine_opt(const char *opt, const char *s, cdx_engine_opt_id id, long *out)
{
    const cdx_engine_range r = cdx_engine_opt_range(id);
    return cli_parse_int(opt, s, (long)r.lo, (long)r.hi, out);
}

void cli_print_engine_ranges(FILE *f, const cdx_engine_opt_id *ids, int n)
{
    fputs("ranges:", f);
    for (int i = 0; i < n; i++) {
        const cdx_engine_range r = cdx_engine_opt_range(ids[i]);
        fprintf(f, " %s %lld..%lld", r.flag, (long long)r.lo, (long long)r.hi);
        if (ids[i] == CDX_OPT_THREADS)
            fprintf(f, " (4 x the %d cores this process may use, at most %d)", cdx_cpu_count(), CDX_MAX_THREADS);
        fputs(i + 1 < n ? "," : "\n", f);
    }
}

/* ---- output paths ---- */

static int same_file(const struct stat *a, const char *path)
{
    struct stat b;
    return stat(path, &b) == 0 && S_ISREG(b.st_mode) && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

int cli_check_output(const char *cmd, const char *in, const char *out)
{
    struct stat so, si;
    bool exists = stat(out, &so) == 0;
    if (exists && S_ISDIR(so.st_mode)) {
        fprintf(stderr, "caldrix %s: OUT %s is a directory; give the output file's path\n", cmd, out);
        return 2;
    }
    /* the same inode: the path itself, a hard link or a symlink to the input */
    if (exists && stat(in, &si) == 0) {
        if (S_ISREG(si.st_mode) && same_file(&so, in)) {
            fprintf(stderr, "caldrix %s: OUT %s is the input %s (the same file); write the output elsewhere\n", cmd,
                    out, in);
            return 2;
        }
        if (S_ISDIR(si.st_mode)) {
            DIR *d = opendir(in);
            struct dirent *e;
            while (d && (e = readdir(d))) {
                char p[4200];
                snprintf(p, sizeof p, "%s/%s", in, e->d_name);
                if (same_file(&so, p)) {
                    fprintf(stderr, "caldrix %s: OUT %s is %s, a file of the input checkpoint; write the output "
                            "elsewhere\n", cmd, out, p);
                    closedir(d);
                    return 2;
                }
            }
            if (d)
                closedir(d);
        }
    }
    /* the folder the output (and its OUT.tmp) goes into must exist and take a new file */
    const char *slash = strrchr(out, '/');
    char dir[4200];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == out)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - out), out);
    struct stat sd;
    if (stat(dir, &sd) != 0 || !S_ISDIR(sd.st_mode)) {
        fprintf(stderr, "caldrix %s: OUT %s: the folder %s does not exist%s; create it first\n", cmd, out, dir,
                stat(dir, &sd) == 0 ? " (it is not a folder)" : "");
        return 2;
    }
    /* a probe file, not access(2): it also catches read-only mounts, and root's writes to them */
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/.caldrix-probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) {
        fprintf(stderr, "caldrix %s: OUT %s: cannot create a file in the folder %s (%s)\n", cmd, out, dir,
                strerror(errno));
        return 2;
    }
    close(fd);
    unlink(probe);
    return 0;
}

void cli_load_env(cdx_load_opts *lo)
{
    const char *mm = getenv("CALDRIX_MMAP");
    lo->weights_io = !mm || !*mm ? CDX_WEIGHTS_AUTO : strcmp(mm, "0") ? CDX_WEIGHTS_IN_PLACE : CDX_WEIGHTS_COPY;
    const char *io = getenv("CALDRIX_EXPERT_IO");
    if (io && *io && strcmp(io, "mmap") && strcmp(io, "pread")) {
        fprintf(stderr, "caldrix: CALDRIX_EXPERT_IO is \"%.40s\"; expected pread or mmap (or unset it)\n", io);
        exit(2);
    }
    lo->expert_pread = io && !strcmp(io, "pread");
}

cdx_load_opts cli_load_opts(const cdx_hub_opts *hub, cdx_dtype dtype, uint64_t weight_budget)
{
    cdx_load_opts lo = cdx_load_defaults();
    cli_load_env(&lo);
    lo.hub = hub;
    lo.dtype = dtype;
    lo.weight_budget = weight_budget;
    lo.default_gguf = cdx_embedded_model;
    lo.default_gguf_size = (size_t)(cdx_embedded_model_end - cdx_embedded_model);
    lo.default_name = "stories260K.gguf (bundled)";
    return lo;
}

int cli_parse_dtype(const char *cmd, const char *s, cdx_dtype *out)
{
    if (cdx_dtype_from_name(s, out) == CDX_OK)
        return 0;
    fprintf(stderr, "%s: --dtype is \"%s\"; expected auto, f32 or bf16\n", cmd, s);
    return -1;
}

int cli_parse_kv_type(const char *cmd, const char *s, uint32_t *out)
{
    static const struct { const char *name; uint32_t type; } k[] = {
        { "f32", CDX_TYPE_F32 }, { "f16", CDX_TYPE_F16 }, { "bf16", CDX_TYPE_BF16 },
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(s, k[i].name)) {
            *out = k[i].type;
            return 0;
        }
    fprintf(stderr, "%s: --kv-type is \"%s\"; expected f32, f16 (f32 compute) or bf16 (bf16 compute)\n", cmd, s);
    return -1;
}

void cli_print_dtype_help(FILE *f)
{
    fprintf(f, "\n--dtype auto (the default) picks, by format and stored type:\n%s"
               "--kv-type defaults to bf16 for bf16 compute (exact: its K and V are bf16 values), else f32.\n",
            cdx_dtype_help());
}

const char *cli_isa_list(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; cdx_kernels_name_at(i); i++) {
        const char *isa = cdx_kernels_name_at(i);
        if (!cdx_kernels_by_isa(isa))
            continue;
        int w = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", isa);
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
    return buf;
}
