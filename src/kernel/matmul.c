/* Matrix × activations, dispatched per weight type. This file holds the generic paths that work
 * for every type with a scalar reference; ISA-specific fast paths plug in through cdx_kernels. */
#include "caldrix/kernel.h"
#include "kernel_impl.h"

#include <stdatomic.h>
#include <string.h>

const char *cdx_kernels_isa(const cdx_kernels *k) { return k->isa; }

bool cdx_matmul_supports(uint32_t type)
{
    const cdx_type_traits *t = cdx_type_get(type);
    if (!t || t->retired)
        return false;
    if (type == CDX_TYPE_F32 || type == CDX_TYPE_F16 || type == CDX_TYPE_BF16)
        return true;
    const cdx_type_traits *vt = cdx_type_get(t->vec_dot_type);
    return (t->vec_dot && vt && vt->from_f32) || t->to_f32;
}

/* How activations are presented to a type's row kernel. */
static bool uses_quantized_x(const cdx_type_traits *t, uint32_t type)
{
    if (type == CDX_TYPE_F32 || type == CDX_TYPE_F16 || type == CDX_TYPE_BF16)
        return false;
    const cdx_type_traits *vt = cdx_type_get(t->vec_dot_type);
    return t->vec_dot && vt && vt->from_f32;
}

size_t cdx_matmul_ws_bytes(const cdx_mat *w, int64_t n, int n_threads)
{
    const cdx_type_traits *t = cdx_type_get(w->type);
    size_t bytes = 0;
    if (t && uses_quantized_x(t, w->type)) {
        const cdx_type_traits *vt = cdx_type_get(t->vec_dot_type);
        bytes = (size_t)n * ((size_t)w->cols / vt->block) * vt->bytes;
    }
    if (w->act_half && (w->type == CDX_TYPE_F16 || w->type == CDX_TYPE_BF16))
        bytes += (size_t)n * (size_t)w->cols * sizeof(float) + 64;
    if (w->act_half && (w->type == CDX_TYPE_F16 || w->type == CDX_TYPE_BF16) && n >= CDX_FTILE_MIN_N)
        bytes += CDX_FTILE_ACT_BYTES(n, w->cols) + 64; /* a set's bf16 tile planes (ftile_act) */
    if (w->act_bf16) /* bf16 copies of the activations for a bf16 dot kernel (rows padded to even) */
        bytes += (size_t)n * (((size_t)w->cols + 1) & ~(size_t)1) * 2 + 64;
    /* per-thread scratch: a dequantized row (generic path) or a GEMM panel (fast paths) */
    bytes += (size_t)(n_threads > 0 ? n_threads : 1) * cdx_kernel_scratch_bytes(w->cols, n) + 64 * 2;
    return bytes;
}

#define MATMUL_MAX_MULTI 4

typedef struct {
    const cdx_kernels *k;
    int n_w;
    const cdx_mat *w[MATMUL_MAX_MULTI];
    const cdx_type_traits *t[MATMUL_MAX_MULTI];
    float *y[MATMUL_MAX_MULTI];
    int64_t chunk[MATMUL_MAX_MULTI];              /* rows per chunk of matrix i ... */
    int64_t n_big[MATMUL_MAX_MULTI];              /* ... for its first n_big chunks, then */
    int64_t small[MATMUL_MAX_MULTI];              /* rows per chunk of its last stretch */
    int64_t first_chunk[MATMUL_MAX_MULTI + 1];    /* chunks of matrices before i */
    const float *x;
    const void *xq;       /* activations in vec_dot_type (or as bf16 for row_bf16dp), or NULL */
    bool bf16dp;          /* run k->row_bf16dp (bf16 activations in xq) */
    size_t xq_row_bytes;
    int64_t n;
    uint8_t *scratch;     /* [nth][cdx_kernel_scratch_bytes(cols)] */
    _Atomic int64_t next; /* the first chunk not yet taken */
} matmul_job;

/* Rows [r0, r1) of matrix i on thread ith. */
static void matmul_range(const matmul_job *j, int i, int ith, int64_t r0, int64_t r1);

/* Rows are dealt in chunks from a shared counter rather than split in equal parts up front: the
 * threads share the memory bus unevenly and thread 0 arrives late from the serial work between
 * matmuls, so fixed halves leave one thread spinning at every barrier. A chunk is a run of whole
 * row tiles (4 rows for matvec, a 16-row panel for prefill and packed layouts), about 8 per
 * thread, so each thread still reads long sequential stretches; the last nth chunks' worth of
 * rows is dealt in quarter chunks, so the thread that takes the last one keeps the other
 * waiting a quarter as long. Several matrices of one call (cdx_matmul_multi) share the counter:
 * the threads meet once for all of them. Which thread computes a row, and with which neighbours,
 * never changes its sums (every row's dot is its own). */
static void matmul_rows(void *arg, int ith, int nth)
{
    matmul_job *j = arg;
    (void)nth;
    int i = 0;
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= j->first_chunk[j->n_w])
            return;
        while (c >= j->first_chunk[i + 1])
            i++;
        const int64_t lc = c - j->first_chunk[i], rows = j->w[i]->rows;
        const int64_t r0 = lc < j->n_big[i] ? lc * j->chunk[i] : j->n_big[i] * j->chunk[i] + (lc - j->n_big[i]) * j->small[i];
        const int64_t len = lc < j->n_big[i] ? j->chunk[i] : j->small[i];
        matmul_range(j, i, ith, r0, r0 + len < rows ? r0 + len : rows);
    }
}

static void matmul_range(const matmul_job *j, int i, int ith, int64_t r0, int64_t r1)
{
    const cdx_mat *w = j->w[i];
    const cdx_type_traits *tr = j->t[i];
    float *y = j->y[i];
    uint8_t *scratch = j->scratch + (size_t)ith * cdx_kernel_scratch_bytes(w->cols, j->n);
    const cdx_row_kernel fast = j->bf16dp ? j->k->row_bf16dp : j->k->row[w->type];
    if (fast) {
        fast(w, r0, r1, j->x, j->xq, j->xq_row_bytes, j->n, y, scratch);
        return;
    }
    const uint8_t *base = w->data;
    if (j->xq) {
        for (int64_t r = r0; r < r1; r++)
            for (int64_t t = 0; t < j->n; t++)
                y[t * w->rows + r] = tr->vec_dot(w->cols, base + r * w->row_bytes,
                                                 (const uint8_t *)j->xq + t * j->xq_row_bytes);
        return;
    }
    float *row = (float *)scratch;
    for (int64_t r = r0; r < r1; r++) {
        const float *wr;
        if (w->type == CDX_TYPE_F32) {
            wr = (const float *)(base + r * w->row_bytes);
        } else {
            tr->to_f32(base + r * w->row_bytes, row, w->cols);
            wr = row;
        }
        for (int64_t t = 0; t < j->n; t++) {
            const float *xt = j->x + t * w->cols;
            float s = 0;
            for (int64_t c = 0; c < w->cols; c++)
                s += wr[c] * xt[c];
            y[t * w->rows + r] = s;
        }
    }
}

size_t cdx_matmul_pack_bytes(const cdx_kernels *k, const cdx_mat *w)
{
    return k && k->pack_bytes && k->pack ? k->pack_bytes(w) : 0;
}

typedef struct {
    const cdx_kernels *k;
    const cdx_mat *w;
    void *out;
    _Atomic int64_t next; /* the first group not yet taken */
} pack_job;

/* Groups dealt in runs of PACK_RUN from a shared counter: the first touch of the fresh pages
 * (their zeroing, in the kernel) costs the threads unevenly, so fixed halves left one waiting. */
#define PACK_RUN 4
static void pack_groups(void *arg, int ith, int nth)
{
    pack_job *j = arg;
    (void)ith;
    (void)nth;
    const int64_t ng = j->w->rows / 16;
    for (;;) {
        const int64_t g = atomic_fetch_add_explicit(&j->next, PACK_RUN, memory_order_relaxed);
        if (g >= ng)
            return;
        j->k->pack(j->w, j->out, g, g + PACK_RUN < ng ? g + PACK_RUN : ng);
    }
}

bool cdx_matmul_in_place(const cdx_kernels *k, const cdx_mat *w)
{
    return k && k->in_place && k->in_place(w);
}

void cdx_matmul_pack(const cdx_kernels *k, cdx_pool *pool, const cdx_mat *w, void *out)
{
    if (!cdx_matmul_pack_bytes(k, w))
        return;
    pack_job j = { .k = k, .w = w, .out = out };
    cdx_pool_run(pool, pack_groups, &j);
}

typedef struct {
    cdx_quantize_fn q;
    const float *x;
    uint8_t *xq;
    size_t xq_row_bytes;
    int64_t n, cols;
} quantize_job;

static void quantize_rows(void *arg, int ith, int nth)
{
    quantize_job *j = arg;
    for (int64_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++)
        j->q(j->x + i * j->cols, j->xq + (size_t)i * j->xq_row_bytes, j->cols);
}

/* ggml's rounding of the activations to the weights' half type (cdx_mat.act_half), a slice per
 * thread: a prompt's activations are n rows, and one thread rounding them all kept the other
 * waiting (about 5 % of an F16 model's prefill). Each value is rounded on its own. */
typedef struct {
    const cdx_vec_ops *v;
    const float *x;
    float *xr;
    size_t nx;
    bool f16;
} round_job;

static void round_part(void *arg, int ith, int nth)
{
    const round_job *j = arg;
    const size_t a = j->nx / (size_t)nth * (size_t)ith, e = ith + 1 == nth ? j->nx : j->nx / (size_t)nth * (size_t)(ith + 1);
    j->v->round_half(j->x + a, j->xr + a, (int64_t)(e - a), j->f16);
}

/* ftile_act's token tiles, a slice per thread */
typedef struct {
    void (*f)(const float *x, int64_t cols, int64_t t0, int64_t t1, void *out);
    const float *x;
    int64_t cols, tiles;
    void *out;
} ftile_job;

static void ftile_part(void *arg, int ith, int nth)
{
    const ftile_job *j = arg;
    j->f(j->x, j->cols, j->tiles * ith / nth, j->tiles * (ith + 1) / nth, j->out);
}

/* Whether b can share a's prepared activations (one quantization, or one f16/bf16 rounding). */
static bool same_activations(const cdx_mat *a, const cdx_mat *b)
{
    const cdx_type_traits *ta = cdx_type_get(a->type), *tb = cdx_type_get(b->type);
    if (a->cols != b->cols)
        return false;
    const bool qa = uses_quantized_x(ta, a->type), qb = uses_quantized_x(tb, b->type);
    if (qa || qb)
        return qa && qb && ta->vec_dot_type == tb->vec_dot_type;
    const bool ha = a->act_half && a->type != CDX_TYPE_F32, hb = b->act_half && b->type != CDX_TYPE_F32;
    return ha == hb && (!ha || a->type == b->type) && a->act_bf16 == b->act_bf16 && (!a->act_bf16 || a->type == b->type);
}

void cdx_matmul_multi(const cdx_kernels *k, cdx_pool *pool, const cdx_mat *const *mats, int n_w, const float *x,
                      int64_t n, float *const *ys, void *ws)
{
    bool fused = n_w >= 1 && n_w <= MATMUL_MAX_MULTI;
    for (int i = 1; fused && i < n_w; i++)
        fused = same_activations(mats[0], mats[i]);
    if (!fused) {
        for (int i = 0; i < n_w; i++)
            cdx_matmul_multi(k, pool, &mats[i], 1, x, n, &ys[i], ws);
        return;
    }
    const cdx_mat *w = mats[0];
    const cdx_type_traits *t = cdx_type_get(w->type);
    matmul_job j = { .k = k, .n_w = n_w, .x = x, .n = n };
    const int nth = cdx_pool_size(pool);
    for (int i = 0; i < n_w; i++) {
        const cdx_mat *wi = mats[i];
        const int64_t align = n >= CDX_GEMM_MIN_N || wi->packed || cdx_matmul_in_place(k, wi) ? CDX_GEMM_PANEL : 4;
        int64_t chunk = (wi->rows + 8 * nth - 1) / (8 * nth);
        j.w[i] = wi;
        j.t[i] = cdx_type_get(wi->type);
        j.y[i] = ys[i];
        chunk = (chunk + align - 1) / align * align;
        const int64_t small = ((chunk + 3) / 4 + align - 1) / align * align;
        const int64_t tail = (int64_t)nth * chunk; /* rows dealt in small chunks at the end */
        j.chunk[i] = chunk;
        j.small[i] = small;
        j.n_big[i] = wi->rows > tail ? (wi->rows - tail) / chunk : 0;
        const int64_t rest = wi->rows - j.n_big[i] * chunk;
        j.first_chunk[i + 1] = j.first_chunk[i] + j.n_big[i] + (rest + small - 1) / small;
    }
    uint8_t *p = (uint8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    if (uses_quantized_x(t, w->type)) {
        const cdx_type_traits *vt = cdx_type_get(t->vec_dot_type);
        j.xq_row_bytes = ((size_t)w->cols / vt->block) * vt->bytes;
        cdx_quantize_fn q = k->quantize[t->vec_dot_type] ? k->quantize[t->vec_dot_type]
                          : vt->act_from_f32 ? vt->act_from_f32 : vt->from_f32;
        /* a batch's activations are quantized by all threads (a prompt of 512 tokens is 512 rows) */
        quantize_job qj = { .q = q, .x = x, .xq = p, .xq_row_bytes = j.xq_row_bytes, .n = n, .cols = w->cols };
        if (n >= 4)
            cdx_pool_run(pool, quantize_rows, &qj);
        else
            quantize_rows(&qj, 0, 1);
        j.xq = p;
        p += (size_t)n * j.xq_row_bytes;
        p = (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    }
    const bool rounded = w->act_half && (w->type == CDX_TYPE_F16 || w->type == CDX_TYPE_BF16);
    if (rounded) {
        float *xr = (float *)p;
        size_t nx = (size_t)n * (size_t)w->cols;
        round_job rj = { .v = k && k->vec ? k->vec : &cdx_vec_scalar, .x = x, .xr = xr, .nx = nx,
                         .f16 = w->type == CDX_TYPE_F16 };
        if (n >= 4)
            cdx_pool_run(pool, round_part, &rj);
        else
            round_part(&rj, 0, 1);
        j.x = xr;
        p = (uint8_t *)(((uintptr_t)(xr + nx) + 63) & ~(uintptr_t)63);
    }
    if (rounded && k && k->ftile_act && n >= CDX_FTILE_MIN_N && w->cols % 32 == 0) {
        /* the rounded activations as bf16 tile planes, once for all rows and threads */
        ftile_job fj = { .f = k->ftile_act, .x = j.x, .cols = w->cols, .tiles = n / CDX_FTILE_TOK, .out = p };
        cdx_pool_run(pool, ftile_part, &fj);
        j.xq = p;
        j.xq_row_bytes = 0;
        p = (uint8_t *)(((uintptr_t)(p + CDX_FTILE_ACT_BYTES(n, w->cols)) + 63) & ~(uintptr_t)63);
    }
    if (w->act_bf16 && w->type == CDX_TYPE_BF16 && k->row_bf16dp && cdx_cpu_features_get()->avx512bf16) {
        /* the activations are bf16 values: their bf16 bits, exactly, for vdpbf16ps */
        uint16_t *xb = (uint16_t *)p;
        const size_t rb = ((size_t)w->cols + 1) & ~(size_t)1;
        for (int64_t t = 0; t < n; t++) {
            for (int64_t c = 0; c < w->cols; c++)
                xb[(size_t)t * rb + (size_t)c] = cdx_f32_to_bf16(x[t * w->cols + c]);
            if (rb > (size_t)w->cols)
                xb[(size_t)t * rb + rb - 1] = 0;
        }
        j.xq = xb;
        j.xq_row_bytes = rb * 2;
        j.bf16dp = true;
        p = (uint8_t *)(((uintptr_t)(xb + (size_t)n * rb) + 63) & ~(uintptr_t)63);
    }
    j.scratch = p;
    /* a small product is not worth waking a thread for (and a busy machine may not run it soon) */
    int64_t work = 0;
    for (int i = 0; i < n_w; i++)
        work += j.w[i]->rows * j.w[i]->cols * n;
    if (work < ((int64_t)1 << 17))
        matmul_rows(&j, 0, 1);
    else
        cdx_pool_run(pool, matmul_rows, &j);
}

void cdx_matmul(const cdx_kernels *k, cdx_pool *pool, const cdx_mat *w, const float *x, int64_t n, float *y,
                void *ws)
{
    cdx_matmul_multi(k, pool, &w, 1, x, n, &y, ws);
}
