/* The "i-quants": lattice/grid codes (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) and
 * the non-linear 4-bit IQ4_NL / IQ4_XS. Dequantize and dot against Q8_K (Q8_0 for IQ4_NL).
 * Grid tables are in quant_grids.c; layouts follow ggml-common.h (llama.cpp v0.4.0). The
 * quantizers are in quant_iq_quantize.c. */
#include "quant/quant_ref.h"

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 8 grid values times a scale, sign bit j of `signs` negating value j. */
static inline void put8(float *y, float db, uint64_t grid, uint8_t signs)
{
    for (int j = 0; j < 8; j++) {
        float v = db * (float)cdx_grid8(grid, j);
        y[j] = signs >> j & 1 ? v * -1.f : v;
    }
}

/* Signed integer dot of 8 grid values with 8 int8 activations. */
static inline int dot8(uint64_t grid, uint8_t signs, const int8_t *q8)
{
    int s = 0;
    for (int j = 0; j < 8; j++) {
        int v = cdx_grid8(grid, j) * q8[j];
        s += signs >> j & 1 ? -v : v;
    }
    return s;
}

/* Two 4-value IQ3 grid entries as one 8-value entry. */
static inline uint64_t grid3_pair(uint32_t a, uint32_t b) { return (uint64_t)a | (uint64_t)b << 32; }

/* ---------------------------------------------------------------- IQ2_XXS
 * Per 32 values: 4 bytes of grid indices (8 values each) and a u32 with four 7-bit sign codes
 * and a 4-bit scale in the top bits. */

void cdx_iq2_xxs_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_iq2_xxs *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        const uint8_t *q = (const uint8_t *)x[i].qs;
        for (int ib = 0; ib < 8; ib++, q += 8) {
            const uint32_t aux = rd32(q + 4);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8)
                put8(y, db, cdx_iq2xxs_grid[q[l]], cdx_ksigns_iq2xs[(aux >> 7 * l) & 127]);
        }
    }
}

float cdx_iq2_xxs_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_iq2_xxs *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d) * y[i].d;
        const uint8_t *q = (const uint8_t *)x[i].qs;
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++, q += 8) {
            const uint32_t aux = rd32(q + 4);
            int sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                sumi += dot8(cdx_iq2xxs_grid[q[l]], cdx_ksigns_iq2xs[(aux >> 7 * l) & 127], q8);
            bsum += sumi * (int)(2 * (aux >> 28) + 1);
        }
        sumf += d * (float)bsum;
    }
    return 0.125f * sumf;
}

/* ---------------------------------------------------------------- IQ2_XS
 * u16 per 8 values: 9-bit grid index, 7-bit sign code; a 4-bit scale per 16 values. */

void cdx_iq2_xs_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_iq2_xs *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        const uint8_t *q = (const uint8_t *)x[i].qs;
        for (int ib = 0; ib < 8; ib++) {
            const float db[2] = { d * (0.5f + (float)(x[i].scales[ib] & 0xf)) * 0.25f,
                                  d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f };
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t v = rd16(q + 2 * (4 * ib + l));
                put8(y, db[l / 2], cdx_iq2xs_grid[v & 511], cdx_ksigns_iq2xs[v >> 9]);
            }
        }
    }
}

float cdx_iq2_xs_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_iq2_xs *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d) * y[i].d;
        const uint8_t *q = (const uint8_t *)x[i].qs;
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int sumi[2] = { 0, 0 };
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint16_t v = rd16(q + 2 * (4 * ib + l));
                sumi[l / 2] += dot8(cdx_iq2xs_grid[v & 511], cdx_ksigns_iq2xs[v >> 9], q8);
            }
            bsum += sumi[0] * (2 * (x[i].scales[ib] & 0xf) + 1) + sumi[1] * (2 * (x[i].scales[ib] >> 4) + 1);
        }
        sumf += d * (float)bsum;
    }
    return 0.125f * sumf;
}

/* ---------------------------------------------------------------- IQ2_S
 * 10-bit grid index (qs byte + 2 bits of qh), explicit sign bytes, 4-bit scale per 16 values. */

static inline int iq2s_index(const cdx_block_iq2_s *b, int ib, int l)
{
    return b->qs[4 * ib + l] | ((b->qh[ib] << (8 - 2 * l)) & 0x300);
}

void cdx_iq2_s_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_iq2_s *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        const uint8_t *signs = x[i].qs + 32;
        for (int ib = 0; ib < 8; ib++) {
            const float db[2] = { d * (0.5f + (float)(x[i].scales[ib] & 0xf)) * 0.25f,
                                  d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f };
            for (int l = 0; l < 4; l++, y += 8)
                put8(y, db[l / 2], cdx_iq2s_grid[iq2s_index(&x[i], ib, l)], signs[4 * ib + l]);
        }
    }
}

float cdx_iq2_s_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_iq2_s *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d) * y[i].d;
        const uint8_t *signs = x[i].qs + 32;
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int sumi[2] = { 0, 0 };
            for (int l = 0; l < 4; l++, q8 += 8)
                sumi[l / 2] += dot8(cdx_iq2s_grid[iq2s_index(&x[i], ib, l)], signs[4 * ib + l], q8);
            bsum += (1 + 2 * (x[i].scales[ib] & 0xf)) * sumi[0] + (1 + 2 * (x[i].scales[ib] >> 4)) * sumi[1];
        }
        sumf += d * (float)bsum;
    }
    return 0.125f * sumf;
}

/* ---------------------------------------------------------------- IQ3_XXS
 * 64 grid bytes (4 values each), then per 32 values a u32 of four 7-bit sign codes + 4-bit scale. */

void cdx_iq3_xxs_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_iq3_xxs *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            const uint32_t aux = rd32(x[i].qs + 64 + 4 * ib);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8)
                put8(y, db, grid3_pair(cdx_iq3xxs_grid[qs[2 * l]], cdx_iq3xxs_grid[qs[2 * l + 1]]),
                     cdx_ksigns_iq2xs[(aux >> 7 * l) & 127]);
        }
    }
}

float cdx_iq3_xxs_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_iq3_xxs *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d) * y[i].d;
        const uint8_t *qs = x[i].qs;
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            const uint32_t aux = rd32(x[i].qs + 64 + 4 * ib);
            int sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                sumi += dot8(grid3_pair(cdx_iq3xxs_grid[qs[2 * l]], cdx_iq3xxs_grid[qs[2 * l + 1]]),
                             cdx_ksigns_iq2xs[(aux >> 7 * l) & 127], q8);
            bsum += sumi * (int)(2 * (aux >> 28) + 1);
        }
        sumf += d * (float)bsum;
    }
    return 0.25f * sumf;
}

/* ---------------------------------------------------------------- IQ3_S
 * 9-bit grid indices (qs byte + 1 bit of qh), explicit sign bytes, 4-bit odd scale per 32. */

static inline uint64_t iq3s_grid8(const uint8_t *qs, uint8_t qh, int l)
{
    return grid3_pair(cdx_iq3s_grid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)],
                      cdx_iq3s_grid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)]);
}

void cdx_iq3_s_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_iq3_s *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const int sc = ib % 2 ? x[i].scales[ib / 2] >> 4 : x[i].scales[ib / 2] & 0xf;
            const float db = d * (float)(1 + 2 * sc);
            for (int l = 0; l < 4; l++, y += 8)
                put8(y, db, iq3s_grid8(x[i].qs + 8 * ib, x[i].qh[ib], l), x[i].signs[4 * ib + l]);
        }
    }
}

float cdx_iq3_s_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_iq3_s *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d) * y[i].d;
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int sc = ib % 2 ? x[i].scales[ib / 2] >> 4 : x[i].scales[ib / 2] & 0xf;
            int sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                sumi += dot8(iq3s_grid8(x[i].qs + 8 * ib, x[i].qh[ib], l), x[i].signs[4 * ib + l], q8);
            bsum += sumi * (2 * sc + 1);
        }
        sumf += d * (float)bsum;
    }
    return sumf;
}

/* ---------------------------------------------------------------- IQ1_S
 * 11-bit indices into a {-1,0,1} grid, per 32 values a u16 with 4x3 high index bits, a 3-bit
 * scale and the sign of a +-1/8 shift. */

void cdx_iq1_s_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_iq1_s *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = x[i].qh[ib];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -CDX_IQ1S_DELTA : CDX_IQ1S_DELTA;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t g = cdx_iq1s_grid[x[i].qs[4 * ib + l] | (((qh >> 3 * l) & 7) << 8)];
                for (int j = 0; j < 8; j++)
                    y[j] = dl * ((float)(int8_t)cdx_grid8(g, j) + delta);
            }
        }
    }
}

static inline int dot8_i8(uint64_t g, const int8_t *q8)
{
    int s = 0;
    for (int j = 0; j < 8; j++)
        s += q8[j] * (int8_t)cdx_grid8(g, j);
    return s;
}

float cdx_iq1_s_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_iq1_s *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const int8_t *q8 = y[i].qs;
        int sumi = 0, sumi1 = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = x[i].qh[ib];
            const int ls = 2 * ((qh >> 12) & 7) + 1, delta = qh & 0x8000 ? -1 : 1;
            int lsum = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                lsum += dot8_i8(cdx_iq1s_grid[x[i].qs[4 * ib + l] | (((qh >> 3 * l) & 7) << 8)], q8);
            sumi += ls * lsum;
            sumi1 += ls * delta * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
        }
        sumf += cdx_h2f(x[i].d) * y[i].d * ((float)sumi + CDX_IQ1S_DELTA * (float)sumi1);
    }
    return sumf;
}

/* ---------------------------------------------------------------- IQ1_M
 * No d field: the half scale is spread over the top nibbles of the four u16 scale words; each
 * 16 values has a 3-bit scale, each 8 values an 11-bit index and its own shift sign. */

static float iq1m_d(const cdx_block_iq1_m *b, uint16_t sc[4])
{
    for (int k = 0; k < 4; k++)
        sc[k] = rd16(b->scales + 2 * k);
    return cdx_h2f((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)));
}

/* Index and shift sign (+1 / -1) of 8-value group l (0..3) of 32-block ib. */
static inline int iq1m_index(const cdx_block_iq1_m *b, int ib, int l, int *neg)
{
    const uint8_t qh = b->qh[2 * ib + l / 2];
    *neg = l % 2 ? (qh & 0x80) != 0 : (qh & 0x08) != 0;
    return b->qs[4 * ib + l] | (l % 2 ? (qh << 4) & 0x700 : (qh << 8) & 0x700);
}

void cdx_iq1_m_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_iq1_m *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t sc[4];
        const float d = iq1m_d(&x[i], sc);
        for (int ib = 0; ib < 8; ib++) {
            const float dl[2] = { d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1),
                                  d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1) };
            for (int l = 0; l < 4; l++, y += 8) {
                int neg;
                const uint64_t g = cdx_iq1s_grid[iq1m_index(&x[i], ib, l, &neg)];
                const float delta = neg ? -CDX_IQ1S_DELTA : CDX_IQ1S_DELTA;
                for (int j = 0; j < 8; j++)
                    y[j] = dl[l / 2] * ((float)(int8_t)cdx_grid8(g, j) + delta);
            }
        }
    }
}

float cdx_iq1_m_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_iq1_m *x = vx;
    const cdx_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t sc[4];
        const float d = iq1m_d(&x[i], sc);
        const int8_t *q8 = y[i].qs;
        int sumi1 = 0, sumi2 = 0;
        for (int ib = 0; ib < 8; ib++) {
            int sum1[2] = { 0, 0 }, sum2[2] = { 0, 0 };
            for (int l = 0; l < 4; l++, q8 += 8) {
                int neg, lsum2 = 0;
                const uint64_t g = cdx_iq1s_grid[iq1m_index(&x[i], ib, l, &neg)];
                for (int j = 0; j < 8; j++)
                    lsum2 += q8[j];
                sum1[l / 2] += dot8_i8(g, q8);
                sum2[l / 2] += neg ? -lsum2 : lsum2;
            }
            const int ls1 = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
            const int ls2 = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
            sumi1 += sum1[0] * ls1 + sum1[1] * ls2;
            sumi2 += sum2[0] * ls1 + sum2[1] * ls2;
        }
        sumf += d * y[i].d * ((float)sumi1 + CDX_IQ1S_DELTA * (float)sumi2);
    }
    return sumf;
}

/* ---------------------------------------------------------------- IQ4_NL and IQ4_XS */

void cdx_iq4_nl_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = cdx_h2f(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)cdx_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + 16] = d * (float)cdx_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

float cdx_iq4_nl_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_iq4_nl *x = vx;
    const cdx_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = cdx_h2f(y[i].d) * cdx_h2f(x[i].d);
        int s1 = 0, s2 = 0;
        for (int j = 0; j < 16; j++) {
            s1 += y[i].qs[j] * cdx_kvalues_iq4nl[x[i].qs[j] & 0xf];
            s2 += y[i].qs[j + 16] * cdx_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
        sumf += d * (float)(s1 + s2);
    }
    return sumf;
}

/* 6-bit scale (stored +32) of 32-block ib of an IQ4_XS block. */
static inline int iq4xs_scale(const cdx_block_iq4_xs *b, int ib)
{
    return (((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | ((b->scales_h >> 2 * ib) & 3) << 4) - 32;
}

void cdx_iq4_xs_to_f32_ref(const void *vx, float *y, int64_t n)
{
    const cdx_block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = cdx_h2f(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            const float dl = d * (float)iq4xs_scale(&x[i], ib);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)cdx_kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * (float)cdx_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* llama.cpp's x86 arithmetic (quant_ref.h, cdx_q8k_lanes_*) */
float cdx_iq4_xs_dot_ref(int64_t n, const void *vx, const void *vy)
{
    const cdx_block_iq4_xs *x = vx;
    const cdx_block_q8_K *y = vy;
    float acc[8] = { 0 };
    for (int64_t i = 0; i < n / 256; i++) {
        int8_t a[32];
        int32_t s[8] = { 0 };
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                a[j] = cdx_kvalues_iq4nl[qs[j] & 0xf];
                a[j + 16] = cdx_kvalues_iq4nl[qs[j] >> 4];
            }
            cdx_q8k_lanes_add(s, a, y[i].qs + 32 * ib, iq4xs_scale(&x[i], ib), 32);
        }
        cdx_q8k_lanes_fma(acc, cdx_h2f(x[i].d) * y[i].d, s);
    }
    return cdx_q8k_lanes_total(acc);
}
