/* The AVX2 micro-kernel of training's GEMM (tgemm.h): up to 4 rows × 16 columns at a time in 8 ymm
 * accumulators, one fused multiply-add per k and value, in k order (its scalar twin: tg_ukr_scalar).
 * Also the attention's dot and axpy (twins: tg_dot_scalar, tg_axpy_scalar), and the transposing pack. */
#include "train/tgemm.h"

#include <immintrin.h>

static inline __m256i lane_mask(int n) /* the first n of 8 lanes (n may be <= 0 or >= 8) */
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* MR rows, the 16 columns h0..h0+16 of the panel (nh of them valid) */
static inline __attribute__((always_inline)) void ukr_m(const int MR, int nh, int h0, int64_t kc, const float *a,
                                                        int64_t a_rs, int64_t a_cs, float alpha, const float *bp,
                                                        float *c, int64_t ldc, bool load)
{
    const __m256i m0 = lane_mask(nh), m1 = lane_mask(nh - 8);
    __m256 c0[4], c1[4];
    for (int r = 0; r < MR; r++) {
        c0[r] = load ? _mm256_maskload_ps(c + r * ldc + h0, m0) : _mm256_setzero_ps();
        c1[r] = load ? _mm256_maskload_ps(c + r * ldc + h0 + 8, m1) : _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(bp + k * TG_NR + h0), b1 = _mm256_load_ps(bp + k * TG_NR + h0 + 8);
        for (int r = 0; r < MR; r++) {
            const __m256 av = _mm256_set1_ps(alpha * a[r * a_rs + k * a_cs]);
            c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
        }
    }
    for (int r = 0; r < MR; r++) {
        _mm256_maskstore_ps(c + r * ldc + h0, m0, c0[r]);
        _mm256_maskstore_ps(c + r * ldc + h0 + 8, m1, c1[r]);
    }
}

void tg_ukr_avx2(int mr, int nr, int64_t kc, const float *a, int64_t a_rs, int64_t a_cs, float alpha,
                 const float *bp, float *c, int64_t ldc, bool load)
{
    for (int r0 = 0; r0 < mr; r0 += 4) {
        const int m = mr - r0 < 4 ? mr - r0 : 4;
        const float *ar = a + r0 * a_rs;
        float *cr = c + r0 * ldc;
        for (int h0 = 0; h0 < nr; h0 += 16) {
            const int nh = nr - h0;
            switch (m) {
            case 4: ukr_m(4, nh, h0, kc, ar, a_rs, a_cs, alpha, bp, cr, ldc, load); break;
            case 3: ukr_m(3, nh, h0, kc, ar, a_rs, a_cs, alpha, bp, cr, ldc, load); break;
            case 2: ukr_m(2, nh, h0, kc, ar, a_rs, a_cs, alpha, bp, cr, ldc, load); break;
            default: ukr_m(1, nh, h0, kc, ar, a_rs, a_cs, alpha, bp, cr, ldc, load); break;
            }
        }
    }
}

/* the twin's 8 partial sums are the 8 lanes; a product rounded, then added (no FMA) */
float tg_dot_avx2(const float *a, const float *b, int64_t n)
{
    __m256 s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    float l[8];
    _mm256_storeu_ps(l, s);
    for (; i < n; i++)
        l[0] += a[i] * b[i];
    return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

void tg_axpy_avx2(float *y, float a, const float *x, int64_t n)
{
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(av, _mm256_loadu_ps(x + i))));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* rows r[0..8) (8 floats each) into columns, in place */
static inline void tr8x8(__m256 r[8])
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

void tg_pack_t_avx2(const float *b, int64_t b_cs, int64_t kc, float *bp)
{
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int j = 0; j < TG_NR; j += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = _mm256_loadu_ps(b + (j + i) * b_cs + k);
            tr8x8(r);
            for (int i = 0; i < 8; i++)
                _mm256_store_ps(bp + (k + i) * TG_NR + j, r[i]);
        }
    for (; k < kc; k++)
        for (int j = 0; j < TG_NR; j++)
            bp[k * TG_NR + j] = b[j * b_cs + k];
}
