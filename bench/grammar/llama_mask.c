/* llama.cpp's side of bench/grammar/run: the per-token time of llama.cpp's grammar sampler
 * (llama_sampler_init_grammar / llama_sampler_apply, the sampler node-llama-cpp's LlamaGrammar and
 * LlamaJsonSchemaGrammar drive) through the library node-llama-cpp 3.21.1 ships, on the grammars
 * and along the tokens bench/grammar/mask.c --trace wrote.
 *
 *   bench/out/grammar/llama_mask VOCAB.gguf TRACEDIR A [GENS]
 *
 * VOCAB.gguf: the tokenizer as GGUF (caldrix convert --vocab-only, loaded with vocab_only); A: the
 * tokenizer's number in the trace (TRACEDIR/A-S.gbnf, TRACEDIR/A-S.toks); GENS: how many of each
 * schema's recorded generations to replay (default 1: the sampler has no cache, so the others cost
 * the same). For each step: every vocabulary id is a candidate (logit 0), llama_sampler_apply is
 * timed in the thread's CPU time, then the recorded token is checked against what it left allowed
 * (a disagreement is counted and ends that generation) and accepted. Prints one table row: masks,
 * median, p99, max, compile (llama_sampler_init_grammar) median and max, grammars refused,
 * disagreements. Built by bench/grammar/run against the headers of the same llama.cpp release. */
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double *v;
    size_t n, cap;
} dv;

static void push(dv *d, double x)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 1024;
        d->v = realloc(d->v, d->cap * sizeof *d->v);
    }
    d->v[d->n++] = x;
}

static double pct(dv *d, double p)
{
    if (!d->n)
        return 0;
    qsort(d->v, d->n, sizeof *d->v, cmp_d);
    return d->v[(size_t)(p * (double)(d->n - 1) + 0.5)];
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

static void quiet(enum ggml_log_level level, const char *text, void *user) { (void)level, (void)text, (void)user; }

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: llama_mask VOCAB.gguf TRACEDIR A [GENS]\n");
        return 2;
    }
    const int gens = argc > 4 ? atoi(argv[4]) : 1;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "%s: llama.cpp cannot load it\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int nv = llama_vocab_n_tokens(vocab);
    llama_token_data *cand = malloc((size_t)nv * sizeof *cand);
    dv mask = { 0 }, comp = { 0 };
    int refused = 0, disagree = 0, n_schemas = 0;
    for (int si = 0;; si++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s-%d.gbnf", argv[2], argv[3], si);
        char *g = slurp(path);
        if (!g)
            break;
        snprintf(path, sizeof path, "%s/%s-%d.toks", argv[2], argv[3], si);
        char *toks = slurp(path);
        if (!toks) {
            fprintf(stderr, "%s: missing\n", path);
            return 1;
        }
        n_schemas++;
        double t0 = cpu_us();
        struct llama_sampler *probe = llama_sampler_init_grammar(vocab, g, "root");
        push(&comp, (cpu_us() - t0) / 1000.0);
        if (!probe) {
            refused++;
            fprintf(stderr, "schema %d: llama.cpp refuses the grammar\n", si);
            free(g);
            free(toks);
            continue;
        }
        llama_sampler_free(probe);
        char *line = toks;
        for (int gen = 0; gen < gens && line && *line; gen++) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = 0;
            struct llama_sampler *s = llama_sampler_init_grammar(vocab, g, "root");
            for (char *p = line, *end; *p; p = end) {
                long t = strtol(p, &end, 10);
                if (end == p)
                    break;
                for (int i = 0; i < nv; i++)
                    cand[i] = (llama_token_data){ i, 0.0f, 0.0f };
                llama_token_data_array arr = { cand, (size_t)nv, -1, false };
                double a0 = cpu_us();
                llama_sampler_apply(s, &arr);
                push(&mask, cpu_us() - a0);
                /* the apply may not reorder: find t's entry */
                int ok = 0;
                for (size_t i = 0; i < arr.size; i++)
                    if (arr.data[i].id == (llama_token)t) {
                        ok = isfinite(arr.data[i].logit);
                        break;
                    }
                if (!ok) {
                    disagree++;
                    fprintf(stderr, "schema %d generation %d: llama.cpp's grammar refuses token %ld that caldrix allowed\n",
                            si, gen, t);
                    break;
                }
                llama_sampler_accept(s, (llama_token)t);
            }
            llama_sampler_free(s);
            line = nl ? nl + 1 : NULL;
        }
        free(g);
        free(toks);
    }
    printf("| llama.cpp %s | %d | %d | %zu | %.1f | %.1f | %.2f | %.2f | %.2f | %d | %d |\n", argv[1], nv, n_schemas,
           mask.n, pct(&mask, 0.5), pct(&mask, 0.99), pct(&mask, 1.0) / 1000, pct(&comp, 0.5), pct(&comp, 1.0), refused,
           disagree);
    free(cand);
    llama_model_free(model);
    return 0;
}
