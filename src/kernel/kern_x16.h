/* The load-time layouts (x16, x16k, x16q6) shared by the AVX2 and AVX-512 sets: the layout, its
 * size and the repacking, written once. Included by kern_wide512.h and kern_wide256.h (through
 * kern_tmpl.h's KT_WIDE_HEADER) before their micro kernels; kern_x16_run.h, after them, holds the
 * drivers. The includer defines X16_Q8_FLIP (the byte Q8_0 weights are xor'ed with: 0x80 where
 * the dot wants u8, 0 where it keeps them signed) and X16_TOK (tokens per micro kernel call).
 *
 * ---- the load-time layout (x16): 16 rows interleaved, for decode and prefill alike ----
 *
 * A Q8_0, Q4_0 or IQ4_NL matrix whose row count is a multiple of 16 is repacked once, at load
 * (cdx_matmul_pack), so that a thread reads its rows as one sequential stream and a single
 * vpdpbusd advances 16 rows: the native layout gives 16 short streams per panel, which the
 * prefetchers follow poorly, and the prefill GEMM above unpacks every panel on every call.
 * One group of 16 rows, nb = cols/32 blocks:
 *   [nb × QB bytes]  block b, 32-bit word k of row i at b·QB + 64k + 4i: the native bytes 4k..4k+3
 *                    (QB = 256 for the 4-bit types: low nibbles are values 4k.., high nibbles values
 *                    16+4k..; QB = 512 for Q8_0, xor'ed with X16_Q8_FLIP)
 *   [nb × 16 f16]    the block scales, row by row
 * The size is exactly the native size; the values and the integer dots are unchanged. */

/* Software prefetch distance in bytes: one line at a time, this far ahead of the loads (measured
 * with bench/run-kernels.sh: 4 KiB into L1 beats no prefetch and farther or L2-only hints). */
#ifndef X16_PF
#define X16_PF 4096
#endif
#ifndef X16_PF_DEC /* decode's distance, where the includer sets one of its own */
#define X16_PF_DEC X16_PF
#endif
#ifndef X16_PF_HINT
#define X16_PF_HINT _MM_HINT_T0
#endif

KT_INLINE int x16_kind(uint32_t type)
{
    return type == CDX_TYPE_Q8_0 ? W_Q8_0 : type == CDX_TYPE_Q4_0 ? W_Q4_0 : type == CDX_TYPE_IQ4_NL ? W_IQ4_NL : -1;
}
KT_INLINE size_t x16_qbytes(int kind) { return kind == W_Q8_0 ? 512 : 256; }

/* Q4_K (x16k): one group of 16 rows, nsb = cols/256 super-blocks:
 *   [nsb × 2048 bytes]  super-block b, 64-value chunk j, 32-bit word k of row i at b·2048 + j·512 +
 *                       64k + 4i: the native qs[32j+4k .. +3] (low nibbles: sub-block 2j, high: 2j+1)
 *   [nsb × 320 bytes]   the 6-bit scales sc[s] (u8, [s][row]), mins m[s] (the same), then d and dmin
 *                       (f16 × 16 each): the scales decoded once here instead of every call. */
#define X16K_Q 2048
#define X16K_META 320
#define X16Q6_Q 3072
#define X16Q6_META 288
/* Q5_K (x16k5): x16k's 2048 bytes of low 4 bits, then the 512 bytes of fifth bits (word k of row i
 * at 2048 + 64k + 4i: the native qh[4k .. 4k+3], bit s of byte c the fifth bit of value 4k+c of
 * sub-block s), then x16k's 320 bytes of scales, mins, d and dmin.
 * IQ4_XS (x16xs): per 32-value sub-block s, 256 bytes as x16 stores IQ4_NL (word k of row i at 256s
 * + 64k + 4i: the native qs[16s+4k .. +3], low nibbles values 4k.., high ones 16+4k..), then the
 * 6-bit scales less 32 (s8, [s][row]) and d (f16 × 16).
 * Only sets whose includer defines X16_K5XS (the AVX-512 ones) pack them: their micro kernels keep
 * these two types' lane order (kern_tmpl.h's k_block_acc: eight lanes of 4 values a sub-block, a
 * float sum each), which the 16-row layout holds as its 8 words. */
#define X16K5_Q 2560
#define X16K5_META 320
#define X16XS_Q 2048
#define X16XS_META 160

static size_t KT(pack_bytes)(const cdx_mat *w)
{
    if (w->rows < 16 || w->rows % 16 || w->cols <= 0)
        return 0;
    if (w->type == CDX_TYPE_Q4_K)
        return w->cols % 256 ? 0 : (size_t)(w->rows / 16) * (size_t)(w->cols / 256) * (X16K_Q + X16K_META);
    if (w->type == CDX_TYPE_Q6_K)
        return w->cols % 256 ? 0 : (size_t)(w->rows / 16) * (size_t)(w->cols / 256) * (X16Q6_Q + X16Q6_META);
#ifdef X16_K5XS
    if (w->type == CDX_TYPE_Q5_K)
        return w->cols % 256 ? 0 : (size_t)(w->rows / 16) * (size_t)(w->cols / 256) * (X16K5_Q + X16K5_META);
    if (w->type == CDX_TYPE_IQ4_XS)
        return w->cols % 256 ? 0 : (size_t)(w->rows / 16) * (size_t)(w->cols / 256) * (X16XS_Q + X16XS_META);
#endif
    const int kind = x16_kind(w->type);
    if (kind < 0 || w->cols % 32)
        return 0;
    return (size_t)(w->rows / 16) * (size_t)(w->cols / 32) * (x16_qbytes(kind) + 32);
}

/* Words 0..3 (16 bytes at off) of 16 rows into 4 lines of the x16 layout: word k of row i at
 * out + 64k + 4i, each byte xor'ed with fx. Two 4×4 transposes of 32-bit words per 128-bit lane
 * (rows 0..3 | 8..11, and 4..7 | 12..15), then the lanes recombined. */
KT_INLINE void x16_pack4w(const uint8_t *const *rows, size_t off, uint8_t *out, __m256i fx)
{
    __m256i r[2][4];
    for (int h = 0; h < 2; h++) {
        __m256i a[4];
        for (int i = 0; i < 4; i++)
            a[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(rows[4 * h + i] + off))),
                                           _mm_loadu_si128((const __m128i *)(rows[8 + 4 * h + i] + off)), 1);
        const __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
        const __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
        r[h][0] = _mm256_xor_si256(_mm256_unpacklo_epi64(t0, t2), fx);
        r[h][1] = _mm256_xor_si256(_mm256_unpackhi_epi64(t0, t2), fx);
        r[h][2] = _mm256_xor_si256(_mm256_unpacklo_epi64(t1, t3), fx);
        r[h][3] = _mm256_xor_si256(_mm256_unpackhi_epi64(t1, t3), fx);
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_si256((__m256i *)(out + 64 * k), _mm256_permute2x128_si256(r[0][k], r[1][k], 0x20));
        _mm256_storeu_si256((__m256i *)(out + 64 * k + 32), _mm256_permute2x128_si256(r[0][k], r[1][k], 0x31));
    }
}

/* Bytes [lo, lo + len) of the next group's native bytes (rows 16g+16.., right after this group's:
 * one linear stream), into L2, for a kernel that packs groups on the fly as it reads them
 * (kern_x16_run.h's in-place path); each packing step asks for its share of the stream. Llama-1B
 * Q4_K_M decode in place, Intel Xeon, 2 threads: none 11.5 tok/s, into L1 11.8, into L2 12.6. */
KT_INLINE void x16sb_prefetch_next(const cdx_mat *w, int64_t g, size_t lo, size_t len)
{
    const uint8_t *next = (const uint8_t *)w->data + (size_t)(16 * g + 16) * w->row_bytes;
    for (size_t o = lo & ~(size_t)63; o < lo + len; o += 64)
        _mm_prefetch((const char *)(next + o), _MM_HINT_T1);
}

/* Group g (rows 16g..16g+15) of a Q4_K matrix into Q (its x16k bytes); pf_next: x16sb_prefetch_next. */
KT_INLINE void pack_q4k_group(const cdx_mat *w, int64_t g, uint8_t *Q, bool pf_next)
{
    const int64_t nsb = w->cols / 256;
    const __m256i zero = _mm256_setzero_si256();
    uint8_t *meta = Q + (size_t)nsb * X16K_Q;
    const uint8_t *rows[16];
    for (int i = 0; i < 16; i++)
        rows[i] = (const uint8_t *)w->data + (size_t)(16 * g + i) * w->row_bytes;
    for (int64_t b = 0; b < nsb; b++) {
        uint8_t *q = Q + (size_t)b * X16K_Q, *mb = meta + (size_t)b * X16K_META;
        const size_t off = (size_t)b * sizeof(cdx_block_q4_K) + offsetof(cdx_block_q4_K, qs);
        if (pf_next) /* super-block b's 16 blocks' worth */
            x16sb_prefetch_next(w, g, (size_t)b * 16 * sizeof(cdx_block_q4_K), 16 * sizeof(cdx_block_q4_K));
        for (int j = 0; j < 4; j++) { /* word k of chunk j: qs[32j+4k .. +3] */
            x16_pack4w(rows, off + 32 * (size_t)j, q + 512 * j, zero);
            x16_pack4w(rows, off + 32 * (size_t)j + 16, q + 512 * j + 256, zero);
        }
        for (int i = 0; i < 16; i++) {
            const cdx_block_q4_K *blk = (const cdx_block_q4_K *)rows[i] + b;
            uint8_t sc[8], m[8];
            k4_scales(blk->scales, sc, m);
            for (int sb = 0; sb < 8; sb++) {
                mb[16 * sb + i] = sc[sb];
                mb[128 + 16 * sb + i] = m[sb];
            }
            memcpy(mb + 256 + 2 * i, &blk->d, 2);
            memcpy(mb + 288 + 2 * i, &blk->dmin, 2);
        }
    }
}

#ifdef X16_K5XS
/* Group g of a Q5_K matrix into Q (its x16k5 bytes); pf_next: x16sb_prefetch_next. */
KT_INLINE void pack_q5k_group(const cdx_mat *w, int64_t g, uint8_t *Q, bool pf_next)
{
    const int64_t nsb = w->cols / 256;
    const __m256i zero = _mm256_setzero_si256();
    uint8_t *meta = Q + (size_t)nsb * X16K5_Q;
    const uint8_t *rows[16];
    for (int i = 0; i < 16; i++)
        rows[i] = (const uint8_t *)w->data + (size_t)(16 * g + i) * w->row_bytes;
    for (int64_t b = 0; b < nsb; b++) {
        uint8_t *q = Q + (size_t)b * X16K5_Q, *mb = meta + (size_t)b * X16K5_META;
        const size_t blk = (size_t)b * sizeof(cdx_block_q5_K);
        const size_t off = blk + offsetof(cdx_block_q5_K, qs), offh = blk + offsetof(cdx_block_q5_K, qh);
        if (pf_next)
            x16sb_prefetch_next(w, g, (size_t)b * 16 * sizeof(cdx_block_q5_K), 16 * sizeof(cdx_block_q5_K));
        for (int j = 0; j < 4; j++) {
            x16_pack4w(rows, off + 32 * (size_t)j, q + 512 * j, zero);
            x16_pack4w(rows, off + 32 * (size_t)j + 16, q + 512 * j + 256, zero);
        }
        x16_pack4w(rows, offh, q + 2048, zero);
        x16_pack4w(rows, offh + 16, q + 2048 + 256, zero);
        for (int i = 0; i < 16; i++) {
            const cdx_block_q5_K *bk = (const cdx_block_q5_K *)rows[i] + b;
            uint8_t sc[8], m[8];
            k4_scales(bk->scales, sc, m);
            for (int sb = 0; sb < 8; sb++) {
                mb[16 * sb + i] = sc[sb];
                mb[128 + 16 * sb + i] = m[sb];
            }
            memcpy(mb + 256 + 2 * i, &bk->d, 2);
            memcpy(mb + 288 + 2 * i, &bk->dmin, 2);
        }
    }
}

/* Group g of an IQ4_XS matrix into Q (its x16xs bytes); pf_next: x16sb_prefetch_next. */
KT_INLINE void pack_iq4xs_group(const cdx_mat *w, int64_t g, uint8_t *Q, bool pf_next)
{
    const int64_t nsb = w->cols / 256;
    const __m256i zero = _mm256_setzero_si256();
    uint8_t *meta = Q + (size_t)nsb * X16XS_Q;
    const uint8_t *rows[16];
    for (int i = 0; i < 16; i++)
        rows[i] = (const uint8_t *)w->data + (size_t)(16 * g + i) * w->row_bytes;
    for (int64_t b = 0; b < nsb; b++) {
        uint8_t *q = Q + (size_t)b * X16XS_Q, *mb = meta + (size_t)b * X16XS_META;
        const size_t off = (size_t)b * sizeof(cdx_block_iq4_xs) + offsetof(cdx_block_iq4_xs, qs);
        if (pf_next)
            x16sb_prefetch_next(w, g, (size_t)b * 16 * sizeof(cdx_block_iq4_xs), 16 * sizeof(cdx_block_iq4_xs));
        for (int s = 0; s < 8; s++)
            x16_pack4w(rows, off + 16 * (size_t)s, q + 256 * s, zero);
        for (int i = 0; i < 16; i++) {
            const cdx_block_iq4_xs *bk = (const cdx_block_iq4_xs *)rows[i] + b;
            for (int s = 0; s < 8; s++)
                mb[16 * s + i] = (uint8_t)(int8_t)((((bk->scales_l[s / 2] >> (4 * (s % 2))) & 0xF) |
                                                    (((bk->scales_h >> (2 * s)) & 3) << 4)) - 32);
            memcpy(mb + 128 + 2 * i, &bk->d, 2);
        }
    }
}
#endif

/* Q6_K (x16q6): one group of 16 rows, nsb super-blocks:
 *   [nsb × 3072 bytes]  per super-block, per 32-value sub-block s: 256 bytes of low 4 bits (word k of
 *                       row i at 64k + 4i, byte c: value 4k+c in the low nibble, 16+4k+c in the high
 *                       one), then 128 bytes of high 2 bits (word h of row i at 256 + 64h + 4i, byte
 *                       c: bits 2w..2w+1 hold value 4(4h+w)+c)
 *   [nsb × 288 bytes]   the 16 int8 scales ([j][row]), then d (f16 × 16)
 * Exactly the native size; the 6-bit values, scales and integer sums are unchanged.
 * pack_q6k_group: group g of a Q6_K matrix into Q; pf_next: x16sb_prefetch_next. */
KT_INLINE void pack_q6k_group(const cdx_mat *w, int64_t g, uint8_t *Q, bool pf_next)
{
    const int64_t nsb = w->cols / 256;
    uint8_t *meta = Q + (size_t)nsb * X16Q6_Q;
    for (int i = 0; i < 16; i++) {
        const cdx_block_q6_K *row = (const cdx_block_q6_K *)((const uint8_t *)w->data +
                                                             (size_t)(16 * g + i) * w->row_bytes);
        for (int64_t b = 0; b < nsb; b++) {
            if (pf_next) /* the rows go one by one here: one block's worth a block */
                x16sb_prefetch_next(w, g, ((size_t)i * (size_t)nsb + (size_t)b) * sizeof(cdx_block_q6_K),
                                    sizeof(cdx_block_q6_K));
            const cdx_block_q6_K *blk = &row[b];
            uint8_t q[256]; /* the 6-bit values in order, as dequantize_row_q6_K reads them */
            const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
            for (int half = 0; half < 2; half++) {
                const __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * half));
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * half + 32));
                const __m256i hb = _mm256_loadu_si256((const __m256i *)(blk->qh + 32 * half));
#define Q6_HI(sh) _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, sh), m3), 4)
                _mm256_storeu_si256((__m256i *)(q + 128 * half), _mm256_or_si256(_mm256_and_si256(l0, m4), Q6_HI(0)));
                _mm256_storeu_si256((__m256i *)(q + 128 * half + 32), _mm256_or_si256(_mm256_and_si256(l1, m4), Q6_HI(2)));
                _mm256_storeu_si256((__m256i *)(q + 128 * half + 64),
                                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), Q6_HI(4)));
                _mm256_storeu_si256((__m256i *)(q + 128 * half + 96),
                                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), Q6_HI(6)));
#undef Q6_HI
            }
            uint8_t *qb = Q + (size_t)b * X16Q6_Q, *mb = meta + (size_t)b * X16Q6_META;
            const __m128i n4 = _mm_set1_epi8(0x0F), n3 = _mm_set1_epi8(3);
            for (int sb = 0; sb < 8; sb++) {
                const __m128i va = _mm_loadu_si128((const __m128i *)(q + 32 * sb));
                const __m128i vc = _mm_loadu_si128((const __m128i *)(q + 32 * sb + 16));
                uint8_t *lo = qb + 384 * sb, *hi = lo + 256;
                /* byte 4k+c: value 4k+c in the low nibble, 16+4k+c in the high one */
                const __m128i l16 = _mm_or_si128(_mm_and_si128(va, n4), _mm_slli_epi16(_mm_and_si128(vc, n4), 4));
                uint32_t wl[4];
                _mm_storeu_si128((__m128i *)wl, l16);
                for (int k = 0; k < 4; k++)
                    memcpy(lo + 64 * k + 4 * i, &wl[k], 4);
                /* byte c of word h: bits 2w..2w+1 hold the top 2 bits of value 4(4h+w)+c */
                for (int h = 0; h < 2; h++) {
                    const __m128i u = _mm_and_si128(_mm_srli_epi16(h ? vc : va, 4), n3);
                    const __m128i t = _mm_or_si128(_mm_or_si128(u, _mm_slli_epi32(_mm_srli_si128(u, 4), 2)),
                                                   _mm_or_si128(_mm_slli_epi32(_mm_srli_si128(u, 8), 4),
                                                                _mm_slli_epi32(_mm_srli_si128(u, 12), 6)));
                    const uint32_t wh = (uint32_t)_mm_cvtsi128_si32(t);
                    memcpy(hi + 64 * h + 4 * i, &wh, 4);
                }
            }
            for (int j = 0; j < 16; j++)
                mb[16 * j + i] = (uint8_t)blk->scales[j];
            memcpy(mb + 256 + 2 * i, &blk->d, 2);
        }
    }
}

/* Group g (rows 16g..16g+15) of a 32-value type into Q, gbytes = nb·(QB + 32). pf_next: prefetch
 * the next group's native bytes as this one is read (they lie right after it, one linear stream)
 * for a kernel that packs groups on the fly as it goes. */
KT_INLINE void x16_pack_group(const cdx_mat *w, int kind, int64_t g, uint8_t *Q, bool pf_next)
{
    const int64_t nb = w->cols / 32;
    const size_t qb = x16_qbytes(kind);
    const size_t bb = kind == W_Q8_0 ? sizeof(cdx_block_q8_0) : sizeof(cdx_block_q4_0);
    const __m256i fx = _mm256_set1_epi8((char)(kind == W_Q8_0 ? X16_Q8_FLIP : 0));
    uint16_t *S = (uint16_t *)(Q + (size_t)nb * qb);
    const uint8_t *rows[16];
    for (int i = 0; i < 16; i++)
        rows[i] = (const uint8_t *)w->data + (size_t)(16 * g + i) * w->row_bytes;
    const uint8_t *next = rows[0] + 16 * w->row_bytes;
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * bb;
        if (pf_next)
            for (size_t o = 0; o < 16 * bb; o += 64)
                _mm_prefetch((const char *)(next + 16 * off + o), X16_PF_HINT);
        for (int i = 0; i < 16; i++)
            memcpy(&S[b * 16 + i], rows[i] + off, 2);
        x16_pack4w(rows, off + 2, Q + (size_t)b * qb, fx);
        if (kind == W_Q8_0) /* words 4..7 */
            x16_pack4w(rows, off + 18, Q + (size_t)b * qb + 256, fx);
    }
}

/* Groups [g0, g1) of 16 rows into out (the whole packed matrix). */
static void KT(pack)(const cdx_mat *w, void *out, int64_t g0, int64_t g1)
{
    const size_t gbytes = KT(pack_bytes)(w) / (size_t)(w->rows / 16); /* every layout: whole groups */
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *Q = (uint8_t *)out + (size_t)g * gbytes;
        if (w->type == CDX_TYPE_Q4_K)
            pack_q4k_group(w, g, Q, false);
        else if (w->type == CDX_TYPE_Q6_K)
            pack_q6k_group(w, g, Q, false);
#ifdef X16_K5XS
        else if (w->type == CDX_TYPE_Q5_K)
            pack_q5k_group(w, g, Q, false);
        else if (w->type == CDX_TYPE_IQ4_XS)
            pack_iq4xs_group(w, g, Q, false);
#endif
        else
            x16_pack_group(w, x16_kind(w->type), g, Q, false);
    }
}

/* da and Σa of every q8_0 block of every token: Σa only where the includer's micro kernels read it
 * (X16_ACT_SUMS(kind): the Q4_0 offset; on AVX-512 also the Q8_0/IQ4_NL bias). */
#ifndef X16_ACT_SUMS
#define X16_ACT_SUMS(kind) true
#endif
static void x16_act_sums(int kind, const uint8_t *x, size_t xrb, int64_t n, int64_t nb, float *da, int32_t *sa)
{
    const __m256i one8 = _mm256_set1_epi8(1), one16 = _mm256_set1_epi16(1);
    const bool sums = X16_ACT_SUMS(kind);
    for (int64_t t = 0; t < n; t++)
        for (int64_t b = 0; b < nb; b++) {
            const cdx_block_q8_0 *xb = (const cdx_block_q8_0 *)(x + (size_t)t * xrb) + b;
            da[t * nb + b] = h2f(xb->d);
            if (sums)
                sa[t * nb + b] = hsum8i(_mm256_madd_epi16(_mm256_maddubs_epi16(one8, load32(xb->qs)), one16));
        }
}
