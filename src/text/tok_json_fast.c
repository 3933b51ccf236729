/* A fast path for the two big members of tokenizer.json, model.vocab and model.merges (150k+
 * entries each, ~90% of the file): jansson builds a node per entry and takes ~1.5 s on Qwen3's
 * 11 MB file. Here a small scanner finds those two values, decodes their strings straight into a
 * byte pool, and hands jansson the rest of the document with them blanked out ({} and []).
 * Anything unexpected makes tk_json_fast_split fail, and the caller parses the whole file with
 * jansson instead (which also produces the error message), so this path never decides validity. */
#include "text/tok_json_fast.h"

#include <stdlib.h>
#include <string.h>

typedef struct { const char *p, *end; } sc;

static void ws(sc *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

/* Reads a JSON string at s->p (the opening quote); appends its decoded bytes to out when out is
 * non-NULL. Returns 0, or -1 on anything malformed (control chars, bad escapes, lone surrogates). */
static int str(sc *s, tk_str *out)
{
    if (s->p >= s->end || *s->p != '"') return -1;
    s->p++;
    const char *run = s->p;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            if (out && tk_str_put(out, run, (size_t)(s->p - run))) return -1;
            s->p++;
            return 0;
        }
        if (c < 0x20) return -1;
        if (c != '\\') { s->p++; continue; }
        if (out && tk_str_put(out, run, (size_t)(s->p - run))) return -1;
        if (s->end - s->p < 2) return -1;
        char e = s->p[1];
        s->p += 2;
        char ch = 0;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (s->end - s->p < 4 || hex4(s->p, &cp)) return -1;
            s->p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' || hex4(s->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                s->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            char u[4];
            if (out && tk_str_put(out, u, (size_t)tk_utf8_enc(cp, u))) return -1;
            run = s->p;
            continue;
        }
        default: return -1;
        }
        if (out && tk_str_putc(out, ch)) return -1;
        run = s->p;
    }
    return -1;
}

static int skip_value(sc *s, int depth);

static int skip_container(sc *s, char open, char close, int depth)
{
    if (depth > 64) return -1;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) { s->p++; return 0; }
    for (;;) {
        ws(s);
        if (open == '{') {
            if (str(s, NULL)) return -1;
            ws(s);
            if (s->p >= s->end || *s->p != ':') return -1;
            s->p++;
            ws(s);
        }
        if (skip_value(s, depth + 1)) return -1;
        ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == close) { s->p++; return 0; }
        return -1;
    }
}

static int skip_value(sc *s, int depth)
{
    ws(s);
    if (s->p >= s->end) return -1;
    char c = *s->p;
    if (c == '"') return str(s, NULL);
    if (c == '{') return skip_container(s, '{', '}', depth);
    if (c == '[') return skip_container(s, '[', ']', depth);
    /* numbers and literals: a run of their characters (jansson checks them on the slow path) */
    const char *b = s->p;
    while (s->p < s->end && (strchr("+-.eE0123456789", *s->p) || (*s->p >= 'a' && *s->p <= 'z')) && *s->p)
        s->p++;
    return s->p > b ? 0 : -1;
}

/* Finds member `key` of the object starting at s->p; leaves s->p at its value. */
static int find_member(sc *s, const char *key, const char **val)
{
    ws(s);
    if (s->p >= s->end || *s->p != '{') return -1;
    s->p++;
    size_t kl = strlen(key);
    tk_str k = {0};
    for (;;) {
        ws(s);
        if (s->p < s->end && *s->p == '}') break;
        k.len = 0;
        if (str(s, &k)) break;
        ws(s);
        if (s->p >= s->end || *s->p != ':') break;
        s->p++;
        ws(s);
        if (k.len == kl && !memcmp(k.s, key, kl)) {
            *val = s->p;
            free(k.s);
            return 0;
        }
        if (skip_value(s, 1)) break;
        ws(s);
        if (s->p < s->end && *s->p == ',') { s->p++; continue; }
        break;
    }
    free(k.s);
    return -1;
}

void tk_json_fast_free(tk_json_fast *f)
{
    free(f->pool.s);
    free(f->vocab);
    free(f->merges);
    free(f->rest);
    memset(f, 0, sizeof *f);
}

static int parse_vocab(sc *s, tk_json_fast *f)
{
    ws(s);
    if (s->p >= s->end || *s->p != '{') return -1;
    s->p++;
    size_t cap = 0;
    for (;;) {
        ws(s);
        if (s->p < s->end && *s->p == '}' && f->n_vocab == 0) { s->p++; return 0; }
        size_t off = f->pool.len;
        if (str(s, &f->pool)) return -1;
        ws(s);
        if (s->p >= s->end || *s->p != ':') return -1;
        s->p++;
        ws(s);
        long long v = 0;
        const char *b = s->p;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9' && s->p - b < 12)
            v = v * 10 + (*s->p++ - '0');
        if (s->p == b || (s->p - b > 1 && *b == '0') || (s->p < s->end && strchr(".eE-+0123456789", *s->p)))
            return -1; /* not a plain non-negative integer: let jansson judge */
        if (f->n_vocab == cap) {
            cap = cap ? cap * 2 : 1024;
            tk_json_entry *p = realloc(f->vocab, cap * sizeof *p);
            if (!p) return -1;
            f->vocab = p;
        }
        f->vocab[f->n_vocab++] = (tk_json_entry){ off, f->pool.len - off, 0, 0, v };
        ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == '}') { s->p++; return 0; }
        return -1;
    }
}

static int parse_merges(sc *s, tk_json_fast *f)
{
    ws(s);
    if (s->p >= s->end || *s->p != '[') return -1;
    s->p++;
    size_t cap = 0;
    for (;;) {
        ws(s);
        if (s->p < s->end && *s->p == ']' && f->n_merges == 0) { s->p++; return 0; }
        tk_json_entry e = {0};
        if (s->p < s->end && *s->p == '"') {
            size_t off = f->pool.len;
            if (str(s, &f->pool)) return -1;
            size_t n = f->pool.len - off;
            const char *m = f->pool.s + off;
            const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
            if (!sp) return -1;
            e = (tk_json_entry){ off, (size_t)(sp - m), (size_t)(sp - m) + 1 + off, n - (size_t)(sp - m) - 1, 0 };
        } else if (s->p < s->end && *s->p == '[') {
            s->p++;
            ws(s);
            size_t a = f->pool.len;
            if (str(s, &f->pool)) return -1;
            size_t al = f->pool.len - a;
            ws(s);
            if (s->p >= s->end || *s->p != ',') return -1;
            s->p++;
            ws(s);
            size_t b = f->pool.len;
            if (str(s, &f->pool)) return -1;
            ws(s);
            if (s->p >= s->end || *s->p != ']') return -1;
            s->p++;
            e = (tk_json_entry){ a, al, b, f->pool.len - b, 0 };
        } else {
            return -1;
        }
        if (f->n_merges == cap) {
            cap = cap ? cap * 2 : 1024;
            tk_json_entry *p = realloc(f->merges, cap * sizeof *p);
            if (!p) return -1;
            f->merges = p;
        }
        f->merges[f->n_merges++] = e;
        ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == ']') { s->p++; return 0; }
        return -1;
    }
}

int tk_json_fast_split(const char *json, size_t len, tk_json_fast *f)
{
    memset(f, 0, sizeof *f);
    sc s = { json, json + len };
    const char *model = NULL, *vocab = NULL, *merges = NULL;
    if (find_member(&s, "model", &model))
        return -1;
    sc m = { model, json + len };
    if (find_member(&m, "vocab", &vocab))
        return -1;
    m.p = model;
    bool has_merges = find_member(&m, "merges", &merges) == 0;
    sc v = { vocab, json + len };
    if (parse_vocab(&v, f) || cdx_utf8_check(f->pool.s ? f->pool.s : "", f->pool.len) != f->pool.len)
        goto fail;
    const char *vend = v.p, *mend = NULL;
    if (has_merges) {
        sc q = { merges, json + len };
        if (parse_merges(&q, f) || cdx_utf8_check(f->pool.s ? f->pool.s : "", f->pool.len) != f->pool.len)
            goto fail;
        mend = q.p;
        f->has_merges = true;
    }
    /* the rest: the document with the two values replaced by empty ones */
    const char *cut[2][2] = { { vocab, vend }, { merges, mend } };
    const char *rep[2] = { "{}", "[]" };
    int order[2] = { 0, 1 };
    if (has_merges && merges < vocab) { order[0] = 1; order[1] = 0; }
    tk_str r = {0};
    const char *at = json;
    for (int k = 0; k < 2; k++) {
        int i = order[k];
        if (i == 1 && !has_merges) continue;
        if (tk_str_put(&r, at, (size_t)(cut[i][0] - at)) || tk_str_put(&r, rep[i], 2)) { free(r.s); goto fail; }
        at = cut[i][1];
    }
    if (tk_str_put(&r, at, (size_t)(json + len - at))) { free(r.s); goto fail; }
    f->rest = r.s;
    f->rest_len = r.len;
    return 0;
fail:
    tk_json_fast_free(f);
    return -1;
}
