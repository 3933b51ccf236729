/* The import rules (seed 000, "What the import refuses"), applied to config.json before a byte of
 * weights is fetched. They are the loader's own: the config reader (format/config_read.c) makes
 * every refusal, with the same message `caldrix run` gives, and holds the table of rules that
 * `caldrix models rules` and docs/models.md read; the architectures it names and what each runs as
 * are the architecture table's (model/arch.c). */
#include "caldrix/config.h"
#include "caldrix/hub.h"
#include "caldrix/model.h"
#include "hub/hub_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the accepted architectures: the architecture table's ---- */

static cdx_hub_arch g_archs[CDX_HF_ARCH_COUNT];
static pthread_once_t g_archs_once = PTHREAD_ONCE_INIT;

static void archs_init(void)
{
    for (int a = 0; a < CDX_HF_ARCH_COUNT; a++) {
        cdx_arch arch = CDX_ARCH_LLAMA;
        const char *name = cdx_hf_arch_name((cdx_hf_arch)a);
        cdx_model_arch_of(name, false, false, &arch);
        g_archs[a] = (cdx_hub_arch){ name, cdx_model_arch_family(arch), cdx_model_hf_arch_note((cdx_hf_arch)a) };
    }
}

const cdx_hub_arch *cdx_hub_archs(size_t *n)
{
    pthread_once(&g_archs_once, archs_init);
    *n = CDX_HF_ARCH_COUNT;
    return g_archs;
}

const cdx_hub_rule *cdx_hub_rules(size_t *n) { return cdx_hf_config_rules(n); }

/* ---- the check ---- */

int hub_config_read(const char *text, size_t len, const char *name, cdx_hub_config *out, cdx_hf_config *cfg,
                    cdx_err *err)
{
    int rc = cdx_hf_config_parse(text, len, name, cfg, err);
    cdx_hub_config c = { .n_layer = cfg->n_layers, .n_head = cfg->n_heads, .n_kv_head = cfg->n_kv_heads,
                         .hidden = cfg->hidden_size, .head_dim = cfg->head_dim, .ffn = cfg->intermediate_size,
                         .vocab = cfg->vocab_size, .ctx_max = cfg->max_position_embeddings,
                         .n_expert = cfg->n_experts, .n_expert_used = cfg->n_experts_per_tok,
                         .moe_ffn = cfg->moe_intermediate_size, .sliding_window = cfg->sliding_window,
                         .tied = cfg->tie_word_embeddings, .vision = cfg->vision.present,
                         .llama3_rope = cfg->rope_type == CDX_HF_ROPE_LLAMA3,
                         .rope_f32_only = cdx_dtype_rope_f32_only(cfg->rope_type) };
    snprintf(c.arch, sizeof c.arch, "%s", cfg->architecture);
    snprintf(c.model_type, sizeof c.model_type, "%s", cfg->model_type);
    snprintf(c.dtype, sizeof c.dtype, "%s", cfg->torch_dtype);
    if (out)
        *out = c;
    /* the hub's contract: a refusal is EUNSUPPORTED, malformed JSON or values EFORMAT */
    if (rc < 0 && rc != CDX_EFORMAT && rc != CDX_ENOMEM) {
        rc = CDX_EUNSUPPORTED;
        if (err)
            err->code = rc;
    }
    return rc;
}

int cdx_hub_check_config(const char *text, size_t len, const char *name, cdx_hub_config *out, cdx_err *err)
{
    cdx_hf_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    cdx_hub_config c;
    int rc = hub_config_read(text, len, name, &c, cfg, err);
    free(cfg);
    if (rc == 0 && out)
        *out = c;
    return rc;
}

/* ---- memory admission (seed 004) ---- */

uint32_t cdx_hub_ctx_for(const cdx_hub_config *c, uint32_t ctx)
{
    uint64_t n = ctx ? ctx : CDX_HUB_DEFAULT_CTX;
    if (c->ctx_max > 0 && (uint64_t)c->ctx_max < n)
        n = (uint64_t)c->ctx_max;
    /* not clamped to a sliding window: the window limits what attention reads, while the engine's
     * cache keeps every position of the context (as its pool is sized) */
    return (uint32_t)n;
}

uint64_t cdx_hub_kv_bytes(const cdx_hub_config *c, uint32_t ctx)
{
    const uint64_t f[] = { 2, (uint64_t)(c->n_layer > 0 ? c->n_layer : 0), (uint64_t)(c->n_kv_head > 0 ? c->n_kv_head : 0),
                           (uint64_t)(c->head_dim > 0 ? c->head_dim : 0), cdx_hub_ctx_for(c, ctx),
                           c->kv_value_bytes ? c->kv_value_bytes : CDX_HUB_KV_BYTES };
    uint64_t n = 1;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (__builtin_mul_overflow(n, f[i], &n))
            return UINT64_MAX; /* saturates: far more than any machine has */
    return n;
}

uint32_t cdx_hub_kv_value_bytes(const cdx_hub_config *c, int dtype)
{
    cdx_arch a;
    if (!cdx_model_arch_of(c->arch, false, c->n_expert > 0, &a))
        return CDX_HUB_KV_BYTES;
    const uint32_t stored = !strcmp(c->dtype, "bfloat16") ? CDX_TYPE_BF16 : !strcmp(c->dtype, "float16") ? CDX_TYPE_F16
                                                                                                       : CDX_TYPE_F32;
    cdx_dtype d;
    const char *why;
    cdx_err e = { 0 };
    if (cdx_dtype_choose(false, stored, a, c->rope_f32_only, (cdx_dtype)dtype, &d, &why, &e))
        return CDX_HUB_KV_BYTES;
    return d == CDX_DTYPE_BF16 ? 2 : CDX_HUB_KV_BYTES;
}

bool cdx_hub_expert_split(const cdx_hub_config *c, uint64_t weight_bytes, uint64_t *dense, uint64_t *one_expert)
{
    if (!c || c->n_expert < 1 || c->moe_ffn < 1 || c->n_layer < 1 || c->hidden < 1)
        return false;
    /* parameters: embeddings (and the head), attention, the experts (every layer taken as sparse) */
    const double h = (double)c->hidden, hd = (double)(c->head_dim ? c->head_dim : c->hidden / (c->n_head ? c->n_head : 1));
    const double attn = h * hd * (2.0 * (double)c->n_head + 2.0 * (double)c->n_kv_head);
    const double emb = (double)c->vocab * h * (c->tied ? 1 : 2);
    const double one = 3.0 * h * (double)c->moe_ffn;
    const double experts = (double)c->n_layer * (double)c->n_expert * one;
    const double total = emb + (double)c->n_layer * (attn + (double)c->n_expert * h) + experts;
    const double per_param = (double)weight_bytes / total;
    *one_expert = (uint64_t)(one * per_param);
    *dense = weight_bytes - (uint64_t)(experts * per_param);
    return true;
}

int hub_check_memory(const char *label, const cdx_hub_config *c, uint64_t weight_bytes, const cdx_hub_opts *o,
                     const char *downloaded, cdx_err *err)
{
    if (o && o->budget_out)
        *o->budget_out = 0;
    if (o && o->skip_memory_check)
        return 0;
    uint64_t avail = o ? o->mem_available : 0;
    if (!avail) {
        int rc = cdx_hub_mem_available(&avail, err);
        if (rc < 0)
            return rc;
    }
    if (!avail)
        return 0; /* unknown: the loader decides against the real files */
    cdx_hub_config none;
    memset(&none, 0, sizeof none);
    uint32_t ctx = cdx_hub_ctx_for(c ? c : &none, o ? o->ctx : 0);
    cdx_hub_config kc = c ? *c : none;
    if (c && !kc.kv_value_bytes)
        kc.kv_value_bytes = cdx_hub_kv_value_bytes(c, o ? o->dtype : 0);
    uint64_t kv = c ? cdx_hub_kv_bytes(&kc, ctx) : 0;
    const uint64_t given = o ? o->weight_budget : 0;
    const uint64_t wres = given && given < weight_bytes ? given : weight_bytes;
    uint64_t need;
    if (__builtin_add_overflow(wres, kv, &need))
        need = UINT64_MAX;
    if (need <= avail)
        return 0;
    /* a mixture of experts: its least budget (the dense weights + top-k experts of one layer) */
    uint64_t dense = 0, one = 0, least = 0, fit = avail > kv ? (avail - kv) & ~(uint64_t)4095 : 0;
    if (c && cdx_hub_expert_split(c, weight_bytes, &dense, &one))
        least = dense + (uint64_t)(c->n_expert_used > 0 ? c->n_expert_used : 1) * one;
    char a[32], w[32], k[32], t[32], lb[32], fb[32];
    cdx_fmt_bytes(least, lb, sizeof lb);
    cdx_fmt_bytes(fit, fb, sizeof fb);
    if (least && fit >= least && !given) {
        if (o && o->budget_out)
            *o->budget_out = fit;
        hub_note(o, "%s does not fit in memory whole; admitted with --weight-budget %llu (%s): the dense weights "
                 "stay resident and experts are read from the file when tokens route to them", label,
                 (unsigned long long)fit, fb);
        return 0;
    }
    char budget_line[256] = "";
    if (least && fit >= least)
        snprintf(budget_line, sizeof budget_line, "  - a smaller weight budget: --weight-budget %llu (%s) fits; the least "
                 "this model takes is %s\n", (unsigned long long)fit, fb, lb);
    else if (least)
        snprintf(budget_line, sizeof budget_line, "  - (a weight budget does not help: the least this model takes, %s, "
                 "does not fit either)\n", lb);
    cdx_fmt_bytes(need, t, sizeof t);
    cdx_fmt_bytes(wres, w, sizeof w);
    cdx_fmt_bytes(kv, k, sizeof k);
    cdx_fmt_bytes(avail, a, sizeof a);
    return cdx_err_set(err, CDX_ERANGE,
                       "%s needs %s free (%s of weights + %s of KV cache for a %u-token context) and this machine "
                       "has %s available.\n%s\n\nOptions:\n"
                       "  - a smaller model: caldrix models supported\n"
                       "  - a shorter context: --ctx N (the KV cache shrinks with it)\n"
                       "%s"
                       "  - free memory, then run again\n"
                       "  - fetch it anyway and let the loader decide against the real files: caldrix pull %s "
                       "--fetch-anyway", label, t, w, k, ctx, a, downloaded, budget_line, label);
}
