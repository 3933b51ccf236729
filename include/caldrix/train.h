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

/* ---- training: LoRA and full fine-tuning, distillation (train.c) ----
 *
 *   cdx_train_opts o = cdx_train_defaults();  o.lora_r = 8;  o.lora_alpha = 16;  o.lora_targets = 0x7f;
 *   cdx_trainer *t;  cdx_trainer_create(model, &o, &t, &err);
 *   cdx_train_seq seqs[4] = { ... };                        // one optimizer step's sequences
 *   cdx_train_stats st;  cdx_trainer_step(t, seqs, 4, &st, &err);
 *   cdx_trainer_save(t, "out", &err);  cdx_trainer_free(t);
 *
 * An f32 forward and backward pass of the dense decoders (llama, mistral, qwen2, qwen3: RMSNorm,
 * attention with RoPE and optional q/k/v biases and per-head q/k norms, SwiGLU MLP) as transformers
 * computes them, over a step's sequences one at a time, unpadded. The loss is transformers' (>= 4.46)
 * ForCausalLMLoss with num_items_in_batch: Σ over the step's sequences and positions t whose
 * labels[t+1] != -100 of -log softmax(logits_t)[labels[t+1]], divided by that count over the whole
 * step, so micro-batches and gradient accumulation do not change the math. With a teacher:
 * kd_weight·KD + (1-kd_weight)·CE, KD = Σ KL(softmax(teacher/T) ‖ softmax(student/T)) over the same
 * positions / count · T². AdamW is torch.optim.AdamW's (decoupled decay first, bias corrections,
 * eps after the corrected square root), one group holding every trainable tensor. LoRA follows PEFT
 * v0.20.0: y = x Wᵀ + (alpha/r)·(x Aᵀ) Bᵀ, A [r × in], B [out × r]. Every activation of a sequence is
 * kept for its backward pass (none recomputed); the weights stay where the model holds them when
 * they are f32 and frozen. */

/* The linear modules LoRA may target (bits of cdx_train_opts.lora_targets): q_proj, k_proj, v_proj,
 * o_proj, gate_proj, up_proj, down_proj. */
enum { CDX_LORA_Q = 1, CDX_LORA_K = 2, CDX_LORA_V = 4, CDX_LORA_O = 8, CDX_LORA_GATE = 16, CDX_LORA_UP = 32,
       CDX_LORA_DOWN = 64 };
/* "q_proj,v_proj" → bits; CDX_EINVAL naming an unknown module. */
CDX_API int cdx_lora_targets_parse(const char *list, unsigned *out, cdx_err *err);

typedef struct cdx_train_opts {
    bool full;                 /* every tensor trains (embeddings, norms, head); else LoRA */
    int64_t lora_r;            /* rank (LoRA) */
    double lora_alpha;         /* scaling = alpha / r */
    unsigned lora_targets;     /* CDX_LORA_* bits */
    uint64_t seed;             /* draws LoRA's A (U(-1/sqrt(in), 1/sqrt(in)), B = 0) unless init_adapter */
    const char *init_adapter;  /* a PEFT folder to start from (its r, alpha and targets are taken; 0 / NULL
                                  fields above are filled from it, others must agree) */
    double lr, weight_decay, beta1, beta2, eps;
    const cdx_model *teacher;  /* distillation: read only (any model caldrix runs), its vocabulary the student's */
    double temperature, kd_weight;
    int n_threads;             /* threads of the products and the teacher's pass (0: every core); the results
                                  do not depend on it */
    const char *base_name;     /* adapter_config.json's base_model_name_or_path (NULL: null) */
} cdx_train_opts;

CDX_API cdx_train_opts cdx_train_defaults(void); /* lr 1e-4, betas (0.9, 0.999), eps 1e-8, T 1, kd 0.5 */

typedef struct cdx_train_seq {
    const int32_t *ids;        /* [n] input ids */
    const int32_t *labels;     /* [n] the targets (-100: not scored); position t predicts labels[t+1] */
    int64_t n;
} cdx_train_seq;

typedef struct cdx_train_stats {
    double loss, ce, kd;       /* kd: KD·T² (distillation) */
    int64_t num_items, tokens; /* scored positions, input tokens */
} cdx_train_stats;

typedef struct cdx_trainer cdx_trainer;
/* m: a checkpoint of a dense family in F32/F16/BF16 (borrowed; it must outlive the trainer). A GGUF
 * file is refused (CDX_EUNSUPPORTED) naming the two ways to trainable weights. */
CDX_API int cdx_trainer_create(const cdx_model *m, const cdx_train_opts *o, cdx_trainer **out, cdx_err *err);
CDX_API void cdx_trainer_free(cdx_trainer *t); /* NULL: no-op */
/* The gradients of one step's loss over seqs (summed into the parameters' gradients, which this
 * zeroes first), without updating. */
CDX_API int cdx_trainer_grads(cdx_trainer *t, const cdx_train_seq *seqs, int n_seq, cdx_train_stats *st, cdx_err *err);
/* AdamW on the gradients of the last cdx_trainer_grads (step k+1). */
CDX_API void cdx_trainer_apply(cdx_trainer *t);
/* Both: one optimizer step. */
CDX_API int cdx_trainer_step(cdx_trainer *t, const cdx_train_seq *seqs, int n_seq, cdx_train_stats *st, cdx_err *err);
CDX_API int64_t cdx_trainer_steps_done(const cdx_trainer *t);

/* The trainable tensors, in the optimizer's order; names are PEFT's (LoRA) or transformers' (full). */
typedef struct cdx_train_param {
    const char *name;
    int64_t rows, cols;        /* cols 1... a vector is rows = n, cols = 1 written as 1-d */
    int n_dims;
    float *w, *g, *m, *v;      /* [rows·cols] each: value, gradient, Adam's moments */
} cdx_train_param;
CDX_API int64_t cdx_trainer_n_params(const cdx_trainer *t);
CDX_API const cdx_train_param *cdx_trainer_param(const cdx_trainer *t, int64_t i);

/* Writes dir/adapter_config.json + adapter_model.safetensors (LoRA: PEFT's format and key names) or
 * dir/model.safetensors + the model folder's config.json, generation_config.json and tokenizer
 * files (full); dir is created. */
CDX_API int cdx_trainer_save(const cdx_trainer *t, const char *dir, cdx_err *err);
/* A checkpoint: the save above plus dir/optimizer.safetensors (Adam's moments) and dir/trainer_state.json
 * ({"step": k} and extra, a JSON object text the caller keeps there, or NULL). */
CDX_API int cdx_trainer_save_checkpoint(const cdx_trainer *t, const char *dir, const char *extra_json, cdx_err *err);
/* Restores a checkpoint's parameters, moments and step count; its tensors must be this trainer's. */
CDX_API int cdx_trainer_load_checkpoint(cdx_trainer *t, const char *dir, cdx_err *err);

/* PEFT's merge_and_unload into a checkpoint: out_dir/model.safetensors holds model_dir's tensors with
 * W += scale · alpha/r · B A on every (layer, module) of the adapter (cdx_lora_merge_into, computed in
 * f32 and stored back in each tensor's own type), every other tensor as it is; the folder's config,
 * generation config and tokenizer files are copied. out_dir is created. */
CDX_API int cdx_lora_merge_checkpoint(const char *model_dir, const char *adapter, float scale, const char *out_dir,
                                      cdx_err *err);

#ifdef __cplusplus
}
#endif
#endif
