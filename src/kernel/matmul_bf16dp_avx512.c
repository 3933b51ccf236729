/* BF16 weights × bf16 activations with AVX512_BF16's vdpbf16ps (16 f32 lanes, each taking a pair
 * of products per instruction): for models whose activations are bf16 values (--dtype bf16,
 * cdx_mat.act_bf16), picked at run time only where the CPU has AVX512_BF16. One accumulator per
 * (row, activation row), so a row's sum is the same for any batch. Scalar twin, with the exact
 * order spelled out: cdx_dot_bf16dp_ref (matmul_bf16dp.c). */
#include "kernel_impl.h"

#include <immintrin.h>

/* l[i] + l[i+8], then + 4, + 2, + 1: the twin's tree */
static inline float reduce16(__m512 v)
{
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* R rows x T activation rows at once, one accumulator per pair, each fed the row's 32-value chunks
 * in order (the last one zero-filled) and reduced by reduce16: the twin's sum for every pair. The
 * tile only lets the chains run side by side (vdpbf16ps's latency hides behind the others) and
 * reuses each loaded chunk R or T times. */
static inline __attribute__((always_inline)) void tile(const cdx_mat *m, int64_t r, const int R, const uint8_t *xq,
                                                       size_t xrb, int64_t t, const int T, float *y)
{
    const int64_t n = m->cols, full = n - n % 32;
    const uint16_t *w[8], *x[4];
    __m512 acc[8][4];
    for (int i = 0; i < R; i++) {
        w[i] = (const uint16_t *)((const uint8_t *)m->data + (size_t)(r + i) * m->row_bytes);
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm512_setzero_ps();
    }
    for (int j = 0; j < T; j++)
        x[j] = (const uint16_t *)(xq + (size_t)(t + j) * xrb);
    for (int64_t c = 0; c < full; c += 32) {
        __m512bh xv[4];
        for (int j = 0; j < T; j++)
            xv[j] = (__m512bh)_mm512_loadu_si512(x[j] + c);
        for (int i = 0; i < R; i++) {
            const __m512bh wv = (__m512bh)_mm512_loadu_si512(w[i] + c);
            for (int j = 0; j < T; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv, xv[j]);
        }
    }
    if (n > full) {
        const __mmask32 k = (__mmask32)((1u << (n - full)) - 1);
        __m512bh xv[4];
        for (int j = 0; j < T; j++)
            xv[j] = (__m512bh)_mm512_maskz_loadu_epi16(k, x[j] + full);
        for (int i = 0; i < R; i++) {
            const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(k, w[i] + full);
            for (int j = 0; j < T; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv, xv[j]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < T; j++)
            y[(t + j) * m->rows + r + i] = reduce16(acc[i][j]);
}

/* rows r..r+R-1 against every activation row: 4 at a time, then 2, then 1 */
static inline __attribute__((always_inline)) void rows_all_t(const cdx_mat *m, int64_t r, const int R,
                                                             const uint8_t *xq, size_t xrb, int64_t n, float *y)
{
    int64_t t = 0;
    for (; t + 4 <= n; t += 4)
        tile(m, r, R, xq, xrb, t, 4, y);
    if (t + 2 <= n) {
        tile(m, r, R, xq, xrb, t, 2, y);
        t += 2;
    }
    if (t < n)
        tile(m, r, R, xq, xrb, t, 1, y);
}

void cdx_rows_bf16dp_avx512(const cdx_mat *w, int64_t r0, int64_t r1, const float *x, const void *xq, size_t xrb,
                            int64_t n, float *y, void *scratch)
{
    (void)x;
    (void)scratch;
    const uint8_t *xb = xq;
    int64_t r = r0;
    /* decode reads each row once: one stream per thread reads memory fastest here (measured, Zen 5:
     * eight rows side by side were ~10 % slower in the model); a batch reuses 4 rows' chunks */
    if (n > 1)
        for (; r + 4 <= r1; r += 4)
            rows_all_t(w, r, 4, xb, xrb, n, y);
    for (; r < r1; r++)
        rows_all_t(w, r, 1, xb, xrb, n, y);
}
