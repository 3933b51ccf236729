/* K-quants (256-value super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and the activation format
 * Q8_K. Dequantize, the reference quantizer (ggml's *_ref path, taken when no importance matrix
 * is given) and the dot against Q8_K. The scale searches (make_qx/q3/qkx2 below) repeat ggml's
 * float operation order exactly, since one rounding difference changes the chosen scale. */
#include "quant/quant_ref.h"

#define GROUP_MAX_EPS 1e-15f
#define SUMMS_STEP(a, b, c) fmaf((a), (b), (c))

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---------------------------------------------------------------- scale searches */

/* Symmetric levels L in [0, 2*nmax) for x ~ scale*(L - nmax), minimising sum x^2 (x - scale*l)^2
 * over 19 trial inverse scales around -nmax/max (rmse_type 1 of ggml's make_qx_quants). */
static float make_qx_quants_rmse1(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(cdx_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(cdx_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(cdx_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's search: start from -nmax/max, then up to 5 rounds of coordinate descent on each level,
 * weighted by x^2. L comes back in [0, 2*nmax). */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(cdx_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int new_l = clampi(cdx_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric levels L in [0, nmax] for x ~ scale*L - the_min, by weighted least squares over
 * nstep+1 trial inverse scales (ggml's make_qkx2_quants). The trials are not independent: a
 * better trial moves `min`, which the following trials use, so they must run in order. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(cdx_nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(cdx_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* 3-bit and 6-bit scale unpacking of Q3_K: 16 signed scales (stored +32). */
static void q3_k_scales(const uint8_t *s, int8_t out[16])
{
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
        int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

/* Q4_K/Q5_K: pack 8 6-bit scales and mins into 12 bytes. */
static void pack_scale_min_k4(uint8_t *s, const uint8_t *ls, const uint8_t *lm)
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* ---------------------------------------------------------------- Q2_K */

void cdx_q2_K_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q2_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d), min = cdx_h2f(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int k = 0; k < 2; k++) { /* two sub-blocks of 16 per shift */
                    uint8_t sc = x[i].scales[is++];
                    float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[l + 16 * k] >> shift) & 3) - ml;
                }
    }
}

void cdx_q2_K_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q2_K *y = vy;
    uint8_t L[256], Laux[16];
    float weights[16], mins[16], scales[16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; j++)
                y[i].scales[j] = (uint8_t)cdx_nearest_int(iscale * scales[j]);
            y[i].d = cdx_f2h(max_scale / q4scale);
        } else {
            memset(y[i].scales, 0, 16);
            y[i].d = cdx_f2h(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < 16; j++)
                y[i].scales[j] |= (uint8_t)((unsigned)cdx_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = cdx_f2h(max_min / q4scale);
        } else {
            y[i].dmin = cdx_f2h(0.f);
        }
        for (int j = 0; j < 16; j++) { /* requantize against the stored (rounded) scales */
            const float d = cdx_h2f(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (!d)
                continue;
            const float dm = cdx_h2f(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clampi(cdx_nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        for (int j = 0; j < 256; j += 128)
            for (int l = 0; l < 32; l++)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
    }
}

float cdx_q2_K_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q2_K *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *q2 = x[i].qs, *sc = x[i].scales;
        const int8_t *q8 = y[i].qs;
        int summs = 0; /* the min term, from the q8_K block sums */
        for (int j = 0; j < 16; j++)
            summs += y[i].bsums[j] * (sc[j] >> 4);
        int isum = 0, is = 0;
        for (int half = 0; half < 2; half++, q2 += 32)
            for (int shift = 0; shift < 8; shift += 2, q8 += 32)
                for (int k = 0; k < 2; k++) {
                    int s = 0;
                    for (int l = 16 * k; l < 16 * k + 16; l++)
                        s += q8[l] * ((q2[l] >> shift) & 3);
                    isum += (sc[is++] & 0xF) * s;
                }
        const float dall = y[i].d * cdx_h2f(x[i].d), dmin = y[i].d * cdx_h2f(x[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

/* ---------------------------------------------------------------- Q3_K */

void cdx_q3_K_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q3_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d_all = cdx_h2f(x[i].d);
        int8_t scales[16];
        q3_k_scales(x[i].scales, scales);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m <<= 1)
                for (int k = 0; k < 2; k++) {
                    float dl = d_all * (float)scales[is++];
                    for (int l = 16 * k; l < 16 * k + 16; l++)
                        *y++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
    }
}

void cdx_q3_K_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q3_K *y = vy;
    int8_t L[256];
    float scales[16];
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = (int8_t)cdx_nearest_int(iscale * scales[j]);
                l = clampi(l, -32, 31) + 32;
                if (j < 8)
                    y[i].scales[j] = (uint8_t)(l & 0xF);
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = cdx_f2h(1 / iscale);
        } else {
            y[i].d = cdx_f2h(0.f);
        }
        int8_t sc[16];
        q3_k_scales(y[i].scales, sc);
        for (int j = 0; j < 16; j++) {
            float d = cdx_h2f(y[i].d) * (float)sc[j];
            if (!d)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(cdx_nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* high bit of value j goes to hmask[j % 32], bit j / 32 */
        memset(y[i].hmask, 0, 32);
        for (int j = 0; j < 256; j++)
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                L[j] = (int8_t)(L[j] - 4);
            }
        for (int j = 0; j < 256; j += 128)
            for (int l = 0; l < 32; l++)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
    }
}

/* llama.cpp's x86 arithmetic (quant_ref.h, cdx_q8k_lanes_*): every 32 values, 16 with one scale
 * and 16 with the next, the first 16 in lanes 0..3 */
float cdx_q3_K_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q3_K *x = vx;
    const cdx_block_q8_K *y = vy;
    float acc[8] = { 0 };
    for (int64_t i = 0; i < n / 256; i++) {
        int8_t scales[16], a[256];
        q3_k_scales(x[i].scales, scales);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        uint8_t m = 1;
        int8_t *p = a;
        for (int half = 0; half < 2; half++, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m <<= 1)
                for (int l = 0; l < 32; l++)
                    *p++ = (int8_t)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        int32_t s[8] = { 0 };
        for (int j = 0; j < 16; j++)
            cdx_q8k_lanes_add(s + 4 * (j % 2), a + 16 * j, y[i].qs + 16 * j, scales[j], 16);
        cdx_q8k_lanes_fma(acc, y[i].d * cdx_h2f(x[i].d), s);
    }
    return cdx_q8k_lanes_total(acc);
}

/* ---------------------------------------------------------------- Q4_K and Q5_K */

void cdx_q4_K_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d), min = cdx_h2f(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int is = 0; is < 8; is += 2, q += 32) {
            uint8_t sc, m;
            cdx_scale_min_k4(is, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            cdx_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* The shared part of the Q4_K / Q5_K reference quantizers: per 32-block (scale, min) search with
 * weights av_x + |x|, 6-bit scales and mins, then levels requantized against the stored scales. */
static void qkx_super_block(const float *x, int nmax, float rmin, int nstep, uint8_t *scales12,
                            cdx_half *d_out, cdx_half *dmin_out, uint8_t L[256])
{
    float mins[8], scales[8], weights[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        uint8_t a = (uint8_t)cdx_nearest_int(inv_scale * scales[j]);
        uint8_t b = (uint8_t)cdx_nearest_int(inv_min * mins[j]);
        ls[j] = a < 63 ? a : 63;
        lm[j] = b < 63 ? b : 63;
    }
    pack_scale_min_k4(scales12, ls, lm);
    *d_out = cdx_f2h(max_scale / 63.f);
    *dmin_out = cdx_f2h(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        cdx_scale_min_k4(j, scales12, &sc, &m);
        const float d = cdx_h2f(*d_out) * (float)sc;
        if (!d)
            continue;
        const float dm = cdx_h2f(*dmin_out) * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(cdx_nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void cdx_q4_K_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q4_K *y = vy;
    uint8_t L[256];
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        memset(y[i].scales, 0, 12);
        qkx_super_block(x, 15, -1.f, 20, y[i].scales, &y[i].d, &y[i].dmin, L);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * j + l] = (uint8_t)(L[64 * j + l] | L[64 * j + l + 32] << 4);
    }
}

/* Unpacked 6-bit scales and mins of a Q4_K/Q5_K block. */
static void k4_scales_mins(const uint8_t *s, int sc[8], int mn[8])
{
    for (int j = 0; j < 8; j++) {
        uint8_t a, b;
        cdx_scale_min_k4(j, s, &a, &b);
        sc[j] = a;
        mn[j] = b;
    }
}

/* Σ_j sc_j·(sub-block j's levels a · q8) and Σ_j m_j·(sub-block j's bsums) of one Q4_K/Q5_K
 * super-block, both exact. */
static void k4_sums(const cdx_block_q8_K *y, const uint8_t *scales12, const int8_t *a, int32_t *dot, int32_t *mins)
{
    int sc[8], mn[8];
    k4_scales_mins(scales12, sc, mn);
    int32_t s = 0, m = 0;
    for (int j = 0; j < 8; j++) {
        int32_t t = 0;
        for (int l = 0; l < 32; l++)
            t += a[32 * j + l] * y->qs[32 * j + l];
        s += sc[j] * t;
        m += mn[j] * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    *dot = s;
    *mins = m;
}

/* Q4_K is not one of llama.cpp's vec_dot types on x86 (its CPU_REPACK layout runs instead), so its
 * dot is caldrix's own, the arithmetic of the AVX2 and AVX-512 sets' 16-row layout (kern_x16.h) on
 * every set: per super-block one exact integer sum, then acc = fma(sum, d·da, acc) and
 * acc = fma(-mins, dmin·da, acc). */
float cdx_q4_K_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q4_K *x = vx;
    const cdx_block_q8_K *y = vy;
    float acc = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int8_t a[256];
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                a[64 * j + l] = (int8_t)(x[i].qs[32 * j + l] & 0xF);
                a[64 * j + l + 32] = (int8_t)(x[i].qs[32 * j + l] >> 4);
            }
        int32_t dot, mins;
        k4_sums(&y[i], x[i].scales, a, &dot, &mins);
        acc = fmaf((float)dot, cdx_h2f(x[i].d) * y[i].d, acc);
        acc = fmaf(-(float)mins, cdx_h2f(x[i].dmin) * y[i].d, acc);
    }
    return acc;
}

void cdx_q5_K_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q5_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d), min = cdx_h2f(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            cdx_scale_min_k4(is, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            cdx_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void cdx_q5_K_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q5_K *y = vy;
    uint8_t L[256];
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        memset(y[i].scales, 0, 12);
        qkx_super_block(x, 31, -0.5f, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
        memset(y[i].qh, 0, 32);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * j + l], l2 = L[64 * j + l + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[l] |= (uint8_t)(1u << (2 * j));
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[l] |= (uint8_t)(2u << (2 * j));
                }
                y[i].qs[32 * j + l] = (uint8_t)(l1 | l2 << 4);
            }
    }
}

/* llama.cpp's x86 arithmetic (quant_ref.h, cdx_q8k_lanes_*), the mins apart: their exact integer
 * sum times -da·dmin is added to one float across the super-blocks, and that float to the lanes'
 * total at the end. */
float cdx_q5_K_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q5_K *x = vx;
    const cdx_block_q8_K *y = vy;
    float acc[8] = { 0 }, summs = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int8_t a[256];
        const uint8_t *qh = x[i].qh;
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                a[64 * j + l] = (int8_t)((x[i].qs[32 * j + l] & 0xF) + ((qh[l] >> (2 * j)) & 1) * 16);
                a[64 * j + l + 32] = (int8_t)((x[i].qs[32 * j + l] >> 4) + ((qh[l] >> (2 * j + 1)) & 1) * 16);
            }
        int sc[8], mn[8];
        k4_scales_mins(x[i].scales, sc, mn);
        int32_t s[8] = { 0 }, mins = 0;
        for (int j = 0; j < 8; j++) {
            cdx_q8k_lanes_add(s, a + 32 * j, y[i].qs + 32 * j, sc[j], 32);
            mins += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        cdx_q8k_lanes_fma(acc, y[i].d * cdx_h2f(x[i].d), s);
        summs = SUMMS_STEP(-y[i].d * cdx_h2f(x[i].dmin), (float)mins, summs);
    }
    return cdx_q8k_lanes_total(acc) + summs;
}

/* ---------------------------------------------------------------- Q6_K */

/* The 6-bit value (unsigned, 0..63) at position l + 32*k of a 128-half of a Q6_K block. */
static inline int q6_value(const uint8_t *ql, const uint8_t *qh, int l, int k)
{
    int lo = k & 1 ? ql[l + 32] : ql[l];
    lo = k >= 2 ? lo >> 4 : lo & 0xF;
    return lo | ((qh[l] >> (2 * k)) & 3) << 4;
}

void cdx_q6_K_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q6_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++)
                for (int k = 0; k < 4; k++)
                    y[l + 32 * k] = d * (float)sc[l / 16 + 2 * k] * (float)(q6_value(ql, qh, l, k) - 32);
    }
}

void cdx_q6_K_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q6_K *y = vy;
    int8_t L[256];
    float scales[16];
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = make_qx_quants_rmse1(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = cdx_f2h(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            int v = cdx_nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            float d = cdx_h2f(y[i].d) * (float)y[i].scales[j];
            if (!d)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(cdx_nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
                ql[l] = (uint8_t)((a & 0xF) | (c & 0xF) << 4);
                ql[l + 32] = (uint8_t)((b & 0xF) | (e & 0xF) << 4);
                qh[l] = (uint8_t)(a >> 4 | (b >> 4) << 2 | (c >> 4) << 4 | (e >> 4) << 6);
            }
    }
}

/* Q6_K runs in caldrix's 16-row layout on the AVX2 and AVX-512 sets (kern_x16.h), whose arithmetic
 * every set takes: per super-block one exact integer sum Σ sc·(q-32)·q8, then acc = fma(sum, d·da,
 * acc). (llama.cpp's x86 vec_dot keeps 8 lanes instead.) */
float cdx_q6_K_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_q6_K *x = vx;
    const cdx_block_q8_K *y = vy;
    float acc = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        int32_t s = 0;
        for (int half = 0; half < 2; half++, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++)
                for (int k = 0; k < 4; k++) {
                    const int v = 128 * half + l + 32 * k;
                    s += x[i].scales[v / 16] * ((q6_value(ql, qh, l, k) - 32) * y[i].qs[v]);
                }
        acc = fmaf((float)s, cdx_h2f(x[i].d) * y[i].d, acc);
    }
    return acc;
}

/* ---------------------------------------------------------------- Q8_K (activations) */

void cdx_q8_K_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_q8_K *x = vx;
    for (int64_t i = 0; i < n / 256; i++)
        for (int j = 0; j < 256; j++)
            *y++ = x[i].d * (float)x[i].qs[j];
}

void cdx_q8_K_from_f32_ref(const float *x, void *vy, int64_t n)
{
    cdx_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        float max = 0, amax = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        if (!amax) { /* ggml leaves bsums untouched here; caldrix zeroes them */
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127/max (not -128): the value of largest magnitude becomes -127 or +127 */
        const float iscale = -127.f / max;
        for (int j = 0; j < 256; j++) {
            int v = cdx_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}
