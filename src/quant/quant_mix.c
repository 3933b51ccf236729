/* Quantization mixtures: which ggml type each tensor gets for a target file type ("Q4_K_M"),
 * reproducing the choices of llama.cpp's llama_model_quantize (src/llama-quant.cpp of release
 * v0.4.0: tensor_allows_quantization, llama_tensor_get_type_impl, tensor_type_fallback). The
 * rules are restated below in caldrix's own words and tables; comments name the llama.cpp rule.
 *
 * The choice depends on counters (which attn_v / ffn_* tensor this is), so tensors must be
 * presented in llama.cpp's order: sorted by layer number, then by name (cdx_quant_tensor_cmp). */
#include "caldrix/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- file types */

/* llama_ftype ids (llama.h) and their default tensor type (llama_ftype_get_default_type). */
static const cdx_ftype_info k_ftypes[] = {
    { "F32", 0, CDX_TYPE_F32 },        { "F16", 1, CDX_TYPE_F16 },        { "Q4_0", 2, CDX_TYPE_Q4_0 },
    { "Q4_1", 3, CDX_TYPE_Q4_1 },      { "Q8_0", 7, CDX_TYPE_Q8_0 },      { "Q5_0", 8, CDX_TYPE_Q5_0 },
    { "Q5_1", 9, CDX_TYPE_Q5_1 },      { "Q2_K", 10, CDX_TYPE_Q2_K },     { "Q3_K_S", 11, CDX_TYPE_Q3_K },
    { "Q3_K_M", 12, CDX_TYPE_Q3_K },   { "Q3_K_L", 13, CDX_TYPE_Q3_K },   { "Q4_K_S", 14, CDX_TYPE_Q4_K },
    { "Q4_K_M", 15, CDX_TYPE_Q4_K },   { "Q5_K_S", 16, CDX_TYPE_Q5_K },   { "Q5_K_M", 17, CDX_TYPE_Q5_K },
    { "Q6_K", 18, CDX_TYPE_Q6_K },     { "IQ2_XXS", 19, CDX_TYPE_IQ2_XXS }, { "IQ2_XS", 20, CDX_TYPE_IQ2_XS },
    { "Q2_K_S", 21, CDX_TYPE_Q2_K },   { "IQ3_XS", 22, CDX_TYPE_IQ3_S },  { "IQ3_XXS", 23, CDX_TYPE_IQ3_XXS },
    { "IQ1_S", 24, CDX_TYPE_IQ1_S },   { "IQ4_NL", 25, CDX_TYPE_IQ4_NL }, { "IQ3_S", 26, CDX_TYPE_IQ3_S },
    { "IQ3_M", 27, CDX_TYPE_IQ3_S },   { "IQ2_S", 28, CDX_TYPE_IQ2_XS },  { "IQ2_M", 29, CDX_TYPE_IQ2_S },
    { "IQ4_XS", 30, CDX_TYPE_IQ4_XS }, { "IQ1_M", 31, CDX_TYPE_IQ1_M },   { "BF16", 32, CDX_TYPE_BF16 },
    { "TQ1_0", 36, CDX_TYPE_TQ1_0 },   { "TQ2_0", 37, CDX_TYPE_TQ2_0 },   { "MXFP4_MOE", 38, CDX_TYPE_MXFP4 },
    { "Q1_0", 40, CDX_TYPE_Q1_0 },     { "Q2_0", 41, CDX_TYPE_Q2_0 },
};

enum { /* the llama_ftype ids the rules test */
    FT_Q4_0 = 2, FT_Q5_0 = 8, FT_Q2_K = 10, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_M = 17, FT_IQ2_XXS = 19, FT_IQ2_XS = 20, FT_Q2_K_S = 21, FT_IQ3_XS = 22, FT_IQ3_XXS = 23,
    FT_IQ1_S = 24, FT_IQ4_NL = 25, FT_IQ3_S = 26, FT_IQ3_M = 27, FT_IQ2_S = 28, FT_IQ2_M = 29, FT_IQ4_XS = 30,
    FT_IQ1_M = 31, FT_TQ1_0 = 36, FT_TQ2_0 = 37, FT_MXFP4_MOE = 38, FT_Q2_0 = 41, FT_Q3_K_S = 11,
};

const cdx_ftype_info *cdx_ftype_find(const char *name)
{
    for (size_t i = 0; i < sizeof k_ftypes / sizeof k_ftypes[0]; i++)
        if (!strcasecmp(k_ftypes[i].name, name))
            return &k_ftypes[i];
    return NULL;
}

const cdx_ftype_info *cdx_ftype_by_id(int llama_ftype)
{
    for (size_t i = 0; i < sizeof k_ftypes / sizeof k_ftypes[0]; i++)
        if (k_ftypes[i].llama_ftype == llama_ftype)
            return &k_ftypes[i];
    return NULL;
}

/* ---------------------------------------------------------------- tensor order and categories */

static int layer_of(const char *name)
{
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1)
        return -1;
    return l;
}

int cdx_quant_tensor_cmp(const char *a, const char *b)
{
    int la = layer_of(a), lb = layer_of(b); /* non-layer tensors (-1) first, as llama.cpp */
    if (la != lb)
        return la < lb ? -1 : 1;
    return strcmp(a, b);
}

typedef enum {
    CAT_OTHER, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_QKV, CAT_ATTN_KV_B, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q,
    CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN,
} category;

/* First match wins, in this order (tensor_get_category). */
static const struct { const char *needle; category cat; } k_categories[] = {
    { "attn_qkv.weight", CAT_ATTN_QKV }, { "attn_kv_b.weight", CAT_ATTN_KV_B }, { "attn_v.weight", CAT_ATTN_V },
    { "attn_k.weight", CAT_ATTN_K },     { "attn_q.weight", CAT_ATTN_Q },       { "attn_output.weight", CAT_ATTN_OUTPUT },
    { "ffn_up", CAT_FFN_UP },            { "ffn_gate", CAT_FFN_GATE },          { "ffn_down", CAT_FFN_DOWN },
};

static category category_of(const char *name)
{
    if (!strcmp(name, "output.weight"))
        return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    for (size_t i = 0; i < sizeof k_categories / sizeof k_categories[0]; i++)
        if (strstr(name, k_categories[i].needle))
            return k_categories[i].cat;
    return CAT_OTHER;
}

/* attn_v-like tensors are the most sensitive (category_is_attn_v). */
static bool is_attn_v(category c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

/* Name fragments of 2D+ weights that llama.cpp never quantizes (tensor_allows_quantization). */
static const char *const k_never_quantized[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
    "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
    "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
    "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",
    "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
    "mm.a.code_embd",
};

static bool allows_quantization(const char *name, const int64_t ne[4])
{
    int n_dims = 1; /* ggml_n_dims: trailing 1s do not count */
    for (int i = 3; i >= 1; i--)
        if (ne[i] > 1) {
            n_dims = i + 1;
            break;
        }
    if (n_dims < 2)
        return false;
    size_t len = strlen(name);
    if (len < 6 || strcmp(name + len - 6, "weight"))
        return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight"))
        return false;
    for (size_t i = 0; i < sizeof k_never_quantized / sizeof k_never_quantized[0]; i++)
        if (strstr(name, k_never_quantized[i]))
            return false;
    return true;
}

/* ---------------------------------------------------------------- the mixture */

int cdx_quant_mix_init(cdx_quant_mix *m, const char *ftype, const cdx_quant_model_info *info,
                       const char *const *names, size_t n_names, cdx_err *err)
{
    memset(m, 0, sizeof *m);
    const cdx_ftype_info *ft = cdx_ftype_find(ftype);
    if (!ft)
        return cdx_err_set(err, CDX_EINVAL, "unknown quantization type '%s' (try Q4_K_M, Q8_0, Q6_K, ...)", ftype);
    if (info->n_layer <= 0)
        return cdx_err_set(err, CDX_EINVAL, "quantization mix: n_layer is %d; expected > 0", info->n_layer);
    m->ftype = ft;
    m->info = *info;
    m->tied_embeddings = true; /* until an output.weight is seen */
    for (size_t i = 0; i < n_names; i++) {
        category c = category_of(names[i]);
        if (is_attn_v(c))
            m->n_attention_wv++;
        if (c == CAT_OUTPUT)
            m->tied_embeddings = false;
    }
    return CDX_OK;
}

static bool use_more_bits(int i_layer, int n_layers)
{
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

/* Layer index for the ffn rules: the running counter, or the blk number for MoE models (whose
 * expert tensors are not in layer order). */
static int ffn_layer(const cdx_quant_mix *m, int counter, const char *name)
{
    if (m->info.n_expert > 1) {
        int l = layer_of(name);
        return l >= 0 && l < m->info.n_layer ? l : counter;
    }
    return counter;
}

/* llama_tensor_get_type_impl: t is the default type of the file type. */
static cdx_type choose_impl(cdx_quant_mix *m, cdx_type t, const char *name, const int64_t ne[4], category cat)
{
    const int ft = m->ftype->llama_ftype, n_gqa = m->info.n_gqa, n_expert = m->info.n_expert;
    const bool falcon = m->info.arch_falcon, imatrix = m->info.has_imatrix;
    const bool iq_low = ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ1_S || ft == FT_IQ2_S || ft == FT_IQ2_M ||
                        ft == FT_IQ1_M;

    if (cat == CAT_OUTPUT || (m->tied_embeddings && cat == CAT_TOKEN_EMBD)) {
        /* output head (and a tied embedding): Q6_K unless the file is Q8_0 or the rows do not fit */
        const cdx_type_traits *tt = cdx_type_get(t);
        if (ft == FT_MXFP4_MOE || falcon || ne[0] % tt->block)
            return CDX_TYPE_Q8_0;
        if (iq_low || ft == FT_IQ3_XXS)
            return CDX_TYPE_Q5_K;
        return t != CDX_TYPE_Q8_0 ? CDX_TYPE_Q6_K : t;
    }
    if (ft == FT_MXFP4_MOE) /* expert tensors (3D) MXFP4, everything else Q8_0 */
        return ne[2] > 1 ? CDX_TYPE_MXFP4 : CDX_TYPE_Q8_0;
    if (cat == CAT_TOKEN_EMBD) {
        if (ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ1_S || ft == FT_IQ1_M)
            return CDX_TYPE_Q2_K;
        if (ft == FT_IQ2_S || ft == FT_IQ2_M || ft == FT_IQ3_XXS)
            return CDX_TYPE_IQ3_S;
        if (ft == FT_TQ1_0 || ft == FT_TQ2_0 || ft == FT_Q2_0)
            return CDX_TYPE_Q4_K;
        return t;
    }
    if (iq_low) {
        if (is_attn_v(cat)) {
            m->i_attention_wv++;
            if (n_gqa >= 4 || n_expert >= 4)
                return CDX_TYPE_Q4_K;
            return ft == FT_IQ2_S || ft == FT_IQ2_M ? CDX_TYPE_IQ3_S : CDX_TYPE_Q2_K;
        }
        if (n_expert == 8 && cat == CAT_ATTN_K)
            return CDX_TYPE_Q4_K;
        if (cat == CAT_FFN_DOWN) {
            if (m->i_ffn_down++ < m->info.n_layer / 8)
                return ft == FT_IQ2_S || ft == FT_IQ2_M ? CDX_TYPE_IQ3_S : CDX_TYPE_Q2_K;
            return t;
        }
        if (cat == CAT_ATTN_OUTPUT) {
            if (n_expert == 8)
                return CDX_TYPE_Q5_K;
            if (ft == FT_IQ1_S || ft == FT_IQ1_M)
                return CDX_TYPE_IQ2_XXS;
            if (ft == FT_IQ2_S || ft == FT_IQ2_M)
                return CDX_TYPE_IQ3_S;
        }
        return t;
    }
    if (is_attn_v(cat)) {
        const int i = m->i_attention_wv++;
        if (ft == FT_Q2_K)
            t = n_gqa >= 4 ? CDX_TYPE_Q4_K : CDX_TYPE_Q3_K;
        else if (ft == FT_Q2_K_S && n_gqa >= 4)
            t = CDX_TYPE_Q4_K;
        else if (ft == FT_IQ3_XXS)
            t = n_gqa >= 4 ? CDX_TYPE_Q4_K : !imatrix ? CDX_TYPE_IQ3_S : CDX_TYPE_IQ3_XXS;
        else if ((ft == FT_IQ3_XS || ft == FT_IQ3_S) && n_gqa >= 4)
            t = CDX_TYPE_Q4_K;
        else if (ft == FT_IQ3_M)
            t = CDX_TYPE_Q4_K;
        else if (ft == FT_Q3_K_M) /* the first two attn_v get Q5_K */
            t = i < 2 ? CDX_TYPE_Q5_K : CDX_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = CDX_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && n_gqa >= 4)
            t = CDX_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i, m->n_attention_wv))
            t = CDX_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4)
            t = CDX_TYPE_Q5_K;
        if (m->info.is_70b && (t == CDX_TYPE_Q3_K || t == CDX_TYPE_Q4_K))
            t = CDX_TYPE_Q5_K; /* 70B: attn_v is 8x smaller than attn_q, so more bits are cheap */
        if (n_expert == 8)
            t = CDX_TYPE_Q8_0;
        return t;
    }
    if (cat == CAT_ATTN_K) {
        if (n_expert == 8)
            return CDX_TYPE_Q8_0;
        if (ft == FT_IQ3_XS)
            return CDX_TYPE_IQ3_XXS;
        if (ft == FT_IQ3_XXS)
            return CDX_TYPE_IQ2_S;
        return t;
    }
    if (cat == CAT_ATTN_Q) {
        if (ft == FT_IQ3_XS)
            return CDX_TYPE_IQ3_XXS;
        if (ft == FT_IQ3_XXS)
            return CDX_TYPE_IQ2_S;
        return t;
    }
    if (cat == CAT_FFN_DOWN) {
        const int i = ffn_layer(m, m->i_ffn_down++, name), n = m->info.n_layer;
        if (ft == FT_Q2_K)
            t = CDX_TYPE_Q3_K;
        else if (ft == FT_Q2_K_S) {
            if (i < n / 8)
                t = CDX_TYPE_Q4_K;
        } else if (ft == FT_IQ3_XXS && !imatrix)
            t = i < n / 8 ? CDX_TYPE_Q4_K : CDX_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M) /* note: "!falcon ||" makes every non-Falcon layer past n/16 Q4_K */
            t = i < n / 16 ? CDX_TYPE_Q5_K : !falcon || use_more_bits(i, n) ? CDX_TYPE_Q4_K : CDX_TYPE_Q3_K;
        else if (ft == FT_IQ3_M && (i < n / 8 || (n_expert == 8 && use_more_bits(i, n))))
            t = CDX_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = falcon ? CDX_TYPE_Q4_K : CDX_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (falcon)
                t = i < n / 16 ? CDX_TYPE_Q6_K : use_more_bits(i, n) ? CDX_TYPE_Q5_K : CDX_TYPE_Q4_K;
            else if (use_more_bits(i, n))
                t = CDX_TYPE_Q6_K;
        } else if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !imatrix)
            t = CDX_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M && use_more_bits(i, n))
            t = CDX_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && !falcon && i < n / 8)
            t = CDX_TYPE_Q5_K;
        else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && imatrix && i < n / 8)
            t = ft == FT_Q4_0 ? CDX_TYPE_Q4_1 : CDX_TYPE_Q5_1;
        return t;
    }
    if (cat == CAT_ATTN_OUTPUT) {
        if (falcon)
            return ft == FT_Q3_K_L ? CDX_TYPE_Q4_K : t;
        if (n_expert == 8) {
            static const int k_q5k[] = { FT_Q2_K, FT_IQ3_XS, FT_IQ3_XXS, FT_Q3_K_S, FT_Q3_K_M, FT_IQ4_NL,
                                         FT_Q4_K_S, FT_Q4_K_M, FT_IQ3_S, FT_IQ3_M, FT_IQ4_XS };
            for (size_t k = 0; k < sizeof k_q5k / sizeof k_q5k[0]; k++)
                if (ft == k_q5k[k])
                    return CDX_TYPE_Q5_K;
            return t;
        }
        if (ft == FT_Q2_K)
            return CDX_TYPE_Q3_K;
        if (ft == FT_IQ3_XXS)
            return CDX_TYPE_IQ3_S;
        if (ft == FT_Q3_K_M || ft == FT_IQ3_M)
            return CDX_TYPE_Q4_K;
        if (ft == FT_Q3_K_L)
            return CDX_TYPE_Q5_K;
        return t;
    }
    /* (attn_qkv is caught by the attn_v rule above, so llama.cpp's separate QKV rule never fires) */
    if (cat == CAT_FFN_GATE || cat == CAT_FFN_UP) {
        const int i = ffn_layer(m, cat == CAT_FFN_GATE ? m->i_ffn_gate++ : m->i_ffn_up++, name), n = m->info.n_layer;
        if (ft == FT_IQ3_XS && i >= n / 8 && i < 7 * n / 8)
            return CDX_TYPE_IQ3_XXS;
        return t;
    }
    return t;
}

/* tensor_type_fallback: a row length the chosen type's block does not divide. */
static cdx_type fallback(cdx_type t, int64_t ncols)
{
    const cdx_type_traits *tt = cdx_type_get(t);
    if (ncols % tt->block == 0)
        return t;
    cdx_type r;
    switch (t) {
    case CDX_TYPE_IQ1_S: case CDX_TYPE_IQ1_M: case CDX_TYPE_IQ2_XXS: case CDX_TYPE_IQ2_XS:
    case CDX_TYPE_IQ2_S: case CDX_TYPE_IQ3_XXS: case CDX_TYPE_IQ3_S: case CDX_TYPE_IQ4_XS:
        r = CDX_TYPE_IQ4_NL;
        break;
    case CDX_TYPE_Q2_0: case CDX_TYPE_Q2_K: case CDX_TYPE_Q3_K: case CDX_TYPE_TQ1_0: case CDX_TYPE_TQ2_0:
        r = CDX_TYPE_Q4_0;
        break;
    case CDX_TYPE_Q4_K: r = CDX_TYPE_Q5_0; break;
    case CDX_TYPE_Q5_K: r = CDX_TYPE_Q5_1; break;
    case CDX_TYPE_Q6_K: r = CDX_TYPE_Q8_0; break;
    default: r = t; break; /* a 32-block type: only F16 is left */
    }
    return ncols % cdx_type_get(r)->block ? CDX_TYPE_F16 : r;
}

cdx_type cdx_quant_mix_choose(cdx_quant_mix *m, const char *name, const int64_t ne[4], cdx_type src_type)
{
    if (!allows_quantization(name, ne))
        return src_type;
    cdx_type t = m->ftype->default_type;
    const cdx_type_traits *tt = cdx_type_get(t);
    if (tt->block == 1) /* F32 / F16 / BF16 files: no per-tensor rules */
        return t;
    t = choose_impl(m, t, name, ne, category_of(name));
    return fallback(t, ne[0]);
}
