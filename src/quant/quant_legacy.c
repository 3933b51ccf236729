/* The 32-value "legacy" formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1), the newer 1- and 2-bit
 * Q1_0 / Q2_0 and the FP4 microscaling formats MXFP4 / NVFP4: dequantize, reference quantize and
 * dot against Q8_0 / Q8_1. The arithmetic order follows ggml's reference code (ggml-quants.c,
 * ggml-cpu/quants.c of llama.cpp v0.4.0) so that results agree bit for bit. */
#include "quant/quant_ref.h"

#include <float.h>

/* ---------------------------------------------------------------- Q1_0: sign bits, one scale */

void cdx_q1_0_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q1_0 *x = vx;
    for (int64_t i = 0; i < n / 128; i++) {
        const float d = cdx_h2f(x[i].d), neg_d = -d;
        for (int j = 0; j < 128; j++)
            y[i * 128 + j] = (x[i].qs[j / 8] >> (j % 8)) & 1 ? d : neg_d;
    }
}

void cdx_q1_0_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q1_0 *y = vy;
    for (int64_t i = 0; i < n / 128; i++, x += 128) {
        float sum_abs = 0.0f; /* the scale is the mean magnitude */
        for (int j = 0; j < 128; j++)
            sum_abs += fabsf(x[j]);
        y[i].d = cdx_f2h(sum_abs / 128);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 128; j++)
            if (x[j] >= 0.0f)
                y[i].qs[j / 8] |= (uint8_t)(1u << (j % 8));
    }
}

float cdx_q1_0_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q1_0 *x = vx;
    const cdx_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 128; i++) {
        float sumi = 0.0f;
        for (int k = 0; k < 4; k++) { /* four q8_0 blocks per q1_0 block */
            const cdx_block_q8_0 *yb = &y[i * 4 + k];
            int s = 0;
            for (int j = 0; j < 32; j++)
                s += (x[i].qs[k * 4 + j / 8] >> (j % 8)) & 1 ? yb->qs[j] : -yb->qs[j];
            sumi += cdx_h2f(yb->d) * (float)s;
        }
        sumf += cdx_h2f(x[i].d) * sumi;
    }
    return sumf;
}

/* ---------------------------------------------------------------- Q2_0: {-1,0,1,2} * d */

void cdx_q2_0_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q2_0 *x = vx;
    for (int64_t i = 0; i < n / 64; i++) {
        const float d = cdx_h2f(x[i].d);
        for (int j = 0; j < 64; j++) {
            int q = (x[i].qs[j / 4] >> ((j % 4) * 2)) & 3;
            y[i * 64 + j] = (float)(q - 1) * d;
        }
    }
}

void cdx_q2_0_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q2_0 *y = vy;
    for (int64_t i = 0; i < n / 64; i++, x += 64) {
        float amax = 0.0f;
        for (int j = 0; j < 64; j++)
            if (fabsf(x[j]) > amax)
                amax = fabsf(x[j]);
        const float id = amax > 0.0f ? 1.0f / amax : 0.0f;
        y[i].d = cdx_f2h(amax);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 64; j++) {
            int q = cdx_ftoi(roundf(x[j] * id)) + 1; /* halves away from zero, as roundf */
            q = q < 0 ? 0 : q > 3 ? 3 : q;
            y[i].qs[j / 4] |= (uint8_t)(q << ((j % 4) * 2));
        }
    }
}

float cdx_q2_0_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q2_0 *x = vx;
    const cdx_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 64; i++) {
        float sumi = 0.0f;
        for (int k = 0; k < 2; k++) {
            const cdx_block_q8_0 *yb = &y[i * 2 + k];
            int s = 0;
            for (int j = 0; j < 32; j++)
                s += (((x[i].qs[k * 8 + j / 4] >> ((j % 4) * 2)) & 3) - 1) * yb->qs[j];
            sumi += cdx_h2f(yb->d) * (float)s;
        }
        sumf += cdx_h2f(x[i].d) * sumi;
    }
    return sumf;
}

/* ---------------------------------------------------------------- Q4_0: (q - 8) * d */

void cdx_q4_0_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = cdx_h2f(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
            y[i * 32 + j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void cdx_q4_0_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f, max = 0.0f; /* the value of largest magnitude maps to -8 */
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        y[i].d = cdx_f2h(d);
        for (int j = 0; j < 16; j++) {
            const int q0 = (int8_t)cdx_ftoi(x[j] * id + 8.5f), q1 = (int8_t)cdx_ftoi(x[j + 16] * id + 8.5f);
            const uint8_t lo = (uint8_t)(q0 < 15 ? q0 : 15), hi = (uint8_t)(q1 < 15 ? q1 : 15);
            y[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

float cdx_q4_0_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q4_0 *x = vx;
    const cdx_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            s0 += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            s1 += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sumf += (float)(s0 + s1) * cdx_h2f(x[i].d) * cdx_h2f(y[i].d);
    }
    return sumf;
}

/* ---------------------------------------------------------------- Q4_1: q * d + m */

void cdx_q4_1_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = cdx_h2f(x[i].d), m = cdx_h2f(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = (float)(x[i].qs[j] & 0x0F) * d + m;
            y[i * 32 + j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* min/max of a 32-block (Q4_1, Q5_1). */
static void block_min_max(const float *x, float *min, float *max)
{
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
        if (x[j] < *min)
            *min = x[j];
        if (x[j] > *max)
            *max = x[j];
    }
}

void cdx_q4_1_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
        y[i].d = cdx_f2h(d);
        y[i].m = cdx_f2h(min);
        for (int j = 0; j < 16; j++) {
            const int q0 = (int8_t)cdx_ftoi((x[j] - min) * id + 0.5f), q1 = (int8_t)cdx_ftoi((x[j + 16] - min) * id + 0.5f);
            const uint8_t lo = (uint8_t)(q0 < 15 ? q0 : 15), hi = (uint8_t)(q1 < 15 ? q1 : 15);
            y[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

float cdx_q4_1_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q4_1 *x = vx;
    const cdx_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            s0 += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            s1 += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        /* the min term uses the q8_1 block's precomputed s = d * sum(qs), as ggml does */
        sumf += (cdx_h2f(x[i].d) * cdx_h2f(y[i].d)) * (float)(s0 + s1) + cdx_h2f(x[i].m) * cdx_h2f(y[i].s);
    }
    return sumf;
}

/* ---------------------------------------------------------------- Q5_0: (q - 16) * d, 5th bit in qh */

static inline uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void store_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The 5-bit values j and j+16 of a Q5 block. */
static inline void q5_pair(const uint8_t *qs, uint32_t qh, int j, int *lo, int *hi)
{
    *lo = (qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
    *hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
}

void cdx_q5_0_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = cdx_h2f(x[i].d);
        const uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo, hi;
            q5_pair(x[i].qs, qh, j, &lo, &hi);
            y[i * 32 + j] = (float)(lo - 16) * d;
            y[i * 32 + j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void q5_pack(uint8_t *qs, uint8_t *qh_bytes, const int *q)
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    store_u32(qh_bytes, qh);
}

void cdx_q5_0_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -16, id = d ? 1.0f / d : 0.0f;
        y[i].d = cdx_f2h(d);
        int q[32];
        for (int j = 0; j < 32; j++) {
            int v = (int8_t)cdx_ftoi(x[j] * id + 16.5f);
            q[j] = (uint8_t)(v < 31 ? v : 31);
        }
        q5_pack(y[i].qs, y[i].qh, q);
    }
}

float cdx_q5_0_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q5_0 *x = vx;
    const cdx_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint32_t qh = load_u32(x[i].qh);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            int lo, hi;
            q5_pair(x[i].qs, qh, j, &lo, &hi);
            s0 += (lo - 16) * y[i].qs[j];
            s1 += (hi - 16) * y[i].qs[j + 16];
        }
        sumf += (cdx_h2f(x[i].d) * cdx_h2f(y[i].d)) * (float)(s0 + s1);
    }
    return sumf;
}

/* ---------------------------------------------------------------- Q5_1: q * d + m */

void cdx_q5_1_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = cdx_h2f(x[i].d), m = cdx_h2f(x[i].m);
        const uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo, hi;
            q5_pair(x[i].qs, qh, j, &lo, &hi);
            y[i * 32 + j] = (float)lo * d + m;
            y[i * 32 + j + 16] = (float)hi * d + m;
        }
    }
}

void cdx_q5_1_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
        y[i].d = cdx_f2h(d);
        y[i].m = cdx_f2h(min);
        int q[32];
        for (int j = 0; j < 32; j++)
            q[j] = (uint8_t)cdx_ftoi((x[j] - min) * id + 0.5f); /* ggml does not clamp here */
        q5_pack(y[i].qs, y[i].qh, q);
    }
}

float cdx_q5_1_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q5_1 *x = vx;
    const cdx_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint32_t qh = load_u32(x[i].qh);
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            int lo, hi;
            q5_pair(x[i].qs, qh, j, &lo, &hi);
            s0 += lo * y[i].qs[j];
            s1 += hi * y[i].qs[j + 16];
        }
        sumf += (cdx_h2f(x[i].d) * cdx_h2f(y[i].d)) * (float)(s0 + s1) + cdx_h2f(x[i].m) * cdx_h2f(y[i].s);
    }
    return sumf;
}

/* ---------------------------------------------------------------- Q8_0 and Q8_1 */

void cdx_q8_0_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = cdx_h2f(x[i].d);
        for (int j = 0; j < 32; j++)
            y[i * 32 + j] = (float)x[i].qs[j] * d;
    }
}

/* d = amax/127; q = roundf(x / d) (halves away from zero). Returns d. */
static float q8_block(const float *x, int8_t *qs)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++)
        qs[j] = (int8_t)cdx_ftoi(roundf(x[j] * id));
    return d;
}

void cdx_q8_0_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32)
        y[i].d = cdx_f2h(q8_block(x, y[i].qs));
}

float cdx_q8_0_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q8_0 *x = vx, *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int s = 0;
        for (int j = 0; j < 32; j++)
            s += x[i].qs[j] * y[i].qs[j];
        sumf += (float)s * (cdx_h2f(x[i].d) * cdx_h2f(y[i].d));
    }
    return sumf;
}

/* Activations. llama.cpp writes q8_0 files with quantize_row_q8_0_ref (above: x·(1/d), roundf), but
 * its CPU backend quantizes activations with quantize_row_q8_0 / q8_1 from ggml-cpu/arch/x86
 * (AVX/AVX2, and the 4x8 repack quantizer the same way): d = amax/127 as before, but the multiplier
 * is 127/amax, which is not always the float 1/d, and values round half to even. A value near a
 * rounding edge then lands one step apart, and the output moves by that weight times d. On models
 * whose residual stream is small next to its norms (QK-norm, random weights) such a step is
 * amplified to logit differences of 0.1 and more, so inference follows the run-time quantizer. */
static float q8_block_act(const float *x, int8_t *qs)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int j = 0; j < 32; j++)
        qs[j] = (int8_t)cdx_ftoi(nearbyintf(x[j] * id)); /* the default rounding: half to even */
    return d;
}

void cdx_q8_0_from_f32_act(const float *x, void *vy, int64_t n)
{
    cdx_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32)
        y[i].d = cdx_f2h(q8_block_act(x, y[i].qs));
}

void cdx_q8_1_from_f32_act(const float *x, void *vy, int64_t n)
{
    cdx_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float d = q8_block_act(x, y[i].qs);
        int sum = 0;
        for (int j = 0; j < 32; j++)
            sum += y[i].qs[j];
        y[i].d = cdx_f2h(d);
        y[i].s = cdx_f2h((float)sum * d);
    }
}

void cdx_q8_1_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = cdx_h2f(x[i].d);
        for (int j = 0; j < 32; j++)
            y[i * 32 + j] = (float)x[i].qs[j] * d;
    }
}

void cdx_q8_1_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float d = q8_block(x, y[i].qs);
        int sum = 0;
        for (int j = 0; j < 32; j++)
            sum += y[i].qs[j];
        y[i].d = cdx_f2h(d);
        y[i].s = cdx_f2h((float)sum * d);
    }
}

/* ---------------------------------------------------------------- MXFP4: E2M1 values, E8M0 scale */

void cdx_mxfp4_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = cdx_e8m0_to_f32_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = (float)cdx_kvalues_fp4[x[i].qs[j] & 0x0F] * d;
            y[i * 32 + j + 16] = (float)cdx_kvalues_fp4[x[i].qs[j] >> 4] * d;
        }
    }
}

/* The first index whose value*e is nearest to v (ties keep the earlier index). */
static int best_fp4(float v, float e)
{
    int best = 0;
    float best_err = fabsf((float)cdx_kvalues_fp4[0] * e - v);
    for (int i = 1; i < 16; i++) {
        float err = fabsf((float)cdx_kvalues_fp4[i] * e - v);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

void cdx_mxfp4_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j]))
                amax = fabsf(x[j]);
        /* exponent so that amax lands in the top binade of E2M1 (max 6 = 1.5 * 2^2) */
        const uint8_t e = amax > 0.0f ? (uint8_t)cdx_ftoi(floorf(log2f(amax)) - 2 + 127) : 0; /* mod 256, as ggml on x86 */
        const float d = cdx_e8m0_to_f32_half(e);
        y[i].e = e;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(best_fp4(x[j], d) | best_fp4(x[j + 16], d) << 4);
    }
}

float cdx_mxfp4_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_mxfp4 *x = vx;
    const cdx_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = cdx_h2f(y[i].d) * cdx_e8m0_to_f32_half(x[i].e);
        int s1 = 0, s2 = 0;
        for (int j = 0; j < 16; j++) {
            s1 += y[i].qs[j] * cdx_kvalues_fp4[x[i].qs[j] & 0xF];
            s2 += y[i].qs[j + 16] * cdx_kvalues_fp4[x[i].qs[j] >> 4];
        }
        sumf += d * (float)(s1 + s2);
    }
    return sumf;
}

/* ---------------------------------------------------------------- NVFP4: E2M1 values, UE4M3 scale per 16 */

void cdx_nvfp4_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_nvfp4 *x = vx;
    for (int64_t i = 0; i < n / 64; i++) {
        for (int s = 0; s < 4; s++) {
            const float d = cdx_ue4m3_to_f32(x[i].d[s]);
            float *yb = y + i * 64 + s * 16;
            for (int j = 0; j < 8; j++) {
                const uint8_t q = x[i].qs[s * 8 + j];
                yb[j] = (float)cdx_kvalues_fp4[q & 0x0F] * d;
                yb[j + 8] = (float)cdx_kvalues_fp4[q >> 4] * d;
            }
        }
    }
}

/* f32 -> UE4M3 (4-bit exponent bias 7, 3-bit mantissa, unsigned), saturating at 448 (0x7E);
 * the mantissa rounds half up on the first dropped bit, as ggml_fp32_to_ue4m3 does. */
static uint8_t f32_to_ue4m3(float x)
{
    if (!(x > 0.0f))
        return 0;
    if (x > 448.0f)
        x = 448.0f;
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    int exp = (int)((bits >> 23) & 0xFF) - 127 + 7;
    if (exp <= 0) { /* subnormal: man * 2^-9 */
        int man = cdx_ftoi(x * 512.0f + 0.5f);
        if (man > 7)
            man = 7;
        return man < 1 ? 0 : (uint8_t)man;
    }
    if (exp >= 15)
        return 0x7E;
    int man = (int)((bits >> 20) & 7) + (int)((bits >> 19) & 1);
    if (man > 7) {
        man = 0;
        if (++exp >= 15)
            return 0x7E;
    }
    return (uint8_t)(exp << 3 | man);
}

void cdx_nvfp4_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_nvfp4 *y = vy;
    for (int64_t i = 0; i < n / 64; i++) {
        for (int s = 0; s < 4; s++) {
            const float *xb = x + i * 64 + s * 16;
            float amax = 0.0f;
            for (int j = 0; j < 16; j++)
                if (amax < fabsf(xb[j]))
                    amax = fabsf(xb[j]);
            const uint8_t ue = f32_to_ue4m3(amax / 6.0f);
            const float d = cdx_ue4m3_to_f32(ue);
            y[i].d[s] = ue;
            for (int j = 0; j < 8; j++)
                y[i].qs[s * 8 + j] = (uint8_t)(best_fp4(xb[j], d) | best_fp4(xb[j + 8], d) << 4);
        }
    }
}

float cdx_nvfp4_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_nvfp4 *x = vx;
    const cdx_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 64; i++) {
        for (int s = 0; s < 4; s++) {
            const float d = cdx_ue4m3_to_f32(x[i].d[s]);
            const cdx_block_q8_0 *yb = &y[2 * i + s / 2];
            const int off = (s % 2) * 16;
            int lo = 0, hi = 0;
            for (int j = 0; j < 8; j++) {
                const uint8_t q = x[i].qs[s * 8 + j];
                lo += yb->qs[off + j] * cdx_kvalues_fp4[q & 0xF];
                hi += yb->qs[off + j + 8] * cdx_kvalues_fp4[q >> 4];
            }
            sumf += cdx_h2f(yb->d) * d * (float)(lo + hi);
        }
    }
    return sumf;
}
