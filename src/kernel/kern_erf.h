/* erf for the exact GELU (BERT's intermediate activation), with the same bits on every kernel set:
 * cdx_erf_ref is the scalar twin, and each set's vf_erf repeats its steps lane by lane.
 *   a = |x|; |a| >= 4: erf = ±1 (erfc(3.92) < 2^-25: from there erf rounds to 1 in float); nan: x + x
 *   k = (int)(2a), the interval [k/2, k/2 + 1/2) of a, in double:
 *     k = 0:  erf = a · Q(a²)          (Q ~ erf(√u)/√u, so tiny a keep their relative accuracy)
 *     k >= 1: erf = P_k(a - (k/2 + 1/4))
 *   each polynomial of degree CDX_ERF_DEG by Horner with fma (fma() in the twin: no contraction
 *   setting can change either side), the result rounded to float, then x's sign put on it.
 * scripts/erf-fit.c made the table (Chebyshev interpolation in quad precision, libquadmath's erfq);
 * on its dense sweep of [0, 4) the double polynomial is within 0.001 ulp of the float result, so the
 * float is erf correctly rounded but near ties: over all 2^32 floats it differs from glibc's double
 * erf rounded to float for 0.0003 % of them (1 ulp), and from glibc's erff for 2.96 % (1 ulp, erff's
 * own misroundings). tests/kernel/test_kernels.c holds it to erff and every set to this twin. */
#ifndef CDX_KERN_ERF_H
#define CDX_KERN_ERF_H

#include <math.h>

#define CDX_ERF_DEG 8
#define CDX_ERF_ONE 4.0f /* from here on, |erf| rounds to 1 */
#define CDX_GELU_RSQRT2 0.70710678118654752440f /* 1/√2, as torch's gelu multiplies by M_SQRT1_2 */

/* [d][k]: the coefficient of degree d of interval k (one row per degree: a vector set looks a
 * lane's coefficient up by k with one permute) */
static const double cdx_erf_poly[CDX_ERF_DEG + 1][8] = {
    { 0x1.20dd750429b6dp+0, 0x1.6c1c9759d0e5fp-1, 0x1.d8865d98abe01p-1, 0x1.f92d077f8d56dp-1, 0x1.ff404760319b4p-1, 0x1.fff2cfb0453d9p-1, 0x1.ffff6f9f67e55p-1, 0x1.fffffc2f171e3p-1 },
    { -0x1.812746b0379b5p-2, 0x1.492e42e96ffb4p-1, 0x1.e4652f9e71bb6p-3, 0x1.b0552ff046b06p-5, 0x1.d4143b7278e51p-8, 0x1.3360ce2ca8eb6p-11, 0x1.e9b5d9c5174a4p-16, 0x1.d936a8d7bc91ap-21 },
    { 0x1.ce2f21a03d814p-4, -0x1.edc56444e81d8p-2, -0x1.2ebf3dd3ddad6p-2, -0x1.7a4a8a1be51e7p-4, -0x1.074b60f6b79d1p-6, -0x1.a6a51a2273b8p-10, -0x1.8de3ccdb3d2a8p-14, -0x1.bba39ff5a4f6ep-19 },
    { -0x1.b82ce30f2b28fp-6, 0x1.b6e67bcf64a1ep-6, 0x1.571d0e965685dp-3, 0x1.7148df4613197p-4, 0x1.63ef359a6b417p-6, 0x1.69cefe5360e15p-9, 0x1.9aa61b3f8b4a2p-13, 0x1.0b7096bfddecdp-17 },
    { 0x1.565bcbf8e0365p-8, 0x1.349b614de8009p-3, -0x1.93a8253f4e7d7p-8, -0x1.8a0dbfe4f9197p-5, -0x1.38a984efeb9b4p-6, -0x1.ab0bf151d0162p-9, -0x1.2c7d6f37bdf42p-12, -0x1.d071ea7886896p-17 },
    { -0x1.c02d4f6e4921ap-11, -0x1.b3f44a6e240ddp-5, -0x1.828d64c04f958p-5, 0x1.b1bf8c8c5b821p-8, 0x1.5d4f13292232bp-7, 0x1.6945c3d5b9657p-9, 0x1.48dd152742507p-12, 0x1.338718d5efeb3p-16 },
    { 0x1.f98db34e8872ep-14, -0x1.b84c4326d3135p-6, 0x1.5cea4188bcedfp-6, 0x1.25cb7d26008f4p-7, -0x1.7caae7bb9c159p-9, -0x1.b28da020aa0c7p-10, -0x1.1450b0501e77dp-12, -0x1.430db3fd56073p-16 },
    { -0x1.f224dfc5409afp-17, 0x1.250894a17c2b2p-6, 0x1.eae39ee2b0c77p-9, -0x1.84d4da485e68ep-8, -0x1.7a4bd6da2d18p-11, 0x1.4d5a32d8353acp-11, 0x1.6c0f4c7481dfbp-13, 0x1.1fa32ccd52557p-16 },
    { 0x1.8b4b60851826bp-20, 0x1.30f2cd2fb5ee1p-9, -0x1.6e22c34452e5bp-8, 0x1.5e960c580a7ffp-11, 0x1.0582d72a61b74p-10, -0x1.54f75b1e12f2p-14, -0x1.57b929dce9dffp-14, -0x1.81b943d2d9558p-17 },
};

static inline float cdx_erf_ref(float x)
{
    const float a = fabsf(x);
    if (!(a < CDX_ERF_ONE))
        return a != a ? x + x : copysignf(1.0f, x);
    const int k = (int)(a * 2.0f);
    const double ad = a, w = k ? ad - (0.5 * k + 0.25) : ad * ad;
    double p = cdx_erf_poly[CDX_ERF_DEG][k];
    for (int d = CDX_ERF_DEG - 1; d >= 0; d--)
        p = fma(p, w, cdx_erf_poly[d][k]);
    return copysignf((float)(k ? p : p * ad), x);
}

/* torch's gelu (approximate="none"): x · 0.5 · (1 + erf(x / √2)), in float, in this order */
static inline float cdx_gelu_ref(float x) { return x * 0.5f * (1.0f + cdx_erf_ref(x * CDX_GELU_RSQRT2)); }

#endif
