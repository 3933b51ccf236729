/* Starcoder2 (transformers modeling_starcoder2.py; llama.cpp's "starcoder2"): LayerNorms with biases,
 * biases on every linear (use_bias: q, k, v, o_proj and the MLP's c_fc / c_proj), a plain MLP
 * c_proj(gelu_pytorch_tanh(c_fc(x))), and sliding_window over every layer. llama.cpp's starcoder2 has no
 * window: caldrix's convert writes attention.sliding_window, which llama.cpp ignores and caldrix reads. */
#include "model/arch.h"

static const role_name k_names[] = {
    { ROLE_UP, false, false, "model.layers.%d.mlp.c_fc.weight" },
    { ROLE_UP_B, false, false, "model.layers.%d.mlp.c_fc.bias" },
    { ROLE_DOWN, false, false, "model.layers.%d.mlp.c_proj.weight" },
    { ROLE_DOWN_B, false, false, "model.layers.%d.mlp.c_proj.bias" },
    { 0 },
};

const arch_desc family_starcoder2 = {
    .arch = CDX_ARCH_STARCODER2,
    .family = "starcoder2",
    /* Starcoder2Config's defaults: 2 kv heads, norm_epsilon 1e-5, no window, use_bias, tied, bos = eos = 50256 */
    .hf = { { CDX_HF_STARCODER2, "Starcoder2", "",
              { .arch = "Starcoder2ForCausalLM", .model_type = "starcoder2", .kv_heads = 2, .rms_eps = 1e-5,
                .rope_theta = 10000.0, .max_pos = 4096, .sw = CDX_HF_SW_ALL, .bos = 50256, .eos = 50256,
                .bias = CDX_HF_B_USE_BIAS, .tied = true, .act_key = "hidden_act", .act = CDX_HF_ACT_GELU_TANH,
                .eps_key = "norm_epsilon" } } },
    .gguf_name = "starcoder2",
    .gguf_rope = CDX_ROPE_HALVES, /* LLAMA_ROPE_TYPE_NEOX: q/k not permuted */
    .qkv_bias = true,
    .layer_norm = true,
    .norm_bias = true,
    .linear_bias = true,
    .mlp_plain = true,
    .gguf_window = true,
    .gguf_optional = true, /* a use_bias false file has no biases */
    .bf16 = true,          /* tests/golden/bf16-starcoder2.json */
    .names = k_names,
};
