/* The Jinja lexer, following jinja2/lexer.py (3.1) with trim_blocks and lstrip_blocks on, as
 * transformers configures it:
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it;
 *   - trim_blocks: a block or comment end "%}"/"#}" eats one newline right after it;
 *   - lstrip_blocks: spaces and tabs from the start of a line up to "{%" or "{#" are dropped
 *     ("{%+" keeps them); never before "{{";
 *   - inside a tag, "%}" / "}}" only end it when every bracket opened in it is closed.
 * Whitespace means Python's str.isspace(), as jinja's \s does. */
#include "text/jinja.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct lexer {
    jtemplate *t;
    const char *s;
    size_t n, pos;
    jtoken *toks;
    size_t nt, cap;
    cdx_err *err;
    jmp_buf jb;
    bool line_starting;
    char stack[256];
    int sp;
} lexer;

_Noreturn static void lfail(lexer *L, size_t off, const char *fmt, ...) CDX_PRINTF(3, 4);
static void lfail(lexer *L, size_t off, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    jinja_line_col(L->s, L->n, (uint32_t)off, &line, &col);
    cdx_err_set(L->err, CDX_ETEMPLATE, "template syntax error at line %d col %d: %s", line, col, msg);
    longjmp(L->jb, 1);
}

static void *lalloc(lexer *L, size_t n)
{
    void *p = ja_alloc(&L->t->arena, n);
    if (!p) {
        cdx_err_set(L->err, CDX_ENOMEM, "template: out of memory while lexing");
        longjmp(L->jb, 1);
    }
    return p;
}

static jtoken *emit(lexer *L, int type, size_t off, const char *s, size_t len)
{
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtoken *p = lalloc(L, cap * sizeof *p);
        if (L->nt)
            jcopy(p, L->toks, L->nt * sizeof *p);
        L->toks = p;
        L->cap = cap;
    }
    jtoken *tk = &L->toks[L->nt++];
    memset(tk, 0, sizeof *tk);
    tk->type = (uint8_t)type;
    tk->off = (uint32_t)off;
    tk->s = s;
    tk->len = len;
    return tk;
}

/* Length of the whitespace code point at s[i] (0 when it is not whitespace). */
static size_t ws_at(const char *s, size_t n, size_t i)
{
    if (i >= n)
        return 0;
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x80)
        return py_isspace(ch) ? 1 : 0;
    size_t j = i;
    int32_t cp = utf8_next(s, n, &j);
    return py_isspace(cp) ? j - i : 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    size_t k;
    while ((k = ws_at(s, n, i)) != 0)
        i += k;
    return i;
}

/* Python's str.rstrip(): the length of text without trailing whitespace. */
static size_t rstrip_len(const char *s, size_t n)
{
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80)
            start--;
        if (ws_at(s, n, start) != end - start)
            break;
        end = start;
    }
    return end;
}

static bool all_ws(const char *s, size_t from, size_t to)
{
    if (from >= to)
        return false; /* jinja's \s+ needs at least one */
    size_t i = from, k;
    while (i < to && (k = ws_at(s, to, i)) != 0)
        i += k;
    return i == to;
}

/* Data before a tag, with the tag's whitespace control applied (OptionalLStrip in jinja). */
static void emit_data(lexer *L, size_t from, size_t to, char sign, bool lstrip_ok)
{
    const char *s = L->s;
    if (sign == '-') {
        to = from + rstrip_len(s + from, to - from);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = from;
        for (size_t i = to; i > from; i--)
            if (s[i - 1] == '\n') {
                l_pos = i;
                break;
            }
        if ((l_pos > from || L->line_starting) && all_ws(s, l_pos, to))
            to = l_pos;
    }
    if (to > from)
        emit(L, TK_DATA, from, s + from, to - from);
}

static bool at(lexer *L, size_t i, const char *lit)
{
    size_t n = strlen(lit);
    return i + n <= L->n && memcmp(L->s + i, lit, n) == 0;
}

/* "{%[-+]?\s*raw\s*(-%}\s*|%})" at i: returns the end of the match, 0 when absent. */
static size_t match_raw_begin(lexer *L, size_t i)
{
    size_t p = i + 2;
    if (p < L->n && (L->s[p] == '-' || L->s[p] == '+'))
        p++;
    p = skip_ws(L->s, L->n, p);
    if (!at(L, p, "raw"))
        return 0;
    p = skip_ws(L->s, L->n, p + 3);
    if (at(L, p, "-%}"))
        return skip_ws(L->s, L->n, p + 3);
    if (at(L, p, "%}"))
        return p + 2;
    return 0;
}

/* Decodes a string literal's body as Python's unicode-escape does after jinja's
 * encode("ascii", "backslashreplace"). */
static void decode_string(lexer *L, jtoken *tk, const char *s, size_t n, size_t off)
{
    char *o = lalloc(L, n * 2 + 16), *start = o;
    size_t i = 0;
    while (i < n) {
        char ch = s[i];
        if (ch != '\\') {
            *o++ = ch;
            i++;
            continue;
        }
        if (i + 1 >= n) {
            lfail(L, off, "\\ at end of string");
        }
        unsigned char e = (unsigned char)s[i + 1];
        i += 2;
        int hexn = 0;
        switch (e) {
        case '\n': break;
        case '\\': *o++ = '\\'; break;
        case '\'': *o++ = '\''; break;
        case '"': *o++ = '"'; break;
        case 'a': *o++ = '\a'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'v': *o++ = '\v'; break;
        case 'x': hexn = 2; break;
        case 'u': hexn = 4; break;
        case 'U': hexn = 8; break;
        case 'N': lfail(L, off, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                unsigned v = e - '0';
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    v = v * 8 + (unsigned)(s[i++] - '0');
                hexn = -1;
                int32_t cp = (int32_t)v;
                o += utf8proc_encode_char(cp, (utf8proc_uint8_t *)o);
            } else if (e >= 0x80) {
                /* backslashreplace turned the character into \xNN / \uNNNN / \UNNNNNNNN, and the
                 * backslash before it escaped that backslash: the text stays literal */
                size_t j = i - 1;
                int32_t cp = utf8_next(s, n, &j);
                i = j;
                o += sprintf(o, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", (unsigned)cp);
            } else {
                *o++ = '\\';
                *o++ = (char)e;
            }
        }
        if (hexn > 0) {
            uint32_t v = 0;
            for (int k = 0; k < hexn; k++) {
                char h = i < n ? s[i] : 0;
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0)
                    lfail(L, off, "truncated \\%c escape in a string", e);
                v = v * 16 + (uint32_t)d;
                i++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                lfail(L, off, "string escape \\%c%0*x is not a Unicode scalar value", e, hexn, v);
            o += utf8proc_encode_char((int32_t)v, (utf8proc_uint8_t *)o);
        }
    }
    *o = 0;
    tk->s = start;
    tk->len = (size_t)(o - start);
}

/* One token inside {% %} or {{ }}; returns false at the end of the tag. */
static bool lex_tag_token(lexer *L, bool block)
{
    const char *s = L->s;
    size_t n = L->n, p = L->pos;
    if (L->sp == 0) {
        size_t end = 0;
        if (block) {
            if (at(L, p, "-%}"))
                end = skip_ws(s, n, p + 3);
            else if (at(L, p, "+%}"))
                end = p + 3;
            else if (at(L, p, "%}"))
                end = p + 2 + (p + 2 < n && s[p + 2] == '\n');
        } else {
            if (at(L, p, "-}}"))
                end = skip_ws(s, n, p + 3);
            else if (at(L, p, "}}"))
                end = p + 2;
        }
        if (end) {
            emit(L, block ? TK_BLOCK_END : TK_VAR_END, p, s + p, end - p);
            L->line_starting = s[end - 1] == '\n';
            L->pos = end;
            return false;
        }
    }
    if (p >= n)
        lfail(L, p, "unexpected end of template, expected '%s'", block ? "%}" : "}}");
    size_t k = ws_at(s, n, p);
    if (k) {
        L->pos = skip_ws(s, n, p);
        return true;
    }
    unsigned char ch = (unsigned char)s[p];
    if (ch >= '0' && ch <= '9') {
        /* float: digits ( (.digits)? e[+-]digits | .digits ), not right after a '.' */
        size_t q = p;
        while (q < n && ((s[q] >= '0' && s[q] <= '9') || (s[q] == '_' && q + 1 < n && s[q + 1] >= '0' && s[q + 1] <= '9')))
            q++;
        size_t fe = 0;
        if (!(p > 0 && s[p - 1] == '.')) {
            size_t r = q;
            bool frac = false;
            if (r + 1 < n && s[r] == '.' && s[r + 1] >= '0' && s[r + 1] <= '9') {
                r++;
                while (r < n && ((s[r] >= '0' && s[r] <= '9') || (s[r] == '_' && r + 1 < n && s[r + 1] >= '0' && s[r + 1] <= '9')))
                    r++;
                frac = true;
            }
            size_t e = r;
            if (e < n && (s[e] == 'e' || s[e] == 'E')) {
                e++;
                if (e < n && (s[e] == '+' || s[e] == '-'))
                    e++;
                if (e < n && s[e] >= '0' && s[e] <= '9') {
                    while (e < n && ((s[e] >= '0' && s[e] <= '9') || (s[e] == '_' && e + 1 < n && s[e + 1] >= '0' && s[e + 1] <= '9')))
                        e++;
                    fe = e;
                }
            }
            if (!fe && frac)
                fe = r;
        }
        if (fe) {
            char buf[128];
            size_t m = 0;
            for (size_t i = p; i < fe && m < sizeof buf - 1; i++)
                if (s[i] != '_')
                    buf[m++] = s[i];
            buf[m] = 0;
            jtoken *tk = emit(L, TK_FLOAT, p, s + p, fe - p);
            tk->f = strtod(buf, NULL);
            L->pos = fe;
            return true;
        }
        /* integer: 0b.. 0o.. 0x.. [1-9](_?\d)* 0(_?0)* */
        int base = 10;
        size_t q2 = p;
        if (ch == '0' && p + 1 < n && strchr("bBoOxX", s[p + 1]) && s[p + 1]) {
            char b = (char)(s[p + 1] | 0x20);
            base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
            q2 = p + 2;
            size_t digits_start = q2;
            while (q2 < n) {
                char d = s[q2];
                if (d == '_' && q2 + 1 < n) {
                    d = s[q2 + 1];
                    int dv = d >= '0' && d <= '9' ? d - '0' : (d | 0x20) >= 'a' && (d | 0x20) <= 'f' ? (d | 0x20) - 'a' + 10 : 99;
                    if (dv >= base)
                        break;
                    q2 += 2;
                    continue;
                }
                int dv = d >= '0' && d <= '9' ? d - '0' : (d | 0x20) >= 'a' && (d | 0x20) <= 'f' ? (d | 0x20) - 'a' + 10 : 99;
                if (dv >= base)
                    break;
                q2++;
            }
            if (q2 == digits_start) {
                base = 10;
                q2 = p + 1; /* just "0" */
            }
        } else if (ch == '0') {
            q2 = p + 1;
            while (q2 < n && (s[q2] == '0' || (s[q2] == '_' && q2 + 1 < n && s[q2 + 1] == '0')))
                q2 += s[q2] == '_' ? 2 : 1;
        } else {
            q2 = q;
        }
        uint64_t v = 0;
        for (size_t i = base == 10 ? p : p + 2; i < q2; i++) {
            char d = s[i];
            if (d == '_')
                continue;
            int dv = d >= '0' && d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10;
            if (v > (UINT64_MAX - (uint64_t)dv) / (uint64_t)base || v * (uint64_t)base + (uint64_t)dv > (uint64_t)INT64_MAX)
                lfail(L, p, "integer literal too large (caldrix integers are 64-bit)");
            v = v * (uint64_t)base + (uint64_t)dv;
        }
        jtoken *tk = emit(L, TK_INT, p, s + p, q2 - p);
        tk->i = (int64_t)v;
        L->pos = q2;
        return true;
    }
    if (ch == '_' || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') || ch >= 0x80) {
        size_t q = p;
        while (q < n) {
            unsigned char d = (unsigned char)s[q];
            if (d == '_' || ((d | 0x20) >= 'a' && (d | 0x20) <= 'z') || (d >= '0' && d <= '9')) {
                q++;
                continue;
            }
            if (d >= 0x80) {
                size_t j = q;
                int32_t cp = utf8_next(s, n, &j);
                if (py_isalnum(cp)) {
                    q = j;
                    continue;
                }
            }
            break;
        }
        if (q == p)
            lfail(L, p, "unexpected character in tag");
        emit(L, TK_NAME, p, s + p, q - p);
        L->pos = q;
        return true;
    }
    if (ch == '\'' || ch == '"') {
        size_t q = p + 1;
        while (q < n && s[q] != (char)ch) {
            if (s[q] == '\\')
                q++;
            q++;
        }
        if (q >= n)
            lfail(L, p, "unexpected char %c (an unterminated string?)", ch);
        jtoken *tk = emit(L, TK_STRING, p, NULL, 0);
        decode_string(L, tk, s + p + 1, q - p - 1, p);
        L->pos = q + 1;
        return true;
    }
    static const char *const ops2[] = { "//", "**", "==", "!=", ">=", "<=" };
    for (size_t i = 0; i < sizeof ops2 / sizeof ops2[0]; i++)
        if (at(L, p, ops2[i])) {
            emit(L, TK_OP, p, s + p, 2);
            L->pos = p + 2;
            return true;
        }
    if (strchr("+-/*%~[](){}><=.:|,;", ch) && ch) {
        if (ch == '(' || ch == '[' || ch == '{') {
            if (L->sp >= (int)sizeof L->stack)
                lfail(L, p, "brackets nested too deeply");
            L->stack[L->sp++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
        } else if (ch == ')' || ch == ']' || ch == '}') {
            if (L->sp == 0)
                lfail(L, p, "unexpected '%c'", ch);
            char want = L->stack[--L->sp];
            if (want != (char)ch)
                lfail(L, p, "unexpected '%c', expected '%c'", ch, want);
        }
        emit(L, TK_OP, p, s + p, 1);
        L->pos = p + 1;
        return true;
    }
    if (ch >= 0x20 && ch < 0x7f)
        lfail(L, p, "unexpected char '%c'", ch);
    lfail(L, p, "unexpected char \\x%02x", ch);
}

int jinja_lex(jtemplate *t, jtoken **toks, size_t *n_toks, cdx_err *err)
{
    lexer L = { .t = t, .s = t->src, .n = t->src_len, .err = err, .line_starting = true };
    if (setjmp(L.jb))
        return err && err->code ? err->code : CDX_ETEMPLATE;
    const char *s = L.s;
    size_t n = L.n;
    while (L.pos < n) {
        /* the next "{{", "{%" or "{#" */
        size_t i = L.pos;
        const char *hit = NULL;
        while (i + 1 < n) {
            const char *q = memchr(s + i, '{', n - i - 1);
            if (!q)
                break;
            i = (size_t)(q - s);
            if (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#') {
                hit = q;
                break;
            }
            i++;
        }
        if (!hit) {
            emit(&L, TK_DATA, L.pos, s + L.pos, n - L.pos);
            L.line_starting = s[n - 1] == '\n';
            L.pos = n;
            break;
        }
        char kind = s[i + 1];
        char sign = i + 2 < n && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
        size_t raw_end = kind == '%' ? match_raw_begin(&L, i) : 0;
        emit_data(&L, L.pos, i, sign, kind != '{');
        if (raw_end) {
            L.line_starting = s[raw_end - 1] == '\n';
            /* (.*?)({%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)) */
            size_t p = raw_end, body_end = 0, end = 0;
            char esign = 0;
            for (; p + 1 < n; p++) {
                if (s[p] != '{' || s[p + 1] != '%')
                    continue;
                size_t q = p + 2;
                char sg = 0;
                if (q < n && (s[q] == '-' || s[q] == '+'))
                    sg = s[q++];
                q = skip_ws(s, n, q);
                if (!at(&L, q, "endraw"))
                    continue;
                q = skip_ws(s, n, q + 6);
                if (at(&L, q, "+%}"))
                    end = q + 3;
                else if (at(&L, q, "-%}"))
                    end = skip_ws(s, n, q + 3);
                else if (at(&L, q, "%}"))
                    end = q + 2 + (q + 2 < n && s[q + 2] == '\n');
                else
                    continue;
                body_end = p;
                esign = sg;
                break;
            }
            if (!end)
                lfail(&L, i, "missing end of raw directive");
            emit_data(&L, raw_end, body_end, esign, true);
            L.line_starting = s[end - 1] == '\n';
            L.pos = end;
            continue;
        }
        if (kind == '#') {
            size_t p = i + 2 + (sign ? 1 : 0), end = 0;
            for (; p + 1 < n; p++) {
                if (s[p] == '+' && at(&L, p + 1, "#}")) {
                    end = p + 3;
                    break;
                }
                if (s[p] == '-' && at(&L, p + 1, "#}")) {
                    end = skip_ws(s, n, p + 3);
                    break;
                }
                if (s[p] == '#' && s[p + 1] == '}') {
                    end = p + 2 + (p + 2 < n && s[p + 2] == '\n');
                    break;
                }
            }
            if (!end)
                lfail(&L, i, "missing end of comment tag");
            L.line_starting = s[end - 1] == '\n';
            L.pos = end;
            continue;
        }
        bool block = kind == '%';
        emit(&L, block ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, i, s + i, 2);
        L.line_starting = false;
        L.pos = i + 2 + (sign ? 1 : 0);
        L.sp = 0;
        while (lex_tag_token(&L, block)) {
        }
    }
    emit(&L, TK_EOF, n, s + n, 0);
    *toks = L.toks;
    *n_toks = L.nt;
    return 0;
}
