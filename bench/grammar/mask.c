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
 * grammars along the same tokens.
 *
 * Options (before the tokenizers; bench/grammar/run passes them on):
 *   --repeat N  each schema's cold generation N times (a fresh grammar each time, the same tokens);
 *               per mask the least of the N times, printed as its own p99 line ("least of N")
 *   --slow US   lists the cold masks whose time (the least of the N) is over US µs: schema, step,
 *               the text before it and what the grammar expects there (cdx_matcher_expected)
 *   --only NAME the schema of that name alone (to profile one)
 *   --fresh-vocab  a vocabulary of its own for each schema (its build not timed): no state of one
 *               schema finds its sets in the vocabulary's memo from another (docs/grammar.md, "Shared
 *               states"), as for a server's first request of each kind
 *   --check     every mask of every generation is compared with the plain trie walk's (a second
 *               vocabulary without the shortcuts: gr_vocab_set_pure); prints how many differ */
#include "caldrix.h"
#include "text/grammar_int.h"

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

/* the cold masks of a tokenizer, for --slow: where each was (the text before it, cut to its last
 * 60 bytes, and what the grammar expects there) and its least time */
typedef struct {
    size_t si;
    int step;
    double us;
    char *where;
} slow_rec;
typedef struct {
    slow_rec *r;
    size_t n, cap;
} slow_list;

static void sl_push(slow_list *l, size_t si, int step, const char *text, size_t n_text, const char *ex)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->r = realloc(l->r, l->cap * sizeof *l->r);
    }
    const size_t from = n_text > 60 ? n_text - 60 : 0;
    char *w = malloc(4 * 60 + strlen(ex) + 16), *p = w;
    *p++ = '"';
    for (size_t i = from; i < n_text; i++) {
        const unsigned char c = (unsigned char)text[i];
        p += c >= 0x20 && c < 0x7F && c != '"' && c != '\\' ? sprintf(p, "%c", c) : sprintf(p, "\\x%02X", c);
    }
    sprintf(p, "\" | %s", ex);
    l->r[l->n++] = (slow_rec){ si, step, 0, w };
}

static int cmp_slow(const void *a, const void *b)
{
    const slow_rec *x = a, *y = b;
    return x->us > y->us ? -1 : x->us < y->us;
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
    int repeat = 1;
    double slow = -1;
    bool check = false;
    const char *only = NULL;
    bool fresh = false;
    for (;;) {
        if (argc > 2 && !strcmp(argv[1], "--trace"))
            trace = argv[2];
        else if (argc > 2 && !strcmp(argv[1], "--repeat"))
            repeat = atoi(argv[2]) > 0 ? atoi(argv[2]) : 1;
        else if (argc > 2 && !strcmp(argv[1], "--only"))
            only = argv[2];
        else if (argc > 2 && !strcmp(argv[1], "--slow"))
            slow = atof(argv[2]);
        else if (argc > 1 && (!strcmp(argv[1], "--check") || !strcmp(argv[1], "--fresh-vocab"))) {
            *(!strcmp(argv[1], "--check") ? &check : &fresh) = true;
            argv++;
            argc--;
            continue;
        } else
            break;
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
        cdx_grammar_vocab *voff = NULL;
        if (check) {
            if (cdx_grammar_vocab_from_tok(tok, 0, &voff, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            gr_vocab_set_pure(voff, false);
        }
        int64_t nv = cdx_grammar_vocab_size(v);
        uint32_t *bits = malloc((size_t)(nv + 31) / 32 * 4), *cbits = malloc((size_t)(nv + 31) / 32 * 4);
        static char text[400 * 256];
        slow_list sl = { 0 };
        size_t sl0 = 0;
        int64_t n_checked = 0, n_differ = 0, me = 0, mb = 0, mh = 0, mm = 0, sum_e = 0, sum_b = 0, sum_h = 0, sum_m = 0;
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
        dv cold = { 0 }, warm = { 0 }, comp = { 0 }, cmin = { 0 };
        for (size_t si = 0; si < json_array_size(schemas); si++) {
            json_t *it = json_array_get(schemas, si);
            if (only && strcmp(only, json_string_value(json_object_get(it, "name"))))
                continue;
            if (fresh) {
                gr_memo_stats(v, &me, &mb, &mh, &mm);
                sum_e += me, sum_b += mb, sum_h += mh, sum_m += mm;
                cdx_grammar_vocab_free(v);
                if (cdx_grammar_vocab_from_tok(tok, 0, &v, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
            }
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
            /* the cold generation repeat times (gen 0: g's first; then fresh grammars along the same
             * tokens), then the two warm ones on g */
            double tmin[400];
            int n_steps = 0;
            int64_t memo_n0 = 0; /* the memo's entries before this schema: its cold reruns see only those */
            gr_memo_stats(v, &memo_n0, &mb, &mh, &mm);
            for (int gen = 0; gen < 2 + repeat; gen++) {
                const bool cold_rep = gen >= 1 && gen < repeat; /* a repeat of the cold generation */
                cdx_grammar *gg = g;
                if (cold_rep) {
                    char *s2 = json_dumps(json_object_get(it, "schema"), JSON_COMPACT | JSON_ENCODE_ANY);
                    gg = NULL;
                    if (cdx_grammar_from_json_schema(s2, strlen(s2), "schema", &gg, &err)) {
                        fprintf(stderr, "%s\n", err.msg);
                        return 1;
                    }
                    free(s2);
                }
                const int wgen = gen < repeat ? 0 : gen - repeat + 1; /* 0 cold, 1 and 2 warm */
                gr_memo_limit(v, cold_rep ? memo_n0 : -1);
                if (getenv("GDBG"))
                    fprintf(stderr, "schema %s gen %d\n", json_string_value(json_object_get(it, "name")), gen);
                cdx_matcher *m = NULL, *mc = NULL;
                cdx_matcher_create(gg, v, &m, &err);
                if (voff)
                    cdx_matcher_create(gg, voff, &mc, &err);
                rng = 0x9E3779B97F4A7C15ull * (si + 1) + (uint64_t)wgen;
                size_t n_text = 0;
                for (int step = 0; step < 400; step++) {
                    double a0 = cpu_ms(), w0 = cdx_time_ms();
                    int64_t k = cdx_matcher_mask(m, bits, &err);
                    const double us = (cpu_ms() - a0) * 1000.0;
                    wall += cdx_time_ms() - w0;
                    if (wgen)
                        push(&warm, us);
                    else if (gen == 0) {
                        push(&cold, us);
                        tmin[step] = us;
                        n_steps = step + 1;
                        if (slow >= 0) {
                            char ex[160];
                            cdx_matcher_expected(m, ex, sizeof ex);
                            sl_push(&sl, si, step, text, n_text, ex);
                        }
                    } else if (us < tmin[step])
                        tmin[step] = us;
                    if (mc) {
                        const int64_t kc = cdx_matcher_mask(mc, cbits, &err);
                        n_checked++;
                        if (kc != k || memcmp(bits, cbits, (size_t)(nv + 31) / 32 * 4)) {
                            if (n_differ++ < 5)
                                fprintf(stderr, "%s, step %d (gen %d): %lld allowed, %lld by the trie walk\n",
                                        json_string_value(json_object_get(it, "name")), step, gen, (long long)k,
                                        (long long)kc);
                        }
                    }
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
                    if (ft && !cold_rep)
                        fprintf(ft, "%d ", (int)t);
                    if (cdx_matcher_accept(m, t, &err) || (mc && cdx_matcher_accept(mc, t, &err))) {
                        fprintf(stderr, "accept: %s\n", err.msg);
                        return 1;
                    }
                    char pc[256];
                    const int l = cdx_tok_piece(tok, t, false, false, pc, sizeof pc);
                    for (int j = 0; j < l && j < (int)sizeof pc && n_text < sizeof text; j++)
                        text[n_text++] = pc[j];
                }
                cdx_matcher_free(m);
                cdx_matcher_free(mc);
                if (cold_rep)
                    cdx_grammar_free(gg);
                if (ft && !cold_rep)
                    fputc('\n', ft);
            }
            for (int step = 0; step < n_steps; step++)
                push(&cmin, tmin[step]);
            for (size_t i = sl0; i < sl.n; i++)
                sl.r[i].us = tmin[sl.r[i].step];
            sl0 = sl.n;
            if (ft)
                fclose(ft);
            cdx_grammar_free(g);
        }
        printf("| %s | %lld | %zu | %zu | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f |\n", argv[a], (long long)nv,
               json_array_size(schemas), cold.n + warm.n, pct(&cold, 0.5), pct(&cold, 0.99), pct(&cold, 1.0) / 1000,
               pct(&warm, 0.5), pct(&warm, 0.99), pct(&warm, 1.0), pct(&comp, 0.5), pct(&comp, 1.0));
        fprintf(stderr, "%s: %zu masks took %.0f ms of wall time, %.0f ms of CPU time\n", argv[a], cold.n + warm.n, wall,
                (sum(&cold) + sum(&warm)) / 1000);
        if (repeat > 1)
            printf("| %s, cold, least of %d runs a mask | | | %zu | %.1f | %.1f | %.2f | | | | | |\n", argv[a], repeat,
                   cmin.n, pct(&cmin, 0.5), pct(&cmin, 0.99), pct(&cmin, 1.0) / 1000);
        gr_memo_stats(v, &me, &mb, &mh, &mm);
        printf("# %s: the vocabulary's memo%s: %lld states kept, %.1f MiB; first visits %lld found there, %lld not\n",
               argv[a], fresh ? " (summed over the schemas' own)" : "", (long long)(me + sum_e),
               (double)(mb + sum_b) / (1 << 20), (long long)(mh + sum_h), (long long)(mm + sum_m));
        if (check)
            printf("# %s: %lld masks compared with the plain trie walk's, %lld differ\n", argv[a], (long long)n_checked,
                   (long long)n_differ);
        if (slow >= 0) {
            qsort(sl.r, sl.n, sizeof *sl.r, cmp_slow);
            size_t n_over = 0;
            for (size_t i = 0; i < sl.n && sl.r[i].us > slow; i++, n_over++)
                printf("#   %7.1f µs  %s, step %d: %s\n", sl.r[i].us,
                       json_string_value(json_object_get(json_array_get(schemas, sl.r[i].si), "name")), sl.r[i].step,
                       sl.r[i].where);
            printf("# %s: %zu cold masks over %.0f µs (least of %d runs)\n", argv[a], n_over, slow, repeat);
        }
        for (size_t i = 0; i < sl.n; i++)
            free(sl.r[i].where);
        free(sl.r);
        free(cmin.v);
        free(cbits);
        cdx_grammar_vocab_free(voff);
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
