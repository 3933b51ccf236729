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

static inline float dot(const uint16_t *w, const uint16_t *x, int64_t n)
{
    const int64_t full = n - n % 32;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < full; c += 32)
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w + c), (__m512bh)_mm512_loadu_si512(x + c));
    if (n > full) { /* the zero-filled last chunk */
        const __mmask32 m = (__mmask32)((1u << (n - full)) - 1);
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_maskz_loadu_epi16(m, w + full),
                               (__m512bh)_mm512_maskz_loadu_epi16(m, x + full));
    }
    return reduce16(acc);
}

void cdx_rows_bf16dp_avx512(const cdx_mat *w, int64_t r0, int64_t r1, const float *x, const void *xq, size_t xrb,
                            int64_t n, float *y, void *scratch)
{
    (void)x;
    (void)scratch;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *wr = (const uint16_t *)((const uint8_t *)w->data + (size_t)r * w->row_bytes);
        for (int64_t t = 0; t < n; t++)
            y[t * w->rows + r] = dot(wr, (const uint16_t *)((const uint8_t *)xq + (size_t)t * xrb), w->cols);
    }
}
