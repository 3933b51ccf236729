/* caldrix quant layer: every ggml tensor type, in one traits table.
 *
 *   const cdx_type_traits *t = cdx_type_get(CDX_TYPE_Q4_K);
 *   size_t row_bytes;  if (cdx_type_row_bytes(CDX_TYPE_Q4_K, 4096, &row_bytes) < 0) ...
 *
 * Type ids are GGUF's (ggml_type): retired ids keep their slot and are never reused.
 */
#ifndef CALDRIX_QUANT_H
#define CALDRIX_QUANT_H

#include "caldrix/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cdx_type {
    CDX_TYPE_F32 = 0, CDX_TYPE_F16 = 1, CDX_TYPE_Q4_0 = 2, CDX_TYPE_Q4_1 = 3,
    /* 4, 5: retired Q4_2, Q4_3 */
    CDX_TYPE_Q5_0 = 6, CDX_TYPE_Q5_1 = 7, CDX_TYPE_Q8_0 = 8, CDX_TYPE_Q8_1 = 9,
    CDX_TYPE_Q2_K = 10, CDX_TYPE_Q3_K = 11, CDX_TYPE_Q4_K = 12, CDX_TYPE_Q5_K = 13,
    CDX_TYPE_Q6_K = 14, CDX_TYPE_Q8_K = 15, CDX_TYPE_IQ2_XXS = 16, CDX_TYPE_IQ2_XS = 17,
    CDX_TYPE_IQ3_XXS = 18, CDX_TYPE_IQ1_S = 19, CDX_TYPE_IQ4_NL = 20, CDX_TYPE_IQ3_S = 21,
    CDX_TYPE_IQ2_S = 22, CDX_TYPE_IQ4_XS = 23, CDX_TYPE_I8 = 24, CDX_TYPE_I16 = 25,
    CDX_TYPE_I32 = 26, CDX_TYPE_I64 = 27, CDX_TYPE_F64 = 28, CDX_TYPE_IQ1_M = 29,
    CDX_TYPE_BF16 = 30,
    /* 31..33: retired Q4_0_4_4, Q4_0_4_8, Q4_0_8_8 */
    CDX_TYPE_TQ1_0 = 34, CDX_TYPE_TQ2_0 = 35,
    /* 36..38: retired IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8 */
    CDX_TYPE_MXFP4 = 39, CDX_TYPE_NVFP4 = 40, CDX_TYPE_Q1_0 = 41, CDX_TYPE_Q2_0 = 42,
    CDX_TYPE_COUNT
} cdx_type;

/* Dequantize n values (n a multiple of block) from blocks to f32. */
typedef void (*cdx_to_f32_fn)(const void *blocks, float *out, int64_t n);
/* Quantize n values (n a multiple of block); the reference (no importance matrix) quantizer. */
typedef void (*cdx_from_f32_fn)(const float *in, void *blocks, int64_t n);
/* Dot product of n values: x in this type, y in vec_dot_type. */
typedef float (*cdx_vec_dot_fn)(int64_t n, const void *x, const void *y);

typedef struct cdx_type_traits {
    const char *name;       /* ggml's name ("q4_K"); NULL for an unused or retired id */
    uint32_t block;         /* values per block */
    uint32_t bytes;         /* bytes per block */
    bool retired;           /* a GGUF id that once existed and is refused by name */
    cdx_to_f32_fn to_f32;   /* NULL where not implemented */
    cdx_from_f32_fn from_f32;
    cdx_type vec_dot_type;  /* the activation type its dot product pairs with */
    cdx_vec_dot_fn vec_dot; /* scalar reference dot */
    /* How llama.cpp's CPU backend quantizes activations of this type at run time (the scalar
     * oracle of the kernels' quantizers); NULL: from_f32. It differs from from_f32, which writes
     * files as ggml's *_ref quantizers do, only for Q8_0 and Q8_1 (see quant_legacy.c). */
    cdx_from_f32_fn act_from_f32;
} cdx_type_traits;

/* NULL for an id outside the table. A retired id returns its row (retired == true, name set). */
CDX_API const cdx_type_traits *cdx_type_get(uint32_t type_id);
/* The type's name ("q4_K", ...), or "unknown" for an id the table lacks (callers that report a bad
 * id print the number themselves). Static storage. */
CDX_API const char *cdx_type_name(uint32_t type_id);
/* Looks up a type by ggml name (case-insensitive, "Q4_K" or "q4_K"). -1 when unknown. */
CDX_API int cdx_type_from_name(const char *name);
/* Bytes of a row of n_cols values: fails when the type is unknown/retired or n_cols is not a
 * multiple of its block, or on overflow. */
CDX_API int cdx_type_row_bytes(uint32_t type_id, uint64_t n_cols, size_t *out, cdx_err *err);

/* Half-precision conversions (exact, round-to-nearest-even for f32 -> f16/bf16). */
CDX_API float cdx_f16_to_f32(uint16_t h);
CDX_API uint16_t cdx_f32_to_f16(float f);
static inline float cdx_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = { .u = (uint32_t)h << 16 };
    return v.f;
}
CDX_API uint16_t cdx_f32_to_bf16(float f);
/* f rounded to the nearest bf16 (ties to even), as a float: what torch's .to(torch.bfloat16) keeps
 * (the same rounding as cdx_f32_to_bf16, inline for the bf16 forward pass's elementwise ops). */
static inline float cdx_bf16_round(float f)
{
    union { float f; uint32_t u; } v = { .f = f };
    if ((v.u & 0x7FFFFFFF) > 0x7F800000) /* nan: keep it a quiet nan */
        v.u = (v.u | 0x00400000u) & 0xFFFF0000u;
    else
        v.u = (v.u + (0x7FFF + ((v.u >> 16) & 1))) & 0xFFFF0000u;
    return v.f;
}

/* ---- quantization mixtures: the per-tensor type llama.cpp's llama_model_quantize would pick ----
 *
 *   cdx_quant_mix mix;
 *   cdx_quant_model_info info = { .n_layer = 16, .n_gqa = 4, .n_expert = 0 };
 *   if (cdx_quant_mix_init(&mix, "Q4_K_M", &info, names, n_names, &err) < 0) ...
 *   sort names with cdx_quant_tensor_cmp, then for each tensor in that order:
 *       cdx_type t = cdx_quant_mix_choose(&mix, name, ne, src_type);
 */
typedef struct cdx_ftype_info {
    const char *name;      /* "Q4_K_M" */
    int llama_ftype;       /* the general.file_type value (llama_ftype) */
    cdx_type default_type; /* the type of most tensors */
} cdx_ftype_info;

/* Case-insensitive lookup of a file type name; NULL when unknown. */
CDX_API const cdx_ftype_info *cdx_ftype_find(const char *name);
CDX_API const cdx_ftype_info *cdx_ftype_by_id(int llama_ftype);

typedef struct cdx_quant_model_info {
    int n_layer;      /* transformer blocks (hparams n_layer) */
    int n_gqa;        /* n_head / n_head_kv (1 without GQA) */
    int n_expert;     /* 0 or 1 for dense models */
    bool arch_falcon; /* llama.cpp has Falcon-specific rules */
    bool is_70b;      /* llama.cpp's LLM_TYPE_70B rule for attn_v */
    bool has_imatrix; /* caldrix quantizes without one: false */
} cdx_quant_model_info;

typedef struct cdx_quant_mix {
    const cdx_ftype_info *ftype;
    cdx_quant_model_info info;
    bool tied_embeddings; /* no output.weight: token_embd is treated as the output head */
    int n_attention_wv;   /* attn_v-like tensors in the model */
    int i_attention_wv, i_ffn_down, i_ffn_gate, i_ffn_up; /* advanced by cdx_quant_mix_choose */
} cdx_quant_mix;

/* names: every tensor name of the model (to count attn_v tensors and find output.weight). */
CDX_API int cdx_quant_mix_init(cdx_quant_mix *m, const char *ftype, const cdx_quant_model_info *info,
                               const char *const *names, size_t n_names, cdx_err *err);
/* llama.cpp's tensor order: by "blk.N." layer (non-layer tensors first), then by name. */
CDX_API int cdx_quant_tensor_cmp(const char *a, const char *b);
/* The type for one tensor (ne: ggml dims, ne[0] = row length, unused dims 1); src_type is returned
 * for tensors that stay as they are (norms, 1D tensors, ...). Call in cdx_quant_tensor_cmp order. */
CDX_API cdx_type cdx_quant_mix_choose(cdx_quant_mix *m, const char *name, const int64_t ne[4], cdx_type src_type);

#ifdef __cplusplus
}
#endif
#endif
