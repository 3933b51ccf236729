/* Tokenizers from GGUF metadata (tokenizer.ggml.*), behaving as llama.cpp's llama-vocab.cpp:
 * "llama" = SentencePiece merges by score, "gpt2" = byte-level BPE with the pre-tokenizer regexes
 * named by tokenizer.ggml.pre, "bert" = WordPiece with llama.cpp's "▁" word starts. */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* One row per tokenizer.ggml.pre family: the regexes llama.cpp applies in turn (each splits the
 * pieces of the one before), and the flags it sets. Source: llama.cpp src/llama-vocab.cpp
 * (llm_tokenizer_bpe and llama_vocab::impl::load). */
#define LLAMA3_RE "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

static const struct pre_row {
    const char *names;  /* space-separated tokenizer.ggml.pre values */
    const char *re[6];
    bool ignore_merges, add_bos, clean_spaces;
} k_pre[] = {
    { "default", { "[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_RE, "\\p{N}+", "[0-9][0-9][0-9]" }, false, false, true },
    { "llama3 llama-v3 llama-bpe falcon3 pixtral dbrx smaug-bpe", { LLAMA3_RE }, true, true, true },
    { "deepseek-llm",
      { "[\r\n]",
        "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
        "\\s+$",
        "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
        "\\p{N}+" }, false, false, false },
    { "deepseek-coder", { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}" }, false, false, false },
    { "falcon", { "[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_RE, "[0-9][0-9][0-9]" }, false, false, true },
    { "starcoder refact command-r smollm codeshell exaone minerva-7b", { "\\p{N}", GPT2_RE }, false, false, true },
    { "gpt-2 phi-2 jina-es jina-de jina-v2-es jina-v2-de mpt olmo jais roberta-bpe jina-v1-en jina-v2-code exaone4",
      { GPT2_RE }, false, false, true },
    { "qwen2 deepseek-r1-qwen stablelm2 megrez",
      { "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      false, false, false },
    { "chatglm-bpe glm4", { LLAMA3_RE }, false, false, true },
    { "poro-chat bloom gpt3-finnish", { " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+" }, false, false, true },
    { "viking", { " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+", "\\p{N}" }, false, false, false },
    { "tekken",
      { "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      true, true, false },
};

/* Names whose llama.cpp clean_spaces is false although their family's is true. */
static const char *const k_no_clean[] = { "command-r", "smollm", "qwen2", "deepseek-r1-qwen", "megrez", "tekken", "viking", "poro-chat" };

static bool name_in(const char *list, const char *name, size_t n)
{
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ' ');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && !memcmp(p, name, n))
            return true;
        p += l;
        while (*p == ' ') p++;
    }
    return false;
}

static bool key_bool(const cdx_gguf *g, const char *k, bool def)
{
    bool b;
    return cdx_gguf_get_bool(g, k, &b) ? b : def;
}

static int32_t key_id(const cdx_gguf *g, const char *k, int32_t def, uint32_t n_vocab)
{
    uint64_t v;
    if (!cdx_gguf_get_u64(g, k, &v))
        return def;
    return v < n_vocab ? (int32_t)v : def;
}

static const cdx_gguf_value *arr(const cdx_gguf *g, const char *k, uint32_t elem)
{
    const cdx_gguf_kv *kv = cdx_gguf_find(g, k);
    if (!kv || kv->val.type != CDX_GGUF_ARRAY || kv->val.arr_type != elem)
        return NULL;
    return &kv->val;
}

static int gguf_load(cdx_tok *t, const cdx_gguf *g, cdx_err *err)
{
    cdx_gguf_str ms, ps = { NULL, 0 };
    int rc;
    if (!cdx_gguf_get_str(g, "tokenizer.ggml.model", &ms))
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.model is missing: the file holds no tokenizer", t->name);
    bool has_pre = cdx_gguf_get_str(g, "tokenizer.ggml.pre", &ps);
#define MODEL_IS(s) (ms.len == strlen(s) && !memcmp(ms.ptr, s, ms.len))
    if (MODEL_IS("llama")) t->model = MODEL_SPM;
    else if (MODEL_IS("gpt2")) t->model = MODEL_BPE;
    else if (MODEL_IS("bert")) t->model = MODEL_WPM_LLAMA;
    else
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tokenizer.ggml.model is \"%.*s\"; supported: llama, gpt2, bert",
                           t->name, (int)(ms.len > 64 ? 64 : ms.len), ms.ptr);
    const cdx_gguf_value *toks = arr(g, "tokenizer.ggml.tokens", CDX_GGUF_STRING);
    if (!toks)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.tokens is missing or not an array of strings", t->name);
    if (toks->n == 0 || toks->n > (1u << 26))
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.tokens has %llu entries; expected 1..%u", t->name,
                           (unsigned long long)toks->n, 1u << 26);
    uint32_t n = (uint32_t)toks->n;
    const cdx_gguf_kv *skv = cdx_gguf_find(g, "tokenizer.ggml.scores");
    const cdx_gguf_value *scores = skv && skv->val.type == CDX_GGUF_ARRAY &&
                                   (skv->val.arr_type == CDX_GGUF_F32 || skv->val.arr_type == CDX_GGUF_I32) ? &skv->val : NULL;
    if (skv && !scores)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.scores is not an array of f32", t->name);
    if (scores && scores->n < n)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.scores has %llu entries for %u tokens", t->name,
                           (unsigned long long)scores->n, n);
    const cdx_gguf_value *types = arr(g, "tokenizer.ggml.token_type", CDX_GGUF_I32);
    if (cdx_gguf_find(g, "tokenizer.ggml.token_type") && !types)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.token_type is not an array of i32", t->name);
    if (types && types->n < n)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %u tokens", t->name,
                           (unsigned long long)types->n, n);
    if ((rc = tk_set_vocab_size(t, n, err)) < 0)
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t attr = CDX_TOK_NORMAL;
        if (types) {
            static const uint8_t k_type[] = { 0, CDX_TOK_NORMAL, CDX_TOK_UNKNOWN, CDX_TOK_CONTROL, CDX_TOK_USER_DEFINED,
                                              CDX_TOK_UNUSED, CDX_TOK_BYTE };
            int64_t ty;
            if (!cdx_gguf_arr_i64(types, i, &ty)) /* i32 elements always convert */
                return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.token_type[%u] is not an integer", t->name, i);
            attr = ty >= 1 && ty <= 6 ? k_type[ty] : CDX_TOK_UNUSED;
        }
        const cdx_gguf_str *s = &toks->str_items[i];
        if (s->len > (1u << 20))
            return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.tokens[%u] is %llu bytes", t->name, i, (unsigned long long)s->len);
        if ((rc = tk_set_token(t, i, s->ptr, (size_t)s->len, attr, err)) < 0)
            return rc;
        t->score[i] = scores ? (float)cdx_gguf_arr_f64(scores, i) : 0.0f;
        if (attr & (CDX_TOK_CONTROL | CDX_TOK_USER_DEFINED | CDX_TOK_UNKNOWN))
            if ((rc = tk_add_added(t, (int32_t)i, false, false, false, (attr & CDX_TOK_USER_DEFINED) == 0, false)) < 0)
                return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }

    /* defaults as llama.cpp sets them per vocabulary type, then the file's keys */
    bool add_bos = false, add_eos = false, add_sep = false, add_space_prefix = false;
    t->bos = t->eos = t->unk = t->sep = t->pad = -1;
    if (t->model == MODEL_SPM) {
        t->bos = 1; t->eos = 2; t->unk = 0;
        add_bos = true; add_space_prefix = true;
    } else if (t->model == MODEL_WPM_LLAMA) {
        t->bos = 101; t->unk = 100; t->sep = 102; t->pad = 0;
        add_bos = true; add_sep = true;
        t->llama_cleanup = true;
    }
    if (t->model == MODEL_BPE) {
        t->byte_level = true;
        t->bos = 11; t->eos = 11;
        const struct pre_row *row = NULL;
        const char *pre = has_pre ? ps.ptr : "default";
        size_t pre_len = has_pre ? (size_t)ps.len : 7;
        for (size_t i = 0; i < sizeof k_pre / sizeof *k_pre && !row; i++)
            if (name_in(k_pre[i].names, pre, pre_len))
                row = &k_pre[i];
        if (!row)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tokenizer.ggml.pre is \"%.*s\", a pre-tokenizer caldrix does not know",
                               t->name, (int)(pre_len > 64 ? 64 : pre_len), pre);
        t->ignore_merges = row->ignore_merges;
        add_bos = row->add_bos;
        t->llama_cleanup = row->clean_spaces;
        for (size_t i = 0; i < sizeof k_no_clean / sizeof *k_no_clean; i++)
            if (strlen(k_no_clean[i]) == pre_len && !memcmp(k_no_clean[i], pre, pre_len))
                t->llama_cleanup = false;
        for (int i = 0; i < 6 && row->re[i]; i++) {
            tk_pre p = { .type = PRE_SPLIT, .behavior = SPLIT_ISOLATED };
            /* std::regex (which llama.cpp runs) reads '$' as the end of the piece only */
            if (!(p.re = tk_regex(row->re[i], strlen(row->re[i]), PCRE2_DOLLAR_ENDONLY, err, t->name)))
                return err->code;
            tk_pre *q = realloc(t->pre, (t->n_pre + 1) * sizeof *q);
            if (!q) { pcre2_code_free(p.re); return cdx_err_set(err, CDX_ENOMEM, "out of memory"); }
            t->pre = q;
            q[t->n_pre++] = p;
        }
        tk_dec *d = calloc(1, sizeof *d);
        if (!d) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        d->type = DEC_BYTELEVEL;
        t->dec = d; t->n_dec = 1;
    }
    t->bos = key_id(g, "tokenizer.ggml.bos_token_id", t->bos, n);
    t->eos = key_id(g, "tokenizer.ggml.eos_token_id", t->eos, n);
    t->eot = key_id(g, "tokenizer.ggml.eot_token_id", -1, n);
    t->unk = key_id(g, "tokenizer.ggml.unknown_token_id", t->unk, n);
    t->sep = key_id(g, "tokenizer.ggml.seperator_token_id", t->sep, n);
    t->pad = key_id(g, "tokenizer.ggml.padding_token_id", t->pad, n);
    if (t->bos >= (int32_t)n) t->bos = -1;
    if (t->eos >= (int32_t)n) t->eos = -1;
    if (t->unk >= (int32_t)n) t->unk = -1;
    if (t->sep >= (int32_t)n) t->sep = -1;
    if (t->pad >= (int32_t)n) t->pad = -1;
    add_bos = key_bool(g, "tokenizer.ggml.add_bos_token", add_bos);
    add_eos = key_bool(g, "tokenizer.ggml.add_eos_token", add_eos);
    add_sep = key_bool(g, "tokenizer.ggml.add_sep_token", add_sep);
    add_space_prefix = key_bool(g, "tokenizer.ggml.add_space_prefix", add_space_prefix);

    if (t->model == MODEL_SPM) {
        /* llama.cpp: a space before the text and after each special token, spaces as ▁ */
        tk_pre *p = calloc(1, sizeof *p);
        tk_dec *d = calloc(4, sizeof *d);
        if (!p || !d) { free(p); free(d); return cdx_err_set(err, CDX_ENOMEM, "out of memory"); }
        p->type = PRE_METASPACE;
        p->str = tk_strndup("\xe2\x96\x81", 3);
        p->str_len = 3;
        p->prepend_scheme = add_space_prefix ? PREPEND_AFTER_SPECIAL : PREPEND_NEVER;
        t->pre = p; t->n_pre = 1;
        d[0] = (tk_dec){ .type = DEC_REPLACE, .a = tk_strndup("\xe2\x96\x81", 3), .a_len = 3, .b = tk_strndup(" ", 1), .b_len = 1 };
        d[1] = (tk_dec){ .type = DEC_BYTEFALLBACK };
        d[2] = (tk_dec){ .type = DEC_FUSE };
        t->n_dec = 3;
        if (add_space_prefix) {
            d[3] = (tk_dec){ .type = DEC_STRIP, .strip_cp = ' ', .strip_start = 1 };
            t->n_dec = 4;
            t->spm_strip_first = true;
        }
        t->dec = d;
        if (!p->str || !d[0].a || !d[0].b) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    } else if (t->model == MODEL_WPM_LLAMA) {
        tk_pre *p = calloc(1, sizeof *p);
        tk_dec *d = calloc(2, sizeof *d);
        if (!p || !d) { free(p); free(d); return cdx_err_set(err, CDX_ENOMEM, "out of memory"); }
        p->type = PRE_WPM_LLAMA;
        p->lowercase = key_bool(g, "tokenizer.ggml.normalizer.lowercase", true);
        p->strip_accents = key_bool(g, "tokenizer.ggml.normalizer.strip_accents", p->lowercase);
        t->pre = p; t->n_pre = 1;
        d[0] = (tk_dec){ .type = DEC_REPLACE, .a = tk_strndup("\xe2\x96\x81", 3), .a_len = 3, .b = tk_strndup(" ", 1), .b_len = 1 };
        d[1] = (tk_dec){ .type = DEC_FUSE };
        t->dec = d; t->n_dec = 2;
        if (!d[0].a || !d[0].b) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }

    if ((rc = tk_finish(t, err)) < 0)
        return rc;
    if (t->model == MODEL_BPE) {
        const cdx_gguf_value *m = arr(g, "tokenizer.ggml.merges", CDX_GGUF_STRING);
        if (!m)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.merges is missing or not an array of strings", t->name);
        for (uint64_t i = 0; i < m->n; i++) {
            const cdx_gguf_str *s = &m->str_items[i];
            /* "left right", split at the first space after the first byte (llama.cpp) */
            const char *sp = s->len > 1 ? memchr(s->ptr + 1, ' ', (size_t)s->len - 1) : NULL;
            if (!sp)
                return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.ggml.merges[%llu] is not \"left right\"", t->name,
                                   (unsigned long long)i);
            size_t ll = (size_t)(sp - s->ptr);
            int32_t a = tk_lookup(t, s->ptr, ll), b = tk_lookup(t, sp + 1, (size_t)s->len - ll - 1);
            if (a < 0 || b < 0)
                continue; /* llama.cpp keeps such ranks, but they can never match a symbol */
            if (tk_add_merge(t, a, b, (uint32_t)i) < 0)
                return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        }
    }
    /* post-processing: BOS / EOS (llama.cpp), [CLS] text [SEP] for BERT */
    t->has_pp = true;
    if (add_bos && t->bos >= 0) {
        t->pp_pre = malloc(sizeof(int32_t));
        if (!t->pp_pre) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        t->pp_pre[t->n_pp_pre++] = t->bos;
    }
    int32_t post = add_eos && t->eos >= 0 ? t->eos : add_sep && t->sep >= 0 ? t->sep : -1;
    if (post >= 0) {
        t->pp_post = malloc(sizeof(int32_t));
        if (!t->pp_post) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        t->pp_post[t->n_pp_post++] = post;
    }
    t->add_bos = t->n_pp_pre > 0;
    t->add_eos = add_eos && t->eos >= 0;
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    int32_t eom = key_id(g, "tokenizer.ggml.eom_token_id", -1, n);
    if (eom >= 0) t->eog[eom] = 1;
    cdx_gguf_str ct;
    if (cdx_gguf_get_str(g, "tokenizer.chat_template", &ct))
        t->chat_template = tk_strndup(ct.ptr, (size_t)ct.len);
    if (t->bos >= 0) t->bos_text = tk_strndup(t->pool.s + t->off[t->bos], t->len[t->bos]);
    if (t->eos >= 0) t->eos_text = tk_strndup(t->pool.s + t->off[t->eos], t->len[t->eos]);
    return 0;
}

int cdx_tok_open_gguf(const cdx_gguf *g, cdx_tok **out, cdx_err *err)
{
    *out = NULL;
    cdx_tok *t = tk_new();
    if (!t)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    const char *nm = g->path ? g->path : "<gguf>";
    t->name = tk_strndup(nm, strlen(nm));
    int rc = gguf_load(t, g, err);
    if (rc < 0) {
        cdx_tok_close(t);
        return rc;
    }
    *out = t;
    return 0;
}
