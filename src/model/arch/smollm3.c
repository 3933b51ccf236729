/* SmolLM3 (transformers modular_smollm3.py; llama.cpp's "smollm3"): Llama with NoPE layers, whose q and
 * k are not rotated (SmolLM3Attention.use_rope = no_rope_layers[layer]). config.json lists them
 * (no_rope_layers) or gives their interval; llama.cpp's GGUF has no key for them and fixes every 4th
 * layer (n_no_rope_layer_step), so a file of another pattern cannot be written for it (convert refuses). */
#include "model/arch.h"

const arch_desc family_smollm3 = {
    .arch = CDX_ARCH_SMOLLM3,
    .family = "smollm3",
    /* SmolLM3Config's defaults (default_theta 2e6) */
    .hf = { { CDX_HF_SMOLLM3, "SmolLM3", "",
              { .arch = "SmolLM3ForCausalLM", .model_type = "smollm3", .kv_heads = 4, .rms_eps = 1e-6,
                .rope_theta = 2e6, .max_pos = 32768, .sw = CDX_HF_SW_NOPE, .bos = 128000, .eos = 128001,
                .bias = CDX_HF_B_ATTN, .mlp_bias_key = true, .nope_interval = 4 } } },
    .gguf_name = "smollm3",
    .gguf_rope = CDX_ROPE_ADJACENT, /* SmolLM3Model(LlamaModel): q/k permuted */
    .gguf_nope_step = 4,
    .gguf_vocab_rope_keys = true,
    .gguf_rope_freqs = true,
    .bf16 = true,                   /* tests/golden/bf16-smollm3.json */
};
