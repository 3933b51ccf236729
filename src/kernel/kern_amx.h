/* AMX tiles for the x16 layouts' batches (the "amx" set: kernels_amx.c). Included by
 * kern_wide512.h after its x16 micro kernels when the includer defines KT_AMX.
 *
 * Why the bits are the AVX-512 set's: a block's integer dot (32 values of one row × one token) is
 * an exact i32 sum whichever instruction makes it, vpdpbusd four bytes at a time or tdpbsud over
 * the whole block; everything after it (the bias, the conversion, the scale product and the fma
 * into the row's accumulator, block after block) is the same AVX-512 code in the same order as
 * x16_micro's. So a row computed here in a tile of 16 tokens has the bits it has in decode (n = 1,
 * x16_micro) and on the AVX-512 set, and batch invariance holds across the two.
 *
 * Tiles (palette 1): A0/A1 = 16 tokens × one block of activations (32 s8, the q8_0 block's qs at
 * its row stride), B0/B1 = one block of 16 weight rows as the x16 layout stores it (8 rows of 64
 * bytes: word k of row i at 64k + 4i, u8), C0-C3 = 16 tokens × 16 rows of i32, two pairs of blocks
 * in flight (amx_x16_tile). */

#define AMX_TOK 16 /* tokens a tile call (a tile's rows) */
/* tile numbers: literals, as gcc's _tile_* macros paste them into the instruction text */
#define AMX_A0 0
#define AMX_A1 1
#define AMX_B0 2
#define AMX_B1 3
#define AMX_C0 4
#define AMX_C1 5
#define AMX_C2 6
#define AMX_C3 7

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

/* Tile configuration is per thread; loaded at the start of every call that uses tiles (a few
 * hundred cycles against a matrix's worth of work). */
KT_INLINE void amx_config(void)
{
    amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[AMX_A0] = c.rows[AMX_A1] = AMX_TOK;
    c.colsb[AMX_A0] = c.colsb[AMX_A1] = 32;
    c.rows[AMX_B0] = c.rows[AMX_B1] = 8;
    c.colsb[AMX_B0] = c.colsb[AMX_B1] = 64;
    c.rows[AMX_C0] = c.rows[AMX_C1] = c.rows[AMX_C2] = c.rows[AMX_C3] = AMX_TOK;
    c.colsb[AMX_C0] = c.colsb[AMX_C1] = c.colsb[AMX_C2] = c.colsb[AMX_C3] = 64;
    _tile_loadconfig(&c);
}

/* Row blocks: the groups whose tile-ready values (17 bytes a column) fit CDX_AMX_RB_BYTES
 * (kernel_impl.h, which sizes the scratch), so that one token tile's activations (nb·512 bytes) are
 * read from cache by every group of the block in turn. */
#define AMX_RB_BYTES CDX_AMX_RB_BYTES

/* acc[t] += (C[t] + st[t]) · (sw · dt[t]), st = −bias·Σa: x16_micro's float steps for one block and
 * 16 tokens, in its order */
KT_INLINE void amx_block_post(const int32_t *cb, __m512 sw, const float *dt, const int32_t *st, __m512 *acc)
{
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++) {
        const __m512i s = _mm512_add_epi32(_mm512_load_si512(cb + 16 * t), _mm512_set1_epi32(st[t]));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sw, _mm512_set1_ps(dt[t])), acc[t]);
    }
}

/* Blocks b and b + 1 into tiles CA and CB (their integer dots, 16 tokens × 16 rows each). */
#define AMX_PAIR(b, CA, CB)                                                 \
    do {                                                                    \
        _tile_loadd(AMX_A0, xt + (size_t)(b) * 512, 32);                    \
        _tile_loadd(AMX_B0, Qv + (size_t)(b) * 512, 64);                    \
        _tile_loadd(AMX_A1, xt + (size_t)(b) * 512 + 512, 32);              \
        _tile_loadd(AMX_B1, Qv + (size_t)(b) * 512 + 512, 64);              \
        _tile_zero(CA);                                                     \
        _tile_zero(CB);                                                     \
        _tile_dpbsud(CA, AMX_A0, AMX_B0);                                   \
        _tile_dpbsud(CB, AMX_A1, AMX_B1);                                   \
    } while (0)
/* Tiles CA and CB (blocks b, b + 1) to memory and into the accumulators, block b first. */
#define AMX_DRAIN(b, CA, CB)                                                                                       \
    do {                                                                                                           \
        _tile_stored(CA, cb[0], 64);                                                                               \
        _tile_stored(CB, cb[1], 64);                                                                               \
        amx_block_post(cb[0], _mm512_cvtph_ps(load32(S + 16 * (b))), dt + 16 * (b), st + 16 * (b), acc);           \
        amx_block_post(cb[1], _mm512_cvtph_ps(load32(S + 16 * ((b) + 1))), dt + 16 * ((b) + 1), st + 16 * ((b) + 1), acc); \
    } while (0)

/* 16 rows (tile-ready values: 512 u8 bytes a block at Qv; f16 scales S[b·16 + i]) × one token tile
 * (xt: its nb blocks of 16 × 32 s8, dt/st: 16 scales and bias terms a block) over all nb blocks:
 * y[t·ys + i]. Software-pipelined by a pair of blocks: a pair's dots are issued into one pair of C
 * tiles while the pair before is stored from the other and summed (a tile stored right after its
 * dot waits for it: 21 -> 16.5 ns a block in cache on this Xeon). */
KT_INLINE void amx_x16_tile(const uint8_t *Qv, const uint16_t *S, int64_t nb, const uint8_t *xt, const float *dt,
                            const int32_t *st, float *y, int64_t ys)
{
    __m512 acc[AMX_TOK];
    _Alignas(64) int32_t cb[2][AMX_TOK * 16];
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++)
        acc[t] = _mm512_setzero_ps();
    const int64_t pairs = nb / 2;
    int64_t p = 1;
    if (pairs > 0)
        AMX_PAIR(0, AMX_C0, AMX_C1);
    for (; p + 2 <= pairs; p += 2) {
        AMX_PAIR(2 * p, AMX_C2, AMX_C3);
        AMX_DRAIN(2 * p - 2, AMX_C0, AMX_C1);
        AMX_PAIR(2 * p + 2, AMX_C0, AMX_C1);
        AMX_DRAIN(2 * p, AMX_C2, AMX_C3);
    }
    if (p < pairs) { /* one pair left to issue: pair p into C2/C3 */
        AMX_PAIR(2 * p, AMX_C2, AMX_C3);
        AMX_DRAIN(2 * p - 2, AMX_C0, AMX_C1);
        AMX_DRAIN(2 * p, AMX_C2, AMX_C3);
    } else if (pairs > 0) {
        AMX_DRAIN(2 * p - 2, AMX_C0, AMX_C1);
    }
    if (nb % 2) { /* the last block alone */
        const int64_t b = nb - 1;
        _tile_loadd(AMX_A0, xt + (size_t)b * 512, 32);
        _tile_loadd(AMX_B0, Qv + (size_t)b * 512, 64);
        _tile_zero(AMX_C0);
        _tile_dpbsud(AMX_C0, AMX_A0, AMX_B0);
        _tile_stored(AMX_C0, cb[0], 64);
        amx_block_post(cb[0], _mm512_cvtph_ps(load32(S + 16 * b)), dt + 16 * b, st + 16 * b, acc);
    }
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++)
        _mm512_storeu_ps(y + t * ys, acc[t]);
}
#undef AMX_PAIR
#undef AMX_DRAIN

/* The values of an x16 group of a 4-bit kind (256 bytes a block at Q) as 512 u8 bytes a block, the
 * x16 Q8_0 layout's shape: row k < 4 of a block holds the low nibbles of word k (values 4k..4k+3),
 * row 4 + k the high ones (values 16 + 4k..), exactly the bytes x16_micro's wv[] hold (IQ4_NL
 * through its table, biased by 128). */
KT_INLINE void amx_unpack4(int kind, const uint8_t *Q, int64_t nb, uint8_t *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i kvb = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl)),
                                         _mm512_set1_epi8((char)0x80));
    for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            _mm_prefetch((const char *)(Q + (size_t)b * 256 + X16_PF + 64 * k), X16_PF_HINT);
            const __m512i v = load64(Q + (size_t)b * 256 + 64 * k);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (kind == W_IQ4_NL) {
                lo = _mm512_shuffle_epi8(kvb, lo);
                hi = _mm512_shuffle_epi8(kvb, hi);
            }
            _mm512_store_si512(out + (size_t)b * 512 + 64 * k, lo);
            _mm512_store_si512(out + (size_t)b * 512 + 256 + 64 * k, hi);
        }
    }
}

/* The whole token tiles' activations in tile order: tile T, block b at xt + (T·nb + b)·512 (token j's
 * 32 s8 at + 32j), its scales dt[(T·nb + b)·16 + j] and bias terms st[...] = −bias·Σa. */
KT_INLINE void amx_act_tiles(const uint8_t *xq, size_t xrb, int64_t tiles, int64_t nb, const float *dav,
                             const int32_t *sav, int bias, uint8_t *xt, float *dt, int32_t *st)
{
    for (int64_t T = 0; T < tiles; T++) {
        const uint8_t *x0 = xq + (size_t)(T * AMX_TOK) * xrb + offsetof(cdx_block_q8_0, qs);
        for (int64_t b = 0; b < nb; b++) { /* one block of the tile: 512 bytes written in order */
            const size_t o = (size_t)(T * nb + b);
#pragma GCC unroll 16
            for (int j = 0; j < AMX_TOK; j++) {
                const int64_t tok = T * AMX_TOK + j;
                _mm256_store_si256((__m256i *)(xt + o * 512 + 32 * (size_t)j),
                                   load32(x0 + (size_t)j * xrb + (size_t)b * sizeof(cdx_block_q8_0)));
                dt[o * 16 + (size_t)j] = dav[tok * nb + b];
                st[o * 16 + (size_t)j] = -bias * sav[tok * nb + b];
            }
        }
    }
}

/* Rows [r0, r1) of an x16 matrix (src: its packed copy, or NULL: read in place, each group packed
 * into scratch as the x16 drivers do) × the whole tiles of 16 of n tokens: y[t·ys + r], t < n − n %
 * 16. Row blocks of groups, then token tiles, then the block's groups: a tile's activations stay in
 * cache while every group of the block reads them. scratch: AMX_SCRATCH_BYTES, 64-aligned. Returns
 * the tokens done (the rest: the includer's micro kernels). */
KT_INLINE int64_t amx_x16_rows(int kind, const cdx_mat *w, const uint8_t *src, int64_t r0, int64_t r1, int64_t nb,
                               const uint8_t *xq, size_t xrb, int64_t n, const float *dav, const int32_t *sav, float *y,
                               uint8_t *scratch)
{
    const int64_t tiles = n / AMX_TOK;
    if (tiles == 0)
        return 0;
    const size_t qb = x16_qbytes(kind), gbytes = (size_t)nb * (qb + 32);
    const size_t ready = ((size_t)nb * 544 + 63) & ~(size_t)63; /* 512 + 32 a block, 64-aligned */
    const int bias = kind == W_Q4_0 ? 8 : 128;
    uint8_t *blockbuf = scratch; /* the row block's tile-ready groups: values, then the f16 scales */
    const int64_t rb_groups = AMX_RB_BYTES / ready > 0 ? (int64_t)(AMX_RB_BYTES / ready) : 1;
    uint8_t *xt = (uint8_t *)(((uintptr_t)(blockbuf + (AMX_RB_BYTES > ready ? AMX_RB_BYTES : ready)) + 63) & ~(uintptr_t)63);
    float *dt = (float *)(xt + (size_t)(tiles * AMX_TOK) * (size_t)nb * 32);
    int32_t *st = (int32_t *)(((uintptr_t)(dt + (size_t)(tiles * AMX_TOK * nb)) + 63) & ~(uintptr_t)63);
    amx_act_tiles(xq, xrb, tiles, nb, dav, sav, bias, xt, dt, st);
    amx_config();
    for (int64_t rb = r0; rb < r1; rb += 16 * rb_groups) {
        const int64_t ng = (r1 - rb) / 16 < rb_groups ? (r1 - rb) / 16 : rb_groups;
        const uint8_t *Qv[ng > 0 ? ng : 1];
        const uint16_t *S[ng > 0 ? ng : 1];
        for (int64_t g = 0; g < ng; g++) { /* each group's values and scales, tile-ready */
            uint8_t *buf = blockbuf + (size_t)g * ready;
            const uint8_t *Q = src ? src + (size_t)((rb - r0) / 16 + g) * gbytes : buf;
            if (!src) /* read in place: packed here (a 4-bit group's packed bytes fit before its values' end) */
                x16_pack_group(w, kind, rb / 16 + g, kind == W_Q8_0 ? buf : buf + (size_t)nb * 256, g + 1 < ng);
            if (!src && kind != W_Q8_0)
                Q = buf + (size_t)nb * 256;
            if (kind == W_Q8_0) {
                Qv[g] = Q;
                S[g] = (const uint16_t *)(Q + (size_t)nb * 512);
                continue;
            }
            uint16_t *Sg = (uint16_t *)(buf + (size_t)nb * 512);
            memmove(Sg, Q + (size_t)nb * 256, (size_t)nb * 32); /* the scales first: unpacking overwrites them in place */
            amx_unpack4(kind, Q, nb, buf);
            Qv[g] = buf;
            S[g] = Sg;
        }
        for (int64_t T = 0; T < tiles; T++)
            for (int64_t g = 0; g < ng; g++)
                amx_x16_tile(Qv[g], S[g], nb, xt + (size_t)(T * nb) * 512, dt + T * nb * 16, st + T * nb * 16,
                             y + T * AMX_TOK * w->rows + rb + 16 * g, w->rows);
    }
    return tiles * AMX_TOK;
}
