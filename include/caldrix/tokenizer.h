/* caldrix text layer: tokenizers (byte-level BPE, SentencePiece, WordPiece) loaded from GGUF
 * metadata or from Hugging Face files, matching transformers / llama.cpp id for id.
 *
 *   cdx_tok *tok = NULL;
 *   if (cdx_tok_open("path/to/model-dir", &tok, &err) < 0) ...;   // or a .gguf, or tokenizer.json
 *   size_t n; cdx_tok_encode(tok, "Hello", 5, true, true, ids, cap, &n, &err);
 *   cdx_tok_decode(tok, ids, n, false, buf, sizeof buf, &len, &err);
 *   cdx_tok_close(tok);
 *
 * A cdx_tok is immutable once opened (apart from an internal, locked word cache):
 * encode, decode and the accessors are thread-safe.
 */
#ifndef CALDRIX_TOKENIZER_H
#define CALDRIX_TOKENIZER_H

#include "caldrix/base.h"
#include "caldrix/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cdx_tok cdx_tok;

/* Token attributes (llama.cpp's token types, as bits). */
enum {
    CDX_TOK_NORMAL = 1 << 0,
    CDX_TOK_CONTROL = 1 << 1,      /* special: <s>, <|im_end|>, [CLS] ... */
    CDX_TOK_USER_DEFINED = 1 << 2, /* added, non-special tokens */
    CDX_TOK_BYTE = 1 << 3,         /* <0x0A> byte-fallback tokens */
    CDX_TOK_UNKNOWN = 1 << 4,
    CDX_TOK_UNUSED = 1 << 5,
};

/* Opens from the tokenizer.* keys of a GGUF (borrowed: the tokenizer copies what it needs, so g
 * may be closed afterwards). On success *out owns a tokenizer; free with cdx_tok_close. */
CDX_API int cdx_tok_open_gguf(const cdx_gguf *g, cdx_tok **out, cdx_err *err);
/* Opens a directory of Hugging Face files: tokenizer.json (+ tokenizer_config.json), else
 * tokenizer.model (SentencePiece), else vocab.json + merges.txt. */
CDX_API int cdx_tok_open_dir(const char *dir, cdx_tok **out, cdx_err *err);
/* Opens tokenizer.json text from memory; config (tokenizer_config.json text) may be NULL.
 * name is used in messages. The buffers are not kept. */
CDX_API int cdx_tok_open_json(const char *json, size_t json_len, const char *config, size_t config_len,
                              const char *name, cdx_tok **out, cdx_err *err);
/* path: a .gguf file, a directory, or a tokenizer.json file (its directory's tokenizer_config.json
 * is read too). */
CDX_API int cdx_tok_open(const char *path, cdx_tok **out, cdx_err *err);
CDX_API void cdx_tok_close(cdx_tok *tok); /* NULL: no-op */

/* Encodes text[0..len) (must be valid UTF-8, else CDX_EINVAL naming the byte offset).
 * add_special: BOS/EOS or the post-processor template (transformers' add_special_tokens).
 * parse_special: special tokens written in the text are matched (transformers' default); when
 * false they are tokenized as plain text (llama.cpp's parse_special=false); user-defined added
 * tokens are matched either way. Writes up to cap ids; *n_need is the full count, even when > cap. */
CDX_API int cdx_tok_encode(const cdx_tok *tok, const char *text, size_t len, bool add_special,
                           bool parse_special, int32_t *ids, size_t cap, size_t *n_need, cdx_err *err);

/* transformers' decode(ids, skip_special_tokens), including its clean-up of tokenization spaces
 * when the tokenizer's config asks for it. Writes up to cap bytes and a NUL when there is room;
 * *n_need is the full length (without the NUL). Ids out of range: CDX_ERANGE. Invalid UTF-8 from
 * byte tokens becomes U+FFFD. */
CDX_API int cdx_tok_decode(const cdx_tok *tok, const int32_t *ids, size_t n, bool skip_special,
                           char *out, size_t cap, size_t *n_need, cdx_err *err);

/* The bytes one token contributes to generated text, in context: `first` is true for the first
 * token after the prompt / at the start of the text (then an SPM/Metaspace leading space is
 * dropped, as the decoder does). Byte tokens give their one raw byte (possibly part of a UTF-8
 * sequence: use cdx_tok_stream to print). Special tokens give their text unless skip_special.
 * Returns the number of bytes (written up to cap), or < 0 for a bad id. */
CDX_API int cdx_tok_piece(const cdx_tok *tok, int32_t id, bool first, bool skip_special, char *out,
                          size_t cap);

/* Incremental detokenizer for streaming: feeds one id at a time and returns only complete UTF-8
 * (incomplete byte sequences wait for the next token; invalid ones become U+FFFD). */
typedef struct cdx_tok_stream {
    const cdx_tok *tok;
    bool first;
    bool skip_special;
    bool keep_marks; /* with skip_special: marks (cdx_tok_is_mark) keep their text; set after init */
    uint8_t pend[8];
    size_t n_pend;
} cdx_tok_stream;
CDX_API void cdx_tok_stream_init(cdx_tok_stream *s, const cdx_tok *tok, bool skip_special);
/* Whether the stream leaves token id's text out: a special token under skip_special, unless it is a
 * mark the stream keeps (keep_marks). The skip_special argument of cdx_tok_piece for that token. */
CDX_API bool cdx_tok_stream_skips(const cdx_tok_stream *s, int32_t id);
/* Writes the text ready after token id into out (cap >= 256 is always enough for one call);
 * returns the byte count or < 0 for a bad id. */
CDX_API int cdx_tok_stream_put(cdx_tok_stream *s, int32_t id, char *out, size_t cap);
/* Flushes a dangling incomplete sequence as U+FFFD; returns the byte count. */
CDX_API int cdx_tok_stream_flush(cdx_tok_stream *s, char *out, size_t cap);

/* Accessors. Ids are -1 when the tokenizer has none. */
CDX_API uint32_t cdx_tok_n_vocab(const cdx_tok *tok);
CDX_API int32_t cdx_tok_bos(const cdx_tok *tok);
CDX_API int32_t cdx_tok_eos(const cdx_tok *tok);
CDX_API int32_t cdx_tok_eot(const cdx_tok *tok);     /* end of turn (<|eot_id|>, <|im_end|>...) */
CDX_API int32_t cdx_tok_pad(const cdx_tok *tok);
CDX_API int32_t cdx_tok_unk(const cdx_tok *tok);
CDX_API bool cdx_tok_add_bos(const cdx_tok *tok);    /* does encode(add_special) prepend BOS? */
CDX_API bool cdx_tok_add_eos(const cdx_tok *tok);
CDX_API bool cdx_tok_is_eog(const cdx_tok *tok, int32_t id); /* ends generation (eos, eot, ...) */
/* A special token that opens or frames a tool call or a message channel ([TOOL_CALLS],
 * <|tool_call|>, <tool_call>, <|python_tag|>, <|channel|>, <|message|> ...): a grammar matches it by
 * its text, and a stream with keep_marks keeps its text although it skips special tokens. */
CDX_API bool cdx_tok_is_mark(const cdx_tok *tok, int32_t id);
CDX_API int cdx_tok_attr(const cdx_tok *tok, int32_t id);    /* CDX_TOK_* bits; 0 for a bad id */
/* The vocabulary string of id (as stored: Ġ/▁ markers included), not NUL-terminated; NULL for a
 * bad id. */
CDX_API const char *cdx_tok_text(const cdx_tok *tok, int32_t id, size_t *len);
/* id of an exact vocabulary/added-token string, or -1. */
CDX_API int32_t cdx_tok_find(const cdx_tok *tok, const char *s, size_t len);
/* Chat template (tokenizer_config.json chat_template, or GGUF tokenizer.chat_template), and the
 * bos/eos token strings the template sees; NULL when absent. Owned by the tokenizer. */
CDX_API const char *cdx_tok_chat_template(const cdx_tok *tok);
CDX_API const char *cdx_tok_bos_text(const cdx_tok *tok);
CDX_API const char *cdx_tok_eos_text(const cdx_tok *tok);
/* "bpe", "spm", "wordpiece" */
CDX_API const char *cdx_tok_model_name(const cdx_tok *tok);

/* ---- GGUF export (caldrix convert) ---- */

typedef struct cdx_tok_export_opts {
    uint32_t n_vocab;          /* the model's vocab size (config.json); 0: the tokenizer's */
    const char *pre_hash;      /* llama.cpp's fingerprint: sha256 hex of the ids of cdx_tok_pre_check_text
                                  encoded with add_special, written as Python prints a list ("[1, 2]"); NULL: unknown */
    int64_t bos_id, eos_id, pad_id; /* config.json's ids, used where tokenizer_config.json names none; -1: none */
} cdx_tok_export_opts;

typedef struct cdx_tok_export_info {
    const char *model;         /* "gpt2" or "llama" */
    const char *pre;           /* tokenizer.ggml.pre */
    const char *pre_source;    /* how pre was chosen, for messages */
} cdx_tok_export_info;

/* Adds the tokenizer.* keys llama.cpp's convert_hf_to_gguf.py writes for the Hugging Face tokenizer
 * files of dir: "llama" (SentencePiece) from tokenizer.model, or from a byte-fallback BPE tokenizer.json
 * (scores from the merge ranks); "gpt2" from a byte-level BPE (tokens, token types, merges,
 * tokenizer.ggml.pre named by llama.cpp's fingerprint table, else by the pre-tokenizer regex); then
 * bos/eos/unk/pad ids, add_bos/add_eos and the chat template. tok: dir's tokenizer as
 * cdx_tok_open_dir opens it, borrowed (NULL: opened here). info (may be NULL) says what was written. */
CDX_API int cdx_tok_export_gguf(const char *dir, const cdx_tok *tok, const cdx_tok_export_opts *opts,
                                cdx_gguf_writer *w, cdx_tok_export_info *info, cdx_err *err);
/* The placeholder vocabulary of the shared fixture converter, for checkpoints without tokenizer
 * files: "<unk>", "<s>", "</s>", the 256 byte tokens "<0x00>".., then "<t{i}>" up to n_vocab. */
CDX_API int cdx_tok_export_gguf_dummy(cdx_gguf_writer *w, uint32_t n_vocab, int64_t bos, int64_t eos, cdx_err *err);
/* llama.cpp's check text (get_vocab_base_pre's chktxt) and its table of fingerprints. */
CDX_API const char *cdx_tok_pre_check_text(size_t *len);
CDX_API const char *cdx_tok_pre_by_hash(const char *sha256_hex); /* NULL when unknown */

#ifdef __cplusplus
}
#endif
#endif
