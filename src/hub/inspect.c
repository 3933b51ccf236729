/* caldrix inspect (seed 003): what caldrix makes of a GGUF file or a checkpoint folder, from
 * headers alone. Weights are never read: GGUF through the format layer's reader (which maps the
 * file and checks every offset), safetensors through their JSON headers, config.json through the
 * config reader (the import rules). The verdict is the loader's own (cdx_model_check), so inspect
 * refuses what `caldrix run` refuses, with its message. */
#include "caldrix/config.h"
#include "caldrix/hub.h"
#include "caldrix/format.h"
#include "caldrix/model.h"
#include "caldrix/quant.h"
#include "hub/hub_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the tensors each family requires: the loader's own tables (cdx_model_tensor_names) ---- */

static void append_list(char *buf, size_t cap, const char *item)
{
    size_t n = strlen(buf);
    if (n + strlen(item) + 8 < cap)
        snprintf(buf + n, cap - n, "%s%s", n ? "," : "", item);
    else if (n + 5 < cap && strcmp(buf + n - 3, "..."))
        snprintf(buf + n, cap - n, ",...");
}

typedef bool (*has_fn)(const void *ctx, const char *name);

typedef struct names_ctx {
    cdx_hub_report *out;
    has_fn has;
    const void *hctx;
    char **all;        /* every name the loader looks up, when kept (for unused_tensors) */
    size_t n, cap;
    bool keep, oom;
} names_ctx;

static void on_name(void *c, const char *name, bool required)
{
    names_ctx *x = c;
    if (required && !x->has(x->hctx, name)) {
        x->out->n_missing++;
        append_list(x->out->missing_required_tensors, sizeof x->out->missing_required_tensors, name);
    }
    if (!x->keep || x->oom)
        return;
    char **v = cdx_array_grow(x->all, &x->cap, x->n, sizeof *v);
    if (!v) {
        x->oom = true;
        return;
    }
    x->all = v;
    if (!(x->all[x->n] = strdup(name)))
        x->oom = true;
    else
        x->n++;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void names_free(names_ctx *x)
{
    for (size_t i = 0; i < x->n; i++)
        free(x->all[i]);
    free(x->all);
}

/* Fills missing_required_tensors from the names the loader requires for plan. */
static void check_required(cdx_hub_report *out, const cdx_tensor_plan *plan, has_fn has, const void *ctx, names_ctx *x)
{
    out->missing_required_tensors[0] = 0;
    out->n_missing = 0;
    x->out = out;
    x->has = has;
    x->hctx = ctx;
    cdx_model_tensor_names(plan, on_name, x);
    if (x->keep && x->n)
        qsort(x->all, x->n, sizeof *x->all, cmp_str);
    if (!out->n_missing)
        snprintf(out->missing_required_tensors, sizeof out->missing_required_tensors, "none");
}

/* The default compute type (cdx_dtype_choose) and why, into the report. */
static void set_compute(cdx_hub_report *out, bool gguf, uint32_t stored, cdx_arch arch, bool f32_only)
{
    cdx_dtype d;
    const char *why = "";
    cdx_err e = { 0 };
    if (cdx_dtype_choose(gguf, stored, arch, f32_only, CDX_DTYPE_AUTO, &d, &why, &e))
        return;
    snprintf(out->compute_dtype, sizeof out->compute_dtype, "%s", cdx_dtype_name(d));
    snprintf(out->compute_why, sizeof out->compute_why, "%s", why);
    out->compute_bf16_ok = !cdx_dtype_choose(gguf, stored, arch, f32_only, CDX_DTYPE_BF16, &d, &why, &e);
}

static void loader_verdict(cdx_hub_report *out, const char *path);

/* ---- GGUF ---- */

static bool gguf_has(const void *ctx, const char *name) { return cdx_gguf_tensor_find(ctx, name) != NULL; }

static int64_t gguf_int(const cdx_gguf *g, const char *arch, cdx_gguf_key k)
{
    uint64_t v = 0;
    return cdx_gguf_get_arch_u64(g, arch, k, &v) && v < (1ull << 40) ? (int64_t)v : 0;
}

typedef struct tcount { uint32_t type; uint64_t n; } tcount;

static void type_lists(cdx_hub_report *out, const tcount *tc, int n_tc)
{
    out->tensor_types[0] = out->unsupported_tensor_types[0] = 0;
    for (int i = 0; i < n_tc; i++) {
        char item[64];
        const cdx_type_traits *t = cdx_type_get(tc[i].type);
        snprintf(item, sizeof item, "%s=%llu", t ? t->name : "unknown", (unsigned long long)tc[i].n);
        append_list(out->tensor_types, sizeof out->tensor_types, item);
        if (!t || t->retired || !t->to_f32) {
            snprintf(item, sizeof item, "%s", t ? t->name : "unknown");
            append_list(out->unsupported_tensor_types, sizeof out->unsupported_tensor_types, item);
        }
    }
    if (!out->unsupported_tensor_types[0])
        snprintf(out->unsupported_tensor_types, sizeof out->unsupported_tensor_types, "none");
}

/* ---- the split a weight budget reads (expert tensors by name; see expert_cache.c) ---- */

/* The layer of an expert tensor ("blk.L.ffn_up_exps.weight", "model.layers.L.mlp.experts.E....",
 * "model.layers.L.block_sparse_moe.experts.E..."), or -1 for any other tensor. */
static long expert_layer(const char *name)
{
    const char *p = NULL;
    if (!strncmp(name, "blk.", 4) && strstr(name, "_exps."))
        p = name + 4;
    else if (!strncmp(name, "model.layers.", 13) && strstr(name, ".experts.") && !strstr(name, "shared_expert"))
        p = name + 13;
    if (!p || *p < '0' || *p > '9')
        return -1;
    long l = 0;
    while (*p >= '0' && *p <= '9' && l < 100000)
        l = l * 10 + (*p++ - '0');
    return l;
}

typedef struct { uint64_t *per_layer; long n; } expert_acc;

static void expert_add(cdx_hub_report *out, expert_acc *a, const char *name, uint64_t bytes)
{
    long l = expert_layer(name);
    if (l < 0)
        return;
    out->expert_bytes += bytes;
    if (l < a->n && a->per_layer)
        a->per_layer[l] += bytes;
}

static void expert_finish(cdx_hub_report *out, expert_acc *a)
{
    for (long l = 0; l < a->n && a->per_layer && out->n_expert > 0; l++) {
        uint64_t one = a->per_layer[l] / (uint64_t)out->n_expert;
        out->expert_one_bytes = one > out->expert_one_bytes ? one : out->expert_one_bytes;
    }
    if (out->expert_bytes && out->n_expert_used > 0)
        out->min_budget_bytes = out->weight_bytes - out->expert_bytes + (uint64_t)out->n_expert_used * out->expert_one_bytes;
    free(a->per_layer);
}

static int inspect_gguf(const char *path, cdx_hub_report *out, cdx_err *err)
{
    cdx_gguf *g = NULL;
    int rc = cdx_gguf_open(path, &g, err);
    if (rc < 0)
        return rc;
    snprintf(out->format, sizeof out->format, "gguf");
    cdx_gguf_str s = { 0 };
    if (!cdx_gguf_get_str(g, "general.architecture", &s) || s.len == 0 || s.len > 60) {
        cdx_gguf_close(g);
        return cdx_err_set(err, CDX_EFORMAT, "%s: general.architecture is missing or not a short string", path);
    }
    snprintf(out->architecture, sizeof out->architecture, "%.*s", (int)s.len, s.ptr);
    const char *a = out->architecture;
    out->n_tensors = g->n_tensors;
    out->n_metadata = g->n_kv;
    out->n_layer = gguf_int(g, a, CDX_GK_BLOCK_COUNT);
    out->n_head = gguf_int(g, a, CDX_GK_HEAD_COUNT);
    out->n_kv_head = gguf_int(g, a, CDX_GK_HEAD_COUNT_KV);
    if (!out->n_kv_head)
        out->n_kv_head = out->n_head;
    out->hidden = gguf_int(g, a, CDX_GK_EMBEDDING_LENGTH);
    out->head_dim = gguf_int(g, a, CDX_GK_KEY_LENGTH);
    if (!out->head_dim && out->n_head)
        out->head_dim = out->hidden / out->n_head;
    out->ctx = gguf_int(g, a, CDX_GK_CONTEXT_LENGTH);
    out->n_expert = gguf_int(g, a, CDX_GK_EXPERT_COUNT);
    out->n_expert_used = gguf_int(g, a, CDX_GK_EXPERT_USED_COUNT);
    /* hyperparameters of the architecture the key table (CDX_GGUF_ARCH_KEYS) does not describe:
     * nothing reads them, so nothing can say whether they change the math */
    const size_t an = strlen(a);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *key = g->kv[i].key;
        if (strncmp(key, a, an) || key[an] != '.')
            continue;
        int k = 0;
        while (k < CDX_GK_COUNT && strcmp(key + an + 1, cdx_gguf_key_suffix((cdx_gguf_key)k)))
            k++;
        if (k == CDX_GK_COUNT) {
            out->n_unknown_keys++;
            append_list(out->unknown_keys, sizeof out->unknown_keys, key);
        }
    }
    tcount tc[CDX_TYPE_COUNT + 1];
    int n_tc = 0;
    expert_acc ea = { .n = out->n_layer > 0 && out->n_layer <= 4096 ? (long)out->n_layer : 0 };
    ea.per_layer = ea.n ? calloc((size_t)ea.n, sizeof *ea.per_layer) : NULL;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const cdx_gguf_tensor *t = &g->tensors[i];
        out->weight_bytes += t->n_bytes;
        expert_add(out, &ea, t->name, t->n_bytes);
        int k = 0;
        while (k < n_tc && tc[k].type != t->type)
            k++;
        if (k == n_tc && n_tc < CDX_TYPE_COUNT + 1)
            tc[n_tc++] = (tcount){ t->type, 0 };
        if (k < n_tc)
            tc[k].n++;
    }
    type_lists(out, tc, n_tc);
    expert_finish(out, &ea);
    cdx_arch arch = CDX_ARCH_LLAMA;
    const bool known = cdx_model_arch_of(a, true, out->n_expert > 0, &arch); /* "llama" with experts: Mixtral */
    snprintf(out->family, sizeof out->family, "%s", known ? cdx_model_arch_family(arch) : a);
    const char *text_only = known ? cdx_model_arch_images_refused(arch) : NULL; /* qwen2vl: the mmproj is not read */
    if (text_only && !out->note[0])
        snprintf(out->note, sizeof out->note, "%s: requests with images are refused", text_only);
    if (known && out->n_layer > 0 && out->n_layer <= 4096) {
        /* a sparse layer is one with a router, as the loader decides */
        uint8_t *sparse = calloc((size_t)out->n_layer, 1);
        for (int64_t l = 0; sparse && out->n_expert > 0 && l < out->n_layer; l++) {
            char rn[96];
            snprintf(rn, sizeof rn, "blk.%lld.ffn_gate_inp.weight", (long long)l);
            sparse[l] = cdx_gguf_tensor_find(g, rn) != NULL;
        }
        /* Qwen3.5: every full_attention_interval-th layer is full attention, as the loader reads it */
        uint8_t *linear = arch == CDX_ARCH_QWEN3_5 ? calloc((size_t)out->n_layer, 1) : NULL;
        uint64_t every = 4;
        if (linear && (!cdx_gguf_get_arch_u64(g, a, CDX_GK_FULL_ATTENTION_INTERVAL, &every) || every < 1))
            every = every < 1 ? 1 : 4;
        for (int64_t l = 0; linear && l < out->n_layer; l++)
            linear[l] = (uint64_t)(l + 1) % every != 0;
        cdx_tensor_plan plan = { .arch = arch, .gguf = true, .n_layer = out->n_layer, .n_expert = out->n_expert,
                                 .sparse = sparse, .qkv_bias = -1, .linear = linear };
        names_ctx x = { 0 };
        check_required(out, &plan, gguf_has, g, &x);
        free(sparse);
        free(linear);
    } else {
        out->n_missing = 0;
        snprintf(out->missing_required_tensors, sizeof out->missing_required_tensors,
                 !known ? "n/a (architecture %s is not one caldrix maps)" : "n/a (block_count missing)", a);
    }
    snprintf(out->unused_tensors, sizeof out->unused_tensors, "n/a");
    cdx_hub_config c = { .n_layer = out->n_layer, .n_kv_head = out->n_kv_head, .head_dim = out->head_dim,
                         .ctx_max = out->ctx };
    set_compute(out, true, CDX_TYPE_F32, arch, false);
    out->kv_ctx = cdx_hub_ctx_for(&c, 0);
    out->kv_bytes = cdx_hub_kv_bytes(&c, 0);
    cdx_gguf_close(g);
    loader_verdict(out, path);
    return 0;
}

/* ---- safetensors headers: the format layer's reader, headers only ---- */

/* A base model's tensors without the "model." prefix (Qwen3-Embedding) are read as if prefixed, as the loader does. */
static bool st_bare(const cdx_safetensors *st)
{
    return !cdx_st_find(st, "model.embed_tokens.weight") && cdx_st_find(st, "embed_tokens.weight");
}
static bool st_has(const void *ctx, const char *name)
{
    return cdx_st_find(ctx, name) != NULL || (!strncmp(name, "model.", 6) && st_bare(ctx) && cdx_st_find(ctx, name + 6));
}


/* The loader's verdict (cdx_model_check: every name, shape and type, no data read) as the refusal,
 * when nothing earlier refused: the message `caldrix run` gives. */
static void loader_verdict(cdx_hub_report *out, const char *path)
{
    cdx_err e = { 0 };
    if (!out->refusal[0] && cdx_model_check(path, &e) < 0)
        snprintf(out->refusal, sizeof out->refusal, "%s", e.msg);
}

static int inspect_dir(const char *dir, cdx_hub_report *out, cdx_err *err)
{
    snprintf(out->format, sizeof out->format, "safetensors");
    char *cp = hub_strdup_printf("%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    int rc = cp ? cdx_file_read_all(cp, 16u << 20, &text, &len, err) : cdx_err_set(err, CDX_ENOMEM, "oom");
    cdx_hf_config *cfg = rc < 0 ? NULL : malloc(sizeof *cfg);
    if (rc < 0 || !cfg) {
        free(text);
        free(cp);
        return rc < 0 ? rc : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    /* the import rules are the config reader's: its verdict, and what it read even for a refused model */
    cdx_hub_config c;
    cdx_err cerr = { 0 };
    if (hub_config_read(text, len, cp, &c, cfg, &cerr) < 0) {
        if (cerr.code == CDX_EFORMAT && strstr(cerr.msg, "not valid JSON")) {
            free(cfg);
            free(text);
            free(cp);
            return cdx_err_set(err, cerr.code, "%s", cerr.msg);
        }
        snprintf(out->refusal, sizeof out->refusal, "%s", cerr.msg);
    }
    free(text);
    free(cp);
    const bool known = cfg->arch != CDX_HF_ARCH_COUNT && cfg->n_layers > 0;
    cdx_arch fa = CDX_ARCH_LLAMA;
    if (cfg->arch != CDX_HF_ARCH_COUNT)
        cdx_model_arch_of(cfg->architecture, false, false, &fa);
    snprintf(out->architecture, sizeof out->architecture, "%s", cfg->architecture[0] ? cfg->architecture : "?");
    snprintf(out->family, sizeof out->family, "%s",
             cfg->arch != CDX_HF_ARCH_COUNT ? cdx_model_arch_family(fa) : cfg->model_type[0] ? cfg->model_type : "?");
    out->n_layer = cfg->n_layers;
    out->n_head = cfg->n_heads;
    out->n_kv_head = cfg->n_kv_heads;
    out->hidden = cfg->hidden_size;
    out->head_dim = cfg->head_dim;
    out->ctx = cfg->max_position_embeddings;
    out->n_expert = cfg->n_experts;
    out->n_expert_used = cfg->n_experts_per_tok;
    out->n_metadata = (uint64_t)cfg->n_keys;
    const bool tied = cfg->tie_word_embeddings;

    /* the loader's reader and its choice of files (model.safetensors / index / every *.safetensors) */
    cdx_safetensors *st = NULL;
    if ((rc = cdx_st_open_headers(dir, &st, err)) < 0)
        goto done;
    out->n_tensors = st->n_tensors;
    /* dtypes: safetensors names; only F32, F16 and BF16 are imported */
    char types[512] = "", unsup[512] = "";
    const char *seen[32];
    uint64_t counts[32];
    int n_seen = 0;
    for (size_t i = 0; i < st->n_tensors; i++) {
        out->weight_bytes += st->tensors[i].n_bytes;
        if (cfg->bitlinear && !strcmp(st->tensors[i].dtype, "U8")) /* BitNet: unpacked to one int8 per weight */
            out->weight_bytes += 3 * st->tensors[i].n_bytes;
        int k = 0;
        while (k < n_seen && strcmp(seen[k], st->tensors[i].dtype))
            k++;
        if (k == n_seen && n_seen < 32)
            seen[n_seen] = st->tensors[i].dtype, counts[n_seen++] = 0;
        if (k < n_seen)
            counts[k]++;
    }
    for (int k = 0; k < n_seen; k++) {
        char item[64];
        snprintf(item, sizeof item, "%s=%llu", seen[k], (unsigned long long)counts[k]);
        append_list(types, sizeof types, item);
        if (strcmp(seen[k], "F32") && strcmp(seen[k], "F16") && strcmp(seen[k], "BF16") &&
            !(cfg->bitlinear && !strcmp(seen[k], "U8"))) /* BitNet's packed BitLinear weights */
            append_list(unsup, sizeof unsup, seen[k]);
    }
    snprintf(out->tensor_types, sizeof out->tensor_types, "%s", types);
    /* the compute type the loader will pick (the model layer's table), and the bytes it holds:
     * bf16 compute keeps 16-bit weights as they are and casts f32 ones to bf16 */
    uint64_t by_type[3] = { 0 }; /* values stored as F32, F16, BF16 */
    for (size_t i = 0; i < st->n_tensors; i++) {
        const uint32_t ty = st->tensors[i].type;
        const int k = ty == CDX_TYPE_F32 ? 0 : ty == CDX_TYPE_F16 ? 1 : ty == CDX_TYPE_BF16 ? 2 : -1;
        if (k >= 0)
            by_type[k] += st->tensors[i].n_bytes / (k ? 2 : 4);
    }
    const uint32_t stored = by_type[2] >= by_type[1] && by_type[2] > by_type[0] ? CDX_TYPE_BF16
                          : by_type[1] > by_type[0] ? CDX_TYPE_F16 : CDX_TYPE_F32;
    if (cfg->arch != CDX_HF_ARCH_COUNT)
        set_compute(out, false, stored, fa, cdx_dtype_rope_f32_only(cfg->rope_type));
    if (!strcmp(out->compute_dtype, "bf16"))
        out->weight_bytes -= 2 * by_type[0]; /* f32 values held as bf16 */
    snprintf(out->unsupported_tensor_types, sizeof out->unsupported_tensor_types, "%s", unsup[0] ? unsup : "none");
    /* required tensors: the loader's names for what config.json says of each layer */
    if (!known) {
        snprintf(out->missing_required_tensors, sizeof out->missing_required_tensors,
                 "n/a (architecture %s is not one caldrix maps)", out->architecture);
        snprintf(out->unused_tensors, sizeof out->unused_tensors, "n/a");
    } else {
        uint8_t *sparse = calloc((size_t)cfg->n_layers, 1), *linear = calloc((size_t)cfg->n_layers, 1);
        if (!sparse || !linear) {
            free(sparse);
            free(linear);
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto done;
        }
        for (int64_t l = 0; l < cfg->n_layers; l++) {
            sparse[l] = (cfg->layer_flags[l] & CDX_HF_LAYER_MOE) != 0;
            linear[l] = (cfg->layer_flags[l] & CDX_HF_LAYER_LINEAR) != 0;
        }
        cdx_tensor_plan plan = { .arch = fa, .gguf = false, .n_layer = cfg->n_layers, .n_expert = cfg->n_experts,
                                 .sparse = sparse, .qkv_bias = cfg->attn_qkv_bias, .untied = !tied, .linear = linear,
                                 .text_config = cfg->text_config, .n_vision_layer = cfg->vision.n_layers,
                                 .parallel = cfg->parallel_residual, .bitlinear = cfg->bitlinear };
        names_ctx x = { .keep = true };
        check_required(out, &plan, st_has, st, &x);
        free(sparse);
        free(linear);
        if (x.oom) {
            names_free(&x);
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto done;
        }
        /* tensors the loader does not look up (Qwen3.5's mtp.* and model.visual.* are skipped by name) */
        out->unused_tensors[0] = 0;
        out->n_unused = 0;
        const char *text_only = cdx_model_arch_images_refused(fa); /* Qwen2-VL: visual.* skipped by name too */
        int64_t n_tower = 0;
        for (size_t i = 0; i < st->n_tensors; i++) {
            const char *t = st->tensors[i].name;
            if (text_only && (!strncmp(t, "visual.", 7) || !strncmp(t, "model.visual.", 13))) {
                n_tower++;
                continue;
            }
            if (!strncmp(t, "mtp.", 4) || !strncmp(t, "model.visual.", 13))
                continue;
            if (x.n && bsearch(&t, x.all, x.n, sizeof *x.all, cmp_str))
                continue;
            char pre[512];
            const char *tp = pre;
            snprintf(pre, sizeof pre, "model.%s", t);
            if (x.n && st_bare(st) && bsearch(&tp, x.all, x.n, sizeof *x.all, cmp_str))
                continue;
            out->n_unused++;
            append_list(out->unused_tensors, sizeof out->unused_tensors, t);
        }
        names_free(&x);
        if (!out->n_unused)
            snprintf(out->unused_tensors, sizeof out->unused_tensors, "none");
        if (text_only)
            snprintf(out->note, sizeof out->note, "%s: its %lld vision-tower tensors are skipped unread and requests "
                     "with images are refused", text_only, (long long)n_tower);
        /* a shipped lm_head beside a tied embedding */
        const cdx_st_tensor *head = cdx_st_find(st, "lm_head.weight"), *emb = cdx_st_find(st, "model.embed_tokens.weight");
        if (tied && head && emb) /* (a head of another shape is the loader's refusal) */
            snprintf(out->note, sizeof out->note, "tie_word_embeddings is true but the checkpoint ships "
                     "lm_head.weight: it runs with the shipped head, as transformers does");
    }
    {
        expert_acc ea = { .n = out->n_layer > 0 && out->n_layer <= 4096 ? (long)out->n_layer : 0 };
        ea.per_layer = ea.n ? calloc((size_t)ea.n, sizeof *ea.per_layer) : NULL;
        for (size_t i = 0; i < st->n_tensors; i++)
            expert_add(out, &ea, st->tensors[i].name, st->tensors[i].n_bytes);
        expert_finish(out, &ea);
    }
    cdx_hub_config kc = { .n_layer = out->n_layer, .n_kv_head = out->n_kv_head, .head_dim = out->head_dim,
                          .ctx_max = out->ctx, .sliding_window = c.sliding_window,
                          .kv_value_bytes = !strcmp(out->compute_dtype, "bf16") ? 2 : 0 };
    out->kv_ctx = cdx_hub_ctx_for(&kc, 0);
    out->kv_bytes = cdx_hub_kv_bytes(&kc, 0);
    loader_verdict(out, dir);
    rc = 0;
done:
    free(cfg);
    cdx_st_close(st);
    return rc;
}

int cdx_hub_inspect_path(const char *path, cdx_hub_report *out, cdx_err *err)
{
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    struct stat st;
    if (stat(path, &st) != 0)
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: no such file or directory", path);
    if (S_ISDIR(st.st_mode))
        return inspect_dir(path, out, err);
    FILE *f = fopen(path, "rb");
    char magic[4] = { 0 };
    size_t got = f ? fread(magic, 1, 4, f) : 0;
    if (f)
        fclose(f);
    int rc = cdx_gguf_check_magic(magic, got, path, err); /* the message run gives */
    return rc ? rc : inspect_gguf(path, out, err);
}
