/* caldrix format layer: Hugging Face config.json (+ generation_config.json) for the decoder
 * architectures caldrix runs.
 *
 *   cdx_hf_config c;
 *   if (cdx_hf_config_read("path/to/checkpoint", &c, &err) < 0) fprintf(stderr, "%s\n", err.msg);
 *   ... c.hidden_size, c.n_layers, c.layer_flags[i] & CDX_HF_LAYER_SLIDING ...
 *
 * The struct is plain data (no heap): copy it, drop it. Fields a config.json leaves out get the
 * default of that architecture's transformers config class. Values are checked for type and range;
 * a wrong one gives an error naming the file, the field and the value.
 */
#ifndef CALDRIX_CONFIG_H
#define CALDRIX_CONFIG_H

#include "caldrix/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The config.json architectures caldrix reads, one line each (public: new ones go at the end). Each
 * is read by one family of the model layer, whose row (src/model/arch/<family>.c) holds its
 * defaults: cdx_hf_arch_row below. */
#define CDX_HF_ARCHS(X)                                                                                  \
    X(LLAMA)       /* LlamaForCausalLM */                                                                \
    X(MISTRAL)     /* MistralForCausalLM */                                                              \
    X(QWEN2)       /* Qwen2ForCausalLM */                                                                \
    X(QWEN3)       /* Qwen3ForCausalLM */                                                                \
    X(QWEN3_MOE)   /* Qwen3MoeForCausalLM */                                                             \
    X(MIXTRAL)     /* MixtralForCausalLM */                                                              \
    X(QWEN2_MOE)   /* Qwen2MoeForCausalLM */                                                             \
    X(IDEFICS3)    /* Idefics3ForConditionalGeneration (SmolVLM): text_config is Llama, plus vision_config */ \
    X(QWEN3_5)     /* Qwen3_5ForCausalLM (hybrid: Gated DeltaNet + gated attention) */                   \
    X(QWEN3_5_VL)  /* Qwen3_5ForConditionalGeneration, read as its text model (text_config) */                   \
    X(GRANITE)     /* GraniteForCausalLM */                                                              \
    X(SMOLLM3)     /* SmolLM3ForCausalLM (NoPE layers) */                                                \
    X(OLMO2)       /* Olmo2ForCausalLM (post-norms, whole-projection q/k norms) */                       \
    X(OLMOE)       /* OlmoeForCausalLM */                                                                \
    X(GRANITEMOE)  /* GraniteMoeForCausalLM */                                                           \
    X(GEMMA)       /* GemmaForCausalLM */                                                                \
    X(GEMMA2)      /* Gemma2ForCausalLM */                                                               \
    X(GEMMA3)      /* Gemma3ForCausalLM (model_type gemma3_text) */                                      \
    X(BERT)        /* BertModel (an encoder: embeddings) */                                              \
    X(XLM_ROBERTA) /* XLMRobertaModel (an encoder: embeddings) */                                        \
    X(PHI3)        /* Phi3ForCausalLM */                                                                 \
    X(STABLELM)    /* StableLmForCausalLM */                                                             \
    X(STARCODER2)  /* Starcoder2ForCausalLM */                                                           \
    X(COHERE)      /* CohereForCausalLM (Command R) */                                                   \
    X(OLMO)        /* OlmoForCausalLM (OLMo v1: LayerNorms without weight or bias) */                    \
    X(GPT_OSS)     /* GptOssForCausalLM */                                                               \
    X(BITNET)      /* BitNetForCausalLM (BitNet b1.58: BitLinear, sub-norms, relu2) */                   \
    X(QWEN2_VL)    /* Qwen2VLForConditionalGeneration, its text path (the vision tower is not run) */     \
    X(QWEN2_5_VL)  /* Qwen2_5_VLForConditionalGeneration, its text path */                               \
    /* a new architecture: one line above this one */

typedef enum cdx_hf_arch {
#define CDX_X_(name) CDX_HF_##name,
    CDX_HF_ARCHS(CDX_X_)
#undef CDX_X_
    CDX_HF_ARCH_COUNT
} cdx_hf_arch;

/* How config.json's sliding window applies to the layers (transformers' config classes). */
typedef enum cdx_hf_sliding {
    CDX_HF_SW_NONE,      /* Llama: no sliding window */
    CDX_HF_SW_ALL,       /* Mistral, Mixtral: every layer when sliding_window is non-null */
    CDX_HF_SW_QWEN,      /* Qwen2, Qwen3: only with use_sliding_window; layers >= max_window_layers or layer_types */
    CDX_HF_SW_QWEN2_MOE, /* Qwen2-MoE: with use_sliding_window; even layers i < max_window_layers, or layer_types */
    CDX_HF_SW_QWEN_ALL,  /* Qwen3-MoE: every layer, only with use_sliding_window */
    CDX_HF_SW_NOPE,      /* SmolLM3: only with use_sliding_window; layer_types, else the NoPE layers */
    CDX_HF_SW_EVEN,      /* Gemma2: layer_types, else the even layers (layer_idx % 2 == 0) */
    CDX_HF_SW_PATTERN,   /* Gemma3: layer_types, else every layer but each sliding_window_pattern-th */
} cdx_hf_sliding;

/* The gated MLP's activation: act(gate(x)) · up(x). */
typedef enum cdx_hf_act {
    CDX_HF_ACT_SILU = 0,     /* SwiGLU (Llama, Qwen, ...) */
    CDX_HF_ACT_GELU_TANH,    /* GeGLU with gelu_pytorch_tanh (Gemma) */
    CDX_HF_ACT_GELU,         /* an encoder's (ungated) MLP: gelu(W1·x), the exact erf form (BERT's "gelu") */
    CDX_HF_ACT_RELU2,        /* relu(x)² (ACT2FN's "relu2", ReLUSquaredActivation: BitNet) */
} cdx_hf_act;

/* Which projections attention_bias (or the class itself) biases. */
typedef enum cdx_hf_bias {
    CDX_HF_B_ATTN,    /* attention_bias on q, k, v and o (Llama, Qwen3, Qwen3-MoE) */
    CDX_HF_B_NONE,    /* no attention bias (Mistral, Mixtral) */
    CDX_HF_B_QKV,     /* q, k, v always biased, o never (Qwen2) */
    CDX_HF_B_QKV_KEY, /* q, k, v biased when qkv_bias (default true), o never (Qwen2-MoE) */
    CDX_HF_B_USE_QKV, /* q, k, v biased when use_qkv_bias (default false), o never (StableLM) */
    CDX_HF_B_USE_BIAS /* q, k, v, o and the MLP's linears biased when use_bias (default true) (Starcoder2) */
} cdx_hf_bias;

/* Where the text model's keys are and what else the reader reads. */
typedef enum cdx_hf_layout {
    CDX_HF_TEXT_TOP = 0,     /* at the top level */
    CDX_HF_TEXT_VISION,      /* text_config, plus vision_config and the connector keys (Idefics3) */
    CDX_HF_TEXT_QWEN35,      /* Qwen3.5's keys at the top level (read_qwen35: the layer pattern, linear_*) */
    CDX_HF_TEXT_QWEN35_VL,   /* the same under text_config (Qwen3_5Config) */
    CDX_HF_ENCODER,          /* a BERT-like encoder: layer_norm_eps, hidden_act "gelu", type_vocab_size,
                                position_embedding_type "absolute" (BertConfig, XLMRobertaConfig) */
    CDX_HF_TEXT_MROPE,       /* Qwen2-VL / Qwen2.5-VL: the text model's keys under text_config when the config has
                                one, else at the top level (Qwen2VLConfig's backward compatibility); rope_scaling
                                "mrope" (read as "default") with its mrope_section (read_mrope) */
} cdx_hf_layout;

/* Scalings outside the layers (Granite's multipliers, Gemma2's softcaps): a row names the config.json
 * key of each its class has, and its class default (scale_defaults; 0 there: 1, or none for a softcap);
 * cdx_hf_config.scale holds the value, 0 where the row has none or the key is null. */
typedef enum cdx_hf_scale {
    CDX_HF_SCALE_EMBD,      /* the embeddings × this (embedding_multiplier) */
    CDX_HF_SCALE_RESIDUAL,  /* each branch × this before the residual add (residual_multiplier) */
    CDX_HF_SCALE_ATTN,      /* the softmax scale in place of head_dim^-½ (attention_multiplier) */
    CDX_HF_SCALE_LOGIT_DIV, /* the logits ÷ this (logits_scaling) */
    CDX_HF_SCALE_QUERY_PRE_ATTN, /* the softmax scale is this^-½ (Gemma2/3's query_pre_attn_scalar) */
    CDX_HF_SCALE_ATTN_SOFTCAP,   /* scores = cap·tanh(scores/cap) before the mask (attn_logit_softcapping) */
    CDX_HF_SCALE_FINAL_SOFTCAP,  /* logits = cap·tanh(logits/cap) (final_logit_softcapping) */
    CDX_HF_SCALE_LOGIT_MUL,      /* the logits × this (Cohere's logit_scale) */
    CDX_HF_SCALE_COUNT
} cdx_hf_scale;

/* A config.json architecture's row: its names and its config class's defaults for absent keys. */
typedef struct cdx_hf_arch_row {
    const char *arch, *model_type;   /* architectures[0]; model_type */
    int64_t kv_heads;    /* default when absent; 0: = num_attention_heads */
    int64_t head_dim;    /* default when absent; 0: hidden_size / num_attention_heads */
    double rms_eps, rope_theta;
    int64_t max_pos;
    int64_t sliding;     /* sliding_window when the key is absent; 0: null */
    cdx_hf_sliding sw;
    int64_t bos, eos;    /* defaults; -1: none */
    int moe;             /* 0 dense, 1 Qwen-style (num_experts), 2 Mixtral (num_local_experts), 3 OLMoE
                            (num_experts, every layer sparse, experts intermediate_size wide, norm_topk_prob read) */
    cdx_hf_bias bias;
    bool mlp_bias_key;   /* reads mlp_bias (Llama only) */
    int64_t experts, per_tok, moe_ff, shared_ff;
    bool norm_topk;      /* default norm_topk_prob */
    cdx_hf_layout layout;
    const char *scale_keys[CDX_HF_SCALE_COUNT]; /* NULL: the class has no such scaling */
    int64_t nope_interval; /* SmolLM3: reads no_rope_layers, else every no_rope_layer_interval-th layer (this
                              default) has no RoPE; 0: the class has no NoPE layers */
    bool clip_qkv_key;   /* reads clip_qkv (OLMoE): q, k and v clamped to ±clip_qkv after the q/k norms */
    double scale_defaults[CDX_HF_SCALE_COUNT];  /* the class default where the key is absent (0: 1; a softcap: none) */
    bool tied;           /* default tie_word_embeddings (Gemma: true) */
    const char *act_key; /* the one key that names the MLP activation (Gemma: hidden_activation; hidden_act is
                            then ignored, as GemmaMLP ignores it); NULL: hidden_act and hidden_activation, SiLU */
    cdx_hf_act act;      /* the activation when act_key is absent or null */
    const char *rope_swa_theta_key; /* the RoPE base of the sliding layers (Gemma3: rope_local_base_freq); NULL: none */
    double rope_swa_theta;          /* its default */
    bool pos_after_pad;  /* an encoder's position ids start at pad_token_id + 1 (XLM-R's
                            create_position_ids_from_input_ids); else at 0 */
    int64_t type_vocab;  /* an encoder's type_vocab_size default */
    double partial_rotary;          /* the class reads partial_rotary_factor, with this default (Phi3: 1); 0: it
                                       rotates the whole head */
    bool orig_max_pos_key;          /* the class has original_max_position_embeddings at the top level (Phi3Config),
                                       which longrope reads when rope_scaling does not say it */
    const char *eps_key;  /* the norms' epsilon (LayerNorm families: layer_norm_eps, norm_epsilon); NULL: rms_norm_eps */
    bool eps_fixed;       /* the class's norms have a fixed epsilon (rms_eps), no key read (OlmoLayerNorm's 1e-5) */
    bool attn_bias_on;    /* attention_bias defaults to true and biases q, k, v and o (GptOssConfig) */
    bool swiglu_oai;      /* the experts' clamped SwiGLU: reads swiglu_limit (7.0) and swiglu_alpha (1.702) (GPT-OSS) */
    const char *parallel_key; /* a bool: attention and MLP read one norm's output, x + attn + mlp
                                 (StableLM's use_parallel_residual); NULL: the class default below */
    bool parallel;            /* that default (Cohere: always) */
    const char *qk_norm_key;  /* a bool naming per-head q/k LayerNorms (use_qk_norm, qk_layernorm); caldrix does
                                 not run them yet and refuses true by name; NULL: the class has none */
    bool bitnet_quant;        /* reads quantization_config quant_method "bitnet" (linear_class "bitlinear", mode
                                 "offline": BitNet's packed ternary BitLinear weights), refusing any other */
} cdx_hf_arch_row;

/* The row of architecture a (the model layer's family rows hold them); NULL out of range. */
CDX_API const cdx_hf_arch_row *cdx_hf_arch_row_get(cdx_hf_arch a);

/* An architecture caldrix knows and does not run yet, with the reason: one table (src/model/arch.c,
 * beside the family rows). The config reader and the GGUF loader refuse it by name with the reason;
 * `caldrix models supported --all` and docs/models.md list it. */
typedef struct cdx_refused_arch {
    const char *hf;     /* config.json architectures[0]; NULL: a GGUF form only */
    const char *gguf;   /* llama.cpp's general.architecture; NULL: none refused under this row */
    const char *family; /* transformers' model_type family */
    const char *reason; /* what is not computed, and what runs instead where something does */
} cdx_refused_arch;
CDX_API const cdx_refused_arch *cdx_refused_archs(size_t *n);
/* The row naming name (len bytes) as a config.json architecture (gguf false) or a GGUF
 * general.architecture (gguf true); NULL: none. */
CDX_API const cdx_refused_arch *cdx_refused_arch_find(const char *name, size_t len, bool gguf);

#define CDX_HF_MAX_LAYERS 1024
/* The sizes caldrix runs within: the config reader's bounds, which the loader applies to a GGUF
 * file's metadata too (one set of limits). */
#define CDX_MAX_VOCAB ((int64_t)1 << 22)
#define CDX_MAX_HIDDEN ((int64_t)1 << 16)
#define CDX_MAX_FF ((int64_t)1 << 20)
#define CDX_MAX_HEADS 1024
#define CDX_MAX_HEAD_DIM 1024
#define CDX_MAX_EXPERTS 4096
#define CDX_HF_MAX_EOS 16

/* Per-layer flags, computed as transformers computes them. */
enum {
    CDX_HF_LAYER_SLIDING = 1, /* attention limited to the last sliding_window positions */
    CDX_HF_LAYER_MOE = 2,     /* sparse MoE block (else a dense MLP of intermediate_size) */
    CDX_HF_LAYER_LINEAR = 4,  /* Qwen3.5: a Gated DeltaNet ("linear_attention") layer, else full attention */
    CDX_HF_LAYER_NOPE = 8,    /* SmolLM3: no rotary embedding on this layer's q and k */
};

/* rope_scaling's kinds (transformers' modeling_rope_utils.ROPE_INIT_FUNCTIONS that caldrix computes). */
typedef enum cdx_hf_rope_type {
    CDX_HF_ROPE_DEFAULT = 0,
    CDX_HF_ROPE_LLAMA3 = 1,   /* _compute_llama3_parameters */
    CDX_HF_ROPE_LINEAR = 2,   /* _compute_linear_scaling_rope_parameters: inv_freq / factor */
    CDX_HF_ROPE_DYNAMIC = 3,  /* _compute_dynamic_ntk_parameters: the base grows with the sequence past
                                 max_position_embeddings (per forward pass) */
    CDX_HF_ROPE_YARN = 4,     /* _compute_yarn_parameters: ramped interpolation, cos/sin × attention factor */
    CDX_HF_ROPE_LONGROPE = 5, /* _compute_longrope_parameters ("su" too): per-pair short/long factors, the long
                                 ones once the sequence passes original_max_position_embeddings */
} cdx_hf_rope_type;
#define CDX_HF_MAX_ROPE_FACTORS 512 /* longrope factors: one per rotated pair (head_dim <= 1024) */

/* A vision-language checkpoint's vision_config and the connector settings (Idefics3: SigLIP-style
 * tower, pixel shuffle by scale_factor, a projection); present false for text models. Defaults are
 * Idefics3VisionConfig's. */
typedef struct cdx_hf_vision {
    bool present;
    int64_t hidden_size, intermediate_size, n_layers, n_heads, n_channels, image_size, patch_size;
    double layer_norm_eps;
    int64_t scale_factor;     /* top level */
    int64_t image_token_id;   /* top level */
} cdx_hf_vision;

typedef struct cdx_hf_config {
    cdx_hf_arch arch;
    char architecture[64];     /* architectures[0] */
    char model_type[32];       /* "" when absent */
    int64_t hidden_size, intermediate_size, n_layers, n_heads, n_kv_heads, head_dim, vocab_size;
    int64_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    /* rope_scaling (its rope_type or type); CDX_HF_ROPE_DEFAULT for null / "default" */
    cdx_hf_rope_type rope_type;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_position;
    double rope_attn_factor;       /* yarn / longrope: attention_factor as given; 0: the rule's (get_mscale, ...) */
    double rope_beta_fast, rope_beta_slow, rope_mscale, rope_mscale_all_dim; /* yarn (0: absent) */
    bool rope_truncate;            /* yarn: truncate (default true) */
    int n_rope_factors;            /* longrope: entries of each list (n_rot / 2) */
    double rope_short[CDX_HF_MAX_ROPE_FACTORS], rope_long[CDX_HF_MAX_ROPE_FACTORS];
    bool tie_word_embeddings;
    /* Sliding window: config values and the effective window (0 = none). A layer uses it iff
     * layer_flags[l] & CDX_HF_LAYER_SLIDING. */
    int64_t sliding_window;    /* effective size, 0 when no layer slides */
    bool use_sliding_window;   /* Qwen2/3 switch (false elsewhere) */
    int64_t max_window_layers; /* Qwen2/Qwen2-MoE */
    /* Token ids: -1 when absent. generation_config.json's values replace config.json's. */
    int64_t bos_token_id, pad_token_id;
    int n_eos;
    int64_t eos_token_ids[CDX_HF_MAX_EOS];
    /* Biases: attention_bias as written; qkv/o as the architecture applies them. */
    bool attention_bias, attn_qkv_bias, attn_o_bias, mlp_bias;
    char torch_dtype[16];      /* "float32", "bfloat16", "float16" or "" */
    /* MoE (0 for dense architectures) */
    int64_t n_experts, n_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size;
    int64_t decoder_sparse_step;
    bool norm_topk_prob;       /* renormalise the top-k weights (Mixtral: always) */
    uint8_t layer_flags[CDX_HF_MAX_LAYERS];
    /* generation_config.json sampling defaults; has_* false when absent */
    bool has_generation_config;
    bool has_do_sample, do_sample;
    bool has_temperature, has_top_p, has_top_k, has_repetition_penalty;
    double temperature, top_p, repetition_penalty;
    int64_t top_k;
    /* vision-language models: the text fields above come from text_config */
    cdx_hf_vision vision;
    /* Qwen3.5 (hybrid): the Gated DeltaNet layers (layer_flags & CDX_HF_LAYER_LINEAR) and the
     * gated full-attention layers' partial rotary; 0 elsewhere. */
    int64_t linear_n_k_heads, linear_n_v_heads, linear_k_dim, linear_v_dim, linear_conv_kernel;
    double partial_rotary_factor;  /* rotated share of head_dim (1 for the other architectures) */
    int64_t mrope_section[3];      /* rope_parameters.mrope_section ([11, 11, 10] when absent); Qwen2-VL's
                                      rope_scaling.mrope_section (layout CDX_HF_TEXT_MROPE: required) */
    bool text_config;              /* the text model is under text_config (…ForConditionalGeneration) */
    int64_t n_keys;                /* top-level keys of config.json (inspect's metadata count) */
    double scale[CDX_HF_SCALE_COUNT]; /* cdx_hf_scale: as read, the class default when absent; 0 where the
                                         class has none or the key is null */
    cdx_hf_act act;                /* the gated MLP's activation */
    double rope_theta_swa;         /* the sliding layers' RoPE base (rope_local_base_freq), without rope_scaling;
                                      0: they rotate as the others */
    double clip_qkv;               /* OLMoE's clip_qkv; 0: none (null or absent) */
    bool bitlinear;                /* quantization_config bitnet (row bitnet_quant): every linear but the head is
                                      a BitLinear (packed ternary weight + weight_scale, int8 activations per token) */
    double swiglu_limit, swiglu_alpha; /* GPT-OSS's clamped SwiGLU (swiglu_limit, swiglu_alpha); 0: none */
    int64_t sliding_window_pattern; /* Gemma3's (6 when absent); 0 elsewhere */
    /* an encoder (layout CDX_HF_ENCODER); rms_norm_eps holds its layer_norm_eps */
    bool encoder;
    int64_t type_vocab_size;       /* rows of token_type_embeddings */
    int64_t pos_offset;            /* the first real token's position id (XLM-R: pad_token_id + 1); 0 for BERT */
    bool parallel_residual;        /* x + attn(norm(x)) + mlp(norm(x)): one norm per layer (Cohere, StableLM's
                                      use_parallel_residual) */
} cdx_hf_config;

/* path: a checkpoint folder (reads config.json and, when present, generation_config.json) or a
 * config.json file (generation_config.json is looked for beside it).
 * Returns 0, CDX_EFORMAT / CDX_ERANGE for a malformed file (a key of the wrong type, out of its
 * bounds, given twice), or CDX_EUNSUPPORTED for a model caldrix refuses (cdx_hf_config_rules): the
 * first refusal met, and reading goes on after it, so *out still holds every field that could be
 * read (arch is CDX_HF_ARCH_COUNT for an architecture caldrix does not read). */
CDX_API int cdx_hf_config_read(const char *path, cdx_hf_config *out, cdx_err *err);
/* Parses config.json text (name is used in messages); no generation config. */
CDX_API int cdx_hf_config_parse(const char *json, size_t len, const char *name, cdx_hf_config *out, cdx_err *err);
/* Applies generation_config.json text on top of a parsed config. */
CDX_API int cdx_hf_config_apply_generation(cdx_hf_config *c, const char *json, size_t len, const char *name, cdx_err *err);
/* What config.json refuses, one row per rule: the table the reader's checks, the hub's import rules
 * (which are this reader), `caldrix models rules` and docs/models.md share. */
typedef struct cdx_hf_rule {
    const char *id;       /* short name, e.g. "architecture" */
    const char *field;    /* the config.json field(s) it reads */
    const char *doc;      /* what is refused, one sentence */
} cdx_hf_rule;
CDX_API const cdx_hf_rule *cdx_hf_config_rules(size_t *n);
/* "LlamaForCausalLM" etc.; NULL out of range. */
CDX_API const char *cdx_hf_arch_name(cdx_hf_arch a);
/* The torch_dtype values caldrix imports (seed 000: bf16, f32 or f16), the one list the config
 * reader and the hub's import rules both check against. NULL: false. */
CDX_API bool cdx_hf_dtype_accepted(const char *torch_dtype);
#define CDX_HF_DTYPES_ACCEPTED "bfloat16, float32 or float16"
/* Qwen3.5: whether the import reads key (at the top of config.json or in text_config); any other
 * key is refused by name (the config reader and the hub's import rules share this one list). */
CDX_API bool cdx_hf_qwen35_key_known(const char *key);
/* Whether id is one of the end-of-sequence ids. */
CDX_API bool cdx_hf_config_is_eos(const cdx_hf_config *c, int64_t id);

#ifdef __cplusplus
}
#endif
#endif
