/* Qwen3-MoE (transformers modeling_qwen3_moe.py; llama.cpp's "qwen3moe"): Qwen3 with sparse layers
 * (softmax router, top-k renormalised as norm_topk_prob says). */
#include "model/arch.h"

const arch_desc family_qwen3_moe = {
    .arch = CDX_ARCH_QWEN3_MOE,
    .family = "qwen3_moe",
    .hf = { { CDX_HF_QWEN3_MOE, "Qwen3-MoE", "mixture of experts",
              { .arch = "Qwen3MoeForCausalLM", .model_type = "qwen3_moe", .kv_heads = 4, .rms_eps = 1e-6,
                .rope_theta = 10000.0, .max_pos = 32768, .sliding = 4096, .sw = CDX_HF_SW_QWEN_ALL, .bos = -1,
                .eos = -1, .moe = 1, .bias = CDX_HF_B_ATTN, .experts = 128, .per_tok = 8, .moe_ff = 768 } } },
    .gguf_name = "qwen3moe",
    .gguf_rope = CDX_ROPE_HALVES,
    .qk_norm = true,
    .moe = true,
    .bf16 = true,                 /* its bf16 goldens pass through forward_bf16.c and ops.c's model_moe */
    .norm_topk = true,
};
