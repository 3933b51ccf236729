/* Llama (transformers modeling_llama.py; llama.cpp's "llama"), and Mistral, which is Llama-shaped
 * with a sliding window (config.json's; GGUF files of it say "llama"). The common decoder as is. */
#include "model/arch.h"

const arch_desc family_llama = {
    .arch = CDX_ARCH_LLAMA,
    .family = "llama",
    /* config.json: LlamaConfig's and MistralConfig's defaults for absent keys */
    .hf = { { CDX_HF_LLAMA, "Llama", "",
              { .arch = "LlamaForCausalLM", .model_type = "llama", .rms_eps = 1e-6, .rope_theta = 10000.0,
                .max_pos = 2048, .sw = CDX_HF_SW_NONE, .bos = 1, .eos = 2, .bias = CDX_HF_B_ATTN, .mlp_bias_key = true } },
            { CDX_HF_MISTRAL, "Mistral", "accepted, not verified on hardware",
              { .arch = "MistralForCausalLM", .model_type = "mistral", .kv_heads = 8, .rms_eps = 1e-6,
                .rope_theta = 10000.0, .max_pos = 4096 * 32, .sliding = 4096, .sw = CDX_HF_SW_ALL, .bos = 1, .eos = 2,
                .bias = CDX_HF_B_NONE } } },
    .gguf_name = "llama",
    .gguf_rope = CDX_ROPE_ADJACENT, /* the converter permutes q/k rows to adjacent pairs */
    .bf16 = true,
    .gguf_vocab_rope_keys = true,
    .gguf_rope_freqs = true,
};
