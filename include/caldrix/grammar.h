/* caldrix grammar engine (text layer): constrained decoding. A grammar (llama.cpp's GBNF, or a
 * JSON Schema compiled to GBNF) is compiled once into a byte-level pushdown automaton; a matcher
 * follows one generation token by token and says which vocabulary ids may come next.
 *
 *   cdx_grammar *g;        cdx_grammar_from_json_schema(schema, len, "schema.json", &g, &err);
 *   cdx_grammar_vocab *v;  cdx_grammar_vocab_from_tok(tok, n_vocab, &v, &err);   // once per tokenizer
 *   cdx_matcher *m;        cdx_matcher_create(g, v, &m, &err);
 *   for (;;) { cdx_matcher_mask(m, bits, &err);  ... pick t among the set bits ...;
 *              if (cdx_grammar_vocab_is_eog(v, t)) break;  cdx_matcher_accept(m, t, &err); }
 *
 * Text is matched as the bytes each token contributes (cdx_tok_piece with first = false); a token
 * may cover several grammar symbols or end in the middle of a UTF-8 code point. Control tokens
 * never match; end-of-generation tokens are allowed exactly when the grammar is complete.
 * A grammar and a vocabulary are immutable and may be shared by threads; a matcher is one
 * generation's state (not thread-safe) and keeps a cache of per-state token sets that makes the
 * masks after the first of each grammar state cost microseconds (docs/grammar.md). */
#ifndef CALDRIX_GRAMMAR_H
#define CALDRIX_GRAMMAR_H

#include "caldrix/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cdx_grammar cdx_grammar;
typedef struct cdx_grammar_vocab cdx_grammar_vocab;
typedef struct cdx_matcher cdx_matcher;
typedef struct cdx_tok cdx_tok;

/* Compiles GBNF text (llama.cpp's syntax; the start rule is `root`). name is used in messages
 * ("name:LINE:COL: ..."). On failure *out is NULL and err says where and why (CDX_EINVAL). */
CDX_API int cdx_grammar_from_gbnf(const char *text, size_t len, const char *name, cdx_grammar **out, cdx_err *err);
/* Compiles a JSON Schema (the subset of docs/grammar.md); a keyword it cannot enforce is an error
 * naming the keyword and its path (CDX_EUNSUPPORTED), never dropped. NULL schema_json: any JSON
 * object (OpenAI's response_format json_object). */
CDX_API int cdx_grammar_from_json_schema(const char *schema_json, size_t len, const char *name, cdx_grammar **out,
                                         cdx_err *err);
/* The GBNF a JSON Schema compiles to; *gbnf is malloc'd (free it). */
CDX_API int cdx_json_schema_to_gbnf(const char *schema_json, size_t len, const char *name, char **gbnf, cdx_err *err);
/* A compiled grammar is immutable but for its mask caches (made under its own lock), so several
 * requests may share one: cdx_grammar_ref takes a reference (returns g), cdx_grammar_free drops
 * one and frees the grammar with the last. */
CDX_API cdx_grammar *cdx_grammar_ref(cdx_grammar *g);
CDX_API void cdx_grammar_free(cdx_grammar *g); /* NULL: no-op */
/* Sizes, for messages and benches. */
CDX_API int32_t cdx_grammar_n_rules(const cdx_grammar *g);
CDX_API int32_t cdx_grammar_n_states(const cdx_grammar *g);

/* The bytes of every token, arranged as a trie. From a tokenizer: n_vocab is the model's (ids at
 * or past the tokenizer's size never match). From raw pieces (tests, benches): pieces[i] of
 * lens[i] bytes (NULL: never matches); eog lists the end-of-generation ids. */
CDX_API int cdx_grammar_vocab_from_tok(const cdx_tok *tok, int64_t n_vocab, cdx_grammar_vocab **out, cdx_err *err);
CDX_API int cdx_grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens, int64_t n_vocab,
                                          const int32_t *eog, int n_eog, cdx_grammar_vocab **out, cdx_err *err);
CDX_API void cdx_grammar_vocab_free(cdx_grammar_vocab *v);
CDX_API int64_t cdx_grammar_vocab_size(const cdx_grammar_vocab *v);
CDX_API bool cdx_grammar_vocab_is_eog(const cdx_grammar_vocab *v, int32_t id);

/* A matcher borrows g and v (they must outlive it). */
CDX_API int cdx_matcher_create(const cdx_grammar *g, const cdx_grammar_vocab *v, cdx_matcher **out, cdx_err *err);
CDX_API void cdx_matcher_free(cdx_matcher *m);
/* Back to the start of the grammar (the per-state cache is kept: the next generation is faster). */
CDX_API void cdx_matcher_reset(cdx_matcher *m);
/* Writes the allowed ids as bits: bits[i / 32] >> (i % 32) & 1, (n_vocab + 31) / 32 words.
 * End-of-generation ids are set exactly when cdx_matcher_done. Returns the number of allowed ids
 * (0: a dead end), or < 0 out of memory. */
CDX_API int64_t cdx_matcher_mask(cdx_matcher *m, uint32_t *bits, cdx_err *err);
/* Advances over token id. A token the grammar does not allow (or an end-of-generation token):
 * CDX_EINVAL, and the matcher is unchanged. */
CDX_API int cdx_matcher_accept(cdx_matcher *m, int32_t id, cdx_err *err);
/* Advances over raw bytes (tests; forced text). CDX_EINVAL and unchanged when they do not match. */
CDX_API int cdx_matcher_accept_bytes(cdx_matcher *m, const void *bytes, size_t n, cdx_err *err);
/* The grammar is complete here: the text so far is a whole sentence of it. */
CDX_API bool cdx_matcher_done(const cdx_matcher *m);
/* Nothing more may follow (complete, and no byte can extend it). */
CDX_API bool cdx_matcher_closed(const cdx_matcher *m);
/* Bytes accepted so far. */
CDX_API int64_t cdx_matcher_n_bytes(const cdx_matcher *m);
/* What the grammar expects here, for messages: the rules on top of the parse and the bytes they may
 * read next (e.g. `in rule "name" the next byte must be 'a'-'z', '"'`). Writes at most cap bytes
 * with the NUL (cut with "..."); returns the length written. */
CDX_API size_t cdx_matcher_expected(const cdx_matcher *m, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
