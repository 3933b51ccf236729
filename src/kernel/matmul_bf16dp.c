/* The scalar twin of the AVX512_BF16 matmul (matmul_bf16dp_avx512.c): BF16 weights times bf16
 * activations summed exactly as a 16-lane vdpbf16ps loop sums them, for tests to hold the kernel
 * to. Intel's pseudocode (VDPBF16PS): for lane j of each 32-value chunk,
 *   acc_j += w[2j+1]·x[2j+1];  acc_j += w[2j]·x[2j]
 * each an f32 fused multiply-add rounded to nearest even, with denormal inputs read as zero and
 * denormal results flushed to zero (MXCSR neither read nor written). A chunk past the end of the
 * row is zero-filled. Then the 16 lanes are added as a tree: l[i] + l[i+8], then + 4, + 2, + 1. */
#include "kernel_impl.h"

#include <math.h>

static inline float daz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }

float cdx_dot_bf16dp_ref(const uint16_t *w, const uint16_t *x, int64_t n)
{
    float l[16] = { 0 };
    for (int64_t c = 0; c < n; c += 32)
        for (int j = 0; j < 16; j++)
            for (int e = 1; e >= 0; e--) { /* the odd element of the pair first */
                const int64_t i = c + 2 * j + e;
                const float a = i < n ? daz(cdx_bf16_to_f32(w[i])) : 0.0f, b = i < n ? daz(cdx_bf16_to_f32(x[i])) : 0.0f;
                l[j] = daz(fmaf(a, b, daz(l[j]))); /* ftz out: a denormal result is flushed, as daz reads it */
            }
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++)
            l[i] = l[i] + l[i + h];
    return l[0];
}

void cdx_rows_bf16dp_ref(const cdx_mat *w, int64_t r0, int64_t r1, const float *x, const void *xq, size_t xrb,
                         int64_t n, float *y, void *scratch)
{
    (void)x;
    (void)scratch;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t t = 0; t < n; t++)
            y[t * w->rows + r] = cdx_dot_bf16dp_ref((const uint16_t *)((const uint8_t *)w->data + (size_t)r * w->row_bytes),
                                                    (const uint16_t *)((const uint8_t *)xq + (size_t)t * xrb), w->cols);
}
