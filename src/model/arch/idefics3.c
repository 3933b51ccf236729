/* Idefics3 (SmolVLM; transformers modeling_idefics3.py): a Llama text model under model.text_model.*,
 * plus the vision tower and connector (vision.c) whose features replace the <image> tokens' embeddings.
 * No GGUF form. */
#include "model/arch.h"

const arch_desc family_idefics3 = {
    .arch = CDX_ARCH_IDEFICS3,
    .family = "idefics3",
    /* the text model is a LlamaConfig (text_config); the config reader's read_vision reads the rest */
    .hf = { { CDX_HF_IDEFICS3, "Idefics3", "vision-language; CPU lane only",
              { .arch = "Idefics3ForConditionalGeneration", .model_type = "idefics3", .rms_eps = 1e-6,
                .rope_theta = 10000.0, .max_pos = 2048, .sw = CDX_HF_SW_NONE, .bos = 1, .eos = 2,
                .bias = CDX_HF_B_ATTN, .mlp_bias_key = true, .layout = CDX_HF_TEXT_VISION } } },
    .gguf_rope = CDX_ROPE_HALVES,
    .hf_text_prefix = "model.text_model.",
    .vision = true,
};
