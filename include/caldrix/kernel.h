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

/* What this CPU and OS offer (cpuid; AVX and AVX-512 also need the OS to save their registers,
 * checked with xgetbv). Filled once; the same answer on every call. The one CPU detector: the
 * kernel sets, doctor and the hub read it. */
typedef struct cdx_cpu_features {
    bool sse42, avx, avx2, fma, f16c, bmi2;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avx512vbmi, avx_vnni;
    bool x86_64_v3;   /* AVX2+FMA+F16C+BMI2 with the YMM state saved */
    bool x86_64_v4;   /* + AVX-512 F/BW/VL/DQ with the ZMM state saved */
    /* AMX: the core has the tiles (and INT8 / BF16 tile dots), the OS saves their state (XCR0
     * bits 17-18) and granted this process their use (Linux arch_prctl ARCH_REQ_XCOMP_PERM, asked
     * once, at detection) */
    bool amx_tile, amx_int8, amx_bf16;
} cdx_cpu_features;
CDX_API const cdx_cpu_features *cdx_cpu_features_get(void);
/* The CPU's brand string ("AMD EPYC ..."), or "" where cpuid does not give one. */
CDX_API const char *cdx_cpu_brand(void);
/* The vendor string ("AuthenticAMD", "GenuineIntel"), or "". */
CDX_API const char *cdx_cpu_vendor(void);

/* The best kernel set this CPU runs (AMX, then AVX-512, then AVX2, then scalar), or the set the environment
 * variable CALDRIX_ISA names when this CPU has it. Never NULL. */
CDX_API const cdx_kernels *cdx_kernels_best(void);
/* CDX_EINVAL when CALDRIX_ISA is set to a set that is unknown or missing on this CPU. */
CDX_API int cdx_kernels_env_check(cdx_err *err);
/* A kernel set by name ("amx", "avx512", "avx2", "scalar"; "avx512-gemm", "amx-gemm"); NULL when unknown or this CPU lacks it. */
CDX_API const cdx_kernels *cdx_kernels_by_isa(const char *isa);
/* The i-th kernel set's name in the selection table (best first), whether or not this CPU runs it;
 * NULL past the end. */
CDX_API const char *cdx_kernels_name_at(size_t i);
CDX_API const char *cdx_kernels_isa(const cdx_kernels *k);

/* A weight matrix: `rows` rows of `cols` values each, row r at data + r * row_bytes. */
typedef struct cdx_mat {
    uint32_t type;       /* cdx_type */
    const void *data;
    int64_t rows, cols;
    size_t row_bytes;
    bool act_half;       /* F16/BF16 weights: round the activations to that type first, as ggml's
                            F16/BF16 dot products do (GGUF models follow llama.cpp; checkpoints stay f32) */
    bool act_bf16;       /* BF16 weights whose activations are always bf16 values (a --dtype bf16 model):
                            kernels may then use bf16 dot-product instructions (AVX512_BF16 vdpbf16ps) */
    const void *packed;  /* the same weights in packed_for's own layout (cdx_matmul_pack), or NULL */
    const cdx_kernels *packed_for;
} cdx_mat;

/* Bytes of workspace cdx_matmul needs for n activation rows on n_threads threads. */
CDX_API size_t cdx_matmul_ws_bytes(const cdx_mat *w, int64_t n, int n_threads);
/* y[t*rows + r] = Σ_c w[r][c] · x[t*cols + c] for t < n. F32/F16/BF16 weights use f32 activations
 * (exact products, f32 accumulation); quantized weights quantize x to the type's vec_dot_type first,
 * as ggml does, so results track llama.cpp. Rows are split over the pool's threads. */
CDX_API void cdx_matmul(const cdx_kernels *k, cdx_pool *pool, const cdx_mat *w, const float *x, int64_t n,
                        float *y, void *ws);
/* Load-time repacking: some kernel sets read some types faster from a layout of their own (the
 * AVX2 and AVX-512 sets interleave Q8_0/Q4_0/IQ4_NL/Q4_K/Q6_K rows 16 at a time). cdx_matmul_pack_bytes says how
 * big w's packed copy is for k (0: k uses the native layout); cdx_matmul_pack writes it into out
 * (64-byte aligned) on the pool's threads. Then set w->packed = out, w->packed_for = k; other
 * kernel sets ignore it, and w->data stays the reference. */
CDX_API size_t cdx_matmul_pack_bytes(const cdx_kernels *k, const cdx_mat *w);
CDX_API void cdx_matmul_pack(const cdx_kernels *k, cdx_pool *pool, const cdx_mat *w, void *out);
/* Whether k also reads w from its native layout (w->packed NULL) with the bits of its packed
 * layout (the AVX2 and AVX-512 sets: Q8_0, Q4_0 and IQ4_NL at about the packed speed; Q4_K and
 * Q6_K, packed a group at a time as they are read, at ~40 % of it in decode): packing w is then
 * optional, and can wait. */
CDX_API bool cdx_matmul_in_place(const cdx_kernels *k, const cdx_mat *w);
/* cdx_matmul for up to 4 matrices of the same activations (q, k and v; gate and up) in one
 * dispatch: ys[i] = x · w[i]ᵀ. The activations are prepared once and the threads meet once; matrices
 * whose activations differ (other cols, another vec_dot_type) simply run one after another. ws:
 * the largest cdx_matmul_ws_bytes of them. */
CDX_API void cdx_matmul_multi(const cdx_kernels *k, cdx_pool *pool, const cdx_mat *const *w, int n_w,
                              const float *x, int64_t n, float *const *ys, void *ws);
/* Whether cdx_matmul can run this type (it has a dot product or at least a to_f32). */
CDX_API bool cdx_matmul_supports(uint32_t type);

/* ---- vector ops (f32; SIMD per kernel set, scalar twins in kernels_by_isa("scalar")) ---- */

/* y[i] += x[i]: each sum rounded once, so the bits of the plain loop on every set (the SIMD sets
 * run their axpy with a = 1: 1·x[i] is exact, the fused multiply-add rounds once). */
CDX_API void cdx_add(const cdx_kernels *k, float *y, const float *x, int64_t n);
/* y[i] = x[i] · (1/sqrt(mean(x²) + eps)) · w[i]  (w NULL: 1). y may equal x. */
CDX_API void cdx_rmsnorm(const cdx_kernels *k, const float *x, const float *w, int64_t n, float eps, float *y);
/* y[i] = x[i] as f16 (f16) or bf16, each rounded to nearest, ties to even (cdx_f32_to_f16 /
 * cdx_f32_to_bf16's bits on every set: a nan stays a quiet nan, overflow goes to inf). */
CDX_API void cdx_to_half(const cdx_kernels *k, const float *x, uint16_t *y, int64_t n, bool f16);
/* x[i] = exp(x[i] - max) / Σ exp(x[j] - max), in place. n >= 1. */
CDX_API void cdx_softmax(const cdx_kernels *k, float *x, int64_t n);
/* g[i] = silu(g[i]) · u[i] = g[i] / (1 + expf(-g[i])) · u[i], in place: the C library's expf bits on
 * every kernel set (the SIMD sets repeat its steps lane by lane, kern_expf.h). */
CDX_API void cdx_swiglu(const cdx_kernels *k, float *g, const float *u, int64_t n);
/* x[i] = silu(x[i]) = x[i] / (1 + expf(-x[i])), in place, with the same expf bits. */
CDX_API void cdx_silu(const cdx_kernels *k, float *x, int64_t n);
/* x[i] = erf(x[i]), in place: within 1 ulp of glibc's erff (erf correctly rounded but near ties),
 * the same bits on every kernel set (one algorithm in double, a scalar twin and its SIMD copies:
 * src/kernel/kern_erf.h). */
CDX_API void cdx_erf(const cdx_kernels *k, float *x, int64_t n);
/* x[i] = gelu(x[i]) = x[i] · 0.5 · (1 + erf(x[i] / √2)), in place, in float in that order (torch's
 * gelu, approximate="none"), with cdx_erf's bits: exactly x above 5.3470345, -0 below -5.542594 (as
 * with glibc's erff). */
CDX_API void cdx_gelu(const cdx_kernels *k, float *x, int64_t n);
/* max + log Σ expf(x[i] - max) (expf's bits per term, the sum in double in one fixed order: 16
 * lanes by index, then a fixed tree): the same bits for the same x on every kernel set, whatever
 * else runs (a row without nan). n >= 1. For logprobs. */
CDX_API double cdx_logsumexp(const cdx_kernels *k, const float *x, int64_t n);

/* ---- attention: blocked, online softmax, f32 ---- */

/* The shape shared by all query rows of a call. Query head h reads KV head h / (n_head / n_kv_head)
 * (grouped-query attention; n_head a multiple of n_kv_head). */
typedef struct cdx_attn_shape {
    int n_head, n_kv_head, head_dim;  /* head_dim <= 512 */
    int64_t kv_stride;                /* floats between positions p and p+1 of one block */
    int64_t block;                    /* positions per KV block (a contiguous cache: one block) */
    float scale;                      /* usually 1/sqrt(head_dim) */
    float softcap;                    /* 0, or each score s = scale·q·k becomes softcap·tanh(s/softcap) before the
                                         softmax (Gemma2's attn_logit_softcapping; the sets' fused rows are not used) */
    const float *sinks;               /* NULL, or [n_head]: each head's sink logit, a score with no value that joins
                                         the softmax's denominator (GPT-OSS's sinks; the fused rows are not used) */
    uint32_t kv_type;                 /* CDX_TYPE_F32 (0) or CDX_TYPE_F16: K/V stored as halves, and
                                         then q and the softmax weights rounded to f16 as ggml's
                                         matmuls with an F16 cache round them */
} cdx_attn_shape;

/* One query row (a token): it attends to positions lo..hi inclusive of its sequence's cache, where
 * hi is its own position (causal) and lo > 0 gives a sliding window (lo = hi - window + 1). */
typedef struct cdx_attn_row {
    const float *q;        /* [n_head][head_dim] */
    const void *const *k;  /* block table: position p, KV head g at element k[p / block] + (p % block)
                              * kv_stride + g*head_dim (same for v; elements of kv_type); where the
                              blocks lie does not change the result */
    const void *const *v;
    int64_t lo, hi;        /* lo <= hi */
    float *out;            /* [n_head][head_dim] = Σ_p softmax_p(scale · q·k_p, softcapped) · v_p */
    size_t off;            /* elements added to every block pointer (a layer's place inside a block) */
} cdx_attn_row;

/* All rows × KV heads, split over the pool's threads; each thread streams a KV head's keys and
 * values once per tile of up to 8 rows sharing their keys for all the query heads that share it (up
 * to 32 at a time), 64 positions per block; an F32 cache with the running max/sum rescaled per
 * block, an F16 cache in ggml's three steps (scores, softmax, weighted values; its sum in 8 double
 * lanes). About 100 KiB of stack per thread; an F16 cache on the AVX2/AVX-512 sets also allocates
 * its tile's scores (rows × heads × positions floats, at most 64 MiB; without them the same bits
 * come from the unfused loop). A row's output bits do not depend on the thread count or on the
 * other rows of the call. CDX_EINVAL for a bad shape (head_dim > 512, heads not a multiple of KV heads) or a row
 * with lo > hi; nothing is written then. */
CDX_API int cdx_attn(const cdx_kernels *k, cdx_pool *pool, const cdx_attn_shape *s, const cdx_attn_row *rows,
                     int64_t n_rows, cdx_err *err);

/* ---- attention in bf16, as transformers' eager attention computes it for a bf16 model ----
 * Every query row's q, and K and V (kv_type CDX_TYPE_F32 holding bf16 values, or CDX_TYPE_BF16),
 * are bf16. Per query head h and position p: s_p = bf16(bf16(q·k_p) · scale) (the dot's exact
 * products summed in f32 in dimension order, rounded; the product with scale, a float, rounded
 * again; with a softcap c, then s_p = bf16(bf16(tanh(bf16(s_p / c))) · c), Gemma2's three bf16
 * ops); the softmax of the s_p in f32 (max subtracted, exp, the sum in position order,
 * multiplied by 1/sum) rounded to bf16 weights w_p; out[d] = bf16(Σ_p w_p · v_p[d]) summed in f32
 * in position order. The same result on every kernel set and for any batch (no SIMD reordering:
 * this is the reference order of ../shared/fixtures/hf/INDEX.md's bf16 goldens). Same errors as
 * cdx_attn. */
CDX_API int cdx_attn_bf16(cdx_pool *pool, const cdx_attn_shape *s, const cdx_attn_row *rows, int64_t n_rows,
                          cdx_err *err);

#endif
