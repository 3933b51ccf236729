/* Gemma 2 (transformers modeling_gemma2.py): Gemma (the (1 + w) norms, embeddings × sqrt(hidden),
 * GeGLU) plus a norm on each branch's output before its residual add (post_attention_layernorm,
 * post_feedforward_layernorm; the MLP's input norm is pre_feedforward_layernorm), the softmax scale
 * query_pre_attn_scalar^-½, the attention scores softcapped before the mask (attn_logit_softcapping),
 * the logits softcapped (final_logit_softcapping), and a sliding window on the even layers (or as
 * layer_types says). */
#include "model/arch.h"

/* the MLP's input norm is pre_feedforward_layernorm (post_attention_layernorm is the attention's post norm) */
static const role_name k_names[] = {
    { ROLE_FFN_NORM, false, false, "model.layers.%d.pre_feedforward_layernorm.weight" },
    { 0 },
};

const arch_desc family_gemma2 = {
    .arch = CDX_ARCH_GEMMA2,
    .family = "gemma2",
    /* Gemma2Config's defaults: 4 kv heads, head_dim 256, window 4096, softcaps 50 and 30, bos 2, eos 1, tied */
    .hf = { { CDX_HF_GEMMA2, "Gemma2", "",
              { .arch = "Gemma2ForCausalLM", .model_type = "gemma2", .kv_heads = 4, .head_dim = 256, .rms_eps = 1e-6,
                .rope_theta = 10000.0, .max_pos = 8192, .sliding = 4096, .sw = CDX_HF_SW_EVEN, .bos = 2, .eos = 1,
                .bias = CDX_HF_B_ATTN, .tied = true, .act_key = "hidden_activation", .act = CDX_HF_ACT_GELU_TANH,
                .scale_keys = { [CDX_HF_SCALE_QUERY_PRE_ATTN] = "query_pre_attn_scalar",
                                [CDX_HF_SCALE_ATTN_SOFTCAP] = "attn_logit_softcapping",
                                [CDX_HF_SCALE_FINAL_SOFTCAP] = "final_logit_softcapping" },
                .scale_defaults = { [CDX_HF_SCALE_QUERY_PRE_ATTN] = 256, [CDX_HF_SCALE_ATTN_SOFTCAP] = 50,
                                    [CDX_HF_SCALE_FINAL_SOFTCAP] = 30 } } } },
    .gguf_name = "gemma2",                             /* llama.cpp's: norms stored + 1, lm_head dropped (tied) */
    .gguf_rope = CDX_ROPE_HALVES,                     /* LLAMA_ROPE_TYPE_NEOX: q/k not permuted */
    .hf_norm_offset = 1.0f,
    .embd_sqrt = true,
    .post_norms = true,
    .names = k_names,
    .gguf_gemma = true,
    .gguf_swa_period = 2,                             /* llama.cpp's set_swa_pattern(2) */
    .gguf_swa_default = 4096,                         /* llama.cpp's n_swa when the key is absent */
    .gguf_scale_layers = 46,                          /* the 27B: softmax scale (n_embd / n_head)^-½ */
    .bf16 = true,                                     /* tests/golden/bf16-gemma2.json */
};
