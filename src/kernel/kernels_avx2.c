/* AVX2 + FMA + F16C kernels (the shared template in kern_tmpl.h, and kern_wide256.h for the
 * load-time layouts). Integer dots use maddubs: u8·s8 pair sums in i16 (callers keep them below
 * 2^15), then madd to i32. */
#include <immintrin.h>

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
static inline __m256 vf_round_bf16(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v), hi = _mm256_set1_epi32((int)0xFFFF0000u);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), hi);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
    const __m256i q = _mm256_or_si256(_mm256_and_si256(u, hi), _mm256_set1_epi32(0x400000));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(r, q, nan));
}

#define KT_WIDE_HEADER "kernel/kern_wide256.h"
#include "kernel/kern_tmpl.h"
