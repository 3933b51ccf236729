/* BERT and XLM-RoBERTa encoders (transformers modeling_bert.py BertModel, modeling_xlm_roberta.py
 * XLMRobertaModel): word + position + token-type embeddings and a LayerNorm, post-LN layers with
 * biased q/k/v/o and an exact-GELU MLP, bidirectional attention; no KV cache (encoder.c). XLM-R
 * differs by its position ids, which start after the padding id. */
#include "model/arch.h"

const arch_desc family_bert = {
    .arch = CDX_ARCH_BERT,
    .family = "bert",
    .gguf_name = "bert", /* llama.cpp's LLM_ARCH_BERT, which XLM-RoBERTa converts to as well */
    .hf = { { CDX_HF_BERT, "BERT", "encoder: embeddings (caldrix embed, /v1/embeddings)",
              { .arch = "BertModel", .model_type = "bert", .rms_eps = 1e-12, .max_pos = 512, .bos = -1, .eos = -1,
                .bias = CDX_HF_B_NONE, .layout = CDX_HF_ENCODER, .act = CDX_HF_ACT_GELU, .type_vocab = 2 } },
            { CDX_HF_XLM_ROBERTA, "XLM-RoBERTa", "encoder: embeddings (caldrix embed, /v1/embeddings)",
              { .arch = "XLMRobertaModel", .model_type = "xlm-roberta", .rms_eps = 1e-12, .max_pos = 512, .bos = 0,
                .eos = 2, .bias = CDX_HF_B_NONE, .layout = CDX_HF_ENCODER, .act = CDX_HF_ACT_GELU,
                .pos_after_pad = true, .type_vocab = 2 } } },
    .encoder = true,
};
