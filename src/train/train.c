/* Training: an f32 forward and backward pass of the dense decoders (llama, mistral, qwen2, qwen3), LoRA
 * (PEFT v0.20.0's tuners/lora/layer.py Linear) and full fine-tuning, torch.optim.AdamW, distillation.
 * transformers' modeling_llama / qwen2 / qwen3 step by step, for one sequence of T tokens:
 *   x = embed(ids)
 *   per layer: h1 = rmsnorm(x)·w1; q,k,v = h1·Wᵀ (+b) (+ LoRA); [qwen3: per-head rmsnorm of q, k];
 *              rope(q, k); o = softmax(q·kᵀ·scale + causal mask)·v (GQA); x += o·Woᵀ
 *              h2 = rmsnorm(x)·w2; x += (silu(h2·Wgᵀ) ⊙ h2·Wuᵀ)·Wdᵀ
 *   logits = rmsnorm(x)·w · Woutᵀ, only at the scored positions
 * Every activation the backward pass reads is kept per layer (x, the norms' 1/rms, the normed rows,
 * q/k before their norms, q/k after RoPE, v, the softmax rows, o, g, u, silu(g)·u and each LoRA's x·Aᵀ);
 * nothing is recomputed. The weights are read where the model holds them when they are f32 and
 * frozen; F16/BF16 frozen matrices get f32 copies, trainable ones always do. */
#include "caldrix/train.h"
#include "caldrix/format.h"
#include "caldrix/quant.h"
#include "model/arch.h"
#include "train/tgemm.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_MOD 7 /* q, k, v, o, gate, up, down: CDX_LORA_* bit i */
static const char *const k_mod_name[N_MOD] = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                               "down_proj" };
static const char *const k_mod_path[N_MOD] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                               "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                               "mlp.down_proj" };
#define SEQ_MAX ((int64_t)1 << 20)

cdx_train_opts cdx_train_defaults(void)
{
    return (cdx_train_opts){ .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .temperature = 1.0,
                             .kd_weight = 0.5, .seed = 42 };
}

int cdx_lora_targets_parse(const char *list, unsigned *out, cdx_err *err)
{
    *out = 0;
    const char *p = list;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int found = -1;
        for (int i = 0; i < N_MOD; i++)
            if (strlen(k_mod_name[i]) == n && !strncmp(p, k_mod_name[i], n))
                found = i;
        if (found < 0)
            return cdx_err_set(err, CDX_EINVAL, "LoRA target \"%.*s\" is not one of q_proj, k_proj, v_proj, o_proj, "
                               "gate_proj, up_proj, down_proj", (int)n, p);
        *out |= 1u << found;
        p = e ? e + 1 : NULL;
    }
    if (!*out)
        return cdx_err_set(err, CDX_EINVAL, "no LoRA target modules given");
    return CDX_OK;
}

/* ---- the trainer ---- */

typedef struct {
    float *a, *b, *ga, *gb; /* [r][in], [out][r] and their gradients (a parameter's buffers) */
    int64_t r;
    float scale;
} lora_mod;

typedef struct {
    const float *w;  /* [out][in] */
    float *gw;       /* full FT: its gradient, else NULL */
    const float *b;  /* [out] or NULL */
    float *gb;
    int64_t in, out;
    lora_mod *lo;    /* NULL: no adapter on it */
} lin;

typedef struct {
    const float *w;  /* [n] */
    float *g;        /* full FT or NULL */
} vecp;

typedef struct {
    vecp attn_norm, ffn_norm, q_norm, k_norm;
    lin m[N_MOD];
    lora_mod lo[N_MOD];
} tlayer;

/* one layer's kept activations of a sequence (T tokens) */
typedef struct {
    float *x, *r1, *h1, *qp, *kp, *rq, *rk, *q, *k, *v, *P, *o, *xm, *r2, *h2, *g, *u, *s;
    float *xa[N_MOD]; /* [T][r] */
} acts;

struct cdx_trainer {
    const cdx_model *m;
    cdx_hparams hp;
    cdx_train_opts o;
    int64_t E, QD, KD, F, V, hd, Hq, Hk, L;
    float attn_scale, att_factor;
    bool tied;
    const float *embd, *out_w, *out_norm;
    float *g_embd, *g_out, *g_out_norm; /* full FT */
    tlayer *layers;
    cdx_train_param *params;
    int64_t n_params, cap_params;
    void **owned;    /* f32 copies of frozen F16/BF16 tensors */
    size_t n_owned;
    int64_t step;    /* optimizer steps done */
    /* scratch for one sequence, sized for T_cap */
    int64_t T_cap, R;     /* R: the largest LoRA rank (0: none) */
    acts *a;              /* [L] */
    void *act_mem;
    float *xf, *rf, *hf, *dx, *dh, *dq, *dk, *dv, *dob, *dg, *du, *dxa, *cosb, *sinb, *tmp;
    size_t act_bytes;
    /* the teacher */
    cdx_forward_ctx *tfc;
    cdx_kv tkv;
    int64_t t_cap;
    cdx_pool *pool;       /* the products' threads (cdx_train_opts.n_threads) */
    tg_isa isa;           /* the GEMM's micro-kernels (the engine's kernel set) */
    tg_dot_fn dot;        /* the attention's vector steps (tgemm.h), of the same kernel set */
    tg_axpy_fn axpy;
};

/* ---- f32 helpers ---- */

static inline void axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* The three products of a linear layer, on training's GEMM (tgemm.h: packed panels, SIMD micro-kernels
 * with a scalar twin, split over the pool by blocks of the output, every value one fused multiply-add
 * chain in k order, so the results do not depend on --threads):
 *   FWD: y[T][out] = x[T][in] · w[out][in]ᵀ (+ b)
 *   DX:  dx[T][in] += dy[T][out] · w[out][in]
 *   DW:  gw[out][in] += dy[T][out]ᵀ · x[T][in] */
typedef struct {
    cdx_pool *pool;
    tg_isa isa;
} mm_ctx;

static void mm_gemm(const mm_ctx *c, int64_t M, int64_t N, int64_t K, const float *a, int64_t a_rs, int64_t a_cs,
                    const float *b, int64_t b_rs, int64_t b_cs, float *y, int64_t ldc, float alpha, bool acc)
{
    const tg_args g = { .M = M, .N = N, .K = K, .a = a, .a_rs = a_rs, .a_cs = a_cs, .b = b, .b_rs = b_rs,
                        .b_cs = b_cs, .c = y, .ldc = ldc, .alpha = alpha, .acc = acc };
    tg_gemm(c->pool, c->isa, &g);
}

static void mm_fwd_(const mm_ctx *c, const float *x, const float *w, const float *b, int64_t T, int64_t in,
                    int64_t out, float *y)
{
    mm_gemm(c, T, out, in, x, in, 1, w, 1, in, y, out, 1.0f, false);
    if (b)
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < out; o++)
                y[t * out + o] += b[o];
}

#define mm_fwd(x, w, b, T, in, out, y) mm_fwd_(t_pool, (x), (w), (b), (T), (in), (out), (y))
#define mm_dx(dy, w, T, in, out, dx) mm_gemm(t_pool, (T), (in), (out), (dy), (out), 1, (w), (in), 1, (dx), (in), 1.0f, true)
#define mm_dw(dy, x, T, in, out, gw) mm_gemm(t_pool, (out), (in), (T), (dy), 1, (out), (x), (in), 1, (gw), (in), 1.0f, true)

/* out = w · x / sqrt(mean(x²) + eps) (LlamaRMSNorm in f32); *r = the 1/rms */
static void rms_fwd(const float *x, const float *w, int64_t n, float eps, float *out, float *r)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const float rs = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    *r = rs;
    for (int64_t i = 0; i < n; i++)
        out[i] = w[i] * (x[i] * rs);
}

/* dx += d/dx of rms_fwd for upstream dy; gw += its weight gradient (NULL: frozen) */
static void rms_bwd(const float *x, const float *w, float r, const float *dy, int64_t n, float *dx, float *gw)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(dy[i] * w[i]) * x[i];
    const float c = (float)(s / (double)n) * r * r * r;
    for (int64_t i = 0; i < n; i++)
        dx[i] += r * (dy[i] * w[i]) - c * x[i];
    if (gw)
        for (int64_t i = 0; i < n; i++)
            gw[i] += dy[i] * (x[i] * r);
}

static void lin_fwd(const mm_ctx *t_pool, const lin *L, const float *x, int64_t T, float *y, float *xa)
{
    mm_fwd(x, L->w, L->b, T, L->in, L->out, y);
    const lora_mod *lo = L->lo;
    if (!lo)
        return;
    mm_fwd(x, lo->a, NULL, T, L->in, lo->r, xa);
    /* y += (scale · xa) · Bᵀ */
    mm_gemm(t_pool, T, L->out, lo->r, xa, lo->r, 1, lo->b, 1, lo->r, y, L->out, lo->scale, true);
}

/* dx[T][in] += the input gradient for upstream dy (dx NULL: not wanted); the weight, bias and adapter
 * gradients added */
static void lin_bwd(const mm_ctx *t_pool, const lin *L, const float *x, const float *xa, const float *dy, int64_t T,
                    float *dx, float *dxa)
{
    if (dx)
        mm_dx(dy, L->w, T, L->in, L->out, dx);
    if (L->gw)
        mm_dw(dy, x, T, L->in, L->out, L->gw);
    if (L->gb)
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < L->out; o++)
                L->gb[o] += dy[t * L->out + o];
    const lora_mod *lo = L->lo;
    if (!lo)
        return;
    const int64_t r = lo->r;
    /* dB += (scale · dy)ᵀ · xa */
    mm_gemm(t_pool, L->out, r, T, dy, 1, L->out, xa, r, 1, lo->gb, r, lo->scale, true);
    /* dxa = (scale · dy) · B */
    mm_gemm(t_pool, T, r, L->out, dy, L->out, 1, lo->b, r, 1, dxa, r, lo->scale, false);
    mm_dw(dxa, x, T, L->in, r, lo->ga);
    if (dx)
        mm_dx(dxa, lo->a, T, L->in, r, dx);
}

/* ---- parameters ---- */

static cdx_train_param *param_add(cdx_trainer *t, const char *name, int64_t rows, int64_t cols, int n_dims,
                                  const float *init, cdx_err *err)
{
    if (t->n_params == t->cap_params) {
        void *p = cdx_array_grow(t->params, (size_t *)&t->cap_params, (size_t)t->n_params + 1, sizeof *t->params);
        if (!p) {
            cdx_err_set(err, CDX_ENOMEM, "out of memory");
            return NULL;
        }
        t->params = p;
    }
    cdx_train_param *p = &t->params[t->n_params];
    memset(p, 0, sizeof *p);
    size_t n = (size_t)(rows * cols);
    p->name = strdup(name);
    p->rows = rows;
    p->cols = cols;
    p->n_dims = n_dims;
    p->w = calloc(n, sizeof(float));
    p->g = calloc(n, sizeof(float));
    p->m = calloc(n, sizeof(float));
    p->v = calloc(n, sizeof(float));
    t->n_params++;
    if (!p->name || !p->w || !p->g || !p->m || !p->v) {
        cdx_err_set(err, CDX_ENOMEM, "out of memory for %s", name);
        return NULL;
    }
    if (init)
        memcpy(p->w, init, n * sizeof(float));
    return p;
}

/* Asks the kernel to reclaim the pages of a matrix the trainer has copied (MADV_PAGEOUT: a file's
 * pages are dropped and read again if anyone reads them; memory of the process's own stays as it is,
 * there being no swap to write it to or the kernel keeping it): the F16 file's pages do not stay
 * resident beside their f32 copies. Advice only; the bytes read stay the same. */
static void release_pages(const void *p, size_t n)
{
#ifdef MADV_PAGEOUT
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, lo = (a + pg - 1) & ~(pg - 1),
                    hi = (a + n) & ~(pg - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_PAGEOUT);
#else
    (void)p, (void)n;
#endif
}

/* The f32 values of a model matrix: in place when F32, else a copy (owned by t) of F16/BF16. */
static int mat_f32(cdx_trainer *t, const cdx_mat *w, const char *what, const float **out, cdx_err *err)
{
    if (!w->data)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the model has no such matrix", what);
    if (w->type == CDX_TYPE_F32 && w->row_bytes == (size_t)w->cols * sizeof(float)) {
        *out = w->data;
        return CDX_OK;
    }
    const cdx_type_traits *tr = cdx_type_get(w->type);
    if ((w->type != CDX_TYPE_F16 && w->type != CDX_TYPE_BF16) || !tr || !tr->to_f32)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s is %s; training reads F32, F16 or BF16 weights", what,
                           cdx_type_name(w->type));
    float *c = malloc((size_t)(w->rows * w->cols) * sizeof *c);
    void **o = realloc(t->owned, (t->n_owned + 1) * sizeof *o);
    if (!c || !o) {
        free(c);
        if (o)
            t->owned = o;
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    t->owned = o;
    t->owned[t->n_owned++] = c;
    for (int64_t r = 0; r < w->rows; r++)
        tr->to_f32((const uint8_t *)w->data + r * w->row_bytes, c + r * w->cols, w->cols);
    release_pages(w->data, (size_t)w->rows * w->row_bytes);
    *out = c;
    return CDX_OK;
}

/* splitmix64: the LoRA A draws (kaiming_uniform(a=√5) is U(-1/√in, 1/√in); torch's generator is not
 * reproduced, so --init-adapter gives PEFT's exact start) */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Which dense families train, and the hooks they must not use. */
static int check_model(const cdx_model *m, cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    if (m->gguf)
        return cdx_err_set(err, CDX_EUNSUPPORTED,
                           "the model is a GGUF file: its weights were stored for inference (quantized or half "
                           "precision), which has discarded the precision a gradient step needs. Train from the "
                           "publisher's safetensors checkpoint (a Hugging Face folder), or write one back from an "
                           "F16/BF16 GGUF with `caldrix convert` where that exists");
    static const char *const ok[] = { "llama", "mistral", "qwen2", "qwen3" };
    bool fam = false;
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        fam |= m->desc && m->desc->family && !strcmp(m->desc->family, ok[i]);
    const char *why = !fam                                          ? "its family"
                      : hp->n_expert                                ? "a mixture of experts"
                      : hp->linear_layer || hp->attn_gate           ? "a hybrid model"
                      : hp->layer_norm || hp->parallel_residual     ? "LayerNorms"
                      : hp->embd_scale || hp->residual_scale || hp->logit_div || hp->logit_scale
                                                                    ? "scalings outside the layers"
                      : hp->attn_softcap || hp->final_softcap       ? "soft caps"
                      : hp->rope_pass || hp->nope_layer             ? "a per-pass RoPE"
                      : hp->n_rot != hp->head_dim                   ? "partial RoPE"
                      : hp->qk_norm_full || hp->clip_qkv            ? "its q/k norms"
                      : hp->linear_bias || hp->mlp_plain            ? "its MLP"
                      : hp->act != CDX_HF_ACT_SILU                  ? "its activation"
                      : hp->encoder                                 ? "an encoder"
                      : m->dtype != CDX_DTYPE_F32                   ? "bf16 compute (load it with --dtype f32)"
                                                                    : NULL;
    if (why)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "training supports the dense llama, mistral, qwen2 and qwen3 "
                           "decoders; this %s model is refused for %s", hp->arch_name ? hp->arch_name : "?", why);
    return CDX_OK;
}

void cdx_trainer_free(cdx_trainer *t)
{
    if (!t)
        return;
    for (int64_t i = 0; i < t->n_params; i++) {
        free((void *)t->params[i].name);
        free(t->params[i].w); free(t->params[i].g); free(t->params[i].m); free(t->params[i].v);
    }
    free(t->params);
    for (size_t i = 0; i < t->n_owned; i++)
        free(t->owned[i]);
    free(t->owned);
    free(t->layers);
    free(t->a);
    free(t->act_mem);
    cdx_forward_ctx_free(t->tfc);
    if (t->t_cap)
        cdx_kv_free(&t->tkv);
    cdx_pool_destroy(t->pool);
    free(t);
}

static int read_init_adapter(cdx_trainer *t, const char *dir, cdx_err *err);

int cdx_trainer_create(const cdx_model *m, const cdx_train_opts *o, cdx_trainer **out, cdx_err *err)
{
    *out = NULL;
    int rc = check_model(m, err);
    if (rc)
        return rc;
    if (!(o->lr > 0) || !(o->weight_decay >= 0) || !(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1)
        || !(o->eps > 0))
        return cdx_err_set(err, CDX_EINVAL, "optimizer settings out of range (lr %g, weight decay %g)", o->lr,
                           o->weight_decay);
    if (o->teacher) {
        const cdx_hparams *th = cdx_model_hparams(o->teacher);
        if (th->n_vocab != m->hp.n_vocab)
            return cdx_err_set(err, CDX_EINVAL, "the teacher's vocabulary has %lld tokens and the student's %lld; "
                               "distillation needs the student's vocabulary", (long long)th->n_vocab,
                               (long long)m->hp.n_vocab);
        if (!(o->temperature > 0) || !(o->kd_weight >= 0 && o->kd_weight <= 1))
            return cdx_err_set(err, CDX_EINVAL, "temperature %g must be > 0 and kd weight %g within 0..1",
                               o->temperature, o->kd_weight);
    }
    cdx_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    t->m = m;
    t->hp = m->hp;
    t->o = *o;
    const cdx_hparams *hp = &t->hp;
    t->E = hp->n_embd; t->hd = hp->head_dim; t->Hq = hp->n_head; t->Hk = hp->n_head_kv;
    t->QD = t->Hq * t->hd; t->KD = t->Hk * t->hd; t->F = hp->n_ff; t->V = hp->n_vocab; t->L = hp->n_layer;
    t->attn_scale = hp->attn_scale ? hp->attn_scale : 1.0f / sqrtf((float)t->hd);
    t->att_factor = hp->rope_attn_factor;
    t->tied = hp->tied_embeddings || m->output.data == m->tok_embd.data;
    if ((rc = cdx_pool_create(o->n_threads, &t->pool, err)))
        goto fail;
    t->isa = tg_isa_best();
    t->dot = t->isa == TG_SCALAR ? tg_dot_scalar : tg_dot_avx2;
    t->axpy = t->isa == TG_SCALAR ? tg_axpy_scalar : tg_axpy_avx2;
    t->layers = calloc((size_t)t->L, sizeof *t->layers);
    if (!t->layers) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto fail;
    }
    if (o->init_adapter && !o->full && (rc = read_init_adapter(t, o->init_adapter, err)))
        goto fail;
    if (!o->full && (t->o.lora_r <= 0 || t->o.lora_r > 4096 || !(t->o.lora_alpha > 0) || !t->o.lora_targets)) {
        rc = cdx_err_set(err, CDX_EINVAL, "LoRA needs r within 1..4096 (%lld), alpha > 0 (%g) and target modules",
                         (long long)t->o.lora_r, t->o.lora_alpha);
        goto fail;
    }
    char name[256];
    const float *wp;
    /* the embeddings, then per layer in transformers' order, then the final norm and the head */
    if ((rc = mat_f32(t, &m->tok_embd, "model.embed_tokens.weight", &wp, err)))
        goto fail;
    t->embd = wp;
    if (o->full) {
        cdx_train_param *p = param_add(t, "model.embed_tokens.weight", t->V, t->E, 2, wp, err);
        if (!p) { rc = err->code; goto fail; }
        t->embd = p->w; t->g_embd = p->g;
    }
    uint64_t rng = t->o.seed;
    for (int64_t l = 0; l < t->L; l++) {
        const layer_weights *W = &m->layers[l];
        tlayer *TL = &t->layers[l];
        const cdx_mat *mats[N_MOD] = { &W->wq, &W->wk, &W->wv, &W->wo, &W->gate, &W->up, &W->down };
        const float *bias[N_MOD] = { W->bq, W->bk, W->bv };
        for (int i = 0; i < N_MOD; i++) {
            lin *L = &TL->m[i];
            snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, k_mod_path[i]);
            if ((rc = mat_f32(t, mats[i], name, &wp, err)))
                goto fail;
            L->w = wp;
            L->in = mats[i]->cols;
            L->out = mats[i]->rows;
            L->b = bias[i];
            if (o->full) {
                cdx_train_param *p = param_add(t, name, L->out, L->in, 2, wp, err);
                if (!p) { rc = err->code; goto fail; }
                L->w = p->w; L->gw = p->g;
                if (bias[i]) {
                    snprintf(name, sizeof name, "model.layers.%lld.%s.bias", (long long)l, k_mod_path[i]);
                    if (!(p = param_add(t, name, L->out, 1, 1, bias[i], err))) { rc = err->code; goto fail; }
                    L->b = p->w; L->gb = p->g;
                }
            } else if (t->o.lora_targets & (1u << i)) {
                lora_mod *lo = &TL->lo[i];
                const int64_t r = t->o.lora_r;
                lo->r = r;
                lo->scale = (float)(t->o.lora_alpha / (double)r);
                snprintf(name, sizeof name, "base_model.model.model.layers.%lld.%s.lora_A.weight", (long long)l,
                         k_mod_path[i]);
                cdx_train_param *pa = param_add(t, name, r, L->in, 2, NULL, err);
                if (!pa) { rc = err->code; goto fail; }
                const float bound = 1.0f / sqrtf((float)L->in);
                for (int64_t j = 0; j < r * L->in; j++)
                    pa->w[j] = ((float)(mix64(&rng) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * bound;
                snprintf(name, sizeof name, "base_model.model.model.layers.%lld.%s.lora_B.weight", (long long)l,
                         k_mod_path[i]);
                cdx_train_param *pb = param_add(t, name, L->out, r, 2, NULL, err);
                if (!pb) { rc = err->code; goto fail; }
                pa = pb - 1; /* params may have moved */
                lo->a = pa->w; lo->ga = pa->g; lo->b = pb->w; lo->gb = pb->g;
                L->lo = lo;
                if (r > t->R)
                    t->R = r;
            }
        }
        struct { const float *w; int64_t n; const char *nm; vecp *dst; } vs[4] = {
            { W->attn_norm, t->E, "input_layernorm", &TL->attn_norm },
            { W->ffn_norm, t->E, "post_attention_layernorm", &TL->ffn_norm },
            { W->q_norm, t->hd, "self_attn.q_norm", &TL->q_norm },
            { W->k_norm, t->hd, "self_attn.k_norm", &TL->k_norm },
        };
        for (int i = 0; i < 4; i++) {
            vs[i].dst->w = vs[i].w;
            if (!vs[i].w && i < 2) {
                rc = cdx_err_set(err, CDX_EUNSUPPORTED, "layer %lld has no %s", (long long)l, vs[i].nm);
                goto fail;
            }
            if (o->full && vs[i].w) {
                snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, vs[i].nm);
                cdx_train_param *p = param_add(t, name, vs[i].n, 1, 1, vs[i].w, err);
                if (!p) { rc = err->code; goto fail; }
                vs[i].dst->w = p->w; vs[i].dst->g = p->g;
            }
        }
    }
    /* LoRA: point the layers at the parameters again (the array grew while they were added) */
    if (!o->full) {
        int64_t pi = 0;
        for (int64_t l = 0; l < t->L; l++)
            for (int i = 0; i < N_MOD; i++)
                if (t->layers[l].m[i].lo) {
                    lora_mod *lo = &t->layers[l].lo[i];
                    lo->a = t->params[pi].w; lo->ga = t->params[pi].g;
                    lo->b = t->params[pi + 1].w; lo->gb = t->params[pi + 1].g;
                    pi += 2;
                }
    }
    t->out_norm = m->out_norm;
    if (m->output.data == m->tok_embd.data) /* a tied head: the embeddings' f32 values, not a 2nd copy */
        wp = t->embd;
    else if ((rc = mat_f32(t, &m->output, "lm_head.weight", &wp, err)))
        goto fail;
    t->out_w = wp;
    if (o->full) {
        cdx_train_param *p = param_add(t, "model.norm.weight", t->E, 1, 1, m->out_norm, err);
        if (!p) { rc = err->code; goto fail; }
        if (!t->tied && !param_add(t, "lm_head.weight", t->V, t->E, 2, wp, err)) {
            rc = err->code;
            goto fail;
        }
        /* re-point everything at the final array */
        int64_t pi = 0;
        t->embd = t->params[pi].w; t->g_embd = t->params[pi].g; pi++;
        for (int64_t l = 0; l < t->L; l++) {
            tlayer *TL = &t->layers[l];
            for (int i = 0; i < N_MOD; i++) {
                lin *L = &TL->m[i];
                L->w = t->params[pi].w; L->gw = t->params[pi].g; pi++;
                if (L->b) { L->b = t->params[pi].w; L->gb = t->params[pi].g; pi++; }
            }
            vecp *vs[4] = { &TL->attn_norm, &TL->ffn_norm, &TL->q_norm, &TL->k_norm };
            for (int i = 0; i < 4; i++)
                if (vs[i]->w) { vs[i]->w = t->params[pi].w; vs[i]->g = t->params[pi].g; pi++; }
        }
        t->out_norm = t->params[pi].w; t->g_out_norm = t->params[pi].g; pi++;
        if (t->tied) {
            t->out_w = t->embd; t->g_out = t->g_embd;
        } else {
            t->out_w = t->params[pi].w; t->g_out = t->params[pi].g; pi++;
        }
    }
    if (o->init_adapter && !o->full && (rc = cdx_trainer_load_checkpoint(t, o->init_adapter, err)) < 0)
        goto fail;
    t->step = 0;
    *out = t;
    return CDX_OK;
fail:
    cdx_trainer_free(t);
    return rc;
}

int64_t cdx_trainer_n_params(const cdx_trainer *t) { return t->n_params; }
const cdx_train_param *cdx_trainer_param(const cdx_trainer *t, int64_t i)
{
    return i >= 0 && i < t->n_params ? &t->params[i] : NULL;
}
int64_t cdx_trainer_steps_done(const cdx_trainer *t) { return t->step; }

/* ---- scratch for one sequence ---- */

static int scratch_fit(cdx_trainer *t, int64_t T, cdx_err *err)
{
    if (T <= t->T_cap)
        return CDX_OK;
    const int64_t E = t->E, QD = t->QD, KD = t->KD, F = t->F, Hq = t->Hq, Hk = t->Hk, R = t->R;
    /* per layer: x h1 xm h2 (E), r1 r2, qp q o (QD), kp k v (KD), rq rk, P (Hq·T), g u s (F), xa */
    const int64_t per_layer = T * (4 * E + 2 + 3 * QD + 3 * KD + Hq + Hk + Hq * T + 3 * F + N_MOD * R);
    const int64_t W = E > F ? E : F;
    const int64_t WQ = QD > W ? QD : W;
    const int64_t rest = T * (3 * E + 1) /* xf hf rf */ + T * (2 * E) /* dx dh */ + T * QD * 2 /* dq dob */
                         + T * KD * 2 + T * F * 2 + T * (R ? R : 1) + t->hd * T * 2 /* cos sin */
                         + T * (WQ + T);
    const double total = (double)(per_layer * t->L + rest) * sizeof(float);
    if (total > 64e9)
        return cdx_err_set(err, CDX_ENOMEM, "a sequence of %lld tokens needs %.1f GB of activations",
                           (long long)T, total / 1e9);
    free(t->act_mem);
    free(t->a);
    t->a = calloc((size_t)t->L, sizeof *t->a);
    t->act_mem = malloc((size_t)total);
    if (!t->a || !t->act_mem) {
        t->T_cap = 0;
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for %.1f MB of activations", total / 1e6);
    }
    t->act_bytes = (size_t)total;
    float *p = t->act_mem;
#define TAKE(ptr, n) ((ptr) = p, p += (n))
    for (int64_t l = 0; l < t->L; l++) {
        acts *a = &t->a[l];
        TAKE(a->x, T * E); TAKE(a->r1, T); TAKE(a->h1, T * E); TAKE(a->qp, T * QD); TAKE(a->kp, T * KD);
        TAKE(a->rq, T * Hq); TAKE(a->rk, T * Hk); TAKE(a->q, T * QD); TAKE(a->k, T * KD); TAKE(a->v, T * KD);
        TAKE(a->P, Hq * T * T); TAKE(a->o, T * QD); TAKE(a->xm, T * E); TAKE(a->r2, T); TAKE(a->h2, T * E);
        TAKE(a->g, T * F); TAKE(a->u, T * F); TAKE(a->s, T * F);
        for (int i = 0; i < N_MOD; i++)
            TAKE(a->xa[i], T * R);
    }
    TAKE(t->xf, T * E); TAKE(t->rf, T); TAKE(t->hf, T * E); TAKE(t->dx, T * E); TAKE(t->dh, T * E);
    TAKE(t->dq, T * QD); TAKE(t->dob, T * QD); TAKE(t->dk, T * KD); TAKE(t->dv, T * KD); TAKE(t->dg, T * F);
    TAKE(t->du, T * F); TAKE(t->dxa, T * (R ? R : 1)); TAKE(t->cosb, t->hd * T); TAKE(t->sinb, t->hd * T);
    TAKE(t->tmp, T * (WQ + T));
#undef TAKE
    t->T_cap = T;
    return CDX_OK;
}

/* ---- RoPE (transformers' rotate_half, or adjacent pairs) ---- */

static void rope_tables(const cdx_trainer *t, int64_t T)
{
    const int64_t half = t->hd / 2;
    for (int64_t p = 0; p < T; p++)
        for (int64_t i = 0; i < half; i++) {
            const float ang = (float)p * t->m->inv_freq[i];
            float c = cosf(ang), s = sinf(ang);
            if (t->att_factor)
                c *= t->att_factor, s *= t->att_factor;
            t->cosb[p * half + i] = c;
            t->sinb[p * half + i] = s;
        }
}

/* rotates n_heads heads of one position; inverse: by -angle (the backward pass) */
static void rope_apply(const cdx_trainer *t, float *v, int64_t n_heads, int64_t pos, bool inverse)
{
    const int64_t hd = t->hd, half = hd / 2;
    const bool adj = t->hp.rope_mode == CDX_ROPE_ADJACENT;
    for (int64_t i = 0; i < half; i++) {
        const float c = t->cosb[pos * half + i], s = inverse ? -t->sinb[pos * half + i] : t->sinb[pos * half + i];
        const int64_t a = adj ? 2 * i : i, b = adj ? 2 * i + 1 : i + half;
        for (int64_t h = 0; h < n_heads; h++) {
            float *p = v + h * hd;
            const float x0 = p[a], x1 = p[b];
            p[a] = x0 * c - x1 * s;
            p[b] = x0 * s + x1 * c;
        }
    }
}

/* ---- one sequence: forward, loss, backward ---- */

/* The teacher's logits at the n_sc scored positions (rows in order) into out[n_sc][V]. */
static int teacher_logits(cdx_trainer *t, const int32_t *ids, int64_t T, const bool *want, float *out, cdx_err *err)
{
    int rc;
    if (T > t->t_cap) {
        cdx_forward_ctx_free(t->tfc);
        t->tfc = NULL;
        if (t->t_cap)
            cdx_kv_free(&t->tkv);
        t->t_cap = 0;
        if ((rc = cdx_forward_ctx_create(t->o.teacher, T, t->o.n_threads, NULL, &t->tfc, err)))
            return rc;
        if ((rc = cdx_kv_init_model(&t->tkv, t->o.teacher, T, err)))
            return rc;
        t->t_cap = T;
    }
    t->tkv.n_past = 0;
    cdx_kv *kvs[1] = { &t->tkv };
    cdx_batch b = { .n = T, .tokens = ids, .want_logits = want };
    if ((rc = cdx_forward(t->tfc, kvs, 1, &b, out, err)))
        return cdx_err_prefix(err, "teacher");
    return CDX_OK;
}

/* ---- attention over the threads ---- */

typedef struct {
    const cdx_trainer *t;
    acts *a;
    int64_t T, window;
} attn_job;

/* fn over the pool when the work is worth it, else on the caller's thread as task 0 of 1 */
static void run_split(cdx_pool *pool, void (*fn)(void *, int, int), void *ctx, double work)
{
    if (pool && cdx_pool_size(pool) > 1 && work >= 65536.0)
        cdx_pool_run(pool, fn, ctx);
    else
        fn(ctx, 0, 1);
}

/* the query heads ith·Hq/nth .. : each head's softmax rows and its slice of o */
static void attn_fwd_task(void *ctx, int ith, int nth)
{
    const attn_job *j = ctx;
    const cdx_trainer *t = j->t;
    acts *a = j->a;
    const int64_t T = j->T, window = j->window, QD = t->QD, KD = t->KD, hd = t->hd, Hq = t->Hq, grp = t->Hq / t->Hk;
    for (int64_t h = Hq * ith / nth; h < Hq * (ith + 1) / nth; h++) {
        const int64_t kh = h / grp;
        for (int64_t i = 0; i < T; i++) {
            float *P = a->P + (h * T + i) * T;
            const float *q = a->q + i * QD + h * hd;
            const int64_t s0 = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
            float mx = -INFINITY;
            for (int64_t s = 0; s < T; s++) {
                P[s] = s >= s0 && s <= i ? t->dot(q, a->k + s * KD + kh * hd, hd) * t->attn_scale : -INFINITY;
                if (P[s] > mx)
                    mx = P[s];
            }
            float sum = 0;
            for (int64_t s = s0; s <= i; s++)
                sum += (P[s] = expf(P[s] - mx));
            float *o = a->o + i * QD + h * hd;
            memset(o, 0, (size_t)hd * sizeof(float));
            for (int64_t s = 0; s < T; s++) {
                P[s] = s >= s0 && s <= i ? P[s] / sum : 0.0f;
                if (P[s] != 0.0f)
                    t->axpy(o, P[s], a->v + s * KD + kh * hd, hd);
            }
        }
    }
}

/* the kv heads ith·Hk/nth .. with all their query heads (dk, dv of a kv head gather over its group, in
 * head order whatever the thread count); dP: the thread's T floats of t->tmp */
static void attn_bwd_task(void *ctx, int ith, int nth)
{
    const attn_job *j = ctx;
    const cdx_trainer *t = j->t;
    const acts *a = j->a;
    const int64_t T = j->T, window = j->window, QD = t->QD, KD = t->KD, hd = t->hd, Hk = t->Hk, grp = t->Hq / t->Hk;
    float *dP = t->tmp + (int64_t)ith * T;
    for (int64_t kh = Hk * ith / nth; kh < Hk * (ith + 1) / nth; kh++)
        for (int64_t h = kh * grp; h < (kh + 1) * grp; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *P = a->P + (h * T + i) * T, *dov = t->dob + i * QD + h * hd;
                const int64_t s0 = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
                float sum = 0;
                for (int64_t s = s0; s <= i; s++) {
                    dP[s] = t->dot(dov, a->v + s * KD + kh * hd, hd);
                    sum += P[s] * dP[s];
                    t->axpy(t->dv + s * KD + kh * hd, P[s], dov, hd);
                }
                float *dqv = t->dq + i * QD + h * hd;
                const float *qv = a->q + i * QD + h * hd;
                for (int64_t s = s0; s <= i; s++) {
                    const float dS = P[s] * (dP[s] - sum) * t->attn_scale;
                    if (dS == 0.0f)
                        continue;
                    t->axpy(dqv, dS, a->k + s * KD + kh * hd, hd);
                    t->axpy(t->dk + s * KD + kh * hd, dS, qv, hd);
                }
            }
}

/* ---- the per-token steps over the threads ---- */

/* The norms, RoPE, the activation, the residual adds and AdamW. Each row's (or value's) result
 * depends on that row alone, so a job's n rows are cut into the pool's nth contiguous ranges and the
 * bits do not depend on the thread count. The one sum over rows among them, a norm's weight gradient
 * (full fine-tuning), is cut by columns instead: each column is added up over the rows in row order,
 * as one thread adds it. */
typedef struct rows_job rows_job;
struct rows_job {
    void (*fn)(const rows_job *j, int64_t i0, int64_t i1); /* rows (columns, values) i0..i1 */
    int64_t n;
    const cdx_trainer *t;
    const tlayer *TL;
    acts *a;
    /* a norm: x [n][dim] (+= add first, forward), its weight w, out/r (forward), dy -> dx (backward) */
    float *x, *out, *r, *dx, *gw;
    const float *add, *w, *dy;
    int64_t dim, T;
    bool rope, norm; /* the per-head steps backward: which of the two this pass does */
};

static void rows_task(void *ctx, int ith, int nth)
{
    const rows_job *j = ctx;
    const int64_t i0 = j->n * ith / nth, i1 = j->n * (ith + 1) / nth;
    if (i0 < i1)
        j->fn(j, i0, i1);
}

/* work: about the cycles the whole job takes (run_split's threshold is 65536) */
static void rows_run(const cdx_trainer *t, rows_job *j, double work)
{
    run_split(t->pool, rows_task, j, work);
}

/* x += add (when given), then out, r = rms_fwd(x) */
static void norm_fwd_rows(const rows_job *j, int64_t i0, int64_t i1)
{
    const int64_t n = j->dim;
    for (int64_t i = i0; i < i1; i++) {
        float *x = j->x + i * n;
        if (j->add)
            for (int64_t c = 0; c < n; c++)
                x[c] += j->add[i * n + c];
        rms_fwd(x, j->w, n, j->t->hp.rms_eps, j->out + i * n, &j->r[i]);
    }
}

static void norm_fwd(const cdx_trainer *t, int64_t T, int64_t n, float *x, const float *add, const float *w,
                     float *out, float *r)
{
    rows_job j = { .fn = norm_fwd_rows, .n = T, .t = t, .x = x, .add = add, .w = w, .out = out, .r = r, .dim = n };
    rows_run(t, &j, (double)T * (double)n * 8.0);
}

static void norm_bwd_rows(const rows_job *j, int64_t i0, int64_t i1)
{
    const int64_t n = j->dim;
    for (int64_t i = i0; i < i1; i++)
        rms_bwd(j->x + i * n, j->w, j->r[i], j->dy + i * n, n, j->dx + i * n, NULL);
}

/* gw[c] += Σ_i dy[i][c] · (x[i][c] · r[i]) in i order, columns c0..c1 */
static void norm_gw_cols(const rows_job *j, int64_t c0, int64_t c1)
{
    const int64_t n = j->dim;
    for (int64_t i = 0; i < j->T; i++) {
        const float *x = j->x + i * n, *dy = j->dy + i * n, r = j->r[i];
        for (int64_t c = c0; c < c1; c++)
            j->gw[c] += dy[c] * (x[c] * r);
    }
}

/* dx += rms_bwd over T rows of n (x, w, r of the forward, upstream dy); gw (NULL: frozen) += the weight's */
static void norm_bwd(const cdx_trainer *t, int64_t T, int64_t n, const float *x, const float *w, const float *r,
                     const float *dy, float *dx, float *gw)
{
    rows_job j = { .fn = norm_bwd_rows, .n = T, .t = t, .x = (float *)x, .w = w, .r = (float *)r, .dy = dy,
                   .dx = dx, .dim = n, .T = T };
    rows_run(t, &j, (double)T * (double)n * 8.0);
    if (gw) {
        j.fn = norm_gw_cols;
        j.n = n;
        j.gw = gw;
        rows_run(t, &j, (double)T * (double)n * 8.0);
    }
}

/* q, k of tokens i0..i1: the per-head norms (qwen3) or a copy, then RoPE */
static void qk_fwd_rows(const rows_job *j, int64_t i0, int64_t i1)
{
    const cdx_trainer *t = j->t;
    const tlayer *TL = j->TL;
    acts *a = j->a;
    const int64_t QD = t->QD, KD = t->KD, hd = t->hd, Hq = t->Hq, Hk = t->Hk;
    const float eps = t->hp.rms_eps;
    for (int64_t i = i0; i < i1; i++) {
        for (int64_t h = 0; h < Hq; h++) {
            float *dst = a->q + i * QD + h * hd, *src = a->qp + i * QD + h * hd;
            if (TL->q_norm.w)
                rms_fwd(src, TL->q_norm.w, hd, eps, dst, &a->rq[i * Hq + h]);
            else
                memcpy(dst, src, (size_t)hd * sizeof(float));
        }
        for (int64_t h = 0; h < Hk; h++) {
            float *dst = a->k + i * KD + h * hd, *src = a->kp + i * KD + h * hd;
            if (TL->k_norm.w)
                rms_fwd(src, TL->k_norm.w, hd, eps, dst, &a->rk[i * Hk + h]);
            else
                memcpy(dst, src, (size_t)hd * sizeof(float));
        }
        rope_apply(t, a->q + i * QD, Hq, i, false);
        rope_apply(t, a->k + i * KD, Hk, i, false);
    }
}

/* dx = d/dx of rms_fwd for upstream d, in place: rms_bwd into a zeroed buffer, without the buffer */
static void rms_bwd_inplace(const float *x, const float *w, float r, float *d, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(d[i] * w[i]) * x[i];
    const float c = (float)(s / (double)n) * r * r * r;
    for (int64_t i = 0; i < n; i++)
        d[i] = 0.0f + (r * (d[i] * w[i]) - c * x[i]);
}

/* dq, dk of tokens i0..i1: RoPE backward (j->rope), then the per-head norms' backward (j->norm), in place */
static void qk_bwd_rows(const rows_job *j, int64_t i0, int64_t i1)
{
    const cdx_trainer *t = j->t;
    const tlayer *TL = j->TL;
    const acts *a = j->a;
    const int64_t QD = t->QD, KD = t->KD, hd = t->hd, Hq = t->Hq, Hk = t->Hk;
    for (int64_t i = i0; i < i1; i++) {
        if (j->rope) {
            rope_apply(t, t->dq + i * QD, Hq, i, true);
            rope_apply(t, t->dk + i * KD, Hk, i, true);
        }
        if (j->norm && TL->q_norm.w)
            for (int64_t h = 0; h < Hq; h++)
                rms_bwd_inplace(a->qp + i * QD + h * hd, TL->q_norm.w, a->rq[i * Hq + h], t->dq + i * QD + h * hd, hd);
        if (j->norm && TL->k_norm.w)
            for (int64_t h = 0; h < Hk; h++)
                rms_bwd_inplace(a->kp + i * KD + h * hd, TL->k_norm.w, a->rk[i * Hk + h], t->dk + i * KD + h * hd, hd);
    }
}

/* the per-head norms' weight gradients, columns c0..c1 of head_dim: over tokens, then heads, in order */
static void qk_gw_cols(const rows_job *j, int64_t c0, int64_t c1)
{
    const cdx_trainer *t = j->t;
    const tlayer *TL = j->TL;
    const acts *a = j->a;
    const int64_t QD = t->QD, KD = t->KD, hd = t->hd, Hq = t->Hq, Hk = t->Hk;
    for (int64_t i = 0; i < j->T; i++) {
        for (int64_t h = 0; TL->q_norm.g && h < Hq; h++) {
            const float *x = a->qp + i * QD + h * hd, *dy = t->dq + i * QD + h * hd, r = a->rq[i * Hq + h];
            for (int64_t c = c0; c < c1; c++)
                TL->q_norm.g[c] += dy[c] * (x[c] * r);
        }
        for (int64_t h = 0; TL->k_norm.g && h < Hk; h++) {
            const float *x = a->kp + i * KD + h * hd, *dy = t->dk + i * KD + h * hd, r = a->rk[i * Hk + h];
            for (int64_t c = c0; c < c1; c++)
                TL->k_norm.g[c] += dy[c] * (x[c] * r);
        }
    }
}

/* s = silu(g) · u, values i0..i1 of T·F */
static void silu_fwd_vals(const rows_job *j, int64_t i0, int64_t i1)
{
    const acts *a = j->a;
    for (int64_t i = i0; i < i1; i++)
        a->s[i] = a->g[i] / (1.0f + expf(-a->g[i])) * a->u[i];
}

/* du, dg from ds (j->dy), values i0..i1 of T·F */
static void silu_bwd_vals(const rows_job *j, int64_t i0, int64_t i1)
{
    const acts *a = j->a;
    const cdx_trainer *t = j->t;
    for (int64_t i = i0; i < i1; i++) {
        const float g = a->g[i], sg = 1.0f / (1.0f + expf(-g)), si = g * sg;
        t->du[i] = j->dy[i] * si;
        t->dg[i] = j->dy[i] * a->u[i] * (sg * (1.0f + g * (1.0f - sg)));
    }
}

/* ---- the loss rows over the threads ---- */

typedef struct {
    float *z, *zt;        /* [n][V] the student's (then d loss / d z) and the teacher's logits */
    const int32_t *ys;    /* [n] the labels */
    double *row;          /* [n][2] each row's CE and KD·T² share of the loss */
    int64_t n, V;
    double a_kd, Tm, inv_items;
} loss_job;

static void loss_task(void *ctx, int ith, int nth)
{
    const loss_job *lj = ctx;
    const int64_t V = lj->V;
    const double a_kd = lj->a_kd, Tm = lj->Tm, inv_items = lj->inv_items;
    float *const zt = lj->zt;
    for (int64_t j = lj->n * ith / nth; j < lj->n * (ith + 1) / nth; j++) {
        const int32_t y = lj->ys[j];
        float *zr = lj->z + j * V;
        float mx = -INFINITY;
        for (int64_t v = 0; v < V; v++)
            mx = zr[v] > mx ? zr[v] : mx;
        double se = 0;
        for (int64_t v = 0; v < V; v++)
            se += exp((double)(zr[v] - mx));
        const double lse = mx + log(se);
        lj->row[2 * j] = (lse - zr[y]) * inv_items;
        double kdrow = 0;
        if (zt) {
            /* KL(softmax(t/T) ‖ softmax(s/T)), F.kl_div's pointwise target·(log target − input) */
            float *tr = zt + j * V;
            float mxs = -INFINITY, mxt = -INFINITY;
            for (int64_t v = 0; v < V; v++) {
                mxs = zr[v] / (float)Tm > mxs ? zr[v] / (float)Tm : mxs;
                mxt = tr[v] / (float)Tm > mxt ? tr[v] / (float)Tm : mxt;
            }
            double ses = 0, set = 0;
            for (int64_t v = 0; v < V; v++) {
                ses += exp((double)(zr[v] / (float)Tm - mxs));
                set += exp((double)(tr[v] / (float)Tm - mxt));
            }
            const double lses = mxs + log(ses), lset = mxt + log(set);
            for (int64_t v = 0; v < V; v++) {
                const double lpt = tr[v] / Tm - lset, lps = zr[v] / Tm - lses, pt = exp(lpt);
                if (pt > 0)
                    kdrow += pt * (lpt - lps);
                /* d(a·T²·KL/N)/dz = a·T·(p_s − p_t)/N, stored back into tr */
                tr[v] = (float)(a_kd * Tm * (exp(lps) - pt) * inv_items);
            }
            lj->row[2 * j + 1] = kdrow * Tm * Tm * inv_items;
        }
        /* d(CE)/dz = (softmax − onehot)/N, times (1 − a) */
        const double wce = (1.0 - a_kd) * inv_items;
        const double lg = log(se); /* once, not per value (the same bits: log is deterministic) */
        for (int64_t v = 0; v < V; v++)
            zr[v] = (float)(exp((double)(zr[v] - mx) - lg) * wce) + (zt ? zt[j * V + v] : 0.0f);
        zr[y] -= (float)wce;
    }
}

static int seq_pass(cdx_trainer *t, const cdx_train_seq *sq, double inv_items, cdx_train_stats *st, cdx_err *err)
{
    const int64_t T = sq->n, E = t->E, QD = t->QD, KD = t->KD, F = t->F, V = t->V, hd = t->hd, Hq = t->Hq;
    const mm_ctx mmc = { t->pool, t->isa }, *t_pool = &mmc;
    int rc = scratch_fit(t, T, err);
    if (rc)
        return rc;
    rope_tables(t, T);
    /* forward */
    for (int64_t i = 0; i < T; i++)
        memcpy(t->a[0].x + i * E, t->embd + (int64_t)sq->ids[i] * E, (size_t)E * sizeof(float));
    for (int64_t l = 0; l < t->L; l++) {
        const tlayer *TL = &t->layers[l];
        acts *a = &t->a[l];
        const int64_t window = cdx_hparams_window(&t->hp, l);
        /* the residual of the layer before (its MLP's input) is added here, before the norm */
        norm_fwd(t, T, E, a->x, l ? t->a[l - 1].xm : NULL, TL->attn_norm.w, a->h1, a->r1);
        lin_fwd(t_pool, &TL->m[0], a->h1, T, a->qp, a->xa[0]);
        lin_fwd(t_pool, &TL->m[1], a->h1, T, a->kp, a->xa[1]);
        lin_fwd(t_pool, &TL->m[2], a->h1, T, a->v, a->xa[2]);
        rows_job qj = { .fn = qk_fwd_rows, .n = T, .t = t, .TL = TL, .a = a };
        rows_run(t, &qj, (double)T * (double)(QD + KD) * 8.0);
        /* attention: eager softmax over the causal (windowed) keys, f32; heads over the threads */
        attn_job aj = { .t = t, .a = a, .T = T, .window = window };
        run_split(t->pool, attn_fwd_task, &aj, (double)Hq * (double)T * (double)T * (double)hd);
        lin_fwd(t_pool, &TL->m[3], a->o, T, a->xm, a->xa[3]);
        norm_fwd(t, T, E, a->xm, a->x, TL->ffn_norm.w, a->h2, a->r2);
        lin_fwd(t_pool, &TL->m[4], a->h2, T, a->g, a->xa[4]);
        lin_fwd(t_pool, &TL->m[5], a->h2, T, a->u, a->xa[5]);
        rows_job sj = { .fn = silu_fwd_vals, .n = T * F, .t = t, .a = a };
        rows_run(t, &sj, (double)T * (double)F * 16.0);
        /* x of the next layer (or xf) without its residual, which the next norm adds */
        lin_fwd(t_pool, &TL->m[6], a->s, T, l + 1 < t->L ? t->a[l + 1].x : t->xf, a->xa[6]);
    }
    norm_fwd(t, T, E, t->xf, t->a[t->L - 1].xm, t->out_norm, t->hf, t->rf);

    /* the scored positions: t predicts labels[t+1] */
    int64_t n_sc = 0;
    for (int64_t i = 0; i + 1 < T; i++)
        if (sq->labels[i + 1] != -100)
            n_sc++;
    memset(t->dx, 0, (size_t)(T * E) * sizeof(float));
    memset(t->dh, 0, (size_t)(T * E) * sizeof(float));
    if (n_sc) {
        const size_t nz = (size_t)(n_sc * V);
        float *hs = malloc((size_t)(n_sc * E) * sizeof(float)), *z = malloc(nz * sizeof(float));
        float *zt = t->o.teacher ? malloc(nz * sizeof(float)) : NULL;
        bool *want = t->o.teacher ? calloc((size_t)T, sizeof(bool)) : NULL;
        float *dhs = calloc((size_t)(n_sc * E), sizeof(float));
        if (!hs || !z || !dhs || (t->o.teacher && (!zt || !want))) {
            free(hs); free(z); free(zt); free(want); free(dhs);
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for %lld rows of logits", (long long)n_sc);
        }
        for (int64_t i = 0, j = 0; i + 1 < T; i++)
            if (sq->labels[i + 1] != -100) {
                memcpy(hs + j * E, t->hf + i * E, (size_t)E * sizeof(float));
                if (want)
                    want[i] = true;
                j++;
            }
        mm_fwd(hs, t->out_w, NULL, n_sc, E, V, z);
        if (zt && (rc = teacher_logits(t, sq->ids, T, want, zt, err))) {
            free(hs); free(z); free(zt); free(want); free(dhs);
            return rc;
        }
        const double a_kd = t->o.teacher ? t->o.kd_weight : 0.0;
        double *row = malloc((size_t)(2 * n_sc) * sizeof *row);
        int32_t *ys = malloc((size_t)n_sc * sizeof *ys);
        if (!row || !ys) {
            free(hs); free(z); free(zt); free(want); free(dhs); free(row); free(ys);
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for %lld rows of logits", (long long)n_sc);
        }
        for (int64_t i = 0, j = 0; i + 1 < T; i++)
            if (sq->labels[i + 1] != -100)
                ys[j++] = sq->labels[i + 1];
        loss_job lj = { .z = z, .zt = zt, .ys = ys, .row = row, .n = n_sc, .V = V, .a_kd = a_kd,
                        .Tm = t->o.temperature, .inv_items = inv_items };
        run_split(t->pool, loss_task, &lj, (double)n_sc * (double)V * 64.0);
        for (int64_t j = 0; j < n_sc; j++) { /* in row order, as one thread would add them */
            st->ce += row[2 * j];
            if (zt)
                st->kd += row[2 * j + 1];
        }
        free(row);
        free(ys);
        mm_dx(z, t->out_w, n_sc, E, V, dhs);
        if (t->g_out)
            mm_dw(z, hs, n_sc, E, V, t->g_out);
        for (int64_t i = 0, j = 0; i + 1 < T; i++)
            if (sq->labels[i + 1] != -100) {
                memcpy(t->dh + i * E, dhs + j * E, (size_t)E * sizeof(float));
                j++;
            }
        free(hs); free(z); free(zt); free(want); free(dhs);
        norm_bwd(t, T, E, t->xf, t->out_norm, t->rf, t->dh, t->dx, t->g_out_norm);
    }
    st->num_items += n_sc;
    st->tokens += T;
    if (!n_sc)
        return CDX_OK;

    /* backward through the layers; t->dx holds d loss / d (the layer's output) */
    for (int64_t l = t->L - 1; l >= 0; l--) {
        const tlayer *TL = &t->layers[l];
        acts *a = &t->a[l];
        const int64_t window = cdx_hparams_window(&t->hp, l);
        /* MLP: x_out = xm + down(silu(g)·u) */
        float *ds = t->tmp; /* [T][F] */
        memset(ds, 0, (size_t)(T * F) * sizeof(float));
        lin_bwd(t_pool, &TL->m[6], a->s, a->xa[6], t->dx, T, ds, t->dxa);
        rows_job sj = { .fn = silu_bwd_vals, .n = T * F, .t = t, .a = a, .dy = ds };
        rows_run(t, &sj, (double)T * (double)F * 16.0);
        memset(t->dh, 0, (size_t)(T * E) * sizeof(float));
        lin_bwd(t_pool, &TL->m[4], a->h2, a->xa[4], t->dg, T, t->dh, t->dxa);
        lin_bwd(t_pool, &TL->m[5], a->h2, a->xa[5], t->du, T, t->dh, t->dxa);
        norm_bwd(t, T, E, a->xm, TL->ffn_norm.w, a->r2, t->dh, t->dx, TL->ffn_norm.g);
        /* attention: xm = x + o·Woᵀ */
        memset(t->dob, 0, (size_t)(T * QD) * sizeof(float));
        lin_bwd(t_pool, &TL->m[3], a->o, a->xa[3], t->dx, T, t->dob, t->dxa);
        memset(t->dq, 0, (size_t)(T * QD) * sizeof(float));
        memset(t->dk, 0, (size_t)(T * KD) * sizeof(float));
        memset(t->dv, 0, (size_t)(T * KD) * sizeof(float));
        attn_job bj = { .t = t, .a = a, .T = T, .window = window };
        /* each thread's dP row is a slice of tmp (T · (max(E, F, QD) + T) floats: room for that many threads) */
        const bool fits = cdx_pool_size(t->pool) <= (t->E > t->F ? t->E : t->F) + T;
        run_split(fits ? t->pool : NULL, attn_bwd_task, &bj, (double)Hq * (double)T * (double)T * (double)hd);
        /* RoPE and the per-head norms backward, into the projections' outputs (dq, dk in place) */
        /* (their weight gradients, full fine-tuning, read dq and dk between the two: a pass by columns) */
        const double qk_work = (double)T * (double)(QD + KD) * 8.0;
        rows_job qj = { .fn = qk_bwd_rows, .n = T, .t = t, .TL = TL, .a = a, .T = T, .rope = true, .norm = true };
        if (TL->q_norm.g || TL->k_norm.g) {
            qj.norm = false;
            rows_run(t, &qj, qk_work);
            qj.fn = qk_gw_cols;
            qj.n = hd;
            rows_run(t, &qj, qk_work);
            qj.fn = qk_bwd_rows;
            qj.n = T;
            qj.rope = false;
            qj.norm = true;
        }
        rows_run(t, &qj, qk_work);
        /* the first layer's input gradient feeds only the embeddings' (full fine-tuning) */
        const bool want_dx = l > 0 || t->g_embd || TL->attn_norm.g;
        float *dh = want_dx ? t->dh : NULL;
        if (want_dx)
            memset(t->dh, 0, (size_t)(T * E) * sizeof(float));
        lin_bwd(t_pool, &TL->m[0], a->h1, a->xa[0], t->dq, T, dh, t->dxa);
        lin_bwd(t_pool, &TL->m[1], a->h1, a->xa[1], t->dk, T, dh, t->dxa);
        lin_bwd(t_pool, &TL->m[2], a->h1, a->xa[2], t->dv, T, dh, t->dxa);
        if (want_dx)
            norm_bwd(t, T, E, a->x, TL->attn_norm.w, a->r1, t->dh, t->dx, TL->attn_norm.g);
    }
    if (t->g_embd)
        for (int64_t i = 0; i < T; i++)
            axpy(t->g_embd + (int64_t)sq->ids[i] * E, 1.0f, t->dx + i * E, E);
    return CDX_OK;
}

int cdx_trainer_grads(cdx_trainer *t, const cdx_train_seq *seqs, int n_seq, cdx_train_stats *st, cdx_err *err)
{
    memset(st, 0, sizeof *st);
    int64_t items = 0;
    for (int s = 0; s < n_seq; s++) {
        const cdx_train_seq *q = &seqs[s];
        if (q->n < 1 || q->n > SEQ_MAX)
            return cdx_err_set(err, CDX_EINVAL, "sequence %d has %lld tokens (1..%lld)", s, (long long)q->n,
                               (long long)SEQ_MAX);
        for (int64_t i = 0; i < q->n; i++) {
            if (q->ids[i] < 0 || q->ids[i] >= t->V)
                return cdx_err_set(err, CDX_EINVAL, "sequence %d: input_ids[%lld] is %d, outside the vocabulary "
                                   "(0..%lld)", s, (long long)i, q->ids[i], (long long)t->V - 1);
            if (q->labels[i] != -100 && (q->labels[i] < 0 || q->labels[i] >= t->V))
                return cdx_err_set(err, CDX_EINVAL, "sequence %d: labels[%lld] is %d, neither -100 nor in the "
                                   "vocabulary (0..%lld)", s, (long long)i, q->labels[i], (long long)t->V - 1);
            if (i > 0 && q->labels[i] != -100)
                items++;
        }
    }
    for (int64_t i = 0; i < t->n_params; i++)
        memset(t->params[i].g, 0, (size_t)(t->params[i].rows * t->params[i].cols) * sizeof(float));
    if (!items)
        return CDX_OK;
    const double inv = 1.0 / (double)items;
    for (int s = 0; s < n_seq; s++) {
        int rc = seq_pass(t, &seqs[s], inv, st, err);
        if (rc)
            return rc;
    }
    const double a = t->o.teacher ? t->o.kd_weight : 0.0;
    st->loss = a * st->kd + (1.0 - a) * st->ce;
    return CDX_OK;
}

/* one AdamW step's constants (in f32, as torch computes the update of an f32 tensor) */
typedef struct {
    const cdx_trainer *t;
    float decay, step_size, fb1, fb2, c1, c2, fbc2, feps;
    bool wd;
} adam_job;

/* every value is updated on its own: each tensor's values are cut into the pool's nth ranges */
static void adam_task(void *ctx, int ith, int nth)
{
    const adam_job *aj = ctx;
    const cdx_trainer *t = aj->t;
    const float decay = aj->decay, step_size = aj->step_size, fb1 = aj->fb1, fb2 = aj->fb2, c1 = aj->c1,
                c2 = aj->c2, fbc2 = aj->fbc2, feps = aj->feps;
    for (int64_t i = 0; i < t->n_params; i++) {
        cdx_train_param *p = &t->params[i];
        const int64_t n = p->rows * p->cols;
        for (int64_t j = n * ith / nth; j < n * (ith + 1) / nth; j++) {
            const float g = p->g[j];
            if (aj->wd)
                p->w[j] *= decay;
            p->m[j] = p->m[j] * fb1 + g * c1;
            p->v[j] = p->v[j] * fb2 + g * g * c2;
            const float denom = sqrtf(p->v[j]) / fbc2 + feps;
            p->w[j] += -step_size * (p->m[j] / denom);
        }
    }
}

void cdx_trainer_apply(cdx_trainer *t)
{
    const int64_t k = ++t->step;
    const double lr = t->o.lr, b1 = t->o.beta1, b2 = t->o.beta2;
    const double bc1 = 1.0 - pow(b1, (double)k), bc2s = sqrt(1.0 - pow(b2, (double)k));
    adam_job aj = { .t = t, .decay = (float)(1.0 - lr * t->o.weight_decay), .step_size = (float)(lr / bc1),
                    .fb1 = (float)b1, .fb2 = (float)b2, .c1 = (float)(1.0 - b1), .c2 = (float)(1.0 - b2),
                    .fbc2 = (float)bc2s, .feps = (float)t->o.eps, .wd = t->o.weight_decay != 0 };
    double n = 0;
    for (int64_t i = 0; i < t->n_params; i++)
        n += (double)(t->params[i].rows * t->params[i].cols);
    run_split(t->pool, adam_task, &aj, n * 16.0);
}

int cdx_trainer_step(cdx_trainer *t, const cdx_train_seq *seqs, int n_seq, cdx_train_stats *st, cdx_err *err)
{
    int rc = cdx_trainer_grads(t, seqs, n_seq, st, err);
    if (!rc)
        cdx_trainer_apply(t);
    return rc;
}

/* ---- saving and loading ---- */

static int mkdir_p(const char *dir, cdx_err *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return cdx_err_set(err, CDX_EINVAL, "%s: path too long", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST)
                return cdx_err_set(err, CDX_EIO, "%s: cannot create: %s", buf, strerror(errno));
            *p = '/';
        }
    if (mkdir(buf, 0777) && errno != EEXIST)
        return cdx_err_set(err, CDX_EIO, "%s: cannot create: %s", buf, strerror(errno));
    return CDX_OK;
}

static int write_json(const char *path, json_t *o, cdx_err *err)
{
    if (!o)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(o);
    return rc ? cdx_err_set(err, CDX_EIO, "%s: cannot write", path) : CDX_OK;
}

/* adapter_config.json with the fields LoraConfig.to_dict() writes (PEFT v0.20.0), sorted, indent 2 */
static json_t *peft_config(const cdx_trainer *t)
{
    json_t *c = json_object(), *tm = json_array();
    if (!c || !tm) {
        json_decref(c);
        json_decref(tm);
        return NULL;
    }
    static const int order[N_MOD] = { 6, 4, 1, 3, 0, 5, 2 }; /* sorted: down gate k o q up v */
    for (int i = 0; i < N_MOD; i++)
        if (t->o.lora_targets & (1u << order[i]))
            json_array_append_new(tm, json_string(k_mod_name[order[i]]));
    static const char *const nulls[] = { "alora_invocation_tokens", "arrow_config", "auto_mapping", "corda_config",
                                         "eva_config", "exclude_modules", "layer_replication", "layers_pattern",
                                         "layers_to_transform", "lora_ga_config", "megatron_config", "modules_to_save",
                                         "monteclora_config", "revision", "target_parameters",
                                         "trainable_token_indices", "use_bdlora", "velora_config" };
    for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++)
        json_object_set_new(c, nulls[i], json_null());
    static const char *const falses[] = { "ensure_weight_tying", "fan_in_fan_out", "lora_bias", "use_dora",
                                          "use_qalora", "use_rslora" };
    for (size_t i = 0; i < sizeof falses / sizeof *falses; i++)
        json_object_set_new(c, falses[i], json_false());
    json_object_set_new(c, "alpha_pattern", json_object());
    json_object_set_new(c, "rank_pattern", json_object());
    json_object_set_new(c, "loftq_config", json_object());
    json_object_set_new(c, "base_model_name_or_path", t->o.base_name ? json_string(t->o.base_name) : json_null());
    json_object_set_new(c, "bias", json_string("none"));
    json_object_set_new(c, "inference_mode", json_true());
    json_object_set_new(c, "init_lora_weights", json_true());
    const double al = t->o.lora_alpha;
    json_object_set_new(c, "lora_alpha", al == floor(al) && fabs(al) < 1e15 ? json_integer((json_int_t)al)
                                                                              : json_real(al));
    json_object_set_new(c, "lora_dropout", json_real(0.0));
    json_object_set_new(c, "megatron_core", json_string("megatron.core"));
    json_object_set_new(c, "peft_type", json_string("LORA"));
    json_object_set_new(c, "peft_version", json_string("0.20.0"));
    json_object_set_new(c, "qalora_group_size", json_integer(16));
    json_object_set_new(c, "r", json_integer((json_int_t)t->o.lora_r));
    json_object_set_new(c, "target_modules", tm);
    json_object_set_new(c, "task_type", json_string("CAUSAL_LM"));
    return c;
}

static int write_tensors(const cdx_trainer *t, const char *path, int which, cdx_err *err)
{
    cdx_st_writer *w = NULL;
    int rc = cdx_st_writer_new(&w, err);
    char name[300];
    for (int64_t i = 0; !rc && i < t->n_params; i++) {
        const cdx_train_param *p = &t->params[i];
        const uint64_t shape[2] = { (uint64_t)p->rows, (uint64_t)p->cols };
        const float *d = which == 0 ? p->w : which == 1 ? p->m : p->v;
        snprintf(name, sizeof name, "%s%s", p->name, which == 0 ? "" : which == 1 ? ".exp_avg" : ".exp_avg_sq");
        rc = cdx_st_writer_add(w, name, CDX_TYPE_F32, (uint32_t)p->n_dims, shape, d, err);
    }
    if (!rc)
        rc = cdx_st_writer_write(w, path, err);
    cdx_st_writer_free(w);
    return rc;
}

static int copy_file(const char *from, const char *to, cdx_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = cdx_file_read_all(from, (size_t)1 << 31, &buf, &len, err);
    if (rc)
        return rc;
    FILE *f = fopen(to, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) {
        if (f)
            fclose(f);
        free(buf);
        return cdx_err_set(err, CDX_EIO, "%s: cannot write", to);
    }
    free(buf);
    return fclose(f) ? cdx_err_set(err, CDX_EIO, "%s: cannot write", to) : CDX_OK;
}

int cdx_trainer_save(const cdx_trainer *t, const char *dir, cdx_err *err)
{
    int rc = mkdir_p(dir, err);
    if (rc)
        return rc;
    char path[4200];
    if (!t->o.full) {
        snprintf(path, sizeof path, "%s/adapter_config.json", dir);
        json_t *c = peft_config(t);
        if ((rc = write_json(path, c, err)))
            return rc;
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
        return write_tensors(t, path, 0, err);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if ((rc = write_tensors(t, path, 0, err)))
        return rc;
    /* the model folder's other files: config (torch_dtype float32), generation config, tokenizer */
    const char *src = t->m->st ? t->m->st->dir : NULL;
    if (!src)
        return CDX_OK;
    static const char *const files[] = { "config.json", "generation_config.json", "tokenizer.json",
                                         "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                                         "chat_template.jinja", "vocab.json", "merges.txt" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char from[4200];
        snprintf(from, sizeof from, "%s/%s", src, files[i]);
        struct stat sb;
        if (stat(from, &sb) || !S_ISREG(sb.st_mode))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (i == 0) {
            json_error_t je;
            json_t *c = json_load_file(from, 0, &je);
            if (!c)
                return cdx_err_set(err, CDX_EFORMAT, "%s: %s", from, je.text);
            json_object_set_new(c, "torch_dtype", json_string("float32"));
            if ((rc = write_json(path, c, err)))
                return rc;
        } else if ((rc = copy_file(from, path, err))) {
            return rc;
        }
    }
    return CDX_OK;
}

int cdx_trainer_save_checkpoint(const cdx_trainer *t, const char *dir, const char *extra_json, cdx_err *err)
{
    int rc = cdx_trainer_save(t, dir, err);
    if (rc)
        return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    cdx_st_writer *w = NULL;
    if ((rc = cdx_st_writer_new(&w, err)))
        return rc;
    char name[300];
    for (int64_t i = 0; !rc && i < t->n_params; i++)
        for (int which = 1; !rc && which <= 2; which++) {
            const cdx_train_param *p = &t->params[i];
            const uint64_t shape[2] = { (uint64_t)p->rows, (uint64_t)p->cols };
            snprintf(name, sizeof name, "%s%s", p->name, which == 1 ? ".exp_avg" : ".exp_avg_sq");
            rc = cdx_st_writer_add(w, name, CDX_TYPE_F32, (uint32_t)p->n_dims, shape, which == 1 ? p->m : p->v, err);
        }
    if (!rc)
        rc = cdx_st_writer_write(w, path, err);
    cdx_st_writer_free(w);
    if (rc)
        return rc;
    json_error_t je;
    json_t *o = extra_json ? json_loads(extra_json, 0, &je) : json_object();
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return cdx_err_set(err, CDX_EINVAL, "trainer state: not a JSON object");
    }
    json_object_set_new(o, "step", json_integer((json_int_t)t->step));
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    return write_json(path, o, err);
}

/* Each parameter's values from st (by its name + suffix) into dst (0: w, 1: m, 2: v); every one must be
 * there with its shape, and st may hold nothing else of ours. */
static int load_tensors(cdx_trainer *t, const char *path, int which, cdx_err *err)
{
    cdx_safetensors *st = NULL;
    int rc = cdx_st_open(path, &st, err);
    if (rc)
        return rc;
    char name[300];
    for (int64_t i = 0; i < t->n_params; i++) {
        cdx_train_param *p = &t->params[i];
        snprintf(name, sizeof name, "%s%s", p->name, which == 0 ? "" : which == 1 ? ".exp_avg" : ".exp_avg_sq");
        const cdx_st_tensor *x = cdx_st_find(st, name);
        const uint64_t n = (uint64_t)(p->rows * p->cols);
        if (!x) {
            rc = cdx_err_set(err, CDX_EINVAL, "%s: has no tensor %s (the training set-up's)", path, name);
            break;
        }
        uint64_t xn = 1;
        for (uint32_t d = 0; d < x->n_dims; d++)
            xn *= x->shape[d];
        const bool shape_ok = x->n_dims == (uint32_t)p->n_dims && x->shape[0] == (uint64_t)p->rows &&
                              (p->n_dims == 1 || x->shape[1] == (uint64_t)p->cols);
        if (!shape_ok || xn != n || (x->type != CDX_TYPE_F32 && x->type != CDX_TYPE_F16 && x->type != CDX_TYPE_BF16)) {
            rc = cdx_err_set(err, CDX_EINVAL, "%s: %s is %s [%llu%s%llu], expected F32 [%lld, %lld]", path, name,
                             x->dtype, (unsigned long long)x->shape[0], x->n_dims > 1 ? ", " : "",
                             x->n_dims > 1 ? (unsigned long long)x->shape[1] : 0ull, (long long)p->rows,
                             (long long)p->cols);
            break;
        }
        float *dst = which == 0 ? p->w : which == 1 ? p->m : p->v;
        if (x->type == CDX_TYPE_F32)
            memcpy(dst, x->data, n * sizeof(float));
        else
            cdx_type_get(x->type)->to_f32(x->data, dst, (int64_t)n);
    }
    /* an adapter tensor we have no place for: another target set or layer count */
    for (uint64_t i = 0; !rc && which == 0 && !t->o.full && i < st->n_tensors; i++) {
        bool ours = false;
        for (int64_t j = 0; j < t->n_params && !ours; j++)
            ours = !strcmp(t->params[j].name, st->tensors[i].name);
        if (!ours)
            rc = cdx_err_set(err, CDX_EINVAL, "%s: tensor %s is not one this training set-up has (targets, layers)",
                             path, st->tensors[i].name);
    }
    cdx_st_close(st);
    return rc;
}

int cdx_trainer_load_checkpoint(cdx_trainer *t, const char *dir, cdx_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, t->o.full ? "model.safetensors" : "adapter_model.safetensors");
    int rc = load_tensors(t, path, 0, err);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    struct stat sb;
    if (stat(path, &sb))
        return 0; /* an adapter alone (--init-adapter): the moments start at zero */
    if ((rc = load_tensors(t, path, 1, err)) || (rc = load_tensors(t, path, 2, err)))
        return rc;
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    json_t *s = o ? json_object_get(o, "step") : NULL;
    if (!s || !json_is_integer(s) || json_integer_value(s) < 0) {
        json_decref(o);
        return cdx_err_set(err, CDX_EFORMAT, "%s: no \"step\" (a non-negative integer)", path);
    }
    t->step = (int64_t)json_integer_value(s);
    json_decref(o);
    return 1;
}

/* --init-adapter / a LoRA checkpoint's adapter_config.json: r, lora_alpha, target_modules; fields the
 * caller set must agree. */
static int read_init_adapter(cdx_trainer *t, const char *dir, cdx_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    if (!c)
        return cdx_err_set(err, CDX_EFORMAT, "%s: %s", path, je.text);
    int rc = CDX_OK;
    static const char *const must_false[] = { "use_rslora", "use_dora", "fan_in_fan_out" };
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(c, must_false[i]);
        if (v && json_is_true(v)) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is set; caldrix trains plain LoRA only", path,
                             must_false[i]);
            goto done;
        }
    }
    json_t *r = json_object_get(c, "r"), *al = json_object_get(c, "lora_alpha"), *tm = json_object_get(c,
                                                                                                      "target_modules");
    if (!json_is_integer(r) || !json_is_number(al) || !json_is_array(tm)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: needs r (integer), lora_alpha (number) and target_modules (a list)",
                         path);
        goto done;
    }
    unsigned bits = 0;
    for (size_t i = 0; i < json_array_size(tm); i++) {
        const char *s = json_string_value(json_array_get(tm, i));
        unsigned b;
        if (!s || cdx_lora_targets_parse(s, &b, err)) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: target_modules[%zu] is not one of the decoder's linear "
                             "modules", path, i);
            goto done;
        }
        bits |= b;
    }
    const int64_t rv = (int64_t)json_integer_value(r);
    const double av = json_number_value(al);
    if ((t->o.lora_r && t->o.lora_r != rv) || (t->o.lora_alpha && t->o.lora_alpha != av) ||
        (t->o.lora_targets && t->o.lora_targets != bits)) {
        rc = cdx_err_set(err, CDX_EINVAL, "%s: the adapter has r %lld, alpha %g and its own target modules; the "
                         "options given differ", path, (long long)rv, av);
        goto done;
    }
    t->o.lora_r = rv;
    t->o.lora_alpha = av;
    t->o.lora_targets = bits;
done:
    json_decref(c);
    return rc;
}

/* ---- merging an adapter into a checkpoint (caldrix convert --merge-lora) ---- */

int cdx_lora_merge_checkpoint(const char *model_dir, const char *adapter, float scale, const char *out_dir,
                              cdx_err *err)
{
    cdx_model *m = NULL;
    cdx_lora *a = NULL;
    cdx_safetensors *st = NULL;
    cdx_st_writer *w = NULL;
    float **bufs = NULL;
    size_t n_bufs = 0;
    int rc = cdx_model_open(model_dir, NULL, &m, err);
    if (rc)
        return rc;
    if (m->gguf) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: --merge-lora writes a safetensors checkpoint and needs one "
                         "(a Hugging Face folder), not a GGUF file", model_dir);
        goto done;
    }
    if ((rc = cdx_lora_open(m, adapter, &a, err)) || (rc = cdx_st_open(model_dir, &st, err)) ||
        (rc = cdx_st_writer_new(&w, err)) || (rc = mkdir_p(out_dir, err)))
        goto done;
    if (!(bufs = calloc(st->n_tensors + 1, sizeof *bufs))) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    int64_t merged = 0;
    for (uint64_t i = 0; i < st->n_tensors; i++) {
        const cdx_st_tensor *x = &st->tensors[i];
        long long l = -1;
        char mod[64] = "";
        int target = -1;
        int off = 0;
        const size_t nl = strlen(x->name);
        if (sscanf(x->name, "model.layers.%lld.%n", &l, &off) == 1 && off > 0 && nl > (size_t)off + 7 &&
            !strcmp(x->name + nl - 7, ".weight") && nl - 7 - (size_t)off < sizeof mod && x->n_dims == 2) {
            memcpy(mod, x->name + off, nl - 7 - (size_t)off);
            mod[nl - 7 - (size_t)off] = 0;
            for (int k = 0; k < N_MOD; k++)
                if (!strcmp(mod, k_mod_path[k]))
                    target = k;
        }
        const void *data = x->data;
        if (target >= 0 && (x->type == CDX_TYPE_F32 || x->type == CDX_TYPE_F16 || x->type == CDX_TYPE_BF16)) {
            const int64_t rows = (int64_t)x->shape[0], cols = (int64_t)x->shape[1];
            float *f = malloc((size_t)(rows * cols) * sizeof *f);
            if (!f) {
                rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
                goto done;
            }
            bufs[n_bufs++] = f;
            if (x->type == CDX_TYPE_F32)
                memcpy(f, x->data, (size_t)(rows * cols) * sizeof *f);
            else
                cdx_type_get(x->type)->to_f32(x->data, f, rows * cols);
            if (cdx_lora_merge_into(a, scale, l, target, f, rows, cols) == 1) {
                merged++;
                if (x->type != CDX_TYPE_F32) /* back to the stored type, rounded to nearest even */
                    for (int64_t j = 0; j < rows * cols; j++) {
                        uint16_t h = x->type == CDX_TYPE_F16 ? cdx_f32_to_f16(f[j]) : cdx_f32_to_bf16(f[j]);
                        memcpy((uint16_t *)f + j, &h, 2);
                    }
                data = f;
            }
        }
        if ((rc = cdx_st_writer_add(w, x->name, x->type, x->n_dims, x->shape, data, err)))
            goto done;
    }
    cdx_lora_info info;
    cdx_lora_get_info(a, &info);
    if (merged != info.n_pairs) {
        rc = cdx_err_set(err, CDX_EINVAL, "%s: merged %lld of the adapter's %lld (layer, module) pairs; the "
                         "checkpoint's tensors do not hold the others", adapter, (long long)merged,
                         (long long)info.n_pairs);
        goto done;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if ((rc = cdx_st_writer_write(w, path, err)))
        goto done;
    static const char *const files[] = { "config.json", "generation_config.json", "tokenizer.json",
                                         "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                                         "chat_template.jinja", "vocab.json", "merges.txt" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char from[4200];
        snprintf(from, sizeof from, "%s/%s", st->dir, files[i]);
        struct stat sb;
        if (stat(from, &sb) || !S_ISREG(sb.st_mode))
            continue;
        snprintf(path, sizeof path, "%s/%s", out_dir, files[i]);
        if ((rc = copy_file(from, path, err)))
            goto done;
    }
done:
    for (size_t i = 0; i < n_bufs; i++)
        free(bufs[i]);
    free(bufs);
    cdx_st_writer_free(w);
    cdx_st_close(st);
    cdx_lora_close(a);
    cdx_model_close(m);
    return rc;
}
