/* Hugging Face tokenizer files: tokenizer.json (the tokenizers library's serialisation),
 * tokenizer_config.json (transformers' settings), vocab.json + merges.txt (GPT-2 style). */
#include "text/tok_internal.h"
#include "text/tok_json_fast.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STEPS 16

static int bad(cdx_tok *t, cdx_err *err, const char *field, const char *why)
{
    return cdx_err_set(err, CDX_EFORMAT, "%s: %s %s", t->name, field, why);
}

static const char *jstr(json_t *o, const char *k) { json_t *v = json_object_get(o, k); return json_is_string(v) ? json_string_value(v) : NULL; }
static bool jbool(json_t *o, const char *k, bool def) { json_t *v = json_object_get(o, k); return json_is_boolean(v) ? json_is_true(v) : def; }

/* A token given as "text" or {"content": "text"} (tokenizer_config.json). */
static const char *tok_content(json_t *v)
{
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return jstr(v, "content");
    return NULL;
}

static int32_t lookup_z(cdx_tok *t, const char *s) { return s ? tk_lookup(t, s, strlen(s)) : -1; }

static char *dupz(const char *s) { return s ? tk_strndup(s, strlen(s)) : NULL; }

/* ---- normalizers ---- */

static int add_norm(cdx_tok *t, tk_norm n, cdx_err *err)
{
    if (t->n_norm >= MAX_STEPS)
        return bad(t, err, "normalizer", "has more than 16 steps");
    tk_norm *p = realloc(t->norm, (t->n_norm + 1) * sizeof *p);
    if (!p) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    t->norm = p;
    p[t->n_norm++] = n;
    return 0;
}

/* {"String": s} or {"Regex": r} */
static int pattern(cdx_tok *t, json_t *o, const char *what, char **str, size_t *len, pcre2_code **re, cdx_err *err)
{
    json_t *pat = json_object_get(o, "pattern");
    const char *s;
    if ((s = jstr(pat, "String"))) {
        *len = json_string_length(json_object_get(pat, "String"));
        *str = tk_strndup(s, *len);
        return *str ? 0 : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    if ((s = jstr(pat, "Regex"))) {
        *re = tk_regex(s, json_string_length(json_object_get(pat, "Regex")), 0, err, t->name);
        return *re ? 0 : err->code;
    }
    return cdx_err_set(err, CDX_EFORMAT, "%s: %s pattern is neither {\"String\": ...} nor {\"Regex\": ...}", t->name, what);
}

static int parse_norm(cdx_tok *t, json_t *o, int depth, cdx_err *err)
{
    if (json_is_null(o) || !o)
        return 0;
    const char *ty = jstr(o, "type");
    if (!ty || depth > 8)
        return bad(t, err, "normalizer", "has no \"type\"");
    tk_norm n = {0};
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(o, "normalizers");
        if (!json_is_array(a)) return bad(t, err, "normalizer Sequence", "has no \"normalizers\" array");
        size_t i; json_t *v;
        json_array_foreach(a, i, v) {
            int rc = parse_norm(t, v, depth + 1, err);
            if (rc < 0) return rc;
        }
        return 0;
    }
    if (!strcmp(ty, "NFC")) n.type = NORM_NFC;
    else if (!strcmp(ty, "NFD")) n.type = NORM_NFD;
    else if (!strcmp(ty, "NFKC")) n.type = NORM_NFKC;
    else if (!strcmp(ty, "NFKD")) n.type = NORM_NFKD;
    else if (!strcmp(ty, "Lowercase")) n.type = NORM_LOWER;
    else if (!strcmp(ty, "StripAccents")) n.type = NORM_STRIP_ACCENTS;
    else if (!strcmp(ty, "Prepend")) {
        const char *p = jstr(o, "prepend");
        if (!p) return bad(t, err, "normalizer Prepend", "has no \"prepend\" string");
        n.type = NORM_PREPEND;
        n.a_len = strlen(p);
        n.a = dupz(p);
    } else if (!strcmp(ty, "Replace")) {
        const char *c = jstr(o, "content");
        if (!c) return bad(t, err, "normalizer Replace", "has no \"content\" string");
        n.type = NORM_REPLACE;
        int rc = pattern(t, o, "normalizer Replace", &n.a, &n.a_len, &n.re, err);
        if (rc < 0) return rc;
        n.b_len = strlen(c);
        n.b = dupz(c);
    } else if (!strcmp(ty, "Strip")) {
        n.type = NORM_STRIP;
        n.left = jbool(o, "strip_left", true);
        n.right = jbool(o, "strip_right", true);
    } else if (!strcmp(ty, "BertNormalizer")) {
        n.type = NORM_BERT;
        n.clean_text = jbool(o, "clean_text", true);
        n.chinese = jbool(o, "handle_chinese_chars", true);
        n.lowercase = jbool(o, "lowercase", true);
        json_t *sa = json_object_get(o, "strip_accents");
        n.strip_accents = json_is_boolean(sa) ? json_is_true(sa) : n.lowercase; /* null follows lowercase */
    } else {
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: normalizer \"%s\" is not supported (supported: NFC, NFD, NFKC, "
                           "NFKD, Lowercase, StripAccents, Prepend, Replace, Strip, BertNormalizer, Sequence)", t->name, ty);
    }
    return add_norm(t, n, err);
}

/* ---- pre-tokenizers ---- */

static int add_pre(cdx_tok *t, tk_pre p, cdx_err *err)
{
    if (t->n_pre >= MAX_STEPS) {
        pcre2_code_free(p.re); free(p.str);
        return bad(t, err, "pre_tokenizer", "has more than 16 steps");
    }
    tk_pre *q = realloc(t->pre, (t->n_pre + 1) * sizeof *q);
    if (!q) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    t->pre = q;
    q[t->n_pre++] = p;
    return 0;
}

static int behavior(cdx_tok *t, json_t *o, int def, int *out, cdx_err *err)
{
    const char *b = jstr(o, "behavior");
    static const char *const names[] = { "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous" };
    *out = def;
    if (!b) return 0;
    for (int i = 0; i < 5; i++)
        if (!strcmp(b, names[i])) { *out = i; return 0; }
    return cdx_err_set(err, CDX_EFORMAT, "%s: split behavior \"%s\" is not one of Removed, Isolated, MergedWithPrevious, "
                       "MergedWithNext, Contiguous", t->name, b);
}

static int prepend_scheme(json_t *o)
{
    const char *s = jstr(o, "prepend_scheme");
    if (s) return !strcmp(s, "first") ? PREPEND_FIRST : !strcmp(s, "never") ? PREPEND_NEVER : PREPEND_ALWAYS;
    return jbool(o, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
}

static int parse_pre(cdx_tok *t, json_t *o, int depth, cdx_err *err)
{
    if (json_is_null(o) || !o)
        return 0;
    const char *ty = jstr(o, "type");
    if (!ty || depth > 8)
        return bad(t, err, "pre_tokenizer", "has no \"type\"");
    tk_pre p = {0};
    int rc;
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(o, "pretokenizers");
        if (!json_is_array(a)) return bad(t, err, "pre_tokenizer Sequence", "has no \"pretokenizers\" array");
        size_t i; json_t *v;
        json_array_foreach(a, i, v)
            if ((rc = parse_pre(t, v, depth + 1, err)) < 0) return rc;
        return 0;
    }
    if (!strcmp(ty, "Split")) {
        p.type = PRE_SPLIT;
        if ((rc = pattern(t, o, "pre_tokenizer Split", &p.str, &p.str_len, &p.re, err)) < 0) return rc;
        if ((rc = behavior(t, o, SPLIT_ISOLATED, &p.behavior, err)) < 0) { pcre2_code_free(p.re); free(p.str); return rc; }
        p.invert = jbool(o, "invert", false);
    } else if (!strcmp(ty, "ByteLevel")) {
        p.type = PRE_BYTELEVEL;
        p.add_prefix_space = jbool(o, "add_prefix_space", true);
        if (jbool(o, "use_regex", true) && !(p.re = tk_regex(tk_gpt2_regex, strlen(tk_gpt2_regex), 0, err, t->name)))
            return err->code;
        t->byte_level = true;
    } else if (!strcmp(ty, "Metaspace")) {
        const char *r = jstr(o, "replacement");
        p.type = PRE_METASPACE;
        p.str = dupz(r ? r : "\xe2\x96\x81");
        p.str_len = strlen(p.str);
        p.prepend_scheme = prepend_scheme(o);
        p.split = jbool(o, "split", true);
    } else if (!strcmp(ty, "Digits")) {
        p.type = PRE_DIGITS;
        p.individual = jbool(o, "individual_digits", false);
    } else if (!strcmp(ty, "Whitespace")) {
        p.type = PRE_WHITESPACE;
        if (!(p.re = tk_regex("\\w+|[^\\w\\s]+", 14, 0, err, t->name))) return err->code;
    } else if (!strcmp(ty, "WhitespaceSplit")) {
        p.type = PRE_WSSPLIT;
    } else if (!strcmp(ty, "BertPreTokenizer")) {
        p.type = PRE_BERT;
    } else if (!strcmp(ty, "Punctuation")) {
        p.type = PRE_PUNCT;
        if ((rc = behavior(t, o, SPLIT_ISOLATED, &p.behavior, err)) < 0) return rc;
    } else {
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: pre_tokenizer \"%s\" is not supported (supported: Split, ByteLevel, "
                           "Metaspace, Digits, Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation, Sequence)", t->name, ty);
    }
    return add_pre(t, p, err);
}

/* ---- decoders ---- */

static int add_dec(cdx_tok *t, tk_dec d, cdx_err *err)
{
    if (t->n_dec >= MAX_STEPS)
        return bad(t, err, "decoder", "has more than 16 steps");
    tk_dec *q = realloc(t->dec, (t->n_dec + 1) * sizeof *q);
    if (!q) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    t->dec = q;
    q[t->n_dec++] = d;
    return 0;
}

static int parse_dec(cdx_tok *t, json_t *o, int depth, cdx_err *err)
{
    if (json_is_null(o) || !o)
        return 0;
    const char *ty = jstr(o, "type");
    if (!ty || depth > 8)
        return bad(t, err, "decoder", "has no \"type\"");
    tk_dec d = {0};
    int rc;
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(o, "decoders");
        if (!json_is_array(a)) return bad(t, err, "decoder Sequence", "has no \"decoders\" array");
        size_t i; json_t *v;
        json_array_foreach(a, i, v)
            if ((rc = parse_dec(t, v, depth + 1, err)) < 0) return rc;
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) d.type = DEC_BYTELEVEL;
    else if (!strcmp(ty, "ByteFallback")) d.type = DEC_BYTEFALLBACK;
    else if (!strcmp(ty, "Fuse")) d.type = DEC_FUSE;
    else if (!strcmp(ty, "Metaspace")) {
        const char *r = jstr(o, "replacement");
        d.type = DEC_METASPACE;
        d.a = dupz(r ? r : "\xe2\x96\x81");
        d.a_len = strlen(d.a);
        d.prepend = prepend_scheme(o) != PREPEND_NEVER;
        if (d.prepend) t->spm_strip_first = t->meta_first_all = true;
    } else if (!strcmp(ty, "Strip")) {
        const char *c = jstr(o, "content");
        size_t adv;
        d.type = DEC_STRIP;
        d.strip_cp = c && *c ? tk_utf8_dec(c, strlen(c), &adv) : ' ';
        json_t *s = json_object_get(o, "start"), *e = json_object_get(o, "stop");
        d.strip_start = json_is_integer(s) && json_integer_value(s) > 0 ? (size_t)json_integer_value(s) : 0;
        d.strip_stop = json_is_integer(e) && json_integer_value(e) > 0 ? (size_t)json_integer_value(e) : 0;
        if (d.strip_start && d.strip_cp == ' ') t->spm_strip_first = true;
    } else if (!strcmp(ty, "Replace")) {
        const char *c = jstr(o, "content");
        if (!c) return bad(t, err, "decoder Replace", "has no \"content\" string");
        d.type = DEC_REPLACE;
        if ((rc = pattern(t, o, "decoder Replace", &d.a, &d.a_len, &d.re, err)) < 0) return rc;
        d.b = dupz(c);
        d.b_len = strlen(c);
    } else if (!strcmp(ty, "WordPiece")) {
        const char *p = jstr(o, "prefix");
        d.type = DEC_WORDPIECE;
        d.a = dupz(p ? p : "##");
        d.a_len = strlen(d.a);
        d.cleanup = jbool(o, "cleanup", true);
    } else if (!strcmp(ty, "BPEDecoder")) {
        const char *p = jstr(o, "suffix");
        d.type = DEC_BPE_SUFFIX;
        d.a = dupz(p ? p : "</w>");
        d.a_len = strlen(d.a);
    } else {
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: decoder \"%s\" is not supported (supported: ByteLevel, Metaspace, "
                           "ByteFallback, Fuse, Strip, Replace, WordPiece, BPEDecoder, Sequence)", t->name, ty);
    }
    return add_dec(t, d, err);
}

/* ---- post-processors (single sequence) ---- */

static int pp_add(int32_t **v, size_t *n, int32_t id)
{
    int32_t *p = realloc(*v, (*n + 1) * sizeof *p);
    if (!p) return CDX_ENOMEM;
    *v = p;
    p[(*n)++] = id;
    return 0;
}

static int parse_pp(cdx_tok *t, json_t *o, int depth, cdx_err *err)
{
    if (json_is_null(o) || !o)
        return 0;
    const char *ty = jstr(o, "type");
    if (!ty || depth > 8)
        return bad(t, err, "post_processor", "has no \"type\"");
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(o, "processors");
        if (!json_is_array(a)) return bad(t, err, "post_processor Sequence", "has no \"processors\" array");
        size_t i; json_t *v;
        json_array_foreach(a, i, v) {
            int rc = parse_pp(t, v, depth + 1, err);
            if (rc < 0) return rc;
        }
        return 0;
    }
    if (!strcmp(ty, "ByteLevel"))
        return 0; /* offsets only */
    if (!strcmp(ty, "TemplateProcessing")) {
        json_t *single = json_object_get(o, "single"), *st = json_object_get(o, "special_tokens");
        if (!json_is_array(single)) return bad(t, err, "post_processor TemplateProcessing", "has no \"single\" array");
        bool after = false;
        size_t i; json_t *it;
        t->has_pp = true;
        json_array_foreach(single, i, it) {
            json_t *sp = json_object_get(it, "SpecialToken");
            if (json_object_get(it, "Sequence")) { after = true; continue; }
            const char *name = jstr(sp, "id");
            if (!name) return bad(t, err, "post_processor TemplateProcessing", "has an item that is neither Sequence nor SpecialToken");
            json_t *ids = json_object_get(json_object_get(st, name), "ids");
            if (!json_is_array(ids))
                return cdx_err_set(err, CDX_EFORMAT, "%s: post_processor special token \"%s\" has no \"ids\"", t->name, name);
            size_t k; json_t *idv;
            json_array_foreach(ids, k, idv) {
                json_int_t id = json_integer_value(idv);
                if (!json_is_integer(idv) || id < 0 || id >= (json_int_t)t->n_vocab)
                    return cdx_err_set(err, CDX_EFORMAT, "%s: post_processor special token \"%s\" id is out of range", t->name, name);
                if (pp_add(after ? &t->pp_post : &t->pp_pre, after ? &t->n_pp_post : &t->n_pp_pre, (int32_t)id))
                    return cdx_err_set(err, CDX_ENOMEM, "out of memory");
            }
        }
        return 0;
    }
    if (!strcmp(ty, "BertProcessing") || !strcmp(ty, "RobertaProcessing")) {
        json_t *cls = json_object_get(o, "cls"), *sep = json_object_get(o, "sep");
        json_int_t c = json_integer_value(json_array_get(cls, 1)), s = json_integer_value(json_array_get(sep, 1));
        if (!json_is_integer(json_array_get(cls, 1)) || !json_is_integer(json_array_get(sep, 1)) || c < 0 || s < 0 ||
            c >= (json_int_t)t->n_vocab || s >= (json_int_t)t->n_vocab)
            return cdx_err_set(err, CDX_EFORMAT, "%s: post_processor %s needs \"cls\" and \"sep\" as [text, id] in range", t->name, ty);
        t->has_pp = true;
        if (pp_add(&t->pp_pre, &t->n_pp_pre, (int32_t)c) || pp_add(&t->pp_post, &t->n_pp_post, (int32_t)s))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        return 0;
    }
    return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: post_processor \"%s\" is not supported (supported: TemplateProcessing, "
                       "BertProcessing, RobertaProcessing, ByteLevel, Sequence)", t->name, ty);
}

/* ---- tokenizer_config.json ---- */

static const char *const k_llama_classes[] = { "LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                                               "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast" };

/* Applies tokenizer_config.json: special tokens, BOS/EOS policy, clean-up, chat template.
 * default_cleanup: the tokenizer class default when the key is absent. */
static int apply_config(cdx_tok *t, json_t *cfg, bool default_cleanup, cdx_err *err)
{
    t->cleanup_spaces = default_cleanup;
    if (!cfg)
        return 0;
    if (!json_is_object(cfg))
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer_config.json is not a JSON object", t->name);
    json_t *v;
    const char *bos = tok_content(json_object_get(cfg, "bos_token"));
    const char *eos = tok_content(json_object_get(cfg, "eos_token"));
    const char *pad = tok_content(json_object_get(cfg, "pad_token"));
    const char *unk = tok_content(json_object_get(cfg, "unk_token"));
    if (bos) { t->bos = lookup_z(t, bos); free(t->bos_text); t->bos_text = dupz(bos); }
    if (eos) { t->eos = lookup_z(t, eos); free(t->eos_text); t->eos_text = dupz(eos); }
    if (pad) t->pad = lookup_z(t, pad);
    if (unk && t->unk < 0) t->unk = lookup_z(t, unk);
    if (json_is_boolean(v = json_object_get(cfg, "clean_up_tokenization_spaces")))
        t->cleanup_spaces = json_is_true(v);
    if (json_is_string(v = json_object_get(cfg, "chat_template"))) {
        t->chat_template = dupz(json_string_value(v));
    } else if (json_is_array(v)) {
        size_t i; json_t *e;
        json_array_foreach(v, i, e) {
            const char *nm = jstr(e, "name"), *tpl = jstr(e, "template");
            if (tpl && nm && !strcmp(nm, "default") && !t->chat_template)
                t->chat_template = dupz(tpl);
        }
    }
    const char *cls = jstr(cfg, "tokenizer_class");
    bool llama = t->model == MODEL_SPM; /* tokenizer.model: transformers' LlamaTokenizer rules */
    for (size_t i = 0; cls && i < sizeof k_llama_classes / sizeof *k_llama_classes; i++)
        if (!strcmp(cls, k_llama_classes[i])) llama = true;
    if (llama) {
        /* transformers' LlamaTokenizerFast.update_post_processor: rebuilds the template from
         * add_bos_token (default true) and add_eos_token (default false). */
        bool ab = jbool(cfg, "add_bos_token", true), ae = jbool(cfg, "add_eos_token", false);
        if ((ab && t->bos < 0) || (ae && t->eos < 0))
            return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer_config.json asks to add %s but defines no such token",
                               t->name, ab && t->bos < 0 ? "bos_token" : "eos_token");
        t->n_pp_pre = t->n_pp_post = 0;
        t->has_pp = true;
        if ((ab && pp_add(&t->pp_pre, &t->n_pp_pre, t->bos)) || (ae && pp_add(&t->pp_post, &t->n_pp_post, t->eos)))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    return 0;
}

static void derive_flags(cdx_tok *t)
{
    t->add_bos = t->has_pp && t->n_pp_pre > 0 && (t->bos < 0 || t->pp_pre[0] == t->bos);
    if (t->add_bos && t->bos < 0) t->bos = t->pp_pre[0];
    t->add_eos = t->has_pp && t->n_pp_post > 0 && t->eos >= 0 && t->pp_post[t->n_pp_post - 1] == t->eos;
    if (t->bos >= 0 && !t->bos_text) { size_t n; const char *s = cdx_tok_text(t, t->bos, &n); t->bos_text = tk_strndup(s, n); }
    if (t->eos >= 0 && !t->eos_text) { size_t n; const char *s = cdx_tok_text(t, t->eos, &n); t->eos_text = tk_strndup(s, n); }
    if (t->eos >= 0) t->eog[t->eos] = 1;
}

/* ---- tokenizer.json ---- */

/* Copies model.vocab / model.merges from jansson values into entry lists (the slow path, and
 * vocab.json), with the same checks the fast scanner leaves to jansson. */
static int entries_from_json(cdx_tok *t, json_t *vocab, json_t *merges, tk_json_fast *f, cdx_err *err)
{
    memset(f, 0, sizeof *f);
    if (!json_is_object(vocab))
        return bad(t, err, "model.vocab", "is not an object of token -> id");
    f->vocab = malloc((json_object_size(vocab) + 1) * sizeof *f->vocab);
    if (!f->vocab) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    const char *k; json_t *v;
    json_object_foreach(vocab, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 26))
            return cdx_err_set(err, CDX_EFORMAT, "%s: model.vocab[\"%.64s\"] is not an id in 0..%d", t->name, k, (1 << 26) - 1);
        size_t off = f->pool.len, n = strlen(k); /* jansson keys are NUL-terminated */
        if (tk_str_put(&f->pool, k, n)) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        f->vocab[f->n_vocab++] = (tk_json_entry){ off, n, 0, 0, json_integer_value(v) };
    }
    if (!merges)
        return 0;
    if (!json_is_array(merges))
        return bad(t, err, "model.merges", "is not an array");
    f->has_merges = true;
    f->merges = malloc((json_array_size(merges) + 1) * sizeof *f->merges);
    if (!f->merges) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    size_t i; json_t *m;
    json_array_foreach(merges, i, m) {
        const char *l = NULL, *r = NULL;
        size_t ll = 0, rl = 0;
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            size_t n = json_string_length(m);
            const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
            if (!sp)
                return cdx_err_set(err, CDX_EFORMAT, "%s: model.merges[%zu] \"%.64s\" is not \"left right\"", t->name, i, s);
            l = s; ll = (size_t)(sp - s); r = sp + 1; rl = n - ll - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            l = json_string_value(json_array_get(m, 0)); ll = json_string_length(json_array_get(m, 0));
            r = json_string_value(json_array_get(m, 1)); rl = json_string_length(json_array_get(m, 1));
        } else {
            return cdx_err_set(err, CDX_EFORMAT, "%s: model.merges[%zu] is neither \"left right\" nor [left, right]", t->name, i);
        }
        size_t a = f->pool.len;
        if (tk_str_put(&f->pool, l, ll)) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        size_t b = f->pool.len;
        if (tk_str_put(&f->pool, r, rl)) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        f->merges[f->n_merges++] = (tk_json_entry){ a, ll, b, rl, 0 };
    }
    return 0;
}

static int load_json_tokens(cdx_tok *t, const tk_json_fast *f, json_t *added, cdx_err *err)
{
    /* size: the largest id + 1 over the model vocab and the added tokens */
    long long max_id = -1;
    for (size_t i = 0; i < f->n_vocab; i++) {
        if (f->vocab[i].id < 0 || f->vocab[i].id >= (1 << 26))
            return cdx_err_set(err, CDX_EFORMAT, "%s: model.vocab[\"%.*s\"] is not an id in 0..%d", t->name,
                               (int)(f->vocab[i].a_len > 64 ? 64 : f->vocab[i].a_len), f->pool.s + f->vocab[i].a_off, (1 << 26) - 1);
        if (f->vocab[i].id > max_id) max_id = f->vocab[i].id;
    }
    size_t i; json_t *a;
    json_array_foreach(added, i, a) {
        json_t *id = json_object_get(a, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 26) || !jstr(a, "content"))
            return cdx_err_set(err, CDX_EFORMAT, "%s: added_tokens[%zu] needs an \"id\" in 0..%d and a \"content\" string",
                               t->name, i, (1 << 26) - 1);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0)
        return bad(t, err, "model.vocab", "is empty");
    /* ids index arrays: refuse a sparse id space that would size them far past the token count */
    size_t count = f->n_vocab + json_array_size(added);
    if ((size_t)max_id >= 2 * count + 1024)
        return cdx_err_set(err, CDX_EFORMAT, "%s: token ids go up to %lld for %zu tokens; expected ids below %zu",
                           t->name, max_id, count, 2 * count + 1024);
    int rc = tk_set_vocab_size(t, (uint32_t)max_id + 1, err);
    if (rc < 0) return rc;
    for (size_t k = 0; k < f->n_vocab; k++)
        if ((rc = tk_set_token(t, (uint32_t)f->vocab[k].id, f->pool.s + f->vocab[k].a_off, f->vocab[k].a_len,
                               CDX_TOK_NORMAL, err)) < 0)
            return rc;
    json_array_foreach(added, i, a) {
        json_t *c = json_object_get(a, "content");
        bool special = jbool(a, "special", false);
        if ((rc = tk_set_token(t, (uint32_t)json_integer_value(json_object_get(a, "id")), json_string_value(c),
                               json_string_length(c), special ? CDX_TOK_CONTROL : CDX_TOK_USER_DEFINED, err)) < 0)
            return rc;
    }
    return 0;
}

static int register_added(cdx_tok *t, json_t *added)
{
    size_t i; json_t *a;
    json_array_foreach(added, i, a) {
        int rc = tk_add_added(t, (int32_t)json_integer_value(json_object_get(a, "id")), jbool(a, "lstrip", false),
                              jbool(a, "rstrip", false), jbool(a, "normalized", !jbool(a, "special", false)),
                              jbool(a, "special", false), jbool(a, "single_word", false));
        if (rc < 0) return rc;
    }
    return 0;
}

static int load_merges(cdx_tok *t, const tk_json_fast *f, cdx_err *err)
{
    for (size_t i = 0; i < f->n_merges; i++) {
        const tk_json_entry *e = &f->merges[i];
        const char *l = f->pool.s + e->a_off, *r = f->pool.s + e->b_off;
        int32_t a = tk_lookup(t, l, e->a_len), b = tk_lookup(t, r, e->b_len);
        if (a < 0 || b < 0)
            return cdx_err_set(err, CDX_EFORMAT, "%s: model.merges[%zu] uses \"%.*s\", which is not in the vocabulary",
                               t->name, i, (int)(a < 0 ? (e->a_len > 64 ? 64 : e->a_len) : (e->b_len > 64 ? 64 : e->b_len)),
                               a < 0 ? l : r);
        if (tk_add_merge(t, a, b, (uint32_t)i) < 0)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    return 0;
}

int tk_load_hf_json(cdx_tok *t, const char *json, size_t len, const char *cfg_text, size_t cfg_len, cdx_err *err)
{
    json_error_t je;
    tk_json_fast f;
    bool fast = tk_json_fast_split(json, len, &f) == 0;
    json_t *root = fast ? json_loadb(f.rest, f.rest_len, JSON_ALLOW_NUL, &je) : NULL, *cfg = NULL;
    if (!root) {
        /* the slow path: jansson over the whole file (and its message when that is malformed) */
        if (fast) tk_json_fast_free(&f);
        fast = false;
        memset(&f, 0, sizeof f);
        root = json_loadb(json, len, JSON_ALLOW_NUL, &je);
    }
    int rc = 0;
    if (!root)
        return cdx_err_set(err, CDX_EFORMAT, "%s: invalid JSON at line %d, column %d: %s", t->name, je.line, je.column, je.text);
    if (cfg_text && cfg_len) {
        cfg = json_loadb(cfg_text, cfg_len, JSON_DECODE_INT_AS_REAL, &je);
        if (!cfg) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer_config.json: invalid JSON at line %d, column %d: %s", t->name,
                             je.line, je.column, je.text);
            goto done;
        }
    }
    json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
    if (!json_is_object(root) || !json_is_object(model)) { rc = bad(t, err, "\"model\"", "is missing or not an object"); goto done; }
    if (added && !json_is_array(added)) { rc = bad(t, err, "\"added_tokens\"", "is not an array"); goto done; }
    const char *ty = jstr(model, "type");
    if (!ty) /* older files leave the type out */
        ty = json_object_get(model, "merges") ? "BPE" : json_object_get(model, "max_input_chars_per_word") ? "WordPiece" : "?";
    bool is_bpe = !strcmp(ty, "BPE");
    if (!is_bpe && strcmp(ty, "WordPiece")) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: model.type \"%s\" is not supported (supported: BPE, WordPiece)", t->name, ty);
        goto done;
    }
    t->model = is_bpe ? MODEL_BPE : MODEL_WORDPIECE;
    const char *pfx = jstr(model, "continuing_subword_prefix");
    if (!pfx && !is_bpe) pfx = "##";
    if (pfx && *pfx) { t->cont_prefix = dupz(pfx); t->cont_prefix_len = strlen(pfx); }
    const char *sfx = jstr(model, "end_of_word_suffix");
    if (sfx && *sfx) { t->eow_suffix = dupz(sfx); t->eow_suffix_len = strlen(sfx); }
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);
    json_t *mc = json_object_get(model, "max_input_chars_per_word");
    if (json_is_integer(mc) && json_integer_value(mc) > 0) t->wp_max_chars = (size_t)json_integer_value(mc);

    if (!fast && (rc = entries_from_json(t, json_object_get(model, "vocab"), is_bpe ? json_object_get(model, "merges") : NULL,
                                         &f, err)) < 0)
        goto done;
    if ((rc = load_json_tokens(t, &f, added, err)) < 0) goto done;
    if ((rc = register_added(t, added)) < 0) { rc = cdx_err_set(err, CDX_ENOMEM, "out of memory"); goto done; }
    /* added tokens only listed in tokenizer_config.json's added_tokens_decoder are not loaded:
     * tokenizer.json is the complete record for a fast tokenizer. */
    if ((rc = parse_norm(t, json_object_get(root, "normalizer"), 0, err)) < 0 ||
        (rc = parse_pre(t, json_object_get(root, "pre_tokenizer"), 0, err)) < 0 ||
        (rc = parse_dec(t, json_object_get(root, "decoder"), 0, err)) < 0)
        goto done;
    if ((rc = tk_finish(t, err)) < 0) goto done;
    if ((rc = parse_pp(t, json_object_get(root, "post_processor"), 0, err)) < 0) goto done;
    const char *unk = jstr(model, "unk_token");
    if (unk) t->unk = lookup_z(t, unk);
    if (is_bpe && (rc = load_merges(t, &f, err)) < 0)
        goto done;
    /* byte-fallback tokens act as bytes in pieces */
    if (t->byte_fallback)
        for (int b = 0; b < 256; b++)
            if (t->byte_tok[b] >= 0 && (t->attr[t->byte_tok[b]] & CDX_TOK_NORMAL))
                t->attr[t->byte_tok[b]] = CDX_TOK_BYTE;
    if ((rc = apply_config(t, cfg, !is_bpe, err)) < 0) goto done;
    derive_flags(t);
    rc = 0;
done:
    tk_json_fast_free(&f);
    json_decref(root);
    json_decref(cfg);
    return rc;
}

/* ---- vocab.json + merges.txt (GPT-2 style byte-level BPE) ---- */

int tk_load_vocab_merges(cdx_tok *t, const char *vocab, size_t vlen, const char *merges, size_t mlen, const char *cfg_text,
                         size_t cfg_len, cdx_err *err)
{
    json_error_t je;
    json_t *v = json_loadb(vocab, vlen, 0, &je), *cfg = NULL;
    int rc = 0;
    if (!v)
        return cdx_err_set(err, CDX_EFORMAT, "%s: invalid JSON at line %d, column %d: %s", t->name, je.line, je.column, je.text);
    if (cfg_text && cfg_len && !(cfg = json_loadb(cfg_text, cfg_len, JSON_DECODE_INT_AS_REAL, &je))) {
        json_decref(v);
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer_config.json: invalid JSON at line %d, column %d: %s", t->name,
                           je.line, je.column, je.text);
    }
    json_t *model = json_object(), *added = json_array();
    json_object_set(model, "vocab", v);
    /* added_tokens_decoder of tokenizer_config.json holds the special tokens */
    json_t *atd = json_object_get(cfg, "added_tokens_decoder");
    const char *k; json_t *e;
    json_object_foreach(atd, k, e) {
        char *end;
        long id = strtol(k, &end, 10);
        if (*end || id < 0 || !jstr(e, "content")) continue;
        json_t *a = json_deep_copy(e);
        json_object_set_new(a, "id", json_integer(id));
        json_array_append_new(added, a);
    }
    t->model = MODEL_BPE;
    tk_pre p = { .type = PRE_BYTELEVEL };
    t->byte_level = true;
    tk_json_fast f = {0};
    rc = entries_from_json(t, v, NULL, &f, err);
    if (rc == 0)
        rc = load_json_tokens(t, &f, added, err);
    tk_json_fast_free(&f);
    if (rc < 0 || (rc = register_added(t, added)) < 0) goto done;
    if (!(p.re = tk_regex(tk_gpt2_regex, strlen(tk_gpt2_regex), 0, err, t->name))) { rc = err->code; goto done; }
    if ((rc = add_pre(t, p, err)) < 0 || (rc = add_dec(t, (tk_dec){ .type = DEC_BYTELEVEL }, err)) < 0) goto done;
    if ((rc = tk_finish(t, err)) < 0) goto done;
    /* merges.txt: an optional "#version" line, then "left right" per line, rank = order */
    uint32_t rank = 0;
    size_t line = 0;
    for (size_t i = 0; i < mlen;) {
        const char *nl = memchr(merges + i, '\n', mlen - i);
        size_t e2 = nl ? (size_t)(nl - merges) : mlen, n = e2 - i;
        const char *s = merges + i;
        line++;
        i = e2 + 1;
        if (n && s[n - 1] == '\r') n--;
        if (!n || (line == 1 && n >= 8 && !memcmp(s, "#version", 8)))
            continue;
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) { rc = cdx_err_set(err, CDX_EFORMAT, "%s: merges.txt line %zu is not \"left right\"", t->name, line); goto done; }
        int32_t a = tk_lookup(t, s, (size_t)(sp - s)), b = tk_lookup(t, sp + 1, n - (size_t)(sp - s) - 1);
        if (a < 0 || b < 0) { rc = cdx_err_set(err, CDX_EFORMAT, "%s: merges.txt line %zu uses a token not in vocab.json", t->name, line); goto done; }
        if (tk_add_merge(t, a, b, rank++) < 0) { rc = cdx_err_set(err, CDX_ENOMEM, "out of memory"); goto done; }
    }
    if ((rc = apply_config(t, cfg, false, err)) < 0) goto done;
    derive_flags(t);
    rc = 0;
done:
    json_decref(v); json_decref(model); json_decref(added); json_decref(cfg);
    return rc;
}

/* ---- tokenizer.model (SentencePiece) needs the config too: shared here ---- */

int tk_apply_config_text(cdx_tok *t, const char *cfg_text, size_t cfg_len, cdx_err *err)
{
    json_error_t je;
    json_t *cfg = NULL;
    if (cfg_text && cfg_len && !(cfg = json_loadb(cfg_text, cfg_len, JSON_DECODE_INT_AS_REAL, &je)))
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer_config.json: invalid JSON at line %d, column %d: %s", t->name,
                           je.line, je.column, je.text);
    int rc = apply_config(t, cfg, false, err);
    json_decref(cfg);
    if (rc < 0) return rc;
    derive_flags(t);
    return 0;
}
