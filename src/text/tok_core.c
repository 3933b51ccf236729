/* Tokenizer core: the token table, hash maps, byte tables, accessors, open/close. */
#include "text/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

/* ---- growable buffers ---- */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem)
            return CDX_ENOMEM;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q)
        return CDX_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int tk_str_put(tk_str *b, const void *p, size_t n)
{
    /* p may point into b itself (pieces copied from earlier in the buffer) */
    uintptr_t cp = (uintptr_t)p, bs = (uintptr_t)b->s;
    bool inside = b->s && cp >= bs && cp < bs + b->cap;
    size_t at = inside ? (size_t)(cp - bs) : 0;
    if (grow((void **)&b->s, &b->cap, b->len + n + 1, 1))
        return CDX_ENOMEM;
    if (inside)
        p = b->s + at;
    if (n)
        memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
    return 0;
}

int tk_str_putc(tk_str *b, char c) { return tk_str_put(b, &c, 1); }

int tk_ids_push(tk_ids *v, int32_t id)
{
    if (v->n == v->cap && grow((void **)&v->v, &v->cap, v->n + 1, sizeof(int32_t)))
        return CDX_ENOMEM;
    v->v[v->n++] = id;
    return 0;
}

int tk_ids_append(tk_ids *v, const int32_t *p, size_t n)
{
    if (n == 0)
        return 0;
    if (grow((void **)&v->v, &v->cap, v->n + n, sizeof(int32_t)))
        return CDX_ENOMEM;
    memcpy(v->v + v->n, p, n * sizeof(int32_t));
    v->n += n;
    return 0;
}

char *tk_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- UTF-8 ---- */

size_t tk_utf8_len(uint8_t c)
{
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}

/* Decodes one code point of (already validated) UTF-8. */
uint32_t tk_utf8_dec(const char *s, size_t n, size_t *adv)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t l = tk_utf8_len(u[0]);
    if (l > n)
        l = 1;
    uint32_t cp;
    switch (l) {
    case 1: cp = u[0]; break;
    case 2: cp = ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu); break;
    case 3: cp = ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu); break;
    default: cp = ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) | ((u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu); break;
    }
    *adv = l;
    return cp;
}

int tk_utf8_enc(uint32_t cp, char out[4])
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- GPT-2 byte-level alphabet ----
 * GPT-2 (openai/gpt-2 encoder.py, bytes_to_unicode) maps the printable bytes '!'..'~', 0xA1..0xAC
 * and 0xAE..0xFF to themselves and the other 68 bytes, in order, to U+0100 onwards. */

static bool byte_printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

static uint32_t byte_cp(uint8_t b)
{
    if (byte_printable(b))
        return b;
    int n = 0;
    for (int i = 0; i < b; i++)
        if (!byte_printable(i))
            n++;
    return 256u + (uint32_t)n;
}

int tk_byte_to_utf8(uint8_t b, char out[4]) { return tk_utf8_enc(byte_cp(b), out); }

int tk_char_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    int n = 0;
    for (int i = 0; i < 256; i++)
        if (!byte_printable(i) && n++ == (int)(cp - 256))
            return i;
    return -1;
}

/* GPT-2's pre-tokenizer regex (tokenizers' ByteLevel with use_regex). */
const char *const tk_gpt2_regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

pcre2_code *tk_regex(const char *pat, size_t len, uint32_t extra, cdx_err *err, const char *what)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP | extra, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        cdx_err_set(err, CDX_EFORMAT, "%s: regex /%.*s/ does not compile at offset %zu: %s", what,
                    (int)(len > 200 ? 200 : len), pat, (size_t)eo, (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter when JIT is unavailable */
    return re;
}

/* ---- hashing ---- */

uint64_t tk_hash(const void *p, size_t n)
{
    /* FNV-1a over 8-byte words then the tail, finalised with a murmur mix. */
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8; n -= 8;
    }
    while (n--)
        h = (h ^ *s++) * 0x100000001b3ull;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull; h ^= h >> 33;
    return h;
}

int32_t tk_lookup(const cdx_tok *t, const char *s, size_t n)
{
    if (!t->map.slot)
        return -1;
    uint32_t i = (uint32_t)tk_hash(s, n) & t->map.mask;
    for (;;) {
        uint32_t v = t->map.slot[i];
        if (!v)
            return -1;
        uint32_t id = v - 1;
        if (t->len[id] == n && memcmp(t->pool.s + t->off[id], s, n) == 0)
            return (int32_t)id;
        i = (i + 1) & t->map.mask;
    }
}

static uint64_t pair_hash(uint64_t k) { k ^= k >> 31; k *= 0x9e3779b97f4a7c15ull; k ^= k >> 29; return k; }

int tk_add_merge(cdx_tok *t, int32_t l, int32_t r, uint32_t rank)
{
    size_t ln = t->len[l], rn = t->len[r];
    const char *rs = t->pool.s + t->off[r];
    if (t->cont_prefix_len && rn >= t->cont_prefix_len && !memcmp(rs, t->cont_prefix, t->cont_prefix_len)) {
        rs += t->cont_prefix_len; rn -= t->cont_prefix_len;
    }
    char stackbuf[256];
    char *buf = ln + rn <= sizeof stackbuf ? stackbuf : malloc(ln + rn);
    if (!buf)
        return CDX_ENOMEM;
    memcpy(buf, t->pool.s + t->off[l], ln);
    memcpy(buf + ln, rs, rn);
    int32_t nid = tk_lookup(t, buf, ln + rn);
    if (buf != stackbuf)
        free(buf);
    if (nid < 0)
        return 1; /* merged text not in the vocab: the merge can never apply */
    tk_pairmap *m = &t->merges;
    if ((m->n + 1) * 2 > (size_t)m->mask + 1 || !m->key) {
        uint32_t nm = m->key ? m->mask * 2 + 1 : 4095;
        uint64_t *nk = calloc((size_t)nm + 1, 8), *nv = calloc((size_t)nm + 1, 8);
        if (!nk || !nv) { free(nk); free(nv); return CDX_ENOMEM; }
        if (m->key)
            for (uint32_t i = 0; i <= m->mask; i++) {
                if (!m->key[i]) continue;
                uint32_t j = (uint32_t)pair_hash(m->key[i]) & nm;
                while (nk[j]) j = (j + 1) & nm;
                nk[j] = m->key[i]; nv[j] = m->val[i];
            }
        free(m->key); free(m->val);
        m->key = nk; m->val = nv; m->mask = nm;
    }
    uint64_t k = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
    uint32_t j = (uint32_t)pair_hash(k) & m->mask;
    while (m->key[j]) {
        if (m->key[j] == k)
            return 0; /* first (lowest) rank wins */
        j = (j + 1) & m->mask;
    }
    m->key[j] = k;
    m->val[j] = ((uint64_t)rank << 32) | (uint32_t)nid;
    m->n++;
    return 0;
}

/* ---- construction ---- */

cdx_tok *tk_new(void)
{
    cdx_tok *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->bos = t->eos = t->eot = t->pad = t->unk = t->sep = -1;
    for (int i = 0; i < 256; i++)
        t->byte_sym[i] = t->byte_tok[i] = -1;
    t->wp_max_chars = 100;
    tk_cache_init(&t->cache);
    return t;
}

int tk_set_vocab_size(cdx_tok *t, uint32_t n, cdx_err *err)
{
    if (n == 0 || n > (1u << 26))
        return cdx_err_set(err, CDX_EFORMAT, "%s: vocabulary size %u is out of range (1..%u)", t->name, n, 1u << 26);
    if (n <= t->n_vocab)
        return 0;
    uint32_t *off = realloc(t->off, n * sizeof *off), *len;
    if (off) t->off = off;
    len = realloc(t->len, n * sizeof *len);
    if (len) t->len = len;
    uint8_t *attr = realloc(t->attr, n);
    if (attr) t->attr = attr;
    float *score = realloc(t->score, n * sizeof *score);
    if (score) t->score = score;
    if (!off || !len || !attr || !score)
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory for %u tokens", t->name, n);
    for (uint32_t i = t->n_vocab; i < n; i++) {
        t->off[i] = 0; t->len[i] = 0; t->attr[i] = CDX_TOK_UNUSED; t->score[i] = 0;
    }
    t->n_vocab = n;
    return 0;
}

int tk_set_token(cdx_tok *t, uint32_t id, const char *s, size_t n, uint8_t attr, cdx_err *err)
{
    if (id >= t->n_vocab && tk_set_vocab_size(t, id + 1, err) < 0)
        return err ? err->code : CDX_ENOMEM;
    if (n > (1u << 20) || t->pool.len + n > UINT32_MAX)
        return cdx_err_set(err, CDX_EFORMAT, "%s: token %u is %zu bytes long", t->name, id, n);
    t->off[id] = (uint32_t)t->pool.len;
    t->len[id] = (uint32_t)n;
    t->attr[id] = attr;
    if (tk_str_put(&t->pool, s, n))
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", t->name);
    if (n > t->max_tok_len)
        t->max_tok_len = (uint32_t)n;
    return 0;
}

int tk_add_added(cdx_tok *t, int32_t id, bool lstrip, bool rstrip, bool normalized, bool special, bool single_word)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab || t->len[id] == 0)
        return 1;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id == id)
            return 0;
    tk_added *a = realloc(t->added, (t->n_added + 1) * sizeof *a);
    if (!a)
        return CDX_ENOMEM;
    t->added = a;
    a[t->n_added++] = (tk_added){ id, t->off[id], t->len[id], lstrip, rstrip, normalized, special, single_word };
    if (normalized)
        t->any_normalized_added = true;
    uint8_t c = (uint8_t)t->pool.s[t->off[id]];
    t->added_first[c >> 3] |= (uint8_t)(1u << (c & 7));
    return 0;
}

static int cmp_added(const void *a, const void *b, void *pool)
{
    const tk_added *x = a, *y = b;
    const char *p = pool;
    uint8_t cx = (uint8_t)p[x->off], cy = (uint8_t)p[y->off];
    if (cx != cy)
        return cx < cy ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1; /* longest first: leftmost-longest matching */
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Tokens llama.cpp treats as end-of-generation by their text. */
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "<|eom_id|>",
    "<|end_of_text|>", "<｜end▁of▁sentence｜>", "<|return|>", "<|call|>", "<|END_OF_TURN_TOKEN|>",
};

/* Marks: the special tokens that open or frame a tool call or a message channel in the chat formats
 * the server parses (server/sv_tools.c). A grammar may match such a token by its text, and a request
 * may keep its text although it skips special tokens (cdx_request.keep_marks), as llama.cpp keeps a
 * chat format's "preserved tokens": without them a model's own [TOOL_CALLS] token would vanish from
 * the text the calls are parsed from. */
static const char *const k_mark_texts[] = {
    "[TOOL_CALLS]", "<|tool_call|>", "<tool_call>", "</tool_call>", "<|python_tag|>",
    "<|channel|>", "<|constrain|>", "<|message|>", "<|start|>",
};

int tk_finish(cdx_tok *t, cdx_err *err)
{
    uint32_t cap = 1024;
    while (cap < t->n_vocab * 2u)
        cap *= 2;
    free(t->map.slot);
    t->map.slot = calloc(cap, sizeof(uint32_t));
    free(t->eog);
    free(t->mark);
    t->eog = calloc(t->n_vocab, 1);
    t->mark = calloc(t->n_vocab, 1);
    if (!t->map.slot || !t->eog || !t->mark)
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", t->name);
    t->map.mask = cap - 1;
    /* Model tokens first, then added ones: for a duplicate text the first id wins. */
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t id = 0; id < t->n_vocab; id++) {
            if (!t->len[id])
                continue;
            bool is_added = (t->attr[id] & (CDX_TOK_CONTROL | CDX_TOK_USER_DEFINED)) != 0;
            if (is_added != (pass == 1))
                continue;
            const char *s = t->pool.s + t->off[id];
            uint32_t i = (uint32_t)tk_hash(s, t->len[id]) & t->map.mask;
            bool dup = false;
            while (t->map.slot[i]) {
                uint32_t o = t->map.slot[i] - 1;
                if (t->len[o] == t->len[id] && !memcmp(t->pool.s + t->off[o], s, t->len[id])) { dup = true; break; }
                i = (i + 1) & t->map.mask;
            }
            if (!dup)
                t->map.slot[i] = id + 1;
        }
    for (int b = 0; b < 256; b++) {
        char u[4];
        int n = tk_byte_to_utf8((uint8_t)b, u);
        t->byte_sym[b] = tk_lookup(t, u, (size_t)n);
        char hx[8];
        static const char *hex = "0123456789ABCDEF";
        hx[0] = '<'; hx[1] = '0'; hx[2] = 'x'; hx[3] = hex[b >> 4]; hx[4] = hex[b & 15]; hx[5] = '>';
        t->byte_tok[b] = tk_lookup(t, hx, 6);
    }
    /* added tokens grouped by first byte, longest first inside a group (leftmost-longest match) */
    for (size_t i = 0; i < t->n_added; i++) {
        t->added[i].off = t->off[t->added[i].id];
        t->added[i].len = t->len[t->added[i].id];
    }
    if (t->n_added)
        qsort_r(t->added, t->n_added, sizeof *t->added, cmp_added, t->pool.s);
    for (int c = 0, k = 0; c <= 256; c++) {
        while ((size_t)k < t->n_added && (uint8_t)t->pool.s[t->added[k].off] < c)
            k++;
        t->added_idx[c] = (uint32_t)k;
    }
    for (size_t i = 0; i < sizeof k_eog_texts / sizeof *k_eog_texts; i++) {
        int32_t id = tk_lookup(t, k_eog_texts[i], strlen(k_eog_texts[i]));
        if (id >= 0 && (t->attr[id] & CDX_TOK_CONTROL))
            t->eog[id] = 1;
    }
    for (size_t i = 0; i < sizeof k_mark_texts / sizeof *k_mark_texts; i++) {
        int32_t id = tk_lookup(t, k_mark_texts[i], strlen(k_mark_texts[i]));
        if (id >= 0 && (t->attr[id] & CDX_TOK_CONTROL))
            t->mark[id] = 1;
    }
    if (t->eot < 0) {
        static const char *const eot_texts[] = { "<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<EOT>" };
        for (size_t i = 0; i < 5 && t->eot < 0; i++)
            t->eot = tk_lookup(t, eot_texts[i], strlen(eot_texts[i]));
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    return 0;
}

/* ---- open / close ---- */

static void free_steps(cdx_tok *t)
{
    for (size_t i = 0; i < t->n_norm; i++) { free(t->norm[i].a); free(t->norm[i].b); pcre2_code_free(t->norm[i].re); }
    for (size_t i = 0; i < t->n_pre; i++) { free(t->pre[i].str); pcre2_code_free(t->pre[i].re); }
    for (size_t i = 0; i < t->n_dec; i++) { free(t->dec[i].a); free(t->dec[i].b); pcre2_code_free(t->dec[i].re); }
    free(t->norm); free(t->pre); free(t->dec);
}

void cdx_tok_close(cdx_tok *t)
{
    if (!t)
        return;
    free_steps(t);
    free(t->pool.s); free(t->off); free(t->len); free(t->attr); free(t->score);
    free(t->map.slot); free(t->merges.key); free(t->merges.val);
    free(t->cont_prefix); free(t->eow_suffix); free(t->added);
    free(t->pp_pre); free(t->pp_post); free(t->eog); free(t->mark);
    free(t->chat_template); free(t->bos_text); free(t->eos_text);
    tk_cache_free(&t->cache);
    free((char *)t->name);
    free(t);
}

static int read_opt(const char *dir, const char *file, size_t max, char **out, size_t *len, cdx_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct stat st;
    *out = NULL; *len = 0;
    if (stat(path, &st) != 0)
        return 0;
    return cdx_file_read_all(path, max, out, len, err) < 0 ? err->code : 1;
}

#define TK_MAX_JSON ((size_t)512 << 20)

int cdx_tok_open_json(const char *json, size_t json_len, const char *config, size_t config_len, const char *name,
                      cdx_tok **out, cdx_err *err)
{
    *out = NULL;
    cdx_tok *t = tk_new();
    if (!t)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    t->name = tk_strndup(name ? name : "tokenizer.json", strlen(name ? name : "tokenizer.json"));
    int rc = tk_load_hf_json(t, json, json_len, config, config_len, err);
    if (rc < 0) {
        cdx_tok_close(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* transformers (4.43+) reads chat_template.jinja, or chat_template.json, before the template in
 * tokenizer_config.json. */
static int dir_chat_template(const char *dir, cdx_tok *t, cdx_err *err)
{
    char *s = NULL;
    size_t n = 0;
    int rc = read_opt(dir, "chat_template.jinja", 16u << 20, &s, &n, err);
    if (rc == 1) {
        free(t->chat_template);
        t->chat_template = s;
        return 0;
    }
    if (rc < 0 || (rc = read_opt(dir, "chat_template.json", 16u << 20, &s, &n, err)) <= 0)
        return rc;
    json_error_t je;
    json_t *o = json_loadb(s, n, 0, &je);
    free(s);
    json_t *v = json_object_get(o, "chat_template");
    if (!json_is_string(v)) {
        json_decref(o);
        return cdx_err_set(err, CDX_EFORMAT, "%s/chat_template.json: no \"chat_template\" string", dir);
    }
    free(t->chat_template);
    t->chat_template = tk_strndup(json_string_value(v), json_string_length(v));
    json_decref(o);
    return 0;
}

int cdx_tok_open_dir(const char *dir, cdx_tok **out, cdx_err *err)
{
    *out = NULL;
    char *json = NULL, *cfg = NULL, *a = NULL, *b = NULL;
    size_t jl = 0, cl = 0, al = 0, bl = 0;
    int rc;
    char name[4200];
    if ((rc = read_opt(dir, "tokenizer_config.json", 64u << 20, &cfg, &cl, err)) < 0)
        return rc;
    if ((rc = read_opt(dir, "tokenizer.json", TK_MAX_JSON, &json, &jl, err)) < 0)
        goto done;
    if (rc == 1) {
        snprintf(name, sizeof name, "%s/tokenizer.json", dir);
        rc = cdx_tok_open_json(json, jl, cfg, cl, name, out, err);
        if (rc < 0) *out = NULL;
        goto done;
    }
    cdx_tok *t = tk_new();
    if (!t) { rc = cdx_err_set(err, CDX_ENOMEM, "out of memory"); goto done; }
    if ((rc = read_opt(dir, "tokenizer.model", 256u << 20, &a, &al, err)) < 0) { cdx_tok_close(t); goto done; }
    if (rc == 1) {
        snprintf(name, sizeof name, "%s/tokenizer.model", dir);
        t->name = tk_strndup(name, strlen(name));
        rc = tk_load_spm_model(t, (const uint8_t *)a, al, cfg, cl, err);
    } else {
        if ((rc = read_opt(dir, "vocab.json", TK_MAX_JSON, &a, &al, err)) < 0 ||
            (rc == 1 && (rc = read_opt(dir, "merges.txt", TK_MAX_JSON, &b, &bl, err)) < 0)) {
            cdx_tok_close(t);
            goto done;
        }
        if (rc != 1) {
            cdx_tok_close(t);
            rc = cdx_err_set(err, CDX_ENOTFOUND, "%s: no tokenizer.json, tokenizer.model or vocab.json + merges.txt", dir);
            goto done;
        }
        snprintf(name, sizeof name, "%s/vocab.json", dir);
        t->name = tk_strndup(name, strlen(name));
        rc = tk_load_vocab_merges(t, a, al, b, bl, cfg, cl, err);
    }
    if (rc < 0)
        cdx_tok_close(t);
    else
        *out = t, rc = 0;
done:
    free(json); free(cfg); free(a); free(b);
    if (rc >= 0 && *out && (rc = dir_chat_template(dir, *out, err)) < 0) {
        cdx_tok_close(*out);
        *out = NULL;
    }
    return rc < 0 ? rc : 0;
}

int cdx_tok_open(const char *path, cdx_tok **out, cdx_err *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: no such file or directory", path);
    if (S_ISDIR(st.st_mode))
        return cdx_tok_open_dir(path, out, err);
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".gguf")) {
        cdx_gguf *g = NULL;
        int rc = cdx_gguf_open(path, &g, err);
        if (rc < 0)
            return rc;
        rc = cdx_tok_open_gguf(g, out, err);
        cdx_gguf_close(g);
        return rc;
    }
    /* a tokenizer.json file: read its directory's tokenizer_config.json too */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
    char *json = NULL, *cfg = NULL;
    size_t jl = 0, cl = 0;
    int rc = read_opt(dir, "tokenizer_config.json", 64u << 20, &cfg, &cl, err);
    if (rc >= 0)
        rc = cdx_file_read_all(path, TK_MAX_JSON, &json, &jl, err);
    if (rc >= 0)
        rc = cdx_tok_open_json(json, jl, cfg, cl, path, out, err);
    free(json); free(cfg);
    return rc < 0 ? rc : 0;
}

/* ---- accessors ---- */

uint32_t cdx_tok_n_vocab(const cdx_tok *t) { return t->n_vocab; }
int32_t cdx_tok_bos(const cdx_tok *t) { return t->bos; }
int32_t cdx_tok_eos(const cdx_tok *t) { return t->eos; }
int32_t cdx_tok_eot(const cdx_tok *t) { return t->eot; }
int32_t cdx_tok_pad(const cdx_tok *t) { return t->pad; }
int32_t cdx_tok_unk(const cdx_tok *t) { return t->unk; }
bool cdx_tok_add_bos(const cdx_tok *t) { return t->add_bos; }
bool cdx_tok_add_eos(const cdx_tok *t) { return t->add_eos; }
bool cdx_tok_is_eog(const cdx_tok *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_vocab && t->eog[id]; }
bool cdx_tok_is_mark(const cdx_tok *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_vocab && t->mark[id]; }
int cdx_tok_attr(const cdx_tok *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_vocab ? t->attr[id] : 0; }
const char *cdx_tok_chat_template(const cdx_tok *t) { return t->chat_template; }
const char *cdx_tok_bos_text(const cdx_tok *t) { return t->bos_text; }
const char *cdx_tok_eos_text(const cdx_tok *t) { return t->eos_text; }

const char *cdx_tok_text(const cdx_tok *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return NULL;
    if (len)
        *len = t->len[id];
    return t->pool.s + t->off[id];
}

int32_t cdx_tok_find(const cdx_tok *t, const char *s, size_t len) { return tk_lookup(t, s, len); }

const char *cdx_tok_model_name(const cdx_tok *t)
{
    switch (t->model) {
    case MODEL_BPE: return "bpe";
    case MODEL_SPM: return "spm";
    default: return "wordpiece";
    }
}
