/* The AVX-512 micro-kernel of training's GEMM (tgemm.h): TG_MR rows × 32 columns in 16 zmm
 * accumulators, one fused multiply-add per k and value, in k order (its scalar twin: tg_ukr_scalar). */
#include "train/tgemm.h"

#include <immintrin.h>

static inline __attribute__((always_inline)) void ukr_m(const int MR, const bool SCALED, int nr, int64_t kc, const float *a,
                                                        int64_t a_rs, int64_t a_cs, float alpha, const float *bp,
                                                        float *c, int64_t ldc, bool load)
{
    const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    __m512 c0[TG_MR], c1[TG_MR];
    for (int r = 0; r < MR; r++) {
        c0[r] = load ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
        c1[r] = load ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_load_ps(bp + k * TG_NR), b1 = _mm512_load_ps(bp + k * TG_NR + 16);
        for (int r = 0; r < MR; r++) {
            /* alpha 1: the broadcast straight from memory (alpha · a is a then, exactly) */
            const __m512 av = _mm512_set1_ps(SCALED ? alpha * a[r * a_rs + k * a_cs] : a[r * a_rs + k * a_cs]);
            c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
        }
    }
    for (int r = 0; r < MR; r++) {
        _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
        _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
    }
}

#define UKR_CASES(S)                                                                                            \
    switch (mr) {                                                                                               \
    case 8: ukr_m(8, S, nr, kc, a, a_rs, a_cs, alpha, bp, c, ldc, load); break;                               \
    case 7: ukr_m(7, S, nr, kc, a, a_rs, a_cs, alpha, bp, c, ldc, load); break;                               \
    case 6: ukr_m(6, S, nr, kc, a, a_rs, a_cs, alpha, bp, c, ldc, load); break;                               \
    case 5: ukr_m(5, S, nr, kc, a, a_rs, a_cs, alpha, bp, c, ldc, load); break;                               \
    case 4: ukr_m(4, S, nr, kc, a, a_rs, a_cs, alpha, bp, c, ldc, load); break;                               \
    case 3: ukr_m(3, S, nr, kc, a, a_rs, a_cs, alpha, bp, c, ldc, load); break;                               \
    case 2: ukr_m(2, S, nr, kc, a, a_rs, a_cs, alpha, bp, c, ldc, load); break;                               \
    default: ukr_m(1, S, nr, kc, a, a_rs, a_cs, alpha, bp, c, ldc, load); break;                              \
    }

void tg_ukr_avx512(int mr, int nr, int64_t kc, const float *a, int64_t a_rs, int64_t a_cs, float alpha,
                   const float *bp, float *c, int64_t ldc, bool load)
{
    if (alpha == 1.0f)
        UKR_CASES(false)
    else
        UKR_CASES(true)
}
