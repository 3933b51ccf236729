/* Internal structures of the tokenizer (src/text/tok_*.c). Not a public header.
 *
 * One pipeline serves every source, the way Hugging Face tokenizers describe it:
 *   added-token split -> normalizers -> pre-tokenizers -> model (BPE / SPM / WordPiece)
 *   -> post-processor (BOS/EOS template);  decode: id -> token string -> decoders -> clean-up.
 * GGUF vocabularies are mapped onto the same steps (llama.cpp's behaviour as step variants).
 */
#ifndef CDX_TOK_INTERNAL_H
#define CDX_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>

#include "caldrix/tokenizer.h"

/* ---- growable buffers ---- */

typedef struct { char *s; size_t len, cap; } tk_str;
typedef struct { int32_t *v; size_t n, cap; } tk_ids;

int tk_str_put(tk_str *b, const void *p, size_t n);   /* 0 or CDX_ENOMEM */
int tk_str_putc(tk_str *b, char c);
int tk_ids_push(tk_ids *v, int32_t id);
int tk_ids_append(tk_ids *v, const int32_t *p, size_t n);

/* ---- string -> id hash map (keys live in the tokenizer's token table) ---- */

typedef struct {
    uint32_t *slot;   /* [mask+1], id+1; 0 = empty */
    uint32_t mask;
} tk_strmap;

uint64_t tk_hash(const void *p, size_t n);

/* (left id, right id) -> (rank, merged id) */
typedef struct {
    uint64_t *key;    /* (l << 32 | r) + 1; 0 = empty */
    uint64_t *val;    /* rank << 32 | new_id */
    uint32_t mask;
    size_t n;
} tk_pairmap;

/* ---- steps ---- */

enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_LOWER, NORM_STRIP_ACCENTS, NORM_PREPEND, NORM_REPLACE,
       NORM_STRIP, NORM_BERT };

typedef struct {
    int type;
    char *a; size_t a_len;      /* Prepend text; Replace pattern (String) */
    char *b; size_t b_len;      /* Replace content */
    pcre2_code *re;             /* Replace pattern (Regex) */
    bool left, right;           /* Strip */
    bool clean_text, chinese, strip_accents, lowercase;  /* BertNormalizer */
} tk_norm;

enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER, PREPEND_AFTER_SPECIAL /* llama.cpp SPM */ };

enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE, PRE_DIGITS, PRE_WHITESPACE, PRE_WSSPLIT, PRE_BERT, PRE_PUNCT,
       PRE_WPM_LLAMA /* llama.cpp's BERT preprocess: NFD, lowercase, strip accents, split */ };

typedef struct {
    int type;
    pcre2_code *re;             /* Split (Regex), Whitespace, ByteLevel(use_regex) */
    char *str; size_t str_len;  /* Split (String) / Metaspace replacement (UTF-8) */
    int behavior;
    bool invert;
    bool add_prefix_space;      /* ByteLevel */
    int prepend_scheme;         /* Metaspace */
    bool split;                 /* Metaspace */
    bool individual;            /* Digits */
    bool lowercase, strip_accents; /* PRE_WPM_LLAMA */
} tk_pre;

enum { DEC_BYTELEVEL, DEC_METASPACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_REPLACE, DEC_WORDPIECE, DEC_BPE_SUFFIX,
       DEC_WPM_LLAMA };

typedef struct {
    int type;
    char *a; size_t a_len;      /* Replace pattern / Metaspace replacement / WordPiece prefix / BPE suffix */
    char *b; size_t b_len;      /* Replace content */
    pcre2_code *re;
    bool cleanup;               /* WordPiece */
    bool prepend;               /* Metaspace: strip the replacement from the first token */
    uint32_t strip_cp; size_t strip_start, strip_stop;  /* Strip */
} tk_dec;

typedef struct {
    int32_t id;
    uint32_t off, len;          /* into tok->pool */
    bool lstrip, rstrip, normalized, special, single_word;
} tk_added;

enum { MODEL_BPE, MODEL_SPM, MODEL_WORDPIECE, MODEL_WPM_LLAMA };

/* ---- word cache (BPE/SPM results per pre-token, shared across calls) ---- */

typedef struct {
    pthread_mutex_t mu;
    uint32_t *slot;             /* entry index + 1 */
    uint32_t mask;
    struct tk_cent { uint64_t h; uint32_t key_off, key_len, ids_off, n_ids; } *ent;
    size_t n_ent, cap_ent;
    tk_str keys;
    tk_ids ids;
} tk_cache;

struct cdx_tok {
    int model;
    uint32_t n_vocab;
    /* token table: text of id i is pool[off[i] .. off[i]+len[i]) */
    tk_str pool;
    uint32_t *off, *len;
    uint8_t *attr;              /* CDX_TOK_* */
    float *score;               /* SPM */
    tk_strmap map;              /* vocab text -> id */
    tk_pairmap merges;          /* BPE */
    uint32_t max_tok_len;

    /* BPE options */
    bool byte_level;            /* pre-tokens are raw bytes, mapped to GPT-2's byte chars */
    bool ignore_merges;
    bool byte_fallback;
    bool fuse_unk;
    char *cont_prefix; size_t cont_prefix_len;  /* continuing_subword_prefix (BPE, WordPiece "##") */
    char *eow_suffix; size_t eow_suffix_len;
    size_t wp_max_chars;
    int32_t byte_sym[256];      /* byte-level: id of the char each byte maps to */
    int32_t byte_tok[256];      /* byte fallback: id of <0xXX> */
    bool gguf_bpe_bytes;        /* llama.cpp BPE: unknown final symbols fall back to per-byte tokens */

    tk_norm *norm; size_t n_norm;
    tk_pre *pre; size_t n_pre;
    tk_dec *dec; size_t n_dec;
    tk_added *added; size_t n_added;
    bool any_normalized_added;
    uint8_t added_first[32];    /* bitmap of first bytes of added tokens */
    uint32_t added_idx[257];    /* added[added_idx[c] .. added_idx[c+1]) start with byte c */

    /* post-processor for a single sequence */
    int32_t *pp_pre; size_t n_pp_pre;
    int32_t *pp_post; size_t n_pp_post;
    bool has_pp;

    int32_t bos, eos, eot, pad, unk, sep;
    bool add_bos, add_eos;
    uint8_t *eog;               /* [n_vocab] */
    uint8_t *mark;              /* [n_vocab] a tool-call or channel mark (k_mark_texts, tok_core.c) */
    bool cleanup_spaces;        /* transformers' clean_up_tokenization */
    bool llama_cleanup;         /* llama.cpp's clean_spaces variant */
    bool spm_strip_first;       /* piece: drop the first leading space */
    bool meta_first_all;        /* piece: tokenizers' Metaspace decoder drops every ▁ of the first token */
    char *chat_template, *bos_text, *eos_text;
    const char *name;

    tk_cache cache;
};

/* ---- construction helpers (tok_core.c) ---- */
cdx_tok *tk_new(void);
int tk_set_vocab_size(cdx_tok *t, uint32_t n, cdx_err *err);
int tk_set_token(cdx_tok *t, uint32_t id, const char *s, size_t n, uint8_t attr, cdx_err *err);
/* After all tokens are set: builds the text map, byte tables, eog flags. */
int tk_finish(cdx_tok *t, cdx_err *err);
int tk_add_merge(cdx_tok *t, int32_t l, int32_t r, uint32_t rank);
int tk_add_added(cdx_tok *t, int32_t id, bool lstrip, bool rstrip, bool normalized, bool special, bool single_word);
int32_t tk_lookup(const cdx_tok *t, const char *s, size_t n);
char *tk_strndup(const char *s, size_t n);
pcre2_code *tk_regex(const char *pat, size_t len, uint32_t extra, cdx_err *err, const char *what);

/* GPT-2 byte <-> char mapping */
extern const char *const tk_gpt2_regex;
int tk_byte_to_utf8(uint8_t b, char out[4]);     /* returns length */
int tk_char_to_byte(uint32_t cp);                /* -1 when cp is not a mapped byte char */

/* UTF-8 helpers */
size_t tk_utf8_len(uint8_t c);                   /* 1..4 from the lead byte (1 for invalid) */
uint32_t tk_utf8_dec(const char *s, size_t n, size_t *adv);
int tk_utf8_enc(uint32_t cp, char out[4]);

/* ---- pipeline (tok_pipeline.c) ---- */
typedef struct { size_t off, len; bool first, after_special; } tk_span;
typedef struct { tk_str buf; tk_span *sp; size_t n, cap; } tk_spans;

int tk_normalize(const cdx_tok *t, const char *s, size_t n, tk_str *out);
int tk_pretokenize(const cdx_tok *t, tk_spans *io, tk_spans *tmp);
void tk_spans_free(tk_spans *s);
int tk_spans_push(tk_spans *s, size_t off, size_t len, bool first, bool after_special);

/* ---- models (tok_model.c) ---- */
typedef struct tk_scratch tk_scratch;
tk_scratch *tk_scratch_new(void);
void tk_scratch_free(tk_scratch *s);
int tk_model_word(const cdx_tok *t, tk_scratch *sc, const char *w, size_t n, tk_ids *out);
void tk_cache_init(tk_cache *c);
void tk_cache_free(tk_cache *c);

/* ---- loaders ---- */
int tk_load_hf_json(cdx_tok *t, const char *json, size_t len, const char *cfg, size_t cfg_len, cdx_err *err);
int tk_load_spm_model(cdx_tok *t, const uint8_t *d, size_t n, const char *cfg, size_t cfg_len, cdx_err *err);
int tk_apply_config_text(cdx_tok *t, const char *cfg_text, size_t cfg_len, cdx_err *err);
int tk_load_vocab_merges(cdx_tok *t, const char *vocab, size_t vlen, const char *merges, size_t mlen,
                         const char *cfg, size_t cfg_len, cdx_err *err);

#endif
