/* Granite MoE (transformers modeling_granitemoe.py; llama.cpp's "granitemoe"): Granite's four scalings
 * outside the layers, experts on every layer weighed by a softmax over the k largest router logits
 * (GraniteMoeTopKGating), the experts stacked in the checkpoint: block_sparse_moe.input_linear [E, 2I, H]
 * (gate rows, then up rows) and output_linear [E, H, I], split into the expert layout at load, and by
 * convert into llama.cpp's ffn_gate_exps / ffn_up_exps / ffn_down_exps (conversion/granite.py
 * GraniteMoeModel, a GraniteModel(LlamaModel): q/k permuted, LlamaModel's and Granite's keys). */
#include "model/arch.h"

static const role_name k_names[] = {
    { MOE_ROUTER, true, false, "model.layers.%d.block_sparse_moe.router.layer.weight" },
    { MOE_GATE, true, false, "model.layers.%d.block_sparse_moe.input_linear.weight" },
    { MOE_DOWN, true, false, "model.layers.%d.block_sparse_moe.output_linear.weight" },
    { 0, false, false, NULL },
};

const arch_desc family_granitemoe = {
    .arch = CDX_ARCH_GRANITEMOE,
    .family = "granitemoe",
    /* GraniteMoeConfig's defaults: kv heads = heads, 8 experts, 2 per token, every multiplier 1 */
    .hf = { { CDX_HF_GRANITEMOE, "Granite MoE", "mixture of experts",
              { .arch = "GraniteMoeForCausalLM", .model_type = "granitemoe", .rms_eps = 1e-6, .rope_theta = 10000.0,
                .max_pos = 2048, .sw = CDX_HF_SW_NONE, .bos = 1, .eos = 2, .moe = 2, .bias = CDX_HF_B_ATTN,
                .experts = 8, .per_tok = 2, .norm_topk = true,
                .scale_keys = { [CDX_HF_SCALE_EMBD] = "embedding_multiplier",
                                [CDX_HF_SCALE_RESIDUAL] = "residual_multiplier",
                                [CDX_HF_SCALE_ATTN] = "attention_multiplier",
                                [CDX_HF_SCALE_LOGIT_DIV] = "logits_scaling" } } } },
    .gguf_name = "granitemoe",
    .gguf_rope = CDX_ROPE_ADJACENT,
    .gguf_vocab_rope_keys = true,
    .gguf_rope_freqs = true,
    .moe = true,
    .bf16 = true,                 /* its bf16 goldens pass through forward_bf16.c and ops.c's model_moe */
    .norm_topk = true,
    .moe_topk_softmax = true,
    .experts_ff_wide = true,
    .hf_experts_fused = true,
    .gguf_scales = true,
    .names = k_names,
};
