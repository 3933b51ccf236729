/* The shared steps of the forward passes (ops.h): each family's pass calls these. */
#include "ops.h"
#include "expert_cache.h"

#include <math.h>
#include <string.h>

#define bf cdx_bf16_round

/* ---- norms ---- */

void model_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    /* four running sums (i mod 4) so the double adds do not wait on each other's latency; a
     * fixed order, so the same bits on every machine and kernel set. A last-bit difference here
     * moves a q8 activation a step (see quant_legacy.c). */
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

void model_layernorm(float *out, const float *x, const float *w, const float *b, int64_t n, float eps)
{
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    const double mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        ss += ((double)x[i] - mean) * ((double)x[i] - mean);
    const float rstd = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    const float mf = (float)mean;
    for (int64_t i = 0; i < n; i++)
        out[i] = b ? (x[i] - mf) * rstd * w[i] + b[i] : (x[i] - mf) * rstd * w[i]; /* b NULL: no bias (Cohere) */
}

/* The per-token steps between the matrices, a slice of the batch's tokens per thread: each token's
 * values are computed by the same code whichever thread takes it, so the bits do not depend on the
 * split. One thread doing them kept the other waiting (~3 % of a Qwen3 prefill). */
typedef struct {
    float *out;
    const float *x, *w, *b;
    int64_t n, E;
    float eps;
    bool layer;
} norm_job;

static void norm_part(void *arg, int ith, int nth)
{
    const norm_job *j = arg;
    for (int64_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++)
        if (j->layer)
            model_layernorm(j->out + i * j->E, j->x + i * j->E, j->w, j->b, j->E, j->eps);
        else
            model_rmsnorm(j->out + i * j->E, j->x + i * j->E, j->w, j->E, j->eps);
}

void model_norm_rows(cdx_pool *pool, float *out, const float *x, const float *w, int64_t n, int64_t E, float eps)
{
    model_norm_rows_of(pool, false, out, x, w, NULL, n, E, eps);
}

void model_norm_rows_of(cdx_pool *pool, bool layer, float *out, const float *x, const float *w, const float *b,
                        int64_t n, int64_t E, float eps)
{
    norm_job j = { out, x, w, b, n, E, eps, layer };
    if (n >= 4)
        cdx_pool_run(pool, norm_part, &j);
    else
        norm_part(&j, 0, 1);
}

/* LlamaRMSNorm.forward with a bf16 input: h = x.float(); var = mean(h²); h·rsqrt(var + eps) in
 * f32, rounded to bf16; then weight · h, a bf16 product (rounded again). The squares are summed in
 * f32 in order, then divided by n: on the fixtures this reproduces torch's f32 reduction bit for
 * bit (a sum in double does not, for qwen3's 32-wide q/k norms: 45 of its 48 steps instead of 48). */
void model_rmsnorm_bf16(float *out, const float *x, const float *w, int64_t n, float eps)
{
    float ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const float var = ss / (float)n;
    const float r = 1.0f / sqrtf(var + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = bf(w[i] * bf(x[i] * r));
}

void model_layernorm_bf16(float *out, const float *x, const float *w, const float *b, int64_t n, float eps)
{
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    const double mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        ss += ((double)x[i] - mean) * ((double)x[i] - mean);
    const float mf = (float)mean, var = (float)(ss / (double)n);
    const float scale = 1.0f / sqrtf(var + eps), shift = -scale * mf; /* LayerNormKernelImplInternal's scale, bias */
    for (int64_t i = 0; i < n; i++) {
        const float y = (x[i] * scale + shift) * w[i];
        out[i] = bf(b ? y + b[i] : y);
    }
}

void model_layernorm_bf16_centered(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    const float mf = (float)(s / (double)n);
    for (int64_t i = 0; i < n; i++) {
        const float d = x[i] - mf; /* (h - mean) in f32, squared in f32 */
        ss += (double)(d * d);
    }
    const float r = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = bf(w[i] * ((x[i] - mf) * r));
}

void model_rmsnorm_bf16_once(float *out, const float *x, const float *w, int64_t n, float eps)
{
    float ss = 0; /* the statistics of model_rmsnorm_bf16, summed in the same order */
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const float var = ss / (float)n;
    const float r = 1.0f / sqrtf(var + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = bf((x[i] * r) * w[i]);
}

/* ---- RoPE ---- */

void model_rope_att(float *v, int64_t n_heads, int64_t hd, int64_t n_rot, int64_t pos, const float *inv_freq,
                    cdx_rope_mode mode, float att)
{
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        const float ang = (float)pos * inv_freq[i];
        float c = cosf(ang), s = sinf(ang);
        if (att) { /* cos = cos * attention_scaling; sin = sin * attention_scaling */
            c *= att;
            s *= att;
        }
        const int64_t a = mode == CDX_ROPE_ADJACENT ? 2 * i : i, b = mode == CDX_ROPE_ADJACENT ? 2 * i + 1 : i + half;
        for (int64_t h = 0; h < n_heads; h++) {
            float *p = v + h * hd;
            const float x0 = p[a], x1 = p[b];
            p[a] = x0 * c - x1 * s;
            p[b] = x0 * s + x1 * c;
        }
    }
}

void model_rope_sections(float *v, int64_t n_heads, int64_t hd, int64_t n_rot, const int64_t pos[4],
                         const int32_t sec[4], const float *inv_freq, cdx_rope_mode mode, float att)
{
    const int64_t half = n_rot / 2, s1 = sec[0], s2 = s1 + sec[1], s3 = s2 + sec[2];
    for (int64_t i = 0; i < half; i++) {
        /* apply_multimodal_rotary_pos_emb: cos.split(mrope_section * 2) takes chunk j from row j % 3, i.e.
         * pair i of each half from the position of the section i falls in (llama.cpp: past the three, the
         * extra position) */
        const int64_t p = i < s1 ? pos[0] : i < s2 ? pos[1] : i < s3 ? pos[2] : pos[3];
        const float ang = (float)p * inv_freq[i]; /* the same f32 product as model_rope_att */
        float c = cosf(ang), s = sinf(ang);
        if (att) {
            c *= att;
            s *= att;
        }
        const int64_t a = mode == CDX_ROPE_ADJACENT ? 2 * i : i, b = mode == CDX_ROPE_ADJACENT ? 2 * i + 1 : i + half;
        for (int64_t h = 0; h < n_heads; h++) {
            float *q = v + h * hd;
            const float x0 = q[a], x1 = q[b];
            q[a] = x0 * c - x1 * s;
            q[b] = x0 * s + x1 * c;
        }
    }
}

void model_rope(float *v, int64_t n_heads, int64_t hd, int64_t n_rot, int64_t pos, const float *inv_freq,
                cdx_rope_mode mode)
{
    model_rope_att(v, n_heads, hd, n_rot, pos, inv_freq, mode, 0);
}

void model_rope_pass(const cdx_model *m, const fwd_scratch *s, const cdx_kv_seq *seqs, int64_t n)
{
    const cdx_hparams *hp = &m->hp;
    const int64_t half = hp->n_rot / 2;
    for (int64_t i = 0; i < n; i++) {
        /* the sequence's first token in the batch works for all of its tokens */
        int64_t first = 0;
        while (first < i && s->seq[first] != s->seq[i])
            first++;
        if (first < i) {
            s->rope_f[i] = s->rope_f[first];
            continue;
        }
        int64_t hi = s->pos[i];
        for (int64_t j = i + 1; j < n; j++)
            if (s->seq[j] == s->seq[i] && s->pos[j] > hi)
                hi = s->pos[j];
        /* seq_len = max(position_ids) + 1, or the sequence's whole length where the caller gives it
         * (a prompt in chunks is computed as transformers computes it in one pass) */
        const int64_t len = seqs[s->seq[i]].rope_len, T = len > hi + 1 ? len : hi + 1;
        if (hp->rope_pass == CDX_ROPE_PASS_DYNAMIC) {
            if (T <= hp->rope_pass_ctx)
                s->rope_f[i] = m->inv_freq; /* the base unchanged up to max_position_embeddings */
            else {
                float *f = s->rope_buf + i * half;
                rope_dynamic_freqs(hp, T, f);
                s->rope_f[i] = f;
            }
        } else
            s->rope_f[i] = T > hp->rope_pass_ctx ? m->inv_freq_long : m->inv_freq;
    }
}

/* apply_rotary_pos_emb's rotate_half on the first 2·half values of each head, with bf16 cos/sin c, s:
 * q·cos, rotate_half(q)·sin and their sum each rounded to bf16 */
static void rotate_half_bf16(float *v, int64_t n_heads, int64_t hd, int64_t half, const float *c, const float *s)
{
    for (int64_t h = 0; h < n_heads; h++) {
        float *p = v + h * hd;
        for (int64_t i = 0; i < half; i++) {
            const float x0 = p[i], x1 = p[i + half];
            p[i] = bf(bf(x0 * c[i]) + bf(-x1 * s[i]));
            p[i + half] = bf(bf(x1 * c[i]) + bf(x0 * s[i]));
        }
    }
}

/* LlamaRotaryEmbedding + apply_rotary_pos_emb (rotate_half): angles inv_freq · position in f32,
 * cos/sin in f32 rounded to bf16; q·cos, rotate_half(q)·sin and their sum each rounded. */
void model_rope_bf16(float *v, int64_t n_heads, int64_t hd, int64_t n_rot, int64_t pos, const float *inv_freq,
                     float att)
{
    const int64_t half = n_rot / 2;
    float c[256], s[256]; /* n_rot <= head_dim <= 512 */
    for (int64_t i = 0; i < half; i++) {
        const float ang = inv_freq[i] * (float)pos;
        c[i] = bf(att ? cosf(ang) * att : cosf(ang)); /* cos = emb.cos() * attention_scaling in f32, then .to(bf16) */
        s[i] = bf(att ? sinf(ang) * att : sinf(ang));
    }
    rotate_half_bf16(v, n_heads, hd, half, c, s);
}

void model_rope_bf16_sections(float *v, int64_t n_heads, int64_t hd, const int64_t pos[4], const int32_t sec[4],
                              const float *inv_freq)
{
    const int64_t half = hd / 2, s1 = sec[0], s2 = s1 + sec[1], s3 = s2 + sec[2];
    float c[256], s[256]; /* head_dim <= 512 (check_hparams bounds it by 1024; the attention by 512) */
    for (int64_t i = 0; i < half; i++) {
        /* Qwen2VLRotaryEmbedding: cos/sin of every row in f32, cast to bf16, then each pair's section's row */
        const int64_t p = i < s1 ? pos[0] : i < s2 ? pos[1] : i < s3 ? pos[2] : pos[3];
        const float ang = inv_freq[i] * (float)p;
        c[i] = bf(cosf(ang));
        s[i] = bf(sinf(ang));
    }
    rotate_half_bf16(v, n_heads, hd, half, c, s);
}

void model_rope_bf16_f32(float *v, int64_t n_heads, int64_t hd, int64_t pos, const float *inv_freq,
                         cdx_rope_mode mode, bool trig_bf16, float att)
{
    const int64_t half = hd / 2;
    float c[256], s[256]; /* head_dim <= 512, as model_rope_bf16_sections */
    for (int64_t i = 0; i < half; i++) {
        const float ang = inv_freq[i] * (float)pos;
        const float cf = att ? cosf(ang) * att : cosf(ang), sf = att ? sinf(ang) * att : sinf(ang);
        c[i] = trig_bf16 ? bf(cf) : cf;
        s[i] = trig_bf16 ? bf(sf) : sf;
    }
    for (int64_t h = 0; h < n_heads; h++) {
        float *p = v + h * hd;
        for (int64_t i = 0; i < half; i++) {
            const int64_t a = mode == CDX_ROPE_ADJACENT ? 2 * i : i, b = mode == CDX_ROPE_ADJACENT ? 2 * i + 1 : i + half;
            const float x0 = p[a], x1 = p[b];
            p[a] = bf(x0 * c[i] + -x1 * s[i]); /* (q·cos) + (rotate_half(q)·sin), each product and the sum in f32 */
            p[b] = bf(x1 * c[i] + x0 * s[i]);
        }
    }
}

/* ---- the embedding ---- */

void model_embed(const cdx_mat *e, const int32_t *tokens, const float *const *embd, int64_t n, int64_t E, float *x)
{
    const cdx_type_traits *t = cdx_type_get(e->type);
    for (int64_t i = 0; i < n; i++) {
        if (embd && embd[i]) /* image features at an image token (Idefics3's inputs_merger) */
            memcpy(x + i * E, embd[i], (size_t)E * sizeof(float));
        else
            t->to_f32((const uint8_t *)e->data + (size_t)tokens[i] * e->row_bytes, x + i * E, E);
    }
}

/* ---- attention over the paged KV cache ---- */

void model_kv_store(const cdx_kernels *K, const cdx_kv_seq *c, int64_t slot, int64_t p, int64_t kvd, const float *k,
                    const float *v)
{
    const size_t off = (size_t)slot * c->layer_stride + (size_t)(p % c->block) * (size_t)kvd;
    if (c->type == CDX_TYPE_F16 || c->type == CDX_TYPE_BF16) {
        const bool f16 = c->type == CDX_TYPE_F16;
        cdx_to_half(K, k, (uint16_t *)c->k[p / c->block] + off, kvd, f16);
        cdx_to_half(K, v, (uint16_t *)c->v[p / c->block] + off, kvd, f16);
    } else {
        memcpy((float *)c->k[p / c->block] + off, k, (size_t)kvd * sizeof(float));
        memcpy((float *)c->v[p / c->block] + off, v, (size_t)kvd * sizeof(float));
    }
}

void model_attn_rows(const fwd_scratch *s, const cdx_kv_seq *seqs, int64_t n, const float *q, float *out, int64_t qd,
                     int64_t slot, int64_t window)
{
    for (int64_t i = 0; i < n; i++) {
        const cdx_kv_seq *c = &seqs[s->seq[i]];
        const int64_t pos = s->pos[i], w = window;
        s->arows[i] = (cdx_attn_row){ .q = q + i * qd, .k = (const void *const *)c->k, .v = (const void *const *)c->v,
                                      .lo = w > 0 && pos - w + 1 > 0 ? pos - w + 1 : 0, .hi = pos,
                                      .out = out + i * qd, .off = (size_t)slot * c->layer_stride };
    }
}

/* ---- MLPs ---- */

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
        const float g = bf(j->g[i]), u = bf(j->u[i]);
        const float act = bf(model_silu(g)); /* PyTorch 2.x's CPU SiLU on bf16: f32, one rounding */
        j->g[i] = bf(act * u);
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

/* v[i] = exp(v[i] - mx) / Σ exp(v[j] - mx), in f32 in order (torch's softmax with the max subtracted); recip: each
 * exp times the f32 reciprocal of the sum, as torch's CPU kernel for the last dim does (_vec_softmax_lastdim: the
 * bf16 pass's routing, as cdx_attn_bf16's softmax). */
static void softmax_from(float *v, int64_t n, float mx, bool recip)
{
    float sum = 0;
    for (int64_t i = 0; i < n; i++) {
        v[i] = expf(v[i] - mx);
        sum += v[i];
    }
    const float r = 1.0f / sum;
    for (int64_t i = 0; i < n; i++)
        v[i] = recip ? v[i] * r : v[i] / sum;
}

typedef struct {
    float *g;
    const float *u;
    int64_t n;
    bool f16, bf16;
} geglu_job;

static void geglu_part(void *arg, int ith, int nth)
{
    geglu_job *j = arg;
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    for (int64_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++) {
        if (j->bf16) { /* bf16 compute: the f32 formula below on the bf16 gate, rounded once, then a bf16 product */
            const float x = bf(j->g[i]);
            const float y = bf(0.5f * x * (1.0f + tanhf(beta * (x + kappa * (x * x * x)))));
            j->g[i] = j->u ? bf(y * bf(j->u[i])) : y;
            continue;
        }
        const float x = j->g[i];
        if (!j->f16) {
            const float inner = beta * (x + kappa * (x * x * x));
            const float y = 0.5f * x * (1.0f + tanhf(inner));
            j->g[i] = j->u ? y * j->u[i] : y; /* u NULL: the plain GELU */
            continue;
        }
        /* ggml_vec_geglu_f32 with GGML_GELU_FP16: ggml_gelu_f32 tabulated at f16 inputs, stored as f16 */
        const float h = cdx_f16_to_f32(cdx_f32_to_f16(x));
        const float t = 0.5f * h * (1.0f + tanhf(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
        const float y = x >= 10.0f ? x : cdx_f16_to_f32(cdx_f32_to_f16(t));
        j->g[i] = x <= -10.0f ? 0.0f : j->u ? y * j->u[i] : y; /* ggml_vec_gelu_f32 when u is NULL */
    }
}

void model_geglu(cdx_pool *pool, float *g, const float *u, int64_t n, bool f16)
{
    geglu_job j = { g, u, n, f16, false };
    if (n >= 8192)
        cdx_pool_run(pool, geglu_part, &j);
    else
        geglu_part(&j, 0, 1);
}

void model_geglu_bf16(cdx_pool *pool, float *g, const float *u, int64_t n)
{
    geglu_job j = { g, u, n, false, true };
    if (n >= 8192)
        cdx_pool_run(pool, geglu_part, &j);
    else
        geglu_part(&j, 0, 1);
}

void model_act(cdx_pool *pool, cdx_hf_act act, bool gelu_f16, float *g, int64_t n)
{
    if (act == CDX_HF_ACT_GELU_TANH) {
        model_geglu(pool, g, NULL, n, gelu_f16);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        g[i] = model_silu(g[i]);
}

/* torch.topk's choice on CPU, which the bf16 pass follows where router values tie (bf16 logits tie often):
 * PyTorch's topk_impl_loop puts (value, index) pairs in a queue and, for the largest k, calls std::partial_sort
 * when k·64 <= n, else std::nth_element at k - 1 (then sorts the first k - 1), both ordering by value alone
 * (x.first > y.first). Which of equal values land in the first k is therefore libstdc++'s: its introselect
 * (median-of-three pivot, unguarded partition, insertion sort below 4) and heap select, written out below from
 * GCC's stl_algo.h / stl_heap.h semantics. Only the set chosen matters here (the values come out descending). */
typedef struct {
    float v;
    int32_t i;
} tk_pair;

static inline bool tk_gt(tk_pair a, tk_pair b) { return a.v > b.v; } /* the comparator (NaN never reaches it) */
static inline void tk_swap(tk_pair *a, tk_pair *b)
{
    const tk_pair t = *a;
    *a = *b;
    *b = t;
}

static void tk_adjust_heap(tk_pair *f, int64_t hole, int64_t len, tk_pair val)
{
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (tk_gt(f[child], f[child - 1]))
            child--;
        f[hole] = f[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        f[hole] = f[child - 1];
        hole = child - 1;
    }
    int64_t parent = (hole - 1) / 2; /* __push_heap */
    while (hole > top && tk_gt(f[parent], val)) {
        f[hole] = f[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    f[hole] = val;
}

/* __heap_select(first, middle, last): a heap of the first m, then each later element better than its top
 * replaces the top (__pop_heap into the element's place) */
static void tk_heap_select(tk_pair *f, int64_t m, int64_t n)
{
    for (int64_t parent = (m - 2) / 2; m >= 2; parent--) { /* __make_heap */
        tk_adjust_heap(f, parent, m, f[parent]);
        if (parent == 0)
            break;
    }
    for (int64_t i = m; i < n; i++)
        if (tk_gt(f[i], f[0])) {
            const tk_pair val = f[i];
            f[i] = f[0];
            tk_adjust_heap(f, 0, m, val);
        }
}

static void tk_insertion_sort(tk_pair *f, int64_t n)
{
    for (int64_t i = 1; i < n; i++) {
        const tk_pair val = f[i];
        if (tk_gt(val, f[0])) {
            memmove(f + 1, f, (size_t)i * sizeof *f);
            f[0] = val;
        } else { /* __unguarded_linear_insert */
            int64_t j = i;
            while (tk_gt(val, f[j - 1])) {
                f[j] = f[j - 1];
                j--;
            }
            f[j] = val;
        }
    }
}

/* std::nth_element(f, f + nth, f + n): __introselect with depth limit 2·floor(log2 n) */
static void tk_nth_element(tk_pair *f, int64_t nth, int64_t n)
{
    int depth = 0;
    for (int64_t x = n; x > 1; x >>= 1)
        depth += 2;
    int64_t lo = 0, hi = n;
    while (hi - lo > 3) {
        if (depth == 0) {
            tk_heap_select(f + lo, nth + 1 - lo, hi - lo);
            tk_swap(&f[lo], &f[nth]);
            return;
        }
        depth--;
        /* __unguarded_partition_pivot: the median of f[lo + 1], f[mid], f[hi - 1] moved to f[lo] */
        tk_pair *r = f + lo, *a = f + lo + 1, *b = f + lo + (hi - lo) / 2, *c = f + hi - 1;
        if (tk_gt(*a, *b)) {
            if (tk_gt(*b, *c))
                tk_swap(r, b);
            else if (tk_gt(*a, *c))
                tk_swap(r, c);
            else
                tk_swap(r, a);
        } else if (tk_gt(*a, *c))
            tk_swap(r, a);
        else if (tk_gt(*b, *c))
            tk_swap(r, c);
        else
            tk_swap(r, b);
        int64_t i = lo + 1, j = hi;
        for (;;) { /* __unguarded_partition around f[lo] */
            while (tk_gt(f[i], f[lo]))
                i++;
            j--;
            while (tk_gt(f[lo], f[j]))
                j--;
            if (!(i < j))
                break;
            tk_swap(&f[i], &f[j]);
            i++;
        }
        if (i <= nth)
            lo = i;
        else
            hi = i;
    }
    tk_insertion_sort(f + lo, hi - lo);
}

void model_topk_torch(const float *v, int64_t n, int64_t k, int32_t *sel, float *w)
{
    tk_pair q[CDX_MAX_EXPERTS];
    for (int64_t j = 0; j < n; j++)
        q[j] = (tk_pair){ v[j], (int32_t)j };
    if (k * 64 <= n) { /* std::partial_sort: heap select, then the heap sorted */
        tk_heap_select(q, k, n);
        for (int64_t last = k; last > 1;) { /* __sort_heap */
            last--;
            const tk_pair val = q[last];
            q[last] = q[0];
            tk_adjust_heap(q, 0, last, val);
        }
    } else
        tk_nth_element(q, k - 1, n);
    /* the first k (std::sort of the first k - 1 only orders them; descending by value here, equal values in
     * either order giving the same weights) */
    for (int64_t r = 0; r < k; r++)
        for (int64_t j = r + 1; j < k; j++)
            if (q[j].v > q[r].v)
                tk_swap(&q[r], &q[j]);
    for (int64_t r = 0; r < k; r++) {
        sel[r] = q[r].i;
        w[r] = q[r].v;
    }
}

/* One token's routing: softmax over the router logits in f32 (max subtracted, as torch does), the
 * k largest (the lower expert id first on a tie), renormalised to sum 1 when asked; or, for
 * topk_softmax (GraniteMoeTopKGating), the k largest logits and a softmax over those k. bf16 (the bf16
 * pass): the logits are bf16 values, the softmax is torch's (times the reciprocal), the k chosen as
 * torch.topk chooses among equal values (model_topk_torch), and each weight is
 * rounded to bf16 at the end (transformers' routing_weights.to(hidden_states.dtype), GraniteMoe's
 * top_k_gates.type_as(hidden_states)); GPT-OSS's softmax over the k bf16 logits is F.softmax(dtype=bf16),
 * PyTorch 2.x's kernel for a reduced float (each exp divided by the sum: oai). */
static void route(float *p, int64_t ne, int64_t k, bool renorm, bool topk_softmax, bool bf16, bool oai, int32_t *sel,
                  float *w)
{
    float mx = p[0];
    for (int64_t e = 1; e < ne; e++)
        mx = p[e] > mx ? p[e] : mx;
    if (!topk_softmax)
        softmax_from(p, ne, mx, bf16);
    if (bf16) /* transformers' torch.topk: its choice among equal values */
        model_topk_torch(p, ne, k, sel, w);
    for (int64_t r = 0; !bf16 && r < k; r++) {
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
    if (topk_softmax) /* w[0] is the largest logit, mx */
        softmax_from(w, k, mx, bf16 && !oai);
    else if (renorm) { /* the sum in order: torch.sum over 2, 4 or 8 weights gives these bits (measured on torch 1.13,
                          3000 rows each); over 6 or 16 its order differs now and then */
        float s = 0;
        for (int64_t r = 0; r < k; r++)
            s += w[r];
        for (int64_t r = 0; r < k; r++)
            w[r] /= s;
    }
    for (int64_t r = 0; bf16 && r < k; r++)
        w[r] = bf(w[r]);
}

/* GPT-OSS's experts in bf16 (GptOssExperts' inference branch): x[i][j] = bf16(bf16(x[i][j]) + b[j]), the bmm's
 * bf16 result and then the bias added (two ops, two roundings), over n rows of d values */
static void bias_bf16(float *x, const float *b, int64_t n, int64_t d)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++)
            x[i * d + j] = bf(bf(x[i * d + j]) + b[j]);
}

/* GPT-OSS's clamped SwiGLU on bf16 tensors, each op rounded as PyTorch 2.x rounds it: gate.clamp(max=limit),
 * up.clamp(±limit) (the limit a bf16 value: clamp casts its scalar to the tensor's type), bf16(gate · alpha) (a
 * Python float: f32), sigmoid in f32 rounded, bf16(gate · that), bf16(up + 1), their bf16 product, over n values */
static void swiglu_oai_bf16(float *g, const float *u, int64_t n, float limit, float alpha)
{
    const float lim = bf(limit);
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i] > lim ? lim : g[i];
        const float y = u[i] > lim ? lim : u[i] < -lim ? -lim : u[i];
        const float glu = bf(x * bf(model_sigmoid(bf(x * alpha))));
        g[i] = bf(bf(y + 1.0f) * glu);
    }
}

/* Tokens are grouped by expert (ascending within a group); each expert runs once over its gathered
 * rows and adds weight·output to its tokens' sums. Expert ids ascend in the outer loop, so every
 * token's sum runs in the same order — its experts' ids, ascending — whatever the batch. */
int model_moe(const cdx_model *m, const fwd_scratch *s, int64_t l, const layer_weights *L, const float *xn, int64_t n,
              float *out, cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    const cdx_kernels *K = s->k;
    cdx_pool *pool = s->pool;
    const int64_t E = hp->n_embd, ne = hp->n_expert, k = hp->n_expert_used;
    const bool b16 = m->dtype == CDX_DTYPE_BF16; /* the bf16 pass (forward_bf16.c's MoE lines) */
    const bool oai = m->desc->moe_oai;            /* GPT-OSS's router and experts (GptOssTopKRouter, GptOssExperts) */
    cdx_matmul(K, pool, &L->router, xn, n, s->router, s->ws);
    model_add_bias(s->router, L->router_b, n, ne); /* GPT-OSS's router bias */
    for (int64_t i = 0; i < n; i++) {
        for (int64_t e = 0; b16 && e < ne; e++) /* the gate's nn.Linear: bf16 router logits */
            s->router[i * ne + e] = bf(s->router[i * ne + e]);
        route(s->router + i * ne, ne, k, hp->norm_topk_prob, hp->moe_topk_softmax, b16, oai, s->sel_e + i * k,
              s->sel_w + i * k);
    }
    memset(out, 0, (size_t)(n * E) * sizeof(float));
    for (int64_t e = 0; e < ne; e++) {
        /* gather the tokens that chose e, ascending */
        int64_t c = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = 0; r < k; r++)
                if (s->sel_e[i * k + r] == e) {
                    s->grp_tok[c] = i;
                    s->grp_w[c] = s->sel_w[i * k + r];
                    memcpy(s->xg + c * E, xn + i * E, (size_t)E * sizeof(float));
                    c++;
                }
        if (!c)
            continue;
        /* under a weight budget the expert comes from the cache, in the layout model_pack would give it */
        cdx_mat xw[3] = { L->exp_gate[e], L->exp_up[e], L->exp_down[e] };
        int slot = -1;
        if (m->xc) {
            int rc = xc_acquire(m, K, pool, l, e, xw, &slot, err);
            if (rc)
                return rc;
        }
        const int64_t F = xw[0].rows;
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &xw[0], &xw[1] }, 2, s->xg, c,
                         (float *[]){ s->ffn_g, s->ffn_u }, s->ws);
        if (L->exp_b_gate && b16) { /* bf16: bmm(h, gate_up_proj) rounded, then + its bias rounded again */
            bias_bf16(s->ffn_g, L->exp_b_gate + e * F, c, F);
            bias_bf16(s->ffn_u, L->exp_b_up + e * F, c, F);
        } else if (L->exp_b_gate) { /* GPT-OSS: biased experts */
            model_add_bias(s->ffn_g, L->exp_b_gate + e * F, c, F);
            model_add_bias(s->ffn_u, L->exp_b_up + e * F, c, F);
        }
        if (hp->swiglu_limit && b16)
            swiglu_oai_bf16(s->ffn_g, s->ffn_u, c * F, hp->swiglu_limit, hp->swiglu_alpha);
        else if (hp->swiglu_limit)
            model_swiglu_oai(s->ffn_g, s->ffn_u, c * F, hp->swiglu_limit, hp->swiglu_alpha);
        else if (b16) /* bf16(bf16(silu(g)) · u) on the bf16 projections */
            model_swiglu(pool, K, s->ffn_g, s->ffn_u, c * F, true);
        else
            cdx_swiglu(K, s->ffn_g, s->ffn_u, c * F);
        cdx_matmul(K, pool, &xw[2], s->ffn_g, c, s->yg, s->ws);
        if (L->exp_b_down && b16)
            bias_bf16(s->yg, L->exp_b_down + e * E, c, E);
        else if (L->exp_b_down)
            model_add_bias(s->yg, L->exp_b_down + e * E, c, E);
        if (slot >= 0)
            xc_release(m, slot);
        for (int64_t j = 0; j < c; j++) {
            float *o = out + s->grp_tok[j] * E;
            const float *y = s->yg + j * E, w = s->grp_w[j];
            if (b16 && oai) /* GPT-OSS: next_states * routing_weights (bf16), .sum(dim=0) accumulated in f32 */
                for (int64_t d = 0; d < E; d++)
                    o[d] += bf(y[d] * w);
            else if (b16) /* expert(x) · weight, a bf16 product of the bf16 output; index_add_ in bf16: one rounding a term */
                for (int64_t d = 0; d < E; d++)
                    o[d] = bf(o[d] + bf(bf(y[d]) * w));
            else
                for (int64_t d = 0; d < E; d++)
                    o[d] += y[d] * w;
        }
    }
    if (b16 && oai) /* the sum over the experts (ascending id, f32) rounded once */
        for (int64_t i = 0; i < n * E; i++)
            out[i] = bf(out[i]);
    if (!L->sh_gate.data)
        return CDX_OK;
    /* Qwen2-MoE: out += sigmoid(xn·w_sg) · shared(xn) */
    const int64_t F = L->sh_gate.rows;
    cdx_matmul(K, pool, &L->sh_router, xn, n, s->router, s->ws);
    cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->sh_gate, &L->sh_up }, 2, xn, n,
                     (float *[]){ s->ffn_g, s->ffn_u }, s->ws);
    if (b16)
        model_swiglu(pool, K, s->ffn_g, s->ffn_u, n * F, true);
    else
        cdx_swiglu(K, s->ffn_g, s->ffn_u, n * F);
    cdx_matmul(K, pool, &L->sh_down, s->ffn_g, n, s->yg, s->ws);
    for (int64_t i = 0; i < n; i++) {
        float *o = out + i * E;
        const float *y = s->yg + i * E;
        if (b16) { /* F.sigmoid of the bf16 gate logit, f32 rounded once; a bf16 product; then a bf16 add */
            const float g = bf(model_sigmoid(bf(s->router[i])));
            for (int64_t d = 0; d < E; d++)
                o[d] = bf(o[d] + bf(g * bf(y[d])));
            continue;
        }
        const float g = 1.0f / (1.0f + expf(-s->router[i])); /* router reused: [n][1] */
        for (int64_t d = 0; d < E; d++)
            o[d] += g * y[d];
    }
    return CDX_OK;
}

/* After the layers of a stage that ends before the model's last: the rows go on to the next stage,
 * and this pass ends (forward_first_stage takes the rows back). */
int forward_stage_send(const cdx_stage *st, const fwd_scratch *s, const cdx_kv_seq *seqs, int n_seq,
                       const cdx_batch *b, cdx_err *err)
{
    int64_t n_want = 0;
    for (int64_t i = 0; i < b->n; i++)
        n_want += b->want_logits ? b->want_logits[i] : i == b->n - 1;
    const cdx_stage_batch sb = { .n = b->n, .n_out = n_want, .n_seq = n_seq, .x = s->x, .pos = s->pos, .seq = s->seq,
                                 .want_logits = b->want_logits, .seqs = seqs };
    return st->send(st->user, &sb, err);
}

/* ---- BitNet's BitLinear ---- */

void model_act_quant(const float *x, int64_t n, int64_t cols, int8_t *xq, float *xs)
{
    for (int64_t i = 0; i < n; i++) {
        const float *r = x + i * cols;
        float mx = 0;
        for (int64_t c = 0; c < cols; c++)
            mx = fabsf(r[c]) > mx ? fabsf(r[c]) : mx;
        const float s = 127.0f / (mx > 1e-5f ? mx : 1e-5f);
        xs[i] = s;
        for (int64_t c = 0; c < cols; c++) {
            const float q = rintf(r[c] * s); /* torch.round: half to even, as rint in the default mode */
            /* a NaN (a diverged activation) becomes 0 rather than an undefined cast (torch's NaN.to(int8) is unspecified) */
            xq[i * cols + c] = (int8_t)(q > 127.0f ? 127.0f : q < -128.0f ? -128.0f : q == q ? q : 0.0f);
        }
    }
}

typedef struct {
    const bit_mat *w;
    const int8_t *xq;
    const float *xs;
    int64_t n;
    float *out;
} bitlin_job;

static void bitlin_part(void *arg, int ith, int nth)
{
    const bitlin_job *j = arg;
    const bit_mat *w = j->w;
    const int64_t r0 = w->rows * ith / nth, r1 = w->rows * (ith + 1) / nth;
    for (int64_t i = 0; i < j->n; i++) {
        const int8_t *x = j->xq + i * w->cols;
        const float d = w->ws * j->xs[i]; /* post_quant_process: y / (weight_scale · input_scale) */
        for (int64_t r = r0; r < r1; r++) {
            const int8_t *t = w->t + r * w->cols;
            int32_t acc = 0; /* |Σ| <= 256·cols: exact */
            for (int64_t c = 0; c < w->cols; c++)
                acc += (int32_t)x[c] * t[c];
            j->out[i * w->rows + r] = (float)acc / d;
        }
    }
}

void model_bitlinear(cdx_pool *pool, const bit_mat *w, const int8_t *xq, const float *xs, int64_t n, float *out)
{
    bitlin_job j = { w, xq, xs, n, out };
    if (pool && w->rows * w->cols * n >= (1 << 16))
        cdx_pool_run(pool, bitlin_part, &j);
    else
        bitlin_part(&j, 0, 1);
}
