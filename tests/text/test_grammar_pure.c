/* The grammar masks' shortcuts on real vocabularies (Qwen3's 151,669 and Llama 3's 128,256 tokens,
 * ../shared/fixtures/tokenizers): every schema of tests/text/data/grammar_schemas.json, two seeded
 * random generations each, and at every step
 *   - the mask with the pure-text shortcut (grammar_match.c, "Pure text": pure tokens by character
 *     count, tails walked from the chain's states) equals the mask of the plain trie walk, bit for bit;
 *   - at a few steps, a sample of the vocabulary (every 397th id, shifted each time, plus every 89th
 *     token that holds '"' or '\\' or ends inside a character) is checked one by
 *     one against a fresh matcher fed the text so far and then the token's bytes: the oracle uses
 *     neither the trie, the walks' configuration cache, the chains nor the per-state caches.
 * Token choice: seeded, among the allowed ids, ids holding a closing '"', '}' or ']' preferred half
 * of the time so outputs end. */
#include "caldrix.h"
#include "test.h"
#include "text/grammar_int.h"
#include "grammar_vocab.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 32
#define SAMPLE_STRIDE 397

/* Whether the grammar allows token id after text[0..n): a fresh matcher, byte by byte. */
static bool oracle(const cdx_grammar *g, const vocab *w, const char *text, size_t n, int64_t id)
{
    cdx_err err = { 0 };
    cdx_matcher *m = NULL;
    if (cdx_matcher_create(g, w->on, &m, &err))
        return false;
    bool ok = cdx_matcher_accept_bytes(m, text, n, &err) == 0 &&
              cdx_matcher_accept_bytes(m, w->piece[id], (size_t)w->len[id], &err) == 0;
    cdx_matcher_free(m);
    return ok;
}

/* a token the sample must hold: a '"' or '\\', or a character cut short */
static bool edge(const vocab *w, int64_t i)
{
    return w->partial[i] || memchr(w->piece[i], '"', (size_t)w->len[i]) || memchr(w->piece[i], '\\', (size_t)w->len[i]);
}

static vocab g_v[2];
static json_t *g_schemas;
static int g_steps, g_oracle_checks;

static void run_vocab(const vocab *w)
{
    const size_t nw = (size_t)(w->nv + 31) / 32;
    uint32_t *a = malloc(nw * 4), *b = malloc(nw * 4);
    int32_t *cand = malloc((size_t)w->nv * sizeof *cand), *closer = malloc((size_t)w->nv * sizeof *closer);
    char *text = malloc(STEPS * 1024 + 1);
    int diffs = 0, oracle_bad = 0;
    for (size_t si = 0; si < json_array_size(g_schemas); si++) {
        json_t *it = json_array_get(g_schemas, si);
        const char *sname = json_string_value(json_object_get(it, "name"));
        char *s = json_dumps(json_object_get(it, "schema"), JSON_COMPACT | JSON_ENCODE_ANY);
        cdx_err err = { 0 };
        cdx_grammar *g = NULL;
        CHECKF(cdx_grammar_from_json_schema(s, strlen(s), "schema", &g, &err) == 0, "%s: %s", sname, err.msg);
        free(s);
        if (!g)
            continue;
        for (int gen = 0; gen < 2; gen++) {
            cdx_matcher *mon = NULL, *moff = NULL;
            CHECK(cdx_matcher_create(g, w->on, &mon, &err) == 0 && cdx_matcher_create(g, w->off, &moff, &err) == 0);
            rng = 0x9E3779B97F4A7C15ull * (si + 1) + (uint64_t)gen * 7919 + (uint64_t)w->nv;
            size_t n_text = 0;
            for (int step = 0; step < STEPS && mon && moff; step++) {
                const int64_t ka = cdx_matcher_mask(mon, a, &err), kb = cdx_matcher_mask(moff, b, &err);
                g_steps++;
                if (ka != kb || memcmp(a, b, nw * 4)) {
                    const int64_t first = first_difference(a, b, w->nv);
                    if (diffs++ < 5)
                        printf("# %s, %s, gen %d, step %d: %lld allowed with the shortcut, %lld without; first "
                               "difference: id %lld\n", w->name, sname, gen, step, (long long)ka, (long long)kb,
                               (long long)first);
                }
                if (step == 1 || step == 4 || step == 12) {
                    for (int64_t i = (step * 7 + (int64_t)si) % SAMPLE_STRIDE; i < w->nv; i++) {
                        if (!w->piece[i] || (i % SAMPLE_STRIDE && !(edge(w, i) && i % 89 == 0)))
                            continue;
                        if (cdx_grammar_vocab_is_eog(w->on, (int32_t)i))
                            continue;
                        g_oracle_checks++;
                        if (oracle(g, w, text, n_text, i) != has(a, i) && oracle_bad++ < 5)
                            printf("# %s, %s, gen %d, step %d: token %lld (%.*s) is %s by the mask but %s by "
                                   "the byte-by-byte oracle\n", w->name, sname, gen, step, (long long)i, w->len[i],
                                   w->piece[i], has(a, i) ? "allowed" : "refused", has(a, i) ? "refused" : "allowed");
                    }
                }
                int nc = 0, ncl = 0;
                for (int64_t i = 0; i < w->nv; i++)
                    if (has(a, i) && !cdx_grammar_vocab_is_eog(w->on, (int32_t)i)) {
                        cand[nc++] = (int32_t)i;
                        if (w->closer[i])
                            closer[ncl++] = (int32_t)i;
                    }
                if (!nc)
                    break;
                const int32_t t = ncl && xr() % 2 ? closer[xr() % (uint64_t)ncl] : cand[xr() % (uint64_t)nc];
                if (cdx_matcher_accept(mon, t, &err) || cdx_matcher_accept(moff, t, &err)) {
                    CHECKF(false, "%s, %s: an allowed token %d was refused: %s", w->name, sname, t, err.msg);
                    break;
                }
                memcpy(text + n_text, w->piece[t], (size_t)w->len[t]);
                n_text += (size_t)w->len[t];
            }
            cdx_matcher_free(mon);
            cdx_matcher_free(moff);
        }
        cdx_grammar_free(g);
    }
    CHECKF(diffs == 0, "%s: %d masks differ with and without the shortcut", w->name, diffs);
    CHECKF(oracle_bad == 0, "%s: %d tokens disagree with the oracle", w->name, oracle_bad);
    free(a);
    free(b);
    free(cand);
    free(closer);
    free(text);
}

static void t_qwen3(void) { run_vocab(&g_v[0]); }
static void t_llama3(void) { run_vocab(&g_v[1]); }

int main(void)
{
    json_error_t je;
    json_t *root = json_load_file("tests/text/data/grammar_schemas.json", 0, &je);
    g_schemas = root ? json_object_get(root, "schemas") : NULL;
    if (!g_schemas || !vocab_load(&g_v[0], "qwen3") || !vocab_load(&g_v[1], "llama3")) {
        printf("not ok - the schema corpus and both tokenizers load\n");
        printf("grammar_pure: 0 passed, 1 failed\n");
        return 1;
    }
    RUN("Qwen3's vocabulary: masks equal with and without the pure-text shortcut, and the oracle's", t_qwen3);
    RUN("Llama 3's vocabulary: the same", t_llama3);
    printf("# %d masks compared, %d tokens checked one by one\n", g_steps, g_oracle_checks);
    vocab_unload(&g_v[0]);
    vocab_unload(&g_v[1]);
    json_decref(root);
    return t_done("grammar_pure");
}
