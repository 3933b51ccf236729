/* Reference quantizers (no importance matrix) of the i-quants, following the path that ggml's
 * ggml_quantize_chunk takes when imatrix == NULL (that is what llama-quantize and the fixtures use).
 * IQ2_XXS, IQ2_XS and IQ1_S have none: ggml requires an importance matrix for them (llama.cpp
 * refuses to make them without one), so the traits table leaves their from_f32 NULL. */
#include "quant/quant_ref.h"

#include <float.h>
#include <stdlib.h>

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

/* ---------------------------------------------------------------- grid search helpers */

/* Among the listed neighbours (nb[0] = count), the grid entry nearest to scale * pos in the
 * weighted norm; writes its levels to L and returns its index. */
static int best_neighbour(const cdx_iq_index *ix, int nc, const uint16_t *nb, const float *xval, const float *w,
                          float scale, int8_t *L)
{
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const uint8_t *pg = ix->pos + (size_t)nb[j] * nc;
        float d2 = 0;
        for (int i = 0; i < nc; i++) {
            float diff = scale * (float)pg[i] - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = nb[j];
        }
    }
    const uint8_t *pg = ix->pos + (size_t)best * nc;
    for (int i = 0; i < nc; i++)
        L[i] = (int8_t)((pg[i] - 1) / 2);
    return best;
}

/* Grid index of the 4 levels L (3 bits each), or of the nearest listed neighbour (which then
 * replaces L). *on_grid tells which. */
static int iq3_lookup(const cdx_iq_index *ix, int8_t *L, const float *xval, const float *w, float scale, bool *on_grid)
{
    int u = 0;
    for (int i = 0; i < 4; i++)
        u |= L[i] << 3 * i;
    int g = ix->map[u];
    *on_grid = g >= 0;
    if (g < 0)
        g = best_neighbour(ix, 4, ix->neighbours - g - 1, xval, w, scale, L);
    return g;
}

/* Levels for value x at inverse scale id: x ~ (2l+1)/id, l in [0, 7]. */
static inline int8_t iq3_level(float id, float x) { return (int8_t)clampi(cdx_nearest_int(0.5f * (id * x - 1)), 0, 7); }

/* The shared scale search of IQ3_XXS and IQ3_S for one 32-block of magnitudes xval (weights
 * weight, waux = sqrt(weight)): tries 2*ntry+1 inverse scales, then re-rounds groups that were
 * off the grid at the best scale. Fills L (levels) and returns the scale. */
static float iq3_search(const cdx_iq_index *ix, const float *xval, const float *weight, const float *waux, float max,
                        int ntry, bool start_on_grid, bool reround_all, int8_t L[32])
{
    int8_t Laux[32];
    bool on[8], on_aux[8];
    float best = 0, scale = max / 15;
    memset(L, 0, 32); /* stays all-zero if no trial scale is accepted (ggml does the same) */
    for (int k = 0; k < 8; k++)
        on[k] = start_on_grid;
    for (int is = -ntry; is <= ntry; is++) {
        float id = (15 + (float)is * 0.2f) / max, this_scale = 1 / id;
        for (int k = 0; k < 8; k++) {
            for (int i = 0; i < 4; i++)
                Laux[4 * k + i] = iq3_level(id, xval[4 * k + i]);
            iq3_lookup(ix, Laux + 4 * k, xval + 4 * k, waux + 4 * k, this_scale, &on_aux[k]);
        }
        float sumqx = 0, sumq2 = 0;
        for (int i = 0; i < 32; i++) {
            float q = (float)(2 * Laux[i] + 1);
            sumqx += weight[i] * xval[i] * q;
            sumq2 += weight[i] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, 32);
            memcpy(on, on_aux, sizeof on);
        }
    }
    int n_off = 0;
    for (int k = 0; k < 8; k++)
        n_off += !on[k];
    if (n_off > 0 && scale > 0) {
        float id = 1 / scale;
        for (int k = 0; k < 8; k++) {
            if (on[k] && !reround_all)
                continue;
            for (int i = 0; i < 4; i++)
                L[4 * k + i] = iq3_level(id, xval[4 * k + i]);
            bool dummy;
            iq3_lookup(ix, L + 4 * k, xval + 4 * k, waux + 4 * k, scale, &dummy);
        }
        float sumqx = 0, sumq2 = 0;
        for (int i = 0; i < 32; i++) {
            float q = (float)(2 * L[i] + 1);
            sumqx += weight[i] * xval[i] * q;
            sumq2 += weight[i] * q * q;
        }
        if (sumq2 > 0)
            scale = sumqx / sumq2;
    }
    return scale;
}

static int iq3_grid_index(const cdx_iq_index *ix, const int8_t *L)
{
    int u = 0;
    for (int i = 0; i < 4; i++)
        u |= L[i] << 3 * i;
    return ix->map[u] >= 0 ? ix->map[u] : 0; /* always on the grid after the search */
}

/* ---------------------------------------------------------------- IQ3_XXS
 * Per 32-block: signs of each 8 values with even parity (the cheapest value flips if needed), 8
 * grid indices for magnitudes, a 4-bit scale; a half super-scale with ggml's 1.0125 fudge. */

void cdx_iq3_xxs_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_iq3_xxs *y = vy;
    const cdx_iq_index *ix = cdx_iq3xxs_index();
    if (!ix) {
        memset(y, 0, (size_t)(n / 256) * sizeof *y);
        return;
    }
    for (int64_t ibl = 0; ibl < n / 256; ibl++) {
        const float *xbl = x + 256 * ibl;
        uint8_t q3[96] = { 0 };
        uint32_t sas[8] = { 0 }; /* scales and signs */
        float scales[8], max_scale = 0;
        for (int ib = 0; ib < 8; ib++) {
            const float *xb = xbl + 32 * ib;
            float weight[32], waux[32], xval[32];
            uint8_t signs[4];
            for (int i = 0; i < 32; i++) {
                weight[i] = xb[i] * xb[i];
                waux[i] = sqrtf(weight[i]);
            }
            for (int k = 0; k < 4; k++) {
                int nflip = 0;
                uint8_t s = 0;
                for (int i = 0; i < 8; i++) {
                    if (xb[8 * k + i] >= 0) {
                        xval[8 * k + i] = xb[8 * k + i];
                    } else {
                        xval[8 * k + i] = -xb[8 * k + i];
                        nflip++;
                        s |= (uint8_t)(1u << i);
                    }
                }
                if (nflip % 2) { /* odd: flip the value that costs least */
                    int imin = 0;
                    float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
                    for (int i = 1; i < 8; i++) {
                        float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                        if (ax < min) {
                            min = ax;
                            imin = i;
                        }
                    }
                    xval[8 * k + imin] = -xval[8 * k + imin];
                    s ^= (uint8_t)(1u << imin);
                }
                signs[k] = s & 127;
            }
            float max = xval[0];
            for (int i = 1; i < 32; i++)
                max = xval[i] > max ? xval[i] : max;
            if (max < 1e-8f) { /* GROUP_MAX_EPS_IQ3_XXS */
                scales[ib] = 0;
                continue;
            }
            int8_t L[32];
            float scale = iq3_search(ix, xval, weight, waux, max, 15, true, false, L);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; k++)
                    signs[k] = (uint8_t)(~signs[k] & 127);
            }
            for (int k = 0; k < 8; k++)
                q3[8 * ib + k] = (uint8_t)iq3_grid_index(ix, L + 4 * k);
            sas[ib] = signs[0] | (uint32_t)signs[1] << 7 | (uint32_t)signs[2] << 14 | (uint32_t)signs[3] << 21;
            scales[ib] = scale;
            max_scale = scale > max_scale ? scale : max_scale;
        }
        if (!max_scale) {
            memset(&y[ibl], 0, sizeof y[ibl]);
            continue;
        }
        float d = max_scale / 31;
        y[ibl].d = cdx_f2h(d * 1.0125f);
        float id = 1 / d;
        for (int ib = 0; ib < 8; ib++)
            sas[ib] |= (uint32_t)clampi(cdx_nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15) << 28;
        memcpy(y[ibl].qs, q3, 64);
        for (int ib = 0; ib < 8; ib++)
            for (int b = 0; b < 4; b++)
                y[ibl].qs[64 + 4 * ib + b] = (uint8_t)(sas[ib] >> (8 * b));
    }
}

/* ---------------------------------------------------------------- IQ3_S
 * Like IQ3_XXS with a 512-entry grid (9-bit indices, high bits in qh), free signs, and 4-bit
 * scales in pairs; super-scale fudge 1.033. */

void cdx_iq3_s_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_iq3_s *y = vy;
    const cdx_iq_index *ix = cdx_iq3s_index();
    if (!ix) {
        memset(y, 0, (size_t)(n / 256) * sizeof *y);
        return;
    }
    for (int64_t ibl = 0; ibl < n / 256; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        const float *xbl = x + 256 * ibl;
        /* ggml advances its qs / signs write positions only for blocks that are not all zero, so
         * a zero block shifts the following blocks' bytes; reproduced for identical files. */
        uint8_t *qs = y[ibl].qs, *signs = y[ibl].signs;
        float scales[8], max_scale = 0;
        for (int ib = 0; ib < 8; ib++) {
            const float *xb = xbl + 32 * ib;
            float weight[32], waux[32], xval[32];
            uint8_t bsigns[4];
            for (int i = 0; i < 32; i++) {
                weight[i] = xb[i] * xb[i];
                waux[i] = sqrtf(weight[i]);
            }
            for (int k = 0; k < 4; k++) {
                uint8_t s = 0;
                for (int i = 0; i < 8; i++) {
                    if (xb[8 * k + i] >= 0) {
                        xval[8 * k + i] = xb[8 * k + i];
                    } else {
                        xval[8 * k + i] = -xb[8 * k + i];
                        s |= (uint8_t)(1u << i);
                    }
                }
                bsigns[k] = s;
            }
            float max = xval[0];
            for (int i = 1; i < 32; i++)
                max = xval[i] > max ? xval[i] : max;
            if (!max) {
                scales[ib] = 0;
                continue;
            }
            int8_t L[32];
            float scale = iq3_search(ix, xval, weight, waux, max, 9, false, true, L);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; k++)
                    bsigns[k] = (uint8_t)~bsigns[k];
            }
            for (int k = 0; k < 8; k++) {
                int g = iq3_grid_index(ix, L + 4 * k);
                qs[k] = (uint8_t)(g & 255);
                y[ibl].qh[(ib * 8 + k) / 8] |= (uint8_t)((g >> 8) << ((ib * 8 + k) % 8));
            }
            qs += 8;
            memcpy(signs, bsigns, 4);
            signs += 4;
            scales[ib] = scale;
            max_scale = scale > max_scale ? scale : max_scale;
        }
        if (!max_scale)
            continue;
        float d = max_scale / 31;
        y[ibl].d = cdx_f2h(d * 1.033f);
        float id = 1 / d;
        for (int ib = 0; ib < 8; ib += 2) {
            int l1 = clampi(cdx_nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
            int l2 = clampi(cdx_nearest_int(0.5f * (id * scales[ib + 1] - 1)), 0, 15);
            y[ibl].scales[ib / 2] = (uint8_t)(l1 | l2 << 4);
        }
    }
}

/* ---------------------------------------------------------------- IQ2_S
 * Per 16 values: 2 grid indices (10 bits: qs byte + 2 bits of qh) for magnitudes on a 3-level
 * lattice, free sign bytes, a 4-bit scale; half super-scale with ggml's 0.9875 fudge. */

static inline int8_t iq2_level(float id, float x) { return (int8_t)clampi(cdx_nearest_int(0.5f * (id * x - 1)), 0, 2); }

static int iq2_code(const int8_t *L)
{
    int u = 0;
    for (int i = 0; i < 8; i++)
        u |= L[i] << 2 * i;
    return u;
}

void cdx_iq2_s_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_iq2_s *y = vy;
    const cdx_iq_index *ix = cdx_iq2s_index();
    if (!ix) {
        memset(y, 0, (size_t)(n / 256) * sizeof *y);
        return;
    }
    for (int64_t ibl = 0; ibl < n / 256; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        const float *xbl = x + 256 * ibl;
        float sumx2 = 0;
        for (int i = 0; i < 256; i++)
            sumx2 += xbl[i] * xbl[i];
        const float sigma2 = 2 * sumx2 / 256;
        float scales[16], max_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            const float *xb = xbl + 16 * ib;
            float weight[16], waux[16], xval[16];
            uint8_t bsigns[2];
            int8_t L[16] = { 0 }, Laux[16];
            bool on[2] = { true, true }, on_aux[2];
            for (int i = 0; i < 16; i++) {
                weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
                waux[i] = sqrtf(weight[i]);
            }
            for (int k = 0; k < 2; k++) {
                uint8_t s = 0;
                for (int i = 0; i < 8; i++) {
                    if (xb[8 * k + i] >= 0) {
                        xval[8 * k + i] = xb[8 * k + i];
                    } else {
                        xval[8 * k + i] = -xb[8 * k + i];
                        s |= (uint8_t)(1u << i);
                    }
                }
                bsigns[k] = s;
            }
            float max = xval[0];
            for (int i = 1; i < 16; i++)
                max = xval[i] > max ? xval[i] : max;
            if (max < 1e-8f) { /* GROUP_MAX_EPS_IQ2_S */
                scales[ib] = 0;
                continue;
            }
            float best = 0, scale = max / 5;
            for (int is = -9; is <= 9; is++) {
                float id = (5 + (float)is * 0.1f) / max, this_scale = 1 / id;
                for (int k = 0; k < 2; k++) {
                    for (int i = 0; i < 8; i++)
                        Laux[8 * k + i] = iq2_level(id, xval[8 * k + i]);
                    int g = ix->map[iq2_code(Laux + 8 * k)];
                    on_aux[k] = g >= 0;
                    if (g < 0)
                        best_neighbour(ix, 8, ix->neighbours - g - 1, xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 16; i++) {
                    float q = (float)(2 * Laux[i] + 1);
                    sumqx += weight[i] * xval[i] * q;
                    sumq2 += weight[i] * q * q;
                }
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    memcpy(L, Laux, 16);
                    on[0] = on_aux[0];
                    on[1] = on_aux[1];
                }
            }
            if ((!on[0] || !on[1]) && scale > 0) {
                float id = 1 / scale;
                for (int k = 0; k < 2; k++) {
                    if (on[k])
                        continue;
                    for (int i = 0; i < 8; i++)
                        L[8 * k + i] = iq2_level(id, xval[8 * k + i]);
                    int g = ix->map[iq2_code(L + 8 * k)];
                    if (g < 0)
                        best_neighbour(ix, 8, ix->neighbours - g - 1, xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 16; i++) {
                    float q = (float)(2 * L[i] + 1);
                    sumqx += weight[i] * xval[i] * q;
                    sumq2 += weight[i] * q * q;
                }
                if (sumq2 > 0)
                    scale = sumqx / sumq2;
            }
            if (scale < 0) {
                scale = -scale;
                bsigns[0] = (uint8_t)~bsigns[0];
                bsigns[1] = (uint8_t)~bsigns[1];
            }
            for (int k = 0; k < 2; k++) {
                int g = ix->map[iq2_code(L + 8 * k)];
                g = g < 0 ? 0 : g; /* always on the grid after the search */
                const int i8 = 2 * ib + k;
                y[ibl].qs[i8] = (uint8_t)(g & 255);
                y[ibl].qh[i8 / 4] |= (uint8_t)((g >> 8) << 2 * (i8 % 4));
                y[ibl].qs[32 + i8] = bsigns[k];
            }
            scales[ib] = scale;
            max_scale = scale > max_scale ? scale : max_scale;
        }
        if (!max_scale)
            continue;
        float d = max_scale / 31;
        y[ibl].d = cdx_f2h(d * 0.9875f);
        float id = 1 / d;
        for (int ib = 0; ib < 16; ib++) {
            int l = clampi(cdx_nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
            if (ib % 2 == 0)
                y[ibl].scales[ib / 2] = (uint8_t)l;
            else
                y[ibl].scales[ib / 2] |= (uint8_t)(l << 4);
        }
    }
}

/* ---------------------------------------------------------------- IQ1_M
 * Per 16 values: values in {-1, 0, 1} + shift (+-1/8 per 8 values), found by an exhaustive search
 * over the two split points of the sorted values and the four shift-sign combinations; then the
 * nearest grid points. 3-bit block scales, the half super-scale spread over the scale words. */

typedef struct { float v; int i; } iq1_pair;

static int iq1_pair_cmp(const void *a, const void *b)
{
    const iq1_pair *l = a, *r = b;
    /* by value; equal values keep their original order (as a stable merge sort would) */
    return l->v < r->v ? -1 : l->v > r->v ? 1 : l->i - r->i;
}

static const float k_x_p[3] = { -1 + CDX_IQ1S_DELTA, CDX_IQ1S_DELTA, 1 + CDX_IQ1S_DELTA };
static const float k_x_m[3] = { -1 - CDX_IQ1S_DELTA, -CDX_IQ1S_DELTA, 1 - CDX_IQ1S_DELTA };

/* The value table of 8-group k (0, 1) of a 16-block with shift combination s (0..3). */
static inline const float *iq1m_values(int s, int k) { return (k == 0 ? s < 2 : s % 2 == 0) ? k_x_p : k_x_m; }

/* Among the listed neighbours, the grid entry nearest to scale * xg[level] (weighted). */
static int iq1_best_neighbour2(const cdx_iq_index *ix, const uint16_t *nb, const float *xval, const float *w,
                               float scale, const float *xg, int8_t *L)
{
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const uint8_t *pg = ix->pos + (size_t)nb[j] * 8;
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            float diff = scale * xg[(pg[i] - 1) / 2] - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = nb[j];
        }
    }
    const uint8_t *pg = ix->pos + (size_t)best * 8;
    for (int i = 0; i < 8; i++)
        L[i] = (int8_t)((pg[i] - 1) / 2);
    return best;
}

void cdx_iq1_m_from_f32_ref(const float *x, void *vy, int64_t n)
{
    static const uint8_t masks[4] = { 0x00, 0x80, 0x08, 0x88 };
    cdx_block_iq1_m *y = vy;
    const cdx_iq_index *ix = cdx_iq1s_index();
    if (!ix) {
        memset(y, 0, (size_t)(n / 256) * sizeof *y);
        return;
    }
    for (int64_t ibl = 0; ibl < n / 256; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        const float *xbl = x + 256 * ibl;
        float scales[16], max_scale = 0;
        int8_t shifts[16];
        for (int ib = 0; ib < 16; ib++) {
            const float *xb = xbl + 16 * ib;
            float weight[16];
            int8_t L[16];
            for (int i = 0; i < 16; i++)
                weight[i] = xb[i] * xb[i];
            float max = fabsf(xb[0]);
            for (int i = 1; i < 16; i++)
                max = fabsf(xb[i]) > max ? fabsf(xb[i]) : max;
            if (max < 1e-7f) { /* GROUP_MAX_EPS_IQ1_M */
                scales[ib] = 0;
                shifts[ib] = 0;
                continue;
            }
            iq1_pair pairs[16];
            for (int j = 0; j < 16; j++)
                pairs[j] = (iq1_pair){ xb[j], j };
            qsort(pairs, 16, sizeof pairs[0], iq1_pair_cmp);
            /* sorted values [0, i1) -> level 0, [i1, i2) -> 1, [i2, 16) -> 2 */
            float best_score = -FLT_MAX, scale = max;
            int besti1 = -1, besti2 = -1, best_k = -1;
            for (int i1 = 0; i1 <= 16; i1++)
                for (int i2 = i1; i2 <= 16; i2++) {
                    float sumqx[4] = { 0 }, sumq2[4] = { 0 };
                    for (int j = 0; j < 16; j++) {
                        const int i = pairs[j].i, lev = j < i1 ? 0 : j < i2 ? 1 : 2;
                        for (int k = 0; k < 4; k++) {
                            const float q = iq1m_values(k, i >= 8)[lev];
                            sumqx[k] += weight[i] * q * xb[i];
                            sumq2[k] += weight[i] * q * q;
                        }
                    }
                    for (int k = 0; k < 4; k++)
                        if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
                            scale = sumqx[k] / sumq2[k];
                            best_score = scale * sumqx[k];
                            besti1 = i1;
                            besti2 = i2;
                            best_k = k;
                        }
                }
            if (besti1 < 0 || besti2 < 0 || best_k < 0) {
                scales[ib] = 0;
                shifts[ib] = 0;
                continue;
            }
            for (int j = 0; j < 16; j++)
                L[pairs[j].i] = (int8_t)(j < besti1 ? 0 : j < besti2 ? 1 : 2);
            if (scale < 0) {
                for (int j = 0; j < 16; j++)
                    L[j] = (int8_t)(2 - L[j]);
                scale = -scale;
                best_k = 3 - best_k;
            }
            int index[2];
            bool all_on_grid = true;
            for (int k = 0; k < 2; k++) {
                int g = ix->map[iq2_code(L + 8 * k)];
                if (g < 0) {
                    all_on_grid = false;
                    g = iq1_best_neighbour2(ix, ix->neighbours - g - 1, xb + 8 * k, weight + 8 * k, scale,
                                            iq1m_values(best_k, k), L + 8 * k);
                }
                index[k] = g;
            }
            if (!all_on_grid) {
                float sumqx_f = 0, sumq2_f = 0;
                for (int k = 0; k < 2; k++) {
                    const float *xx = iq1m_values(best_k, k);
                    const uint8_t *pg = ix->pos + (size_t)index[k] * 8;
                    for (int j = 0; j < 8; j++) {
                        float w = weight[8 * k + j], q = xx[(pg[j] - 1) / 2];
                        sumqx_f += w * q * xb[8 * k + j];
                        sumq2_f += w * q * q;
                    }
                }
                if (sumqx_f > 0 && sumq2_f > 0)
                    scale = sumqx_f / sumq2_f;
            }
            y[ibl].qs[2 * ib] = (uint8_t)(index[0] & 255);
            y[ibl].qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
            y[ibl].qh[ib] = (uint8_t)((index[0] >> 8) | ((index[1] >> 8) << 4));
            scales[ib] = scale;
            shifts[ib] = (int8_t)best_k;
            max_scale = scale > max_scale ? scale : max_scale;
        }
        if (!max_scale)
            continue;
        uint16_t sc[4] = { 0, 0, 0, 0 };
        float d = max_scale / 15, id = 1 / d;
        float sumqx_f = 0, sumq2_f = 0;
        for (int ib = 0; ib < 16; ib++) {
            int l = clampi(cdx_nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
            sc[ib / 4] |= (uint16_t)(l << 3 * (ib % 4));
            y[ibl].qh[ib] |= masks[shifts[ib]];
            const float *xb = xbl + 16 * ib;
            for (int k = 0; k < 2; k++) { /* refit the super-scale to the stored levels */
                const float *xx = iq1m_values(shifts[ib], k);
                const int g = y[ibl].qs[2 * ib + k] + ((y[ibl].qh[ib] << (8 - 4 * k)) & 0x700);
                const uint8_t *pg = ix->pos + (size_t)g * 8;
                for (int j = 0; j < 8; j++) {
                    float w = xb[8 * k + j] * xb[8 * k + j];
                    float q = xx[(pg[j] - 1) / 2] * (float)(2 * l + 1);
                    sumqx_f += w * q * xb[8 * k + j];
                    sumq2_f += w * q * q;
                }
            }
        }
        if (sumq2_f > 0)
            d = sumqx_f / sumq2_f;
        const uint16_t s = cdx_f2h(d * 1.1125f);
        sc[0] |= (uint16_t)((s & 0x000f) << 12);
        sc[1] |= (uint16_t)((s & 0x00f0) << 8);
        sc[2] |= (uint16_t)((s & 0x0f00) << 4);
        sc[3] |= (uint16_t)(s & 0xf000);
        for (int k = 0; k < 4; k++) {
            y[ibl].scales[2 * k] = (uint8_t)sc[k];
            y[ibl].scales[2 * k + 1] = (uint8_t)(sc[k] >> 8);
        }
    }
}
