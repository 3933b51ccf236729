/* Qwen3.5 (transformers modeling_qwen3_5.py on qwen3_next; llama.cpp's "qwen35"): Gated DeltaNet
 * layers beside gated full-attention layers with partial rotary, norms x·(1 + w); its own pass
 * (qwen35.c). llama.cpp's converter adds the norms' 1 and names the FFN norm post_attention_norm. */
#include "model/arch.h"

static const role_name k_names[] = {
    { ROLE_FFN_NORM, false, true, "blk.%d.post_attention_norm.weight" },
    { 0, false, false, NULL },
};

const arch_desc family_qwen3_5 = {
    .arch = CDX_ARCH_QWEN3_5,
    .family = "qwen3_5",
    /* Qwen3_5TextConfig's defaults; its sliding window and layer pattern are read by the config
     * reader's read_qwen35 */
    .hf = { { CDX_HF_QWEN3_5, "Qwen3.5", "CPU lane only",
              { .arch = "Qwen3_5ForCausalLM", .model_type = "qwen3_5_text", .kv_heads = 4, .head_dim = 256,
                .rms_eps = 1e-6, .rope_theta = 10000.0, .max_pos = 32768, .sw = CDX_HF_SW_NONE, .bos = -1, .eos = -1,
                .bias = CDX_HF_B_ATTN, .layout = CDX_HF_TEXT_QWEN35 } },
            { CDX_HF_QWEN3_5_VL, "Qwen3.5", "text only (the vision tower is skipped); CPU lane only",
              { .arch = "Qwen3_5ForConditionalGeneration", .model_type = "qwen3_5", .kv_heads = 4, .head_dim = 256,
                .rms_eps = 1e-6, .rope_theta = 10000.0, .max_pos = 32768, .sw = CDX_HF_SW_NONE, .bos = -1, .eos = -1,
                .bias = CDX_HF_B_ATTN, .layout = CDX_HF_TEXT_QWEN35_VL } } },
    .gguf_name = "qwen35",
    .gguf_rope = CDX_ROPE_HALVES,
    .qk_norm = true,
    .hybrid = true,
    .hf_norm_offset = 1.0f,
    .names = k_names,
};
