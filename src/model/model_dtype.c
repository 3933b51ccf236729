/* The compute type of a model (--dtype): the one table of defaults per format and stored type,
 * and the load-time cast of a checkpoint's weights to bf16 (from_pretrained(torch_dtype=bfloat16)). */
#include "arch.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_dtype_names[CDX_DTYPE_COUNT] = {
    [CDX_DTYPE_AUTO] = "auto", [CDX_DTYPE_F32] = "f32", [CDX_DTYPE_BF16] = "bf16",
};

const char *cdx_dtype_name(cdx_dtype d) { return (unsigned)d < CDX_DTYPE_COUNT ? k_dtype_names[d] : "?"; }

int cdx_dtype_from_name(const char *s, cdx_dtype *out)
{
    for (int d = 0; d < CDX_DTYPE_COUNT; d++)
        if (s && !strcmp(s, k_dtype_names[d])) {
            *out = (cdx_dtype)d;
            return CDX_OK;
        }
    return CDX_EINVAL;
}

/* The families with a bf16 forward pass (forward_bf16.c; their rows say so), checked against
 * ../shared/fixtures/hf's golden_bf16.json. */
static bool has_bf16(const arch_desc *d) { return d->bf16; }
static bool arch_has_bf16(cdx_arch a) { return arch_get(a) && arch_get(a)->bf16; }

/* What a model computes in by default. Rows are tried in order; the first that matches decides. */
typedef enum { ST_ANY, ST_HALF, ST_F32 } stored_kind; /* HALF: F16 or BF16 */
static const struct dtype_rule {
    bool gguf;
    stored_kind stored;
    int bf16_arch;           /* -1: any; 0/1: the architecture has (1) or lacks (0) a bf16 forward pass;
                                2: has one, but this model has a part it does not compute (f32_only) */
    cdx_dtype dtype;
    const char *why;         /* also the --help line */
} k_rules[] = {
    { true,  ST_ANY,  -1, CDX_DTYPE_F32,  "GGUF: f32, as llama.cpp computes (F16/BF16 tensors see activations rounded to their type)" },
    { false, ST_HALF,  1, CDX_DTYPE_BF16, "checkpoint stored in bf16 or f16: bf16, as transformers runs it (f16 weights cast to bf16 once)" },
    { false, ST_HALF,  2, CDX_DTYPE_F32,  "checkpoint stored in bf16 or f16 of a family with a bf16 pass, but this model's RoPE scaling or layers are computed in f32 only, or its f16 experts stream under a weight budget: f32 (exact upcast)" },
    { false, ST_HALF,  0, CDX_DTYPE_F32,  "checkpoint stored in bf16 or f16, architecture without a bf16 forward pass yet: f32 (exact upcast)" },
    { false, ST_F32,  -1, CDX_DTYPE_F32,  "checkpoint stored in f32: f32" },
};
static const char k_why_f32[] = "asked for with --dtype f32";
static const char k_why_bf16[] = "asked for with --dtype bf16 (weights cast to bf16 at load, as torch_dtype=bfloat16 does)";

bool cdx_dtype_rope_f32_only(int t)
{
    return t == CDX_HF_ROPE_DYNAMIC; /* YaRN (GPT-OSS), LongRoPE (Phi-3): the bf16 pass rotates them */
}

int cdx_dtype_choose(bool gguf, uint32_t stored_type, cdx_arch arch, bool f32_only, cdx_dtype want, cdx_dtype *out,
                     const char **why, cdx_err *err)
{
    const stored_kind st = stored_type == CDX_TYPE_F16 || stored_type == CDX_TYPE_BF16 ? ST_HALF : ST_F32;
    const bool has = arch_has_bf16(arch);
    const int hv = has ? (f32_only ? 2 : 1) : 0;
    if (want == CDX_DTYPE_F32) {
        *out = CDX_DTYPE_F32;
        *why = k_why_f32;
        return CDX_OK;
    }
    if (want == CDX_DTYPE_BF16) {
        if (gguf)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "--dtype bf16 applies to safetensors checkpoints; a GGUF file "
                               "computes as llama.cpp does (f32 activations, rounded to F16/BF16 where a tensor is "
                               "stored so): use --dtype f32 (the default) for it");
        if (!has) {
            char list[1024];
            arch_titles(has_bf16, list, sizeof list);
            for (char *c = list; *c; c++)
                *c = (char)tolower((unsigned char)*c);
            const arch_desc *d = arch_get(arch);
            return cdx_err_set(err, CDX_EUNSUPPORTED, "--dtype bf16: the %s architecture has no bf16 forward pass yet"
                               "%s%s (%s do); use --dtype f32", cdx_model_arch_family(arch),
                               d && d->bf16_none ? ": " : "", d && d->bf16_none ? d->bf16_none : "", list);
        }
        if (f32_only)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "--dtype bf16: this model's RoPE scaling or layers are computed "
                               "in f32 only; use --dtype f32");
        *out = CDX_DTYPE_BF16;
        *why = k_why_bf16;
        return CDX_OK;
    }
    if (want != CDX_DTYPE_AUTO)
        return cdx_err_set(err, CDX_EINVAL, "compute type %d; expected auto, f32 or bf16", (int)want);
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++) {
        const struct dtype_rule *r = &k_rules[i];
        if (r->gguf != gguf || (r->stored != ST_ANY && r->stored != st) || (r->bf16_arch >= 0 && r->bf16_arch != hv))
            continue;
        *out = r->dtype;
        *why = r->why;
        return CDX_OK;
    }
    *out = CDX_DTYPE_F32; /* not reached: the rows cover every case */
    *why = "f32";
    return CDX_OK;
}

static pthread_once_t g_help_once = PTHREAD_ONCE_INIT;
static char g_help[1024];

static void help_init(void)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0] && n < sizeof g_help; i++)
        n += (size_t)snprintf(g_help + n, sizeof g_help - n, "    %s\n", k_rules[i].why);
}

const char *cdx_dtype_help(void)
{
    pthread_once(&g_help_once, help_init);
    return g_help;
}

cdx_dtype cdx_model_dtype(const cdx_model *m) { return m->dtype; }
const char *cdx_model_dtype_why(const cdx_model *m) { return m->dtype_why ? m->dtype_why : ""; }
uint32_t cdx_model_kv_type_default(const cdx_model *m) { return m->dtype == CDX_DTYPE_BF16 ? CDX_TYPE_BF16 : CDX_TYPE_F32; }

/* ---- the cast ---- */

/* The type most of the model's weight values are stored in (embedding and every matrix). */
static uint32_t stored_type(const cdx_model *m)
{
    double by_type[3] = { 0 }; /* F32, F16, BF16 */
    const cdx_mat *all[1] = { &m->tok_embd };
    for (size_t i = 0; i <= m->n_mats; i++) {
        const cdx_mat *w = i < m->n_mats ? m->mats[i] : all[0];
        const int k = w->type == CDX_TYPE_F32 ? 0 : w->type == CDX_TYPE_F16 ? 1 : w->type == CDX_TYPE_BF16 ? 2 : -1;
        if (k >= 0)
            by_type[k] += (double)w->rows * (double)w->cols;
    }
    return by_type[2] >= by_type[1] && by_type[2] > by_type[0] ? CDX_TYPE_BF16
         : by_type[1] > by_type[0]                             ? CDX_TYPE_F16
                                                               : CDX_TYPE_F32;
}

static void round_vec(float *v, int64_t n)
{
    for (int64_t i = 0; v && i < n; i++)
        v[i] = cdx_bf16_round(v[i]);
}

/* w as BF16: a mapped BF16 matrix is used as it is; an F32 or F16 one is cast into a buffer of
 * our own (F16 through its exact f32 value, as Tensor.to(torch.bfloat16) does). */
static int cast_mat(cdx_model *m, cdx_mat *w, const char *path, cdx_err *err)
{
    if (w->type == CDX_TYPE_BF16) {
        w->act_bf16 = true;
        return CDX_OK;
    }
    const cdx_type_traits *t = cdx_type_get(w->type);
    if ((w->type != CDX_TYPE_F32 && w->type != CDX_TYPE_F16) || !t || !t->to_f32)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: a matrix of type %s cannot be cast to bf16", path,
                           cdx_type_name(w->type));
    size_t bytes;
    if (!cdx_mul_size((size_t)w->rows, (size_t)w->cols, &bytes) || !cdx_mul_size(bytes, 2, &bytes))
        return cdx_err_set(err, CDX_ERANGE, "%s: a %lld x %lld matrix is too large", path, (long long)w->rows,
                           (long long)w->cols);
    uint16_t *dst = huge_alloc(bytes);
    float *row = malloc((size_t)w->cols * sizeof *row);
    if (!dst || !row) {
        free(dst);
        free(row);
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory for a bf16 copy of a %lld x %lld matrix (%zu MiB)", path,
                           (long long)w->rows, (long long)w->cols, bytes >> 20);
    }
    for (int64_t r = 0; r < w->rows; r++) {
        t->to_f32((const uint8_t *)w->data + (size_t)r * w->row_bytes, row, w->cols);
        for (int64_t c = 0; c < w->cols; c++)
            dst[(size_t)r * (size_t)w->cols + (size_t)c] = cdx_f32_to_bf16(row[c]);
    }
    free(row);
    m->bf16_bufs[m->n_bf16_bufs++] = dst;
    w->type = CDX_TYPE_BF16;
    w->data = dst;
    w->row_bytes = (size_t)w->cols * 2;
    w->act_half = false;
    w->act_bf16 = true;
    return CDX_OK;
}

/* Whether p points into layer L's transposed expert copies (exp_own) */
static bool model_owns_data_in(const layer_weights *L, const void *p)
{
    const uint8_t *o = L->exp_own;
    return o && (const uint8_t *)p >= o && (const uint8_t *)p < o + L->exp_own_bytes;
}

/* Whether the bf16 cast would copy an expert matrix (one not stored in BF16). */
static bool experts_copied(const cdx_model *m)
{
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        for (int64_t e = 0; m->layers[l].moe && e < m->hp.n_expert; e++) {
            const layer_weights *L = &m->layers[l];
            if (L->exp_gate[e].type != CDX_TYPE_BF16 || L->exp_up[e].type != CDX_TYPE_BF16 ||
                L->exp_down[e].type != CDX_TYPE_BF16)
                return true;
        }
    return false;
}

int model_set_dtype(cdx_model *m, cdx_dtype want, bool gguf, const char *path, cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    /* a model the bf16 pass would refuse at its first batch: f32 by default, --dtype bf16 refused here */
    const char *no = !gguf && arch_has_bf16(hp->arch) ? bf16_unsupported(m) : NULL;
    if (!no && !gguf && m->xc && experts_copied(m))
        no = "a weight budget (--weight-budget) streams the experts from the file as they are stored, and a bf16 copy of "
             "F32 or F16 experts would hold them all in memory (a checkpoint stored in bf16 streams them as they are)";
    if (no && want == CDX_DTYPE_BF16)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: --dtype bf16: %s; use --dtype f32", path, no);
    int rc = cdx_dtype_choose(gguf, stored_type(m), hp->arch, no != NULL, want, &m->dtype, &m->dtype_why, err);
    if (rc)
        return cdx_err_prefix(err, "%s", path);
    if (m->dtype != CDX_DTYPE_BF16)
        return CDX_OK;
    m->bf16_bufs = calloc(m->n_mats + 1, sizeof *m->bf16_bufs);
    if (!m->bf16_bufs)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if ((rc = cast_mat(m, &m->tok_embd, path, err)))
        return rc;
    for (size_t i = 0; i < m->n_mats; i++) {
        if (m->mats[i] == &m->output && hp->tied_embeddings)
            continue; /* the embedding itself, cast above */
        if ((rc = cast_mat(m, m->mats[i], path, err)))
            return rc;
    }
    if (hp->tied_embeddings)
        m->output = m->tok_embd;
    for (int64_t l = 0; l < hp->n_layer; l++) { /* GPT-OSS: its transposed f32 experts, now cast, are not read again */
        layer_weights *L = &m->layers[l];
        bool cast = L->exp_own != NULL;
        for (int64_t e = 0; cast && e < hp->n_expert; e++)
            cast = !model_owns_data_in(L, L->exp_gate[e].data) && !model_owns_data_in(L, L->exp_up[e].data) &&
                   !model_owns_data_in(L, L->exp_down[e].data);
        if (cast) {
            free(L->exp_own);
            L->exp_own = NULL;
            L->exp_own_bytes = 0;
        }
    }
    const int64_t E = hp->n_embd, qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    const bool norm16 = !m->desc->bf16_norm_f32; /* GPT-OSS keeps its norms' weights in f32 */
    round_vec(norm16 ? m->out_norm : NULL, E);
    round_vec(m->out_norm_b, E);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        layer_weights *L = &m->layers[l];
        round_vec(norm16 ? L->attn_norm : NULL, E);
        round_vec(norm16 ? L->ffn_norm : NULL, E);
        round_vec(L->attn_post_norm, E);
        round_vec(L->ffn_post_norm, E);
        round_vec(L->attn_norm_b, E);
        round_vec(L->ffn_norm_b, E);
        round_vec(L->bo, E);
        round_vec(L->b_up, hp->n_ff);
        round_vec(L->b_down, E);
        round_vec(L->bq, qd);
        round_vec(L->bk, kvd);
        round_vec(L->bv, kvd);
        /* per head, or over the whole projection (OLMo 2) */
        round_vec(L->q_norm, hp->qk_norm_full ? qd : hp->head_dim);
        round_vec(L->k_norm, hp->qk_norm_full ? kvd : hp->head_dim);
        /* GPT-OSS: the sinks (nn.Parameter), the router's and the experts' biases */
        round_vec(L->sinks, hp->n_head);
        round_vec(L->router_b, hp->n_expert);
        round_vec(L->exp_b_gate, hp->n_expert * hp->n_ff_expert);
        round_vec(L->exp_b_up, hp->n_expert * hp->n_ff_expert);
        round_vec(L->exp_b_down, hp->n_expert * E);
    }
    /* A (1 + w) norm's offset is added after this (cdx_model_open): torch adds 1.0 to the bf16 weight in f32. */
    return CDX_OK;
}

void model_free_dtype(cdx_model *m)
{
    for (size_t i = 0; i < m->n_bf16_bufs; i++)
        free(m->bf16_bufs[i]);
    free(m->bf16_bufs);
    m->bf16_bufs = NULL;
    m->n_bf16_bufs = 0;
}
