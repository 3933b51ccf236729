/* caldrix text layer: chat templates (a Jinja interpreter with Python Jinja2's semantics, in the
 * environment transformers uses for apply_chat_template).
 *
 *   cdx_err err = {0};
 *   cdx_tmpl *t = NULL;
 *   if (cdx_tmpl_parse(src, strlen(src), &t, &err) < 0) { fprintf(stderr, "%s\n", err.msg); ... }
 *   char *text; size_t n;
 *   if (cdx_tmpl_render(t, vars, NULL, &text, &n, &err) == 0) { fwrite(text, 1, n, stdout); free(text); }
 *   cdx_tmpl_free(t);
 */
#ifndef CALDRIX_TEMPLATE_H
#define CALDRIX_TEMPLATE_H

#include "caldrix/base.h"

#ifdef __cplusplus
extern "C" {
#endif

struct json_t; /* jansson */

typedef struct cdx_tmpl cdx_tmpl; /* immutable once parsed; renders may run on many threads */

/* Limits of one render. Zero fields take the defaults. A render that passes one fails with
 * CDX_ETEMPLATE ("template error at line L col C: ... limit ..."), never crashes. */
typedef struct cdx_tmpl_opts {
    size_t max_output_bytes;  /* default 64 MiB */
    size_t max_memory_bytes;  /* all values of one render; default 512 MiB */
    uint64_t max_steps;       /* evaluated nodes + loop iterations; default 50 million */
    int max_depth;            /* nesting of expressions, statements and macro calls; default 1000 */
    int64_t now_s;            /* strftime_now's clock (Unix seconds, local time zone); 0: the real clock */
} cdx_tmpl_opts;

/* Parses a template (UTF-8). On failure returns CDX_ETEMPLATE (or CDX_ENOMEM) and err->msg reads
 * "template syntax error at line L col C: ...". *out owns the template; free with cdx_tmpl_free. */
CDX_API int cdx_tmpl_parse(const char *src, size_t len, cdx_tmpl **out, cdx_err *err);
CDX_API void cdx_tmpl_free(cdx_tmpl *t); /* NULL: no-op */

/* Renders with the keys of vars (a JSON object; borrowed; NULL: none) as template variables,
 * plus the globals raise_exception and strftime_now. *out is a heap NUL-terminated string
 * (free()), *out_len its length (the text may hold NULs). Errors: CDX_ETEMPLATE with
 * "template error at line L col C: MSG" (MSG is raise_exception's own text when the template
 * raised), CDX_EINVAL when vars is not an object. */
CDX_API int cdx_tmpl_render(const cdx_tmpl *t, const struct json_t *vars, const cdx_tmpl_opts *opts,
                            char **out, size_t *out_len, cdx_err *err);

/* A model's chat template and the variables transformers passes beside it.
 * model: a folder (chat_template.jinja, chat_template.json, or tokenizer_config.json's
 * chat_template; special tokens from tokenizer_config.json and special_tokens_map.json) or a
 * .gguf file (tokenizer.chat_template; special tokens from tokenizer.ggml.*_token_id).
 * name: a named template when chat_template is a list of {name, template} (NULL: "default").
 * On success *source is a heap NUL-terminated string (free()) and *tokens a new JSON object
 * {"bos_token": "...", "eos_token": "...", ...} (json_decref). */
CDX_API int cdx_chat_template_load(const char *model, const char *name, char **source,
                                   struct json_t **tokens, cdx_err *err);

/* The chat template a model is run with: one rule for `run --chat` and `serve`.
 * file (--chat-template FILE) when given: it must read and parse, else an error naming it;
 * else the model's own template (model: a folder or .gguf; NULL: a model without files, such as
 * the bundled one); else ChatML (<|im_start|>role\ncontent<|im_end|>\n ..., then
 * <|im_start|>assistant\n), with note saying why (no template, or the model's does not parse or
 * cannot be read) for the caller to show. tokens: the special tokens the model's files name
 * (tokenizer_config.json / special_tokens_map.json, or the GGUF's); with ChatML, tok's BOS/EOS
 * where the files name none (tok may be NULL). A rendered ChatML prompt gets the tokenizer's own
 * BOS when tokenized (chatml true); any other template carries its own special tokens.
 * Free with cdx_chat_setup_close (also after a failure; a zeroed struct is fine). */
typedef struct cdx_tok cdx_tok;
typedef struct cdx_chat_setup {
    cdx_tmpl *tmpl;             /* what chat renders with; owned */
    struct json_t *tokens;      /* the special tokens it sees; owned */
    bool chatml;                /* ChatML stands in for the model's template */
    char note[1536];            /* why ChatML stands in ("" when it does not) */
} cdx_chat_setup;
CDX_API int cdx_chat_setup_open(const char *model, const char *file, const cdx_tok *tok, cdx_chat_setup *out,
                                cdx_err *err);
CDX_API void cdx_chat_setup_close(cdx_chat_setup *c); /* NULL: no-op */

/* Convenience for chat: vars gets messages, add_generation_prompt, tools/documents (null unless
 * given in extra), the special tokens, then every key of extra (borrowed; may be NULL). */
CDX_API int cdx_chat_render(const cdx_tmpl *t, const struct json_t *messages, bool add_generation_prompt,
                            const struct json_t *tokens, const struct json_t *extra,
                            char **out, size_t *out_len, cdx_err *err);

#ifdef __cplusplus
}
#endif
#endif
