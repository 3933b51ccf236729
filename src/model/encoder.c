/* BERT-like encoders (BertModel, XLMRobertaModel), in f32, following transformers' modeling_bert.py
 * as ../shared/fixtures/embed/README.md restates it:
 *   x = LN((word[id] + type[0]) + position[pos_offset + j])       (BertEmbeddings; XLM-R: offset pad + 1)
 *   per layer:  a = LN((Wo·attn(x) + bo) + x)                      (BertSelfOutput: post-LN)
 *               x = LN((W2·gelu(W1·a + b1) + b2) + a)              (BertIntermediate/BertOutput, exact erf GELU)
 *   attention: q/k/v biased, scale 1/sqrt(head_dim), every token of an input sees every token of its
 *   own input and nothing else (a batch needs no padding and no mask).
 * No KV cache and no prefix reuse: each input runs whole. Weights stay in the checkpoint's type
 * (F32/F16/BF16: exact products, f32 sums); vectors are f32 copies. */
#include "arch.h"
#include "ops.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cdx_mat q, k, v, o, fc1, fc2;            /* [E × E] ×4, [F × E], [E × F] */
    float *bq, *bk, *bv, *bo, *b1, *b2;      /* [E] ×4, [F], [E] */
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;    /* [E]: attention.output.LayerNorm, output.LayerNorm */
} enc_layer;

struct encoder_model {
    int64_t n_layer;
    float *pos;                              /* [n_pos × E] */
    float *type0;                            /* [E]: token_type_embeddings row 0 */
    float *ln_w, *ln_b;                      /* [E]: embeddings.LayerNorm */
    enc_layer *layers;
    cdx_mat *mats[6 * 1024];                 /* for model->mats (packing, sizes) */
};

void encoder_free(struct encoder_model *e)
{
    if (!e)
        return;
    for (int64_t l = 0; e->layers && l < e->n_layer; l++) {
        enc_layer *L = &e->layers[l];
        free(L->bq); free(L->bk); free(L->bv); free(L->bo); free(L->b1); free(L->b2);
        free(L->ln1_w); free(L->ln1_b); free(L->ln2_w); free(L->ln2_b);
    }
    free(e->layers);
    free(e->pos);
    free(e->type0);
    free(e->ln_w);
    free(e->ln_b);
    free(e);
}

/* A layer's tensors, one row each: the name stem under encoder.layer.N., and where it binds (a
 * linear layer's matrix and bias, or a LayerNorm's weight and bias). Dimensions: 'E' hidden, 'F'
 * intermediate. */
static const struct enc_role {
    const char *stem, *gguf;     /* transformers' and llama.cpp's (LLM_ARCH_BERT) names */
    bool linear;
    size_t w, b;
    char rows, cols;
} k_enc_layer[] = {
    { "attention.self.query", "attn_q", true, offsetof(enc_layer, q), offsetof(enc_layer, bq), 'E', 'E' },
    { "attention.self.key", "attn_k", true, offsetof(enc_layer, k), offsetof(enc_layer, bk), 'E', 'E' },
    { "attention.self.value", "attn_v", true, offsetof(enc_layer, v), offsetof(enc_layer, bv), 'E', 'E' },
    { "attention.output.dense", "attn_output", true, offsetof(enc_layer, o), offsetof(enc_layer, bo), 'E', 'E' },
    { "attention.output.LayerNorm", "attn_output_norm", false, offsetof(enc_layer, ln1_w), offsetof(enc_layer, ln1_b),
      'E', 0 },
    { "intermediate.dense", "ffn_up", true, offsetof(enc_layer, fc1), offsetof(enc_layer, b1), 'F', 'E' },
    { "output.dense", "ffn_down", true, offsetof(enc_layer, fc2), offsetof(enc_layer, b2), 'E', 'F' },
    { "output.LayerNorm", "layer_output_norm", false, offsetof(enc_layer, ln2_w), offsetof(enc_layer, ln2_b), 'E', 0 },
};
#define N_ENC_ROLES (sizeof k_enc_layer / sizeof k_enc_layer[0])

static const char *const k_enc_top[][2] = {
    { "embeddings.word_embeddings.weight", "token_embd.weight" },
    { "embeddings.position_embeddings.weight", "position_embd.weight" },
    { "embeddings.token_type_embeddings.weight", "token_types.weight" },
    { "embeddings.LayerNorm.weight", "token_embd_norm.weight" },
    { "embeddings.LayerNorm.bias", "token_embd_norm.bias" },
};

bool encoder_gguf_name(const char *hf, char *out, size_t cap)
{
    for (size_t i = 0; i < sizeof k_enc_top / sizeof k_enc_top[0]; i++)
        if (!strcmp(hf, k_enc_top[i][0])) {
            snprintf(out, cap, "%s", k_enc_top[i][1]);
            return true;
        }
    int l, n = 0;
    if (sscanf(hf, "encoder.layer.%d.%n", &l, &n) != 1 || n == 0 || l < 0)
        return false;
    const char *rest = hf + n;
    for (size_t i = 0; i < N_ENC_ROLES; i++) {
        const size_t k = strlen(k_enc_layer[i].stem);
        if (!strncmp(rest, k_enc_layer[i].stem, k) && (!strcmp(rest + k, ".weight") || !strcmp(rest + k, ".bias"))) {
            snprintf(out, cap, "blk.%d.%s%s", l, k_enc_layer[i].gguf, rest + k);
            return true;
        }
    }
    return false;
}

/* Tensors a BertModel checkpoint carries that the embedding pipeline never reads (sentence-transformers
 * pools last_hidden_state, never the tanh pooler), skipped by name. */
static bool skipped(const char *name)
{
    return !strncmp(name, "pooler.", 7) || !strcmp(name, "embeddings.position_ids");
}

void encoder_tensor_names(int64_t n_layer, bool gguf, void (*fn)(void *ctx, const char *name, bool required), void *ctx)
{
    for (size_t i = 0; i < sizeof k_enc_top / sizeof k_enc_top[0]; i++)
        fn(ctx, k_enc_top[i][gguf], true);
    char name[160];
    for (int64_t l = 0; l < n_layer && l < CDX_HF_MAX_LAYERS; l++)
        for (size_t i = 0; i < N_ENC_ROLES; i++)
            for (int wb = 0; wb < 2; wb++) {
                if (gguf)
                    snprintf(name, sizeof name, "blk.%lld.%s.%s", (long long)l, k_enc_layer[i].gguf, wb ? "bias" : "weight");
                else
                    snprintf(name, sizeof name, "encoder.layer.%lld.%s.%s", (long long)l, k_enc_layer[i].stem,
                             wb ? "bias" : "weight");
                fn(ctx, name, true);
            }
}

/* ---- binding ---- */

/* A tensor of either source, its shape in transformers' order (rows first). */
typedef struct {
    uint32_t type;
    const void *data;
} tview;

typedef struct {
    const cdx_safetensors *st;   /* a checkpoint, or */
    const cdx_gguf *g;           /* a GGUF file (llama.cpp's names, ne[] reversed) */
    bool *used;
    const char *dir, *arch;
    bool check_only;
} ebinder;

static int find(ebinder *b, const char *name, int n, const int64_t *dims, tview *out, cdx_err *err)
{
    int nd = 0;
    int64_t shape[4] = { 0 };
    uint32_t type;
    const void *data;
    const char *dtype;
    char gname[160];
    size_t idx;
    if (b->g) {
        const cdx_gguf_tensor *t = encoder_gguf_name(name, gname, sizeof gname) ? cdx_gguf_tensor_find(b->g, gname) : NULL;
        if (!t)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is missing; %s needs it", b->dir, gname, b->arch);
        nd = (int)t->n_dims;
        for (int i = 0; i < nd && i < 4; i++)
            shape[i] = (int64_t)t->ne[nd - 1 - i];
        type = t->type;
        data = t->data;
        dtype = cdx_type_name(t->type);
        idx = (size_t)(t - b->g->tensors);
        name = gname;
    } else {
        const cdx_st_tensor *t = cdx_st_find(b->st, name);
        if (!t)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is missing; %s needs it", b->dir, name, b->arch);
        nd = (int)t->n_dims;
        for (int i = 0; i < nd && i < 4; i++)
            shape[i] = (int64_t)t->shape[i];
        type = t->type;
        data = t->data;
        dtype = t->dtype;
        idx = (size_t)(t - b->st->tensors);
    }
    bool ok = nd == n;
    for (int i = 0; ok && i < n; i++)
        ok = shape[i] == dims[i];
    if (!ok) {
        char got[96] = "", want[96] = "";
        for (int i = 0; i < nd && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)shape[i]);
        for (int i = 0; i < n; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)dims[i]);
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has shape [%s]; %s needs [%s]", b->dir, name, got,
                           b->g ? "the file's hyperparameters" : "config.json", want);
    }
    const cdx_type_traits *tr = cdx_type_get(type);
    if (!tr || !tr->to_f32 || !cdx_matmul_supports(type))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s; an encoder reads F32, BF16 or F16",
                           b->dir, name, dtype);
    b->used[idx] = true;
    *out = (tview){ type, data };
    return CDX_OK;
}

/* n rows of cols values as f32 (a vector: rows 0) */
static int vec(ebinder *b, const char *name, int64_t rows, int64_t cols, float **out, cdx_err *err)
{
    tview t;
    const int64_t d2[2] = { rows, cols };
    int rc = rows ? find(b, name, 2, d2, &t, err) : find(b, name, 1, &cols, &t, err);
    if (rc)
        return rc;
    const int64_t n = (rows ? rows : 1) * cols;
    if (!(*out = calloc((size_t)n, sizeof(float))))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (!b->check_only)
        cdx_type_get(t.type)->to_f32(t.data, *out, n);
    return CDX_OK;
}

static int mat(ebinder *b, const char *name, int64_t rows, int64_t cols, cdx_mat *out, cdx_err *err)
{
    tview t;
    const int64_t d2[2] = { rows, cols };
    int rc = find(b, name, 2, d2, &t, err);
    if (rc)
        return rc;
    size_t rb;
    if ((rc = cdx_type_row_bytes(t.type, (uint64_t)cols, &rb, err)))
        return rc;
    *out = (cdx_mat){ .type = t.type, .data = t.data, .rows = rows, .cols = cols, .row_bytes = rb };
    return CDX_OK;
}

/* The tensors of either source into m->enc (hp filled and checked); each of the n_src source tensors
 * must be read (skip_ok: those the pipeline never reads, skipped by name). */
static int bind_tensors(cdx_model *m, ebinder *b, size_t n_src, const char *(*name_of)(const cdx_model *m, size_t i),
                        cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    const char *dir = b->dir;
    if (hp->n_head < 1 || hp->n_embd % hp->n_head || hp->n_embd / hp->n_head != hp->head_dim)
        return cdx_err_set(err, CDX_EFORMAT, "%s: hidden size %lld is not the head count %lld × head size", dir,
                           (long long)hp->n_embd, (long long)hp->n_head);
    if (hp->n_layer < 1 || hp->n_layer > 1024)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %lld layers; caldrix runs encoders of 1 to 1024 layers", dir,
                           (long long)hp->n_layer);
    if (hp->pos_offset >= hp->n_ctx_train)
        return cdx_err_set(err, CDX_EFORMAT, "%s: %lld positions leave none after pad_token_id + 1 = %lld", dir,
                           (long long)hp->n_ctx_train, (long long)hp->pos_offset);
    struct encoder_model *e = calloc(1, sizeof *e);
    b->used = calloc(n_src ? n_src : 1, sizeof *b->used);
    if (!e || !b->used) {
        free(e);
        free(b->used);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    m->enc = e;
    e->n_layer = hp->n_layer;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    char name[192];
    int rc = CDX_OK;
    if (!(e->layers = calloc((size_t)hp->n_layer, sizeof *e->layers))) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto out;
    }
    float *types = NULL;
    if ((rc = mat(b, "embeddings.word_embeddings.weight", hp->n_vocab, E, &m->tok_embd, err)) ||
        (rc = vec(b, "embeddings.position_embeddings.weight", hp->n_ctx_train, E, &e->pos, err)) ||
        (rc = vec(b, "embeddings.token_type_embeddings.weight", hp->n_type_vocab, E, &types, err)) ||
        (rc = vec(b, "embeddings.LayerNorm.weight", 0, E, &e->ln_w, err)) ||
        (rc = vec(b, "embeddings.LayerNorm.bias", 0, E, &e->ln_b, err)))
        goto out;
    e->type0 = types; /* row 0 is the first E values; every token has type 0 */
    size_t nm = 0;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        enc_layer *L = &e->layers[l];
        for (size_t i = 0; i < N_ENC_ROLES; i++) {
            const struct enc_role *r = &k_enc_layer[i];
            const int64_t rows = r->rows == 'F' ? F : E, cols = r->cols == 'F' ? F : E;
            char *base = (char *)L;
            snprintf(name, sizeof name, "encoder.layer.%lld.%s.weight", (long long)l, r->stem);
            if ((rc = r->linear ? mat(b, name, rows, cols, (cdx_mat *)(base + r->w), err)
                                : vec(b, name, 0, rows, (float **)(base + r->w), err)))
                goto out;
            if (r->linear)
                e->mats[nm++] = (cdx_mat *)(base + r->w);
            snprintf(name, sizeof name, "encoder.layer.%lld.%s.bias", (long long)l, r->stem);
            if ((rc = vec(b, name, 0, rows, (float **)(base + r->b), err)))
                goto out;
        }
    }
    for (size_t i = 0; i < n_src; i++)
        if (!b->used[i] && !skipped(name_of(m, i))) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is not part of a %s encoder (%lld layers); caldrix "
                             "refuses tensors it would not read", dir, name_of(m, i), b->arch, (long long)hp->n_layer);
            goto out;
        }
    if (!(m->mats = malloc((nm ? nm : 1) * sizeof *m->mats))) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(m->mats, e->mats, nm * sizeof *m->mats);
    m->n_mats = nm;
out:
    free(b->used);
    b->used = NULL;
    return rc;
}

static const char *st_name(const cdx_model *m, size_t i) { return m->st->tensors[i].name; }
static const char *gguf_name(const cdx_model *m, size_t i) { return m->gguf->tensors[i].name; }

int encoder_bind(cdx_model *m, const cdx_hf_config *cfg, const char *dir, cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    hp->encoder = true;
    hp->n_type_vocab = cfg->type_vocab_size;
    hp->pos_offset = cfg->pos_offset;
    hp->n_head_kv = hp->n_head;
    int rc = cdx_st_open(dir, &m->st, err);
    if (rc)
        return rc;
    ebinder b = { .st = m->st, .dir = dir, .arch = cfg->architecture, .check_only = m->check_only };
    return bind_tensors(m, &b, m->st->n_tensors, st_name, err);
}

/* llama.cpp's enum llama_pooling_type (include/llama.h): the GGUF key's values, and what caldrix
 * computes for each (-1: refused). */
static const struct {
    const char *name;
    int pooling; /* cdx_pooling, or -1 */
} k_llama_pooling[] = {
    [0] = { "none (a vector per token)", -1 }, [1] = { "mean", 1 /* CDX_POOL_MEAN */ },
    [2] = { "cls", 0 /* CDX_POOL_CLS */ },     [3] = { "last", 3 /* CDX_POOL_LAST */ },
    [4] = { "rank (a classification head)", -1 },
};

int gguf_read_pooling(cdx_model *m, const cdx_gguf *g, cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    const char *a = m->desc->gguf_name, *path = g->path;
    const bool enc = m->desc->encoder;
    uint64_t v;
    bool nrm;
    hp->gguf_normalize = cdx_gguf_get_bool(g, "caldrix.embedding.normalize", &nrm) && nrm;
    if (!cdx_gguf_find_arch(g, a, CDX_GK_POOLING_TYPE))
        return CDX_OK;
    if (!cdx_gguf_get_arch_u64(g, a, CDX_GK_POOLING_TYPE, &v) || v >= sizeof k_llama_pooling / sizeof *k_llama_pooling)
        return cdx_err_set(err, CDX_EFORMAT, "%s: %s.pooling_type is not one of llama.cpp's pooling types (0..4)", path, a);
    if (!enc && v == 0)
        return CDX_OK; /* none: a decoder's hidden states per token, i.e. nothing declared */
    if (!enc && v == 4) {
        /* llama.cpp's Qwen3-Reranker conversion (conversion/qwen.py Qwen3Model): cls.output.weight holds the
         * head's rows of the labels, scored by a softmax over them (llm_graph_context::build_pooling) */
        char key[128];
        cdx_gguf_key_name(CDX_GK_CLASSIFIER_OUTPUT_LABELS, a, key, sizeof key);
        const cdx_gguf_kv *kv = cdx_gguf_find(g, key);
        if (!kv || kv->val.type != CDX_GGUF_ARRAY || kv->val.arr_type != CDX_GGUF_STRING || kv->val.n != 2)
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.pooling_type is 4 (rank) but %s is %s; caldrix scores a "
                               "reranker by its two labels \"yes\" and \"no\"", path, a, key,
                               kv ? "not an array of two strings" : "missing");
        hp->cls_yes = hp->cls_no = -1;
        for (int i = 0; i < 2; i++) {
            const cdx_gguf_str *s = &kv->val.str_items[i];
            if (s->len == 3 && !memcmp(s->ptr, "yes", 3))
                hp->cls_yes = i;
            else if (s->len == 2 && !memcmp(s->ptr, "no", 2))
                hp->cls_no = i;
        }
        if (hp->cls_yes < 0 || hp->cls_no < 0)
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s does not hold the labels \"yes\" and \"no\"", path, key);
        hp->gguf_rank = true;
        hp->n_cls_out = 2;
        return CDX_OK;
    }
    if (k_llama_pooling[v].pooling < 0)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s.pooling_type is %llu, %s; caldrix pools an encoder by "
                           "mean (1), cls (2) or last (3)", path, a, (unsigned long long)v, k_llama_pooling[v].name);
    hp->gguf_pooling = 1 + k_llama_pooling[v].pooling;
    return CDX_OK;
}

int encoder_bind_gguf(cdx_model *m, const cdx_gguf *g, cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    const char *a = m->desc->gguf_name, *path = g->path;
    hp->encoder = true;
    hp->n_head_kv = hp->n_head;
    hp->pos_offset = 0; /* llama.cpp's XLM-R conversion drops the position rows before pad_token_id + 1 */
    double f;
    hp->rms_eps = cdx_gguf_get_arch_f64(g, a, CDX_GK_LN_EPS, &f) ? (float)f : 1e-12f;
    bool causal;
    if (cdx_gguf_get_arch_bool(g, a, CDX_GK_CAUSAL, &causal) && causal)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s.attention.causal is true; caldrix runs %s as a bidirectional "
                           "encoder only", path, a, a);
    int rc = gguf_read_pooling(m, g, err);
    if (rc)
        return rc;
    const cdx_gguf_tensor *tt = cdx_gguf_tensor_find(g, "token_types.weight");
    hp->n_type_vocab = tt && tt->n_dims == 2 ? (int64_t)tt->ne[1] : 0;
    if (hp->n_type_vocab < 1)
        return cdx_err_set(err, CDX_EFORMAT, "%s: token_types.weight is missing or not a matrix; %s needs it", path, a);
    ebinder b = { .g = g, .dir = path, .arch = a, .check_only = m->check_only };
    return bind_tensors(m, &b, g->n_tensors, gguf_name, err);
}

/* ---- the pass ---- */

/* The token-wise steps between the matmuls, dealt over the pool in runs of tokens: every value is
 * computed by the same operations whichever thread computes it. */
enum { EW_EMBED, EW_BIAS3, EW_RESID_LN, EW_GELU };
typedef struct {
    int op;
    int64_t n, d;
    const cdx_model *m;
    const cdx_kernels *K;        /* cdx_add's and cdx_gelu's set (the same bits on every set) */
    const int32_t *tok;
    const int64_t *pos;          /* EW_EMBED: each token's position id */
    float *y[3];                 /* EW_EMBED: x; EW_BIAS3: q, k, v; EW_RESID_LN: out; EW_GELU: fc1's output */
    const float *x, *res;        /* EW_RESID_LN: the sublayer's output and the residual */
    const float *w, *b[3];       /* EW_RESID_LN: LN weight, [0] the sublayer's bias, [1] LN bias */
    float *tmp;                  /* EW_RESID_LN, EW_EMBED: [threads][d] */
    float eps;
} ew_job;

static void ew_work(void *arg, int ith, int nth)
{
    const ew_job *j = arg;
    const int64_t d = j->d;
    const cdx_kernels *K = j->K;
    float *tmp = j->tmp ? j->tmp + (size_t)ith * (size_t)d : NULL;
    /* the sums through cdx_add (SIMD, each value's one rounded add): the bits of the plain loops */
    for (int64_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++) {
        if (j->op == EW_EMBED) {
            const struct encoder_model *e = j->m->enc;
            const cdx_mat *w = &j->m->tok_embd;
            cdx_type_get(w->type)->to_f32((const uint8_t *)w->data + (size_t)j->tok[i] * w->row_bytes, tmp, d);
            cdx_add(K, tmp, e->type0, d); /* (word + type) + position */
            cdx_add(K, tmp, e->pos + (size_t)j->pos[i] * (size_t)d, d);
            model_layernorm(j->y[0] + i * d, tmp, e->ln_w, e->ln_b, d, j->eps);
        } else if (j->op == EW_BIAS3) {
            for (int m = 0; m < 3; m++)
                cdx_add(K, j->y[m] + i * d, j->b[m], d);
        } else if (j->op == EW_RESID_LN) {
            memcpy(tmp, j->x + i * d, (size_t)d * sizeof *tmp); /* (sublayer + bias) + residual */
            cdx_add(K, tmp, j->b[0], d);
            cdx_add(K, tmp, j->res + i * d, d);
            model_layernorm(j->y[0] + i * d, tmp, j->w, j->b[1], d, j->eps);
        } else {
            /* torch's gelu (approximate="none"): x · 0.5 · (1 + erf(x / √2)) */
            float *y = j->y[0] + i * d;
            cdx_add(K, y, j->b[0], d);
            cdx_gelu(K, y, d);
        }
    }
}

static void ew_run(cdx_pool *pool, const cdx_kernels *K, ew_job j)
{
    j.K = K;
    cdx_pool_run(pool, ew_work, &j);
}

bool cdx_model_is_encoder(const cdx_model *m) { return m && m->enc; }

static int encode_run(cdx_forward_ctx *fc, const int32_t *tokens, const int64_t *lens, int n_in, float *hidden,
                      cdx_err *err)
{
    const cdx_model *m = forward_ctx_model(fc);
    const struct encoder_model *e = m->enc;
    const cdx_hparams *hp = &m->hp;
    if (!e)
        return cdx_err_set(err, CDX_EINVAL, "the model is not an encoder (%s): it is run by the decoder's pass",
                           hp->arch_name);
    if (n_in < 1)
        return cdx_err_set(err, CDX_EINVAL, "no inputs to encode");
    int64_t N = 0;
    const int64_t max_len = hp->n_ctx_train - hp->pos_offset;
    for (int i = 0; i < n_in; i++) {
        if (lens[i] < 1 || lens[i] > max_len)
            return cdx_err_set(err, CDX_EINVAL, "input %d has %lld tokens; the model takes 1..%lld (its %lld positions)", i,
                               (long long)lens[i], (long long)max_len, (long long)hp->n_ctx_train);
        for (int64_t t = 0; t < lens[i]; t++)
            if (tokens[N + t] < 0 || tokens[N + t] >= hp->n_vocab)
                return cdx_err_set(err, CDX_EINVAL, "input %d, token %lld: id %d is outside the vocabulary (0..%lld)", i,
                                   (long long)t, tokens[N + t], (long long)hp->n_vocab - 1);
        N += lens[i];
    }
    const cdx_kernels *K = cdx_forward_ctx_kernels(fc);
    cdx_pool *pool = cdx_forward_ctx_pool(fc);
    const int threads = cdx_pool_size(pool);
    const int64_t E = hp->n_embd, F = hp->n_ff, H = hp->n_head, hd = hp->head_dim;
    size_t ws_bytes = 0;
    for (size_t i = 0; i < m->n_mats; i++) {
        size_t bb = cdx_matmul_ws_bytes(m->mats[i], N, threads);
        ws_bytes = bb > ws_bytes ? bb : ws_bytes;
    }
    /* one block for the pass, kept by fc between calls (forward_ctx_scratch): a fresh malloc of these
     * MiBs each call cost page faults in the matmuls (~4 % of a 128-token call's profile on a VM) */
    const size_t fe = (size_t)(N * E) * sizeof(float);
    const size_t sz[12] = { fe, fe, fe, fe, fe, fe, (size_t)(N * F) * sizeof(float),
                            (size_t)threads * (size_t)E * sizeof(float), (size_t)N * sizeof(int64_t),
                            (size_t)n_in * 2 * sizeof(void *), (size_t)N * sizeof(cdx_attn_row), ws_bytes };
    size_t off[12], total = 0;
    for (int i = 0; i < 12; i++) {
        off[i] = total;
        total += (sz[i] + 63) & ~(size_t)63;
    }
    uint8_t *buf = forward_ctx_scratch(fc, total);
    if (!buf)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory to encode %lld tokens (%zu bytes of scratch)", (long long)N,
                           total);
    float *x = (float *)(buf + off[0]), *h = (float *)(buf + off[1]), *q = (float *)(buf + off[2]);
    float *k = (float *)(buf + off[3]), *v = (float *)(buf + off[4]), *a = (float *)(buf + off[5]);
    float *big = (float *)(buf + off[6]), *tmp = (float *)(buf + off[7]);
    int64_t *pos = (int64_t *)(buf + off[8]);
    const void **kt = (const void **)(buf + off[9]);
    cdx_attn_row *rows = (cdx_attn_row *)(buf + off[10]);
    void *ws = buf + off[11];
    int rc = CDX_OK;
    /* every input's keys are its own rows of k and v: a block table of one block per input, as long
     * as any input can be (the block size only places the keys, it does not change the result) */
    const cdx_attn_shape ash = { .n_head = (int)H, .n_kv_head = (int)H, .head_dim = (int)hd, .kv_stride = E,
                                 .block = hp->n_ctx_train, .scale = 1.0f / sqrtf((float)hd), .kv_type = 0 };
    for (int i = 0, t0 = 0; i < n_in; t0 += (int)lens[i], i++) {
        kt[2 * i] = k + (size_t)t0 * (size_t)E;
        kt[2 * i + 1] = v + (size_t)t0 * (size_t)E;
        for (int64_t t = 0; t < lens[i]; t++) {
            pos[t0 + t] = hp->pos_offset + t;
            rows[t0 + t] = (cdx_attn_row){ .q = q + (t0 + t) * E, .k = &kt[2 * i], .v = &kt[2 * i + 1], .lo = 0,
                                          .hi = lens[i] - 1, .out = a + (t0 + t) * E, .off = 0 };
        }
    }
    const float eps = hp->rms_eps;
    ew_run(pool, K, (ew_job){ .op = EW_EMBED, .n = N, .d = E, .m = m, .tok = tokens, .pos = pos, .y = { x }, .tmp = tmp,
                           .eps = eps });
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const enc_layer *L = &e->layers[l];
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->q, &L->k, &L->v }, 3, x, N, (float *[]){ q, k, v }, ws);
        ew_run(pool, K, (ew_job){ .op = EW_BIAS3, .n = N, .d = E, .y = { q, k, v }, .b = { L->bq, L->bk, L->bv } });
        if ((rc = cdx_attn(K, pool, &ash, rows, N, err)))
            goto out;
        cdx_matmul(K, pool, &L->o, a, N, h, ws);
        /* a = LN((Wo·attn + bo) + x), into q (free until the next layer) */
        ew_run(pool, K, (ew_job){ .op = EW_RESID_LN, .n = N, .d = E, .y = { q }, .x = h, .res = x, .w = L->ln1_w,
                               .b = { L->bo, L->ln1_b }, .tmp = tmp, .eps = eps });
        cdx_matmul(K, pool, &L->fc1, q, N, big, ws);
        ew_run(pool, K, (ew_job){ .op = EW_GELU, .n = N, .d = F, .y = { big }, .b = { L->b1 } });
        cdx_matmul(K, pool, &L->fc2, big, N, h, ws);
        float *out_l = l + 1 == hp->n_layer ? hidden : x;
        ew_run(pool, K, (ew_job){ .op = EW_RESID_LN, .n = N, .d = E, .y = { out_l }, .x = h, .res = q, .w = L->ln2_w,
                               .b = { L->b2, L->ln2_b }, .tmp = tmp, .eps = eps });
    }
out:
    return rc;
}

int cdx_encode(cdx_forward_ctx *fc, const int32_t *tokens, const int64_t *lens, int n_in, float *hidden, cdx_err *err)
{
    const cdx_model *m = forward_ctx_model(fc);
    model_use_begin(m); /* as a forward pass: no background pack is installed under it */
    const int rc = encode_run(fc, tokens, lens, n_in, hidden, err);
    model_use_end(m);
    return rc;
}
