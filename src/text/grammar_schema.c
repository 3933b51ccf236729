/* JSON Schema (a draft 2020-12 subset, docs/grammar.md) -> GBNF text, then grammar_gbnf.c compiles it.
 * Every schema node becomes one rule; a $ref becomes a rule made once per target, so recursive
 * schemas are recursive rules. A keyword this compiler cannot enforce is an error naming it and
 * its place in the schema (a JSON Pointer), never dropped. Output JSON: values are separated by
 * the `ws` rule (nothing, a space, or a newline and up to 20 blanks: bounded, so a sampler cannot
 * pad forever); object properties come in the schema's order (required ones first), then any
 * additional ones; numbers have at most 16 digits in each part. */
#include "text/grammar_int.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SC_MAX_COUNT 10000  /* minLength, maxLength, minItems, maxItems, {m,n} of a pattern */
#define SC_MAX_DEPTH 128    /* nesting of schemas (not of $ref: those are rules) */
#define SC_MAX_PROPS 1000

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

typedef struct {
    char *ref;
    int rule;
} refmemo;

typedef struct {
    const char *name;
    json_t *root;
    sbuf out;              /* the rules */
    int n_rules;
    refmemo *refs;
    size_t n_refs, cap_refs;
    unsigned prim;         /* primitive rules emitted (bits) */
    int depth;
    cdx_err *err;
    int rc;
} sc;

static void sb_add(sc *c, sbuf *b, const char *s, size_t n)
{
    if (c->rc)
        return;
    if (b->n + n + 1 > GR_MAX_TEXT) {
        c->rc = cdx_err_set(c->err, CDX_EINVAL, "%s: the schema expands to more than %u bytes of grammar",
                            c->name, GR_MAX_TEXT);
        return;
    }
    if (!cdx_bytes_reserve(&b->s, &b->cap, b->n + n + 1)) {
        c->rc = cdx_err_set(c->err, CDX_ENOMEM, "out of memory");
        return;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_str(sc *c, sbuf *b, const char *s) { sb_add(c, b, s, strlen(s)); }

static void sb_fmt(sc *c, sbuf *b, const char *fmt, ...) CDX_PRINTF(3, 4);
static void sb_fmt(sc *c, sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof tmp) {
        char *big = malloc((size_t)n + 1);
        if (!big) {
            c->rc = cdx_err_set(c->err, CDX_ENOMEM, "out of memory");
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        sb_add(c, b, big, (size_t)n);
        free(big);
        return;
    }
    sb_add(c, b, tmp, (size_t)n);
}

static int fail(sc *c, int code, const char *path, const char *fmt, ...) CDX_PRINTF(4, 5);
static int fail(sc *c, int code, const char *path, const char *fmt, ...)
{
    if (c->rc)
        return c->rc;
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->rc = cdx_err_set(c->err, code, "%s: %s: %s", c->name, *path ? path : "#", msg);
    return c->rc;
}

/* A GBNF literal for bytes s[0..n): "..." with escapes. */
static void gbnf_lit(sc *c, sbuf *b, const char *s, size_t n)
{
    sb_add(c, b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = { '\\', (char)ch };
            sb_add(c, b, e, 2);
        } else if (ch < 0x20 || ch == 0x7F) {
            sb_fmt(c, b, "\\x%02X", ch);
        } else {
            sb_add(c, b, (const char *)&ch, 1);
        }
    }
    sb_add(c, b, "\"", 1);
}

/* ---- primitives: emitted once each, on first use ---- */

enum { P_WS, P_CHAR, P_STRING, P_INT, P_NUMBER, P_BOOL, P_NULL, P_VALUE, P_OBJECT, P_ARRAY, P_KEYCHAR, P_COUNT };

static const struct {
    const char *name, *body;
    unsigned deps;
} k_prims[P_COUNT] = {
    [P_WS] = { "ws", "| \" \" | \"\\n\" [ \\t]{0,20}", 0 },
    [P_CHAR] = { "json-char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})", 0 },
    [P_STRING] = { "json-string", "\"\\\"\" json-char* \"\\\"\" ws", 1u << P_CHAR | 1u << P_WS },
    [P_INT] = { "json-int", "\"-\"? (\"0\" | [1-9] [0-9]{0,15}) ws", 1u << P_WS },
    [P_NUMBER] = { "json-number", "\"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? ws",
                   1u << P_WS },
    [P_BOOL] = { "json-bool", "(\"true\" | \"false\") ws", 1u << P_WS },
    [P_NULL] = { "json-null", "\"null\" ws", 1u << P_WS },
    [P_VALUE] = { "json-value", "json-object | json-array | json-string | json-number | json-bool | json-null",
                  1u << P_OBJECT | 1u << P_ARRAY | 1u << P_STRING | 1u << P_NUMBER | 1u << P_BOOL | 1u << P_NULL },
    [P_OBJECT] = { "json-object", "\"{\" ws (json-string \":\" ws json-value (\",\" ws json-string \":\" ws json-value)*)? "
                   "\"}\" ws", 1u << P_STRING | 1u << P_VALUE | 1u << P_WS },
    [P_ARRAY] = { "json-array", "\"[\" ws (json-value (\",\" ws json-value)*)? \"]\" ws", 1u << P_VALUE | 1u << P_WS },
    /* characters of an additional property's name: no escapes (an escaped name could spell a
     * declared one) and no control characters */
    [P_KEYCHAR] = { "json-keychar", "[^\"\\\\\\x00-\\x1F]", 0 },
};

static const char *prim(sc *c, int p)
{
    if (!(c->prim & 1u << p)) {
        c->prim |= 1u << p;
        sb_fmt(c, &c->out, "%s ::= %s\n", k_prims[p].name, k_prims[p].body);
        for (int d = 0; d < P_COUNT; d++)
            if (k_prims[p].deps & 1u << d)
                prim(c, d);
    }
    return k_prims[p].name;
}

/* ---- rules ---- */

static int new_rule(sc *c) { return c->n_rules++; }

static void put_rule(sc *c, int r, const sbuf *body)
{
    sb_fmt(c, &c->out, "s%d ::= %s\n", r, body->s ? body->s : "\"\"");
}

static int visit(sc *c, json_t *s, const char *path, sbuf *expr);

/* path + "/" + key, JSON Pointer escaped */
static char *subpath(const char *path, const char *key)
{
    size_t n = strlen(path), k = strlen(key);
    char *p = malloc(n + 2 * k + 2);
    if (!p)
        return NULL;
    memcpy(p, path, n);
    p[n++] = '/';
    for (size_t i = 0; i < k; i++) {
        if (key[i] == '~') {
            p[n++] = '~';
            p[n++] = '0';
        } else if (key[i] == '/') {
            p[n++] = '~';
            p[n++] = '1';
        } else {
            p[n++] = key[i];
        }
    }
    p[n] = 0;
    return p;
}

static char *subpath_i(const char *path, const char *key, size_t i)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%zu", i);
    char *a = subpath(path, key);
    char *b = a ? subpath(a, tmp) : NULL;
    free(a);
    return b;
}

/* Compiles s (at path) into a rule; returns its number or -1. Expressions end with ws. */
static int rule_of(sc *c, json_t *s, const char *path)
{
    if (c->rc)
        return -1;
    sbuf e = { 0 };
    int r = new_rule(c);
    if (visit(c, s, path, &e) == 0)
        put_rule(c, r, &e);
    free(e.s);
    return c->rc ? -1 : r;
}

/* ---- $ref ---- */

static json_t *resolve(sc *c, const char *ref, const char *path)
{
    if (ref[0] != '#') {
        fail(c, CDX_EUNSUPPORTED, path, "$ref \"%s\": only references inside the schema (\"#...\") are supported", ref);
        return NULL;
    }
    json_t *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        fail(c, CDX_EUNSUPPORTED, path, "$ref \"%s\": anchors are not supported, only JSON Pointers", ref);
        return NULL;
    }
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n < sizeof tok - 1) {
            if (p[0] == '~' && p[1] == '0') {
                tok[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                tok[n++] = '/';
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        json_t *next = NULL;
        if (json_is_object(cur)) {
            next = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            if (*end == 0 && i >= 0)
                next = json_array_get(cur, (size_t)i);
        }
        if (!next) {
            fail(c, CDX_EINVAL, path, "$ref \"%s\" points to nothing", ref);
            return NULL;
        }
        cur = next;
    }
    return cur;
}

static int ref_rule(sc *c, const char *ref, const char *path)
{
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref))
            return c->refs[i].rule;
    json_t *target = resolve(c, ref, path);
    if (!target)
        return -1;
    refmemo *m = cdx_array_grow(c->refs, &c->cap_refs, c->n_refs, sizeof *c->refs);
    char *dup = m ? strdup(ref) : NULL;
    if (!dup) {
        if (m)
            c->refs = m;
        fail(c, CDX_ENOMEM, path, "out of memory");
        return -1;
    }
    c->refs = m;
    int r = new_rule(c);
    c->refs[c->n_refs++] = (refmemo){ dup, r };
    /* the body is compiled at the target's own path, with a fresh depth (recursion goes through
     * the rule, not through this C stack) */
    int depth = c->depth;
    c->depth = 0;
    sbuf e = { 0 };
    if (visit(c, target, ref, &e) == 0)
        put_rule(c, r, &e);
    free(e.s);
    c->depth = depth;
    return c->rc ? -1 : r;
}

/* ---- strings: lengths, formats, patterns ---- */

static const struct {
    const char *name, *body;
} k_formats[] = {
    { "date", "[1-9] [0-9]{3} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
              "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))" },
    { "time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
              "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])" },
    { "date-time", NULL }, /* date "T" time */
    { "uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}" },
    { "email", "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+ (\".\" [a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)* \"@\" "
               "[a-zA-Z0-9] ([a-zA-Z0-9-]* [a-zA-Z0-9])? (\".\" [a-zA-Z0-9] ([a-zA-Z0-9-]* [a-zA-Z0-9])?)+" },
};

static const char *format_body(const char *f, sbuf *tmp, sc *c)
{
    if (!strcmp(f, "date-time")) {
        sb_fmt(c, tmp, "(%s) \"T\" (%s)", k_formats[0].body, k_formats[1].body);
        return tmp->s;
    }
    for (size_t i = 0; i < sizeof k_formats / sizeof *k_formats; i++)
        if (k_formats[i].body && !strcmp(k_formats[i].name, f))
            return k_formats[i].body;
    return NULL;
}

/* A regex (ECMAScript subset) over the decoded string -> GBNF over its JSON encoding. */
typedef struct {
    sc *c;
    const char *re, *path;
    size_t pos, len;
    int depth;
} rx;

static int rx_fail(rx *x, const char *what)
{
    return fail(x->c, CDX_EUNSUPPORTED, x->path, "pattern \"%s\": %s at offset %zu", x->re, what, x->pos);
}

static bool rx_hex(rx *x, int n, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (x->pos >= x->len)
            return false;
        char ch = x->re[x->pos];
        int h = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (h < 0)
            return false;
        *v = *v * 16 + (uint32_t)h;
        x->pos++;
    }
    return true;
}

/* A set of code points as ranges. */
typedef struct {
    uint32_t r[128][2];
    int n;
    bool neg;
} cset;

static void cs_add(cset *s, uint32_t lo, uint32_t hi)
{
    if (s->n < 128) {
        s->r[s->n][0] = lo;
        s->r[s->n][1] = hi;
        s->n++;
    }
}

static void cs_class(cset *s, char k)
{
    switch (k) {
    case 'd': cs_add(s, '0', '9'); break;
    case 'w': cs_add(s, '0', '9'); cs_add(s, 'A', 'Z'); cs_add(s, 'a', 'z'); cs_add(s, '_', '_'); break;
    case 's': cs_add(s, ' ', ' '); cs_add(s, '\t', '\r'); cs_add(s, 0xA0, 0xA0); cs_add(s, 0xFEFF, 0xFEFF);
              cs_add(s, 0x2028, 0x2029); break;
    }
}

static uint32_t utf8_next(rx *x)
{
    const unsigned char *s = (const unsigned char *)x->re + x->pos;
    unsigned ch = s[0];
    int n = ch < 0x80 ? 1 : (ch >> 5) == 6 ? 2 : (ch >> 4) == 14 ? 3 : 4;
    if (x->pos + (size_t)n > x->len)
        n = 1;
    uint32_t cp = n == 1 ? ch : ch & (0x7F >> n);
    for (int i = 1; i < n; i++)
        cp = cp << 6 | (s[i] & 0x3F);
    x->pos += (size_t)n;
    return cp;
}

/* One escaped item after '\': a code point (*cp) or a class letter (*cls). */
static int rx_escape(rx *x, uint32_t *cp, char *cls)
{
    *cls = 0;
    if (x->pos >= x->len)
        return rx_fail(x, "a trailing backslash");
    char e = x->re[x->pos++];
    switch (e) {
    case 'd': case 'w': case 's': case 'D': case 'W': case 'S': *cls = e; return 0;
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': if (!rx_hex(x, 2, cp)) return rx_fail(x, "a bad \\x escape"); return 0;
    case 'u': if (!rx_hex(x, 4, cp)) return rx_fail(x, "a bad \\u escape"); return 0;
    case 'b': case 'B': return rx_fail(x, "word boundaries (\\b, \\B) are not supported");
    default:
        if (e >= '1' && e <= '9')
            return rx_fail(x, "backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
            return rx_fail(x, "an unknown escape");
        *cp = (unsigned char)e;
        return 0;
    }
}

static int cmp_range(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Emits a set as GBNF over JSON text: plain characters as a class, '"' and '\' as their escapes,
 * \t \n \r as theirs; other control characters are left out (never produced). */
static void cs_emit(sc *c, sbuf *b, cset *s)
{
    /* normalize, negate over the code points */
    qsort(s->r, (size_t)s->n, sizeof s->r[0], cmp_range);
    uint32_t m[130][2];
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (k && s->r[i][0] <= m[k - 1][1] + 1) {
            if (s->r[i][1] > m[k - 1][1])
                m[k - 1][1] = s->r[i][1];
        } else {
            m[k][0] = s->r[i][0];
            m[k][1] = s->r[i][1];
            k++;
        }
    }
    if (s->neg) {
        uint32_t o[130][2];
        int j = 0;
        uint32_t next = 0;
        for (int i = 0; i < k; i++) {
            if (m[i][0] > next) {
                o[j][0] = next;
                o[j][1] = m[i][0] - 1;
                j++;
            }
            next = m[i][1] + 1;
        }
        if (next <= 0x10FFFF) {
            o[j][0] = next;
            o[j][1] = 0x10FFFF;
            j++;
        }
        memcpy(m, o, sizeof o);
        k = j;
    }
    bool quote = false, bslash = false, tab = false, nl = false, cr = false;
    sbuf cls = { 0 };
    for (int i = 0; i < k; i++) {
        uint32_t lo = m[i][0], hi = m[i][1];
        for (uint32_t sp = 0; sp < 0x20 && sp <= hi; sp++)
            if (sp >= lo) {
                tab |= sp == '\t';
                nl |= sp == '\n';
                cr |= sp == '\r';
            }
        quote |= lo <= '"' && '"' <= hi;
        bslash |= lo <= '\\' && '\\' <= hi;
        if (lo < 0x20)
            lo = 0x20;
        /* split around '"' and '\' */
        uint32_t cuts[3] = { '"', '\\', 0x110000 };
        uint32_t from = lo;
        for (int ci = 0; ci < 3 && from <= hi; ci++) {
            uint32_t to = cuts[ci] - 1 < hi ? cuts[ci] - 1 : hi;
            if (cuts[ci] < from)
                continue;
            if (from <= to) {
                if (from == to)
                    sb_fmt(c, &cls, "\\U%08X", from);
                else
                    sb_fmt(c, &cls, "\\U%08X-\\U%08X", from, to);
            }
            from = cuts[ci] + 1;
        }
    }
    int alts = 0;
    sb_add(c, b, "(", 1);
    if (cls.n) {
        sb_fmt(c, b, "[%s]", cls.s);
        alts++;
    }
    const struct { bool on; const char *lit; } esc[] = {
        { quote, "\"\\\\\\\"\"" }, { bslash, "\"\\\\\\\\\"" }, { tab, "\"\\\\t\"" }, { nl, "\"\\\\n\"" }, { cr, "\"\\\\r\"" },
    };
    for (size_t i = 0; i < sizeof esc / sizeof *esc; i++)
        if (esc[i].on) {
            sb_fmt(c, b, "%s%s", alts++ ? " | " : "", esc[i].lit);
        }
    if (!alts)
        sb_add(c, b, "[^\\x00-\\U0010FFFF]", 18); /* the empty set */
    sb_add(c, b, ")", 1);
    free(cls.s);
}

static int rx_alts(rx *x, sbuf *b, bool top);

static int rx_atom(rx *x, sbuf *b)
{
    sc *c = x->c;
    char ch = x->re[x->pos];
    cset s = { .n = 0 };
    if (ch == '(') {
        x->pos++;
        if (x->pos < x->len && x->re[x->pos] == '?') {
            if (x->pos + 1 < x->len && x->re[x->pos + 1] == ':')
                x->pos += 2;
            else
                return rx_fail(x, "lookaround and named groups are not supported (only (?:...))");
        }
        if (++x->depth > 64)
            return rx_fail(x, "groups nested too deep");
        sb_add(c, b, "(", 1);
        if (rx_alts(x, b, false))
            return c->rc;
        if (x->pos >= x->len || x->re[x->pos] != ')')
            return rx_fail(x, "an unbalanced '('");
        x->pos++;
        x->depth--;
        sb_add(c, b, ")", 1);
        return 0;
    }
    if (ch == '[') {
        x->pos++;
        if (x->pos < x->len && x->re[x->pos] == '^') {
            s.neg = true;
            x->pos++;
        }
        bool first = true;
        while (x->pos < x->len && (x->re[x->pos] != ']' || first)) {
            first = false;
            uint32_t lo;
            char cls = 0;
            if (x->re[x->pos] == '\\') {
                x->pos++;
                if (rx_escape(x, &lo, &cls))
                    return c->rc;
            } else {
                lo = utf8_next(x);
            }
            if (cls) {
                if (cls >= 'A' && cls <= 'Z')
                    return rx_fail(x, "negated class escapes (\\D \\W \\S) inside [...] are not supported");
                cs_class(&s, cls);
                continue;
            }
            uint32_t hi = lo;
            if (x->pos + 1 < x->len && x->re[x->pos] == '-' && x->re[x->pos + 1] != ']') {
                x->pos++;
                if (x->re[x->pos] == '\\') {
                    x->pos++;
                    if (rx_escape(x, &hi, &cls))
                        return c->rc;
                    if (cls)
                        return rx_fail(x, "a class escape as a range end");
                } else {
                    hi = utf8_next(x);
                }
                if (hi < lo)
                    return rx_fail(x, "a reversed range");
            }
            cs_add(&s, lo, hi);
        }
        if (x->pos >= x->len)
            return rx_fail(x, "an unclosed '['");
        x->pos++;
        if (s.n >= 128)
            return rx_fail(x, "a class with over 127 ranges");
        cs_emit(c, b, &s);
        return 0;
    }
    if (ch == '.') {
        x->pos++;
        s.neg = true;
        cs_add(&s, '\n', '\n');
        cs_add(&s, '\r', '\r');
        cs_add(&s, 0x2028, 0x2029);
        cs_emit(c, b, &s);
        return 0;
    }
    if (ch == '\\') {
        x->pos++;
        uint32_t cp;
        char cls;
        if (rx_escape(x, &cp, &cls))
            return c->rc;
        if (cls) {
            s.neg = cls >= 'A' && cls <= 'Z';
            cs_class(&s, (char)(cls | 0x20));
        } else {
            cs_add(&s, cp, cp);
        }
        cs_emit(c, b, &s);
        return 0;
    }
    if (ch == '^' || ch == '$')
        return rx_fail(x, "anchors (^ $) are supported only at the start and the end of the pattern");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
        return rx_fail(x, "a quantifier with nothing to repeat");
    if (ch == ')')
        return rx_fail(x, "an unbalanced ')'");
    cs_add(&s, utf8_next(x), 0);
    s.r[0][1] = s.r[0][0];
    cs_emit(c, b, &s);
    return 0;
}

static bool rx_num(rx *x, long *v)
{
    if (x->pos >= x->len || x->re[x->pos] < '0' || x->re[x->pos] > '9')
        return false;
    *v = 0;
    while (x->pos < x->len && x->re[x->pos] >= '0' && x->re[x->pos] <= '9') {
        *v = *v * 10 + (x->re[x->pos++] - '0');
        if (*v > SC_MAX_COUNT)
            *v = SC_MAX_COUNT + 1;
    }
    return true;
}

static int rx_seq(rx *x, sbuf *b, bool top)
{
    sc *c = x->c;
    bool any = false;
    while (x->pos < x->len && x->re[x->pos] != '|' && x->re[x->pos] != ')') {
        if (top && x->re[x->pos] == '$' && x->pos + 1 == x->len)
            break;
        sbuf a = { 0 };
        if (rx_atom(x, &a)) {
            free(a.s);
            return c->rc;
        }
        /* quantifiers */
        if (x->pos < x->len && strchr("*+?{", x->re[x->pos])) {
            char q = x->re[x->pos++];
            if (q == '{') {
                long mn, mx;
                size_t save = x->pos;
                if (!rx_num(x, &mn)) {
                    free(a.s);
                    x->pos = save - 1;
                    return rx_fail(x, "a '{' that is not a {m,n} quantifier");
                }
                mx = mn;
                if (x->pos < x->len && x->re[x->pos] == ',') {
                    x->pos++;
                    mx = -1;
                    if (x->pos < x->len && x->re[x->pos] != '}' && !rx_num(x, &mx)) {
                        free(a.s);
                        return rx_fail(x, "a bad {m,n}");
                    }
                }
                if (x->pos >= x->len || x->re[x->pos] != '}') {
                    free(a.s);
                    return rx_fail(x, "an unclosed {m,n}");
                }
                x->pos++;
                if (mn > SC_MAX_COUNT || mx > SC_MAX_COUNT) {
                    free(a.s);
                    return rx_fail(x, "a repetition count over 10000");
                }
                if (mx >= 0 && mx < mn) {
                    free(a.s);
                    return rx_fail(x, "{m,n} with n < m");
                }
                if (mx < 0)
                    sb_fmt(c, &a, "{%ld,}", mn);
                else
                    sb_fmt(c, &a, "{%ld,%ld}", mn, mx);
            } else {
                sb_add(c, &a, &q, 1);
            }
            if (x->pos < x->len && x->re[x->pos] == '?')
                x->pos++; /* lazy: the same set of strings */
            if (x->pos < x->len && strchr("*+?{", x->re[x->pos])) {
                free(a.s);
                return rx_fail(x, "a quantifier after a quantifier");
            }
        }
        if (any)
            sb_add(c, b, " ", 1);
        sb_add(c, b, a.s ? a.s : "", a.n);
        free(a.s);
        any = true;
    }
    if (!any)
        sb_add(c, b, "\"\"", 2);
    return c->rc;
}

static int rx_alts(rx *x, sbuf *b, bool top)
{
    sc *c = x->c;
    for (int i = 0;; i++) {
        if (i)
            sb_add(c, b, " | ", 3);
        bool start = top && x->pos < x->len && x->re[x->pos] == '^';
        if (start)
            x->pos++;
        if (top && !start) {
            prim(c, P_CHAR);
            sb_add(c, b, "json-char* ", 11);
        }
        sb_add(c, b, "(", 1);
        if (rx_seq(x, b, top))
            return c->rc;
        sb_add(c, b, ")", 1);
        if (top) {
            bool end = x->pos < x->len && x->re[x->pos] == '$';
            if (end) {
                x->pos++;
            } else {
                prim(c, P_CHAR);
                sb_add(c, b, " json-char*", 11);
            }
        }
        if (x->pos >= x->len || x->re[x->pos] != '|')
            break;
        x->pos++;
    }
    return c->rc;
}

/* ---- integers in a range ---- */

/* Non-negative decimal strings of the same length from lo to hi (both without sign). */
static void digits_range(sc *c, sbuf *b, const char *lo, const char *hi, size_t n)
{
    if (!n)
        return;
    if (!strncmp(lo, hi, n)) {
        gbnf_lit(c, b, lo, n);
        return;
    }
    if (n == 1) {
        sb_fmt(c, b, "[%c-%c]", lo[0], hi[0]);
        return;
    }
    if (lo[0] == hi[0]) {
        sb_fmt(c, b, "\"%c\" (", lo[0]);
        digits_range(c, b, lo + 1, hi + 1, n - 1);
        sb_add(c, b, ")", 1);
        return;
    }
    bool lo_zero = strspn(lo + 1, "0") >= n - 1, hi_nine = strspn(hi + 1, "9") >= n - 1;
    char a = lo_zero ? lo[0] : (char)(lo[0] + 1), z = hi_nine ? hi[0] : (char)(hi[0] - 1);
    int alts = 0;
    sb_add(c, b, "(", 1);
    if (!lo_zero) {
        char nines[24];
        memset(nines, '9', n - 1);
        sb_fmt(c, b, "\"%c\" (", lo[0]);
        digits_range(c, b, lo + 1, nines, n - 1);
        sb_add(c, b, ")", 1);
        alts++;
    }
    if (a <= z) {
        sb_fmt(c, b, "%s[%c-%c] [0-9]{%zu}", alts++ ? " | " : "", a, z, n - 1);
    }
    if (!hi_nine) {
        char zeros[24];
        memset(zeros, '0', n - 1);
        sb_fmt(c, b, "%s\"%c\" (", alts++ ? " | " : "", hi[0]);
        digits_range(c, b, zeros, hi + 1, n - 1);
        sb_add(c, b, ")", 1);
    }
    sb_add(c, b, ")", 1);
}

#define INT_DIGITS 16 /* the most digits an integer may have (as json-int) */

/* Non-negative integers in [lo, hi] (hi < 0: unbounded), no leading zeros. */
static void uint_range(sc *c, sbuf *b, long long lo, long long hi)
{
    char ls[24], hs[24];
    int nl = snprintf(ls, sizeof ls, "%lld", lo);
    int nh = hi >= 0 ? snprintf(hs, sizeof hs, "%lld", hi) : INT_DIGITS;
    int alts = 0;
    sb_add(c, b, "(", 1);
    for (int len = nl; len <= nh; len++) {
        char a[24], z[24];
        if (len == nl)
            memcpy(a, ls, (size_t)len + 1);
        else {
            a[0] = '1';
            memset(a + 1, '0', (size_t)len - 1);
            a[len] = 0;
        }
        if (hi >= 0 && len == nh)
            memcpy(z, hs, (size_t)len + 1);
        else {
            memset(z, '9', (size_t)len);
            z[len] = 0;
        }
        if (hi < 0 && len > nl) {
            /* every longer length at once */
            sb_fmt(c, b, "%s[1-9] [0-9]{%d,%d}", alts++ ? " | " : "", len - 1, INT_DIGITS - 1);
            break;
        }
        if (alts++)
            sb_add(c, b, " | ", 3);
        digits_range(c, b, a, z, (size_t)len);
    }
    sb_add(c, b, ")", 1);
}

static void int_range(sc *c, sbuf *b, bool has_lo, long long lo, bool has_hi, long long hi)
{
    int alts = 0;
    sb_add(c, b, "(", 1);
    /* negatives: "-" then |x| in [max(1, -hi), -lo] */
    if (!has_lo || lo < 0) {
        long long a = has_hi && hi < 0 ? -hi : 1, z = has_lo ? -lo : -1;
        sb_add(c, b, "\"-\" ", 4);
        uint_range(c, b, a, z);
        alts++;
    }
    if (!has_hi || hi >= 0) {
        long long a = has_lo && lo > 0 ? lo : 0, z = has_hi ? hi : -1;
        if (alts++)
            sb_add(c, b, " | ", 3);
        uint_range(c, b, a, z);
    }
    sb_add(c, b, ")", 1);
}

/* ---- the visitor ---- */

static const char *const k_annotations[] = { "title", "description", "$schema", "$id", "$comment", "default",
                                             "examples", "deprecated", "readOnly", "writeOnly", "$defs",
                                             "definitions", NULL };

static bool is_annotation(const char *k)
{
    for (int i = 0; k_annotations[i]; i++)
        if (!strcmp(k, k_annotations[i]))
            return true;
    return false;
}

/* Which type each keyword belongs to (one table: the visitor and the inference read it). */
static const struct {
    const char *kw, *type;
} k_keywords[] = {
    { "properties", "object" }, { "required", "object" }, { "additionalProperties", "object" },
    { "items", "array" }, { "prefixItems", "array" }, { "minItems", "array" }, { "maxItems", "array" },
    { "minLength", "string" }, { "maxLength", "string" }, { "pattern", "string" }, { "format", "string" },
    { "minimum", "integer" }, { "maximum", "integer" }, { "exclusiveMinimum", "integer" },
    { "exclusiveMaximum", "integer" },
    { "type", NULL }, { "enum", NULL }, { "const", NULL }, { "anyOf", NULL }, { "oneOf", NULL }, { "allOf", NULL },
    { "$ref", NULL },
};

static const char *kw_type(const char *k, bool *known)
{
    for (size_t i = 0; i < sizeof k_keywords / sizeof *k_keywords; i++)
        if (!strcmp(k, k_keywords[i].kw)) {
            *known = true;
            return k_keywords[i].type;
        }
    *known = false;
    return NULL;
}

static bool get_count(sc *c, json_t *s, const char *kw, const char *path, long long *v)
{
    json_t *j = json_object_get(s, kw);
    if (!j)
        return false;
    if (!json_is_integer(j) || json_integer_value(j) < 0) {
        fail(c, CDX_EINVAL, path, "%s must be a non-negative integer", kw);
        return false;
    }
    *v = json_integer_value(j);
    if (*v > SC_MAX_COUNT) {
        fail(c, CDX_EUNSUPPORTED, path, "%s %lld is over the limit of %d this compiler enforces", kw, *v, SC_MAX_COUNT);
        return false;
    }
    return true;
}

/* A JSON value as a literal followed by ws. */
static void const_lit(sc *c, sbuf *b, json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) {
        c->rc = cdx_err_set(c->err, CDX_ENOMEM, "out of memory");
        return;
    }
    gbnf_lit(c, b, t, strlen(t));
    sb_fmt(c, b, " %s", prim(c, P_WS));
    free(t);
}

static bool type_matches(json_t *v, const char *t)
{
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    return false;
}

static int visit_string(sc *c, json_t *s, const char *path, sbuf *b)
{
    long long mn = 0, mx = -1;
    bool has_mn = get_count(c, s, "minLength", path, &mn), has_mx = get_count(c, s, "maxLength", path, &mx);
    if (c->rc)
        return c->rc;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && fmt)
        return fail(c, CDX_EUNSUPPORTED, path, "pattern beside format is not supported (give one of them)");
    if ((pat || fmt) && (has_mn || has_mx))
        return fail(c, CDX_EUNSUPPORTED, path, "%s beside %s is not supported: the two cannot both be enforced by "
                    "this compiler", has_mn ? "minLength" : "maxLength", pat ? "pattern" : "format");
    if (has_mn && has_mx && mx < mn)
        return fail(c, CDX_EINVAL, path, "maxLength %lld is below minLength %lld", mx, mn);
    prim(c, P_WS);
    sb_add(c, b, "\"\\\"\" ", 5);
    if (fmt) {
        if (!json_is_string(fmt))
            return fail(c, CDX_EINVAL, path, "format must be a string");
        sbuf tmp = { 0 };
        const char *body = format_body(json_string_value(fmt), &tmp, c);
        if (!body) {
            free(tmp.s);
            return fail(c, CDX_EUNSUPPORTED, path, "format \"%s\" is not supported (supported: date, time, date-time, "
                        "uuid, email)", json_string_value(fmt));
        }
        sb_fmt(c, b, "(%s)", body);
        free(tmp.s);
    } else if (pat) {
        if (!json_is_string(pat))
            return fail(c, CDX_EINVAL, path, "pattern must be a string");
        char *pp = subpath(path, "pattern");
        if (!pp)
            return fail(c, CDX_ENOMEM, path, "out of memory");
        rx x = { .c = c, .re = json_string_value(pat), .path = pp, .len = strlen(json_string_value(pat)) };
        sb_add(c, b, "(", 1);
        int rc = rx_alts(&x, b, true);
        if (!rc && x.pos < x.len)
            rc = rx_fail(&x, "an unbalanced ')'");
        free(pp);
        if (rc)
            return rc;
        sb_add(c, b, ")", 1);
    } else {
        prim(c, P_CHAR);
        if (!has_mn && !has_mx)
            sb_add(c, b, "json-char*", 10);
        else if (has_mx)
            sb_fmt(c, b, "json-char{%lld,%lld}", mn, mx);
        else
            sb_fmt(c, b, "json-char{%lld,}", mn);
    }
    sb_add(c, b, " \"\\\"\" ws", 8);
    return c->rc;
}

static int visit_integer(sc *c, json_t *s, const char *path, sbuf *b)
{
    bool has_lo = false, has_hi = false;
    long long lo = 0, hi = 0;
    static const char *const kws[] = { "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum" };
    for (int i = 0; i < 4; i++) {
        json_t *j = json_object_get(s, kws[i]);
        if (!j)
            continue;
        if (!json_is_number(j))
            return fail(c, CDX_EINVAL, path, "%s must be a number", kws[i]);
        double v = json_number_value(j);
        if (fabs(v) > 1e15)
            return fail(c, CDX_EUNSUPPORTED, path, "%s %g is beyond ±1e15, which this compiler enforces", kws[i], v);
        long long k;
        if (i < 2) {
            k = i == 0 ? (long long)ceil(v) : (long long)floor(v) + 1;
            if (!has_lo || k > lo)
                lo = k;
            has_lo = true;
        } else {
            k = i == 2 ? (long long)floor(v) : (long long)ceil(v) - 1;
            if (!has_hi || k < hi)
                hi = k;
            has_hi = true;
        }
    }
    if (has_lo && has_hi && hi < lo)
        return fail(c, CDX_EINVAL, path, "no integer lies between the minimum %lld and the maximum %lld", lo, hi);
    if (!has_lo && !has_hi) {
        sb_str(c, b, prim(c, P_INT));
        return c->rc;
    }
    int_range(c, b, has_lo, lo, has_hi, hi);
    sb_fmt(c, b, " %s", prim(c, P_WS));
    return c->rc;
}

/* Any JSON string but the given names (no escapes), as the rule body of an additional key. The
 * names as a trie of code points: at each node, a name's next character goes deeper, any other
 * character leaves the trie, and the closing quote is allowed unless the path is a whole name. */
static int not_names(sc *c, const char *const *names, int n, size_t off, sbuf *b)
{
    prim(c, P_KEYCHAR);
    bool whole = false;
    sb_add(c, b, "(", 1);
    int alts = 0;
    sbuf cls = { 0 };
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        if (len == off) {
            whole = true;
            continue;
        }
        /* one branch per distinct next byte (names are UTF-8: a byte trie stays exact) */
        bool dup = false;
        for (int j = 0; j < i && !dup; j++)
            dup = strlen(names[j]) > off && names[j][off] == names[i][off];
        if (dup)
            continue;
        unsigned char ch = (unsigned char)names[i][off];
        const char *sub[SC_MAX_PROPS];
        int ns = 0;
        for (int j = 0; j < n; j++)
            if (strlen(names[j]) > off && names[j][off] == (char)ch)
                sub[ns++] = names[j];
        if (alts++)
            sb_add(c, b, " | ", 3);
        char lit[2] = { (char)ch, 0 };
        gbnf_lit(c, b, lit, 1);
        sb_add(c, b, " ", 1);
        not_names(c, sub, ns, off + 1, b);
        if (ch < 0x80)
            sb_fmt(c, &cls, "\\x%02X", ch);
    }
    /* leave the trie: a character that starts no name's next byte (for a multibyte next byte,
     * its lead byte was a branch above; other lead bytes leave here) */
    if (alts++)
        sb_add(c, b, " | ", 3);
    bool any_multibyte = false;
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) > off && (unsigned char)names[i][off] >= 0x80)
            any_multibyte = true;
    if (any_multibyte) {
        /* keep it exact and simple: only ASCII characters may leave the trie here */
        sb_fmt(c, b, "[^\"\\\\\\x00-\\x1F\\x80-\\U0010FFFF%s] json-keychar* \"\\\"\"", cls.s ? cls.s : "");
    } else {
        sb_fmt(c, b, "[^\"\\\\\\x00-\\x1F%s] json-keychar* \"\\\"\"", cls.s ? cls.s : "");
    }
    if (!whole)
        sb_add(c, b, " | \"\\\"\"", 7);
    sb_add(c, b, ")", 1);
    free(cls.s);
    return c->rc;
}

typedef struct {
    const char *key;
    int rule;
    bool required;
} prop;

static int visit_object(sc *c, json_t *s, const char *path, sbuf *b, json_t *all_of)
{
    prop props[SC_MAX_PROPS];
    int np = 0;
    json_t *req_all = json_array();
    json_t *addl = NULL;
    bool addl_seen = false;
    /* the schema itself, then allOf's members (objects, or $refs to objects) merged in */
    size_t n_parts = 1 + (all_of ? json_array_size(all_of) : 0);
    for (size_t pi = 0; pi < n_parts && !c->rc; pi++) {
        json_t *part = pi == 0 ? s : json_array_get(all_of, pi - 1);
        char *ppath = pi == 0 ? strdup(path) : subpath_i(path, "allOf", pi - 1);
        if (!ppath) {
            fail(c, CDX_ENOMEM, path, "out of memory");
            break;
        }
        if (pi > 0) {
            json_t *ref = json_object_get(part, "$ref");
            if (ref && json_is_string(ref))
                part = resolve(c, json_string_value(ref), ppath);
            if (!c->rc && (!json_is_object(part) || (json_object_get(part, "type") &&
                           !(json_is_string(json_object_get(part, "type")) &&
                             !strcmp(json_string_value(json_object_get(part, "type")), "object"))))) {
                fail(c, CDX_EUNSUPPORTED, ppath, "allOf: only object schemas are merged");
            }
            const char *k;
            json_t *v;
            if (!c->rc)
                json_object_foreach(part, k, v) {
                    bool known;
                    const char *t = kw_type(k, &known);
                    if (!is_annotation(k) && strcmp(k, "type") && strcmp(k, "$ref") && (!t || strcmp(t, "object"))) {
                        fail(c, CDX_EUNSUPPORTED, ppath, "allOf: keyword \"%s\" in a member is not supported "
                             "(members are merged as objects)", k);
                        break;
                    }
                }
        }
        if (c->rc) {
            free(ppath);
            break;
        }
        json_t *a = json_object_get(part, "additionalProperties");
        if (a) {
            if (addl_seen || (pi > 0))
                fail(c, CDX_EUNSUPPORTED, ppath, "additionalProperties inside allOf is not supported");
            addl = a;
            addl_seen = true;
        }
        json_t *req = json_object_get(part, "required");
        if (req) {
            if (!json_is_array(req))
                fail(c, CDX_EINVAL, ppath, "required must be an array of strings");
            size_t i;
            json_t *v;
            json_array_foreach(req, i, v) {
                if (!json_is_string(v)) {
                    fail(c, CDX_EINVAL, ppath, "required[%zu] is not a string", i);
                    break;
                }
                json_array_append(req_all, v);
            }
        }
        json_t *ps = json_object_get(part, "properties");
        if (ps && !json_is_object(ps))
            fail(c, CDX_EINVAL, ppath, "properties must be an object");
        const char *k;
        json_t *v;
        if (ps && !c->rc)
            json_object_foreach(ps, k, v) {
                for (int i = 0; i < np; i++)
                    if (!strcmp(props[i].key, k))
                        fail(c, CDX_EUNSUPPORTED, ppath, "allOf: property \"%s\" is defined twice", k);
                if (np >= SC_MAX_PROPS)
                    fail(c, CDX_EUNSUPPORTED, ppath, "more than %d properties", SC_MAX_PROPS);
                if (c->rc)
                    break;
                char *pp = subpath(ppath, "properties"), *kp = pp ? subpath(pp, k) : NULL;
                free(pp);
                if (!kp) {
                    fail(c, CDX_ENOMEM, ppath, "out of memory");
                    break;
                }
                props[np].key = k;
                props[np].required = false;
                props[np].rule = rule_of(c, v, kp);
                np++;
                free(kp);
            }
        free(ppath);
    }
    /* required names must be properties (or allowed as additional) */
    size_t i;
    json_t *v;
    json_array_foreach(req_all, i, v) {
        if (c->rc)
            break;
        const char *k = json_string_value(v);
        int f = -1;
        for (int j = 0; j < np; j++)
            if (!strcmp(props[j].key, k))
                f = j;
        if (f < 0)
            fail(c, CDX_EUNSUPPORTED, path, "required property \"%s\" has no schema in properties", k);
        else
            props[f].required = true;
    }
    json_decref(req_all);
    if (c->rc)
        return c->rc;
    if (all_of && addl && !json_is_true(addl))
        return fail(c, CDX_EUNSUPPORTED, path, "additionalProperties beside allOf is not supported (it does not see "
                    "the properties of allOf's members)");
    /* additional properties: absent or true: any value; false: none; a schema: its rule */
    int addl_rule = -2; /* -2: none allowed */
    if (!addl || json_is_true(addl)) {
        addl_rule = -1; /* json-value */
        prim(c, P_VALUE);
    } else if (json_is_object(addl)) {
        char *ap = subpath(path, "additionalProperties");
        addl_rule = ap ? rule_of(c, addl, ap) : -2;
        free(ap);
        if (c->rc)
            return c->rc;
    } else if (!json_is_false(addl)) {
        return fail(c, CDX_EINVAL, path, "additionalProperties must be a boolean or a schema");
    }
    const char *ws = prim(c, P_WS);
    /* kv rules: one per property, then the additional one */
    int kv[SC_MAX_PROPS + 1];
    prop order[SC_MAX_PROPS];
    int no = 0;
    for (int j = 0; j < np; j++)
        if (props[j].required)
            order[no++] = props[j];
    int n_req = no;
    for (int j = 0; j < np; j++)
        if (!props[j].required)
            order[no++] = props[j];
    for (int j = 0; j < no; j++) {
        kv[j] = new_rule(c);
        sbuf e = { 0 };
        json_t *js = json_string(order[j].key);
        char *t = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        if (!t) {
            free(e.s);
            return fail(c, CDX_ENOMEM, path, "out of memory");
        }
        gbnf_lit(c, &e, t, strlen(t));
        free(t);
        sb_fmt(c, &e, " %s \":\" %s s%d", ws, ws, order[j].rule);
        put_rule(c, kv[j], &e);
        free(e.s);
    }
    int kv_add = -1;
    if (addl_rule != -2) {
        kv_add = new_rule(c);
        sbuf e = { 0 };
        const char *names[SC_MAX_PROPS];
        for (int j = 0; j < np; j++)
            names[j] = props[j].key;
        sb_add(c, &e, "\"\\\"\" ", 5);
        not_names(c, names, np, 0, &e);
        if (addl_rule == -1)
            sb_fmt(c, &e, " %s \":\" %s json-value", ws, ws);
        else
            sb_fmt(c, &e, " %s \":\" %s s%d", ws, ws, addl_rule);
        put_rule(c, kv_add, &e);
        free(e.s);
    }
    /* "{" ws, the required in order, each optional as ("," ws kv)?, then ("," ws extra)*; when
     * nothing is required, the first member present has no comma: one alternative per choice of
     * the first, each followed by the optional rest (tails[j]: what may follow after member j-1) */
    sb_fmt(c, b, "\"{\" %s ", ws);
    char more[64] = "";
    if (kv_add >= 0)
        snprintf(more, sizeof more, " (\",\" %s s%d)*", ws, kv_add);
    if (n_req) {
        for (int j = 0; j < n_req; j++)
            sb_fmt(c, b, j ? "\",\" %s s%d " : "%.0ss%d ", ws, kv[j]);
        for (int j = n_req; j < no; j++)
            sb_fmt(c, b, "(\",\" %s s%d)? ", ws, kv[j]);
        sb_fmt(c, b, "%s", more);
    } else if (no || kv_add >= 0) {
        /* tail rules from the back: tail[j] ::= ("," ws kv[j])? tail[j+1] */
        int tail[SC_MAX_PROPS + 1];
        tail[no] = new_rule(c);
        {
            sbuf e = { 0 };
            sb_add(c, &e, more[0] ? more + 1 : "\"\"", more[0] ? strlen(more) - 1 : 2);
            put_rule(c, tail[no], &e);
            free(e.s);
        }
        for (int j = no - 1; j >= 1; j--) {
            tail[j] = new_rule(c);
            sbuf e = { 0 };
            sb_fmt(c, &e, "(\",\" %s s%d)? s%d", ws, kv[j], tail[j + 1]);
            put_rule(c, tail[j], &e);
            free(e.s);
        }
        sb_add(c, b, "(", 1);
        for (int j = 0; j < no; j++)
            sb_fmt(c, b, "%ss%d s%d", j ? " | " : "", kv[j], tail[j + 1]);
        if (kv_add >= 0)
            sb_fmt(c, b, "%ss%d s%d", no ? " | " : "", kv_add, tail[no]);
        sb_add(c, b, ")?", 2);
    }
    sb_fmt(c, b, " \"}\" %s", ws);
    return c->rc;
}

static int visit_array(sc *c, json_t *s, const char *path, sbuf *b)
{
    long long mn = 0, mx = -1;
    get_count(c, s, "minItems", path, &mn);
    bool has_mx = get_count(c, s, "maxItems", path, &mx);
    if (c->rc)
        return c->rc;
    if (!has_mx)
        mx = -1;
    json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    if (pre && !json_is_array(pre))
        return fail(c, CDX_EINVAL, path, "prefixItems must be an array");
    size_t k = pre ? json_array_size(pre) : 0;
    if (k > SC_MAX_PROPS)
        return fail(c, CDX_EUNSUPPORTED, path, "prefixItems has more than %d schemas", SC_MAX_PROPS);
    if (items && json_is_false(items) && (mx < 0 || mx > (long long)k))
        mx = (long long)k;
    if (mx >= 0 && mx < mn)
        return fail(c, CDX_EINVAL, path, "maxItems %lld is below minItems %lld (or items is false after %zu prefixItems)",
                    mx, mn, k);
    int el_pre[SC_MAX_PROPS];
    for (size_t i = 0; i < k && !c->rc; i++) {
        char *ip = subpath_i(path, "prefixItems", i);
        el_pre[i] = ip ? rule_of(c, json_array_get(pre, i), ip) : -1;
        free(ip);
    }
    int el = -1;
    if (!items || json_is_true(items)) {
        prim(c, P_VALUE);
    } else if (json_is_object(items)) {
        char *ip = subpath(path, "items");
        el = ip ? rule_of(c, items, ip) : -1;
        free(ip);
    } else if (!json_is_false(items)) {
        return fail(c, CDX_EINVAL, path, "items must be a schema or a boolean (an array of schemas is prefixItems)");
    }
    if (c->rc)
        return c->rc;
    const char *ws = prim(c, P_WS);
    char elname[32];
    if (el >= 0)
        snprintf(elname, sizeof elname, "s%d", el);
    else
        snprintf(elname, sizeof elname, "json-value");
    sb_fmt(c, b, "\"[\" %s ", ws);
    /* positions 1..k from prefixItems, nested optional past minItems; then items */
    int open = 0;
    long long pos = 0;
    for (; pos < (long long)k && (mx < 0 || pos < mx); pos++) {
        bool opt = pos >= mn;
        if (opt) {
            sb_add(c, b, "(", 1);
            open++;
        }
        if (pos)
            sb_fmt(c, b, "\",\" %s ", ws);
        sb_fmt(c, b, "s%d ", el_pre[pos]);
    }
    bool more = !(items && json_is_false(items)) && (mx < 0 || pos < mx);
    if (more) {
        long long r = mn > pos ? mn - pos : 0;           /* still required */
        long long m = mx < 0 ? -1 : mx - pos;            /* still allowed */
        char rep[64];
        if (pos == 0) {
            /* the first element has no comma */
            if (m < 0)
                snprintf(rep, sizeof rep, "{%lld,}", r > 0 ? r - 1 : 0);
            else
                snprintf(rep, sizeof rep, "{%lld,%lld}", r > 0 ? r - 1 : 0, m - 1);
            sb_fmt(c, b, "%s%s (\",\" %s %s)%s%s ", r ? "" : "(", elname, ws, elname, rep, r ? "" : ")?");
        } else {
            if (m < 0)
                snprintf(rep, sizeof rep, "{%lld,}", r);
            else
                snprintf(rep, sizeof rep, "{%lld,%lld}", r, m);
            sb_fmt(c, b, "(\",\" %s %s)%s ", ws, elname, rep);
        }
    }
    for (; open > 0; open--)
        sb_add(c, b, ")? ", 3);
    sb_fmt(c, b, "\"]\" %s", ws);
    return c->rc;
}

static int visit_type(sc *c, json_t *s, const char *path, const char *t, sbuf *b, json_t *all_of)
{
    if (!strcmp(t, "string"))
        return visit_string(c, s, path, b);
    if (!strcmp(t, "integer"))
        return visit_integer(c, s, path, b);
    if (!strcmp(t, "number")) {
        static const char *const kws[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum" };
        for (int i = 0; i < 4; i++)
            if (json_object_get(s, kws[i]))
                return fail(c, CDX_EUNSUPPORTED, path, "%s on a number is not supported (only on integers)", kws[i]);
        sb_str(c, b, prim(c, P_NUMBER));
        return c->rc;
    }
    if (!strcmp(t, "boolean")) {
        sb_str(c, b, prim(c, P_BOOL));
        return c->rc;
    }
    if (!strcmp(t, "null")) {
        sb_str(c, b, prim(c, P_NULL));
        return c->rc;
    }
    if (!strcmp(t, "object"))
        return visit_object(c, s, path, b, all_of);
    if (!strcmp(t, "array"))
        return visit_array(c, s, path, b);
    return fail(c, CDX_EINVAL, path, "type \"%s\" is not a JSON Schema type", t);
}

static int visit(sc *c, json_t *s, const char *path, sbuf *b)
{
    if (c->rc)
        return c->rc;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        sb_str(c, b, prim(c, P_VALUE));
        return c->rc;
    }
    if (json_is_false(s))
        return fail(c, CDX_EUNSUPPORTED, path, "the schema false matches nothing");
    if (!json_is_object(s))
        return fail(c, CDX_EINVAL, path, "a schema must be an object or a boolean");
    if (++c->depth > SC_MAX_DEPTH)
        return fail(c, CDX_EUNSUPPORTED, path, "schemas nested deeper than %d", SC_MAX_DEPTH);
    /* every keyword is known, or an annotation; the inferred type when none is given */
    const char *k;
    json_t *v;
    const char *inferred = NULL;
    bool only_annotations = true;
    json_object_foreach(s, k, v) {
        bool known;
        const char *t = kw_type(k, &known);
        if (is_annotation(k))
            continue;
        if (!known)
            return fail(c, CDX_EUNSUPPORTED, path, "keyword \"%s\" is not supported", k);
        only_annotations = false;
        if (t) {
            if (inferred && strcmp(inferred, t))
                return fail(c, CDX_EUNSUPPORTED, path, "keywords of several types (\"%s\" is for %ss, others for %ss) "
                            "without a type", k, t, inferred);
            inferred = t;
        }
    }
    if (only_annotations) {
        sb_str(c, b, prim(c, P_VALUE));
        c->depth--;
        return c->rc;
    }
    json_t *ref = json_object_get(s, "$ref");
    json_t *any = json_object_get(s, "anyOf");
    const char *any_kw = "anyOf";
    if (!any) {
        any = json_object_get(s, "oneOf");
        any_kw = "oneOf";
    }
    json_t *all = json_object_get(s, "allOf");
    json_t *en = json_object_get(s, "enum"), *cst = json_object_get(s, "const");
    json_t *type = json_object_get(s, "type");
    /* combinations with siblings that would need an intersection */
    int n_comb = !!ref + !!any + !!en + !!cst;
    if (n_comb > 1 || (n_comb && (all || inferred)))
        return fail(c, CDX_EUNSUPPORTED, path, "%s beside other constraints is not supported (only type may "
                    "accompany enum/const)", ref ? "$ref" : any ? any_kw : en ? "enum" : "const");
    if (ref) {
        if (type)
            return fail(c, CDX_EUNSUPPORTED, path, "$ref beside type is not supported");
        if (!json_is_string(ref))
            return fail(c, CDX_EINVAL, path, "$ref must be a string");
        char *rp = subpath(path, "$ref");
        int r = rp ? ref_rule(c, json_string_value(ref), rp) : -1;
        free(rp);
        if (r >= 0)
            sb_fmt(c, b, "s%d", r);
        c->depth--;
        return c->rc;
    }
    if (any) {
        if (type)
            return fail(c, CDX_EUNSUPPORTED, path, "%s beside type is not supported (put the type in each branch)", any_kw);
        if (!json_is_array(any) || !json_array_size(any))
            return fail(c, CDX_EINVAL, path, "%s must be a non-empty array", any_kw);
        size_t i;
        sb_add(c, b, "(", 1);
        json_array_foreach(any, i, v) {
            char *ip = subpath_i(path, any_kw, i);
            int r = ip ? rule_of(c, v, ip) : -1;
            free(ip);
            if (r < 0)
                return c->rc ? c->rc : fail(c, CDX_ENOMEM, path, "out of memory");
            sb_fmt(c, b, "%ss%d", i ? " | " : "", r);
        }
        sb_add(c, b, ")", 1);
        c->depth--;
        return c->rc;
    }
    /* the types allowed */
    const char *types[8];
    int nt = 0;
    if (type) {
        if (json_is_string(type)) {
            types[nt++] = json_string_value(type);
        } else if (json_is_array(type) && json_array_size(type) && json_array_size(type) <= 7) {
            size_t i;
            json_array_foreach(type, i, v) {
                if (!json_is_string(v))
                    return fail(c, CDX_EINVAL, path, "type[%zu] is not a string", i);
                types[nt++] = json_string_value(v);
            }
        } else {
            return fail(c, CDX_EINVAL, path, "type must be a string or a non-empty array of strings");
        }
        for (int i = 0; i < nt; i++) {
            static const char *const known[] = { "string", "integer", "number", "boolean", "null", "object", "array" };
            bool ok = false;
            for (int j = 0; j < 7; j++)
                ok |= !strcmp(types[i], known[j]);
            if (!ok)
                return fail(c, CDX_EINVAL, path, "type \"%s\" is not a JSON Schema type", types[i]);
        }
    } else if (inferred) {
        types[nt++] = inferred;
    } else if (all) {
        types[nt++] = "object";
    }
    if (en || cst) {
        json_t *vals = en;
        if (cst) {
            vals = json_array();
            json_array_append(vals, cst);
        } else if (!json_is_array(en) || !json_array_size(en)) {
            return fail(c, CDX_EINVAL, path, "enum must be a non-empty array");
        }
        size_t i;
        int alts = 0;
        sb_add(c, b, "(", 1);
        json_array_foreach(vals, i, v) {
            bool ok = !nt;
            for (int t = 0; t < nt; t++)
                ok |= type_matches(v, types[t]);
            if (!ok)
                continue;
            if (alts++)
                sb_add(c, b, " | ", 3);
            const_lit(c, b, v);
        }
        sb_add(c, b, ")", 1);
        if (cst)
            json_decref(vals);
        if (!alts)
            return fail(c, CDX_EINVAL, path, "no %s value has the type given", cst ? "const" : "enum");
        c->depth--;
        return c->rc;
    }
    if (!nt) {
        sb_str(c, b, prim(c, P_VALUE));
        c->depth--;
        return c->rc;
    }
    if (all && (nt != 1 || strcmp(types[0], "object")))
        return fail(c, CDX_EUNSUPPORTED, path, "allOf is supported only for objects");
    if (all && !json_is_array(all))
        return fail(c, CDX_EINVAL, path, "allOf must be an array");
    sb_add(c, b, nt > 1 ? "(" : "", nt > 1);
    for (int t = 0; t < nt && !c->rc; t++) {
        if (t)
            sb_add(c, b, " | ", 3);
        visit_type(c, s, path, types[t], b, all);
    }
    sb_add(c, b, nt > 1 ? ")" : "", nt > 1);
    c->depth--;
    return c->rc;
}

int cdx_json_schema_to_gbnf(const char *schema_json, size_t len, const char *name, char **gbnf, cdx_err *err)
{
    *gbnf = NULL;
    if (!name)
        name = "schema";
    sc c = { .name = name, .err = err };
    if (!schema_json) {
        sb_fmt(&c, &c.out, "root ::= %s\n", prim(&c, P_OBJECT));
    } else {
        json_error_t je;
        c.root = json_loadb(schema_json, len, JSON_DECODE_ANY, &je);
        if (!c.root)
            return cdx_err_set(err, CDX_EINVAL, "%s:%d:%d: not JSON: %s", name, je.line, je.column, je.text);
        sbuf e = { 0 };
        if (visit(&c, c.root, "#", &e) == 0)
            sb_fmt(&c, &c.out, "root ::= %s\n", e.s);
        free(e.s);
        json_decref(c.root);
    }
    for (size_t i = 0; i < c.n_refs; i++)
        free(c.refs[i].ref);
    free(c.refs);
    if (c.rc) {
        free(c.out.s);
        return c.rc;
    }
    *gbnf = c.out.s;
    return CDX_OK;
}

int cdx_grammar_from_json_schema(const char *schema_json, size_t len, const char *name, cdx_grammar **out,
                                 cdx_err *err)
{
    *out = NULL;
    char *text = NULL;
    int rc = cdx_json_schema_to_gbnf(schema_json, len, name, &text, err);
    if (rc)
        return rc;
    char gname[300];
    snprintf(gname, sizeof gname, "%s (as GBNF)", name ? name : "schema");
    rc = cdx_grammar_from_gbnf(text, strlen(text), gname, out, err);
    free(text);
    return rc;
}
