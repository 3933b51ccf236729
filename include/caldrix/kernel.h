/* caldrix kernel layer: the hot loops, chosen once per process by CPU features.
 *
 *   const cdx_kernels *k = cdx_kernels_best();          // or cdx_kernels_by_isa("scalar")
 *   cdx_mat w = { .type = CDX_TYPE_Q4_K, .data = p, .rows = 4096, .cols = 4096, .row_bytes = rb };
 *   void *ws = malloc(cdx_matmul_ws_bytes(&w, n_tok, n_threads));
 *   cdx_matmul(k, pool, &w, x, n_tok, y, ws);             // y[n_tok][rows] = x[n_tok][cols] · wᵀ
 */
#ifndef CALDRIX_KERNEL_H
#define CALDRIX_KERNEL_H

#include "caldrix/base.h"
#include "caldrix/pool.h"
#include "caldrix/quant.h"

typedef struct cdx_kernels cdx_kernels;

/* The best kernel set this CPU runs (AVX-512, then AVX2, then scalar). Never NULL. */
CDX_API const cdx_kernels *cdx_kernels_best(void);
/* A kernel set by name ("avx512", "avx2", "scalar"); NULL when unknown or this CPU lacks it. */
CDX_API const cdx_kernels *cdx_kernels_by_isa(const char *isa);
CDX_API const char *cdx_kernels_isa(const cdx_kernels *k);

/* A weight matrix: `rows` rows of `cols` values each, row r at data + r * row_bytes. */
typedef struct cdx_mat {
    uint32_t type;       /* cdx_type */
    const void *data;
    int64_t rows, cols;
    size_t row_bytes;
} cdx_mat;

/* Bytes of workspace cdx_matmul needs for n activation rows on n_threads threads. */
CDX_API size_t cdx_matmul_ws_bytes(const cdx_mat *w, int64_t n, int n_threads);
/* y[t*rows + r] = Σ_c w[r][c] · x[t*cols + c] for t < n. F32/F16/BF16 weights use f32 activations
 * (exact products, f32 accumulation); quantized weights quantize x to the type's vec_dot_type first,
 * as ggml does, so results track llama.cpp. Rows are split over the pool's threads. */
CDX_API void cdx_matmul(const cdx_kernels *k, cdx_pool *pool, const cdx_mat *w, const float *x, int64_t n,
                        float *y, void *ws);
/* Whether cdx_matmul can run this type (it has a dot product or at least a to_f32). */
CDX_API bool cdx_matmul_supports(uint32_t type);

#endif
