/* Inside the kernel layer: the table of function pointers one ISA provides. */
#ifndef CDX_KERNEL_IMPL_H
#define CDX_KERNEL_IMPL_H

#include "caldrix/kernel.h"

#include <math.h>

/* Computes y[t*w->rows + r] for r in [r0, r1) and t < n. x: f32 activations [n][cols];
 * xq: the same quantized to the type's vec_dot_type (NULL for F32/F16/BF16 weights).
 * scratch: this thread's own cdx_kernel_scratch_bytes(cols), 64-byte aligned. */
typedef void (*cdx_row_kernel)(const cdx_mat *w, int64_t r0, int64_t r1, const float *x, const void *xq,
                               size_t xq_row_bytes, int64_t n, float *y, void *scratch);

/* Prefill (n >= CDX_GEMM_MIN_N) unpacks CDX_GEMM_PANEL weight rows at a time into u8 with one
 * float scale (and offset) per group of 16 or 32 values, interleaved 4 bytes per row, and runs
 * an integer GEMM over it; the per-thread scratch holds that panel and the activations' group
 * sums for CDX_GEMM_TOK tokens. */
#define CDX_GEMM_MIN_N 8
#define CDX_GEMM_PANEL 16
#define CDX_GEMM_TOK 8
/* The float GEMM (F32/F16/BF16 weights, f32 activations, n >= CDX_GEMM_MIN_N) converts a panel of
 * at most CDX_FGEMM_MAX_RP rows × one block of at most CDX_FGEMM_MAX_KC columns to f32 once, at most
 * CDX_FGEMM_PANEL_BYTES (or CDX_FGEMM_MAX_R rows), and keeps the vector accumulators (up to 16
 * floats) of that panel × up to CDX_FGEMM_MAX_TP tokens while it walks the column blocks. */
#define CDX_FGEMM_PANEL_BYTES (160u << 10)
#define CDX_FGEMM_MAX_R 4
#define CDX_FGEMM_MAX_T 12
#define CDX_FGEMM_MAX_RP 64
#define CDX_FGEMM_MAX_TP 48
#define CDX_FGEMM_MAX_KC 1024
/* The bf16 tile planes of n tokens' activations (whole tiles of 16: two planes of 2 bytes a value) */
#define CDX_FTILE_TOK 16
#define CDX_FTILE_MIN_N 32
#define CDX_FTILE_KC 16 /* chunks of 32 columns a block of a group's planes (2 KiB a chunk, in scratch) */
#define CDX_FTILE_RB 8  /* groups of 16 rows whose C tiles (1 KiB a token tile) scratch keeps between blocks */
#define CDX_FTILE_ACT_BYTES(n, cols) ((size_t)((n) / CDX_FTILE_TOK * CDX_FTILE_TOK) * (size_t)(cols) * 4)
/* The amx set's batches (kern_amx.h): a row block of tile-ready groups (CDX_AMX_RB_BYTES, at least
 * one group of 17 bytes a column) and the activations of the whole token tiles in tile order, with
 * their scales and bias terms. */
#define CDX_AMX_RB_BYTES (512u << 10)
#define CDX_AMX_SCRATCH_BYTES(c, n)                                                                   \
    ((size_t)CDX_AMX_RB_BYTES + 18 * (size_t)(c) + 3 * 64 + (size_t)(n) * (size_t)(c) +               \
     (size_t)(n) * ((size_t)(c) / 32) * 9 + 3 * 64)
static inline size_t cdx_kernel_scratch_bytes(int64_t cols, int64_t n)
{
    size_t c = (size_t)cols, g = c / 16 + 1; /* groups of at least 16 values */
    size_t generic = c * sizeof(float);      /* one dequantized row */
    size_t gemm = CDX_GEMM_PANEL * c + 64                       /* u8 panel */
                + 2 * (g * CDX_GEMM_PANEL * sizeof(float) + 64)  /* scales and offsets per group */
                + (size_t)n * 2 * (g * sizeof(float)) + 2 * 64;  /* activation scales and sums */
    size_t b = generic > gemm ? generic : gemm;
    /* the x16 drivers: activation scales and sums, then a 16-row Q8_0 group packed as it is read
     * (a matrix read in place, cdx_matmul_in_place), then the amx set's (sized for every set: this
     * function does not know which runs) */
    size_t x16 = (size_t)n * (c / 32) * 8 + 64 + 17 * c + 64 + CDX_AMX_SCRATCH_BYTES(c, n);
    b = b > x16 ? b : x16;
    if (n >= CDX_FTILE_MIN_N) { /* kern_amx.h's float tiles: a block of a group's planes, a row block's C tiles */
        size_t ft = CDX_FTILE_KC * 2048u + 64 + (size_t)CDX_FTILE_RB * (size_t)(n / 16) * 1024 + 64;
        b = b > ft ? b : ft;
    }
    if (n >= CDX_GEMM_MIN_N) {
        size_t rowb = (CDX_FGEMM_MAX_KC + 32) * sizeof(float), panel = CDX_FGEMM_MAX_R * rowb;
        size_t fg = (panel > CDX_FGEMM_PANEL_BYTES ? panel : CDX_FGEMM_PANEL_BYTES) + 64
                  + (size_t)CDX_FGEMM_MAX_RP * CDX_FGEMM_MAX_TP * 16 * sizeof(float) + 64;
        b = b > fg ? b : fg;
    }
    return (b + 63) & ~(size_t)63;
}
typedef void (*cdx_quantize_fn)(const float *x, void *out, int64_t n);

/* f32 vector primitives for norms, softmax and attention. */
typedef struct cdx_vec_ops {
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n);   /* y += a·x */
    void (*scale)(float *y, float a, int64_t n);                  /* y *= a */
    float (*max)(const float *x, int64_t n);
    float (*exp_sum)(float *x, float sub, int64_t n);            /* x = exp(x - sub); returns Σ */
    void (*round_half)(const float *x, float *y, int64_t n, int f16); /* y = x through f16 (or bf16) */
    void (*silu_mul)(float *g, const float *u, int64_t n);        /* g = g / (1 + expf(-g)) · u */
    double (*lse)(const float *x, int64_t n); /* max + log Σ expf(x - max), the sum in double; n >= 1 */
    void (*silu)(float *x, int64_t n);                           /* x = x / (1 + expf(-x)) */
    void (*erf)(float *x, int64_t n);                            /* x = erf(x): cdx_erf_ref's bits (kern_erf.h) */
    void (*gelu)(float *x, int64_t n);                           /* x = x·0.5·(1 + erf(x/√2)): cdx_gelu_ref's bits */
    void (*to_half)(const float *x, uint16_t *y, int64_t n, int f16); /* y = cdx_f32_to_f16 (or _bf16) of x */
} cdx_vec_ops;

extern const cdx_vec_ops cdx_vec_scalar;

/* cdx_logsumexp's order, the same on every kernel set (so a logprob has the same bits on each):
 * term i = (double)expf(x[i] - max) goes to lane i mod CDX_LSE_LANES, each lane summing its terms in
 * index order from 0; then lanes j and j + w are added for w = 8, 4, 2, 1. The scalar twin adds
 * one term at a time; AVX2 keeps the 16 lanes in four vectors of 4 doubles, AVX-512 in two of 8.
 * This ends it: lane[] holds the whole chunks' sums, tail the n_tail (< 16) terms left. */
#define CDX_LSE_LANES 16
static inline double cdx_lse_finish(double *lane, const float *tail, int64_t n_tail, float mx)
{
    for (int64_t j = 0; j < n_tail; j++)
        lane[j] += (double)expf(tail[j] - mx);
    for (int w = CDX_LSE_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            lane[j] += lane[j + w];
    return (double)mx + log(lane[0]);
}

struct cdx_kernels {
    const char *isa;
    const cdx_vec_ops *vec;                   /* NULL: cdx_vec_scalar */
    cdx_row_kernel row[CDX_TYPE_COUNT];       /* NULL: the generic scalar path */
    cdx_quantize_fn quantize[CDX_TYPE_COUNT]; /* activation quantizers; NULL: the scalar act_from_f32 (or from_f32) */
    /* The set's load-time layout of a matrix (see cdx_matmul_pack): its size (0: this set keeps
     * the native layout for w) and the repacking of row groups [g0, g1) of 16 rows. NULL: none. */
    size_t (*pack_bytes)(const cdx_mat *w);
    void (*pack)(const cdx_mat *w, void *out, int64_t g0, int64_t g1);
    /* Whether the set reads w in its native layout with the packed layout's bits (cdx_matmul_in_place). */
    bool (*in_place)(const cdx_mat *w);
    /* BF16 weights × bf16 activations (cdx_mat.act_bf16) with bf16 dot instructions, used only where
     * the CPU has AVX512_BF16: xq holds the activations as bf16 rows of xq_row_bytes. NULL: none. */
    cdx_row_kernel row_bf16dp;
    /* Query rows r[0..nr-1] (sharing their cache tables, offset and lo) × KV head g's `group` query
     * heads (h0..) over an F32 cache, each row with the bits attn.c's blocked loop gives it alone
     * with this set's vec primitives; false, before any work: not for this shape (attn.c runs its
     * loop). NULL: none. */
    bool (*attn_f32)(const cdx_attn_shape *s, const cdx_attn_row *r, int nr, int g, int h0, int group);
    /* The same over an F16 cache, with the bits attn.c's attn_head_f16 gives each row alone with this
     * set's primitives (all `group` heads of KV head g, h0 = g·group); false, before any work: not for
     * this shape. NULL: none. */
    bool (*attn_f16)(const cdx_attn_shape *s, const cdx_attn_row *r, int nr, int g, int h0, int group);
    /* F16/BF16 weights × activations rounded to their half type (cdx_mat.act_half) in BF16 tiles (the
     * opt-in amx-gemm set): token tiles [t0, t1) of x (n rows of cols, cols % 32 == 0) split into
     * their bf16 planes at out (CDX_FTILE_ACT_BYTES), once per matmul; the row kernel then gets them
     * as xq with xq_row_bytes 0. NULL: none. */
    void (*ftile_act)(const float *x, int64_t cols, int64_t t0, int64_t t1, void *out);
};

/* vdpbf16ps (matmul_bf16dp_avx512.c) and its scalar twin (matmul_bf16dp.c), which tests hold it to */
void cdx_rows_bf16dp_avx512(const cdx_mat *w, int64_t r0, int64_t r1, const float *x, const void *xq, size_t xrb,
                            int64_t n, float *y, void *scratch);
void cdx_rows_bf16dp_ref(const cdx_mat *w, int64_t r0, int64_t r1, const float *x, const void *xq, size_t xrb,
                         int64_t n, float *y, void *scratch);
float cdx_dot_bf16dp_ref(const uint16_t *w, const uint16_t *x, int64_t n);

/* The scalar twin of the SIMD float rows (matmul_lanes.c): row w (F32, F16 or BF16 values) · x over
 * n columns, summed as vectors of `lanes` floats sum it (8: avx2, 16: avx512; a power of two). */
float cdx_dot_lanes_ref(uint32_t type, const void *w, const float *x, int64_t n, int lanes);

extern const cdx_kernels cdx_kernels_avx2;
extern const cdx_kernels cdx_kernels_avx512;
extern const cdx_kernels cdx_kernels_avx512g; /* "avx512-gemm": not batch invariant, opt-in */
extern const cdx_kernels cdx_kernels_amx;     /* AVX-512 with AMX tiles for batches: the avx512 set's bits */
extern const cdx_kernels cdx_kernels_amxg;    /* "amx-gemm": amx + BF16 tiles for F16/BF16, not batch invariant, opt-in */

#endif
