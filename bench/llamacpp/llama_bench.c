/* llama.cpp's side of bench/compare-llamacpp, through the library node-llama-cpp 3.21.1 ships
 * (node_modules/@node-llama-cpp/linux-x64/bins/linux-x64), with a persistent ggml thread pool
 * attached to the context, as llama.cpp's own llama-bench does. node-llama-cpp has no thread-pool
 * option, so without this ggml would create and join its worker threads on every llama_decode.
 *
 *   bench/out/llama_bench MODEL.gguf [-t 2] [-p 128] [-n 64] [-r 3] [--parallel N [--kv-unified]]
 *                         [--kv-type f16|f32] [--flash-attn auto|on|off] [--ubatch N]
 *
 * Prints one JSON object with the same fields as `caldrix bench --json` (medians over -r runs after
 * a warm-up): load_ms (model + context), prefill_tok_s (the prompt, synthetic ids, in one
 * llama_decode), decode_tok_s (-n single-token llama_decode calls, each feeding the argmax of the
 * last logits), and cpu_variant: the ggml CPU library ggml picked for this CPU.
 *
 * --parallel N: ONE context holding N sequences (n_seq_max = N; by default llama.cpp's per-sequence
 * KV streams, --kv-unified for one shared buffer), as llama.cpp's batched-bench does: one
 * llama_batch holds every sequence's prompt (seq id i, its own positions, logits at its last
 * token) in one llama_decode, then each of the -n decode steps is one llama_decode of N tokens,
 * one per sequence, each the argmax of that sequence's last logits. Adds the fields of `caldrix
 * bench --parallel N --json`: parallel, aggregate_decode_tok_s (N x n / decode time),
 * stream_decode_tok_s (n / decode time: every stream advances together), kv_unified;
 * prefill_tok_s is then N x PROMPT tokens over the time of that first llama_decode.
 *
 * --kv-type: the K and V cache type (llama.cpp's default f16); --flash-attn: llama.cpp's
 * flash_attn_type (default auto, which llama.cpp resolves to enabled on its CPU backend: the JSON's
 * flash_attn says what it resolved to, from its log); --ubatch: the physical batch (default: the
 * whole prompt in one; a long prompt wants llama.cpp's own default, 512, as the non-flash path
 * holds a PROMPT x PROMPT score matrix per head). Long-context runs (bench/compare-longctx) are
 * -p 4096 / 16384 with a few -n: the decode is then timed at that context.
 *
 * Built by bench/setup against the headers of the same llama.cpp release (the bundle inside the
 * npm package); never part of `make`.
 */
#include "llama.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

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

static double median(const double *v, int n)
{
    double *s = malloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static double maxv(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static char g_fa[16] = "unknown";
static void quiet_log(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (strstr(text, "Flash Attention")) { /* llama.cpp's resolution of flash_attn_type auto */
        if (strstr(text, "set to disabled"))
            snprintf(g_fa, sizeof g_fa, "disabled");
        else if (strstr(text, "enabled"))
            snprintf(g_fa, sizeof g_fa, "enabled");
    }
    if (level == GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

/* the ggml CPU backend library this process mapped, e.g. libggml-cpu-zen4.so */
static void cpu_variant(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, "libggml-cpu");
        if (p) {
            size_t n = strcspn(p, " \n");
            snprintf(out, cap, "%.*s", (int)n, p);
            break;
        }
    }
    fclose(f);
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int parse_pos(const char *opt, const char *s, int *out)
{
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || v < 1 || v > 65536) {
        fprintf(stderr, "llama_bench: %s: \"%s\" is not an integer in [1, 65536]\n", opt, s ? s : "");
        return -1;
    }
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *libdir = NULL;
    int threads = 2, n_prompt = 128, n_gen = 64, runs = 3, parallel = 1, batched = 0, kv_unified = 0, ubatch = 0;
    enum ggml_type kv_type = GGML_TYPE_F16;
    enum llama_flash_attn_type fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-t")) {
            if (parse_pos(a, v, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "-p")) {
            if (parse_pos(a, v, &n_prompt)) return 2;
            i++;
        } else if (!strcmp(a, "-n")) {
            if (parse_pos(a, v, &n_gen)) return 2;
            i++;
        } else if (!strcmp(a, "-r")) {
            if (parse_pos(a, v, &runs)) return 2;
            i++;
        } else if (!strcmp(a, "--parallel")) {
            if (parse_pos(a, v, &parallel)) return 2;
            if (parallel > 256) {
                fprintf(stderr, "llama_bench: --parallel: at most 256 sequences (LLAMA_MAX_SEQ)\n");
                return 2;
            }
            batched = 1;
            i++;
        } else if (!strcmp(a, "--kv-type") && v) {
            if (!strcmp(v, "f16")) kv_type = GGML_TYPE_F16;
            else if (!strcmp(v, "f32")) kv_type = GGML_TYPE_F32;
            else { fprintf(stderr, "llama_bench: --kv-type is \"%s\"; expected f16 or f32\n", v); return 2; }
            i++;
        } else if (!strcmp(a, "--flash-attn") && v) {
            if (!strcmp(v, "auto")) fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
            else if (!strcmp(v, "on")) fa = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            else if (!strcmp(v, "off")) fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            else { fprintf(stderr, "llama_bench: --flash-attn is \"%s\"; expected auto, on or off\n", v); return 2; }
            i++;
        } else if (!strcmp(a, "--ubatch")) {
            if (parse_pos(a, v, &ubatch)) return 2;
            i++;
        } else if (!strcmp(a, "--kv-unified")) {
            kv_unified = 1;
        } else if (!strcmp(a, "--libdir") && v) {
            libdir = v;
            i++;
        } else if (a[0] == '-') {
            fprintf(stderr, "usage: llama_bench MODEL.gguf [-t THREADS] [-p PROMPT] [-n GEN] [-r RUNS] [--parallel N [--kv-unified]] [--kv-type f16|f32] [--flash-attn auto|on|off] [--ubatch N] [--libdir DIR]\n");
            return 2;
        } else {
            path = a;
        }
    }
    if (!path) {
        fprintf(stderr, "llama_bench: MODEL.gguf is required\n");
        return 2;
    }
    llama_log_set(quiet_log, NULL);
    /* the CPU backends are separate libraries: ggml scores each variant and loads the best */
    if (libdir)
        ggml_backend_load_all_from_path(libdir);
    else
        ggml_backend_load_all();
    llama_backend_init();
    ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
    if (!cpu) {
        fprintf(stderr, "llama_bench: no CPU backend was loaded (--libdir should name the bins folder)\n");
        return 1;
    }
    struct ggml_threadpool *(*tp_new)(struct ggml_threadpool_params *) =
        (struct ggml_threadpool *(*)(struct ggml_threadpool_params *))ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_new");
    void (*tp_free)(struct ggml_threadpool *) =
        (void (*)(struct ggml_threadpool *))ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_free");
    if (!tp_new || !tp_free) {
        fprintf(stderr, "llama_bench: the CPU backend exports no ggml_threadpool_new\n");
        return 1;
    }

    double t0 = now_s();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) {
        fprintf(stderr, "llama_bench: %s: llama.cpp could not load the model\n", path);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)parallel * (uint32_t)(n_prompt + n_gen + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)parallel * (uint32_t)n_prompt; /* every prompt in one batch */
    if (ubatch && (uint32_t)ubatch < cp.n_ubatch)
        cp.n_ubatch = (uint32_t)ubatch;
    cp.type_k = cp.type_v = kv_type;
    cp.flash_attn_type = fa;
    if (fa != LLAMA_FLASH_ATTN_TYPE_AUTO)
        snprintf(g_fa, sizeof g_fa, "%s", fa == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "enabled" : "disabled");
    cp.n_seq_max = (uint32_t)parallel;
    cp.kv_unified = kv_unified != 0;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama_bench: %s: cannot create a context\n", path);
        return 1;
    }
    struct ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    struct ggml_threadpool *tp = tp_new(&tpp);
    if (!tp) {
        fprintf(stderr, "llama_bench: cannot create a thread pool of %d threads\n", threads);
        return 1;
    }
    llama_attach_threadpool(ctx, tp, tp);
    double load_ms = (now_s() - t0) * 1e3;

    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    llama_token *ids = malloc((size_t)n_prompt * sizeof *ids);
    uint64_t s = 0x2545f4914f6cdd1dull; /* the same synthetic ids as caldrix bench */
    for (int i = 0; i < n_prompt; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (llama_token)(3 + (s >> 33) % (uint64_t)(n_vocab - 3));
    }
    llama_token kept[16];
    int n_kept = 0;
    double *tp_s = calloc((size_t)runs, sizeof *tp_s), *td_s = calloc((size_t)runs, sizeof *td_s);
    for (int r = -1; !batched && r < runs; r++) {
        int np = r < 0 ? (n_prompt < 16 ? n_prompt : 16) : n_prompt, ng = r < 0 ? 2 : n_gen; /* r < 0: warm-up */
        llama_memory_clear(llama_get_memory(ctx), true);
        double a = now_s();
        if (llama_decode(ctx, llama_batch_get_one(ids, np))) {
            fprintf(stderr, "llama_bench: llama_decode failed on the prompt\n");
            return 1;
        }
        llama_synchronize(ctx);
        double b = now_s();
        n_kept = 0;
        for (int i = 0; i < ng; i++) {
            llama_token tok = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
            if (n_kept < 16)
                kept[n_kept++] = tok;
            if (llama_decode(ctx, llama_batch_get_one(&tok, 1))) {
                fprintf(stderr, "llama_bench: llama_decode failed at step %d\n", i);
                return 1;
            }
        }
        llama_synchronize(ctx);
        double c = now_s();
        if (r >= 0) {
            tp_s[r] = np / (b - a);
            td_s[r] = ng / (c - b);
        }
    }
    double *ta_s = calloc((size_t)runs, sizeof *ta_s);
    if (batched) {
        /* N sequences in one context: all prompts in one llama_decode, then N tokens per step */
        int np_all = parallel * n_prompt;
        llama_token *pids = malloc((size_t)np_all * sizeof *pids);
        s = 0x2545f4914f6cdd1dull;
        for (int i = 0; i < np_all; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            pids[i] = (llama_token)(3 + (s >> 33) % (uint64_t)(n_vocab - 3));
        }
        struct llama_batch bt = llama_batch_init(np_all, 0, 1);
        llama_token *next = malloc((size_t)parallel * sizeof *next);
        int32_t *out_idx = malloc((size_t)parallel * sizeof *out_idx); /* batch row of each sequence's logits */
        for (int r = -1; r < runs; r++) {
            int np = r < 0 ? (n_prompt < 16 ? n_prompt : 16) : n_prompt, ng = r < 0 ? 2 : n_gen;
            llama_memory_clear(llama_get_memory(ctx), true);
            bt.n_tokens = 0;
            for (int q = 0; q < parallel; q++)
                for (int i = 0; i < np; i++) {
                    int k = bt.n_tokens++;
                    bt.token[k] = pids[q * n_prompt + i];
                    bt.pos[k] = i;
                    bt.n_seq_id[k] = 1;
                    bt.seq_id[k][0] = q;
                    bt.logits[k] = i == np - 1;
                    if (i == np - 1)
                        out_idx[q] = k;
                }
            double a = now_s();
            if (llama_decode(ctx, bt)) {
                fprintf(stderr, "llama_bench: llama_decode failed on the %d prompts\n", parallel);
                return 1;
            }
            llama_synchronize(ctx);
            double b = now_s();
            n_kept = 0;
            for (int i = 0; i < ng; i++) {
                for (int q = 0; q < parallel; q++)
                    next[q] = argmax(llama_get_logits_ith(ctx, out_idx[q]), n_vocab);
                if (n_kept < 16)
                    kept[n_kept++] = next[0];
                bt.n_tokens = parallel;
                for (int q = 0; q < parallel; q++) {
                    bt.token[q] = next[q];
                    bt.pos[q] = np + i;
                    bt.n_seq_id[q] = 1;
                    bt.seq_id[q][0] = q;
                    bt.logits[q] = 1;
                    out_idx[q] = q;
                }
                if (llama_decode(ctx, bt)) {
                    fprintf(stderr, "llama_bench: llama_decode failed at step %d (%d sequences)\n", i, parallel);
                    return 1;
                }
            }
            llama_synchronize(ctx);
            double c = now_s();
            if (r >= 0) {
                tp_s[r] = (double)parallel * np / (b - a);
                td_s[r] = ng / (c - b);
                ta_s[r] = (double)parallel * ng / (c - b);
            }
        }
        llama_batch_free(bt);
        free(pids);
        free(next);
        free(out_idx);
    }
    char variant[256];
    cpu_variant(variant, sizeof variant);
    if (batched)
        printf("{\"parallel\": %d, \"kv_unified\": %s, \"aggregate_decode_tok_s\": %.4f, \"stream_decode_tok_s\": %.4f, "
               "\"aggregate_decode_tok_s_runs\": [",
               parallel, kv_unified ? "true" : "false", median(ta_s, runs), median(td_s, runs));
    for (int r = 0; batched && r < runs; r++)
        printf("%s%.4f", r ? ", " : "", ta_s[r]);
    printf("%s\"engine\": \"llama.cpp (node-llama-cpp 3.21.1 library, persistent thread pool)\", \"model\": \"%s\", "
           "\"kv_type\": \"%s\", \"flash_attn\": \"%s\", \"n_ubatch\": %u, \"threads\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"runs\": %d, \"load_ms\": %.3f, \"prefill_tok_s\": %.4f, "
           "\"decode_tok_s\": %.4f, \"prefill_tok_s_best\": %.4f, \"decode_tok_s_best\": %.4f, \"cpu_variant\": \"%s\", "
           "\"prefill_tok_s_runs\": [",
           batched ? "], " : "{", path, kv_type == GGML_TYPE_F16 ? "f16" : "f32", g_fa, llama_n_ubatch(ctx), threads, n_prompt, n_gen, runs, load_ms, median(tp_s, runs),
           median(td_s, runs), maxv(tp_s, runs), maxv(td_s, runs), variant);
    for (int r = 0; r < runs; r++)
        printf("%s%.4f", r ? ", " : "", tp_s[r]);
    printf("], \"decode_tok_s_runs\": [");
    for (int r = 0; r < runs; r++)
        printf("%s%.4f", r ? ", " : "", td_s[r]);
    printf("], \"greedy_tokens\": [");
    for (int i = 0; i < n_kept; i++)
        printf("%s%d", i ? ", " : "", kept[i]);
    printf("], \"system_info\": \"");
    for (const char *p = llama_print_system_info(); *p; p++)
        if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
            putchar(*p);
    printf("\"}\n");

    llama_detach_threadpool(ctx);
    tp_free(tp);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    free(tp_s);
    free(td_s);
    free(ta_s);
    return 0;
}
