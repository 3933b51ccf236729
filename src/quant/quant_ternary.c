/* Ternary formats {-1, 0, +1} * d with one half scale per 256 values (BitNet b1.58, TriLM):
 * TQ1_0 packs 5 trits per byte (240 values) plus 4 per byte (16 values); TQ2_0 packs 2 bits per
 * value. Layouts and order follow ggml-quants.c (llama.cpp v0.4.0). */
#include "quant/quant_ref.h"

static const uint8_t k_pow3[6] = { 1, 3, 9, 27, 81, 243 };

/* Trit n (0 = most significant) of a byte that stores trits as ceil(v * 256 / 3^5). */
static inline int trit(uint8_t b, int n)
{
    uint8_t q = (uint8_t)(b * k_pow3[n]);
    return ((uint16_t)q * 3) >> 8;
}

/* The TQ1_0 trit of value j (0..255) in a block: returns 0, 1 or 2. */
static inline int tq1_trit(const cdx_block_tq1_0 *b, int j)
{
    if (j < 160)
        return trit(b->qs[j % 32], j / 32);
    if (j < 240)
        return trit(b->qs[32 + (j - 160) % 16], (j - 160) / 16);
    return trit(b->qh[(j - 240) % 4], (j - 240) / 4);
}

void cdx_tq1_0_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_tq1_0 *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        for (int j = 0; j < 256; j++)
            *y++ = (float)(tq1_trit(&x[i], j) - 1) * d;
    }
}

/* absmax scale; q = lroundf(x / amax) + 1 in {0, 1, 2}. Returns 1/amax (0 for an all-zero block). */
static float ternary_scale(const float *x, cdx_half *d)
{
    float amax = 0.0f;
    for (int j = 0; j < 256; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    *d = cdx_f2h(amax);
    return amax ? 1.0f / amax : 0.0f;
}

/* Packs trits t[0..k) (first most significant) into a byte as ceil(v * 256 / 243), k <= 5. */
static uint8_t pack_trits(const int *t, int k)
{
    unsigned q = 0;
    for (int m = 0; m < k; m++)
        q = q * 3 + (unsigned)t[m];
    for (int m = k; m < 5; m++)
        q *= 3;
    return (uint8_t)((q * 256 + 242) / 243);
}

void cdx_tq1_0_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_tq1_0 *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        const float id = ternary_scale(x, &y[i].d);
        int t[5];
        for (int m = 0; m < 32; m++) {
            for (int k = 0; k < 5; k++)
                t[k] = (int)lroundf(x[m + 32 * k] * id) + 1;
            y[i].qs[m] = pack_trits(t, 5);
        }
        for (int m = 0; m < 16; m++) {
            for (int k = 0; k < 5; k++)
                t[k] = (int)lroundf(x[160 + m + 16 * k] * id) + 1;
            y[i].qs[32 + m] = pack_trits(t, 5);
        }
        for (int m = 0; m < 4; m++) {
            for (int k = 0; k < 4; k++)
                t[k] = (int)lroundf(x[240 + m + 4 * k] * id) + 1;
            y[i].qh[m] = pack_trits(t, 4);
        }
    }
}

float cdx_tq1_0_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_tq1_0 *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        int sum = 0;
        for (int j = 0; j < 256; j++)
            sum += (tq1_trit(&x[i], j) - 1) * y[i].qs[j];
        sumf += (float)sum * (cdx_h2f(x[i].d) * y[i].d);
    }
    return sumf;
}

/* TQ2_0: value 32*l + m of each 128-half sits in bits 2l..2l+1 of byte m of that half. */
static inline int tq2_q(const cdx_block_tq2_0 *b, int j)
{
    int half = j / 128, r = j % 128;
    return (b->qs[32 * half + r % 32] >> (2 * (r / 32))) & 3;
}

void cdx_tq2_0_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_tq2_0 *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        for (int j = 0; j < 256; j++)
            *y++ = (float)(tq2_q(&x[i], j) - 1) * d;
    }
}

void cdx_tq2_0_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_tq2_0 *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        const float id = ternary_scale(x, &y[i].d);
        for (int half = 0; half < 2; half++)
            for (int m = 0; m < 32; m++) {
                unsigned q = 0;
                for (int k = 0; k < 4; k++) {
                    int v = (int)lroundf(x[128 * half + m + 32 * k] * id) + 1;
                    q += (unsigned)(v & 3) << (2 * k);
                }
                y[i].qs[32 * half + m] = (uint8_t)q;
            }
    }
}

float cdx_tq2_0_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_tq2_0 *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        int sum = 0;
        for (int j = 0; j < 256; j++)
            sum += (tq2_q(&x[i], j) - 1) * y[i].qs[j];
        sumf += (float)sum * (y[i].d * cdx_h2f(x[i].d));
    }
    return sumf;
}
