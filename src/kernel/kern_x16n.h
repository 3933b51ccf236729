/* Decode of a Q8_0, Q4_0 or IQ4_NL matrix read in place (its file layout, no packed copy), for both
 * x16 sets (included by kern_wide256.h and kern_wide512.h after kern_x16.h; 256-bit code, which the
 * AVX-512 set runs as is): 8 rows at a time, each row's block sums gathered into one lane, then the
 * x16 micro kernel's float step for that row in its order, fma(float(sum), scale·da, acc). The
 * integer sums are exact (no saturation: |w| <= 128 and |a| <= 127 per maddubs pair), so they are
 * the micro kernel's, biased (AVX-512's vpdpbusd on u8) or not (AVX2), and every row gets the packed
 * layout's bits (prefill, which packs such a matrix a group at a time as it goes, agrees). Eight
 * short row streams need their own prefetch, into L1 and, farther ahead, into L2 (the L1 alone
 * holds too few misses in flight): on Zen 3, 2 threads, Llama-1B Q8_0 decode, the 2048-column
 * matrices read 9 GB/s with L1 prefetch only, 12-14 GB/s with both, the packed layout 13-15. */
#define X16N_DECODE 1
#ifndef X16N_PF
#define X16N_PF 256
#endif
#ifndef X16N_PF2
#define X16N_PF2 3072
#endif
/* The exact block sums of rows 0..7 (wrb bytes apart, blk at their block's scale) for activations
 * a (the q8_0 block's 32 values), row i in lane i: Q8_0 and IQ4_NL signed, |w|·(a with w's sign) or
 * |a|·(w with a's sign), Q4_0 its unsigned nibbles (the caller subtracts 8·Σa). */
KT_INLINE __m256i x16n_sums(int kind, const uint8_t *blk, size_t wrb, __m256i a)
{
    const __m256i one16 = _mm256_set1_epi16(1);
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl));
    const __m256i a_abs = _mm256_abs_epi8(a);
    __m256i p[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const uint8_t *q = blk + (size_t)i * wrb + 2;
        __m256i d;
        if (kind == W_Q8_0) {
            const __m256i wv = load32(q);
            d = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(a, wv));
        } else if (kind == W_Q4_0) {
            d = _mm256_maddubs_epi16(nib32(q), a);
        } else {
            d = _mm256_maddubs_epi16(a_abs, _mm256_sign_epi8(_mm256_shuffle_epi8(kv, nib32(q)), a));
        }
        p[i] = _mm256_madd_epi16(d, one16);
    }
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q0, q1, 0x31));
}
/* The f16 scales of the same 8 blocks (vidx: the rows' byte offsets), as floats. */
KT_INLINE __m256 x16n_scales(const uint8_t *blk, __m256i vidx)
{
    const __m256i sc = _mm256_and_si256(_mm256_i32gather_epi32((const int *)blk, vidx, 1), _mm256_set1_epi32(0xFFFF));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(sc, sc), 0x08)));
}
/* Where offset o of row 0 of the 8 rows at g lies: past a row's end, the same place in the next 8
 * rows (an address to prefetch only). */
KT_INLINE uintptr_t x16n_ahead(const uint8_t *g, size_t wrb, size_t o)
{
    return (uintptr_t)g + (o < wrb ? o : 8 * wrb + (o - wrb));
}
/* Rows [r0, r1) (multiples of 8) of w (wrb bytes a row) against one token's q8_0 activations xq
 * (da: their scales as floats, sa: their block sums, x16_act_sums'): y[r]. */
KT_INLINE void x16n_decode(int kind, const uint8_t *w, size_t wrb, int64_t r0, int64_t r1, int64_t nb,
                           const uint8_t *xq, const float *da, const int32_t *sa, float *y)
{
    const __m256i vidx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)wrb));
    const cdx_block_q8_0 *xb = (const cdx_block_q8_0 *)xq;
    const size_t bb = kind == W_Q8_0 ? sizeof(cdx_block_q8_0) : sizeof(cdx_block_q4_0);
    for (int64_t r = r0; r < r1; r += 8) {
        const uint8_t *g = w + (size_t)r * wrb;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = g + (size_t)b * bb;
            /* X16N_PF bytes on in each row into L1, X16N_PF2 into L2 */
            const uintptr_t pf = x16n_ahead(g, wrb, (size_t)b * bb + X16N_PF);
            const uintptr_t pf2 = x16n_ahead(g, wrb, (size_t)b * bb + X16N_PF2);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) { /* addresses only: a prefetch past the matrix is harmless */
                _mm_prefetch((const char *)(pf + (size_t)i * wrb), _MM_HINT_T0);
                _mm_prefetch((const char *)(pf2 + (size_t)i * wrb), _MM_HINT_T1);
            }
            __m256i si = x16n_sums(kind, blk, wrb, load32(xb[b].qs));
            if (kind == W_Q4_0)
                si = _mm256_add_epi32(si, _mm256_set1_epi32(-8 * sa[b]));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(x16n_scales(blk, vidx), _mm256_set1_ps(da[b])), acc);
        }
        _mm256_storeu_ps(y + r, acc);
    }
}
