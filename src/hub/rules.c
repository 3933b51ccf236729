/* The import rules (seed 000, "What the import refuses"): one table of checks over config.json.
 * The checks, `caldrix models rules` and docs/models.md all read k_rules. Each refusal names the
 * field, the value, and what to do instead. */
#include "caldrix/config.h"
#include "caldrix/hub.h"
#include "caldrix/model.h"
#include "hub/hub_int.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the accepted architectures ---- */

static const cdx_hub_arch k_archs[] = {
    { "LlamaForCausalLM",                "llama",    "" },
    { "MistralForCausalLM",              "mistral",  "accepted, not verified on hardware" },
    { "Qwen2ForCausalLM",                "qwen2",    "" },
    { "Qwen3ForCausalLM",                "qwen3",    "" },
    { "Qwen3MoeForCausalLM",             "qwen3_moe", "mixture of experts" },
    { "MixtralForCausalLM",              "mixtral",  "mixture of experts" },
    { "Qwen2MoeForCausalLM",             "qwen2_moe", "mixture of experts with a shared expert" },
    { "Qwen3_5ForCausalLM",              "qwen3_5",  "CPU lane only" },
    { "Qwen3_5ForConditionalGeneration", "qwen3_5",  "text only (the vision tower is skipped); CPU lane only" },
    { "Idefics3ForConditionalGeneration", "idefics3", "vision-language; CPU lane only" },
};

const cdx_hub_arch *cdx_hub_archs(size_t *n)
{
    *n = sizeof k_archs / sizeof k_archs[0];
    return k_archs;
}

static bool is_qwen35(const char *arch) { return !strncmp(arch, "Qwen3_5", 7); }

/* Qwen3.5: the keys the import reads are the config reader's list (cdx_hf_qwen35_key_known). */

/* ---- context for the checks ---- */

typedef struct rctx {
    const char *name;      /* message prefix, e.g. "Qwen/Qwen3-8B: config.json" */
    const char *text;      /* config.json as given */
    size_t len;
    json_t *root;
    json_t *tc;            /* text_config when present, else root: where the dimensions are */
    const char *tc_prefix; /* "" or "text_config." */
    cdx_hub_config *c;
} rctx;

static char *dump(json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (s && strlen(s) > 200)
        strcpy(s + 190, "...");
    return s;
}

/* A value for a message: the JSON text, cut at 200 bytes. */
#define WITH_DUMP(v, var, stmt) do { char *var = dump(v); stmt; free(var); } while (0)

static json_t *get(const rctx *x, const char *key)
{
    json_t *v = json_object_get(x->tc, key);
    if (!v && x->tc != x->root)
        v = json_object_get(x->root, key);
    return v;
}

/* An integer field: absent -> def; an integral number -> its value; anything else: EFORMAT. */
static int get_int(const rctx *x, const char *key, int64_t def, int64_t *out, cdx_err *err)
{
    json_t *v = get(x, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
        *out = (int64_t)json_real_value(v);
        return 0;
    }
    int rc;
    WITH_DUMP(v, s, rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s%s is %s; expected an integer", x->name, x->tc_prefix,
                                     key, s ? s : "?"));
    return rc;
}

static bool get_bool(const rctx *x, const char *key, bool def)
{
    json_t *v = get(x, key);
    return v && json_is_boolean(v) ? json_is_true(v) : def;
}

/* ---- the rules ---- */

static int r_architecture(rctx *x, cdx_err *err)
{
    json_t *a = json_object_get(x->root, "architectures");
    const char *name = NULL;
    if (json_is_array(a) && json_array_size(a) == 1 && json_is_string(json_array_get(a, 0)))
        name = json_string_value(json_array_get(a, 0));
    const cdx_hub_arch *row = NULL;
    for (size_t i = 0; name && i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (!strcmp(k_archs[i].name, name))
            row = &k_archs[i];
    if (row) {
        snprintf(x->c->arch, sizeof x->c->arch, "%s", row->name);
        x->c->vision = !strcmp(row->name, "Idefics3ForConditionalGeneration");
        return 0;
    }
    char list[600] = "";
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", k_archs[i].name);
    const char *what = !a ? "absent" : !json_is_array(a) || json_array_size(a) != 1 ? "not exactly one name" : NULL;
    int rc;
    WITH_DUMP(a, s, rc = cdx_err_set(err, CDX_EUNSUPPORTED,
                                     "%s: architectures is %s%s%s; caldrix imports exactly one of %s. Choose a model "
                                     "of one of these architectures (caldrix models supported lists the verified ones)",
                                     x->name, s ? s : "absent", what ? ", " : "", what ? what : "", list));
    return rc;
}

static int r_dtype(rctx *x, cdx_err *err)
{
    json_t *v = get(x, "torch_dtype");
    const char *key = "torch_dtype";
    if (!v) {
        v = get(x, "dtype");
        key = "dtype";
    }
    if (!v || json_is_null(v))
        return 0;
    const char *s = json_string_value(v);
    if (cdx_hf_dtype_accepted(s)) {
        snprintf(x->c->dtype, sizeof x->c->dtype, "%s", s);
        return 0;
    }
    int rc;
    WITH_DUMP(v, d, rc = cdx_err_set(err, CDX_EUNSUPPORTED,
                                     "%s: %s is %s; caldrix imports " CDX_HF_DTYPES_ACCEPTED " checkpoints. Use the "
                                     "model's unquantized bf16/f16/f32 release", x->name, key, d ? d : "?"));
    return rc;
}

static int r_quantized(rctx *x, cdx_err *err)
{
    json_t *q = get(x, "quantization_config");
    if (!q || json_is_null(q))
        return 0;
    json_t *m = json_object_get(q, "quant_method");
    return cdx_err_set(err, CDX_EUNSUPPORTED,
                       "%s: quantization_config is present (quant_method \"%s\"); quantized safetensors checkpoints are "
                       "refused. Use the unquantized release, or a quantized Ollama tag (ollama:NAME:TAG)",
                       x->name, json_is_string(m) ? json_string_value(m) : "?");
}

static int r_activation(rctx *x, cdx_err *err)
{
    static const char *const keys[] = { "hidden_act", "hidden_activation" };
    for (size_t i = 0; i < 2; i++) {
        json_t *v = get(x, keys[i]);
        if (!v || json_is_null(v))
            continue;
        if (json_is_string(v) && !strcmp(json_string_value(v), "silu"))
            continue;
        int rc;
        WITH_DUMP(v, s, rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s%s is %s; only \"silu\" is supported", x->name,
                                         x->tc_prefix, keys[i], s ? s : "?"));
        return rc;
    }
    return 0;
}

static int r_mlp_bias(rctx *x, cdx_err *err)
{
    if (get_bool(x, "mlp_bias", false))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %smlp_bias is true; caldrix's MLP has no bias", x->name,
                           x->tc_prefix);
    return 0;
}

static int r_attention_bias(rctx *x, cdx_err *err)
{
    if (get_bool(x, "attention_bias", false) && strcmp(x->c->arch, "Qwen2ForCausalLM"))
        return cdx_err_set(err, CDX_EUNSUPPORTED,
                           "%s: %sattention_bias is true for %s; attention biases are supported for Qwen2 only",
                           x->name, x->tc_prefix, x->c->arch);
    return 0;
}

static int r_rope_interleaved(rctx *x, cdx_err *err)
{
    static const char *const keys[] = { "rope_interleaved", "rotary_interleaved", "interleaved_rope" };
    for (size_t i = 0; i < 3; i++)
        if (get_bool(x, keys[i], false))
            return cdx_err_set(err, CDX_EUNSUPPORTED,
                               "%s: %s%s is true; interleaved RoPE is not supported (caldrix rotates halves, as "
                               "Llama and Qwen do)", x->name, x->tc_prefix, keys[i]);
    return 0;
}

static int r_rope_scaling(rctx *x, cdx_err *err)
{
    static const char *const keys[] = { "rope_scaling", "rope_parameters" };
    for (size_t i = 0; i < 2; i++) {
        json_t *v = get(x, keys[i]);
        if (!v || json_is_null(v))
            continue;
        json_t *t = json_object_get(v, "rope_type");
        if (!t)
            t = json_object_get(v, "type");
        const char *ty = json_string_value(t);
        if (json_is_object(v) && (!t || (ty && !strcmp(ty, "default")))) {
            json_t *f = json_object_get(v, "factor");
            if (!f || json_is_null(f) || (json_is_number(f) && json_number_value(f) == 1.0))
                continue;
        }
        if (json_is_object(v) && ty && !strcmp(ty, "llama3")) {
            x->c->llama3_rope = true;
            continue;
        }
        int rc;
        WITH_DUMP(v, s, rc = cdx_err_set(err, CDX_EUNSUPPORTED,
                                         "%s: %s%s is %s; only Llama 3's rope_scaling (rope_type \"llama3\") is "
                                         "supported", x->name, x->tc_prefix, keys[i], s ? s : "?"));
        return rc;
    }
    return 0;
}

static int bound(const rctx *x, const char *key, int64_t v, int64_t lo, int64_t hi, cdx_err *err)
{
    if (v < lo || v > hi)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s%s is %lld; expected %lld..%lld", x->name, x->tc_prefix, key,
                           (long long)v, (long long)lo, (long long)hi);
    return 0;
}

static int r_dimensions(rctx *x, cdx_err *err)
{
    cdx_hub_config *c = x->c;
    int rc;
    if ((rc = get_int(x, "hidden_size", 0, &c->hidden, err)) < 0 ||
        (rc = get_int(x, "num_hidden_layers", 0, &c->n_layer, err)) < 0 ||
        (rc = get_int(x, "num_attention_heads", 0, &c->n_head, err)) < 0 ||
        (rc = get_int(x, "intermediate_size", 0, &c->ffn, err)) < 0 ||
        (rc = get_int(x, "vocab_size", 0, &c->vocab, err)) < 0 ||
        (rc = get_int(x, "max_position_embeddings", 0, &c->ctx_max, err)) < 0)
        return rc;
    if ((rc = bound(x, "hidden_size", c->hidden, 1, 1 << 16, err)) < 0 ||
        (rc = bound(x, "num_hidden_layers", c->n_layer, 1, 1024, err)) < 0 ||
        (rc = bound(x, "num_attention_heads", c->n_head, 1, 1024, err)) < 0 ||
        (rc = bound(x, "vocab_size", c->vocab, 1, 1 << 22, err)) < 0)
        return rc;
    if ((rc = get_int(x, "num_key_value_heads", c->n_head, &c->n_kv_head, err)) < 0 ||
        (rc = bound(x, "num_key_value_heads", c->n_kv_head, 1, c->n_head, err)) < 0)
        return rc;
    if (c->n_head % c->n_kv_head)
        return cdx_err_set(err, CDX_EUNSUPPORTED,
                           "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld", x->name,
                           (long long)c->n_head, (long long)c->n_kv_head);
    json_t *hd = get(x, "head_dim");
    if (!hd || json_is_null(hd)) {
        if (c->hidden % c->n_head)
            return cdx_err_set(err, CDX_EUNSUPPORTED,
                               "%s: hidden_size %lld is not a multiple of num_attention_heads %lld and head_dim is "
                               "absent", x->name, (long long)c->hidden, (long long)c->n_head);
        c->head_dim = c->hidden / c->n_head;
    } else if ((rc = get_int(x, "head_dim", 0, &c->head_dim, err)) < 0) {
        return rc;
    }
    if ((rc = bound(x, "head_dim", c->head_dim, 2, 1024, err)) < 0)
        return rc;
    if (c->head_dim % 2)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: head_dim is %lld; RoPE needs an even head_dim", x->name,
                           (long long)c->head_dim);
    bool moe = !strcmp(c->arch, "Qwen3MoeForCausalLM");
    if (!moe && (rc = bound(x, "intermediate_size", c->ffn, 1, 1 << 20, err)) < 0)
        return rc;
    if (c->ctx_max == 0)
        c->ctx_max = 2048; /* absent: transformers' usual default */
    if ((rc = bound(x, "max_position_embeddings", c->ctx_max, 1, 1 << 24, err)) < 0)
        return rc;
    c->tied = get_bool(x, "tie_word_embeddings", false);
    /* an active sliding window: Mistral's sliding_window, Qwen's only with use_sliding_window */
    int64_t sw = 0;
    if ((rc = get_int(x, "sliding_window", 0, &sw, err)) < 0)
        return rc;
    bool qwen = !strncmp(c->arch, "Qwen", 4);
    if (sw > 0 && (!qwen || get_bool(x, "use_sliding_window", false)))
        c->sliding_window = sw;
    return 0;
}

static int r_experts(rctx *x, cdx_err *err)
{
    cdx_hub_config *c = x->c;
    const bool mixtral = !strcmp(c->arch, "MixtralForCausalLM"), qwen2 = !strcmp(c->arch, "Qwen2MoeForCausalLM");
    if (!mixtral && !qwen2 && strcmp(c->arch, "Qwen3MoeForCausalLM"))
        return 0;
    /* Mixtral: num_local_experts, each expert intermediate_size wide; Qwen: num_experts, moe_intermediate_size
     * (the defaults are the transformers config classes', as the config reader's) */
    const char *count = mixtral ? "num_local_experts" : "num_experts", *width = mixtral ? "intermediate_size"
                                                                                          : "moe_intermediate_size";
    int rc;
    if ((rc = get_int(x, count, mixtral ? 8 : qwen2 ? 60 : 128, &c->n_expert, err)) < 0 ||
        (rc = get_int(x, "num_experts_per_tok", mixtral ? 2 : qwen2 ? 4 : 8, &c->n_expert_used, err)) < 0 ||
        (rc = get_int(x, width, mixtral ? 14336 : qwen2 ? 1408 : 768, &c->moe_ffn, err)) < 0)
        return rc;
    if ((rc = bound(x, count, c->n_expert, 1, 4096, err)) < 0 ||
        (rc = bound(x, "num_experts_per_tok", c->n_expert_used, 1, c->n_expert, err)) < 0 ||
        (rc = bound(x, width, c->moe_ffn, 1, 1 << 20, err)) < 0)
        return rc;
    if (qwen2) {
        int64_t sh;
        if ((rc = get_int(x, "shared_expert_intermediate_size", 5632, &sh, err)) < 0 ||
            (rc = bound(x, "shared_expert_intermediate_size", sh, 1, 1 << 20, err)) < 0)
            return rc;
    }
    return 0;
}

static int r_qwen35_keys(rctx *x, cdx_err *err)
{
    if (!is_qwen35(x->c->arch))
        return 0;
    json_t *objs[2] = { x->root, x->tc != x->root ? x->tc : NULL };
    for (int k = 0; k < 2; k++) {
        const char *key;
        json_t *v;
        if (!objs[k])
            continue;
        json_object_foreach(objs[k], key, v) {
            if (!cdx_hf_qwen35_key_known(key)) {
                int rc;
                WITH_DUMP(v, s, rc = cdx_err_set(err, CDX_EUNSUPPORTED,
                                                 "%s: %s%s is %s; caldrix's Qwen3.5 import does not read this key, "
                                                 "so it refuses the model rather than ignore it", x->name,
                                                 k ? "text_config." : "", key, s ? s : "?"));
                return rc;
            }
        }
    }
    return 0;
}

static int r_qwen35_window(rctx *x, cdx_err *err)
{
    if (!is_qwen35(x->c->arch) || !x->c->sliding_window)
        return 0;
    return cdx_err_set(err, CDX_EUNSUPPORTED,
                       "%s: use_sliding_window is true with sliding_window %lld; an active sliding window is refused "
                       "for Qwen3.5", x->name, (long long)x->c->sliding_window);
}

/* The architectures the loader runs are read by the loader through the config reader
 * (format/config_read.c); the same reader here means the same defaults (num_key_value_heads,
 * head_dim, sliding window, expert counts per architecture class) and the same refusals as
 * `caldrix run` gives, before a byte of weights is fetched. */
static int r_config_reader(rctx *x, cdx_err *err)
{
    bool known = false;
    for (int a = 0; a < CDX_HF_ARCH_COUNT && !known; a++)
        known = !strcmp(cdx_hf_arch_name((cdx_hf_arch)a), x->c->arch);
    if (!known)
        return 0;
    cdx_hf_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int rc = cdx_hf_config_parse(x->text, x->len, x->name, cfg, err);
    if (rc == 0) {
        cdx_hub_config *c = x->c;
        c->n_kv_head = cfg->n_kv_heads;
        c->head_dim = cfg->head_dim;
        c->sliding_window = cfg->sliding_window;
        c->tied = cfg->tie_word_embeddings;
        c->ctx_max = cfg->max_position_embeddings;
        if (cfg->n_experts) {
            c->n_expert = cfg->n_experts;
            c->n_expert_used = cfg->n_experts_per_tok;
            c->moe_ffn = cfg->moe_intermediate_size;
        }
    }
    free(cfg);
    if (rc < 0 && rc != CDX_EFORMAT && rc != CDX_ENOMEM) { /* the hub's contract: a refusal is EUNSUPPORTED */
        rc = CDX_EUNSUPPORTED;
        if (err)
            err->code = rc;
    }
    return rc;
}

typedef int (*rule_fn)(rctx *x, cdx_err *err);

/* The one table: id, the field(s) read, what is refused, the check. Order matters: the
 * architecture first (later rules depend on it), dimensions before the rules that read them. */
#define CDX_RULES(X) \
    X("architecture", "architectures", "config.json must declare exactly one architecture, one of the accepted list; every other architecture is refused by name.", r_architecture) \
    X("dtype", "torch_dtype / dtype", "a torch_dtype other than bfloat16, float32 or float16.", r_dtype) \
    X("quantized", "quantization_config", "a quantized safetensors checkpoint (quantization_config present); use the unquantized release or a quantized Ollama tag.", r_quantized) \
    X("activation", "hidden_act / hidden_activation", "an activation other than SiLU.", r_activation) \
    X("mlp_bias", "mlp_bias", "an MLP bias.", r_mlp_bias) \
    X("attention_bias", "attention_bias", "an attention bias outside Qwen2.", r_attention_bias) \
    X("rope_interleaved", "rope_interleaved / rotary_interleaved", "interleaved RoPE.", r_rope_interleaved) \
    X("rope_scaling", "rope_scaling / rope_parameters", "any rope_scaling other than Llama 3's (rope_type \"llama3\").", r_rope_scaling) \
    X("dimensions", "hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size, max_position_embeddings, sliding_window", "dimensions out of bounds or inconsistent with each other (heads not a multiple of kv heads, hidden not a multiple of heads without head_dim, odd head_dim).", r_dimensions) \
    X("experts", "num_experts / num_local_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size", "for a mixture of experts (Qwen3-MoE, Mixtral, Qwen2-MoE): expert counts or sizes out of bounds, or more experts per token than experts.", r_experts) \
    X("qwen3_5_keys", "any key", "for Qwen3.5: any config.json key outside the set the import reads.", r_qwen35_keys) \
    X("qwen3_5_window", "use_sliding_window, sliding_window", "for Qwen3.5: an active sliding window.", r_qwen35_window) \
    X("config_reader", "every key the loader reads", "for the architectures the loader runs: whatever the loader's config.json reader refuses (it is the same reader, with the transformers class defaults for absent keys).", r_config_reader)

static const cdx_hub_rule k_rules[] = {
#define X(id, field, doc, fn) { id, field, doc },
    CDX_RULES(X)
#undef X
};
static const rule_fn k_rule_fns[] = {
#define X(id, field, doc, fn) fn,
    CDX_RULES(X)
#undef X
};

const cdx_hub_rule *cdx_hub_rules(size_t *n)
{
    *n = sizeof k_rules / sizeof k_rules[0];
    return k_rules;
}

int cdx_hub_check_config(const char *text, size_t len, const char *name, cdx_hub_config *out, cdx_err *err)
{
    cdx_hub_config c;
    memset(&c, 0, sizeof c);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return cdx_err_set(err, CDX_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", name, je.text, je.line,
                           je.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return cdx_err_set(err, CDX_EFORMAT, "%s: expected a JSON object", name);
    }
    json_t *tc = json_object_get(root, "text_config");
    rctx x = { .name = name, .text = text, .len = len, .root = root, .tc = json_is_object(tc) ? tc : root,
               .tc_prefix = json_is_object(tc) ? "text_config." : "", .c = &c };
    c.n_keys = (int)json_object_size(root);
    json_t *mt = json_object_get(root, "model_type");
    if (json_is_string(mt))
        snprintf(c.model_type, sizeof c.model_type, "%s", json_string_value(mt));
    int rc = 0;
    for (size_t i = 0; i < sizeof k_rule_fns / sizeof k_rule_fns[0] && rc == 0; i++)
        rc = k_rule_fns[i](&x, err);
    json_decref(root);
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
    uint64_t n = cdx_hub_ctx_for(c, ctx);
    /* bounded by the rules: layers <= 1024, kv heads <= 1024, head_dim <= 1024, ctx <= 2^24 */
    return 2ull * (uint64_t)c->n_layer * (uint64_t)c->n_kv_head * (uint64_t)c->head_dim * n *
           (c->kv_value_bytes ? c->kv_value_bytes : CDX_HUB_KV_BYTES);
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
    if (cdx_dtype_choose(false, stored, a, (cdx_dtype)dtype, &d, &why, &e))
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
    uint64_t need = wres + kv;
    if (need <= avail)
        return 0;
    /* a mixture of experts: its least budget (the dense weights + top-k experts of one layer) */
    uint64_t dense = 0, one = 0, least = 0, fit = avail > kv ? (avail - kv) & ~(uint64_t)4095 : 0;
    if (c && cdx_hub_expert_split(c, weight_bytes, &dense, &one))
        least = dense + (uint64_t)(c->n_expert_used > 0 ? c->n_expert_used : 1) * one;
    char a[32], w[32], k[32], t[32], lb[32], fb[32];
    hub_fmt_bytes(least, lb, sizeof lb);
    hub_fmt_bytes(fit, fb, sizeof fb);
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
    hub_fmt_bytes(need, t, sizeof t);
    hub_fmt_bytes(wres, w, sizeof w);
    hub_fmt_bytes(kv, k, sizeof k);
    hub_fmt_bytes(avail, a, sizeof a);
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
