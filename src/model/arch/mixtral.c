/* Mixtral (transformers modeling_mixtral.py): Llama with every layer sparse, experts as wide as
 * intermediate_size, the top-k always renormalised. llama.cpp has no architecture of its own for it:
 * its GGUF files say "llama" and carry llama.expert_count. */
#include "model/arch.h"

static const role_name k_names[] = {
    { MOE_ROUTER, true, false, "model.layers.%d.block_sparse_moe.gate.weight" },
    { MOE_GATE, true, false, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight" },
    { MOE_UP, true, false, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight" },
    { MOE_DOWN, true, false, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight" },
    { 0, false, false, NULL },
};

const arch_desc family_mixtral = {
    .arch = CDX_ARCH_MIXTRAL,
    .family = "mixtral",
    .hf = { { CDX_HF_MIXTRAL, "Mixtral", "mixture of experts",
              { .arch = "MixtralForCausalLM", .model_type = "mixtral", .kv_heads = 8, .rms_eps = 1e-5, .rope_theta = 1e6,
                .max_pos = 4096 * 32, .sw = CDX_HF_SW_ALL, .bos = 1, .eos = 2, .moe = 2, .bias = CDX_HF_B_NONE,
                .experts = 8, .per_tok = 2, .norm_topk = true } } },
    .gguf_experts_of = "llama",
    .gguf_rope = CDX_ROPE_ADJACENT,
    .moe = true,
    .bf16 = true,                 /* its bf16 goldens pass through forward_bf16.c and ops.c's model_moe */
    .norm_topk = true,
    .experts_ff_wide = true,
    .gguf_vocab_rope_keys = true,
    .gguf_rope_freqs = true,
    .names = k_names,
};
