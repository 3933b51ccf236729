/* Norms, softmax and blocked online-softmax attention over the kernel set's vector primitives.
 * cdx_vec_scalar is the scalar twin of every ISA's primitives (and the oracle of their tests). */
#include "caldrix/kernel.h"
#include "kernel_impl.h"
#include "kern_erf.h"

#include <math.h>
#include <string.h>

/* ---- scalar primitives ---- */

static float dot_ref(const float *a, const float *b, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}
static void axpy_ref(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}
static void scale_ref(float *y, float a, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] *= a;
}
static float max_ref(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}
static float exp_sum_ref(float *x, float sub, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - sub);
        s += x[i];
    }
    return s;
}

static void round_half_ref(const float *x, float *y, int64_t n, int f16)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = f16 ? cdx_f16_to_f32(cdx_f32_to_f16(x[i])) : cdx_bf16_round(x[i]);
}

static void to_half_ref(const float *x, uint16_t *y, int64_t n, int f16)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = f16 ? cdx_f32_to_f16(x[i]) : cdx_f32_to_bf16(x[i]);
}

static void silu_mul_ref(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void silu_ref(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] / (1.0f + expf(-x[i]));
}

static void erf_ref(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = cdx_erf_ref(x[i]);
}

static void gelu_ref(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = cdx_gelu_ref(x[i]);
}

/* The oracle of cdx_logsumexp's order (kernel_impl.h, CDX_LSE_LANES): term by term into 16 lanes. */
static double lse_ref(const float *x, int64_t n)
{
    const float mx = max_ref(x, n);
    double lane[CDX_LSE_LANES] = { 0 };
    int64_t i = 0;
    for (; i + CDX_LSE_LANES <= n; i += CDX_LSE_LANES)
        for (int j = 0; j < CDX_LSE_LANES; j++)
            lane[j] += (double)expf(x[i + j] - mx);
    return cdx_lse_finish(lane, x + i, n - i, mx);
}

const cdx_vec_ops cdx_vec_scalar = { dot_ref, axpy_ref, scale_ref, max_ref, exp_sum_ref, round_half_ref, silu_mul_ref,
                                     lse_ref, silu_ref, erf_ref, gelu_ref, to_half_ref };

static const cdx_vec_ops *vec(const cdx_kernels *k) { return k && k->vec ? k->vec : &cdx_vec_scalar; }

/* ---- norms and softmax ---- */

void cdx_rmsnorm(const cdx_kernels *k, const float *x, const float *w, int64_t n, float eps, float *y)
{
    const cdx_vec_ops *v = vec(k);
    float ss = v->dot(x, x, n);
    float sc = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = (w ? w[i] : 1.0f) * (x[i] * sc);
}

void cdx_add(const cdx_kernels *k, float *y, const float *x, int64_t n)
{
    vec(k)->axpy(y, 1.0f, x, n);
}

void cdx_to_half(const cdx_kernels *k, const float *x, uint16_t *y, int64_t n, bool f16)
{
    vec(k)->to_half(x, y, n, f16);
}

void cdx_swiglu(const cdx_kernels *k, float *g, const float *u, int64_t n)
{
    vec(k)->silu_mul(g, u, n);
}

void cdx_silu(const cdx_kernels *k, float *x, int64_t n)
{
    vec(k)->silu(x, n);
}

void cdx_erf(const cdx_kernels *k, float *x, int64_t n)
{
    vec(k)->erf(x, n);
}

void cdx_gelu(const cdx_kernels *k, float *x, int64_t n)
{
    vec(k)->gelu(x, n);
}

double cdx_logsumexp(const cdx_kernels *k, const float *x, int64_t n)
{
    return vec(k)->lse(x, n);
}

void cdx_softmax(const cdx_kernels *k, float *x, int64_t n)
{
    const cdx_vec_ops *v = vec(k);
    float m = v->max(x, n);
    float s = v->exp_sum(x, m, n);
    v->scale(x, 1.0f / s, n);
}

/* ---- attention ---- */

#define ATTN_BLOCK 64
#define ATTN_MAX_GROUP 32
#define ATTN_MAX_DIM 512

typedef struct {
    const cdx_kernels *k;
    const cdx_vec_ops *v;
    const cdx_attn_shape *s;
    const cdx_attn_row *rows;
    int64_t n_rows;
} attn_job;

/* A score from a dot product: scale·d, softcapped where the shape says (transformers' eager attention:
 * w = w / softcap; w = tanh(w); w = w * softcap). */
static inline float attn_score(const cdx_attn_shape *s, float d)
{
    const float x = d * s->scale;
    return s->softcap ? tanhf(x / s->softcap) * s->softcap : x;
}

/* One (row, KV head): the `group` query heads that share the KV head walk the positions together. */
static void attn_heads(const cdx_vec_ops *v, const cdx_attn_shape *s, const cdx_attn_row *r, int g, int h0, int group)
{
    const int hd = s->head_dim;
    float acc[ATTN_MAX_GROUP][ATTN_MAX_DIM];
    float sc[ATTN_MAX_GROUP][ATTN_BLOCK];
    float mx[ATTN_MAX_GROUP], sum[ATTN_MAX_GROUP];
    for (int h = 0; h < group; h++) { /* a sink starts the online softmax: its exp(sink - max) is in the sum */
        mx[h] = s->sinks ? s->sinks[h0 + h] : -INFINITY;
        sum[h] = s->sinks ? 1.0f : 0;
        for (int d = 0; d < hd; d++)
            acc[h][d] = 0;
    }
    const int64_t bs = s->block;
#define KV_AT(tab, p) ((const float *)(tab)[(p) / bs] + r->off + (size_t)((p) % bs) * s->kv_stride + (size_t)g * hd)
    for (int64_t p0 = r->lo; p0 <= r->hi; p0 += ATTN_BLOCK) {
        const int nb = r->hi - p0 + 1 < ATTN_BLOCK ? (int)(r->hi - p0 + 1) : ATTN_BLOCK;
        for (int h = 0; h < group; h++) {
            const float *q = r->q + (size_t)(h0 + h) * hd;
            for (int i = 0; i < nb; i++)
                sc[h][i] = attn_score(s, v->dot(q, KV_AT(r->k, p0 + i), hd));
            /* online softmax: a new maximum rescales what was summed so far */
            float bm = v->max(sc[h], nb);
            if (bm > mx[h]) {
                float corr = expf(mx[h] - bm); /* exp(-inf) = 0 on the first block */
                sum[h] *= corr;
                v->scale(acc[h], corr, hd);
                mx[h] = bm;
            }
            sum[h] += v->exp_sum(sc[h], mx[h], nb);
        }
        for (int i = 0; i < nb; i++) {
            const float *vp = KV_AT(r->v, p0 + i);
            for (int h = 0; h < group; h++)
                v->axpy(acc[h], sc[h][i], vp, hd);
        }
    }
#undef KV_AT
    for (int h = 0; h < group; h++) {
        float *o = r->out + (size_t)(h0 + h) * hd;
        const float inv = 1.0f / sum[h];
        for (int d = 0; d < hd; d++)
            o[d] = acc[h][d] * inv;
    }
}

static inline float f16_round(float x) { return cdx_f16_to_f32(cdx_f32_to_f16(x)); }

/* The sum of an F16 row's exp terms, term by term in position order from the row's first (lo): 8
 * double lanes (lane j: terms j, j + 8, ...), then lanes j and j + w added for w = 4, 2, 1. The
 * kernel sets' fused rows (attn_f16) sum in this order with vectors of doubles. */
typedef struct { double lane[8]; int64_t n; } attn_sum8;
static inline void sum8_add(attn_sum8 *a, float t) { a->lane[a->n++ % 8] += (double)t; }
static inline double sum8_end(attn_sum8 *a)
{
    for (int w = 4; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            a->lane[j] += a->lane[j + w];
    return a->lane[0];
}

/* An F16 cache, as ggml's non-flash attention computes over one: kq = K·q with q rounded to f16,
 * softmax(scale·kq) normalised in f32 (its sum in double: attn_sum8's order, then a sink's term),
 * each weight rounded to f16, then Σ w·v in position order. Three passes over the positions (the
 * normalised weights are rounded, so the online rescaling of the f32 path would round other
 * values); the kernel sets' attn_f16 gives the same bits with each score computed once. */
static void attn_head_f16(const cdx_vec_ops *v, const cdx_attn_shape *s, const cdx_attn_row *r, int g, int h)
{
    const int hd = s->head_dim;
    const int64_t bs = s->block;
    float q[ATTN_MAX_DIM], row[ATTN_MAX_DIM], acc[ATTN_MAX_DIM];
    v->round_half(r->q + (size_t)h * hd, q, hd, 1);
    for (int d = 0; d < hd; d++)
        acc[d] = 0;
#define KV16(tab, p) ((const uint16_t *)(tab)[(p) / bs] + r->off + (size_t)((p) % bs) * s->kv_stride + (size_t)g * hd)
    float mx = -INFINITY;
    for (int64_t p = r->lo; p <= r->hi; p++) {
        const uint16_t *k = KV16(r->k, p);
        for (int d = 0; d < hd; d++)
            row[d] = cdx_f16_to_f32(k[d]);
        const float sc = attn_score(s, v->dot(q, row, hd));
        mx = sc > mx ? sc : mx;
    }
    if (s->sinks && s->sinks[h] > mx)
        mx = s->sinks[h];
    attn_sum8 sum = { { 0 }, 0 };
    for (int64_t p = r->lo; p <= r->hi; p++) {
        const uint16_t *k = KV16(r->k, p);
        for (int d = 0; d < hd; d++)
            row[d] = cdx_f16_to_f32(k[d]);
        sum8_add(&sum, expf(attn_score(s, v->dot(q, row, hd)) - mx));
    }
    const float inv = (float)(1.0 / (sum8_end(&sum) + (s->sinks ? (double)expf(s->sinks[h] - mx) : 0)));
    for (int64_t p = r->lo; p <= r->hi; p++) {
        const uint16_t *k = KV16(r->k, p), *vv = KV16(r->v, p);
        for (int d = 0; d < hd; d++)
            row[d] = cdx_f16_to_f32(k[d]);
        const float w = f16_round(expf(attn_score(s, v->dot(q, row, hd)) - mx) * inv);
        for (int d = 0; d < hd; d++)
            row[d] = cdx_f16_to_f32(vv[d]);
        v->axpy(acc, w, row, hd);
    }
#undef KV16
    memcpy(r->out + (size_t)h * hd, acc, (size_t)hd * sizeof(float));
}

/* Rows r[0..nr-1] × KV head g. */
static void attn_rows(const cdx_kernels *k, const cdx_vec_ops *v, const cdx_attn_shape *s, const cdx_attn_row *r,
                      int nr, int g)
{
    const int group = s->n_head / s->n_kv_head;
    /* the set's fused rows (the same bits as attn_heads with its primitives), where it takes the shape */
    if (s->kv_type == CDX_TYPE_F32 && k && k->attn_f32 && !s->softcap && !s->sinks) {
        bool done = true;
        for (int h = 0; h < group && done; h += ATTN_MAX_GROUP)
            done = k->attn_f32(s, r, nr, g, g * group + h, group - h < ATTN_MAX_GROUP ? group - h : ATTN_MAX_GROUP);
        if (done)
            return;
    }
    if (s->kv_type == CDX_TYPE_F16 && k && k->attn_f16 && k->attn_f16(s, r, nr, g, g * group, group))
        return;
    for (int i = 0; i < nr; i++) {
        if (s->kv_type == CDX_TYPE_F16) {
            for (int h = 0; h < group; h++)
                attn_head_f16(v, s, &r[i], g, g * group + h);
            continue;
        }
        for (int h = 0; h < group; h += ATTN_MAX_GROUP)
            attn_heads(v, s, &r[i], g, g * group + h, group - h < ATTN_MAX_GROUP ? group - h : ATTN_MAX_GROUP);
    }
}

/* Rows a work item holds at most: consecutive rows of one sequence's prompt walk the key blocks
 * together (kernels' attn_f32 and attn_f16), so a block of K and V comes from memory once for the
 * tile; fewer (down to ATTN_TILE_MIN) where that would leave threads without items (few KV heads,
 * short prompts, many threads). A row's bits do not depend on its tile. */
#define ATTN_TILE 64
#define ATTN_TILE_MIN 8

static bool same_keys(const cdx_attn_row *a, const cdx_attn_row *b)
{
    return a->k == b->k && a->v == b->v && a->off == b->off && a->lo == b->lo;
}

static void attn_work(void *arg, int ith, int nth)
{
    attn_job *j = arg;
    const int64_t nk = j->s->n_kv_head;
    int64_t tile = ATTN_TILE;
    while (tile > ATTN_TILE_MIN && (j->n_rows + tile - 1) / tile * nk < 4 * (int64_t)nth)
        tile /= 2; /* about four items a thread, when the rows allow */
    const int64_t tiles = (j->n_rows + tile - 1) / tile, total = tiles * nk;
    /* (tile, KV head) items dealt round-robin: causal rows grow with their position, so contiguous
     * ranges would give the last thread the longest rows. A tile is cut where the rows stop sharing
     * their keys (another sequence, a window). */
    for (int64_t it = ith; it < total; it += nth) {
        const int64_t t0 = it / nk * tile, t1 = t0 + tile < j->n_rows ? t0 + tile : j->n_rows;
        for (int64_t i = t0; i < t1;) {
            int64_t e = i + 1;
            while (e < t1 && same_keys(&j->rows[i], &j->rows[e]))
                e++;
            attn_rows(j->k, j->v, j->s, &j->rows[i], (int)(e - i), (int)(it % nk));
            i = e;
        }
    }
}

int cdx_attn(const cdx_kernels *k, cdx_pool *pool, const cdx_attn_shape *s, const cdx_attn_row *rows, int64_t n_rows,
             cdx_err *err)
{
    if (s->n_head <= 0 || s->n_kv_head <= 0 || s->n_head % s->n_kv_head || s->head_dim <= 0 ||
        s->head_dim > ATTN_MAX_DIM || s->block <= 0 || (s->kv_type != CDX_TYPE_F32 && s->kv_type != CDX_TYPE_F16))
        return cdx_err_set(err, CDX_EINVAL, "attention shape: %d heads, %d KV heads, head_dim %d, block %lld; expected "
                           "heads a multiple of KV heads, head_dim 1..%d and a block of at least 1 position", s->n_head,
                           s->n_kv_head, s->head_dim, (long long)s->block, ATTN_MAX_DIM);
    for (int64_t i = 0; i < n_rows; i++)
        if (rows[i].lo < 0 || rows[i].lo > rows[i].hi)
            return cdx_err_set(err, CDX_EINVAL, "attention row %lld: positions %lld..%lld; expected 0 <= lo <= hi",
                               (long long)i, (long long)rows[i].lo, (long long)rows[i].hi);
    attn_job j = { k, vec(k), s, rows, n_rows };
    cdx_pool_run(pool, attn_work, &j);
    return CDX_OK;
}
