/* AVX-512 (F, BW, VL, DQ, VNNI) kernels (the shared template in kern_tmpl.h). Integer dots use
 * VNNI: vpdpbusd (u8·s8, 4 at a time, no saturation) and vpdpwssd (i16 pairs · i16 scales) on
 * 256-bit registers, one 32-value sub-block each; float rows use 512-bit registers. */
#include <immintrin.h>
#include <stdbool.h>

#ifndef KT
#define KT(name) name##_avx512
#define KT_ISA_NAME "avx512"
#endif
#define RMAX 4
/* float GEMM: 4 rows x 6 tokens = 24 zmm accumulators, 512-column blocks: 10 loads a 24 multiply-adds
 * where 2 x 12 took 14 (Intel Xeon, bench-kernels -t 2 2048 x 8192 F16 at 512 tokens 160-166 ->
 * 226-235 GFLOP/s, at 16 tokens 121-123 -> 156-158; BF16 alike) */
#define FG_R 4
#define FG_T 6
#define FG_KC 512
#define TMAX 4
/* float decode (F16/BF16/F32 rows, n = 1): one row at a time and no next-tile prefetch. Zen 5,
 * Llama-3.2-1B F16, 2 threads, alternating `caldrix bench -p 1 -n 24` runs: 4 rows with the
 * prefetch (the template's default) 9.65 tok/s, without it 10.7-11.0, one row without it
 * 11.2-13.4 (medians of 3 and 4; llama.cpp 11.6-13.0 in the same runs). */
#define FV_DEC_R 1
#define FV_PF 0

#define DOT_US(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define DOT_SC(acc, u, s, sc) _mm256_dpwssd_epi32((acc), _mm256_maddubs_epi16((u), (s)), (sc))

typedef __m512 VF;
#define VF_N 16
#define vf_zero() _mm512_setzero_ps()
#define vf_load_f32(p) _mm512_loadu_ps(p)
#define vf_load_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define vf_load_bf16(p) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define vf_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define vf_hsum(v) _mm512_reduce_add_ps(v)
#define vf_add(a, b) _mm512_add_ps((a), (b))
#define vf_mul(a, b) _mm512_mul_ps((a), (b))
#define vf_max(a, b) _mm512_max_ps((a), (b))
#define vf_hmax(v) _mm512_reduce_max_ps(v)
#define vf_set1(a) _mm512_set1_ps(a)
#define vf_store(p, v) _mm512_storeu_ps((p), (v))
/* v rounded to the nearest f16 / bf16 (ties to even) and back; bf16 keeps a nan a quiet nan */
#define vf_round_f16(v) _mm512_cvtph_ps(_mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
/* the 16 values of v as f16 (rounded, ties to even) / of a vf_round_bf16 result as bf16, stored at p */
#define vh_store_f16(p, v) _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define vh_store_bf16(p, v) _mm256_storeu_si256((__m256i *)(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)))
static inline __m512 vf_round_bf16(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v), hi = _mm512_set1_epi32((int)0xFFFF0000u);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), hi);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    const __m512i q = _mm512_or_si512(_mm512_and_si512(u, hi), _mm512_set1_epi32(0x400000));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, r, q));
}

#define vf_div(a, b) _mm512_div_ps((a), (b))
#define vf_neg(a) _mm512_xor_ps((a), _mm512_set1_ps(-0.0f))

#include "kernel/kern_expf.h"
/* expf of every lane with the C library's bits (kern_expf.h): false, *y unset, when a lane needs
 * expf's slow path (top 12 bits from 0x42b: |x| >= 88, inf, nan) */
static inline bool vf_expf(__m512 x, __m512 *y)
{
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    if (_mm512_cmpge_epi32_mask(top, _mm512_set1_epi32(CDX_EXPF_SPECIAL_TOP)))
        return false;
    const __m512d inv = _mm512_set1_pd(CDX_EXPF_INVLN2N), shift = _mm512_set1_pd(CDX_EXPF_SHIFT);
    const __m512d t0 = _mm512_loadu_pd(cdx_expf_pow2), t1 = _mm512_loadu_pd(cdx_expf_pow2 + 8);
    const __m512d t2 = _mm512_loadu_pd(cdx_expf_pow2 + 16), t3 = _mm512_loadu_pd(cdx_expf_pow2 + 24);
    __m256 half[2];
    for (int h = 0; h < 2; h++) {
        const __m512d xd = _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(x, 1) : _mm512_castps512_ps256(x));
        __m512d kd = _mm512_fmadd_pd(inv, xd, shift);
        const __m512i ki = _mm512_castpd_si512(kd);
        kd = _mm512_sub_pd(kd, shift);
        const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
        /* 2^(j/32), j = ki mod 32: two 16-entry permutes (index bits 0-3), bit 4 picks one */
        const __m512d p = _mm512_mask_blend_pd(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)),
                                               _mm512_permutex2var_pd(t0, ki, t1), _mm512_permutex2var_pd(t2, ki, t3));
        const __m512i s = _mm512_add_epi64(_mm512_castpd_si512(p), _mm512_slli_epi64(_mm512_srli_epi64(ki, 5), 52));
        const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(CDX_EXPF_C0), r, _mm512_set1_pd(CDX_EXPF_C1));
        const __m512d r2 = _mm512_mul_pd(r, r);
        __m512d yd = _mm512_fmadd_pd(_mm512_set1_pd(CDX_EXPF_C2), r, _mm512_set1_pd(1.0));
        yd = _mm512_fmadd_pd(z, r2, yd);
        half[h] = _mm512_cvtpd_ps(_mm512_mul_pd(yd, _mm512_castsi512_pd(s)));
    }
    *y = _mm512_insertf32x8(_mm512_castps256_ps512(half[0]), half[1], 1);
    return true;
}

#include "kernel/kern_erf.h"
/* erf of every lane with cdx_erf_ref's bits (kern_erf.h): the same steps in double, 8 lanes at a
 * time, each coefficient looked up by the lane's interval with one permute of that degree's row */
static inline __m512 vf_erf(__m512 x)
{
    const __m512 a = _mm512_abs_ps(x);
    /* min(nan, 7) is 7 (minps returns its second operand): a nan lane gets an interval, then x + x */
    const __m512i k = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_mul_ps(a, _mm512_set1_ps(2.0f)), _mm512_set1_ps(7.0f)));
    __m256 half[2];
    for (int h = 0; h < 2; h++) {
        const __m256i k8 = h ? _mm512_extracti64x4_epi64(k, 1) : _mm512_castsi512_si256(k);
        const __m512i ki = _mm512_cvtepi32_epi64(k8);
        const __m512d ad = _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(a, 1) : _mm512_castps512_ps256(a));
        const __mmask8 k0 = _mm512_cmpeq_epi64_mask(ki, _mm512_setzero_si512());
        const __m512d mid = _mm512_fmadd_pd(_mm512_cvtepi32_pd(k8), _mm512_set1_pd(0.5), _mm512_set1_pd(0.25));
        const __m512d w = _mm512_mask_mul_pd(_mm512_sub_pd(ad, mid), k0, ad, ad);
        __m512d p = _mm512_permutexvar_pd(ki, _mm512_loadu_pd(cdx_erf_poly[CDX_ERF_DEG]));
        for (int d = CDX_ERF_DEG - 1; d >= 0; d--)
            p = _mm512_fmadd_pd(p, w, _mm512_permutexvar_pd(ki, _mm512_loadu_pd(cdx_erf_poly[d])));
        half[h] = _mm512_cvtpd_ps(_mm512_mask_mul_pd(p, k0, p, ad));
    }
    const __m512 sign = _mm512_set1_ps(-0.0f), xs = _mm512_and_ps(x, sign);
    __m512 r = _mm512_or_ps(_mm512_insertf32x8(_mm512_castps256_ps512(half[0]), half[1], 1), xs);
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(CDX_ERF_ONE), _CMP_GE_OQ), r,
                             _mm512_or_ps(_mm512_set1_ps(1.0f), xs));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), r, _mm512_add_ps(x, x));
}

typedef __m512d VD;
#define vd_zero() _mm512_setzero_pd()
/* acc[0] += e's lanes 0-7, acc[1] += lanes 8-15, in double */
static inline void vd_acc2(VD *acc, __m512 e)
{
    acc[0] = _mm512_add_pd(acc[0], _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    acc[1] = _mm512_add_pd(acc[1], _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
}
/* the accumulator's lanes to memory, in order */
#define vd_store(p, v) _mm512_storeu_pd((p), (v))

#define KT_WIDE_HEADER "kernel/kern_wide512.h"
#define KT_ROW_BF16DP cdx_rows_bf16dp_avx512 /* --dtype bf16 on an AVX512_BF16 CPU (matmul.c checks) */
#include "kernel/kern_tmpl.h"
