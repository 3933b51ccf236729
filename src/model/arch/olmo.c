/* OLMo v1 (transformers modeling_olmo.py; llama.cpp's "olmo"): Llama with LayerNorms that have no weight
 * and no bias (OlmoLayerNorm: F.layer_norm(x, None, None, eps=1e-5), whatever config.json says), and q, k
 * and v clamped to ±clip_qkv after their projections when config.json sets it (GGUF
 * attention.clamp_kqv). llama.cpp rotates adjacent pairs: the converter permutes q/k as for Llama. */
#include "model/arch.h"

const arch_desc family_olmo = {
    .arch = CDX_ARCH_OLMO,
    .family = "olmo",
    /* OlmoConfig's defaults: kv heads = heads, no bos, eos 50279, untied, no attention bias, no clip */
    .hf = { { CDX_HF_OLMO, "OLMo", "",
              { .arch = "OlmoForCausalLM", .model_type = "olmo", .rms_eps = 1e-5, .eps_fixed = true,
                .rope_theta = 10000.0, .max_pos = 2048, .sw = CDX_HF_SW_NONE, .bos = -1, .eos = 50279,
                .bias = CDX_HF_B_ATTN, .clip_qkv_key = true } } },
    .gguf_name = "olmo",
    .gguf_rope = CDX_ROPE_ADJACENT, /* LLAMA_ROPE_TYPE_NORM: the converter permutes q/k */
    .layer_norm = true,
    .norm_none = true,
    .bf16 = true,           /* tests/golden/bf16-olmo.json */
    .bf16_rope_f32 = true,  /* OlmoRotaryEmbedding: f32 cos/sin, q_embed.to(q_type) */
};
