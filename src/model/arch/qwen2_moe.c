/* Qwen2-MoE (transformers modeling_qwen2_moe.py; llama.cpp's "qwen2moe"): Qwen2 with sparse layers and
 * a shared expert scaled by sigmoid(shared_expert_gate(x)). */
#include "model/arch.h"

const arch_desc family_qwen2_moe = {
    .arch = CDX_ARCH_QWEN2_MOE,
    .family = "qwen2_moe",
    .hf = { { CDX_HF_QWEN2_MOE, "Qwen2-MoE", "mixture of experts with a shared expert",
              { .arch = "Qwen2MoeForCausalLM", .model_type = "qwen2_moe", .kv_heads = 16, .rms_eps = 1e-6,
                .rope_theta = 10000.0, .max_pos = 32768, .sliding = 4096, .sw = CDX_HF_SW_QWEN2_MOE, .bos = -1,
                .eos = -1, .moe = 1, .bias = CDX_HF_B_QKV_KEY, .experts = 60, .per_tok = 4, .moe_ff = 1408,
                .shared_ff = 5632 } } },
    .gguf_name = "qwen2moe",
    .gguf_rope = CDX_ROPE_HALVES,
    .qkv_bias = true,
    .moe = true,
    .bf16 = true,                 /* its bf16 goldens pass through forward_bf16.c and ops.c's model_moe */
    .shared_expert = true,
};
