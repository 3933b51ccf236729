/* Qwen2-VL and Qwen2.5-VL, their text path (transformers modeling_qwen2_vl.py / modeling_qwen2_5_vl.py;
 * llama.cpp's "qwen2vl", which both convert to): Qwen2's decoder (q/k/v biases) whose RoPE is multimodal:
 * mrope_section splits each half of head_dim over temporal, height and width positions
 * (apply_multimodal_rotary_pos_emb, ops.c's model_rope_sections). Text tokens have the three equal; the vision
 * tower that would give an image's patches their own is not computed, so images are refused. */
#include "model/arch.h"

const arch_desc family_qwen2vl = {
    .arch = CDX_ARCH_QWEN2VL,
    .family = "qwen2_vl",
    /* Qwen2VLTextConfig's / Qwen2_5_VLTextConfig's defaults (the same) */
    .hf = { { CDX_HF_QWEN2_VL, "Qwen2-VL", "text only (the vision tower is not computed: images are refused)",
              { .arch = "Qwen2VLForConditionalGeneration", .model_type = "qwen2_vl", .kv_heads = 8, .rms_eps = 1e-5,
                .rope_theta = 1000000.0, .max_pos = 32768, .sliding = 4096, .sw = CDX_HF_SW_QWEN, .bos = -1,
                .eos = -1, .bias = CDX_HF_B_QKV, .layout = CDX_HF_TEXT_MROPE } },
            { CDX_HF_QWEN2_5_VL, "Qwen2.5-VL", "text only (the vision tower is not computed: images are refused)",
              { .arch = "Qwen2_5_VLForConditionalGeneration", .model_type = "qwen2_5_vl", .kv_heads = 8,
                .rms_eps = 1e-5, .rope_theta = 1000000.0, .max_pos = 32768, .sliding = 4096, .sw = CDX_HF_SW_QWEN,
                .bos = -1, .eos = -1, .bias = CDX_HF_B_QKV, .layout = CDX_HF_TEXT_MROPE } } },
    .gguf_name = "qwen2vl",
    .gguf_rope = CDX_ROPE_HALVES,
    .qkv_bias = true,
    .mrope = true,
    .bf16 = true,                                   /* forward_bf16.c, sections included (tests/golden/qwen2vl.json) */
    .vl_text_only = "caldrix runs Qwen2-VL's text path only; its vision tower is not computed",
};
