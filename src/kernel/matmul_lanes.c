/* The scalar twin of the SIMD float rows (kern_tmpl.h: tile_f at any n, fg_micro in the GEMM):
 * F32/F16/BF16 weights times f32 activations summed exactly as a loop over vectors of `lanes`
 * floats sums them, for tests to hold those kernels to bit for bit. Lane l takes the columns
 * c ≡ l (mod lanes) below cv = n - n % lanes in increasing order, one fused multiply-add each
 * (vfmadd: one rounding); the lanes are added as a tree (l[i] + l[i + lanes/2], then + lanes/4,
 * ..., + 1: hsum8 of AVX2 and _mm512_reduce_add_ps of AVX-512 both add that way); then the
 * columns from cv on are added one by one, each product rounded before the sum. */
#include "kernel_impl.h"

#include <math.h>

float cdx_dot_lanes_ref(uint32_t type, const void *w, const float *x, int64_t n, int lanes)
{
    float l[64] = { 0 };
    if (lanes < 1 || lanes > 64 || (lanes & (lanes - 1)))
        return NAN;
    const int64_t cv = n - n % lanes;
    for (int64_t c = 0; c < n; c++) {
        const float wc = type == CDX_TYPE_F32   ? ((const float *)w)[c]
                       : type == CDX_TYPE_F16   ? cdx_f16_to_f32(((const uint16_t *)w)[c])
                                                : cdx_bf16_to_f32(((const uint16_t *)w)[c]);
        if (c < cv) {
            l[c % lanes] = fmaf(wc, x[c], l[c % lanes]);
        } else {
            if (c == cv)
                for (int h = lanes / 2; h >= 1; h /= 2)
                    for (int i = 0; i < h; i++)
                        l[i] = l[i] + l[i + h];
            const float p = wc * x[c];
            l[0] = l[0] + p;
        }
    }
    if (cv == n)
        for (int h = lanes / 2; h >= 1; h /= 2)
            for (int i = 0; i < h; i++)
                l[i] = l[i] + l[i + h];
    return l[0];
}
