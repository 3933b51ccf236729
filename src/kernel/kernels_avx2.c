/* AVX2 + FMA + F16C kernels (the shared template in kern_tmpl.h, and kern_wide256.h for the
 * load-time layouts). Integer dots use maddubs: u8·s8 pair sums in i16 (callers keep them below
 * 2^15), then madd to i32. */
#include <immintrin.h>
#include <stdbool.h>

#define KT(name) name##_avx2
#define KT_ISA_NAME "avx2"
#define RMAX 2
#define FG_R 2    /* float GEMM: 2 rows x 6 tokens = 12 ymm accumulators, 768-column blocks */
#define FG_T 6
#define FG_KC 768
#define FG_F16_DIRECT 1 /* F16 rows read as they are, converted as loaded: no f32 panel (Zen 3: F16 prefill +18-28 %) */
#define TMAX 2

#define DOT_US(acc, u, s) \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#define DOT_SC(acc, u, s, sc) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), (sc)))

typedef __m256 VF;
#define VF_N 8
#define vf_zero() _mm256_setzero_ps()
#define vf_load_f32(p) _mm256_loadu_ps(p)
#define vf_load_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define vf_load_bf16(p) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define vf_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define vf_hsum(v) hsum8(v)
#define vf_add(a, b) _mm256_add_ps((a), (b))
#define vf_mul(a, b) _mm256_mul_ps((a), (b))
#define vf_max(a, b) _mm256_max_ps((a), (b))
#define vf_hmax(v) hmax8(v)
#define vf_set1(a) _mm256_set1_ps(a)
#define vf_store(p, v) _mm256_storeu_ps((p), (v))
/* v rounded to the nearest f16 / bf16 (ties to even) and back; bf16 keeps a nan a quiet nan */
#define vf_round_f16(v) _mm256_cvtph_ps(_mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
/* the 8 values of v as f16 (rounded, ties to even) / of a vf_round_bf16 result as bf16, stored at p */
#define vh_store_f16(p, v) _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define vh_store_bf16(p, v)                                                                                  \
    _mm_storeu_si128((__m128i *)(p), _mm_packus_epi32(_mm256_castsi256_si128(_mm256_srli_epi32(_mm256_castps_si256(v), 16)), \
                                                      _mm256_extracti128_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16), 1)))
static inline __m256 vf_round_bf16(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v), hi = _mm256_set1_epi32((int)0xFFFF0000u);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), hi);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
    const __m256i q = _mm256_or_si256(_mm256_and_si256(u, hi), _mm256_set1_epi32(0x400000));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(r, q, nan));
}

#define vf_div(a, b) _mm256_div_ps((a), (b))
#define vf_neg(a) _mm256_xor_ps((a), _mm256_set1_ps(-0.0f))

typedef __m256d VD;
#define vd_zero() _mm256_setzero_pd()
/* acc[0] += e's lanes 0-3, acc[1] += lanes 4-7, in double */
static inline void vd_acc2(VD *acc, __m256 e)
{
    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}
/* the accumulator's lanes to memory, in order */
#define vd_store(p, v) _mm256_storeu_pd((p), (v))

#include "kernel/kern_expf.h"
/* expf of every lane with the C library's bits (kern_expf.h): false, *y unset, when a lane needs
 * expf's slow path (top 12 bits from 0x42b: |x| >= 88, inf, nan) */
static inline bool vf_expf(__m256 x, __m256 *y)
{
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(CDX_EXPF_SPECIAL_TOP - 1))))
        return false;
    const __m256d inv = _mm256_set1_pd(CDX_EXPF_INVLN2N), shift = _mm256_set1_pd(CDX_EXPF_SHIFT);
    __m128 half[2];
    for (int h = 0; h < 2; h++) {
        const __m256d xd = _mm256_cvtps_pd(h ? _mm256_extractf128_ps(x, 1) : _mm256_castps256_ps128(x));
        __m256d kd = _mm256_fmadd_pd(inv, xd, shift);
        const __m256i ki = _mm256_castpd_si256(kd);
        kd = _mm256_sub_pd(kd, shift);
        const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
        const __m256i p = _mm256_i64gather_epi64((const long long *)cdx_expf_pow2, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
        const __m256i s = _mm256_add_epi64(p, _mm256_slli_epi64(_mm256_srli_epi64(ki, 5), 52));
        const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(CDX_EXPF_C0), r, _mm256_set1_pd(CDX_EXPF_C1));
        const __m256d r2 = _mm256_mul_pd(r, r);
        __m256d yd = _mm256_fmadd_pd(_mm256_set1_pd(CDX_EXPF_C2), r, _mm256_set1_pd(1.0));
        yd = _mm256_fmadd_pd(z, r2, yd);
        half[h] = _mm256_cvtpd_ps(_mm256_mul_pd(yd, _mm256_castsi256_pd(s)));
    }
    *y = _mm256_set_m128(half[1], half[0]);
    return true;
}

#include "kernel/kern_erf.h"
/* erf of every lane with cdx_erf_ref's bits (kern_erf.h): the same steps in double, 4 lanes at a
 * time; a lane's coefficient of each degree is looked up by its interval k in that degree's row
 * (two ymm of 4 doubles: permute both by k mod 4, bit 2 of k picks one) */
static inline __m256 vf_erf(__m256 x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), a = _mm256_andnot_ps(sign, x);
    /* min(nan, 7) is 7 (minps returns its second operand): a nan lane gets an interval, then x + x */
    const __m256i k = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_mul_ps(a, _mm256_set1_ps(2.0f)), _mm256_set1_ps(7.0f)));
    __m128 half[2];
    for (int h = 0; h < 2; h++) {
        const __m128i k4 = h ? _mm256_extracti128_si256(k, 1) : _mm256_castsi256_si128(k);
        const __m256i ki = _mm256_cvtepi32_epi64(k4);
        const __m256d ad = _mm256_cvtps_pd(h ? _mm256_extractf128_ps(a, 1) : _mm256_castps256_ps128(a));
        const __m256d k0 = _mm256_castsi256_pd(_mm256_cmpeq_epi64(ki, _mm256_setzero_si256()));
        const __m256d hi = _mm256_castsi256_pd(_mm256_cmpgt_epi64(ki, _mm256_set1_epi64x(3)));
        /* the 32-bit halves of double k mod 4: 2(k mod 4) and 2(k mod 4) + 1 */
        const __m256i j = _mm256_slli_epi64(_mm256_and_si256(ki, _mm256_set1_epi64x(3)), 1);
        const __m256i idx = _mm256_or_si256(j, _mm256_slli_epi64(_mm256_add_epi64(j, _mm256_set1_epi64x(1)), 32));
        const __m256d mid = _mm256_fmadd_pd(_mm256_cvtepi32_pd(k4), _mm256_set1_pd(0.5), _mm256_set1_pd(0.25));
        const __m256d w = _mm256_blendv_pd(_mm256_sub_pd(ad, mid), _mm256_mul_pd(ad, ad), k0);
#define ERF_COEF(d)                                                                                                  \
    _mm256_blendv_pd(_mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(_mm256_loadu_pd(cdx_erf_poly[d])), idx)), \
                     _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(_mm256_loadu_pd(cdx_erf_poly[d] + 4)), idx)), hi)
        __m256d p = ERF_COEF(CDX_ERF_DEG);
        for (int d = CDX_ERF_DEG - 1; d >= 0; d--)
            p = _mm256_fmadd_pd(p, w, ERF_COEF(d));
#undef ERF_COEF
        half[h] = _mm256_cvtpd_ps(_mm256_blendv_pd(p, _mm256_mul_pd(p, ad), k0));
    }
    const __m256 xs = _mm256_and_ps(x, sign);
    __m256 r = _mm256_or_ps(_mm256_set_m128(half[1], half[0]), xs);
    r = _mm256_blendv_ps(r, _mm256_or_ps(_mm256_set1_ps(1.0f), xs), _mm256_cmp_ps(a, _mm256_set1_ps(CDX_ERF_ONE), _CMP_GE_OQ));
    return _mm256_blendv_ps(r, _mm256_add_ps(x, x), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

#define KT_WIDE_HEADER "kernel/kern_wide256.h"
#include "kernel/kern_tmpl.h"
