/* The one table of ggml tensor types: names, block sizes, bytes per block and the scalar
 * reference functions. Ids are GGUF's; retired ids keep their slot (ggml.c does the same). */
#include "caldrix/quant.h"
#include "quant/quant_ref.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static void f32_to_f32(const void *in, float *out, int64_t n) { memcpy(out, in, (size_t)n * sizeof(float)); }
static void f32_from_f32(const float *in, void *out, int64_t n) { memcpy(out, in, (size_t)n * sizeof(float)); }
static void f16_to_f32(const void *in, float *out, int64_t n)
{
    const uint16_t *h = in;
    for (int64_t i = 0; i < n; i++)
        out[i] = cdx_f16_to_f32(h[i]);
}
static void f16_from_f32(const float *in, void *out, int64_t n)
{
    uint16_t *h = out;
    for (int64_t i = 0; i < n; i++)
        h[i] = cdx_f32_to_f16(in[i]);
}
static void bf16_to_f32(const void *in, float *out, int64_t n)
{
    const uint16_t *h = in;
    for (int64_t i = 0; i < n; i++)
        out[i] = cdx_bf16_to_f32(h[i]);
}
static void bf16_from_f32(const float *in, void *out, int64_t n)
{
    uint16_t *h = out;
    for (int64_t i = 0; i < n; i++)
        h[i] = cdx_f32_to_bf16(in[i]);
}

/* Dots of plain float rows: products in float, summed in double (as ggml's scalar path). */
float cdx_f32_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * y[i]);
    return (float)sum;
}

float cdx_f16_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(cdx_f16_to_f32(x[i]) * cdx_f16_to_f32(y[i]));
    return (float)sum;
}

float cdx_bf16_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(cdx_bf16_to_f32(x[i]) * cdx_bf16_to_f32(y[i]));
    return (float)sum;
}

static const cdx_type_traits k_types[CDX_TYPE_COUNT] = {
    [CDX_TYPE_F32]     = { "f32",     1,   4,   false, f32_to_f32,  f32_from_f32,  CDX_TYPE_F32,  cdx_f32_dot_ref },
    [CDX_TYPE_F16]     = { "f16",     1,   2,   false, f16_to_f32,  f16_from_f32,  CDX_TYPE_F16,  cdx_f16_dot_ref },
    [CDX_TYPE_Q4_0]    = { "q4_0",    32,  18,  false, cdx_q4_0_to_f32_ref, cdx_q4_0_from_f32_ref, CDX_TYPE_Q8_0, cdx_q4_0_dot_ref },
    [CDX_TYPE_Q4_1]    = { "q4_1",    32,  20,  false, cdx_q4_1_to_f32_ref, cdx_q4_1_from_f32_ref, CDX_TYPE_Q8_1, cdx_q4_1_dot_ref },
    [4]                = { "q4_2",    32,  0,   true,  NULL, NULL, 0, NULL },
    [5]                = { "q4_3",    32,  0,   true,  NULL, NULL, 0, NULL },
    [CDX_TYPE_Q5_0]    = { "q5_0",    32,  22,  false, cdx_q5_0_to_f32_ref, cdx_q5_0_from_f32_ref, CDX_TYPE_Q8_0, cdx_q5_0_dot_ref },
    [CDX_TYPE_Q5_1]    = { "q5_1",    32,  24,  false, cdx_q5_1_to_f32_ref, cdx_q5_1_from_f32_ref, CDX_TYPE_Q8_1, cdx_q5_1_dot_ref },
    [CDX_TYPE_Q8_0]    = { "q8_0",    32,  34,  false, cdx_q8_0_to_f32_ref, cdx_q8_0_from_f32_ref, CDX_TYPE_Q8_0, cdx_q8_0_dot_ref, cdx_q8_0_from_f32_act },
    [CDX_TYPE_Q8_1]    = { "q8_1",    32,  36,  false, cdx_q8_1_to_f32_ref, cdx_q8_1_from_f32_ref, CDX_TYPE_Q8_1, NULL, cdx_q8_1_from_f32_act },
    [CDX_TYPE_Q2_K]    = { "q2_K",    256, 84,  false, cdx_q2_K_to_f32_ref, cdx_q2_K_from_f32_ref, CDX_TYPE_Q8_K, cdx_q2_K_dot_ref },
    [CDX_TYPE_Q3_K]    = { "q3_K",    256, 110, false, cdx_q3_K_to_f32_ref, cdx_q3_K_from_f32_ref, CDX_TYPE_Q8_K, cdx_q3_K_dot_ref },
    [CDX_TYPE_Q4_K]    = { "q4_K",    256, 144, false, cdx_q4_K_to_f32_ref, cdx_q4_K_from_f32_ref, CDX_TYPE_Q8_K, cdx_q4_K_dot_ref },
    [CDX_TYPE_Q5_K]    = { "q5_K",    256, 176, false, cdx_q5_K_to_f32_ref, cdx_q5_K_from_f32_ref, CDX_TYPE_Q8_K, cdx_q5_K_dot_ref },
    [CDX_TYPE_Q6_K]    = { "q6_K",    256, 210, false, cdx_q6_K_to_f32_ref, cdx_q6_K_from_f32_ref, CDX_TYPE_Q8_K, cdx_q6_K_dot_ref },
    [CDX_TYPE_Q8_K]    = { "q8_K",    256, 292, false, cdx_q8_K_to_f32_ref, cdx_q8_K_from_f32_ref, CDX_TYPE_Q8_K, NULL },
    [CDX_TYPE_IQ2_XXS] = { "iq2_xxs", 256, 66,  false, cdx_iq2_xxs_to_f32_ref, NULL, CDX_TYPE_Q8_K, cdx_iq2_xxs_dot_ref },
    [CDX_TYPE_IQ2_XS]  = { "iq2_xs",  256, 74,  false, cdx_iq2_xs_to_f32_ref, NULL, CDX_TYPE_Q8_K, cdx_iq2_xs_dot_ref },
    [CDX_TYPE_IQ3_XXS] = { "iq3_xxs", 256, 98,  false, cdx_iq3_xxs_to_f32_ref, cdx_iq3_xxs_from_f32_ref, CDX_TYPE_Q8_K, cdx_iq3_xxs_dot_ref },
    [CDX_TYPE_IQ1_S]   = { "iq1_s",   256, 50,  false, cdx_iq1_s_to_f32_ref, NULL, CDX_TYPE_Q8_K, cdx_iq1_s_dot_ref },
    [CDX_TYPE_IQ4_NL]  = { "iq4_nl",  32,  18,  false, cdx_iq4_nl_to_f32_ref, cdx_iq4_nl_from_f32_ref, CDX_TYPE_Q8_0, cdx_iq4_nl_dot_ref },
    [CDX_TYPE_IQ3_S]   = { "iq3_s",   256, 110, false, cdx_iq3_s_to_f32_ref, cdx_iq3_s_from_f32_ref, CDX_TYPE_Q8_K, cdx_iq3_s_dot_ref },
    [CDX_TYPE_IQ2_S]   = { "iq2_s",   256, 82,  false, cdx_iq2_s_to_f32_ref, cdx_iq2_s_from_f32_ref, CDX_TYPE_Q8_K, cdx_iq2_s_dot_ref },
    [CDX_TYPE_IQ4_XS]  = { "iq4_xs",  256, 136, false, cdx_iq4_xs_to_f32_ref, cdx_iq4_xs_from_f32_ref, CDX_TYPE_Q8_K, cdx_iq4_xs_dot_ref },
    [CDX_TYPE_I8]      = { "i8",      1,   1,   false, NULL, NULL, CDX_TYPE_I8,   NULL },
    [CDX_TYPE_I16]     = { "i16",     1,   2,   false, NULL, NULL, CDX_TYPE_I16,  NULL },
    [CDX_TYPE_I32]     = { "i32",     1,   4,   false, NULL, NULL, CDX_TYPE_I32,  NULL },
    [CDX_TYPE_I64]     = { "i64",     1,   8,   false, NULL, NULL, CDX_TYPE_I64,  NULL },
    [CDX_TYPE_F64]     = { "f64",     1,   8,   false, NULL, NULL, CDX_TYPE_F64,  NULL },
    [CDX_TYPE_IQ1_M]   = { "iq1_m",   256, 56,  false, cdx_iq1_m_to_f32_ref, cdx_iq1_m_from_f32_ref, CDX_TYPE_Q8_K, cdx_iq1_m_dot_ref },
    [CDX_TYPE_BF16]    = { "bf16",    1,   2,   false, bf16_to_f32, bf16_from_f32, CDX_TYPE_BF16, cdx_bf16_dot_ref },
    [31]               = { "q4_0_4_4", 32, 0,   true,  NULL, NULL, 0, NULL },
    [32]               = { "q4_0_4_8", 32, 0,   true,  NULL, NULL, 0, NULL },
    [33]               = { "q4_0_8_8", 32, 0,   true,  NULL, NULL, 0, NULL },
    [CDX_TYPE_TQ1_0]   = { "tq1_0",   256, 54,  false, cdx_tq1_0_to_f32_ref, cdx_tq1_0_from_f32_ref, CDX_TYPE_Q8_K, cdx_tq1_0_dot_ref },
    [CDX_TYPE_TQ2_0]   = { "tq2_0",   256, 66,  false, cdx_tq2_0_to_f32_ref, cdx_tq2_0_from_f32_ref, CDX_TYPE_Q8_K, cdx_tq2_0_dot_ref },
    [36]               = { "iq4_nl_4_4", 32, 0, true,  NULL, NULL, 0, NULL },
    [37]               = { "iq4_nl_4_8", 32, 0, true,  NULL, NULL, 0, NULL },
    [38]               = { "iq4_nl_8_8", 32, 0, true,  NULL, NULL, 0, NULL },
    [CDX_TYPE_MXFP4]   = { "mxfp4",   32,  17,  false, cdx_mxfp4_to_f32_ref, cdx_mxfp4_from_f32_ref, CDX_TYPE_Q8_0, cdx_mxfp4_dot_ref },
    [CDX_TYPE_NVFP4]   = { "nvfp4",   64,  36,  false, cdx_nvfp4_to_f32_ref, cdx_nvfp4_from_f32_ref, CDX_TYPE_Q8_0, cdx_nvfp4_dot_ref },
    [CDX_TYPE_Q1_0]    = { "q1_0",    128, 18,  false, cdx_q1_0_to_f32_ref, cdx_q1_0_from_f32_ref, CDX_TYPE_Q8_0, cdx_q1_0_dot_ref },
    [CDX_TYPE_Q2_0]    = { "q2_0",    64,  18,  false, cdx_q2_0_to_f32_ref, cdx_q2_0_from_f32_ref, CDX_TYPE_Q8_0, cdx_q2_0_dot_ref },
};

const cdx_type_traits *cdx_type_get(uint32_t id)
{
    if (id >= CDX_TYPE_COUNT || !k_types[id].name)
        return NULL;
    return &k_types[id];
}

const char *cdx_type_name(uint32_t id)
{
    static const char *const k_unknown = "unknown";
    const cdx_type_traits *t = cdx_type_get(id);
    return t ? t->name : k_unknown;
}

int cdx_type_from_name(const char *name)
{
    for (int i = 0; i < CDX_TYPE_COUNT; i++)
        if (k_types[i].name && !k_types[i].retired && !strcasecmp(k_types[i].name, name))
            return i;
    return -1;
}

int cdx_type_row_bytes(uint32_t id, uint64_t n_cols, size_t *out, cdx_err *err)
{
    const cdx_type_traits *t = cdx_type_get(id);
    if (!t)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "tensor type id %u is unknown to caldrix", id);
    if (t->retired)
        return cdx_err_set(err, CDX_EUNSUPPORTED,
                           "tensor type %u (%s) was retired from ggml; re-convert the model", id, t->name);
    if (n_cols % t->block)
        return cdx_err_set(err, CDX_EFORMAT, "row of %llu values is not a multiple of the %s block (%u)",
                           (unsigned long long)n_cols, t->name, t->block);
    if (!cdx_mul_size((size_t)(n_cols / t->block), t->bytes, out) || n_cols / t->block > SIZE_MAX)
        return cdx_err_set(err, CDX_ERANGE, "row of %llu %s values overflows", (unsigned long long)n_cols, t->name);
    return CDX_OK;
}

/* ---- half precision ---- */

float cdx_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3FF) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } v = { .u = bits };
    return v.f;
}

uint16_t cdx_f32_to_f16(float f)
{
    union { float f; uint32_t u; } v = { .f = f };
    uint32_t x = v.u, sign = (x >> 16) & 0x8000;
    uint32_t exp = (x >> 23) & 0xFF, man = x & 0x7FFFFF;
    if (exp == 0xFF) /* inf / nan (keep nan quiet) */
        return (uint16_t)(sign | 0x7C00 | (man ? 0x200 | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7C00);
    if (e <= 0) { /* subnormal or zero in f16 */
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++; /* may carry into the exponent, which is the right answer (up to inf) */
    return (uint16_t)(sign | half);
}

uint16_t cdx_f32_to_bf16(float f)
{
    union { float f; uint32_t u; } v = { .f = f };
    if ((v.u & 0x7FFFFFFF) > 0x7F800000) /* nan: keep it a quiet nan */
        return (uint16_t)((v.u >> 16) | 64);
    return (uint16_t)((v.u + (0x7FFF + ((v.u >> 16) & 1))) >> 16);
}
