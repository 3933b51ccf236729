/* The forward pass of Qwen3.5 (transformers' modeling_qwen3_5.py, on qwen3_next), in f32:
 *   x = embed(tokens)
 *   per layer: h = rmsnorm(x)·(1 + w)   (the offsets are made weights at load)
 *     Gated DeltaNet layer: qkv = h·Wqkvᵀ; z = h·Wzᵀ; b = h·Wbᵀ; a = h·Waᵀ
 *       qkv = silu(causal depthwise conv over the last conv_k positions, the window in the state)
 *       q, k = l2norm per key head (q × dk^-½); β = sigmoid(b); g = -exp(A_log)·softplus(a + dt_bias)
 *       value head j reads key head j / (nv / nk); o = the delta rule (deltanet.h)
 *       o = w·rms(o)·silu(z) per value head; x += o·Woutᵀ
 *     gated attention layer: [q | gate] per head = h·Wqᵀ; k, v; q, k rmsnorm·(1 + w) per head;
 *       RoPE (rotate_half) on the first n_rot dims; softmax attention over the cache (the KV
 *       layers are the attention layers only); x += (attn ⊙ sigmoid(gate))·Woᵀ
 *     h = rmsnorm(x)·(1 + w); x += (silu(h·Wgᵀ) ⊙ h·Wuᵀ)·Wdᵀ
 *   logits = rmsnorm(x)·(1 + w) · Wembᵀ (tied)
 * A row's arithmetic does not depend on the other rows of the batch, nor on how a sequence's
 * positions were split into batches (the delta rule's chunks sit at fixed positions). */
#include "ops.h"
#include "deltanet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct hybrid_ctx {
    dn_shape sh;
    int64_t max_tokens;
    bool per_token;
    bool tiled;                             /* hp->ssm_v_tiled */
    const dn_kernels *dn;                   /* the delta-rule steps of the context's kernel set */
    int n_threads;
    float *qg, *q, *gate, *kk, *vv, *attn;  /* [n][2·qd], [n][qd] ×2, [n][kvd] ×2, [n][qd] */
    float *mix, *cv, *z, *beta, *g, *core;  /* [n][channels] ×2, [n][vd], [n][nv] ×2, [n][vd] */
    float *ffn_g, *ffn_u;                   /* [n][n_ff] */
    float *tmp;                             /* [n_threads][DN_TMP_FLOATS(dv)] */
    int64_t *order, *first, *count;         /* [n]: token indices by sequence; per sequence */
};

/* ---- state ---- */

static void shape_of(const cdx_model *m, dn_shape *sh)
{
    const cdx_hparams *hp = &m->hp;
    int64_t nl = 0;
    for (int64_t l = 0; hp->linear_layer && l < hp->n_layer; l++)
        nl += hp->linear_layer[l] != 0;
    dn_shape_init(sh, nl, hp->ssm_n_k_head, hp->ssm_n_v_head, hp->ssm_d_k, hp->ssm_d_v, hp->ssm_conv_k);
}

size_t cdx_model_state_bytes(const cdx_model *m)
{
    if (!m->hp.linear_layer)
        return 0;
    dn_shape sh;
    shape_of(m, &sh);
    return dn_state_bytes(&sh);
}

void cdx_model_state_reset(const cdx_model *m, void *state)
{
    const size_t n = cdx_model_state_bytes(m);
    if (!n || !state)
        return;
    dn_shape sh;
    shape_of(m, &sh);
    memset(state, 0, n);
    dn_state_hdr *h = state;
    h->n_linear = sh.n_linear;
    h->magic = DN_STATE_MAGIC;
}

int64_t cdx_model_state_pos(const void *state) { return state ? ((const dn_state_hdr *)state)->pos : 0; }

/* ---- context ---- */

void hybrid_ctx_free(hybrid_ctx *h)
{
    if (!h)
        return;
    free(h->qg); free(h->q); free(h->gate); free(h->kk); free(h->vv); free(h->attn);
    free(h->mix); free(h->cv); free(h->z); free(h->beta); free(h->g); free(h->core);
    free(h->ffn_g); free(h->ffn_u); free(h->tmp); free(h->order); free(h->first); free(h->count);
    free(h);
}

void hybrid_set_per_token(hybrid_ctx *h, bool per_token) { h->per_token = per_token; }

int hybrid_ctx_create(const cdx_model *m, int64_t max_tokens, int n_threads, const cdx_kernels *k, hybrid_ctx **out,
                      cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    hybrid_ctx *h = calloc(1, sizeof *h);
    *out = NULL;
    if (!h)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    shape_of(m, &h->sh);
    h->max_tokens = max_tokens;
    h->tiled = hp->ssm_v_tiled;
    h->dn = dn_kernels_for(k);
    h->n_threads = n_threads > 0 ? n_threads : 1;
    const size_t n = (size_t)max_tokens, qd = (size_t)(hp->n_head * hp->head_dim),
                 kvd = (size_t)(hp->n_head_kv * hp->head_dim), ch = (size_t)h->sh.channels,
                 vd = (size_t)(hp->ssm_n_v_head * hp->ssm_d_v), nv = (size_t)hp->ssm_n_v_head;
    h->qg = malloc(n * 2 * qd * sizeof(float));
    h->q = malloc(n * qd * sizeof(float));
    h->gate = malloc(n * qd * sizeof(float));
    h->kk = malloc(n * kvd * sizeof(float));
    h->vv = malloc(n * kvd * sizeof(float));
    h->attn = malloc(n * qd * sizeof(float));
    h->mix = malloc(n * ch * sizeof(float));
    h->cv = malloc(n * ch * sizeof(float));
    h->z = malloc(n * vd * sizeof(float));
    h->beta = malloc(n * nv * sizeof(float));
    h->g = malloc(n * nv * sizeof(float));
    h->core = malloc(n * vd * sizeof(float));
    h->ffn_g = malloc(n * (size_t)hp->n_ff * sizeof(float));
    h->ffn_u = malloc(n * (size_t)hp->n_ff * sizeof(float));
    h->tmp = malloc((size_t)h->n_threads * (size_t)DN_TMP_FLOATS(hp->ssm_d_v) * sizeof(float));
    h->order = malloc(n * sizeof(int64_t));
    h->first = malloc(n * sizeof(int64_t));
    h->count = malloc(n * sizeof(int64_t));
    if (!h->qg || !h->q || !h->gate || !h->kk || !h->vv || !h->attn || !h->mix || !h->cv || !h->z || !h->beta ||
        !h->g || !h->core || !h->ffn_g || !h->ffn_u || !h->tmp || !h->order || !h->first || !h->count) {
        hybrid_ctx_free(h);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for a batch of %lld tokens", (long long)max_tokens);
    }
    *out = h;
    return CDX_OK;
}

/* ---- small ops ---- */

static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); } /* torch's threshold 20 */

/* x · rsqrt(Σx² + 1e-6) (transformers' l2norm), in place */
static void l2norm(float *x, int64_t n, float scale)
{
    float ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss + 1e-6f);
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] * r * scale;
}

/* ---- the delta rule over (sequence, value head) pairs ---- */

typedef struct {
    hybrid_ctx *h;
    const cdx_kv_seq *seqs;
    int n_seq;
    int64_t li;
} dn_job;

static void dn_work(void *arg, int ith, int nth)
{
    const dn_job *j = arg;
    hybrid_ctx *h = j->h;
    const dn_shape *sh = &h->sh;
    const int64_t nv = sh->nv, nk = sh->nk, dk = sh->dk, dv = sh->dv, ch = sh->channels, vd = nv * dv;
    const int64_t items = (int64_t)j->n_seq * nv, rep = nv / nk;
    float *tmp = h->tmp + (size_t)ith * (size_t)DN_TMP_FLOATS(dv);
    for (int64_t it = ith; it < items; it += nth) {
        const int64_t s = it / nv, hh = it % nv, kh = h->tiled ? hh % nk : hh / rep;
        if (!h->count[s])
            continue;
        void *state = j->seqs[s].state;
        float *head = dn_head_state(sh, state, j->li, hh);
        const int64_t p0 = ((const dn_state_hdr *)state)->pos;
        for (int64_t r = 0; r < h->count[s]; r++) {
            const int64_t i = h->order[h->first[s] + r], p = p0 + r;
            const float *x = h->cv + i * ch;
            const float *q = x + kh * dk, *k = x + nk * dk + kh * dk, *v = x + 2 * nk * dk + hh * dv;
            const float g = h->g[i * nv + hh], beta = h->beta[i * nv + hh];
            float *o = h->core + i * vd + hh * dv;
            if (h->per_token)
                h->dn->recurrent(head, dk, dv, q, k, v, g, beta, o, tmp);
            else
                h->dn->chunk(head, dk, dv, p % DN_CHUNK, q, k, v, g, beta, o, tmp);
        }
    }
}

/* The causal depthwise conv of one sequence's tokens (pre-conv inputs in mix), then silu (the
 * kernel set's, expf's bits), into cv, for channels [c0, c1); the window keeps the last conv_k - 1
 * inputs. */
static void conv_seq(hybrid_ctx *h, const cdx_kernels *ks, const layer_weights *L, float *win, int64_t s, int64_t c0,
                     int64_t c1)
{
    const int64_t ch = h->sh.channels, K = h->sh.conv_k, m = h->count[s];
    const int64_t *idx = h->order + h->first[s];
    for (int64_t r = 0; r < m; r++) {
        float *out = h->cv + idx[r] * ch;
        for (int64_t c = c0; c < c1; c++) {
            float acc = 0;
            for (int64_t j = 0; j < K; j++) {
                const int64_t d = r - (K - 1) + j;
                const float x = d >= 0 ? h->mix[idx[d] * ch + c] : win[(K - 1 + d) * ch + c];
                acc += L->ssm_conv[c * K + j] * x;
            }
            out[c] = acc;
        }
        cdx_silu(ks, out + c0, c1 - c0);
    }
    /* the new window: inputs at offsets m-(K-1) .. m-1; a source in the old window lies after its
     * destination, so ascending t reads it before it is overwritten */
    for (int64_t t = 0; t < K - 1; t++) {
        const int64_t d = m - (K - 1) + t;
        const float *src = d >= 0 ? h->mix + idx[d] * ch : win + (K - 1 + d) * ch;
        memmove(win + t * ch + c0, src + c0, (size_t)(c1 - c0) * sizeof(float));
    }
}

/* ---- the steps between the matmuls, over the threads ----
 * Each is a loop over independent items (tokens, or channels for the conv) whose range is split
 * among the threads; an item's arithmetic is the same on any thread, so are its bits. */

typedef struct hy_step hy_step;
struct hy_step {
    hybrid_ctx *h;
    const cdx_model *m;
    const cdx_kernels *K;
    const layer_weights *L;
    const cdx_kv_seq *seqs;
    const int64_t *pos;
    const int32_t *seq;
    int64_t li, slot;
    int ns;
    void (*fn)(const hy_step *st, int64_t i0, int64_t i1);
    int64_t n;
};

static void hy_part(void *arg, int ith, int nth)
{
    const hy_step *st = arg;
    st->fn(st, st->n * ith / nth, st->n * (ith + 1) / nth);
}

/* fn over [0, n): on the threads when there are at least `min` items, else here */
static void hy_run(cdx_pool *pool, hy_step *st, void (*fn)(const hy_step *, int64_t, int64_t), int64_t n, int64_t min)
{
    st->fn = fn;
    st->n = n;
    if (n >= min)
        cdx_pool_run(pool, hy_part, st);
    else
        fn(st, 0, n);
}

static void step_conv(const hy_step *st, int64_t c0, int64_t c1)
{
    for (int s = 0; s < st->ns; s++)
        if (st->h->count[s])
            conv_seq(st->h, st->K, st->L, dn_layer_state(&st->h->sh, st->seqs[s].state, st->li), s, c0, c1);
}

/* q, k l2-normed per key head (q scaled by dk^-½); β = sigmoid(b); g = -exp(A_log)·softplus(a + dt) */
static void step_qk_gates(const hy_step *st, int64_t i0, int64_t i1)
{
    const hybrid_ctx *h = st->h;
    const int64_t ch = h->sh.channels, nk = h->sh.nk, dk = h->sh.dk, nv = h->sh.nv;
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int64_t i = i0; i < i1; i++) {
        float *c = h->cv + i * ch;
        for (int64_t kh = 0; kh < nk; kh++) {
            l2norm(c + kh * dk, dk, qscale);
            l2norm(c + nk * dk + kh * dk, dk, 1.0f);
        }
        for (int64_t j = 0; j < nv; j++) {
            float *bb = h->beta + i * nv + j, *gg = h->g + i * nv + j;
            *bb = model_sigmoid(*bb);
            *gg = st->L->ssm_a_neg[j] * softplus(*gg + st->L->ssm_dt[j]);
        }
    }
}

/* the gated norm per value head: w · rms(o) · silu(z) */
static void step_gated_norm(const hy_step *st, int64_t i0, int64_t i1)
{
    const hybrid_ctx *h = st->h;
    const int64_t nv = h->sh.nv, dv = h->sh.dv, vd = nv * dv;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = 0; j < nv; j++) {
            float *o = h->core + i * vd + j * dv, *z = h->z + i * vd + j * dv;
            float ss = 0;
            for (int64_t d = 0; d < dv; d++)
                ss += o[d] * o[d];
            const float r = 1.0f / sqrtf(ss / (float)dv + st->m->hp.rms_eps);
            cdx_silu(st->K, z, dv); /* z is read only here */
            for (int64_t d = 0; d < dv; d++)
                o[d] = st->L->ssm_norm[d] * (o[d] * r) * z[d];
        }
}

/* the gated attention layer's q | gate split, q and k norms, RoPE and the store into each token's
 * own KV slot (distinct positions: no two tokens write the same bytes) */
static void step_attn_qk(const hy_step *st, int64_t i0, int64_t i1)
{
    const hybrid_ctx *h = st->h;
    const cdx_model *m = st->m;
    const cdx_hparams *hp = &m->hp;
    const layer_weights *L = st->L;
    const int64_t hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    for (int64_t i = i0; i < i1; i++) {
        float *q = h->q + i * qd, *gt = h->gate + i * qd, *k = h->kk + i * kvd, *v = h->vv + i * kvd;
        const float *qg = h->qg + i * 2 * qd;
        for (int64_t hh = 0; hh < hp->n_head; hh++) {
            memcpy(q + hh * hd, qg + hh * 2 * hd, (size_t)hd * sizeof(float));
            memcpy(gt + hh * hd, qg + hh * 2 * hd + hd, (size_t)hd * sizeof(float));
            model_rmsnorm(q + hh * hd, q + hh * hd, L->q_norm, hd, hp->rms_eps);
        }
        for (int64_t hh = 0; hh < hp->n_head_kv; hh++)
            model_rmsnorm(k + hh * hd, k + hh * hd, L->k_norm, hd, hp->rms_eps);
        model_rope(q, hp->n_head, hd, hp->n_rot, st->pos[i], m->inv_freq, CDX_ROPE_HALVES);
        model_rope(k, hp->n_head_kv, hd, hp->n_rot, st->pos[i], m->inv_freq, CDX_ROPE_HALVES);
        model_kv_store(st->K, &st->seqs[st->seq[i]], st->slot, st->pos[i], kvd, k, v);
    }
}

/* attn ⊙ sigmoid(gate), over tokens */
static void step_attn_gate(const hy_step *st, int64_t i0, int64_t i1)
{
    const int64_t qd = st->m->hp.n_head * st->m->hp.head_dim;
    float *a = st->h->attn, *g = st->h->gate;
    for (int64_t i = i0 * qd; i < i1 * qd; i++)
        a[i] *= model_sigmoid(g[i]);
}

/* ---- the pass ---- */

int hybrid_forward(hybrid_ctx *h, const cdx_model *m, const fwd_scratch *fs, const cdx_kv_seq *seqs, int n_seq,
                   const cdx_batch *b, float *logits, cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    const cdx_kernels *K = fs->k;
    cdx_pool *pool = fs->pool;
    void *ws = fs->ws;
    float *x = fs->x, *xn = fs->xn;
    const int64_t *pos = fs->pos;
    const int32_t *seq = fs->seq;
    const dn_shape *sh = &h->sh;
    const int64_t n = b->n, E = hp->n_embd, hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    const int64_t ch = sh->channels;
    if (n_seq > h->max_tokens)
        return cdx_err_set(err, CDX_EINVAL, "%d sequences for a context of %lld tokens", n_seq,
                           (long long)h->max_tokens);
    /* each sequence's tokens: its next positions, ascending from its state's */
    int64_t *cnt = h->count, *first = h->first;
    const int ns = n_seq;
    for (int s = 0; s < ns; s++)
        cnt[s] = 0;
    for (int64_t i = 0; i < n; i++)
        cnt[seq[i]]++;
    int64_t acc = 0;
    for (int s = 0; s < ns; s++) {
        first[s] = acc;
        acc += cnt[s];
        if (!cnt[s])
            continue;
        const dn_state_hdr *st = seqs[s].state;
        if (!st)
            return cdx_err_set(err, CDX_EINVAL, "sequence %d has no recurrent state; a %s model needs one", s,
                               hp->arch_name);
        if (st->magic != DN_STATE_MAGIC || st->n_linear != sh->n_linear)
            return cdx_err_set(err, CDX_EINVAL, "sequence %d: its recurrent state is not one of this model's", s);
        if (st->pos > 0 && (st->per_token != 0) != h->per_token)
            return cdx_err_set(err, CDX_EINVAL, "sequence %d: its recurrent state was made by the %s form; this "
                               "context runs the %s form", s, st->per_token ? "per-token" : "chunked",
                               h->per_token ? "per-token" : "chunked");
        cnt[s] = 0; /* refilled below */
    }
    for (int64_t i = 0; i < n; i++) {
        const int32_t s = seq[i];
        const int64_t want = ((const dn_state_hdr *)seqs[s].state)->pos + cnt[s];
        if (pos[i] != want)
            return cdx_err_set(err, CDX_EINVAL, "batch token %lld of sequence %d is at position %lld; its recurrent "
                               "state takes position %lld next", (long long)i, s, (long long)pos[i], (long long)want);
        h->order[first[s] + cnt[s]++] = i;
    }
    cdx_attn_shape ashape = { .n_head = (int)hp->n_head, .n_kv_head = (int)hp->n_head_kv, .head_dim = (int)hd,
                              .kv_stride = kvd, .block = seqs[0].block, .scale = 1.0f / sqrtf((float)hd),
                              .kv_type = seqs[0].type };
    int64_t li = 0, slot = 0;
    /* per-token steps go to the threads from 4 tokens up; the conv's channels always */
    enum { MIN_TOKENS = 4, MIN_CHANNELS = 256 };
    hy_step st = { .h = h, .m = m, .K = K, .seqs = seqs, .pos = pos, .seq = seq, .ns = ns };
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        st.L = L;
        st.li = li;
        st.slot = slot;
        model_norm_rows(pool, xn, x, L->attn_norm, n, E, hp->rms_eps);
        if (L->linear) {
            cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->ssm_qkv, &L->ssm_z, &L->ssm_b, &L->ssm_a }, 4, xn, n,
                             (float *[]){ h->mix, h->z, h->beta, h->g }, ws);
            hy_run(pool, &st, step_conv, ch, MIN_CHANNELS);
            hy_run(pool, &st, step_qk_gates, n, MIN_TOKENS);
            dn_job job = { h, seqs, ns, li };
            cdx_pool_run(pool, dn_work, &job);
            hy_run(pool, &st, step_gated_norm, n, MIN_TOKENS);
            cdx_matmul(K, pool, &L->ssm_out, h->core, n, xn, ws);
            li++;
        } else {
            cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->wq, &L->wk, &L->wv }, 3, xn, n,
                             (float *[]){ h->qg, h->kk, h->vv }, ws);
            hy_run(pool, &st, step_attn_qk, n, MIN_TOKENS);
            model_attn_rows(fs, seqs, n, h->q, h->attn, qd, slot, 0); /* global attention */
            int rc = cdx_attn(K, pool, &ashape, fs->arows, n, err);
            if (rc)
                return rc;
            hy_run(pool, &st, step_attn_gate, n, MIN_TOKENS);
            cdx_matmul(K, pool, &L->wo, h->attn, n, xn, ws);
            slot++;
        }
        for (int64_t i = 0; i < n * E; i++)
            x[i] += xn[i];
        model_norm_rows(pool, xn, x, L->ffn_norm, n, E, hp->rms_eps);
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->gate, &L->up }, 2, xn, n,
                         (float *[]){ h->ffn_g, h->ffn_u }, ws);
        model_swiglu(pool, K, h->ffn_g, h->ffn_u, n * hp->n_ff, false);
        cdx_matmul(K, pool, &L->down, h->ffn_g, n, xn, ws);
        for (int64_t i = 0; i < n * E; i++)
            x[i] += xn[i];
    }
    for (int s = 0; s < ns; s++)
        if (cnt[s]) {
            dn_state_hdr *st = seqs[s].state;
            st->pos += cnt[s];
            st->per_token = h->per_token;
        }
    int64_t n_out = 0;
    for (int64_t i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] : i == n - 1)
            model_rmsnorm(xn + (n_out++) * E, x + i * E, m->out_norm, E, hp->rms_eps);
    if (n_out)
        cdx_matmul(K, pool, &m->output, xn, n_out, logits, ws);
    return CDX_OK;
}
