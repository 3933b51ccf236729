/* caldrix bench: load time, prefill and decode speed of a model.
 *
 *   caldrix bench model.gguf -t 2 -p 128 -n 64 --json
 *
 * Prefill feeds the prompt (synthetic ids) as one batch; decode then feeds -n tokens one at a time,
 * each the argmax of the previous logits, as greedy generation does. After a short warm-up (which
 * also pages the weights in), each of -r runs starts from an empty KV cache; the figures are the
 * median over the runs (the best run is reported too). Weight bytes per token are those a decode
 * step reads (every matrix once, one embedding row aside), so bytes x decode tok/s is the
 * bandwidth the decode loop drew from memory.
 */
#include "cli.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median of n values (n >= 1); v is reordered */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: caldrix bench MODEL [-t THREADS] [-p PROMPT_TOKENS] [-n GEN_TOKENS] [-r RUNS]\n"
               "                     [--isa NAME] [--mem-bw GB/s] [--json]\n\n"
               "Times loading MODEL, a prefill of PROMPT_TOKENS synthetic ids in one batch (default 128)\n"
               "and a decode of GEN_TOKENS tokens one at a time (default 64); prints the median of RUNS\n"
               "runs (default 3) after a warm-up. THREADS defaults to the number of CPUs; --isa forces a\n"
               "kernel set (avx512, avx2, scalar). --mem-bw adds the decode ceiling: the memory bandwidth\n"
               "divided by the weight bytes one decoded token reads.\n");
}

/* Synthetic prompt ids: spread over the vocabulary, deterministic, never the first 3 (specials). */
static void synth_ids(int32_t *ids, int64_t n, int64_t n_vocab)
{
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = n_vocab > 3 ? (int32_t)(3 + (s >> 33) % (uint64_t)(n_vocab - 3)) : 0;
    }
}

#define N_KEEP 16 /* greedy tokens kept from the last run, to compare engines on the same file */

typedef struct {
    cdx_forward_ctx *fc;
    cdx_kv *kv;
    float *logits;
    int64_t n_vocab;
    int32_t kept[N_KEEP];
    int n_kept;
} bench_state;

/* One prefill of n_prompt ids, then n_gen single-token steps; times in seconds. */
static int bench_once(bench_state *b, const int32_t *ids, int64_t n_prompt, int64_t n_gen, double *t_prefill,
                      double *t_decode, cdx_err *err)
{
    cdx_kv *kvp = b->kv;
    b->kv->n_past = 0;
    cdx_batch pb = { .n = n_prompt, .tokens = ids };
    double t0 = now_s();
    int rc = cdx_forward(b->fc, &kvp, 1, &pb, b->logits, err);
    if (rc)
        return rc;
    double t1 = now_s();
    b->n_kept = 0;
    for (int64_t i = 0; i < n_gen; i++) {
        int32_t tok = cdx_argmax(b->logits, b->n_vocab);
        if (b->n_kept < N_KEEP)
            b->kept[b->n_kept++] = tok;
        cdx_batch db = { .n = 1, .tokens = &tok };
        rc = cdx_forward(b->fc, &kvp, 1, &db, b->logits, err);
        if (rc)
            return rc;
    }
    double t2 = now_s();
    *t_prefill = t1 - t0;
    *t_decode = t2 - t1;
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    const char *path = NULL, *isa = NULL;
    long threads = 0, n_prompt = 128, n_gen = 64, runs = 3;
    double mem_bw = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has) {
            if (cli_parse_int(a, argv[++i], 1, 1024, &threads))
                return 2;
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt-tokens")) && has) {
            if (cli_parse_int(a, argv[++i], 1, 65536, &n_prompt))
                return 2;
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--gen-tokens")) && has) {
            if (cli_parse_int(a, argv[++i], 1, 65536, &n_gen))
                return 2;
        } else if ((!strcmp(a, "-r") || !strcmp(a, "--runs")) && has) {
            if (cli_parse_int(a, argv[++i], 1, 100, &runs))
                return 2;
        } else if (!strcmp(a, "--isa") && has) {
            isa = argv[++i];
        } else if (!strcmp(a, "--mem-bw") && has) {
            if (cli_parse_float(a, argv[++i], 1e-3, 1e6, &mem_bw))
                return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "caldrix bench: unknown option or missing value: %s\n", a);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "caldrix bench: unexpected argument \"%s\"\n", a);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "caldrix bench: MODEL is required\n");
        usage(stderr);
        return 2;
    }
    const cdx_kernels *kern = cdx_kernels_best();
    if (isa && !(kern = cdx_kernels_by_isa(isa))) {
        fprintf(stderr, "caldrix bench: --isa: \"%s\" is not a kernel set this CPU runs (avx512, avx2, scalar)\n", isa);
        return 2;
    }
    if (threads == 0)
        threads = cdx_cpu_count();

    cdx_err err = {0};
    cdx_model *m = NULL;
    cdx_forward_ctx *fc = NULL;
    cdx_kv kv = {0};
    int32_t *ids = NULL;
    float *logits = NULL;
    double *tp = NULL, *td = NULL;
    int rc = 1;

    double t0 = now_s();
    if (cdx_model_open(path, NULL, &m, &err) < 0 ||
        cdx_forward_ctx_create(m, n_prompt, (int)threads, kern, &fc, &err) < 0 ||
        cdx_kv_init(&kv, cdx_model_hparams(m), n_prompt + (n_gen > 2 ? n_gen : 2), &err) < 0) { /* 2: the warm-up */
        fprintf(stderr, "caldrix bench: %s\n", err.msg);
        goto done;
    }
    double load_ms = (now_s() - t0) * 1e3;
    const cdx_hparams *hp = cdx_model_hparams(m);
    ids = malloc((size_t)n_prompt * sizeof *ids);
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    tp = calloc((size_t)runs, sizeof *tp);
    td = calloc((size_t)runs, sizeof *td);
    if (!ids || !logits || !tp || !td) {
        fprintf(stderr, "caldrix bench: out of memory\n");
        goto done;
    }
    synth_ids(ids, n_prompt, hp->n_vocab);
    bench_state b = { .fc = fc, .kv = &kv, .logits = logits, .n_vocab = hp->n_vocab };

    /* warm-up: pages every weight in and wakes the pool; not timed */
    double w0, w1;
    if (bench_once(&b, ids, n_prompt < 16 ? n_prompt : 16, 2, &w0, &w1, &err) < 0) {
        fprintf(stderr, "caldrix bench: %s: %s\n", path, err.msg);
        goto done;
    }
    double best_p = 0, best_d = 0;
    for (long r = 0; r < runs; r++) {
        double sp, sd;
        if (bench_once(&b, ids, n_prompt, n_gen, &sp, &sd, &err) < 0) {
            fprintf(stderr, "caldrix bench: %s: %s\n", path, err.msg);
            goto done;
        }
        tp[r] = (double)n_prompt / sp;
        td[r] = (double)n_gen / sd;
        best_p = tp[r] > best_p ? tp[r] : best_p;
        best_d = td[r] > best_d ? td[r] : best_d;
    }
    json_t *runs_p = json_array(), *runs_d = json_array();
    for (long r = 0; r < runs; r++) {
        json_array_append_new(runs_p, json_real(tp[r]));
        json_array_append_new(runs_d, json_real(td[r]));
    }
    double prefill = median(tp, (int)runs), decode = median(td, (int)runs);
    size_t wbytes = cdx_model_weight_bytes(m);
    double bw = (double)wbytes * decode / 1e9;

    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(path));
        json_object_set_new(o, "arch", json_string(hp->arch_name ? hp->arch_name : ""));
        json_object_set_new(o, "isa", json_string(cdx_kernels_isa(kern)));
        json_object_set_new(o, "n_vocab", json_integer(hp->n_vocab));
        json_object_set_new(o, "threads", json_integer(threads));
        json_object_set_new(o, "n_prompt", json_integer(n_prompt));
        json_object_set_new(o, "n_gen", json_integer(n_gen));
        json_object_set_new(o, "runs", json_integer(runs));
        json_object_set_new(o, "load_ms", json_real(load_ms));
        json_object_set_new(o, "prefill_tok_s", json_real(prefill));
        json_object_set_new(o, "decode_tok_s", json_real(decode));
        json_object_set_new(o, "prefill_tok_s_best", json_real(best_p));
        json_object_set_new(o, "decode_tok_s_best", json_real(best_d));
        json_object_set_new(o, "prefill_tok_s_runs", runs_p);
        json_object_set_new(o, "decode_tok_s_runs", runs_d);
        json_t *kept = json_array();
        for (int i = 0; i < b.n_kept; i++)
            json_array_append_new(kept, json_integer(b.kept[i]));
        json_object_set_new(o, "greedy_tokens", kept);
        json_object_set_new(o, "weight_bytes_per_token", json_integer((json_int_t)wbytes));
        json_object_set_new(o, "decode_gb_s", json_real(bw));
        if (mem_bw > 0) {
            json_object_set_new(o, "mem_bw_gb_s", json_real(mem_bw));
            json_object_set_new(o, "decode_ceiling_tok_s", json_real(mem_bw * 1e9 / (double)wbytes));
            json_object_set_new(o, "decode_ceiling_frac", json_real(bw / mem_bw));
        }
        char *s = json_dumps(o, JSON_REAL_PRECISION(6));
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        json_decref(runs_p);
        json_decref(runs_d);
        printf("model    %s (%s, %lld layers, n_embd %lld, vocab %lld)\n", path, hp->arch_name, (long long)hp->n_layer,
               (long long)hp->n_embd, (long long)hp->n_vocab);
        printf("threads  %ld, %s kernels\n", threads, cdx_kernels_isa(kern));
        printf("load     %.1f ms\n", load_ms);
        printf("prefill  %8.2f tok/s  (%ld tokens in one batch; median of %ld, best %.2f)\n", prefill, n_prompt, runs,
               best_p);
        printf("decode   %8.2f tok/s  (%ld tokens one at a time; median of %ld, best %.2f)\n", decode, n_gen, runs,
               best_d);
        printf("weights  %.1f MB read per token: %.2f GB/s while decoding\n", (double)wbytes / 1e6, bw);
        if (mem_bw > 0)
            printf("ceiling  %.2f tok/s at %.2f GB/s: decode is at %.0f %% of it\n", mem_bw * 1e9 / (double)wbytes,
                   mem_bw, 100.0 * bw / mem_bw);
    }
    rc = 0;
done:
    free(tp);
    free(td);
    free(ids);
    free(logits);
    cdx_kv_free(&kv);
    cdx_forward_ctx_free(fc);
    cdx_model_close(m);
    return rc;
}
