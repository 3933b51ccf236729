/* OLMo 2 (transformers modeling_olmo2.py; llama.cpp's "olmo2"): no input norms; each branch's output is
 * RMS-normed before its residual add (x += rms(attn(x))·post_attention_layernorm, x += rms(mlp(x))·
 * post_feedforward_layernorm), and q_norm / k_norm are RMSNorms over the whole q / k projection, before
 * the head split and RoPE. */
#include "model/arch.h"

const arch_desc family_olmo2 = {
    .arch = CDX_ARCH_OLMO2,
    .family = "olmo2",
    /* Olmo2Config's defaults: kv heads = heads, no bos */
    .hf = { { CDX_HF_OLMO2, "OLMo 2", "",
              { .arch = "Olmo2ForCausalLM", .model_type = "olmo2", .rms_eps = 1e-5, .rope_theta = 10000.0,
                .max_pos = 2048, .sw = CDX_HF_SW_NONE, .bos = -1, .eos = 50279, .bias = CDX_HF_B_ATTN } } },
    .gguf_name = "olmo2",
    .gguf_rope = CDX_ROPE_HALVES, /* llama.cpp: NeoX rope, q/k not permuted */
    .qk_norm = true,
    .qk_norm_full = true,
    .no_pre_norms = true,
    .post_norms = true,
    .bf16 = true,                 /* tests/golden/bf16-olmo2.json */
    .bf16_norm_once = true,       /* Olmo2RMSNorm: (w·h).to(dtype) */
    .bf16_rope_f32 = true,        /* Olmo2RotaryEmbedding: f32 cos/sin, q_embed.to(q_type) */
};
