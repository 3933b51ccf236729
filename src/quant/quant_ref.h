/* Scalar reference implementations of every ggml block format: packed block structs and, per
 * type, to_f32 (dequantize), from_f32 (reference quantizer, no importance matrix) and dot
 * (against the type's activation format). These are the oracle every SIMD kernel in src/kernel/
 * is tested against; the names are stable.
 *
 *   cdx_q4_0_to_f32_ref(blocks, out, n);        n a multiple of the block size
 *   cdx_q4_0_from_f32_ref(in, blocks, n);
 *   float s = cdx_q4_0_dot_ref(n, q4_0_blocks, q8_0_blocks);
 *
 * The layouts are ggml's (ggml-common.h); all multi-byte fields are little-endian and "half" is
 * IEEE binary16. Floating-point order follows ggml's reference code so that results match bit for
 * bit; this code must be compiled without FMA contraction (-std=c11 implies -ffp-contract=off
 * under GCC, and the baseline x86-64 target has no FMA). */
#ifndef CDX_QUANT_REF_H
#define CDX_QUANT_REF_H

#include "caldrix/quant.h"

#include <math.h>
#include <string.h>

#define CDX_QK_K 256

typedef uint16_t cdx_half;

typedef struct { cdx_half d; uint8_t qs[16]; } cdx_block_q1_0;               /* 128 values */
typedef struct { cdx_half d; uint8_t qs[16]; } cdx_block_q2_0;               /* 64 values */
typedef struct { cdx_half d; uint8_t qs[16]; } cdx_block_q4_0;
typedef struct { cdx_half d, m; uint8_t qs[16]; } cdx_block_q4_1;
typedef struct { uint8_t e; uint8_t qs[16]; } cdx_block_mxfp4;               /* e: E8M0 */
typedef struct { uint8_t d[4]; uint8_t qs[32]; } cdx_block_nvfp4;            /* d: UE4M3 per 16 */
typedef struct { cdx_half d; uint8_t qh[4]; uint8_t qs[16]; } cdx_block_q5_0;
typedef struct { cdx_half d, m; uint8_t qh[4]; uint8_t qs[16]; } cdx_block_q5_1;
typedef struct { cdx_half d; int8_t qs[32]; } cdx_block_q8_0;
typedef struct { cdx_half d, s; int8_t qs[32]; } cdx_block_q8_1;             /* s = d*sum(qs) */
typedef struct { uint8_t qs[48]; uint8_t qh[4]; cdx_half d; } cdx_block_tq1_0;
typedef struct { uint8_t qs[64]; cdx_half d; } cdx_block_tq2_0;
typedef struct { uint8_t scales[16]; uint8_t qs[64]; cdx_half d, dmin; } cdx_block_q2_K;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; cdx_half d; } cdx_block_q3_K;
typedef struct { cdx_half d, dmin; uint8_t scales[12]; uint8_t qs[128]; } cdx_block_q4_K;
typedef struct { cdx_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } cdx_block_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; cdx_half d; } cdx_block_q6_K;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } cdx_block_q8_K;
typedef struct { cdx_half d; uint16_t qs[32]; } cdx_block_iq2_xxs;
typedef struct { cdx_half d; uint16_t qs[32]; uint8_t scales[8]; } cdx_block_iq2_xs;
typedef struct { cdx_half d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; } cdx_block_iq2_s;
typedef struct { cdx_half d; uint8_t qs[96]; } cdx_block_iq3_xxs;
typedef struct { cdx_half d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; } cdx_block_iq3_s;
typedef struct { cdx_half d; uint8_t qs[32]; uint16_t qh[8]; } cdx_block_iq1_s;
typedef struct { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; } cdx_block_iq1_m;  /* no d: in scales */
typedef struct { cdx_half d; uint8_t qs[16]; } cdx_block_iq4_nl;
typedef struct { cdx_half d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } cdx_block_iq4_xs;

#define CDX_CHECK_BLOCK(t, bytes) _Static_assert(sizeof(t) == (bytes), "wrong size of " #t)
CDX_CHECK_BLOCK(cdx_block_q1_0, 18);
CDX_CHECK_BLOCK(cdx_block_q2_0, 18);
CDX_CHECK_BLOCK(cdx_block_q4_0, 18);
CDX_CHECK_BLOCK(cdx_block_q4_1, 20);
CDX_CHECK_BLOCK(cdx_block_mxfp4, 17);
CDX_CHECK_BLOCK(cdx_block_nvfp4, 36);
CDX_CHECK_BLOCK(cdx_block_q5_0, 22);
CDX_CHECK_BLOCK(cdx_block_q5_1, 24);
CDX_CHECK_BLOCK(cdx_block_q8_0, 34);
CDX_CHECK_BLOCK(cdx_block_q8_1, 36);
CDX_CHECK_BLOCK(cdx_block_tq1_0, 54);
CDX_CHECK_BLOCK(cdx_block_tq2_0, 66);
CDX_CHECK_BLOCK(cdx_block_q2_K, 84);
CDX_CHECK_BLOCK(cdx_block_q3_K, 110);
CDX_CHECK_BLOCK(cdx_block_q4_K, 144);
CDX_CHECK_BLOCK(cdx_block_q5_K, 176);
CDX_CHECK_BLOCK(cdx_block_q6_K, 210);
CDX_CHECK_BLOCK(cdx_block_q8_K, 292);
CDX_CHECK_BLOCK(cdx_block_iq2_xxs, 66);
CDX_CHECK_BLOCK(cdx_block_iq2_xs, 74);
CDX_CHECK_BLOCK(cdx_block_iq2_s, 82);
CDX_CHECK_BLOCK(cdx_block_iq3_xxs, 98);
CDX_CHECK_BLOCK(cdx_block_iq3_s, 110);
CDX_CHECK_BLOCK(cdx_block_iq1_s, 50);
CDX_CHECK_BLOCK(cdx_block_iq1_m, 56);
CDX_CHECK_BLOCK(cdx_block_iq4_nl, 18);
CDX_CHECK_BLOCK(cdx_block_iq4_xs, 136);

/* ---- lookup tables (quant_tables.c, quant_grids.c) ---- */

extern const int8_t cdx_kvalues_iq4nl[16];  /* IQ4_NL / IQ4_XS non-linear levels */
extern const int8_t cdx_kvalues_fp4[16];    /* E2M1 values doubled (MXFP4, NVFP4) */
extern const uint8_t cdx_ksigns_iq2xs[128]; /* 7 sign bits -> 8 with even parity */
extern const uint64_t cdx_iq2xxs_grid[256];
extern const uint64_t cdx_iq2xs_grid[512];
extern const uint64_t cdx_iq2s_grid[1024];
extern const uint32_t cdx_iq3xxs_grid[256];
extern const uint32_t cdx_iq3s_grid[512];
extern const uint64_t cdx_iq1s_grid[2048];
#define CDX_IQ1S_DELTA 0.125f

/* Byte j of a packed grid entry (endian-independent). */
static inline uint8_t cdx_grid8(uint64_t g, int j) { return (uint8_t)(g >> (8 * j)); }

/* Search index of a grid quantizer (quant_iq_index.c): pos holds each grid entry as ncoord
 * lattice positions 2*l+1; map[u] for a lattice point u (levels packed bits-wise) is its grid
 * index, or -(o+1) where neighbours[o] is the count and neighbours[o+1..] the nearest entries.
 * NULL only if the index could not be built (a bug). */
typedef struct cdx_iq_index {
    const uint8_t *pos;
    const int32_t *map;
    const uint16_t *neighbours;
} cdx_iq_index;
const cdx_iq_index *cdx_iq3xxs_index(void);
const cdx_iq_index *cdx_iq3s_index(void);
const cdx_iq_index *cdx_iq2s_index(void);
const cdx_iq_index *cdx_iq1s_index(void);

/* ---- small shared helpers ---- */

/* Round to nearest, ties to even, by the 1.5*2^23 trick (ggml's nearest_int); |f| <= 4194303. */
static inline int cdx_nearest_int(float f)
{
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* float -> int truncation with x86's answer (INT_MIN) for NaN and out-of-range values, where a
 * plain C cast is undefined: ggml's casts give that on x86, and caldrix stays defined. */
static inline int cdx_ftoi(float f)
{
    return f > -2147483648.0f && f < 2147483648.0f ? (int)f : (-2147483647 - 1);
}

static inline float cdx_h2f(cdx_half h) { return cdx_f16_to_f32(h); }
static inline cdx_half cdx_f2h(float f) { return cdx_f32_to_f16(f); }

/* E8M0 scale halved (MXFP4): 2^(e-128), with e < 2 as subnormals. */
static inline float cdx_e8m0_to_f32_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* UE4M3 scale (NVFP4), halved to match the doubled E2M1 table. */
static inline float cdx_ue4m3_to_f32(uint8_t x)
{
    if (x == 0 || x == 0x7F)
        return 0.0f;
    int e = (x >> 3) & 0xF, m = x & 7;
    float raw = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return raw * 0.5f;
}

/* 6-bit scale and min j (0..7) of a Q4_K / Q5_K block. */
static inline void cdx_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* ---- the x86 arithmetic of the q8_K dots ----
 *
 * llama.cpp's CPU libraries with AVX2 (haswell up to sapphirerapids, the AVX-512 ones included) run
 * the Q3_K, Q5_K and IQ4_XS dots (ggml-cpu/arch/x86/quants.c, the __AVX2__ branches) as 8 integer
 * lanes per super-block, lane l holding values 4l..4l+3 of every 32 (times their sub-block scale),
 * then per lane one fused multiply-add by the super-block's d across the super-blocks, then
 * hsum_float_8. Those dots are held to those bits on every kernel set (cdx_q8k_lanes_*). */
static inline void cdx_q8k_lanes_add(int32_t s[8], const int8_t *w, const int8_t *a, int scale, int n)
{
    for (int i = 0; i < n; i++)
        s[(i % 32) / 4] += scale * (w[i] * a[i]);
}
static inline void cdx_q8k_lanes_fma(float acc[8], float d, const int32_t s[8])
{
    for (int l = 0; l < 8; l++)
        acc[l] = fmaf(d, (float)s[l], acc[l]);
}
/* hsum_float_8: the upper four lanes onto the lower four, then pairs two apart, then the last two */
static inline float cdx_q8k_lanes_total(const float a[8])
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* ---- per-type reference functions ---- */

#define CDX_REF_DECL(t)                                                   \
    void cdx_##t##_to_f32_ref(const void *x, float *y, int64_t n);        \
    void cdx_##t##_from_f32_ref(const float *x, void *y, int64_t n);      \
    float cdx_##t##_dot_ref(int64_t n, const void *x, const void *y);

CDX_REF_DECL(q1_0)
CDX_REF_DECL(q2_0)
CDX_REF_DECL(q4_0)
CDX_REF_DECL(q4_1)
CDX_REF_DECL(q5_0)
CDX_REF_DECL(q5_1)
CDX_REF_DECL(q8_0)
CDX_REF_DECL(mxfp4)
CDX_REF_DECL(nvfp4)
CDX_REF_DECL(q2_K)
CDX_REF_DECL(q3_K)
CDX_REF_DECL(q4_K)
CDX_REF_DECL(q5_K)
CDX_REF_DECL(q6_K)
CDX_REF_DECL(tq1_0)
CDX_REF_DECL(tq2_0)
CDX_REF_DECL(iq2_s)
CDX_REF_DECL(iq3_xxs)
CDX_REF_DECL(iq3_s)
CDX_REF_DECL(iq1_m)
/* No reference quantizer: ggml only quantizes these with an importance matrix. */
void cdx_iq2_xxs_to_f32_ref(const void *x, float *y, int64_t n);
float cdx_iq2_xxs_dot_ref(int64_t n, const void *x, const void *y);
void cdx_iq2_xs_to_f32_ref(const void *x, float *y, int64_t n);
float cdx_iq2_xs_dot_ref(int64_t n, const void *x, const void *y);
void cdx_iq1_s_to_f32_ref(const void *x, float *y, int64_t n);
float cdx_iq1_s_dot_ref(int64_t n, const void *x, const void *y);
CDX_REF_DECL(iq4_nl)
CDX_REF_DECL(iq4_xs)
/* Activation formats: q8_1 has no dequantizer in ggml, but one is handy for tests. */
void cdx_q8_1_to_f32_ref(const void *x, float *y, int64_t n);
void cdx_q8_1_from_f32_ref(const float *x, void *y, int64_t n);
/* Activations at run time, as ggml-cpu's quantize_row_q8_0 / q8_1 (x86) do them. */
void cdx_q8_0_from_f32_act(const float *x, void *y, int64_t n);
void cdx_q8_1_from_f32_act(const float *x, void *y, int64_t n);
void cdx_q8_K_to_f32_ref(const void *x, float *y, int64_t n);
void cdx_q8_K_from_f32_ref(const float *x, void *y, int64_t n);
/* Half-precision rows: dots of f16 x f16 and bf16 x bf16 (ggml sums in double, returns float). */
float cdx_f16_dot_ref(int64_t n, const void *x, const void *y);
float cdx_bf16_dot_ref(int64_t n, const void *x, const void *y);
float cdx_f32_dot_ref(int64_t n, const void *x, const void *y);

#endif
