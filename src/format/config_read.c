/* config.json / generation_config.json reader. Defaults and derived values follow the
 * transformers config classes (configuration_<model>.py, read at the snapshot noted in
 * ../shared/fixtures/hf/INDEX.md): one table row per architecture below holds them. */
#include "caldrix/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_MAX_BYTES ((size_t)16 << 20)

/* The rows of the architectures (cdx_hf_arch_row, caldrix/config.h) are the model layer's family
 * rows' (src/model/arch/<family>.c): cdx_hf_arch_row_get. */
typedef cdx_hf_arch_row arch_row;

/* ---- what config.json refuses: one row per rule (the checks below make each refusal) ---- */

static const cdx_hf_rule k_rules[] = {
    { "architecture", "architectures", "config.json must declare exactly one architecture, one of the accepted list; every other architecture is refused by name." },
    { "dtype", "torch_dtype / dtype", "a torch_dtype other than bfloat16, float32 or float16." },
    { "quantized", "quantization_config", "a quantized safetensors checkpoint (quantization_config present; BitNet's own packed ternary weights excepted: quant_method bitnet, linear_class bitlinear, quantization_mode offline); use the unquantized release or a quantized Ollama tag." },
    { "activation", "hidden_act / hidden_activation", "an activation other than SiLU (Gemma's families and Starcoder2: other than gelu_pytorch_tanh or SiLU in hidden_activation, Starcoder2's hidden_act; the encoders BERT and XLM-RoBERTa: other than gelu)." },
    { "mlp_bias", "mlp_bias", "an MLP bias." },
    { "attention_bias", "attention_bias", "an attention bias on o_proj (attention_bias true where the class applies it to q, k, v and o; Qwen2 and Qwen2-MoE have q, k, v biases of their own, which caldrix runs)." },
    { "rope_interleaved", "rope_interleaved / rotary_interleaved", "interleaved RoPE." },
    { "rope_scaling", "rope_scaling / rope_parameters", "a rope_scaling kind other than linear, dynamic, yarn, longrope (su) and llama3, a default one with a factor other than 1, or one without the keys its kind needs." },
    { "sliding_window", "sliding_window, use_sliding_window, max_window_layers, layer_types", "a sliding window over some layers only (caldrix applies one window to every layer), except for Gemma2 and Gemma3, whose windows are per layer." },
    { "dimensions", "hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size, max_position_embeddings", "dimensions missing, out of bounds or inconsistent with each other (kv heads that do not divide the heads, an odd head_dim); absent keys take the transformers class defaults." },
    { "experts", "num_experts / num_local_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size, decoder_sparse_step, mlp_only_layers", "for a mixture of experts (Qwen3-MoE, Mixtral, Qwen2-MoE, OLMoE, Granite MoE): no experts, more experts per token than experts, expert widths out of bounds, layer lists out of range." },
    { "qwen3_5_keys", "any key", "for Qwen3.5: any config.json key outside the set the import reads." },
    { "qwen3_5_window", "use_sliding_window, sliding_window", "for Qwen3.5: an active sliding window." },
    { "qwen3_5_layers", "layer_types, full_attention_interval, attn_output_gate, mamba_ssm_dtype, linear_*, partial_rotary_factor, rope_parameters.mrope_section", "for Qwen3.5: a layer pattern the two keys disagree on, full attention without its output gate, a recurrent state other than float32, value heads that are not a multiple of key heads, rotary sections that do not cover the rotated half." },
    { "vision", "text_config, vision_config", "for Idefics3: a missing text_config or vision_config, a tower activation other than gelu_pytorch_tanh, an image size that is not a whole number of patches and pixel-shuffle cells." },
    { "malformed", "every key the reader reads", "a value of the wrong type or out of its bounds, a key given twice, text that is not a JSON object (the message names the key and the value)." },
};

const cdx_hf_rule *cdx_hf_config_rules(size_t *n)
{
    *n = sizeof k_rules / sizeof k_rules[0];
    return k_rules;
}

const char *cdx_hf_arch_name(cdx_hf_arch a) { return (unsigned)a < CDX_HF_ARCH_COUNT ? cdx_hf_arch_row_get((cdx_hf_arch)a)->arch : NULL; }

bool cdx_hf_dtype_accepted(const char *s)
{
    return s && (!strcmp(s, "bfloat16") || !strcmp(s, "float32") || !strcmp(s, "float16"));
}

bool cdx_hf_config_is_eos(const cdx_hf_config *c, int64_t id)
{
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] == id)
            return true;
    return false;
}

/* ---- typed field access: every failure names the file, the field and the value ---- */

/* The first refusal of a parse: a config.json that is well formed but describes a model caldrix
 * does not run. Reading goes on after it, so the struct still holds every field that could be read
 * (inspect reports them for a refused model); the parse returns it at the end. */
typedef struct {
    bool set;
    cdx_err err, tmp;
} refusal;

typedef struct {
    json_t *root;
    const char *name;
    cdx_err *err;
    refusal *ref;
} ctx;

static int keep_refusal(ctx *c)
{
    if (!c->ref->set) {
        c->ref->set = true;
        c->ref->err = c->ref->tmp;
    }
    return CDX_OK;
}

/* Records a refusal (the first one wins) and lets reading go on: evaluates to CDX_OK. */
#define REFUSE(c, ...) (cdx_err_set(&(c)->ref->tmp, CDX_EUNSUPPORTED, __VA_ARGS__), keep_refusal(c))

/* The value as compact JSON, cut to fit a message. */
static void show(const json_t *v, char *buf, size_t cap)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s)
        snprintf(buf, cap, "?");
    else if (strlen(s) >= cap && cap > 4)
        snprintf(buf, cap, "%.*s...", (int)cap - 4, s);
    else
        snprintf(buf, cap, "%s", s);
    free(s);
}

static int type_err(ctx *c, const char *field, const json_t *v, const char *expected)
{
    char b[96];
    show(v, b, sizeof b);
    return cdx_err_set(c->err, CDX_EFORMAT, "%s: %s is %s; expected %s", c->name, field, b, expected);
}

/* NULL when absent or null */
static json_t *field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static int get_int_in(ctx *c, json_t *obj, const char *key, const char *shown, int64_t lo, int64_t hi, int64_t *out,
                      bool *present)
{
    json_t *v = field(obj, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return CDX_OK;
    if (!json_is_integer(v))
        return type_err(c, shown, v, "an integer");
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return cdx_err_set(c->err, CDX_ERANGE, "%s: %s is %lld; expected %lld..%lld", c->name, shown, (long long)x,
                           (long long)lo, (long long)hi);
    *out = x;
    return CDX_OK;
}

static int get_int(ctx *c, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present)
{
    return get_int_in(c, c->root, key, key, lo, hi, out, present);
}

static int req_int(ctx *c, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    bool present;
    int rc = get_int(c, key, lo, hi, out, &present);
    if (!rc && !present)
        return cdx_err_set(c->err, CDX_EFORMAT, "%s: %s is missing; expected an integer", c->name, key);
    return rc;
}

/* A finite number (integer or real) in (lo, hi]. */
static int get_num_in(ctx *c, json_t *obj, const char *key, const char *shown, double lo, double hi, double *out,
                      bool *present)
{
    json_t *v = field(obj, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return CDX_OK;
    if (!json_is_number(v))
        return type_err(c, shown, v, "a number");
    double x = json_number_value(v);
    if (!isfinite(x) || x <= lo || x > hi)
        return cdx_err_set(c->err, CDX_ERANGE, "%s: %s is %g; expected a number above %g and at most %g", c->name,
                           shown, x, lo, hi);
    *out = x;
    return CDX_OK;
}

static int get_bool(ctx *c, const char *key, bool *out, bool *present)
{
    json_t *v = field(c->root, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return CDX_OK;
    if (!json_is_boolean(v))
        return type_err(c, key, v, "true or false");
    *out = json_is_true(v);
    return CDX_OK;
}

static int get_str(ctx *c, json_t *obj, const char *key, const char *shown, const char **out)
{
    json_t *v = field(obj, key);
    *out = NULL;
    if (!v)
        return CDX_OK;
    if (!json_is_string(v))
        return type_err(c, shown, v, "a string");
    *out = json_string_value(v);
    return CDX_OK;
}

/* eos_token_id: an integer or a list of integers. */
static int get_eos(ctx *c, cdx_hf_config *cfg)
{
    json_t *v = field(c->root, "eos_token_id");
    if (!v)
        return CDX_OK;
    if (json_is_integer(v)) {
        int64_t x;
        int rc = get_int(c, "eos_token_id", 0, INT32_MAX, &x, NULL);
        if (rc)
            return rc;
        cfg->n_eos = 1;
        cfg->eos_token_ids[0] = x;
        return CDX_OK;
    }
    if (!json_is_array(v))
        return type_err(c, "eos_token_id", v, "an integer or a list of integers");
    if (json_array_size(v) > CDX_HF_MAX_EOS)
        return cdx_err_set(c->err, CDX_ERANGE, "%s: eos_token_id lists %zu ids; caldrix keeps at most %d", c->name,
                           json_array_size(v), CDX_HF_MAX_EOS);
    cfg->n_eos = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        char shown[48];
        snprintf(shown, sizeof shown, "eos_token_id[%zu]", i);
        if (!json_is_integer(e))
            return type_err(c, shown, e, "an integer");
        if (json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return cdx_err_set(c->err, CDX_ERANGE, "%s: %s is %lld; expected 0..%d", c->name, shown,
                               (long long)json_integer_value(e), INT32_MAX);
        cfg->eos_token_ids[cfg->n_eos++] = json_integer_value(e);
    }
    return CDX_OK;
}

/* ---- Qwen3.5 (transformers configuration_qwen3_5.py: Qwen3_5TextConfig, Qwen3_5Config) ---- */

/* Every key the Qwen3.5 import reads, at the top level or in text_config: the one list (the hub's
 * import rules read it through cdx_hf_qwen35_key_known). A key outside it is refused by name
 * rather than ignored: it may change what the model computes. */
static const char *const k_qwen35_keys[] = {
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "vocab_size", "hidden_size",
    "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps", "use_cache",
    "tie_word_embeddings", "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
    "attention_bias", "attention_dropout", "layer_types", "full_attention_interval", "linear_conv_kernel_dim",
    "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "bos_token_id", "eos_token_id", "pad_token_id",
    "sliding_window", "use_sliding_window", "max_window_layers", "attn_output_gate", "mamba_ssm_dtype",
    "mlp_only_layers", "text_config", "vision_config", "image_token_id", "video_token_id",
    "vision_start_token_id", "vision_end_token_id",
};

bool cdx_hf_qwen35_key_known(const char *key)
{
    for (size_t i = 0; key && i < sizeof k_qwen35_keys / sizeof k_qwen35_keys[0]; i++)
        if (!strcmp(key, k_qwen35_keys[i]))
            return true;
    return false;
}

static int qwen35_keys(ctx *c, json_t *obj, const char *prefix)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (cdx_hf_qwen35_key_known(key))
            continue;
        char b[96];
        show(v, b, sizeof b);
        return REFUSE(c, "%s: %s%s is %s; caldrix's Qwen3.5 import does not read this key, so it refuses the model "
                      "rather than ignore it", c->name, prefix, key, b);
    }
    return CDX_OK;
}

/* The layer pattern, the Gated DeltaNet dimensions, the gated attention's partial rotary and the
 * settings Qwen3.5 has that caldrix computes one way only (refused otherwise, by name). */
static int read_qwen35(ctx *c, cdx_hf_config *cfg)
{
    int rc;
    /* qwen35.c rotates with the plain frequencies and no attention factor: a scaling is refused */
    if (cfg->rope_type != CDX_HF_ROPE_DEFAULT) {
        json_t *rp = field(c->root, "rope_parameters");
        const char *key = rp ? "rope_parameters" : "rope_scaling";
        json_t *rs = rp ? rp : field(c->root, "rope_scaling");
        json_t *t = rs ? field(rs, "rope_type") : NULL;
        if (!t && rs)
            t = field(rs, "type");
        REFUSE(c, "%s: %s.%s is \"%.40s\"; caldrix computes Qwen3.5 with its default rotation only", c->name, key,
               t && field(rs, "rope_type") ? "rope_type" : "type", t && json_is_string(t) ? json_string_value(t) : "?");
    }
    /* Qwen3NextConfig / Qwen3_5TextConfig defaults */
    cfg->linear_conv_kernel = 4;
    cfg->linear_k_dim = 128;
    cfg->linear_v_dim = 128;
    cfg->linear_n_k_heads = 16;
    cfg->linear_n_v_heads = 32;
    if ((rc = get_int(c, "linear_conv_kernel_dim", 1, 64, &cfg->linear_conv_kernel, NULL)) ||
        (rc = get_int(c, "linear_key_head_dim", 1, 1024, &cfg->linear_k_dim, NULL)) ||
        (rc = get_int(c, "linear_value_head_dim", 1, 1024, &cfg->linear_v_dim, NULL)) ||
        (rc = get_int(c, "linear_num_key_heads", 1, 1024, &cfg->linear_n_k_heads, NULL)) ||
        (rc = get_int(c, "linear_num_value_heads", 1, 1024, &cfg->linear_n_v_heads, NULL)))
        return rc;
    if (cfg->linear_n_v_heads % cfg->linear_n_k_heads)
        return cdx_err_set(c->err, CDX_ERANGE, "%s: linear_num_value_heads is %lld; it must be a multiple of "
                           "linear_num_key_heads (%lld): each value head reads key head j / (value heads / key heads)",
                           c->name, (long long)cfg->linear_n_v_heads, (long long)cfg->linear_n_k_heads);
    /* layer_types, else every full_attention_interval-th layer (1-based) is full attention */
    int64_t interval = 4;
    bool has_interval;
    if ((rc = get_int(c, "full_attention_interval", 1, CDX_HF_MAX_LAYERS, &interval, &has_interval)))
        return rc;
    json_t *lt = field(c->root, "layer_types");
    if (lt && (!json_is_array(lt) || (int64_t)json_array_size(lt) != cfg->n_layers)) {
        char b[96];
        show(lt, b, sizeof b);
        return cdx_err_set(c->err, CDX_EFORMAT, "%s: layer_types is %s; expected a list of %lld strings "
                           "(num_hidden_layers)", c->name, b, (long long)cfg->n_layers);
    }
    for (int64_t l = 0; l < cfg->n_layers; l++) {
        bool linear = (l + 1) % interval != 0;
        if (lt) {
            json_t *e = json_array_get(lt, (size_t)l);
            const char *t = json_is_string(e) ? json_string_value(e) : NULL;
            char shown[40];
            snprintf(shown, sizeof shown, "layer_types[%lld]", (long long)l);
            if (!t || (strcmp(t, "linear_attention") && strcmp(t, "full_attention")))
                return type_err(c, shown, e, "\"linear_attention\" or \"full_attention\"");
            const bool lin = !strcmp(t, "linear_attention");
            if (has_interval && lin != linear)
                return cdx_err_set(c->err, CDX_EFORMAT, "%s: %s is \"%s\", but full_attention_interval %lld makes layer "
                                   "%lld %s; the two disagree", c->name, shown, t, (long long)interval, (long long)l,
                                   linear ? "linear_attention" : "full_attention");
            linear = lin;
        }
        if (linear)
            cfg->layer_flags[l] |= CDX_HF_LAYER_LINEAR;
    }
    bool gate = true;
    if ((rc = get_bool(c, "attn_output_gate", &gate, NULL)))
        return rc;
    if (!gate)
        REFUSE(c, "%s: attn_output_gate is false; caldrix runs Qwen3.5's full attention with its output gate only",
               c->name);
    if (cfg->attention_bias)
        REFUSE(c, "%s: attention_bias is true; Qwen3.5 has no attention bias", c->name);
    const char *ssm = NULL;
    if ((rc = get_str(c, c->root, "mamba_ssm_dtype", "mamba_ssm_dtype", &ssm)))
        return rc;
    if (ssm && strcmp(ssm, "float32"))
        REFUSE(c, "%s: mamba_ssm_dtype is \"%.40s\"; caldrix keeps the recurrent state in float32 only", c->name, ssm);
    int64_t mtp = 0;
    bool b;
    if ((rc = get_int(c, "mtp_num_hidden_layers", 0, 64, &mtp, NULL)) ||
        (rc = get_bool(c, "mtp_use_dedicated_embeddings", &b, NULL)) || (rc = get_bool(c, "use_cache", &b, NULL)))
        return rc;
    json_t *mol = field(c->root, "mlp_only_layers");
    if (mol && (!json_is_array(mol) || json_array_size(mol)))
        return type_err(c, "mlp_only_layers", mol, "[] (the dense Qwen3.5 has no sparse layers)");
    /* an active sliding window (use_sliding_window with a positive sliding_window) is refused */
    bool use_sw = false;
    int64_t sw = 0;
    if ((rc = get_bool(c, "use_sliding_window", &use_sw, NULL)) ||
        (rc = get_int(c, "sliding_window", 0, (int64_t)1 << 30, &sw, NULL)))
        return rc;
    if (use_sw && sw > 0)
        REFUSE(c, "%s: use_sliding_window is true with sliding_window %lld; an active sliding window is refused for "
               "Qwen3.5 (its attention is global)", c->name, (long long)sw);
    /* partial rotary: rope_parameters.partial_rotary_factor (v5), else the top-level key; 0.25 by default */
    cfg->partial_rotary_factor = 0.25;
    json_t *rp = field(c->root, "rope_parameters");
    if ((rc = get_num_in(c, c->root, "partial_rotary_factor", "partial_rotary_factor", 0, 1,
                         &cfg->partial_rotary_factor, NULL)))
        return rc;
    if (rp && json_is_object(rp) &&
        (rc = get_num_in(c, rp, "partial_rotary_factor", "rope_parameters.partial_rotary_factor", 0, 1,
                         &cfg->partial_rotary_factor, NULL)))
        return rc;
    const double rot = (double)cfg->head_dim * cfg->partial_rotary_factor;
    const int64_t n_rot = (int64_t)rot;
    if ((double)n_rot != rot || n_rot < 2 || n_rot % 2)
        return cdx_err_set(c->err, CDX_ERANGE, "%s: partial_rotary_factor %g of head_dim %lld gives %g rotated "
                           "dimensions; expected an even whole number", c->name, cfg->partial_rotary_factor,
                           (long long)cfg->head_dim, rot);
    /* M-RoPE: text positions are the same in all three rows, so the sections change nothing, but
     * they must cover the rotary half exactly (Qwen3VL's recomposition assumes it) */
    json_t *sec = rp && json_is_object(rp) ? field(rp, "mrope_section") : NULL;
    cfg->mrope_section[0] = 11;
    cfg->mrope_section[1] = 11;
    cfg->mrope_section[2] = 10;
    if (sec) {
        int64_t sum = 0;
        bool ok = json_is_array(sec) && json_array_size(sec) == 3;
        for (size_t i = 0; ok && i < 3; i++) {
            json_t *e = json_array_get(sec, i);
            ok = json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) <= 4096;
            sum += ok ? json_integer_value(e) : 0;
            cfg->mrope_section[i] = ok ? json_integer_value(e) : 0;
        }
        if (!ok || sum != n_rot / 2) {
            char bb[96];
            show(sec, bb, sizeof bb);
            return cdx_err_set(c->err, CDX_EFORMAT, "%s: rope_parameters.mrope_section is %s; expected three counts "
                               "summing to %lld (half the %lld rotated dimensions)", c->name, bb,
                               (long long)(n_rot / 2), (long long)n_rot);
        }
    }
    return CDX_OK;
}

/* Qwen2-VL / Qwen2.5-VL: rope_scaling.mrope_section (or rope_parameters'), the rotated pairs' split over the
 * temporal, height and width positions (apply_multimodal_rotary_pos_emb splits each half of head_dim by it, so
 * the three counts must sum to head_dim / 2; Qwen2VLAttention reads it, so it must be there). */
static int read_mrope(ctx *c, cdx_hf_config *cfg)
{
    json_t *rp = field(c->root, "rope_parameters");
    const char *key = rp ? "rope_parameters" : "rope_scaling";
    json_t *rs = rp ? rp : field(c->root, "rope_scaling");
    json_t *sec = rs && json_is_object(rs) ? field(rs, "mrope_section") : NULL;
    if (!sec)
        return cdx_err_set(c->err, CDX_EFORMAT, "%s: %s.mrope_section is missing; %s's attention splits the rotary "
                           "dimensions by it (e.g. [16, 24, 24])", c->name, key, cfg->architecture);
    int64_t sum = 0;
    bool ok = json_is_array(sec) && json_array_size(sec) == 3;
    for (size_t i = 0; ok && i < 3; i++) {
        json_t *e = json_array_get(sec, i);
        ok = json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) <= CDX_MAX_HEAD_DIM;
        cfg->mrope_section[i] = ok ? json_integer_value(e) : 0;
        sum += cfg->mrope_section[i];
    }
    if (!ok || sum != cfg->head_dim / 2) {
        char b[96];
        show(sec, b, sizeof b);
        return cdx_err_set(c->err, CDX_EFORMAT, "%s: %s.mrope_section is %s; expected three counts summing to %lld "
                           "(half of head_dim %lld)", c->name, key, b, (long long)(cfg->head_dim / 2),
                           (long long)cfg->head_dim);
    }
    return CDX_OK;
}

/* ---- config.json ---- */

/* What an architecture caldrix does not run is read with: transformers' PretrainedConfig habits (no
 * sliding window, kv heads = heads, head_dim = hidden / heads), so inspect can still report it. */
static const arch_row k_generic = { .arch = "", .model_type = "", .rms_eps = 1e-6, .rope_theta = 10000.0,
                                    .max_pos = 2048, .sw = CDX_HF_SW_NONE, .bos = -1, .eos = -1, .bias = CDX_HF_B_ATTN };

/* The row config.json names (architectures[0], else its model_type's causal-LM class, as
 * AutoModelForCausalLM picks). Seed 000: config.json declares exactly one architecture, one of
 * cdx_hf_arch; anything else is a refusal, and the model is read on with the named row or k_generic. */
static int find_arch(ctx *c, cdx_hf_config *cfg, const arch_row **row)
{
    const char *mt;
    *row = &k_generic;
    cfg->arch = CDX_HF_ARCH_COUNT;
    int rc = get_str(c, c->root, "model_type", "model_type", &mt);
    if (rc)
        return rc;
    if (mt)
        snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt);
    json_t *archs = field(c->root, "architectures");
    const char *name = archs && json_is_array(archs) ? json_string_value(json_array_get(archs, 0)) : NULL;
    for (int a = 0; a < CDX_HF_ARCH_COUNT && cfg->arch == CDX_HF_ARCH_COUNT; a++)
        if (name ? !strcmp(name, cdx_hf_arch_row_get((cdx_hf_arch)a)->arch) : !archs && mt && !strcmp(mt, cdx_hf_arch_row_get((cdx_hf_arch)a)->model_type))
            cfg->arch = (cdx_hf_arch)a;
    if (cfg->arch != CDX_HF_ARCH_COUNT) {
        *row = cdx_hf_arch_row_get(cfg->arch);
        snprintf(cfg->architecture, sizeof cfg->architecture, "%s", cdx_hf_arch_row_get(cfg->arch)->arch);
    } else if (name)
        snprintf(cfg->architecture, sizeof cfg->architecture, "%.60s", name);
    if (name && json_array_size(archs) == 1 && cfg->arch != CDX_HF_ARCH_COUNT)
        return CDX_OK;
    const cdx_refused_arch *no = name && json_array_size(archs) == 1 ? cdx_refused_arch_find(name, strlen(name), false)
                                                                      : NULL;
    if (no)
        return REFUSE(c, "%s: architectures is [\"%s\"] (%s), refused: %s", c->name, no->hf, no->family, no->reason);
    char list[512] = "", b[96];
    for (int a = 0; a < CDX_HF_ARCH_COUNT; a++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", a ? ", " : "", cdx_hf_arch_row_get((cdx_hf_arch)a)->arch);
    if (archs)
        show(archs, b, sizeof b);
    const char *what = !archs ? "" : !name || json_array_size(archs) != 1 ? ", not exactly one name" : "";
    return REFUSE(c, "%s: architectures is %s%s; caldrix imports exactly one of %s. Choose a model of one of these "
                  "architectures (caldrix models supported lists the verified ones)", c->name, archs ? b : "absent",
                  what, list);
}

/* A number of rope_scaling (shown as "<rs_name>.<key>"); *present says whether it was there. */
static int rope_num(ctx *c, json_t *rs, const char *rs_name, const char *key, double lo, double hi, double *out,
                    bool *present)
{
    char shown[96];
    snprintf(shown, sizeof shown, "%s.%s", rs_name, key);
    return get_num_in(c, rs, key, shown, lo, hi, out, present);
}

static int rope_missing(ctx *c, const char *rs_name, const char *key, const char *type)
{
    return cdx_err_set(c->err, CDX_EFORMAT, "%s: %s.%s is missing; %s rope scaling needs it", c->name, rs_name, key,
                       type);
}

/* longrope's short_factor / long_factor: lists of positive numbers of one length (the rotated pairs;
 * the loader checks it against n_rot / 2). */
static int rope_factor_list(ctx *c, json_t *rs, const char *rs_name, const char *key, double *out, int *n)
{
    json_t *v = field(rs, key);
    if (!v)
        return rope_missing(c, rs_name, key, "longrope");
    char shown[96];
    snprintf(shown, sizeof shown, "%s.%s", rs_name, key);
    if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > CDX_HF_MAX_ROPE_FACTORS)
        return type_err(c, shown, v, "a list of 1..512 positive numbers");
    if (*n && (int)json_array_size(v) != *n)
        return cdx_err_set(c->err, CDX_EFORMAT, "%s: %s has %zu entries and short_factor %d; they must be as long",
                           c->name, shown, json_array_size(v), *n);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_number(x) || !isfinite(json_number_value(x)) || !(json_number_value(x) > 0))
            return type_err(c, shown, v, "a list of positive numbers");
        out[i] = json_number_value(x);
    }
    *n = (int)json_array_size(v);
    return CDX_OK;
}

static int read_rope(ctx *c, cdx_hf_config *cfg, const arch_row *row)
{
    int rc;
    /* transformers v5 writes rope_parameters {rope_type, rope_theta, ...}; older configs write
     * rope_theta at the top and rope_scaling {rope_type|type, ...}. */
    json_t *params = field(c->root, "rope_parameters");
    json_t *rs = params ? params : field(c->root, "rope_scaling");
    const char *rs_name = params ? "rope_parameters" : "rope_scaling";
    if ((rc = get_num_in(c, c->root, "rope_theta", "rope_theta", 0, 1e12, &cfg->rope_theta, NULL)))
        return rc;
    if (!rs && row->swiglu_oai) /* GptOssConfig.__post_init__ supplies a YaRN when the file names none */
        return REFUSE(c, "%s: rope_scaling is absent; GptOssConfig then applies its default YaRN (factor 32 over "
                      "4096 positions), which caldrix does not supply: write it in config.json", c->name);
    if (!rs)
        return CDX_OK;
    if (!json_is_object(rs))
        return type_err(c, rs_name, rs, "an object or null");
    char shown[64];
    snprintf(shown, sizeof shown, "%s.rope_theta", rs_name);
    if ((rc = get_num_in(c, rs, "rope_theta", shown, 0, 1e12, &cfg->rope_theta, NULL)))
        return rc;
    const char *type = NULL;
    snprintf(shown, sizeof shown, "%s.rope_type", rs_name);
    if ((rc = get_str(c, rs, "rope_type", shown, &type)))
        return rc;
    if (!type) {
        snprintf(shown, sizeof shown, "%s.type", rs_name);
        if ((rc = get_str(c, rs, "type", shown, &type)))
            return rc;
    }
    /* Qwen2VLTextConfig: rope_type "mrope" is the default rotation (its sections read by read_mrope) */
    if (type && row->layout == CDX_HF_TEXT_MROPE && !strcmp(type, "mrope"))
        type = "default";
    /* the default rotation ignores a factor; one other than 1 suggests a scaling the file does not name */
    json_t *factor = field(rs, "factor");
    const bool plain = (!type || !strcmp(type, "default")) &&
                       (!factor || (json_is_number(factor) && json_number_value(factor) == 1.0));
    if (plain)
        return CDX_OK;
    if (!type || !strcmp(type, "default")) {
        char b[48];
        show(factor, b, sizeof b);
        return REFUSE(c, "%s: %s.factor is %s with the default rope type; name the scaling (rope_type \"linear\", "
                      "\"dynamic\", \"yarn\", \"longrope\" or \"llama3\") or leave the factor at 1", c->name, rs_name, b);
    }
    static const struct { const char *name; cdx_hf_rope_type t; } kinds[] = {
        { "linear", CDX_HF_ROPE_LINEAR }, { "llama3", CDX_HF_ROPE_LLAMA3 }, { "dynamic", CDX_HF_ROPE_DYNAMIC },
        { "yarn", CDX_HF_ROPE_YARN },     { "longrope", CDX_HF_ROPE_LONGROPE }, { "su", CDX_HF_ROPE_LONGROPE },
    };
    cfg->rope_type = CDX_HF_ROPE_DEFAULT;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(type, kinds[i].name))
            cfg->rope_type = kinds[i].t;
    if (cfg->rope_type == CDX_HF_ROPE_DEFAULT)
        return REFUSE(c, "%s: %s is \"%.40s\"; caldrix computes the rope scalings \"linear\", \"dynamic\", \"yarn\", "
                      "\"longrope\" (\"su\") and \"llama3\" (modeling_rope_utils), not this one", c->name, shown, type);
    bool present;
    const char *tn = type;
    /* original_max_position_embeddings: rope_scaling's, else the config's own (Phi3Config) */
    if ((rc = get_int_in(c, rs, "original_max_position_embeddings",
                         params ? "rope_parameters.original_max_position_embeddings"
                                : "rope_scaling.original_max_position_embeddings",
                         1, (int64_t)1 << 30, &cfg->rope_original_max_position, &present)))
        return rc;
    if (!present && row->orig_max_pos_key &&
        (rc = get_int(c, "original_max_position_embeddings", 1, (int64_t)1 << 30, &cfg->rope_original_max_position,
                      &present)))
        return rc;
    const bool has_orig = present;
    bool has_factor;
    if ((rc = rope_num(c, rs, rs_name, "factor", 0, 1e6, &cfg->rope_factor, &has_factor)))
        return rc;
    switch (cfg->rope_type) {
    case CDX_HF_ROPE_LINEAR: /* inv_freq / factor */
    case CDX_HF_ROPE_DYNAMIC: /* the base × ((factor·T/max_pos) - (factor - 1))^(d/(d-2)) past max_pos */
        if (!has_factor)
            return rope_missing(c, rs_name, "factor", tn);
        return CDX_OK;
    case CDX_HF_ROPE_LLAMA3: { /* _compute_llama3_parameters needs all four */
        if (!has_factor)
            return rope_missing(c, rs_name, "factor", tn);
        if ((rc = rope_num(c, rs, rs_name, "low_freq_factor", 0, 1e6, &cfg->rope_low_freq_factor, &present)))
            return rc;
        if (!present)
            return rope_missing(c, rs_name, "low_freq_factor", tn);
        if ((rc = rope_num(c, rs, rs_name, "high_freq_factor", 0, 1e6, &cfg->rope_high_freq_factor, &present)))
            return rc;
        if (!present)
            return rope_missing(c, rs_name, "high_freq_factor", tn);
        if (cfg->rope_high_freq_factor <= cfg->rope_low_freq_factor)
            return cdx_err_set(c->err, CDX_ERANGE, "%s: %s.high_freq_factor is %g; it must exceed low_freq_factor %g",
                               c->name, rs_name, cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
        if (!has_orig)
            return rope_missing(c, rs_name, "original_max_position_embeddings", tn);
        return CDX_OK;
    }
    case CDX_HF_ROPE_YARN:
    case CDX_HF_ROPE_LONGROPE:
        /* transformers v5: original_max_position_embeddings defaults to max_position_embeddings, and an
         * absent factor is max_position_embeddings / original_max_position_embeddings */
        if (!has_orig)
            cfg->rope_original_max_position = cfg->max_position_embeddings;
        if (!has_factor)
            cfg->rope_factor = (double)cfg->max_position_embeddings / (double)cfg->rope_original_max_position;
        if ((rc = rope_num(c, rs, rs_name, "attention_factor", 0, 1e6, &cfg->rope_attn_factor, NULL)))
            return rc;
        if (cfg->rope_type == CDX_HF_ROPE_LONGROPE) {
            cfg->n_rope_factors = 0;
            if ((rc = rope_factor_list(c, rs, rs_name, "short_factor", cfg->rope_short, &cfg->n_rope_factors)) ||
                (rc = rope_factor_list(c, rs, rs_name, "long_factor", cfg->rope_long, &cfg->n_rope_factors)))
                return rc;
            return CDX_OK;
        }
        if ((rc = rope_num(c, rs, rs_name, "beta_fast", 0, 1e6, &cfg->rope_beta_fast, NULL)) ||
            (rc = rope_num(c, rs, rs_name, "beta_slow", 0, 1e6, &cfg->rope_beta_slow, NULL)) ||
            (rc = rope_num(c, rs, rs_name, "mscale", 0, 1e6, &cfg->rope_mscale, NULL)) ||
            (rc = rope_num(c, rs, rs_name, "mscale_all_dim", 0, 1e6, &cfg->rope_mscale_all_dim, NULL)))
            return rc;
        cfg->rope_truncate = true;
        json_t *tr = field(rs, "truncate");
        if (tr && !json_is_boolean(tr)) {
            snprintf(shown, sizeof shown, "%s.truncate", rs_name);
            return type_err(c, shown, tr, "true or false");
        }
        if (tr)
            cfg->rope_truncate = json_is_true(tr);
        return CDX_OK;
    default:
        return CDX_OK;
    }
}

/* SmolLM3Config: no_rope_layers (1: the layer rotates q and k, 0: a NoPE layer; at least one entry per
 * layer), else a NoPE layer every no_rope_layer_interval layers ((l + 1) % interval == 0). */
static int read_nope(ctx *c, cdx_hf_config *cfg, const arch_row *row)
{
    int64_t interval = row->nope_interval;
    int rc = get_int(c, "no_rope_layer_interval", 1, CDX_HF_MAX_LAYERS, &interval, NULL);
    if (rc)
        return rc;
    json_t *list = field(c->root, "no_rope_layers");
    if (list && (!json_is_array(list) || (int64_t)json_array_size(list) < cfg->n_layers)) {
        char b[96];
        show(list, b, sizeof b);
        return cdx_err_set(c->err, CDX_EFORMAT, "%s: no_rope_layers is %s; expected a list of at least %lld entries "
                           "(num_hidden_layers), 1 for a layer with RoPE and 0 for one without", c->name, b,
                           (long long)cfg->n_layers);
    }
    for (int64_t l = 0; l < cfg->n_layers; l++) {
        bool rope = (l + 1) % interval != 0;
        if (list) {
            json_t *e = json_array_get(list, (size_t)l);
            char shown[40];
            snprintf(shown, sizeof shown, "no_rope_layers[%lld]", (long long)l);
            if (json_is_boolean(e))
                rope = json_is_true(e);
            else if (!json_is_integer(e) || (json_integer_value(e) != 0 && json_integer_value(e) != 1))
                return type_err(c, shown, e, "0 or 1");
            else
                rope = json_integer_value(e) == 1;
        }
        if (!rope)
            cfg->layer_flags[l] |= CDX_HF_LAYER_NOPE;
    }
    return CDX_OK;
}

static int read_sliding(ctx *c, cdx_hf_config *cfg, const arch_row *row)
{
    int rc;
    int64_t window = row->sliding;
    json_t *sw = json_object_get(c->root, "sliding_window");
    if (sw && json_is_null(sw))
        window = 0;
    else if ((rc = get_int(c, "sliding_window", 0, (int64_t)1 << 30, &window, NULL)))
        return rc;
    bool use = false;
    if ((rc = get_bool(c, "use_sliding_window", &use, NULL)))
        return rc;
    cfg->max_window_layers = 28;
    if ((rc = get_int(c, "max_window_layers", 0, (int64_t)1 << 30, &cfg->max_window_layers, NULL)))
        return rc;
    if (row->sw == CDX_HF_SW_NONE)
        window = 0;
    if (row->sw == CDX_HF_SW_QWEN || row->sw == CDX_HF_SW_QWEN2_MOE || row->sw == CDX_HF_SW_QWEN_ALL ||
        row->sw == CDX_HF_SW_NOPE) {
        cfg->use_sliding_window = use;
        if (!use)
            window = 0;
    }
    /* layer_types, when given, decides per layer (Qwen2/3 families); Mistral ignores it. */
    json_t *lt = field(c->root, "layer_types");
    bool use_lt = lt && (row->sw == CDX_HF_SW_QWEN || row->sw == CDX_HF_SW_QWEN2_MOE || row->sw == CDX_HF_SW_NOPE ||
                         row->sw == CDX_HF_SW_EVEN || row->sw == CDX_HF_SW_PATTERN);
    if (row->sw == CDX_HF_SW_PATTERN) { /* Gemma3TextConfig: sliding iff (i + 1) % pattern != 0 */
        cfg->sliding_window_pattern = 6;
        if ((rc = get_int(c, "sliding_window_pattern", 1, CDX_HF_MAX_LAYERS, &cfg->sliding_window_pattern, NULL)))
            return rc;
    }
    if (use_lt) {
        if (!json_is_array(lt) || (int64_t)json_array_size(lt) != cfg->n_layers) {
            char b[96];
            show(lt, b, sizeof b);
            return cdx_err_set(c->err, CDX_EFORMAT, "%s: layer_types is %s; expected a list of %lld strings", c->name, b,
                               (long long)cfg->n_layers);
        }
    }
    bool any = false;
    for (int64_t l = 0; l < cfg->n_layers; l++) {
        bool s = false;
        if (use_lt) {
            json_t *e = json_array_get(lt, (size_t)l);
            const char *t = json_is_string(e) ? json_string_value(e) : NULL;
            if (!t || (strcmp(t, "full_attention") && strcmp(t, "sliding_attention"))) {
                char shown[40];
                snprintf(shown, sizeof shown, "layer_types[%lld]", (long long)l);
                return type_err(c, shown, e, "\"full_attention\" or \"sliding_attention\"");
            }
            s = !strcmp(t, "sliding_attention");
        } else if (row->sw == CDX_HF_SW_ALL || row->sw == CDX_HF_SW_QWEN_ALL)
            s = true;
        else if (row->sw == CDX_HF_SW_QWEN)
            s = l >= cfg->max_window_layers;
        else if (row->sw == CDX_HF_SW_QWEN2_MOE)
            s = (l + 1) % 2 != 0 && l < cfg->max_window_layers;
        else if (row->sw == CDX_HF_SW_NOPE) /* SmolLM3Config: the NoPE layers slide */
            s = cfg->layer_flags[l] & CDX_HF_LAYER_NOPE;
        else if (row->sw == CDX_HF_SW_EVEN)
            s = l % 2 == 0;
        else if (row->sw == CDX_HF_SW_PATTERN)
            s = (l + 1) % cfg->sliding_window_pattern != 0;
        if (s && window > 0) {
            cfg->layer_flags[l] |= CDX_HF_LAYER_SLIDING;
            any = true;
        }
    }
    cfg->sliding_window = any ? window : 0;
    return CDX_OK;
}

static int read_moe(ctx *c, cdx_hf_config *cfg, const arch_row *row)
{
    int rc;
    cfg->n_experts = row->experts;
    cfg->n_experts_per_tok = row->per_tok;
    cfg->moe_intermediate_size = row->moe_ff;
    cfg->shared_expert_intermediate_size = row->shared_ff;
    cfg->norm_topk_prob = row->norm_topk;
    cfg->decoder_sparse_step = 1;
    /* Mixtral's and Qwen3-MoE's classes map num_experts onto num_local_experts; accept either key. */
    const char *primary = row->moe == 2 ? "num_local_experts" : "num_experts";
    const char *alias = row->moe == 2 ? "num_experts" : "num_local_experts";
    bool present;
    /* a mixture of experts without experts is malformed (the dense class is the model to use) */
    if ((rc = get_int(c, primary, 1, CDX_MAX_EXPERTS, &cfg->n_experts, &present)))
        return rc;
    if (!present && (rc = get_int(c, alias, 1, CDX_MAX_EXPERTS, &cfg->n_experts, NULL)))
        return rc;
    if ((rc = get_int(c, "num_experts_per_tok", 1, CDX_MAX_EXPERTS, &cfg->n_experts_per_tok, NULL)))
        return rc;
    if (cfg->n_experts > 0 && cfg->n_experts_per_tok > cfg->n_experts)
        return cdx_err_set(c->err, CDX_ERANGE, "%s: num_experts_per_tok is %lld; there are only %lld experts", c->name,
                           (long long)cfg->n_experts_per_tok, (long long)cfg->n_experts);
    if (row->moe >= 2) {
        /* Mixtral's and OLMoE's experts are intermediate_size wide, on every layer; Mixtral always
         * renormalises its top-k, OLMoE as norm_topk_prob says */
        cfg->moe_intermediate_size = cfg->intermediate_size;
        cfg->norm_topk_prob = true;
        if (row->moe == 3) {
            cfg->norm_topk_prob = row->norm_topk;
            if ((rc = get_bool(c, "norm_topk_prob", &cfg->norm_topk_prob, NULL)))
                return rc;
        }
        for (int64_t l = 0; l < cfg->n_layers; l++)
            cfg->layer_flags[l] |= CDX_HF_LAYER_MOE;
        return CDX_OK;
    }
    if ((rc = get_int(c, "moe_intermediate_size", 1, CDX_MAX_FF, &cfg->moe_intermediate_size, NULL)) ||
        (rc = get_bool(c, "norm_topk_prob", &cfg->norm_topk_prob, NULL)) ||
        (rc = get_int(c, "decoder_sparse_step", 1, CDX_HF_MAX_LAYERS, &cfg->decoder_sparse_step, NULL)))
        return rc;
    if (row->shared_ff && (rc = get_int(c, "shared_expert_intermediate_size", 1, CDX_MAX_FF,
                                        &cfg->shared_expert_intermediate_size, NULL)))
        return rc;
    uint8_t dense[CDX_HF_MAX_LAYERS] = {0};
    json_t *mol = field(c->root, "mlp_only_layers");
    if (mol) {
        if (!json_is_array(mol))
            return type_err(c, "mlp_only_layers", mol, "a list of layer indices");
        for (size_t i = 0; i < json_array_size(mol); i++) {
            char shown[40];
            int64_t l;
            snprintf(shown, sizeof shown, "mlp_only_layers[%zu]", i);
            json_t *e = json_array_get(mol, i);
            if (!json_is_integer(e))
                return type_err(c, shown, e, "an integer");
            l = json_integer_value(e);
            if (l < 0 || l >= cfg->n_layers)
                return cdx_err_set(c->err, CDX_ERANGE, "%s: %s is %lld; expected 0..%lld", c->name, shown, (long long)l,
                                   (long long)cfg->n_layers - 1);
            dense[l] = 1;
        }
    }
    /* Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: sparse iff not in mlp_only_layers, there are
     * experts, and (layer_idx + 1) % decoder_sparse_step == 0. */
    for (int64_t l = 0; l < cfg->n_layers; l++)
        if (!dense[l] && cfg->n_experts > 0 && (l + 1) % cfg->decoder_sparse_step == 0)
            cfg->layer_flags[l] |= CDX_HF_LAYER_MOE;
    return CDX_OK;
}

/* Idefics3: vision_config (Idefics3VisionConfig defaults) and the top-level connector keys. */
static int read_vision(ctx *top, cdx_hf_config *cfg)
{
    cdx_hf_vision *v = &cfg->vision;
    *v = (cdx_hf_vision){ .present = true, .hidden_size = 1152, .intermediate_size = 3072, .n_layers = 12,
                          .n_heads = 16, .n_channels = 3, .image_size = 224, .patch_size = 32, .layer_norm_eps = 1e-6,
                          .scale_factor = 2, .image_token_id = 128257 };
    int rc;
    if ((rc = get_int(top, "scale_factor", 1, 64, &v->scale_factor, NULL)) ||
        (rc = get_int(top, "image_token_id", 0, INT32_MAX, &v->image_token_id, NULL)))
        return rc;
    json_t *vc = field(top->root, "vision_config");
    if (!vc)
        return cdx_err_set(top->err, CDX_EFORMAT, "%s: vision_config is missing; %s needs it", top->name, cfg->architecture);
    if (!json_is_object(vc))
        return type_err(top, "vision_config", vc, "an object");
    char name[300];
    snprintf(name, sizeof name, "%s: vision_config", top->name);
    ctx c = { vc, name, top->err, top->ref };
    if ((rc = get_int(&c, "hidden_size", 1, (int64_t)1 << 16, &v->hidden_size, NULL)) ||
        (rc = get_int(&c, "intermediate_size", 1, (int64_t)1 << 20, &v->intermediate_size, NULL)) ||
        (rc = get_int(&c, "num_hidden_layers", 1, 256, &v->n_layers, NULL)) ||
        (rc = get_int(&c, "num_attention_heads", 1, 1024, &v->n_heads, NULL)) ||
        (rc = get_int(&c, "num_channels", 3, 3, &v->n_channels, NULL)) ||
        (rc = get_int(&c, "image_size", 1, 4096, &v->image_size, NULL)) ||
        (rc = get_int(&c, "patch_size", 1, 1024, &v->patch_size, NULL)) ||
        (rc = get_num_in(&c, vc, "layer_norm_eps", "layer_norm_eps", 0, 1, &v->layer_norm_eps, NULL)))
        return rc;
    const char *act = NULL;
    if ((rc = get_str(&c, vc, "hidden_act", "hidden_act", &act)))
        return rc;
    if (act && strcmp(act, "gelu_pytorch_tanh"))
        REFUSE(&c, "%s: hidden_act is \"%.40s\"; caldrix runs the vision tower with \"gelu_pytorch_tanh\"", name, act);
    if (v->hidden_size % v->n_heads)
        return cdx_err_set(top->err, CDX_ERANGE, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld", name,
                           (long long)v->hidden_size, (long long)v->n_heads);
    const int64_t side = v->image_size / v->patch_size;
    if (v->image_size % v->patch_size || side % v->scale_factor)
        return cdx_err_set(top->err, CDX_ERANGE, "%s: image_size %lld / patch_size %lld = %lld patches per side; it must "
                           "be whole and a multiple of scale_factor %lld", name, (long long)v->image_size,
                           (long long)v->patch_size, (long long)side, (long long)v->scale_factor);
    return CDX_OK;
}

/* An encoder's keys (BertConfig, XLMRobertaConfig): the token type table, absolute positions, no
 * decoder or cross-attention use. */
static int read_encoder(ctx *c, cdx_hf_config *cfg, const arch_row *row)
{
    int rc;
    cfg->encoder = true;
    cfg->type_vocab_size = row->type_vocab ? row->type_vocab : 2;
    if ((rc = get_int(c, "type_vocab_size", 1, 1 << 16, &cfg->type_vocab_size, NULL)))
        return rc;
    const char *pe = NULL;
    if ((rc = get_str(c, c->root, "position_embedding_type", "position_embedding_type", &pe)))
        return rc;
    if (pe && strcmp(pe, "absolute"))
        REFUSE(c, "%s: position_embedding_type is \"%.40s\"; caldrix runs %s with \"absolute\" position embeddings",
               c->name, pe, cfg->architecture);
    static const char *const dec_keys[] = { "is_decoder", "add_cross_attention" };
    for (int i = 0; i < 2; i++)
        if (json_is_true(field(c->root, dec_keys[i])))
            REFUSE(c, "%s: %s is true; caldrix runs %s as a bidirectional encoder only", c->name, dec_keys[i],
                   cfg->architecture);
    if (row->pos_after_pad) { /* XLM-R: position ids padding_idx + 1, + 2, ... (padding_idx = pad_token_id, 1) */
        int64_t pad = 1;
        if ((rc = get_int(c, "pad_token_id", 0, INT32_MAX, &pad, NULL)))
            return rc;
        cfg->pos_offset = pad + 1;
    }
    return CDX_OK;
}

/* The MLP activation. A row with act_key reads that key only (GemmaMLP: hidden_activation, or
 * gelu_pytorch_tanh when it is absent or null, whatever hidden_act says); else hidden_act and
 * hidden_activation must be SiLU, in the text model's object and at the top level. */
static int read_act(ctx *c, cdx_hf_config *cfg, const arch_row *row, json_t *const objs[2], const char *const names[2])
{
    static const struct { const char *name; cdx_hf_act act; } k_acts[] = {
        { "silu", CDX_HF_ACT_SILU }, { "gelu_pytorch_tanh", CDX_HF_ACT_GELU_TANH }, { "relu2", CDX_HF_ACT_RELU2 },
    };
    static const char *const act_keys[] = { "hidden_act", "hidden_activation" };
    int rc;
    cfg->act = row->act;
    if (row->layout == CDX_HF_ENCODER) { /* BertIntermediate: ACT2FN[hidden_act], "gelu" the exact erf form */
        const char *act = NULL;
        if ((rc = get_str(c, objs[0], "hidden_act", "hidden_act", &act)))
            return rc;
        if (act && strcmp(act, "gelu"))
            REFUSE(c, "%s: hidden_act is \"%.40s\"; caldrix runs %s encoders with \"gelu\" (the exact erf form)",
                   names[0], act, cfg->architecture);
        cfg->act = CDX_HF_ACT_GELU;
        return CDX_OK;
    }
    for (int k = 0; k < 2 && objs[k]; k++)
        for (size_t i = 0; i < (row->act_key ? 1 : 2); i++) {
            const char *key = row->act_key ? row->act_key : act_keys[i], *act = NULL;
            if ((rc = get_str(c, objs[k], key, key, &act)))
                return rc;
            if (!act)
                continue;
            size_t a = 0;
            while (a < sizeof k_acts / sizeof k_acts[0] && strcmp(act, k_acts[a].name))
                a++;
            /* the row's own activation (relu2: BitNet) besides SiLU; an act_key row's SiLU or tanh-GELU */
            const bool own = row->act == CDX_HF_ACT_RELU2;
            if (a < sizeof k_acts / sizeof k_acts[0] &&
                (k_acts[a].act == CDX_HF_ACT_SILU || k_acts[a].act == row->act ||
                 (row->act_key && k_acts[a].act == CDX_HF_ACT_GELU_TANH)))
                cfg->act = k_acts[a].act;
            else
                REFUSE(c, "%s: %s is \"%.40s\"; only \"%s\" is supported", names[k], key, act,
                       row->act_key ? "silu\" or \"gelu_pytorch_tanh" : own ? "relu2\" or \"silu" : "silu");
        }
    return CDX_OK;
}

int cdx_hf_config_parse(const char *json, size_t len, const char *name, cdx_hf_config *cfg, cdx_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (!name)
        name = "config.json";
    const char *const top_name = name;
    json_error_t je;
    /* a key given twice is ambiguous (which one would transformers read?): malformed */
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return cdx_err_set(err, CDX_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", name, je.text, je.line,
                           je.column);
    refusal ref = { 0 };
    ctx c = { root, name, err, &ref };
    const arch_row *row = &k_generic;
    json_t *const doc = root; /* root becomes text_config for a Qwen3.5 VL config */
    int rc;
    if (!json_is_object(root)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: not a JSON object", name);
        goto out;
    }
    cfg->n_keys = (int64_t)json_object_size(root);
    if ((rc = find_arch(&c, cfg, &row)))
        goto out;
    char text_name[300];
    char tc_name[600];
    const bool qwen35 = row->layout == CDX_HF_TEXT_QWEN35 || row->layout == CDX_HF_TEXT_QWEN35_VL;
    if (qwen35 && (rc = qwen35_keys(&c, root, "")))
        goto out;
    if (row->layout == CDX_HF_TEXT_VISION) {
        /* the text model's fields come from text_config; the tie of the head is the top level's */
        json_t *tc = field(root, "text_config");
        if (!tc || !json_is_object(tc)) {
            rc = tc ? type_err(&c, "text_config", tc, "an object")
                    : cdx_err_set(err, CDX_EFORMAT, "%s: text_config is missing; %s needs it", name, cfg->architecture);
            goto out;
        }
        if ((rc = read_vision(&c, cfg)) || (rc = get_bool(&c, "tie_word_embeddings", &cfg->tie_word_embeddings, NULL)))
            goto out;
        const bool tied = cfg->tie_word_embeddings;
        snprintf(text_name, sizeof text_name, "%s: text_config", name);
        c.root = tc;
        c.name = text_name;
        name = text_name;
        json_t *tt = field(tc, "tie_word_embeddings");
        if (!tt)
            json_object_set_new(tc, "tie_word_embeddings", json_boolean(tied));
    } else if (row->layout == CDX_HF_TEXT_QWEN35_VL) {
        /* Qwen3_5Config: the text model's fields are in text_config; the vision tower is not run */
        json_t *tc = field(root, "text_config");
        if (!tc || !json_is_object(tc)) {
            rc = tc ? type_err(&c, "text_config", tc, "an object") :
                 cdx_err_set(err, CDX_EFORMAT, "%s: text_config is missing; a %s config keeps the text model there",
                             name, cfg->architecture);
            goto out;
        }
        if ((rc = qwen35_keys(&c, tc, "text_config.")))
            goto out;
        snprintf(tc_name, sizeof tc_name, "%s: text_config", name);
        c.root = root = tc;
        c.name = tc_name;
        cfg->text_config = true;
    } else if (row->layout == CDX_HF_TEXT_MROPE && field(root, "text_config") &&
               !json_is_null(field(root, "text_config"))) {
        /* Qwen2VLConfig: text_config when given, else every top-level key (its backward compatibility) */
        json_t *tc = field(root, "text_config");
        if (!json_is_object(tc)) {
            rc = type_err(&c, "text_config", tc, "an object or null");
            goto out;
        }
        snprintf(tc_name, sizeof tc_name, "%s: text_config", name);
        c.root = root = tc;
        c.name = tc_name;
        cfg->text_config = true;
    } else if (cfg->arch == CDX_HF_ARCH_COUNT && json_is_object(field(root, "text_config"))) {
        /* refused already; a multimodal config keeps its text model's dimensions here */
        snprintf(tc_name, sizeof tc_name, "%s: text_config", name);
        c.root = root = field(root, "text_config");
        c.name = tc_name;
    }

    /* quantized checkpoints and interleaved RoPE: no class caldrix reads has them */
    /* these and the activation, in the text model's object and at the top level (a multimodal config) */
    json_t *const objs[2] = { c.root, doc != c.root ? doc : NULL };
    const char *const obj_names[2] = { c.name, top_name };
    static const char *const interleaved[] = { "rope_interleaved", "rotary_interleaved", "interleaved_rope" };
    for (int k = 0; k < 2 && objs[k]; k++) {
        json_t *q = field(objs[k], "quantization_config");
        if (q && row && row->bitnet_quant && json_is_object(q)) {
            /* BitNetQuantConfig: quant_method "bitnet"; linear_class "bitlinear" and quantization_mode "offline"
             * (its defaults) are the packed weights transformers' BitLinear reads (integrations/bitnet.py) */
            static const char *const keys[3][2] = { { "quant_method", "bitnet" }, { "linear_class", "bitlinear" },
                                                    { "quantization_mode", "offline" } };
            for (int i = 0; i < 3; i++) {
                json_t *v = json_object_get(q, keys[i][0]);
                if ((i == 0 && !v) || (v && (!json_is_string(v) || strcmp(json_string_value(v), keys[i][1])))) {
                    char txt[48] = "absent";
                    if (v)
                        show(v, txt, sizeof txt);
                    REFUSE(&c, "%s: quantization_config.%s is %s; caldrix reads BitNet's packed weights only "
                           "(quant_method \"bitnet\", linear_class \"bitlinear\", quantization_mode \"offline\")",
                           obj_names[k], keys[i][0], txt);
                }
            }
            cfg->bitlinear = true;
        } else if (q) {
            json_t *m = json_is_object(q) ? json_object_get(q, "quant_method") : NULL;
            REFUSE(&c, "%s: quantization_config is present (quant_method \"%.40s\"); quantized safetensors "
                   "checkpoints are refused. Use the unquantized release, or a quantized Ollama tag "
                   "(ollama:NAME:TAG)", obj_names[k], json_is_string(m) ? json_string_value(m) : "?");
        }
        for (size_t i = 0; i < 3; i++)
            if (json_is_true(field(objs[k], interleaved[i])))
                REFUSE(&c, "%s: %s is true; interleaved RoPE is not supported (caldrix rotates halves, as Llama "
                       "and Qwen do)", obj_names[k], interleaved[i]);
    }

    if ((rc = req_int(&c, "hidden_size", 1, CDX_MAX_HIDDEN, &cfg->hidden_size)) ||
        (rc = req_int(&c, "intermediate_size", 1, CDX_MAX_FF, &cfg->intermediate_size)) ||
        (rc = req_int(&c, "num_hidden_layers", 1, CDX_HF_MAX_LAYERS, &cfg->n_layers)) ||
        (rc = req_int(&c, "num_attention_heads", 1, CDX_MAX_HEADS, &cfg->n_heads)) ||
        (rc = req_int(&c, "vocab_size", 1, CDX_MAX_VOCAB, &cfg->vocab_size)))
        goto out;
    cfg->n_kv_heads = row->kv_heads ? row->kv_heads : cfg->n_heads;
    if (json_is_null(json_object_get(root, "num_key_value_heads")))
        cfg->n_kv_heads = cfg->n_heads; /* explicit null: every config class falls back to heads */
    if ((rc = get_int(&c, "num_key_value_heads", 1, CDX_MAX_HEADS, &cfg->n_kv_heads, NULL)))
        goto out;
    if (cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads) {
        rc = cdx_err_set(err, CDX_ERANGE, "%s: num_key_value_heads is %lld; it must divide num_attention_heads (%lld)",
                         name, (long long)cfg->n_kv_heads, (long long)cfg->n_heads);
        goto out;
    }
    cfg->head_dim = row->head_dim ? row->head_dim : cfg->hidden_size / cfg->n_heads;
    if ((rc = get_int(&c, "head_dim", 1, CDX_MAX_HEAD_DIM, &cfg->head_dim, NULL)))
        goto out;
    if (cfg->head_dim < 2 || cfg->head_dim % 2) {
        rc = cdx_err_set(err, CDX_ERANGE, "%s: head_dim is %lld (hidden_size %lld / num_attention_heads %lld when absent); "
                                          "rotary embeddings need an even head_dim of at least 2",
                         name, (long long)cfg->head_dim, (long long)cfg->hidden_size, (long long)cfg->n_heads);
        goto out;
    }
    cfg->max_position_embeddings = row->max_pos;
    if ((rc = get_int(&c, "max_position_embeddings", 1, (int64_t)1 << 30, &cfg->max_position_embeddings, NULL)))
        goto out;
    cfg->rms_norm_eps = row->rms_eps;
    {
        /* the norms' epsilon, under the family's key */
        const char *eps_key = row->eps_key                     ? row->eps_key
                              : row->layout == CDX_HF_ENCODER ? "layer_norm_eps"
                                                              : "rms_norm_eps";
        if (!row->eps_fixed && (rc = get_num_in(&c, root, eps_key, eps_key, 0, 1, &cfg->rms_norm_eps, NULL)))
            goto out;
    }
    if (row->layout == CDX_HF_ENCODER && (rc = read_encoder(&c, cfg, row)))
        goto out;
    cfg->rope_theta = row->rope_theta;
    if ((rc = read_rope(&c, cfg, row)))
        goto out;
    if (row->layout == CDX_HF_TEXT_MROPE && (rc = read_mrope(&c, cfg)))
        goto out;

    if ((rc = read_act(&c, cfg, row, objs, obj_names)))
        goto out;
    cfg->tie_word_embeddings = row->tied;
    cfg->attention_bias = row->attn_bias_on;
    if ((rc = get_bool(&c, "tie_word_embeddings", &cfg->tie_word_embeddings, NULL)) ||
        (rc = get_bool(&c, "attention_bias", &cfg->attention_bias, NULL)))
        goto out;
    if (row->mlp_bias_key && (rc = get_bool(&c, "mlp_bias", &cfg->mlp_bias, NULL)))
        goto out;
    switch (row->bias) {
    case CDX_HF_B_ATTN: cfg->attn_qkv_bias = cfg->attn_o_bias = cfg->attention_bias; break;
    case CDX_HF_B_NONE: break;
    case CDX_HF_B_QKV: cfg->attn_qkv_bias = true; break;
    case CDX_HF_B_QKV_KEY:
        cfg->attn_qkv_bias = true;
        if ((rc = get_bool(&c, "qkv_bias", &cfg->attn_qkv_bias, NULL)))
            goto out;
        break;
    case CDX_HF_B_USE_QKV:
        cfg->attn_qkv_bias = false;
        if ((rc = get_bool(&c, "use_qkv_bias", &cfg->attn_qkv_bias, NULL)))
            goto out;
        break;
    case CDX_HF_B_USE_BIAS: /* the o_proj and MLP biases go with the family's row (Starcoder2) */
        cfg->attn_qkv_bias = true;
        if ((rc = get_bool(&c, "use_bias", &cfg->attn_qkv_bias, NULL)))
            goto out;
        cfg->attn_o_bias = cfg->mlp_bias = cfg->attn_qkv_bias;
        break;
    }
    /* the forward pass has q, k, v biases (Qwen2's) and no o_proj or MLP bias (Qwen3.5 says why itself) */
    if (cfg->attn_o_bias && !qwen35 && row->bias != CDX_HF_B_USE_BIAS && !row->attn_bias_on)
        REFUSE(&c, "%s: attention_bias is true; caldrix runs %s without attention biases (only Qwen2 and Qwen2-MoE "
               "have theirs, on q, k and v)", c.name, cfg->architecture);
    if (cfg->mlp_bias && row->bias != CDX_HF_B_USE_BIAS)
        REFUSE(&c, "%s: mlp_bias is true; caldrix's MLP has no bias", c.name);

    const char *dt = NULL;
    if ((rc = get_str(&c, root, "torch_dtype", "torch_dtype", &dt)))
        goto out;
    const char *dt_key = dt ? "torch_dtype" : "dtype";
    if (!dt && (rc = get_str(&c, root, "dtype", "dtype", &dt)))
        goto out;
    if (dt && !cdx_hf_dtype_accepted(dt))
        REFUSE(&c, "%s: %s is \"%.40s\"; caldrix imports %s checkpoints. Use the model's unquantized bf16/f16/f32 "
               "release", name, dt_key, dt, CDX_HF_DTYPES_ACCEPTED);
    else if (dt)
        snprintf(cfg->torch_dtype, sizeof cfg->torch_dtype, "%s", dt);

    cfg->bos_token_id = row->bos;
    cfg->pad_token_id = -1;
    if (row->eos >= 0) {
        cfg->n_eos = 1;
        cfg->eos_token_ids[0] = row->eos;
    }
    if (json_is_null(json_object_get(root, "bos_token_id")))
        cfg->bos_token_id = -1;
    if (json_is_null(json_object_get(root, "eos_token_id")))
        cfg->n_eos = 0;
    if ((rc = get_int(&c, "bos_token_id", 0, INT32_MAX, &cfg->bos_token_id, NULL)) ||
        (rc = get_int(&c, "pad_token_id", -1, INT32_MAX, &cfg->pad_token_id, NULL)) || (rc = get_eos(&c, cfg)))
        goto out;

    if (row->nope_interval && (rc = read_nope(&c, cfg, row)))
        goto out;
    if ((rc = read_sliding(&c, cfg, row)))
        goto out;
    if (row->clip_qkv_key && (rc = get_num_in(&c, root, "clip_qkv", "clip_qkv", 0, 1e9, &cfg->clip_qkv, NULL)))
        goto out;
    if (row->swiglu_oai) { /* GptOssExperts: alpha 1.702, limit 7.0 (the later classes read both keys) */
        cfg->swiglu_limit = 7.0;
        cfg->swiglu_alpha = 1.702;
        if ((rc = get_num_in(&c, root, "swiglu_limit", "swiglu_limit", 1e-6, 1e9, &cfg->swiglu_limit, NULL)) ||
            (rc = get_num_in(&c, root, "swiglu_alpha", "swiglu_alpha", 1e-6, 1e9, &cfg->swiglu_alpha, NULL)))
            goto out;
    }
    /* a window over some layers only is computed for the classes whose rule is per layer (Gemma2/3) */
    const bool per_layer_sw = row->sw == CDX_HF_SW_EVEN || row->sw == CDX_HF_SW_PATTERN;
    for (int64_t l = 0; l < cfg->n_layers && cfg->sliding_window && !per_layer_sw; l++)
        if (!(cfg->layer_flags[l] & CDX_HF_LAYER_SLIDING)) {
            REFUSE(&c, "%s: sliding window %lld applies to some layers only (max_window_layers %lld); caldrix applies "
                   "one window to every layer", c.name, (long long)cfg->sliding_window,
                   (long long)cfg->max_window_layers);
            break;
        }
    if (row->moe && (rc = read_moe(&c, cfg, row)))
        goto out;
    for (int k = 0; k < CDX_HF_SCALE_COUNT; k++) { /* the scalings outside the layers the class has */
        const bool cap = k == CDX_HF_SCALE_ATTN_SOFTCAP || k == CDX_HF_SCALE_FINAL_SOFTCAP;
        cfg->scale[k] = !row->scale_keys[k] ? 0.0 : row->scale_defaults[k] ? row->scale_defaults[k] : cap ? 0.0 : 1.0;
        if (row->scale_keys[k] && json_is_null(json_object_get(root, row->scale_keys[k])))
            cfg->scale[k] = 0; /* null: none (a softcap switched off) */
        else if (row->scale_keys[k] &&
                 (rc = get_num_in(&c, root, row->scale_keys[k], row->scale_keys[k], 1e-9, 1e9, &cfg->scale[k], NULL)))
            goto out;
    }
    if (row->rope_swa_theta_key) { /* Gemma3: the sliding layers' own RoPE base (default rope, no scaling) */
        cfg->rope_theta_swa = row->rope_swa_theta;
        if ((rc = get_num_in(&c, root, row->rope_swa_theta_key, row->rope_swa_theta_key, 1e-9, 1e12,
                             &cfg->rope_theta_swa, NULL)))
            goto out;
    }
    cfg->partial_rotary_factor = 1.0;
    if (row->partial_rotary > 0) { /* Phi3Config, StableLmConfig: the rotated share of head_dim */
        cfg->partial_rotary_factor = row->partial_rotary;
        if ((rc = get_num_in(&c, root, "partial_rotary_factor", "partial_rotary_factor", 0, 1,
                             &cfg->partial_rotary_factor, NULL)))
            goto out;
        const int64_t n_rot = (int64_t)((double)cfg->head_dim * cfg->partial_rotary_factor); /* int(), as transformers */
        if (n_rot < 2 || n_rot % 2) {
            rc = cdx_err_set(err, CDX_ERANGE, "%s: partial_rotary_factor %g of head_dim %lld gives %lld rotated "
                             "dimensions; expected an even count of at least 2", c.name, cfg->partial_rotary_factor,
                             (long long)cfg->head_dim, (long long)n_rot);
            goto out;
        }
    }
    cfg->parallel_residual = row->parallel;
    if (row->parallel_key && (rc = get_bool(&c, row->parallel_key, &cfg->parallel_residual, NULL)))
        goto out;
    bool qk_ln = false;
    if (row->qk_norm_key && (rc = get_bool(&c, row->qk_norm_key, &qk_ln, NULL)))
        goto out;
    if (qk_ln)
        REFUSE(&c, "%s: %s is true; caldrix does not run %s's per-head q/k LayerNorms yet", c.name, row->qk_norm_key,
               cfg->architecture);
    if (qwen35 && (rc = read_qwen35(&c, cfg)))
        goto out;
    if (cfg->text_config) { /* the top level's tie_word_embeddings and dtype win (the reference reads them first) */
        ctx top = { doc, name, err, &ref };
        if ((rc = get_bool(&top, "tie_word_embeddings", &cfg->tie_word_embeddings, NULL)))
            goto out;
        const char *tdt = NULL;
        if ((rc = get_str(&top, doc, "dtype", "dtype", &tdt)) ||
            (!tdt && (rc = get_str(&top, doc, "torch_dtype", "torch_dtype", &tdt))))
            goto out;
        if (tdt && !cdx_hf_dtype_accepted(tdt))
            REFUSE(&c, "%s: dtype is \"%.40s\"; caldrix imports %s checkpoints. Use the model's unquantized "
                   "bf16/f16/f32 release", name, tdt, CDX_HF_DTYPES_ACCEPTED);
        else if (tdt)
            snprintf(cfg->torch_dtype, sizeof cfg->torch_dtype, "%s", tdt);
    }
out:
    json_decref(doc);
    if (ref.set) { /* the first refusal, even when reading on stopped at a malformed field after it */
        if (err)
            *err = ref.err;
        rc = ref.err.code;
    }
    return rc;
}

/* ---- generation_config.json ---- */

int cdx_hf_config_apply_generation(cdx_hf_config *cfg, const char *json, size_t len, const char *name, cdx_err *err)
{
    if (!name)
        name = "generation_config.json";
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root)
        return cdx_err_set(err, CDX_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", name, je.text, je.line,
                           je.column);
    refusal ref = { 0 };
    ctx c = { root, name, err, &ref };
    int rc = CDX_OK;
    if (!json_is_object(root)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: not a JSON object", name);
        goto out;
    }
    /* Generation uses these ids in place of the model config's. */
    if ((rc = get_int(&c, "bos_token_id", 0, INT32_MAX, &cfg->bos_token_id, NULL)) ||
        (rc = get_int(&c, "pad_token_id", -1, INT32_MAX, &cfg->pad_token_id, NULL)) || (rc = get_eos(&c, cfg)))
        goto out;
    if ((rc = get_bool(&c, "do_sample", &cfg->do_sample, &cfg->has_do_sample)))
        goto out;
    /* temperature may be 0 in the wild (greedy); allow [0, 100]. */
    json_t *t = field(root, "temperature");
    if (t) {
        if (!json_is_number(t) || !isfinite(json_number_value(t)) || json_number_value(t) < 0 ||
            json_number_value(t) > 100) {
            rc = type_err(&c, "temperature", t, "a number in 0..100");
            goto out;
        }
        cfg->temperature = json_number_value(t);
        cfg->has_temperature = true;
    }
    if ((rc = get_num_in(&c, root, "top_p", "top_p", 0, 1, &cfg->top_p, &cfg->has_top_p)) ||
        (rc = get_int(&c, "top_k", 0, INT32_MAX, &cfg->top_k, &cfg->has_top_k)) ||
        (rc = get_num_in(&c, root, "repetition_penalty", "repetition_penalty", 0, 100, &cfg->repetition_penalty,
                         &cfg->has_repetition_penalty)))
        goto out;
    cfg->has_generation_config = true;
out:
    json_decref(root);
    return rc;
}

static int read_text(const char *path, char **text, size_t *len, cdx_err *err)
{
    return cdx_file_read_all(path, CONFIG_MAX_BYTES, text, len, err);
}

int cdx_hf_config_read(const char *path, cdx_hf_config *cfg, cdx_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: no such file or folder", path);
    size_t plen = strlen(path);
    char *dir = NULL, *cfg_path = NULL, *gen_path = NULL, *text = NULL;
    int rc = CDX_ENOMEM;
    if (S_ISDIR(sb.st_mode))
        dir = strdup(path);
    else {
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    }
    if (!dir || !(cfg_path = malloc(plen + 32)) || !(gen_path = malloc(strlen(dir) + 32))) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto out;
    }
    if (S_ISDIR(sb.st_mode))
        snprintf(cfg_path, plen + 32, "%s/config.json", path);
    else
        snprintf(cfg_path, plen + 32, "%s", path);
    snprintf(gen_path, strlen(dir) + 32, "%s/generation_config.json", dir);
    size_t len;
    if ((rc = read_text(cfg_path, &text, &len, err)))
        goto out;
    if ((rc = cdx_hf_config_parse(text, len, cfg_path, cfg, err)))
        goto out;
    free(text);
    text = NULL;
    if (stat(gen_path, &sb) == 0) {
        if ((rc = read_text(gen_path, &text, &len, err)) ||
            (rc = cdx_hf_config_apply_generation(cfg, text, len, gen_path, err)))
            goto out;
    }
out:
    free(text);
    free(gen_path);
    free(cfg_path);
    free(dir);
    return rc;
}
