/* Chat templates: the public API over the Jinja interpreter, and finding a model's template and
 * special tokens the way transformers does (chat_template.jinja, then chat_template.json, then
 * tokenizer_config.json's chat_template; special tokens as its special_tokens_map). */
#include "caldrix/format.h"
#include "caldrix/template.h"
#include "caldrix/tokenizer.h"
#include "text/jinja.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct cdx_tmpl {
    jtemplate t;
};

int cdx_tmpl_parse(const char *src, size_t len, cdx_tmpl **out, cdx_err *err)
{
    *out = NULL;
    if (!src && len)
        return cdx_err_set(err, CDX_EINVAL, "template: NULL source");
    cdx_tmpl *t = calloc(1, sizeof *t);
    if (!t)
        return cdx_err_set(err, CDX_ENOMEM, "template: out of memory");
    t->t.arena.cap_bytes = 0;
    t->t.cache = ja_cache_new();
    int rc = jinja_parse(&t->t, src ? src : "", len, err);
    if (rc < 0) {
        cdx_tmpl_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void cdx_tmpl_free(cdx_tmpl *t)
{
    if (!t)
        return;
    ja_free_all(&t->t.arena);
    ja_cache_free(t->t.cache);
    free(t);
}

int cdx_tmpl_render(const cdx_tmpl *t, const json_t *vars, const cdx_tmpl_opts *opts, char **out, size_t *out_len,
                    cdx_err *err)
{
    return jinja_render(&t->t, vars, opts, out, out_len, err);
}

int cdx_chat_render(const cdx_tmpl *t, const json_t *messages, bool add_generation_prompt, const json_t *tokens,
                    const json_t *extra, char **out, size_t *out_len, cdx_err *err)
{
    *out = NULL;
    json_t *vars = json_object();
    if (!vars)
        return cdx_err_set(err, CDX_ENOMEM, "template: out of memory");
    /* the order transformers builds them in: messages, tools, documents, add_generation_prompt,
     * then the special tokens, then the caller's keyword arguments */
    if (messages)
        json_object_set(vars, "messages", (json_t *)messages);
    else
        json_object_set_new(vars, "messages", json_array());
    json_object_set_new(vars, "tools", json_null());
    json_object_set_new(vars, "documents", json_null());
    json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt));
    if (tokens && json_is_object(tokens))
        json_object_update(vars, (json_t *)tokens);
    if (extra && json_is_object(extra))
        json_object_update(vars, (json_t *)extra);
    int rc = cdx_tmpl_render(t, vars, NULL, out, out_len, err);
    json_decref(vars);
    return rc;
}

/* ---- finding a model's template ---- */

static const char *const k_token_keys[] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", NULL,
};

/* A special token in tokenizer_config.json: "text" or {"content": "text", ...}. */
static json_t *token_text(json_t *v)
{
    if (json_is_string(v))
        return json_incref(v);
    if (json_is_object(v)) {
        json_t *c = json_object_get(v, "content");
        if (json_is_string(c))
            return json_incref(c);
    }
    return NULL;
}

static void add_tokens_from(json_t *tokens, json_t *cfg)
{
    if (!json_is_object(cfg))
        return;
    for (int i = 0; k_token_keys[i]; i++) {
        if (json_object_get(tokens, k_token_keys[i]))
            continue;
        json_t *t = token_text(json_object_get(cfg, k_token_keys[i]));
        if (t)
            json_object_set_new(tokens, k_token_keys[i], t);
    }
    json_t *extra = json_object_get(cfg, "additional_special_tokens");
    if (json_is_array(extra) && !json_object_get(tokens, "additional_special_tokens")) {
        json_t *arr = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(extra, i, v) {
            json_t *t = token_text(v);
            if (t)
                json_array_append_new(arr, t);
        }
        json_object_set_new(tokens, "additional_special_tokens", arr);
    }
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static json_t *load_json(const char *path, cdx_err *err)
{
    /* integers as reals: tokenizer_config.json's model_max_length is often 1e30 written out in
     * full, which no 64-bit integer holds; we read only strings from these files */
    json_error_t je;
    json_t *j = json_load_file(path, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    if (!j)
        cdx_err_set(err, CDX_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    return j;
}

/* chat_template as a string, or a list of {"name", "template"} (pick `name`, default "default"). */
static int pick_template(json_t *ct, const char *name, const char *path, char **source, cdx_err *err)
{
    if (json_is_string(ct)) {
        if (name && strcmp(name, "default"))
            return cdx_err_set(err, CDX_ENOTFOUND, "%s: chat_template has no template named \"%s\"", path, name);
        *source = strndup(json_string_value(ct), json_string_length(ct));
        return *source ? 0 : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    if (json_is_array(ct)) {
        const char *want = name ? name : "default";
        size_t i;
        json_t *v;
        json_array_foreach(ct, i, v) {
            json_t *n = json_object_get(v, "name"), *t = json_object_get(v, "template");
            if (json_is_string(n) && json_is_string(t) && !strcmp(json_string_value(n), want)) {
                *source = strndup(json_string_value(t), json_string_length(t));
                return *source ? 0 : cdx_err_set(err, CDX_ENOMEM, "out of memory");
            }
        }
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: chat_template has no template named \"%s\"", path, want);
    }
    return cdx_err_set(err, CDX_EFORMAT, "%s: chat_template is a %s; expected a string or a list of {name, template}",
                       path, ct ? "non-string value" : "missing value");
}

/* need: a missing template is an error; else *source stays NULL and the tokens still come. */
static int load_dir(const char *dir_in, const char *name, bool need, char **source, json_t **tokens, cdx_err *err)
{
    char path[4096], dir[3072];
    if (strlen(dir_in) >= sizeof dir)
        return cdx_err_set(err, CDX_EINVAL, "%.200s...: path too long", dir_in);
    snprintf(dir, sizeof dir, "%s", dir_in);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = 0;
    int rc = 0;
    json_t *cfg = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (file_exists(path)) {
        cfg = load_json(path, err);
        if (!cfg)
            return CDX_EFORMAT;
    }
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (file_exists(path)) {
        size_t n;
        if (name && strcmp(name, "default"))
            rc = cdx_err_set(err, CDX_ENOTFOUND, "%s: holds one template (default); there is no template named \"%s\"",
                             path, name);
        else
            rc = cdx_file_read_all(path, (size_t)16 << 20, source, &n, err);
    } else {
        snprintf(path, sizeof path, "%s/chat_template.json", dir);
        if (file_exists(path)) {
            json_t *j = load_json(path, err);
            if (!j) {
                rc = CDX_EFORMAT;
            } else {
                rc = pick_template(json_is_object(j) ? json_object_get(j, "chat_template") : NULL, name, path, source, err);
                json_decref(j);
            }
        } else if (cfg && json_object_get(cfg, "chat_template")) {
            snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
            rc = pick_template(json_object_get(cfg, "chat_template"), name, path, source, err);
        } else if (need) {
            rc = cdx_err_set(err, CDX_ENOTFOUND,
                             "%s: no chat template (looked for chat_template.jinja, chat_template.json and "
                             "tokenizer_config.json's chat_template)", dir);
        }
    }
    if (rc < 0) {
        json_decref(cfg);
        return rc;
    }
    *tokens = json_object();
    add_tokens_from(*tokens, cfg);
    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    if (file_exists(path)) {
        json_error_t je;
        json_t *m = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
        add_tokens_from(*tokens, m);
        json_decref(m);
    }
    json_decref(cfg);
    return 0;
}

static int load_gguf(const char *path, const char *name, bool need, char **source, json_t **tokens, cdx_err *err)
{
    cdx_gguf *g = NULL;
    int rc = cdx_gguf_open(path, &g, err);
    if (rc < 0)
        return rc;
    char key[256];
    if (name && strcmp(name, "default"))
        snprintf(key, sizeof key, "tokenizer.chat_template.%s", name);
    else
        snprintf(key, sizeof key, "tokenizer.chat_template");
    cdx_gguf_str s;
    const bool found = cdx_gguf_get_str(g, key, &s);
    if (!found && (need || (name && strcmp(name, "default")))) {
        if (name && strcmp(name, "default"))
            rc = cdx_err_set(err, CDX_ENOTFOUND, "%s: has no template named \"%s\" (key %s is absent)", path, name,
                             key);
        else
            rc = cdx_err_set(err, CDX_ENOTFOUND, "%s: no chat template (key %s is absent)", path, key);
        goto done;
    }
    if (found && !(*source = strndup(s.ptr, (size_t)s.len))) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    *tokens = json_object();
    static const struct { const char *key, *var; } ids[] = {
        { "tokenizer.ggml.bos_token_id", "bos_token" }, { "tokenizer.ggml.eos_token_id", "eos_token" },
        { "tokenizer.ggml.unknown_token_id", "unk_token" }, { "tokenizer.ggml.seperator_token_id", "sep_token" },
        { "tokenizer.ggml.padding_token_id", "pad_token" }, { "tokenizer.ggml.cls_token_id", "cls_token" },
        { "tokenizer.ggml.mask_token_id", "mask_token" },
    };
    const cdx_gguf_kv *vocab = cdx_gguf_find(g, "tokenizer.ggml.tokens");
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        uint64_t id;
        if (!vocab || vocab->val.type != CDX_GGUF_ARRAY || vocab->val.arr_type != CDX_GGUF_STRING ||
            !cdx_gguf_get_u64(g, ids[i].key, &id) || id >= vocab->val.n)
            continue;
        const cdx_gguf_str *t = &vocab->val.str_items[id];
        if (cdx_utf8_check(t->ptr, (size_t)t->len) != t->len)
            continue;
        json_object_set_new(*tokens, ids[i].var, json_stringn(t->ptr, (size_t)t->len));
    }
done:
    cdx_gguf_close(g);
    return rc;
}

static int load_model(const char *model, const char *name, bool need, char **source, json_t **tokens, cdx_err *err)
{
    *source = NULL;
    *tokens = NULL;
    struct stat st;
    if (stat(model, &st) != 0)
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: no such file or folder", model);
    if (S_ISDIR(st.st_mode))
        return load_dir(model, name, need, source, tokens, err);
    return load_gguf(model, name, need, source, tokens, err);
}

int cdx_chat_template_load(const char *model, const char *name, char **source, json_t **tokens, cdx_err *err)
{
    return load_model(model, name, true, source, tokens, err);
}

/* ---- the template a model is run with ---- */

/* ChatML: the stand-in for a model without a chat template (as llama.cpp's server and Ollama use). */
static const char k_chatml[] =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] if message['content'] is string else '') "
    "+ '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

int cdx_chat_setup_open(const char *model, const char *file, const cdx_tok *tok, cdx_chat_setup *c, cdx_err *err)
{
    *c = (cdx_chat_setup){0};
    char *src = NULL;
    size_t len = 0;
    int rc = 0;
    cdx_err merr = {0};
    if (model && (rc = load_model(model, NULL, false, &src, &c->tokens, &merr)) < 0) {
        if (file || rc == CDX_ENOMEM) { /* the template comes from FILE; the model's files must still read */
            *err = merr;
            return rc;
        }
        snprintf(c->note, sizeof c->note, "%.400s: the chat template cannot be read (%s); chat uses ChatML", model,
                 merr.msg);
        src = NULL;
    }
    if (file) {
        free(src);
        src = NULL;
        if ((rc = cdx_file_read_all(file, (size_t)16 << 20, &src, &len, err)) < 0)
            goto fail;
        if ((rc = cdx_tmpl_parse(src, len, &c->tmpl, err)) < 0) {
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%s", err->msg);
            rc = cdx_err_set(err, rc, "%s: %s", file, m);
            goto fail;
        }
    } else if (src && cdx_tmpl_parse(src, strlen(src), &c->tmpl, &merr) < 0) {
        snprintf(c->note, sizeof c->note, "%.400s: the chat template does not parse (%s); chat uses ChatML", model,
                 merr.msg);
    } else if (!src && !c->note[0]) {
        snprintf(c->note, sizeof c->note, "%s has no chat template; chat uses ChatML (--chat-template FILE gives one)",
                 model ? model : "the model");
    }
    free(src);
    src = NULL;
    if (!c->tmpl) {
        c->chatml = true;
        if ((rc = cdx_tmpl_parse(k_chatml, strlen(k_chatml), &c->tmpl, err)) < 0)
            goto fail;
    }
    if (!c->tokens && !(c->tokens = json_object())) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto fail;
    }
    /* ChatML on a model whose files name no special tokens: the tokenizer's (as transformers would
     * have them); a real template sees exactly what the model's files say, as in transformers */
    const char *bos = tok && c->chatml ? cdx_tok_bos_text(tok) : NULL, *eos = tok && c->chatml ? cdx_tok_eos_text(tok) : NULL;
    if (bos && !json_object_get(c->tokens, "bos_token"))
        json_object_set_new(c->tokens, "bos_token", json_string(bos));
    if (eos && !json_object_get(c->tokens, "eos_token"))
        json_object_set_new(c->tokens, "eos_token", json_string(eos));
    return 0;
fail:
    free(src);
    cdx_chat_setup_close(c);
    return rc;
}

void cdx_chat_setup_close(cdx_chat_setup *c)
{
    if (!c)
        return;
    cdx_tmpl_free(c->tmpl);
    json_decref(c->tokens);
    *c = (cdx_chat_setup){0};
}
