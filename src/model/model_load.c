/* Binding a file's tensors to an architecture. Hyperparameters come from GGUF metadata or
 * config.json; then every tensor the architecture needs is looked up by role, its shape and type
 * checked, and any tensor left over is refused by name. */
#include "arch.h"
#include "expert_cache.h"

#include "caldrix/config.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/stat.h>

/* ---- tensor roles ---- */

typedef enum { D_NONE, D_EMBD, D_VOCAB, D_Q, D_KV, D_FF, D_HD, D_ROT2, D_NEXP, D_FFE, D_FFS, D_ONE,
               D_QG, D_SSM_CH, D_SSM_VD, D_SSM_NV, D_SSM_DV, D_SSM_K, D_QN, D_KN, D_FFE2, D_QKV, D_FF2, D_HEADS } dim_kind;
typedef enum { NEED_ALWAYS, NEED_OPTIONAL, NEED_QKV_BIAS, NEED_QK_NORM, NEED_LINEAR, NEED_PRE_NORM,
               NEED_POST_NORM, NEED_SPLIT_QKV, NEED_FUSED_QKV, NEED_SPLIT_FFN, NEED_FUSED_FFN,
               NEED_FFN_NORM, NEED_NORM_B, NEED_FFN_NORM_B, NEED_LINEAR_BIAS, NEED_GATE, NEED_OUT_NORM, NEED_SINKS,
               NEED_SUB_NORM } need_kind;

static const struct role_desc {
    const char *gguf, *hf;
    bool per_layer, is_mat;
    dim_kind rows, cols;    /* a vector has rows = its length, cols = D_NONE */
    need_kind need;
    cdx_tensor_kind kind;   /* what its values are (a norm's scale, a decay): a fresh model's init */
} k_roles[ROLE_COUNT] = {
    [ROLE_TOK_EMBD]   = { "token_embd.weight",          "model.embed_tokens.weight",                   false, true,  D_VOCAB, D_EMBD, NEED_ALWAYS },
    [ROLE_OUT_NORM]   = { "output_norm.weight",         "model.norm.weight",                           false, false, D_EMBD,  D_NONE, NEED_OUT_NORM, CDX_TENSOR_NORM },
    [ROLE_OUT_NORM_B] = { "output_norm.bias",           "model.norm.bias",                             false, false, D_EMBD,  D_NONE, NEED_NORM_B },
    [ROLE_OUTPUT]     = { "output.weight",              "lm_head.weight",                              false, true,  D_VOCAB, D_EMBD, NEED_OPTIONAL },
    [ROLE_ROPE_FREQS] = { "rope_freqs.weight",          NULL,                                          false, false, D_ROT2,  D_NONE, NEED_OPTIONAL },
    [ROLE_ROPE_LONG]  = { "rope_factors_long.weight",   NULL,                                          false, false, D_ROT2,  D_NONE, NEED_OPTIONAL },
    [ROLE_ROPE_SHORT] = { "rope_factors_short.weight",  NULL,                                          false, false, D_ROT2,  D_NONE, NEED_OPTIONAL },
    [ROLE_ATTN_NORM]  = { "blk.%d.attn_norm.weight",    "model.layers.%d.input_layernorm.weight",      true,  false, D_EMBD,  D_NONE, NEED_PRE_NORM, CDX_TENSOR_NORM },
    [ROLE_ATTN_NORM_B] = { "blk.%d.attn_norm.bias",     "model.layers.%d.input_layernorm.bias",        true,  false, D_EMBD,  D_NONE, NEED_NORM_B },
    [ROLE_WQKV]       = { "blk.%d.attn_qkv.weight",     "model.layers.%d.self_attn.qkv_proj.weight",   true,  true,  D_QKV,   D_EMBD, NEED_FUSED_QKV },
    [ROLE_WQ]         = { "blk.%d.attn_q.weight",       "model.layers.%d.self_attn.q_proj.weight",     true,  true,  D_QG,    D_EMBD, NEED_SPLIT_QKV },
    [ROLE_WK]         = { "blk.%d.attn_k.weight",       "model.layers.%d.self_attn.k_proj.weight",     true,  true,  D_KV,    D_EMBD, NEED_SPLIT_QKV },
    [ROLE_WV]         = { "blk.%d.attn_v.weight",       "model.layers.%d.self_attn.v_proj.weight",     true,  true,  D_KV,    D_EMBD, NEED_SPLIT_QKV },
    [ROLE_WO]         = { "blk.%d.attn_output.weight",  "model.layers.%d.self_attn.o_proj.weight",     true,  true,  D_EMBD,  D_Q,    NEED_ALWAYS },
    [ROLE_BQ]         = { "blk.%d.attn_q.bias",         "model.layers.%d.self_attn.q_proj.bias",       true,  false, D_Q,     D_NONE, NEED_QKV_BIAS },
    [ROLE_BK]         = { "blk.%d.attn_k.bias",         "model.layers.%d.self_attn.k_proj.bias",       true,  false, D_KV,    D_NONE, NEED_QKV_BIAS },
    [ROLE_BV]         = { "blk.%d.attn_v.bias",         "model.layers.%d.self_attn.v_proj.bias",       true,  false, D_KV,    D_NONE, NEED_QKV_BIAS },
    [ROLE_BO]         = { "blk.%d.attn_output.bias",    "model.layers.%d.self_attn.o_proj.bias",       true,  false, D_EMBD,  D_NONE, NEED_LINEAR_BIAS },
    [ROLE_QNORM]      = { "blk.%d.attn_q_norm.weight",  "model.layers.%d.self_attn.q_norm.weight",     true,  false, D_QN,    D_NONE, NEED_QK_NORM, CDX_TENSOR_NORM },
    [ROLE_KNORM]      = { "blk.%d.attn_k_norm.weight",  "model.layers.%d.self_attn.k_norm.weight",     true,  false, D_KN,    D_NONE, NEED_QK_NORM, CDX_TENSOR_NORM },
    [ROLE_SINKS]      = { "blk.%d.attn_sinks.weight",   "model.layers.%d.self_attn.sinks",             true,  false, D_HEADS, D_NONE, NEED_SINKS },
    [ROLE_ATTN_POST_NORM] = { "blk.%d.post_attention_norm.weight", "model.layers.%d.post_attention_layernorm.weight", true, false, D_EMBD, D_NONE, NEED_POST_NORM, CDX_TENSOR_NORM },
    /* BitNet: BitNetRMSNorm(hidden_size) over the attention's output (heads × head_dim = hidden_size) */
    [ROLE_ATTN_SUB_NORM] = { "blk.%d.attn_sub_norm.weight", "model.layers.%d.self_attn.attn_sub_norm.weight", true, false, D_EMBD, D_NONE, NEED_SUB_NORM, CDX_TENSOR_NORM },
    [ROLE_FFN_NORM]   = { "blk.%d.ffn_norm.weight",     "model.layers.%d.post_attention_layernorm.weight", true, false, D_EMBD, D_NONE, NEED_FFN_NORM, CDX_TENSOR_NORM },
    [ROLE_FFN_NORM_B] = { "blk.%d.ffn_norm.bias",       "model.layers.%d.post_attention_layernorm.bias", true, false, D_EMBD, D_NONE, NEED_FFN_NORM_B },
    [ROLE_GATE_UP]    = { "blk.%d.ffn_up.weight",       "model.layers.%d.mlp.gate_up_proj.weight",     true,  true,  D_FF2,   D_EMBD, NEED_FUSED_FFN },
    [ROLE_GATE]       = { "blk.%d.ffn_gate.weight",     "model.layers.%d.mlp.gate_proj.weight",        true,  true,  D_FF,    D_EMBD, NEED_GATE },
    [ROLE_UP]         = { "blk.%d.ffn_up.weight",       "model.layers.%d.mlp.up_proj.weight",          true,  true,  D_FF,    D_EMBD, NEED_SPLIT_FFN },
    [ROLE_UP_B]       = { "blk.%d.ffn_up.bias",         "model.layers.%d.mlp.up_proj.bias",            true,  false, D_FF,    D_NONE, NEED_LINEAR_BIAS },
    [ROLE_DOWN]       = { "blk.%d.ffn_down.weight",     "model.layers.%d.mlp.down_proj.weight",        true,  true,  D_EMBD,  D_FF,   NEED_ALWAYS },
    [ROLE_DOWN_B]     = { "blk.%d.ffn_down.bias",       "model.layers.%d.mlp.down_proj.bias",          true,  false, D_EMBD,  D_NONE, NEED_LINEAR_BIAS },
    [ROLE_FFN_POST_NORM] = { "blk.%d.post_ffw_norm.weight", "model.layers.%d.post_feedforward_layernorm.weight", true, false, D_EMBD, D_NONE, NEED_POST_NORM, CDX_TENSOR_NORM },
    [ROLE_FFN_SUB_NORM] = { "blk.%d.ffn_sub_norm.weight", "model.layers.%d.mlp.ffn_sub_norm.weight", true, false, D_FF, D_NONE, NEED_SUB_NORM, CDX_TENSOR_NORM },
    /* Gated DeltaNet (Qwen3.5 linear_attn; GGUF names as llama.cpp's qwen35, whose ssm_a is -exp(A_log)) */
    [ROLE_SSM_QKV]    = { "blk.%d.attn_qkv.weight",     "model.layers.%d.linear_attn.in_proj_qkv.weight", true, true,  D_SSM_CH, D_EMBD, NEED_LINEAR },
    [ROLE_SSM_Z]      = { "blk.%d.attn_gate.weight",    "model.layers.%d.linear_attn.in_proj_z.weight", true,  true,  D_SSM_VD, D_EMBD, NEED_LINEAR },
    [ROLE_SSM_B]      = { "blk.%d.ssm_beta.weight",     "model.layers.%d.linear_attn.in_proj_b.weight", true,  true,  D_SSM_NV, D_EMBD, NEED_LINEAR },
    [ROLE_SSM_A]      = { "blk.%d.ssm_alpha.weight",    "model.layers.%d.linear_attn.in_proj_a.weight", true,  true,  D_SSM_NV, D_EMBD, NEED_LINEAR },
    [ROLE_SSM_CONV]   = { "blk.%d.ssm_conv1d.weight",   "model.layers.%d.linear_attn.conv1d.weight",   true,  false, D_SSM_CH, D_SSM_K, NEED_LINEAR },
    [ROLE_SSM_DT]     = { "blk.%d.ssm_dt.bias",         "model.layers.%d.linear_attn.dt_bias",         true,  false, D_SSM_NV, D_NONE, NEED_LINEAR },
    [ROLE_SSM_ALOG]   = { "blk.%d.ssm_a",               "model.layers.%d.linear_attn.A_log",           true,  false, D_SSM_NV, D_NONE, NEED_LINEAR, CDX_TENSOR_DECAY },
    [ROLE_SSM_NORM]   = { "blk.%d.ssm_norm.weight",     "model.layers.%d.linear_attn.norm.weight",     true,  false, D_SSM_DV, D_NONE, NEED_LINEAR, CDX_TENSOR_NORM },
    [ROLE_SSM_OUT]    = { "blk.%d.ssm_out.weight",      "model.layers.%d.linear_attn.out_proj.weight", true,  true,  D_EMBD,  D_SSM_VD, NEED_LINEAR },
};

/* A family's own name for a role, if it has one (its row's names list). */
static const char *own_name(const arch_desc *d, int role, bool moe, bool gguf)
{
    for (const role_name *n = d ? d->names : NULL; n && n->name; n++)
        if (n->role == role && n->moe == moe && n->gguf == gguf)
            return n->name;
    return NULL;
}

static const char *role_gguf_name(const arch_desc *d, tensor_role r)
{
    const char *own = own_name(d, r, false, true);
    return own ? own : k_roles[r].gguf;
}

static const char *role_hf_name(const arch_desc *d, tensor_role r)
{
    const char *own = own_name(d, r, false, false);
    return own ? own : k_roles[r].hf;
}

/* Whether family d's layers have role r's kind of tensor at all (the biases: as qkv_bias says; the FFN
 * norm: not in a parallel block). */
static bool role_in_family(const arch_desc *d, need_kind need, bool qkv_bias, bool qk_norm, bool parallel,
                           bool lin_bias)
{
    switch (need) {
    case NEED_QKV_BIAS: return qkv_bias;
    case NEED_LINEAR_BIAS: return d->linear_bias && lin_bias;
    case NEED_GATE: return !d->mlp_plain && !d->fused_gate_up;
    case NEED_QK_NORM: return qk_norm;
    case NEED_PRE_NORM: return !d->no_pre_norms && !d->norm_none;
    case NEED_OUT_NORM: return !d->norm_none;
    case NEED_SINKS: return d->attn_sinks;
    case NEED_SUB_NORM: return d->bitnet;
    case NEED_POST_NORM: return d->post_norms;
    case NEED_SPLIT_QKV: return !d->fused_qkv;
    case NEED_FUSED_QKV: return d->fused_qkv;
    case NEED_SPLIT_FFN: return !d->fused_gate_up;
    case NEED_FUSED_FFN: return d->fused_gate_up;
    case NEED_FFN_NORM: return !d->no_pre_norms && !d->norm_none && !parallel;
    case NEED_NORM_B: return d->norm_bias;
    case NEED_FFN_NORM_B: return d->norm_bias && !parallel;
    default: return true;
    }
}

/* Roles that are norms or their biases: a family without them names nothing. */
static bool need_is_norm(need_kind n)
{
    return n == NEED_PRE_NORM || n == NEED_POST_NORM || n == NEED_FFN_NORM || n == NEED_NORM_B || n == NEED_FFN_NORM_B ||
           n == NEED_OUT_NORM || n == NEED_SUB_NORM;
}

const char *arch_role_name_of(const arch_desc *d, tensor_role r, bool gguf, bool *per_layer)
{
    if ((unsigned)r >= ROLE_COUNT)
        return NULL;
    if (per_layer)
        *per_layer = k_roles[r].per_layer;
    /* a norm the family's layers do not have names nothing (OLMo 2's post_attention_layernorm is the
     * attention output's norm, not the MLP's input norm) */
    const need_kind nk = k_roles[r].need;
    if (d && (nk == NEED_PRE_NORM || nk == NEED_POST_NORM || nk == NEED_SPLIT_QKV || nk == NEED_FUSED_QKV ||
              nk == NEED_SPLIT_FFN || nk == NEED_FUSED_FFN || need_is_norm(nk)) &&
        !role_in_family(d, nk, false, false, false, false))
        return NULL;
    return gguf ? role_gguf_name(d, r) : role_hf_name(d, r);
}

static int64_t dim_value(const cdx_hparams *hp, dim_kind d)
{
    switch (d) {
    case D_EMBD: return hp->n_embd;
    case D_VOCAB: return hp->n_vocab;
    case D_Q: return hp->n_head * hp->head_dim;
    case D_KV: return hp->n_head_kv * hp->head_dim;
    case D_FF: return hp->n_ff;
    case D_HD: return hp->head_dim;
    case D_ROT2: return hp->n_rot / 2;
    case D_NEXP: return hp->n_expert;
    case D_FFE: return hp->n_ff_expert;
    case D_FFS: return hp->n_ff_shared;
    case D_QG: return hp->n_head * hp->head_dim * (hp->attn_gate ? 2 : 1);
    case D_SSM_CH: return 2 * hp->ssm_n_k_head * hp->ssm_d_k + hp->ssm_n_v_head * hp->ssm_d_v;
    case D_SSM_VD: return hp->ssm_n_v_head * hp->ssm_d_v;
    case D_SSM_NV: return hp->ssm_n_v_head;
    case D_SSM_DV: return hp->ssm_d_v;
    case D_SSM_K: return hp->ssm_conv_k;
    case D_FFE2: return 2 * hp->n_ff_expert;
    case D_QKV: return (hp->n_head + 2 * hp->n_head_kv) * hp->head_dim;
    case D_FF2: return 2 * hp->n_ff;
    case D_HEADS: return hp->n_head;
    case D_QN: return hp->head_dim * (hp->qk_norm_full ? hp->n_head : 1);
    case D_KN: return hp->head_dim * (hp->qk_norm_full ? hp->n_head_kv : 1);
    default: return 1;
    }
}

/* A tensor as the loader sees it, from either file format: row-major rows × cols. */
typedef struct {
    const char *name;
    uint32_t type;
    int n_dims;
    int64_t rows, cols;
    int64_t n_mat;          /* GGUF's stacked experts: n_mat matrices of rows × cols, one after another; else 1 */
    const void *data;
    size_t n_bytes;
} src_tensor;

typedef struct {
    cdx_model *m;
    const char *path;
    src_tensor *tensors;
    bool *used;
    int64_t n;
    bool gguf;
    const uint8_t *layer_flags; /* config.json's per-layer CDX_HF_LAYER_MOE (NULL: GGUF, where a router says so) */
    int64_t *by_name;           /* [n]: tensor indices sorted by name, for lookups */
} binder;

static int by_name_cmp(const void *a, const void *b, void *base)
{
    const src_tensor *t = base;
    return strcmp(t[*(const int64_t *)a].name, t[*(const int64_t *)b].name);
}

/* Sorts the names once: a mixture of experts has tens of thousands of tensors. */
static int index_names(binder *b, cdx_err *err)
{
    b->by_name = malloc((size_t)(b->n ? b->n : 1) * sizeof *b->by_name);
    if (!b->by_name)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int64_t i = 0; i < b->n; i++)
        b->by_name[i] = i;
    qsort_r(b->by_name, (size_t)b->n, sizeof *b->by_name, by_name_cmp, b->tensors);
    return CDX_OK;
}

static const src_tensor *find_tensor(binder *b, const char *name, int64_t *idx)
{
    int64_t lo = 0, hi = b->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(b->tensors[b->by_name[mid]].name, name);
        if (!c) {
            *idx = b->by_name[mid];
            return &b->tensors[*idx];
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int to_f32_copy(binder *b, const src_tensor *t, float **out, cdx_err *err)
{
    const cdx_type_traits *tr = cdx_type_get(t->type);
    if (!tr || !tr->to_f32)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s; caldrix cannot read it as floats",
                           b->path, t->name, cdx_type_name(t->type));
    int64_t n = t->rows * t->cols;
    float *f = b->m->check_only ? calloc((size_t)n, sizeof *f) : malloc((size_t)n * sizeof *f);
    if (!f)
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory for tensor \"%s\"", b->path, t->name);
    if (!b->m->check_only)
        tr->to_f32(t->data, f, n);
    *out = f;
    return CDX_OK;
}

static int bind_role(binder *b, tensor_role role, int layer, cdx_mat *mat, float **vec, bool *present, cdx_err *err)
{
    const struct role_desc *rd = &k_roles[role];
    const cdx_hparams *hp = &b->m->hp;
    const char *fmt = b->gguf ? role_gguf_name(b->m->desc, role) : role_hf_name(b->m->desc, role);
    bool needed = rd->need != NEED_OPTIONAL &&
                  role_in_family(b->m->desc, rd->need, hp->qkv_bias, hp->qk_norm, hp->parallel_residual, hp->linear_bias);
    if (present)
        *present = false;
    if (!fmt)
        return CDX_OK;
    char name[160];
    if (b->gguf)
        snprintf(name, sizeof name, fmt, layer);
    else
        arch_hf_name(b->m->desc, fmt, layer, 0, name, sizeof name);
    int64_t idx = -1;
    const src_tensor *t = find_tensor(b, name, &idx);
    if (!t) {
        if (needed)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is missing; the %s architecture needs it", b->path,
                               name, hp->arch_name);
        return CDX_OK;
    }
    if (!needed && rd->need != NEED_OPTIONAL)
        return CDX_OK; /* left unused: reported as unexpected below */
    int64_t rows = dim_value(hp, rd->rows), cols = rd->is_mat || rd->cols != D_NONE ? dim_value(hp, rd->cols) : 1;
    bool shape_ok = t->n_mat != 1 ? false
                    : rd->is_mat || rd->cols != D_NONE ? (t->n_dims == 2 && t->rows == rows && t->cols == cols)
                               : (t->rows * t->cols == rows && (t->n_dims == 1 || t->rows == 1 || t->cols == 1));
    if (!shape_ok)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has shape [%lld, %lld]; the model's hyperparameters need [%lld, %lld]",
                           b->path, name, (long long)t->rows, (long long)t->cols, (long long)rows, (long long)cols);
    b->used[idx] = true;
    if (present)
        *present = true;
    if (rd->is_mat) {
        if (!cdx_matmul_supports(t->type))
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s, which caldrix cannot compute with yet",
                               b->path, name, cdx_type_name(t->type));
        size_t rb;
        int rc = cdx_type_row_bytes(t->type, (uint64_t)t->cols, &rb, err);
        if (rc)
            return cdx_err_prefix(err, "%s: tensor \"%s\"", b->path, name);
        *mat = (cdx_mat){ .type = t->type, .data = t->data, .rows = t->rows, .cols = t->cols, .row_bytes = rb,
                          .act_half = b->gguf };
        return CDX_OK;
    }
    return to_f32_copy(b, t, vec, err);
}

/* ---- mixture-of-experts tensors ---- */

/* A sparse layer's tensors. GGUF (llama.cpp's names): each expert role is one stacked tensor
 * [n_expert][rows][cols]. HF (transformers' names): one tensor per expert, "%d" the layer, then
 * the expert (a family may name them otherwise: Mixtral's w1, w3, w2). */
static const struct moe_role_desc {
    const char *gguf, *hf;
    dim_kind rows, cols;
    bool per_expert, shared;
} k_moe_roles[MOE_ROLE_COUNT] = {
    [MOE_ROUTER]    = { "blk.%d.ffn_gate_inp.weight", "model.layers.%d.mlp.gate.weight", D_NEXP, D_EMBD, false, false },
    [MOE_GATE]      = { "blk.%d.ffn_gate_exps.weight", "model.layers.%d.mlp.experts.%d.gate_proj.weight", D_FFE, D_EMBD, true, false },
    [MOE_UP]        = { "blk.%d.ffn_up_exps.weight", "model.layers.%d.mlp.experts.%d.up_proj.weight", D_FFE, D_EMBD, true, false },
    [MOE_DOWN]      = { "blk.%d.ffn_down_exps.weight", "model.layers.%d.mlp.experts.%d.down_proj.weight", D_EMBD, D_FFE, true, false },
    [MOE_SH_ROUTER] = { "blk.%d.ffn_gate_inp_shexp.weight", "model.layers.%d.mlp.shared_expert_gate.weight",
                        D_ONE, D_EMBD, false, true },
    [MOE_SH_GATE]   = { "blk.%d.ffn_gate_shexp.weight", "model.layers.%d.mlp.shared_expert.gate_proj.weight",
                        D_FFS, D_EMBD, false, true },
    [MOE_SH_UP]     = { "blk.%d.ffn_up_shexp.weight", "model.layers.%d.mlp.shared_expert.up_proj.weight",
                        D_FFS, D_EMBD, false, true },
    [MOE_SH_DOWN]   = { "blk.%d.ffn_down_shexp.weight", "model.layers.%d.mlp.shared_expert.down_proj.weight",
                        D_EMBD, D_FFS, false, true },
};

/* Matches name against fmt, whose "%d"s each take a decimal number (no leading zeros); the numbers
 * go to v[] in order. */
static bool match_pattern(const char *fmt, const char *name, int v[2])
{
    int k = 0;
    while (*fmt) {
        if (fmt[0] == '%' && fmt[1] == 'd') {
            if (k == 2 || *name < '0' || *name > '9' || (name[0] == '0' && name[1] >= '0' && name[1] <= '9'))
                return false;
            long x = 0;
            while (*name >= '0' && *name <= '9' && x < 1000000)
                x = x * 10 + (*name++ - '0');
            v[k++] = (int)x;
            fmt += 2;
        } else if (*fmt++ != *name++)
            return false;
    }
    return !*name;
}

const char *arch_moe_name_of(const arch_desc *d, moe_role r, bool gguf)
{
    if ((unsigned)r >= MOE_ROLE_COUNT)
        return NULL;
    const char *own = own_name(d, r, true, gguf);
    return own ? own : gguf ? k_moe_roles[r].gguf : k_moe_roles[r].hf;
}

bool arch_moe_hf_name(cdx_arch arch, const char *hf, char *gguf, size_t cap, int *layer, int *expert, int *rows_kind)
{
    const arch_desc *d = arch_get(arch);
    for (int r = 0; d && d->moe && r < MOE_ROLE_COUNT; r++) {
        const struct moe_role_desc *rd = &k_moe_roles[r];
        const char *fmt = arch_moe_name_of(d, (moe_role)r, false);
        int v[2] = { -1, -1 };
        if (!fmt || (rd->shared && !d->shared_expert) || !match_pattern(fmt, hf, v))
            continue;
        snprintf(gguf, cap, arch_moe_name_of(d, (moe_role)r, true), v[0]);
        *layer = v[0];
        *expert = rd->per_expert ? v[1] : -1;
        *rows_kind = r; /* the caller only tells the router (MOE_ROUTER = 0) from the rest */
        return true;
    }
    return false;
}

/* Binds n_mat matrices of rows × cols from one tensor (n_mat > 1: a GGUF expert stack) into out[]. */
static int bind_mat(binder *b, const char *name, int64_t rows, int64_t cols, int64_t n_mat, cdx_mat *out, cdx_err *err)
{
    int64_t idx = -1;
    const src_tensor *t = find_tensor(b, name, &idx);
    const cdx_hparams *hp = &b->m->hp;
    if (!t)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is missing; the %s architecture needs it (%lld experts, "
                           "%lld used per token)", b->path, name, hp->arch_name, (long long)hp->n_expert,
                           (long long)hp->n_expert_used);
    const bool vec_ok = rows == 1 && t->n_dims == 1; /* GGUF's shared-expert gate is a vector */
    const int want_dims = n_mat > 1 ? 3 : 2;
    if (t->n_mat != n_mat || t->rows != rows || t->cols != cols || (!vec_ok && t->n_dims != want_dims && !(n_mat == 1 && t->n_dims == 3)))
        return n_mat > 1 || t->n_mat != 1
                   ? cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has shape [%lld, %lld, %lld]; the model's "
                                 "hyperparameters need [%lld, %lld, %lld] (experts × rows × columns)", b->path, name,
                                 (long long)t->n_mat, (long long)t->rows, (long long)t->cols, (long long)n_mat,
                                 (long long)rows, (long long)cols)
                   : cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has shape [%lld, %lld]; the model's "
                                 "hyperparameters need [%lld, %lld]", b->path, name, (long long)t->rows,
                                 (long long)t->cols, (long long)rows, (long long)cols);
    if (!cdx_matmul_supports(t->type))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s, which caldrix cannot compute with yet",
                           b->path, name, cdx_type_name(t->type));
    size_t rb, one, all;
    if (cdx_type_row_bytes(t->type, (uint64_t)cols, &rb, err))
        return cdx_err_prefix(err, "%s: tensor \"%s\"", b->path, name);
    if (!cdx_mul_size(rb, (size_t)rows, &one) || !cdx_mul_size(one, (size_t)n_mat, &all) || all > t->n_bytes)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" holds %zu bytes; %lld × %lld × %lld of type %s need more",
                           b->path, name, t->n_bytes, (long long)n_mat, (long long)rows, (long long)cols,
                           cdx_type_name(t->type));
    b->used[idx] = true;
    for (int64_t e = 0; e < n_mat; e++)
        out[e] = (cdx_mat){ .type = t->type, .data = (const uint8_t *)t->data + (size_t)e * one, .rows = rows,
                            .cols = cols, .row_bytes = rb, .act_half = b->gguf };
    return CDX_OK;
}

/* A vector or [n × len] matrix tensor as an owned f32 copy, checked: name's rows × cols. */
static int bind_vec(binder *b, const char *name, int64_t rows, int64_t cols, float **out, cdx_err *err)
{
    int64_t idx = -1;
    const src_tensor *t = find_tensor(b, name, &idx);
    if (!t)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is missing; the %s architecture needs it", b->path, name,
                           b->m->hp.arch_name);
    if (t->n_mat != 1 || t->rows * t->cols != rows * cols || (rows > 1 && t->rows != rows))
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has shape [%lld, %lld]; the model's hyperparameters "
                           "need [%lld, %lld]", b->path, name, (long long)t->rows, (long long)t->cols, (long long)rows,
                           (long long)cols);
    b->used[idx] = true;
    return to_f32_copy(b, t, out, err);
}

/* GPT-OSS's experts (arch_desc.moe_oai). GGUF (llama.cpp's gpt-oss): ffn_gate_inp.{weight,bias}, and
 * ffn_{gate,up,down}_exps.{weight,bias} stacked. HF (GptOssMLP): mlp.router.{weight,bias} and
 * mlp.experts.gate_up_proj [E, H, 2I] (x @ W: gate columns 2j, up columns 2j+1), gate_up_proj_bias [E, 2I],
 * down_proj [E, I, H], down_proj_bias [E, H]: the matrices transposed into f32 copies, gate and up apart. */
static int bind_moe_oai(binder *b, int layer, layer_weights *L, cdx_err *err)
{
    cdx_model *m = b->m;
    const cdx_hparams *hp = &m->hp;
    const int64_t ne = hp->n_expert, H = hp->n_embd, I = hp->n_ff_expert;
    char name[192];
    int rc;
    float *gub = NULL;
#define NM(...) (snprintf(name, sizeof name, __VA_ARGS__), name)
    if (b->gguf) {
        if ((rc = bind_mat(b, NM("blk.%d.ffn_gate_inp.weight", layer), ne, H, 1, &L->router, err)) ||
            (rc = bind_vec(b, NM("blk.%d.ffn_gate_inp.bias", layer), 1, ne, &L->router_b, err)) ||
            (rc = bind_mat(b, NM("blk.%d.ffn_gate_exps.weight", layer), I, H, ne, L->exp_gate, err)) ||
            (rc = bind_mat(b, NM("blk.%d.ffn_up_exps.weight", layer), I, H, ne, L->exp_up, err)) ||
            (rc = bind_mat(b, NM("blk.%d.ffn_down_exps.weight", layer), H, I, ne, L->exp_down, err)) ||
            (rc = bind_vec(b, NM("blk.%d.ffn_gate_exps.bias", layer), ne, I, &L->exp_b_gate, err)) ||
            (rc = bind_vec(b, NM("blk.%d.ffn_up_exps.bias", layer), ne, I, &L->exp_b_up, err)) ||
            (rc = bind_vec(b, NM("blk.%d.ffn_down_exps.bias", layer), ne, H, &L->exp_b_down, err)))
            return rc;
        return CDX_OK;
    }
    if ((rc = bind_mat(b, NM("model.layers.%d.mlp.router.weight", layer), ne, H, 1, &L->router, err)) ||
        (rc = bind_vec(b, NM("model.layers.%d.mlp.router.bias", layer), 1, ne, &L->router_b, err)) ||
        (rc = bind_vec(b, NM("model.layers.%d.mlp.experts.gate_up_proj_bias", layer), ne, 2 * I, &gub, err)) ||
        (rc = bind_vec(b, NM("model.layers.%d.mlp.experts.down_proj_bias", layer), ne, H, &L->exp_b_down, err)))
        goto out;
    L->exp_b_gate = malloc((size_t)(ne * I) * sizeof(float));
    L->exp_b_up = malloc((size_t)(ne * I) * sizeof(float));
    if (!L->exp_b_gate || !L->exp_b_up) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < ne * I; i++) {
        L->exp_b_gate[i] = gub[2 * i];
        L->exp_b_up[i] = gub[2 * i + 1];
    }
    const char *fmt[2] = { "model.layers.%d.mlp.experts.gate_up_proj", "model.layers.%d.mlp.experts.down_proj" };
    const int64_t rows[2] = { H, I }, cols[2] = { 2 * I, H };
    const src_tensor *t[2];
    for (int k = 0; k < 2; k++) {
        int64_t idx = -1;
        t[k] = find_tensor(b, NM(fmt[k], layer), &idx);
        if (!t[k]) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is missing; the %s architecture needs it", b->path,
                             name, hp->arch_name);
            goto out;
        }
        if (t[k]->n_mat != ne || t[k]->rows != rows[k] || t[k]->cols != cols[k]) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has shape [%lld, %lld, %lld]; the model's "
                             "hyperparameters need [%lld, %lld, %lld] (experts × in × out)", b->path, name,
                             (long long)t[k]->n_mat, (long long)t[k]->rows, (long long)t[k]->cols, (long long)ne,
                             (long long)rows[k], (long long)cols[k]);
            goto out;
        }
        const cdx_type_traits *tr = cdx_type_get(t[k]->type);
        if (!tr || !tr->to_f32) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%s\" has type %s; caldrix cannot read it as floats",
                             b->path, name, cdx_type_name(t[k]->type));
            goto out;
        }
        b->used[idx] = true;
    }
    /* the transposed copies: per expert gate [I][H], up [I][H], down [H][I] */
    const size_t per = (size_t)(3 * I * H);
    float *own = b->m->check_only ? NULL : malloc((size_t)ne * per * sizeof(float));
    float *row = malloc((size_t)(2 * I > H ? 2 * I : H) * sizeof(float));
    if ((!own && !b->m->check_only) || !row) {
        free(own);
        free(row);
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory for the experts of layer %d", layer);
        goto out;
    }
    L->exp_own = own;
    L->exp_own_bytes = own ? (size_t)ne * per * sizeof(float) : 0;
    size_t rb;
    cdx_type_row_bytes(CDX_TYPE_F32, (uint64_t)H, &rb, NULL);
    size_t rbi;
    cdx_type_row_bytes(CDX_TYPE_F32, (uint64_t)I, &rbi, NULL);
    for (int64_t e = 0; e < ne; e++) {
        float *g = own ? own + (size_t)e * per : NULL, *u = g ? g + I * H : NULL, *dn = u ? u + I * H : NULL;
        for (int k = 0; own && k < 2; k++) {
            const cdx_type_traits *tr = cdx_type_get(t[k]->type);
            size_t srb;
            cdx_type_row_bytes(t[k]->type, (uint64_t)cols[k], &srb, NULL);
            for (int64_t r = 0; r < rows[k]; r++) {
                tr->to_f32((const uint8_t *)t[k]->data + (size_t)(e * rows[k] + r) * srb, row, cols[k]);
                if (k == 0)
                    for (int64_t j = 0; j < I; j++) {
                        g[j * H + r] = row[2 * j];
                        u[j * H + r] = row[2 * j + 1];
                    }
                else
                    for (int64_t j = 0; j < H; j++)
                        dn[j * I + r] = row[j];
            }
        }
        L->exp_gate[e] = (cdx_mat){ .type = CDX_TYPE_F32, .data = g, .rows = I, .cols = H, .row_bytes = rb };
        L->exp_up[e] = (cdx_mat){ .type = CDX_TYPE_F32, .data = u, .rows = I, .cols = H, .row_bytes = rb };
        L->exp_down[e] = (cdx_mat){ .type = CDX_TYPE_F32, .data = dn, .rows = H, .cols = I, .row_bytes = rbi };
    }
    free(row);
    rc = CDX_OK;
out:
#undef NM
    free(gub);
    return rc;
}

static int bind_moe_layer(binder *b, int layer, layer_weights *L, cdx_err *err)
{
    cdx_model *m = b->m;
    const cdx_hparams *hp = &m->hp;
    const size_t ne = (size_t)hp->n_expert;
    L->moe = true;
    L->exp_gate = calloc(ne, sizeof(cdx_mat));
    L->exp_up = calloc(ne, sizeof(cdx_mat));
    L->exp_down = calloc(ne, sizeof(cdx_mat));
    if (!L->exp_gate || !L->exp_up || !L->exp_down)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (m->desc->moe_oai)
        return bind_moe_oai(b, layer, L, err);
    cdx_mat *dst[MOE_ROLE_COUNT] = { &L->router, L->exp_gate, L->exp_up, L->exp_down,
                                     &L->sh_router, &L->sh_gate, &L->sh_up, &L->sh_down };
    char name[192];
    for (int r = 0; r < MOE_ROLE_COUNT; r++) {
        const struct moe_role_desc *rd = &k_moe_roles[r];
        if (rd->shared && !m->desc->shared_expert)
            continue;
        const char *fmt = arch_moe_name_of(m->desc, (moe_role)r, b->gguf);
        if (!fmt)
            continue;
        const int64_t rows = dim_value(hp, rd->rows), cols = dim_value(hp, rd->cols);
        int rc;
        if (rd->per_expert && !b->gguf && m->desc->hf_experts_fused) {
            /* Granite MoE: input_linear [E, 2I, H] holds each expert's gate rows then its up rows (bound as
             * MOE_GATE, split here), output_linear [E, H, I] the down matrices */
            if (r == MOE_UP)
                continue;
            snprintf(name, sizeof name, fmt, layer);
            if ((rc = bind_mat(b, name, r == MOE_GATE ? 2 * rows : rows, cols, (int64_t)ne, dst[r], err)))
                return rc;
            for (size_t e = 0; r == MOE_GATE && e < ne; e++) {
                L->exp_gate[e].rows = L->exp_up[e].rows = rows;
                L->exp_up[e] = L->exp_gate[e];
                L->exp_up[e].data = (const uint8_t *)L->exp_gate[e].data + (size_t)rows * L->exp_gate[e].row_bytes;
            }
            continue;
        }
        if (!rd->per_expert || b->gguf) {
            snprintf(name, sizeof name, fmt, layer);
            if ((rc = bind_mat(b, name, rows, cols, rd->per_expert ? (int64_t)ne : 1, dst[r], err)))
                return rc;
            continue;
        }
        for (size_t e = 0; e < ne; e++) {
            snprintf(name, sizeof name, fmt, layer, (int)e);
            if ((rc = bind_mat(b, name, rows, cols, 1, &dst[r][e], err)))
                return rc;
        }
    }
    return CDX_OK;
}

/* ---- the tensors of a plan, in file order: what inspect looks for and synth writes ---- */

typedef struct walker {
    const cdx_tensor_plan *p;
    const cdx_hparams *hp;   /* NULL: names only */
    void (*fn)(void *ctx, const cdx_tensor_spec *t);
    void *ctx;
} walker;

/* fn, with Qwen3.5 ForConditionalGeneration's model.language_model. in place of model. */
static void emit(const walker *w, const char *name, const char *hf, dim_kind rows, dim_kind cols, int64_t n_mat,
                 bool mat, bool required, cdx_tensor_kind kind)
{
    char full[224];
    if (w->p->text_config && !w->p->gguf && !strncmp(name, "model.", 6)) {
        snprintf(full, sizeof full, "model.language_model.%s", name + 6);
        name = full;
    }
    cdx_tensor_spec t = { .name = name, .hf_name = hf, .n_mat = n_mat, .required = required, .kind = kind };
    if (w->hp) {
        const bool vec = !mat && cols == D_NONE;
        t.rows = vec ? 1 : dim_value(w->hp, rows);
        t.cols = vec ? dim_value(w->hp, rows) : dim_value(w->hp, cols);
        t.n_dims = n_mat > 1 ? 3 : vec || (rows == D_ONE && w->p->gguf) ? 1 : 2; /* GGUF's shared gate: a vector */
    }
    w->fn(w->ctx, &t);
}

/* A role of layer l (-1: a global one) under the plan's names. */
static void emit_role(const walker *w, const arch_desc *d, tensor_role r, int l, bool required)
{
    const struct role_desc *rd = &k_roles[r];
    const char *fmt = w->p->gguf ? role_gguf_name(d, r) : role_hf_name(d, r);
    if (!fmt)
        return;
    char name[192], hf[192];
    if (w->p->gguf)
        snprintf(name, sizeof name, fmt, l);
    else
        arch_hf_name(d, fmt, l, 0, name, sizeof name);
    const char *hfmt = role_hf_name(d, r);
    if (w->p->gguf && hfmt)
        arch_hf_name(d, hfmt, l, 0, hf, sizeof hf);
    emit(w, name, w->p->gguf && hfmt ? hf : NULL, rd->rows, rd->cols, 1, rd->is_mat, required, rd->kind);
}

static void walk(const walker *w)
{
    const cdx_tensor_plan *p = w->p;
    const arch_desc *d = arch_get(p->arch);
    if (!d)
        return;
    emit_role(w, d, ROLE_TOK_EMBD, 0, true);
    for (int64_t l = 0; l < p->n_layer; l++) {
        const bool sparse = p->sparse && p->sparse[l] && p->n_expert > 0;
        const bool linear = p->linear && p->linear[l];
        const bool bias = p->qkv_bias < 0 ? d->qkv_bias : p->qkv_bias > 0;
        for (int r = 0; r < ROLE_COUNT; r++) {
            const struct role_desc *rd = &k_roles[r];
            const bool mlp = r == ROLE_GATE_UP || r == ROLE_GATE || r == ROLE_UP || r == ROLE_DOWN ||
                             r == ROLE_UP_B || r == ROLE_DOWN_B;
            if (!rd->per_layer || (sparse && mlp))
                continue;
            /* a Gated DeltaNet layer has its norms, linear_attn.* and the MLP; the others no linear_attn.* */
            const bool shared = r == ROLE_ATTN_NORM || r == ROLE_FFN_NORM || mlp;
            if ((rd->need == NEED_LINEAR) != linear && !shared)
                continue;
            const bool opt_bias = p->gguf && d->gguf_optional;
            const bool parallel = p->parallel || d->hf[0].cfg.parallel; /* Cohere's block always */
            if (!role_in_family(d, rd->need, bias || opt_bias, d->qk_norm, parallel, bias || opt_bias))
                continue;
            /* llama.cpp's optional tensors of the family (StableLM's biases and FFN norm) */
            const bool optional = p->gguf && d->gguf_optional &&
                                  (rd->need == NEED_QKV_BIAS || rd->need == NEED_LINEAR_BIAS ||
                                   rd->need == NEED_FFN_NORM || rd->need == NEED_FFN_NORM_B);
            emit_role(w, d, (tensor_role)r, (int)l, rd->need != NEED_OPTIONAL && !optional);
            if (p->bitlinear && !p->gguf && d->bitnet && rd->is_mat) { /* a BitLinear's weight_scale */
                char name[192];
                arch_hf_name(d, role_hf_name(d, (tensor_role)r), (int)l, 0, name, sizeof name - 6);
                strcat(name, "_scale");
                emit(w, name, NULL, D_ONE, D_NONE, 1, false, true, CDX_TENSOR_WEIGHT);
            }
        }
        if (sparse && d->moe_oai) { /* GPT-OSS's experts (bind_moe_oai's names) */
            static const struct { const char *gguf, *hf; dim_kind rows, cols; bool stack, mat; } k_oai[] = {
                { "blk.%d.ffn_gate_inp.weight", "model.layers.%d.mlp.router.weight", D_NEXP, D_EMBD, false, true },
                { "blk.%d.ffn_gate_inp.bias", "model.layers.%d.mlp.router.bias", D_NEXP, D_NONE, false, false },
                { "blk.%d.ffn_gate_exps.weight", "model.layers.%d.mlp.experts.gate_up_proj", D_FFE, D_EMBD, true, true },
                { "blk.%d.ffn_up_exps.weight", "model.layers.%d.mlp.experts.gate_up_proj_bias", D_FFE, D_EMBD, true, true },
                { "blk.%d.ffn_down_exps.weight", "model.layers.%d.mlp.experts.down_proj", D_EMBD, D_FFE, true, true },
                { "blk.%d.ffn_gate_exps.bias", "model.layers.%d.mlp.experts.down_proj_bias", D_NEXP, D_FFE, false, false },
                { "blk.%d.ffn_up_exps.bias", NULL, D_NEXP, D_FFE, false, false },
                { "blk.%d.ffn_down_exps.bias", NULL, D_NEXP, D_EMBD, false, false },
            };
            for (size_t i = 0; i < sizeof k_oai / sizeof k_oai[0]; i++) {
                const char *fmt = p->gguf ? k_oai[i].gguf : k_oai[i].hf;
                if (!fmt)
                    continue;
                char name[192];
                snprintf(name, sizeof name, fmt, (int)l);
                dim_kind rows = k_oai[i].rows, cols = k_oai[i].cols;
                bool mat = k_oai[i].mat, stack = k_oai[i].stack;
                if (!p->gguf) { /* HF's shapes: [E, H, 2I], [E, 2I], [E, I, H], [E, H] */
                    static const dim_kind hr[] = { D_NEXP, D_NEXP, D_EMBD, D_NEXP, D_FFE, D_NEXP };
                    static const dim_kind hc[] = { D_EMBD, D_NONE, D_FFE2, D_FFE2, D_EMBD, D_EMBD };
                    rows = hr[i];
                    cols = hc[i];
                    stack = i == 2 || i == 4;
                    mat = i != 1;
                }
                emit(w, name, NULL, rows, cols, stack ? p->n_expert : 1, mat, true, CDX_TENSOR_WEIGHT);
            }
        }
        for (int r = 0; sparse && !d->moe_oai && r < MOE_ROLE_COUNT; r++) {
            const struct moe_role_desc *rd = &k_moe_roles[r];
            const char *fmt = arch_moe_name_of(d, (moe_role)r, p->gguf);
            if (!fmt || (rd->shared && !d->shared_expert))
                continue;
            /* Granite MoE's HF experts: one [E, 2I, H] gate|up stack and one down stack */
            const bool fused = rd->per_expert && !p->gguf && d->hf_experts_fused;
            if (fused && r == MOE_UP)
                continue;
            const bool stack = rd->per_expert && (p->gguf || fused);
            for (int64_t e = 0; e < (rd->per_expert && !stack ? p->n_expert : 1); e++) {
                char name[192], hf[192];
                snprintf(name, sizeof name, fmt, (int)l, (int)e);
                const char *hfmt = arch_moe_name_of(d, (moe_role)r, false);
                if (p->gguf && !stack && hfmt)
                    snprintf(hf, sizeof hf, hfmt, (int)l);
                emit(w, name, p->gguf && !stack && hfmt ? hf : NULL, fused && r == MOE_GATE ? D_FFE2 : rd->rows,
                     rd->cols, stack ? p->n_expert : 1, true, true, CDX_TENSOR_WEIGHT);
            }
        }
    }
    if (!d->norm_none)
        emit_role(w, d, ROLE_OUT_NORM, 0, true);
    if (d->norm_bias)
        emit_role(w, d, ROLE_OUT_NORM_B, 0, true);
    /* the head: required when the plan says the model has its own; else an optional tie-breaker */
    emit_role(w, d, ROLE_OUTPUT, 0, p->untied);
    emit_role(w, d, ROLE_ROPE_FREQS, 0, false);
    emit_role(w, d, ROLE_ROPE_LONG, 0, false);
    emit_role(w, d, ROLE_ROPE_SHORT, 0, false);
}

typedef struct { void (*fn)(void *ctx, const char *name, bool required); void *ctx; } names_fwd;

static void names_one(void *c, const cdx_tensor_spec *t)
{
    const names_fwd *f = c;
    f->fn(f->ctx, t->name, t->required);
}

void cdx_model_tensor_names(const cdx_tensor_plan *p, void (*fn)(void *ctx, const char *name, bool required), void *ctx)
{
    const arch_desc *d = arch_get(p->arch);
    if (!d)
        return;
    if (d->vision && !p->gguf)
        vision_tensor_names(p->n_vision_layer, fn, ctx);
    if (d->encoder) {
        encoder_tensor_names(p->n_layer, p->gguf, fn, ctx);
        return;
    }
    names_fwd f = { fn, ctx };
    walker w = { p, NULL, names_one, &f };
    walk(&w);
}

void cdx_model_tensor_specs(const cdx_tensor_plan *p, const cdx_hparams *hp,
                            void (*fn)(void *ctx, const cdx_tensor_spec *t), void *ctx)
{
    walker w = { p, hp, fn, ctx };
    walk(&w);
}

/* Every weight matrix in one list (m->mats): packing, workspace sizing and the fingerprint walk it. */
/* m->mats: the matrices of layers [l0, l1), and the output head when l0 is 0 (a split model's later
 * stage has no head: the first stage applies it) */
static int collect_mats(cdx_model *m, int64_t l0, int64_t l1, cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    size_t cap = 1;
    for (int64_t l = 0; l < hp->n_layer; l++)
        cap += 18 + (m->layers[l].moe ? 3 * (size_t)hp->n_expert + 4 : 0);
    free(m->mats);
    m->mats = calloc(cap, sizeof *m->mats);
    if (!m->mats)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    size_t n = 0;
    for (int64_t l = l0; l < l1; l++) {
        layer_weights *L = &m->layers[l];
        cdx_mat *att[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down,
                           &L->router, &L->sh_router, &L->sh_gate, &L->sh_up, &L->sh_down,
                           &L->ssm_qkv, &L->ssm_z, &L->ssm_b, &L->ssm_a, &L->ssm_out };
        for (size_t i = 0; i < sizeof att / sizeof att[0]; i++)
            if (att[i]->data)
                m->mats[n++] = att[i];
        for (int64_t e = 0; L->moe && e < hp->n_expert; e++) {
            m->mats[n++] = &L->exp_gate[e];
            m->mats[n++] = &L->exp_up[e];
            m->mats[n++] = &L->exp_down[e];
        }
    }
    if (l0 == 0)
        m->mats[n++] = &m->output;
    m->n_mats = n;
    return CDX_OK;
}

/* ---- common binding ---- */

static int check_hparams(const arch_desc *d, const cdx_hparams *hp, const char *path, cdx_err *err)
{
    const struct { const char *name; int64_t v, lo, hi; } dims[] = {
        /* the config reader's limits (caldrix/config.h): a GGUF file's metadata meets them here */
        { "vocab size", hp->n_vocab, 1, CDX_MAX_VOCAB },  { "hidden size", hp->n_embd, 1, CDX_MAX_HIDDEN },
        { "layers", hp->n_layer, 1, CDX_HF_MAX_LAYERS },  { "attention heads", hp->n_head, 1, CDX_MAX_HEADS },
        { "kv heads", hp->n_head_kv, 1, CDX_MAX_HEADS },  { "head dim", hp->head_dim, 2, CDX_MAX_HEAD_DIM },
        { "feed-forward size", hp->n_ff, 1, CDX_MAX_FF },
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < dims[i].lo || dims[i].v > dims[i].hi)
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s is %lld; expected %lld..%lld", path, dims[i].name,
                               (long long)dims[i].v, (long long)dims[i].lo, (long long)dims[i].hi);
    if (hp->n_head % hp->n_head_kv)
        return cdx_err_set(err, CDX_EFORMAT, "%s: %lld attention heads is not a multiple of %lld kv heads", path,
                           (long long)hp->n_head, (long long)hp->n_head_kv);
    if (hp->n_rot < 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return cdx_err_set(err, CDX_EFORMAT, "%s: rope dimension count is %lld; expected an even count in 2..%lld "
                           "(head_dim)", path, (long long)hp->n_rot, (long long)hp->head_dim);
    if (!hp->linear_layer && (hp->n_rot < 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2))
        return cdx_err_set(err, CDX_EFORMAT, "%s: rope dimension count is %lld; expected an even count in 2..%lld "
                           "(head_dim)", path, (long long)hp->n_rot, (long long)hp->head_dim);
    if (!(hp->rms_eps > 0) || !(hp->rope_theta > 0))
        return cdx_err_set(err, CDX_EFORMAT, "%s: rms_norm_eps (%g) and rope_theta (%g) must be positive", path,
                           (double)hp->rms_eps, hp->rope_theta);
    if (d->bitnet && hp->n_head * hp->head_dim != hp->n_embd) /* attn_sub_norm is hidden_size wide */
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %lld heads × head_dim %lld is not the hidden size %lld; BitNet's "
                           "attn_sub_norm (hidden_size wide) normalizes the heads' output", path, (long long)hp->n_head,
                           (long long)hp->head_dim, (long long)hp->n_embd);
    if (hp->bitlinear && (hp->n_ff % 4 || hp->n_embd % 4 || (hp->n_head_kv * hp->head_dim) % 4))
        return cdx_err_set(err, CDX_EFORMAT, "%s: BitNet's packed weights hold four rows a byte; hidden size %lld, "
                           "kv width %lld and feed-forward size %lld must be multiples of 4", path, (long long)hp->n_embd,
                           (long long)(hp->n_head_kv * hp->head_dim), (long long)hp->n_ff);
    if (!hp->n_expert)
        return CDX_OK;
    /* the readers name the file's own fields; these are the bounds both share */
    if (hp->n_expert < 1 || hp->n_expert > CDX_MAX_EXPERTS)
        return cdx_err_set(err, CDX_EFORMAT, "%s: expert count is %lld; expected 1..%d", path, (long long)hp->n_expert,
                           CDX_MAX_EXPERTS);
    if (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert)
        return cdx_err_set(err, CDX_EFORMAT, "%s: experts used per token is %lld; expected 1..%lld (the expert count)",
                           path, (long long)hp->n_expert_used, (long long)hp->n_expert);
    if (hp->n_ff_expert < 1 || hp->n_ff_expert > CDX_MAX_FF)
        return cdx_err_set(err, CDX_EFORMAT, "%s: expert feed-forward size is %lld; expected 1..%lld", path,
                           (long long)hp->n_ff_expert, (long long)CDX_MAX_FF);
    if (hp->n_ff_shared < 0 || hp->n_ff_shared > CDX_MAX_FF || (hp->n_ff_shared == 0 && d->shared_expert))
        return cdx_err_set(err, CDX_EFORMAT, "%s: shared expert feed-forward size is %lld; expected 1..%lld", path,
                           (long long)hp->n_ff_shared, (long long)CDX_MAX_FF);
    return CDX_OK;
}

/* A Gated DeltaNet layer: its norms, the linear_attn tensors and the dense MLP. */
static int bind_linear_layer(binder *b, int il, layer_weights *L, cdx_err *err)
{
    const cdx_hparams *hp = &b->m->hp;
    float *a_log = NULL;
    int rc;
    L->linear = true;
    if ((rc = bind_role(b, ROLE_ATTN_NORM, il, NULL, &L->attn_norm, NULL, err)) ||
        (rc = bind_role(b, ROLE_FFN_NORM, il, NULL, &L->ffn_norm, NULL, err)) ||
        (rc = bind_role(b, ROLE_SSM_QKV, il, &L->ssm_qkv, NULL, NULL, err)) ||
        (rc = bind_role(b, ROLE_SSM_Z, il, &L->ssm_z, NULL, NULL, err)) ||
        (rc = bind_role(b, ROLE_SSM_B, il, &L->ssm_b, NULL, NULL, err)) ||
        (rc = bind_role(b, ROLE_SSM_A, il, &L->ssm_a, NULL, NULL, err)) ||
        (rc = bind_role(b, ROLE_SSM_CONV, il, NULL, &L->ssm_conv, NULL, err)) ||
        (rc = bind_role(b, ROLE_SSM_DT, il, NULL, &L->ssm_dt, NULL, err)) ||
        (rc = bind_role(b, ROLE_SSM_ALOG, il, NULL, &a_log, NULL, err)) ||
        (rc = bind_role(b, ROLE_SSM_NORM, il, NULL, &L->ssm_norm, NULL, err)) ||
        (rc = bind_role(b, ROLE_SSM_OUT, il, &L->ssm_out, NULL, NULL, err)) ||
        (rc = bind_role(b, ROLE_GATE, il, &L->gate, NULL, NULL, err)) ||
        (rc = bind_role(b, ROLE_UP, il, &L->up, NULL, NULL, err)) ||
        (rc = bind_role(b, ROLE_DOWN, il, &L->down, NULL, NULL, err))) {
        free(a_log);
        return rc;
    }
    /* transformers: g = -A_log.float().exp() * softplus(a + dt_bias); llama.cpp's ssm_a is already -exp(A_log) */
    for (int64_t h = 0; h < hp->ssm_n_v_head; h++)
        a_log[h] = b->gguf ? a_log[h] : -expf(a_log[h]);
    L->ssm_a_neg = a_log;
    return CDX_OK;
}

/* A fused matrix (rows a | b [| c]) as views of its row ranges. */
static void split_rows(const cdx_mat *f, cdx_mat *const *out, const int64_t *rows, int n)
{
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        *out[i] = *f;
        out[i]->rows = rows[i];
        out[i]->data = (const uint8_t *)f->data + off;
        off += (size_t)rows[i] * f->row_bytes;
    }
}

/* BitNet's linears, in layer_weights.bit order. */
static const tensor_role k_bit_roles[BIT_COUNT] = { ROLE_WQ, ROLE_WK, ROLE_WV, ROLE_WO, ROLE_GATE, ROLE_UP, ROLE_DOWN };

/* A BitNet checkpoint's BitLinears of layer il (transformers' integrations/bitnet.py, offline): "<name>.weight"
 * U8 [rows/4, cols], byte row r holding rows r + i·rows/4 (i = 0..3) in bits 2i as t + 1 (unpack_weights), and
 * "<name>.weight_scale" (one value). A code of 3 unpacks to 2, as unpack_weights computes it. */
static int bind_bitlinear_layer(binder *b, int il, layer_weights *L, cdx_err *err)
{
    const cdx_hparams *hp = &b->m->hp;
    for (int k = 0; k < BIT_COUNT; k++) {
        const struct role_desc *rd = &k_roles[k_bit_roles[k]];
        const int64_t rows = dim_value(hp, rd->rows), cols = dim_value(hp, rd->cols);
        char name[160], sname[176];
        arch_hf_name(b->m->desc, role_hf_name(b->m->desc, k_bit_roles[k]), il, 0, name, sizeof name);
        snprintf(sname, sizeof sname, "%s_scale", name);
        int64_t wi = -1, si = -1;
        const src_tensor *w = find_tensor(b, name, &wi), *s = find_tensor(b, sname, &si);
        if (!w || !s)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is missing; a BitNet checkpoint under "
                               "quantization_config bitnet needs it", b->path, w ? sname : name);
        if (w->type != CDX_TYPE_COUNT || w->n_dims != 2 || rows % 4 || w->n_mat != 1 || w->rows != rows / 4 ||
            w->cols != cols)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is %s [%lld, %lld]; a BitLinear's packed weight is U8 "
                               "[%lld, %lld] (four ternary values a byte)", b->path, name,
                               w->type == CDX_TYPE_COUNT ? "U8" : cdx_type_name(w->type), (long long)w->rows,
                               (long long)w->cols, (long long)(rows / 4), (long long)cols);
        const cdx_type_traits *tr = cdx_type_get(s->type);
        if (!tr || !tr->to_f32 || s->rows * s->cols != 1 || s->n_mat != 1)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is not one F32, F16 or BF16 value", b->path, sname);
        b->used[wi] = b->used[si] = true;
        bit_mat *bm = &L->bit[k];
        *bm = (bit_mat){ .t = malloc((size_t)(rows * cols)), .rows = rows, .cols = cols, .ws = 1.0f };
        if (!bm->t)
            return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory for tensor \"%s\"", b->path, name);
        /* the one value is read even by a check (inspect's verdict is run's) */
        tr->to_f32(s->data, &bm->ws, 1);
        if (!(bm->ws > 0) || !isfinite(bm->ws))
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is %g; a BitLinear divides by it", b->path, sname,
                               (double)bm->ws);
        if (b->m->check_only) {
            memset(bm->t, 0, (size_t)(rows * cols));
            continue;
        }
        const uint8_t *p = w->data;
        const int64_t R = rows / 4;
        for (int i = 0; i < 4; i++)
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < cols; c++)
                    bm->t[(i * R + r) * cols + c] = (int8_t)(((p[r * cols + c] >> (2 * i)) & 3) - 1);
    }
    return CDX_OK;
}

/* A GGUF bitnet file's optional per-tensor scales of layer il (llama.cpp's wq_s ... "blk.N.attn_q.scale",
 * one value each, TENSOR_NOT_REQUIRED): the linear's output × it. */
static int bind_gguf_lin_scales(binder *b, int il, layer_weights *L, cdx_err *err)
{
    for (int k = 0; k < BIT_COUNT; k++) {
        char name[160];
        snprintf(name, sizeof name, role_gguf_name(b->m->desc, k_bit_roles[k]), il);
        char *dot = strrchr(name, '.');
        if (!dot || strcmp(dot, ".weight"))
            continue;
        strcpy(dot, ".scale");
        int64_t si = -1;
        const src_tensor *s = find_tensor(b, name, &si);
        if (!s)
            continue;
        const cdx_type_traits *tr = cdx_type_get(s->type);
        if (!tr || !tr->to_f32 || s->rows * s->cols != 1 || s->n_mat != 1)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is not one F32, F16 or BF16 value", b->path, name);
        b->used[si] = true;
        L->lin_scale[k] = 1.0f;
        if (!b->m->check_only)
            tr->to_f32(s->data, &L->lin_scale[k], 1);
    }
    return CDX_OK;
}

static int bind_all(binder *b, rope_scaling *rs, cdx_err *err)
{
    cdx_model *m = b->m;
    cdx_hparams *hp = &m->hp;
    int rc;
    if ((rc = check_hparams(m->desc, hp, b->path, err)) || (rc = index_names(b, err)))
        return rc;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    bool has_output = false, has_freqs = false, has_long = false, has_short = false;
    float *freqs = NULL, *f_long = NULL, *f_short = NULL;
    if ((rc = bind_role(b, ROLE_TOK_EMBD, 0, &m->tok_embd, NULL, NULL, err)) ||
        (rc = bind_role(b, ROLE_OUT_NORM, 0, NULL, &m->out_norm, NULL, err)) ||
        (rc = bind_role(b, ROLE_OUT_NORM_B, 0, NULL, &m->out_norm_b, NULL, err)) ||
        (rc = bind_role(b, ROLE_OUTPUT, 0, &m->output, NULL, &has_output, err)) ||
        (rc = bind_role(b, ROLE_ROPE_FREQS, 0, NULL, &freqs, &has_freqs, err)) ||
        (rc = bind_role(b, ROLE_ROPE_LONG, 0, NULL, &f_long, &has_long, err)) ||
        (rc = bind_role(b, ROLE_ROPE_SHORT, 0, NULL, &f_short, &has_short, err)))
        goto out;
    if (hp->gguf_rank) { /* llama.cpp's rerank head: cls.output.weight [n_cls_out × n_embd] (+ bias) */
        int64_t idx;
        const src_tensor *t = find_tensor(b, "cls.output.weight", &idx);
        if (!t || t->n_mat != 1 || t->n_dims != 2 || t->cols != hp->n_embd || t->rows != hp->n_cls_out) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: pooling_type 4 (rank) needs tensor \"cls.output.weight\" of "
                             "shape [%d, %lld]%s", b->path, hp->n_cls_out, (long long)hp->n_embd,
                             t ? "; it has another shape" : "; it is missing");
            goto out;
        }
        b->used[idx] = true;
        if ((rc = to_f32_copy(b, t, &m->cls_out, err)))
            goto out;
        if ((t = find_tensor(b, "cls.output.bias", &idx))) {
            if (t->n_mat != 1 || t->rows * t->cols != hp->n_cls_out) {
                rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"cls.output.bias\" does not have %d values", b->path,
                                 hp->n_cls_out);
                goto out;
            }
            b->used[idx] = true;
            if ((rc = to_f32_copy(b, t, &m->cls_out_b, err)))
                goto out;
        }
    }
    if (!has_output) {
        if (!b->gguf && !hp->tied_embeddings) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"lm_head.weight\" is missing and tie_word_embeddings is false",
                             b->path);
            goto out;
        }
        m->output = m->tok_embd;
        hp->tied_embeddings = true;
    } else if (!b->gguf && hp->tied_embeddings) {
        /* transformers runs the shipped head when one is present; say so */
        snprintf(m->notes + strlen(m->notes), sizeof m->notes - strlen(m->notes),
                 "config ties the output head to the embedding, but lm_head.weight is present: using lm_head.weight\n");
        hp->tied_embeddings = false;
    }
    for (int64_t l = 0; l < hp->n_layer; l++) {
        layer_weights *L = &m->layers[l];
        int il = (int)l;
        if (hp->linear_layer && hp->linear_layer[l]) {
            if ((rc = bind_linear_layer(b, il, L, err)))
                goto out;
            continue;
        }
        if (hp->bitlinear) { /* BitNet's packed BitLinears: every linear of the layer */
            if ((rc = bind_bitlinear_layer(b, il, L, err)))
                goto out;
        } else if (m->desc->fused_qkv) { /* one q | k | v matrix (Phi3's qkv_proj), its row ranges as wq, wk, wv */
            cdx_mat f;
            if ((rc = bind_role(b, ROLE_WQKV, il, &f, NULL, NULL, err)))
                goto out;
            const int64_t r[3] = { hp->n_head * hp->head_dim, hp->n_head_kv * hp->head_dim,
                                   hp->n_head_kv * hp->head_dim };
            split_rows(&f, (cdx_mat *const[]){ &L->wq, &L->wk, &L->wv }, r, 3);
        } else if ((rc = bind_role(b, ROLE_WQ, il, &L->wq, NULL, NULL, err)) ||
                   (rc = bind_role(b, ROLE_WK, il, &L->wk, NULL, NULL, err)) ||
                   (rc = bind_role(b, ROLE_WV, il, &L->wv, NULL, NULL, err)))
            goto out;
        if ((rc = bind_role(b, ROLE_ATTN_NORM, il, NULL, &L->attn_norm, NULL, err)) ||
            (rc = bind_role(b, ROLE_ATTN_NORM_B, il, NULL, &L->attn_norm_b, NULL, err)) ||
            (!hp->bitlinear && (rc = bind_role(b, ROLE_WO, il, &L->wo, NULL, NULL, err))) ||
            (rc = bind_role(b, ROLE_BQ, il, NULL, &L->bq, NULL, err)) ||
            (rc = bind_role(b, ROLE_BK, il, NULL, &L->bk, NULL, err)) ||
            (rc = bind_role(b, ROLE_BV, il, NULL, &L->bv, NULL, err)) ||
            (rc = bind_role(b, ROLE_BO, il, NULL, &L->bo, NULL, err)) ||
            (rc = bind_role(b, ROLE_QNORM, il, NULL, &L->q_norm, NULL, err)) ||
            (rc = bind_role(b, ROLE_KNORM, il, NULL, &L->k_norm, NULL, err)) ||
            (rc = bind_role(b, ROLE_SINKS, il, NULL, &L->sinks, NULL, err)) ||
            (rc = bind_role(b, ROLE_ATTN_POST_NORM, il, NULL, &L->attn_post_norm, NULL, err)) ||
            (rc = bind_role(b, ROLE_FFN_NORM, il, NULL, &L->ffn_norm, NULL, err)) ||
            (rc = bind_role(b, ROLE_FFN_NORM_B, il, NULL, &L->ffn_norm_b, NULL, err)) ||
            (rc = bind_role(b, ROLE_FFN_POST_NORM, il, NULL, &L->ffn_post_norm, NULL, err)) ||
            (rc = bind_role(b, ROLE_ATTN_SUB_NORM, il, NULL, &L->attn_sub_norm, NULL, err)) ||
            (rc = bind_role(b, ROLE_FFN_SUB_NORM, il, NULL, &L->ffn_sub_norm, NULL, err)) ||
            (m->desc->bitnet && b->gguf && (rc = bind_gguf_lin_scales(b, il, L, err))))
            goto out;
        /* sparse: config.json says so per layer (mlp_only_layers, decoder_sparse_step); a GGUF by its router */
        bool sparse = false;
        if (hp->n_expert > 0 && b->layer_flags)
            sparse = b->layer_flags[l] & CDX_HF_LAYER_MOE;
        else if (hp->n_expert > 0) {
            char rn[96];
            int64_t ri;
            snprintf(rn, sizeof rn, "blk.%d.ffn_gate_inp.weight", il);
            sparse = find_tensor(b, rn, &ri) != NULL;
        }
        if (sparse)
            rc = bind_moe_layer(b, il, L, err);
        else if (hp->bitlinear)
            rc = CDX_OK; /* bound above */
        else if (m->desc->fused_gate_up) { /* one gate | up matrix (Phi3's gate_up_proj, llama.cpp's ffn_up) */
            cdx_mat f;
            if (!(rc = bind_role(b, ROLE_GATE_UP, il, &f, NULL, NULL, err))) {
                split_rows(&f, (cdx_mat *const[]){ &L->gate, &L->up }, (const int64_t[]){ hp->n_ff, hp->n_ff }, 2);
                rc = bind_role(b, ROLE_DOWN, il, &L->down, NULL, NULL, err);
            }
        } else if (!(rc = bind_role(b, ROLE_GATE, il, &L->gate, NULL, NULL, err)) &&
                 !(rc = bind_role(b, ROLE_UP, il, &L->up, NULL, NULL, err)) &&
                 !(rc = bind_role(b, ROLE_UP_B, il, NULL, &L->b_up, NULL, err)) &&
                 !(rc = bind_role(b, ROLE_DOWN, il, &L->down, NULL, NULL, err)))
            rc = bind_role(b, ROLE_DOWN_B, il, NULL, &L->b_down, NULL, err);
        if (rc)
            goto out;
    }
    if ((rc = collect_mats(m, 0, m->hp.n_layer, err)))
        goto out;
    if (m->desc->norm_none) { /* OLMo's OlmoLayerNorm has no weight: x·1, exact */
        float **const vs[] = { &m->out_norm, NULL };
        for (int64_t l = -1; l < hp->n_layer; l++) {
            float **const ls[] = { &m->layers[l < 0 ? 0 : l].attn_norm, &m->layers[l < 0 ? 0 : l].ffn_norm };
            for (int v = 0; v < (l < 0 ? 1 : 2); v++) {
                float **p = l < 0 ? vs[v] : ls[v];
                if (!(*p = malloc((size_t)hp->n_embd * sizeof **p))) {
                    rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
                    goto out;
                }
                for (int64_t i = 0; i < hp->n_embd; i++)
                    (*p)[i] = 1.0f;
            }
        }
    }
    for (int64_t i = 0; i < b->n; i++)
        if (!b->used[i]) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is not used by the %s architecture", b->path,
                             b->tensors[i].name, hp->arch_name);
            goto out;
        }
    if (has_freqs && rs && rs->type != CDX_HF_ROPE_DEFAULT) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: both rope_freqs.weight and rope scaling \"%s\" are given", b->path,
                         rs->type == CDX_HF_ROPE_LONGROPE ? "longrope" : "of another kind");
        goto out;
    }
    if (has_freqs)
        snprintf(m->notes + strlen(m->notes), sizeof m->notes - strlen(m->notes),
                 "rope frequencies scaled by rope_freqs.weight\n");
    if (has_long != has_short || ((has_long || has_short) && (!rs || rs->type != CDX_HF_ROPE_LONGROPE))) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: rope_factors_long.weight and rope_factors_short.weight come as a pair, "
                         "with LongRoPE scaling (this file has %s)", b->path,
                         has_long && has_short ? "both, without its keys" : has_long ? "only the long factors"
                                                                                  : "only the short factors");
        goto out;
    }
    if (has_long) {
        rs->long_f = f_long;
        rs->short_f = f_short;
    }
    rc = rope_init(m, freqs, rs, b->path, err);
out:
    free(f_long);
    free(f_short);
    free(freqs);
    free(b->by_name);
    b->by_name = NULL;
    return rc;
}

/* ---- from GGUF ---- */

/* A GGUF file's sliding window (llama.cpp's gemma2 / gemma3 / openai-moe load_arch_hparams): attention.sliding_window
 * (default the row's gguf_swa_default) over the layers l with l % p < p - 1 (llama_hparams::set_swa_pattern; p =
 * attention.sliding_window_pattern, default the row's gguf_swa_period). */
static int gguf_swa(cdx_model *m, const cdx_gguf *g, cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    const arch_desc *d = m->desc;
    const char *a = d->gguf_name, *path = g->path;
    uint64_t v;
    hp->sliding_window = d->gguf_swa_default;
    if (cdx_gguf_find_arch(g, a, CDX_GK_SLIDING_WINDOW)) {
        if (!cdx_gguf_get_arch_u64(g, a, CDX_GK_SLIDING_WINDOW, &v) || v > ((uint64_t)1 << 30))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.attention.sliding_window is not an unsigned integer up to 2^30",
                               path, a);
        hp->sliding_window = (int64_t)v;
    }
    uint64_t period = (uint64_t)d->gguf_swa_period;
    if (cdx_gguf_find_arch(g, a, CDX_GK_SLIDING_WINDOW_PATTERN) &&
        (!cdx_gguf_get_arch_u64(g, a, CDX_GK_SLIDING_WINDOW_PATTERN, &period) || period > CDX_HF_MAX_LAYERS))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s.attention.sliding_window_pattern is not a period of 0..%d "
                           "layers (a per-layer list is not read)", path, a, CDX_HF_MAX_LAYERS);
    if (hp->sliding_window > 0 && period > 0) { /* llama_hparams::set_swa_pattern */
        if (hp->n_layer < 1 || hp->n_layer > CDX_HF_MAX_LAYERS || !(m->swa_layers = calloc((size_t)hp->n_layer, 1)))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.block_count is %lld; expected 1..%d", path, a,
                               (long long)hp->n_layer, CDX_HF_MAX_LAYERS);
        for (int64_t l = 0; l < hp->n_layer; l++)
            m->swa_layers[l] = (uint64_t)l % period < period - 1;
        hp->swa_layers = m->swa_layers;
    }
    return CDX_OK;
}

/* llama.cpp's gemma2 / gemma3 (src/models/gemma2.cpp, gemma3.cpp load_arch_hparams): the softcaps
 * (defaults the config row's class defaults, as llama.cpp's are), the window (attention.sliding_window,
 * default the row's gguf_swa_default) over the layers l with l % p < p - 1 (p =
 * attention.sliding_window_pattern, default the row's gguf_swa_period), the sliding layers' RoPE base
 * (rope.freq_base_swa, default the row's; never scaled),
 * llama.cpp's GELU (ggml's f16 table, m->gelu_f16), and llama.cpp's softmax scale: head_dim^-½, or (n_embd / n_head)^-½ at gguf_scale_layers blocks (the
 * 27B models, whose query_pre_attn_scalar that is; the file carries no query_pre_attn_scalar). */
static int gemma_gguf_hparams(cdx_model *m, const cdx_gguf *g, cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    const arch_desc *d = m->desc;
    const cdx_hf_arch_row *row = &d->hf[0].cfg;
    const char *a = d->gguf_name, *path = g->path;
    double f;
    hp->act = row->act;
    m->gelu_f16 = true; /* llama.cpp's GELU: logits within ~6e-3 of the exact form, its tokens on quantized files */
    static const cdx_gguf_key caps[2] = { CDX_GK_ATTN_LOGIT_SOFTCAPPING, CDX_GK_FINAL_LOGIT_SOFTCAPPING };
    float *dst[2] = { &hp->attn_softcap, &hp->final_softcap };
    for (int i = 0; i < 2; i++) {
        const int k = i ? CDX_HF_SCALE_FINAL_SOFTCAP : CDX_HF_SCALE_ATTN_SOFTCAP;
        *dst[i] = row->scale_keys[k] ? (float)row->scale_defaults[k] : 0;
        if (!cdx_gguf_get_arch_f64(g, a, caps[i], &f))
            continue;
        if (!(f >= 0) || !(f < 1e9))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.%s is %g; expected a softcap >= 0 (0: none)", path, a,
                               cdx_gguf_key_suffix(caps[i]), f);
        *dst[i] = (float)f;
    }
    int rc = gguf_swa(m, g, err);
    if (rc)
        return rc;
    if (row->rope_swa_theta_key) {
        hp->rope_theta_swa = cdx_gguf_get_arch_f64(g, a, CDX_GK_ROPE_FREQ_BASE_SWA, &f) ? f : row->rope_swa_theta;
        if (!(hp->rope_theta_swa > 0))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.rope.freq_base_swa is %g; expected a positive base", path, a,
                               hp->rope_theta_swa);
    }
    if (hp->n_head < 1 || hp->head_dim < 1)
        return CDX_OK; /* check_hparams names them */
    hp->attn_scale = hp->n_layer == d->gguf_scale_layers && d->gguf_scale_layers
                         ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                         : 1.0f / sqrtf((float)hp->head_dim);
    return CDX_OK;
}

/* llama.cpp's qwen35 (src/models/qwen35.cpp load_arch_hparams): the Gated DeltaNet sizes as
 * ssm.* keys (group_count: key heads, time_step_rank: value heads, state_size: the key head dim,
 * inner_size: value heads x value dim), every full_attention_interval-th layer full attention. Its
 * converter stores value heads tiled (value head j reads key head j mod key heads), the norms
 * with their 1 added and ssm_a = -exp(A_log). */
static int hybrid_gguf_hparams(cdx_model *m, const cdx_gguf *g, cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    const char *a = m->desc->gguf_name, *path = g->path;
    static const struct { cdx_gguf_key key; int64_t lo, hi; } keys[] = {
        { CDX_GK_SSM_CONV_KERNEL, 1, 64 }, { CDX_GK_SSM_GROUP_COUNT, 1, 1024 }, { CDX_GK_SSM_TIME_STEP_RANK, 1, 1024 },
        { CDX_GK_SSM_STATE_SIZE, 1, 1024 }, { CDX_GK_SSM_INNER_SIZE, 1, 1 << 20 },
    };
    int64_t v[5];
    for (int i = 0; i < 5; i++) {
        uint64_t x;
        if (!cdx_gguf_get_arch_u64(g, a, keys[i].key, &x) || x < (uint64_t)keys[i].lo || x > (uint64_t)keys[i].hi)
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.%s is missing or out of range; expected %lld..%lld", path, a,
                               cdx_gguf_key_suffix(keys[i].key), (long long)keys[i].lo, (long long)keys[i].hi);
        v[i] = (int64_t)x;
    }
    hp->ssm_conv_k = v[0];
    hp->ssm_n_k_head = v[1];
    hp->ssm_n_v_head = v[2];
    hp->ssm_d_k = v[3];
    if (v[4] % v[2] || v[2] % v[1])
        return cdx_err_set(err, CDX_EFORMAT, "%s: %s.ssm.inner_size %lld, ssm.time_step_rank %lld, ssm.group_count "
                           "%lld: the value heads must divide the inner size and be a multiple of the key heads", path,
                           a, (long long)v[4], (long long)v[2], (long long)v[1]);
    hp->ssm_d_v = v[4] / v[2];
    uint64_t every = 4;
    if (cdx_gguf_get_arch_u64(g, a, CDX_GK_FULL_ATTENTION_INTERVAL, &every) && (every < 1 || every > 1024))
        return cdx_err_set(err, CDX_EFORMAT, "%s: %s.full_attention_interval is %llu; expected 1..1024", path, a,
                           (unsigned long long)every);
    char key[160];
    if (cdx_gguf_find_arch(g, a, CDX_GK_RECURRENT_LAYERS))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is given; caldrix reads the layer pattern from "
                           "full_attention_interval only", path,
                           cdx_gguf_key_name(CDX_GK_RECURRENT_LAYERS, a, key, sizeof key));
    if (hp->n_layer < 1 || hp->n_layer > 1024 || !(m->linear_layer = calloc((size_t)hp->n_layer, 1)))
        return cdx_err_set(err, CDX_EFORMAT, "%s: %s.block_count is %lld; expected 1..1024", path, a,
                           (long long)hp->n_layer);
    hp->n_layer_kv = 0;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        m->linear_layer[l] = (uint64_t)(l + 1) % every != 0;
        hp->n_layer_kv += !m->linear_layer[l];
    }
    hp->linear_layer = m->linear_layer;
    hp->attn_gate = true;
    hp->ssm_v_tiled = true;
    return CDX_OK;
}

/* A GGUF file's RoPE scaling (llama.cpp's rope.scaling.* keys, TextModel.set_gguf_parameters and
 * Phi3MiniModel's): "linear" (the factor; Gemma3: the full-attention layers only), "yarn" (the factor,
 * original_context_length, yarn_beta_fast / _slow, yarn_attn_factor: transformers' attention_factor),
 * "longrope" or llama.cpp's Phi3 layout without a type (rope_factors_long / _short tensors,
 * original_context_length, attn_factor), and "dynamic" (caldrix's reading: the factor over
 * context_length; llama.cpp has no dynamic NTK). Computed as transformers computes them (rope.c). */
static int gguf_rope_scaling(const cdx_gguf *g, const char *a, const cdx_hparams *hp, rope_scaling *rs, cdx_err *err)
{
    const char *path = g->path;
    char key[160];
    cdx_gguf_str st = { 0 };
    const bool has_type = cdx_gguf_get_str(g, cdx_gguf_key_name(CDX_GK_ROPE_SCALING_TYPE, a, key, sizeof key), &st);
    const bool factors = cdx_gguf_tensor_find(g, "rope_factors_long.weight") != NULL;
    char type[32] = "none";
    if (has_type)
        snprintf(type, sizeof type, "%.*s", (int)(st.len < 31 ? st.len : 31), st.ptr);
    if (!has_type && factors)
        snprintf(type, sizeof type, "longrope");
    static const struct { const char *name; cdx_hf_rope_type t; } kinds[] = {
        { "none", CDX_HF_ROPE_DEFAULT }, { "linear", CDX_HF_ROPE_LINEAR }, { "yarn", CDX_HF_ROPE_YARN },
        { "longrope", CDX_HF_ROPE_LONGROPE }, { "dynamic", CDX_HF_ROPE_DYNAMIC },
    };
    size_t k = 0;
    while (k < sizeof kinds / sizeof kinds[0] && strcmp(type, kinds[k].name))
        k++;
    if (k == sizeof kinds / sizeof kinds[0])
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is \"%s\"; caldrix computes the rope scalings none, linear, "
                           "yarn, longrope and dynamic", path, key, type);
    rs->type = kinds[k].t;
    if (rs->type == CDX_HF_ROPE_DEFAULT)
        return CDX_OK;
    double f;
    uint64_t v;
    rs->max_pos = hp->n_ctx_train;
    rs->orig_ctx = cdx_gguf_get_arch_u64(g, a, CDX_GK_ROPE_SCALING_ORIG_CTX_LEN, &v) && v >= 1 && v <= ((uint64_t)1 << 31)
                       ? (int64_t)v : hp->n_ctx_train;
    if (cdx_gguf_get_arch_f64(g, a, CDX_GK_ROPE_SCALING_FACTOR, &f)) {
        if (!(f > 0) || !(f < 1e6))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.rope.scaling.factor is %g; expected a factor in (0, 1e6)", path,
                               a, f);
        rs->factor = f;
    } else if (rs->type == CDX_HF_ROPE_LONGROPE) /* Phi3MiniModel writes none: context_length / the original */
        rs->factor = (double)hp->n_ctx_train / (double)rs->orig_ctx;
    else
        return cdx_err_set(err, CDX_EFORMAT, "%s: %s.rope.scaling.factor is missing; rope scaling \"%s\" needs it", path,
                           a, type);
    static const struct { cdx_gguf_key k; size_t off; } nums[] = {
        { CDX_GK_ROPE_SCALING_YARN_BETA_FAST, offsetof(rope_scaling, beta_fast) },
        { CDX_GK_ROPE_SCALING_YARN_BETA_SLOW, offsetof(rope_scaling, beta_slow) },
    };
    if (rs->type == CDX_HF_ROPE_YARN) {
        for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
            if (cdx_gguf_get_arch_f64(g, a, nums[i].k, &f)) {
                if (!(f > 0) || !(f < 1e6))
                    return cdx_err_set(err, CDX_EFORMAT, "%s: %s.%s is %g; expected a positive number", path, a,
                                       cdx_gguf_key_suffix(nums[i].k), f);
                *(double *)((char *)rs + nums[i].off) = f;
            }
        if (cdx_gguf_get_arch_f64(g, a, CDX_GK_ROPE_SCALING_YARN_ATTN_FACTOR, &f) && f > 0)
            rs->attn_factor = f;
        if ((cdx_gguf_get_arch_f64(g, a, CDX_GK_ROPE_SCALING_YARN_LOG_MUL, &f) && f != 0) ||
            (cdx_gguf_get_arch_f64(g, a, CDX_GK_ROPE_SCALING_YARN_EXT_FACTOR, &f) && f != 1))
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s.rope.scaling.yarn_log_multiplier or yarn_ext_factor is "
                               "set; caldrix computes transformers' YaRN, which has neither", path, a);
        rs->truncate = true;
    }
    if (rs->type == CDX_HF_ROPE_LONGROPE && cdx_gguf_get_arch_f64(g, a, CDX_GK_ROPE_SCALING_ATTN_FACTOR, &f)) {
        if (!(f > 0) || !(f < 1e6))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.rope.scaling.attn_factor is %g; expected a positive factor",
                               path, a, f);
        rs->attn_factor = f;
    }
    if (rs->type == CDX_HF_ROPE_LONGROPE && !factors)
        return cdx_err_set(err, CDX_EFORMAT, "%s: %s is \"longrope\" but rope_factors_long.weight is missing", path, key);
    return CDX_OK;
}

static int load_gguf(cdx_model *m, cdx_gguf *g, cdx_err *err)
{
    const char *path = g->path;
    cdx_gguf_str an;
    if (!cdx_gguf_get_str(g, "general.architecture", &an))
        return cdx_err_set(err, CDX_EFORMAT, "%s: general.architecture is missing or not a string", path);
    const arch_desc *d = arch_by_gguf(an.ptr, an.len, false);
    const cdx_refused_arch *no = d ? NULL : cdx_refused_arch_find(an.ptr, an.len, true);
    if (no)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: general.architecture is \"%s\" (%s), refused: %s", path, no->gguf,
                           no->family, no->reason);
    if (!d) {
        char list[1024];
        cdx_model_gguf_archs(list, sizeof list);
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: general.architecture is \"%.*s\"; caldrix runs %s GGUF files",
                           path, (int)(an.len > 64 ? 64 : an.len), an.ptr, list);
    }
    m->desc = d;
    cdx_hparams *hp = &m->hp;
    hp->arch = d->arch;
    hp->arch_name = d->gguf_name;
    const char *a = d->gguf_name;
    uint64_t v;
    static const struct { cdx_gguf_key key; size_t off; } req[] = {
        { CDX_GK_EMBEDDING_LENGTH, offsetof(cdx_hparams, n_embd) },
        { CDX_GK_BLOCK_COUNT, offsetof(cdx_hparams, n_layer) },
        { CDX_GK_FEED_FORWARD_LENGTH, offsetof(cdx_hparams, n_ff) },
        { CDX_GK_HEAD_COUNT, offsetof(cdx_hparams, n_head) },
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        if (!cdx_gguf_get_arch_u64(g, a, req[i].key, &v) || v > ((uint64_t)1 << 32))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.%s is missing or not a valid unsigned integer", path, a,
                               cdx_gguf_key_suffix(req[i].key));
        *(int64_t *)((char *)hp + req[i].off) = (int64_t)v;
    }
    hp->n_head_kv = cdx_gguf_get_arch_u64(g, a, CDX_GK_HEAD_COUNT_KV, &v) && v <= 4096 ? (int64_t)v : hp->n_head;
    hp->head_dim = cdx_gguf_get_arch_u64(g, a, CDX_GK_KEY_LENGTH, &v) && v <= 4096 ? (int64_t)v
                   : hp->n_head ? hp->n_embd / hp->n_head : 0;
    hp->n_rot = cdx_gguf_get_arch_u64(g, a, CDX_GK_ROPE_DIM_COUNT, &v) && v <= 4096 ? (int64_t)v : hp->head_dim;
    hp->n_ctx_train = cdx_gguf_get_arch_u64(g, a, CDX_GK_CONTEXT_LENGTH, &v) && v <= ((uint64_t)1 << 31) ? (int64_t)v : 4096;
    char key[160];
    double f;
    hp->layer_norm = d->layer_norm; /* llama.cpp's LLM_NORM: attention.layer_norm_epsilon */
    hp->rms_eps = cdx_gguf_get_arch_f64(g, a, d->layer_norm ? CDX_GK_LN_EPS : CDX_GK_RMS_EPS, &f) ? (float)f : 1e-5f;
    hp->rope_theta = cdx_gguf_get_arch_f64(g, a, CDX_GK_ROPE_FREQ_BASE, &f) ? f : 10000.0;
    if (d->mrope) { /* llama.cpp's qwen2vl: rope.dimension_sections, 4 entries, required */
        const cdx_gguf_kv *kv = cdx_gguf_find_arch(g, a, CDX_GK_ROPE_DIM_SECTIONS);
        int64_t sum = 0, sv = 0;
        bool ok = kv && kv->val.type == CDX_GGUF_ARRAY && kv->val.n == 4;
        for (uint64_t i = 0; ok && i < 4; i++) {
            ok = cdx_gguf_arr_i64(&kv->val, i, &sv) && sv >= 0 && sv <= CDX_MAX_HEAD_DIM;
            hp->rope_sections[i] = ok ? (int32_t)sv : 0;
            sum += ok ? sv : 0;
        }
        if (!ok)
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.rope.dimension_sections is %s; the %s architecture needs 4 "
                               "section sizes (temporal, height, width, extra)", path, a, kv ? "not 4 counts in "
                               "0..1024" : "missing", a);
        /* transformers' split covers the rotated half exactly; llama.cpp would wrap the sections around a
           shorter sum (sector = pair % sum), which no checkpoint makes */
        if (sum != hp->n_rot / 2)
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.rope.dimension_sections [%d, %d, %d, %d] sums to %lld; "
                               "expected half the %lld rotated dimensions, %lld", path, a, hp->rope_sections[0],
                               hp->rope_sections[1], hp->rope_sections[2], hp->rope_sections[3], (long long)sum,
                               (long long)hp->n_rot, (long long)(hp->n_rot / 2));
    }
    /* mixtures of experts: qwen2moe / qwen3moe, and "llama" with an expert_count (Mixtral) */
    uint64_t n_exp = 0;
    const bool has_exp = cdx_gguf_get_arch_u64(g, a, CDX_GK_EXPERT_COUNT, &n_exp);
    if (has_exp && n_exp > 0) { /* a family whose files say another's name, with experts (Mixtral: "llama") */
        d = m->desc = arch_by_gguf(an.ptr, an.len, true);
        hp->arch = d->arch;
    }
    if (d->moe) {
        if (!has_exp || n_exp == 0 || n_exp > 4096)
            return has_exp ? cdx_err_set(err, CDX_EFORMAT, "%s: %s.expert_count is %llu; a mixture of experts needs "
                                         "1..4096 experts", path, a, (unsigned long long)n_exp)
                           : cdx_err_set(err, CDX_EFORMAT, "%s: %s.expert_count is missing; the %s architecture is a "
                                         "mixture of experts", path, a, a);
        hp->n_expert = (int64_t)n_exp;
        if (!cdx_gguf_get_arch_u64(g, a, CDX_GK_EXPERT_USED_COUNT, &v))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.expert_used_count is missing or not an unsigned integer", path, a);
        if (v == 0 || v > n_exp)
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.expert_used_count is %llu; expected 1..%llu (%s.expert_count)",
                               path, a, (unsigned long long)v, (unsigned long long)n_exp, a);
        hp->n_expert_used = (int64_t)v;
        /* llama.cpp's defaults when the widths are not written (llama-model.cpp) */
        if (cdx_gguf_get_arch_u64(g, a, CDX_GK_EXPERT_FF_LENGTH, &v)) {
            if (v == 0 || v > (1 << 20))
                return cdx_err_set(err, CDX_EFORMAT, "%s: %s.expert_feed_forward_length is %llu; expected 1..%d", path, a,
                                   (unsigned long long)v, 1 << 20);
            hp->n_ff_expert = (int64_t)v;
        } else
            hp->n_ff_expert = d->experts_ff_wide ? hp->n_ff : hp->n_ff / hp->n_expert_used;
        if (d->shared_expert) {
            if (cdx_gguf_get_arch_u64(g, a, CDX_GK_EXPERT_SHARED_FF_LENGTH, &v)) {
                if (v == 0 || v > (1 << 20))
                    return cdx_err_set(err, CDX_EFORMAT, "%s: %s.expert_shared_feed_forward_length is %llu; expected 1..%d",
                                       path, a, (unsigned long long)v, 1 << 20);
                hp->n_ff_shared = (int64_t)v;
            } else
                hp->n_ff_shared = hp->n_ff;
        } else if (cdx_gguf_get_arch_u64(g, a, CDX_GK_EXPERT_SHARED_FF_LENGTH, &v) && v > 0)
            /* llama.cpp's granitemoe runs Granite MoE Shared's ungated shared_mlp when the key is > 0 */
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s.expert_shared_feed_forward_length is %llu: a shared "
                               "expert (Granite MoE Shared's ffn_*_shexp) is not run for the %s architecture", path, a,
                               (unsigned long long)v, a);
        /* llama.cpp's other routing keys: only softmax gating with unscaled weights is what these compute */
        if (cdx_gguf_get_arch_u64(g, a, CDX_GK_EXPERT_GATING_FUNC, &v) && v != 1)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s.expert_gating_func is %llu; caldrix routes experts by "
                               "softmax (1) only", path, a, (unsigned long long)v);
        cdx_gguf_key_name(CDX_GK_EXPERT_WEIGHTS_SCALE, a, key, sizeof key);
        if (cdx_gguf_get_f64(g, key, &f) && f != 1.0)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is %g; caldrix does not scale expert weights", path, key, f);
        bool norm;
        hp->norm_topk_prob = cdx_gguf_get_arch_bool(g, a, CDX_GK_EXPERT_WEIGHTS_NORM, &norm) ? norm : d->norm_topk;
    }
    hp->rope_mode = d->gguf_rope;
    hp->mlp_plain = d->mlp_plain;
    /* the family's activation (Gemma's rows also set it); llama.cpp's bitnet graph gates with SiLU (LLM_FFN_SILU)
     * whatever its checkpoint's hidden_act was */
    hp->act = d->bitnet ? CDX_HF_ACT_SILU : d->hf[0].cfg.act;
    m->gelu_f16 = hp->act == CDX_HF_ACT_GELU_TANH;      /* llama.cpp's GELU: ggml's f16 table (ops.h) */
    if (d->gguf_window && cdx_gguf_find_arch(g, a, CDX_GK_SLIDING_WINDOW)) {
        if (!cdx_gguf_get_arch_u64(g, a, CDX_GK_SLIDING_WINDOW, &v) || v > ((uint64_t)1 << 30))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.attention.sliding_window is not an unsigned integer up to 2^30",
                               path, a);
        hp->sliding_window = (int64_t)v;
    }
    hp->qkv_bias = d->qkv_bias;
    hp->parallel_residual = d->hf[0].cfg.parallel;
    if (d->gguf_optional) { /* llama.cpp's TENSOR_NOT_REQUIRED: layer 0 says what the layers have */
        hp->qkv_bias = cdx_gguf_tensor_find(g, "blk.0.attn_q.bias") != NULL;
        hp->linear_bias = d->linear_bias && cdx_gguf_tensor_find(g, "blk.0.attn_output.bias") != NULL;
        hp->parallel_residual = cdx_gguf_tensor_find(g, "blk.0.ffn_norm.weight") == NULL;
    } else
        hp->linear_bias = d->linear_bias; /* GPT-OSS: llama.cpp requires attn_output.bias */
    hp->qk_norm = d->qk_norm;
    hp->qk_norm_full = d->qk_norm_full;
    hp->moe_topk_softmax = d->moe_topk_softmax;
    if (d->moe_oai) { /* llama.cpp's LLM_FFN_SWIGLU_OAI_MOE: alpha 1.702, limit 7 (no key) */
        hp->swiglu_limit = 7.0f;
        hp->swiglu_alpha = 1.702f;
    }
    if (cdx_gguf_get_arch_f64(g, a, CDX_GK_CLAMP_KQV, &f)) {
        if (!(f > 0) || !(f < 1e9))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.%s is %g; expected a positive bound", path, a,
                               cdx_gguf_key_suffix(CDX_GK_CLAMP_KQV), f);
        hp->clip_qkv = (float)f;
    }
    if (d->gguf_nope_step > 0) { /* llama.cpp's fixed pattern: no RoPE on every step-th layer */
        if (hp->n_layer < 1 || hp->n_layer > CDX_HF_MAX_LAYERS || !(m->nope_layer = calloc((size_t)hp->n_layer, 1)))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.block_count is %lld; expected 1..%d", path, a,
                               (long long)hp->n_layer, CDX_HF_MAX_LAYERS);
        for (int64_t l = 0; l < hp->n_layer; l++)
            m->nope_layer[l] = (l + 1) % d->gguf_nope_step == 0;
        hp->nope_layer = m->nope_layer;
    }
    if (d->gguf_logit_mul && cdx_gguf_get_arch_f64(g, a, CDX_GK_LOGIT_SCALE, &f)) { /* llama.cpp's command-r */
        if (!(f >= 0) || !(f < 1e9))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.logit_scale is %g; expected a scale >= 0 (0: none)", path, a, f);
        hp->logit_scale = (float)f;
    }
    if (d->gguf_scales) { /* llama.cpp's granite keys (src/models/granite.cpp): 0 where absent */
        static const cdx_gguf_key sk[4] = { CDX_GK_EMBEDDING_SCALE, CDX_GK_RESIDUAL_SCALE, CDX_GK_ATTENTION_SCALE,
                                            CDX_GK_LOGIT_SCALE };
        float *dst[4] = { &hp->embd_scale, &hp->residual_scale, &hp->attn_scale, &hp->logit_div };
        for (int i = 0; i < 4; i++) {
            if (!cdx_gguf_get_arch_f64(g, a, sk[i], &f))
                continue;
            if (!(f > 0) || !(f < 1e9))
                return cdx_err_set(err, CDX_EFORMAT, "%s: %s.%s is %g; expected a positive scale", path, a,
                                   cdx_gguf_key_suffix(sk[i]), f);
            *dst[i] = (float)f;
        }
    }
    if (d->hybrid) {
        int rc = hybrid_gguf_hparams(m, g, err);
        if (rc)
            return rc;
    }
    if (d->embd_sqrt) /* llama.cpp: ggml_scale(inpL, sqrtf(n_embd)) */
        hp->embd_scale = (float)sqrt((double)hp->n_embd);
    if (d->gguf_gemma) {
        int rc = gemma_gguf_hparams(m, g, err);
        if (rc)
            return rc;
    }
    if (!d->gguf_gemma && d->gguf_swa_period > 0) { /* GPT-OSS: the window on every p-th layer but one */
        if (!cdx_gguf_find_arch(g, a, CDX_GK_SLIDING_WINDOW)) /* llama.cpp's openai-moe requires it */
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.attention.sliding_window is missing; the %s architecture "
                               "needs it (llama.cpp refuses such a file too)", path, a, a);
        int rc = gguf_swa(m, g, err);
        if (rc)
            return rc;
    }
    if (d->gguf_swa_all && cdx_gguf_find_arch(g, a, CDX_GK_SLIDING_WINDOW)) { /* Phi3: every layer, 0: none */
        if (!cdx_gguf_get_arch_u64(g, a, CDX_GK_SLIDING_WINDOW, &v) || v > ((uint64_t)1 << 30))
            return cdx_err_set(err, CDX_EFORMAT, "%s: %s.attention.sliding_window is not an unsigned integer up to 2^30",
                               path, a);
        hp->sliding_window = (int64_t)v;
    }
    rope_scaling rs = { 0 };
    int rc = gguf_rope_scaling(g, a, hp, &rs, err);
    if (rc)
        return rc;
    const cdx_gguf_tensor *emb = cdx_gguf_tensor_find(g, "token_embd.weight");
    hp->n_vocab = emb && emb->n_dims == 2 ? (int64_t)emb->ne[1] : 0;
    int64_t id;
    hp->bos_id = cdx_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &id) && id >= 0 && id < hp->n_vocab ? (int32_t)id : -1;
    static const char *const eos_keys[] = { "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                            "tokenizer.ggml.eom_token_id" };
    for (size_t i = 0; i < 3; i++)
        if (cdx_gguf_get_i64(g, eos_keys[i], &id) && id >= 0 && id < hp->n_vocab && hp->n_eos < CDX_MAX_EOS) {
            bool dup = false;
            for (int j = 0; j < hp->n_eos; j++)
                dup |= hp->eos_ids[j] == id;
            if (!dup)
                hp->eos_ids[hp->n_eos++] = (int32_t)id;
        }

    if (d->encoder) /* its own tensors and pass (encoder.c) */
        return encoder_bind_gguf(m, g, err);
    if ((rc = gguf_read_pooling(m, g, err))) /* an embedding or rerank decoder's pooling_type */
        return rc;
    binder b = { .m = m, .path = path, .gguf = true, .n = (int64_t)g->n_tensors };
    b.tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *b.tensors);
    b.used = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *b.used);
    if (!b.tensors || !b.used) {
        free(b.tensors);
        free(b.used);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const cdx_gguf_tensor *t = &g->tensors[i];
        if (t->n_dims > 3 && t->ne[3] != 1) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has %u dimensions; caldrix expects matrices, vectors "
                             "and stacks of experts' matrices", path, t->name, t->n_dims);
            break;
        }
        b.tensors[i] = (src_tensor){ t->name, t->type, t->n_dims > 3 ? 3 : (int)t->n_dims, (int64_t)t->ne[1],
                                     (int64_t)t->ne[0], (int64_t)t->ne[2], t->data, t->n_bytes };
    }
    if (!rc)
        rc = bind_all(&b, &rs, err);
    free(b.tensors);
    free(b.used);
    return rc;
}

/* ---- from a checkpoint directory ---- */

/* Qwen3.5: the layer pattern and the Gated DeltaNet / gated attention dimensions from config.json
 * (the config reader checked their ranges and that value heads are a multiple of key heads). */
static int hybrid_hparams(cdx_model *m, const cdx_hf_config *cfg, const char *dir, cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    hp->arch_name = "qwen35";
    if (!(m->linear_layer = calloc((size_t)hp->n_layer, 1)))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int64_t n_kv = 0;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        m->linear_layer[l] = (cfg->layer_flags[l] & CDX_HF_LAYER_LINEAR) != 0;
        n_kv += !m->linear_layer[l];
    }
    hp->linear_layer = m->linear_layer;
    hp->n_layer_kv = n_kv;
    hp->ssm_n_k_head = cfg->linear_n_k_heads;
    hp->ssm_n_v_head = cfg->linear_n_v_heads;
    hp->ssm_d_k = cfg->linear_k_dim;
    hp->ssm_d_v = cfg->linear_v_dim;
    hp->ssm_conv_k = cfg->linear_conv_kernel;
    hp->attn_gate = true;
    hp->n_rot = (int64_t)((double)hp->head_dim * cfg->partial_rotary_factor);
    if (hp->ssm_n_k_head < 1 || hp->ssm_n_v_head % hp->ssm_n_k_head || hp->ssm_d_k < 1 || hp->ssm_d_v < 1 ||
        hp->ssm_d_k > 1024 || hp->ssm_d_v > 1024 || hp->ssm_conv_k < 1 || hp->ssm_conv_k > 64)
        return cdx_err_set(err, CDX_EFORMAT, "%s/config.json: linear_num_value_heads %lld, linear_num_key_heads %lld, "
                           "linear_key_head_dim %lld, linear_value_head_dim %lld, linear_conv_kernel_dim %lld: the value "
                           "heads must be a multiple of the key heads, head dims 1..1024, the kernel 1..64", dir,
                           (long long)hp->ssm_n_v_head, (long long)hp->ssm_n_k_head, (long long)hp->ssm_d_k,
                           (long long)hp->ssm_d_v, (long long)hp->ssm_conv_k);
    return CDX_OK;
}

static int load_checkpoint(cdx_model *m, const char *dir, cdx_err *err)
{
    cdx_hf_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int rc = cdx_hf_config_read(dir, cfg, err);
    if (rc)
        goto out;
    cdx_hparams *hp = &m->hp;
    const arch_desc *d = arch_by_hf(cfg->arch);
    m->desc = d;
    hp->arch = d->arch;
    hp->arch_name = d->gguf_name ? d->gguf_name : d->family;
    hp->n_embd = cfg->hidden_size;
    hp->n_layer = cfg->n_layers;
    hp->n_head = cfg->n_heads;
    hp->n_head_kv = cfg->n_kv_heads;
    hp->head_dim = cfg->head_dim;
    hp->n_ff = cfg->intermediate_size;
    hp->n_vocab = cfg->vocab_size;
    hp->n_ctx_train = cfg->max_position_embeddings;
    hp->rms_eps = (float)cfg->rms_norm_eps;
    hp->rope_theta = cfg->rope_theta;
    for (int i = 0; d->mrope && i < 3; i++) /* mrope_section (the config reader checked its sum); no extra section */
        hp->rope_sections[i] = (int32_t)cfg->mrope_section[i];
    /* partial rotary (Phi3, StableLM): int(head_dim · partial_rotary_factor) dims, the config reader
     * checked it is even */
    hp->n_rot = (int64_t)((double)hp->head_dim * cfg->partial_rotary_factor);
    hp->rope_mode = CDX_ROPE_HALVES; /* transformers' rotate_half */
    hp->rope_mode = d->hf_rope_adjacent ? CDX_ROPE_ADJACENT : CDX_ROPE_HALVES; /* transformers' rotate_half */
    hp->logit_scale = (float)cfg->scale[CDX_HF_SCALE_LOGIT_MUL];
    hp->layer_norm = d->layer_norm;
    hp->parallel_residual = cfg->parallel_residual;
    hp->linear_bias = d->linear_bias && cfg->attn_o_bias;
    hp->mlp_plain = d->mlp_plain;
    hp->bitlinear = d->bitnet && cfg->bitlinear;
    hp->qkv_bias = cfg->attn_qkv_bias;
    hp->qk_norm = d->qk_norm;
    hp->qk_norm_full = d->qk_norm_full;
    hp->moe_topk_softmax = d->moe_topk_softmax;
    hp->clip_qkv = (float)cfg->clip_qkv;
    hp->swiglu_limit = (float)cfg->swiglu_limit;
    hp->swiglu_alpha = (float)cfg->swiglu_alpha;
    hp->tied_embeddings = cfg->tie_word_embeddings;
    /* the scalings outside the layers, as transformers applies them (f32 ops with the float value) */
    hp->embd_scale = (float)cfg->scale[CDX_HF_SCALE_EMBD];
    hp->residual_scale = (float)cfg->scale[CDX_HF_SCALE_RESIDUAL];
    hp->attn_scale = (float)cfg->scale[CDX_HF_SCALE_ATTN];
    hp->logit_div = (float)cfg->scale[CDX_HF_SCALE_LOGIT_DIV];
    if (cfg->scale[CDX_HF_SCALE_QUERY_PRE_ATTN] > 0) /* Gemma2/3: self.scaling = query_pre_attn_scalar**-0.5 */
        hp->attn_scale = (float)pow(cfg->scale[CDX_HF_SCALE_QUERY_PRE_ATTN], -0.5);
    hp->attn_softcap = (float)cfg->scale[CDX_HF_SCALE_ATTN_SOFTCAP];
    hp->final_softcap = (float)cfg->scale[CDX_HF_SCALE_FINAL_SOFTCAP];
    hp->act = cfg->act;
    hp->rope_theta_swa = cfg->rope_theta_swa;
    if (d->embd_sqrt) /* the normalizer, sqrt(hidden_size) as an f32 number */
        hp->embd_scale = (float)sqrt((double)hp->n_embd);
    /* a window over some layers only (Gemma2/3): which ones */
    bool some = false;
    for (int64_t l = 0; l < hp->n_layer && cfg->sliding_window; l++)
        some |= !(cfg->layer_flags[l] & CDX_HF_LAYER_SLIDING);
    if (some) {
        if (!(m->swa_layers = calloc((size_t)hp->n_layer, 1))) {
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto out;
        }
        for (int64_t l = 0; l < hp->n_layer; l++)
            m->swa_layers[l] = (cfg->layer_flags[l] & CDX_HF_LAYER_SLIDING) != 0;
        hp->swa_layers = m->swa_layers;
    }
    /* the config reader refused what the forward pass does not compute (a window over some layers
     * only, o_proj and MLP biases, a mixture without experts, a shared expert of width 0) */
    hp->sliding_window = cfg->sliding_window;
    if (d->moe) {
        hp->n_expert = cfg->n_experts;
        hp->n_expert_used = cfg->n_experts_per_tok; /* <= n_experts: the config reader checked */
        hp->n_ff_expert = cfg->moe_intermediate_size;
        hp->n_ff_shared = d->shared_expert ? cfg->shared_expert_intermediate_size : 0;
        hp->norm_topk_prob = cfg->norm_topk_prob;
    }
    if (d->hybrid && (rc = hybrid_hparams(m, cfg, dir, err)))
        goto out;
    for (int64_t l = 0; l < hp->n_layer; l++)
        if (cfg->layer_flags[l] & CDX_HF_LAYER_NOPE) {
            if (!m->nope_layer && !(m->nope_layer = calloc((size_t)hp->n_layer, 1))) {
                rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
                goto out;
            }
            m->nope_layer[l] = 1;
        }
    hp->nope_layer = m->nope_layer;
    hp->bos_id = cfg->bos_token_id >= 0 && cfg->bos_token_id < hp->n_vocab ? (int32_t)cfg->bos_token_id : -1;
    for (int i = 0; i < cfg->n_eos && hp->n_eos < CDX_MAX_EOS; i++)
        hp->eos_ids[hp->n_eos++] = (int32_t)cfg->eos_token_ids[i];
    if (d->encoder) { /* its own tensors and pass (encoder.c) */
        rc = encoder_bind(m, cfg, dir, err);
        goto out;
    }
    /* BitNet's packed BitLinear weights are U8 bytes; every other checkpoint's U8 tensor is refused by the reader */
    if ((rc = hp->bitlinear ? cdx_st_open_u8(dir, &m->st, err) : cdx_st_open(dir, &m->st, err)))
        goto out;
    binder b = { .m = m, .path = dir, .gguf = false, .n = (int64_t)m->st->n_tensors, .layer_flags = cfg->layer_flags };
    b.tensors = calloc(b.n ? (size_t)b.n : 1, sizeof *b.tensors);
    b.used = calloc(b.n ? (size_t)b.n : 1, sizeof *b.used);
    if (!b.tensors || !b.used) {
        free(b.tensors);
        free(b.used);
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto out;
    }
    int64_t nb = 0;
    /* the base model's weights without the head's "model." prefix (Qwen3-Embedding ships Qwen3Model's
     * embed_tokens.weight, layers.N.*, norm.weight under a Qwen3ForCausalLM config.json): read as if prefixed */
    char **bare = NULL;
    if (!d->hf_text_prefix && !d->hybrid && !d->vision && !cdx_st_find(m->st, "model.embed_tokens.weight") &&
        cdx_st_find(m->st, "embed_tokens.weight") &&
        !(bare = calloc(m->st->n_tensors ? m->st->n_tensors : 1, sizeof *bare)))
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int64_t i = 0; i < (int64_t)m->st->n_tensors && !rc; i++) {
        const cdx_st_tensor *t = &m->st->tensors[i];
        const char *name = t->name;
        if (bare && strcmp(name, "lm_head.weight")) {
            const size_t len = strlen(name) + 7;
            if (!(bare[i] = malloc(len))) {
                rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
                break;
            }
            snprintf(bare[i], len, "model.%s", name);
            name = bare[i];
        }
        /* Qwen3.5: the multi-token-prediction head (mtp.*) and the vision tower (model.visual.*) are
         * skipped by name, their bytes never read; ForConditionalGeneration keeps the text model
         * under model.language_model., which the roles name model. */
        if (d->hybrid) {
            if (!strncmp(name, "mtp.", 4) || (cfg->text_config && !strncmp(name, "model.visual.", 13)))
                continue;
            if (cfg->text_config) {
                if (strncmp(name, "model.language_model.", 21) && strcmp(name, "lm_head.weight")) {
                    rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" is neither under model.language_model. nor "
                                     "model.visual. nor mtp.; a %s checkpoint has no such tensor", dir, name,
                                     cfg->architecture);
                    break;
                }
                if (!strncmp(name, "model.language_model.", 21))
                    name += 15; /* "model.language_model.x" -> "model.x" is a suffix of it: point past "language_model" */
            }
        }
        /* Qwen2-VL: the vision tower (visual.*, or model.visual.* since transformers 4.52) is skipped unread;
         * the newer checkpoints keep the text model under model.language_model. */
        if (d->vl_text_only) {
            if (!strncmp(name, "visual.", 7) || !strncmp(name, "model.visual.", 13))
                continue;
            if (!strncmp(name, "model.language_model.", 21))
                name += 15; /* "model.language_model.x" -> "model.x", a suffix of it */
        }
        int n_dims = (int)t->n_dims;
        int64_t rows = n_dims == 2 ? (int64_t)t->shape[0] : 1, cols = (int64_t)t->shape[n_dims ? n_dims - 1 : 0];
        if (d->hybrid && n_dims == 3 && t->shape[1] == 1) { /* conv1d.weight [channels, 1, kernel] */
            n_dims = 2;
            rows = (int64_t)t->shape[0];
        }
        int64_t n_mat = 1;
        if ((d->hf_experts_fused || d->moe_oai) && n_dims == 3) { /* a stack of experts' matrices [E, rows, cols] */
            n_mat = (int64_t)t->shape[0];
            rows = (int64_t)t->shape[1];
        } else if ((n_dims < 1 || n_dims > 2) && !(d->vision && !strncmp(name, "model.vision_model.", 19)))
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has %u dimensions; caldrix expects matrices and vectors",
                             dir, t->name, t->n_dims);
        b.tensors[nb++] = (src_tensor){ name, t->type, n_dims, rows, cols, n_mat, t->data, t->n_bytes };
    }
    b.n = nb;
    /* the tower's tensors, by their index in the file (no tensor is skipped for a vision model, so
     * b's indices are the file's) */
    if (!rc && d->vision)
        rc = vision_bind(m, cfg, m->st, b.used, err);
    /* rope_scaling (the config reader read its keys; rope.c computes it) */
    rope_scaling rs = { .type = cfg->rope_type, .factor = cfg->rope_factor, .low_freq_factor = cfg->rope_low_freq_factor,
                        .high_freq_factor = cfg->rope_high_freq_factor, .attn_factor = cfg->rope_attn_factor,
                        .beta_fast = cfg->rope_beta_fast, .beta_slow = cfg->rope_beta_slow, .mscale = cfg->rope_mscale,
                        .mscale_all_dim = cfg->rope_mscale_all_dim, .truncate = cfg->rope_truncate,
                        .orig_ctx = cfg->rope_original_max_position, .max_pos = cfg->max_position_embeddings };
    float *lr = NULL;
    if (!rc && cfg->rope_type == CDX_HF_ROPE_LONGROPE) { /* torch.tensor(short_factor / long_factor, float32) */
        if (cfg->n_rope_factors != hp->n_rot / 2)
            rc = cdx_err_set(err, CDX_EFORMAT, "%s/config.json: rope_scaling.short_factor and long_factor have %d "
                             "entries; longrope needs one per rotated pair, %lld", dir, cfg->n_rope_factors,
                             (long long)(hp->n_rot / 2));
        else if (!(lr = malloc(2 * (size_t)cfg->n_rope_factors * sizeof *lr)))
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        for (int i = 0; !rc && i < cfg->n_rope_factors; i++) {
            lr[i] = (float)cfg->rope_short[i];
            lr[cfg->n_rope_factors + i] = (float)cfg->rope_long[i];
        }
        rs.short_f = lr;
        rs.long_f = lr + cfg->n_rope_factors;
    }
    if (!rc)
        rc = bind_all(&b, &rs, err);
    free(lr);
    for (size_t i = 0; bare && i < m->st->n_tensors; i++)
        free(bare[i]);
    free(bare);
    free(b.tensors);
    free(b.used);
out:
    free(cfg);
    return rc;
}

/* ---- public ---- */

void cdx_model_close(cdx_model *m)
{
    if (!m)
        return;
    model_pack_free(m);
    xc_close(m->xc);
    model_free_dtype(m);
    pthread_mutex_destroy(&m->pack_mu);
    pthread_rwlock_destroy(&m->use_lock);
    if (m->layers)
        for (int64_t l = 0; l < m->hp.n_layer; l++) {
            layer_weights *L = &m->layers[l];
            free(L->attn_norm); free(L->ffn_norm); free(L->bq); free(L->bk); free(L->bv);
            free(L->attn_post_norm); free(L->ffn_post_norm); free(L->attn_norm_b); free(L->ffn_norm_b);
            free(L->bo); free(L->b_up); free(L->b_down);
            free(L->q_norm); free(L->k_norm);
            free(L->exp_gate); free(L->exp_up); free(L->exp_down);
            free(L->sinks); free(L->router_b); free(L->exp_b_gate); free(L->exp_b_up); free(L->exp_b_down);
            free(L->exp_own);
            free(L->ssm_conv); free(L->ssm_dt); free(L->ssm_a_neg); free(L->ssm_norm);
            free(L->attn_sub_norm); free(L->ffn_sub_norm);
            for (int k = 0; k < BIT_COUNT; k++)
                free(L->bit[k].t);
        }
    free(m->linear_layer);
    free(m->nope_layer);
    free(m->layers);
    free(m->mats);
    free(m->out_norm); free(m->out_norm_b);
    free(m->cls_out); free(m->cls_out_b);
    free(m->inv_freq);
    free(m->inv_freq_swa);
    free(m->inv_freq_long);
    free(m->bf16_freq);
    free(m->bf16_freq_long);
    free(m->bf16_freq_swa);
    free(m->swa_layers);
    vision_free(m->vision);
    encoder_free(m->enc);
    cdx_gguf_close(m->gguf);
    cdx_st_close(m->st);
    free(m);
}

static int finish(cdx_model *m, int rc, cdx_model **out)
{
    if (rc) {
        cdx_model_close(m);
        return rc;
    }
    *out = m;
    return CDX_OK;
}

int cdx_model_open_gguf_mem(const void *data, size_t size, const char *name, cdx_model **out, cdx_err *err)
{
    *out = NULL;
    cdx_model *m = calloc(1, sizeof *m);
    if (!m)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    pthread_mutex_init(&m->pack_mu, NULL);
    pthread_rwlock_init(&m->use_lock, NULL);
    int rc = cdx_gguf_open_mem(data, size, name, &m->gguf, err);
    if (!rc)
        rc = load_gguf(m, m->gguf, err);
    if (!rc)
        rc = model_set_dtype(m, CDX_DTYPE_AUTO, true, name, err);
    return finish(m, rc, out);
}

/* A model bound from path (a checkpoint folder or a GGUF file), mapped, not yet sized or cast:
 * check_only binds and checks every tensor without reading any (cdx_model_check). */
static int open_bound(const char *path, bool check_only, bool *dir, cdx_model **out, cdx_err *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: no such file or directory", path);
    cdx_model *m = calloc(1, sizeof *m);
    if (!m)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    pthread_mutex_init(&m->pack_mu, NULL);
    pthread_rwlock_init(&m->use_lock, NULL);
    m->file_mapped = true;
    m->check_only = check_only;
    *dir = S_ISDIR(st.st_mode);
    int rc;
    if (*dir) {
        rc = load_checkpoint(m, path, err);
    } else {
        rc = cdx_gguf_open(path, &m->gguf, err);
        if (!rc)
            rc = load_gguf(m, m->gguf, err);
    }
    *out = m;
    return rc;
}

/* The norms of a checkpoint whose family scales by (off + w) (Gemma's GemmaRMSNorm, Qwen3_5RMSNorm: 1 + w):
 * the checkpoint stores w (llama.cpp's converter adds the offset, so a GGUF file holds off + w). Added once
 * the compute type has cast the weights: bf16 compute adds 1.0 to the bf16 weight in f32, as torch does. */
static void add_norm_offset(cdx_model *m)
{
    const cdx_hparams *hp = &m->hp;
    const float off = m->desc->hf_norm_offset;
    if (off == 0)
        return;
    for (int64_t i = 0; i < hp->n_embd; i++)
        m->out_norm[i] += off;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        layer_weights *L = &m->layers[l];
        float *const vs[] = { L->attn_norm, L->ffn_norm, L->attn_post_norm, L->ffn_post_norm, L->q_norm, L->k_norm };
        const int64_t ns[] = { hp->n_embd, hp->n_embd, hp->n_embd, hp->n_embd, dim_value(hp, D_QN),
                               dim_value(hp, D_KN) };
        for (int v = 0; v < 6; v++)
            for (int64_t i = 0; vs[v] && i < ns[v]; i++)
                vs[v][i] += off;
    }
}

int cdx_model_open(const char *path, const cdx_model_opts *opts, cdx_model **out, cdx_err *err)
{
    *out = NULL;
    cdx_model *m;
    bool dir = false;
    int rc = open_bound(path, false, &dir, &m, err);
    if (!m)
        return rc;
    if (!rc && opts && opts->weight_budget && m->desc->moe_oai && !m->gguf) /* a checkpoint's experts are copies */
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: a weight budget (--weight-budget) streams experts from the file; "
                         "caldrix holds a %s checkpoint's experts transposed in memory, so it does not take one (a GGUF file of it "
                         "does)", path,
                         m->hp.arch_name);
    else if (!rc && opts && opts->weight_budget)
        rc = xc_open(m, opts->weight_budget, opts->expert_pread, path, err);
    m->weights_io = opts ? opts->weights_io : CDX_WEIGHTS_AUTO;
    if (!rc)
        rc = model_set_dtype(m, opts ? opts->dtype : CDX_DTYPE_AUTO, !dir, path, err);
    if (!rc && dir)
        add_norm_offset(m);
    const int64_t l0 = opts ? opts->layer0 : 0, l1 = opts ? opts->layer1 : 0;
    if (!rc && (l0 || l1) && !(l0 == 0 && l1 == m->hp.n_layer)) { /* a split model's stage: its slice only */
        if (l0 < 0 || l0 >= l1 || l1 > m->hp.n_layer)
            rc = cdx_err_set(err, CDX_EINVAL, "layers %lld-%lld are not a slice of %s's %lld layers", (long long)l0,
                             (long long)l1 - 1, path, (long long)m->hp.n_layer);
        else if (opts->weight_budget)
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "a weight budget (--weight-budget) on a slice of a split model is "
                             "not done yet");
        else
            rc = collect_mats(m, l0, l1, err);
    }
    return finish(m, rc, out);
}

int cdx_model_check(const char *path, cdx_err *err)
{
    cdx_model *m;
    bool dir;
    int rc = open_bound(path, true, &dir, &m, err);
    cdx_model_close(m);
    return rc;
}

const cdx_hparams *cdx_model_hparams(const cdx_model *m) { return &m->hp; }
const cdx_gguf *cdx_model_gguf(const cdx_model *m) { return m->gguf; }
const char *cdx_model_notes(const cdx_model *m) { return m->notes; }

/* Σ over every weight matrix of rows × (macs ? cols : row_bytes); *experts gets the part of it in
 * the sparse layers' experts, of which a token uses n_expert_used of n_expert */
static double mats_sum(const cdx_model *m, bool macs, double *experts)
{
    double total = 0;
    *experts = 0;
    for (size_t i = 0; i < m->n_mats; i++)
        total += (double)m->mats[i]->rows * (double)(macs ? (size_t)m->mats[i]->cols : m->mats[i]->row_bytes);
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        for (int64_t e = 0; m->layers[l].moe && e < m->hp.n_expert; e++) {
            const cdx_mat *x[] = { &m->layers[l].exp_gate[e], &m->layers[l].exp_up[e], &m->layers[l].exp_down[e] };
            for (int i = 0; i < 3; i++)
                *experts += (double)x[i]->rows * (double)(macs ? (size_t)x[i]->cols : x[i]->row_bytes);
        }
    for (int64_t l = 0; l < m->hp.n_layer; l++) /* BitNet's BitLinears: one int8 per weight */
        for (int k = 0; k < BIT_COUNT; k++)
            total += (double)m->layers[l].bit[k].rows * (double)m->layers[l].bit[k].cols;
    return total;
}

size_t cdx_model_weight_bytes(const cdx_model *m)
{
    /* every matrix, except that a sparse layer reads n_expert_used of its n_expert experts (byte
     * counts are exact in a double) */
    double experts;
    const size_t total = (size_t)mats_sum(m, false, &experts), ex = (size_t)experts;
    if (!ex)
        return total;
    return total - (ex - (size_t)((double)ex * (double)m->hp.n_expert_used / (double)m->hp.n_expert));
}

double cdx_model_matmul_macs(const cdx_model *m, double *head)
{
    double experts;
    double total = mats_sum(m, true, &experts);
    if (experts > 0)
        total -= experts - experts * (double)m->hp.n_expert_used / (double)m->hp.n_expert;
    if (head)
        *head = (double)m->output.rows * (double)m->output.cols;
    return total;
}

/* ---- identity ---- */

static void fp_mat(EVP_MD_CTX *c, const cdx_mat *w)
{
    const size_t bytes = w->row_bytes * (size_t)w->rows, part = 4096;
    const uint8_t *d = w->data;
    const uint64_t head[4] = { w->type, (uint64_t)w->rows, (uint64_t)w->cols, w->act_half };
    EVP_DigestUpdate(c, head, sizeof head);
    if (!d)
        return;
    EVP_DigestUpdate(c, d, bytes < part ? bytes : part);
    if (bytes > part)
        EVP_DigestUpdate(c, d + bytes - part, part);
}

void cdx_model_fingerprint(const cdx_model *m, uint8_t out[32])
{
    const cdx_hparams *hp = &m->hp;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int n = 32;
    memset(out, 0, 32);
    if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(c);
        return;
    }
    const int64_t ints[] = { hp->arch, hp->n_vocab, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim,
                             hp->n_ff, hp->n_rot, hp->rope_mode, hp->sliding_window, hp->qkv_bias, hp->qk_norm,
                             hp->tied_embeddings, hp->n_expert, hp->n_expert_used };
    EVP_DigestUpdate(c, "caldrix model v1", 16);
    EVP_DigestUpdate(c, ints, sizeof ints);
    EVP_DigestUpdate(c, &hp->rms_eps, sizeof hp->rms_eps);
    EVP_DigestUpdate(c, &hp->rope_theta, sizeof hp->rope_theta);
    if (hp->nope_layer || hp->qk_norm_full || hp->clip_qkv || hp->moe_topk_softmax) {
        EVP_DigestUpdate(c, "attn", 4);
        EVP_DigestUpdate(c, &hp->qk_norm_full, sizeof hp->qk_norm_full);
        EVP_DigestUpdate(c, &hp->moe_topk_softmax, sizeof hp->moe_topk_softmax);
        EVP_DigestUpdate(c, &hp->clip_qkv, sizeof hp->clip_qkv);
        if (hp->nope_layer)
            EVP_DigestUpdate(c, hp->nope_layer, (size_t)hp->n_layer);
    }
    if (hp->swiglu_limit) {
        EVP_DigestUpdate(c, &hp->swiglu_limit, sizeof hp->swiglu_limit);
        EVP_DigestUpdate(c, &hp->swiglu_alpha, sizeof hp->swiglu_alpha);
    }
    if (hp->embd_scale || hp->residual_scale || hp->attn_scale || hp->logit_div) {
        const float sc[4] = { hp->embd_scale, hp->residual_scale, hp->attn_scale, hp->logit_div };
        EVP_DigestUpdate(c, sc, sizeof sc);
    }
    if (m->inv_freq) /* an encoder has no RoPE */
        EVP_DigestUpdate(c, m->inv_freq, (size_t)(hp->n_rot / 2) * sizeof(float));
    if (hp->act || hp->attn_softcap || hp->final_softcap || hp->swa_layers || m->inv_freq_swa) { /* Gemma's hooks */
        const float g[4] = { (float)hp->act, hp->attn_softcap, hp->final_softcap, (float)m->gelu_f16 };
        EVP_DigestUpdate(c, g, sizeof g);
        if (hp->swa_layers)
            EVP_DigestUpdate(c, hp->swa_layers, (size_t)hp->n_layer);
        if (m->inv_freq_swa)
            EVP_DigestUpdate(c, m->inv_freq_swa, (size_t)(hp->n_rot / 2) * sizeof(float));
    }
    if (hp->rope_pass || hp->rope_attn_factor) { /* the scalings of rope.c beyond inv_freq */
        const double r[4] = { (double)hp->rope_pass, (double)hp->rope_pass_ctx, hp->rope_pass_factor,
                              (double)hp->rope_attn_factor };
        EVP_DigestUpdate(c, r, sizeof r);
        if (m->inv_freq_long)
            EVP_DigestUpdate(c, m->inv_freq_long, (size_t)(hp->n_rot / 2) * sizeof(float));
    }
    EVP_DigestUpdate(c, m->out_norm, (size_t)hp->n_embd * sizeof(float));
    if (m->dtype == CDX_DTYPE_BF16) /* the same mapped bf16 weights compute otherwise than in f32 */
        EVP_DigestUpdate(c, "dtype:bf16", 10);
    fp_mat(c, &m->tok_embd);
    fp_mat(c, &m->output);
    if (hp->linear_layer) {
        const int64_t hy[] = { hp->n_layer_kv, hp->ssm_n_k_head, hp->ssm_n_v_head, hp->ssm_d_k, hp->ssm_d_v,
                               hp->ssm_conv_k, hp->attn_gate, hp->ssm_v_tiled };
        EVP_DigestUpdate(c, "hybrid", 6);
        EVP_DigestUpdate(c, hy, sizeof hy);
        EVP_DigestUpdate(c, hp->linear_layer, (size_t)hp->n_layer);
    }
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        if (L->linear) {
            const cdx_mat *sm[] = { &L->ssm_qkv, &L->ssm_z, &L->ssm_b, &L->ssm_a, &L->ssm_out };
            for (int i = 0; i < 5; i++)
                fp_mat(c, sm[i]);
            const int64_t ch = L->ssm_qkv.rows, nv = hp->ssm_n_v_head;
            EVP_DigestUpdate(c, L->ssm_conv, (size_t)(ch * hp->ssm_conv_k) * sizeof(float));
            EVP_DigestUpdate(c, L->ssm_dt, (size_t)nv * sizeof(float));
            EVP_DigestUpdate(c, L->ssm_a_neg, (size_t)nv * sizeof(float));
            EVP_DigestUpdate(c, L->ssm_norm, (size_t)hp->ssm_d_v * sizeof(float));
        }
        const float *norms[] = { L->attn_norm, L->ffn_norm, L->attn_post_norm, L->ffn_post_norm };
        for (int i = 0; i < 4; i++)
            if (norms[i])
                EVP_DigestUpdate(c, norms[i], (size_t)hp->n_embd * sizeof(float));
        const cdx_mat *mats[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down };
        for (int i = 0; i < 7; i++)
            fp_mat(c, mats[i]);
        if (L->attn_sub_norm) { /* BitNet: its sub-norms, BitLinears and a GGUF file's scales */
            EVP_DigestUpdate(c, L->attn_sub_norm, (size_t)hp->n_embd * sizeof(float));
            EVP_DigestUpdate(c, L->ffn_sub_norm, (size_t)hp->n_ff * sizeof(float));
            EVP_DigestUpdate(c, L->lin_scale, sizeof L->lin_scale);
            for (int k = 0; k < BIT_COUNT; k++)
                if (L->bit[k].t) {
                    EVP_DigestUpdate(c, &L->bit[k].ws, sizeof L->bit[k].ws);
                    EVP_DigestUpdate(c, L->bit[k].t, (size_t)(L->bit[k].rows * L->bit[k].cols));
                }
        }
        if (!L->moe)
            continue;
        const int64_t moe_ints[] = { hp->n_ff_expert, hp->n_ff_shared, hp->norm_topk_prob };
        EVP_DigestUpdate(c, moe_ints, sizeof moe_ints);
        const cdx_mat *shared[] = { &L->router, &L->sh_router, &L->sh_gate, &L->sh_up, &L->sh_down };
        for (int i = 0; i < 5; i++)
            fp_mat(c, shared[i]);
        /* the shapes of every expert, the bytes of the first and the last: reading a sample of every
         * expert would fault in pages of experts a weight budget leaves in the file */
        for (int64_t e = 0; e < hp->n_expert; e++) {
            const bool sample = e == 0 || e == hp->n_expert - 1;
            const cdx_mat *x[3] = { &L->exp_gate[e], &L->exp_up[e], &L->exp_down[e] };
            for (int i = 0; i < 3; i++) {
                cdx_mat h = *x[i];
                if (!sample)
                    h.data = NULL;
                fp_mat(c, &h);
            }
        }
    }
    EVP_DigestFinal_ex(c, out, &n);
    EVP_MD_CTX_free(c);
}
