/* The Idefics3 (SmolVLM) vision tower and connector, in f32, following transformers'
 * modeling_idefics3.py as ../shared/tools/fixtures/hf/hf_reference_idefics3.py restates it:
 *   x = conv2d(pixels, patch, stride = patch) + bias     (a matmul over row-major patches)
 *   x += position_embedding[pos]                          (bucketized ids; full tiles: 0..n-1)
 *   per layer: x += out(attn(LN1(x)));  x += fc2(gelu_tanh(fc1(LN2(x))))   (attention non-causal)
 *   x = post_layernorm(x)
 *   pixel shuffle by s: token (R, C) = patches (sR + b, sC + a), feature b·s·D + a·D + d
 *   features = x · projᵀ                                  (no bias)
 * Weights stay in the checkpoint's type (F32/BF16/F16: exact products, f32 sums); vectors are f32 copies. */
#include "arch.h"
#include "ops.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;  /* [D] */
    cdx_mat q, k, v, o;                    /* [D × D] */
    float *bq, *bk, *bv, *bo;              /* [D] */
    cdx_mat fc1, fc2;                      /* [F × D], [D × F] */
    float *b1, *b2;                        /* [F], [D] */
} vision_layer;

struct vision_model {
    int64_t D, F, n_layer, n_head, patch, image_size, side, scale, n_embd;
    float eps;
    int32_t image_token_id;
    cdx_mat patch_w;                       /* [D × 3·P·P] (conv weight [D][3][P][P]) */
    float *patch_b;                        /* [D] */
    float *pos;                            /* [side² × D] */
    int64_t *pos_ids;                      /* [side²]: the bucketized position of each patch */
    vision_layer *layers;
    float *post_w, *post_b;                /* [D] */
    cdx_mat proj;                          /* [n_embd × D·s²] */
};

void vision_free(struct vision_model *v)
{
    if (!v)
        return;
    for (int64_t l = 0; v->layers && l < v->n_layer; l++) {
        vision_layer *L = &v->layers[l];
        free(L->ln1_w); free(L->ln1_b); free(L->ln2_w); free(L->ln2_b);
        free(L->bq); free(L->bk); free(L->bv); free(L->bo); free(L->b1); free(L->b2);
    }
    free(v->layers);
    free(v->patch_b);
    free(v->pos);
    free(v->pos_ids);
    free(v->post_w);
    free(v->post_b);
    free(v);
}

/* ---- the tensor names (the loader's, for inspect) ---- */

/* A layer's tensors, one row each: the name stem, and where it binds (a matrix and its bias, or a
 * LayerNorm's weight and bias). Dimensions: 'D' hidden, 'F' feed-forward. */
static const struct vis_role {
    const char *stem;
    bool linear;
    size_t mat, w, b;          /* offsetof in vision_layer (mat: linear only) */
    char rows, cols;
} k_vis_layer[] = {
    { "self_attn.q_proj", true, offsetof(vision_layer, q), 0, offsetof(vision_layer, bq), 'D', 'D' },
    { "self_attn.k_proj", true, offsetof(vision_layer, k), 0, offsetof(vision_layer, bk), 'D', 'D' },
    { "self_attn.v_proj", true, offsetof(vision_layer, v), 0, offsetof(vision_layer, bv), 'D', 'D' },
    { "self_attn.out_proj", true, offsetof(vision_layer, o), 0, offsetof(vision_layer, bo), 'D', 'D' },
    { "mlp.fc1", true, offsetof(vision_layer, fc1), 0, offsetof(vision_layer, b1), 'F', 'D' },
    { "mlp.fc2", true, offsetof(vision_layer, fc2), 0, offsetof(vision_layer, b2), 'D', 'F' },
    { "layer_norm1", false, 0, offsetof(vision_layer, ln1_w), offsetof(vision_layer, ln1_b), 'D', 0 },
    { "layer_norm2", false, 0, offsetof(vision_layer, ln2_w), offsetof(vision_layer, ln2_b), 'D', 0 },
};

void vision_tensor_names(int64_t n_layer, void (*fn)(void *ctx, const char *name, bool required), void *ctx)
{
    static const char *const k_top[] = {
        "model.vision_model.embeddings.patch_embedding.weight", "model.vision_model.embeddings.patch_embedding.bias",
        "model.vision_model.embeddings.position_embedding.weight", "model.vision_model.post_layernorm.weight",
        "model.vision_model.post_layernorm.bias", "model.connector.modality_projection.proj.weight",
    };
    for (size_t i = 0; i < sizeof k_top / sizeof k_top[0]; i++)
        fn(ctx, k_top[i], true);
    char name[160];
    for (int64_t l = 0; l < n_layer && l < 4096; l++)
        for (size_t i = 0; i < sizeof k_vis_layer / sizeof k_vis_layer[0]; i++)
            for (int wb = 0; wb < 2; wb++) {
                snprintf(name, sizeof name, "model.vision_model.encoder.layers.%lld.%s.%s", (long long)l,
                         k_vis_layer[i].stem, wb ? "bias" : "weight");
                fn(ctx, name, true);
            }
}

/* ---- binding ---- */

typedef struct {
    const cdx_safetensors *st;
    bool *used;
    const char *dir;
    bool check_only;        /* cdx_model_check: no tensor's data is read (vectors are zeros) */
} vbinder;

/* A tensor of exactly the shape dims[0..n) (safetensors order). */
static int find(vbinder *b, const char *name, int n, const int64_t *dims, const cdx_st_tensor **out, cdx_err *err)
{
    const cdx_st_tensor *t = cdx_st_find(b->st, name);
    if (!t)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is missing; the idefics3 architecture needs it", b->dir,
                           name);
    bool ok = (int)t->n_dims == n;
    for (int i = 0; ok && i < n; i++)
        ok = (int64_t)t->shape[i] == dims[i];
    if (!ok) {
        char got[96] = "", want[96] = "";
        for (uint32_t i = 0; i < t->n_dims && i < 8; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "", (unsigned long long)t->shape[i]);
        for (int i = 0; i < n; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)dims[i]);
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has shape [%s]; the vision config needs [%s]", b->dir, name,
                           got, want);
    }
    const cdx_type_traits *tr = cdx_type_get(t->type);
    if (!tr || !tr->to_f32 || !cdx_matmul_supports(t->type))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s; the vision tower reads F32, BF16 or F16",
                           b->dir, name, cdx_type_name(t->type));
    b->used[t - b->st->tensors] = true;
    *out = t;
    return CDX_OK;
}

static int vec(vbinder *b, const char *name, int64_t n, float **out, cdx_err *err)
{
    const cdx_st_tensor *t;
    int rc = find(b, name, 1, &n, &t, err);
    if (rc)
        return rc;
    if (!(*out = b->check_only ? calloc((size_t)n, sizeof(float)) : malloc((size_t)n * sizeof(float))))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (!b->check_only)
        cdx_type_get(t->type)->to_f32(t->data, *out, n);
    return CDX_OK;
}

/* rows × cols; dims4: a conv weight [rows][c][p][p] read as rows × (c·p·p) */
static int mat(vbinder *b, const char *name, int64_t rows, int64_t cols, const int64_t *dims4, cdx_mat *out, cdx_err *err)
{
    const cdx_st_tensor *t;
    const int64_t d2[2] = { rows, cols };
    int rc = find(b, name, dims4 ? 4 : 2, dims4 ? dims4 : d2, &t, err);
    if (rc)
        return rc;
    size_t rb;
    if ((rc = cdx_type_row_bytes(t->type, (uint64_t)cols, &rb, err)))
        return rc;
    *out = (cdx_mat){ .type = t->type, .data = t->data, .rows = rows, .cols = cols, .row_bytes = rb };
    return CDX_OK;
}

/* Idefics3VisionEmbeddings' position ids for a full tile of side × side patches (current
 * transformers, PR #41374): fractional = clamp(i · f32(1/nb), max 1 - 1e-6) in float32;
 * bucketize(fractional, arange(1/side, 1, 1/side), right=True); id = bh · side + bw. arange's
 * values are start + i·step computed in double and stored as float32, as torch does on the CPU. */
static void position_ids(int64_t side, int64_t *ids)
{
    const double step = 1.0 / (double)side;
    const int64_t n_bound = (int64_t)ceil((1.0 - step) / step);
    int64_t bucket[4096];
    const float inv = 1.0f / (float)side;
    for (int64_t i = 0; i < side; i++) {
        float f = (float)i * inv;
        const float cap = (float)(1.0 - 1e-6);
        f = f > cap ? cap : f;
        int64_t k = 0;
        for (int64_t j = 0; j < n_bound; j++)
            k += (float)(step + (double)j * step) <= f; /* right=True: boundaries <= value */
        bucket[i] = k;
    }
    for (int64_t y = 0; y < side; y++)
        for (int64_t x = 0; x < side; x++)
            ids[y * side + x] = bucket[y] * side + bucket[x];
}

int vision_bind(cdx_model *m, const cdx_hf_config *cfg, const cdx_safetensors *st, bool *used, cdx_err *err)
{
    const cdx_hf_vision *vc = &cfg->vision;
    if (!vc->present)
        return cdx_err_set(err, CDX_EFORMAT, "%s: config.json has no vision_config", st->dir);
    struct vision_model *v = calloc(1, sizeof *v);
    if (!v)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    m->vision = v;
    v->D = vc->hidden_size;
    v->F = vc->intermediate_size;
    v->n_layer = vc->n_layers;
    v->n_head = vc->n_heads;
    v->patch = vc->patch_size;
    v->image_size = vc->image_size;
    v->side = vc->image_size / vc->patch_size;
    v->scale = vc->scale_factor;
    v->eps = (float)vc->layer_norm_eps;
    v->n_embd = cfg->hidden_size;
    if (vc->image_token_id >= cfg->vocab_size)
        return cdx_err_set(err, CDX_EFORMAT, "%s: image_token_id %lld is outside the vocabulary (%lld)", st->dir,
                           (long long)vc->image_token_id, (long long)cfg->vocab_size);
    if (v->side > 4096 || v->D / v->n_head > 512)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: vision_config: %lld patches per side, head size %lld; caldrix "
                           "takes up to 4096 and 512", st->dir, (long long)v->side, (long long)(v->D / v->n_head));
    v->image_token_id = (int32_t)vc->image_token_id;
    vbinder b = { st, used, st->dir, m->check_only };
    const int64_t D = v->D, P = v->patch, n_pos = v->side * v->side, s2 = v->scale * v->scale;
    const int64_t conv[4] = { D, 3, P, P }, posd[2] = { n_pos, D };
    const char *pre = "model.vision_model.";
    char name[192];
    int rc;
    snprintf(name, sizeof name, "%sembeddings.patch_embedding.weight", pre);
    if ((rc = mat(&b, name, D, 3 * P * P, conv, &v->patch_w, err)))
        return rc;
    snprintf(name, sizeof name, "%sembeddings.patch_embedding.bias", pre);
    if ((rc = vec(&b, name, D, &v->patch_b, err)))
        return rc;
    const cdx_st_tensor *pt;
    snprintf(name, sizeof name, "%sembeddings.position_embedding.weight", pre);
    if ((rc = find(&b, name, 2, posd, &pt, err)))
        return rc;
    v->pos = calloc((size_t)(n_pos * D), sizeof(float));
    v->pos_ids = malloc((size_t)n_pos * sizeof *v->pos_ids);
    v->layers = calloc((size_t)v->n_layer, sizeof *v->layers);
    if (!v->pos || !v->pos_ids || !v->layers)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (!m->check_only)
        cdx_type_get(pt->type)->to_f32(pt->data, v->pos, n_pos * D);
    position_ids(v->side, v->pos_ids);
    for (int64_t l = 0; l < v->n_layer; l++) {
        vision_layer *L = &v->layers[l];
        for (size_t i = 0; i < sizeof k_vis_layer / sizeof k_vis_layer[0]; i++) {
            const struct vis_role *r = &k_vis_layer[i];
            const int64_t rows = r->rows == 'F' ? v->F : D, cols = r->cols == 'F' ? v->F : D;
            char *base = (char *)L;
            snprintf(name, sizeof name, "%sencoder.layers.%lld.%s.weight", pre, (long long)l, r->stem);
            if ((rc = r->linear ? mat(&b, name, rows, cols, NULL, (cdx_mat *)(base + r->mat), err)
                                : vec(&b, name, rows, (float **)(base + r->w), err)))
                return rc;
            snprintf(name, sizeof name, "%sencoder.layers.%lld.%s.bias", pre, (long long)l, r->stem);
            if ((rc = vec(&b, name, rows, (float **)(base + r->b), err)))
                return rc;
        }
    }
    snprintf(name, sizeof name, "%spost_layernorm.weight", pre);
    if ((rc = vec(&b, name, D, &v->post_w, err)))
        return rc;
    snprintf(name, sizeof name, "%spost_layernorm.bias", pre);
    if ((rc = vec(&b, name, D, &v->post_b, err)))
        return rc;
    return mat(&b, "model.connector.modality_projection.proj.weight", v->n_embd, D * s2, NULL, &v->proj, err);
}

/* ---- the pass ---- */

static inline float gelu_tanh(float x)
{
    /* torch's gelu(approximate="tanh"): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) */
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static void add_bias(float *y, const float *b, int64_t n, int64_t d)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++)
            y[i * d + j] += b[j];
}

/* The token-wise steps between the matmuls, dealt over the pool in runs of tokens: every value is
 * computed by the same operations whichever thread computes it. */
enum { EW_LN, EW_BIAS3, EW_RESID, EW_GELU };
typedef struct {
    int op;
    int64_t n, d;          /* tokens, values per token */
    float *y[3];           /* EW_LN: out; EW_BIAS3: q, k, v; EW_RESID: x; EW_GELU: the fc1 output */
    const float *x;        /* EW_LN: in; EW_RESID: the sublayer's output */
    const float *w, *b[3]; /* EW_LN: weight, bias; else the biases */
    float eps;
} ew_job;

static void ew_work(void *arg, int ith, int nth)
{
    const ew_job *j = arg;
    const int64_t d = j->d;
    for (int64_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++) {
        if (j->op == EW_LN) {
            model_layernorm(j->y[0] + i * d, j->x + i * d, j->w, j->b[0], d, j->eps);
        } else if (j->op == EW_BIAS3) {
            for (int m = 0; m < 3; m++)
                add_bias(j->y[m] + i * d, j->b[m], 1, d);
        } else if (j->op == EW_RESID) {
            for (int64_t c = 0; c < d; c++)
                j->y[0][i * d + c] += j->x[i * d + c] + j->b[0][c];
        } else {
            for (int64_t c = 0; c < d; c++)
                j->y[0][i * d + c] = gelu_tanh(j->y[0][i * d + c] + j->b[0][c]);
        }
    }
}

static void ew_run(cdx_pool *pool, ew_job j) { cdx_pool_run(pool, ew_work, &j); }

bool cdx_model_vision(const cdx_model *m, cdx_vision_info *out)
{
    const struct vision_model *v = m ? m->vision : NULL;
    if (v && out)
        *out = (cdx_vision_info){ .image_size = v->image_size,
                                  .tokens_per_tile = (v->side / v->scale) * (v->side / v->scale),
                                  .n_embd = v->n_embd, .image_token_id = v->image_token_id };
    return v != NULL;
}

static int encode_tiles(cdx_forward_ctx *fc, const struct vision_model *v, const float *pixels, int64_t n_tiles,
                        float *out, cdx_err *err);

/* Tiles go through in groups of TILE_GROUP: every row's sums run in the same order whatever the
 * group (the kernels are batch invariant), and the scratch stays at a few tiles' worth. */
#define TILE_GROUP 4

static int vision_encode_run(cdx_forward_ctx *fc, const float *pixels, int64_t n_tiles, float *out, cdx_err *err){
    const cdx_model *m = forward_ctx_model(fc);
    const struct vision_model *v = m->vision;
    if (!v)
        return cdx_err_set(err, CDX_EINVAL, "the model has no vision tower (it takes no images)");
    if (n_tiles < 1 || n_tiles > 4096)
        return cdx_err_set(err, CDX_EINVAL, "%lld image tiles; expected 1..4096", (long long)n_tiles);
    const size_t tile_px = (size_t)(3 * v->image_size * v->image_size);
    const size_t tile_out = (size_t)((v->side / v->scale) * (v->side / v->scale) * v->n_embd);
    for (int64_t t = 0; t < n_tiles; t += TILE_GROUP) {
        const int64_t n = n_tiles - t < TILE_GROUP ? n_tiles - t : TILE_GROUP;
        int rc = encode_tiles(fc, v, pixels + (size_t)t * tile_px, n, out + (size_t)t * tile_out, err);
        if (rc)
            return rc;
    }
    return CDX_OK;
}

static int encode_tiles(cdx_forward_ctx *fc, const struct vision_model *v, const float *pixels, int64_t n_tiles,
                        float *out, cdx_err *err)
{
    const cdx_kernels *K = cdx_forward_ctx_kernels(fc);
    cdx_pool *pool = cdx_forward_ctx_pool(fc);
    const int64_t D = v->D, F = v->F, P = v->patch, S = v->image_size, side = v->side, T = side * side;
    const int64_t N = n_tiles * T, hd = D / v->n_head, s = v->scale, g = side / s, nt = g * g, Ds = D * s * s;
    const int threads = cdx_pool_size(pool);
    size_t ws_bytes = 0;
    const cdx_mat *all[] = { &v->patch_w, &v->proj };
    for (int i = 0; i < 2; i++) {
        size_t b = cdx_matmul_ws_bytes(all[i], N, threads);
        ws_bytes = b > ws_bytes ? b : ws_bytes;
    }
    for (int64_t l = 0; l < v->n_layer; l++) {
        const cdx_mat *lm[] = { &v->layers[l].q, &v->layers[l].k, &v->layers[l].v, &v->layers[l].o,
                                &v->layers[l].fc1, &v->layers[l].fc2 };
        for (int i = 0; i < 6; i++) {
            size_t b = cdx_matmul_ws_bytes(lm[i], N, threads);
            ws_bytes = b > ws_bytes ? b : ws_bytes;
        }
    }
    const int64_t wide = 3 * P * P > F ? (3 * P * P > Ds ? 3 * P * P : Ds) : (F > Ds ? F : Ds);
    float *x = malloc((size_t)(N * D) * sizeof(float));
    float *h = malloc((size_t)(N * D) * sizeof(float));
    float *q = malloc((size_t)(N * D) * sizeof(float));
    float *k = malloc((size_t)(N * D) * sizeof(float));
    float *vv = malloc((size_t)(N * D) * sizeof(float));
    float *a = malloc((size_t)(N * D) * sizeof(float));
    float *big = malloc((size_t)(N * wide) * sizeof(float));
    /* attention reads K and V head by head: [tile][head][patch][hd], each head's keys one contiguous
     * stretch (in the [patch][D] layout one head's keys lie 4·D bytes apart, a TLB miss and a cache
     * line per key) */
    float *kh = malloc((size_t)(N * D) * sizeof(float));
    float *vh = malloc((size_t)(N * D) * sizeof(float));
    cdx_attn_row *rows = malloc((size_t)(N * v->n_head) * sizeof *rows);
    void *ws = malloc(ws_bytes ? ws_bytes : 1);
    int rc = CDX_OK;
    if (!x || !h || !q || !k || !vv || !a || !big || !kh || !vh || !rows || !ws) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory for the vision tower over %lld tiles", (long long)n_tiles);
        goto out;
    }
    /* patches, row-major per tile: [c][y][x] of each P × P patch */
    for (int64_t t = 0; t < n_tiles; t++)
        for (int64_t py = 0; py < side; py++)
            for (int64_t px = 0; px < side; px++) {
                float *dst = big + ((t * T) + py * side + px) * 3 * P * P;
                for (int64_t c = 0; c < 3; c++)
                    for (int64_t y = 0; y < P; y++)
                        memcpy(dst + (c * P + y) * P, pixels + ((t * 3 + c) * S + py * P + y) * S + px * P,
                               (size_t)P * sizeof(float));
            }
    cdx_matmul(K, pool, &v->patch_w, big, N, x, ws);
    /* torch adds the bias inside the conv, then the position embedding: (conv + b) + pos */
    for (int64_t i = 0; i < N; i++) {
        const float *pe = v->pos + v->pos_ids[i % T] * D;
        for (int64_t d = 0; d < D; d++)
            x[i * D + d] = (x[i * D + d] + v->patch_b[d]) + pe[d];
    }
    /* one head per row: row (tile t, head hh, patch i) reads its head's K/V at kh + t·T·D + hh·T·hd */
    const int64_t H = v->n_head;
    const cdx_attn_shape ash = { .n_head = 1, .n_kv_head = 1, .head_dim = (int)hd, .kv_stride = hd, .block = T,
                                 .scale = 1.0f / sqrtf((float)hd), .kv_type = 0 };
    for (int64_t l = 0; l < v->n_layer; l++) {
        const vision_layer *L = &v->layers[l];
        ew_run(pool, (ew_job){ .op = EW_LN, .n = N, .d = D, .y = { h }, .x = x, .w = L->ln1_w, .b = { L->ln1_b },
                               .eps = v->eps });
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->q, &L->k, &L->v }, 3, h, N, (float *[]){ q, k, vv }, ws);
        ew_run(pool, (ew_job){ .op = EW_BIAS3, .n = N, .d = D, .y = { q, k, vv }, .b = { L->bq, L->bk, L->bv } });
        /* non-causal: every patch of a tile attends to every patch of its tile (one block of T). The
         * rows go head by head, so the threads walk one head's keys together. */
        const void *kt[TILE_GROUP], *vt[TILE_GROUP];
        for (int64_t t = 0; t < n_tiles; t++) {
            kt[t] = kh + t * T * D;
            vt[t] = vh + t * T * D;
            for (int64_t i = 0; i < T; i++)
                for (int64_t hh = 0; hh < H; hh++) {
                    memcpy(kh + t * T * D + (hh * T + i) * hd, k + (t * T + i) * D + hh * hd, (size_t)hd * sizeof(float));
                    memcpy(vh + t * T * D + (hh * T + i) * hd, vv + (t * T + i) * D + hh * hd, (size_t)hd * sizeof(float));
                }
            for (int64_t hh = 0; hh < H; hh++)
                for (int64_t i = 0; i < T; i++)
                    rows[(t * H + hh) * T + i] = (cdx_attn_row){ .q = q + (t * T + i) * D + hh * hd, .k = &kt[t],
                                                                 .v = &vt[t], .lo = 0, .hi = T - 1,
                                                                 .out = a + (t * T + i) * D + hh * hd,
                                                                 .off = (size_t)(hh * T * hd) };
        }
        if ((rc = cdx_attn(K, pool, &ash, rows, N * H, err)))
            goto out;
        cdx_matmul(K, pool, &L->o, a, N, h, ws);
        ew_run(pool, (ew_job){ .op = EW_RESID, .n = N, .d = D, .y = { x }, .x = h, .b = { L->bo } });
        ew_run(pool, (ew_job){ .op = EW_LN, .n = N, .d = D, .y = { h }, .x = x, .w = L->ln2_w, .b = { L->ln2_b },
                               .eps = v->eps });
        cdx_matmul(K, pool, &L->fc1, h, N, big, ws);
        ew_run(pool, (ew_job){ .op = EW_GELU, .n = N, .d = F, .y = { big }, .b = { L->b1 } });
        cdx_matmul(K, pool, &L->fc2, big, N, h, ws);
        ew_run(pool, (ew_job){ .op = EW_RESID, .n = N, .d = D, .y = { x }, .x = h, .b = { L->b2 } });
    }
    ew_run(pool, (ew_job){ .op = EW_LN, .n = N, .d = D, .y = { h }, .x = x, .w = v->post_w, .b = { v->post_b },
                           .eps = v->eps });
    /* pixel shuffle: token (R, C) of the g × g grid holds patches (sR + b, sC + a), b outermost */
    for (int64_t t = 0; t < n_tiles; t++)
        for (int64_t R = 0; R < g; R++)
            for (int64_t C = 0; C < g; C++) {
                float *dst = big + (t * nt + R * g + C) * Ds;
                for (int64_t bb = 0; bb < s; bb++)
                    for (int64_t aa = 0; aa < s; aa++)
                        memcpy(dst + (bb * s + aa) * D, h + (t * T + (s * R + bb) * side + s * C + aa) * D,
                               (size_t)D * sizeof(float));
            }
    cdx_matmul(K, pool, &v->proj, big, n_tiles * nt, out, ws);
out:
    free(x); free(h); free(q); free(k); free(vv); free(a); free(big); free(kh); free(vh); free(rows); free(ws);
    return rc;
}

int cdx_vision_encode(cdx_forward_ctx *fc, const float *pixels, int64_t n_tiles, float *out, cdx_err *err)
{
    const cdx_model *m = forward_ctx_model(fc);
    model_use_begin(m); /* as a forward pass: no background pack is installed under it */
    const int rc = vision_encode_run(fc, pixels, n_tiles, out, err);
    model_use_end(m);
    return rc;
}
