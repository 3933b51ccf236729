/* caldrix server: request bodies to validated parameters. Every refusal is a 400 that names the
 * field and the value; unknown fields are ignored; JSON null counts as absent. */
#include "server/sv_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---- */

int sv_fail(sv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

char *sv_utf8_sanitize(const char *s, size_t n, size_t *out_len)
{
    size_t cap = n * 3 + 1, o = 0; /* each bad byte becomes at most 3 bytes */
    char *out = malloc(cap);
    if (!out)
        return NULL;
    size_t i = 0;
    while (i < n) {
        size_t ok = cdx_utf8_check(s + i, n - i);
        memcpy(out + o, s + i, ok);
        o += ok;
        i += ok;
        if (i < n) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    if (out_len)
        *out_len = o;
    return out;
}

void sv_printable(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            *s = '?';
}

char *sv_error_body(const sv_error *e)
{
    size_t n;
    char *msg = sv_utf8_sanitize(e->message, strlen(e->message), &n);
    json_t *j = json_pack("{s:{s:s%,s:s,s:o,s:o}}", "error", "message", msg ? msg : "error", msg ? n : 5, "type",
                          e->type ? e->type : "invalid_request_error", "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_null());
    free(msg);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

/* ---- field helpers ---- */

#define BAD(code, param, ...) sv_fail(e, 400, "invalid_request_error", code, param, __VA_ARGS__)

/* A short rendering of a JSON value for messages. */
static void show(const json_t *v, char *buf, size_t cap)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        snprintf(buf, cap, "?");
        return;
    }
    if (strlen(s) > 40)
        snprintf(buf, cap, "%.37s...", s);
    else
        snprintf(buf, cap, "%s", s);
    free(s);
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static json_t *field(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_number(json_t *root, const char *key, double lo, double hi, float *out, sv_error *e)
{
    json_t *v = field(root, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return BAD("invalid_type", key, "%s must be a number, not %s", key, type_name(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        char b[64];
        show(v, b, sizeof b);
        return BAD("invalid_value", key, "%s is %s; it must be between %g and %g", key, b, lo, hi);
    }
    *out = (float)d;
    return 0;
}

/* Integers only (2.0 is refused, as OpenAI refuses it). */
static int get_int(json_t *root, const char *key, json_int_t lo, json_int_t hi, json_int_t *out, bool *set,
                   sv_error *e)
{
    json_t *v = field(root, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return BAD("invalid_type", key, "%s must be an integer, not %s", key, type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return BAD("invalid_value", key, "%s is %lld; it must be between %lld and %lld", key, (long long)x,
                   (long long)lo, (long long)hi);
    *out = x;
    if (set)
        *set = true;
    return 0;
}

static int get_bool(json_t *root, const char *key, bool *out, sv_error *e)
{
    json_t *v = field(root, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return BAD("invalid_type", key, "%s must be a boolean, not %s", key, type_name(v));
    *out = json_is_true(v);
    return 0;
}

static int get_string(json_t *root, const char *key, const char **out, sv_error *e)
{
    json_t *v = field(root, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return BAD("invalid_type", key, "%s must be a string, not %s", key, type_name(v));
    *out = json_string_value(v);
    return 0;
}

/* A list of token ids, each inside the vocabulary. */
static int get_ids(json_t *arr, const char *key, const sv_limits *lim, sv_params *p, sv_error *e)
{
    size_t n = json_array_size(arr);
    p->ids = malloc((n ? n : 1) * sizeof *p->ids);
    if (!p->ids)
        return sv_fail(e, 500, "server_error", "out_of_memory", key, "out of memory for %zu token ids", n);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        char param[96];
        snprintf(param, sizeof param, "%s[%zu]", key, i);
        if (!json_is_integer(t))
            return BAD("invalid_type", param, "%s must be a token id (an integer), not %s", param, type_name(t));
        json_int_t x = json_integer_value(t);
        if (x < 0 || x >= lim->n_vocab)
            return BAD("invalid_value", param, "%s is %lld; token ids are 0..%lld", param, (long long)x,
                       (long long)lim->n_vocab - 1);
        p->ids[i] = (int32_t)x;
    }
    p->n_ids = (int64_t)n;
    return 0;
}

/* ---- the routes' bodies ---- */

/* ---- images: data: URLs only (the server never fetches a URL a caller names) ---- */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Strict base64 (RFC 4648, padding optional at the end). NULL on a bad character. */
static uint8_t *b64_decode(const char *s, size_t n, size_t *out_n)
{
    while (n && s[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return NULL;
    uint8_t *o = malloc(n / 4 * 3 + 3), *w = o;
    if (!o)
        return NULL;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        const int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(o);
            return NULL;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            *w++ = (uint8_t)(acc >> bits);
        }
    }
    *out_n = (size_t)(w - o);
    return o;
}

/* {"type":"image_url","image_url":{"url":"data:image/png;base64,..."}} (or "image_url": "data:...") */
static int parse_image_part(json_t *part, const char *param, const sv_limits *lim, sv_params *p, sv_error *e)
{
    char f[128];
    if (!lim->images)
        return BAD("invalid_value", param, "%s is an image; this model takes no images%s%s%s", param,
                   lim->no_images_why ? " (" : "", lim->no_images_why ? lim->no_images_why : "",
                   lim->no_images_why ? ")" : "");
    if (p->n_img == SV_MAX_IMAGES)
        return BAD("invalid_value", param, "%s: more than %d images in one request", param, SV_MAX_IMAGES);
    json_t *iu = json_object_get(part, "image_url");
    json_t *url = json_is_object(iu) ? json_object_get(iu, "url") : iu;
    snprintf(f, sizeof f, "%s.image_url%s", param, json_is_object(iu) ? ".url" : "");
    if (!json_is_string(url))
        return BAD(url ? "invalid_type" : "missing_required_parameter", f, "%s must be a data: URL string", f);
    const char *u = json_string_value(url);
    static const char *const k_prefix[] = { "data:image/png;base64,", "data:image/jpeg;base64,", "data:image/jpg;base64," };
    size_t pre = 0;
    for (size_t i = 0; i < sizeof k_prefix / sizeof k_prefix[0] && !pre; i++)
        if (!strncmp(u, k_prefix[i], strlen(k_prefix[i])))
            pre = strlen(k_prefix[i]);
    if (!pre)
        return BAD("invalid_value", f, "%s must be a data: URL of a base64 PNG or JPEG (data:image/png;base64,...); "
                   "the server fetches no URL (got \"%.40s%s\")", f, u, strlen(u) > 40 ? "..." : "");
    size_t n = 0;
    uint8_t *d = b64_decode(u + pre, json_string_length(url) - pre, &n);
    if (!d)
        return BAD("invalid_value", f, "%s: the data is not valid base64", f);
    p->img[p->n_img] = d;
    p->img_len[p->n_img] = n;
    snprintf(p->img_param[p->n_img], sizeof p->img_param[0], "%s", f);
    p->n_img++;
    return 0;
}

/* completions: caldrix's "images" list of image_url parts; the prompt ids must hold the image tokens */
static int parse_images_field(json_t *root, const sv_limits *lim, sv_params *p, sv_error *e)
{
    json_t *v = json_object_get(root, "images");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return BAD("invalid_type", "images", "images must be an array of image_url parts, not %s", type_name(v));
    for (size_t i = 0; i < json_array_size(v); i++) {
        char param[96];
        snprintf(param, sizeof param, "images[%zu]", i);
        json_t *part = json_array_get(v, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!json_is_object(part) || !type || strcmp(type, "image_url"))
            return BAD("invalid_value", param, "%s must be {\"type\":\"image_url\",\"image_url\":{\"url\":...}}", param);
        if (parse_image_part(part, param, lim, p, e))
            return -1;
    }
    if (p->n_img && !p->ids)
        return BAD("invalid_value", "images", "images go with a prompt of token ids (already expanded); with text, "
                   "use /v1/chat/completions and image_url parts");
    return 0;
}

/* The roles a message may have: OpenAI's (developer is its newer name for system; function is
 * the legacy form of tool). A template sees the role as sent. */
static const char *const k_roles[] = { "system", "developer", "user", "assistant", "tool", "function" };

static bool known_role(const char *r)
{
    for (size_t i = 0; i < sizeof k_roles / sizeof k_roles[0]; i++)
        if (!strcmp(r, k_roles[i]))
            return true;
    return false;
}

/* messages: a non-empty array of {role, content}; content as a string or parts (text joined,
 * images for a vision model), or, in an assistant turn, null or absent. The template gets a copy
 * with the parts joined and everything else as sent. */
static int parse_messages(json_t *root, const sv_limits *lim, sv_params *p, sv_error *e)
{
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs || json_is_null(msgs))
        return BAD("missing_required_parameter", "messages", "messages is required");
    if (!json_is_array(msgs))
        return BAD("invalid_type", "messages", "messages must be an array, not %s", type_name(msgs));
    if (json_array_size(msgs) == 0)
        return BAD("invalid_value", "messages", "messages is empty; it needs at least one message");
    p->messages = json_array();
    if (!p->messages)
        return sv_fail(e, 500, "server_error", "out_of_memory", "messages", "out of memory");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        char param[96];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return BAD("invalid_type", param, "%s must be an object, not %s", param, type_name(m));
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            return BAD(role ? "invalid_type" : "missing_required_parameter", param, "%s must be a string%s", param,
                       role ? "" : " (it is missing)");
        }
        if (!known_role(json_string_value(role))) {
            char list[128] = "";
            for (size_t r = 0; r < sizeof k_roles / sizeof k_roles[0]; r++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", r ? ", " : "", k_roles[r]);
            snprintf(param, sizeof param, "messages[%zu].role", i);
            return BAD("invalid_value", param, "%s is \"%.40s\"; it must be one of %s", param,
                       json_string_value(role), list);
        }
        json_t *c = json_object_get(m, "content");
        /* only an assistant turn may leave content out (OpenAI: one that carries tool_calls) */
        if ((!c || json_is_null(c)) && strcmp(json_string_value(role), "assistant")) {
            snprintf(param, sizeof param, "messages[%zu].content", i);
            return BAD("missing_required_parameter", param, "%s is required for a %s message", param,
                       json_string_value(role));
        }
        json_t *copy = json_copy(m);
        if (!copy)
            return sv_fail(e, 500, "server_error", "out_of_memory", param, "out of memory");
        json_array_append_new(p->messages, copy);
        if (!c || json_is_null(c) || json_is_string(c))
            continue;
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (!json_is_array(c))
            return BAD("invalid_type", param, "%s must be a string or an array of text parts, not %s", param,
                       type_name(c));
        size_t len = 0;
        for (size_t j = 0; j < json_array_size(c); j++) {
            json_t *part = json_array_get(c, j);
            const char *type = json_string_value(json_object_get(part, "type"));
            json_t *text = json_object_get(part, "text");
            if (json_is_object(part) && type && !strcmp(type, "image_url")) {
                snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, j);
                if (parse_image_part(part, param, lim, p, e))
                    return -1;
                len += strlen(CDX_IDEFICS3_IMAGE);
                continue;
            }
            if (!json_is_object(part) || !type || strcmp(type, "text") || !json_is_string(text)) {
                snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, j);
                return BAD("invalid_value", param, "%s must be a text part {\"type\":\"text\",\"text\":...}%s%s%s",
                           param, type && strcmp(type, "text") ? "; type \"" : "", type && strcmp(type, "text") ? type : "",
                           type && strcmp(type, "text") ? "\" is not supported by this model" : "");
            }
            len += json_string_length(text);
        }
        char *joined = malloc(len + 1), *w = joined;
        if (!joined)
            return sv_fail(e, 500, "server_error", "out_of_memory", param, "out of memory");
        for (size_t j = 0; j < json_array_size(c); j++) {
            json_t *part = json_array_get(c, j);
            if (!strcmp(json_string_value(json_object_get(part, "type")), "image_url")) {
                /* the processor's marker: expanded after the template renders */
                memcpy(w, CDX_IDEFICS3_IMAGE, strlen(CDX_IDEFICS3_IMAGE));
                w += strlen(CDX_IDEFICS3_IMAGE);
                continue;
            }
            json_t *text = json_object_get(part, "text");
            memcpy(w, json_string_value(text), json_string_length(text));
            w += json_string_length(text);
        }
        if (lim->images) {
            /* a vision model's template iterates the parts (SmolVLM's writes "<image>" for an image
             * part): text parts as sent, each image_url part as {"type":"image"} */
            json_t *parts = json_array();
            for (size_t j = 0; parts && j < json_array_size(c); j++) {
                json_t *part = json_array_get(c, j);
                if (!strcmp(json_string_value(json_object_get(part, "type")), "image_url"))
                    json_array_append_new(parts, json_pack("{s:s}", "type", "image"));
                else
                    json_array_append(parts, part);
            }
            json_object_set_new(copy, "content", parts ? parts : json_stringn(joined, len));
        } else
            json_object_set_new(copy, "content", json_stringn(joined, len));
        free(joined);
    }
    json_t *tools = field(root, "tools");
    json_t *kw = field(root, "chat_template_kwargs");
    if (tools && !json_is_array(tools))
        return BAD("invalid_type", "tools", "tools must be an array, not %s", type_name(tools));
    for (size_t i = 0; tools && i < json_array_size(tools); i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        char param[64];
        snprintf(param, sizeof param, "tools[%zu].function.name", i);
        if (!json_is_string(json_object_get(fn, "name")))
            return BAD("invalid_value", param, "%s must be a string (a tool is {\"type\":\"function\",\"function\":"
                       "{\"name\":...,\"parameters\":{...}}})", param);
    }
    json_t *choice = field(root, "tool_choice");
    const char *cs = json_string_value(choice);
    const size_t n_tools = tools ? json_array_size(tools) : 0;
    if (choice && cs) {
        if (!strcmp(cs, "required"))
            p->force = SV_FORCE_REQUIRED;
        else if (strcmp(cs, "auto") && strcmp(cs, "none"))
            return BAD("invalid_value", "tool_choice", "tool_choice is \"%.40s\"; it must be \"auto\", \"none\", "
                       "\"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}", cs);
    } else if (choice) {
        json_t *fn = json_object_get(choice, "function");
        const char *ty = json_string_value(json_object_get(choice, "type"));
        json_t *nm = json_object_get(fn, "name");
        if (!json_is_object(choice) || !ty || strcmp(ty, "function") || !json_is_string(nm))
            return BAD("invalid_value", "tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or "
                       "{\"type\":\"function\",\"function\":{\"name\":...}}");
        p->force = SV_FORCE_NAMED;
        p->force_name = json_string_value(nm);
        bool found = false;
        for (size_t i = 0; i < n_tools && !found; i++)
            found = !strcmp(json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"),
                                                              "name")), p->force_name);
        if (!found)
            return BAD("invalid_value", "tool_choice.function.name", "tool_choice.function.name is \"%.60s\"; the "
                       "request's tools have no function of that name", p->force_name);
    }
    if (p->force == SV_FORCE_REQUIRED && !n_tools)
        return BAD("invalid_value", "tool_choice", "tool_choice is \"required\" but the request has no tools");
    p->parallel_tool_calls = true;
    if (get_bool(root, "parallel_tool_calls", &p->parallel_tool_calls, e))
        return -1;
    if (n_tools && !(cs && !strcmp(cs, "none")))
        p->tools = tools;
    if (kw && !json_is_object(kw))
        return BAD("invalid_type", "chat_template_kwargs", "chat_template_kwargs must be an object, not %s",
                   type_name(kw));
    if (tools || kw) {
        p->extra = kw ? json_deep_copy(kw) : json_object();
        if (tools)
            json_object_set(p->extra, "tools", tools);
    }
    return get_bool(root, "add_generation_prompt", &p->add_generation_prompt, e);
}

/* prompt: a string, a list of token ids, or a list holding one of those. */
static int parse_prompt(json_t *root, const sv_limits *lim, sv_params *p, sv_error *e)
{
    json_t *v = json_object_get(root, "prompt");
    if (!v || json_is_null(v))
        return BAD("missing_required_parameter", "prompt", "prompt is required");
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        if (!lim->has_tok)
            return BAD("invalid_value", "prompt", "this model has no tokenizer; give prompt as token ids");
        p->text = json_string_value(v);
        p->text_len = json_string_length(v);
        return 0;
    }
    if (!json_is_array(v))
        return BAD("invalid_type", "prompt", "prompt must be a string or an array of token ids, not %s", type_name(v));
    if (json_array_size(v) == 0)
        return BAD("invalid_value", "prompt", "prompt is empty");
    if (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0)))
        return BAD("invalid_value", "prompt", "prompt holds %zu prompts; this server takes one per request",
                   json_array_size(v));
    return get_ids(v, "prompt", lim, p, e);
}

static int parse_stop(json_t *root, sv_params *p, sv_error *e)
{
    json_t *v = field(root, "stop");
    if (!v)
        return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return 0;
        if (json_string_length(v) > SV_MAX_STOP_BYTES)
            return BAD("invalid_value", "stop", "stop is %zu bytes; at most %d", json_string_length(v), SV_MAX_STOP_BYTES);
        p->stop[p->n_stop++] = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v))
        return BAD("invalid_type", "stop", "stop must be a string or an array of strings, not %s", type_name(v));
    if (json_array_size(v) > SV_MAX_STOP)
        return BAD("invalid_value", "stop", "stop has %zu strings; at most %d", json_array_size(v), SV_MAX_STOP);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        char param[32];
        snprintf(param, sizeof param, "stop[%zu]", i);
        if (!json_is_string(s))
            return BAD("invalid_type", param, "%s must be a string, not %s", param, type_name(s));
        if (json_string_length(s) > SV_MAX_STOP_BYTES)
            return BAD("invalid_value", param, "%s is %zu bytes; at most %d", param, json_string_length(s),
                       SV_MAX_STOP_BYTES);
        if (json_string_length(s) > 0) /* an empty stop string never matches anything useful */
            p->stop[p->n_stop++] = json_string_value(s);
    }
    return 0;
}

/* Compiles a constraint into p->grammar: a JSON Schema (schema NULL: any JSON object) or GBNF
 * text. A schema keyword that cannot be enforced, a malformed schema or grammar: 400 naming the
 * field, the place in it (JSON Pointer, or line:column) and why. */
static int set_grammar(sv_params *p, const char *param, const json_t *schema, const char *gbnf, size_t gbnf_len,
                       sv_error *e)
{
    if (p->grammar)
        return BAD("invalid_value", param, "%s: the request already constrains the output with %s; give one of "
                   "response_format (json_object/json_schema), json_schema and grammar", param, p->grammar_param);
    cdx_err err = { 0 };
    int rc;
    if (gbnf)
        rc = sv_grammars_compile(p->grammars, true, param, gbnf, gbnf_len, &p->grammar, &err);
    else {
        /* keys in the request's order: properties are generated in it */
        char *text = schema ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        if (schema && !text)
            return sv_fail(e, 500, "server_error", "out_of_memory", param, "out of memory");
        rc = sv_grammars_compile(p->grammars, false, param, text, text ? strlen(text) : 0, &p->grammar, &err);
        free(text);
    }
    if (rc == CDX_ENOMEM)
        return sv_fail(e, 500, "server_error", "out_of_memory", param, "out of memory compiling %s", param);
    if (rc)
        return BAD(rc == CDX_EUNSUPPORTED ? "unsupported_schema" : gbnf ? "invalid_grammar" : "invalid_schema", param,
                   "%s", err.msg);
    snprintf(p->grammar_param, sizeof p->grammar_param, "%s", param);
    return 0;
}

/* response_format (OpenAI): {"type":"text"}, {"type":"json_object"} (any JSON object; llama-server
 * also takes a "schema" beside it), {"type":"json_schema","json_schema":{"name","schema","strict"}}
 * (the schema enforced whether strict or not). llama-server's top-level json_schema (a schema) and
 * grammar (GBNF text). At most one of them. */
static int parse_constraints(json_t *root, const sv_limits *lim, sv_params *p, sv_error *e)
{
    json_t *rf = field(root, "response_format");
    if (rf) {
        if (!json_is_object(rf))
            return BAD("invalid_type", "response_format", "response_format must be an object {\"type\":...}, not %s",
                       type_name(rf));
        json_t *t = json_object_get(rf, "type");
        if (!json_is_string(t))
            return BAD(t ? "invalid_type" : "missing_required_parameter", "response_format.type",
                       "response_format.type must be a string (\"text\", \"json_object\" or \"json_schema\")");
        const char *type = json_string_value(t);
        if (!strcmp(type, "json_object")) {
            json_t *sch = field(rf, "schema");
            if (sch && !json_is_object(sch) && !json_is_boolean(sch))
                return BAD("invalid_type", "response_format.schema", "response_format.schema must be a JSON Schema "
                           "(an object), not %s", type_name(sch));
            if (set_grammar(p, sch ? "response_format.schema" : "response_format", sch, NULL, 0, e))
                return -1;
        } else if (!strcmp(type, "json_schema")) {
            json_t *js = field(rf, "json_schema");
            if (!json_is_object(js))
                return BAD(js ? "invalid_type" : "missing_required_parameter", "response_format.json_schema",
                           "response_format.json_schema must be an object {\"name\":...,\"schema\":{...},"
                           "\"strict\":true}%s", js ? "" : " (it is missing)");
            json_t *name = field(js, "name"), *strict = field(js, "strict"), *sch = field(js, "schema");
            if (name && !json_is_string(name))
                return BAD("invalid_type", "response_format.json_schema.name",
                           "response_format.json_schema.name must be a string, not %s", type_name(name));
            if (strict && !json_is_boolean(strict))
                return BAD("invalid_type", "response_format.json_schema.strict",
                           "response_format.json_schema.strict must be a boolean, not %s", type_name(strict));
            if (sch && !json_is_object(sch) && !json_is_boolean(sch))
                return BAD("invalid_type", "response_format.json_schema.schema",
                           "response_format.json_schema.schema must be a JSON Schema (an object), not %s",
                           type_name(sch));
            /* no schema: any JSON object, as json_object */
            if (set_grammar(p, "response_format.json_schema.schema", sch, NULL, 0, e))
                return -1;
        } else if (strcmp(type, "text"))
            return BAD("invalid_value", "response_format.type", "response_format type \"%.40s\" is unknown; it must "
                       "be \"text\", \"json_object\" or \"json_schema\"", type);
    }
    json_t *js = field(root, "json_schema");
    if (js) {
        if (!json_is_object(js) && !json_is_boolean(js))
            return BAD("invalid_type", "json_schema", "json_schema must be a JSON Schema (an object), not %s",
                       type_name(js));
        if (set_grammar(p, "json_schema", js, NULL, 0, e))
            return -1;
    }
    json_t *g = field(root, "grammar");
    if (g) {
        if (!json_is_string(g))
            return BAD("invalid_type", "grammar", "grammar must be a string of GBNF, not %s", type_name(g));
        if (set_grammar(p, "grammar", NULL, json_string_value(g), json_string_length(g), e))
            return -1;
    }
    if (p->grammar && !lim->has_tok)
        return BAD("invalid_value", p->grammar_param, "%s: this model has no tokenizer; constrained decoding needs one",
                   p->grammar_param);
    return 0;
}

/* The generation fields shared by chat and completions. Defaults are OpenAI's: temperature 1,
 * top_p 1, no top-k, no min-p, no penalties; a random seed unless one is given. */
static int parse_generation(json_t *root, const sv_limits *lim, sv_params *p, sv_error *e)
{
    p->sp = cdx_sampler_defaults();
    p->sp.temp = 1.0f;
    p->sp.top_k = 0;
    p->sp.top_p = 1.0f;
    p->sp.min_p = 0.0f;
    p->sp.repeat_penalty = 1.0f;
    p->sp.presence_penalty = 0.0f;
    p->sp.frequency_penalty = 0.0f;
    p->speculative = true;
    if (get_bool(root, "speculative", &p->speculative, e))
        return -1;
    json_int_t x;
    bool set = false;
    if (get_number(root, "temperature", 0, 2, &p->sp.temp, e) || get_number(root, "top_p", 0, 1, &p->sp.top_p, e) ||
        get_number(root, "min_p", 0, 1, &p->sp.min_p, e) ||
        get_number(root, "presence_penalty", -2, 2, &p->sp.presence_penalty, e) ||
        get_number(root, "frequency_penalty", -2, 2, &p->sp.frequency_penalty, e) ||
        get_number(root, "repetition_penalty", 1e-3, 100, &p->sp.repeat_penalty, e) ||
        get_number(root, "repeat_penalty", 1e-3, 100, &p->sp.repeat_penalty, e))
        return -1;
    x = 0;
    if (get_int(root, "top_k", 0, INT32_MAX, &x, &set, e))
        return -1;
    if (set)
        p->sp.top_k = (int32_t)x;
    set = false;
    if (get_int(root, "repeat_last_n", 0, 1 << 20, &x, &set, e))
        return -1;
    if (set)
        p->sp.repeat_last_n = (int32_t)x;
    if (get_int(root, "seed", INT64_MIN, INT64_MAX, &x, &p->seed_set, e))
        return -1;
    if (p->seed_set)
        p->sp.seed = (uint64_t)x;
    set = false;
    if (get_int(root, "max_tokens", 1, SV_MAX_TOKENS_FIELD, &x, &set, e))
        return -1;
    if (set)
        p->max_tokens = x;
    set = false;
    if (get_int(root, "max_completion_tokens", 1, SV_MAX_TOKENS_FIELD, &x, &set, e))
        return -1;
    if (set)
        p->max_tokens = x;
    /* n choices, each the same request with seed + i; at most OpenAI's 128, and no more than the
     * server's queue holds (they are queued together) */
    const int max_n = lim->max_n > 0 && lim->max_n < SV_MAX_N ? lim->max_n : SV_MAX_N;
    x = 1;
    if (get_int(root, "n", INT32_MIN, INT32_MAX, &x, NULL, e))
        return -1;
    if (x < 1 || x > max_n)
        return BAD("invalid_value", "n", "n is %lld; it must be between 1 and %d%s", (long long)x, max_n,
                   max_n < SV_MAX_N ? " (the server's --max-queue)" : "");
    p->n = (int)x;
    /* best_of = n is n; more candidates than choices would need ranking them by their logprobs */
    json_int_t bo = x;
    if (get_int(root, "best_of", INT32_MIN, INT32_MAX, &bo, NULL, e))
        return -1;
    if (bo < x)
        return BAD("invalid_value", "best_of", "best_of is %lld; it must be at least n (%lld)", (long long)bo,
                   (long long)x);
    if (bo > x)
        return BAD("invalid_value", "best_of", "best_of is %lld and n is %lld: choosing the best %lld of %lld "
                   "candidates is not supported; best_of must equal n (or be left out)", (long long)bo, (long long)x,
                   (long long)x, (long long)bo);
    const char *s = NULL;
    if (get_string(root, "model", &s, e) || get_string(root, "user", &s, e))
        return -1;
    if (get_bool(root, "stream", &p->stream, e) || get_bool(root, "ignore_eos", &p->ignore_eos, e) ||
        get_bool(root, "return_tokens", &p->return_tokens, e))
        return -1;
    json_t *so = field(root, "stream_options");
    if (so) {
        if (!json_is_object(so))
            return BAD("invalid_type", "stream_options", "stream_options must be an object, not %s", type_name(so));
        json_t *iu = field(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return BAD("invalid_type", "stream_options.include_usage",
                       "stream_options.include_usage must be a boolean, not %s", type_name(iu));
        p->include_usage = iu && json_is_true(iu);
    }
    if (parse_constraints(root, lim, p, e))
        return -1;
    json_t *echo = field(root, "echo");
    if (echo && !json_is_boolean(echo))
        return BAD("invalid_type", "echo", "echo must be a boolean, not %s", type_name(echo));
    if (echo && json_is_true(echo))
        return BAD("invalid_value", "echo", "echo is not supported");
    json_t *suffix = field(root, "suffix");
    if (suffix)
        return BAD("invalid_value", "suffix", "suffix is not supported");
    return parse_stop(root, p, e);
}

/* logit_bias: {"token id": bias in [-100, 100]} (OpenAI's shape and range). */
static int parse_logit_bias(json_t *root, const sv_limits *lim, sv_params *p, sv_error *e)
{
    json_t *lb = field(root, "logit_bias");
    if (!lb)
        return 0;
    if (!json_is_object(lb))
        return BAD("invalid_type", "logit_bias", "logit_bias must be an object of token id: bias, not %s",
                   type_name(lb));
    size_t n = json_object_size(lb);
    if (n > (size_t)lim->n_vocab)
        return BAD("invalid_value", "logit_bias", "logit_bias has %zu entries; the vocabulary has %lld tokens", n,
                   (long long)lim->n_vocab);
    if (!n)
        return 0;
    p->bias = malloc(n * sizeof *p->bias);
    if (!p->bias)
        return sv_fail(e, 500, "server_error", "out_of_memory", "logit_bias", "out of memory");
    const char *key;
    json_t *v;
    int32_t k = 0;
    json_object_foreach(lb, key, v) {
        char *end = NULL;
        errno = 0;
        long long id = strtoll(key, &end, 10);
        if (*key < '0' || *key > '9' || *end || errno || id >= lim->n_vocab)
            return BAD("invalid_value", "logit_bias", "logit_bias key \"%.40s\" is not a token id in [0, %lld)", key,
                       (long long)lim->n_vocab);
        if (!json_is_number(v))
            return BAD("invalid_type", "logit_bias", "logit_bias[\"%s\"] must be a number, not %s", key, type_name(v));
        double b = json_number_value(v);
        if (!(b >= -100 && b <= 100))
            return BAD("invalid_value", "logit_bias", "logit_bias[\"%s\"] is %g; it must be between -100 and 100", key, b);
        p->bias[k++] = (cdx_logit_bias){ .id = (int32_t)id, .bias = (float)b };
    }
    p->sp.bias = p->bias;
    p->sp.n_bias = k;
    return 0;
}

static int parse_logprobs(json_t *root, sv_params *p, sv_error *e)
{
    json_int_t x = 0;
    bool set = false;
    if (p->kind == SV_CHAT) {
        if (get_bool(root, "logprobs", &p->logprobs, e) ||
            get_int(root, "top_logprobs", 0, CDX_MAX_TOP, &x, &set, e))
            return -1;
        if (set && !p->logprobs)
            return BAD("invalid_value", "top_logprobs", "top_logprobs needs logprobs set to true");
        p->top_logprobs = (int)x;
        return 0;
    }
    json_t *v = field(root, "logprobs");
    if (v && json_is_boolean(v)) /* some clients send a boolean here: as chat's, without top */
        return p->logprobs = json_is_true(v), 0;
    if (get_int(root, "logprobs", 0, CDX_MAX_TOP, &x, &set, e))
        return -1;
    p->logprobs = set;
    p->top_logprobs = (int)x;
    return 0;
}

/* The name of the JSON key whose string holds byte offset `at` (for an invalid UTF-8 error). */
static void key_before(const char *body, size_t at, char *out, size_t cap)
{
    snprintf(out, cap, "%s", "");
    /* walk back to the opening quote of the string holding the bad byte */
    size_t i = at;
    while (i > 0 && !(body[i - 1] == '"' && (i < 2 || body[i - 2] != '\\')))
        i--;
    if (i == 0)
        return;
    i--; /* at the opening quote */
    size_t j = i;
    while (j > 0 && (body[j - 1] == ' ' || body[j - 1] == '\t' || body[j - 1] == '\n' || body[j - 1] == '\r'))
        j--;
    if (j == 0 || body[j - 1] != ':')
        return; /* an array element or an object key: no name to give */
    j--;
    while (j > 0 && (body[j - 1] == ' ' || body[j - 1] == '\t' || body[j - 1] == '\n' || body[j - 1] == '\r'))
        j--;
    if (j == 0 || body[j - 1] != '"')
        return;
    size_t end = j - 1, start = end;
    while (start > 0 && body[start - 1] != '"' && end - start < cap - 1)
        start--;
    size_t n = end - start;
    if (cdx_utf8_check(body + start, n) != n)
        return;
    memcpy(out, body + start, n);
    out[n] = 0;
}


/* ---- LoRA adapters: llama-server's "lora" list ---- */

int sv_lora_list_parse(const json_t *arr, const char *param, const sv_limits *lim, float *scales, sv_error *e)
{
    if (!json_is_array(arr))
        return BAD("invalid_type", param, "%s must be an array of objects with \"id\" and \"scale\" fields, not %s",
                   param, type_name(arr));
    for (int i = 0; i < lim->n_lora; i++)
        scales[i] = 0.0f;
    if (json_array_size(arr) && !lim->n_lora) {
        if (lim->lora_owner)
            return BAD("invalid_value", param, "%s: this model has no LoRA adapters; the server's adapters (serve "
                       "--lora) belong to model \"%s\"", param, lim->lora_owner);
        return BAD("invalid_value", param, "%s: this server has no LoRA adapters (serve --lora NAME=DIR)", param);
    }
    size_t i;
    json_t *v;
    json_array_foreach((json_t *)arr, i, v) {
        char key[96], b[64];
        snprintf(key, sizeof key, "%s[%zu]", param, i);
        if (!json_is_object(v))
            return BAD("invalid_type", key, "%s must be an object {\"id\": N, \"scale\": F}, not %s", key, type_name(v));
        json_t *id = json_object_get(v, "id"), *sc = json_object_get(v, "scale");
        int k = -1;
        if (json_is_integer(id)) {
            json_int_t x = json_integer_value(id);
            if (x < 0 || x >= lim->n_lora)
                return BAD("invalid_value", key, "%s.id is %lld; this server's LoRA adapters are 0..%d (GET "
                           "/lora-adapters lists them)", key, (long long)x, lim->n_lora - 1);
            k = (int)x;
        } else if (json_is_string(id)) {
            for (int a = 0; a < lim->n_lora && k < 0; a++)
                if (!strcmp(lim->lora_names[a], json_string_value(id)))
                    k = a;
            if (k < 0) {
                char names[512] = "";
                size_t w = 0;
                for (int a = 0; a < lim->n_lora && w < sizeof names - 80; a++)
                    w += (size_t)snprintf(names + w, sizeof names - w, "%s%s", a ? ", " : "", lim->lora_names[a]);
                show(id, b, sizeof b);
                return BAD("invalid_value", key, "%s.id is %s; no LoRA adapter has that name (this server has: %s)",
                           key, b, names);
            }
        } else {
            return BAD(id ? "invalid_type" : "missing_required_parameter", key, "%s.id must be an adapter's index or "
                       "name, not %s", key, id ? type_name(id) : "missing");
        }
        double d = 0; /* llama-server: an entry without "scale" is 0 */
        if (sc && !json_is_null(sc)) {
            if (!json_is_number(sc))
                return BAD("invalid_type", key, "%s.scale must be a number, not %s", key, type_name(sc));
            d = json_number_value(sc);
            if (!isfinite(d) || fabs(d) > 1e6) {
                show(sc, b, sizeof b);
                return BAD("invalid_value", key, "%s.scale is %s; it must be a finite number of magnitude at most 1e6",
                           key, b);
            }
        }
        scales[k] = (float)d;
    }
    return 0;
}

static int parse_lora(json_t *root, const sv_limits *lim, sv_params *p, sv_error *e)
{
    json_t *l = field(root, "lora");
    if (!l)
        return 0;
    if (sv_lora_list_parse(l, "lora", lim, p->lora_scale, e))
        return -1;
    p->lora_given = json_array_size(l) > 0; /* [] : the server's defaults, as llama-server takes it */
    return 0;
}

int sv_parse(const char *body, size_t len, sv_kind kind, const sv_limits *lim, sv_params *p, sv_error *e)
{
    *p = (sv_params){ .kind = kind, .add_generation_prompt = true, .grammars = lim->grammars };
    size_t bad = cdx_utf8_check(body, len);
    if (bad != len) {
        char key[64];
        key_before(body, bad, key, sizeof key);
        return BAD("invalid_encoding", key[0] ? key : NULL, "the body is not valid UTF-8 at byte %zu%s%s", bad,
                   key[0] ? ", in " : "", key);
    }
    json_error_t je;
    p->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!p->root) /* jansson's texts name its own flags for some errors: those get ours */
        return BAD("invalid_json", NULL, "the body is not valid JSON: %s (line %d, column %d)",
                   json_error_code(&je) == json_error_null_character ? "a string holds \\u0000 (NUL), which is not allowed"
                   : json_error_code(&je) == json_error_duplicate_key ? "an object has a duplicate key"
                                                                       : je.text,
                   je.line, je.column);
    if (!json_is_object(p->root))
        return BAD("invalid_json", NULL, "the body must be a JSON object, not %s", type_name(p->root));
    json_t *root = p->root;
    switch (kind) {
    case SV_CHAT:
        if (parse_messages(root, lim, p, e))
            return -1;
        break;
    case SV_COMPLETION:
        if (parse_prompt(root, lim, p, e) || parse_images_field(root, lim, p, e))
            return -1;
        break;
    case SV_TOKENIZE: {
        json_t *c = json_object_get(root, "content");
        if (!c || json_is_null(c))
            return BAD("missing_required_parameter", "content", "content is required");
        if (!json_is_string(c))
            return BAD("invalid_type", "content", "content must be a string, not %s", type_name(c));
        if (!lim->has_tok)
            return BAD("invalid_value", "content", "this model has no tokenizer");
        p->text = json_string_value(c);
        p->text_len = json_string_length(c);
        return get_bool(root, "add_special", &p->add_special, e);
    }
    case SV_DETOKENIZE: {
        json_t *t = json_object_get(root, "tokens");
        if (!t || json_is_null(t))
            return BAD("missing_required_parameter", "tokens", "tokens is required");
        if (!json_is_array(t))
            return BAD("invalid_type", "tokens", "tokens must be an array of token ids, not %s", type_name(t));
        if (!lim->has_tok)
            return BAD("invalid_value", "tokens", "this model has no tokenizer");
        return get_ids(t, "tokens", lim, p, e);
    }
    }
    if (parse_generation(root, lim, p, e) || parse_logit_bias(root, lim, p, e) || parse_logprobs(root, p, e) ||
        parse_lora(root, lim, p, e))
        return -1;
    if (p->force && p->grammar)
        return BAD("invalid_value", "tool_choice", "tool_choice forces a tool call, and %s constrains the reply too; "
                   "give one of them", p->grammar_param);
    p->image_opts = field(root, "image_opts");
    if (p->image_opts && !json_is_object(p->image_opts))
        return BAD("invalid_type", "image_opts", "image_opts must be an object of processor settings, not %s",
                   type_name(p->image_opts));
    if (p->image_opts && !p->n_img)
        return BAD("invalid_value", "image_opts", "image_opts is given but the request has no images");
    if (!lim->has_tok && (kind == SV_CHAT || p->n_stop))
        return BAD("invalid_value", kind == SV_CHAT ? "messages" : "stop", "this model has no tokenizer: %s",
                   kind == SV_CHAT ? "chat needs one" : "stop strings need one");
    return 0;
}

void sv_params_free(sv_params *p)
{
    json_decref(p->messages);
    json_decref(p->extra);
    json_decref(p->root);
    free(p->ids);
    free(p->bias);
    for (int i = 0; i < p->n_img; i++) {
        free(p->img[i]);
        if (p->tiles)
            cdx_image_tiles_free(&p->tiles[i]);
    }
    free(p->tiles);
    free(p->req_img);
    cdx_grammar_free(p->grammar);
    *p = (sv_params){0};
}

