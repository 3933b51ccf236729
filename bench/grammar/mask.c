/* Per-token grammar mask time on a real vocabulary: bench/grammar/run [TOKENIZER...].
 * For every schema of tests/text/data/grammar_schemas.json: compile time, then generations driven
 * by a seeded pseudo-random choice among the allowed tokens (tokens holding a closing '"', '}' or
 * ']' preferred half of the time, so outputs end), timing every cdx_matcher_mask call. "cold": the
 * first generation of each grammar (every state's first visit walks the vocabulary trie); "warm":
 * the next generations of the same grammar (the grammar's per-state cache is shared by matchers,
 * as in a server reusing a schema). Times are the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID),
 * so a loaded machine's descheduling is not counted; wall time is printed beside as a check.
 * Prints one table row per tokenizer.
 *
 * --trace DIR (first argument): also writes, for tokenizer number A (0, 1, ...) and schema number S,
 * DIR/A-S.gbnf (the GBNF the schema compiles to) and DIR/A-S.toks (the token ids of each generation,
 * one line each), so bench/grammar/llama_mask.c can time llama.cpp's grammar sampler on the same
 * grammars along the same tokens. */
#include "caldrix.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU time of this thread, ms: on a loaded machine wall time mostly measures the scheduler */
static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static uint64_t rng;
static uint64_t xr(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
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
    size_t i = (size_t)(p * (double)(d->n - 1) + 0.5);
    return d->v[i];
}

static double sum(const dv *d)
{
    double t = 0;
    for (size_t i = 0; i < d->n; i++)
        t += d->v[i];
    return t;
}

int main(int argc, char **argv)
{
    const char *corpus = "tests/text/data/grammar_schemas.json";
    json_error_t je;
    json_t *root = json_load_file(corpus, 0, &je);
    if (!root) {
        fprintf(stderr, "%s: %s\n", corpus, je.text);
        return 1;
    }
    json_t *schemas = json_object_get(root, "schemas");
    const char *trace = NULL;
    if (argc > 2 && !strcmp(argv[1], "--trace")) {
        trace = argv[2];
        argv += 2;
        argc -= 2;
    }
    printf("| vocabulary | tokens | schemas | masks | cold median µs | cold p99 µs | cold max ms | warm median µs | warm p99 µs | warm max µs | compile median ms | compile max ms |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int a = 1; a < argc; a++) {
        cdx_err err = { 0 };
        cdx_tok *tok = NULL;
        if (cdx_tok_open(argv[a], &tok, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        cdx_grammar_vocab *v = NULL;
        double t0 = cdx_time_ms();
        if (cdx_grammar_vocab_from_tok(tok, 0, &v, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        fprintf(stderr, "%s: vocabulary trie in %.0f ms\n", argv[a], cdx_time_ms() - t0);
        int64_t nv = cdx_grammar_vocab_size(v);
        uint32_t *bits = malloc((size_t)(nv + 31) / 32 * 4);
        int32_t *cand = malloc((size_t)nv * 4), *closer = malloc((size_t)nv * 4);
        bool *is_closer = calloc((size_t)nv, 1);
        for (int64_t i = 0; i < nv; i++) {
            char buf[256], *p = buf;
            int l = cdx_tok_piece(tok, (int32_t)i, false, false, p, sizeof buf);
            if (l > (int)sizeof buf && (p = malloc((size_t)l))) /* a long token: its whole text */
                l = cdx_tok_piece(tok, (int32_t)i, false, false, p, (size_t)l);
            is_closer[i] = p && l > 0 &&
                           (memchr(p, '"', (size_t)l) || memchr(p, '}', (size_t)l) || memchr(p, ']', (size_t)l));
            if (p != buf)
                free(p);
        }
        double wall = 0;
        dv cold = { 0 }, warm = { 0 }, comp = { 0 };
        for (size_t si = 0; si < json_array_size(schemas); si++) {
            json_t *it = json_array_get(schemas, si);
            char *s = json_dumps(json_object_get(it, "schema"), JSON_COMPACT | JSON_ENCODE_ANY);
            cdx_grammar *g = NULL;
            t0 = cpu_ms();
            if (cdx_grammar_from_json_schema(s, strlen(s), "schema", &g, &err)) {
                fprintf(stderr, "%s: %s\n", json_string_value(json_object_get(it, "name")), err.msg);
                return 1;
            }
            push(&comp, cpu_ms() - t0);
            FILE *ft = NULL;
            if (trace) {
                char path[4096], *gb = NULL;
                snprintf(path, sizeof path, "%s/%d-%zu.gbnf", trace, a - 1, si);
                FILE *fg = fopen(path, "w");
                if (!fg || cdx_json_schema_to_gbnf(s, strlen(s), "schema", &gb, &err)) {
                    fprintf(stderr, "%s: cannot write\n", path);
                    return 1;
                }
                fputs(gb, fg);
                fclose(fg);
                free(gb);
                snprintf(path, sizeof path, "%s/%d-%zu.toks", trace, a - 1, si);
                if (!(ft = fopen(path, "w"))) {
                    fprintf(stderr, "%s: cannot write\n", path);
                    return 1;
                }
            }
            free(s);
            for (int gen = 0; gen < 3; gen++) {
                cdx_matcher *m = NULL;
                cdx_matcher_create(g, v, &m, &err);
                rng = 0x9E3779B97F4A7C15ull * (si + 1) + (uint64_t)gen;
                for (int step = 0; step < 400; step++) {
                    double a0 = cpu_ms(), w0 = cdx_time_ms();
                    int64_t k = cdx_matcher_mask(m, bits, &err);
                    push(gen ? &warm : &cold, (cpu_ms() - a0) * 1000.0);
                    wall += cdx_time_ms() - w0;
                    if (k <= 0)
                        break;
                    int nc = 0, ncl = 0;
                    bool eos = false;
                    for (int64_t i = 0; i < nv; i++)
                        if (bits[i / 32] >> (i % 32) & 1) {
                            if (cdx_grammar_vocab_is_eog(v, (int32_t)i)) {
                                eos = true;
                                continue;
                            }
                            cand[nc++] = (int32_t)i;
                            if (is_closer[i])
                                closer[ncl++] = (int32_t)i;
                        }
                    if (eos && (nc == 0 || xr() % 2 == 0))
                        break;
                    int32_t t = ncl && xr() % 2 ? closer[xr() % (uint64_t)ncl] : cand[xr() % (uint64_t)nc];
                    if (ft)
                        fprintf(ft, "%d ", (int)t);
                    if (cdx_matcher_accept(m, t, &err)) {
                        fprintf(stderr, "accept: %s\n", err.msg);
                        return 1;
                    }
                }
                cdx_matcher_free(m);
                if (ft)
                    fputc('\n', ft);
            }
            if (ft)
                fclose(ft);
            cdx_grammar_free(g);
        }
        printf("| %s | %lld | %zu | %zu | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f |\n", argv[a], (long long)nv,
               json_array_size(schemas), cold.n + warm.n, pct(&cold, 0.5), pct(&cold, 0.99), pct(&cold, 1.0) / 1000,
               pct(&warm, 0.5), pct(&warm, 0.99), pct(&warm, 1.0), pct(&comp, 0.5), pct(&comp, 1.0));
        fprintf(stderr, "%s: %zu masks took %.0f ms of wall time, %.0f ms of CPU time\n", argv[a], cold.n + warm.n, wall,
                (sum(&cold) + sum(&warm)) / 1000);
        fflush(stdout);
        free(is_closer);
        free(cold.v);
        free(warm.v);
        free(comp.v);
        free(bits);
        free(cand);
        free(closer);
        cdx_grammar_vocab_free(v);
        cdx_tok_close(tok);
    }
    json_decref(root);
    return 0;
}
