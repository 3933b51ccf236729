/* Gemma 3, text (transformers modeling_gemma3.py, Gemma3ForCausalLM, model_type gemma3_text): Gemma 2's
 * layer (post norms, query_pre_attn_scalar; softcaps only where config.json sets them) with q_norm and
 * k_norm ((1 + w), over head_dim, before RoPE), a window on every layer but each
 * sliding_window_pattern-th (or as layer_types says), and the sliding layers rotating with their own
 * base rope_local_base_freq, never scaled (rope_scaling applies to the full-attention layers only). */
#include "model/arch.h"

/* the MLP's input norm is pre_feedforward_layernorm (post_attention_layernorm is the attention's post norm) */
static const role_name k_names[] = {
    { ROLE_FFN_NORM, false, false, "model.layers.%d.pre_feedforward_layernorm.weight" },
    { 0 },
};

const arch_desc family_gemma3 = {
    .arch = CDX_ARCH_GEMMA3,
    .family = "gemma3",
    /* Gemma3TextConfig's defaults: 4 kv heads, head_dim 256, θ 1e6 (local 1e4), window 4096 on 5 of 6
     * layers, no softcaps, bos 2, eos 1, tied */
    .hf = { { CDX_HF_GEMMA3, "Gemma3", "text model (Gemma3ForCausalLM)",
              { .arch = "Gemma3ForCausalLM", .model_type = "gemma3_text", .kv_heads = 4, .head_dim = 256,
                .rms_eps = 1e-6, .rope_theta = 1e6, .max_pos = 131072, .sliding = 4096, .sw = CDX_HF_SW_PATTERN,
                .bos = 2, .eos = 1, .bias = CDX_HF_B_ATTN, .tied = true, .act_key = "hidden_activation",
                .act = CDX_HF_ACT_GELU_TANH,
                .scale_keys = { [CDX_HF_SCALE_QUERY_PRE_ATTN] = "query_pre_attn_scalar",
                                [CDX_HF_SCALE_ATTN_SOFTCAP] = "attn_logit_softcapping",
                                [CDX_HF_SCALE_FINAL_SOFTCAP] = "final_logit_softcapping" },
                .scale_defaults = { [CDX_HF_SCALE_QUERY_PRE_ATTN] = 256 },
                .rope_swa_theta_key = "rope_local_base_freq", .rope_swa_theta = 10000.0 } } },
    .gguf_name = "gemma3",                             /* llama.cpp's: norms stored + 1, lm_head dropped (tied) */
    .gguf_rope = CDX_ROPE_HALVES,                     /* LLAMA_ROPE_TYPE_NEOX: q/k not permuted */
    .qk_norm = true,
    .hf_norm_offset = 1.0f,
    .embd_sqrt = true,
    .post_norms = true,
    .names = k_names,
    .gguf_gemma = true,
    .gguf_swa_period = 6,                             /* llama.cpp's set_swa_pattern(6) */
    .gguf_scale_layers = 62,                          /* the 27B: softmax scale (n_embd / n_head)^-½ */
    .bf16 = true,                                     /* tests/golden/bf16-gemma3.json */
};
