/* Gemma (transformers modeling_gemma.py): Llama with three differences outside its matrices, each of
 * which a port that drops it computes fluent nonsense with: RMSNorm weights stored as offsets, the norm
 * scaling by (1 + w); the embeddings × sqrt(hidden_size), a number in the compute type; the MLP a
 * GeGLU with gelu_pytorch_tanh (GemmaMLP reads hidden_activation only: google/gemma-2b's
 * "hidden_act": "gelu" with no hidden_activation still means tanh-GELU). Tied head by default. */
#include "model/arch.h"

const arch_desc family_gemma = {
    .arch = CDX_ARCH_GEMMA,
    .family = "gemma",
    /* GemmaConfig's defaults: 16 kv heads, head_dim 256, bos 2, eos 1, tied */
    .hf = { { CDX_HF_GEMMA, "Gemma", "",
              { .arch = "GemmaForCausalLM", .model_type = "gemma", .kv_heads = 16, .head_dim = 256, .rms_eps = 1e-6,
                .rope_theta = 10000.0, .max_pos = 8192, .sw = CDX_HF_SW_NONE, .bos = 2, .eos = 1,
                .bias = CDX_HF_B_ATTN, .tied = true, .act_key = "hidden_activation", .act = CDX_HF_ACT_GELU_TANH } } },
    .gguf_name = "gemma",                             /* llama.cpp's: norms stored + 1, lm_head dropped (tied) */
    .gguf_rope = CDX_ROPE_HALVES,                     /* LLAMA_ROPE_TYPE_NEOX: q/k not permuted */
    .hf_norm_offset = 1.0f,
    .embd_sqrt = true,
    .gguf_gemma = true,
    .bf16 = true,                                     /* tests/golden/bf16-gemma.json */
};
