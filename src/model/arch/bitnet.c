/* BitNet b1.58 (transformers modeling_bitnet.py with integrations/bitnet.py's BitLinear; llama.cpp's "bitnet").
 * The Llama decoder with an RMSNorm on the attention's output before o_proj (attn_sub_norm) and on act(gate)·up
 * before down_proj (ffn_sub_norm), hidden_act relu2 (relu(x)²) by default, tied or untied head, and, under
 * quantization_config bitnet (microsoft/bitnet-b1.58-2B-4T), every linear but the head a BitLinear: weights
 * stored packed, four ternary values a byte ("weight" U8 [rows/4, cols]) with a per-tensor "weight_scale", and
 * each token's input quantized to int8 (127 / absmax): y = Σ q(x)·t / (weight_scale · 127/absmax(x)),
 * computed exactly in integers (ops.c's model_bitlinear). Without quantization_config the linears are
 * transformers' plain nn.Linear.
 * GGUF "bitnet" (llama.cpp's src/models/bitnet.cpp) is another model: llama.cpp's graph gates with SiLU
 * whatever the checkpoint said, quantizes no activation per token (TQ1_0/TQ2_0 weights meet Q8_K blocks, as
 * in every ggml dot), multiplies each linear's output by its optional "<name>.scale" tensor and always ties the
 * head; caldrix reads a file as llama.cpp computes it. convert writes the ternary weights and 1/weight_scale
 * as those scales (exact in TQ1_0/TQ2_0), and refuses relu2 (no GGUF key says it). */
#include "model/arch.h"

const arch_desc family_bitnet = {
    .arch = CDX_ARCH_BITNET,
    .family = "bitnet",
    /* BitNetConfig's defaults: 5 kv heads, relu2, rope_theta 500000, bos 128000, eos 128001, untied */
    .hf = { { CDX_HF_BITNET, "BitNet", "BitNet b1.58: packed ternary BitLinear weights with int8 activations; f32",
              { .arch = "BitNetForCausalLM", .model_type = "bitnet", .kv_heads = 5, .rms_eps = 1e-5,
                .rope_theta = 500000.0, .max_pos = 2048, .sw = CDX_HF_SW_NONE, .bos = 128000, .eos = 128001,
                .bias = CDX_HF_B_ATTN, .act = CDX_HF_ACT_RELU2, .bitnet_quant = true } } },
    .gguf_name = "bitnet",
    .gguf_rope = CDX_ROPE_HALVES, /* llama.cpp's bitnet is LLAMA_ROPE_TYPE_NEOX: q/k not permuted */
    .bitnet = true,
    .bf16_none = "transformers' BitLinear runs activation_quant and post_quant_process under @torch.compile, whose "
                 "fused kernels (not the modeling code) decide where a bf16 model rounds the int8 scale, x·scale and "
                 "y / (weight_scale·scale); no PyTorch 2.x here to make goldens of that",
};
