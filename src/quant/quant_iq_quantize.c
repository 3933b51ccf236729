/* Reference quantizers (no importance matrix) of the i-quants, following the path that ggml's
 * ggml_quantize_chunk takes when imatrix == NULL (that is what llama-quantize and the fixtures use).
 * IQ2_XXS, IQ2_XS and IQ1_S have none: ggml requires an importance matrix for them. */
#include "quant/quant_ref.h"

#include <float.h>

#define GROUP_MAX_EPS 1e-15f

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Index of the entry of the sorted table val[0..n) nearest to x (ties go up), by bisection. */
static int best_index_int8(int n, const int8_t *val, float x)
{
    if (x <= val[0])
        return 0;
    if (x >= val[n - 1])
        return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < val[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ---------------------------------------------------------------- IQ4_NL / IQ4_XS
 * Per 32-block: a scale search over 2*ntry+1 trial inverse scales around values[0]/max, weighted
 * by x^2. IQ4_XS then stores 6-bit block scales under one half super-scale and requantizes. */

static void iq4_super_block(int super, const float *x, cdx_half *dh, uint8_t *q4, uint16_t *scales_h,
                            uint8_t *scales_l, int ntry)
{
    const int8_t *values = cdx_kvalues_iq4nl;
    uint8_t L[256];
    float scales[8], weight[32];
    const int nblocks = super / 32;
    memset(q4, 0, (size_t)super / 2);
    *dh = cdx_f2h(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < nblocks; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;
        for (int j = 0; j < 32; j++)
            weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(xb[j]) > amax) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = ntry > 0 ? -max / values[0] : max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            int l = best_index_int8(16, values, id * xb[j]);
            Lb[j] = (uint8_t)l;
            float q = values[l], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; itry++) {
            id = (float)(itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                float q = values[best_index_int8(16, values, id * xb[j])], w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if (fabsf(d) > amax_scale) {
            amax_scale = fabsf(d);
            max_scale = d;
        }
    }
    if (nblocks > 1) {
        *scales_h = 0;
        float d = -max_scale / 32;
        *dh = cdx_f2h(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < nblocks; ib++) {
            int l = clampi(cdx_nearest_int(id * scales[ib]), -32, 31);
            float dl = d * (float)l, idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++)
                L[32 * ib + j] = (uint8_t)best_index_int8(16, values, idl * x[32 * ib + j]);
            l += 32;
            if (ib % 2 == 0)
                scales_l[ib / 2] = (uint8_t)(l & 0xf);
            else
                scales_l[ib / 2] |= (uint8_t)((l & 0xf) << 4);
            *scales_h |= (uint16_t)((l >> 4) << 2 * (ib % 8));
        }
    } else {
        *dh = cdx_f2h(scales[0]);
        if (ntry > 0) {
            float id = scales[0] ? 1 / scales[0] : 0;
            for (int j = 0; j < super; j++)
                L[j] = (uint8_t)best_index_int8(16, values, id * x[j]);
        }
    }
    for (int i = 0; i < super / 32; i++)
        for (int j = 0; j < 16; j++)
            q4[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

/* ggml_quantize_chunk's IQ4_NL path (quantize_iq4_nl, 7 tries each side); note that ggml's
 * quantize_row_iq4_nl_ref uses no tries at all, and so gives different bytes. */
void cdx_iq4_nl_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        uint16_t unused_h;
        iq4_super_block(32, x + 32 * i, &y[i].d, y[i].qs, &unused_h, NULL, 7);
    }
}

void cdx_iq4_xs_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t sh = 0;
        iq4_super_block(256, x + 256 * i, &y[i].d, y[i].qs, &sh, y[i].scales_l, 7);
        y[i].scales_h = sh; /* a native u16: the table is little-endian on every target caldrix builds for */
    }
}
