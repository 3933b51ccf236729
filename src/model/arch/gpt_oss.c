/* GPT-OSS (transformers modeling_gpt_oss.py; llama.cpp's "gpt-oss"): q/k/v/o biases, a sink logit per head
 * that joins each softmax's denominator, sliding windows on the even layers (layer_types), YaRN from
 * rope_scaling, and a mixture of experts on every layer: a biased router whose k largest logits are
 * weighed by their softmax, biased experts with the clamped SwiGLU (up + 1)·g·sigmoid(1.702·g) (gate ≤ 7,
 * up within ±7). transformers stacks the experts as mlp.experts.gate_up_proj [E, H, 2I] (gate and up
 * interleaved) and down_proj [E, I, H]: the loader transposes them. Published checkpoints ship MXFP4 experts
 * (quantization_config): refused as every quantized checkpoint is.
 * GGUF "gpt-oss" (llama.cpp's src/models/openai-moe.cpp, conversion/gpt_oss.py): ffn_{gate,up,down}_exps stacked
 * with their .bias, ffn_gate_inp with its bias, attn_sinks.weight, the FFN norm named post_attention_norm; the
 * window over the layers l % p < p - 1 (attention.sliding_window_pattern p, default 2: the even layers); the
 * clamp and alpha are llama.cpp's constants (7, 1.702: no key), so convert refuses another swiglu_limit. */
#include "model/arch.h"

static const role_name k_names[] = {
    { ROLE_FFN_NORM, false, true, "blk.%d.post_attention_norm.weight" },
    { 0 },
};

const arch_desc family_gpt_oss = {
    .arch = CDX_ARCH_GPT_OSS,
    .family = "gpt_oss",
    /* GptOssConfig's defaults: 8 kv heads, head_dim 64, window 128 on the even layers, 128 experts top-4,
     * attention_bias true, untied */
    .hf = { { CDX_HF_GPT_OSS, "GPT-OSS", "mixture of experts",
              { .arch = "GptOssForCausalLM", .model_type = "gpt_oss", .kv_heads = 8, .head_dim = 64, .rms_eps = 1e-5,
                .rope_theta = 150000.0, .max_pos = 131072, .sliding = 128, .sw = CDX_HF_SW_EVEN, .bos = -1, .eos = -1,
                .moe = 2, .experts = 128, .per_tok = 4, .bias = CDX_HF_B_ATTN, .attn_bias_on = true,
                .swiglu_oai = true } } },
    .gguf_name = "gpt-oss",
    .gguf_swa_period = 2,
    .gguf_yarn_untruncated = true, /* GptOssConfig's truncate false: written as llama.cpp's YaRN (floor/ceil) */ /* llama.cpp: set_swa_pattern(attention.sliding_window_pattern, default 2) */
    .gguf_rope = CDX_ROPE_HALVES, /* NeoX: q/k not permuted */
    .qkv_bias = true,
    .linear_bias = true,
    .moe = true,
    .experts_ff_wide = true,
    .moe_topk_softmax = true,
    .attn_sinks = true,
    .moe_oai = true,
    .bf16 = true,           /* its bf16 golden (tests/golden/bf16-gpt_oss.json) passes through forward_bf16.c */
    .bf16_norm_once = true, /* GptOssRMSNorm: (weight * h).to(input_dtype) */
    .bf16_norm_f32 = true,  /* _keep_in_fp32_modules: the norms' weights stay f32 */
    .names = k_names,
};
