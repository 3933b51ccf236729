/* AVX-512 tiles on 512-bit registers: two 32-value (sub-)blocks per register. Included by
 * kern_tmpl.h (through KT_WIDE_HEADER) in kernels_avx512.c only; it replaces the 256-bit tile
 * families there. Same contract and numerics as tile_b32 / tile_k (integer dots are exact; only
 * the order of the float sums differs).
 *
 * Signed 8-bit weights (Q8_0, IQ4_NL, IQ4_XS) are biased to unsigned (w + 128, or the IQ4 table
 * + 128) so vpdpbusd takes them directly; the bias comes back out as 128·Σa, from the block's
 * own activations (q8_0) or the q8_K bsums. */

KT_INLINE __m512i load64(const void *p) { return _mm512_loadu_si512(p); }
KT_INLINE __m512i cat256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* ---- Q8_0 / Q4_0 / IQ4_NL, two blocks per step ---- */

/* The weights of blocks b and b+1 (b+1 absent when tail) as biased u8, and their scales
 * [d_b ×8, d_b+1 ×8]. */
KT_INLINE void w_pair(int kind, const uint8_t *blk, bool tail, __m512i kvb, __m512i *q, __m512 *dw)
{
    if (kind == W_Q8_0) {
        const __m512i z = _mm512_maskz_loadu_epi8(tail ? (1ull << 2) - 1 : (1ull << 36) - 1, blk);
        *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(
            _mm512_set_epi64(0, 0, 0, 0, 0x0011001100110011ll, 0x0011001100110011ll, 0, 0), z)));
        __m256i lo = load32(blk + 2);
        __m256i hi = tail ? _mm256_setzero_si256() : load32(blk + 36);
        *q = _mm512_xor_si512(cat256(lo, hi), _mm512_set1_epi8((char)0x80));
        return;
    }
    const __m512i z = _mm512_maskz_loadu_epi8(tail ? (1ull << 18) - 1 : (1ull << 36) - 1, blk);
    *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(
        _mm512_set_epi64(0, 0, 0, 0, 0x0009000900090009ll, 0x0009000900090009ll, 0, 0), z)));
    /* bytes [2..17, 2..17, 20..35, 20..35], then the second and fourth copies shifted by 4 */
    const __m512i idx = _mm512_set_epi8(35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
                                        35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
                                        17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
                                        17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2);
    __m512i v = _mm512_permutexvar_epi8(idx, z);
    v = _mm512_srlv_epi16(v, _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0, 0,
                                              0x0004000400040004ll, 0x0004000400040004ll, 0, 0));
    v = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
    *q = kind == W_IQ4_NL ? _mm512_shuffle_epi8(kvb, v) : v;
}

KT_INLINE void a_pair(const cdx_block_q8_0 *xb, bool tail, __m512i *a, __m512 *da)
{
    const __m512i z = _mm512_maskz_loadu_epi8(tail ? (1ull << 2) - 1 : (1ull << 36) - 1, xb);
    *da = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(
        _mm512_set_epi64(0, 0, 0, 0, 0x0011001100110011ll, 0x0011001100110011ll, 0, 0), z)));
    *a = cat256(load32(xb[0].qs), tail ? _mm256_setzero_si256() : load32(xb[1].qs));
}

KT_INLINE void tile_b32w(int kind, const uint8_t *w, size_t wrb, const int R, const uint8_t *x, size_t xrb,
                         const int T, int64_t nb, float *y, int64_t ys)
{
    const size_t wbb = kind == W_Q8_0 ? sizeof(cdx_block_q8_0) : sizeof(cdx_block_q4_0);
    const __m512i kvb = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl)),
                                         _mm512_set1_epi8((char)0x80));
    const __m512i bias = _mm512_set1_epi8(kind == W_Q4_0 ? 8 : (char)0x80);
    __m512 acc[RMAX][TMAX];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        const bool tail = b + 1 == nb;
        __m512i q[RMAX];
        __m512 dw[RMAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            w_pair(kind, w + (size_t)r * wrb + (size_t)b * wbb, tail, kvb, &q[r], &dw[r]);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            __m512i a;
            __m512 da;
            a_pair((const cdx_block_q8_0 *)(x + (size_t)t * xrb) + b, tail, &a, &da);
            const __m512i base = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                  _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, a));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512i s = _mm512_dpbusd_epi32(base, q[r], a);
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], da), acc[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            y[t * ys + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* ---- K-quants and IQ4_XS, two 32-value sub-blocks per step ---- */

typedef struct {
    __m512i sc[4];  /* per pair of sub-blocks: i16 scales (i32 for IQ4_XS) lane by lane */
    __m256i mins;   /* i16 × 16 against bsums: dmin mins (Q4_K/Q5_K), 32·sc (Q6_K), 128·ls (IQ4_XS) */
    float d, dmin;
} kprepw;

KT_INLINE void kprep_wide(int kind, const uint8_t *blk, kprepw *p)
{
    if (kind == W_Q4_K || kind == W_Q5_K) {
        const cdx_block_q4_K *b = (const cdx_block_q4_K *)blk;
        uint8_t sc[8], m[8];
        k4_scales(b->scales, sc, m);
        const __m512i s = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            p->sc[j] = _mm512_permutexvar_epi16(cat256(_mm256_set1_epi16((short)(2 * j)), _mm256_set1_epi16((short)(2 * j + 1))), s);
        __m128i mm = _mm_loadl_epi64((const __m128i *)m);
        p->mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mm, mm));
        p->d = h2f(b->d);
        p->dmin = h2f(b->dmin);
    } else if (kind == W_Q6_K) {
        const cdx_block_q6_K *b = (const cdx_block_q6_K *)blk;
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        const __m512i s = _mm512_castsi256_si512(s16);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            p->sc[j] = _mm512_permutexvar_epi16(
                _mm512_set_epi64(0x0001000100010001ll * (4 * j + 3), 0x0001000100010001ll * (4 * j + 3),
                                 0x0001000100010001ll * (4 * j + 2), 0x0001000100010001ll * (4 * j + 2),
                                 0x0001000100010001ll * (4 * j + 1), 0x0001000100010001ll * (4 * j + 1),
                                 0x0001000100010001ll * (4 * j), 0x0001000100010001ll * (4 * j)), s);
        p->mins = _mm256_slli_epi16(s16, 5);
        p->d = h2f(b->d);
        p->dmin = 0;
    } else {
        const cdx_block_iq4_xs *b = (const cdx_block_iq4_xs *)blk;
        uint16_t h = b->scales_h;
        int16_t ls[16];
        int l8[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            l8[j] = (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((h >> (2 * j)) & 3) << 4)) - 32;
            ls[2 * j] = ls[2 * j + 1] = (int16_t)(128 * l8[j]);
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            p->sc[j] = cat256(_mm256_set1_epi32(l8[2 * j]), _mm256_set1_epi32(l8[2 * j + 1]));
        p->mins = _mm256_loadu_si256((const __m256i *)ls);
        p->d = h2f(b->d);
        p->dmin = 0;
    }
}

/* Sub-blocks 2j and 2j+1 (values 64j .. 64j+63) as u8 (IQ4_XS: table + 128). */
KT_INLINE __m512i ksub_wide(int kind, const uint8_t *blk, int j, __m512i kvb)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    if (kind == W_Q4_K || kind == W_Q5_K) {
        const uint8_t *qs = kind == W_Q4_K ? ((const cdx_block_q4_K *)blk)->qs : ((const cdx_block_q5_K *)blk)->qs;
        const __m256i v = load32(qs + 32 * j);
        __m512i z = _mm512_and_si512(cat256(v, _mm256_srli_epi16(v, 4)), m4);
        if (kind == W_Q5_K) {
            const __m512i qh = _mm512_broadcast_i64x4(load32(((const cdx_block_q5_K *)blk)->qh));
            const __m512i bit = cat256(_mm256_set1_epi8((char)(1 << (2 * j))), _mm256_set1_epi8((char)(1 << (2 * j + 1))));
            z = _mm512_or_si512(z, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, bit), _mm512_set1_epi8(16)));
        }
        return z;
    }
    if (kind == W_Q6_K) {
        const cdx_block_q6_K *b = (const cdx_block_q6_K *)blk;
        const int n = j / 2;
        const __m512i ql = load64(b->ql + 64 * n);
        const __m512i qh = _mm512_broadcast_i64x4(load32(b->qh + 32 * n));
        __m512i lo, hi;
        if (j % 2 == 0) {
            lo = _mm512_and_si512(ql, m4);
            hi = _mm512_sllv_epi16(qh, cat256(_mm256_set1_epi16(4), _mm256_set1_epi16(2)));
        } else {
            lo = _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
            hi = _mm512_srlv_epi16(qh, cat256(_mm256_setzero_si256(), _mm256_set1_epi16(2)));
        }
        return _mm512_or_si512(lo, _mm512_and_si512(hi, _mm512_set1_epi8(0x30)));
    }
    const cdx_block_iq4_xs *b = (const cdx_block_iq4_xs *)blk;
    const __m256i v = load32(b->qs + 32 * j);
    __m512i z = cat256(v, _mm256_srli_epi16(v, 4));         /* [qa, qb, qa>>4, qb>>4] */
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)); /* [qa, qa>>4, qb, qb>>4] */
    return _mm512_shuffle_epi8(kvb, _mm512_and_si512(z, m4));
}

KT_INLINE void tile_kw(int kind, const uint8_t *w, size_t wrb, const int R, const uint8_t *x, size_t xrb,
                       const int T, int64_t nb, float *y, int64_t ys)
{
    const size_t wbb = kblock_bytes(kind);
    const __m512i kvb = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl)),
                                         _mm512_set1_epi8((char)0x80));
    __m256 acc[RMAX][TMAX];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        kprepw p[RMAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            kprep_wide(kind, w + (size_t)r * wrb + (size_t)b * wbb, &p[r]);
        __m512i is[RMAX][TMAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                is[r][t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512i wv[RMAX];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                wv[r] = ksub_wide(kind, w + (size_t)r * wrb + (size_t)b * wbb, j, kvb);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
                const __m512i a = load64(xb->qs + 64 * j);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    if (kind == W_IQ4_XS)
                        is[r][t] = _mm512_add_epi32(is[r][t], _mm512_mullo_epi32(
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[r], a), p[r].sc[j]));
                    else
                        is[r][t] = _mm512_dpwssd_epi32(is[r][t], _mm512_maddubs_epi16(wv[r], a), p[r].sc[j]);
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
            const __m256i bs = load32(xb->bsums);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256i v = _mm256_add_epi32(_mm512_castsi512_si256(is[r][t]), _mm512_extracti64x4_epi64(is[r][t], 1));
                const __m256i mn = _mm256_madd_epi16(bs, p[r].mins);
                __m256 s;
                if (kind == W_Q6_K || kind == W_IQ4_XS) {
                    s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v, mn)), _mm256_set1_ps(p[r].d * xb->d));
                } else {
                    s = _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(p[r].d * xb->d));
                    s = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mn), _mm256_set1_ps(p[r].dmin * xb->d), s);
                }
                acc[r][t] = _mm256_add_ps(acc[r][t], s);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            y[t * ys + r] = hsum8(acc[r][t]);
}

#define KT_FAM_B32 tile_b32w
#define KT_FAM_K tile_kw
