/* Phi-3 (transformers modeling_phi3.py; llama.cpp's "phi3"): Llama with q, k, v as one qkv_proj and
 * gate, up as one gate_up_proj (split at load into row ranges), partial rotary, a window over every
 * layer, and LongRoPE (rope.c: short factors up to original_max_position_embeddings, then the long
 * ones for every position, cos/sin × sqrt(1 + ln(factor) / ln(original))). */
#include "model/arch.h"

const arch_desc family_phi3 = {
    .arch = CDX_ARCH_PHI3,
    .family = "phi3",
    /* Phi3Config's defaults: kv heads = heads, eps 1e-5, 4096 positions (and original), no window */
    .hf = { { CDX_HF_PHI3, "Phi-3", "",
              { .arch = "Phi3ForCausalLM", .model_type = "phi3", .rms_eps = 1e-5, .rope_theta = 10000.0,
                .max_pos = 4096, .sw = CDX_HF_SW_ALL, .bos = 1, .eos = 32000, .bias = CDX_HF_B_NONE,
                .partial_rotary = 1.0, .orig_max_pos_key = true } } },
    .gguf_name = "phi3",
    .gguf_rope = CDX_ROPE_HALVES, /* llama.cpp's phi3 rotates NeoX-style: q/k not permuted */
    .fused_qkv = true,            /* qkv_proj / blk.N.attn_qkv */
    .fused_gate_up = true,        /* gate_up_proj / blk.N.ffn_up (2·n_ff rows) */
    .gguf_swa_all = true,         /* attention.sliding_window over every layer (llama.cpp ignores it) */
    .bf16 = true,                 /* its bf16 goldens (LongRoPE included) pass through forward_bf16.c */
};
