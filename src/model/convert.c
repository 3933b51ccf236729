/* Hugging Face checkpoint -> GGUF, as llama.cpp's convert_hf_to_gguf.py does it (conversion/base.py
 * TextModel + llama.py LlamaModel + qwen.py Qwen2Model/Qwen3Model, gguf-py's GGUFWriter):
 *   - tensors in the order the converter meets them: generated ones first (rope_freqs), then each
 *     safetensors shard in file-name order, tensors sorted by name within a shard;
 *   - names from the role table (model_load.c), the one place HF and GGUF names are written down;
 *   - "llama" (Llama, Mistral): q/k rows permuted from HF's rotate-half order to adjacent pairs
 *     (LlamaModel.permute); qwen2/qwen3 keep HF's order (GGUF NeoX RoPE);
 *   - 1-D tensors and *_norm.weight stay F32; other weights take the requested type; a Q8_0 row
 *     that is not a multiple of 32 falls back to F16 (the converter's QuantError path);
 *   - the metadata keys of TextModel.set_gguf_parameters with gguf-py's value types;
 *   - mixtures of experts (qwen.py Qwen2MoeModel/Qwen3MoeModel, llama.py MixtralModel): each layer's
 *     experts stacked into ffn_{gate,up,down}_exps [n_expert][rows][cols] once the last of them is
 *     met, the routers (ffn_gate_inp) kept F32, the expert counts and widths as metadata; Granite
 *     MoE's already stacked experts (granite.py GraniteMoeModel) split into gate and up. */
#include "arch.h"

#include "caldrix/convert.h"
#include "caldrix/pipeline.h"
#include "caldrix/quant.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One layer's expert role being stacked: experts arrive one tensor at a time. */
typedef struct moe_stack {
    char name[160];          /* its GGUF name */
    uint64_t rows, cols;
    float *f;                /* [n_expert][rows][cols], NULL once written */
    bool *have;              /* [n_expert] */
    int n_have;
} moe_stack;

struct cdx_convert {
    cdx_hf_config cfg;
    moe_stack *stacks;
    size_t n_stacks;
    cdx_safetensors *st;
    void **bufs;            /* converted tensor data the writer borrows */
    size_t n_bufs, cap_bufs;
    char notes[512];
    size_t n_tensors, n_bytes;
    int swa_period;         /* Gemma's: the sliding layers' period (attention.sliding_window_pattern) */
    int pooling;            /* a decoder's llama.cpp pooling_type from modules.json (-1: none written) */
    bool normalize;         /* modules.json lists Normalize */
};

void cdx_convert_free(cdx_convert *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_bufs; i++)
        free(c->bufs[i]);
    free(c->bufs);
    for (size_t i = 0; i < c->n_stacks; i++) {
        free(c->stacks[i].f);
        free(c->stacks[i].have);
    }
    free(c->stacks);
    cdx_st_close(c->st);
    free(c);
}

const cdx_hf_config *cdx_convert_config(const cdx_convert *c) { return &c->cfg; }
const char *cdx_convert_notes(const cdx_convert *c) { return c->notes; }

void cdx_convert_totals(const cdx_convert *c, size_t *n_tensors, size_t *n_bytes)
{
    if (n_tensors) *n_tensors = c->n_tensors;
    if (n_bytes) *n_bytes = c->n_bytes;
}

static void *keep(cdx_convert *c, size_t n_bytes)
{
    if (c->n_bufs == c->cap_bufs) {
        size_t cap = c->cap_bufs ? c->cap_bufs * 2 : 64;
        void **b = realloc(c->bufs, cap * sizeof *b);
        if (!b)
            return NULL;
        c->bufs = b;
        c->cap_bufs = cap;
    }
    void *p = malloc(n_bytes ? n_bytes : 1);
    if (p)
        c->bufs[c->n_bufs++] = p;
    return p;
}

/* ---- metadata ---- */

/* gguf-py model_weight_count_rounded_notation: at least two significant digits before the point. */
static void size_label(uint64_t n, char *out, size_t cap)
{
    double x;
    const char *suf;
    if (n > 1e12) { x = n * 1e-12; suf = "T"; }
    else if (n > 1e9) { x = n * 1e-9; suf = "B"; }
    else if (n > 1e6) { x = n * 1e-6; suf = "M"; }
    else { x = n * 1e-3; suf = "K"; }
    /* Python's round() is half-to-even, as rint() in the default rounding mode */
    char digits[64];
    snprintf(digits, sizeof digits, "%.0f", rint(x));
    const char *d = digits;
    while (*d == '0')
        d++;
    int fix = 2 - (int)strlen(d);
    snprintf(out, cap, "%.*f%s", fix > 0 ? fix : 0, x, suf);
}

/* Whether config.json names a key at the top level (the converter tests presence, not defaults). */
static bool config_has(const char *dir, const char *key)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL);
    bool has = j && json_object_get(j, key) && !json_is_null(json_object_get(j, key));
    json_decref(j);
    return has;
}

static const char *base_name(const char *dir, char *buf, size_t cap)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t s = n;
    while (s > 0 && dir[s - 1] != '/')
        s--;
    snprintf(buf, cap, "%.*s", (int)(n - s), dir + s);
    return buf;
}

/* ---- tensors ---- */

typedef struct {
    const cdx_st_tensor *t;
    const char *file;       /* shard path, for the order */
} src_ref;

static int src_cmp(const void *a, const void *b)
{
    const src_ref *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->t->name, y->t->name);
}

/* HF name -> GGUF name through the role table; false when no role matches. */
static bool map_name(const arch_desc *d, const char *hf, char *out, size_t cap, tensor_role *role, int *layer)
{
    for (int r = 0; r < ROLE_COUNT; r++) {
        bool per_layer;
        const char *h = arch_role_name_of(d, (tensor_role)r, false, &per_layer);
        const char *g = arch_role_name_of(d, (tensor_role)r, true, NULL);
        if (!h || !g)
            continue;
        if (!per_layer) {
            if (strcmp(h, hf))
                continue;
            snprintf(out, cap, "%s", g);
            *role = (tensor_role)r;
            *layer = -1;
            return true;
        }
        const char *pct = strstr(h, "%d");
        size_t pre = (size_t)(pct - h);
        if (strncmp(hf, h, pre) || hf[pre] < '0' || hf[pre] > '9')
            continue;
        const char *p = hf + pre;
        long l = 0;
        while (*p >= '0' && *p <= '9' && l < 1000000)
            l = l * 10 + (*p++ - '0');
        if (strcmp(p, pct + 2) || (p - (hf + pre) > 1 && hf[pre] == '0'))
            continue;
        snprintf(out, cap, g, (int)l);
        *role = (tensor_role)r;
        *layer = (int)l;
        return true;
    }
    return false;
}

/* LlamaModel.permute: rows (head, half, i) -> (head, i, half), so that RoPE's rotate-half pairs
 * (i, i + d/2) of HF become the adjacent pairs (2i, 2i + 1) ggml's normal RoPE rotates. */
static void permute_rows(const float *in, float *out, int64_t rows, int64_t cols, int64_t n_head)
{
    int64_t hd = rows / n_head, half = hd / 2;
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(out + (h * hd + 2 * i + j) * cols, in + (h * hd + j * half + i) * cols, (size_t)cols * sizeof *out);
}

/* LlamaModel.generate_extra_tensors for rope_type "llama3": one factor per rotated pair. The
 * frequencies are float32 as the converter computes them; the wavelength arithmetic is double (it
 * reproduces the shared reference files bit for bit; see tests/model/test_convert.c). */
static void llama3_factors(const cdx_hf_config *cfg, int64_t dim, float *out)
{
    double factor = cfg->rope_factor, lo = cfg->rope_low_freq_factor, hi = cfg->rope_high_freq_factor;
    double old = (double)cfg->rope_original_max_position;
    double lo_wl = old / lo, hi_wl = old / hi;
    for (int64_t i = 0; i < dim / 2; i++) {
        float e = (float)(2 * i) / (float)dim;
        float freq = 1.0f / powf((float)cfg->rope_theta, e);
        double wl = 2 * M_PI / (double)freq;
        double f;
        if (wl < hi_wl)
            f = 1.0;
        else if (wl > lo_wl)
            f = factor;
        else {
            double s = (old / wl - lo) / (hi - lo);
            f = 1.0 / ((1 - s) / factor + s);
        }
        out[i] = (float)f;
    }
}

/* Qwen3.5 (conversion/qwen.py _LinearAttentionVReorderBase): value heads from transformers'
 * grouped order (key head kh's value heads together) to the tiled order ggml's broadcast reads
 * (new head vp·nk + kh is old head kh·r + vp), along rows (cols 1: along columns) of [rows][cols]
 * floats, head_dim elements per head, starting at element `at` of that dimension. */
static void reorder_v(float *f, int64_t rows, int64_t cols, bool along_cols, int64_t at, int64_t nk, int64_t r,
                      int64_t hd, float *tmp)
{
    const int64_t n = nk * r * hd;
    for (int64_t o = 0; o < (along_cols ? rows : cols); o++) {
        for (int64_t kh = 0; kh < nk; kh++)
            for (int64_t vp = 0; vp < r; vp++)
                for (int64_t d = 0; d < hd; d++) {
                    const int64_t src = at + (kh * r + vp) * hd + d, dst = (vp * nk + kh) * hd + d;
                    tmp[dst] = along_cols ? f[o * cols + src] : f[src * cols + o];
                }
        for (int64_t i = 0; i < n; i++) {
            if (along_cols)
                f[o * cols + at + i] = tmp[i];
            else
                f[(at + i) * cols + o] = tmp[i];
        }
    }
}

/* Qwen3NextModel.modify_tensors: ssm_a = -exp(A_log), the conv kernel squeezed, norms (except the
 * gated one) + 1; then the value heads tiled. f: [rows][cols]. */
static int hybrid_tensor(const cdx_hf_config *cfg, tensor_role role, float *f, int64_t rows, int64_t cols)
{
    const int64_t nk = cfg->linear_n_k_heads, nv = cfg->linear_n_v_heads, r = nv / nk;
    const int64_t dk = cfg->linear_k_dim, dv = cfg->linear_v_dim, n = rows * cols;
    if (role == ROLE_SSM_ALOG)
        for (int64_t i = 0; i < n; i++)
            f[i] = -expf(f[i]);
    if (role == ROLE_ATTN_NORM || role == ROLE_FFN_NORM || role == ROLE_OUT_NORM || role == ROLE_QNORM ||
        role == ROLE_KNORM)
        for (int64_t i = 0; i < n; i++)
            f[i] += 1.0f;
    if (nk == nv)
        return CDX_OK;
    float *tmp = malloc((size_t)(nv * dv) * sizeof *tmp);
    if (!tmp)
        return CDX_ENOMEM;
    switch (role) {
    case ROLE_SSM_QKV: case ROLE_SSM_CONV: reorder_v(f, rows, cols, false, 2 * nk * dk, nk, r, dv, tmp); break;
    case ROLE_SSM_Z: reorder_v(f, rows, cols, false, 0, nk, r, dv, tmp); break;
    case ROLE_SSM_B: case ROLE_SSM_A: reorder_v(f, rows, cols, false, 0, nk, r, 1, tmp); break;
    case ROLE_SSM_DT: case ROLE_SSM_ALOG: reorder_v(f, n, 1, false, 0, nk, r, 1, tmp); break;
    case ROLE_SSM_OUT: reorder_v(f, rows, cols, true, 0, nk, r, dv, tmp); break;
    default: break;
    }
    free(tmp);
    return CDX_OK;
}

static uint32_t tensor_type(uint32_t want, const char *gguf_name, uint32_t n_dims, uint64_t ne0)
{
    size_t n = strlen(gguf_name);
    if (n_dims <= 1 || (n >= 12 && !strcmp(gguf_name + n - 12, "_norm.weight")) ||
        (n < 7 || strcmp(gguf_name + n - 7, ".weight")))
        return CDX_TYPE_F32;
    const cdx_type_traits *tr = cdx_type_get(want);
    if (tr && ne0 % tr->block)
        return CDX_TYPE_F16;
    return want;
}

static int add_tensor(cdx_convert *c, cdx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                      const uint64_t *ne, const float *f32, const void *raw, cdx_err *err)
{
    /* raw: data already in `type` (borrowed from the mapping); else f32 values to convert */
    const void *data = raw;
    size_t row, bytes;
    int rc = cdx_type_row_bytes(type, ne[0], &row, err);
    if (rc)
        return cdx_err_prefix(err, "tensor \"%s\"", name);
    uint64_t rows = 1;
    for (uint32_t d = 1; d < n_dims; d++)
        rows *= ne[d];
    if (rows > SIZE_MAX || !cdx_mul_size(row, (size_t)rows, &bytes))
        return cdx_err_set(err, CDX_ERANGE, "tensor \"%s\" is too large", name);
    if (!raw) {
        void *out = keep(c, bytes);
        if (!out)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", name);
        const cdx_type_traits *tr = cdx_type_get(type);
        if (type == CDX_TYPE_F32)
            memcpy(out, f32, bytes);
        else
            for (uint64_t r = 0; r < rows; r++)
                tr->from_f32(f32 + r * ne[0], (uint8_t *)out + r * row, (int64_t)ne[0]);
        data = out;
    }
    if ((rc = cdx_gguf_writer_add_tensor(w, name, type, n_dims, ne, data, err)))
        return rc;
    c->n_tensors++;
    c->n_bytes += bytes;
    return CDX_OK;
}

static int convert_tensor(cdx_convert *c, cdx_gguf_writer *w, const cdx_st_tensor *t, const arch_desc *d,
                          uint32_t want, const char *dir, cdx_err *err)
{
    char name[160];
    tensor_role role;
    int layer;
    /* Qwen3.5 ForConditionalGeneration, Qwen2-VL since transformers 4.52: the text model under
     * model.language_model. (TextModel.filter_tensors drops "language_model.") */
    const char *hf = (d->hybrid || d->vl_text_only) && !strncmp(t->name, "model.language_model.", 21) ? t->name + 15 : t->name;
    bool named = map_name(d, hf, name, sizeof name, &role, &layer);
    if (!named && strncmp(hf, "model.", 6)) {
        /* Qwen3-Embedding: the base model's tensors without "model." (llama.cpp's tensor map lists both) */
        char pref[200];
        snprintf(pref, sizeof pref, "model.%s", hf);
        named = map_name(d, pref, name, sizeof name, &role, &layer);
    }
    if (!named)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has no GGUF name for the %s architecture", dir,
                           t->name, d->gguf_name);
    if (layer >= c->cfg.n_layers)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" belongs to layer %d; config.json has %lld layers", dir,
                           t->name, layer, (long long)c->cfg.n_layers);
    if (t->n_dims < 1 || t->n_dims > 4)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has %u dimensions; expected 1..4", dir, t->name, t->n_dims);
    uint64_t ne[4] = { 1, 1, 1, 1 };
    uint64_t n = 1;
    uint32_t n_dims = t->n_dims;
    for (uint32_t i = 0; i < t->n_dims; i++) {
        ne[i] = t->shape[t->n_dims - 1 - i];
        n *= ne[i];
    }
    if (d->hybrid && role == ROLE_SSM_CONV && n_dims == 3 && ne[1] == 1) { /* [C, 1, K] squeezed to [C, K] */
        ne[1] = ne[2];
        ne[2] = 1;
        n_dims = 2;
    }
    const cdx_type_traits *st = cdx_type_get(t->type);
    if (!st || !st->to_f32 || n > SIZE_MAX / sizeof(float))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s; expected F32, F16 or BF16", dir,
                           t->name, cdx_type_name(t->type));
    uint32_t type = d->hybrid && role == ROLE_SSM_CONV ? CDX_TYPE_F32 : tensor_type(want, name, n_dims, ne[0]);
    bool permute = d->gguf_rope == CDX_ROPE_ADJACENT && !d->hf_rope_adjacent &&
                   (role == ROLE_WQ || role == ROLE_WK || role == ROLE_BQ || role == ROLE_BK);
    /* the norms stored as offsets get theirs added (GemmaModel.modify_tensors: norm.weight + 1) */
    const bool shift = d->hf_norm_offset != 0 && !d->hybrid && arch_role_is_norm(role);
    /* the converter widens BF16 to F32 first; F16/F32 data that stays in its type is copied as is */
    if (!permute && !shift && !d->hybrid && type == t->type && (type == CDX_TYPE_F32 || type == CDX_TYPE_F16))
        return add_tensor(c, w, name, type, n_dims, ne, NULL, t->data, err);
    float *f = malloc((size_t)n * sizeof *f);
    if (!f)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", t->name);
    st->to_f32(t->data, f, (int64_t)n);
    int rc = CDX_OK;
    for (uint64_t i = 0; shift && i < n; i++)
        f[i] += d->hf_norm_offset;
    if (d->hybrid && n_dims <= 2 &&
        hybrid_tensor(&c->cfg, role, f, n_dims == 2 ? (int64_t)ne[1] : (int64_t)ne[0], n_dims == 2 ? (int64_t)ne[0] : 1))
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", t->name);
    if (permute) {
        int64_t heads = role == ROLE_WQ || role == ROLE_BQ ? c->cfg.n_heads : c->cfg.n_kv_heads;
        int64_t rows = (int64_t)(t->n_dims == 1 ? ne[0] : ne[1]), cols = t->n_dims == 1 ? 1 : (int64_t)ne[0];
        if (t->n_dims > 2 || heads <= 0 || rows % (2 * heads)) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has %lld rows, not a multiple of 2 x %lld heads", dir,
                             t->name, (long long)rows, (long long)heads);
        } else {
            float *p = malloc((size_t)n * sizeof *p);
            if (!p)
                rc = cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", t->name);
            else {
                permute_rows(f, p, rows, cols, heads);
                free(f);
                f = p;
            }
        }
    }
    if (!rc)
        rc = add_tensor(c, w, name, type, n_dims, ne, f, NULL, err);
    free(f);
    return rc;
}

/* A BitNet BitLinear's packed weight (U8 [rows/4, cols], model_load.c's bind_bitlinear_layer) and its
 * "<name>_scale": written as the ternary matrix (exact in every type the converter writes, TQ1_0/TQ2_0 once
 * quantized) and llama.cpp's optional per-tensor "<gguf name>.scale" = 1 / weight_scale (llama.cpp multiplies
 * the linear's output by it; transformers divides by weight_scale). llama.cpp's own converter writes the
 * dequantized floats and no scale. */
static int convert_bitlinear(cdx_convert *c, cdx_gguf_writer *w, const cdx_st_tensor *t, const arch_desc *d,
                             uint32_t want, const char *dir, cdx_err *err)
{
    char name[160], sname[176];
    tensor_role role;
    int layer;
    if (!map_name(d, t->name, name, sizeof name, &role, &layer) || layer >= c->cfg.n_layers || t->n_dims != 2)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" (U8) is not a BitLinear weight of the bitnet "
                           "architecture", dir, t->name);
    snprintf(sname, sizeof sname, "%s_scale", t->name);
    const cdx_st_tensor *s = cdx_st_find(c->st, sname);
    const cdx_type_traits *str = s ? cdx_type_get(s->type) : NULL;
    if (!str || !str->to_f32 || s->n_dims > 1 || (s->n_dims == 1 && s->shape[0] != 1))
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is missing or not one F32, F16 or BF16 value", dir, sname);
    float ws;
    str->to_f32(s->data, &ws, 1);
    if (!(ws > 0) || !isfinite(ws))
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is %g; a BitLinear divides by it", dir, sname, (double)ws);
    const uint64_t R = t->shape[0], cols = t->shape[1], rows = 4 * R;
    if (!R || !cols || R > ((uint64_t)1 << 24) || cols > ((uint64_t)1 << 24))
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has shape [%llu, %llu]", dir, t->name,
                           (unsigned long long)R, (unsigned long long)cols);
    float *f = malloc((size_t)(rows * cols) * sizeof *f);
    if (!f)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", t->name);
    const uint8_t *p = t->data;
    for (uint64_t i = 0; i < 4; i++)
        for (uint64_t r = 0; r < R; r++)
            for (uint64_t k = 0; k < cols; k++)
                f[(i * R + r) * cols + k] = (float)(((p[r * cols + k] >> (2 * i)) & 3) - 1);
    const uint64_t ne[2] = { cols, rows };
    int rc = add_tensor(c, w, name, tensor_type(want, name, 2, cols), 2, ne, f, NULL, err);
    free(f);
    if (rc)
        return rc;
    char *dot = strrchr(name, '.');
    snprintf(dot, sizeof name - (size_t)(dot - name), ".scale");
    float *inv = keep(c, sizeof *inv);
    if (!inv)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", sname);
    *inv = 1.0f / ws;
    const uint64_t one[1] = { 1 };
    return add_tensor(c, w, name, CDX_TYPE_F32, 1, one, NULL, inv, err);
}

/* A tensor of a sparse layer: the routers and the shared expert's gate stay F32 (the converter
 * never quantizes ffn_gate_inp), the shared expert converts as a dense tensor, and an expert's
 * matrix goes into its layer's stack, written when the last expert arrives. */
static int convert_moe_tensor(cdx_convert *c, cdx_gguf_writer *w, const cdx_st_tensor *t, const char *gname, int layer,
                              int expert, int role, uint32_t want, const char *dir, cdx_err *err)
{
    const int64_t ne_exp = c->cfg.n_experts;
    if (layer >= c->cfg.n_layers || expert >= ne_exp)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" names layer %d, expert %d; config.json has %lld layers "
                           "of %lld experts", dir, t->name, layer, expert, (long long)c->cfg.n_layers, (long long)ne_exp);
    const cdx_type_traits *st = cdx_type_get(t->type);
    if (t->n_dims < 1 || t->n_dims > 2 || !st || !st->to_f32)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" must be a matrix or vector of F32, F16 or BF16", dir,
                           t->name);
    const uint64_t cols = t->shape[t->n_dims - 1], rows = t->n_dims == 2 ? t->shape[0] : 1;
    uint64_t ne[3] = { cols, rows, 1 };
    if (rows * cols > SIZE_MAX / sizeof(float) / (uint64_t)ne_exp)
        return cdx_err_set(err, CDX_ERANGE, "%s: tensor \"%s\" is too large", dir, t->name);
    if (expert < 0) {
        float *f = malloc((size_t)(rows * cols) * sizeof *f);
        if (!f)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", t->name);
        st->to_f32(t->data, f, (int64_t)(rows * cols));
        const bool gate_inp = strstr(gname, "ffn_gate_inp") != NULL; /* the router, the shared expert's gate */
        uint32_t type = gate_inp ? CDX_TYPE_F32 : tensor_type(want, gname, t->n_dims, cols);
        int rc = add_tensor(c, w, gname, type, t->n_dims, ne, f, NULL, err);
        free(f);
        (void)role;
        return rc;
    }
    moe_stack *s = NULL;
    for (size_t i = 0; i < c->n_stacks && !s; i++)
        if (!strcmp(c->stacks[i].name, gname))
            s = &c->stacks[i];
    if (!s) {
        moe_stack *ns = realloc(c->stacks, (c->n_stacks + 1) * sizeof *ns);
        if (!ns)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        c->stacks = ns;
        s = &c->stacks[c->n_stacks++];
        *s = (moe_stack){ .rows = rows, .cols = cols };
        snprintf(s->name, sizeof s->name, "%s", gname);
        s->f = malloc((size_t)(rows * cols * (uint64_t)ne_exp) * sizeof(float));
        s->have = calloc((size_t)ne_exp, sizeof *s->have);
        if (!s->f || !s->have)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory stacking the experts of \"%s\"", gname);
    }
    if (!s->f || s->rows != rows || s->cols != cols || s->have[expert])
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has shape [%llu, %llu]; the other experts of %s have "
                           "[%llu, %llu]%s", dir, t->name, (unsigned long long)rows, (unsigned long long)cols, gname,
                           (unsigned long long)s->rows, (unsigned long long)s->cols,
                           s->f && s->rows == rows && s->cols == cols ? " (and it appears twice)" : "");
    st->to_f32(t->data, s->f + (size_t)expert * (size_t)(rows * cols), (int64_t)(rows * cols));
    s->have[expert] = true;
    if (++s->n_have < ne_exp)
        return CDX_OK;
    ne[2] = (uint64_t)ne_exp;
    int rc = add_tensor(c, w, gname, tensor_type(want, gname, 3, cols), 3, ne, s->f, NULL, err);
    free(s->f);
    s->f = NULL; /* add_tensor converted it into a buffer of its own */
    return rc;
}

/* Granite MoE's stacked experts (conversion/granite.py GraniteMoeModel.modify_tensors): input_linear [E, 2I, H]
 * split along its rows into ffn_gate_exps (rows 0..I-1 of each expert) and ffn_up_exps (rows I..2I-1), [E][I][H]
 * each and written in that order; output_linear [E, H, I] is ffn_down_exps as it stands. role: MOE_GATE for
 * input_linear (arch_desc.hf_experts_fused binds it so), MOE_DOWN for output_linear. */
static int convert_fused_experts(cdx_convert *c, cdx_gguf_writer *w, const cdx_st_tensor *t, const arch_desc *d,
                                 int layer, int role, uint32_t want, const char *dir, cdx_err *err)
{
    const cdx_hf_config *cfg = &c->cfg;
    const uint64_t E = (uint64_t)cfg->n_experts, H = (uint64_t)cfg->hidden_size, I = (uint64_t)cfg->intermediate_size;
    const bool gate_up = role == MOE_GATE;
    const uint64_t rows = gate_up ? 2 * I : H, cols = gate_up ? H : I;
    if (layer >= cfg->n_layers)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" belongs to layer %d; config.json has %lld layers", dir,
                           t->name, layer, (long long)cfg->n_layers);
    if (t->n_dims != 3 || t->shape[0] != E || t->shape[1] != rows || t->shape[2] != cols)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" does not have the shape config.json gives, [%llu, %llu, %llu] "
                           "(num_local_experts, %s)", dir, t->name, (unsigned long long)E, (unsigned long long)rows,
                           (unsigned long long)cols, gate_up ? "2 x intermediate_size, hidden_size"
                                                             : "hidden_size, intermediate_size");
    const cdx_type_traits *st = cdx_type_get(t->type);
    if (!st || !st->to_f32)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s; expected F32, F16 or BF16", dir,
                           t->name, cdx_type_name(t->type));
    const uint64_t n = E * rows * cols;
    if (n > SIZE_MAX / sizeof(float) / 2)
        return cdx_err_set(err, CDX_ERANGE, "%s: tensor \"%s\" is too large", dir, t->name);
    float *f = malloc((size_t)n * sizeof *f), *o = gate_up ? malloc((size_t)(n / 2) * sizeof *o) : NULL;
    int rc = CDX_OK;
    if (!f || (gate_up && !o)) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", t->name);
        goto out;
    }
    st->to_f32(t->data, f, (int64_t)n);
    char name[160];
    if (!gate_up) {
        const uint64_t ne[3] = { I, H, E };
        snprintf(name, sizeof name, arch_moe_name_of(d, MOE_DOWN, true), layer);
        rc = add_tensor(c, w, name, tensor_type(want, name, 3, I), 3, ne, f, NULL, err);
        goto out;
    }
    for (int part = 0; part < 2 && !rc; part++) { /* data_torch.split(ffn_dim, dim=-2): gate, then up */
        for (uint64_t e = 0; e < E; e++)
            memcpy(o + e * I * H, f + (e * 2 * I + (uint64_t)part * I) * H, (size_t)(I * H) * sizeof *o);
        const uint64_t ne[3] = { H, I, E };
        snprintf(name, sizeof name, arch_moe_name_of(d, part ? MOE_UP : MOE_GATE, true), layer);
        rc = add_tensor(c, w, name, tensor_type(want, name, 3, H), 3, ne, o, NULL, err);
    }
out:
    free(f);
    free(o);
    return rc;
}

/* GPT-OSS's sparse layer (conversion/gpt_oss.py GptOssModel.modify_tensors, the unquantized branch):
 * mlp.router.{weight,bias} -> ffn_gate_inp (F32, as the converter keeps every router); mlp.experts.gate_up_proj
 * [E, H, 2I] (x @ W, gate columns 2j, up 2j + 1) transposed and split -> ffn_gate_exps, ffn_up_exps [E][I][H];
 * down_proj [E, I, H] transposed -> ffn_down_exps [E][H][I]; their biases split alike (F32: not ".weight"). */
static int convert_oai_tensor(cdx_convert *c, cdx_gguf_writer *w, const cdx_st_tensor *t, uint32_t want, const char *dir,
                              cdx_err *err)
{
    const cdx_hf_config *cfg = &c->cfg;
    const uint64_t E = (uint64_t)cfg->n_experts, H = (uint64_t)cfg->hidden_size, I = (uint64_t)cfg->intermediate_size;
    static const struct { const char *hf, *gguf[2]; int kind; } k_map[] = {
        { "router.weight", { "ffn_gate_inp.weight" }, 0 },    { "router.bias", { "ffn_gate_inp.bias" }, 1 },
        { "experts.gate_up_proj", { "ffn_gate_exps.weight", "ffn_up_exps.weight" }, 2 },
        { "experts.gate_up_proj_bias", { "ffn_gate_exps.bias", "ffn_up_exps.bias" }, 3 },
        { "experts.down_proj", { "ffn_down_exps.weight" }, 4 }, { "experts.down_proj_bias", { "ffn_down_exps.bias" }, 5 },
    };
    int layer = -1, used = 0;
    char rest[96] = "";
    if (sscanf(t->name, "model.layers.%d.mlp.%95s%n", &layer, rest, &used) != 2 || t->name[used] || layer < 0 ||
        layer >= cfg->n_layers)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has no GGUF name for the gpt-oss architecture", dir,
                           t->name);
    size_t k = 0;
    while (k < sizeof k_map / sizeof k_map[0] && strcmp(rest, k_map[k].hf))
        k++;
    if (k == sizeof k_map / sizeof k_map[0])
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has no GGUF name for the gpt-oss architecture%s",
                           dir, t->name, strstr(rest, "_blocks") || strstr(rest, "_scales")
                                             ? " (MXFP4 blocks: caldrix converts the unquantized checkpoint only)" : "");
    const int kind = k_map[k].kind;
    /* the HF shape of each kind: [E, H], [E], [E, H, 2I], [E, 2I], [E, I, H], [E, H] */
    const uint64_t want_shape[6][3] = { { E, H }, { E }, { E, H, 2 * I }, { E, 2 * I }, { E, I, H }, { E, H } };
    const uint32_t want_dims[6] = { 2, 1, 3, 2, 3, 2 };
    bool ok = t->n_dims == want_dims[kind];
    for (uint32_t i = 0; ok && i < t->n_dims; i++)
        ok = t->shape[i] == want_shape[kind][i];
    if (!ok)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" does not have the shape config.json gives (%llu experts, "
                           "hidden %llu, intermediate %llu)", dir, t->name, (unsigned long long)E,
                           (unsigned long long)H, (unsigned long long)I);
    const cdx_type_traits *st = cdx_type_get(t->type);
    if (!st || !st->to_f32)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s; expected F32, F16 or BF16", dir,
                           t->name, cdx_type_name(t->type));
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->n_dims; i++)
        n *= t->shape[i];
    if (n > SIZE_MAX / sizeof(float) / 2)
        return cdx_err_set(err, CDX_ERANGE, "%s: tensor \"%s\" is too large", dir, t->name);
    float *f = malloc((size_t)n * sizeof *f), *o = malloc((size_t)n * sizeof *o);
    int rc = CDX_OK;
    if (!f || !o) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", t->name);
        goto out;
    }
    st->to_f32(t->data, f, (int64_t)n);
    char name[160];
    for (int part = 0; part < 2 && k_map[k].gguf[part] && !rc; part++) {
        snprintf(name, sizeof name, "blk.%d.%s", layer, k_map[k].gguf[part]);
        uint64_t ne[3] = { 1, 1, 1 };
        uint32_t nd = t->n_dims;
        switch (kind) {
        case 0: case 1: case 5: /* as is */
            memcpy(o, f, (size_t)n * sizeof *o);
            ne[0] = t->shape[t->n_dims - 1];
            ne[1] = t->n_dims > 1 ? t->shape[0] : 1;
            break;
        case 2: /* out[e][j][h] = W[e][h][2j + part] */
            for (uint64_t e = 0; e < E; e++)
                for (uint64_t j = 0; j < I; j++)
                    for (uint64_t h = 0; h < H; h++)
                        o[(e * I + j) * H + h] = f[(e * H + h) * 2 * I + 2 * j + (uint64_t)part];
            ne[0] = H, ne[1] = I, ne[2] = E;
            break;
        case 3: /* out[e][j] = b[e][2j + part] */
            for (uint64_t e = 0; e < E; e++)
                for (uint64_t j = 0; j < I; j++)
                    o[e * I + j] = f[e * 2 * I + 2 * j + (uint64_t)part];
            ne[0] = I, ne[1] = E;
            break;
        case 4: /* out[e][h][i] = W[e][i][h] */
            for (uint64_t e = 0; e < E; e++)
                for (uint64_t h = 0; h < H; h++)
                    for (uint64_t i = 0; i < I; i++)
                        o[(e * H + h) * I + i] = f[(e * I + i) * H + h];
            ne[0] = I, ne[1] = H, ne[2] = E;
            break;
        }
        const uint32_t type = kind == 0 ? CDX_TYPE_F32 : tensor_type(want, name, nd, ne[0]);
        rc = add_tensor(c, w, name, type, nd, ne, o, NULL, err);
    }
out:
    free(f);
    free(o);
    return rc;
}

/* ---- the whole checkpoint ---- */

/* conversion/qwen.py Qwen3Model.set_gguf_parameters: the template llama.cpp's rerank route fills */
static const char k_rerank_template[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
    "<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/* Qwen3Model._get_cls_out_tensor: cls.output.weight = the head's rows [yes; no] of t ([V][H]). */
static int write_cls_out(cdx_convert *c, cdx_gguf_writer *w, const cdx_st_tensor *t, const cdx_convert_opts *o,
                         const char *dir, cdx_err *err)
{
    const cdx_type_traits *st = cdx_type_get(t->type);
    if (t->n_dims != 2 || !st || !st->to_f32)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is not a matrix of F32, F16 or BF16", dir, t->name);
    const uint64_t V = t->shape[0], H = t->shape[1];
    if (o->yes_id < 0 || o->no_id < 0 || (uint64_t)o->yes_id >= V || (uint64_t)o->no_id >= V || o->yes_id == o->no_id)
        return cdx_err_set(err, CDX_EINVAL, "%s: the reranker's yes/no ids are %d and %d; expected two ids of its %llu "
                           "rows", dir, o->yes_id, o->no_id, (unsigned long long)V);
    size_t rb;
    int rc = cdx_type_row_bytes(t->type, H, &rb, err);
    if (rc)
        return rc;
    float *f = malloc((size_t)(2 * H) * sizeof *f);
    if (!f)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    st->to_f32((const uint8_t *)t->data + (size_t)o->yes_id * rb, f, (int64_t)H);
    st->to_f32((const uint8_t *)t->data + (size_t)o->no_id * rb, f + H, (int64_t)H);
    const uint64_t ne[2] = { H, 2 };
    rc = add_tensor(c, w, "cls.output.weight", tensor_type(o->type, "cls.output.weight", 2, H), 2, ne, f, NULL, err);
    free(f);
    return rc;
}

static int write_metadata(cdx_convert *c, cdx_gguf_writer *w, const char *dir, const arch_desc *d,
                          const cdx_convert_opts *o, int ftype, uint64_t n_params)
{
    const cdx_hf_config *cfg = &c->cfg;
    const char *a = d->gguf_name ? d->gguf_name : d->gguf_experts_of; /* Mixtral: "llama" with experts */
    char key[128], nbuf[256], label[32];
#define K(id) cdx_gguf_key_name(CDX_GK_##id, a, key, sizeof key) /* the key table (caldrix/format.h) */
    cdx_gguf_writer_set_str(w, "general.architecture", a);
    cdx_gguf_writer_set_str(w, "general.type", "model");
    /* gguf-py Metadata: sampling defaults from generation_config.json, then the name */
    if (cfg->has_top_k) cdx_gguf_writer_set_i32(w, "general.sampling.top_k", (int32_t)cfg->top_k);
    if (cfg->has_top_p) cdx_gguf_writer_set_f32(w, "general.sampling.top_p", (float)cfg->top_p);
    if (cfg->has_temperature) cdx_gguf_writer_set_f32(w, "general.sampling.temp", (float)cfg->temperature);
    if (cfg->has_repetition_penalty)
        cdx_gguf_writer_set_f32(w, "general.sampling.penalty_repeat", (float)cfg->repetition_penalty);
    cdx_gguf_writer_set_str(w, "general.name", o->name ? o->name : base_name(dir, nbuf, sizeof nbuf));
    if (n_params > 0) {
        size_label(n_params, label, sizeof label);
        cdx_gguf_writer_set_str(w, "general.size_label", label);
    }
    /* TextModel.set_gguf_parameters */
    cdx_gguf_writer_set_u32(w, K(BLOCK_COUNT), (uint32_t)cfg->n_layers);
    cdx_gguf_writer_set_u32(w, K(CONTEXT_LENGTH), (uint32_t)cfg->max_position_embeddings);
    cdx_gguf_writer_set_u32(w, K(EMBEDDING_LENGTH), (uint32_t)cfg->hidden_size);
    cdx_gguf_writer_set_u32(w, K(FEED_FORWARD_LENGTH), (uint32_t)cfg->intermediate_size);
    cdx_gguf_writer_set_u32(w, K(HEAD_COUNT), (uint32_t)cfg->n_heads);
    cdx_gguf_writer_set_u32(w, K(HEAD_COUNT_KV), (uint32_t)cfg->n_kv_heads);
    cdx_gguf_writer_set_f32(w, K(ROPE_FREQ_BASE), (float)cfg->rope_theta);
    if (d->layer_norm) /* StableLMModel / CommandR2Model / StarCoder2Model: add_layer_norm_eps */
        cdx_gguf_writer_set_f32(w, K(LN_EPS), (float)cfg->rms_norm_eps);
    else
        cdx_gguf_writer_set_f32(w, K(RMS_EPS), (float)cfg->rms_norm_eps);
    if (d->gguf_logit_mul && cfg->scale[CDX_HF_SCALE_LOGIT_MUL] > 0) /* CommandR2Model: add_logit_scale */
        cdx_gguf_writer_set_f32(w, K(LOGIT_SCALE), (float)cfg->scale[CDX_HF_SCALE_LOGIT_MUL]);
    if (d->gguf_window && cfg->sliding_window > 0) /* caldrix's key for llama.cpp's windowless starcoder2 */
        cdx_gguf_writer_set_u32(w, K(SLIDING_WINDOW), (uint32_t)cfg->sliding_window);
    if (d->hf[0].cfg.parallel_key) /* StableLMModel: add_parallel_residual (llama.cpp reads the tensors instead) */
        cdx_gguf_writer_set_bool(w, K(PARALLEL_RESIDUAL), cfg->parallel_residual);
    if (config_has(dir, "head_dim") || d->hybrid || d->gguf_gemma) {
        cdx_gguf_writer_set_u32(w, K(KEY_LENGTH), (uint32_t)cfg->head_dim);
        cdx_gguf_writer_set_u32(w, K(VALUE_LENGTH), (uint32_t)cfg->head_dim);
    }
    cdx_gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype);
    if (d->moe) { /* Qwen2MoeModel / MixtralModel set_gguf_parameters */
        cdx_gguf_writer_set_u32(w, K(EXPERT_COUNT), (uint32_t)cfg->n_experts);
        cdx_gguf_writer_set_u32(w, K(EXPERT_USED_COUNT), (uint32_t)cfg->n_experts_per_tok);
        if (!d->experts_ff_wide || d->moe_oai) /* GptOssModel: intermediate_size, which llama.cpp requires */
            cdx_gguf_writer_set_u32(w, K(EXPERT_FF_LENGTH), (uint32_t)(d->experts_ff_wide ? cfg->intermediate_size
                                                                                           : cfg->moe_intermediate_size));
        if (d->shared_expert)
            cdx_gguf_writer_set_u32(w, K(EXPERT_SHARED_FF_LENGTH),
                                    (uint32_t)cfg->shared_expert_intermediate_size);
        /* llama.cpp fixes the renormalisation per architecture; the key says what config.json says */
        if (!d->experts_ff_wide || cfg->norm_topk_prob != d->norm_topk)
            cdx_gguf_writer_set_bool(w, K(EXPERT_WEIGHTS_NORM), cfg->norm_topk_prob);
    }
    if (cfg->clip_qkv > 0) /* OlmoModel.set_gguf_parameters' key (llama.cpp's olmoe graph does not read it) */
        cdx_gguf_writer_set_f32(w, K(CLAMP_KQV), (float)cfg->clip_qkv);
    /* LlamaModel.set_gguf_parameters adds these two; Qwen2/Qwen3 do not */
    if (d->gguf_vocab_rope_keys) {
        cdx_gguf_writer_set_u32(w, K(VOCAB_SIZE), (uint32_t)cfg->vocab_size);
        cdx_gguf_writer_set_u32(w, K(ROPE_DIM_COUNT), (uint32_t)cfg->head_dim);
    }
    if (d->gguf_scales) {
        /* GraniteModel.set_gguf_parameters: `if x := self.hparams.get("attention_multiplier")`, ... over hparams
         * from AutoConfig(...).to_dict() (ModelBase.load_hparams), which holds GraniteConfig's defaults (1.0) for
         * the multipliers config.json leaves out: so every one not null. Without them llama.cpp would take
         * head_dim^-½ for the softmax scale (transformers: 1.0) and refuse the file (logit_scale is required). */
        static const struct { cdx_hf_scale s; cdx_gguf_key k; } sk[] = {
            { CDX_HF_SCALE_ATTN, CDX_GK_ATTENTION_SCALE }, { CDX_HF_SCALE_EMBD, CDX_GK_EMBEDDING_SCALE },
            { CDX_HF_SCALE_RESIDUAL, CDX_GK_RESIDUAL_SCALE }, { CDX_HF_SCALE_LOGIT_DIV, CDX_GK_LOGIT_SCALE },
        };
        for (size_t i = 0; i < sizeof sk / sizeof sk[0]; i++)
            if (cfg->scale[sk[i].s] > 0) /* the class default where absent; 0: config.json's null */
                cdx_gguf_writer_set_f32(w, cdx_gguf_key_name(sk[i].k, a, key, sizeof key), (float)cfg->scale[sk[i].s]);
    }
    if (!d->gguf_gemma && d->gguf_swa_period > 0) { /* GptOssModel: add_sliding_window (0: no layer slides) */
        cdx_gguf_writer_set_u32(w, K(SLIDING_WINDOW), (uint32_t)cfg->sliding_window);
        if (cfg->sliding_window > 0 && c->swa_period != d->gguf_swa_period) /* caldrix's: llama.cpp's gpt-oss reads it,
                                                                                its converter writes none */
            cdx_gguf_writer_set_u32(w, K(SLIDING_WINDOW_PATTERN), (uint32_t)c->swa_period);
    }
    if (d->gguf_gemma) { /* Gemma2Model / Gemma3Model.set_gguf_parameters */
        const double ac = cfg->scale[CDX_HF_SCALE_ATTN_SOFTCAP], fc = cfg->scale[CDX_HF_SCALE_FINAL_SOFTCAP];
        if (ac > 0)
            cdx_gguf_writer_set_f32(w, K(ATTN_LOGIT_SOFTCAPPING), (float)ac);
        if (fc > 0)
            cdx_gguf_writer_set_f32(w, K(FINAL_LOGIT_SOFTCAPPING), (float)fc);
        if (cfg->sliding_window > 0) {
            cdx_gguf_writer_set_u32(w, K(SLIDING_WINDOW), (uint32_t)cfg->sliding_window);
            if (c->swa_period != d->gguf_swa_period)
                cdx_gguf_writer_set_u32(w, K(SLIDING_WINDOW_PATTERN), (uint32_t)c->swa_period);
        }
        if (cfg->rope_theta_swa > 0)
            cdx_gguf_writer_set_f32(w, K(ROPE_FREQ_BASE_SWA), (float)cfg->rope_theta_swa);
    }
    if (cfg->rope_type == CDX_HF_ROPE_LINEAR) { /* TextModel.set_gguf_parameters, every family */
        cdx_gguf_writer_set_str(w, K(ROPE_SCALING_TYPE), "linear");
        cdx_gguf_writer_set_f32(w, K(ROPE_SCALING_FACTOR), (float)cfg->rope_factor);
    } else if (d->bitnet) { /* BitnetModel.set_gguf_parameters: linear scaling, factor 1 */
        cdx_gguf_writer_set_str(w, K(ROPE_SCALING_TYPE), "linear");
        cdx_gguf_writer_set_f32(w, K(ROPE_SCALING_FACTOR), 1.0f);
    }
    const int64_t n_rot = (int64_t)((double)cfg->head_dim * cfg->partial_rotary_factor);
    if (n_rot != cfg->head_dim && !d->hybrid) /* partial rotary (Phi3MiniModel: int(rot_pct·n_embd) // n_head) */
        cdx_gguf_writer_set_u32(w, K(ROPE_DIM_COUNT), (uint32_t)n_rot);
    if (cfg->rope_type == CDX_HF_ROPE_YARN) { /* TextModel.set_gguf_parameters */
        cdx_gguf_writer_set_str(w, K(ROPE_SCALING_TYPE), "yarn");
        cdx_gguf_writer_set_f32(w, K(ROPE_SCALING_FACTOR), (float)cfg->rope_factor);
        cdx_gguf_writer_set_u32(w, K(ROPE_SCALING_ORIG_CTX_LEN), (uint32_t)cfg->rope_original_max_position);
        if (cfg->rope_attn_factor > 0)
            cdx_gguf_writer_set_f32(w, K(ROPE_SCALING_YARN_ATTN_FACTOR), (float)cfg->rope_attn_factor);
        if (cfg->rope_beta_fast > 0)
            cdx_gguf_writer_set_f32(w, K(ROPE_SCALING_YARN_BETA_FAST), (float)cfg->rope_beta_fast);
        if (cfg->rope_beta_slow > 0)
            cdx_gguf_writer_set_f32(w, K(ROPE_SCALING_YARN_BETA_SLOW), (float)cfg->rope_beta_slow);
    }
    if (cfg->rope_type == CDX_HF_ROPE_LONGROPE) { /* Phi3MiniModel: the original length and the attention factor
                                                     (the factors are tensors); the type as TextModel writes it */
        const double scale = (double)cfg->max_position_embeddings / (double)cfg->rope_original_max_position;
        const double att = cfg->rope_attn_factor > 0 ? cfg->rope_attn_factor
                           : scale > 1.0 ? sqrt(1 + log(scale) / log((double)cfg->rope_original_max_position)) : 1.0;
        cdx_gguf_writer_set_str(w, K(ROPE_SCALING_TYPE), "longrope");
        cdx_gguf_writer_set_u32(w, K(ROPE_SCALING_ORIG_CTX_LEN), (uint32_t)cfg->rope_original_max_position);
        cdx_gguf_writer_set_f32(w, K(ROPE_SCALING_ATTN_FACTOR), (float)att);
    }
    if (d->gguf_swa_all) /* Phi3MiniModel: 0 for none */
        cdx_gguf_writer_set_u32(w, K(SLIDING_WINDOW), (uint32_t)(cfg->sliding_window > 0 ? cfg->sliding_window : 0));
    if (d->hybrid) { /* Qwen3NextModel / _Qwen35MRopeMixin.set_gguf_parameters */
        cdx_gguf_writer_set_u32(w, K(SSM_CONV_KERNEL), (uint32_t)cfg->linear_conv_kernel);
        cdx_gguf_writer_set_u32(w, K(SSM_STATE_SIZE), (uint32_t)cfg->linear_k_dim);
        cdx_gguf_writer_set_u32(w, K(SSM_GROUP_COUNT), (uint32_t)cfg->linear_n_k_heads);
        cdx_gguf_writer_set_u32(w, K(SSM_TIME_STEP_RANK), (uint32_t)cfg->linear_n_v_heads);
        cdx_gguf_writer_set_u32(w, K(SSM_INNER_SIZE), (uint32_t)(cfg->linear_v_dim * cfg->linear_n_v_heads));
        int64_t every = 0;
        for (int64_t l = 0; l < cfg->n_layers && !every; l++)
            every = cfg->layer_flags[l] & CDX_HF_LAYER_LINEAR ? 0 : l + 1;
        cdx_gguf_writer_set_u32(w, K(FULL_ATTENTION_INTERVAL), (uint32_t)(every ? every : cfg->n_layers + 1));
        cdx_gguf_writer_set_u32(w, K(ROPE_DIM_COUNT),
                                (uint32_t)((double)cfg->head_dim * cfg->partial_rotary_factor));
        const int32_t sec[4] = { (int32_t)cfg->mrope_section[0], (int32_t)cfg->mrope_section[1],
                                 (int32_t)cfg->mrope_section[2], 0 };
        cdx_gguf_writer_set_arr(w, K(ROPE_DIM_SECTIONS), CDX_GGUF_I32, sec, 4);
    }
    if (d->mrope) { /* TextModel.set_gguf_parameters: mrope_section padded to 4 (time, height, width, extra) */
        const int32_t sec[4] = { (int32_t)cfg->mrope_section[0], (int32_t)cfg->mrope_section[1],
                                 (int32_t)cfg->mrope_section[2], 0 };
        cdx_gguf_writer_set_arr(w, K(ROPE_DIM_SECTIONS), CDX_GGUF_I32, sec, 4);
    }
    if (c->pooling >= 0) /* Qwen2Model.set_gguf_parameters: _try_set_pooling_type from modules.json */
        cdx_gguf_writer_set_u32(w, K(POOLING_TYPE), (uint32_t)c->pooling);
    if (c->normalize) /* caldrix's own key: llama.cpp leaves Normalize to its caller */
        cdx_gguf_writer_set_bool(w, "caldrix.embedding.normalize", true);
    if (o->rerank) { /* Qwen3Model.set_gguf_parameters with is_rerank */
        static const char *const labels[2] = { "yes", "no" };
        static const char *const names[1] = { "rerank" };
        cdx_gguf_writer_set_u32(w, K(POOLING_TYPE), 4);
        cdx_gguf_writer_set_arr_str(w, K(CLASSIFIER_OUTPUT_LABELS), labels, 2);
        cdx_gguf_writer_set_str(w, "tokenizer.chat_template.rerank", k_rerank_template);
        cdx_gguf_writer_set_arr_str(w, "tokenizer.chat_templates", names, 1);
    }
    return cdx_gguf_writer_set_u32(w, "general.quantization_version", 2);
#undef K
}

/* ---- encoders (BertModel, XLMRobertaModel) as llama.cpp's "bert" ---- */

/* llama.cpp's LLAMA_POOLING_TYPE_* for caldrix's poolings (-1: llama.cpp has none). */
static const int k_llama_pooling_of[CDX_POOL_COUNT] = { [CDX_POOL_CLS] = 2, [CDX_POOL_MEAN] = 1, [CDX_POOL_MAX] = -1,
                                                        [CDX_POOL_LAST] = 3 };

/* BertModel.set_gguf_parameters / XLMRobertaModel (convert_hf_to_gguf.py): the common keys, LayerNorm eps,
 * attention.causal false, pooling_type from modules.json and 1_Pooling (CLS without them, caldrix's own
 * default for such a folder), token types; XLM-R's position rows before pad_token_id + 1 dropped.
 * caldrix.embedding.normalize records a Normalize module, which llama.cpp leaves to the caller. */
static int convert_encoder(cdx_convert *c, cdx_gguf_writer *w, const char *dir, const arch_desc *d,
                           const cdx_convert_opts *o, int ftype, cdx_err *err)
{
    const cdx_hf_config *cfg = &c->cfg;
    cdx_st_pipeline p;
    int rc = cdx_st_pipeline_read(dir, &p, err);
    if (rc)
        return rc;
    if (k_llama_pooling_of[p.pooling] < 0)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s/1_Pooling/config.json: pooling %s has no llama.cpp pooling_type "
                           "(none, mean, cls, last, rank); run the folder itself", dir, cdx_pooling_name(p.pooling));
    const int64_t off = cfg->pos_offset, n_pos = cfg->max_position_embeddings - off;
    if (n_pos < 1)
        return cdx_err_set(err, CDX_EFORMAT, "%s/config.json: max_position_embeddings %lld leaves no position after %lld",
                           dir, (long long)cfg->max_position_embeddings, (long long)off);
    if ((rc = cdx_st_open(dir, &c->st, err)))
        return rc;
    const char *a = d->gguf_name;
    char key[128], nbuf[256];
#define K(id) cdx_gguf_key_name(CDX_GK_##id, a, key, sizeof key)
    cdx_gguf_writer_set_str(w, "general.architecture", a);
    cdx_gguf_writer_set_str(w, "general.type", "model");
    cdx_gguf_writer_set_str(w, "general.name", o->name ? o->name : base_name(dir, nbuf, sizeof nbuf));
    cdx_gguf_writer_set_u32(w, K(BLOCK_COUNT), (uint32_t)cfg->n_layers);
    cdx_gguf_writer_set_u32(w, K(CONTEXT_LENGTH), (uint32_t)n_pos);
    cdx_gguf_writer_set_u32(w, K(EMBEDDING_LENGTH), (uint32_t)cfg->hidden_size);
    cdx_gguf_writer_set_u32(w, K(FEED_FORWARD_LENGTH), (uint32_t)cfg->intermediate_size);
    cdx_gguf_writer_set_u32(w, K(HEAD_COUNT), (uint32_t)cfg->n_heads);
    cdx_gguf_writer_set_f32(w, K(LN_EPS), (float)cfg->rms_norm_eps);
    cdx_gguf_writer_set_bool(w, K(CAUSAL), false);
    cdx_gguf_writer_set_u32(w, K(POOLING_TYPE), (uint32_t)k_llama_pooling_of[p.pooling]);
    cdx_gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype);
    cdx_gguf_writer_set_u32(w, "tokenizer.ggml.token_type_count", (uint32_t)cfg->type_vocab_size);
    if (p.normalize)
        cdx_gguf_writer_set_bool(w, "caldrix.embedding.normalize", true);
    if ((rc = cdx_gguf_writer_set_u32(w, "general.quantization_version", 2)) < 0)
        return cdx_err_set(err, rc, "%s: out of memory writing metadata", dir);
#undef K
    for (uint64_t i = 0; i < c->st->n_tensors; i++) {
        const cdx_st_tensor *t = &c->st->tensors[i];
        char name[160];
        if (!strncmp(t->name, "pooler.", 7) || !strcmp(t->name, "embeddings.position_ids"))
            continue; /* never read by the embedding pipeline (llama.cpp's converter drops them too) */
        if (!encoder_gguf_name(t->name, name, sizeof name))
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has no GGUF name for the %s architecture", dir,
                               t->name, a);
        if (t->n_dims < 1 || t->n_dims > 2)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has %u dimensions; expected 1 or 2", dir, t->name,
                               t->n_dims);
        const cdx_type_traits *tr = cdx_type_get(t->type);
        uint64_t ne[2] = { t->shape[t->n_dims - 1], t->n_dims == 2 ? t->shape[0] : 1 }, skip = 0;
        const bool pos = !strcmp(name, "position_embd.weight");
        if (pos) {
            if (t->n_dims != 2 || ne[1] != (uint64_t)cfg->max_position_embeddings)
                return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" does not have max_position_embeddings rows", dir,
                                   t->name);
            skip = (uint64_t)off;
            ne[1] -= skip;
        }
        if (!tr || !tr->to_f32 || ne[0] * ne[1] > SIZE_MAX / sizeof(float))
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s; expected F32, F16 or BF16", dir,
                               t->name, cdx_type_name(t->type));
        /* the embedding tables other than the words' stay F32 (llama.cpp reads them with get_rows) */
        const uint32_t type = pos || !strcmp(name, "token_types.weight") ? CDX_TYPE_F32
                              : tensor_type(o->type, name, t->n_dims, ne[0]);
        const size_t n = (size_t)(ne[0] * ne[1]);
        float *f = malloc((n ? n : 1) * sizeof *f);
        if (!f)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory converting tensor \"%s\"", t->name);
        size_t rb;
        if ((rc = cdx_type_row_bytes(t->type, ne[0], &rb, err))) {
            free(f);
            return rc;
        }
        tr->to_f32((const uint8_t *)t->data + skip * rb, f, (int64_t)n);
        rc = add_tensor(c, w, name, type, t->n_dims, ne, f, NULL, err);
        free(f);
        if (rc)
            return rc;
    }
    return CDX_OK;
}

/* Whether the sliding layers are those l with l % p < p - 1 (llama_hparams::set_swa_pattern). */
static bool swa_fits(const cdx_hf_config *cfg, int p)
{
    for (int64_t l = 0; p > 0 && l < cfg->n_layers; l++)
        if (!!(cfg->layer_flags[l] & CDX_HF_LAYER_SLIDING) != (l % p < p - 1))
            return false;
    return p > 0;
}

/* The families llama.cpp has a GGUF form of (a vision-language model has none here). */
static bool convertible(const arch_desc *d) { return !d->vision && (d->gguf_name || d->gguf_experts_of); }

void cdx_convert_archs(char *out, size_t cap) { arch_titles(convertible, out, cap); }

int cdx_convert_hf(const char *dir, const cdx_convert_opts *opts, cdx_gguf_writer *w, cdx_convert **out, cdx_err *err)
{
    *out = NULL;
    cdx_convert_opts o = opts ? *opts : (cdx_convert_opts){ .type = CDX_TYPE_F32 };
    const char *ft_name = o.type == CDX_TYPE_F32 ? "F32" : o.type == CDX_TYPE_F16 ? "F16"
                        : o.type == CDX_TYPE_BF16 ? "BF16" : o.type == CDX_TYPE_Q8_0 ? "Q8_0" : NULL;
    const cdx_ftype_info *ft = ft_name ? cdx_ftype_find(ft_name) : NULL;
    if (!ft)
        return cdx_err_set(err, CDX_EINVAL, "convert: output type %s; expected F32, F16, BF16 or Q8_0",
                           cdx_type_name(o.type));
    cdx_convert *c = calloc(1, sizeof *c);
    if (!c)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    src_ref *refs = NULL;
    int rc = cdx_hf_config_read(dir, &c->cfg, err);
    if (rc)
        goto fail;
    const cdx_hf_config *cfg = &c->cfg;
    const arch_desc *d = arch_by_hf(cfg->arch);
    if (d && d->encoder && o.rerank) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is an encoder; --task rerank writes a Qwen3 reranker (a causal "
                         "LM answering yes or no), not a cross-encoder", dir, cfg->architecture);
        goto fail;
    }
    if (d && d->encoder) {
        if ((rc = convert_encoder(c, w, dir, d, &o, ft->llama_ftype, err)))
            goto fail;
        *out = c;
        return CDX_OK;
    }
    if (!d || !convertible(d)) {
        char list[1024];
        cdx_convert_archs(list, sizeof list);
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s/config.json: architectures is \"%s\"; caldrix convert handles "
                         "%s checkpoints (not vision-language models)", dir, cfg->architecture, list);
        goto fail;
    }
    if (d->hybrid) { /* GGUF keeps one interval for the layer pattern: it must say it all */
        int64_t every = 0;
        for (int64_t l = 0; l < cfg->n_layers && !every; l++)
            every = cfg->layer_flags[l] & CDX_HF_LAYER_LINEAR ? 0 : l + 1;
        for (int64_t l = 0; l < cfg->n_layers; l++)
            if (!!(cfg->layer_flags[l] & CDX_HF_LAYER_LINEAR) != (every == 0 || (l + 1) % every != 0)) {
                rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s/config.json: layer_types is not every %lld-th layer full "
                                 "attention; GGUF qwen35 writes the pattern as full_attention_interval only", dir,
                                 (long long)every);
                goto fail;
            }
    }
    for (int64_t l = 0; d->gguf_nope_step > 0 && l < cfg->n_layers; l++) /* llama.cpp fixes the NoPE layers */
        if (!!(cfg->layer_flags[l] & CDX_HF_LAYER_NOPE) != ((l + 1) % d->gguf_nope_step == 0)) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s/config.json: layer %lld %s RoPE; GGUF \"%s\" has no key for "
                             "the NoPE layers and llama.cpp takes the layers numbered (from 1) by multiples of %d as those, and only them, so this model "
                             "cannot be written for it", dir, (long long)l,
                             cfg->layer_flags[l] & CDX_HF_LAYER_NOPE ? "has no" : "has", d->gguf_name,
                             d->gguf_nope_step);
            goto fail;
        }
    if (d->moe_oai && (fabs(cfg->swiglu_limit - 7.0) > 1e-9 || fabs(cfg->swiglu_alpha - 1.702) > 1e-9)) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s/config.json: swiglu_limit %g, alpha %g; GGUF \"%s\" has no key for "
                         "them and llama.cpp computes 7 and 1.702, so this model cannot be written for it", dir,
                         cfg->swiglu_limit, cfg->swiglu_alpha, d->gguf_name);
        goto fail;
    }
    if (d->moe && (cfg->n_experts < 1 || cfg->n_experts > 4096)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s/config.json: the expert count is %lld; expected 1..4096", dir,
                         (long long)cfg->n_experts);
        goto fail;
    }
    if ((d->gguf_gemma || d->gguf_swa_period > 0) && cfg->sliding_window > 0) {
        /* GGUF says which layers slide by a period p (layer l iff l % p < p - 1): the family's default
         * where it fits (then no key, as llama.cpp's converter writes none), else the smallest that does */
        c->swa_period = swa_fits(cfg, d->gguf_swa_period) ? d->gguf_swa_period : 0;
        for (int p = 1; !c->swa_period && p <= cfg->n_layers; p++)
            c->swa_period = swa_fits(cfg, p) ? p : 0;
        if (!c->swa_period) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s/config.json: the sliding layers (layer_types) do not repeat "
                             "with a period; GGUF \"%s\" writes them as attention.sliding_window_pattern only", dir,
                             d->gguf_name);
            goto fail;
        }
    } else if (d->bitnet && (cfg->act != CDX_HF_ACT_SILU || !cfg->tie_word_embeddings)) {
        /* llama.cpp's bitnet graph: build_ffn(..., LLM_FFN_SILU) and the head is token_embd */
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s/config.json: %s; GGUF \"bitnet\" has no key for it: llama.cpp's bitnet "
                         "graph gates with SiLU and ties the head to token_embd, so this model cannot be written for it",
                         dir, cfg->act != CDX_HF_ACT_SILU ? "hidden_act is not \"silu\" (BitNet b1.58's relu2)"
                                                           : "tie_word_embeddings is false");
        goto fail;
    } else if (cfg->sliding_window > 0 && !d->gguf_swa_all)
        snprintf(c->notes, sizeof c->notes, "sliding_window %lld is not written: GGUF \"%s\" has no key for it, so "
                 "llama.cpp attends to the whole context\n", (long long)cfg->sliding_window, d->gguf_name);
    if ((rc = cfg->bitlinear && d->bitnet ? cdx_st_open_u8(dir, &c->st, err) : cdx_st_open(dir, &c->st, err)))
        goto fail;
    size_t nt = (size_t)c->st->n_tensors;
    refs = calloc(nt ? nt : 1, sizeof *refs);
    if (!refs) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto fail;
    }
    size_t n_src = 0;
    uint64_t n_params = 0;
    for (size_t i = 0; i < nt; i++) {
        const cdx_st_tensor *t = &c->st->tensors[i];
        size_t n = strlen(t->name);
        /* the converter drops these buffers (base.py prepare_tensors) */
        static const char *const k_skip[] = { ".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq" };
        bool skip = false;
        for (size_t k = 0; k < 3; k++) {
            size_t l = strlen(k_skip[k]);
            skip |= n >= l && !strcmp(t->name + n - l, k_skip[k]);
        }
        /* Qwen3.5: the multi-token-prediction head and the vision tower are not the text model */
        skip |= d->hybrid && (!strncmp(t->name, "mtp.", 4) || !strncmp(t->name, "model.visual.", 13));
        /* Qwen2-VL: the vision tower goes to llama.cpp's mmproj file (Qwen2VLVisionModel), not this one */
        skip |= d->vl_text_only && (!strncmp(t->name, "visual.", 7) || !strncmp(t->name, "model.visual.", 13));
        skip |= d->gguf_gemma && !strcmp(t->name, "lm_head.weight"); /* GemmaModel.filter_tensors: tied */
        /* BitNet: a BitLinear's weight_scale is written with its weight (convert_bitlinear) */
        skip |= d->bitnet && cfg->bitlinear && n > 13 && !strcmp(t->name + n - 13, ".weight_scale");
        if (skip)
            continue;
        refs[n_src].t = t;
        refs[n_src].file = c->st->n_files && t->shard < c->st->n_files ? c->st->files[t->shard]->path : "";
        uint64_t p = 1;
        for (uint32_t k = 0; k < t->n_dims; k++)
            p *= t->shape[k];
        n_params += t->type == CDX_TYPE_COUNT ? 4 * p : p; /* a BitLinear's U8 bytes hold four weights each */
        n_src++;
    }
    qsort(refs, n_src, sizeof *refs, src_cmp);

    float freqs[512];
    bool has_freqs = d->gguf_rope_freqs && cfg->rope_type == CDX_HF_ROPE_LLAMA3;
    if (has_freqs) {
        if (cfg->head_dim < 2 || cfg->head_dim > 1024) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s/config.json: head_dim %lld is out of range for rope_freqs", dir,
                             (long long)cfg->head_dim);
            goto fail;
        }
        llama3_factors(cfg, cfg->head_dim, freqs);
        n_params += (uint64_t)(cfg->head_dim / 2);
    }
    /* rope scalings llama.cpp's GGUF cannot say: refused by name rather than written as another */
    if (cfg->rope_type == CDX_HF_ROPE_DYNAMIC) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s/config.json: rope_scaling \"dynamic\" (NTK) has no GGUF form "
                         "llama.cpp reads; run the checkpoint itself", dir);
        goto fail;
    }
    if (cfg->rope_type == CDX_HF_ROPE_YARN && !cfg->rope_truncate && d->gguf_yarn_untruncated) {
        const size_t u = strlen(c->notes);
        snprintf(c->notes + u, sizeof c->notes - u, "rope_scaling yarn's truncate false is not written (GGUF has no "
                 "key): llama.cpp, and caldrix on the GGUF, round the correction range outward (floor/ceil) as "
                 "transformers does with truncate true\n");
    } else if (cfg->rope_type == CDX_HF_ROPE_YARN &&
        (!cfg->rope_truncate || (!(cfg->rope_attn_factor > 0) && (cfg->rope_mscale > 0 || cfg->rope_mscale_all_dim > 0)))) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s/config.json: rope_scaling yarn with %s has no GGUF key; run the "
                         "checkpoint itself", dir, !cfg->rope_truncate ? "truncate false" : "mscale / mscale_all_dim");
        goto fail;
    }
    const int64_t n_lr = cfg->rope_type == CDX_HF_ROPE_LONGROPE ? cfg->n_rope_factors : 0;
    if (n_lr && n_lr != (int64_t)((double)cfg->head_dim * cfg->partial_rotary_factor) / 2) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s/config.json: rope_scaling's factor lists have %lld entries; longrope "
                         "needs one per rotated pair", dir, (long long)n_lr);
        goto fail;
    }
    n_params += 2 * (uint64_t)n_lr;
    c->pooling = -1;
    if (o.rerank) {
        if (!d->gguf_name || strcmp(d->gguf_name, "qwen3")) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: a reranker is written as llama.cpp's Qwen3-Reranker (qwen3); "
                             "this checkpoint is %s", dir, cfg->architecture);
            goto fail;
        }
        n_params += 2 * (uint64_t)cfg->hidden_size; /* cls.output; an untied lm_head is not written */
        for (size_t i = 0; !cfg->tie_word_embeddings && i < n_src; i++)
            if (!strcmp(refs[i].t->name, "lm_head.weight"))
                n_params -= (uint64_t)(cfg->vocab_size * cfg->hidden_size);
    } else {
        cdx_st_pipeline p;
        if ((rc = cdx_st_pipeline_read(dir, &p, err)))
            goto fail;
        if (p.present && k_llama_pooling_of[p.pooling] < 0) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s/1_Pooling/config.json: pooling %s has no llama.cpp "
                             "pooling_type (none, mean, cls, last, rank); run the folder itself", dir,
                             cdx_pooling_name(p.pooling));
            goto fail;
        }
        c->pooling = p.present ? k_llama_pooling_of[p.pooling] : -1;
        c->normalize = p.present && p.normalize;
    }
    if ((rc = write_metadata(c, w, dir, d, &o, ft->llama_ftype, n_params)) < 0) {
        rc = cdx_err_set(err, rc, "%s: out of memory writing metadata", dir);
        goto fail;
    }
    if (has_freqs) {
        uint64_t ne[1] = { (uint64_t)(cfg->head_dim / 2) };
        if ((rc = add_tensor(c, w, "rope_freqs.weight", CDX_TYPE_F32, 1, ne, freqs, NULL, err)))
            goto fail;
    }
    for (int k = 0; k < 2 && n_lr; k++) { /* Phi3MiniModel.generate_extra_tensors: long, then short, f32 */
        float lf[CDX_HF_MAX_ROPE_FACTORS];
        for (int64_t i = 0; i < n_lr; i++)
            lf[i] = (float)(k ? cfg->rope_short[i] : cfg->rope_long[i]);
        uint64_t ne[1] = { (uint64_t)n_lr };
        if ((rc = add_tensor(c, w, k ? "rope_factors_short.weight" : "rope_factors_long.weight", CDX_TYPE_F32, 1, ne,
                             lf, NULL, err)))
            goto fail;
    }
    for (size_t i = 0; i < n_src; i++) {
        char gname[160];
        int layer, expert, role;
        const char *tn = refs[i].t->name;
        if (o.rerank && (cfg->tie_word_embeddings ? strstr(tn, "embed_tokens") != NULL : strstr(tn, "lm_head") != NULL)) {
            /* Qwen3Model.modify_tensors: the head's yes/no rows first; a tied embedding is then written as itself */
            if ((rc = write_cls_out(c, w, refs[i].t, &o, dir, err)))
                goto fail;
            if (!cfg->tie_word_embeddings)
                continue;
        }
        if (d->moe_oai && strstr(tn, ".mlp."))
            rc = convert_oai_tensor(c, w, refs[i].t, o.type, dir, err);
        else if (d->bitnet && refs[i].t->type == CDX_TYPE_COUNT)
            rc = convert_bitlinear(c, w, refs[i].t, d, o.type, dir, err);
        else if (d->moe && arch_moe_hf_name(d->arch, refs[i].t->name, gname, sizeof gname, &layer, &expert, &role))
            rc = d->hf_experts_fused && (role == MOE_GATE || role == MOE_DOWN)
                     ? convert_fused_experts(c, w, refs[i].t, d, layer, role, o.type, dir, err)
                     : convert_moe_tensor(c, w, refs[i].t, gname, layer, expert, role, o.type, dir, err);
        else
            rc = convert_tensor(c, w, refs[i].t, d, o.type, dir, err);
        if (rc)
            goto fail;
    }
    for (size_t i = 0; i < c->n_stacks; i++)
        if (c->stacks[i].n_have != c->cfg.n_experts) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s has %d of the %lld experts config.json gives", dir,
                             c->stacks[i].name, c->stacks[i].n_have, (long long)c->cfg.n_experts);
            goto fail;
        }
    free(refs);
    *out = c;
    return CDX_OK;
fail:
    free(refs);
    cdx_convert_free(c);
    return rc;
}
