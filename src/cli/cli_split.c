/* --allow-split and its options: starting a split before any rank loads a byte, and a later rank's
 * stage loop (cli_split.h). */
#include "cli.h"
#include "cli_split.h"

#include "caldrix/hub.h"

#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { PLAN_WHOLE = 3 }; /* a plan's status: rank 0 runs the model whole, the others end */

bool cli_split_is_opt(const char *a)
{
    return !strcmp(a, "--allow-split") || !strcmp(a, "--nodes") || !strcmp(a, "--split-layers") ||
           !strcmp(a, "--split-timeout") || !strcmp(a, "--split-micro") || !strcmp(a, "--memory") ||
           !strcmp(a, "--split-pipeline");
}

int cli_split_groups(const cdx_split *sp, const cli_split_opts *so)
{
    if (!sp)
        return 0;
    const int n = cdx_split_size(sp);
    return so->pipeline < 0 ? 1 : n < 2 ? 2 : n > 4 ? 4 : n;
}

int cli_split_parse(const char *cmd, int argc, char **argv, int *i, cli_split_opts *so)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--allow-split")) {
        so->allow = true;
        return 0;
    }
    if (!cli_split_is_opt(a))
        return 1;
    if (!v) {
        fprintf(stderr, "%s: %s needs a value (%s --help)\n", cmd, a, cmd);
        return 2;
    }
    ++*i;
    if (!strcmp(a, "--nodes"))
        return cli_parse_int(a, v, 1, 256, &so->nodes) ? 2 : 0;
    if (!strcmp(a, "--split-timeout"))
        return cli_parse_float(a, v, 0.1, 86400, &so->timeout_s) ? 2 : 0;
    if (!strcmp(a, "--memory"))
        return cli_parse_bytes(a, v, &so->memory) ? 2 : 0;
    if (!strcmp(a, "--split-micro"))
        return cli_parse_int(a, v, 1, 64, &so->micro) ? 2 : 0;
    if (!strcmp(a, "--split-pipeline")) {
        if (strcmp(v, "on") && strcmp(v, "off")) {
            fprintf(stderr, "%s: --split-pipeline is \"%s\"; expected on or off\n", cmd, v);
            return 2;
        }
        so->pipeline = strcmp(v, "on") ? -1 : 1;
        return 0;
    }
    so->layers = v;
    return 0;
}

/* The GNU build-id note of the program (the linker's hash of it), if it has one. */
static int build_note(struct dl_phdr_info *info, size_t size, void *data)
{
    uint8_t *out = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const uint8_t *name = p + sizeof *nh, *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (desc + nh->n_descsz > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4) && nh->n_descsz) {
                out[0] = 1;
                memcpy(out + 1, desc, nh->n_descsz < 31 ? nh->n_descsz : 31);
                return 1;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 1; /* the first object is the program itself */
}

/* The build's id: its GNU build-id note, else a SHA-256 of this binary (ranks that differ are refused). */
static void build_id(uint8_t out[32])
{
    memset(out, 0, 32);
    dl_iterate_phdr(build_note, out);
    if (out[0])
        return;
    char hex[65] = "";
    cdx_err err = { 0 };
    if (cdx_sha256_file("/proc/self/exe", hex, &err))
        snprintf(hex, sizeof hex, "%s", CDX_VERSION_STRING);
    for (int i = 0; i < 32 && hex[2 * i] && hex[2 * i + 1]; i++) {
        unsigned x = 0;
        sscanf(hex + 2 * i, "%2x", &x);
        out[i] = (uint8_t)x;
    }
}

static long env_long(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 10) : -1;
}

int cli_split_begin(const char *cmd, const cli_split_opts *so, const char *model, cdx_split **out, int64_t *l0,
                    int64_t *l1)
{
    *out = NULL;
    /* Open MPI's mpirun says in the environment how many ranks it started */
    const long world = env_long("OMPI_COMM_WORLD_SIZE"), wrank = env_long("OMPI_COMM_WORLD_RANK");
    if (!so->allow) {
        if (so->nodes) {
            fprintf(stderr, "%s: --nodes %ld splits the model across machines: add --allow-split (a model is split only "
                            "when you allow it)\n", cmd, so->nodes);
            return 2;
        }
        if (so->layers || so->timeout_s || so->memory || so->micro || so->pipeline) {
            fprintf(stderr, "%s: %s shapes a split: add --allow-split\n", cmd,
                    so->layers ? "--split-layers" : so->timeout_s ? "--split-timeout" : so->micro ? "--split-micro" :
                    so->pipeline ? "--split-pipeline" : "--memory");
            return 2;
        }
        if (world > 1) {
            if (wrank == 0)
                fprintf(stderr, "%s: mpirun started %ld ranks: add --allow-split to split the model across them (each "
                                "rank would otherwise run the whole model on its own)\n", cmd, world);
            return 2;
        }
        return 0;
    }
    if (world <= 1) { /* one rank (or no mpirun): the model runs whole, MPI untouched */
        if (so->nodes > 1) {
            fprintf(stderr, "%s: --nodes %ld: start caldrix under mpirun with %ld ranks (mpirun -np %ld caldrix ...); "
                            "this process is %s\n", cmd, so->nodes, so->nodes, so->nodes,
                    world == 1 ? "its only rank" : "not under mpirun");
            return 2;
        }
        return 0;
    }
    if (!cdx_split_built()) {
        if (wrank == 0)
            fprintf(stderr, "%s: --allow-split: this build of caldrix has no Open MPI (pkg-config ompi-c was not found "
                            "when it was built): install libopenmpi-dev (scripts/deps) and rebuild\n", cmd);
        return 2;
    }
    cdx_err err = { 0 };
    cdx_split *sp = NULL;
    if (cdx_split_init(&sp, &err)) {
        fprintf(stderr, "%s: --allow-split: %s\n", cmd, err.msg);
        return 1;
    }
    if (so->timeout_s)
        cdx_split_set_timeout(sp, so->timeout_s);
    const int rank = cdx_split_rank(sp), size = cdx_split_size(sp);
    uint8_t id[32];
    build_id(id);
    uint64_t mem = so->memory; /* --memory, else what this machine has available */
    if (!mem)
        cdx_hub_mem_available(&mem, &err);
    cdx_split_peer peers[256];
    int64_t bounds[257];
    int rc = cdx_split_hello(sp, id, mem, rank == 0 ? peers : NULL, &err);
    if (rank > 0) {
        int status = 0;
        char why[512];
        if (rc || (rc = cdx_split_recv_plan(sp, &status, bounds, why, sizeof why, &err))) {
            fprintf(stderr, "%s: rank %d: %s\n", cmd, rank, err.msg);
            cdx_split_end(sp);
            return 1;
        }
        if (status == PLAN_WHOLE) { /* rank 0 holds the whole model: nothing to do here */
            cdx_split_end(sp);
            return -1;
        }
        if (status) { /* rank 0 says why */
            cdx_split_end(sp);
            return status;
        }
        *out = sp;
        *l0 = bounds[rank];
        *l1 = bounds[rank + 1];
        return 0;
    }
    /* rank 0: the plan, refused before any rank loads a byte */
    char why[600] = "";
    int status = 0;
    bool whole = false;
    if (rc) {
        snprintf(why, sizeof why, "%.590s", err.msg);
        status = rc == CDX_EINVAL ? 2 : 1;
    } else if (so->nodes && so->nodes != size) {
        snprintf(why, sizeof why, "--nodes %ld, but mpirun started %d ranks (mpirun -np %ld)", so->nodes, size, so->nodes);
        status = 2;
    } else {
        struct stat stt;
        cdx_hub_report *rep = calloc(1, sizeof *rep);
        if (!model || stat(model, &stt) != 0) {
            snprintf(why, sizeof why, "--allow-split: give MODEL as a path on disk, the same on every rank (%s%s%s)",
                     model ? "\"" : "", model ? model : "the bundled model is not split", model ? "\" is not one" : "");
            status = 2;
        } else if (!rep || cdx_hub_inspect_path(model, rep, &err)) {
            snprintf(why, sizeof why, "%.590s", rep ? err.msg : "out of memory");
            status = 1;
        } else if (rep->n_layer <= 0) {
            snprintf(why, sizeof why, "%s: the number of layers cannot be read from its headers", model);
            status = 2;
        } else {
            uint64_t mems[256];
            for (int r = 0; r < size; r++)
                mems[r] = peers[r].mem;
            /* an even share of the weights and the KV cache (at the default context) a layer */
            const uint64_t lb = (rep->weight_bytes + rep->kv_bytes) / (uint64_t)rep->n_layer;
            rc = so->layers ? cdx_split_parse_layers(so->layers, rep->n_layer, size, bounds, &err)
                            : cdx_split_fit(rep->n_layer, lb, mems, size, !so->nodes, &whole, bounds, &err);
            for (int r = 0; !rc && !whole && so->layers && r < size; r++) /* a slice by hand must fit its rank */
                if ((uint64_t)(bounds[r + 1] - bounds[r]) * lb > mems[r]) {
                    char need[32], one[32], has[32];
                    cdx_fmt_bytes((uint64_t)(bounds[r + 1] - bounds[r]) * lb, need, sizeof need);
                    cdx_fmt_bytes(lb, one, sizeof one);
                    cdx_fmt_bytes(mems[r], has, sizeof has);
                    rc = cdx_err_set(&err, CDX_ERESOURCE_LIMIT, "--split-layers gives rank %d layers %lld-%lld, %s (%s a "
                                     "layer, weights and KV cache); it gives %s", r, (long long)bounds[r],
                                     (long long)bounds[r + 1] - 1, need, one, has);
                }
            if (rc) {
                snprintf(why, sizeof why, "%.590s", err.msg);
                status = 2;
            } else if (whole) {
                status = PLAN_WHOLE;
                char need[32], has[32];
                cdx_fmt_bytes(lb * (uint64_t)rep->n_layer, need, sizeof need);
                cdx_fmt_bytes(mems[0], has, sizeof has);
                snprintf(why, sizeof why, "rank 0 holds the whole model (%s of the %s it gives): it runs whole; "
                         "--nodes %d splits it anyway", need, has, size);
            }
        }
        free(rep);
    }
    if (cdx_split_send_plan(sp, status, bounds, why, &err) && !status) {
        snprintf(why, sizeof why, "%.590s", err.msg);
        status = 1;
    }
    if (status == PLAN_WHOLE) { /* the other ranks end; this one runs the model whole, MPI done */
        fprintf(stderr, "%s: %s\n", cmd, why);
        cdx_split_end(sp);
        return 0;
    }
    if (status) {
        fprintf(stderr, "%s: %s\n", cmd, why);
        cdx_split_end(sp);
        return status;
    }
    *out = sp;
    *l0 = bounds[0];
    *l1 = bounds[1];
    return 0;
}

int cli_split_stage(const char *cmd, cdx_split *sp, const char *model, cdx_dtype dtype, int n_threads,
                    const cdx_kernels *k, int64_t l0, int64_t l1)
{
    cdx_load_opts lo = cdx_load_defaults();
    cli_load_env(&lo);
    lo.dtype = dtype;
    lo.layer0 = l0; /* only its slice is packed or copied */
    lo.layer1 = l1;
    lo.paths_only = true;
    lo.tokenizer = false;
    cdx_loaded *ld = NULL;
    cdx_err err = { 0 };
    int rc = cdx_load(model, &lo, &ld, NULL, &err);
    if (rc) /* rank 0 hears why when it starts the stages, and says it */
        cdx_err_prefix(&err, "loading %s", model);
    rc = cdx_split_stage_run(sp, rc ? NULL : ld->model, n_threads, k, &err);
    cdx_load_close(ld);
    if (rc) {
        fprintf(stderr, "%s: rank %d: %s\n", cmd, cdx_split_rank(sp), err.msg);
        return 1;
    }
    return 0;
}
