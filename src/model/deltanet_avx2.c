/* The delta-rule steps compiled for AVX2 (the Makefile gives *_avx2.c -mavx2 -mfma -O3): the same
 * source as the scalar twin in deltanet.c, with the inner loops below in registers. Each keeps
 * every chain of deltanet_impl.h's plain loops, in its order, with a product rounded and then
 * added (mul, add: never an FMA), so the bits are the twin's; see deltanet_impl.h. */
#include "deltanet.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define DN_OWN_LOOPS 1

/* y[b] ± c[j]·X[j][b] over j in order: blocks of 32 values of b (4 accumulators), then of 8, then
 * one at a time. SUB is a constant at each call (inlined). */
static inline __attribute__((always_inline)) void rows_acc_avx2(float *y, const float *c, const float *X, int64_t ldx,
                                                                int64_t nj, int64_t nb, const int sub)
{
    int64_t b = 0;
    for (; b + 32 <= nb; b += 32) {
        __m256 t[4];
        for (int i = 0; i < 4; i++)
            t[i] = _mm256_loadu_ps(y + b + 8 * i);
        for (int64_t j = 0; j < nj; j++) {
            const __m256 cj = _mm256_set1_ps(c[j]);
            const float *x = X + j * ldx + b;
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const __m256 p = _mm256_mul_ps(cj, _mm256_loadu_ps(x + 8 * i));
                t[i] = sub ? _mm256_sub_ps(t[i], p) : _mm256_add_ps(t[i], p);
            }
        }
        for (int i = 0; i < 4; i++)
            _mm256_storeu_ps(y + b + 8 * i, t[i]);
    }
    for (; b + 8 <= nb; b += 8) {
        __m256 t = _mm256_loadu_ps(y + b);
        for (int64_t j = 0; j < nj; j++) {
            const __m256 p = _mm256_mul_ps(_mm256_set1_ps(c[j]), _mm256_loadu_ps(X + j * ldx + b));
            t = sub ? _mm256_sub_ps(t, p) : _mm256_add_ps(t, p);
        }
        _mm256_storeu_ps(y + b, t);
    }
    for (; b < nb; b++) {
        float t = y[b];
        for (int64_t j = 0; j < nj; j++)
            t = sub ? t - c[j] * X[j * ldx + b] : t + c[j] * X[j * ldx + b];
        y[b] = t;
    }
}

static void dn_rows_acc_avx2(float *y, const float *c, const float *X, int64_t ldx, int64_t nj, int64_t nb, int sub)
{
    if (sub)
        rows_acc_avx2(y, c, X, ldx, nj, nb, 1);
    else
        rows_acc_avx2(y, c, X, ldx, nj, nb, 0);
}

/* Two outputs over the same rows: blocks of 32 values (8 accumulators), each X vector loaded once. */
static void dn_rows_acc2_avx2(float *y, float *y2, const float *c, const float *c2, const float *X, int64_t ldx,
                              int64_t nj, int64_t nb)
{
    int64_t b = 0;
    for (; b + 32 <= nb; b += 32) {
        __m256 t[4], t2[4];
        for (int i = 0; i < 4; i++) {
            t[i] = _mm256_loadu_ps(y + b + 8 * i);
            t2[i] = _mm256_loadu_ps(y2 + b + 8 * i);
        }
        for (int64_t j = 0; j < nj; j++) {
            const __m256 cj = _mm256_set1_ps(c[j]), dj = _mm256_set1_ps(c2[j]);
            const float *x = X + j * ldx + b;
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const __m256 xv = _mm256_loadu_ps(x + 8 * i);
                t[i] = _mm256_add_ps(t[i], _mm256_mul_ps(cj, xv));
                t2[i] = _mm256_add_ps(t2[i], _mm256_mul_ps(dj, xv));
            }
        }
        for (int i = 0; i < 4; i++) {
            _mm256_storeu_ps(y + b + 8 * i, t[i]);
            _mm256_storeu_ps(y2 + b + 8 * i, t2[i]);
        }
    }
    rows_acc_avx2(y + b, c, X + b, ldx, nj, nb - b, 0);
    rows_acc_avx2(y2 + b, c2, X + b, ldx, nj, nb - b, 0);
}

#define DN_NAME(x) dn_##x##_avx2
#include "deltanet_impl.h"
#undef DN_NAME

const dn_kernels dn_kernels_avx2 = { "avx2", dn_chunk_step_avx2, dn_recurrent_step_avx2 };
