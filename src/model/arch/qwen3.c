/* Qwen3 (transformers modeling_qwen3.py; llama.cpp's "qwen3"): the common decoder with a per-head
 * RMSNorm of q and k before RoPE. */
#include "model/arch.h"

const arch_desc family_qwen3 = {
    .arch = CDX_ARCH_QWEN3,
    .family = "qwen3",
    .hf = { { CDX_HF_QWEN3, "Qwen3", "",
              { .arch = "Qwen3ForCausalLM", .model_type = "qwen3", .kv_heads = 32, .head_dim = 128, .rms_eps = 1e-6,
                .rope_theta = 10000.0, .max_pos = 32768, .sliding = 4096, .sw = CDX_HF_SW_QWEN, .bos = -1, .eos = -1,
                .bias = CDX_HF_B_ATTN } } },
    .gguf_name = "qwen3",
    .gguf_rope = CDX_ROPE_HALVES,
    .qk_norm = true,
    .bf16 = true,
};
