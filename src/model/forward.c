/* The forward pass of the dense Llama family over a batch of tokens from one or more sequences.
 * Follows transformers' modeling_llama / qwen2 / qwen3 step by step, in f32:
 *   x = embed(tokens)
 *   per layer: h = rmsnorm(x)·w; q,k,v = h·Wqᵀ(+b) ...; [qwen3: per-head rmsnorm of q,k];
 *              rope(q,k); attn = softmax(q·kᵀ/√d)·v over the sequence's cache; x += attn·Woᵀ
 *              h = rmsnorm(x)·w; x += (silu(h·Wgᵀ) ⊙ h·Wuᵀ)·Wdᵀ
 *              [sparse layers (modeling_qwen3_moe / mixtral / qwen2_moe): p = softmax(h·Wrᵀ) in f32,
 *               the top k of p (renormalised when norm_topk_prob), x += Σ_e p_e·expert_e(h) summed in
 *               expert order as transformers' index_add_ loop does, Qwen2-MoE adding
 *               sigmoid(h·w_sg)·shared(h)]
 *   logits = rmsnorm(x)·w · Woutᵀ
 * In a batch, a sparse layer groups the tokens by expert, so each expert's weights are read once
 * per forward over the gathered rows; a row's result does not depend on which rows are beside it. */
#include "arch.h"
#include "expert_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cdx_forward_ctx {
    const cdx_model *m;
    const cdx_kernels *k;
    cdx_pool *pool;
    int64_t max_tokens;
    float *x, *xn, *q, *kk, *vv, *attn, *ffn_g, *ffn_u;   /* [max_tokens][...] */
    /* sparse layers */
    float *router;         /* [max_tokens][n_expert] */
    float *xg, *yg, *moe;  /* [max_tokens][n_embd]: gathered rows, an expert's outputs, the layer's sum */
    float *sel_w, *grp_w;  /* [max_tokens][n_expert_used]: chosen weights by token, by expert group */
    int32_t *sel_e;        /* [max_tokens][n_expert_used]: chosen experts */
    int64_t *grp_tok;      /* [max_tokens]: the tokens of one expert's group, ascending */
    int64_t *pos;          /* [max_tokens] */
    int32_t *seq;          /* [max_tokens] */
    cdx_attn_row *arows;   /* [max_tokens] */
    void *ws;              /* matmul workspace */
    hybrid_ctx *hy;        /* a hybrid model's (Qwen3.5) own buffers, qwen35.c; NULL otherwise */
};

int cdx_kv_init(cdx_kv *kv, const cdx_hparams *hp, int64_t n_ctx, cdx_err *err)
{
    memset(kv, 0, sizeof *kv);
    const int64_t bs = 16;
    size_t per_pos = (size_t)(hp->n_head_kv * hp->head_dim), n;
    const int64_t n_layer = cdx_hparams_kv_layers(hp); /* a hybrid model: its attention layers */
    if (n_ctx <= 0 || n_ctx > ((int64_t)1 << 40))
        return cdx_err_set(err, CDX_ERANGE, "context of %lld positions is out of range", (long long)n_ctx);
    const int64_t nb = (n_ctx + bs - 1) / bs, cap = nb * bs; /* whole blocks */
    if (!cdx_mul_size(per_pos, (size_t)cap, &n) || !cdx_mul_size(n, (size_t)n_layer, &n) ||
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
        /* type CDX_TYPE_F32 (0) */
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
    free(kv->state);
    memset(kv, 0, sizeof *kv);
}

void cdx_forward_ctx_free(cdx_forward_ctx *fc)
{
    if (!fc)
        return;
    free(fc->x); free(fc->xn); free(fc->q); free(fc->kk); free(fc->vv); free(fc->attn);
    free(fc->ffn_g); free(fc->ffn_u); free(fc->pos); free(fc->seq); free(fc->ws);
    free(fc->arows);
    free(fc->router); free(fc->xg); free(fc->yg); free(fc->moe); free(fc->sel_w); free(fc->grp_w);
    free(fc->sel_e); free(fc->grp_tok);
    hybrid_ctx_free(fc->hy);
    cdx_pool_destroy(fc->pool);
    free(fc);
}

cdx_pool *cdx_forward_ctx_pool(cdx_forward_ctx *fc) { return fc->pool; }

int cdx_forward_ctx_set_per_token(cdx_forward_ctx *fc, bool per_token)
{
    if (!fc->hy)
        return CDX_EINVAL;
    hybrid_set_per_token(fc->hy, per_token);
    return CDX_OK;
}
const cdx_kernels *cdx_forward_ctx_kernels(const cdx_forward_ctx *fc) { return fc->k; }
const cdx_model *forward_ctx_model(const cdx_forward_ctx *fc) { return fc->m; }

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
    if ((rc = model_pack(m, fc->k, fc->pool, err)) ||
        (hp->linear_layer && (rc = hybrid_ctx_create(m, max_tokens, cdx_pool_size(fc->pool), fc->k, &fc->hy, err)))) {
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
    int64_t ff = hp->n_ff;
    ff = hp->n_ff_expert > ff ? hp->n_ff_expert : ff;
    ff = hp->n_ff_shared > ff ? hp->n_ff_shared : ff;
    fc->ffn_g = malloc(n * (size_t)ff * sizeof(float));
    fc->ffn_u = malloc(n * (size_t)ff * sizeof(float));
    bool moe_ok = true;
    if (hp->n_expert > 0) {
        const size_t nk = n * (size_t)hp->n_expert_used, ne = (size_t)hp->n_expert;
        fc->router = malloc(n * ne * sizeof(float));
        fc->xg = malloc(n * (size_t)hp->n_embd * sizeof(float));
        fc->yg = malloc(n * (size_t)hp->n_embd * sizeof(float));
        fc->moe = malloc(n * (size_t)hp->n_embd * sizeof(float));
        fc->sel_w = malloc(nk * sizeof(float));
        fc->grp_w = malloc(nk * sizeof(float));
        fc->sel_e = malloc(nk * sizeof(int32_t));
        fc->grp_tok = malloc(nk * sizeof(int64_t));
        moe_ok = fc->router && fc->xg && fc->yg && fc->moe && fc->sel_w && fc->grp_w && fc->sel_e && fc->grp_tok;
    }
    fc->pos = malloc(n * sizeof(int64_t));
    fc->seq = malloc(n * sizeof(int32_t));
    fc->arows = malloc(n * sizeof *fc->arows);
    size_t ws = 0;
    for (size_t i = 0; i < m->n_mats; i++) {
        size_t b = cdx_matmul_ws_bytes(m->mats[i], max_tokens, cdx_pool_size(fc->pool));
        ws = b > ws ? b : ws;
    }
    fc->ws = malloc(ws ? ws : 1);
    if (!moe_ok || !fc->x || !fc->xn || !fc->q || !fc->kk || !fc->vv || !fc->attn || !fc->ffn_g || !fc->ffn_u || !fc->pos ||
        !fc->seq || !fc->ws || !fc->arows) {
        cdx_forward_ctx_free(fc);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for a batch of %lld tokens", (long long)max_tokens);
    }
    *out = fc;
    return CDX_OK;
}

/* ---- small ops ---- */

/* ggml's rms_norm to the bit: squares in float summed in double, the mean rounded to float, then
 * 1/sqrtf in float. A last-bit difference here moves a q8 activation a step (see quant_legacy.c). */
void model_kv_store(const cdx_kv_seq *c, int64_t slot, int64_t p, int64_t kvd, const float *k, const float *v)
{
    const size_t off = (size_t)slot * c->layer_stride + (size_t)(p % c->block) * (size_t)kvd;
    if (c->type == CDX_TYPE_F16 || c->type == CDX_TYPE_BF16) {
        uint16_t *kh = (uint16_t *)c->k[p / c->block] + off, *vh = (uint16_t *)c->v[p / c->block] + off;
        const bool f16 = c->type == CDX_TYPE_F16;
        for (int64_t d = 0; d < kvd; d++) {
            kh[d] = f16 ? cdx_f32_to_f16(k[d]) : cdx_f32_to_bf16(k[d]);
            vh[d] = f16 ? cdx_f32_to_f16(v[d]) : cdx_f32_to_bf16(v[d]);
        }
    } else {
        memcpy((float *)c->k[p / c->block] + off, k, (size_t)kvd * sizeof(float));
        memcpy((float *)c->v[p / c->block] + off, v, (size_t)kvd * sizeof(float));
    }
}

void model_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    /* four running sums (i mod 4) so the double adds do not wait on each other's latency; a
     * fixed order, so the same bits on every machine and kernel set */
    double s4[4] = { 0, 0, 0, 0 };
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++)
            s4[l] += (double)(x[i + l] * x[i + l]);
    for (; i < n; i++)
        s4[0] += (double)(x[i] * x[i]);
    const double ss = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    const float mean = (float)(ss / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (i = 0; i < n; i++)
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

typedef struct {
    const cdx_kernels *k;
    float *g;
    const float *u;
    int64_t n;
    bool bf16;
} swiglu_job;

static void swiglu_part(void *arg, int ith, int nth)
{
    swiglu_job *j = arg;
    const int64_t a = j->n * ith / nth, e = j->n * (ith + 1) / nth;
    if (!j->bf16) { /* silu(g)·u with expf's bits on every kernel set: the same values wherever the slices fall */
        cdx_swiglu(j->k, j->g + a, j->u + a, e - a);
        return;
    }
    for (int64_t i = a; i < e; i++) { /* bf16 compute (forward_bf16.c, #13) */
        const float g = cdx_bf16_round(j->g[i]), u = cdx_bf16_round(j->u[i]);
        const float act = cdx_bf16_round(silu(g)); /* PyTorch 2.x's CPU SiLU on bf16: f32, one rounding */
        j->g[i] = cdx_bf16_round(act * u);
    }
}

void model_swiglu(cdx_pool *pool, const cdx_kernels *k, float *g, const float *u, int64_t n, bool bf16)
{
    swiglu_job j = { k, g, u, n, bf16 };
    if (n >= 8192)
        cdx_pool_run(pool, swiglu_part, &j);
    else
        swiglu_part(&j, 0, 1);
}

/* ---- mixture of experts ---- */

/* One token's routing: softmax over the router logits in f32 (max subtracted, as torch does), the
 * k largest (the lower expert id first on a tie), renormalised to sum 1 when asked. */
static void route(float *p, int64_t ne, int64_t k, bool renorm, int32_t *sel, float *w)
{
    float mx = p[0];
    for (int64_t e = 1; e < ne; e++)
        mx = p[e] > mx ? p[e] : mx;
    float sum = 0;
    for (int64_t e = 0; e < ne; e++) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    for (int64_t e = 0; e < ne; e++)
        p[e] /= sum;
    for (int64_t r = 0; r < k; r++) {
        int32_t best = -1;
        for (int64_t e = 0; e < ne; e++) {
            bool taken = false;
            for (int64_t j = 0; j < r; j++)
                taken |= sel[j] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = (int32_t)e;
        }
        sel[r] = best;
        w[r] = p[best];
    }
    if (renorm) {
        float s = 0;
        for (int64_t r = 0; r < k; r++)
            s += w[r];
        for (int64_t r = 0; r < k; r++)
            w[r] /= s;
    }
}

/* out[n][E] = the sparse block of layer L over the normalised rows xn. Tokens are grouped by
 * expert (ascending within a group); each expert runs once over its gathered rows and adds weight·output to its tokens' sums. Expert ids ascend in the outer loop,
 * so every token's sum runs in the same order — its experts' ids, ascending — whatever the batch. */
static int moe_block(cdx_forward_ctx *fc, int64_t l, const layer_weights *L, const float *xn, int64_t n, float *out,
                     cdx_err *err)
{
    const cdx_hparams *hp = &fc->m->hp;
    const cdx_kernels *K = fc->k;
    cdx_pool *pool = fc->pool;
    const int64_t E = hp->n_embd, ne = hp->n_expert, k = hp->n_expert_used;
    cdx_matmul(K, pool, &L->router, xn, n, fc->router, fc->ws);
    for (int64_t i = 0; i < n; i++)
        route(fc->router + i * ne, ne, k, hp->norm_topk_prob, fc->sel_e + i * k, fc->sel_w + i * k);
    memset(out, 0, (size_t)(n * E) * sizeof(float));
    for (int64_t e = 0; e < ne; e++) {
        /* gather the tokens that chose e, ascending */
        int64_t c = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = 0; r < k; r++)
                if (fc->sel_e[i * k + r] == e) {
                    fc->grp_tok[c] = i;
                    fc->grp_w[c] = fc->sel_w[i * k + r];
                    memcpy(fc->xg + c * E, xn + i * E, (size_t)E * sizeof(float));
                    c++;
                }
        if (!c)
            continue;
        /* under a weight budget the expert comes from the cache, in the layout model_pack would give it */
        cdx_mat xw[3] = { L->exp_gate[e], L->exp_up[e], L->exp_down[e] };
        int slot = -1;
        if (fc->m->xc) {
            int rc = xc_acquire(fc->m, K, pool, l, e, xw, &slot, err);
            if (rc)
                return rc;
        }
        const int64_t F = xw[0].rows;
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &xw[0], &xw[1] }, 2, fc->xg, c,
                         (float *[]){ fc->ffn_g, fc->ffn_u }, fc->ws);
        cdx_swiglu(K, fc->ffn_g, fc->ffn_u, c * F);
        cdx_matmul(K, pool, &xw[2], fc->ffn_g, c, fc->yg, fc->ws);
        if (slot >= 0)
            xc_release(fc->m, slot);
        for (int64_t j = 0; j < c; j++) {
            float *o = out + fc->grp_tok[j] * E;
            const float *y = fc->yg + j * E, w = fc->grp_w[j];
            for (int64_t d = 0; d < E; d++)
                o[d] += y[d] * w;
        }
    }
    if (!L->sh_gate.data)
        return CDX_OK;
    /* Qwen2-MoE: out += sigmoid(xn·w_sg) · shared(xn) */
    const int64_t F = L->sh_gate.rows;
    cdx_matmul(K, pool, &L->sh_router, xn, n, fc->router, fc->ws);
    cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->sh_gate, &L->sh_up }, 2, xn, n,
                     (float *[]){ fc->ffn_g, fc->ffn_u }, fc->ws);
    cdx_swiglu(K, fc->ffn_g, fc->ffn_u, n * F);
    cdx_matmul(K, pool, &L->sh_down, fc->ffn_g, n, fc->yg, fc->ws);
    for (int64_t i = 0; i < n; i++) {
        const float g = 1.0f / (1.0f + expf(-fc->router[i])); /* router reused: [n][1] */
        float *o = out + i * E;
        const float *y = fc->yg + i * E;
        for (int64_t d = 0; d < E; d++)
            o[d] += g * y[d];
    }
    return CDX_OK;
}

/* ---- the pass ---- */

static void embed_row(const cdx_mat *e, int32_t tok, float *out)
{
    const uint8_t *row = (const uint8_t *)e->data + (size_t)tok * e->row_bytes;
    const cdx_type_traits *t = cdx_type_get(e->type);
    t->to_f32(row, out, e->cols);
}

/* The per-token steps between the matrices, a slice of the batch's tokens per thread: each token's
 * values are computed by the same code whichever thread takes it, so the bits do not depend on the
 * split. One thread doing them kept the other waiting (~3 % of a Qwen3 prefill). */
typedef struct {
    float *out;
    const float *x, *w;
    int64_t n, E;
    float eps;
} norm_job;

static void norm_part(void *arg, int ith, int nth)
{
    const norm_job *j = arg;
    for (int64_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++)
        model_rmsnorm(j->out + i * j->E, j->x + i * j->E, j->w, j->E, j->eps);
}

void model_norm_rows(cdx_pool *pool, float *out, const float *x, const float *w, int64_t n, int64_t E, float eps)
{
    norm_job j = { out, x, w, n, E, eps };
    if (n >= 4)
        cdx_pool_run(pool, norm_part, &j);
    else
        norm_part(&j, 0, 1);
}

/* q, k, v of each token after the projections: biases, the per-head q/k norms, rope, and the store
 * into the token's own KV slot (distinct positions: no two tokens write the same bytes). */
typedef struct {
    const cdx_forward_ctx *fc;
    const layer_weights *L;
    const cdx_kv_seq *seqs;
    int64_t l, n;
} qkv_job;

static void qkv_part(void *arg, int ith, int nth)
{
    const qkv_job *j = arg;
    const cdx_forward_ctx *fc = j->fc;
    const layer_weights *L = j->L;
    const cdx_model *m = fc->m;
    const cdx_hparams *hp = &m->hp;
    const int64_t hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    for (int64_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++) {
        float *q = fc->q + i * qd, *k = fc->kk + i * kvd, *v = fc->vv + i * kvd;
        if (L->bq) {
            for (int64_t d = 0; d < qd; d++) q[d] += L->bq[d];
            for (int64_t d = 0; d < kvd; d++) k[d] += L->bk[d];
            for (int64_t d = 0; d < kvd; d++) v[d] += L->bv[d];
        }
        if (L->q_norm) {
            for (int64_t h = 0; h < hp->n_head; h++)
                model_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, hp->rms_eps);
            for (int64_t h = 0; h < hp->n_head_kv; h++)
                model_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, hp->rms_eps);
        }
        rope(q, hp->n_head, hd, fc->pos[i], m->inv_freq, hp->rope_mode);
        rope(k, hp->n_head_kv, hd, fc->pos[i], m->inv_freq, hp->rope_mode);
        model_kv_store(&j->seqs[fc->seq[i]], j->l, fc->pos[i], kvd, k, v);
    }
}

static int forward_seqs_run(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b, float *logits,
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
    if (m->dtype == CDX_DTYPE_BF16) /* forward_bf16.c: transformers' bf16 forward */
        return forward_bf16(m, &(fwd_scratch){ fc->k, fc->pool, fc->x, fc->xn, fc->q, fc->kk, fc->vv, fc->attn,
                                               fc->ffn_g, fc->ffn_u, fc->pos, fc->seq, fc->arows, fc->ws },
                            seqs, n_seq, b, logits, err);
    const cdx_kernels *K = fc->k;
    cdx_pool *pool = fc->pool;
    for (int64_t i = 0; i < n; i++) {
        if (b->embd && b->embd[i]) /* image features at an image token (Idefics3's inputs_merger) */
            memcpy(fc->x + i * E, b->embd[i], (size_t)E * sizeof(float));
        else
            embed_row(&m->tok_embd, b->tokens[i], fc->x + i * E);
    }
    cdx_attn_shape ashape = { .n_head = (int)hp->n_head, .n_kv_head = (int)hp->n_head_kv, .head_dim = (int)hd,
                              .kv_stride = kvd, .block = seqs[0].block, .scale = 1.0f / sqrtf((float)hd),
                              .kv_type = seqs[0].type };
    if (ashape.kv_type != CDX_TYPE_F32 && ashape.kv_type != CDX_TYPE_F16)
        return cdx_err_set(err, CDX_EINVAL, "KV cache type %u; f32 and f16 are supported", ashape.kv_type);
    for (int s = 1; s < n_seq; s++)
        if (seqs[s].block != ashape.block || seqs[s].type != ashape.kv_type)
            return cdx_err_set(err, CDX_EINVAL, "sequences of one batch differ in their KV blocks (%lld and %lld "
                               "positions, types %u and %u)", (long long)ashape.block, (long long)seqs[s].block,
                               ashape.kv_type, seqs[s].type);
    if (fc->hy)
        return hybrid_forward(fc->hy, m, K, pool, fc->ws, fc->x, fc->xn, fc->pos, fc->seq, fc->arows, seqs, n_seq, b,
                              logits, err);

    for (int64_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        model_norm_rows(pool, fc->xn, fc->x, L->attn_norm, n, E, hp->rms_eps);
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->wq, &L->wk, &L->wv }, 3, fc->xn, n,
                         (float *[]){ fc->q, fc->kk, fc->vv }, fc->ws);
        qkv_job qj = { fc, L, seqs, l, n };
        if (n >= 4)
            cdx_pool_run(pool, qkv_part, &qj);
        else
            qkv_part(&qj, 0, 1);
        for (int64_t i = 0; i < n; i++) {
            const cdx_kv_seq *c = &seqs[fc->seq[i]];
            const int64_t pos = fc->pos[i], w = hp->sliding_window;
            fc->arows[i] = (cdx_attn_row){ .q = fc->q + i * qd, .k = (const void *const *)c->k,
                                           .v = (const void *const *)c->v,
                                           .lo = w > 0 && pos - w + 1 > 0 ? pos - w + 1 : 0, .hi = pos,
                                           .out = fc->attn + i * qd, .off = (size_t)l * c->layer_stride };
        }
        int rc = cdx_attn(K, pool, &ashape, fc->arows, n, err);
        if (rc)
            return rc;
        cdx_matmul(K, pool, &L->wo, fc->attn, n, fc->xn, fc->ws);
        for (int64_t i = 0; i < n * E; i++)
            fc->x[i] += fc->xn[i];
        model_norm_rows(pool, fc->xn, fc->x, L->ffn_norm, n, E, hp->rms_eps);
        if (L->moe) {
            if ((rc = moe_block(fc, l, L, fc->xn, n, fc->moe, err)))
                return rc;
            for (int64_t i = 0; i < n * E; i++)
                fc->x[i] += fc->moe[i];
            continue;
        }
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->gate, &L->up }, 2, fc->xn, n,
                         (float *[]){ fc->ffn_g, fc->ffn_u }, fc->ws);
        model_swiglu(pool, K, fc->ffn_g, fc->ffn_u, n * hp->n_ff, false);
        cdx_matmul(K, pool, &L->down, fc->ffn_g, n, fc->xn, fc->ws);
        for (int64_t i = 0; i < n * E; i++)
            fc->x[i] += fc->xn[i];
    }

    int64_t n_out = 0;
    for (int64_t i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] : i == n - 1)
            model_rmsnorm(fc->xn + (n_out++) * E, fc->x + i * E, m->out_norm, E, hp->rms_eps);
    if (n_out)
        cdx_matmul(K, pool, &m->output, fc->xn, n_out, logits, fc->ws);
    return CDX_OK;
}

int cdx_forward_seqs(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b, float *logits,
                     cdx_err *err)
{
    model_use_begin(fc->m); /* installs background packs between passes (model_load.c) */
    const int rc = forward_seqs_run(fc, seqs, n_seq, b, logits, err);
    model_use_end(fc->m);
    return rc;
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
