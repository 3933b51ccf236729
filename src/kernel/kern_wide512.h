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
        for (int r = 0; r < R; r++) {
            for (size_t o = 0; o < 2 * wbb; o += 64)
                prefetch_next_tile(w + (size_t)r * wrb + (size_t)b * wbb + o, (size_t)R * wrb);
            w_pair(kind, w + (size_t)r * wrb + (size_t)b * wbb, tail, kvb, &q[r], &dw[r]);
        }
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
    __m256i mins;   /* i16 × 16 against bsums: dmin mins (Q4_K/Q5_K), 32·sc (Q6_K); IQ4_XS: none */
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
        int l8[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            l8[j] = (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((h >> (2 * j)) & 3) << 4)) - 32;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            p->sc[j] = cat256(_mm256_set1_epi32(l8[2 * j]), _mm256_set1_epi32(l8[2 * j + 1]));
        p->mins = _mm256_setzero_si256();
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

/* The integer sums land in tile_k's lanes (values 4l..4l+3 of each 32 in lane l, the two halves of
 * a 512-bit sum added), and k_block_acc takes the same float steps: tile_k's bits. IQ4_XS's table
 * values are biased by 128 for vpdpbusd; the bias is taken off lane by lane (128·Σ of the lane's 4
 * activations), before the scale, so each lane holds what llama.cpp's lane holds. */
KT_INLINE void tile_kw(int kind, const uint8_t *w, size_t wrb, const int R, const uint8_t *x, size_t xrb,
                       const int T, int64_t nb, float *y, int64_t ys)
{
    const size_t wbb = kblock_bytes(kind);
    const __m512i kvb = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl)),
                                         _mm512_set1_epi8((char)0x80));
    __m256 acc[RMAX][TMAX];
    float accs[RMAX][TMAX];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            acc[r][t] = _mm256_setzero_ps();
            accs[r][t] = 0;
        }
    for (int64_t b = 0; b < nb; b++) {
        kprepw p[RMAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            for (size_t o = 0; o < wbb; o += 64)
                prefetch_next_tile(w + (size_t)r * wrb + (size_t)b * wbb + o, (size_t)R * wrb);
            kprep_wide(kind, w + (size_t)r * wrb + (size_t)b * wbb, &p[r]);
        }
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
                __m512i bias = _mm512_setzero_si512();
                if (kind == W_IQ4_XS)
                    bias = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), a), 7);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    if (kind == W_IQ4_XS)
                        is[r][t] = _mm512_add_epi32(is[r][t], _mm512_mullo_epi32(
                            _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[r], a), bias), p[r].sc[j]));
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
                const __m256i v = _mm256_add_epi32(_mm512_castsi512_si256(is[r][t]), _mm512_extracti64x4_epi64(is[r][t], 1));
                k_block_acc(kind, v, kind == W_IQ4_XS ? v : _mm256_madd_epi16(bs, p[r].mins), p[r].d, p[r].dmin, xb->d,
                            &acc[r][t], &accs[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            y[t * ys + r] = k_row_total(kind, acc[r][t], accs[r][t]);
}

#define KT_FAM_B32 tile_b32w
#define KT_FAM_K tile_kw

/* ---- prefill: integer GEMM over unpacked 16-row panels ---- */

/* Every supported type is written as w = S·(u - bias) + M per group of G values, u an unsigned
 * byte, S and M floats per (row, group): Q8_0/IQ4_NL/IQ4_XS bias their signed values by 128,
 * Q4_0 keeps its +8 nibble, Q6_K its +32, Q4_K/Q5_K their mins as M. A 16-row panel is unpacked
 * once into u interleaved 4 bytes per row ([k][row][4]), so one vpdpbusd against 4 broadcast
 * activation bytes advances 16 rows at once; only one float step per group and token remains.
 * The products S·da and the group sums are the only float reassociation against vec_dot. */

KT_INLINE int g_size(int kind) { return kind == W_Q6_K ? 16 : 32; }
KT_INLINE int g_bias(int kind)
{
    return kind == W_Q4_0 ? 8 : kind == W_Q6_K ? 32 : (kind == W_Q4_K || kind == W_Q5_K) ? 0 : 128;
}
KT_INLINE bool g_has_m(int kind) { return kind == W_Q4_K || kind == W_Q5_K; }
KT_INLINE bool g_q8k(int kind) { return kind != W_Q8_0 && kind != W_Q4_0 && kind != W_IQ4_NL; }

/* One weight row → u[cols], S[groups], M[groups]. */
KT_INLINE void g_unpack_row(int kind, const uint8_t *row, int64_t cols, uint8_t *u, float *S, float *M)
{
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
    const __m256i kvb = _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl)), x80);
    if (!g_q8k(kind)) {
        const size_t bb = kind == W_Q8_0 ? sizeof(cdx_block_q8_0) : sizeof(cdx_block_q4_0);
        for (int64_t b = 0; b < cols / 32; b++) {
            const uint8_t *blk = row + (size_t)b * bb;
            S[b] = h2f(*(const uint16_t *)blk);
            __m256i v = kind == W_Q8_0 ? _mm256_xor_si256(load32(blk + 2), x80)
                      : kind == W_Q4_0 ? nib32(blk + 2) : _mm256_shuffle_epi8(kvb, nib32(blk + 2));
            _mm256_storeu_si256((__m256i *)(u + 32 * b), v);
        }
        return;
    }
    const size_t bb = kblock_bytes(kind);
    for (int64_t b = 0; b < cols / 256; b++) {
        const uint8_t *blk = row + (size_t)b * bb;
        if (kind == W_Q4_K || kind == W_Q5_K) {
            const cdx_block_q4_K *q = (const cdx_block_q4_K *)blk;
            uint8_t sc[8], m[8];
            k4_scales(q->scales, sc, m);
            const float d = h2f(q->d), dmin = h2f(q->dmin);
            for (int j = 0; j < 8; j++) {
                S[8 * b + j] = d * sc[j];
                M[8 * b + j] = -(dmin * m[j]);
            }
        } else if (kind == W_Q6_K) {
            const cdx_block_q6_K *q = (const cdx_block_q6_K *)blk;
            const float d = h2f(q->d);
            for (int j = 0; j < 16; j++)
                S[16 * b + j] = d * q->scales[j];
        } else {
            const cdx_block_iq4_xs *q = (const cdx_block_iq4_xs *)blk;
            const float d = h2f(q->d);
            for (int j = 0; j < 8; j++)
                S[8 * b + j] = d * (float)((((q->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) |
                                            (((q->scales_h >> (2 * j)) & 3) << 4)) - 32);
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i v = ksub(kind, blk, j);
            if (kind == W_IQ4_XS)
                v = _mm256_xor_si256(v, x80);
            _mm256_storeu_si256((__m256i *)(u + 256 * b + 32 * j), v);
        }
    }
}

/* Activation bytes of group g of one token's quantized row. */
KT_INLINE const int8_t *g_act(int kind, const uint8_t *xrow, int64_t g)
{
    if (!g_q8k(kind))
        return ((const cdx_block_q8_0 *)xrow)[g].qs;
    const int G = g_size(kind), per = 256 / G;
    return ((const cdx_block_q8_K *)xrow)[g / per].qs + G * (g % per);
}

/* da and Σa of every group of every token. */
static void g_act_sums(int kind, const uint8_t *x, size_t xrb, int64_t n, int64_t ng, float *da, int32_t *sa)
{
    const int G = g_size(kind);
    for (int64_t t = 0; t < n; t++) {
        const uint8_t *xr = x + (size_t)t * xrb;
        for (int64_t g = 0; g < ng; g++) {
            if (!g_q8k(kind)) {
                const cdx_block_q8_0 *b = (const cdx_block_q8_0 *)xr + g;
                da[t * ng + g] = h2f(b->d);
                sa[t * ng + g] = hsum8i(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), load32(b->qs)));
            } else {
                const int per = 256 / G;
                const cdx_block_q8_K *b = (const cdx_block_q8_K *)xr + g / per;
                da[t * ng + g] = b->d;
                sa[t * ng + g] = G == 16 ? b->bsums[g % per] : b->bsums[2 * (g % per)] + b->bsums[2 * (g % per) + 1];
            }
        }
    }
}

KT_INLINE void g_micro(int kind, const uint8_t *P, const float *S, const float *M, int64_t ng, const uint8_t *x,
                       size_t xrb, const float *da, const int32_t *sa, const int TT, float *y, int64_t ys,
                       __mmask16 rmask)
{
    const int G = g_size(kind), bias = g_bias(kind);
    __m512 acc[CDX_GEMM_TOK];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m512i is[CDX_GEMM_TOK];
        const int8_t *a[CDX_GEMM_TOK];
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            is[t] = _mm512_set1_epi32(-bias * sa[t * ng + g]);
            a[t] = g_act(kind, x + (size_t)t * xrb, g);
        }
        const uint8_t *pg = P + (size_t)g * G * CDX_GEMM_PANEL;
#pragma GCC unroll 8
        for (int k = 0; k < G / 4; k++) {
            const __m512i wv = load64(pg + 64 * k);
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++) {
                int32_t a4;
                memcpy(&a4, a[t] + 4 * k, 4);
                is[t] = _mm512_dpbusd_epi32(is[t], wv, _mm512_set1_epi32(a4));
            }
        }
        const __m512 sg = _mm512_load_ps(S + g * CDX_GEMM_PANEL);
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            const float d = da[t * ng + g];
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), _mm512_mul_ps(sg, _mm512_set1_ps(d)), acc[t]);
            if (g_has_m(kind))
                acc[t] = _mm512_fmadd_ps(_mm512_load_ps(M + g * CDX_GEMM_PANEL),
                                         _mm512_set1_ps(d * (float)sa[t * ng + g]), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        _mm512_mask_storeu_ps(y + t * ys, rmask, acc[t]);
}

#define G_MICRO_CASE(kind, n_)                                                                          \
    case n_: g_micro(kind, P, S, M, ng, x, xrb, da, sa, n_, yt, ys, rmask); break;

KT_INLINE bool g_gemm(int kind, const cdx_mat *w, int64_t r0, int64_t r1, const void *xq, size_t xrb, int64_t n,
                      float *y, void *scratch)
{
    if (!scratch)
        return false;
    const int G = g_size(kind);
    const int64_t cols = w->cols, ng = cols / G;
    uint8_t *p = scratch;
    uint8_t *P = p;                       p += (CDX_GEMM_PANEL * (size_t)cols + 63) & ~(size_t)63;
    float *S = (float *)p;                p += ((size_t)ng * CDX_GEMM_PANEL * sizeof(float) + 63) & ~(size_t)63;
    float *M = (float *)p;                p += ((size_t)ng * CDX_GEMM_PANEL * sizeof(float) + 63) & ~(size_t)63;
    float *dav = (float *)p;              p += ((size_t)n * ng * sizeof(float) + 63) & ~(size_t)63;
    int32_t *sav = (int32_t *)p;
    g_act_sums(kind, xq, xrb, n, ng, dav, sav);
    const uint8_t *wb = w->data;
    for (int64_t r = r0; r < r1; r += CDX_GEMM_PANEL) {
        const int nr = r1 - r < CDX_GEMM_PANEL ? (int)(r1 - r) : CDX_GEMM_PANEL;
        /* unpack row by row into the interleaved panel: word k of row i goes to P[k][i] */
        for (int i = 0; i < CDX_GEMM_PANEL; i++) {
            uint32_t *pw = (uint32_t *)P;
            if (i >= nr) {
                for (int64_t k = 0; k < cols / 4; k++)
                    pw[k * CDX_GEMM_PANEL + i] = 0;
                for (int64_t g = 0; g < ng; g++)
                    S[g * CDX_GEMM_PANEL + i] = M[g * CDX_GEMM_PANEL + i] = 0;
                continue;
            }
            uint8_t rowu[4096];
            float rs[4096 / 16], rm[4096 / 16];
            for (int64_t c0 = 0; c0 < cols; c0 += 4096) { /* 4096 columns at a time (a multiple of 256) */
                const int64_t cn = cols - c0 < 4096 ? cols - c0 : 4096;
                const size_t off = (size_t)(c0 / (g_q8k(kind) ? 256 : 32)) * (g_q8k(kind) ? kblock_bytes(kind)
                                   : kind == W_Q8_0 ? sizeof(cdx_block_q8_0) : sizeof(cdx_block_q4_0));
                g_unpack_row(kind, wb + (size_t)(r + i) * w->row_bytes + off, cn, rowu, rs, rm);
                const uint32_t *rw = (const uint32_t *)rowu;
                for (int64_t k = 0; k < cn / 4; k++)
                    pw[(c0 / 4 + k) * CDX_GEMM_PANEL + i] = rw[k];
                for (int64_t g = 0; g < cn / G; g++) {
                    S[(c0 / G + g) * CDX_GEMM_PANEL + i] = rs[g];
                    M[(c0 / G + g) * CDX_GEMM_PANEL + i] = g_has_m(kind) ? rm[g] : 0;
                }
            }
        }
        const __mmask16 rmask = (__mmask16)((1u << nr) - 1);
        for (int64_t t = 0; t < n; t += CDX_GEMM_TOK) {
            const int tt = n - t < CDX_GEMM_TOK ? (int)(n - t) : CDX_GEMM_TOK;
            const uint8_t *x = (const uint8_t *)xq + (size_t)t * xrb;
            const float *da = dav + t * ng;
            const int32_t *sa = sav + t * ng;
            float *yt = y + t * w->rows + r;
            const int64_t ys = w->rows;
            switch (tt) {
                G_MICRO_CASE(kind, 1) G_MICRO_CASE(kind, 2) G_MICRO_CASE(kind, 3) G_MICRO_CASE(kind, 4)
                G_MICRO_CASE(kind, 5) G_MICRO_CASE(kind, 6) G_MICRO_CASE(kind, 7) G_MICRO_CASE(kind, 8)
            }
        }
    }
    return true;
}

/* The GEMM sums a row's groups in another order than the tiles do, so a row's result would depend
 * on how many tokens share the call: only the opt-in "avx512-gemm" set uses it (not batch
 * invariant; bench/ measures what it gains). */
#ifdef KT_FAST_PREFILL
#define KT_GEMM(kind, w, r0, r1, xq, xrb, n, y, scratch) g_gemm(kind, w, r0, r1, xq, xrb, n, y, scratch)
#else
#define KT_GEMM(kind, w, r0, r1, xq, xrb, n, y, scratch) ((void)g_gemm, false)
#endif

#define X16_TOK CDX_GEMM_TOK
#ifndef X16_DEC_G
#define X16_DEC_G 2 /* decode: two 16-row groups a step (acc[2] below) */
#endif
#define X16_Q8_FLIP 0x80 /* Q8_0 biased to u8 for vpdpbusd */
#define X16_K5XS 1       /* Q5_K and IQ4_XS packed too (x16k5, x16xs: x16k5_micro, x16xs_micro below) */
#include "kernel/kern_x16.h"
#include "kernel/kern_x16n.h"

/* Second software prefetch, into L2, this far ahead (bytes), issued by a group's first token tile
 * only (`far`; later tiles find the group in cache). Measured with bench/run-kernels.sh on Zen 5,
 * Q8_0 2048 x 2048 from DRAM, one thread: n = 8 173 -> 286 GFLOP/s, decode 20 -> 21-23 GB/s;
 * 16, 32, 48 and 64 KiB all gave 270-305. */
#ifndef X16_PF2
#define X16_PF2 32768
#endif

/* The 32 values of one block of a 4-bit x16 group (Q4_0, IQ4_NL: 256 bytes at qp) for 16 rows as 8
 * vectors of u8: wv[k] the low nibbles of word k (values 4k..4k+3), wv[4 + k] the high ones (values
 * 16 + 4k..); IQ4_NL through its table, biased by 128 (the AMX set unpacks them to tiles the same way). */
KT_INLINE void x16_values4(int kind, const uint8_t *qp, __m512i wv[8])
{
    const __m512i kvb = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl)),
                                         _mm512_set1_epi8((char)0x80));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i v = load64(qp + 64 * k);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (kind == W_IQ4_NL) {
            lo = _mm512_shuffle_epi8(kvb, lo);
            hi = _mm512_shuffle_epi8(kvb, hi);
        }
        wv[k] = lo;
        wv[k + 4] = hi;
    }
}

/* G consecutive 16-row groups (gstride bytes apart; G > 1 for decode: several streams in flight per
 * thread) × TT tokens over all nb blocks: y[t*ys + 16g + i]. */
KT_INLINE void x16_micro(int kind, const uint8_t *Q, size_t gstride, const int G, int64_t nb, const uint8_t *x,
                         size_t xrb, const float *da, const int32_t *sa, const int TT, float *y, int64_t ys,
                         const bool far)
{
    const int bias = kind == W_Q4_0 ? 8 : 128;
    const size_t qb = x16_qbytes(kind);
    __m512 acc[2][CDX_GEMM_TOK];
#pragma GCC unroll 2
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
            acc[g][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            const uint8_t *qp = Q + (size_t)g * gstride + (size_t)b * qb;
            const uint16_t *S = (const uint16_t *)(Q + (size_t)g * gstride + (size_t)nb * qb);
            for (size_t o = 0; o < qb; o += 64) {
                _mm_prefetch((const char *)(qp + X16_PF + o), X16_PF_HINT);
                if (far)
                    _mm_prefetch((const char *)(qp + X16_PF2 + o), _MM_HINT_T1);
            }
            __m512i wv[8];
            if (kind == W_Q8_0) {
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++)
                    wv[k] = load64(qp + 64 * k);
            } else {
                x16_values4(kind, qp, wv);
            }
            const __m512 sw = _mm512_cvtph_ps(load32(S + 16 * b));
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++) {
                const int8_t *a = ((const cdx_block_q8_0 *)(x + (size_t)t * xrb))[b].qs;
                __m512i s0 = _mm512_set1_epi32(-bias * sa[t * nb + b]), s1 = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int k = 0; k < 8; k += 2) {
                    int32_t a0, a1;
                    memcpy(&a0, a + 4 * k, 4);
                    memcpy(&a1, a + 4 * k + 4, 4);
                    s0 = _mm512_dpbusd_epi32(s0, wv[k], _mm512_set1_epi32(a0));
                    s1 = _mm512_dpbusd_epi32(s1, wv[k + 1], _mm512_set1_epi32(a1));
                }
                acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                            _mm512_mul_ps(sw, _mm512_set1_ps(da[t * nb + b])), acc[g][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
            _mm512_storeu_ps(y + t * ys + 16 * g, acc[g][t]);
}

/* 16 rows × TT tokens of a Q4_K x16k group: per sub-block an integer dot for all 16 rows, times
 * its scale (exact in i32, as vec_dot's sums); per super-block d·da and the mins term. */
KT_INLINE void x16k_micro(const uint8_t *Q, const uint8_t *meta, int64_t nsb, const uint8_t *x, size_t xrb,
                          const int TT, float *y, int64_t ys, const bool far)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[CDX_GEMM_TOK];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *qp = Q + (size_t)b * X16K_Q, *mb = meta + (size_t)b * X16K_META;
        __m512i ai[CDX_GEMM_TOK];
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
            ai[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int sb = 0; sb < 8; sb++) {
            const uint8_t *qj = qp + 512 * (sb / 2);
            if (sb % 2 == 0)
                for (size_t o = 0; o < 512; o += 64) {
                    _mm_prefetch((const char *)(qj + X16_PF + o), X16_PF_HINT);
                    if (far)
                        _mm_prefetch((const char *)(qj + X16_PF2 + o), _MM_HINT_T1);
                }
            __m512i wv[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i v = load64(qj + 64 * k);
                wv[k] = sb % 2 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(mb + 16 * sb)));
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++) {
                const int8_t *a = ((const cdx_block_q8_K *)(x + (size_t)t * xrb))[b].qs + 32 * sb;
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int k = 0; k < 8; k += 2) {
                    int32_t a0, a1;
                    memcpy(&a0, a + 4 * k, 4);
                    memcpy(&a1, a + 4 * k + 4, 4);
                    s0 = _mm512_dpbusd_epi32(s0, wv[k], _mm512_set1_epi32(a0));
                    s1 = _mm512_dpbusd_epi32(s1, wv[k + 1], _mm512_set1_epi32(a1));
                }
                ai[t] = _mm512_add_epi32(ai[t], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), sc));
            }
        }
        for (size_t o = 0; o < X16K_META; o += 64) /* the scales' own stream, 8 super-blocks ahead */
            _mm_prefetch((const char *)(mb + 8 * X16K_META + o), X16_PF_HINT);
        const __m512 d = _mm512_cvtph_ps(load32(mb + 256)), dmin = _mm512_cvtph_ps(load32(mb + 288));
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
            __m512i mi = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int sb = 0; sb < 8; sb++)
                mi = _mm512_add_epi32(mi, _mm512_mullo_epi32(
                    _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(mb + 128 + 16 * sb))),
                    _mm512_set1_epi32(xb->bsums[2 * sb] + xb->bsums[2 * sb + 1])));
            const __m512 da = _mm512_set1_ps(xb->d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[t]), _mm512_mul_ps(d, da), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mi), _mm512_mul_ps(dmin, da), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        _mm512_storeu_ps(y + t * ys, acc[t]);
}

/* The 6-bit values of one x16q6 sub-block of 16 rows (lo: its 256 bytes of low bits, hi: its 128
 * of high bits) as 8 vectors: wv[k] word k (values 4k..4k+3) of every row, k < 4; wv[4 + k] values
 * 16 + 4k.. (the AMX set unpacks them to tiles the same way). */
KT_INLINE void x16q6_values(const uint8_t *lo, const uint8_t *hi, __m512i wv[8])
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i v = load64(lo + 64 * k);
        wv[k] = _mm512_and_si512(v, m4);
        wv[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i v = load64(hi + 64 * h);
        wv[4 * h + 0] = _mm512_or_si512(wv[4 * h + 0], _mm512_and_si512(_mm512_slli_epi16(v, 4), m30));
        wv[4 * h + 1] = _mm512_or_si512(wv[4 * h + 1], _mm512_and_si512(_mm512_slli_epi16(v, 2), m30));
        wv[4 * h + 2] = _mm512_or_si512(wv[4 * h + 2], _mm512_and_si512(v, m30));
        wv[4 * h + 3] = _mm512_or_si512(wv[4 * h + 3], _mm512_and_si512(_mm512_srli_epi16(v, 2), m30));
    }
}

/* 16 rows × TT tokens of a Q6_K x16q6 group: per 16 values an integer dot less 32·Σa, times its
 * int8 scale, summed in i32 over the super-block as vec_dot does; then d·da. */
KT_INLINE void x16q6_micro(const uint8_t *Q, const uint8_t *meta, int64_t nsb, const uint8_t *x, size_t xrb,
                           const int TT, float *y, int64_t ys, const bool far)
{
    __m512 acc[CDX_GEMM_TOK];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *qp = Q + (size_t)b * X16Q6_Q, *mb = meta + (size_t)b * X16Q6_META;
        __m512i ai[CDX_GEMM_TOK];
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
            ai[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int sb = 0; sb < 8; sb++) {
            const uint8_t *lo = qp + 384 * sb, *hi = lo + 256;
            for (size_t o = 0; o < 384; o += 64) {
                _mm_prefetch((const char *)(lo + X16_PF + o), X16_PF_HINT);
                if (far)
                    _mm_prefetch((const char *)(lo + X16_PF2 + o), _MM_HINT_T1);
            }
            __m512i wv[8];
            x16q6_values(lo, hi, wv);
            const __m512i sca = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(mb + 32 * sb)));
            const __m512i scb = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(mb + 32 * sb + 16)));
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++) {
                const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
                const int8_t *a = xb->qs + 32 * sb;
                __m512i sa = _mm512_set1_epi32(-32 * xb->bsums[2 * sb]);
                __m512i sbv = _mm512_set1_epi32(-32 * xb->bsums[2 * sb + 1]);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    int32_t a0, a1;
                    memcpy(&a0, a + 4 * k, 4);
                    memcpy(&a1, a + 16 + 4 * k, 4);
                    sa = _mm512_dpbusd_epi32(sa, wv[k], _mm512_set1_epi32(a0));
                    sbv = _mm512_dpbusd_epi32(sbv, wv[k + 4], _mm512_set1_epi32(a1));
                }
                ai[t] = _mm512_add_epi32(ai[t], _mm512_add_epi32(_mm512_mullo_epi32(sa, sca), _mm512_mullo_epi32(sbv, scb)));
            }
        }
        for (size_t o = 0; o < X16Q6_META; o += 64) /* the scales' own stream, 8 super-blocks ahead */
            _mm_prefetch((const char *)(mb + 8 * X16Q6_META + o), X16_PF_HINT);
        const __m512 d = _mm512_cvtph_ps(load32(mb + 256));
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[t]), _mm512_mul_ps(d, _mm512_set1_ps(xb->d)), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        _mm512_storeu_ps(y + t * ys, acc[t]);
}

/* ---- Q5_K (x16k5) and IQ4_XS (x16xs): the eight lanes of k_block_acc ----
 * These two types' row sums are llama.cpp's x86 order (kern_tmpl.h, k_block_acc; the scalar twin
 * and every set give them): lane L of a super-block is Σ_s sc_s·Σ of values 4L..4L+3 of
 * sub-block s, an exact i32, and each lane keeps its own float sum over the super-blocks
 * (fma(float(lane), d·da, sum)); the row's value is then the eight sums added as hsum8 adds them
 * (+ Q5_K's mins sum). In the 16-row layouts word k of a sub-block is lane k of all 16 rows, so
 * a lane is a run of vpmaddubsw + vpdpwssd (the sub-block's scale in both i16 halves of a row's
 * word) over the 8 sub-blocks, and only the float sums differ from x16k_micro's: 8 a token. */

/* hsum8's order over one token's eight lane sums of 16 rows (f[0..7]): k_row_total without the
 * mins term. */
KT_INLINE __m512 x16_lanes_hsum(const __m512 *f)
{
    const __m512 a = _mm512_add_ps(_mm512_add_ps(f[0], f[4]), _mm512_add_ps(f[2], f[6]));
    const __m512 b = _mm512_add_ps(_mm512_add_ps(f[1], f[5]), _mm512_add_ps(f[3], f[7]));
    return _mm512_add_ps(a, b);
}

/* A row's i16 scale in both halves of its word (vpdpwssd against a word's two vpmaddubsw pairs),
 * from 16 bytes: u8 (Q5_K) or s8 (IQ4_XS). */
KT_INLINE __m512i x16_sc_pairs(const uint8_t *p, bool sgn)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    const __m512i s = sgn ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
    return _mm512_or_si512(_mm512_and_si512(s, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(s, 16));
}

/* A lane's integer sums of one super-block into its float sums: f[t][k] += float(ai + ao) · d · the
 * token's d (decode's two chains added first). */
KT_INLINE void x16_lane_close(__m512i *ai, const __m512i *ao, const int TT, const uint8_t *x, size_t xrb, int64_t b,
                              __m512 d, __m512 (*f)[8], int k)
{
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++) {
        if (TT <= 2)
            ai[t] = _mm512_add_epi32(ai[t], ao[t]);
        const float da = ((const cdx_block_q8_K *)(x + (size_t)t * xrb))[b].d;
        f[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[t]), _mm512_mul_ps(d, _mm512_set1_ps(da)), f[t][k]);
    }
}

/* 16 rows × TT tokens of a Q5_K x16k5 group: y[t·ys + i] with tile_kw's bits. */
KT_INLINE void x16k5_micro(const uint8_t *Q, const uint8_t *meta, int64_t nsb, const uint8_t *x, size_t xrb,
                           const int TT, float *y, int64_t ys, const bool far)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    __m512 f[CDX_GEMM_TOK][8], fs[CDX_GEMM_TOK];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++) {
        fs[t] = _mm512_setzero_ps();
        for (int k = 0; k < 8; k++)
            f[t][k] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *qp = Q + (size_t)b * X16K5_Q, *mb = meta + (size_t)b * X16K5_META;
        for (size_t o = 0; o < X16K5_META; o += 64) /* the scales' own stream, 8 super-blocks ahead */
            _mm_prefetch((const char *)(mb + 8 * X16K5_META + o), X16_PF_HINT);
        __m512i sc[8];
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            sc[s] = x16_sc_pairs(mb + 16 * s, false);
        const __m512 d = _mm512_cvtph_ps(load32(mb + 256)), dmin = _mm512_cvtph_ps(load32(mb + 288));
#pragma GCC unroll 1
        for (int k = 0; k < 8; k++) {
            for (int j = 0; j < 5; j++) { /* lane k's lines (j = 4: its fifth bits), this far ahead */
                _mm_prefetch((const char *)(qp + X16_PF + 512 * j + 64 * k), X16_PF_HINT);
                if (far)
                    _mm_prefetch((const char *)(qp + X16_PF2 + 512 * j + 64 * k), _MM_HINT_T1);
            }
            const __m512i h = load64(qp + 2048 + 64 * k);
            /* decode (TT <= 2): even and odd sub-blocks into two accumulators (ao), half the
             * dependency chain (the same integer) */
            __m512i ai[CDX_GEMM_TOK], ao[2];
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++)
                ai[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
            for (int t = 0; t < 2; t++)
                ao[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++) {
                const __m512i v = load64(qp + 512 * (s / 2) + 64 * k);
                const __m512i lo = s % 2 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
                /* the fifth bit: bit s of each byte to bit 4 (16-bit shifts: the bits crossing a byte
                 * boundary never reach bit 4) */
                const __m512i hb = s <= 4 ? _mm512_slli_epi16(h, 4 - s) : _mm512_srli_epi16(h, s - 4);
                const __m512i wv = _mm512_ternarylogic_epi32(lo, hb, m10, 0xF8); /* lo | (hb & 0x10) */
#pragma GCC unroll 8
                for (int t = 0; t < TT; t++) {
                    int32_t a4;
                    memcpy(&a4, ((const cdx_block_q8_K *)(x + (size_t)t * xrb))[b].qs + 32 * s + 4 * k, 4);
                    __m512i *acc = TT <= 2 && s % 2 ? &ao[t] : &ai[t];
                    *acc = _mm512_dpwssd_epi32(*acc, _mm512_maddubs_epi16(wv, _mm512_set1_epi32(a4)), sc[s]);
                }
            }
            x16_lane_close(ai, ao, TT, x, xrb, b, d, f, k);
        }
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
            __m512i mi = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++)
                mi = _mm512_add_epi32(mi, _mm512_mullo_epi32(
                    _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(mb + 128 + 16 * s))),
                    _mm512_set1_epi32(xb->bsums[2 * s] + xb->bsums[2 * s + 1])));
            fs[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mi), _mm512_mul_ps(dmin, _mm512_set1_ps(xb->d)), fs[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        _mm512_storeu_ps(y + t * ys, _mm512_add_ps(x16_lanes_hsum(f[t]), fs[t]));
}

/* 16 rows × TT tokens of an IQ4_XS x16xs group: y[t·ys + i] with tile_kw's bits. The table's
 * values are signed: |w| (a second table) times a with w's sign (negated where the nibble is below
 * 8, the table's negative half), so that vpmaddubsw's pairs stay below 2^15 (127·127·2). */
KT_INLINE void x16xs_micro(const uint8_t *Q, const uint8_t *meta, int64_t nsb, const uint8_t *x, size_t xrb,
                           const int TT, float *y, int64_t ys, const bool far)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m8 = _mm512_set1_epi8(0x08), zero = _mm512_setzero_si512();
    const __m512i kabs = _mm512_abs_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl)));
    __m512 f[CDX_GEMM_TOK][8];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        for (int k = 0; k < 8; k++)
            f[t][k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *qp = Q + (size_t)b * X16XS_Q, *mb = meta + (size_t)b * X16XS_META;
        for (size_t o = 0; o < X16XS_META; o += 64)
            _mm_prefetch((const char *)(mb + 8 * X16XS_META + o), X16_PF_HINT);
        __m512i sc[8];
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            sc[s] = x16_sc_pairs(mb + 16 * s, true);
        const __m512 d = _mm512_cvtph_ps(load32(mb + 128));
#pragma GCC unroll 1
        for (int k = 0; k < 8; k++) { /* lane k: values 4k.. of each sub-block: low nibbles of word k, or high of k − 4 */
            for (int j = 0; j < 4; j++) { /* the super-block's 32 lines over the 8 lanes, this far ahead */
                const size_t o = 64 * (size_t)(16 * (k % 2) + 4 * j + k / 2);
                _mm_prefetch((const char *)(qp + X16_PF + o), X16_PF_HINT);
                if (far)
                    _mm_prefetch((const char *)(qp + X16_PF2 + o), _MM_HINT_T1);
            }
            /* decode (TT <= 2): even and odd sub-blocks into two accumulators (ao), half the
             * dependency chain (the same integer) */
            __m512i ai[CDX_GEMM_TOK], ao[2];
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++)
                ai[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
            for (int t = 0; t < 2; t++)
                ao[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++) {
                const __m512i v = load64(qp + 256 * s + 64 * (k % 4));
                const __m512i nib = k < 4 ? _mm512_and_si512(v, m4) : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                const __m512i wabs = _mm512_shuffle_epi8(kabs, nib);
                const __mmask64 neg = _mm512_testn_epi8_mask(nib, m8);
#pragma GCC unroll 8
                for (int t = 0; t < TT; t++) {
                    int32_t a4;
                    memcpy(&a4, ((const cdx_block_q8_K *)(x + (size_t)t * xrb))[b].qs + 32 * s + 4 * k, 4);
                    const __m512i a = _mm512_set1_epi32(a4);
                    __m512i *acc = TT <= 2 && s % 2 ? &ao[t] : &ai[t];
                    *acc = _mm512_dpwssd_epi32(*acc, _mm512_maddubs_epi16(wabs, _mm512_mask_sub_epi8(a, neg, zero, a)), sc[s]);
                }
            }
            x16_lane_close(ai, ao, TT, x, xrb, b, d, f, k);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        _mm512_storeu_ps(y + t * ys, x16_lanes_hsum(f[t]));
}

#ifdef KT_AMX /* the "amx" set: tiles for the x16 layouts' batches (kernels_amx.c) */
#include "kernel/kern_amx.h"
#define X16_AMX 1
#endif
#include "kernel/kern_x16_run.h"
