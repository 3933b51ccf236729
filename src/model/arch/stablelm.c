/* StableLM (transformers modeling_stablelm.py; llama.cpp's "stablelm"): LayerNorms with biases, RoPE on
 * the first partial_rotary_factor of each head (rotate_half over those dims, the rest passed through),
 * q/k/v biases when use_qkv_bias, and with use_parallel_residual one norm per layer feeding both branches
 * (x + attn(ln(x)) + mlp(ln(x)); no post_attention_layernorm). llama.cpp loads the biases and the FFN
 * norm as optional tensors: a GGUF file without ffn_norm is the parallel block. */
#include "model/arch.h"

const arch_desc family_stablelm = {
    .arch = CDX_ARCH_STABLELM,
    .family = "stablelm",
    /* StableLmConfig's defaults: kv heads = heads, eps 1e-5, partial_rotary_factor 0.25, bos = eos = 0 */
    .hf = { { CDX_HF_STABLELM, "StableLM", "",
              { .arch = "StableLmForCausalLM", .model_type = "stablelm", .rms_eps = 1e-5, .rope_theta = 10000.0,
                .max_pos = 4096, .sw = CDX_HF_SW_NONE, .bos = 0, .eos = 0, .bias = CDX_HF_B_USE_QKV,
                .eps_key = "layer_norm_eps", .partial_rotary = 0.25,
                .parallel_key = "use_parallel_residual", .qk_norm_key = "qk_layernorm" } } },
    .gguf_name = "stablelm",
    .gguf_rope = CDX_ROPE_HALVES, /* LLAMA_ROPE_TYPE_NEOX: q/k not permuted */
    .layer_norm = true,
    .norm_bias = true,
    .gguf_optional = true,
    .bf16 = true, /* tests/golden/bf16-stablelm.json (sequential residual; the parallel block is refused in bf16) */
};
