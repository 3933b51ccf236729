/* caldrix train layer: evaluation over a model (perplexity, KL divergence against a base model's
 * saved log-probabilities), the judge of a quantization or a fine-tune.
 *
 *   cdx_ppl_opts o = cdx_ppl_defaults();  o.n_ctx = 512;  o.bos_id = add_bos ? bos : -1;
 *   cdx_ppl_result r;
 *   if (cdx_perplexity(model, ids, n_ids, &o, &r, &err) < 0) fprintf(stderr, "%s\n", err.msg);
 *   printf("PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
 *
 * The method is llama.cpp's llama-perplexity (tools/perplexity/perplexity.cpp): the tokens are cut
 * into n_tokens / n_ctx windows of n_ctx, each run from an empty cache with its first token
 * replaced by BOS when the vocabulary adds one; in each window only the second half is scored
 * (positions n_ctx/2 .. n_ctx-2 predict the next token), so every scored token has at least n_ctx/2
 * tokens of context. The running estimate is exp(mean NLL); its error is ppl · sqrt(var(NLL) /
 * (count - 1)). Nothing here prints: progress goes to on_chunk.
 */
#ifndef CALDRIX_TRAIN_H
#define CALDRIX_TRAIN_H

#include "caldrix/base.h"
#include "caldrix/kernel.h"
#include "caldrix/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The running figures after each window (a KL run fills the kl fields too). */
typedef struct cdx_ppl_progress {
    int64_t chunk, n_chunks;   /* windows done (1-based) and in all */
    int64_t count;             /* tokens scored so far */
    double ppl;                /* exp(mean NLL) so far */
    double ln_ppl_ratio, kld, same_top; /* KL runs: ln(PPL(Q)/PPL(base)), mean KL, top-1 agreement */
} cdx_ppl_progress;

typedef struct cdx_ppl_opts {
    int64_t n_ctx;             /* window (llama-perplexity's -c; default 512); a KL run takes the base
                                  file's and ignores this */
    int32_t bos_id;            /* put in place of each window's first token; -1: none (the vocabulary
                                  adds no BOS) */
    int64_t n_chunks_max;      /* 0: every whole window of the text (llama-perplexity's --chunks) */
    int n_threads;             /* 0: every core */
    const cdx_kernels *kernels; /* NULL: cdx_kernels_best() */
    /* --kl-divergence-base: write each scored position's log-probabilities here, in llama-perplexity's
       file layout ("_logits_", n_ctx u32, n_vocab i32, n_chunk i32, the tokens, then per window
       n_ctx-1-n_ctx/2 rows of [scale f32, min f32, pad][n_vocab u16]) */
    const char *save_base;
    void (*on_chunk)(void *user, const cdx_ppl_progress *p);
    void *user;
} cdx_ppl_opts;

CDX_API cdx_ppl_opts cdx_ppl_defaults(void);

typedef struct cdx_ppl_result {
    int64_t n_ctx, n_tokens, n_chunks, count; /* count: tokens scored */
    double ppl, ppl_err;
    /* KL runs (cdx_kl_divergence) only: llama-perplexity's statistics of MODEL (Q) against BASE */
    bool kl;
    double ppl_base, ppl_base_err, ln_ppl_ratio, ln_ppl_ratio_err, ppl_ratio, ppl_ratio_err;
    double kld, kld_err, kld_max, kld_median, kld_min;
    double kld_p99, kld_p90, kld_p10;          /* percentiles as llama.cpp interpolates them */
    double p_diff, p_diff_err, p_diff_rms, p_diff_rms_err, p_diff_max; /* Δp of the scored token */
    double same_top, same_top_err;             /* fraction whose argmax agrees with the base's */
} cdx_ppl_result;

/* Perplexity of tokens (what the tokenizer makes of the text with its special tokens, as
 * llama-perplexity tokenizes) under m. Needs at least 2 · n_ctx tokens (CDX_EINVAL saying how many
 * there are otherwise); n_ctx above the model's trained context is refused. With o->save_base the
 * scored rows' log-probabilities are written there and the NLL is llama.cpp's of that path (its
 * log-sum-exp in float). */
CDX_API int cdx_perplexity(const cdx_model *m, const int32_t *tokens, int64_t n_tokens, const cdx_ppl_opts *o,
                           cdx_ppl_result *r, cdx_err *err);

/* KL divergence of m (Q) against the base file base_path that cdx_perplexity (or llama-perplexity's
 * --kl-divergence-base) wrote: the same windows of the file's tokens, then per scored position
 * KL(p_base ‖ p_Q) over the base's log-probs above -16, whether the argmaxes agree, and both
 * models' NLL. A file of another vocabulary size, a short file or a bad header is refused naming it. */
CDX_API int cdx_kl_divergence(const cdx_model *m, const char *base_path, const cdx_ppl_opts *o, cdx_ppl_result *r,
                              cdx_err *err);

#ifdef __cplusplus
}
#endif
#endif
