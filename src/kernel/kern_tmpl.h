/* The SIMD kernels, written once and compiled twice: kernels_avx2.c and kernels_avx512.c include
 * this file after defining the few primitives that differ between the two instruction sets.
 *
 * Required before inclusion:
 *   KT(name)                    a per-ISA name suffix (name##_avx2)
 *   RMAX, TMAX                  tile size: weight rows × activation rows per inner kernel
 *   DOT_US(acc, u, s)           acc (8×i32) += Σ of 4 adjacent u8·s8 products (no saturation)
 *   DOT_SC(acc, u, s, sc)       acc (8×i32) += Σ of 2 adjacent (u8·s8 pair sums) · i16 scales sc;
 *                               u ≤ 127 or u·|s| pair sums below 2^15 (true for every caller)
 *   VF, VF_N, vf_*              the widest float vector (F32/F16/BF16 rows)
 *
 * Every quantized kernel works on 32-value sub-blocks in 256-bit registers: one sub-block is one
 * ymm of bytes, so Q8_0/Q4_0/IQ4_NL blocks and the 32-value sub-blocks of K-quants share one shape.
 * A tile is RMAX weight rows × TMAX activation rows: each weight block is decoded once per tile and
 * used for TMAX activation rows, each activation block loaded once and used for RMAX weight rows.
 */
#include "kernel/kernel_impl.h"
#include "quant/quant_ref.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KT_INLINE static inline __attribute__((always_inline))

/* ---- small helpers ---- */

KT_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KT_INLINE int hsum8i(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

KT_INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* 16 packed bytes → 32 nibbles: low nibbles in bytes 0..15, high nibbles in bytes 16..31
 * (the Q4_0 / IQ4_NL / IQ4_XS order: value j and value j+16 share byte j). */
KT_INLINE __m256i nib32(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(w, _mm256_set1_epi8(0x0F));
}

KT_INLINE __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* The signed-weight product by sign transfer: |w| · (a with w's sign) = w · a, for w ≥ -127. */
KT_INLINE __m256i dot_signed(__m256i acc, __m256i w, __m256i a)
{
    return DOT_US(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

KT_INLINE __m256i dot_signed_sc(__m256i acc, __m256i w, __m256i a, __m256i sc)
{
    return DOT_SC(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w), sc);
}

/* ---- tiles over 32-value blocks paired with q8_0 activations (Q8_0, Q4_0, IQ4_NL) ---- */

/* One id per weight layout (distinct across the families: the prefill GEMM tests them all). */
enum { W_Q8_0, W_Q4_0, W_IQ4_NL, W_Q4_K, W_Q5_K, W_Q6_K, W_IQ4_XS, W_F32, W_F16, W_BF16 };

KT_INLINE void tile_b32(int kind, const uint8_t *w, size_t wrb, const int R, const uint8_t *x, size_t xrb,
                        const int T, int64_t nb, float *y, int64_t ys)
{
    const size_t wbb = kind == W_Q8_0 ? sizeof(cdx_block_q8_0) : sizeof(cdx_block_q4_0);
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl));
    __m256 acc[RMAX][TMAX];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wv[RMAX];
        float dw[RMAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + (size_t)r * wrb + (size_t)b * wbb;
            dw[r] = h2f(*(const uint16_t *)blk);
            if (kind == W_Q8_0)
                wv[r] = load32(blk + 2);
            else if (kind == W_Q4_0)
                wv[r] = nib32(blk + 2);
            else
                wv[r] = _mm256_shuffle_epi8(kv, nib32(blk + 2));
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const cdx_block_q8_0 *xb = (const cdx_block_q8_0 *)(x + (size_t)t * xrb) + b;
            const __m256i a = load32(xb->qs);
            const float da = h2f(xb->d);
            /* Q4_0 stores q+8 as an unsigned nibble: Σ(q-8)·a = Σ q·a - 8·Σa, and 8·Σa is
             * shared by every row of the tile */
            __m256i base = _mm256_setzero_si256();
            if (kind == W_Q4_0)
                base = _mm256_sub_epi32(base, DOT_US(_mm256_setzero_si256(), _mm256_set1_epi8(8), a));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256i s = kind == W_Q4_0 ? DOT_US(base, wv[r], a) : dot_signed(base, wv[r], a);
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[r] * da), acc[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            y[t * ys + r] = hsum8(acc[r][t]);
}

/* ---- tiles over 256-value super-blocks paired with q8_K activations ---- */

/* What a K-quant row contributes to one super-block, decoded once per tile: per 32-value sub-block
 * an i16 scale vector for DOT_SC, the super-block scales, and the i16 "mins" that multiply the
 * activation's 16 bsums (Q4_K/Q5_K: -dmin·m; Q6_K: the -32 offset; IQ4_XS: none). */
typedef struct {
    __m256i sc[8];   /* i16 lanes; Q6_K has two scales per sub-block (one per 128-bit lane) */
    __m256i mins;    /* i16 × 16, multiplies bsums[16] */
    float d, dmin;
} kprep;


KT_INLINE size_t kblock_bytes(int kind)
{
    return kind == W_Q4_K ? sizeof(cdx_block_q4_K)
         : kind == W_Q5_K ? sizeof(cdx_block_q5_K)
         : kind == W_Q6_K ? sizeof(cdx_block_q6_K) : sizeof(cdx_block_iq4_xs);
}

/* 6-bit scales and mins of Q4_K/Q5_K (12 bytes → 8 + 8), as ggml packs them. */
KT_INLINE void k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t m[8])
{
    uint32_t u[3];
    memcpy(u, q, 12);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    uint32_t s0 = u[0] & m6, s1 = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);
    uint32_t n0 = u[1] & m6, n1 = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
    memcpy(sc, &s0, 4); memcpy(sc + 4, &s1, 4);
    memcpy(m, &n0, 4); memcpy(m + 4, &n1, 4);
}

KT_INLINE __m256i bcast16(int v) { return _mm256_set1_epi16((short)v); }

KT_INLINE void kprep_row(int kind, const uint8_t *blk, kprep *p)
{
    if (kind == W_Q4_K || kind == W_Q5_K) {
        const cdx_block_q4_K *b = (const cdx_block_q4_K *)blk; /* Q5_K shares the head */
        uint8_t sc[8], m[8];
        k4_scales(b->scales, sc, m);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            p->sc[j] = bcast16(sc[j]);
        /* mins duplicated: bsums come per 16 values, mins per 32 */
        __m128i mm = _mm_loadl_epi64((const __m128i *)m);
        p->mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mm, mm));
        p->d = h2f(b->d);
        p->dmin = h2f(b->dmin);
    } else if (kind == W_Q6_K) {
        const cdx_block_q6_K *b = (const cdx_block_q6_K *)blk;
        /* sub-block j of 32 values uses scales 2j (first 16) and 2j+1 (last 16) */
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            p->sc[j] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(b->scales[2 * j])),
                                               _mm_set1_epi16(b->scales[2 * j + 1]), 1);
        /* Σ(q-32)·a = Σ q·a - 32·Σ_g sc_g·bsum_g */
        p->mins = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)), 5);
        p->d = h2f(b->d);
        p->dmin = 0;
    } else {
        const cdx_block_iq4_xs *b = (const cdx_block_iq4_xs *)blk;
        uint16_t h = b->scales_h;
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((h >> (2 * j)) & 3) << 4);
            p->sc[j] = bcast16(ls - 32);
        }
        p->mins = _mm256_setzero_si256();
        p->d = h2f(b->d);
        p->dmin = 0;
    }
}

/* The 32 weights of sub-block j (0..7) as bytes: unsigned for Q4_K/Q5_K/Q6_K, signed for IQ4_XS. */
KT_INLINE __m256i ksub(int kind, const uint8_t *blk, int j)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (kind == W_Q4_K) {
        const cdx_block_q4_K *b = (const cdx_block_q4_K *)blk;
        __m256i v = load32(b->qs + 32 * (j / 2));
        return _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, m4);
    }
    if (kind == W_Q5_K) {
        const cdx_block_q5_K *b = (const cdx_block_q5_K *)blk;
        __m256i v = load32(b->qs + 32 * (j / 2));
        v = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, m4);
        const __m256i bit = _mm256_set1_epi8((char)(1 << j));
        __m256i h = _mm256_cmpeq_epi8(_mm256_and_si256(load32(b->qh), bit), bit);
        return _mm256_or_si256(v, _mm256_and_si256(h, _mm256_set1_epi8(16)));
    }
    if (kind == W_Q6_K) {
        const cdx_block_q6_K *b = (const cdx_block_q6_K *)blk;
        const int n = j / 4, m = j % 4;
        __m256i l = load32(b->ql + 64 * n + 32 * (m & 1));
        l = _mm256_and_si256(m >> 1 ? _mm256_srli_epi16(l, 4) : l, m4);
        __m256i h = load32(b->qh + 32 * n);
        h = m == 0 ? _mm256_slli_epi16(h, 4) : m == 1 ? _mm256_slli_epi16(h, 2) : m == 2 ? h : _mm256_srli_epi16(h, 2);
        return _mm256_or_si256(l, _mm256_and_si256(h, _mm256_set1_epi8(0x30)));
    }
    const cdx_block_iq4_xs *b = (const cdx_block_iq4_xs *)blk;
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl));
    return _mm256_shuffle_epi8(kv, nib32(b->qs + 16 * j));
}

/* The float steps after a super-block's integer sums, as the scalar twins take them (quant_ref.h):
 * Q5_K and IQ4_XS as llama.cpp's x86 vec_dot (8 lanes, one fused multiply-add each by d·da; Q5_K's
 * mins as one exact integer into a float of their own), Q4_K and Q6_K as the 16-row layout
 * (kern_x16.h: one exact integer per super-block, one fused multiply-add). is: the 8 lanes of
 * Σ sc·w·a; mn: the lanes of the mins against the bsums (Q4_K/Q5_K: m·bsums, Q6_K: 32·sc·bsums). */
KT_INLINE void k_block_acc(int kind, __m256i is, __m256i mn, float d, float dmin, float da, __m256 *acc, float *accs)
{
    if (kind == W_Q5_K || kind == W_IQ4_XS) {
        *acc = _mm256_fmadd_ps(_mm256_set1_ps(da * d), _mm256_cvtepi32_ps(is), *acc);
        if (kind == W_Q5_K)
            *accs = fmaf(-da * dmin, (float)hsum8i(mn), *accs);
    } else if (kind == W_Q6_K) {
        *accs = fmaf((float)hsum8i(_mm256_sub_epi32(is, mn)), d * da, *accs);
    } else {
        *accs = fmaf((float)hsum8i(is), d * da, *accs);
        *accs = fmaf(-(float)hsum8i(mn), dmin * da, *accs);
    }
}

KT_INLINE float k_row_total(int kind, __m256 acc, float accs)
{
    return kind == W_Q5_K ? hsum8(acc) + accs : kind == W_IQ4_XS ? hsum8(acc) : accs;
}

KT_INLINE void tile_k(int kind, const uint8_t *w, size_t wrb, const int R, const uint8_t *x, size_t xrb,
                      const int T, int64_t nb, float *y, int64_t ys)
{
    const size_t wbb = kblock_bytes(kind);
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
        kprep p[RMAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            kprep_row(kind, w + (size_t)r * wrb + (size_t)b * wbb, &p[r]);
        __m256i is[RMAX][TMAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                is[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i wv[RMAX];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                wv[r] = ksub(kind, w + (size_t)r * wrb + (size_t)b * wbb, j);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
                const __m256i a = load32(xb->qs + 32 * j);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    is[r][t] = kind == W_IQ4_XS ? dot_signed_sc(is[r][t], wv[r], a, p[r].sc[j])
                                                : DOT_SC(is[r][t], wv[r], a, p[r].sc[j]);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(x + (size_t)t * xrb) + b;
            const __m256i bs = load32(xb->bsums);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                k_block_acc(kind, is[r][t], kind == W_IQ4_XS ? is[r][t] : _mm256_madd_epi16(bs, p[r].mins), p[r].d,
                            p[r].dmin, xb->d, &acc[r][t], &accs[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            y[t * ys + r] = k_row_total(kind, acc[r][t], accs[r][t]);
}

/* ---- tiles over F32 / F16 / BF16 rows with f32 activations ---- */


KT_INLINE VF vf_loadw(int kind, const uint8_t *row, int64_t c)
{
    if (kind == W_F32)
        return vf_load_f32((const float *)row + c);
    if (kind == W_F16)
        return vf_load_f16((const uint16_t *)row + c);
    return vf_load_bf16((const uint16_t *)row + c);
}

KT_INLINE float scalar_w(int kind, const uint8_t *row, int64_t c)
{
    if (kind == W_F32)
        return ((const float *)row)[c];
    if (kind == W_F16)
        return h2f(((const uint16_t *)row)[c]);
    return cdx_bf16_to_f32(((const uint16_t *)row)[c]);
}

/* Decode streams a tile's R rows once: while reading one, ask for the same place R rows on (the
 * next tile's row), a whole tile ahead, so the rows arrive in time for the hardware prefetchers'
 * short per-row streams (a large share of decode speed; bench/compare-llamacpp). Prefetches never
 * fault, so running past the matrix is harmless. */
KT_INLINE void prefetch_next_tile(const uint8_t *p, size_t ahead)
{
    _mm_prefetch((const char *)(p + ahead), _MM_HINT_T0);
}

KT_INLINE void tile_f(int kind, const uint8_t *w, size_t wrb, const int R, const uint8_t *x, size_t xrb,
                      const int T, int64_t cols, float *y, int64_t ys)
{
    VF acc[RMAX][TMAX];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = vf_zero();
    const int64_t cv = cols - cols % VF_N;
    for (int64_t c = 0; c < cv; c += VF_N) {
        VF wv[RMAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = vf_loadw(kind, w + (size_t)r * wrb, c);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            VF a = vf_load_f32((const float *)(x + (size_t)t * xrb) + c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = vf_fma(wv[r], a, acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            float s = vf_hsum(acc[r][t]);
            const float *xt = (const float *)(x + (size_t)t * xrb);
            for (int64_t c = cv; c < cols; c++)
                s += scalar_w(kind, w + (size_t)r * wrb, c) * xt[c];
            y[t * ys + r] = s;
        }
}

/* ---- decode (n = 1) over F32 / F16 / BF16 rows ----
 *
 * Each row is summed exactly as tile_f sums it (one VF_N-lane accumulator, one fused multiply-add
 * per column step in increasing order, vf_hsum, then the tail columns one by one), so its bits are
 * tile_f's and the GEMM's. A row's sum is one dependency chain, so the only parallelism is across
 * rows: FV_R rows at a time keep FV_R chains and FV_R memory streams in flight (tile_f's RMAX rows
 * leave the multiply-adds waiting on their latency). Per 64-byte line of each row the tile asks
 * for the same line FV_PF rows on (prefetch_next_tile): the rows after this tile, read next. */
#ifndef FV_R
#define FV_R 4
#endif
#ifndef FV_PF
#define FV_PF FV_R
#endif
#ifndef FV_DEC_R /* rows per fv_rows step (<= FV_R); the includer may read fewer streams at once */
#define FV_DEC_R FV_R
#endif
KT_INLINE void fv_tile(int kind, const uint8_t *w, size_t wrb, const int R, const float *x, int64_t cols, float *y)
{
    VF acc[FV_R];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        acc[r] = vf_zero();
    const int64_t cv = cols - cols % VF_N;
    const int64_t line = kind == W_F32 ? 16 : 32; /* columns per 64-byte line: a multiple of VF_N */
    const size_t ahead = (size_t)FV_PF * wrb;
    int64_t c = 0;
    for (; c + line <= cv; c += line) {
        const size_t o = (size_t)c * (kind == W_F32 ? 4 : 2);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            if (FV_PF)
                prefetch_next_tile(w + (size_t)r * wrb + o, ahead);
#pragma GCC unroll 4
        for (int64_t u = 0; u < line; u += VF_N) {
            VF wv[FV_R];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                wv[r] = vf_loadw(kind, w + (size_t)r * wrb, c + u);
            VF a = vf_load_f32(x + c + u);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                acc[r] = vf_fma(wv[r], a, acc[r]);
        }
    }
    for (; c < cv; c += VF_N) {
        VF wv[FV_R];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            wv[r] = vf_loadw(kind, w + (size_t)r * wrb, c);
        VF a = vf_load_f32(x + c);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[r] = vf_fma(wv[r], a, acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        float s = vf_hsum(acc[r]);
        for (int64_t k = cv; k < cols; k++)
            s += scalar_w(kind, w + (size_t)r * wrb, k) * x[k];
        y[r] = s;
    }
}

#define FV_TILE(kind, R)                                                                                 \
    static void KT(fv_tile_##kind##_##R)(const uint8_t *w, size_t wrb, const float *x, int64_t cols, float *y) \
    {                                                                                                    \
        fv_tile(kind, w, wrb, R, x, cols, y);                                                            \
    }
#define FV_TILES(kind) FV_TILE(kind, 1) FV_TILE(kind, 2) FV_TILE(kind, 3) FV_TILE(kind, 4)
#if FV_R != 4
#error "FV_R: 4"
#endif
typedef void (*fv_fn)(const uint8_t *w, size_t wrb, const float *x, int64_t cols, float *y);
FV_TILES(W_F32)
FV_TILES(W_F16)
FV_TILES(W_BF16)
static const fv_fn KT(fv_tab)[3][FV_R] = {
    { KT(fv_tile_W_F32_1), KT(fv_tile_W_F32_2), KT(fv_tile_W_F32_3), KT(fv_tile_W_F32_4) },
    { KT(fv_tile_W_F16_1), KT(fv_tile_W_F16_2), KT(fv_tile_W_F16_3), KT(fv_tile_W_F16_4) },
    { KT(fv_tile_W_BF16_1), KT(fv_tile_W_BF16_2), KT(fv_tile_W_BF16_3), KT(fv_tile_W_BF16_4) },
};

/* Rows [r0, r1) × one activation row into y[r]. */
KT_INLINE void fv_rows(int kind, const cdx_mat *w, int64_t r0, int64_t r1, const float *x, float *y)
{
    const fv_fn *tab = KT(fv_tab)[kind == W_F32 ? 0 : kind == W_F16 ? 1 : 2];
    const uint8_t *wb = w->data;
    for (int64_t r = r0; r < r1; r += FV_DEC_R) {
        const int rr = r1 - r < FV_DEC_R ? (int)(r1 - r) : FV_DEC_R;
        tab[rr - 1](wb + (size_t)r * w->row_bytes, w->row_bytes, x, w->cols, y + r);
    }
}

/* ---- the GEMM over F32 / F16 / BF16 rows with f32 activations (n >= CDX_GEMM_MIN_N) ----
 *
 * Every output is summed exactly as tile_f sums it, so a row's result has the same bits at n = 1
 * (tile_f) as inside any GEMM tile: VF_N lane accumulators, lane l taking the columns c ≡ l
 * (mod VF_N) below cv = cols - cols % VF_N in increasing order by one fused multiply-add each,
 * then vf_hsum, then the columns from cv on one by one (a product, then a sum). The GEMM only
 * changes what is reused from where:
 *   - the columns are walked in blocks of FG_KC (a multiple of VF_N, so lanes stay put); the
 *     accumulators are saved between blocks as vectors (no rounding there);
 *   - a panel of up to CDX_FGEMM_MAX_RP rows × one column block is converted to f32 once (F16/BF16:
 *     exact) into L2 and used for a panel of up to FG_TP tokens; where the includer sets
 *     FG_F16_DIRECT, F16 rows are read as they are instead, each vector converted as it is loaded
 *     (AVX2 on Zen 3: the conversion pass and its cold reads cost more than the conversions);
 *   - FG_T tokens × one column block stay in L1 while FG_R rows at a time stream past them, so each
 *     column step is FG_R weight loads and FG_T token loads for FG_R × FG_T fused multiply-adds.
 * Each token is read from memory once per row panel (not once per few rows, whatever the row
 * length). The includer sets FG_R × FG_T (register tile) and FG_KC (L1 block). */
#ifndef FG_R
#define FG_R 2
#endif
#ifndef FG_T
#define FG_T 6
#endif
#ifndef FG_KC
#define FG_KC 512
#endif
#define FG_TP (CDX_FGEMM_MAX_TP / FG_T * FG_T)
/* Rows of more than one column block reconvert their panel per block and token panel: below this
 * many tokens tile_f (no conversion) is faster there (bench-kernels: 2048 x 8192 F16 at n = 8).
 * F16 read directly converts nothing, so it takes the GEMM from CDX_GEMM_MIN_N (Zen 3, one
 * thread: 2048 x 8192 at n = 12 34-36 -> 48-51 GFLOP/s, 2048 x 2048 at n = 8 32-33 -> 37). */
#define FG_MIN_N_BLOCKED 16
#ifndef FG_F16_DIRECT /* 1: F16 rows read as they are (see above) */
#define FG_F16_DIRECT 0
#endif
#if FG_R > CDX_FGEMM_MAX_R || FG_T > CDX_FGEMM_MAX_T || VF_N > 16 || FG_KC % VF_N || CDX_FGEMM_MAX_RP % FG_R || \
    FG_KC > CDX_FGEMM_MAX_KC
#error "float GEMM tile outside the scratch bounds of kernel_impl.h"
#endif

/* R rows (f32, ws floats apart) × T tokens (xs floats apart), both from one column block's first
 * column: the block's kn vector columns, then, on the last block, the tail columns [kt0, kt1)
 * (relative to the same start) after vf_hsum, into y[t*ys + r]. acc_io: this tile's saved
 * accumulators ([R][FG_T]), read unless first, written unless last. */
KT_INLINE void fg_micro(const int kind, const uint8_t *w, size_t wrb, const int R, const float *x, int64_t xs,
                        const int T, int64_t kn, int first, int last, VF *acc_io, int64_t kt0, int64_t kt1, float *y,
                        int64_t ys)
{
    VF acc[FG_R][FG_T];
    if (first) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 12
            for (int t = 0; t < T; t++)
                acc[r][t] = vf_zero();
    } else {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 12
            for (int t = 0; t < T; t++)
                acc[r][t] = acc_io[r * FG_T + t];
    }
    for (int64_t c = 0; c < kn; c += VF_N) {
        VF wv[FG_R];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = vf_loadw(kind, w + (size_t)r * wrb, c);
#pragma GCC unroll 12
        for (int t = 0; t < T; t++) {
            VF a = vf_load_f32(x + t * xs + c);
            /* one load for the R rows: left alone, GCC folds it into each multiply-add (R loads) */
            __asm__("" : "+v"(a));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = vf_fma(wv[r], a, acc[r][t]);
        }
    }
    if (!last) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 12
            for (int t = 0; t < T; t++)
                acc_io[r * FG_T + t] = acc[r][t];
        return;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 12
        for (int t = 0; t < T; t++) {
            float s = vf_hsum(acc[r][t]);
            const float *xt = x + t * xs;
            for (int64_t c = kt0; c < kt1; c++)
                s += scalar_w(kind, w + (size_t)r * wrb, c) * xt[c];
            y[t * ys + r] = s;
        }
}

typedef void (*fg_fn)(const uint8_t *w, size_t wrb, const float *x, int64_t xs, int64_t kn, int first, int last,
                      VF *acc_io, int64_t kt0, int64_t kt1, float *y, int64_t ys);

/* fg_micro_R_T reads f32 rows (the converted panel, or F32 weights); fg_micro_h_R_T, where the
 * includer sets FG_F16_DIRECT, reads F16 rows as they are, converting each vector as it is loaded */
#define FG_MICRO_FN(P, kind, R, T)                                                                       \
    static void KT(fg_micro_##P##R##_##T)(const uint8_t *w, size_t wrb, const float *x, int64_t xs, int64_t kn, \
                                          int first, int last, VF *acc_io, int64_t kt0, int64_t kt1, float *y, \
                                          int64_t ys)                                                    \
    {                                                                                                    \
        fg_micro(kind, w, wrb, R, x, xs, T, kn, first, last, acc_io, kt0, kt1, y, ys);                   \
    }
#if FG_F16_DIRECT
#define FG_MICRO(R, T) FG_MICRO_FN(, W_F32, R, T) FG_MICRO_FN(h_, W_F16, R, T)
#else
#define FG_MICRO(R, T) FG_MICRO_FN(, W_F32, R, T)
#endif
#if FG_T == 6
#define FG_MICRO_T(R) FG_MICRO(R, 1) FG_MICRO(R, 2) FG_MICRO(R, 3) FG_MICRO(R, 4) FG_MICRO(R, 5) FG_MICRO(R, 6)
#define FG_ROW_T(P, R)                                                                                   \
    { KT(fg_micro_##P##R##_1), KT(fg_micro_##P##R##_2), KT(fg_micro_##P##R##_3), KT(fg_micro_##P##R##_4),    \
      KT(fg_micro_##P##R##_5), KT(fg_micro_##P##R##_6) }
#elif FG_T == 12
#define FG_MICRO_T(R)                                                                                    \
    FG_MICRO(R, 1) FG_MICRO(R, 2) FG_MICRO(R, 3) FG_MICRO(R, 4) FG_MICRO(R, 5) FG_MICRO(R, 6)            \
    FG_MICRO(R, 7) FG_MICRO(R, 8) FG_MICRO(R, 9) FG_MICRO(R, 10) FG_MICRO(R, 11) FG_MICRO(R, 12)
#define FG_ROW_T(P, R)                                                                                   \
    { KT(fg_micro_##P##R##_1), KT(fg_micro_##P##R##_2), KT(fg_micro_##P##R##_3), KT(fg_micro_##P##R##_4),    \
      KT(fg_micro_##P##R##_5), KT(fg_micro_##P##R##_6), KT(fg_micro_##P##R##_7), KT(fg_micro_##P##R##_8),    \
      KT(fg_micro_##P##R##_9), KT(fg_micro_##P##R##_10), KT(fg_micro_##P##R##_11), KT(fg_micro_##P##R##_12) }
#else
#error "FG_T: 6 or 12"
#endif
FG_MICRO_T(1)
FG_MICRO_T(2)
#if FG_R == 4
FG_MICRO_T(3)
FG_MICRO_T(4)
#elif FG_R != 2
#error "FG_R: 2 or 4"
#endif
/* [R-1][T-1] */
static const fg_fn KT(fg_tab)[FG_R][FG_T] = {
    FG_ROW_T(, 1), FG_ROW_T(, 2),
#if FG_R == 4
    FG_ROW_T(, 3), FG_ROW_T(, 4),
#endif
};
#if FG_F16_DIRECT
static const fg_fn KT(fg_tab_h)[FG_R][FG_T] = {
    FG_ROW_T(h_, 1), FG_ROW_T(h_, 2),
#if FG_R == 4
    FG_ROW_T(h_, 3), FG_ROW_T(h_, 4),
#endif
};
#endif

/* Rows [r0, r1) × n tokens (f32, cols apart) into y[t*w->rows + r]. scratch: this thread's
 * cdx_kernel_scratch_bytes(cols, n), 64-byte aligned. */
KT_INLINE void fg_rows(int kind, const cdx_mat *w, int64_t r0, int64_t r1, const float *x, int64_t n, float *y,
                       void *scratch)
{
    const int64_t cols = w->cols, cv = cols - cols % VF_N, ys = w->rows;
    /* converted slice: row stride in floats (a block and its tail, whole lines) */
    const int64_t kc = cv < FG_KC ? cv : FG_KC, ps = (kc + VF_N + 15) / 16 * 16;
    int64_t rp = (int64_t)(CDX_FGEMM_PANEL_BYTES / sizeof(float)) / ps;
    rp -= rp % FG_R;
    rp = rp < FG_R ? FG_R : rp > CDX_FGEMM_MAX_RP ? CDX_FGEMM_MAX_RP : rp;
    float *panel = scratch;
    VF *accs = (VF *)(void *)(((uintptr_t)(panel + (size_t)rp * (size_t)ps) + 63) & ~(uintptr_t)63);
    for (int64_t p0 = r0; p0 < r1; p0 += rp) {
        const int64_t p1 = p0 + rp < r1 ? p0 + rp : r1;
        /* one column block: no accumulators to keep, so all n tokens per conversion */
        const int64_t tp = cv <= FG_KC ? n : FG_TP;
        for (int64_t t0 = 0; t0 < n; t0 += tp) {
            const int64_t t1 = t0 + tp < n ? t0 + tp : n;
            for (int64_t k0 = 0;; k0 += FG_KC) {
                const int64_t k1 = k0 + FG_KC < cv ? k0 + FG_KC : cv;
                const int first = k0 == 0, last = k1 == cv;
                const int64_t ke = last ? cols : k1; /* columns of this block, with the tail on the last */
                const uint8_t *pw;
                size_t pws;
                const fg_fn(*tab)[FG_T] = KT(fg_tab);
                if (kind == W_F32 || (FG_F16_DIRECT && kind == W_F16)) {
                    pw = (const uint8_t *)w->data + (size_t)p0 * w->row_bytes + (size_t)k0 * (kind == W_F32 ? 4 : 2);
                    pws = w->row_bytes;
#if FG_F16_DIRECT
                    if (kind == W_F16)
                        tab = KT(fg_tab_h);
#endif
                } else {
                    for (int64_t r = p0; r < p1; r++) {
                        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
                        float *dst = panel + (size_t)(r - p0) * (size_t)ps - k0;
                        int64_t c = k0;
                        for (; c + VF_N <= ke; c += VF_N)
                            vf_store(dst + c, vf_loadw(kind, row, c));
                        for (; c < ke; c++)
                            dst[c] = scalar_w(kind, row, c);
                    }
                    pw = (const uint8_t *)panel;
                    pws = (size_t)ps * sizeof(float);
                }
                for (int64_t t = t0; t < t1; t += FG_T) {
                    const int tt = t1 - t < FG_T ? (int)(t1 - t) : FG_T;
                    const float *xt = x + (size_t)t * (size_t)cols + k0;
                    VF *acct = accs + (size_t)((t - t0) / FG_T) * (size_t)rp * FG_T;
                    for (int64_t r = p0; r < p1; r += FG_R) {
                        const int rr = p1 - r < FG_R ? (int)(p1 - r) : FG_R;
                        tab[rr - 1][tt - 1](pw + (size_t)(r - p0) * pws, pws, xt, cols, k1 - k0, first,
                                                   last, acct + (size_t)(r - p0) * FG_T, cv - k0, cols - k0,
                                                   y + t * ys + r, ys);
                    }
                }
                if (last)
                    break;
            }
        }
    }
}

/* ---- the tile tables and the tiling driver ---- */

#ifdef KT_WIDE_HEADER
#include KT_WIDE_HEADER /* wider tile families for this ISA */
#endif
#ifndef KT_FAM_B32
#define KT_FAM_B32 tile_b32
#endif
#ifndef KT_FAM_K
#define KT_FAM_K tile_k
#endif

typedef void (*tile_fn)(const uint8_t *w, size_t wrb, const uint8_t *x, size_t xrb, int64_t nb, float *y,
                        int64_t ys);

#define KT_TILE(fam, kind, R, T)                                                                         \
    static void KT(tile_##kind##_##R##_##T)(const uint8_t *w, size_t wrb, const uint8_t *x, size_t xrb,   \
                                            int64_t nb, float *y, int64_t ys)                            \
    {                                                                                                    \
        fam(kind, w, wrb, R, x, xrb, T, nb, y, ys);                                                      \
    }

#if RMAX == 4 && TMAX == 4
#define KT_TILES(fam, kind)                                                                              \
    KT_TILE(fam, kind, 1, 1) KT_TILE(fam, kind, 1, 2) KT_TILE(fam, kind, 1, 3) KT_TILE(fam, kind, 1, 4)  \
    KT_TILE(fam, kind, 2, 1) KT_TILE(fam, kind, 2, 2) KT_TILE(fam, kind, 2, 3) KT_TILE(fam, kind, 2, 4)  \
    KT_TILE(fam, kind, 3, 1) KT_TILE(fam, kind, 3, 2) KT_TILE(fam, kind, 3, 3) KT_TILE(fam, kind, 3, 4)  \
    KT_TILE(fam, kind, 4, 1) KT_TILE(fam, kind, 4, 2) KT_TILE(fam, kind, 4, 3) KT_TILE(fam, kind, 4, 4)  \
    static const tile_fn KT(tiles_##kind)[RMAX][TMAX] = {                                                \
        { KT(tile_##kind##_1_1), KT(tile_##kind##_1_2), KT(tile_##kind##_1_3), KT(tile_##kind##_1_4) },  \
        { KT(tile_##kind##_2_1), KT(tile_##kind##_2_2), KT(tile_##kind##_2_3), KT(tile_##kind##_2_4) },  \
        { KT(tile_##kind##_3_1), KT(tile_##kind##_3_2), KT(tile_##kind##_3_3), KT(tile_##kind##_3_4) },  \
        { KT(tile_##kind##_4_1), KT(tile_##kind##_4_2), KT(tile_##kind##_4_3), KT(tile_##kind##_4_4) },  \
    };
#elif RMAX == 4 && TMAX == 2
#define KT_TILES(fam, kind)                                                                              \
    KT_TILE(fam, kind, 1, 1) KT_TILE(fam, kind, 1, 2) KT_TILE(fam, kind, 2, 1) KT_TILE(fam, kind, 2, 2)  \
    KT_TILE(fam, kind, 3, 1) KT_TILE(fam, kind, 3, 2) KT_TILE(fam, kind, 4, 1) KT_TILE(fam, kind, 4, 2)  \
    static const tile_fn KT(tiles_##kind)[RMAX][TMAX] = {                                                \
        { KT(tile_##kind##_1_1), KT(tile_##kind##_1_2) }, { KT(tile_##kind##_2_1), KT(tile_##kind##_2_2) }, \
        { KT(tile_##kind##_3_1), KT(tile_##kind##_3_2) }, { KT(tile_##kind##_4_1), KT(tile_##kind##_4_2) }, \
    };
#elif RMAX == 2 && TMAX == 2
#define KT_TILES(fam, kind)                                                                              \
    KT_TILE(fam, kind, 1, 1) KT_TILE(fam, kind, 1, 2) KT_TILE(fam, kind, 2, 1) KT_TILE(fam, kind, 2, 2)  \
    static const tile_fn KT(tiles_##kind)[RMAX][TMAX] = {                                                \
        { KT(tile_##kind##_1_1), KT(tile_##kind##_1_2) }, { KT(tile_##kind##_2_1), KT(tile_##kind##_2_2) }, \
    };
#else
#error "unsupported RMAX x TMAX"
#endif

KT_TILES(KT_FAM_B32, W_Q8_0)
KT_TILES(KT_FAM_B32, W_Q4_0)
KT_TILES(KT_FAM_B32, W_IQ4_NL)
KT_TILES(KT_FAM_K, W_Q4_K)
KT_TILES(KT_FAM_K, W_Q5_K)
KT_TILES(KT_FAM_K, W_Q6_K)
KT_TILES(KT_FAM_K, W_IQ4_XS)
KT_TILES(tile_f, W_F32)
KT_TILES(tile_f, W_F16)
KT_TILES(tile_f, W_BF16)

/* Rows [r0, r1) × all n activation rows. Activations are cut into panels that stay in L2 (about
 * 256 KiB); within a panel, RMAX weight rows are read from memory once and reused from L1 for
 * every group of TMAX activation rows. For n = 1 this is a plain matvec, RMAX rows at a time. */
static void KT(drive)(const tile_fn tab[RMAX][TMAX], const cdx_mat *w, int64_t r0, int64_t r1, const uint8_t *x,
                      size_t xrb, int64_t n, float *y, int64_t nb)
{
    int64_t panel = (int64_t)((256u << 10) / (xrb ? xrb : 1));
    panel = panel < TMAX ? TMAX : panel - panel % TMAX;
    const uint8_t *wb = w->data;
    for (int64_t t0 = 0; t0 < n; t0 += panel) {
        const int64_t t1 = t0 + panel < n ? t0 + panel : n;
        for (int64_t r = r0; r < r1; r += RMAX) {
            const int rr = r1 - r < RMAX ? (int)(r1 - r) : RMAX;
            for (int64_t t = t0; t < t1; t += TMAX) {
                const int tt = t1 - t < TMAX ? (int)(t1 - t) : TMAX;
                tab[rr - 1][tt - 1](wb + (size_t)r * w->row_bytes, w->row_bytes, x + (size_t)t * xrb, xrb, nb,
                                    y + t * w->rows + r, w->rows);
            }
        }
    }
}

#ifndef KT_GEMM
#define KT_GEMM(kind, w, r0, r1, xq, xrb, n, y, scratch) false
#endif
#ifndef KT_FTILES /* float tiles over prepared planes (ftile_act): the tokens done */
#define KT_FTILES(kind, w, r0, r1, xq, n, y, scratch) ((void)(xq), (int64_t)0)
#endif
#ifndef KT_PACKED
#define KT_PACKED(kind, w, r0, r1, xq, xrb, n, y, scratch) false
#endif
#define KT_ROWS_Q(kind, blk)                                                                             \
    static void KT(rows_##kind)(const cdx_mat *w, int64_t r0, int64_t r1, const float *x, const void *xq, \
                                size_t xrb, int64_t n, float *y, void *scratch)                          \
    {                                                                                                    \
        (void)x;                                                                                         \
        if (KT_PACKED(kind, w, r0, r1, xq, xrb, n, y, scratch))                                          \
            return;                                                                                      \
        if (n >= CDX_GEMM_MIN_N && KT_GEMM(kind, w, r0, r1, xq, xrb, n, y, scratch))                     \
            return;                                                                                      \
        KT(drive)(KT(tiles_##kind), w, r0, r1, xq, xrb, n, y, w->cols / (blk));                          \
    }
#define KT_ROWS_F(kind)                                                                                  \
    static void KT(rows_##kind)(const cdx_mat *w, int64_t r0, int64_t r1, const float *x, const void *xq, \
                                size_t xrb, int64_t n, float *y, void *scratch)                          \
    {                                                                                                    \
        if (xq && !xrb && scratch) { /* the bf16 planes of whole token tiles (ftile_act) */           \
            const int64_t done_ = KT_FTILES(kind, w, r0, r1, xq, n, y, scratch);                         \
            x += done_ * w->cols;                                                                        \
            y += done_ * w->rows;                                                                        \
            n -= done_;                                                                                  \
            if (n == 0)                                                                                  \
                return;                                                                                  \
        }                                                                                                \
        if (n == 1) {                                                                                    \
            fv_rows(kind, w, r0, r1, x, y);                                                              \
            return;                                                                                      \
        }                                                                                                \
        if (n >= (w->cols - w->cols % VF_N > FG_KC && !(FG_F16_DIRECT && kind == W_F16) ? FG_MIN_N_BLOCKED : CDX_GEMM_MIN_N) && scratch) {     \
            fg_rows(kind, w, r0, r1, x, n, y, scratch);                                                  \
            return;                                                                                      \
        }                                                                                                \
        KT(drive)(KT(tiles_##kind), w, r0, r1, (const uint8_t *)x, (size_t)w->cols * sizeof(float), n, y, \
                  w->cols);                                                                              \
    }

KT_ROWS_Q(W_Q8_0, 32)
KT_ROWS_Q(W_Q4_0, 32)
KT_ROWS_Q(W_IQ4_NL, 32)
KT_ROWS_Q(W_Q4_K, 256)
KT_ROWS_Q(W_Q5_K, 256)
KT_ROWS_Q(W_Q6_K, 256)
KT_ROWS_Q(W_IQ4_XS, 256)
KT_ROWS_F(W_F32)
KT_ROWS_F(W_F16)
KT_ROWS_F(W_BF16)

/* ---- activation quantizers, byte-identical to the scalar references ---- */

KT_INLINE float hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 4 × 8 int32 (each in -128..127) → 32 int8 in order. */
KT_INLINE __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i v = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One 32-value block the way ggml-cpu's quantize_row_q8_0 / q8_1 do it at run time (the scalar twin
 * is cdx_q8_0_from_f32_act): d = amax/127, q = x·(127/amax) rounded half to even. Returns Σq; *dout
 * gets d. */
KT_INLINE int q8_block32(const float *x, int8_t *qs, float *dout)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    }
    const float amax = hmax8(m);
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    __m256i q[4];
    for (int i = 0; i < 4; i++)
        q[i] = _mm256_cvttps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], _mm256_set1_ps(id)),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_si256((__m256i *)qs, pack32(q[0], q[1], q[2], q[3]));
    *dout = d;
    return hsum8i(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
}

static void KT(quantize_q8_0)(const float *x, void *out, int64_t n)
{
    cdx_block_q8_0 *y = out;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        q8_block32(x + 32 * i, y[i].qs, &d);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

static void KT(quantize_q8_1)(const float *x, void *out, int64_t n)
{
    cdx_block_q8_1 *y = out;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        int sum = q8_block32(x + 32 * i, y[i].qs, &d);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        y[i].s = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* quantize_row_q8_K_ref: the scale comes from the first value of largest magnitude, with its
 * sign (iscale = -127/max), and q = nearest_int(iscale·x) capped at 127. */
static void KT(quantize_q8_K)(const float *x, void *out, int64_t n)
{
    cdx_block_q8_K *y = out;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++)
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax8(m);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const __m256 am = _mm256_set1_ps(amax);
        float max = 0;
        for (int k = 0; k < 32; k++) {
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), am,
                                                        _CMP_EQ_OQ));
            if (mask) {
                max = x[8 * k + __builtin_ctz((unsigned)mask)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i cap = _mm256_set1_epi32(127);
        for (int g = 0; g < 8; g++) { /* 32 values per step, two bsums each */
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * g + 8 * k))), cap);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * g), pack32(q[0], q[1], q[2], q[3]));
            y[i].bsums[2 * g] = (int16_t)hsum8i(_mm256_add_epi32(q[0], q[1]));
            y[i].bsums[2 * g + 1] = (int16_t)hsum8i(_mm256_add_epi32(q[2], q[3]));
        }
        y[i].d = 1 / iscale;
    }
}

/* ---- f32 vector primitives (norms, softmax, attention) ---- */

static float KT(vdot)(const float *a, const float *b, int64_t n)
{
    VF s0 = vf_zero(), s1 = vf_zero();
    int64_t i = 0;
    for (; i + 2 * VF_N <= n; i += 2 * VF_N) {
        s0 = vf_fma(vf_load_f32(a + i), vf_load_f32(b + i), s0);
        s1 = vf_fma(vf_load_f32(a + i + VF_N), vf_load_f32(b + i + VF_N), s1);
    }
    for (; i + VF_N <= n; i += VF_N)
        s0 = vf_fma(vf_load_f32(a + i), vf_load_f32(b + i), s0);
    float s = vf_hsum(vf_add(s0, s1));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void KT(vaxpy)(float *y, float a, const float *x, int64_t n)
{
    const VF av = vf_set1(a);
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N)
        vf_store(y + i, vf_fma(av, vf_load_f32(x + i), vf_load_f32(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

static void KT(vscale)(float *y, float a, int64_t n)
{
    const VF av = vf_set1(a);
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N)
        vf_store(y + i, vf_mul(av, vf_load_f32(y + i)));
    for (; i < n; i++)
        y[i] *= a;
}

static float KT(vmax)(const float *x, int64_t n)
{
    VF m = vf_set1(-INFINITY);
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N)
        m = vf_max(m, vf_load_f32(x + i));
    float r = vf_hmax(m);
    for (; i < n; i++)
        r = x[i] > r ? x[i] : r;
    return r;
}

/* x = expf(x - sub) with the C library's bits (vf_expf, or expf itself for a vector with a lane of
 * its slow path), then the sum in this set's lane order. */
static float KT(vexp_sum)(float *x, float sub, int64_t n)
{
    int64_t k = 0;
    for (; k + VF_N <= n; k += VF_N) {
        VF e;
        if (vf_expf(vf_add(vf_load_f32(x + k), vf_set1(-sub)), &e))
            vf_store(x + k, e);
        else
            for (int64_t j = k; j < k + VF_N; j++)
                x[j] = expf(x[j] - sub);
    }
    for (; k < n; k++)
        x[k] = expf(x[k] - sub);
    VF s = vf_zero();
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N)
        s = vf_add(s, vf_load_f32(x + i));
    float r = vf_hsum(s);
    for (; i < n; i++)
        r += x[i];
    return r;
}

/* g = g / (1 + expf(-g)) · u (SiLU(g)·u) with expf's bits: vf_expf repeats the C library's steps
 * lane by lane (kern_expf.h); a vector with a lane that expf takes its slow path for (|g| >= 88,
 * nan), and the tail, go through the scalar twin itself. */
static void KT(vsilu_mul)(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N) {
        const VF x = vf_load_f32(g + i);
        VF e;
        if (vf_expf(vf_neg(x), &e))
            vf_store(g + i, vf_mul(vf_div(x, vf_add(vf_set1(1.0f), e)), vf_load_f32(u + i)));
        else
            cdx_vec_scalar.silu_mul(g + i, u + i, VF_N);
    }
    cdx_vec_scalar.silu_mul(g + i, u + i, n - i);
}

/* x = x / (1 + expf(-x)) (SiLU alone), as KT(vsilu_mul) computes it without the factor. */
static void KT(vsilu)(float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N) {
        const VF v = vf_load_f32(x + i);
        VF e;
        if (vf_expf(vf_neg(v), &e))
            vf_store(x + i, vf_div(v, vf_add(vf_set1(1.0f), e)));
        else
            cdx_vec_scalar.silu(x + i, VF_N);
    }
    cdx_vec_scalar.silu(x + i, n - i);
}

/* x = erf(x) with the scalar twin's bits (kern_erf.h: vf_erf repeats cdx_erf_ref lane by lane,
 * special lanes included); the tail goes through the twin itself. */
static void KT(verf)(float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N)
        vf_store(x + i, vf_erf(vf_load_f32(x + i)));
    cdx_vec_scalar.erf(x + i, n - i);
}

/* x = x · 0.5 · (1 + erf(x / √2)) (the exact GELU) as cdx_gelu_ref computes it, lane by lane. */
static void KT(vgelu)(float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N) {
        const VF v = vf_load_f32(x + i);
        const VF e = vf_erf(vf_mul(v, vf_set1(CDX_GELU_RSQRT2)));
        vf_store(x + i, vf_mul(vf_mul(v, vf_set1(0.5f)), vf_add(vf_set1(1.0f), e)));
    }
    cdx_vec_scalar.gelu(x + i, n - i);
}

/* max + log Σ expf(x - max) in cdx_logsumexp's order (kernel_impl.h: 16 lanes, then a fixed tree),
 * so the same bits as the scalar twin: the terms with expf's bits (vf_expf, or expf itself for a
 * vector with a lane of its slow path: far below the max, nan), each chunk of 16 converted to double
 * and added lane by lane (AVX2: four vectors of 4 doubles, AVX-512: two of 8), the tail by
 * cdx_lse_finish. One pass of expf over the row; 0.055 ms for 128,256 logits on AVX-512. */
#define LSE_VECS (CDX_LSE_LANES / VF_N) /* float vectors in a chunk: 2 (AVX2) or 1 (AVX-512) */
static double KT(vlse)(const float *x, int64_t n)
{
    const float mx = KT(vmax)(x, n);
    VD acc[2 * LSE_VECS];
    for (int j = 0; j < 2 * LSE_VECS; j++)
        acc[j] = vd_zero();
    const VF neg = vf_set1(-mx);
    int64_t i = 0;
    for (; i + CDX_LSE_LANES <= n; i += CDX_LSE_LANES)
        for (int h = 0; h < LSE_VECS; h++) {
            const float *p = x + i + h * VF_N;
            VF e;
            if (!vf_expf(vf_add(vf_load_f32(p), neg), &e)) {
                float t[VF_N];
                for (int j = 0; j < VF_N; j++)
                    t[j] = expf(p[j] - mx);
                e = vf_load_f32(t);
            }
            vd_acc2(acc + 2 * h, e);
        }
    double lane[CDX_LSE_LANES];
    for (int j = 0; j < 2 * LSE_VECS; j++)
        vd_store(lane + j * (VF_N / 2), acc[j]);
    return cdx_lse_finish(lane, x + i, n - i, mx);
}

/* y = x rounded to f16 (f16 != 0) or bf16 and back, each value on its own: the activations of an
 * F16 / BF16 matrix as ggml converts them (cdx_mat.act_half); the scalar twin is round_half_ref. */
static void KT(vround_half)(const float *x, float *y, int64_t n, int f16)
{
    int64_t i = 0;
    if (f16)
        for (; i + VF_N <= n; i += VF_N)
            vf_store(y + i, vf_round_f16(vf_load_f32(x + i)));
    else
        for (; i + VF_N <= n; i += VF_N)
            vf_store(y + i, vf_round_bf16(vf_load_f32(x + i)));
    for (; i < n; i++)
        y[i] = f16 ? cdx_f16_to_f32(cdx_f32_to_f16(x[i])) : cdx_bf16_round(x[i]);
}

/* y = x as f16 (f16 != 0) or bf16 values, each rounded on its own (a K/V row into an F16 / BF16 cache);
 * the scalar twin is to_half_ref: cdx_f32_to_f16 / cdx_f32_to_bf16. */
static void KT(vto_half)(const float *x, uint16_t *y, int64_t n, int f16)
{
    int64_t i = 0;
    if (f16)
        for (; i + VF_N <= n; i += VF_N)
            vh_store_f16(y + i, vf_load_f32(x + i));
    else
        for (; i + VF_N <= n; i += VF_N)
            vh_store_bf16(y + i, vf_round_bf16(vf_load_f32(x + i)));
    for (; i < n; i++)
        y[i] = f16 ? cdx_f32_to_f16(x[i]) : cdx_f32_to_bf16(x[i]);
}

/* ---- f32 attention rows (attn.c's attn_heads, fused) ----
 *
 * Query rows × one KV head's `group` query heads over an F32 cache, each row with exactly the
 * operations attn.c's attn_heads performs for it through this set's primitives (vdot, vmax,
 * vexp_sum, vscale, vaxpy), in the same order (rows that share their keys walk the key blocks
 * together, ka_rows): a row's output has the same bits either way, so attn_heads with this set's
 * cdx_vec_ops is this kernel's oracle (tests/kernel/test_attn.c) and cdx_vec_scalar their twin.
 * What changes is the overhead: q (and the accumulator) stay in registers over a block of keys,
 * no call per key, eight (AVX2) or sixteen (AVX-512) keys' lane sums are reduced together by the
 * set's own vf_hsum tree (hsum8x8, hsum16x16), and V is accumulated for several heads at once.
 * Taken when head_dim is a multiple of VF_N and at most 8·VF_N (AVX2 also 80, 96 and 128); false
 * otherwise (attn.c then runs attn_heads). */
#define KA_BLOCK 64 /* attn.c's ATTN_BLOCK */
/* Vectors per head at most: 128 dimensions (Qwen3's, Llama-3-8B's) on both sets */
#define KA_MAXV (VF_N == 8 ? 16 : 8)

#if VF_N == 8
/* hsum8 of v[0..7] into one vector (lane j: hsum8(v[j])), by hsum8's additions: (lo + hi), then
 * lanes (0 + 2, 1 + 3), then (0 + 1). */
KT_INLINE __m256 hsum8x8(const __m256 *v)
{
    __m256 s[4], u[2];
    for (int j = 0; j < 4; j++)
        s[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x31));
    for (int j = 0; j < 2; j++)
        u[j] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * j], s[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(s[2 * j], s[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

#if VF_N == 16
/* _mm512_reduce_add_ps of v[0..15] into one vector (lane j: that of v[j]), by its additions: lanes
 * (l + l+8), then (l + l+4), then (0 + 2, 1 + 3), then (0 + 1) (GCC's __MM512_REDUCE_OP). */
KT_INLINE __m512 hsum16x16(const __m512 *v)
{
    __m512 x[8], y[4], z[2];
    for (int m = 0; m < 8; m++) /* keys 2m, 2m+1: 8 lanes each */
        x[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int n = 0; n < 4; n++) /* keys 4n..4n+3: 4 lanes each, key 4n+k in 128-bit lane k */
        y[n] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * n], x[2 * n + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(x[2 * n], x[2 * n + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int p = 0; p < 2; p++) /* 2 lanes each: in 128-bit lane k, keys 8p+k and 8p+4+k */
        z[p] = _mm512_add_ps(_mm512_shuffle_ps(y[2 * p], y[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(y[2 * p], y[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* element e of 128-bit lane k: key 4e + k */
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}
#endif

/* The f32 K and V rows of KV head g at positions p0..p0+n-1 through the block tables r->k, r->v:
 * one division for the block, then a step at a time (a division per key cost more than its
 * multiply-adds). */
KT_INLINE void ka_rows_of(const cdx_attn_shape *s, const cdx_attn_row *r, int g, int64_t p0, int n, const float **kr,
                          const float **vr)
{
    int64_t b = p0 / s->block, o = p0 % s->block;
    const size_t base = r->off + (size_t)g * s->head_dim;
    for (int i = 0; i < n; i++) {
        kr[i] = (const float *)r->k[b] + base + (size_t)o * s->kv_stride;
        vr[i] = (const float *)r->v[b] + base + (size_t)o * s->kv_stride;
        if (++o == s->block) {
            o = 0;
            b++;
        }
    }
}

/* One key's lane sums of vdot(q, k), as KT(vdot) forms them: even vectors into s0, odd into s1. */
KT_INLINE VF ka_key_lanes(const VF *qv, const int nq, const float *kp)
{
    VF s0 = vf_zero(), s1 = vf_zero();
#pragma GCC unroll 16
    for (int c = 0; c < nq; c++) {
        if (c % 2 == 0)
            s0 = vf_fma(qv[c], vf_load_f32(kp + c * VF_N), s0);
        else
            s1 = vf_fma(qv[c], vf_load_f32(kp + c * VF_N), s1);
    }
    return vf_add(s0, s1);
}

/* The same for NK keys at once (kp[0..NK-1]): each key's two chains are formed as above, but the
 * 2·NK chains run side by side, so the multiply-adds do not wait on one key's latency (one key
 * at a time kept about two in flight). */
#define KA_KEYS (VF_N == 8 ? 4 : 8) /* keys a pass: 2·KA_KEYS sums and q's vector fit the registers */
KT_INLINE void ka_keys_lanes(const VF *qv, const int nq, const float *const *kp, VF *d)
{
    VF s0[KA_KEYS], s1[KA_KEYS];
#pragma GCC unroll 8
    for (int j = 0; j < KA_KEYS; j++)
        s0[j] = s1[j] = vf_zero();
#pragma GCC unroll 16
    for (int c = 0; c < nq; c++) {
        const VF qc = qv[c];
#pragma GCC unroll 8
        for (int j = 0; j < KA_KEYS; j++) {
            if (c % 2 == 0)
                s0[j] = vf_fma(qc, vf_load_f32(kp[j] + c * VF_N), s0[j]);
            else
                s1[j] = vf_fma(qc, vf_load_f32(kp[j] + c * VF_N), s1[j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < KA_KEYS; j++)
        d[j] = vf_add(s0[j], s1[j]);
}

/* sc[i] = vdot(q, k_i) · scale for the nb keys from position p0, as KT(vdot) sums: even vectors of
 * the head into s0, odd ones into s1, then vf_hsum(s0 + s1). */
KT_INLINE void ka_scores(const float *q, const int nq, const cdx_attn_shape *s, const float *const *kr, int nb,
                         float *sc)
{
    VF qv[KA_MAXV];
#pragma GCC unroll 16
    for (int c = 0; c < nq; c++)
        qv[c] = vf_load_f32(q + c * VF_N);
    int i = 0;
#if VF_N == 8
    for (; i + 8 <= nb; i += 8) {
        __m256 d[8];
        const float *const *kp = kr + i;
        ka_keys_lanes(qv, nq, kp, d);
        ka_keys_lanes(qv, nq, kp + KA_KEYS, d + KA_KEYS);
        _mm256_storeu_ps(sc + i, _mm256_mul_ps(hsum8x8(d), _mm256_set1_ps(s->scale)));
    }
#elif VF_N == 16
    for (; i + 16 <= nb; i += 16) {
        __m512 d[16];
        const float *const *kp = kr + i;
        ka_keys_lanes(qv, nq, kp, d);
        ka_keys_lanes(qv, nq, kp + KA_KEYS, d + KA_KEYS);
        _mm512_storeu_ps(sc + i, _mm512_mul_ps(hsum16x16(d), _mm512_set1_ps(s->scale)));
    }
#endif
    for (; i < nb; i++) {
        sc[i] = vf_hsum(ka_key_lanes(qv, nq, kr[i])) * s->scale;
    }
}

/* acc[h] += Σ_i sc[h][i] · v_i in key order for nh heads of the group at once, as nb calls of
 * KT(vaxpy) per head would (acc in registers meanwhile, KA_CV vectors of a head at a time:
 * each lane's chain of multiply-adds is the same either way, so are its bits). Each V row is
 * loaded once for all nh heads, and their nh x nc chains run side by side: one head's nc chains
 * alone wait on the multiply-add's latency (AVX-512 at head_dim 64 has 4). */
#define KA_CHAINS (VF_N == 16 ? 16 : 8) /* accumulators in flight: half the vector registers */
#define KA_VMAX (VF_N == 16 ? 8 : 4)     /* vectors of a head per pass */
#define KA_CV(nq) ((nq) < KA_VMAX ? (nq) : KA_VMAX)
#define KA_HP(nq) (KA_CHAINS / KA_CV(nq) < 4 ? KA_CHAINS / KA_CV(nq) : 4) /* heads per pass */
KT_INLINE void ka_values_heads(float (*acc)[KA_MAXV * VF_N], const int nq, const int nh, const float *const *vr,
                               int nb, float (*sc)[KA_BLOCK])
{
#pragma GCC unroll 4
    for (int c0 = 0; c0 < nq; c0 += KA_CV(nq)) {
        const int nc = nq - c0 < KA_CV(nq) ? nq - c0 : KA_CV(nq);
        VF a[4][KA_VMAX];
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++)
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++)
                a[h][c] = vf_load_f32(acc[h] + (c0 + c) * VF_N);
        for (int i = 0; i < nb; i++) {
            const float *vp = vr[i] + c0 * VF_N;
            VF v[KA_VMAX];
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++)
                v[c] = vf_load_f32(vp + c * VF_N);
#pragma GCC unroll 4
            for (int h = 0; h < nh; h++) {
                const VF w = vf_set1(sc[h][i]);
#pragma GCC unroll 8
                for (int c = 0; c < nc; c++)
                    a[h][c] = vf_fma(w, v[c], a[h][c]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++)
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++)
                vf_store(acc[h] + (c0 + c) * VF_N, a[h][c]);
    }
}

/* One block of keys from p0 for one row's `group` heads: scores, the running max (rescaling what was
 * accumulated), the exp sum, then V. The row's state between blocks: acc, mx, sum per head. */
KT_INLINE void ka_block(const int nq, const cdx_attn_shape *s, const cdx_attn_row *r, int h0, int group, int64_t p0,
                        const float *const *kr, const float *const *vr, float (*acc)[KA_MAXV * VF_N], float *mx,
                        float *sum, float (*sc)[KA_BLOCK])
{
    const int hd = s->head_dim;
    const int nb = r->hi - p0 + 1 < KA_BLOCK ? (int)(r->hi - p0 + 1) : KA_BLOCK;
    for (int h = 0; h < group; h++) {
        ka_scores(r->q + (size_t)(h0 + h) * hd, nq, s, kr, nb, sc[h]);
        float bm = KT(vmax)(sc[h], nb);
        if (bm > mx[h]) {
            float corr = expf(mx[h] - bm);
            sum[h] *= corr;
            KT(vscale)(acc[h], corr, hd);
            mx[h] = bm;
        }
        sum[h] += KT(vexp_sum)(sc[h], mx[h], nb);
    }
    const int hp = KA_HP(nq);
    int h = 0;
    for (; h + hp <= group; h += hp)
        ka_values_heads(acc + h, nq, hp, vr, nb, sc + h);
    for (; h < group; h++)
        ka_values_heads(acc + h, nq, 1, vr, nb, sc + h);
}

/* nr rows sharing their cache and first position (lo) walk the key blocks together, up to KA_TILE
 * rows (fewer for groups above 2 heads: KA_STATES states at most) at a time: a block of K and V
 * is read from memory once for all of them and from cache for the rest, where one row at a time
 * streamed the whole history again for every row. Each row still takes its blocks in order
 * through ka_block, its state its own: its bits are those of the row alone. 64 rows, not 8: at
 * 4,096 positions the f16 rows of 8 spent a third of their time waiting for K and V (Qwen3-0.6B
 * Q8_0 prefill 170 -> 205 tok/s, bench/README.md "Long contexts"). */
#define KA_TILE 64    /* rows a pass at most (cdx_attn deals tiles of ATTN_TILE = 64 rows) */
#define KA_STATES 128 /* (row, head) states a pass holds: 64 rows of 2 heads, 32 of 4, 4 rows of 32 */
KT_INLINE void ka_rows(const int nq, const cdx_attn_shape *s, const cdx_attn_row *r, int nr, int g, int h0, int group)
{
    const int hd = s->head_dim;
    float acc[KA_STATES][KA_MAXV * VF_N] __attribute__((aligned(64)));
    float sc[32][KA_BLOCK];
    float mx[KA_STATES], sum[KA_STATES];
    const int per = KA_STATES / group < KA_TILE ? KA_STATES / group : KA_TILE;
    for (int i0 = 0; i0 < nr; i0 += per) {
        const int m = nr - i0 < per ? nr - i0 : per;
        int64_t hi = r[i0].hi;
        for (int i = 0; i < m; i++) {
            hi = r[i0 + i].hi > hi ? r[i0 + i].hi : hi;
            for (int h = i * group; h < (i + 1) * group; h++) {
                mx[h] = -INFINITY;
                sum[h] = 0;
                for (int d = 0; d < hd; d++)
                    acc[h][d] = 0;
            }
        }
        for (int64_t p0 = r[i0].lo; p0 <= hi; p0 += KA_BLOCK) {
            const float *kr[KA_BLOCK], *vr[KA_BLOCK];
            ka_rows_of(s, &r[i0], g, p0, hi - p0 + 1 < KA_BLOCK ? (int)(hi - p0 + 1) : KA_BLOCK, kr, vr);
            for (int i = 0; i < m; i++)
                if (p0 <= r[i0 + i].hi)
                    ka_block(nq, s, &r[i0 + i], h0, group, p0, kr, vr, acc + i * group, mx + i * group,
                             sum + i * group, sc);
        }
        for (int i = 0; i < m; i++)
            for (int h = 0; h < group; h++) {
                float *o = r[i0 + i].out + (size_t)(h0 + h) * hd;
                const float *a = acc[i * group + h];
                const float inv = 1.0f / sum[i * group + h];
                for (int d = 0; d < hd; d++)
                    o[d] = a[d] * inv;
            }
    }
}

#define KA_CASE(n_) case n_: ka_rows(n_, s, r, nr, g, h0, group); return true;
static bool KT(attn_f32)(const cdx_attn_shape *s, const cdx_attn_row *r, int nr, int g, int h0, int group)
{
    if (s->kv_type != CDX_TYPE_F32 || s->head_dim % VF_N || group > 32)
        return false;
    switch (s->head_dim / VF_N) {
        KA_CASE(1) KA_CASE(2) KA_CASE(3) KA_CASE(4) KA_CASE(5) KA_CASE(6) KA_CASE(7) KA_CASE(8)
#if VF_N == 8
        KA_CASE(10) KA_CASE(12) KA_CASE(16)
#endif
    }
    return false;
}

/* ---- f16 attention rows (attn.c's attn_head_f16, fused) ----
 *
 * Query rows sharing their keys × one KV head's `group` heads over an F16 cache, with the bits
 * attn.c's attn_head_f16 gives each row alone through this set's primitives (its oracle in
 * tests/kernel/test_attn.c): q rounded to f16, every score vdot(q, k)·scale, the max, the exp sum
 * in cdx_attn's 8 double lanes (attn.c, CDX_ATTN_F16_LANES), each weight exp·(1/sum) rounded to f16,
 * then Σ w·v in position order. What changes: a block of 64 keys (then of values) is converted to
 * f32 once for the whole tile (F16C: vf_load_f16, exact) and stays in L1 while every row and head
 * of the tile uses it; each score is computed once (kept in a buffer of the row's length) where
 * the primitives' loop computes it in each of its three passes; the max is taken a block at a time
 * as the scores are made, and each weight rounded as the V pass takes it (two passes over the
 * buffer fewer; the same values). Taken where the fused f32 rows
 * are (head_dim a multiple of VF_N, up to KA_MAXV vectors), without a softcap; false otherwise, or
 * when the score buffer cannot be had (attn.c then runs attn_head_f16). */
KT_INLINE void kh_rows_of(const cdx_attn_shape *s, const cdx_attn_row *r, int g, int64_t p0, int n, const uint16_t **kr,
                          const uint16_t **vr)
{
    int64_t b = p0 / s->block, o = p0 % s->block;
    const size_t base = r->off + (size_t)g * s->head_dim;
    for (int i = 0; i < n; i++) {
        kr[i] = (const uint16_t *)r->k[b] + base + (size_t)o * s->kv_stride;
        vr[i] = (const uint16_t *)r->v[b] + base + (size_t)o * s->kv_stride;
        if (++o == s->block) {
            o = 0;
            b++;
        }
    }
}

/* n f16 rows of nq vectors to f32 rows of dst, one after the other */
KT_INLINE void kh_convert(const uint16_t *const *src, int n, const int nq, float *dst)
{
    for (int i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int c = 0; c < nq; c++)
            vf_store(dst + (size_t)i * nq * VF_N + c * VF_N, vf_load_f16(src[i] + c * VF_N));
}

/* x[0..n-1] = expf(x - mx) (the C library's bits), then their sum in cdx_attn's order (attn.c,
 * attn_sum8): 8 double lanes, lane j the terms of index j mod 8 in order from 0, then lanes j and
 * j + w added for w = 4, 2, 1. */
static double KT(kh_exp_sum8)(float *x, float mx, int64_t n)
{
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N) {
        VF e;
        if (vf_expf(vf_add(vf_load_f32(x + i), vf_set1(-mx)), &e))
            vf_store(x + i, e);
        else
            for (int j = 0; j < VF_N; j++)
                x[i + j] = expf(x[i + j] - mx);
    }
    for (; i < n; i++)
        x[i] = expf(x[i] - mx);
    double lane[8];
    i = 0;
#if VF_N == 16
    __m512d acc = _mm512_setzero_pd();
    for (; i + 16 <= n; i += 16) { /* a chunk's halves in turn: index j before j + 8 in lane j */
        const __m512 e = _mm512_loadu_ps(x + i);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    for (; i + 8 <= n; i += 8)
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_loadu_ps(x + i)));
    _mm512_storeu_pd(lane, acc);
#else
    VD acc[2] = { vd_zero(), vd_zero() };
    for (; i + 8 <= n; i += 8)
        vd_acc2(acc, _mm256_loadu_ps(x + i));
    vd_store(lane, acc[0]);
    vd_store(lane + 4, acc[1]);
#endif
    for (; i < n; i++)
        lane[i % 8] += (double)x[i];
    for (int w = 4; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            lane[j] += lane[j + w];
    return lane[0];
}

#define KH_BUF_MAX ((size_t)64 << 20) /* score buffer bytes at most (fewer rows a pass above it) */
KT_INLINE bool kh_rows(const int nq, const cdx_attn_shape *s, const cdx_attn_row *r, int nr, int g, int h0, int group)
{
    const int hd = s->head_dim;
    const int64_t lo = r[0].lo;
    int64_t hi_all = r[0].hi;
    for (int i = 1; i < nr; i++)
        hi_all = r[i].hi > hi_all ? r[i].hi : hi_all;
    const size_t len = (size_t)(hi_all - lo + 1);
    int per = KA_STATES / group < KA_TILE ? KA_STATES / group : KA_TILE;
    per = per < nr ? per : nr;
    while (per > 1 && (size_t)per * group * len * sizeof(float) > KH_BUF_MAX)
        per--;
    float *S = malloc((size_t)per * group * len * sizeof(float));
    if (!S)
        return false;
    float kb[KA_BLOCK * KA_MAXV * VF_N] __attribute__((aligned(64)));
    float qh[KA_STATES][KA_MAXV * VF_N] __attribute__((aligned(64)));
    float acc[KA_STATES][KA_MAXV * VF_N] __attribute__((aligned(64)));
    float wsc[32][KA_BLOCK];
    float mxs[KA_STATES], inv[KA_STATES];
    const uint16_t *kr[KA_BLOCK], *vr[KA_BLOCK];
    const float *fr[KA_BLOCK];
    for (int j = 0; j < KA_BLOCK; j++)
        fr[j] = kb + (size_t)j * hd;
    for (int i0 = 0; i0 < nr; i0 += per) {
        const int m = nr - i0 < per ? nr - i0 : per;
        const cdx_attn_row *rt = r + i0;
        int64_t hi = rt[0].hi;
        for (int i = 0; i < m; i++) {
            hi = rt[i].hi > hi ? rt[i].hi : hi;
            for (int h = 0; h < group; h++) {
                KT(vround_half)(rt[i].q + (size_t)(h0 + h) * hd, qh[i * group + h], hd, 1);
                mxs[i * group + h] = -INFINITY;
                for (int d = 0; d < hd; d++)
                    acc[i * group + h][d] = 0;
            }
        }
        /* the scores, a block of keys at a time for every row and head */
        for (int64_t p0 = lo; p0 <= hi; p0 += KA_BLOCK) {
            const int nbk = hi - p0 + 1 < KA_BLOCK ? (int)(hi - p0 + 1) : KA_BLOCK;
            kh_rows_of(s, &rt[0], g, p0, nbk, kr, vr);
            kh_convert(kr, nbk, nq, kb);
            for (int i = 0; i < m; i++) {
                if (p0 > rt[i].hi)
                    continue;
                const int nb = rt[i].hi - p0 + 1 < KA_BLOCK ? (int)(rt[i].hi - p0 + 1) : KA_BLOCK;
                for (int h = 0; h < group; h++) {
                    float *x = S + ((size_t)(i * group + h)) * len + (size_t)(p0 - lo);
                    ka_scores(qh[i * group + h], nq, s, fr, nb, x);
                    const float bm = KT(vmax)(x, nb); /* the row's max, a block at a time (the same value) */
                    mxs[i * group + h] = bm > mxs[i * group + h] ? bm : mxs[i * group + h];
                }
            }
        }
        /* softmax: exp(score - max) in place of the scores and 1/sum; the V pass rounds each weight
         * exp·(1/sum) to f16 as it takes it (one pass over the scores fewer) */
        for (int i = 0; i < m; i++)
            for (int h = 0; h < group; h++) {
                float *x = S + ((size_t)(i * group + h)) * len;
                const int64_t n = rt[i].hi - lo + 1;
                float mx = mxs[i * group + h];
                const float *sk = s->sinks ? &s->sinks[h0 + h] : NULL;
                if (sk && *sk > mx)
                    mx = *sk;
                const double sum = KT(kh_exp_sum8)(x, mx, n) + (sk ? (double)expf(*sk - mx) : 0);
                inv[i * group + h] = (float)(1.0 / sum);
            }
        /* Σ w·v, a block of values at a time */
        const int hp = KA_HP(nq);
        for (int64_t p0 = lo; p0 <= hi; p0 += KA_BLOCK) {
            const int nbk = hi - p0 + 1 < KA_BLOCK ? (int)(hi - p0 + 1) : KA_BLOCK;
            kh_rows_of(s, &rt[0], g, p0, nbk, kr, vr);
            kh_convert(vr, nbk, nq, kb);
            for (int i = 0; i < m; i++) {
                if (p0 > rt[i].hi)
                    continue;
                const int nb = rt[i].hi - p0 + 1 < KA_BLOCK ? (int)(rt[i].hi - p0 + 1) : KA_BLOCK;
                for (int h = 0; h < group; h++) {
                    const float *x = S + ((size_t)(i * group + h)) * len + (size_t)(p0 - lo);
                    const float iw = inv[i * group + h];
                    const VF iv = vf_set1(iw);
                    int t = 0;
                    for (; t + VF_N <= nb; t += VF_N)
                        vf_store(wsc[h] + t, vf_round_f16(vf_mul(vf_load_f32(x + t), iv)));
                    for (; t < nb; t++)
                        wsc[h][t] = cdx_f16_to_f32(cdx_f32_to_f16(x[t] * iw));
                }
                int h = 0;
                for (; h + hp <= group; h += hp)
                    ka_values_heads(acc + i * group + h, nq, hp, fr, nb, wsc + h);
                for (; h < group; h++)
                    ka_values_heads(acc + i * group + h, nq, 1, fr, nb, wsc + h);
            }
        }
        for (int i = 0; i < m; i++)
            for (int h = 0; h < group; h++)
                memcpy(rt[i].out + (size_t)(h0 + h) * hd, acc[i * group + h], (size_t)hd * sizeof(float));
    }
    free(S);
    return true;
}

#define KH_CASE(n_) case n_: return kh_rows(n_, s, r, nr, g, h0, group);
static bool KT(attn_f16)(const cdx_attn_shape *s, const cdx_attn_row *r, int nr, int g, int h0, int group)
{
    if (s->kv_type != CDX_TYPE_F16 || s->head_dim % VF_N || group > 32 || s->softcap)
        return false;
    switch (s->head_dim / VF_N) {
        KH_CASE(1) KH_CASE(2) KH_CASE(3) KH_CASE(4) KH_CASE(5) KH_CASE(6) KH_CASE(7) KH_CASE(8)
#if VF_N == 8
        KH_CASE(10) KH_CASE(12) KH_CASE(16)
#endif
    }
    return false;
}

static const cdx_vec_ops KT(vec_ops) = { KT(vdot), KT(vaxpy), KT(vscale), KT(vmax), KT(vexp_sum), KT(vround_half),
                                         KT(vsilu_mul), KT(vlse), KT(vsilu), KT(verf), KT(vgelu),
                                         KT(vto_half) };

/* ---- the table ---- */

const cdx_kernels KT(cdx_kernels) = {
    .isa = KT_ISA_NAME,
#ifdef KT_HAS_PACK
    .pack_bytes = KT(pack_bytes),
    .pack = KT(pack),
    .in_place = KT(in_place),
#endif
#ifdef KT_ROW_BF16DP
    .row_bf16dp = KT_ROW_BF16DP,
#endif
#ifdef KT_FTILE_ACT
    .ftile_act = KT_FTILE_ACT,
#endif
    .vec = &KT(vec_ops),
    .attn_f32 = KT(attn_f32),
    .attn_f16 = KT(attn_f16),
    .row = {
        [CDX_TYPE_F32] = KT(rows_W_F32), [CDX_TYPE_F16] = KT(rows_W_F16), [CDX_TYPE_BF16] = KT(rows_W_BF16),
        [CDX_TYPE_Q8_0] = KT(rows_W_Q8_0), [CDX_TYPE_Q4_0] = KT(rows_W_Q4_0), [CDX_TYPE_IQ4_NL] = KT(rows_W_IQ4_NL),
        [CDX_TYPE_Q4_K] = KT(rows_W_Q4_K), [CDX_TYPE_Q5_K] = KT(rows_W_Q5_K), [CDX_TYPE_Q6_K] = KT(rows_W_Q6_K),
        [CDX_TYPE_IQ4_XS] = KT(rows_W_IQ4_XS),
    },
    .quantize = {
        [CDX_TYPE_Q8_0] = KT(quantize_q8_0), [CDX_TYPE_Q8_1] = KT(quantize_q8_1), [CDX_TYPE_Q8_K] = KT(quantize_q8_K),
    },
};
