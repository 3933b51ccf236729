/* AVX2 kernels over the load-time layouts (kern_x16.h): Q8_0, Q4_0, IQ4_NL, Q4_K and Q6_K rows
 * interleaved 16 at a time, read by one thread as one sequential stream, for decode and prefill
 * alike. Included by kern_tmpl.h (through KT_WIDE_HEADER) in kernels_avx2.c only; the native
 * layouts keep the 256-bit tiles of kern_tmpl.h.
 *
 * Without vpdpbusd, one 32-bit lane (one row, 4 values) takes maddubs (u8·s8 pairs to i16) and
 * madd (pairs to i32). Unsigned 4-bit weights (Q4_0, Q4_K) keep 8 maddubs in i16 before one madd
 * (16·15·127 < 2^15); signed ones (Q8_0, IQ4_NL) move one factor's sign onto the other, as
 * tile_b32 does. The integer sums are the AVX-512 set's exactly and
 * the float steps the same ones in the same order, so both sets give a packed row the same bits. */

#define X16_TOK 4        /* tokens a call of the decode and super-block micro kernels */
#define X16_TOK_P 8      /* the most tokens an x16_micro_p call takes (its Q8_0 tile) */
/* Tokens a call, by layout: Q8_0's prefill re-reads each weight vector (and its |w|) once per
 * tile, and 8 tokens spread that over twice as many sums (Zen 3, bench-kernels -t 1 3072 x 1024 at
 * n = 128: 115-117 -> 121-123 GFLOP/s; level on Zen 5); the 4-bit types and the super-block layouts
 * were slower at 8 on Zen 3 (Q4_0 170 -> 163, Q4_K 165 -> 110): their sums spill there. */
#define X16_TILE(kind) ((kind) == W_Q8_0 ? X16_TOK_P : X16_TOK)
#define X16_TILE_MAX X16_TOK_P
/* Decode's prefetch distance, bytes ahead of each stream: at 4 KiB (prefill's) decode read DRAM
 * 8-15 % slower (bench/compare-llamacpp, Q4_0 and Q4_K_M, Zen 3); prefill re-reads a group per
 * token tile and keeps 4 KiB (16 KiB cost Q8_0 prefill ~10 %). */
#ifndef X16_PF_DEC
#define X16_PF_DEC 16384
#endif
#define X16_Q8_FLIP 0    /* Q8_0 stays signed */
#define X16_ACT_SUMS(kind) ((kind) == W_Q4_0) /* Q8_0 and IQ4_NL stay signed: no bias to take off */
/* Decode: 16-row groups a step. One: a thread then reads one sequential stream, and a prefetch
 * X16_PF_DEC ahead lands in the group the next step reads. With two adjacent groups a step (tuned
 * on Zen 3) the first stream's prefetch lands in the second group, which is being read already, so
 * most of it was wasted: on Zen 5 one group a step decodes Llama-3.2-1B 8-40 % faster (Q4_0, Q8_0,
 * Q4_K_M; bench/README.md, 2026-12-03 afternoon). */
#ifndef X16_DEC_G
#define X16_DEC_G 1
#endif
#ifndef X16SB_DECODE_G
#define X16SB_DECODE_G 1 /* the same for Q4_K and Q6_K (x16k_micro_d, x16q6_micro_d) */
#endif
#include "kernel/kern_x16.h"

/* A value held in a register at this point: keeps GCC's reassociation from turning a running sum
 * of products into a tree, which needs every product live at once (and spills them all). */
#define X16_KEEP(v) __asm__("" : "+x"(v))

KT_INLINE __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Σ over a lane's 4 products of w·a with w signed: |a|·(w with a's sign), for w ≥ -127 (the IQ4_NL
 * table), a's |a| computed once for all the rows it meets. */
KT_INLINE __m256i dot4_signed(__m256i acc, __m256i w, __m256i a_abs, __m256i a)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a_abs, _mm256_sign_epi8(w, a)),
                                                   _mm256_set1_epi16(1)));
}
/* The same for any w (Q8_0 weights come from files and may be -128; activations stay ≥ -127):
 * |w|·(a with w's sign), |w| computed once for all the tokens it meets. */
KT_INLINE __m256i dot4_wsigned(__m256i acc, __m256i w_abs, __m256i w, __m256i a)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a, w)),
                                                   _mm256_set1_epi16(1)));
}

/* The u8 (Q4_K) or s8 (Q6_K) scales of rows 8h..8h+7, from the 16 rows' scales at p ([row] bytes, as
 * the x16k and x16q6 metadata hold them), as i16 pairs [s, s] per 32-bit lane for madd against i16
 * pair sums: u8 by one 16-byte broadcast and one shuffle, s8 by one sign extension, a lane swap and
 * one unpack. */
KT_INLINE __m256i sc16_u8_half(const uint8_t *p, int h)
{
#define SC_B2(r) (r), -128, (r), -128
    const __m256i c0 = _mm256_setr_epi8(SC_B2(0), SC_B2(1), SC_B2(2), SC_B2(3), SC_B2(4), SC_B2(5), SC_B2(6), SC_B2(7));
    const __m256i c1 = _mm256_setr_epi8(SC_B2(8), SC_B2(9), SC_B2(10), SC_B2(11), SC_B2(12), SC_B2(13), SC_B2(14), SC_B2(15));
#undef SC_B2
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)), h ? c1 : c0);
}
KT_INLINE __m256i sc16_s8_half(const uint8_t *p, int h)
{
    /* i16 rows 0..3, 8..11 | 4..7, 12..15, then each doubled */
    const __m256i v = _mm256_permute4x64_epi64(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)), 0xD8);
    return h ? _mm256_unpackhi_epi16(v, v) : _mm256_unpacklo_epi16(v, v);
}

/* The float sums start at zero in y: 16 rows (two halves) × TT tokens, ys floats apart. */
KT_INLINE void x16_zero_y(float *y, int64_t ys, const int TT)
{
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            _mm256_storeu_ps(y + t * ys + 8 * h, _mm256_setzero_ps());
}

/* Prefill, the 32-value types: one 16-row group × TT tokens, one 8-row half h at a time over all
 * the blocks, so that the float sums (TT ymm), the integer sums (TT ymm), the broadcast activations
 * and the weights fit AVX2's 16 registers (both halves at once spill) and no float sum goes through
 * memory between blocks; the second half re-reads the group's other 32 bytes of each line from L1/L2.
 * The integer sums are exact and the float steps are x16_micro's in its order (over b, from zero):
 * the same bits as decode, whatever TT. */
KT_INLINE void x16_micro_p(int kind, const uint8_t *Q, int64_t nb, const uint8_t *x, size_t xrb, const float *da,
                           const int32_t *sa, const int TT, float *y, int64_t ys)
{
    const size_t qb = x16_qbytes(kind);
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl));
    const __m256i m4 = _mm256_set1_epi8(0x0F), one16 = _mm256_set1_epi16(1);
    const uint16_t *S = (const uint16_t *)(Q + (size_t)nb * qb);
    const int8_t *a0[X16_TOK_P];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        a0[t] = ((const cdx_block_q8_0 *)(x + (size_t)t * xrb))->qs;
#pragma GCC unroll 1
    for (int h = 0; h < 2; h++) {
        __m256 acc[X16_TOK_P];
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
            acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *qp = Q + (size_t)b * qb;
            const int8_t *a[X16_TOK_P];
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++)
                a[t] = a0[t] + (size_t)b * sizeof(cdx_block_q8_0);
            for (size_t o = 0; o < qb; o += 64)
                _mm_prefetch((const char *)(qp + X16_PF + o), X16_PF_HINT);
            __m256i si[X16_TOK_P]; /* Q4_0: i16 pair sums; the signed types: i32 */
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++)
                si[t] = _mm256_setzero_si256();
            if (kind == W_Q8_0) {
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) {
                    const __m256i wv = load32(qp + 64 * k + 32 * h), wa = _mm256_abs_epi8(wv);
#pragma GCC unroll 8
                    for (int t = 0; t < TT; t++) {
                        si[t] = dot4_wsigned(si[t], wa, wv, bcast4(a[t] + 4 * k));
                        X16_KEEP(si[t]);
                    }
                }
            } else {
#pragma GCC unroll 8
                for (int k = 0; k < 4; k++) {
                    const __m256i v = load32(qp + 64 * k + 32 * h);
                    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    if (kind == W_Q4_0) {
#pragma GCC unroll 8
                        for (int t = 0; t < TT; t++) {
                            si[t] = _mm256_add_epi16(si[t], _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(a[t] + 4 * k)),
                                                                             _mm256_maddubs_epi16(hi, bcast4(a[t] + 16 + 4 * k))));
                            X16_KEEP(si[t]);
                        }
                    } else {
                        lo = _mm256_shuffle_epi8(kv, lo);
                        hi = _mm256_shuffle_epi8(kv, hi);
#pragma GCC unroll 8
                        for (int t = 0; t < TT; t++) {
                            const __m256i av = bcast4(a[t] + 4 * k), ah = bcast4(a[t] + 16 + 4 * k);
                            si[t] = dot4_signed(dot4_signed(si[t], lo, _mm256_abs_epi8(av), av), hi, _mm256_abs_epi8(ah), ah);
                            X16_KEEP(si[t]);
                        }
                    }
                }
            }
            const __m256 sw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(S + 16 * b + 8 * h)));
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++) {
                __m256i st = si[t];
                if (kind == W_Q4_0)
                    st = _mm256_add_epi32(_mm256_madd_epi16(st, one16), _mm256_set1_epi32(-8 * sa[t * nb + b]));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(st), _mm256_mul_ps(sw, _mm256_set1_ps(da[t * nb + b])), acc[t]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
            _mm256_storeu_ps(y + t * ys + 8 * h, acc[t]);
    }
}

#include "kernel/kern_x16n.h"

/* G consecutive 16-row groups (gstride bytes apart; G = X16_DEC_G for decode) × TT tokens over
 * all nb blocks: y[t*ys + 16g + i]. Rows 0..7 and 8..15 of a group are the two halves of each
 * 64-byte word row. */
KT_INLINE void x16_micro(int kind, const uint8_t *Q, size_t gstride, const int G, int64_t nb, const uint8_t *x,
                         size_t xrb, const float *da, const int32_t *sa, const int TT, float *y, int64_t ys,
                         const bool far)
{
    (void)far; /* the AVX-512 set's L2 prefetch; not measured here on AVX2 */
    if (G == 1 && TT > 1) {
        x16_micro_p(kind, Q, nb, x, xrb, da, sa, TT, y, ys);
        return;
    }
    const size_t qb = x16_qbytes(kind);
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl));
    const __m256i m4 = _mm256_set1_epi8(0x0F), one16 = _mm256_set1_epi16(1);
    __m256 acc[X16_DEC_G][2][X16_TOK];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++)
                acc[g][h][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *a[X16_TOK];
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            a[t] = ((const cdx_block_q8_0 *)(x + (size_t)t * xrb))[b].qs;
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
            for (size_t o = 0; o < qb; o += 64)
                _mm_prefetch((const char *)(Q + (size_t)g * gstride + (size_t)b * qb + (TT == 1 ? X16_PF_DEC : X16_PF) + o),
                             X16_PF_HINT);
        __m256i s[X16_DEC_G][2][X16_TOK]; /* Q4_0: i16 pair sums; the signed types: i32 */
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
                for (int t = 0; t < TT; t++)
                    s[g][h][t] = _mm256_setzero_si256();
        if (kind == W_Q8_0) {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m256i av[X16_TOK];
#pragma GCC unroll 4
                for (int t = 0; t < TT; t++)
                    av[t] = bcast4(a[t] + 4 * k);
#pragma GCC unroll 4
                for (int g = 0; g < G; g++)
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        const __m256i wv = load32(Q + (size_t)g * gstride + (size_t)b * qb + 64 * k + 32 * h);
                        const __m256i wa = _mm256_abs_epi8(wv);
#pragma GCC unroll 4
                        for (int t = 0; t < TT; t++)
                            s[g][h][t] = dot4_wsigned(s[g][h][t], wa, wv, av[t]);
                    }
            }
        } else {
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i av[X16_TOK], ah[X16_TOK], aa[X16_TOK], aha[X16_TOK];
#pragma GCC unroll 4
                for (int t = 0; t < TT; t++) {
                    av[t] = bcast4(a[t] + 4 * k);
                    ah[t] = bcast4(a[t] + 16 + 4 * k);
                    if (kind == W_IQ4_NL) {
                        aa[t] = _mm256_abs_epi8(av[t]);
                        aha[t] = _mm256_abs_epi8(ah[t]);
                    }
                }
#pragma GCC unroll 4
                for (int g = 0; g < G; g++)
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        const __m256i v = load32(Q + (size_t)g * gstride + (size_t)b * qb + 64 * k + 32 * h);
                        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                        if (kind == W_Q4_0) {
#pragma GCC unroll 4
                            for (int t = 0; t < TT; t++)
                                s[g][h][t] = _mm256_add_epi16(s[g][h][t],
                                    _mm256_add_epi16(_mm256_maddubs_epi16(lo, av[t]), _mm256_maddubs_epi16(hi, ah[t])));
                        } else {
                            lo = _mm256_shuffle_epi8(kv, lo);
                            hi = _mm256_shuffle_epi8(kv, hi);
#pragma GCC unroll 4
                            for (int t = 0; t < TT; t++)
                                s[g][h][t] = dot4_signed(dot4_signed(s[g][h][t], lo, aa[t], av[t]), hi, aha[t], ah[t]);
                        }
                    }
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const uint16_t *S = (const uint16_t *)(Q + (size_t)g * gstride + (size_t)nb * qb) + 16 * b;
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256 sw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(S + 8 * h)));
#pragma GCC unroll 4
                for (int t = 0; t < TT; t++) {
                    __m256i si = s[g][h][t];
                    if (kind == W_Q4_0)
                        si = _mm256_add_epi32(_mm256_madd_epi16(si, one16), _mm256_set1_epi32(-8 * sa[t * nb + b]));
                    acc[g][h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(sw, _mm256_set1_ps(da[t * nb + b])),
                                                   acc[g][h][t]);
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int g = 0; g < G; g++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++)
                _mm256_storeu_ps(y + t * ys + 16 * g + 8 * h, acc[g][h][t]);
}

/* Prefill, Q4_K: one 16-row x16k group × TT tokens, one 8-row half h at a time, so that the i16
 * sums s0/s1[TT] (8 ymm for TT = 4), the weights and a broadcast fit AVX2's 16 registers (both
 * halves at once, 32 sums, spill). The i32 sums per half and the float accumulators (in y itself)
 * sit outside the hot loop. Every sum is the decode kernel's (x16k_micro_d) exactly, and the float
 * steps are its steps in its order: the same bits for every token, whatever TT. */
KT_INLINE void x16k_micro_p(const uint8_t *Q, const uint8_t *meta, int64_t nsb, const uint8_t *x, size_t xrb,
                            const int TT, float *y, int64_t ys)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    x16_zero_y(y, ys, TT);
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *qp = Q + (size_t)b * X16K_Q, *mb = meta + (size_t)b * X16K_META;
        const int8_t *a[X16_TOK];
        float dav[X16_TOK];
        int32_t bp[X16_TOK][4]; /* per token the (bs[4p] + bs[4p+1], bs[4p+2] + bs[4p+3]) i16 pairs */
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
            a[t] = xb->qs;
            dav[t] = xb->d;
            _mm_storeu_si128((__m128i *)bp[t], _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb->bsums),
                                                             _mm_loadu_si128((const __m128i *)(xb->bsums + 8))));
        }
        for (size_t o = 0; o < X16K_META; o += 64)
            _mm_prefetch((const char *)(mb + 8 * X16K_META + o), X16_PF_HINT);
#pragma GCC unroll 1
        for (int h = 0; h < 2; h++) {
            __m256i ai[X16_TOK];
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++)
                ai[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
            for (int j = 0; j < 4; j++) { /* sub-blocks 2j (low nibbles) and 2j+1 (high) */
                const uint8_t *qj = qp + 512 * j + 32 * h;
                if (h == 0)
                    for (size_t o = 0; o < 512; o += 64)
                        _mm_prefetch((const char *)(qp + 512 * j + X16_PF + o), X16_PF_HINT);
                __m256i s0[X16_TOK], s1[X16_TOK]; /* i16 */
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) {
                    const __m256i v = load32(qj + 64 * k);
                    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
                    for (int t = 0; t < TT; t++) {
                        const __m256i p0 = _mm256_maddubs_epi16(lo, bcast4(a[t] + 64 * j + 4 * k));
                        const __m256i p1 = _mm256_maddubs_epi16(hi, bcast4(a[t] + 64 * j + 32 + 4 * k));
                        s0[t] = k ? _mm256_add_epi16(s0[t], p0) : p0;
                        s1[t] = k ? _mm256_add_epi16(s1[t], p1) : p1;
                        X16_KEEP(s0[t]);
                        X16_KEEP(s1[t]);
                    }
                }
                const __m256i sc0 = sc16_u8_half(mb + 16 * (2 * j), h), sc1 = sc16_u8_half(mb + 16 * (2 * j + 1), h);
#pragma GCC unroll 4
                for (int t = 0; t < TT; t++)
                    ai[t] = _mm256_add_epi32(ai[t], _mm256_add_epi32(_mm256_madd_epi16(s0[t], sc0), _mm256_madd_epi16(s1[t], sc1)));
            }
            __m256i mp[4]; /* rows' (m[2p], m[2p+1]) as i16 pairs */
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++)
                mp[p] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(mb + 128 + 16 * (2 * p) + 8 * h)),
                                                               _mm_loadl_epi64((const __m128i *)(mb + 128 + 16 * (2 * p + 1) + 8 * h))));
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mb + 256 + 16 * h)));
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mb + 288 + 16 * h)));
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                __m256i mi = _mm256_madd_epi16(mp[0], _mm256_set1_epi32(bp[t][0]));
#pragma GCC unroll 3
                for (int p = 1; p < 4; p++)
                    mi = _mm256_add_epi32(mi, _mm256_madd_epi16(mp[p], _mm256_set1_epi32(bp[t][p])));
                const __m256 da = _mm256_set1_ps(dav[t]);
                float *yt = y + t * ys + 8 * h;
                __m256 acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[t]), _mm256_mul_ps(d, da), _mm256_loadu_ps(yt));
                acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mi), _mm256_mul_ps(dmin, da), acc);
                _mm256_storeu_ps(yt, acc);
            }
        }
    }
}

/* One 8-row half's 16 Q6_K values per row of an x16q6 sub-block (q = 0: values 0..15, 1: 16..31)
 * as u8 0..63: the low nibbles' 4 words (lo) or their high nibbles, or'ed with the 2 high bits
 * from hi. */
KT_INLINE void q6_values16(const uint8_t *lo, const uint8_t *hi, const int q, __m256i m4, __m256i m30, __m256i wv[4])
{
    const __m256i hv = load32(hi + 64 * q);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256i v = load32(lo + 64 * k);
        wv[k] = _mm256_and_si256(q ? _mm256_srli_epi16(v, 4) : v, m4);
    }
    wv[0] = _mm256_or_si256(wv[0], _mm256_and_si256(_mm256_slli_epi16(hv, 4), m30));
    wv[1] = _mm256_or_si256(wv[1], _mm256_and_si256(_mm256_slli_epi16(hv, 2), m30));
    wv[2] = _mm256_or_si256(wv[2], _mm256_and_si256(hv, m30));
    wv[3] = _mm256_or_si256(wv[3], _mm256_and_si256(_mm256_srli_epi16(hv, 2), m30));
}

/* Prefill, Q6_K: one x16q6 group × TT tokens, one 8-row half at a time and, within a sub-block, 16
 * values (4 weight vectors, one scale) at a time: the i32 sums ai[TT], 4 weight vectors and the
 * scale stay in registers. The sums and float steps are x16q6_micro_d's. */
KT_INLINE void x16q6_micro_p(const uint8_t *Q, const uint8_t *meta, int64_t nsb, const uint8_t *x, size_t xrb,
                             const int TT, float *y, int64_t ys)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    x16_zero_y(y, ys, TT);
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *qp = Q + (size_t)b * X16Q6_Q, *mb = meta + (size_t)b * X16Q6_META;
        const cdx_block_q8_K *xb[X16_TOK];
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            xb[t] = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
        for (size_t o = 0; o < X16Q6_META; o += 64)
            _mm_prefetch((const char *)(mb + 8 * X16Q6_META + o), X16_PF_HINT);
#pragma GCC unroll 1
        for (int h = 0; h < 2; h++) {
            __m256i ai[X16_TOK];
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++)
                ai[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
            for (int sb = 0; sb < 8; sb++) {
                const uint8_t *lo = qp + 384 * sb + 32 * h, *hi = lo + 256;
                if (h == 0)
                    for (size_t o = 0; o < 384; o += 64)
                        _mm_prefetch((const char *)(qp + 384 * sb + X16_PF + o), X16_PF_HINT);
#pragma GCC unroll 2
                for (int q = 0; q < 2; q++) { /* values 16q .. 16q+15: scale sc[2sb+q] */
                    __m256i wv[4];
                    q6_values16(lo, hi, q, m4, m30, wv);
                    const __m256i sc = sc16_s8_half(mb + 32 * sb + 16 * q, h);
#pragma GCC unroll 4
                    for (int t = 0; t < TT; t++) {
                        const int8_t *av = xb[t]->qs + 32 * sb + 16 * q;
                        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[0], bcast4(av)),
                                                            _mm256_maddubs_epi16(wv[1], bcast4(av + 4)));
                        const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[2], bcast4(av + 8)),
                                                            _mm256_maddubs_epi16(wv[3], bcast4(av + 12)));
                        ai[t] = _mm256_add_epi32(ai[t], _mm256_add_epi32(_mm256_madd_epi16(p0, sc), _mm256_madd_epi16(p1, sc)));
                        X16_KEEP(ai[t]);
                    }
                }
            }
            __m256i sp[8]; /* rows' (sc[2p], sc[2p+1]) as i16 pairs */
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++)
                sp[p] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(mb + 16 * (2 * p) + 8 * h)),
                                                               _mm_loadl_epi64((const __m128i *)(mb + 16 * (2 * p + 1) + 8 * h))));
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mb + 256 + 16 * h)));
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                int32_t bw[8]; /* the activation's (bs[2p], bs[2p+1]) pairs: its bsums as words */
                memcpy(bw, xb[t]->bsums, sizeof bw);
                __m256i off = _mm256_madd_epi16(sp[0], _mm256_set1_epi32(bw[0]));
#pragma GCC unroll 7
                for (int p = 1; p < 8; p++)
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(sp[p], _mm256_set1_epi32(bw[p])));
                const __m256i v = _mm256_sub_epi32(ai[t], _mm256_slli_epi32(off, 5));
                float *yt = y + t * ys + 8 * h;
                _mm256_storeu_ps(yt, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(d, _mm256_set1_ps(xb[t]->d)),
                                                     _mm256_loadu_ps(yt)));
            }
        }
    }
}

/* Decode, Q6_K: G x16q6 groups (gstride bytes apart) × one token. Per 16 values two i16 pair sums
 * of 2 maddubs each (2·2·63·128 < 2^15), madd by the int8 scale; the -32 offset once per super-block,
 * as Σ sc·bsum by madd of scale pairs: the same i32 sum as vec_dot, then d·da, in y. The 4
 * activation broadcasts of 16 values serve all G groups' halves (the broadcasts compete with the
 * shifts for the same ports), and a half's 4 weight vectors are built at a time. */
KT_INLINE void x16q6_micro_d(const uint8_t *Q0, const uint8_t *meta0, size_t gstride, const int G, int64_t nsb,
                             const uint8_t *x, float *y)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    x16_zero_y(y, 16, G); /* G groups side by side: a group is one "token" 16 floats on */
    for (int64_t b = 0; b < nsb; b++) {
        const cdx_block_q8_K *xb = (const cdx_block_q8_K *)x + b;
        __m256i ai[2][2];
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                ai[g][h] = _mm256_setzero_si256();
            const uint8_t *mb = meta0 + (size_t)g * gstride + (size_t)b * X16Q6_META;
            for (size_t o = 0; o < X16Q6_META; o += 64) /* the scales' own stream, 8 super-blocks ahead */
                _mm_prefetch((const char *)(mb + 8 * X16Q6_META + o), X16_PF_HINT);
        }
#pragma GCC unroll 1
        for (int sb = 0; sb < 8; sb++) {
#pragma GCC unroll 2
            for (int g = 0; g < G; g++)
                for (size_t o = 0; o < 384; o += 64)
                    _mm_prefetch((const char *)(Q0 + (size_t)g * gstride + (size_t)b * X16Q6_Q + 384 * sb + X16_PF_DEC + o),
                                 X16_PF_HINT);
#pragma GCC unroll 2
            for (int q = 0; q < 2; q++) { /* values 16q .. 16q+15: scale sc[2sb+q] */
                const int8_t *av = xb->qs + 32 * sb + 16 * q;
                const __m256i a0 = bcast4(av), a1 = bcast4(av + 4), a2 = bcast4(av + 8), a3 = bcast4(av + 12);
#pragma GCC unroll 2
                for (int g = 0; g < G; g++)
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        const uint8_t *lo = Q0 + (size_t)g * gstride + (size_t)b * X16Q6_Q + 384 * sb + 32 * h, *hi = lo + 256;
                        const uint8_t *mb = meta0 + (size_t)g * gstride + (size_t)b * X16Q6_META;
                        __m256i wv[4];
                        q6_values16(lo, hi, q, m4, m30, wv);
                        const __m256i sc = sc16_s8_half(mb + 32 * sb + 16 * q, h);
                        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[0], a0), _mm256_maddubs_epi16(wv[1], a1));
                        const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[2], a2), _mm256_maddubs_epi16(wv[3], a3));
                        ai[g][h] = _mm256_add_epi32(ai[g][h], _mm256_add_epi32(_mm256_madd_epi16(p0, sc), _mm256_madd_epi16(p1, sc)));
                        X16_KEEP(ai[g][h]);
                    }
            }
        }
        int32_t bw[8]; /* the activation's (bs[2p], bs[2p+1]) pairs: its bsums as words */
        memcpy(bw, xb->bsums, sizeof bw);
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            const uint8_t *mb = meta0 + (size_t)g * gstride + (size_t)b * X16Q6_META;
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i off = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int p = 0; p < 8; p++) { /* rows' (sc[2p], sc[2p+1]) as i16 pairs */
                    const __m256i sp = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(mb + 16 * (2 * p) + 8 * h)),
                                                                              _mm_loadl_epi64((const __m128i *)(mb + 16 * (2 * p + 1) + 8 * h))));
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(sp, _mm256_set1_epi32(bw[p])));
                }
                const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mb + 256 + 16 * h)));
                const __m256i v = _mm256_sub_epi32(ai[g][h], _mm256_slli_epi32(off, 5));
                float *yt = y + 16 * g + 8 * h;
                _mm256_storeu_ps(yt, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(d, _mm256_set1_ps(xb->d)),
                                                     _mm256_loadu_ps(yt)));
            }
        }
    }
}

/* Decode, Q4_K: G x16k groups (gstride bytes apart) × one token, the groups' streams interleaved
 * sub-block pair by sub-block pair so that each activation broadcast serves all G groups' halves
 * (the broadcasts compete with the shifts for the same ports). Per sub-block 8 maddubs in i16, then
 * madd by the row's scale (exact in i32, as vec_dot's sums); per super-block the mins term by madd
 * of (m, m') pairs against the activation's (bsum, bsum') pairs, then d·da and dmin·da, in y. */
KT_INLINE void x16k_micro_d(const uint8_t *Q0, const uint8_t *meta0, size_t gstride, const int G, int64_t nsb,
                            const uint8_t *x, float *y)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    x16_zero_y(y, 16, G); /* G groups side by side: a group is one "token" 16 floats on */
    for (int64_t b = 0; b < nsb; b++) {
        const cdx_block_q8_K *xb = (const cdx_block_q8_K *)x + b;
        __m256i ai[2][2];
#pragma GCC unroll 2
        for (int g = 0; g < G; g++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                ai[g][h] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int j = 0; j < 4; j++) { /* sub-blocks 2j (low nibbles) and 2j+1 (high) */
#pragma GCC unroll 2
            for (int g = 0; g < G; g++)
                for (size_t o = 0; o < 512; o += 64)
                    _mm_prefetch((const char *)(Q0 + (size_t)g * gstride + (size_t)b * X16K_Q + 512 * j + X16_PF_DEC + o),
                                 X16_PF_HINT);
            __m256i s[2][2][2]; /* [g][h][nibble], i16 */
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i alo = bcast4(xb->qs + 64 * j + 4 * k), ahi = bcast4(xb->qs + 64 * j + 32 + 4 * k);
#pragma GCC unroll 2
                for (int g = 0; g < G; g++)
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        const __m256i v = load32(Q0 + (size_t)g * gstride + (size_t)b * X16K_Q + 512 * j + 64 * k + 32 * h);
                        const __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(v, m4), alo);
                        const __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), ahi);
                        s[g][h][0] = k ? _mm256_add_epi16(s[g][h][0], p0) : p0;
                        s[g][h][1] = k ? _mm256_add_epi16(s[g][h][1], p1) : p1;
                        X16_KEEP(s[g][h][0]);
                        X16_KEEP(s[g][h][1]);
                    }
            }
#pragma GCC unroll 2
            for (int g = 0; g < G; g++) {
                const uint8_t *mb = meta0 + (size_t)g * gstride + (size_t)b * X16K_META;
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    const __m256i sc0 = sc16_u8_half(mb + 16 * (2 * j), h), sc1 = sc16_u8_half(mb + 16 * (2 * j + 1), h);
                    ai[g][h] = _mm256_add_epi32(ai[g][h], _mm256_add_epi32(_mm256_madd_epi16(s[g][h][0], sc0),
                                                                           _mm256_madd_epi16(s[g][h][1], sc1)));
                }
            }
        }
        int32_t bp[4]; /* (bs[4p] + bs[4p+1], bs[4p+2] + bs[4p+3]) i16 pairs */
        _mm_storeu_si128((__m128i *)bp, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb->bsums),
                                                      _mm_loadu_si128((const __m128i *)(xb->bsums + 8))));
        const __m256 dav = _mm256_set1_ps(xb->d);
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            const uint8_t *mb = meta0 + (size_t)g * gstride + (size_t)b * X16K_META;
            for (size_t o = 0; o < X16K_META; o += 64) /* the scales' own stream, 8 super-blocks ahead */
                _mm_prefetch((const char *)(mb + 8 * X16K_META + o), X16_PF_HINT);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i mi = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int p = 0; p < 4; p++) { /* rows' (m[2p], m[2p+1]) as i16 pairs */
                    const __m256i mp = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(mb + 128 + 16 * (2 * p) + 8 * h)),
                                                                              _mm_loadl_epi64((const __m128i *)(mb + 128 + 16 * (2 * p + 1) + 8 * h))));
                    mi = _mm256_add_epi32(mi, _mm256_madd_epi16(mp, _mm256_set1_epi32(bp[p])));
                }
                const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mb + 256 + 16 * h)));
                const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mb + 288 + 16 * h)));
                float *yt = y + 16 * g + 8 * h;
                __m256 acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[g][h]), _mm256_mul_ps(d, dav), _mm256_loadu_ps(yt));
                acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mi), _mm256_mul_ps(dmin, dav), acc);
                _mm256_storeu_ps(yt, acc);
            }
        }
    }
}

/* Prefill: one group at a time, half by half; decode: X16SB_DECODE_G groups (kern_x16_run.h calls
 * x16k_micro_g / x16q6_micro_g with TT = 1). */
#define x16k_micro(Q, meta, nsb, x, xrb, TT, y, ys, far) x16k_micro_p(Q, meta, nsb, x, xrb, TT, y, ys)
#define x16q6_micro(Q, meta, nsb, x, xrb, TT, y, ys, far) x16q6_micro_p(Q, meta, nsb, x, xrb, TT, y, ys)
#define x16k_micro_g(Q, meta, gstride, G, nsb, x, xrb, TT, y, ys) x16k_micro_d(Q, meta, gstride, G, nsb, x, y)
#define x16q6_micro_g(Q, meta, gstride, G, nsb, x, xrb, TT, y, ys) x16q6_micro_d(Q, meta, gstride, G, nsb, x, y)

#include "kernel/kern_x16_run.h"
