/* The engine's use of the grammar engine (internal): a request's grammar masks its logits row
 * after the forward pass computed it, before sampling. The logits are not changed otherwise, so a
 * constrained request keeps batch invariance (its mask depends on its own tokens only). */
#ifndef CDX_ENGINE_GRAMMAR_H
#define CDX_ENGINE_GRAMMAR_H

#include "caldrix/engine.h"
#include "caldrix/grammar.h"

typedef struct eng_grammar {
    cdx_grammar_vocab *vocab;  /* the tokenizer's trie, made on the first constrained request */
    uint32_t *bits;            /* [(n_vocab + 31) / 32] */
    int64_t n_vocab;
    char msg[512];             /* a dead end's message (read before the next request's step) */
} eng_grammar;

/* Sets the logits of the tokens g does not allow next to -inf (making *m, the request's matcher,
 * on first use). Returns CDX_FINISH_NONE to sample from the row; CDX_FINISH_STOP when the grammar
 * is complete and nothing but the end may follow (also at a dead end where it is complete);
 * CDX_FINISH_ERROR with *msg (static text or eg->msg; "grammar_dead_end: ..." for a dead end, the
 * prefix a front end may map to the client's error) at a dead end of an incomplete grammar, naming
 * the position (n_gen: tokens generated so far; the matcher's byte count; what the grammar expects
 * there), or when there is no tokenizer. */
cdx_finish eng_grammar_mask(eng_grammar *eg, const cdx_tok *tok, int64_t n_vocab, const cdx_grammar *g,
                            cdx_matcher **m, int64_t n_gen, float *logits, const char **msg);
/* Advances the matcher over the sampled token (an end-of-generation token: nothing to do). */
int eng_grammar_accept(eng_grammar *eg, cdx_matcher *m, int32_t t, const char **msg);
void eng_grammar_free(eng_grammar *eg);

#endif
