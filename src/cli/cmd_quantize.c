/* caldrix quantize IN.gguf OUT.gguf TYPE: requantize a GGUF's tensors, choosing each tensor's type
 * as llama.cpp's llama_model_quantize does (the quant layer's mixture table), with the reference
 * quantizers (no importance matrix), so the blocks equal ggml's byte for byte. */
#include "cli.h"
#include "caldrix/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char k_quantize_usage[] =
    "usage: caldrix quantize IN OUT.gguf TYPE [--threads N]\n"
    "\n"
    "TYPE is a file type as llama.cpp names them: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M,\n"
    "Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, F16, BF16, F32.\n"
    "Each tensor gets the type llama.cpp would give it (a Q4_K_M file holds Q4_K, Q6_K and more).\n"
    "IN is a GGUF of F32, F16 or BF16 tensors (already-quantized ones are converted through f32), or a\n"
    "Hugging Face checkpoint directory: it is converted first, as caldrix convert DIR --type F32 does,\n"
    "into a temporary OUT.gguf.f32-XXXXXX beside OUT (removed afterwards), so the quantizers start from\n"
    "the checkpoint's own values rather than an F16 rounding of them.\n"
    "OUT must not be IN (nor a hard link to it, nor a file of the IN directory), and OUT's folder must\n"
    "exist and be writable: otherwise caldrix quantize refuses before any work (exit 2).\n";

typedef struct {
    const cdx_type_traits *src, *dst;
    const uint8_t *in;
    uint8_t *out;
    int64_t rows, cols;
    size_t in_row, out_row;
    float *scratch;   /* [nth][cols] */
} quant_job;

static int quantize_gguf(const char *in, const char *out_path, const cdx_ftype_info *ft, int threads);

static void quantize_rows(void *arg, int ith, int nth)
{
    quant_job *j = arg;
    float *row = j->scratch + (size_t)ith * (size_t)j->cols;
    for (int64_t r = ith; r < j->rows; r += nth) {
        j->src->to_f32(j->in + (size_t)r * j->in_row, row, j->cols);
        j->dst->from_f32(row, j->out + (size_t)r * j->out_row, j->cols);
    }
}

int cmd_quantize(int argc, char **argv)
{
    const char *pos[3] = { 0 };
    int n_pos = 0;
    long threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(k_quantize_usage, stdout);
            cli_print_engine_ranges(stdout, (const cdx_engine_opt_id[]){ CDX_OPT_THREADS }, 1);
            return 0;
        } else if (!strcmp(argv[i], "--threads") || !strcmp(argv[i], "-t")) {
            if (i + 1 >= argc || cli_parse_int(argv[i], argv[i + 1], 1, cdx_threads_max(), &threads))
                return 2;
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "caldrix quantize: unknown option \"%s\" (caldrix quantize --help)\n", argv[i]);
            return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = argv[i];
        } else {
            fprintf(stderr, "caldrix quantize: too many arguments (caldrix quantize --help)\n");
            return 2;
        }
    }
    if (n_pos != 3) {
        fputs(k_quantize_usage, stderr);
        return 2;
    }
    const cdx_ftype_info *ft = cdx_ftype_find(pos[2]);
    if (!ft) {
        fprintf(stderr, "caldrix quantize: TYPE is \"%s\"; caldrix quantize --help lists the types\n", pos[2]);
        return 2;
    }
    int crc = cli_check_output("quantize", pos[0], pos[1]);
    if (crc)
        return crc;
    /* a checkpoint directory: convert it to F32 first, into a temporary file beside OUT */
    char *tmp = NULL;
    struct stat st;
    if (stat(pos[0], &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t n = strlen(pos[1]) + 16;
        tmp = malloc(n);
        if (!tmp) {
            fprintf(stderr, "caldrix: out of memory\n");
            return 1;
        }
        snprintf(tmp, n, "%s.f32-XXXXXX", pos[1]);
        int fd = mkstemp(tmp);
        if (fd < 0) {
            fprintf(stderr, "caldrix quantize: cannot create a temporary file beside %s\n", pos[1]);
            free(tmp);
            return 1;
        }
        close(fd);
        char *conv_argv[] = { "convert", (char *)pos[0], tmp, "--type", "F32", NULL };
        fprintf(stderr, "caldrix quantize: %s is a checkpoint directory; converting it to F32 first\n", pos[0]);
        int rc = cmd_convert(5, conv_argv);
        if (rc) {
            unlink(tmp);
            free(tmp);
            return rc;
        }
        pos[0] = tmp;
    }
    int status = quantize_gguf(pos[0], pos[1], ft, (int)threads);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    return status;
}

/* IN (a GGUF) → OUT with ft's per-tensor types. 0, or 1 after saying why on stderr. */
static int quantize_gguf(const char *in, const char *out_path, const cdx_ftype_info *ft, int threads)
{
    const char *pos[2] = { in, out_path };
    cdx_err err = {0};
    cdx_gguf *g = NULL;
    cdx_gguf_writer *w = NULL;
    cdx_pool *pool = NULL;
    uint8_t **bufs = NULL;
    const char **names = NULL;
    uint64_t *order = NULL;
    cdx_type *types = NULL;
    float *scratch = NULL;
    int status = 1;
    if (cdx_gguf_open(pos[0], &g, &err)) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    cdx_gguf_str arch;
    if (!cdx_gguf_get_str(g, "general.architecture", &arch) || arch.len > 64) {
        fprintf(stderr, "caldrix: %s: general.architecture is missing\n", pos[0]);
        goto done;
    }
    char an[65];
    snprintf(an, sizeof an, "%.*s", (int)arch.len, arch.ptr);
    uint64_t n_layer = 0, n_head = 1, n_head_kv = 1, n_expert = 0;
    cdx_gguf_get_arch_u64(g, an, CDX_GK_BLOCK_COUNT, &n_layer);
    cdx_gguf_get_arch_u64(g, an, CDX_GK_HEAD_COUNT, &n_head);
    if (!cdx_gguf_get_arch_u64(g, an, CDX_GK_HEAD_COUNT_KV, &n_head_kv))
        n_head_kv = n_head;
    cdx_gguf_get_arch_u64(g, an, CDX_GK_EXPERT_COUNT, &n_expert);
    if (n_layer == 0 || n_layer > 4096 || n_head_kv == 0 || n_head % n_head_kv) {
        fprintf(stderr, "caldrix: %s: block_count / head counts are missing or inconsistent\n", pos[0]);
        goto done;
    }
    size_t nt = (size_t)g->n_tensors;
    names = calloc(nt ? nt : 1, sizeof *names);
    order = calloc(nt ? nt : 1, sizeof *order);
    bufs = calloc(nt ? nt : 1, sizeof *bufs);
    types = calloc(nt ? nt : 1, sizeof *types);
    if (!names || !order || !bufs || !types)
        goto oom;
    for (size_t i = 0; i < nt; i++) {
        names[i] = g->tensors[i].name;
        order[i] = i;
    }
    /* llama.cpp decides tensor types in its own order (by layer, then name): the per-layer
     * counters of the mixture rules depend on it */
    for (size_t i = 1; i < nt; i++)
        for (size_t j = i; j > 0 && cdx_quant_tensor_cmp(names[order[j - 1]], names[order[j]]) > 0; j--) {
            uint64_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    cdx_quant_model_info info = { .n_layer = (int)n_layer, .n_gqa = (int)(n_head / n_head_kv),
                                  .n_expert = (int)n_expert };
    cdx_quant_mix mix;
    if (cdx_quant_mix_init(&mix, ft->name, &info, names, nt, &err)) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        goto done;
    }
    if (cdx_pool_create(threads, &pool, &err) || cdx_gguf_writer_new(&w, &err)) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        goto done;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key;
        if (!strcmp(k, "general.file_type") || !strcmp(k, "general.quantization_version") ||
            !strcmp(k, "general.alignment"))
            continue;
        if (cdx_gguf_writer_copy_kv(w, &g->kv[i]))
            goto oom;
    }
    cdx_gguf_writer_set_u32(w, "general.quantization_version", 2);
    cdx_gguf_writer_set_u32(w, "general.file_type", (uint32_t)ft->llama_ftype);

    size_t max_cols = 1;
    for (size_t i = 0; i < nt; i++)
        max_cols = g->tensors[i].ne[0] > max_cols ? (size_t)g->tensors[i].ne[0] : max_cols;
    scratch = malloc((size_t)cdx_pool_size(pool) * max_cols * sizeof(float));
    if (!scratch)
        goto oom;
    size_t in_bytes = 0, out_bytes = 0;
    for (size_t oi = 0; oi < nt; oi++) {
        size_t i = (size_t)order[oi];
        const cdx_gguf_tensor *t = &g->tensors[i];
        int64_t ne[4] = { (int64_t)t->ne[0], (int64_t)t->ne[1], (int64_t)t->ne[2], (int64_t)t->ne[3] };
        cdx_type dst = types[i] = cdx_quant_mix_choose(&mix, t->name, ne, (cdx_type)t->type);
        in_bytes += t->n_bytes;
        if (dst == (cdx_type)t->type) {
            out_bytes += t->n_bytes;
            continue; /* added below, in file order, straight from the mapping */
        }
        const cdx_type_traits *st = cdx_type_get(t->type), *dt = cdx_type_get(dst);
        if (!st || !st->to_f32 || !dt || !dt->from_f32) {
            fprintf(stderr, "caldrix: %s: tensor \"%s\": cannot convert %s to %s (no %s)\n", pos[0], t->name,
                    cdx_type_name(t->type), cdx_type_name(dst), st && st->to_f32 ? "quantizer" : "dequantizer");
            goto done;
        }
        size_t out_row, in_row;
        if (cdx_type_row_bytes(dst, t->ne[0], &out_row, &err) || cdx_type_row_bytes(t->type, t->ne[0], &in_row, &err)) {
            fprintf(stderr, "caldrix: %s: tensor \"%s\": %s\n", pos[0], t->name, err.msg);
            goto done;
        }
        int64_t rows = (int64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        bufs[i] = malloc(out_row * (size_t)rows);
        if (!bufs[i])
            goto oom;
        quant_job j = { st, dt, t->data, bufs[i], rows, (int64_t)t->ne[0], in_row, out_row, scratch };
        cdx_pool_run(pool, quantize_rows, &j);
        out_bytes += out_row * (size_t)rows;
        fprintf(stderr, "\r[%zu/%zu] %-32s %6s -> %-6s", oi + 1, nt, t->name, cdx_type_name(t->type), cdx_type_name(dst));
    }
    fputc('\n', stderr);
    for (size_t i = 0; i < nt && !err.code; i++) {
        const cdx_gguf_tensor *t = &g->tensors[i];
        if (cdx_gguf_writer_add_tensor(w, t->name, bufs[i] ? (uint32_t)types[i] : t->type, t->n_dims, t->ne,
                                       bufs[i] ? (const void *)bufs[i] : t->data, &err))
            break;
    }
    if (err.code || cdx_gguf_writer_write(w, pos[1], &err)) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        goto done;
    }
    char ib[32], ob[32];
    cdx_fmt_bytes((uint64_t)in_bytes, ib, sizeof ib);
    cdx_fmt_bytes((uint64_t)out_bytes, ob, sizeof ob);
    fprintf(stderr, "caldrix: wrote %s (%s): %s -> %s\n", pos[1], ft->name, ib, ob);
    status = 0;
    goto done;
oom:
    fprintf(stderr, "caldrix: out of memory\n");
done:
    if (bufs)
        for (size_t i = 0; i < nt; i++)
            free(bufs[i]);
    free(bufs);
    free(names);
    free(order);
    free(types);
    free(scratch);
    cdx_gguf_writer_free(w);
    cdx_pool_destroy(pool);
    cdx_gguf_close(g);
    return status;
}
