/* GBNF (llama.cpp's grammar format, grammars/README.md there) -> the byte-level pushdown automaton
 * of grammar_int.h. Three passes: parse the text into expression trees (one per rule); build an
 * epsilon-automaton per rule (Thompson's construction over bytes: a character class becomes the
 * UTF-8 byte sequences of its code points, x{m,n} becomes copies of x); remove the epsilon moves,
 * drop dead states, and refuse left recursion (a rule that can reach itself without consuming a
 * byte would make the matcher's closure endless; llama.cpp refuses it too).
 * Syntax covered: rules `name ::= ...`, alternation `|`, grouping `( )`, `*` `+` `?` `{m}` `{m,}`
 * `{m,n}`, literals "..." and character classes [...] / [^...] with ranges, `.`, escapes \n \r \t
 * \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH, comments `#`, newlines inside groups, and a rule's
 * alternatives continued on lines that start with `|`. Literals and classes are code points
 * (UTF-8), as llama.cpp reads them. */
#include "text/grammar_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- expression trees ---- */

enum { X_SEQ, X_ALT, X_LIT, X_CLASS, X_REF, X_REP };

typedef struct gx {
    int kind;
    int n;                 /* SEQ/ALT: kids; LIT: bytes; CLASS: ranges */
    struct gx **kids;      /* SEQ, ALT; REP: kids[0] */
    uint8_t *bytes;        /* LIT (UTF-8) */
    uint32_t *ranges;      /* CLASS: n pairs lo, hi of code points, sorted, disjoint, already negated */
    int rule;              /* REF */
    int min, max;          /* REP; max < 0: unbounded */
} gx;

typedef struct {
    char *name;
    gx *body;              /* NULL: referenced, not (yet) defined */
    int line, col;         /* first reference, for "undefined rule" */
} prule;

typedef struct {
    const char *src, *name;
    size_t len, pos;
    prule *rules;
    int n_rules;
    size_t cap_rules;
    gx **all;              /* every node, freed at the end */
    size_t n_all, cap_all;
    int depth;             /* nesting of groups (bounded: no stack overflow on "((((...") */
    cdx_err *err;
    int rc;
} parser;

static void where(const parser *p, size_t pos, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (p->src[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static int perr(parser *p, size_t pos, const char *fmt, ...) CDX_PRINTF(3, 4);
static int perr(parser *p, size_t pos, const char *fmt, ...)
{
    if (p->rc)
        return p->rc;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    where(p, pos, &line, &col);
    p->rc = cdx_err_set(p->err, CDX_EINVAL, "%s:%d:%d: %s", p->name, line, col, msg);
    return p->rc;
}

static gx *node(parser *p, int kind)
{
    if (p->rc)
        return NULL;
    gx *x = calloc(1, sizeof *x);
    gx **all = x ? cdx_array_grow(p->all, &p->cap_all, p->n_all, sizeof *p->all) : NULL;
    if (!x || !all) {
        free(x);
        p->rc = cdx_err_set(p->err, CDX_ENOMEM, "out of memory");
        return NULL;
    }
    p->all = all;
    p->all[p->n_all++] = x;
    x->kind = kind;
    return x;
}

static void free_nodes(parser *p)
{
    for (size_t i = 0; i < p->n_all; i++) {
        free(p->all[i]->kids);
        free(p->all[i]->bytes);
        free(p->all[i]->ranges);
        free(p->all[i]);
    }
    free(p->all);
    for (int i = 0; i < p->n_rules; i++)
        free(p->rules[i].name);
    free(p->rules);
}

static bool add_kid(parser *p, gx *x, gx *k)
{
    if (p->rc)
        return false;
    gx **kids = realloc(x->kids, (size_t)(x->n + 1) * sizeof *kids);
    if (!kids) {
        p->rc = cdx_err_set(p->err, CDX_ENOMEM, "out of memory");
        return false;
    }
    x->kids = kids;
    x->kids[x->n++] = k;
    return true;
}

/* ---- lexing ---- */

static int peek(const parser *p) { return p->pos < p->len ? (unsigned char)p->src[p->pos] : -1; }

/* Skips blanks and comments; newlines too when nl (inside groups, after ::= and |). */
static void skip_space(parser *p, bool nl)
{
    while (p->pos < p->len) {
        char c = p->src[p->pos];
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->src[p->pos] != '\n')
                p->pos++;
        } else {
            break;
        }
    }
}

static bool is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes one UTF-8 code point at src[*pos] (invalid bytes: an error). */
static long utf8_at(parser *p)
{
    const unsigned char *s = (const unsigned char *)p->src + p->pos;
    size_t left = p->len - p->pos;
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || (size_t)n > left)
        return perr(p, p->pos, "invalid UTF-8 byte 0x%02X", c), -1;
    unsigned long cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return perr(p, p->pos, "invalid UTF-8 sequence"), -1;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    p->pos += (size_t)n;
    return (long)cp;
}

/* One character of a literal or class, escapes decoded; -1 on error. */
static long parse_char(parser *p)
{
    if (p->pos >= p->len)
        return perr(p, p->pos, "unexpected end of grammar"), -1;
    if (p->src[p->pos] != '\\')
        return utf8_at(p);
    size_t at = p->pos++;
    if (p->pos >= p->len)
        return perr(p, at, "unfinished escape"), -1;
    char c = p->src[p->pos++];
    int nhex = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (nhex) {
        unsigned long v = 0;
        for (int i = 0; i < nhex; i++) {
            int h = p->pos < p->len ? hexval((unsigned char)p->src[p->pos]) : -1;
            if (h < 0)
                return perr(p, at, "escape \\%c needs %d hex digits", c, nhex), -1;
            v = v * 16 + (unsigned long)h;
            p->pos++;
        }
        if (v > 0x10FFFF)
            return perr(p, at, "code point U+%lX is past U+10FFFF", v), -1;
        return (long)v;
    }
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/': return c;
    default: return perr(p, at, "unknown escape \\%c", c), -1;
    }
}

static int put_utf8(uint8_t *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { o[0] = (uint8_t)(0xC0 | cp >> 6); o[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12); o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18); o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static int rule_index(parser *p, const char *name, size_t n, size_t at)
{
    for (int i = 0; i < p->n_rules; i++)
        if (strlen(p->rules[i].name) == n && !memcmp(p->rules[i].name, name, n))
            return i;
    if (p->n_rules >= GR_MAX_RULES)
        return perr(p, at, "more than %d rules", GR_MAX_RULES), -1;
    prule *r = cdx_array_grow(p->rules, &p->cap_rules, (size_t)p->n_rules, sizeof *p->rules);
    char *s = r ? strndup(name, n) : NULL;
    if (!s) {
        if (r)
            p->rules = r;
        p->rc = cdx_err_set(p->err, CDX_ENOMEM, "out of memory");
        return -1;
    }
    p->rules = r;
    int line, col;
    where(p, at, &line, &col);
    p->rules[p->n_rules] = (prule){ .name = s, .line = line, .col = col };
    return p->n_rules++;
}

/* Sorts and merges code point ranges; negates over U+0000..U+10FFFF when neg. */
static int cmp_u32pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static int normalize_ranges(uint32_t *r, int n, bool neg, uint32_t **out)
{
    qsort(r, (size_t)n, 2 * sizeof *r, cmp_u32pair);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1])
                r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    if (!neg) {
        *out = r;
        return m;
    }
    uint32_t *o = malloc((size_t)(m + 1) * 2 * sizeof *o);
    if (!o)
        return -1;
    int k = 0;
    uint32_t next = 0;
    for (int i = 0; i < m; i++) {
        if (r[2 * i] > next) {
            o[2 * k] = next;
            o[2 * k + 1] = r[2 * i] - 1;
            k++;
        }
        next = r[2 * i + 1] + 1;
    }
    if (next <= 0x10FFFF) {
        o[2 * k] = next;
        o[2 * k + 1] = 0x10FFFF;
        k++;
    }
    free(r);
    *out = o;
    return k;
}

/* ---- parsing ---- */

static gx *parse_alts(parser *p, bool nested);

static gx *parse_class(parser *p)
{
    size_t at = p->pos++;   /* '[' */
    bool neg = peek(p) == '^';
    if (neg)
        p->pos++;
    uint32_t *r = NULL;
    int n = 0;
    while (!p->rc) {
        if (p->pos >= p->len || p->src[p->pos] == '\n')
            return perr(p, at, "unclosed character class"), free(r), NULL;
        if (p->src[p->pos] == ']')
            break;
        long lo = parse_char(p), hi = lo;
        if (lo < 0)
            break;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->src[p->pos + 1] != ']') {
            p->pos++;
            if (p->src[p->pos] == '\n') {
                perr(p, at, "unclosed character class");
                break;
            }
            hi = parse_char(p);
            if (hi < 0)
                break;
            if (hi < lo) {
                perr(p, at, "character range U+%04lX-U+%04lX is reversed", lo, hi);
                break;
            }
        }
        uint32_t *nr = realloc(r, (size_t)(n + 1) * 2 * sizeof *r);
        if (!nr) {
            p->rc = cdx_err_set(p->err, CDX_ENOMEM, "out of memory");
            break;
        }
        r = nr;
        r[2 * n] = (uint32_t)lo;
        r[2 * n + 1] = (uint32_t)hi;
        n++;
    }
    if (p->rc) {
        free(r);
        return NULL;
    }
    p->pos++; /* ']' */
    gx *x = node(p, X_CLASS);
    if (!x) {
        free(r);
        return NULL;
    }
    uint32_t *out;
    int m = n ? normalize_ranges(r, n, neg, &out) : 0;
    if (!n) {
        /* [] matches nothing; [^] everything */
        free(r);
        out = NULL;
        if (neg) {
            out = malloc(2 * sizeof *out);
            if (out) {
                out[0] = 0;
                out[1] = 0x10FFFF;
            }
            m = out ? 1 : -1;
        }
    }
    if (m < 0) {
        p->rc = cdx_err_set(p->err, CDX_ENOMEM, "out of memory");
        return NULL;
    }
    x->ranges = out;
    x->n = m;
    return x;
}

static gx *parse_literal(parser *p)
{
    size_t at = p->pos++; /* '"' */
    gx *x = node(p, X_LIT);
    if (!x)
        return NULL;
    size_t cap = 0;
    while (!p->rc) {
        if (p->pos >= p->len || p->src[p->pos] == '\n')
            return perr(p, at, "unclosed string literal"), NULL;
        if (p->src[p->pos] == '"')
            break;
        long c = parse_char(p);
        if (c < 0)
            return NULL;
        if ((size_t)x->n + 4 > cap) {
            cap = cap ? 2 * cap : 16;
            uint8_t *b = realloc(x->bytes, cap);
            if (!b)
                return p->rc = cdx_err_set(p->err, CDX_ENOMEM, "out of memory"), NULL;
            x->bytes = b;
        }
        x->n += put_utf8(x->bytes + x->n, (uint32_t)c);
    }
    p->pos++;
    return x;
}

static bool parse_count(parser *p, long *v)
{
    size_t at = p->pos;
    *v = 0;
    if (peek(p) < '0' || peek(p) > '9')
        return perr(p, at, "expected a number in {m,n}"), false;
    while (peek(p) >= '0' && peek(p) <= '9') {
        *v = *v * 10 + (p->src[p->pos++] - '0');
        if (*v > GR_MAX_REPEAT)
            return perr(p, at, "repetition count over %d", GR_MAX_REPEAT), false;
    }
    return true;
}

/* A sequence of items with their quantifiers; stops at '|', ')', end, or a newline when !nested. */
static gx *parse_seq(parser *p, bool nested)
{
    gx *seq = node(p, X_SEQ);
    while (seq && !p->rc) {
        skip_space(p, nested);
        int c = peek(p);
        size_t at = p->pos;
        gx *item = NULL;
        if (c < 0 || c == '|' || c == ')' || c == '\n' || c == '\r')
            break;
        if (c == '"') {
            item = parse_literal(p);
        } else if (c == '[') {
            item = parse_class(p);
        } else if (c == '.') {
            p->pos++;
            item = node(p, X_CLASS);
            if (item) {
                item->ranges = malloc(2 * sizeof *item->ranges);
                if (!item->ranges)
                    return p->rc = cdx_err_set(p->err, CDX_ENOMEM, "out of memory"), NULL;
                item->ranges[0] = 0;
                item->ranges[1] = 0x10FFFF;
                item->n = 1;
            }
        } else if (c == '(') {
            if (++p->depth > 256)
                return perr(p, at, "groups nested deeper than 256"), NULL;
            p->pos++;
            item = parse_alts(p, true);
            skip_space(p, true);
            if (!p->rc && peek(p) != ')')
                return perr(p, at, "unbalanced '(': no matching ')'"), NULL;
            p->pos++;
            p->depth--;
        } else if (is_name_char(c)) {
            size_t s = p->pos;
            while (is_name_char(peek(p)))
                p->pos++;
            size_t e = p->pos;
            skip_space(p, false);
            if (p->pos + 2 < p->len && !memcmp(p->src + p->pos, "::=", 3)) {
                /* the next rule starts here: this one ended at the previous line */
                p->pos = s;
                break;
            }
            p->pos = e;
            item = node(p, X_REF);
            if (item)
                item->rule = rule_index(p, p->src + s, e - s, s);
        } else if (c == '<') {
            return perr(p, at, "token references (<...>) are not supported"), NULL;
        } else {
            return perr(p, at, "unexpected character '%c'", c), NULL;
        }
        if (!item || p->rc)
            return NULL;
        /* quantifiers (only directly after the item, as in llama.cpp) */
        for (;;) {
            c = peek(p);
            long mn, mx;
            if (c == '*' || c == '+' || c == '?') {
                p->pos++;
                mn = c == '+' ? 1 : 0;
                mx = c == '?' ? 1 : -1;
            } else if (c == '{') {
                size_t qat = p->pos++;
                skip_space(p, false);
                if (!parse_count(p, &mn))
                    return NULL;
                skip_space(p, false);
                mx = mn;
                if (peek(p) == ',') {
                    p->pos++;
                    skip_space(p, false);
                    mx = -1;
                    if (peek(p) != '}' && !parse_count(p, &mx))
                        return NULL;
                    skip_space(p, false);
                }
                if (peek(p) != '}')
                    return perr(p, qat, "unclosed repetition {m,n}"), NULL;
                p->pos++;
                if (mx >= 0 && mx < mn)
                    return perr(p, qat, "repetition {%ld,%ld}: the maximum is below the minimum", mn, mx), NULL;
            } else {
                break;
            }
            gx *r = node(p, X_REP);
            if (!r || !add_kid(p, r, item))
                return NULL;
            r->min = (int)mn;
            r->max = (int)mx;
            item = r;
        }
        if (!add_kid(p, seq, item))
            return NULL;
    }
    return p->rc ? NULL : seq;
}

static gx *parse_alts(parser *p, bool nested)
{
    gx *alt = node(p, X_ALT);
    while (alt && !p->rc) {
        gx *s = parse_seq(p, nested);
        if (!s || !add_kid(p, alt, s))
            return NULL;
        /* a rule's alternatives may go on on lines that start with '|' */
        size_t save = p->pos;
        skip_space(p, true);
        if (peek(p) != '|') {
            p->pos = save;
            break;
        }
        p->pos++;
        skip_space(p, true);
    }
    return p->rc ? NULL : alt;
}

static int parse_rules(parser *p)
{
    for (;;) {
        skip_space(p, true);
        if (p->pos >= p->len)
            break;
        size_t at = p->pos;
        if (!is_name_char(peek(p)))
            return perr(p, at, "expected a rule name");
        while (is_name_char(peek(p)))
            p->pos++;
        size_t e = p->pos;
        skip_space(p, false);
        if (p->pos + 3 > p->len || memcmp(p->src + p->pos, "::=", 3))
            return perr(p, p->pos, "expected '::=' after rule name '%.*s'", (int)(e - at), p->src + at);
        p->pos += 3;
        int r = rule_index(p, p->src + at, e - at, at);
        if (r < 0)
            return p->rc;
        if (p->rules[r].body)
            return perr(p, at, "rule '%s' is defined twice", p->rules[r].name);
        skip_space(p, true);
        gx *body = parse_alts(p, false);
        if (!body)
            return p->rc;
        p->rules[r].body = body;
        skip_space(p, false);
        int c = peek(p);
        if (c == ')')
            return perr(p, p->pos, "unbalanced ')'");
        if (c >= 0 && c != '\n' && c != '\r' && !is_name_char(c))
            return perr(p, p->pos, "unexpected character '%c'", c);
    }
    for (int i = 0; i < p->n_rules; i++)
        if (!p->rules[i].body)
            return p->rc = cdx_err_set(p->err, CDX_EINVAL, "%s:%d:%d: undefined rule '%s'", p->name,
                                       p->rules[i].line, p->rules[i].col, p->rules[i].name);
    return 0;
}

/* ---- the epsilon automaton (Thompson) ---- */

enum { E_EPS, E_BYTE, E_CALL };

typedef struct {
    int32_t from, to;
    uint8_t kind, lo, hi;
    int32_t rule;
} nedge;

typedef struct {
    nedge *e;
    size_t n_e, cap_e;
    int32_t n_st;
    gx **inline_body;      /* [n_rules] a leaf rule's body, built in place of a call to it; else NULL */
    cdx_err *err;
    const char *name;
    int rc;
} nfa;

static int32_t nstate(nfa *a)
{
    if (a->rc)
        return 0;
    if (a->n_st >= GR_MAX_STATES) {
        a->rc = cdx_err_set(a->err, CDX_EINVAL, "%s: the grammar expands to more than %d states (a repetition "
                            "{m,n} or a length bound too large?)", a->name, GR_MAX_STATES);
        return 0;
    }
    return a->n_st++;
}

static void nedge_add(nfa *a, int32_t from, int32_t to, int kind, uint8_t lo, uint8_t hi, int32_t rule)
{
    if (a->rc)
        return;
    nedge *e = cdx_array_grow(a->e, &a->cap_e, a->n_e, sizeof *a->e);
    if (!e) {
        a->rc = cdx_err_set(a->err, CDX_ENOMEM, "out of memory");
        return;
    }
    a->e = e;
    a->e[a->n_e++] = (nedge){ from, to, (uint8_t)kind, lo, hi, rule };
}

/* Byte chain from s to t for one UTF-8 sequence of ranges lo[k]..hi[k]. */
static void chain(nfa *a, int32_t s, int32_t t, const uint8_t *lo, const uint8_t *hi, int n)
{
    for (int k = 0; k < n; k++) {
        int32_t nx = k == n - 1 ? t : nstate(a);
        nedge_add(a, s, nx, E_BYTE, lo[k], hi[k], 0);
        s = nx;
    }
}

static int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

/* Code points lo..hi (same UTF-8 length, no surrogates) as byte-range sequences (the method of
 * Rust's regex-syntax utf8 module: split until every byte position is a plain range). */
static void utf8_ranges(nfa *a, int32_t s, int32_t t, uint32_t lo, uint32_t hi)
{
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_ranges(a, s, t, lo, lo | m);
                utf8_ranges(a, s, t, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                utf8_ranges(a, s, t, lo, (hi & ~m) - 1);
                utf8_ranges(a, s, t, hi & ~m, hi);
                return;
            }
        }
    }
    uint8_t bl[4], bh[4];
    put_utf8(bl, lo);
    put_utf8(bh, hi);
    chain(a, s, t, bl, bh, n);
}

static void class_edges(nfa *a, int32_t s, int32_t t, const uint32_t *r, int n)
{
    static const uint32_t cuts[][2] = { { 0, 0x7F }, { 0x80, 0x7FF }, { 0x800, 0xD7FF }, { 0xE000, 0xFFFF },
                                        { 0x10000, 0x10FFFF } };
    for (int i = 0; i < n; i++)
        for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
            uint32_t lo = r[2 * i] > cuts[c][0] ? r[2 * i] : cuts[c][0];
            uint32_t hi = r[2 * i + 1] < cuts[c][1] ? r[2 * i + 1] : cuts[c][1];
            if (lo <= hi)
                utf8_ranges(a, s, t, lo, hi);
        }
}

static void build(nfa *a, const gx *x, int32_t s, int32_t t)
{
    if (a->rc)
        return;
    switch (x->kind) {
    case X_LIT:
        if (!x->n)
            nedge_add(a, s, t, E_EPS, 0, 0, 0);
        else
            chain(a, s, t, x->bytes, x->bytes, x->n);
        break;
    case X_CLASS:
        class_edges(a, s, t, x->ranges, x->n);
        break;
    case X_REF:
        if (a->inline_body && a->inline_body[x->rule])
            build(a, a->inline_body[x->rule], s, t);
        else
            nedge_add(a, s, t, E_CALL, 0, 0, x->rule);
        break;
    case X_ALT:
        for (int i = 0; i < x->n; i++)
            build(a, x->kids[i], s, t);
        break;
    case X_SEQ: {
        int32_t cur = s;
        for (int i = 0; i < x->n; i++) {
            int32_t nx = i == x->n - 1 ? t : nstate(a);
            build(a, x->kids[i], cur, nx);
            cur = nx;
        }
        if (!x->n)
            nedge_add(a, s, t, E_EPS, 0, 0, 0);
        break;
    }
    case X_REP: {
        int32_t cur = s;
        for (int i = 0; i < x->min; i++) {
            int32_t nx = nstate(a);
            build(a, x->kids[0], cur, nx);
            cur = nx;
            if (a->rc)
                return;
        }
        if (x->max < 0) {
            /* a fresh loop state: x from it back to it */
            int32_t m = nstate(a);
            nedge_add(a, cur, m, E_EPS, 0, 0, 0);
            build(a, x->kids[0], m, m);
            nedge_add(a, m, t, E_EPS, 0, 0, 0);
        } else {
            for (int i = x->min; i < x->max; i++) {
                int32_t nx = nstate(a);
                nedge_add(a, cur, t, E_EPS, 0, 0, 0);
                build(a, x->kids[0], cur, nx);
                cur = nx;
                if (a->rc)
                    return;
            }
            nedge_add(a, cur, t, E_EPS, 0, 0, 0);
        }
        break;
    }
    }
}

/* ---- epsilon removal, dead states, left recursion ---- */

/* Leaf rules (no references) of a small body are built inline where they are used: the matcher's
 * hot states then only read bytes (no push and pop per character of a `json-char*`), which makes
 * the trie walks several times faster. The language is the same. */
static int leaf_size(const gx *x)
{
    if (x->kind == X_REF)
        return 1 << 20;
    int64_t n = 1;
    for (int i = 0; i < x->n && (x->kind == X_SEQ || x->kind == X_ALT); i++)
        n += leaf_size(x->kids[i]);
    if (x->kind == X_REP)
        n += (int64_t)leaf_size(x->kids[0]) * (x->max > 0 ? x->max : x->min + 1);
    if (x->kind == X_LIT || x->kind == X_CLASS)
        n += x->n;
    return n > (1 << 20) ? 1 << 20 : (int)n;
}

static int cmp_nedge_from(const void *a, const void *b)
{
    const nedge *x = a, *y = b;
    return x->from < y->from ? -1 : x->from > y->from;
}

static int build_grammar(parser *p, nfa *a, cdx_grammar **out)
{
    cdx_err *err = p->err;
    const int nr = p->n_rules;
    int32_t *r_start = malloc((size_t)nr * sizeof *r_start), *r_end = malloc((size_t)nr * sizeof *r_end);
    if (!r_start || !r_end) {
        free(r_start);
        free(r_end);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    int32_t *st_rule = NULL;
    a->inline_body = calloc((size_t)nr, sizeof *a->inline_body);
    if (!a->inline_body) {
        free(r_start);
        free(r_end);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (int r = 0; r < nr; r++)
        if (leaf_size(p->rules[r].body) <= 256 && strcmp(p->rules[r].name, "root"))
            a->inline_body[r] = p->rules[r].body;
    for (int r = 0; r < nr && !a->rc; r++) {
        r_start[r] = nstate(a);
        r_end[r] = nstate(a);
        build(a, p->rules[r].body, r_start[r], r_end[r]);
    }
    int rc = a->rc;
    int32_t n = a->n_st;
    /* adjacency by source */
    size_t *off = NULL;
    int32_t *keep = NULL, *stack = NULL, *stamp = NULL;
    gr_edge *edges = NULL;
    gr_call *calls = NULL;
    gr_state *st = NULL;
    if (rc)
        goto done;
    qsort(a->e, a->n_e, sizeof *a->e, cmp_nedge_from);
    off = calloc((size_t)n + 1, sizeof *off);
    keep = malloc((size_t)n * sizeof *keep);
    stack = malloc((size_t)n * sizeof *stack);
    stamp = malloc((size_t)n * sizeof *stamp);
    st_rule = malloc((size_t)n * sizeof *st_rule);
    if (!off || !keep || !stack || !stamp || !st_rule) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < a->n_e; i++)
        off[a->e[i].from + 1]++;
    for (int32_t i = 0; i < n; i++)
        off[i + 1] += off[i];
    /* states kept: rule starts and targets of byte edges and call returns; each numbered. The
     * rule of a state: found by walking each rule from its start. */
    for (int32_t i = 0; i < n; i++) {
        keep[i] = -1;
        stamp[i] = -1;
        st_rule[i] = -1;
    }
    for (int r = 0; r < nr; r++) {
        int sp = 0;
        stack[sp++] = r_start[r];
        st_rule[r_start[r]] = r;
        while (sp) {
            int32_t q = stack[--sp];
            for (size_t k = off[q]; k < off[q + 1]; k++)
                if (st_rule[a->e[k].to] < 0) {
                    st_rule[a->e[k].to] = r;
                    stack[sp++] = a->e[k].to;
                }
        }
    }
    int32_t nk = 0;
    for (int r = 0; r < nr; r++)
        keep[r_start[r]] = nk++;
    for (size_t i = 0; i < a->n_e; i++)
        if (a->e[i].kind != E_EPS && keep[a->e[i].to] < 0 && st_rule[a->e[i].to] >= 0)
            keep[a->e[i].to] = nk++;
    int32_t *rep = malloc((size_t)nk * sizeof *rep); /* kept index -> nfa state */
    if (!rep) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n; i++)
        if (keep[i] >= 0)
            rep[keep[i]] = i;
    size_t cap_e = 0, cap_c = 0, ne = 0, nc = 0;
    st = calloc((size_t)nk, sizeof *st);
    if (!st) {
        free(rep);
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    for (int32_t k = 0; k < nk && !rc; k++) {
        int32_t q0 = rep[k];
        st[k].e0 = (int32_t)ne;
        st[k].c0 = (int32_t)nc;
        st[k].rule = st_rule[q0];
        int sp = 0;
        stack[sp++] = q0;
        stamp[q0] = k;
        while (sp && !rc) {
            int32_t q = stack[--sp];
            if (q == r_end[st_rule[q0]])
                st[k].final = true;
            for (size_t i = off[q]; i < off[q + 1]; i++) {
                const nedge *e = &a->e[i];
                if (e->kind == E_EPS) {
                    if (stamp[e->to] != k) {
                        stamp[e->to] = k;
                        stack[sp++] = e->to;
                    }
                } else if (e->kind == E_BYTE) {
                    gr_edge *ge = cdx_array_grow(edges, &cap_e, ne, sizeof *edges);
                    if (!ge) {
                        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
                        break;
                    }
                    edges = ge;
                    edges[ne++] = (gr_edge){ e->lo, e->hi, keep[e->to] };
                } else {
                    gr_call *gc = cdx_array_grow(calls, &cap_c, nc, sizeof *calls);
                    if (!gc) {
                        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
                        break;
                    }
                    calls = gc;
                    calls[nc++] = (gr_call){ e->rule, keep[e->to] };
                }
            }
        }
        st[k].ne = (int32_t)ne - st[k].e0;
        st[k].nc = (int32_t)nc - st[k].c0;
    }
    free(rep);
    if (rc)
        goto done;
    /* Rules that can match the empty string, then left recursion: rule r "left-calls" s when s is
     * called at a state reachable from r's start without a byte (over calls of nullable rules). */
    bool *nullable = calloc((size_t)nr, sizeof *nullable);
    bool *nfrom = calloc((size_t)nk, sizeof *nfrom); /* state can reach its rule's end without a byte */
    if (!nullable || !nfrom) {
        free(nullable);
        free(nfrom);
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t k = 0; k < nk; k++) {
            bool v = st[k].final;
            for (int32_t c = 0; c < st[k].nc && !v; c++)
                v = nullable[calls[st[k].c0 + c].rule] && nfrom[calls[st[k].c0 + c].ret];
            if (v && !nfrom[k]) {
                nfrom[k] = true;
                changed = true;
            }
        }
        for (int r = 0; r < nr; r++)
            if (!nullable[r] && nfrom[keep[r_start[r]]]) {
                nullable[r] = true;
                changed = true;
            }
    }
    /* left-call graph, then a depth-first search for a cycle */
    int32_t *lc_off = calloc((size_t)nr + 1, sizeof *lc_off), *lc = NULL;
    size_t n_lc = 0, cap_lc = 0;
    int32_t *zstack = malloc((size_t)nk * sizeof *zstack), *zst = malloc((size_t)nk * sizeof *zst);
    if (!lc_off || !zstack || !zst) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (int32_t i = 0; i < nk && !rc; i++)
        zst[i] = -1;
    for (int r = 0; r < nr && !rc; r++) {
        int sp = 0;
        zstack[sp++] = keep[r_start[r]];
        zst[keep[r_start[r]]] = r;
        while (sp && !rc) {
            int32_t q = zstack[--sp];
            for (int32_t c = 0; c < st[q].nc; c++) {
                const gr_call *gc = &calls[st[q].c0 + c];
                int32_t *l = cdx_array_grow(lc, &cap_lc, n_lc, sizeof *lc);
                if (!l) {
                    rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
                    break;
                }
                lc = l;
                lc[n_lc++] = gc->rule;
                if (nullable[gc->rule] && zst[gc->ret] != r) {
                    zst[gc->ret] = r;
                    zstack[sp++] = gc->ret;
                }
            }
        }
        lc_off[r + 1] = (int32_t)n_lc;
    }
    if (!rc) {
        /* colors: 0 white, 1 on the path, 2 done; iterative DFS with an explicit path */
        uint8_t *color = calloc((size_t)nr, 1);
        int32_t *path = malloc((size_t)nr * sizeof *path), *it = malloc((size_t)nr * sizeof *it);
        if (!color || !path || !it)
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        for (int r0 = 0; r0 < nr && !rc; r0++) {
            if (color[r0])
                continue;
            int depth = 0;
            path[depth] = r0;
            it[depth] = lc_off[r0];
            color[r0] = 1;
            while (depth >= 0 && !rc) {
                int32_t r = path[depth];
                if (it[depth] == lc_off[r + 1]) {
                    color[r] = 2;
                    depth--;
                    continue;
                }
                int32_t s = lc[it[depth]++];
                if (color[s] == 1) {
                    char cyc[512];
                    size_t used = 0;
                    int from = depth;
                    while (from > 0 && path[from] != s)
                        from--;
                    for (int i = from; i <= depth && used < sizeof cyc - 64; i++)
                        used += (size_t)snprintf(cyc + used, sizeof cyc - used, "%s -> ", p->rules[path[i]].name);
                    snprintf(cyc + used, sizeof cyc - used, "%s", p->rules[s].name);
                    rc = cdx_err_set(err, CDX_EINVAL, "%s: left recursion (%s): a rule reaches itself without "
                                     "consuming a character", p->name, cyc);
                } else if (!color[s]) {
                    color[s] = 1;
                    path[++depth] = s;
                    it[depth] = lc_off[s];
                }
            }
        }
        free(color);
        free(path);
        free(it);
    }
    free(lc_off);
    free(lc);
    free(zstack);
    free(zst);
    free(nullable);
    free(nfrom);
    if (rc)
        goto done;
    int root = -1;
    for (int r = 0; r < nr; r++)
        if (!strcmp(p->rules[r].name, "root"))
            root = r;
    if (root < 0) {
        rc = cdx_err_set(err, CDX_EINVAL, "%s: no rule named 'root' (the start rule)", p->name);
        goto done;
    }
    cdx_grammar *g = calloc(1, sizeof *g);
    if (g)
        g->refs = 1;
    if (!g) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    g->st = st;
    g->n_st = nk;
    g->edges = edges;
    g->n_edges = (int32_t)ne;
    g->calls = calls;
    g->n_calls = (int32_t)nc;
    g->n_rules = nr;
    g->root = root;
    pthread_mutex_init(&g->mu, NULL);
    g->rule_start = malloc((size_t)nr * sizeof *g->rule_start);
    g->rule_name = calloc((size_t)nr, sizeof *g->rule_name);
    st = NULL;
    edges = NULL;
    calls = NULL;
    if (!g->rule_start || !g->rule_name) {
        cdx_grammar_free(g);
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    for (int r = 0; r < nr; r++) {
        g->rule_start[r] = keep[r_start[r]];
        g->rule_name[r] = p->rules[r].name; /* taken */
        p->rules[r].name = NULL;
    }
    *out = g;
done:
    free(r_start);
    free(r_end);
    free(off);
    free(keep);
    free(stack);
    free(stamp);
    free(st_rule);
    free(st);
    free(edges);
    free(calls);
    return rc;
}

int cdx_grammar_from_gbnf(const char *text, size_t len, const char *name, cdx_grammar **out, cdx_err *err)
{
    *out = NULL;
    if (!name)
        name = "grammar";
    if (len > GR_MAX_TEXT)
        return cdx_err_set(err, CDX_EINVAL, "%s: %zu bytes of grammar is over the limit of %u", name, len,
                           GR_MAX_TEXT);
    parser p = { .src = text, .len = len, .name = name, .err = err };
    int rc = parse_rules(&p);
    if (!rc && !p.n_rules)
        rc = cdx_err_set(err, CDX_EINVAL, "%s: the grammar is empty (no rules)", name);
    nfa a = { .err = err, .name = name };
    if (!rc)
        rc = build_grammar(&p, &a, out);
    free(a.e);
    free(a.inline_body);
    free_nodes(&p);
    return rc;
}

cdx_grammar *cdx_grammar_ref(cdx_grammar *g)
{
    if (g)
        __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void cdx_grammar_free(cdx_grammar *g)
{
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    if (g->rule_name) {
        /* fully built (the mutex exists) */
        gr_cache_free(g);
        pthread_mutex_destroy(&g->mu);
    }
    free(g->st);
    free(g->edges);
    free(g->calls);
    free(g->rule_start);
    if (g->rule_name)
        for (int32_t i = 0; i < g->n_rules; i++)
            free(g->rule_name[i]);
    free(g->rule_name);
    free(g);
}

int32_t cdx_grammar_n_rules(const cdx_grammar *g) { return g->n_rules; }
int32_t cdx_grammar_n_states(const cdx_grammar *g) { return g->n_st; }
