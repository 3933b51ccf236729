/* The drivers of the load-time layouts (kern_x16.h): rows [r0, r1) × n tokens through the
 * includer's micro kernels x16_micro, x16k_micro and x16q6_micro, X16_TILE(kind) (x16) or X16_TOK
 * (x16k, x16q6) tokens per call. Every token's sums are the same whatever its
 * neighbours in the call (the micro kernels treat tokens independently), so decode and prefill
 * agree bit for bit. */
#ifndef X16_TILE /* tokens an x16 micro kernel call, by layout kind (at most X16_TILE_MAX) */
#define X16_TILE(kind) X16_TOK
#define X16_TILE_MAX X16_TOK
#endif
#define X16_MICRO_CASE(kind, n_)                                                                        \
    case n_: x16_micro(kind, Q, gbytes, 1, nb, x, xrb, dav + t * nb, sav + t * nb, n_, y + t * w->rows + r, w->rows, t == 0); break;

/* Whether this set reads w from its file layout with its packed layout's bits (cdx_matmul_in_place):
 * the 32-value types where the includer has a decode kernel for them (x16n_decode, about as fast as
 * the packed copy), Q4_K and Q6_K packed a group at a time into scratch, decode too (~2.3x slower
 * than the packed copy: a stopgap until the packer's copy is installed); prefill packs a group at a
 * time into scratch as it goes for all of them. */
static bool KT(in_place)(const cdx_mat *w)
{
#ifdef X16N_DECODE
    if (w->type == CDX_TYPE_Q4_K || w->type == CDX_TYPE_Q6_K || w->type == CDX_TYPE_Q5_K || w->type == CDX_TYPE_IQ4_XS)
        return KT(pack_bytes)(w) > 0; /* packed a group at a time into scratch, decode too (x16sb_rows);
                                        * Q5_K, IQ4_XS only where the set packs them (X16_K5XS) */
    return (w->type == CDX_TYPE_Q8_0 || w->type == CDX_TYPE_Q4_0 || w->type == CDX_TYPE_IQ4_NL) && KT(pack_bytes)(w) > 0 &&
           w->row_bytes < (size_t)INT32_MAX / 8; /* gather offsets */
#else
    (void)w;
    return false;
#endif
}

/* Rows [r0, r1) (multiples of 16) × n tokens from the packed layout, or, for a matrix read in
 * place (KT(in_place), no packed copy of this set's): decode by the includer's in-place kernel,
 * batches from the native rows packed a group at a time into scratch as they are read (the same
 * micro kernels on the same bytes: the same bits; in L2, a group is re-read per token tile faster
 * than from the packed copy in DRAM). false when neither applies. */
KT_INLINE bool x16_rows(int kind, const cdx_mat *w, int64_t r0, int64_t r1, const void *xq, size_t xrb, int64_t n,
                        float *y, void *scratch)
{
    if (r0 % 16 || r1 % 16 || !scratch)
        return false;
    const bool own = w->packed && w->packed_for == &KT(cdx_kernels);
    if (!own && !KT(in_place)(w))
        return false;
    const int64_t nb = w->cols / 32;
    const size_t qb = x16_qbytes(kind), gbytes = (size_t)nb * (qb + 32);
    float *dav = scratch;
    int32_t *sav = (int32_t *)(dav + ((size_t)n * (size_t)nb + 15) / 16 * 16);
    uint8_t *grp = (uint8_t *)(((uintptr_t)(sav + (size_t)n * (size_t)nb) + 63) & ~(uintptr_t)63);
    const uint8_t *src = own ? (const uint8_t *)w->packed + (size_t)(r0 / 16) * gbytes
                             : (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    const size_t span = (size_t)(r1 - r0) / 16 * gbytes; /* the same bytes either way */
    /* the stretch before the kernels' own prefetch distance, so a chunk does not start on a stall */
    for (size_t o = 0; o < (n == 1 ? X16_PF_DEC : X16_PF) && o < span; o += 64)
        _mm_prefetch((const char *)src + o, _MM_HINT_T0);
    x16_act_sums(kind, xq, xrb, n, nb, dav, sav);
    int64_t t0 = 0; /* the tokens done: by tiles where the set has them, the rest by its micro kernels */
#ifdef X16_AMX
    uint8_t *amx_scratch = (uint8_t *)(((uintptr_t)(grp + 17 * (size_t)w->cols) + 63) & ~(uintptr_t)63);
    if (n >= AMX_TOK)
        t0 = amx_x16_rows(kind, w, own ? src : NULL, r0, r1, nb, xq, xrb, n, dav, sav, y, amx_scratch);
#endif
    int64_t r = r0;
#ifdef X16N_DECODE
    if (n == 1 && !own) {
        x16n_decode(kind, w->data, w->row_bytes, r0, r1, nb, xq, dav, sav, y);
        return true;
    }
#endif
    if (n == 1 && own) /* decode: X16_DEC_G groups at a time, as many streams in flight */
        for (; r + 16 * X16_DEC_G <= r1; r += 16 * X16_DEC_G)
            x16_micro(kind, (const uint8_t *)w->packed + (size_t)(r / 16) * gbytes, gbytes, X16_DEC_G, nb, xq, xrb, dav,
                      sav, 1, y + r, w->rows, true);
    for (; r < r1 && t0 < n; r += 16) {
        const uint8_t *Q = grp; /* in place: this group packed into scratch, prefetching the next */
        if (own)
            Q = (const uint8_t *)w->packed + (size_t)(r / 16) * gbytes;
        else
            x16_pack_group(w, kind, r / 16, grp, true);
        const int tile = X16_TILE(kind);
        for (int64_t t = t0; t < n; t += tile) {
            const int tt = n - t < tile ? (int)(n - t) : tile;
            const uint8_t *x = (const uint8_t *)xq + (size_t)t * xrb;
            switch (tt) {
                X16_MICRO_CASE(kind, 1) X16_MICRO_CASE(kind, 2) X16_MICRO_CASE(kind, 3) X16_MICRO_CASE(kind, 4)
#if X16_TILE_MAX > 4
                X16_MICRO_CASE(kind, 5) X16_MICRO_CASE(kind, 6) X16_MICRO_CASE(kind, 7) X16_MICRO_CASE(kind, 8)
#endif
            }
        }
    }
    return true;
}

/* One micro kernel call of the super-block layouts (x16k, x16q6; x16k5, x16xs where X16_K5XS). */
#ifdef X16_K5XS
#define X16SB_MICRO_K5XS(n_)                                                                          \
        else if (kind == W_Q5_K)                                                                      \
            x16k5_micro(Q, meta, nsb, x, xrb, n_, y + t * w->rows + r, w->rows, t == 0);              \
        else if (kind == W_IQ4_XS)                                                                    \
            x16xs_micro(Q, meta, nsb, x, xrb, n_, y + t * w->rows + r, w->rows, t == 0);
#else
#define X16SB_MICRO_K5XS(n_)
#endif
#define X16SB_MICRO_CASE(n_)                                                                          \
    case n_:                                                                                          \
        if (kind == W_Q4_K)                                                                           \
            x16k_micro(Q, meta, nsb, x, xrb, n_, y + t * w->rows + r, w->rows, t == 0);               \
        X16SB_MICRO_K5XS(n_)                                                                          \
        else                                                                                          \
            x16q6_micro(Q, meta, nsb, x, xrb, n_, y + t * w->rows + r, w->rows, t == 0);              \
        break;

/* A super-block layout's bytes a super-block: values (*q) and scales (*m). */
KT_INLINE void x16sb_sizes(int kind, size_t *q, size_t *m)
{
    *q = kind == W_Q4_K ? X16K_Q : kind == W_Q6_K ? X16Q6_Q : kind == W_Q5_K ? X16K5_Q : X16XS_Q;
    *m = kind == W_Q4_K ? X16K_META : kind == W_Q6_K ? X16Q6_META : kind == W_Q5_K ? X16K5_META : X16XS_META;
}

/* Rows [r0, r1) (multiples of 16) × n tokens of a Q4_K or Q6_K matrix from its packed layout or,
 * read in place (KT(in_place)), from its native rows packed a group at a time into scratch as they
 * are read, decode included (the same micro kernels on the same bytes: the same bits; slower than
 * the packed copy, which the background packer makes after load); false when neither applies. */
KT_INLINE bool x16sb_rows(int kind, const cdx_mat *w, int64_t r0, int64_t r1, const void *xq, size_t xrb, int64_t n,
                          float *y, void *scratch)
{
    if (r0 % 16 || r1 % 16)
        return false;
    const bool own = w->packed && w->packed_for == &KT(cdx_kernels);
    if (!own && !(scratch && KT(in_place)(w)))
        return false;
    size_t qbytes, mbytes;
    x16sb_sizes(kind, &qbytes, &mbytes);
    const int64_t nsb = w->cols / 256;
    const size_t gbytes = (size_t)nsb * (qbytes + mbytes);
    const uint8_t *src = own ? (const uint8_t *)w->packed + (size_t)(r0 / 16) * gbytes
                             : (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    for (size_t o = 0; o < (n == 1 ? X16_PF_DEC : X16_PF) && o < (size_t)(r1 - r0) / 16 * gbytes; o += 64)
        _mm_prefetch((const char *)src + o, _MM_HINT_T0);
    int64_t r = r0;
    /* a group read in place: cdx_kernel_scratch_bytes' 17·cols bytes hold it (x16k 9.25, x16q6
     * 13.125 bytes a column) */
    uint8_t *grp = own ? NULL : (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
#ifdef X16SB_DECODE_G
    /* decode: X16SB_DECODE_G groups at a time (the includer's x16k_micro_g / x16q6_micro_g), as many
     * streams in flight */
    if (n == 1 && own && (kind == W_Q4_K || kind == W_Q6_K))
        for (; r + 16 * X16SB_DECODE_G <= r1; r += 16 * X16SB_DECODE_G) {
            const uint8_t *Q = (const uint8_t *)w->packed + (size_t)(r / 16) * gbytes;
            if (kind == W_Q4_K)
                x16k_micro_g(Q, Q + (size_t)nsb * qbytes, gbytes, X16SB_DECODE_G, nsb, xq, xrb, 1, y + r, w->rows);
            else
                x16q6_micro_g(Q, Q + (size_t)nsb * qbytes, gbytes, X16SB_DECODE_G, nsb, xq, xrb, 1, y + r, w->rows);
        }
#endif
    int64_t t0 = 0; /* the tokens done by the set's tiles (the amx set), the rest by its micro kernels */
#ifdef X16_AMX
    if (n >= AMX_TOK) {
        uint8_t *amx_scratch = (uint8_t *)(((uintptr_t)scratch + 18 * (size_t)w->cols + 2 * 64) & ~(uintptr_t)63);
        if (kind == W_Q4_K || kind == W_Q6_K)
            t0 = amx_sb_rows(kind, w, own ? src : NULL, r0, r1, xq, xrb, n, y, grp, amx_scratch);
        else /* Q5_K, IQ4_XS: a lane a tile (kern_amx.h) */
            t0 = amx_lane_rows(kind, w, own ? src : NULL, r0, r1, xq, xrb, n, y, grp, amx_scratch);
    }
#endif
    for (; r < r1 && t0 < n; r += 16) {
        const uint8_t *Q = grp;
        if (own)
            Q = (const uint8_t *)w->packed + (size_t)(r / 16) * gbytes;
        else if (kind == W_Q4_K)
            pack_q4k_group(w, r / 16, grp, r + 16 < r1);
#ifdef X16_K5XS
        else if (kind == W_Q5_K)
            pack_q5k_group(w, r / 16, grp, r + 16 < r1);
        else if (kind == W_IQ4_XS)
            pack_iq4xs_group(w, r / 16, grp, r + 16 < r1);
#endif
        else
            pack_q6k_group(w, r / 16, grp, r + 16 < r1);
        const uint8_t *meta = Q + (size_t)nsb * qbytes;
        for (int64_t t = t0; t < n; t += X16_TOK) {
            const int tt = n - t < X16_TOK ? (int)(n - t) : X16_TOK;
            const uint8_t *x = (const uint8_t *)xq + (size_t)t * xrb;
            switch (tt) {
                X16SB_MICRO_CASE(1) X16SB_MICRO_CASE(2) X16SB_MICRO_CASE(3) X16SB_MICRO_CASE(4)
#if X16_TOK > 4
                X16SB_MICRO_CASE(5) X16SB_MICRO_CASE(6) X16SB_MICRO_CASE(7) X16SB_MICRO_CASE(8)
#endif
            }
        }
    }
    return true;
}

#define KT_HAS_PACK 1
#define KT_PACKED(kind, w, r0, r1, xq, xrb, n, y, scratch)                         \
    ((kind) <= W_IQ4_NL ? x16_rows(kind, w, r0, r1, xq, xrb, n, y, scratch)         \
     : (kind) == W_Q4_K || (kind) == W_Q6_K || (X16_SB_K5XS && ((kind) == W_Q5_K || (kind) == W_IQ4_XS))  \
         ? x16sb_rows(kind, w, r0, r1, xq, xrb, n, y, scratch) : false)
#ifdef X16_K5XS
#define X16_SB_K5XS 1
#else
#define X16_SB_K5XS 0
#endif
