/* A real vocabulary for the grammar mask tests (test_grammar_pure, test_grammar_class): its
 * tokenizer from ../shared/fixtures/tokenizers/NAME, two grammar vocabularies of it (`off`: without
 * the pure-text shortcut, so its masks come from the plain trie walk) and every token's text. */
#ifndef CDX_TEST_GRAMMAR_VOCAB_H
#define CDX_TEST_GRAMMAR_VOCAB_H

#include "caldrix.h"
#include "text/grammar_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SHARED
#define SHARED "../shared"
#endif

typedef struct {
    const char *name;
    cdx_tok *tok;
    cdx_grammar_vocab *on, *off;
    int64_t nv;
    char **piece;  /* a token's text; NULL where a grammar never matches it (control, unknown, unused, empty) */
    int *len;
    bool *partial; /* its last character is not whole (a UTF-8 sequence cut short, or a lone continuation byte) */
    bool *closer;  /* holds '"', '}' or ']' */
} vocab;

/* the seeded choices of the tests' generations (xorshift64) */
static uint64_t rng;
static uint64_t xr(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* bit i of a mask */
static bool has(const uint32_t *b, int64_t i) { return b[i / 32] >> (i % 32) & 1; }

/* the first id two masks of nv ids disagree on, or -1 */
static int64_t first_difference(const uint32_t *a, const uint32_t *b, int64_t nv)
{
    for (int64_t i = 0; i < nv; i++)
        if (has(a, i) != has(b, i))
            return i;
    return -1;
}

static bool vocab_load(vocab *w, const char *name)
{
    char path[512];
    cdx_err err = { 0 };
    w->name = name;
    snprintf(path, sizeof path, SHARED "/fixtures/tokenizers/%s/tokenizer.json", name);
    if (cdx_tok_open(path, &w->tok, &err)) {
        printf("# %s: %s\n", path, err.msg);
        return false;
    }
    w->nv = cdx_tok_n_vocab(w->tok);
    if (cdx_grammar_vocab_from_tok(w->tok, w->nv, &w->on, &err) || cdx_grammar_vocab_from_tok(w->tok, w->nv, &w->off, &err)) {
        printf("# %s: %s\n", name, err.msg);
        return false;
    }
    gr_vocab_set_pure(w->off, false);
    w->piece = calloc((size_t)w->nv, sizeof *w->piece);
    w->len = calloc((size_t)w->nv, sizeof *w->len);
    w->partial = calloc((size_t)w->nv, sizeof *w->partial);
    w->closer = calloc((size_t)w->nv, sizeof *w->closer);
    for (int64_t i = 0; i < w->nv; i++) {
        char b[1024];
        if (cdx_tok_attr(w->tok, (int32_t)i) & (CDX_TOK_CONTROL | CDX_TOK_UNKNOWN | CDX_TOK_UNUSED))
            continue; /* never matched by a grammar (the library's rule too) */
        int l = cdx_tok_piece(w->tok, (int32_t)i, false, false, b, sizeof b);
        if (l <= 0 || l > (int)sizeof b)
            continue;
        w->piece[i] = malloc((size_t)l);
        memcpy(w->piece[i], b, (size_t)l);
        w->len[i] = l;
        int k = l - 1;
        while (k > 0 && ((unsigned char)b[k] & 0xC0) == 0x80)
            k--;
        const unsigned char lead = (unsigned char)b[k];
        const int need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
        w->partial[i] = need != l - k;
        w->closer[i] = memchr(b, '"', (size_t)l) || memchr(b, '}', (size_t)l) || memchr(b, ']', (size_t)l);
    }
    return true;
}

static void vocab_unload(vocab *w)
{
    for (int64_t i = 0; i < w->nv; i++)
        free(w->piece[i]);
    free(w->piece);
    free(w->len);
    free(w->partial);
    free(w->closer);
    cdx_grammar_vocab_free(w->on);
    cdx_grammar_vocab_free(w->off);
    cdx_tok_close(w->tok);
}

#endif
