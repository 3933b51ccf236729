/* Cohere / Command R (transformers modeling_cohere.py; llama.cpp's "command-r"): LayerNorms without bias,
 * one per layer feeding both branches (x + attn(ln(x)) + mlp(ln(x))), RoPE on interleaved pairs (2i, 2i+1)
 * (repeat_interleave'd cos/sin with Cohere's rotate_half: ggml's normal RoPE, so q/k are not permuted),
 * and the logits × logit_scale. use_qk_norm (Command R+'s per-head LayerNorms) is refused by name. */
#include "model/arch.h"

const arch_desc family_cohere = {
    .arch = CDX_ARCH_COHERE,
    .family = "cohere",
    /* CohereConfig's defaults: kv heads = heads, eps 1e-5, logit_scale 0.0625, tied, bos 5, eos 255001 */
    .hf = { { CDX_HF_COHERE, "Cohere", "",
              { .arch = "CohereForCausalLM", .model_type = "cohere", .rms_eps = 1e-5, .rope_theta = 10000.0,
                .max_pos = 8192, .sw = CDX_HF_SW_NONE, .bos = 5, .eos = 255001, .bias = CDX_HF_B_ATTN, .tied = true,
                .eps_key = "layer_norm_eps", .parallel = true, .qk_norm_key = "use_qk_norm",
                .scale_keys = { [CDX_HF_SCALE_LOGIT_MUL] = "logit_scale" },
                .scale_defaults = { [CDX_HF_SCALE_LOGIT_MUL] = 0.0625 } } } },
    .gguf_name = "command-r",
    .gguf_rope = CDX_ROPE_ADJACENT, /* LLAMA_ROPE_TYPE_NORM */
    .hf_rope_adjacent = true,
    .layer_norm = true,
    .gguf_logit_mul = true,
    .bf16 = true,             /* tests/golden/bf16-cohere.json */
    .bf16_rope_f32 = true,    /* apply_rotary_pos_emb in float on interleaved pairs, */
    .bf16_trig = true,        /* with CohereRotaryEmbedding's cos/sin cast to bf16 */
    .bf16_ln_centered = true, /* CohereLayerNorm */
};
