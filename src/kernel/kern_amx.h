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
 * Q4_K (x16k) takes the same tiles per 32-value sub-block, then x16k_micro's integer sums (scales,
 * mins) and float steps; Q6_K (x16q6) half-depth tiles per 16-value half, then x16q6_micro's;
 * Q5_K (x16k5) and IQ4_XS (x16xs) a tile a lane, the scales in the weights (at the end).
 *
 * Tiles (palette 1): A0/A1 = 16 tokens × one block of activations (32 s8 each, repacked once per
 * call in tile order: amx_act_tiles), B0/B1 = one block of 16 weight rows as the x16 layout
 * stores Q8_0 (8 rows of 64 bytes: word k of row i at 64k + 4i, u8; the 4-bit kinds unpacked to
 * that shape), C0-C3 = 16 tokens × 16 rows of i32, two pairs of blocks in flight (AMX_PIPELINE). */

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
 * hundred cycles against a matrix's worth of work). a_bytes: the activation tiles' width (32: one
 * 32-value block; 16: Q6_K's halves; 64: amx-gemm's bf16 tiles, every tile 16 × 64), b_rows: the weight
 * tiles' rows of 64 bytes (a_bytes / 4). */
KT_INLINE void amx_config_for(int a_bytes)
{
    amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[AMX_A0] = c.rows[AMX_A1] = AMX_TOK;
    c.colsb[AMX_A0] = c.colsb[AMX_A1] = (uint16_t)a_bytes;
    c.rows[AMX_B0] = c.rows[AMX_B1] = (uint8_t)(a_bytes / 4);
    c.colsb[AMX_B0] = c.colsb[AMX_B1] = 64;
    c.rows[AMX_C0] = c.rows[AMX_C1] = c.rows[AMX_C2] = c.rows[AMX_C3] = AMX_TOK;
    c.colsb[AMX_C0] = c.colsb[AMX_C1] = c.colsb[AMX_C2] = c.colsb[AMX_C3] = 64;
    _tile_loadconfig(&c);
}
#define amx_config() amx_config_for(32)

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

/* The weights two blocks ahead of where a first token tile reads them from memory (a Q8_0 group
 * read straight from its packed copy), into L1 and, farther, into L2: x16_micro's two distances.
 * Without it the tiles waited on DRAM, and 16 tokens ran slower than the VNNI kernel. */
KT_INLINE void amx_prefetch_pair(const uint8_t *q)
{
    for (size_t o = 0; o < 1024; o += 64) {
        _mm_prefetch((const char *)(q + X16_PF + o), X16_PF_HINT);
        _mm_prefetch((const char *)(q + X16_PF2 + o), _MM_HINT_T1);
    }
}

/* The weights and activations of the stage two ahead (2 KiB on), from L2 into L1: a token tile after
 * the first reads its group's weights from L2 (bench-kernels -t 1 Q8_0 2048 x 8192 x 512: +6-10 %) */
KT_INLINE void amx_prefetch_l1(const uint8_t *q, const uint8_t *x)
{
    for (size_t o = 0; o < 1024; o += 64) {
        _mm_prefetch((const char *)(q + 2048 + o), _MM_HINT_T0);
        _mm_prefetch((const char *)(x + 2048 + o), _MM_HINT_T0);
    }
}

/* Two tile products into CA and CB: activations at xa (xb) times weights at qa (qb), 16 tokens ×
 * 16 rows of i32 each, the tiles' shapes as amx_config_for set them. */
#define AMX_TILES2(xa, qa, xb, qb, CA, CB)  \
    do {                                    \
        _tile_loadd(AMX_A0, (xa), 32);      \
        _tile_loadd(AMX_B0, (qa), 64);      \
        _tile_loadd(AMX_A1, (xb), 32);      \
        _tile_loadd(AMX_B1, (qb), 64);      \
        _tile_zero(CA);                     \
        _tile_zero(CB);                     \
        _tile_dpbsud(CA, AMX_A0, AMX_B0);   \
        _tile_dpbsud(CB, AMX_A1, AMX_B1);   \
    } while (0)
/* Stages 0..n−1 (n >= 1), each ISSUE(stage, CA, CB) (two tile products) and then DRAIN(stage, CA,
 * CB) (the two tiles to memory and summed), in stage order, software-pipelined: a stage's products
 * are issued into one pair of C tiles while the stage before is stored from the other and summed
 * (a tile stored right after its product waits for it: 21 -> 16.5 ns a block in cache on this
 * Xeon). Needs cb[2][256], 64-aligned. */
#define AMX_PIPELINE(n, ISSUE, DRAIN)                     \
    do {                                                  \
        const int64_t amx_n_ = (n);                       \
        int64_t amx_s_ = 1;                               \
        ISSUE(0, AMX_C0, AMX_C1);                         \
        for (; amx_s_ + 2 <= amx_n_; amx_s_ += 2) {       \
            ISSUE(amx_s_, AMX_C2, AMX_C3);                \
            DRAIN(amx_s_ - 1, AMX_C0, AMX_C1);            \
            ISSUE(amx_s_ + 1, AMX_C0, AMX_C1);            \
            DRAIN(amx_s_, AMX_C2, AMX_C3);                \
        }                                                 \
        if (amx_s_ < amx_n_) {                            \
            ISSUE(amx_s_, AMX_C2, AMX_C3);                \
            DRAIN(amx_s_ - 1, AMX_C0, AMX_C1);            \
            DRAIN(amx_s_, AMX_C2, AMX_C3);                \
        } else {                                          \
            DRAIN(amx_s_ - 1, AMX_C0, AMX_C1);            \
        }                                                 \
    } while (0)

/* 16 rows (tile-ready values: 512 u8 bytes a block at Qv; f16 scales S[b·16 + i]) × one token tile
 * (xt: its nb blocks of 16 × 32 s8, dt/st: 16 scales and bias terms a block) over all nb blocks:
 * y[t·ys + i]. */
KT_INLINE void amx_x16_tile(const uint8_t *Qv, const uint16_t *S, int64_t nb, const uint8_t *xt, const float *dt,
                            const int32_t *st, float *y, int64_t ys, const bool pf)
{
    __m512 acc[AMX_TOK];
    _Alignas(64) int32_t cb[2][AMX_TOK * 16];
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++)
        acc[t] = _mm512_setzero_ps();
#define X16_POST(c, b) amx_block_post((c), _mm512_cvtph_ps(load32(S + 16 * (b))), dt + 16 * (b), st + 16 * (b), acc)
    /* a stage: blocks 2p and 2p + 1 */
#define X16_ISSUE(p, CA, CB)                                                                                        do {                                                                                                                if (pf)                                                                                                             amx_prefetch_pair(Qv + (size_t)(p) * 1024); else amx_prefetch_l1(Qv + (size_t)(p) * 1024, xt + (size_t)(p) * 1024);                                                                 AMX_TILES2(xt + (size_t)(p) * 1024, Qv + (size_t)(p) * 1024, xt + (size_t)(p) * 1024 + 512,                                  Qv + (size_t)(p) * 1024 + 512, CA, CB);                                                          } while (0)
#define X16_DRAIN(p, CA, CB)                 do {                                         _tile_stored(CA, cb[0], 64);             _tile_stored(CB, cb[1], 64);             X16_POST(cb[0], 2 * (p));                X16_POST(cb[1], 2 * (p) + 1);        } while (0)
    if (nb >= 2)
        AMX_PIPELINE(nb / 2, X16_ISSUE, X16_DRAIN);
#undef X16_ISSUE
#undef X16_DRAIN
    if (nb % 2) { /* the last block alone */
        const int64_t b = nb - 1;
        _tile_loadd(AMX_A0, xt + (size_t)b * 512, 32);
        _tile_loadd(AMX_B0, Qv + (size_t)b * 512, 64);
        _tile_zero(AMX_C0);
        _tile_dpbsud(AMX_C0, AMX_A0, AMX_B0);
        _tile_stored(AMX_C0, cb[0], 64);
        X16_POST(cb[0], b);
    }
#undef X16_POST
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++)
        _mm512_storeu_ps(y + t * ys, acc[t]);
}

/* ---- Q4_K (x16k) ----
 * A super-block's eight 32-value sub-blocks are eight tile blocks (index 8b + s): the same tiles,
 * then x16k_micro's steps: Σ_s dot_s·sc_s and Σ_s m_s·bsum_s exactly in i32 (any order gives the
 * same integers), then its two float steps per super-block. */

/* An x16k group's values (Q, nsb super-blocks) as 512 u8 bytes a sub-block: sub-block 2j of chunk j
 * is its low nibbles, 2j + 1 its high ones, as x16k_micro's wv[] hold them. */
KT_INLINE void amx_unpack_q4k(const uint8_t *Q, int64_t nsb, uint8_t *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < nsb; b++)
        for (int j = 0; j < 4; j++) {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const uint8_t *q = Q + (size_t)b * X16K_Q + 512 * (size_t)j + 64 * (size_t)k;
                _mm_prefetch((const char *)(q + X16_PF), X16_PF_HINT);
                const __m512i v = load64(q);
                _mm512_store_si512(out + ((size_t)b * 8 + 2 * (size_t)j) * 512 + 64 * (size_t)k, _mm512_and_si512(v, m4));
                _mm512_store_si512(out + ((size_t)b * 8 + 2 * (size_t)j + 1) * 512 + 64 * (size_t)k,
                                   _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            }
        }
}

/* Token j's i16 pairs (bs_2p, bs_2p+1) of super-block o (bs_s = bsums[2s] + bsums[2s + 1]) into ex
 * (amx_act_tiles_q8k's Q4_K and Q5_K layout; amx_mins_dot's other operand). */
KT_INLINE void amx_bsum_pairs(const cdx_block_q8_K *xb, int32_t *ex, size_t o, int j)
{
    for (int p = 0; p < 4; p++) {
        const int lo = xb->bsums[4 * p] + xb->bsums[4 * p + 1], hi = xb->bsums[4 * p + 2] + xb->bsums[4 * p + 3];
        ex[(o * 4 + (size_t)p) * 16 + (size_t)j] = (int32_t)(((uint32_t)(uint16_t)hi << 16) | (uint16_t)lo);
    }
}

/* The whole token tiles' q8_K activations in tile order: tile T, sub-block s of super-block b at
 * xt + ((T·nsb + b)·8 + s)·512 (token j's 32 s8 at + 32j), and dt[(T·nsb + b)·16 + j] = d. Q4_K:
 * ex[((T·nsb + b)·4 + p)·16 + j] = the i16 pair (bs_2p, bs_2p+1), bs_s = bsums[2s] + bsums[2s + 1];
 * Q6_K: ex[((T·nsb + b)·16 + h)·16 + j] = −32·bsums[h], the bias of 16 values. Q5_K and IQ4_XS
 * (amx_lane_tile) lane by lane instead: lane L of super-block b at xt + ((T·nsb + b)·8 + L)·512, token
 * j's 32 bytes the 4 values 4L.. of each sub-block in sub-block order; Q5_K's ex as Q4_K's. */
KT_INLINE void amx_act_tiles_q8k(int kind, const uint8_t *xq, size_t xrb, int64_t tiles, int64_t nsb, uint8_t *xt,
                                 float *dt, int32_t *ex)
{
    const bool lanes = kind == W_Q5_K || kind == W_IQ4_XS;
    for (int64_t T = 0; T < tiles; T++)
        for (int64_t b = 0; b < nsb; b++) {
            const size_t o = (size_t)(T * nsb + b);
            for (int j = 0; j < AMX_TOK; j++) {
                const cdx_block_q8_K *xb = (const cdx_block_q8_K *)(xq + (size_t)(T * AMX_TOK + j) * xrb) + b;
                if (lanes) {
                    uint32_t q[64];
                    memcpy(q, xb->qs, sizeof q); /* q[8s + L]: lane L of sub-block s */
                    for (int L = 0; L < 8; L++) {
                        uint32_t *dst = (uint32_t *)(xt + (o * 8 + (size_t)L) * 512 + 32 * (size_t)j);
#pragma GCC unroll 8
                        for (int s = 0; s < 8; s++)
                            dst[s] = q[8 * s + L];
                    }
                } else {
#pragma GCC unroll 8
                    for (int s = 0; s < 8; s++)
                        _mm256_store_si256((__m256i *)(xt + (o * 8 + (size_t)s) * 512 + 32 * (size_t)j), load32(xb->qs + 32 * s));
                }
                dt[o * 16 + (size_t)j] = xb->d;
                if (kind == W_Q4_K || kind == W_Q5_K)
                    amx_bsum_pairs(xb, ex, o, j);
                else if (kind == W_Q6_K)
                    for (int h = 0; h < 16; h++)
                        ex[(o * 16 + (size_t)h) * 16 + (size_t)j] = -32 * xb->bsums[h];
            }
        }
}

/* The mins of a Q4_K / Q5_K super-block's 16 rows (x16k meta at mb) as i16 pairs (m_2p, m_2p+1), for
 * amx_mins_dot against the activations' pairs (amx_bsum_pairs). */
KT_INLINE void amx_mins_pairs(const uint8_t *mb, __m512i *mpair)
{
    for (int p = 0; p < 4; p++) {
        const __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(mb + 128 + 32 * p)));
        const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(mb + 128 + 32 * p + 16)));
        mpair[p] = _mm512_or_si512(a, _mm512_slli_epi32(c, 16));
    }
}

/* Σ_s m_s·bs_s of token t for the 16 rows (vpdpwssd over the i16 pairs: the same integer as the
 * micro kernels' per-sub-block products) */
KT_INLINE __m512i amx_mins_dot(const __m512i *mpair, const int32_t *mp, int t)
{
    __m512i mi = _mm512_setzero_si512();
    for (int p = 0; p < 4; p++)
        mi = _mm512_dpwssd_epi32(mi, mpair[p], _mm512_set1_epi32(mp[p * 16 + t]));
    return mi;
}

/* A super-block's end (x16k_micro's): acc[t] += ai[t]·(d·da) − mi[t]·(dmin·da), mi = Σ_s m_s·bs_s;
 * ai reset. */
KT_INLINE void amx_q4k_super(const uint8_t *mb, const float *dt, const int32_t *mp, __m512i *ai, float *acc)
{
    __m512i mpair[4];
    amx_mins_pairs(mb, mpair);
    const __m512 d = _mm512_cvtph_ps(load32(mb + 256)), dmin = _mm512_cvtph_ps(load32(mb + 288));
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++) {
        const __m512i mi = amx_mins_dot(mpair, mp, t);
        const __m512 da = _mm512_set1_ps(dt[t]);
        __m512 a = _mm512_load_ps(acc + 16 * t);
        a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[t]), _mm512_mul_ps(d, da), a);
        a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mi), _mm512_mul_ps(dmin, da), a);
        _mm512_store_ps(acc + 16 * t, a);
        ai[t] = _mm512_setzero_si512();
    }
}

/* 16 rows of a Q4_K or Q6_K group (tile-ready values at Qv, the x16k / x16q6 scales at meta) × one
 * token tile (xt, dt; ex: Q4_K's mins pairs or Q6_K's biases −32·bsums, amx_act_tiles_q8k):
 * y[t·ys + i]. A Q4_K pipeline stage is two sub-blocks; a Q6_K stage one sub-block's two halves. */
KT_INLINE void amx_sb_tile(int kind, const uint8_t *Qv, const uint8_t *meta, int64_t nsb, const uint8_t *xt,
                           const float *dt, const int32_t *ex, float *y, int64_t ys)
{
    _Alignas(64) float acc[AMX_TOK * 16];
    _Alignas(64) int32_t cb[2][AMX_TOK * 16];
    __m512i ai[AMX_TOK];
    memset(acc, 0, sizeof acc);
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++)
        ai[t] = _mm512_setzero_si512();
    /* sub-block s of super-block b: ai += dot · sc; after the eighth, the super-block's float steps */
#define Q4K_POST(c, blk)                                                                                           \
    do {                                                                                                           \
        const int64_t b_ = (blk) / 8, s_ = (blk) % 8;                                                              \
        const uint8_t *mb_ = meta + (size_t)b_ * X16K_META;                                                        \
        const __m512i sc_ = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(mb_ + 16 * s_)));               \
        _Pragma("GCC unroll 16") for (int t = 0; t < AMX_TOK; t++)                                                 \
            ai[t] = _mm512_add_epi32(ai[t], _mm512_mullo_epi32(_mm512_load_si512((c) + 16 * t), sc_));            \
        if (s_ == 7)                                                                                               \
            amx_q4k_super(mb_, dt + b_ * 16, ex + b_ * 64, ai, acc);                                               \
    } while (0)
#define Q4K_ISSUE(p, CA, CB)                                                                                    \
    AMX_TILES2(xt + (size_t)(p) * 1024, Qv + (size_t)(p) * 1024, xt + (size_t)(p) * 1024 + 512,                   \
               Qv + (size_t)(p) * 1024 + 512, CA, CB)
#define Q4K_DRAIN(p, CA, CB)             \
    do {                                 \
        _tile_stored(CA, cb[0], 64);     \
        _tile_stored(CB, cb[1], 64);     \
        Q4K_POST(cb[0], 2 * (p));        \
        Q4K_POST(cb[1], 2 * (p) + 1);    \
    } while (0)
    if (kind == W_Q4_K)
        AMX_PIPELINE(nsb * 4, Q4K_ISSUE, Q4K_DRAIN); /* a stage: sub-blocks 2p and 2p + 1 */
#undef Q4K_ISSUE
#undef Q4K_DRAIN
#undef Q4K_POST
#define Q6_HALVES(s, CA, CB) /* sub-block s's two halves */                                                      \
    AMX_TILES2(xt + (size_t)(s) * 512, Qv + (size_t)(s) * 512, xt + (size_t)(s) * 512 + 16, Qv + (size_t)(s) * 512 + 256, \
               CA, CB)
#define Q6_DRAIN(s, CA, CB)                                                                                        \
    do {                                                                                                           \
        _tile_stored(CA, cb[0], 64);                                                                               \
        _tile_stored(CB, cb[1], 64);                                                                               \
        const int64_t b_ = (s) / 8, j_ = (s) % 8;                                                                  \
        const uint8_t *mb_ = meta + (size_t)b_ * X16Q6_META;                                                       \
        const __m512i sca_ = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(mb_ + 32 * j_)));             \
        const __m512i scb_ = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(mb_ + 32 * j_ + 16)));        \
        const int32_t *bl_ = ex + (size_t)(s) * 32, *bh_ = bl_ + 16;                                               \
        _Pragma("GCC unroll 16") for (int t = 0; t < AMX_TOK; t++) {                                               \
            const __m512i lo_ = _mm512_add_epi32(_mm512_load_si512(cb[0] + 16 * t), _mm512_set1_epi32(bl_[t]));   \
            const __m512i hi_ = _mm512_add_epi32(_mm512_load_si512(cb[1] + 16 * t), _mm512_set1_epi32(bh_[t]));   \
            ai[t] = _mm512_add_epi32(ai[t], _mm512_add_epi32(_mm512_mullo_epi32(lo_, sca_), _mm512_mullo_epi32(hi_, scb_))); \
        }                                                                                                          \
        if (j_ == 7) {                                                                                             \
            const __m512 d_ = _mm512_cvtph_ps(load32(mb_ + 256));                                                  \
            _Pragma("GCC unroll 16") for (int t = 0; t < AMX_TOK; t++) {                                           \
                _mm512_store_ps(acc + 16 * t, _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[t]),                           \
                                                               _mm512_mul_ps(d_, _mm512_set1_ps(dt[b_ * 16 + t])), \
                                                               _mm512_load_ps(acc + 16 * t)));                     \
                ai[t] = _mm512_setzero_si512();                                                                    \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)
    if (kind == W_Q6_K)
        AMX_PIPELINE(nsb * 8, Q6_HALVES, Q6_DRAIN);
#undef Q6_HALVES
#undef Q6_DRAIN
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++)
        _mm512_storeu_ps(y + t * ys, _mm512_load_ps(acc + 16 * t));
}

/* The values of an x16 group of a 4-bit kind (256 bytes a block at Q) as 512 u8 bytes a block, the
 * x16 Q8_0 layout's shape: x16_values4's vectors, row k of the block wv[k]. */
KT_INLINE void amx_unpack4(int kind, const uint8_t *Q, int64_t nb, uint8_t *out)
{
    for (int64_t b = 0; b < nb; b++) {
        for (size_t o = 0; o < 256; o += 64)
            _mm_prefetch((const char *)(Q + (size_t)b * 256 + X16_PF + o), X16_PF_HINT);
        __m512i wv[8];
        x16_values4(kind, Q + (size_t)b * 256, wv);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            _mm512_store_si512(out + (size_t)b * 512 + 64 * (size_t)k, wv[k]);
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
    /* the 4-bit kinds unpack each group once per call: below two tiles that costs more than the
     * tiles save (bench-kernels -t 2, Q4_0 2048 x 2048, 16 tokens: 491 GFLOP/s with tiles, 545
     * without; 32 tokens: 653 and 607) */
    if (tiles == 0 || (kind != W_Q8_0 && tiles < 2))
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
            uint16_t *Sg = (uint16_t *)(buf + (size_t)nb * 512); /* read in place, packing put them there */
            if (src)
                memcpy(Sg, Q + (size_t)nb * 256, (size_t)nb * 32);
            amx_unpack4(kind, Q, nb, buf); /* in place it reads each block before writing over it */
            Qv[g] = buf;
            S[g] = Sg;
        }
        for (int64_t T = 0; T < tiles; T++)
            for (int64_t g = 0; g < ng; g++)
                amx_x16_tile(Qv[g], S[g], nb, xt + (size_t)(T * nb) * 512, dt + T * nb * 16, st + T * nb * 16,
                             y + T * AMX_TOK * w->rows + rb + 16 * g, w->rows, T == 0 && kind == W_Q8_0 && src);
    }
    _tile_release(); /* back to the init state: a core whose tiles are in use stays out of its deep idle states */
    return tiles * AMX_TOK;
}

/* ---- Q6_K (x16q6) ----
 * Each 32-value sub-block is two dots of 16 values (their own int8 scales and −32·Σa biases), so
 * the tiles are half as deep: A = 16 tokens × 16 s8 (the same repacked activations, read 16 bytes
 * of every 32), B = 4 rows of 64 (one half of the unpacked sub-block), one C tile a half. Then
 * x16q6_micro's integers (ai += (lo − 32·bs)·sca + (hi − 32·bs)·scb) and its float step. */

/* An x16q6 group's values (Q, nsb super-blocks) as 512 u8 bytes a sub-block: the 6-bit values of
 * x16q6_micro's wv[0..7] (rows 0-3: values 0-15, rows 4-7: values 16-31). */
KT_INLINE void amx_unpack_q6k(const uint8_t *Q, int64_t nsb, uint8_t *out)
{
    for (int64_t b = 0; b < nsb; b++)
        for (int sb = 0; sb < 8; sb++) {
            const uint8_t *lo = Q + (size_t)b * X16Q6_Q + 384 * (size_t)sb, *hi = lo + 256;
            for (size_t o = 0; o < 384; o += 64)
                _mm_prefetch((const char *)(lo + X16_PF + o), X16_PF_HINT);
            __m512i wv[8];
            x16q6_values(lo, hi, wv);
            uint8_t *d = out + ((size_t)b * 8 + (size_t)sb) * 512;
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                _mm512_store_si512(d + 64 * k, wv[k]);
        }
}


/* Rows [r0, r1) of a Q4_K or Q6_K matrix (src: its packed copy, or NULL: read in place, each group
 * packed into grp first) × the whole token tiles of n, as amx_x16_rows does for the 32-value kinds;
 * returns the tokens done. */
KT_INLINE int64_t amx_sb_rows(int kind, const cdx_mat *w, const uint8_t *src, int64_t r0, int64_t r1,
                              const uint8_t *xq, size_t xrb, int64_t n, float *y, uint8_t *grp, uint8_t *scratch)
{
    const int64_t tiles = n / AMX_TOK, nsb = w->cols / 256;
    /* below two tiles the group's unpacking costs what the tiles save (amx_x16_rows): 16 streams of
     * Llama-1B Q4_K_M decoding, caldrix bench --parallel 16, ran 1-3 % slower with tiles */
    if (tiles < 2)
        return 0;
    const size_t qbytes = kind == W_Q4_K ? X16K_Q : X16Q6_Q, mbytes = kind == W_Q4_K ? X16K_META : X16Q6_META;
    const size_t gbytes = (size_t)nsb * (qbytes + mbytes);
    const size_t ready = ((size_t)nsb * (8 * 512 + mbytes) + 63) & ~(size_t)63;
    uint8_t *blockbuf = scratch;
    const int64_t rb_groups = AMX_RB_BYTES / ready > 0 ? (int64_t)(AMX_RB_BYTES / ready) : 1;
    uint8_t *xt = (uint8_t *)(((uintptr_t)(blockbuf + (AMX_RB_BYTES > ready ? AMX_RB_BYTES : ready)) + 63) & ~(uintptr_t)63);
    float *dt = (float *)(xt + (size_t)(tiles * AMX_TOK) * (size_t)w->cols);
    int32_t *ex = (int32_t *)(((uintptr_t)(dt + (size_t)(tiles * nsb * 16)) + 63) & ~(uintptr_t)63);
    const size_t ex_tile = (size_t)nsb * (kind == W_Q4_K ? 64 : 256); /* int32s a token tile */
    amx_act_tiles_q8k(kind, xq, xrb, tiles, nsb, xt, dt, ex);
    if (kind == W_Q4_K)
        amx_config();
    else
        amx_config_for(16);
    for (int64_t rb = r0; rb < r1; rb += 16 * rb_groups) {
        const int64_t ng = (r1 - rb) / 16 < rb_groups ? (r1 - rb) / 16 : rb_groups;
        for (int64_t g = 0; g < ng; g++) { /* each group's values, then its scales, tile-ready */
            uint8_t *buf = blockbuf + (size_t)g * ready;
            const uint8_t *Q = grp;
            if (src)
                Q = src + (size_t)((rb - r0) / 16 + g) * gbytes;
            else if (kind == W_Q4_K)
                pack_q4k_group(w, rb / 16 + g, grp, g + 1 < ng);
            else
                pack_q6k_group(w, rb / 16 + g, grp, g + 1 < ng);
            memcpy(buf + (size_t)nsb * 4096, Q + (size_t)nsb * qbytes, (size_t)nsb * mbytes);
            if (kind == W_Q4_K)
                amx_unpack_q4k(Q, nsb, buf);
            else
                amx_unpack_q6k(Q, nsb, buf);
        }
        for (int64_t T = 0; T < tiles; T++)
            for (int64_t g = 0; g < ng; g++) {
                const uint8_t *buf = blockbuf + (size_t)g * ready;
                const uint8_t *xtT = xt + (size_t)(T * nsb) * 4096;
                float *yT = y + T * AMX_TOK * w->rows + rb + 16 * g;
                amx_sb_tile(kind, buf, buf + (size_t)nsb * 4096, nsb, xtT, dt + T * nsb * 16, ex + (size_t)T * ex_tile, yT,
                            w->rows);
            }
    }
    _tile_release(); /* back to the init state: a core whose tiles are in use stays out of its deep idle states */
    return tiles * AMX_TOK;
}

/* ---- Q5_K (x16k5) and IQ4_XS (x16xs): a lane a tile ----
 * These rows keep llama.cpp's eight lanes (kern_wide512.h, x16k5_micro): lane L of a super-block is
 * Σ_s sc_s·(values 4L..4L+3 of sub-block s · the same activations), an exact i32 with its own float
 * sum. A tile adds every 4-byte group of its depth together, so the sub-block scales go into the
 * weights: v = w·sc (Q5_K 0..1953, IQ4_XS −4064..4064) as two byte planes, lo = v mod 256 (u8) and
 * hi = v >> 8 (s8), and the lane is C_lo + 256·C_hi, the same integer. A tile is one lane of one
 * super-block: A = 16 tokens × the lane's 8 groups (32 s8: amx_act_tiles_q8k), B = 8 rows of 64 (group
 * s: the 16 rows' 4 products), lo by tdpbsud and hi by tdpbssd. Then x16_lane_close's float step
 * and, after the last super-block, x16_lanes_hsum (+ Q5_K's mins, x16k5_micro's own float sum). */

/* Bytes a group's tile-ready super-block: 8 lanes × (lo, hi) × 512. */
#define AMX_LANE_SB 8192

/* One group-s word of 16 rows' 4 values (wv: u8 Q5_K, s8 IQ4_XS) times the rows' scale pairs (sc:
 * x16_sc_pairs) as the lo and hi byte planes of the exact i16 products. */
KT_INLINE void amx_lane_planes(__m512i wv, __m512i sc, bool sgn, uint8_t *lo, uint8_t *hi)
{
    const __m512i even = sgn ? _mm512_srai_epi16(_mm512_slli_epi16(wv, 8), 8) : _mm512_and_si512(wv, _mm512_set1_epi16(0xFF));
    const __m512i odd = sgn ? _mm512_srai_epi16(wv, 8) : _mm512_srli_epi16(wv, 8);
    const __m512i pe = _mm512_mullo_epi16(even, sc), po = _mm512_mullo_epi16(odd, sc);
    const __m512i lo8 = _mm512_set1_epi16(0xFF);
    _mm512_store_si512(lo, _mm512_or_si512(_mm512_and_si512(pe, lo8), _mm512_slli_epi16(po, 8)));
    _mm512_store_si512(hi, _mm512_or_si512(_mm512_srli_epi16(pe, 8), _mm512_andnot_si512(lo8, po)));
}

/* Q5_K's mins of one super-block into its own float sums, as x16k5_micro takes them: fs[t] −=
 * float(Σ_s m_s·bs_s)·(dmin·da). */
KT_INLINE void amx_q5k_mins(const uint8_t *mb, const float *dt, const int32_t *mp, __m512 *fs)
{
    __m512i mpair[4];
    amx_mins_pairs(mb, mpair);
    const __m512 dmin = _mm512_cvtph_ps(load32(mb + 288));
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++) {
        const __m512i mi = amx_mins_dot(mpair, mp, t);
        fs[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mi), _mm512_mul_ps(dmin, _mm512_set1_ps(dt[t])), fs[t]);
    }
}

/* An x16k5 or x16xs group's values (Q, scales at meta; nsb super-blocks) as the lane planes: lane L
 * of super-block b at out + b·AMX_LANE_SB + L·1024, lo then hi, group s's 64 bytes at 64s. */
KT_INLINE void amx_unpack_lanes(int kind, const uint8_t *Q, const uint8_t *meta, int64_t nsb, uint8_t *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    const __m512i kv = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cdx_kvalues_iq4nl));
    const bool q5 = kind == W_Q5_K;
    const size_t qbytes = q5 ? X16K5_Q : X16XS_Q, mbytes = q5 ? X16K5_META : X16XS_META;
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *qp = Q + (size_t)b * qbytes, *mb = meta + (size_t)b * mbytes;
        for (size_t o = 0; o < qbytes; o += 64)
            _mm_prefetch((const char *)(qp + X16_PF + o), X16_PF_HINT);
        __m512i sc[8];
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            sc[s] = x16_sc_pairs(mb + 16 * s, !q5);
        for (int L = 0; L < 8; L++) {
            uint8_t *lo = out + (size_t)b * AMX_LANE_SB + 1024 * (size_t)L, *hi = lo + 512;
            const __m512i h = q5 ? load64(qp + 2048 + 64 * L) : _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++) {
                __m512i wv;
                if (q5) { /* x16k5_micro's wv */
                    const __m512i v = load64(qp + 512 * (s / 2) + 64 * L);
                    const __m512i l4 = s % 2 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
                    const __m512i hb = s <= 4 ? _mm512_slli_epi16(h, 4 - s) : _mm512_srli_epi16(h, s - 4);
                    wv = _mm512_ternarylogic_epi32(l4, hb, m10, 0xF8);
                } else { /* x16xs_micro's nibbles through the table, signed */
                    const __m512i v = load64(qp + 256 * s + 64 * (L % 4));
                    wv = _mm512_shuffle_epi8(kv, L < 4 ? _mm512_and_si512(v, m4) : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                }
                amx_lane_planes(wv, sc[s], !q5, lo + 64 * s, hi + 64 * s);
            }
        }
    }
}

/* 16 rows of a Q5_K or IQ4_XS group (lane planes at Qv, the x16k5 / x16xs scales at meta) × one token
 * tile (xt, dt, ex: amx_act_tiles_q8k): y[t·ys + i]. A pipeline stage is one lane of one super-block. */
KT_INLINE void amx_lane_tile(int kind, const uint8_t *Qv, const uint8_t *meta, int64_t nsb, const uint8_t *xt,
                             const float *dt, const int32_t *ex, float *y, int64_t ys)
{
    const bool q5 = kind == W_Q5_K;
    const size_t mbytes = q5 ? X16K5_META : X16XS_META;
    _Alignas(64) float f[AMX_TOK][8][16];
    _Alignas(64) int32_t cb[2][AMX_TOK * 16];
    __m512 dd[AMX_TOK], fs[AMX_TOK];
    memset(f, 0, sizeof f);
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++)
        dd[t] = fs[t] = _mm512_setzero_ps();
#define LANE_ISSUE(p, CA, CB)                                        \
    do {                                                             \
        _tile_loadd(AMX_A0, xt + (size_t)(p) * 512, 32);             \
        _tile_loadd(AMX_B0, Qv + (size_t)(p) * 1024, 64);            \
        _tile_loadd(AMX_B1, Qv + (size_t)(p) * 1024 + 512, 64);      \
        _tile_zero(CA);                                              \
        _tile_zero(CB);                                              \
        _tile_dpbsud(CA, AMX_A0, AMX_B0);                            \
        _tile_dpbssd(CB, AMX_A0, AMX_B1);                            \
    } while (0)
    /* at a super-block's first lane: d·da a token (x16_lane_close's product) and Q5_K's mins */
#define LANE_DRAIN(p, CA, CB)                                                                                    \
    do {                                                                                                         \
        _tile_stored(CA, cb[0], 64);                                                                             \
        _tile_stored(CB, cb[1], 64);                                                                             \
        const int64_t b_ = (p) / 8, L_ = (p) % 8;                                                                \
        if (L_ == 0) {                                                                                           \
            const uint8_t *mb_ = meta + (size_t)b_ * mbytes;                                                     \
            const __m512 d_ = _mm512_cvtph_ps(load32(mb_ + (q5 ? 256 : 128)));                                 \
            _Pragma("GCC unroll 16") for (int t = 0; t < AMX_TOK; t++)                                           \
                dd[t] = _mm512_mul_ps(d_, _mm512_set1_ps(dt[b_ * 16 + t]));                                       \
            if (q5)                                                                                              \
                amx_q5k_mins(mb_, dt + b_ * 16, ex + b_ * 64, fs);                                               \
        }                                                                                                        \
        _Pragma("GCC unroll 16") for (int t = 0; t < AMX_TOK; t++) {                                             \
            const __m512i v_ = _mm512_add_epi32(_mm512_load_si512(cb[0] + 16 * t),                              \
                                                _mm512_slli_epi32(_mm512_load_si512(cb[1] + 16 * t), 8));        \
            _mm512_store_ps(f[t][L_], _mm512_fmadd_ps(_mm512_cvtepi32_ps(v_), dd[t], _mm512_load_ps(f[t][L_]))); \
        }                                                                                                        \
    } while (0)
    AMX_PIPELINE(nsb * 8, LANE_ISSUE, LANE_DRAIN);
#undef LANE_ISSUE
#undef LANE_DRAIN
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOK; t++) {
        __m512 l[8];
        for (int L = 0; L < 8; L++)
            l[L] = _mm512_load_ps(f[t][L]);
        const __m512 r = x16_lanes_hsum(l);
        _mm512_storeu_ps(y + t * ys, q5 ? _mm512_add_ps(r, fs[t]) : r);
    }
}

/* Rows [r0, r1) of a Q5_K or IQ4_XS matrix (src: its packed copy, or NULL: read in place, each group
 * packed into grp first) × the whole token tiles of n, as amx_sb_rows; returns the tokens done (0
 * where a group's planes do not fit a row block: the micro kernels then take them all). */
KT_INLINE int64_t amx_lane_rows(int kind, const cdx_mat *w, const uint8_t *src, int64_t r0, int64_t r1,
                                const uint8_t *xq, size_t xrb, int64_t n, float *y, uint8_t *grp, uint8_t *scratch)
{
    const int64_t tiles = n / AMX_TOK, nsb = w->cols / 256;
    const bool q5 = kind == W_Q5_K;
    const size_t qbytes = q5 ? X16K5_Q : X16XS_Q, mbytes = q5 ? X16K5_META : X16XS_META;
    const size_t gbytes = (size_t)nsb * (qbytes + mbytes);
    const size_t ready = ((size_t)nsb * (AMX_LANE_SB + mbytes) + 63) & ~(size_t)63;
    if (tiles < 2 || ready > AMX_RB_BYTES) /* below two tiles: amx_sb_rows' reason */
        return 0;
    uint8_t *blockbuf = scratch;
    const int64_t rb_groups = (int64_t)(AMX_RB_BYTES / ready);
    uint8_t *xt = (uint8_t *)(((uintptr_t)(blockbuf + AMX_RB_BYTES) + 63) & ~(uintptr_t)63);
    float *dt = (float *)(xt + (size_t)(tiles * AMX_TOK) * (size_t)w->cols);
    int32_t *ex = (int32_t *)(((uintptr_t)(dt + (size_t)(tiles * nsb * 16)) + 63) & ~(uintptr_t)63);
    const size_t ex_tile = (size_t)nsb * 64; /* int32s a token tile */
    amx_act_tiles_q8k(kind, xq, xrb, tiles, nsb, xt, dt, ex);
    amx_config();
    for (int64_t rb = r0; rb < r1; rb += 16 * rb_groups) {
        const int64_t ng = (r1 - rb) / 16 < rb_groups ? (r1 - rb) / 16 : rb_groups;
        for (int64_t g = 0; g < ng; g++) { /* each group's lane planes, then its scales */
            uint8_t *buf = blockbuf + (size_t)g * ready;
            const uint8_t *Q = grp;
            if (src)
                Q = src + (size_t)((rb - r0) / 16 + g) * gbytes;
            else if (q5)
                pack_q5k_group(w, rb / 16 + g, grp, g + 1 < ng);
            else
                pack_iq4xs_group(w, rb / 16 + g, grp, g + 1 < ng);
            memcpy(buf + (size_t)nsb * AMX_LANE_SB, Q + (size_t)nsb * qbytes, (size_t)nsb * mbytes);
            amx_unpack_lanes(kind, Q, Q + (size_t)nsb * qbytes, nsb, buf);
        }
        for (int64_t T = 0; T < tiles; T++)
            for (int64_t g = 0; g < ng; g++) {
                const uint8_t *buf = blockbuf + (size_t)g * ready;
                amx_lane_tile(kind, buf, buf + (size_t)nsb * AMX_LANE_SB, nsb, xt + (size_t)(T * nsb) * 4096,
                              dt + T * nsb * 16, ex + (size_t)T * ex_tile, y + T * AMX_TOK * w->rows + rb + 16 * g, w->rows);
            }
    }
    _tile_release(); /* back to the init state: a core whose tiles are in use stays out of its deep idle states */
    return tiles * AMX_TOK;
}

#ifdef KT_AMX_BF16
/* ---- F16 / BF16 weights in BF16 tiles (the opt-in "amx-gemm" set) ----
 * Where the activations are rounded to the weights' half type (cdx_mat.act_half, as ggml rounds
 * them), every value v of both sides is the sum of two bf16 values: hi = v with its low 16 bits
 * cleared, lo = v − hi (an f16's 11 significant bits: 8 in hi, at most 3 in lo; a bf16 value: lo =
 * 0). So w·a = hi·hi + hi·lo + lo·hi + lo·lo, four products that tdpbf16ps makes exactly, summed in
 * f32: the f32 dot of the same values, in the tiles' order instead of the decode rows' (not batch
 * invariant, hence opt-in; tests/kernel/test_kernels.c holds it to the double dot within f32's
 * summation bound, and to exact sums where no order can round).
 * Tiles: A = 16 tokens × a chunk of 32 columns of the activations' planes (made once per matmul by
 * amxf_act, 1 KiB a tile), B = the chunk's 16 column pairs × 16 weight rows (a group's planes, made per block of
 * AMXF_KC chunks into scratch), C = 16 tokens × 16 rows of f32, kept in scratch between column blocks
 * (row blocks of CDX_FTILE_RB groups, so that the column block's activations are read from L2 by all of
 * them) and stored in y after the last. */
#define AMXF_KC CDX_FTILE_KC /* chunks of 32 columns a block: a group's planes (32 KiB) stay in L1 */
#define AMXF_A0 0  /* token tile 0: hi, lo planes; token tile 1: 2, 3 */
#define AMXF_BH 4  /* the group's hi and lo planes */
#define AMXF_BL 5
#define AMXF_C0 6
#define AMXF_C1 7

/* The 16 × 16 dwords r[i][j] -> r[j][i] */
KT_INLINE void amxf_transpose16(__m512i *r)
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) {
            t[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
            t[8 * i + 4 + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
    }
}

/* 32 f32 values (v0: the first 16) as their bf16 hi and lo planes, 32 bf16 each (exact: see above) */
KT_INLINE void amxf_split(__m512 v0, __m512 v1, __m512i *hi, __m512i *lo)
{
    const __m512 m = _mm512_castsi512_ps(_mm512_set1_epi32((int)0xFFFF0000u));
    const __m512 h0 = _mm512_and_ps(v0, m), h1 = _mm512_and_ps(v1, m);
    *hi = (__m512i)_mm512_cvtne2ps_pbh(h1, h0);
    *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(v1, h1), _mm512_sub_ps(v0, h0));
}

/* ftile_act: the tokens of tiles [t0, t1) of x (cols values a token) as A tiles: tile T, chunk c (32
 * columns) at out + ((T·nck + c)·2 + plane)·1024 bytes, token t's 32 bf16 at + 64t. */
static void KT(amxf_act)(const float *x, int64_t cols, int64_t t0, int64_t t1, void *out)
{
    const int64_t nck = cols / 32;
    for (int64_t T = t0; T < t1; T++)
        for (int64_t c = 0; c < nck; c++) {
            uint8_t *o = (uint8_t *)out + (size_t)((T * nck + c) * 2) * 1024;
            for (int t = 0; t < 16; t++) {
                const float *p = x + (T * 16 + t) * cols + 32 * c;
                __m512i hv, lv;
                amxf_split(_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16), &hv, &lv);
                _mm512_store_si512(o + 64 * t, hv);
                _mm512_store_si512(o + 1024 + 64 * t, lv);
            }
        }
}
#define KT_FTILE_ACT KT(amxf_act)

/* The B planes of rows [r, r + 16) of w, chunks [c0, c1): chunk c's hi plane at wb + (c − c0)·2048
 * bytes, its lo plane 1024 bytes after (2 KiB a chunk); dword [k][i] = row i's pair (2k, 2k + 1). */
KT_INLINE void amxf_weights(int kind, const cdx_mat *w, int64_t r, int64_t c0, int64_t c1, uint8_t *wb)
{
    const bool lo = kind == W_F16; /* bf16 values have no lo plane */
    for (int64_t c = c0; c < c1; c++) {
        __m512i h[16], l[16];
        for (int i = 0; i < 16; i++) {
            const uint8_t *p = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes + 64 * (size_t)c;
            __m512 v0, v1;
            if (kind == W_F16) {
                v0 = _mm512_cvtph_ps(load32(p));
                v1 = _mm512_cvtph_ps(load32(p + 32));
            } else {
                v0 = vf_load_bf16(p);
                v1 = vf_load_bf16(p + 32);
            }
            amxf_split(v0, v1, &h[i], &l[i]);
        }
        amxf_transpose16(h);
        uint8_t *o = wb + (size_t)(c - c0) * 2048;
        for (int k = 0; k < 16; k++)
            _mm512_store_si512(o + 64 * k, h[k]);
        if (lo) {
            amxf_transpose16(l);
            for (int k = 0; k < 16; k++)
                _mm512_store_si512(o + 1024 + 64 * k, l[k]);
        }
    }
}

/* Rows [r0, r1) (whole groups of 16) × the whole token tiles of n (xa: amxf_act's planes) into
 * y[t·w->rows + r]; returns the tokens done (0: not for this matrix). BF16 weights with bf16
 * activations have no lo planes (zero): one product a chunk and token tile, hi·hi. */
KT_INLINE int64_t amxf_rows(int kind, const cdx_mat *w, int64_t r0, int64_t r1, const void *xa, int64_t n, float *y,
                            void *scratch)
{
    const int64_t cols = w->cols, nck = cols / 32, tiles = n / 16, ys = w->rows;
    if ((kind != W_F16 && kind != W_BF16) || cols % 32 || (r1 - r0) % 16 || tiles < CDX_FTILE_MIN_N / 16)
        return 0;
    const bool lo = kind == W_F16; /* bf16 values: every lo plane is zero */
    uint8_t *wb = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    /* the C tiles of a row block between column blocks, 1 KiB each, in the order they are used */
    uint8_t *cbuf = (uint8_t *)(((uintptr_t)(wb + (size_t)AMXF_KC * 2048) + 63) & ~(uintptr_t)63);
    const uint8_t *xb = xa;
    amx_config_for(64); /* every tile 16 rows of 64 bytes */
    for (int64_t rb = r0; rb < r1; rb += 16 * CDX_FTILE_RB) {
        const int64_t re = rb + 16 * CDX_FTILE_RB < r1 ? rb + 16 * CDX_FTILE_RB : r1;
        for (int64_t c0 = 0; c0 < nck; c0 += AMXF_KC) {
            const int64_t c1 = c0 + AMXF_KC < nck ? c0 + AMXF_KC : nck;
            const bool first = c0 == 0, last = c1 == nck;
            for (int64_t r = rb; r < re; r += 16) {
                amxf_weights(kind, w, r, c0, c1, wb);
                uint8_t *cg = cbuf + (size_t)((r - rb) / 16 * tiles) * 1024;
                /* token tiles two at a time; an odd last one is computed in both C tiles, stored once */
                for (int64_t T = 0; T < tiles; T += 2) {
                    const bool two = T + 1 < tiles;
                    float *y0 = y + (T * 16) * ys + r, *y1 = y0 + 16 * ys;
                    uint8_t *k0 = cg + (size_t)T * 1024, *k1 = two ? k0 + 1024 : k0;
                    if (first) {
                        _tile_zero(AMXF_C0);
                        _tile_zero(AMXF_C1);
                    } else {
                        _tile_loadd(AMXF_C0, k0, 64);
                        _tile_loadd(AMXF_C1, k1, 64);
                    }
                    const uint8_t *a0 = xb + (size_t)(T * nck) * 2048, *a1 = two ? a0 + (size_t)nck * 2048 : a0;
                    for (int64_t c = c0; c < c1; c++) {
                        const uint8_t *b = wb + (size_t)(c - c0) * 2048;
                        _tile_loadd(AMXF_BH, b, 64);
                        _tile_loadd(0, a0 + (size_t)c * 2048, 64);
                        _tile_loadd(2, a1 + (size_t)c * 2048, 64);
                        _tile_dpbf16ps(AMXF_C0, 0, AMXF_BH);
                        _tile_dpbf16ps(AMXF_C1, 2, AMXF_BH);
                        if (lo) { /* the three products with a lo plane (bf16: all zero, skipped) */
                            _tile_loadd(1, a0 + (size_t)c * 2048 + 1024, 64);
                            _tile_loadd(3, a1 + (size_t)c * 2048 + 1024, 64);
                            _tile_dpbf16ps(AMXF_C0, 1, AMXF_BH);
                            _tile_dpbf16ps(AMXF_C1, 3, AMXF_BH);
                            _tile_loadd(AMXF_BL, b + 1024, 64);
                            _tile_dpbf16ps(AMXF_C0, 0, AMXF_BL);
                            _tile_dpbf16ps(AMXF_C1, 2, AMXF_BL);
                            _tile_dpbf16ps(AMXF_C0, 1, AMXF_BL);
                            _tile_dpbf16ps(AMXF_C1, 3, AMXF_BL);
                        }
                    }
                    if (last) {
                        _tile_stored(AMXF_C0, y0, ys * 4);
                        if (two)
                            _tile_stored(AMXF_C1, y1, ys * 4);
                    } else {
                        _tile_stored(AMXF_C0, k0, 64);
                        if (two)
                            _tile_stored(AMXF_C1, k1, 64);
                    }
                }
            }
        }
    }
    _tile_release();
    return tiles * 16;
}
#define KT_FTILES(kind, w, r0, r1, xq, n, y, scratch) amxf_rows(kind, w, r0, r1, xq, n, y, scratch)
#endif
