/* caldrix embeddings: the sentence-transformers pipeline over an encoder (or a decoder embedding
 * model), as sentence-transformers' Transformer → Pooling → Normalize modules compute it.
 *
 *   cdx_st_pipeline p;  cdx_st_pipeline_read("path/to/folder", &p, &err);   // modules.json & co.
 *   cdx_embedder *e;    cdx_embedder_open(model, tok, &p, NULL, &e, &err);
 *   cdx_embed_texts(e, texts, n, vecs, NULL, &err);                          // vecs[n][cdx_embedder_dim(e)]
 *   cdx_embedder_close(e);
 *
 * A vector does not depend on what else is embedded with it: an input's bits are the same alone and
 * in any batch, with any thread count (the encoder's pass is batch invariant; pooling reads the input's
 * own rows only).
 */
#ifndef CALDRIX_EMBED_H
#define CALDRIX_EMBED_H

#include "caldrix/base.h"
#include "caldrix/kernel.h"
#include "caldrix/model.h"
#include "caldrix/pipeline.h"
#include "caldrix/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most inputs one call or request embeds (the bound; the server refuses more with 400). */
#define CDX_EMBED_MAX_INPUTS 2048

typedef struct cdx_embedder cdx_embedder;

/* What a model is served for. */
#define CDX_TASKS(X)                                                                                  \
    X(GENERATE, "generate") /* a causal LM: run, /v1/completions, /v1/chat/completions */              \
    X(EMBED, "embed")       /* vectors: caldrix embed, /v1/embeddings */                               \
    X(RERANK, "rerank")     /* query-document scores: caldrix rerank, /v1/rerank */

typedef enum cdx_task {
#define CDX_X_(name, s) CDX_TASK_##name,
    CDX_TASKS(CDX_X_)
#undef CDX_X_
    CDX_TASK_COUNT
} cdx_task;
CDX_API const char *cdx_task_name(cdx_task t);                 /* "embed"; "?" out of range */
CDX_API int cdx_task_from_name(const char *s, cdx_task *out);  /* CDX_EINVAL for another name */
/* The task a model's folder declares: an encoder, or a folder with modules.json, embeds; anything else
 * generates. A reranker (Qwen3-Reranker) is a causal LM on disk: it is named with --task rerank. */
CDX_API cdx_task cdx_task_declared(const cdx_model *m, const cdx_st_pipeline *p);

typedef struct cdx_embedder_opts {
    int n_threads;                 /* 0: 1 */
    const cdx_kernels *kernels;    /* NULL: cdx_kernels_best() */
    cdx_task task;                 /* GENERATE (0) is taken as EMBED */
    int32_t yes_id, no_id;         /* a reranker's answer tokens; -1 (or 0 for both): the tokenizer's "yes" / "no" */
    int64_t token_budget;          /* a decoder's tokens per forward (0: 512); longer inputs run in chunks */
    struct cdx_pool *pool;         /* NULL: its own pool of n_threads. Else the caller's (borrowed), which must
                                    * never run two passes at once (the server's one engine thread) */
} cdx_embedder_opts;

/* An embedder over m (borrowed; an encoder, or a dense decoder computing in f32: Qwen3-Embedding with
 * last-token pooling, Qwen3-Reranker) and tok (borrowed; NULL: token-id inputs only) with pipeline p
 * (copied; NULL or absent: CLS pooling for an encoder, last-token for a decoder, no normalisation). */
CDX_API int cdx_embedder_open(const cdx_model *m, const cdx_tok *tok, const cdx_st_pipeline *p,
                              const cdx_embedder_opts *opts, cdx_embedder **out, cdx_err *err);
CDX_API void cdx_embedder_close(cdx_embedder *e);
CDX_API int64_t cdx_embedder_dim(const cdx_embedder *e);
CDX_API cdx_task cdx_embedder_task(const cdx_embedder *e);
/* The most tokens one input keeps (max_seq_length, or the model's positions). */
CDX_API int64_t cdx_embedder_max_tokens(const cdx_embedder *e);
CDX_API const cdx_st_pipeline *cdx_embedder_pipeline(const cdx_embedder *e);

/* sentence-transformers' Transformer.tokenize of one text: strip, lowercase iff do_lower_case, the
 * tokenizer with its special tokens, then truncation to max_seq_length counting the special tokens
 * (longest_first from the right: the content is cut, the special tokens kept). Writes up to cap ids;
 * *n the count kept, *n_full (may be NULL) the count before truncation. CDX_EINVAL without a tokenizer. */
CDX_API int cdx_embed_tokenize(const cdx_embedder *e, const char *text, size_t len, int32_t *ids, size_t cap,
                               size_t *n, size_t *n_full, cdx_err *err);
/* The vectors of n inputs of token ids (used as given), run in one forward: out[n][dim], each pooled and,
 * where the pipeline says, normalised. CDX_EINVAL for an empty input, one longer than max_tokens or an id
 * outside the vocabulary (naming the input). Thread-safe: calls are serialised. */
CDX_API int cdx_embed_ids(cdx_embedder *e, const int32_t *const *ids, const int64_t *lens, int n, float *out,
                          cdx_err *err);
/* Matryoshka truncation: out[0..k) = v[0..k) renormalised (x / max(‖x‖₂, 1e-12)); out may be v. */
CDX_API void cdx_embed_truncate(const float *v, int64_t k, float *out);
/* cdx_embed_tokenize then cdx_embed_ids; n_tokens[n] (may be NULL) gets each input's token count. */
CDX_API int cdx_embed_texts(cdx_embedder *e, const char *const *texts, int n, float *out, int64_t *n_tokens,
                            cdx_err *err);

/* ---- reranking (a causal LM judging "yes" or "no": Qwen3-Reranker's model card) ---- */

/* The scores of n whole formatted pairs of token ids (used as given, no special tokens added), run in
 * batches: score = softmax([logit_no, logit_yes])[1] at each pair's last position. logits (may be NULL)
 * gets [n][2] = {logit_yes, logit_no}. Same refusals as cdx_embed_ids; CDX_EINVAL for an embedder of
 * another task. */
CDX_API int cdx_rerank_ids(cdx_embedder *e, const int32_t *const *ids, const int64_t *lens, int n, float *scores,
                           float *logits, cdx_err *err);
/* One query-document pair as the model card's format_instruction makes it: prefix +
 * "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}" (its tokens cut from the right to fit
 * max_tokens) + suffix, tokenized. *ids (heap) gets *n tokens; *n_full (may be NULL) the count before the
 * cut. CDX_EINVAL without a tokenizer. */
CDX_API int cdx_rerank_format(const cdx_embedder *e, const char *query, const char *doc, const char *instruction,
                              int32_t **ids, int64_t *n, int64_t *n_full, cdx_err *err);
/* The model card's format_instruction: prefix + "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"
 * (cut from the right to fit max_tokens) + suffix, tokenized, then cdx_rerank_ids. instruction NULL: the
 * card's default ("Given a web search query, retrieve relevant passages that answer the query"). */
CDX_API int cdx_rerank_texts(cdx_embedder *e, const char *query, const char *const *docs, int n,
                             const char *instruction, float *scores, cdx_err *err);

#ifdef __cplusplus
}
#endif
#endif
