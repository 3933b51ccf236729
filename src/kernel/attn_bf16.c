/* Attention for a bf16 model (--dtype bf16), as transformers' eager_attention_forward computes it
 * when the model is loaded with torch_dtype=torch.bfloat16 (../shared/fixtures/hf/INDEX.md, "bf16
 * semantics", cast points 8-11):
 *   attn = matmul(q, kᵀ)                 bf16 operands, exact products summed in f32, one rounding
 *   attn = attn · scaling                a bf16 tensor times a Python float: f32 product, rounded
 *   [softcap: attn / c, tanh, · c]       Gemma2: each in f32 from the bf16 values, each rounded
 *   attn = attn + mask                   0 where allowed; masked weights come out exactly 0
 *   p    = softmax(attn, f32).to(bf16)   max subtracted, exp, Σ, times 1/Σ (torch's CPU softmax)
 *   o    = matmul(p, v)                  f32 sum in position order, one rounding
 * With sinks (GPT-OSS's eager_attention_forward), the softmax is its own: the bf16 sink logit joins the
 * scores as a last column, combined - max(combined) is a bf16 subtraction (rounded), and
 * F.softmax(dtype=bf16) is PyTorch 2.x's kernel for a reduced float: exp in f32, Σ in f32 (the sink's
 * term last), each x / Σ rounded once; the sink's own probability is dropped.
 * Plain C on purpose: the sums run in the reference's own order, so every kernel set gives the same
 * bits, and a row's result never depends on the batch. Per (row, KV head) the scores of a span of
 * up to SPAN_CAP positions are kept on the stack; a longer span recomputes them (same values), SB
 * positions at a time. */
#include "caldrix/kernel.h"

#include <math.h>
#include <string.h>

#define ATTN_MAX_DIM 512
#define SPAN_CAP 4096

typedef struct {
    const cdx_attn_shape *s;
    const cdx_attn_row *rows;
    int64_t n_rows;
} attn_job;

static inline const void *kv_at(const cdx_attn_shape *s, const void *const *tab, size_t off, int64_t p, int g)
{
    const size_t i = off + (size_t)(p % s->block) * (size_t)s->kv_stride + (size_t)g * (size_t)s->head_dim;
    return s->kv_type == CDX_TYPE_BF16 ? (const void *)((const uint16_t *)tab[p / s->block] + i)
                                       : (const void *)((const float *)tab[p / s->block] + i);
}

/* Scores of positions p0 .. p0+np-1 (np <= SB) into out: bf16(bf16(q·k) · scale) each. The np dot
 * products run side by side (one running sum each, over d in increasing order, as the reference
 * sums it): each sum is one chain of dependent additions, so only several positions at once keep
 * the adder busy. bf16 · bf16 is exact in f32, so a product rounds nowhere, fused or not. */
#define SB 8
static void scores(const cdx_attn_shape *s, const cdx_attn_row *r, int g, const float *q, int64_t p0, int np,
                   float *out)
{
    const int hd = s->head_dim;
    float acc[SB] = { 0 };
    if (s->kv_type == CDX_TYPE_BF16) {
        const uint16_t *k[SB];
        for (int j = 0; j < SB; j++) /* a short group repeats its first position (computed, unused) */
            k[j] = kv_at(s, r->k, r->off, p0 + (j < np ? j : 0), g);
        for (int d = 0; d < hd; d++) {
            const float qd = q[d];
            for (int j = 0; j < SB; j++)
                acc[j] += qd * cdx_bf16_to_f32(k[j][d]);
        }
    } else {
        const float *k[SB];
        for (int j = 0; j < SB; j++)
            k[j] = kv_at(s, r->k, r->off, p0 + (j < np ? j : 0), g);
        for (int d = 0; d < hd; d++) {
            const float qd = q[d];
            for (int j = 0; j < SB; j++)
                acc[j] += qd * k[j][d];
        }
    }
    for (int j = 0; j < np; j++)
        out[j] = cdx_bf16_round(cdx_bf16_round(acc[j]) * s->scale);
    if (s->softcap) /* Gemma2's eager_attention_forward: scores / softcap, tanh, * softcap: three bf16 tensors */
        for (int j = 0; j < np; j++)
            out[j] = cdx_bf16_round(cdx_bf16_round(tanhf(cdx_bf16_round(out[j] / s->softcap))) * s->softcap);
}

static void attn_head(const cdx_attn_shape *s, const cdx_attn_row *r, int g, int h, float *sc)
{
    const int hd = s->head_dim;
    const int64_t span = r->hi - r->lo + 1;
    const bool kept = span <= SPAN_CAP;
    const float *q = r->q + (size_t)h * hd;
    float acc[ATTN_MAX_DIM], blk[SB];
    const float *sink = s->sinks ? &s->sinks[h] : NULL;
    float mx = sink ? *sink : -INFINITY;
    for (int64_t p = r->lo; p <= r->hi; p += SB) {
        const int np = r->hi - p + 1 < SB ? (int)(r->hi - p + 1) : SB;
        float *x = kept ? sc + (p - r->lo) : blk;
        scores(s, r, g, q, p, np, x);
        for (int j = 0; j < np; j++)
            mx = x[j] > mx ? x[j] : mx;
    }
    float sum = 0;
    for (int64_t p = r->lo; p <= r->hi; p += SB) {
        const int np = r->hi - p + 1 < SB ? (int)(r->hi - p + 1) : SB;
        float *x = kept ? sc + (p - r->lo) : blk;
        if (!kept)
            scores(s, r, g, q, p, np, x);
        for (int j = 0; j < np; j++) {
            const float e = expf(sink ? cdx_bf16_round(x[j] - mx) : x[j] - mx);
            if (kept)
                x[j] = e;
            sum += e;
        }
    }
    if (sink)
        sum += expf(cdx_bf16_round(*sink - mx));
    const float inv = 1.0f / sum;
    memset(acc, 0, (size_t)hd * sizeof(float));
    for (int64_t p = r->lo; p <= r->hi; p += SB) {
        const int np = r->hi - p + 1 < SB ? (int)(r->hi - p + 1) : SB;
        float *x = kept ? sc + (p - r->lo) : blk;
        if (!kept) {
            scores(s, r, g, q, p, np, x);
            for (int j = 0; j < np; j++)
                x[j] = expf(sink ? cdx_bf16_round(x[j] - mx) : x[j] - mx);
        }
        for (int j = 0; j < np; j++) {
            const float w = cdx_bf16_round(sink ? x[j] / sum : x[j] * inv);
            const void *v = kv_at(s, r->v, r->off, p + j, g);
            if (s->kv_type == CDX_TYPE_BF16)
                for (int d = 0; d < hd; d++)
                    acc[d] += w * cdx_bf16_to_f32(((const uint16_t *)v)[d]);
            else
                for (int d = 0; d < hd; d++)
                    acc[d] += w * ((const float *)v)[d];
        }
    }
    float *o = r->out + (size_t)h * hd;
    for (int d = 0; d < hd; d++)
        o[d] = cdx_bf16_round(acc[d]);
}

static void attn_work(void *arg, int ith, int nth)
{
    attn_job *j = arg;
    const int group = j->s->n_head / j->s->n_kv_head;
    const int64_t nh = j->s->n_head, total = j->n_rows * nh;
    float sc[SPAN_CAP];
    /* dealt round-robin: causal rows grow with their position */
    for (int64_t i = ith; i < total; i += nth) {
        const int h = (int)(i % nh);
        attn_head(j->s, &j->rows[i / nh], h / group, h, sc);
    }
}

int cdx_attn_bf16(cdx_pool *pool, const cdx_attn_shape *s, const cdx_attn_row *rows, int64_t n_rows, cdx_err *err)
{
    if (s->n_head <= 0 || s->n_kv_head <= 0 || s->n_head % s->n_kv_head || s->head_dim <= 0 ||
        s->head_dim > ATTN_MAX_DIM || s->block <= 0 || (s->kv_type != CDX_TYPE_F32 && s->kv_type != CDX_TYPE_BF16))
        return cdx_err_set(err, CDX_EINVAL, "bf16 attention shape: %d heads, %d KV heads, head_dim %d, block %lld, KV "
                           "type %s; expected heads a multiple of KV heads, head_dim 1..%d, a block of at least 1 "
                           "position and an f32 or bf16 cache", s->n_head, s->n_kv_head, s->head_dim,
                           (long long)s->block, cdx_type_name(s->kv_type), ATTN_MAX_DIM);
    for (int64_t i = 0; i < n_rows; i++)
        if (rows[i].lo < 0 || rows[i].lo > rows[i].hi)
            return cdx_err_set(err, CDX_EINVAL, "attention row %lld: positions %lld..%lld; expected 0 <= lo <= hi",
                               (long long)i, (long long)rows[i].lo, (long long)rows[i].hi);
    attn_job j = { s, rows, n_rows };
    cdx_pool_run(pool, attn_work, &j);
    return CDX_OK;
}
