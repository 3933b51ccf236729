/* OLMoE (transformers modeling_olmoe.py; llama.cpp's "olmoe"): Llama's pre-norm layer with q_norm /
 * k_norm over the whole q / k projection (k_norm is kv heads × head_dim wide), q, k and v clamped to
 * ±clip_qkv after the norms when config.json sets it, and experts on every layer, intermediate_size
 * wide, weighed by the softmax's own top-k entries unless norm_topk_prob. llama.cpp's graph never
 * renormalises, never clamps and wants k_norm n_embd wide (multi-head attention only). */
#include "model/arch.h"

const arch_desc family_olmoe = {
    .arch = CDX_ARCH_OLMOE,
    .family = "olmoe",
    /* OlmoeConfig's defaults: kv heads = heads, no bos, 64 experts, 8 per token */
    .hf = { { CDX_HF_OLMOE, "OLMoE", "mixture of experts",
              { .arch = "OlmoeForCausalLM", .model_type = "olmoe", .rms_eps = 1e-5, .rope_theta = 10000.0,
                .max_pos = 4096, .sw = CDX_HF_SW_NONE, .bos = -1, .eos = 50279, .moe = 3, .bias = CDX_HF_B_ATTN,
                .experts = 64, .per_tok = 8, .norm_topk = false, .clip_qkv_key = true } } },
    .gguf_name = "olmoe",
    .gguf_rope = CDX_ROPE_HALVES, /* llama.cpp: NeoX rope, q/k not permuted */
    .qk_norm = true,
    .qk_norm_full = true,
    .moe = true,
    .bf16 = true,                 /* its bf16 goldens pass through forward_bf16.c and ops.c's model_moe */
    .experts_ff_wide = true,
};
