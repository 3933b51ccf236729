/* A request's grammar applied to its logits (see engine_grammar.h). */
#include "engine/engine_grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>


cdx_finish eng_grammar_mask(eng_grammar *eg, const cdx_tok *tok, int64_t n_vocab, const cdx_grammar *g,
                            cdx_matcher **m, int64_t n_gen, float *logits, const char **msg)
{
    cdx_err err = { 0 };
    if (!tok) {
        *msg = "a grammar needs the model's tokenizer (the engine has none)";
        return CDX_FINISH_ERROR;
    }
    if (!eg->vocab) {
        if (cdx_grammar_vocab_from_tok(tok, n_vocab, &eg->vocab, &err)) {
            *msg = "out of memory for the grammar's vocabulary";
            return CDX_FINISH_ERROR;
        }
        eg->n_vocab = n_vocab;
        eg->bits = malloc((size_t)(n_vocab + 31) / 32 * sizeof *eg->bits);
        if (!eg->bits) {
            cdx_grammar_vocab_free(eg->vocab);
            eg->vocab = NULL;
            *msg = "out of memory for the grammar's mask";
            return CDX_FINISH_ERROR;
        }
    }
    if (!*m && cdx_matcher_create(g, eg->vocab, m, &err)) {
        *msg = "out of memory for the grammar's matcher";
        return CDX_FINISH_ERROR;
    }
    const int64_t n = cdx_matcher_mask(*m, eg->bits, &err);
    if (n < 0) {
        *msg = "out of memory in the grammar's matcher";
        return CDX_FINISH_ERROR;
    }
    /* allowed tokens other than the end */
    int64_t n_text = 0;
    for (int64_t w = 0; w < (n_vocab + 31) / 32; w++) {
        uint32_t b = eg->bits[w];
        for (; b; b &= b - 1) {
            int64_t i = w * 32 + __builtin_ctz(b);
            n_text += !cdx_grammar_vocab_is_eog(eg->vocab, (int32_t)i);
        }
    }
    if (!n_text) {
        if (cdx_matcher_done(*m))
            return CDX_FINISH_STOP;
        char want[300];
        cdx_matcher_expected(*m, want, sizeof want);
        snprintf(eg->msg, sizeof eg->msg,
                 "grammar_dead_end: the grammar reached a dead end at byte %lld of the output (after %lld generated tokens): the "
                 "output is not complete there and no token of the vocabulary can continue it (%s)",
                 (long long)cdx_matcher_n_bytes(*m), (long long)n_gen, want);
        *msg = eg->msg;
        return CDX_FINISH_ERROR;
    }
    for (int64_t w = 0; w < (n_vocab + 31) / 32; w++) {
        const uint32_t b = eg->bits[w];
        if (b == 0xFFFFFFFFu)
            continue;
        for (int k = 0; k < 32 && w * 32 + k < n_vocab; k++)
            if (!(b >> k & 1))
                logits[w * 32 + k] = -INFINITY;
    }
    return CDX_FINISH_NONE;
}

int eng_grammar_accept(eng_grammar *eg, cdx_matcher *m, int32_t t, const char **msg)
{
    if (cdx_grammar_vocab_is_eog(eg->vocab, t))
        return 0;
    cdx_err err = { 0 };
    if (cdx_matcher_accept(m, t, &err)) {
        *msg = "the sampled token does not follow the grammar (internal error)";
        return -1;
    }
    return 0;
}

void eng_grammar_free(eng_grammar *eg)
{
    cdx_grammar_vocab_free(eg->vocab);
    free(eg->bits);
    eg->vocab = NULL;
    eg->bits = NULL;
}
