/* caldrix model layer: architectures, binding a file's tensors to them, the forward pass.
 *
 *   cdx_model *m;  cdx_model_open("model.gguf", NULL, &m, &err);     // or a checkpoint directory
 *   const cdx_hparams *hp = cdx_model_hparams(m);
 *   ... the engine (caldrix/engine.h) runs it ...
 *   cdx_model_close(m);
 */
#ifndef CALDRIX_MODEL_H
#define CALDRIX_MODEL_H

#include "caldrix/base.h"
#include "caldrix/config.h"
#include "caldrix/format.h"
#include "caldrix/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The families caldrix runs, one line each: the enum below and the model layer's table of family
 * rows (src/model/arch.c, one file src/model/arch/<file>.c per family) both come from this list.
 * Public: a new family goes at the end. */
#define CDX_FAMILIES(X)                                                                                  \
    X(LLAMA, llama)         /* Llama, Mistral (GGUF "llama") */                                          \
    X(QWEN2, qwen2)                                                                                      \
    X(QWEN3, qwen3)                                                                                      \
    X(QWEN3_MOE, qwen3_moe)                                                                              \
    X(QWEN2_MOE, qwen2_moe)                                                                              \
    X(MIXTRAL, mixtral)     /* HF MixtralForCausalLM; GGUF files of it are "llama" with experts */       \
    X(IDEFICS3, idefics3)   /* HF Idefics3ForConditionalGeneration (SmolVLM): Llama text + a vision tower */ \
    X(QWEN3_5, qwen3_5)     /* Qwen3.5: Gated DeltaNet layers beside gated full attention (GGUF "qwen35") */ \
    X(GRANITE, granite)     /* Granite: Llama with scalings outside the layers */                          \
    X(SMOLLM3, smollm3)     /* SmolLM3: Llama with NoPE layers */                                          \
    X(OLMO2, olmo2)         /* OLMo 2: post-norms, q/k norms over the whole projection */                  \
    X(OLMOE, olmoe)         /* OLMoE: whole-projection q/k norms, experts on every layer */                \
    X(GRANITEMOE, granitemoe) /* Granite MoE: Granite's scalings, top-k-then-softmax router */             \
    X(GEMMA, gemma)         /* Gemma: (1 + w) norms, embeddings × sqrt(hidden), GeGLU */                    \
    X(GEMMA2, gemma2)       /* Gemma2: + post norms, softcaps, query_pre_attn_scalar, windows on even layers */ \
    X(GEMMA3, gemma3)       /* Gemma3 (text): + q/k norms, 5:1 windows, the sliding layers' own RoPE base */ \
    X(BERT, bert)           /* BERT and XLM-RoBERTa encoders (embeddings): src/model/encoder.c */           \
    X(PHI3, phi3)           /* Phi-3: fused qkv and gate|up, partial rotary, LongRoPE */                   \
    X(STABLELM, stablelm)   /* StableLM: LayerNorms with bias, partial rotary, optional parallel block */  \
    X(STARCODER2, starcoder2) /* Starcoder2: LayerNorms, biases on every linear, plain GELU MLP, a window */  \
    X(COHERE, cohere)       /* Cohere (Command R): LayerNorms, the parallel block, interleaved RoPE, logit_scale */ \
    X(OLMO, olmo)           /* OLMo (v1): LayerNorms without weight or bias, clip_qkv */                   \
    X(GPT_OSS, gpt_oss)     /* GPT-OSS: attention sinks, biased experts with a clamped SwiGLU, windows */  \
    X(BITNET, bitnet)       /* BitNet b1.58: BitLinear (ternary weights, int8 activations), sub-norms, relu2 */ \
    X(QWEN2VL, qwen2vl)     /* Qwen2-VL, Qwen2.5-VL text path: Qwen2 with the multimodal RoPE (GGUF "qwen2vl") */ \
    /* a new family: one line above this one */

typedef enum cdx_arch {
#define CDX_X_(name, file) CDX_ARCH_##name,
    CDX_FAMILIES(CDX_X_)
#undef CDX_X_
    CDX_ARCH_COUNT
} cdx_arch;

typedef enum cdx_rope_mode {
    CDX_ROPE_ADJACENT = 0, /* rotate pairs (2i, 2i+1): GGUF "llama" (q/k rows permuted by the converter) */
    CDX_ROPE_HALVES = 1,   /* rotate pairs (i, i + d/2): HF rotate_half, GGUF NeoX (qwen2/qwen3) */
} cdx_rope_mode;

#define CDX_MAX_EOS 8

typedef struct cdx_hparams {
    cdx_arch arch;
    const char *arch_name;   /* "llama", "qwen2", ... */
    int64_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int64_t n_ctx_train;
    float rms_eps;
    double rope_theta;
    cdx_rope_mode rope_mode;
    int64_t n_rot;           /* rotated dims per head (= head_dim for the supported families) */
    int64_t sliding_window;  /* 0: none; else a query at q sees keys q-W < k <= q */
    bool qkv_bias, qk_norm, tied_embeddings;
    /* mixture of experts (n_expert == 0: dense) */
    int64_t n_expert, n_expert_used, n_ff_expert, n_ff_shared;
    bool norm_topk_prob;
    int32_t bos_id;          /* -1: none */
    int32_t eos_ids[CDX_MAX_EOS];
    int n_eos;
    /* hybrid models (Qwen3.5): Gated DeltaNet ("linear attention") layers with a recurrent state
     * beside gated full-attention layers; 0 / NULL for every other architecture */
    const uint8_t *linear_layer;   /* [n_layer]: non-zero for a Gated DeltaNet layer; NULL: none */
    int64_t n_layer_kv;            /* layers with K/V in the cache (the full-attention ones); 0: n_layer */
    int64_t ssm_n_k_head, ssm_n_v_head, ssm_d_k, ssm_d_v, ssm_conv_k;
    bool attn_gate;                /* q_proj gives per head [query | gate]; the output is × sigmoid(gate) */
    bool ssm_v_tiled;              /* value head j reads key head j mod key heads (llama.cpp's GGUF order);
                                    * false: j / (value heads / key heads), transformers' order */
    /* scalings outside the layers (Granite; config.h's cdx_hf_scale); 0: none */
    float embd_scale;              /* x = embed(tokens) · embd_scale */
    float residual_scale;          /* x += branch · residual_scale, for the attention and the MLP */
    float attn_scale;              /* the softmax scale in place of head_dim^-½ */
    float logit_div;               /* logits = head(x) / logit_div */
    /* per-family attention details; 0 / NULL for the common decoder */
    const uint8_t *nope_layer;     /* [n_layer]: non-zero for a layer without RoPE (SmolLM3); NULL: none */
    bool qk_norm_full;             /* q/k norms over the whole projection before the head split (OLMo 2,
                                      OLMoE), else per head (Qwen3) */
    float clip_qkv;                /* q, k, v clamped to ±clip_qkv after the q/k norms (OLMoE); 0: none */
    float swiglu_limit, swiglu_alpha; /* GPT-OSS's experts: gate clamped above and up to ±limit, then
                                      (up + 1)·gate·sigmoid(alpha·gate); 0: SwiGLU */
    bool moe_topk_softmax;         /* experts weighed by a softmax over the k largest router logits (Granite
                                      MoE), else the softmax over all, renormalised when norm_topk_prob */
    /* Gemma's hooks (0 / NULL: the common decoder's) */
    cdx_hf_act act;                /* the gated MLP's activation: SiLU (SwiGLU) or tanh-GELU (GeGLU) */
    float attn_softcap;            /* attention scores = cap·tanh(scores/cap) before the mask; 0: none */
    float final_softcap;           /* logits = cap·tanh(logits/cap), after logit_div; 0: none */
    const uint8_t *swa_layers;     /* [n_layer]: non-zero where sliding_window applies; NULL: every layer */
    double rope_theta_swa;         /* RoPE base of the sliding layers (Gemma3's rope_local_base_freq, never
                                    * scaled); 0: they rotate as the others */
    /* an encoder (BERT, XLM-R: cdx_encode); rms_eps is then its LayerNorm eps */
    bool encoder;
    int64_t n_type_vocab;          /* token_type_embeddings rows (type 0 is added to every token) */
    int64_t pos_offset;            /* the position id of an input's first token (XLM-R: pad_token_id + 1) */
    int gguf_pooling;              /* a GGUF encoder's <arch>.pooling_type: 1 + its cdx_pooling; 0: none declared */
    bool gguf_normalize;           /* a GGUF encoder's caldrix.embedding.normalize (caldrix convert: modules.json
                                      lists Normalize) */
    /* a GGUF decoder with <arch>.pooling_type 4 (rank, llama.cpp's Qwen3-Reranker conversion): the last token's
     * final hidden state through cls.output.weight ([n_cls_out × n_embd], one row per label of
     * <arch>.classifier.output_labels), softmax over the labels; cdx_model_cls_logits */
    bool gguf_rank;
    int n_cls_out;                 /* the labels (2: "yes", "no") */
    int cls_yes, cls_no;           /* the rows of the labels "yes" and "no" */
    /* RoPE scaling that depends on the pass (transformers' dynamic_rope_update), on top of the
     * frequencies scaled at load (linear, llama3, yarn; src/model/rope.c); 0: none */
    int rope_pass;                 /* CDX_ROPE_PASS_*: how a sequence's length T (its last position in the
                                      pass + 1) picks its frequencies */
    int64_t rope_pass_ctx;         /* dynamic: max_position_embeddings; longrope: original_max_position_embeddings */
    double rope_pass_factor;       /* dynamic: rope_scaling.factor */
    float rope_attn_factor;        /* cos and sin × this (YaRN's, LongRoPE's attention factor); 0: 1 */
    /* the LayerNorm families' hooks (0: the common decoder's) */
    bool layer_norm;               /* the norms are LayerNorms (mean subtracted; a bias where the model has one),
                                      rms_eps their epsilon */
    bool parallel_residual;        /* x + attn(norm(x)) + mlp(norm(x)): no FFN norm (Cohere, StableLM's
                                      use_parallel_residual) */
    bool linear_bias;              /* o_proj and the MLP's linears add biases (Starcoder2's use_bias) */
    bool mlp_plain;                /* the MLP is down(act(up(x))): no gate (Starcoder2) */
    bool bitlinear;                /* BitNet's BitLinears: packed ternary weights, int8 activations per token */
    float logit_scale;             /* logits = head(x) · logit_scale (Cohere); 0: none */
    /* multimodal RoPE (Qwen2-VL: config.json's mrope_section, GGUF rope.dimension_sections): rotated pair i
     * (i < n_rot / 2) turns by the position of the section it falls in, temporal | height | width | extra
     * (cdx_batch.pos_sections); all 0: one position per token */
    int32_t rope_sections[4];
} cdx_hparams;

enum {
    CDX_ROPE_PASS_NONE = 0,
    CDX_ROPE_PASS_DYNAMIC,   /* NTK: past rope_pass_ctx the base grows with T (_compute_dynamic_ntk_parameters) */
    CDX_ROPE_PASS_LONGROPE,  /* the long factors once T > rope_pass_ctx, for every position: the cached keys
                                are re-rotated when a sequence first passes it (Phi3's generation drops its
                                cache there and recomputes) */
};

/* The window layer l attends over: sliding_window on a sliding layer, else 0 (every position). */
static inline int64_t cdx_hparams_window(const cdx_hparams *hp, int64_t l)
{
    return hp->sliding_window > 0 && (!hp->swa_layers || hp->swa_layers[l]) ? hp->sliding_window : 0;
}

/* Layers with K/V in the cache: the KV block layout's layer count. */
static inline int64_t cdx_hparams_kv_layers(const cdx_hparams *hp)
{
    return hp->n_layer_kv > 0 ? hp->n_layer_kv : hp->n_layer;
}

typedef struct cdx_model cdx_model;

/* ---- the tensors an architecture reads (the loader's own tables; inspect reads them too) ---- */

typedef struct cdx_tensor_plan {
    cdx_arch arch;
    bool gguf;               /* llama.cpp's names (experts stacked per layer), else transformers' */
    int64_t n_layer, n_expert;
    const uint8_t *sparse;   /* [n_layer]: non-zero for a mixture-of-experts layer; NULL: none */
    const uint8_t *linear;   /* [n_layer]: non-zero for a Gated DeltaNet layer (Qwen3.5); NULL: none */
    int qkv_bias;            /* -1: as the architecture has them; 0/1: as config.json says (Qwen2-MoE's qkv_bias) */
    bool untied;             /* the output head is a tensor of its own, required */
    int64_t n_vision_layer;  /* vision-language models: the tower's layers (vision_config.num_hidden_layers) */
    bool text_config;        /* HF: the text model's tensors are under model.language_model. (Qwen3.5 VL) */
    bool parallel;           /* one norm per layer (config.json's use_parallel_residual): no FFN norm */
    bool bitlinear;          /* HF BitNet under quantization_config bitnet: each linear's weight (packed U8) has its
                                "<name>.weight_scale" beside it */
} cdx_tensor_plan;

/* Calls fn once per tensor name the loader looks up for plan, in the loader's order: required
 * (missing: the load is refused) or optional (rope_freqs.weight; a head beside tied embeddings).
 * Every tensor of a file that is not named here is refused as unused. */
/* The architecture the loader makes of a config.json architectures[0] (gguf false) or a GGUF
 * general.architecture (gguf true; "llama" with experts is Mixtral). False: not one it runs. */
CDX_API bool cdx_model_arch_of(const char *name, bool gguf, bool experts, cdx_arch *out);
/* transformers' model_type of an architecture's family ("llama", "qwen3_moe", "mixtral"); NULL out of range. */
CDX_API const char *cdx_model_arch_family(cdx_arch a);
/* "llama, qwen2, ...": the GGUF general.architecture values the table maps (Mixtral: "llama with
 * experts"), for messages and `caldrix doctor`. */
CDX_API void cdx_model_gguf_archs(char *out, size_t cap);
/* What the import says of a config.json architecture beyond its family ("" or e.g. "accepted, not
 * verified on hardware"); NULL out of range. `caldrix models supported --all` and docs list it. */
CDX_API const char *cdx_model_hf_arch_note(cdx_hf_arch a);
CDX_API void cdx_model_tensor_names(const cdx_tensor_plan *plan, void (*fn)(void *ctx, const char *name, bool required),
                                    void *ctx);

/* What a tensor's values are, as a fresh model is initialised (synth draws the others at random). */
typedef enum cdx_tensor_kind {
    CDX_TENSOR_WEIGHT = 0, /* a matrix, bias or other vector */
    CDX_TENSOR_NORM,       /* a norm's scale (1 at init) */
    CDX_TENSOR_DECAY,      /* Gated DeltaNet's decay: GGUF's ssm_a = -exp(A_log), -1 at A_log = 0 */
} cdx_tensor_kind;

/* One tensor the loader binds, with the shape it checks (from hp): rows × cols, n_mat of them stacked
 * (a GGUF expert stack), written in n_dims dimensions (1: a vector of cols values). */
typedef struct cdx_tensor_spec {
    const char *name;        /* the plan's format; valid during the call */
    const char *hf_name;     /* a GGUF plan: the transformers name of the same tensor, NULL where none (a stack) */
    int64_t rows, cols, n_mat;
    int n_dims;
    bool required;
    cdx_tensor_kind kind;
} cdx_tensor_spec;

/* cdx_model_tensor_names with shapes, in the order llama.cpp's converter writes a file: the token
 * embedding, each layer, the output norm and head (optional tensors included, required false).
 * hp gives the dimensions (n_embd, n_head, ..., n_expert, the ssm_* of a hybrid model). */
CDX_API void cdx_model_tensor_specs(const cdx_tensor_plan *plan, const cdx_hparams *hp,
                                    void (*fn)(void *ctx, const cdx_tensor_spec *t), void *ctx);

/* ---- the compute type ---- */

typedef enum cdx_dtype {
    CDX_DTYPE_AUTO = 0,  /* the default for the format and stored type (cdx_dtype_choose) */
    CDX_DTYPE_F32,       /* f32 activations; F16/BF16 weights read exactly (GGUF: as ggml rounds them) */
    CDX_DTYPE_BF16,      /* transformers' bf16 forward: bf16 weights and activations, f32 sums */
    CDX_DTYPE_COUNT
} cdx_dtype;

CDX_API const char *cdx_dtype_name(cdx_dtype d);            /* "auto", "f32", "bf16"; "?" out of range */
CDX_API int cdx_dtype_from_name(const char *s, cdx_dtype *out); /* CDX_EINVAL for another name */
/* The one table of compute types: what a model of this format (gguf), stored weight type (the
 * type most of its matrices have) and architecture computes in when `want` is asked (AUTO: its
 * default). f32_only: this model of a bf16-pass family has a part the bf16 pass does not compute
 * (dynamic or YaRN scaling: cdx_dtype_rope_f32_only; the loader also checks its layers).
 * *why: a phrase saying why (static storage), for inspect and the run summary. CDX_EUNSUPPORTED,
 * with err saying why, when want cannot be honoured (bf16 for a GGUF file, an architecture without
 * a bf16 forward pass, or f32_only). */
CDX_API int cdx_dtype_choose(bool gguf, uint32_t stored_type, cdx_arch arch, bool f32_only, cdx_dtype want,
                             cdx_dtype *out, const char **why, cdx_err *err);
/* Whether a config's rope_scaling kind is computed in f32 only (the bf16 pass has no dynamic or YaRN; it
 * rotates LongRoPE): inspect's twin of the loader's check, so the two name the same compute type. */
CDX_API bool cdx_dtype_rope_f32_only(int hf_rope_type);
/* The help text of --dtype, from the same table (static storage; lines end in '\n'). */
CDX_API const char *cdx_dtype_help(void);

typedef enum { CDX_WEIGHTS_AUTO, CDX_WEIGHTS_IN_PLACE, CDX_WEIGHTS_COPY } cdx_weights_io;

typedef struct cdx_model_opts {
    int reserved;            /* zero-initialise; room for future options */
    /* Bytes the weights may hold (--weight-budget; 0: no limit). For a mixture of experts below its
     * whole size, the dense weights stay resident and the experts are read from the file when a token
     * routes to them, kept in an LRU of expert slots within the budget; the results are the same bits.
     * Below the dense weights plus top-k experts of one layer, the open is refused with both numbers. */
    uint64_t weight_budget;
    cdx_dtype dtype;         /* AUTO (0): the format's default for the stored type */
    /* A split model's stage (cdx_stage): only the matrices of layers [layer0, layer1), and the output
     * head where layer0 is 0, are packed or copied into memory of the process's own (the rest stay
     * mapped and unread but for the fingerprint's samples); the weight sizes count those. 0, 0: every
     * layer. Not with weight_budget (refused). */
    int64_t layer0, layer1;
    /* How a matrix that the kernel set reads as stored is held once packing runs: AUTO decides by the
     * pages the file is mapped with (docs/models.md, "Weights in place"), IN_PLACE reads every such
     * matrix from the mapping, COPY copies every one (the CLI's CALDRIX_MMAP=1 / =0). */
    cdx_weights_io weights_io;
    bool expert_pread;       /* weight_budget: experts read with pread, not through the mapping (the
                                CLI's CALDRIX_EXPERT_IO=pread) */
} cdx_model_opts;

/* path: a .gguf file or a Hugging Face checkpoint directory (config.json + safetensors).
 * Every tensor's name, shape and type is checked against the architecture before any compute. */
CDX_API int cdx_model_open(const char *path, const cdx_model_opts *opts, cdx_model **out, cdx_err *err);
/* Whether cdx_model_open(path, NULL, ...) would open the model, from what names and sizes it: config.json,
 * the safetensors headers or the GGUF metadata and tensor table, every tensor's name, shape and type
 * checked as the open checks them; no tensor's data is read. 0, or the open's own error (the same
 * code and message). `caldrix inspect` gives this verdict. */
CDX_API int cdx_model_check(const char *path, cdx_err *err);
/* A GGUF image in caller-owned memory that outlives the model (the embedded default model). */
CDX_API int cdx_model_open_gguf_mem(const void *data, size_t size, const char *name, cdx_model **out, cdx_err *err);
CDX_API void cdx_model_close(cdx_model *m);
CDX_API const cdx_hparams *cdx_model_hparams(const cdx_model *m);
/* The GGUF the model came from (NULL for a checkpoint directory): for its tokenizer. */
CDX_API const cdx_gguf *cdx_model_gguf(const cdx_model *m);
/* Bytes of weights read for one decoded token (for bandwidth figures). */
CDX_API size_t cdx_model_weight_bytes(const cdx_model *m);
/* Multiply-adds of the weight matrices for one token (as cdx_model_weight_bytes counts them: a
 * mixture of experts' n_expert_used of n_expert); *head (may be NULL) gets the output head's share,
 * which a prompt computes for its last token only and a decoded token always. */
CDX_API double cdx_model_matmul_macs(const cdx_model *m, double *head);
/* Waits until the matrices the first forward context left to be packed in the background are
 * packed (cdx_forward_ctx_create; until then they are read in place, with the same results) and
 * returns how long it waited, in ms; 0 at once when there are none. Each forward pass installs
 * the copies that are ready when it starts. */
CDX_API double cdx_model_pack_wait(const cdx_model *m);
/* Under a weight budget: expert slots, and hits and misses (experts read from the file) so far.
 * All 0 when every weight is resident. Thread-safe. */
CDX_API void cdx_model_expert_stats(const cdx_model *m, uint64_t *hits, uint64_t *misses, size_t *n_slots);
/* File-layout bytes: the dense weights, one expert (the largest, gate + up + down) and all experts;
 * the smallest budget is dense + n_expert_used × one expert. */
CDX_API void cdx_model_weight_split(const cdx_model *m, size_t *dense, size_t *expert_max, size_t *experts_all);
/* The compute type the model runs in (F32 or BF16), and why (static storage). */
CDX_API cdx_dtype cdx_model_dtype(const cdx_model *m);
CDX_API const char *cdx_model_dtype_why(const cdx_model *m);
/* The KV cache type that goes with it by default: CDX_TYPE_BF16 for bf16 compute, else CDX_TYPE_F32. */
CDX_API uint32_t cdx_model_kv_type_default(const cdx_model *m);
/* Notes produced while loading (e.g. "llama3 rope scaling applied"), newline-separated; may be "". */
CDX_API const char *cdx_model_notes(const cdx_model *m);

/* ---- the forward pass ---- */

/* One sequence's KV cache as the forward pass sees it: a block table. Block i holds positions
 * [i·block, (i+1)·block) of every layer; K of layer l at position p is the n_head_kv·head_dim
 * elements at k[p / block] + l·layer_stride + (p % block)·n_head_kv·head_dim (V the same), of
 * type CDX_TYPE_F32 (0) or CDX_TYPE_F16 (rounded to nearest even when written, as ggml's copy
 * into an F16 cache does), or, for a bf16 model only, CDX_TYPE_BF16 (exact: its K and V are bf16
 * values; an f32 cache holds the same values). Every sequence of one batch has the same type and block. */
typedef struct cdx_kv_seq {
    void *const *k;
    void *const *v;
    int64_t n_blocks, block;
    size_t layer_stride;   /* elements */
    uint32_t type;
    /* A hybrid model's recurrent state (cdx_model_state_bytes, made by cdx_model_state_reset): it
     * has absorbed the sequence's positions before the state's own position, and the batch must
     * hold the sequence's next positions from there, ascending; the pass advances it. NULL for
     * models without one. KV layers of a hybrid model are its full-attention layers only. */
    void *state;
    /* The sequence's length for a RoPE scaling that depends on it (hp.rope_pass: dynamic NTK,
     * LongRoPE), as transformers' seq_len of a pass over the whole sequence: the engine gives the
     * tokens it knows, so a prompt computed in chunks rotates as in one pass; 0: the sequence's last
     * position in the batch + 1. */
    int64_t rope_len;
    /* The engine's ids of the blocks k and v point to (n_blocks of them), or NULL: what a split model's
     * next stage needs to find the same blocks in its own pool (cdx_stage). */
    const int32_t *ids;
} cdx_kv_seq;

/* A contiguous KV cache of one sequence (K and V for every layer, positions [0, n_ctx)), for
 * callers that run one sequence without the engine's paged pool; `seq` views it as blocks. */
typedef struct cdx_kv {
    float *k;        /* [n_layer][n_ctx][n_head_kv * head_dim] */
    float *v;        /* same */
    int64_t n_ctx;   /* capacity in positions */
    int64_t n_past;  /* positions filled */
    cdx_kv_seq seq;  /* the same memory as a block table */
    void **tab;      /* seq's pointers */
    void *state;     /* a hybrid model's recurrent state (seq.state), or NULL */
} cdx_kv;

/* Whether the positions of a sequence cached when it was cached_len long must be computed again
 * before a pass at length len: LongRoPE's factor set of every position changes when the length
 * passes original_max_position_embeddings (Phi3ForCausalLM.prepare_inputs_for_generation drops its
 * cache there and recomputes). False for every other model. */
CDX_API bool cdx_model_rope_restart(const cdx_model *m, int64_t cached_len, int64_t len);

CDX_API int cdx_kv_init(cdx_kv *kv, const cdx_hparams *hp, int64_t n_ctx, cdx_err *err);
/* The same for a model with a recurrent state (allocated and reset here too). */
CDX_API int cdx_kv_init_model(cdx_kv *kv, const cdx_model *m, int64_t n_ctx, cdx_err *err);

/* ---- recurrent state (hybrid models) ----
 * One sequence's state is a flat blob of cdx_model_state_bytes: its position, then per Gated
 * DeltaNet layer the causal conv's window and each value head's delta-rule state. It can be
 * copied byte for byte (a snapshot) and resumed from: the result is the same bits. */
CDX_API size_t cdx_model_state_bytes(const cdx_model *m);    /* 0: the model has no recurrent state */
CDX_API void cdx_model_state_reset(const cdx_model *m, void *state); /* to position 0 */
CDX_API int64_t cdx_model_state_pos(const void *state);      /* the next position it takes */
CDX_API void cdx_kv_free(cdx_kv *kv);

/* Scratch for forward passes of up to max_tokens tokens. */
typedef struct cdx_forward_ctx cdx_forward_ctx;
CDX_API int cdx_forward_ctx_create(const cdx_model *m, int64_t max_tokens, int n_threads,
                                   const cdx_kernels *k, cdx_forward_ctx **out, cdx_err *err);
/* The same on pool (borrowed; it must outlive the context; NULL: a pool of n_threads of its own).
 * Contexts sharing a pool must never run at the same time: cdx_pool_run has one caller at a time. */
CDX_API int cdx_forward_ctx_create_on(const cdx_model *m, int64_t max_tokens, int n_threads, struct cdx_pool *pool,
                                      const cdx_kernels *k, cdx_forward_ctx **out, cdx_err *err);
CDX_API void cdx_forward_ctx_free(cdx_forward_ctx *fc);
CDX_API cdx_pool *cdx_forward_ctx_pool(cdx_forward_ctx *fc);
/* Gated DeltaNet: per_token true runs the per-token recurrence (S ← e^g S; S += k ⊗ β(v − Sᵀk);
 * o = Sᵀq) instead of the chunked form (64-position chunks at fixed positions, see deltanet.c):
 * the oracle the chunked form is tested against. States of one form do not resume in the other
 * (refused). Returns CDX_EINVAL for a model without DeltaNet layers. */
CDX_API int cdx_forward_ctx_set_per_token(cdx_forward_ctx *fc, bool per_token);
CDX_API const cdx_kernels *cdx_forward_ctx_kernels(const cdx_forward_ctx *fc);

/* One batch: token i belongs to sequence seq[i] (NULL: all to sequence 0) at position pos[i].
 * cdx_forward_seqs needs pos; cdx_forward (NULL pos) places each token at its cache's n_past plus
 * its rank among earlier tokens of the same sequence in the batch. A token at position p attends
 * to positions 0..p of its sequence (a sliding window: the last window of them), which must have
 * been written by earlier batches or come earlier in this one. For every i with want_logits[i]
 * (NULL: only the last token), a row of n_vocab logits is written to logits, in order. Each row's
 * result is the same whatever else is in the batch (batch invariance). */
typedef struct cdx_lora_set cdx_lora_set;
typedef struct cdx_batch {
    int64_t n;
    const int32_t *tokens;
    const int32_t *seq;         /* NULL: all tokens belong to sequence 0 */
    const int64_t *pos;         /* NULL: after the cache's n_past (cdx_forward only) */
    const bool *want_logits;    /* NULL: only token n-1 */
    const float *const *embd;   /* NULL, or per token NULL or n_embd floats that replace its embedding
                                   (image features at image-token positions) */
    float *hidden;              /* NULL, or: for each token with want_logits, its final-normed hidden state
                                   (n_embd floats) is written here, in order, and no logits are computed
                                   (logits may be NULL). f32 compute of a dense model only (embeddings) */
    const float *x_in;          /* NULL, or [n][n_embd]: the hidden state entering the context's first layer
                                   (a later stage of a split model, cdx_stage); tokens and embd unused */
    float *x_out;               /* NULL, or: for each token with want_logits, its hidden state after the
                                   context's last layer, before the output norm (n_embd floats), in order;
                                   no logits (a split model's last stage gives these back to the first) */
    const cdx_lora_set *const *lora; /* NULL, or per token NULL or the LoRA adapters on its row (below) */
    const int64_t *pos_sections;  /* NULL, or [n][4]: a multimodal-RoPE model's (hp.rope_sections) temporal, height,
                                     width and extra position of each token, where they are not its text position
                                     (an image's patches); NULL: pos[i], pos[i], pos[i], 0, as transformers' and
                                     llama.cpp's text tokens. The KV slot is still pos[i] */
} cdx_batch;

CDX_API int cdx_forward_seqs(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b,
                             float *logits, cdx_err *err);
/* The same over contiguous caches; on success each sequence's n_past advances. */
CDX_API int cdx_forward(cdx_forward_ctx *fc, cdx_kv *const *kv, int n_seq, const cdx_batch *b, float *logits,
                        cdx_err *err);

/* ---- a model split by layers (a pipeline stage) ----
 * A context computes only layers [layer0, layer1) of the model; its KV cache holds those layers only
 * (slot l - layer0 of each block: layer_stride × (layer1 - layer0) elements a block). layer0 > 0: a
 * batch brings its hidden rows in cdx_batch.x_in instead of tokens. layer1 < n_layer: after its layers
 * the pass hands the rows on with send, and a later stage's pass (layer0 > 0) ends there. The first
 * stage (layer0 0) then takes back with recv, for each token that wants logits, its hidden state after
 * the model's last layer (the later stages compute it; the last one's pass takes cdx_batch.x_out) and
 * applies the output norm and head to them, as a whole model does: the head stays with the embedding,
 * so n_embd floats a token come back, not n_vocab.
 * Micro-batches: the first stage cuts a batch of several sequences, at sequence boundaries, into up to
 * n_micro micro-batches of about equal tokens, 16 or more each (fewer rows cost a matmul its weight
 * reads whatever their count); it computes and sends each in turn (the next stage
 * computes micro-batch 1 while this one computes 2), then takes the answers back in order, applying
 * the head to each as it comes. The bits of every row are those of the whole model (the same ops in
 * the same order, each row's sums independent of the rows beside it; only where and beside which rows
 * they are computed differs). Dense and mixture-of-experts models, in f32 or bf16 compute; a recurrent
 * state (Qwen3.5) and encoders are refused by name. */
typedef struct cdx_stage_batch {
    int64_t n, n_out;          /* tokens, and rows of logits wanted (want_logits, or the last) */
    int n_seq;
    const float *x;            /* [n][n_embd]: the hidden state after layer1 - 1 */
    const int64_t *pos;        /* [n] */
    const int32_t *seq;        /* [n] */
    const bool *want_logits;   /* [n], or NULL: only the last token */
    const cdx_kv_seq *seqs;    /* [n_seq], with their block ids */
} cdx_stage_batch;

typedef struct cdx_stage {
    int64_t layer0, layer1;    /* 0 <= layer0 < layer1 <= n_layer */
    /* layer1 < n_layer: hands the batch's hidden rows on to the next stage. sb and its arrays are the
     * pass's: send copies what it keeps before it returns (the rows travel while this stage computes). */
    int (*send)(void *user, const cdx_stage_batch *sb, cdx_err *err);
    /* the first stage, layer1 < n_layer: writes the n_out rows of n_embd floats (the wanted tokens'
     * hidden states after the last layer) of the oldest batch sent and not yet taken back */
    int (*recv)(void *user, int64_t n_out, float *x_out, cdx_err *err);
    int n_micro;               /* the first stage: micro-batches in flight at most (0 or 1: the batch whole) */
    void *user;
} cdx_stage;

/* A split model's first stage, a batch in two halves, so that several batches are in flight across
 * calls (the engine's pipeline over decoding groups): cdx_forward_begin runs the stage's layers over
 * b and sends the rows on, and returns without waiting (nothing is sent when it fails); cdx_forward_end
 * takes back the answer of the oldest batch begun and not ended, with the same seqs and b (borrowed
 * until then, unchanged), and writes its logits as cdx_forward_seqs would (the same bits: the batch
 * is not cut into micro-batches; logits NULL: the answer is only taken off the line). Every batch
 * begun (cdx_forward_begin returned 0) is ended once, in order, whatever cdx_forward_end returns; at most CDX_FORWARD_MAX_FLIGHT in flight,
 * and none during cdx_forward_seqs (refused). CDX_EINVAL on any context but such a first stage. */
enum { CDX_FORWARD_MAX_FLIGHT = 8 };
CDX_API int cdx_forward_begin(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b, cdx_err *err);
CDX_API int cdx_forward_end(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b, float *logits,
                            cdx_err *err);
/* Batches begun and not yet ended. */
CDX_API int cdx_forward_in_flight(const cdx_forward_ctx *fc);

/* Makes fc compute the layers of st (copied; NULL: the whole model again). CDX_EINVAL for a range
 * outside the model, layer1 < n_layer without send, or such a first stage without recv;
 * CDX_EUNSUPPORTED (naming why) for a recurrent state or an encoder. */
CDX_API int cdx_forward_ctx_set_stage(cdx_forward_ctx *fc, const cdx_stage *st, cdx_err *err);

/* The head's logits of the given vocabulary ids for n hidden states h[n][n_embd] (cdx_batch.hidden):
 * out[n][n_ids], each the dot product of the head's row with the state (f32 products, double sum), then
 * the model's logit scaling and softcap. The reranker's yes/no logits without the whole vocabulary. */
CDX_API int cdx_model_head_logits(const cdx_model *m, const float *h, int64_t n, const int32_t *ids, int n_ids,
                                  float *out, cdx_err *err);

/* A rerank GGUF's classifier logits (hp.gguf_rank) for n hidden states h[n][n_embd]: out[n][n_cls_out], each
 * cls.output's row dotted with the state (f32 products, double sum, as cdx_model_head_logits) plus its bias.
 * CDX_EINVAL for a model without cls.output. */
CDX_API int cdx_model_cls_logits(const cdx_model *m, const float *h, int64_t n, float *out, cdx_err *err);

/* ---- encoders (BERT, XLM-RoBERTa) ---- */

/* Whether m is a bidirectional encoder (cdx_encode runs it; cdx_forward refuses it). */
CDX_API bool cdx_model_is_encoder(const cdx_model *m);
/* One forward of n_in whole inputs: input i is the lens[i] ids from tokens + Σ_{j<i} lens[j] (no special
 * tokens are added here). An encoder has no KV cache and no prefix reuse: every token of an input attends
 * to every token of that input and to nothing else, so a batch needs no padding. Writes the last hidden
 * state of every token, hidden[Σ lens][n_embd], in order. An input's rows are the same bits whatever else
 * is in the call and whatever the thread count (batch invariance). CDX_EINVAL for a model that is not an
 * encoder, a length outside 1..the model's positions, an id outside the vocabulary (the message names the
 * input, the position and the id). Scratch is allocated per call; fc's max_tokens does not bound it. */
CDX_API int cdx_encode(cdx_forward_ctx *fc, const int32_t *tokens, const int64_t *lens, int n_in, float *hidden,
                       cdx_err *err);

/* ---- LoRA adapters ----
 * An adapter is opened against one model and never changes it: its low-rank product is added per
 * row after each target matrix (y += scale · alpha/r · B (A x)), so rows of one batch may each use
 * other adapters, or none (cdx_batch.lora). Formats: a PEFT folder (adapter_config.json +
 * adapter_model.safetensors, PEFT's key names) or a llama.cpp GGUF adapter (general.type
 * "adapter", adapter.lora.alpha, <tensor>.lora_a/.lora_b). Targets: q, k, v, o, gate, up, down of the
 * decoder layers. Refused, naming the field or the first mismatch: PEFT options caldrix cannot
 * honour (use_rslora, use_dora, fan_in_fan_out, bias, rank_pattern, modules_to_save, ...), a tensor
 * of a module, layer or shape the model does not have, another GGUF architecture; bf16 and hybrid
 * passes. q/k rows are permuted between transformers' and GGUF's layouts as the converter does. */
typedef struct cdx_lora cdx_lora; /* immutable once opened; borrows m while in use (close may follow m's) */
CDX_API int cdx_lora_open(const cdx_model *m, const char *path, cdx_lora **out, cdx_err *err);
CDX_API void cdx_lora_close(cdx_lora *a); /* NULL: no-op */
typedef struct cdx_lora_info {
    const char *path, *format;  /* "peft" or "gguf" */
    int64_t rank;               /* the largest r */
    double alpha;
    const char *targets;        /* "q_proj,v_proj" (PEFT) or "attn_q,attn_v" (GGUF) */
    int64_t n_pairs;            /* (layer, module) pairs */
} cdx_lora_info;
CDX_API void cdx_lora_get_info(const cdx_lora *a, cdx_lora_info *info); /* valid while a is open */
CDX_API const cdx_model *cdx_lora_model(const cdx_lora *a);
/* SHA-256 of what the adapter adds: every pair's position, shape, scale and weights (keys the
 * engine's prefix cache per adapter set). */
CDX_API void cdx_lora_fingerprint(const cdx_lora *a, uint8_t out[32]);
typedef struct cdx_lora_use {
    const cdx_lora *lora;
    float scale;                /* the user's multiplier (run --lora DIR:SCALE; 1: as trained) */
} cdx_lora_use;
struct cdx_lora_set {
    const cdx_lora_use *use;    /* applied in this order */
    int n;
};
/* W[rows × cols] (f32, transformers' layout of the model's own file) += scale · alpha/r · B A of
 * (layer, target: 0..6 = q, k, v, o, gate, up, down), PEFT's merge; 1 when the adapter holds that
 * pair with those dimensions, else 0 and W is untouched. */
CDX_API int cdx_lora_merge_into(const cdx_lora *a, float scale, int64_t layer, int target, float *w, int64_t rows,
                                int64_t cols);

/* ---- the vision tower (vision-language models) ---- */

typedef struct cdx_vision_info {
    int64_t image_size;       /* tile side in pixels (the tower's image_size) */
    int64_t tokens_per_tile;  /* image tokens one tile becomes: (image_size / patch / scale_factor)^2 */
    int64_t n_embd;           /* the text model's hidden size: one feature row per image token */
    int32_t image_token_id;   /* the <image> token whose positions take the features */
} cdx_vision_info;

/* Whether m takes images; fills *out when it does (out may be NULL). */
CDX_API bool cdx_model_vision(const cdx_model *m, cdx_vision_info *out);
/* A vision-language model run as its text model (Qwen2-VL): why a request with images is refused (static
 * text); NULL for every other model. */
CDX_API const char *cdx_model_images_refused(const cdx_model *m);
/* The same for a family (inspect's note, before any model is opened); NULL out of range or not such a family. */
CDX_API const char *cdx_model_arch_images_refused(cdx_arch a);
/* The image features of n_tiles tiles of pixels ([n_tiles][3][image_size][image_size], the
 * processor's pixel_values): out[n_tiles * tokens_per_tile][n_embd], tiles in order. The tower
 * computes in f32 whatever the weights' type (F32/BF16/F16 products are exact in f32). Runs on
 * fc's threads and kernels; scratch is allocated per call. CDX_EINVAL when m has no tower. */
CDX_API int cdx_vision_encode(cdx_forward_ctx *fc, const float *pixels, int64_t n_tiles, float *out, cdx_err *err);

/* A SHA-256 fingerprint of what the model computes: its hyperparameters and a sample of every
 * tensor's bytes (first and last 4 KiB). Keys the engine's prefix cache and store. */
CDX_API void cdx_model_fingerprint(const cdx_model *m, uint8_t out[32]);

#ifdef __cplusplus
}
#endif
#endif
