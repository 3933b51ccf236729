/* Qwen2 (transformers modeling_qwen2.py; llama.cpp's "qwen2"): the common decoder with q/k/v biases. */
#include "model/arch.h"

const arch_desc family_qwen2 = {
    .arch = CDX_ARCH_QWEN2,
    .family = "qwen2",
    .hf = { { CDX_HF_QWEN2, "Qwen2", "",
              { .arch = "Qwen2ForCausalLM", .model_type = "qwen2", .kv_heads = 32, .rms_eps = 1e-6,
                .rope_theta = 10000.0, .max_pos = 32768, .sliding = 4096, .sw = CDX_HF_SW_QWEN, .bos = -1, .eos = -1,
                .bias = CDX_HF_B_QKV } } },
    .gguf_name = "qwen2",
    .gguf_rope = CDX_ROPE_HALVES,
    .qkv_bias = true,
    .bf16 = true,
};
