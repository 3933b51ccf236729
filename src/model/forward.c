/* The forward pass of the dense Llama family over a batch of tokens from one or more sequences.
 * Follows transformers' modeling_llama / qwen2 / qwen3 step by step, in f32:
 *   x = embed(tokens)
 *   per layer: h = rmsnorm(x)·w; q,k,v = h·Wqᵀ(+b) ...; [qwen3: per-head rmsnorm of q,k];
 *              rope(q,k); attn = softmax(q·kᵀ/√d)·v over the sequence's cache; x += attn·Woᵀ
 *              h = rmsnorm(x)·w; x += (silu(h·Wgᵀ) ⊙ h·Wuᵀ)·Wdᵀ
 *   logits = rmsnorm(x)·w · Woutᵀ
 */
#include "arch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cdx_forward_ctx {
    const cdx_model *m;
    const cdx_kernels *k;
    cdx_pool *pool;
    int64_t max_tokens;
    float *x, *xn, *q, *kk, *vv, *attn, *ffn_g, *ffn_u;   /* [max_tokens][...] */
    int64_t *pos;          /* [max_tokens] */
    int32_t *seq;          /* [max_tokens] */
    cdx_attn_row *arows;   /* [max_tokens] */
    void *ws;              /* matmul workspace */
};

int cdx_kv_init(cdx_kv *kv, const cdx_hparams *hp, int64_t n_ctx, cdx_err *err)
{
    memset(kv, 0, sizeof *kv);
    const int64_t bs = 16;
    size_t per_pos = (size_t)(hp->n_head_kv * hp->head_dim), n;
    if (n_ctx <= 0 || n_ctx > ((int64_t)1 << 40))
        return cdx_err_set(err, CDX_ERANGE, "context of %lld positions is out of range", (long long)n_ctx);
    const int64_t nb = (n_ctx + bs - 1) / bs, cap = nb * bs; /* whole blocks */
    if (!cdx_mul_size(per_pos, (size_t)cap, &n) || !cdx_mul_size(n, (size_t)hp->n_layer, &n) ||
        !cdx_mul_size(n, sizeof(float), &n))
        return cdx_err_set(err, CDX_ERANGE, "context of %lld positions is out of range", (long long)n_ctx);
    kv->k = malloc(n);
    kv->v = malloc(n);
    kv->tab = malloc(2 * (size_t)nb * sizeof *kv->tab);
    if (!kv->k || !kv->v || !kv->tab) {
        cdx_kv_free(kv);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for a KV cache of %lld positions (%zu MiB)",
                           (long long)n_ctx, 2 * n >> 20);
    }
    /* [layer][position] contiguous: block i starts i·bs positions into layer 0 */
    for (int64_t i = 0; i < nb; i++) {
        kv->tab[i] = kv->k + (size_t)i * bs * per_pos;
        kv->tab[nb + i] = kv->v + (size_t)i * bs * per_pos;
    }
    kv->seq = (cdx_kv_seq){ .k = kv->tab, .v = kv->tab + nb, .n_blocks = nb, .block = bs,
                            .layer_stride = (size_t)cap * per_pos };
    kv->n_ctx = n_ctx;
    return CDX_OK;
}

void cdx_kv_free(cdx_kv *kv)
{
    free(kv->k);
    free(kv->v);
    free(kv->tab);
    memset(kv, 0, sizeof *kv);
}

void cdx_forward_ctx_free(cdx_forward_ctx *fc)
{
    if (!fc)
        return;
    free(fc->x); free(fc->xn); free(fc->q); free(fc->kk); free(fc->vv); free(fc->attn);
    free(fc->ffn_g); free(fc->ffn_u); free(fc->pos); free(fc->seq); free(fc->ws);
    free(fc->arows);
    cdx_pool_destroy(fc->pool);
    free(fc);
}

cdx_pool *cdx_forward_ctx_pool(cdx_forward_ctx *fc) { return fc->pool; }
const cdx_kernels *cdx_forward_ctx_kernels(const cdx_forward_ctx *fc) { return fc->k; }

int cdx_forward_ctx_create(const cdx_model *m, int64_t max_tokens, int n_threads, const cdx_kernels *k,
                           cdx_forward_ctx **out, cdx_err *err)
{
    *out = NULL;
    const cdx_hparams *hp = &m->hp;
    if (max_tokens <= 0 || max_tokens > (1 << 20))
        return cdx_err_set(err, CDX_EINVAL, "batch size %lld is out of range (1..1048576)", (long long)max_tokens);
    cdx_forward_ctx *fc = calloc(1, sizeof *fc);
    if (!fc)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    fc->m = m;
    fc->k = k ? k : cdx_kernels_best();
    fc->max_tokens = max_tokens;
    int rc = cdx_pool_create(n_threads, &fc->pool, err);
    if (rc) {
        free(fc);
        return rc;
    }
    if ((rc = model_pack(m, fc->k, fc->pool, err))) {
        cdx_forward_ctx_free(fc);
        return rc;
    }
    size_t n = (size_t)max_tokens, q = (size_t)(hp->n_head * hp->head_dim), kvd = (size_t)(hp->n_head_kv * hp->head_dim);
    fc->x = malloc(n * (size_t)hp->n_embd * sizeof(float));
    fc->xn = malloc(n * (size_t)hp->n_embd * sizeof(float));
    fc->q = malloc(n * q * sizeof(float));
    fc->kk = malloc(n * kvd * sizeof(float));
    fc->vv = malloc(n * kvd * sizeof(float));
    fc->attn = malloc(n * q * sizeof(float));
    fc->ffn_g = malloc(n * (size_t)hp->n_ff * sizeof(float));
    fc->ffn_u = malloc(n * (size_t)hp->n_ff * sizeof(float));
    fc->pos = malloc(n * sizeof(int64_t));
    fc->seq = malloc(n * sizeof(int32_t));
    fc->arows = malloc(n * sizeof *fc->arows);
    size_t ws = cdx_matmul_ws_bytes(&m->output, max_tokens, cdx_pool_size(fc->pool));
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        const cdx_mat *mats[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down };
        for (int i = 0; i < 7; i++) {
            size_t b = cdx_matmul_ws_bytes(mats[i], max_tokens, cdx_pool_size(fc->pool));
            ws = b > ws ? b : ws;
        }
    }
    fc->ws = malloc(ws);
    if (!fc->x || !fc->xn || !fc->q || !fc->kk || !fc->vv || !fc->attn || !fc->ffn_g || !fc->ffn_u || !fc->pos ||
        !fc->seq || !fc->ws || !fc->arows) {
        cdx_forward_ctx_free(fc);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for a batch of %lld tokens", (long long)max_tokens);
    }
    *out = fc;
    return CDX_OK;
}

/* ---- small ops ---- */

static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++)
        out[i] = w[i] * (x[i] * scale);
}

static void rope(float *v, int64_t n_heads, int64_t hd, int64_t pos, const float *inv_freq, cdx_rope_mode mode)
{
    int64_t half = hd / 2;
    for (int64_t i = 0; i < half; i++) {
        float ang = (float)pos * inv_freq[i];
        float c = cosf(ang), s = sinf(ang);
        for (int64_t h = 0; h < n_heads; h++) {
            float *p = v + h * hd;
            int64_t a = mode == CDX_ROPE_ADJACENT ? 2 * i : i, b = mode == CDX_ROPE_ADJACENT ? 2 * i + 1 : i + half;
            float x0 = p[a], x1 = p[b];
            p[a] = x0 * c - x1 * s;
            p[b] = x0 * s + x1 * c;
        }
    }
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

/* ---- the pass ---- */

static void embed_row(const cdx_mat *e, int32_t tok, float *out)
{
    const uint8_t *row = (const uint8_t *)e->data + (size_t)tok * e->row_bytes;
    const cdx_type_traits *t = cdx_type_get(e->type);
    t->to_f32(row, out, e->cols);
}

int cdx_forward_seqs(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b, float *logits,
                     cdx_err *err)
{
    const cdx_model *m = fc->m;
    const cdx_hparams *hp = &m->hp;
    int64_t n = b->n, E = hp->n_embd, hd = hp->head_dim;
    int64_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    if (n <= 0 || n > fc->max_tokens)
        return cdx_err_set(err, CDX_EINVAL, "batch of %lld tokens; this context takes 1..%lld", (long long)n,
                           (long long)fc->max_tokens);
    if (!b->pos)
        return cdx_err_set(err, CDX_EINVAL, "batch without positions");
    if (!cdx_type_get(m->tok_embd.type)->to_f32)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "token embedding type %s cannot be read", cdx_type_name(m->tok_embd.type));
    if (n_seq <= 0)
        return cdx_err_set(err, CDX_EINVAL, "%d sequences in one batch", n_seq);
    /* positions, checked before anything changes */
    for (int64_t i = 0; i < n; i++) {
        int32_t s = b->seq ? b->seq[i] : 0;
        if (s < 0 || s >= n_seq)
            return cdx_err_set(err, CDX_EINVAL, "batch token %lld names sequence %d of %d", (long long)i, s, n_seq);
        int32_t tok = b->tokens[i];
        if (tok < 0 || tok >= hp->n_vocab)
            return cdx_err_set(err, CDX_EINVAL, "token id %d is outside the vocabulary (0..%lld)", tok,
                               (long long)hp->n_vocab - 1);
        const cdx_kv_seq *c = &seqs[s];
        if (b->pos[i] < 0 || c->block <= 0 || b->pos[i] >= c->n_blocks * c->block)
            return cdx_err_set(err, CDX_ERANGE, "the context is full: position %lld does not fit in %lld positions",
                               (long long)b->pos[i], (long long)(c->n_blocks * c->block));
        fc->seq[i] = s;
        fc->pos[i] = b->pos[i];
    }
    const cdx_kernels *K = fc->k;
    cdx_pool *pool = fc->pool;
    for (int64_t i = 0; i < n; i++)
        embed_row(&m->tok_embd, b->tokens[i], fc->x + i * E);
    cdx_attn_shape ashape = { .n_head = (int)hp->n_head, .n_kv_head = (int)hp->n_head_kv, .head_dim = (int)hd,
                              .kv_stride = kvd, .block = seqs[0].block, .scale = 1.0f / sqrtf((float)hd) };
    for (int s = 1; s < n_seq; s++)
        if (seqs[s].block != ashape.block)
            return cdx_err_set(err, CDX_EINVAL, "sequences of one batch have blocks of %lld and %lld positions",
                               (long long)ashape.block, (long long)seqs[s].block);

    for (int64_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        for (int64_t i = 0; i < n; i++)
            rmsnorm(fc->xn + i * E, fc->x + i * E, L->attn_norm, E, hp->rms_eps);
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->wq, &L->wk, &L->wv }, 3, fc->xn, n,
                         (float *[]){ fc->q, fc->kk, fc->vv }, fc->ws);
        for (int64_t i = 0; i < n; i++) {
            float *q = fc->q + i * qd, *k = fc->kk + i * kvd, *v = fc->vv + i * kvd;
            if (L->bq) {
                for (int64_t d = 0; d < qd; d++) q[d] += L->bq[d];
                for (int64_t d = 0; d < kvd; d++) k[d] += L->bk[d];
                for (int64_t d = 0; d < kvd; d++) v[d] += L->bv[d];
            }
            if (L->q_norm) {
                for (int64_t h = 0; h < hp->n_head; h++)
                    rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, hp->rms_eps);
                for (int64_t h = 0; h < hp->n_head_kv; h++)
                    rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, hp->rms_eps);
            }
            rope(q, hp->n_head, hd, fc->pos[i], m->inv_freq, hp->rope_mode);
            rope(k, hp->n_head_kv, hd, fc->pos[i], m->inv_freq, hp->rope_mode);
            const cdx_kv_seq *c = &seqs[fc->seq[i]];
            const int64_t p = fc->pos[i];
            const size_t off = (size_t)l * c->layer_stride + (size_t)(p % c->block) * (size_t)kvd;
            memcpy(c->k[p / c->block] + off, k, (size_t)kvd * sizeof(float));
            memcpy(c->v[p / c->block] + off, v, (size_t)kvd * sizeof(float));
        }
        for (int64_t i = 0; i < n; i++) {
            const cdx_kv_seq *c = &seqs[fc->seq[i]];
            const int64_t pos = fc->pos[i], w = hp->sliding_window;
            fc->arows[i] = (cdx_attn_row){ .q = fc->q + i * qd, .k = (const float *const *)c->k,
                                           .v = (const float *const *)c->v,
                                           .lo = w > 0 && pos - w + 1 > 0 ? pos - w + 1 : 0, .hi = pos,
                                           .out = fc->attn + i * qd, .off = (size_t)l * c->layer_stride };
        }
        int rc = cdx_attn(K, pool, &ashape, fc->arows, n, err);
        if (rc)
            return rc;
        cdx_matmul(K, pool, &L->wo, fc->attn, n, fc->xn, fc->ws);
        for (int64_t i = 0; i < n * E; i++)
            fc->x[i] += fc->xn[i];
        for (int64_t i = 0; i < n; i++)
            rmsnorm(fc->xn + i * E, fc->x + i * E, L->ffn_norm, E, hp->rms_eps);
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->gate, &L->up }, 2, fc->xn, n,
                         (float *[]){ fc->ffn_g, fc->ffn_u }, fc->ws);
        for (int64_t i = 0; i < n * hp->n_ff; i++)
            fc->ffn_g[i] = silu(fc->ffn_g[i]) * fc->ffn_u[i];
        cdx_matmul(K, pool, &L->down, fc->ffn_g, n, fc->xn, fc->ws);
        for (int64_t i = 0; i < n * E; i++)
            fc->x[i] += fc->xn[i];
    }

    int64_t n_out = 0;
    for (int64_t i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] : i == n - 1)
            rmsnorm(fc->xn + (n_out++) * E, fc->x + i * E, m->out_norm, E, hp->rms_eps);
    if (n_out)
        cdx_matmul(K, pool, &m->output, fc->xn, n_out, logits, fc->ws);
    return CDX_OK;
}

int cdx_forward(cdx_forward_ctx *fc, cdx_kv *const *kv, int n_seq, const cdx_batch *b, float *logits, cdx_err *err)
{
    enum { MAX_SEQ = 64 };
    if (n_seq <= 0 || n_seq > MAX_SEQ)
        return cdx_err_set(err, CDX_EINVAL, "%d sequences in one batch; 1..%d are supported", n_seq, MAX_SEQ);
    if (b->n <= 0 || b->n > fc->max_tokens)
        return cdx_err_set(err, CDX_EINVAL, "batch of %lld tokens; this context takes 1..%lld", (long long)b->n,
                           (long long)fc->max_tokens);
    cdx_kv_seq seqs[MAX_SEQ];
    int64_t added[MAX_SEQ] = { 0 };
    int64_t *pos = malloc((size_t)b->n * sizeof *pos);
    if (!pos)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int s = 0; s < n_seq; s++)
        seqs[s] = kv[s]->seq;
    int rc = CDX_OK;
    for (int64_t i = 0; i < b->n; i++) {
        int32_t s = b->seq ? b->seq[i] : 0;
        if (s < 0 || s >= n_seq) {
            rc = cdx_err_set(err, CDX_EINVAL, "batch token %lld names sequence %d of %d", (long long)i, s, n_seq);
            break;
        }
        pos[i] = kv[s]->n_past + added[s]++;
        if (pos[i] >= kv[s]->n_ctx) {
            rc = cdx_err_set(err, CDX_ERANGE, "the context is full: position %lld does not fit in --ctx %lld",
                             (long long)pos[i], (long long)kv[s]->n_ctx);
            break;
        }
    }
    if (!rc) { /* positions were checked against n_ctx (the table may round it up to whole blocks) */
        cdx_batch bb = *b;
        bb.pos = pos;
        rc = cdx_forward_seqs(fc, seqs, n_seq, &bb, logits, err);
    }
    free(pos);
    if (rc)
        return rc;
    for (int s = 0; s < n_seq; s++)
        kv[s]->n_past += added[s];
    return CDX_OK;
}
