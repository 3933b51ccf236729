/* Inside the model layer: the architecture table, tensor roles and the loaded model. */
#ifndef CDX_MODEL_ARCH_H
#define CDX_MODEL_ARCH_H

#include "caldrix/config.h"
#include "caldrix/model.h"

#include <pthread.h>

/* A mixture-of-experts layer's tensor roles (the GGUF names stack each expert role in one tensor). */
typedef enum {
    MOE_ROUTER, MOE_GATE, MOE_UP, MOE_DOWN, MOE_SH_ROUTER, MOE_SH_GATE, MOE_SH_UP, MOE_SH_DOWN, MOE_ROLE_COUNT
} moe_role;

/* A family's own name for a tensor role, where it differs from the common decoder's (model_load.c's
 * role tables, which hold llama.cpp's and transformers' Llama/Qwen names). */
typedef struct role_name {
    int role;                   /* a tensor_role, or a moe_role when moe */
    bool moe, gguf;             /* which table; the GGUF or the HF name */
    const char *name;           /* "%d" the layer (then the expert); NULL ends a list */
} role_name;

/* A config.json architecture a family reads (config.h's cdx_hf_arch), with what the import says of
 * it beyond its family ("" or e.g. "mixture of experts"). */
typedef struct arch_hf {
    cdx_hf_arch hf;
    const char *title;          /* how messages name it: "Mistral", "Qwen3-MoE" */
    const char *note;           /* NULL ends the list */
    cdx_hf_arch_row cfg;        /* its names and config class defaults (the config reader reads them) */
} arch_hf;

/* What a family is, in one row (src/model/arch/<family>.c): where it differs from the common decoder
 * (embed; per layer RMSNorm, attention with RoPE over the KV cache, RMSNorm, SwiGLU MLP; RMSNorm, the
 * head), as data; the loader, convert, inspect, synth, --help and the docs read it. */
typedef struct arch_desc {
    cdx_arch arch;
    const char *family;         /* transformers' model_type of the family ("qwen3_moe"): what inspect reports */
    const arch_hf hf[4];        /* the config.json architectures it reads */
    const char *gguf_name;      /* general.architecture; NULL: the family has no GGUF name of its own */
    const char *gguf_experts_of;/* GGUF files of it say this general.architecture with <arch>.expert_count
                                   (Mixtral: "llama"); the loader takes such a file as this family */
    cdx_rope_mode gguf_rope;    /* RoPE pairing of the GGUF layout (ADJACENT: the converter permutes q/k) */
    bool qkv_bias, qk_norm;
    bool moe;                   /* a mixture of experts (its sparse layers: a router over n_expert MLPs) */
    bool shared_expert;         /* Qwen2-MoE: plus one always-on expert scaled by sigmoid(its gate) */
    bool norm_topk;             /* GGUF default for renormalising the top-k weights (HF: config.json) */
    bool experts_ff_wide;       /* experts are feed_forward_length wide: GGUF has no expert_feed_forward_length,
                                   nor expert_weights_norm unless config.json's norm_topk_prob is not norm_topk
                                   (Mixtral, OLMoE) */
    const char *hf_text_prefix; /* HF tensor names of the text model start with this in place of "model."
                                   (Idefics3: "model.text_model."); NULL: "model." */
    bool vision;                /* a vision tower + connector beside the text model (vision.c) */
    bool hybrid;                /* Qwen3.5: Gated DeltaNet layers, gated attention, partial rotary (qwen35.c) */
    float hf_norm_offset;       /* the checkpoint's RMSNorm weights w scale by (offset + w) (Qwen3.5: 1);
                                   the loader and the converter add it */
    bool bf16;                  /* has a bf16 forward pass (forward_bf16.c), checked against PyTorch's bf16 goldens */
    bool bf16_norm_once;        /* bf16 compute: the RMSNorm's weight multiplies the f32 normed value in f32, one
                                   rounding (Olmo2RMSNorm's (w·h).to(dtype); the (1 + w) norms always do), where
                                   LlamaRMSNorm rounds h first and then w·h */
    bool bf16_rope_f32;         /* bf16 compute: q·cos + rotate_half(q)·sin is computed in f32 and rounded once, with
                                   f32 cos and sin (OlmoRotaryEmbedding / Olmo2RotaryEmbedding return them so), or
                                   with bf16_trig, cos and sin rounded to bf16 first (Cohere's rotary embedding casts
                                   them to x's dtype, its apply_rotary_pos_emb computes in float) */
    bool bf16_trig;
    const char *bf16_none;      /* no bf16 pass: why (--dtype bf16's refusal says it), or NULL */
    bool bf16_norm_f32;         /* bf16 compute: the RMSNorms' weights stay f32 (GPT-OSS's _keep_in_fp32_modules: the
                                   input, post-attention and final norms are not cast by torch_dtype=bfloat16) */
    bool bf16_ln_centered;      /* bf16 compute: the LayerNorm is w·((x − mean)·rsqrt(var + eps)) in f32, one rounding
                                   (CohereLayerNorm), where nn.LayerNorm's kernel computes (x·rstd + (−rstd·mean))·w + b */
    /* where the layer differs from the common decoder (0: as the common decoder) */
    bool no_pre_norms;          /* no input norms: attention and MLP read the residual stream as is (OLMo 2) */
    bool post_norms;            /* each branch's output is RMS-normed before its residual add (OLMo 2, Gemma 2) */
    bool qk_norm_full;          /* q_norm / k_norm span the whole q / k projection, before the head split (OLMo 2) */
    int gguf_nope_step;         /* llama.cpp's n_no_rope_layer_step: in a GGUF file of it, every step-th layer
                                   has no RoPE (SmolLM3: 4); config.json says per layer */
    bool moe_topk_softmax;      /* the router weighs the k largest logits by a softmax over those k (Granite MoE),
                                   else by the softmax over all (renormalised as norm_topk_prob says) */
    bool hf_experts_fused;      /* HF experts stacked: a [E, 2·I, H] gate|up tensor and an [E, H, I] down tensor
                                   (Granite MoE's input_linear / output_linear), split at load and by convert */
    bool fused_qkv;             /* q, k and v are one matrix (rows q | k | v: Phi3's qkv_proj, llama.cpp's attn_qkv),
                                   bound as ROLE_WQKV and split at load */
    bool fused_gate_up;         /* gate and up are one matrix (rows gate | up: Phi3's gate_up_proj, llama.cpp's
                                   2·n_ff-row ffn_up), bound as ROLE_GATE_UP and split at load */
    bool embd_sqrt;             /* the embeddings × sqrt(n_embd), a number held in the compute type (Gemma's
                                   normalizer: torch.tensor(hidden_size**0.5, dtype)) */
    bool layer_norm;            /* LayerNorms (mean subtracted), eps from the row's eps_key / GGUF
                                   attention.layer_norm_epsilon (StableLM, Starcoder2, Cohere) */
    bool norm_bias;             /* the LayerNorms have biases (input_layernorm.bias ...; GGUF attn_norm.bias ...) */
    bool norm_none;             /* the norms have no weight (nor bias): no norm tensors, x·1 (OLMo's OlmoLayerNorm) */
    bool attn_sinks;            /* each head's sink logit joins the softmax's denominator (GPT-OSS's self_attn.sinks;
                                   GGUF attn_sinks.weight: ROLE_SINKS) */
    bool moe_oai;               /* GPT-OSS's experts: a router bias, biases on every expert matrix, the clamped SwiGLU
                                   (hp.swiglu_limit); HF stacks them as mlp.experts.gate_up_proj [E, H, 2I] (gate and
                                   up columns interleaved) and down_proj [E, I, H], transposed at load */
    bool linear_bias;           /* o_proj and the MLP's linears have biases when config.json says (Starcoder2's
                                   use_bias; GGUF attn_output.bias, ffn_up.bias, ffn_down.bias) */
    bool mlp_plain;             /* the MLP is down(act(up(x))), no gate (Starcoder2's c_fc / c_proj) */
    bool gguf_window;           /* a GGUF file's attention.sliding_window applies to every layer (caldrix's convert
                                   writes it; llama.cpp's starcoder2 has no window) */
    bool hf_rope_adjacent;      /* transformers rotates interleaved pairs (2i, 2i+1) (Cohere's rotate_half), as
                                   ggml's normal RoPE: the converter does not permute q/k */
    bool gguf_logit_mul;        /* a GGUF file's logit_scale multiplies the logits (llama.cpp's command-r; granite's
                                   gguf_scales divide by it) */
    bool gguf_optional;         /* llama.cpp loads its q/k/v biases and FFN norm as optional tensors (StableLM): a
                                   GGUF file's layer 0 says whether it has biases, and no FFN norm = parallel */
    /* convert (llama.cpp's convert_hf_to_gguf.py) */
    bool gguf_vocab_rope_keys;  /* LlamaModel.set_gguf_parameters: <arch>.vocab_size, rope.dimension_count */
    bool gguf_rope_freqs;       /* LlamaModel: rope_freqs.weight for rope_scaling llama3 */
    bool gguf_scales;           /* the scalings outside the layers (hparams embd_scale ...) as llama.cpp's
                                   granite keys: embedding_scale, residual_scale, attention.scale,
                                   logit_scale (the logits' divisor) */
    /* GGUF files of the family (llama.cpp's src/models/<arch>.cpp) */
    bool gguf_gemma;            /* llama.cpp's Gemma keys: the softcaps, attention.sliding_window(_pattern),
                                   rope.freq_base_swa, rope.scaling linear; the activation of the config row;
                                   the converter writes them, adds 1 to the norms and drops lm_head */
    int gguf_swa_period;        /* sliding_window_pattern's default: layer l slides iff l % p < p - 1 */
    bool gguf_yarn_untruncated; /* convert writes a YaRN whose truncate is false (every published checkpoint of the
                                   family says so; GGUF has no key): llama.cpp and caldrix on the file floor/ceil
                                   the correction range (GPT-OSS) */
    int64_t gguf_swa_default;   /* attention.sliding_window when absent (Gemma2: 4096); 0: no window */
    bool gguf_swa_all;          /* attention.sliding_window (0: none) over every layer; convert writes it */
    int64_t gguf_scale_layers;  /* llama.cpp's 27B rule: at this block count the softmax scale is
                                   (n_embd / n_head)^-½ (Gemma2/3-27B's query_pre_attn_scalar), else head_dim^-½ */
    bool bitnet;                /* BitNet b1.58: attn_sub_norm before o_proj, ffn_sub_norm before down_proj (roles
                                   ROLE_ATTN_SUB_NORM, ROLE_FFN_SUB_NORM); a checkpoint's BitLinear weights
                                   (cdx_hf_config.bitlinear: layer_weights.bit); a GGUF file's "<name>.scale" */
    const role_name *names;     /* its own tensor names, or NULL */
    bool mrope;                 /* multimodal RoPE (hp.rope_sections): config.json's mrope_section, GGUF
                                   rope.dimension_sections (required, as llama.cpp's qwen2vl requires it) */
    const char *vl_text_only;   /* a vision-language family run as its text model: why a request with images is
                                   refused (what the image refusal and inspect say); its checkpoint's visual.* and
                                   model.visual.* tensors are skipped unread, model.language_model.* read as model.* */
    bool encoder;               /* a bidirectional encoder (BERT, XLM-R): its own binding and pass (encoder.c),
                                   no KV cache; run by cdx_encode, never by cdx_forward */
} arch_desc;

/* The row of a GGUF general.architecture; experts: the file has <arch>.expert_count > 0 (a "llama"
 * file with experts is Mixtral). NULL: none. */
const arch_desc *arch_by_gguf(const char *name, size_t len, bool experts);
const arch_desc *arch_by_hf(cdx_hf_arch a); /* config.h names the architectures */
const arch_desc *arch_get(cdx_arch a);
/* "Llama, Mistral and Qwen2": the titles of the config.json architectures of the families pick takes. */
void arch_titles(bool (*pick)(const arch_desc *d), char *out, size_t cap);

/* Tensor roles: one row each, with the GGUF and HF names ("%d" = layer). */
/* In the order a layer's tensors are written (llama.cpp's converter order, which synth and
 * cdx_model_tensor_specs follow): per layer the norm, attention or Gated DeltaNet, the FFN norm, the MLP. */
typedef enum {
    ROLE_TOK_EMBD, ROLE_OUT_NORM, ROLE_OUT_NORM_B, ROLE_OUTPUT, ROLE_ROPE_FREQS,
    ROLE_ROPE_LONG, ROLE_ROPE_SHORT, /* GGUF LongRoPE factors (llama.cpp's rope_factors_long / _short) */
    ROLE_ATTN_NORM, ROLE_ATTN_NORM_B, ROLE_WQKV, ROLE_WQ, ROLE_WK, ROLE_WV, ROLE_WO, ROLE_BQ, ROLE_BK, ROLE_BV, ROLE_BO,
    ROLE_QNORM, ROLE_KNORM, ROLE_SINKS,
    /* Gated DeltaNet (Qwen3.5 linear attention) */
    ROLE_SSM_QKV, ROLE_SSM_Z, ROLE_SSM_CONV, ROLE_SSM_DT, ROLE_SSM_ALOG, ROLE_SSM_B, ROLE_SSM_A, ROLE_SSM_NORM,
    ROLE_SSM_OUT,
    ROLE_ATTN_POST_NORM, /* arch_desc.post_norms: the attention output's norm */
    ROLE_ATTN_SUB_NORM,  /* arch_desc.bitnet: the attention's output normed before o_proj */
    ROLE_FFN_NORM, ROLE_FFN_NORM_B, ROLE_GATE_UP, ROLE_GATE, ROLE_UP, ROLE_UP_B, ROLE_DOWN, ROLE_DOWN_B,
    ROLE_FFN_POST_NORM,  /* arch_desc.post_norms: the MLP output's norm */
    ROLE_FFN_SUB_NORM,   /* arch_desc.bitnet: act(gate)·up normed before down_proj */
    ROLE_COUNT
} tensor_role;

/* Whether r is a norm's scale (an RMSNorm weight: what a norm offset shifts). */
static inline bool arch_role_is_norm(tensor_role r)
{
    return r == ROLE_ATTN_NORM || r == ROLE_FFN_NORM || r == ROLE_OUT_NORM || r == ROLE_QNORM || r == ROLE_KNORM ||
           r == ROLE_ATTN_POST_NORM || r == ROLE_FFN_POST_NORM || r == ROLE_ATTN_SUB_NORM || r == ROLE_FFN_SUB_NORM;
}

/* The GGUF ("blk.%d.attn_q.weight") or HF ("model.layers.%d.self_attn.q_proj.weight") name pattern of
 * a role in family d (its own names first: Qwen3.5's GGUF FFN norm is blk.%d.post_attention_norm);
 * NULL where the format has no such tensor (HF has no rope_freqs). *per_layer: "%d" is the layer. */
const char *arch_role_name_of(const arch_desc *d, tensor_role r, bool gguf, bool *per_layer);
/* The same for a mixture-of-experts role ("%d" the layer, then for HF's per-expert names the expert). */
const char *arch_moe_name_of(const arch_desc *d, moe_role r, bool gguf);

/* A transformers mixture-of-experts tensor name (router, an expert's gate/up/down, the shared
 * expert) → its llama.cpp GGUF name ("blk.L.ffn_gate_exps.weight": experts stacked, so *expert says
 * which slice, -1 for the others); *role is 0 for the router. False: not an expert-layer tensor. */
bool arch_moe_hf_name(cdx_arch arch, const char *hf, char *gguf, size_t cap, int *layer, int *expert, int *role);

/* BitNet's linears, in the order of layer_weights' matrices wq, wk, wv, wo, gate, up, down. */
enum { BIT_Q, BIT_K, BIT_V, BIT_O, BIT_GATE, BIT_UP, BIT_DOWN, BIT_COUNT };

/* A BitLinear's weights (transformers' integrations/bitnet.py, offline): the ternary matrix unpacked from the
 * checkpoint's U8 bytes, and weight_scale: y = Σ q(x)·t / (ws · 127/absmax(x)) (ops.c's model_bitlinear). */
typedef struct bit_mat {
    int8_t *t;                          /* [rows × cols] -1, 0, +1 (owned); NULL: not a BitLinear */
    int64_t rows, cols;
    float ws;                           /* weight_scale, as an f32 */
} bit_mat;

typedef struct layer_weights {
    float *attn_norm, *ffn_norm;        /* [n_embd] owned f32 copies; NULL where arch_desc.no_pre_norms */
    float *attn_post_norm, *ffn_post_norm; /* [n_embd] (arch_desc.post_norms) or NULL */
    float *attn_norm_b, *ffn_norm_b;    /* [n_embd] the LayerNorms' biases (arch_desc.norm_bias) or NULL */
    float *bo, *b_up, *b_down;          /* [n_embd], [n_ff], [n_embd]: o_proj's and the MLP's biases (hp.linear_bias)
                                           or NULL */
    float *bq, *bk, *bv;                /* [n_head*hd], [n_head_kv*hd] or NULL */
    float *q_norm, *k_norm;             /* [head_dim] or NULL; [n_head·head_dim], [n_head_kv·head_dim] when
                                           hp.qk_norm_full */
    cdx_mat wq, wk, wv, wo;             /* [n_head*hd × n_embd], [n_kv*hd × n_embd] ×2, [n_embd × n_head*hd] */
    cdx_mat gate, up, down;             /* [n_ff × n_embd] ×2, [n_embd × n_ff]; unused (data NULL) when moe */
    /* a sparse (mixture-of-experts) layer */
    bool moe;
    cdx_mat router;                     /* [n_expert × n_embd] */
    cdx_mat *exp_gate, *exp_up, *exp_down; /* [n_expert] each: [n_ff_expert × n_embd] ×2, [n_embd × n_ff_expert] */
    cdx_mat sh_gate, sh_up, sh_down;    /* shared expert: [n_ff_shared × n_embd] ×2, [n_embd × n_ff_shared] */
    cdx_mat sh_router;                  /* [1 × n_embd]: the shared expert's sigmoid gate */
    float *sinks;                       /* [n_head] attention sink logits (arch_desc.attn_sinks) or NULL */
    float *router_b;                    /* [n_expert] the router's bias (arch_desc.moe_oai) or NULL */
    float *exp_b_gate, *exp_b_up, *exp_b_down; /* [n_expert][n_ff_expert] ×2, [n_expert][n_embd] (moe_oai) or NULL */
    void *exp_own;                      /* the experts' transposed copies (moe_oai, HF) or NULL */
    size_t exp_own_bytes;
    /* a Gated DeltaNet layer (Qwen3.5): wq..wo, q_norm, k_norm unused */
    bool linear;
    cdx_mat ssm_qkv;                    /* [2·nk·dk + nv·dv × n_embd]: rows q | k | v (the conv's channels) */
    cdx_mat ssm_z, ssm_b, ssm_a;        /* [nv·dv × n_embd], [nv × n_embd] ×2 */
    cdx_mat ssm_out;                    /* [n_embd × nv·dv] */
    float *ssm_conv;                    /* [conv channels][conv_k]: tap conv_k-1 multiplies the current token */
    float *ssm_dt;                      /* [nv] dt_bias */
    float *ssm_a_neg;                   /* [nv] -exp(A_log) */
    float *ssm_norm;                    /* [dv] the gated RMSNorm's weight (no offset) */
    /* BitNet (arch_desc.bitnet) */
    float *attn_sub_norm, *ffn_sub_norm; /* [n_head·head_dim], [n_ff] */
    bit_mat bit[BIT_COUNT];             /* a checkpoint's BitLinears (cdx_hf_config.bitlinear), else t NULL */
    float lin_scale[BIT_COUNT];         /* a GGUF file's "<name>.scale" (llama.cpp's wq_s ...): the output × it; 0: none */
} layer_weights;

struct cdx_model {
    cdx_hparams hp;
    const arch_desc *desc;
    cdx_gguf *gguf;                     /* owned when loaded from GGUF */
    cdx_safetensors *st;                /* owned when loaded from a checkpoint */
    cdx_mat tok_embd;                   /* [n_vocab × n_embd] */
    cdx_mat output;                     /* [n_vocab × n_embd] (tok_embd when tied) */
    float *out_norm;                    /* [n_embd] */
    float *cls_out, *cls_out_b;         /* hp.gguf_rank: cls.output.weight [n_cls_out × n_embd] and its bias (or NULL) */
    float *out_norm_b;                  /* [n_embd] its bias (arch_desc.norm_bias) or NULL */
    float *inv_freq;                    /* [n_rot/2]: the RoPE frequencies, scaling applied */
    float *inv_freq_swa;                /* [n_rot/2]: the sliding layers' (hp.rope_theta_swa), or NULL */
    float *inv_freq_long;               /* [n_rot/2]: LongRoPE's long factors (inv_freq holds the short), or NULL */
    float *bf16_freq, *bf16_freq_swa;   /* [n_rot/2]: inv_freq and inv_freq_swa unscaled, as transformers computes them in
                                           f32 (the bf16 pass rotates with these); NULL where scaled or factored, but
                                           for LongRoPE: its short factors' (inv_freq's), and YaRN's scaled ones */
    float *bf16_freq_long;              /* [n_rot/2]: LongRoPE's long factors' as transformers computes them, or NULL */
    uint8_t *swa_layers;                /* [n_layer] (hp.swa_layers) or NULL */
    layer_weights *layers;              /* [n_layer] */
    cdx_mat **mats;                     /* [n_mats]: every weight matrix (output last), for packing and sizing */
    uint8_t *linear_layer;              /* [n_layer] (hp.linear_layer) or NULL */
    uint8_t *nope_layer;                /* [n_layer] (hp.nope_layer) or NULL */
    size_t n_mats;
    char notes[512];
    /* The weights in a kernel set's load-time layout (cdx_matmul_pack), made by the first forward
     * context that runs on that set: a cache of the weights, so packing goes through a const model. */
    pthread_mutex_t pack_mu;
    const cdx_kernels *packed_k;
    void **packs;                       /* [n_packs]: per matrix (mats order) its owned buffer or NULL */
    const void **orig_data;             /* [n_packs]: w->data before a copy replaced it, or NULL */
    size_t n_packs;
    struct packer *packer;              /* the matrices packed in the background (model_load.c), or NULL */
    pthread_rwlock_t use_lock;          /* held shared by every forward pass; packs are installed under it exclusively */
    struct expert_cache *xc;            /* experts streamed under a weight budget (expert_cache.h), or NULL */
    /* the compute type (model_dtype.c): CDX_DTYPE_F32 or CDX_DTYPE_BF16, and why it was chosen */
    cdx_dtype dtype;
    const char *dtype_why;
    void **bf16_bufs;                   /* [n_bf16_bufs]: owned bf16 copies of F32/F16 matrices (--dtype bf16) */
    bool file_mapped;                   /* the weights are a read-only file mapping (cdx_model_open) */
    cdx_weights_io weights_io;          /* cdx_model_opts.weights_io, for model_pack */
    bool gelu_f16;                      /* a GGUF file's GELU is llama.cpp's: ggml's f16 table (ops.h) */
    bool check_only;                    /* cdx_model_check: bound and checked, no tensor data read (vectors are zeros) */
    size_t n_bf16_bufs;
    struct vision_model *vision;        /* the vision tower (arch_desc.vision), or NULL */
    struct encoder_model *enc;          /* an encoder's weights (arch_desc.encoder), or NULL */
};

/* ---- encoders (encoder.c) ---- */

/* Binds an encoder checkpoint's tensors (config.json read into cfg; the safetensors of dir opened
 * here into m->st): every name, shape and type checked, the unused pooler skipped, anything else
 * refused by name. Fills the encoder's part of m->hp. */
int encoder_bind(cdx_model *m, const cdx_hf_config *cfg, const char *dir, cdx_err *err);
void encoder_free(struct encoder_model *e);
/* The same from a GGUF file of llama.cpp's "bert" architecture (m->desc and the common keys read):
 * its LayerNorm eps, token_types rows, pooling_type (hp.gguf_pooling; none and rank refused by name),
 * and caldrix.embedding.normalize. */
int encoder_bind_gguf(cdx_model *m, const cdx_gguf *g, cdx_err *err);
/* A GGUF file's <arch>.pooling_type (llama.cpp's LLAMA_POOLING_TYPE) into hp.gguf_pooling, and
 * caldrix.embedding.normalize: an encoder's mean 1 / cls 2 / last 3 (none 0 and rank 4 refused); a
 * decoder's the same, none 0 read as undeclared, and rank 4 (Qwen3-Reranker) as hp.gguf_rank with the
 * yes/no rows of <arch>.classifier.output_labels. */
int gguf_read_pooling(cdx_model *m, const cdx_gguf *g, cdx_err *err);
/* llama.cpp's GGUF name of a BertModel tensor ("encoder.layer.3.output.dense.weight" ->
 * "blk.3.ffn_down.weight"); false: none. */
bool encoder_gguf_name(const char *hf, char *out, size_t cap);
void encoder_tensor_names(int64_t n_layer, bool gguf, void (*fn)(void *ctx, const char *name, bool required), void *ctx);
/* ---- RoPE frequencies (rope.c) ---- */

/* A model's RoPE scaling, from config.json's rope_scaling or a GGUF file's rope.scaling.* keys. */
typedef struct rope_scaling {
    cdx_hf_rope_type type;
    double factor, low_freq_factor, high_freq_factor;
    double attn_factor;                 /* yarn, longrope: as given; 0: the kind's rule */
    double beta_fast, beta_slow, mscale, mscale_all_dim; /* yarn; 0: absent */
    bool truncate;                      /* yarn */
    int64_t orig_ctx;                   /* original_max_position_embeddings */
    int64_t max_pos;                    /* max_position_embeddings (dynamic) */
    const float *short_f, *long_f;      /* longrope: [n_rot/2] each */
} rope_scaling;

/* m->inv_freq (and inv_freq_long, inv_freq_swa) for m->hp, divided by freq_factors ([n_rot/2], GGUF's
 * rope_freqs.weight) where given, scaled as rs says (NULL: not), and hp's per-pass fields and attention
 * factor set; the kinds refused here are named. */
int rope_init(cdx_model *m, const float *freq_factors, const rope_scaling *rs, const char *path, cdx_err *err);
/* Dynamic NTK: the frequencies of a pass whose sequence is T positions long ([n_rot/2] into out). */
void rope_dynamic_freqs(const cdx_hparams *hp, int64_t T, float *out);

/* ---- the vision tower (vision.c) ---- */

/* Binds the tower's and connector's tensors from a checkpoint (marking used[i] for each tensor i of
 * st it takes) into m->vision; every name, shape and type is checked. */
int vision_bind(cdx_model *m, const cdx_hf_config *cfg, const cdx_safetensors *st, bool *used, cdx_err *err);
void vision_free(struct vision_model *v);
void vision_tensor_names(int64_t n_layer, void (*fn)(void *ctx, const char *name, bool required), void *ctx);
const cdx_model *forward_ctx_model(const cdx_forward_ctx *fc);
/* A 64-byte-aligned buffer of at least `bytes` that stays with fc between calls and is freed with it:
 * for a pass that sizes its scratch per call (the encoder, by its batch's tokens), so that each call
 * does not map fresh pages and fault them in again (glibc unmaps or trims freed blocks of MiBs). It
 * grows to the largest request, keeping nothing of its contents. NULL: out of memory. */
void *forward_ctx_scratch(cdx_forward_ctx *fc, size_t bytes);
/* HF name of role fmt ("model.layers.%d...") for this architecture: the text prefix applied. */
void arch_hf_name(const arch_desc *d, const char *fmt, int layer, int expert, char *out, size_t cap);

/* Packs every matrix k has a layout for (once per model; other sets keep reading w->data) and
 * copies the other matrices onto huge pages unless the file's pages are already mapped that way
 * (then they are read in place; CALDRIX_MMAP=1 reads them in place always, =0 copies always).
 * A matrix k also reads in place with the packed bits (cdx_matmul_in_place), and one that would
 * be copied, is packed or copied by a background thread instead, so the model is ready at once;
 * CALDRIX_MMAP=1 leaves it in place, =0 packs or copies it here. */
int model_pack(const cdx_model *m, const cdx_kernels *k, cdx_pool *pool, cdx_err *err);
/* A forward pass's hold on the weights (model_pack's background packs are installed between passes):
 * model_use_begin installs the packs that are ready when no other pass is running, then holds the
 * weights shared until model_use_end. */
void model_use_begin(const cdx_model *m);
void model_use_end(const cdx_model *m);

/* ---- bf16 compute (model_dtype.c, forward_bf16.c) ---- */

/* Settles m->dtype from what was asked (opts; AUTO: the default of the format and stored type) and,
 * for bf16, casts the weights as transformers' from_pretrained(torch_dtype=bfloat16) does: every
 * matrix to BF16 (BF16 as mapped; F32 and F16 copied, rounded to nearest even), every vector (norm
 * weights, biases) rounded to bf16 values in place. */
int model_set_dtype(cdx_model *m, cdx_dtype want, bool gguf, const char *path, cdx_err *err);
void model_free_dtype(cdx_model *m);
/* Whether p is one of those bf16 copies (already on pages of the model's own: model_pack leaves it). */
static inline bool model_owns_data(const cdx_model *m, const void *p)
{
    for (size_t i = 0; i < m->n_bf16_bufs; i++)
        if (m->bf16_bufs[i] == p)
            return true;
    for (int64_t l = 0; m->layers && l < m->hp.n_layer; l++) { /* GPT-OSS's transposed experts */
        const uint8_t *o = (const uint8_t *)m->layers[l].exp_own;
        if (o && (const uint8_t *)p >= o && (const uint8_t *)p < o + m->layers[l].exp_own_bytes)
            return true;
    }
    return false;
}
/* 64-byte aligned memory, on 2 MiB pages where the kernel offers them (model_pack.c); free() frees it. */
void *huge_alloc(size_t bytes);
/* Stops the background packer and frees every pack and copy model_pack made (cdx_model_close). */
void model_pack_free(cdx_model *m);

struct fwd_scratch; /* ops.h */

/* Why forward_bf16 cannot compute this model of a bf16-pass family (its RoPE scaling, pairing, layers),
 * or NULL: model_set_dtype falls back to f32 (default) or refuses --dtype bf16 at load with it. */
const char *bf16_unsupported(const cdx_model *m);
/* cdx_forward_seqs for a bf16 model, its batch already checked (tokens, sequences, positions). */
int forward_bf16(const cdx_model *m, const struct fwd_scratch *s, const cdx_stage *st, const cdx_kv_seq *seqs, int n_seq,
                 const cdx_batch *b, float *logits, cdx_err *err);

/* After the layers of a stage that ends before the model's last: hands the rows (s->x, s->pos, s->seq)
 * on with st->send (ops.c: forward.c and forward_bf16.c both end a stage with it). */
int forward_stage_send(const cdx_stage *st, const struct fwd_scratch *s, const cdx_kv_seq *seqs, int n_seq,
                       const cdx_batch *b, cdx_err *err);

/* ---- the hybrid forward pass (qwen35.c) ---- */
typedef struct hybrid_ctx hybrid_ctx;
int hybrid_ctx_create(const cdx_model *m, int64_t max_tokens, int n_threads, const cdx_kernels *k, hybrid_ctx **out,
                      cdx_err *err);
void hybrid_ctx_free(hybrid_ctx *h);
void hybrid_set_per_token(hybrid_ctx *h, bool per_token);
/* The pass for a hybrid model once cdx_forward_seqs has checked the batch, placed positions and
 * sequences in s->pos / s->seq and the embeddings in s->x ([n][n_embd]). */
int hybrid_forward(hybrid_ctx *h, const cdx_model *m, const struct fwd_scratch *s, const cdx_kv_seq *seqs, int n_seq,
                   const cdx_batch *b, float *logits, cdx_err *err);

#endif
