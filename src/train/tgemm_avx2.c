/* The AVX2 micro-kernel of training's GEMM (tgemm.h): up to 4 rows × 16 columns at a time in 8 ymm
 * accumulators, one fused multiply-add per k and value, in k order (its scalar twin: tg_ukr_scalar).
 * Also the attention's dot and axpy (twins: tg_dot_scalar, tg_axpy_scalar). */
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
