/* Training's f32 GEMM (src/train/tgemm.c; the AVX-512 and AVX2 micro-kernels in tgemm_avx512.c and
 * tgemm_avx2.c, the scalar twin in tgemm.c):
 *
 *   C[i][j] = (acc ? C[i][j] : 0) + Σ_k (alpha · A(i,k)) · B(k,j)      i < M, j < N, k < K
 *
 * A(i,k) = a[i·a_rs + k·a_cs] and B(k,j) = b[k·b_rs + j·b_cs]: any of the three products of a linear
 * layer without copies (y = x·Wᵀ: A = x, B(k,j) = W[j][k]; dX = dY·W; dW = dYᵀ·X: A(i,k) = dY[k][i]).
 * Every C value is one f32 fused multiply-add chain in k order (from C itself, or from 0), whatever
 * the kernel set and thread count: the SIMD kernels equal their scalar twin bit for bit, and the
 * results do not depend on the threads (the work is split over blocks of C, never over k).
 * B is packed in panels of TG_KC × TG_NR (32 KB on each thread's stack); C is row-major, row stride ldc. */
#ifndef CDX_TRAIN_TGEMM_H
#define CDX_TRAIN_TGEMM_H

#include "caldrix/pool.h"

#include <stdbool.h>
#include <stdint.h>

#define TG_NR 32  /* columns of C a micro-kernel call computes (a packed panel's width) */
#define TG_MR 8   /* rows of C a micro-kernel call computes at most */
#define TG_KC 256 /* depth of a packed panel */

typedef enum { TG_SCALAR, TG_AVX2, TG_AVX512 } tg_isa;

typedef struct {
    int64_t M, N, K;
    const float *a;
    int64_t a_rs, a_cs;
    const float *b;
    int64_t b_rs, b_cs;
    float *c;
    int64_t ldc;
    float alpha;
    bool acc;
} tg_args;

/* The micro-kernel: rows i0..i0+mr (mr <= TG_MR) of C, columns j0..j0+nr (nr <= TG_NR), depth k0..k0+kc,
 * from the packed panel bp[kc][TG_NR]; load: start from C (else from 0). */
typedef void (*tg_ukr)(int mr, int nr, int64_t kc, const float *a, int64_t a_rs, int64_t a_cs, float alpha,
                       const float *bp, float *c, int64_t ldc, bool load);

void tg_ukr_scalar(int mr, int nr, int64_t kc, const float *a, int64_t a_rs, int64_t a_cs, float alpha,
                   const float *bp, float *c, int64_t ldc, bool load);
void tg_ukr_avx2(int mr, int nr, int64_t kc, const float *a, int64_t a_rs, int64_t a_cs, float alpha,
                 const float *bp, float *c, int64_t ldc, bool load);
void tg_ukr_avx512(int mr, int nr, int64_t kc, const float *a, int64_t a_rs, int64_t a_cs, float alpha,
                   const float *bp, float *c, int64_t ldc, bool load);

/* The attention's steps on one head's vectors (train.c): the dot product as 8 partial sums by index
 * mod 8 joined in a fixed tree, and y += a·x; every product is rounded before its add (no fused
 * multiply-add, as the plain C twin compiles), so the AVX2 versions equal the scalar ones bit for bit
 * (tests/train/test_tgemm.c). */
typedef float (*tg_dot_fn)(const float *a, const float *b, int64_t n);
typedef void (*tg_axpy_fn)(float *y, float a, const float *x, int64_t n);
float tg_dot_scalar(const float *a, const float *b, int64_t n);
void tg_axpy_scalar(float *y, float a, const float *x, int64_t n);
float tg_dot_avx2(const float *a, const float *b, int64_t n);
void tg_axpy_avx2(float *y, float a, const float *x, int64_t n);

/* The pack of a full panel (TG_NR columns) whose B(k,j) = b[j·b_cs + k] (y = x·Wᵀ: rows of W), by 8 × 8
 * transposes; a copy, so the same bits as the plain loop in tgemm.c. bp: 32-byte aligned. */
void tg_pack_t_avx2(const float *b, int64_t b_cs, int64_t kc, float *bp);

/* The kernel set the engine's kernels name (cdx_kernels_best: avx512 / avx2 / scalar). */
tg_isa tg_isa_best(void);

/* C as above, over pool's threads (NULL or small products: the caller's thread). */
void tg_gemm(cdx_pool *pool, tg_isa isa, const tg_args *g);

#endif
