/* Granite (transformers modeling_granite.py; llama.cpp's "granite"): Llama with four scalings outside
 * the layers, each of which a model computed without gives fluent nonsense: the embeddings ×
 * embedding_multiplier, each branch × residual_multiplier before its residual add, the softmax scale
 * attention_multiplier in place of head_dim^-½, the logits ÷ logits_scaling. */
#include "model/arch.h"

const arch_desc family_granite = {
    .arch = CDX_ARCH_GRANITE,
    .family = "granite",
    /* GraniteConfig's defaults: kv heads = heads, no head_dim key, every multiplier 1 */
    .hf = { { CDX_HF_GRANITE, "Granite", "",
              { .arch = "GraniteForCausalLM", .model_type = "granite", .rms_eps = 1e-6, .rope_theta = 10000.0,
                .max_pos = 2048, .sw = CDX_HF_SW_NONE, .bos = 1, .eos = 2, .bias = CDX_HF_B_ATTN, .mlp_bias_key = true,
                .scale_keys = { [CDX_HF_SCALE_EMBD] = "embedding_multiplier",
                                [CDX_HF_SCALE_RESIDUAL] = "residual_multiplier",
                                [CDX_HF_SCALE_ATTN] = "attention_multiplier",
                                [CDX_HF_SCALE_LOGIT_DIV] = "logits_scaling" } } } },
    .gguf_name = "granite",
    .gguf_rope = CDX_ROPE_ADJACENT, /* GraniteModel(LlamaModel): q/k permuted */
    .gguf_vocab_rope_keys = true,
    .gguf_rope_freqs = true,
    .gguf_scales = true,
    .bf16 = true,                   /* tests/golden/bf16-granite.json: the multipliers in f32, one rounding each */
};
