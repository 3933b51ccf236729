/* Jinja builtins: filters, tests, global functions, and the Python methods templates call on
 * str, dict and list values. Each follows jinja2/filters.py, jinja2/tests.py or CPython's
 * behaviour; the sandbox rules of ImmutableSandboxedEnvironment apply (list.append, dict.update
 * and the other mutating methods are refused, range() is capped at 100000 items). */
#include "text/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

/* ---- argument binding ---- */

void jbind(jctx *c, jcall *a, uint32_t off, const char *fname, const char *const *names, jval *out)
{
    size_t np = 0;
    while (names[np])
        np++;
    for (size_t i = 0; i < np; i++)
        out[i] = jv_undef(NULL);
    if (a->n_pos > np)
        jfail(c, off, "%s() takes at most %zu argument(s) (%zu given)", fname, np, a->n_pos);
    for (size_t i = 0; i < a->n_pos; i++)
        out[i] = a->pos[i];
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i = 0;
        while (i < np && strcmp(names[i], a->kw[k]))
            i++;
        if (i == np)
            jfail(c, off, "%s() got an unexpected keyword argument '%s'", fname, a->kw[k]);
        if (jarg_given(out[i]))
            jfail(c, off, "%s() got multiple values for argument '%s'", fname, a->kw[k]);
        out[i] = a->kwv[k];
    }
}

static void no_args(jctx *c, jcall *a, uint32_t off, const char *fname)
{
    if (a->n_pos || a->n_kw)
        jfail(c, off, "%s() takes no arguments", fname);
}

static int64_t want_int(jctx *c, jval v, uint32_t off, const char *what)
{
    if (v.t == JT_INT)
        return v.i;
    if (v.t == JT_BOOL)
        return v.b;
    jfail(c, off, "%s must be an integer, not '%s'", what, jv_type_name(v));
}

static jstr *want_str(jctx *c, jval v, uint32_t off, const char *what)
{
    if (v.t == JT_STR)
        return v.s;
    jfail(c, off, "%s must be str, not %s", what, jv_type_name(v));
}

/* ---- unicode case ---- */

typedef enum { CASE_UPPER, CASE_LOWER, CASE_TITLE } case_kind;

static void put_cp(jctx *c, jbuf *b, int32_t cp)
{
    char tmp[8];
    utf8proc_ssize_t n = utf8proc_encode_char(cp, (utf8proc_uint8_t *)tmp);
    jb_put(c, b, tmp, (size_t)n);
}

static void put_case(jctx *c, jbuf *b, int32_t cp, case_kind k)
{
    if (cp == 0xDF && k != CASE_LOWER) { /* full case mapping of sharp s, as Python does */
        jb_puts(c, b, k == CASE_UPPER ? "SS" : "Ss");
        return;
    }
    if (cp < 0x80) {
        char ch = (char)cp;
        if (k == CASE_LOWER && ch >= 'A' && ch <= 'Z')
            ch = (char)(ch + 32);
        else if (k != CASE_LOWER && ch >= 'a' && ch <= 'z')
            ch = (char)(ch - 32);
        jb_putc(c, b, ch);
        return;
    }
    put_cp(c, b, k == CASE_UPPER ? utf8proc_toupper(cp) : k == CASE_LOWER ? utf8proc_tolower(cp) : utf8proc_totitle(cp));
}

static jval str_case(jctx *c, const jstr *s, case_kind k)
{
    jbuf b = {0};
    size_t i = 0;
    while (i < s->len)
        put_case(c, &b, utf8_next(s->s, s->len, &i), k);
    return jv_strbuf(c, &b);
}

static bool is_cased(int32_t cp)
{
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

/* str.title(): a cased character after an uncased one starts a word. */
static jval str_title(jctx *c, const jstr *s)
{
    jbuf b = {0};
    size_t i = 0;
    bool prev_cased = false;
    while (i < s->len) {
        int32_t cp = utf8_next(s->s, s->len, &i);
        bool cased = is_cased(cp);
        put_case(c, &b, cp, prev_cased ? CASE_LOWER : CASE_TITLE);
        prev_cased = cased;
    }
    return jv_strbuf(c, &b);
}

static jval str_capitalize(jctx *c, const jstr *s)
{
    jbuf b = {0};
    size_t i = 0;
    bool first = true;
    while (i < s->len) {
        int32_t cp = utf8_next(s->s, s->len, &i);
        put_case(c, &b, cp, first ? CASE_TITLE : CASE_LOWER);
        first = false;
    }
    return jv_strbuf(c, &b);
}

/* ---- strip / split ---- */

static bool in_chars(const jstr *chars, int32_t cp)
{
    size_t i = 0;
    while (i < chars->len)
        if (utf8_next(chars->s, chars->len, &i) == cp)
            return true;
    return false;
}

/* which: 1 left, 2 right, 3 both. chars NULL: whitespace. */
static jval str_strip(jctx *c, jval v, const jstr *chars, int which)
{
    const jstr *s = v.s;
    size_t b = 0, e = s->len;
    if (which & 1) {
        while (b < e) {
            size_t j = b;
            int32_t cp = utf8_next(s->s, e, &j);
            if (chars ? !in_chars(chars, cp) : !py_isspace(cp))
                break;
            b = j;
        }
    }
    if (which & 2) {
        while (e > b) {
            size_t st = e - 1;
            while (st > b && ((unsigned char)s->s[st] & 0xC0) == 0x80)
                st--;
            size_t j = st;
            int32_t cp = utf8_next(s->s, e, &j);
            if (chars ? !in_chars(chars, cp) : !py_isspace(cp))
                break;
            e = st;
        }
    }
    if (b == 0 && e == s->len)
        return v;
    return jv_str(c, s->s + b, e - b);
}

static jval strip_method(jctx *c, jval self, jcall *a, uint32_t off, int which, const char *name)
{
    static const char *const names[] = { "chars", NULL };
    jval p[1];
    jbind(c, a, off, name, names, p);
    const jstr *chars = NULL;
    if (jarg_given(p[0]) && p[0].t != JT_NONE)
        chars = want_str(c, p[0], off, "strip arg");
    return str_strip(c, self, chars, which);
}

/* Python str.split / rsplit. */
static jval str_split(jctx *c, const jstr *s, const jstr *sep, int64_t maxsplit, bool right, uint32_t off)
{
    jval out = jv_list(c, 0, false);
    if (sep && sep->len == 0)
        jfail(c, off, "empty separator");
    if (maxsplit < 0)
        maxsplit = INT64_MAX;
    if (!sep) {
        /* runs of whitespace; no empty strings */
        jval parts = jv_list(c, 0, false);
        if (!right) {
            size_t i = 0;
            int64_t splits = 0;
            while (i < s->len) {
                size_t j = i;
                while (j < s->len) {
                    size_t k = j;
                    if (!py_isspace(utf8_next(s->s, s->len, &k)))
                        break;
                    j = k;
                }
                i = j;
                if (i >= s->len)
                    break;
                if (splits == maxsplit) {
                    /* the rest as it is, trailing whitespace included */
                    jl_push(c, parts.l, jv_str(c, s->s + i, s->len - i));
                    break;
                }
                size_t st = i;
                while (j < s->len) {
                    size_t k = j;
                    if (py_isspace(utf8_next(s->s, s->len, &k)))
                        break;
                    j = k;
                }
                jl_push(c, parts.l, jv_str(c, s->s + st, j - st));
                splits++;
                i = j;
            }
            jinja_step(c, off, parts.l->n);
            return parts;
        }
        /* rsplit(None): scan from the right */
        size_t e = s->len;
        int64_t splits = 0;
        while (e > 0) {
            /* skip trailing whitespace */
            for (;;) {
                if (e == 0)
                    break;
                size_t st = e - 1;
                while (st > 0 && ((unsigned char)s->s[st] & 0xC0) == 0x80)
                    st--;
                size_t k = st;
                if (!py_isspace(utf8_next(s->s, s->len, &k)))
                    break;
                e = st;
            }
            if (e == 0)
                break;
            if (splits == maxsplit) {
                jl_push(c, parts.l, jv_str(c, s->s, e));
                break;
            }
            size_t b = e;
            for (;;) {
                if (b == 0)
                    break;
                size_t st = b - 1;
                while (st > 0 && ((unsigned char)s->s[st] & 0xC0) == 0x80)
                    st--;
                size_t k = st;
                if (py_isspace(utf8_next(s->s, s->len, &k)))
                    break;
                b = st;
            }
            jl_push(c, parts.l, jv_str(c, s->s + b, e - b));
            splits++;
            e = b;
        }
        for (size_t i = parts.l->n; i-- > 0;)
            jl_push(c, out.l, parts.l->v[i]);
        jinja_step(c, off, out.l->n);
        return out;
    }
    if (!right) {
        size_t i = 0;
        int64_t splits = 0;
        for (;;) {
            const char *hit = splits < maxsplit ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
            if (!hit) {
                jl_push(c, out.l, jv_str(c, s->s + i, s->len - i));
                break;
            }
            size_t h = (size_t)(hit - s->s);
            jl_push(c, out.l, jv_str(c, s->s + i, h - i));
            i = h + sep->len;
            splits++;
        }
        jinja_step(c, off, out.l->n);
        return out;
    }
    jval parts = jv_list(c, 0, false);
    size_t e = s->len;
    int64_t splits = 0;
    for (;;) {
        size_t hit = SIZE_MAX;
        if (splits < maxsplit && e >= sep->len)
            for (size_t k = e - sep->len + 1; k-- > 0;)
                if (memcmp(s->s + k, sep->s, sep->len) == 0) {
                    hit = k;
                    break;
                }
        if (hit == SIZE_MAX) {
            jl_push(c, parts.l, jv_str(c, s->s, e));
            break;
        }
        jl_push(c, parts.l, jv_str(c, s->s + hit + sep->len, e - hit - sep->len));
        e = hit;
        splits++;
    }
    for (size_t i = parts.l->n; i-- > 0;)
        jl_push(c, out.l, parts.l->v[i]);
    jinja_step(c, off, out.l->n);
    return out;
}

static jval str_replace(jctx *c, jval v, const jstr *old, const jstr *new_, int64_t count, uint32_t off)
{
    const jstr *s = v.s;
    if (count < 0)
        count = INT64_MAX;
    jbuf b = {0};
    if (old->len == 0) {
        /* inserts new before every character and at the end, up to count times */
        size_t i = 0;
        int64_t done = 0;
        while (i <= s->len) {
            if (done < count) {
                jb_put(c, &b, new_->s, new_->len);
                done++;
            }
            if (i == s->len)
                break;
            size_t st = i;
            utf8_next(s->s, s->len, &i);
            jb_put(c, &b, s->s + st, i - st);
        }
        jinja_step(c, off, b.n / 8);
        return jv_strbuf(c, &b);
    }
    size_t i = 0;
    int64_t done = 0;
    while (done < count) {
        const char *hit = memmem(s->s + i, s->len - i, old->s, old->len);
        if (!hit)
            break;
        size_t h = (size_t)(hit - s->s);
        jb_put(c, &b, s->s + i, h - i);
        jb_put(c, &b, new_->s, new_->len);
        i = h + old->len;
        done++;
    }
    if (done == 0)
        return v;
    jb_put(c, &b, s->s + i, s->len - i);
    jinja_step(c, off, b.n / 8);
    return jv_strbuf(c, &b);
}

/* Python's str.splitlines() (keepends=False). */
static jval str_splitlines(jctx *c, const jstr *s, uint32_t off)
{
    jval out = jv_list(c, 0, false);
    size_t i = 0, start = 0;
    while (i < s->len) {
        size_t st = i;
        int32_t cp = utf8_next(s->s, s->len, &i);
        bool br = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                  cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!br)
            continue;
        jl_push(c, out.l, jv_str(c, s->s + start, st - start));
        if (cp == '\r' && i < s->len && s->s[i] == '\n')
            i++;
        start = i;
    }
    if (start < s->len)
        jl_push(c, out.l, jv_str(c, s->s + start, s->len - start));
    jinja_step(c, off, out.l->n);
    return out;
}

/* ---- sorting (stable merge sort; comparisons may fail the render, so no qsort) ---- */

typedef struct sort_ctx {
    jctx *c;
    uint32_t off;
    bool reverse;
    bool case_insensitive;
} sort_ctx;

static jval fold_key(jctx *c, jval v, bool ci)
{
    if (ci && v.t == JT_STR)
        return str_case(c, v.s, CASE_LOWER);
    return v;
}

/* Sorts idx[] by keys[idx]; stable. */
static void merge_sort(sort_ctx *S, jval *keys, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(S, keys, idx, tmp, h);
    merge_sort(S, keys, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r = jv_cmp(S->c, keys[idx[j]], keys[idx[i]], S->off);
        if (S->reverse)
            r = -r;
        /* take the right one only when strictly smaller: keeps equal keys in order */
        if (r < 0)
            tmp[k++] = idx[j++];
        else
            tmp[k++] = idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    jcopy(idx, tmp, n * sizeof *idx);
    jinja_step(S->c, S->off, n);
}

/* Returns a new list of items ordered by keys (same length). */
static jval sorted_by(jctx *c, jlist *items, jval *keys, bool reverse, uint32_t off)
{
    size_t n = items->n;
    size_t *idx = jalloc(c, (n + 1) * sizeof *idx, off), *tmp = jalloc(c, (n + 1) * sizeof *tmp, off);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    sort_ctx S = { c, off, reverse, false };
    merge_sort(&S, keys, idx, tmp, n);
    jval out = jv_list(c, n, false);
    for (size_t i = 0; i < n; i++)
        out.l->v[i] = items->v[idx[i]];
    out.l->n = n;
    return out;
}

/* jinja's make_attrgetter: "a.b.0" walks getitem (keys first), digits as integers. */
static jval attr_path(jctx *c, jval item, const jstr *path, uint32_t off)
{
    size_t i = 0;
    while (i <= path->len) {
        const char *dot = memchr(path->s + i, '.', path->len - i);
        size_t e = dot ? (size_t)(dot - path->s) : path->len;
        bool digits = e > i;
        for (size_t k = i; k < e; k++)
            if (path->s[k] < '0' || path->s[k] > '9')
                digits = false;
        jval key;
        if (digits && e - i < 18) {
            key = jv_int(strtoll(path->s + i, NULL, 10));
        } else {
            key = jv_str(c, path->s + i, e - i);
        }
        item = jinja_getitem(c, item, key, off);
        if (!dot)
            break;
        i = e + 1;
    }
    return item;
}

static jval attr_get(jctx *c, jval item, jval attr, uint32_t off)
{
    if (attr.t == JT_STR)
        return attr_path(c, item, attr.s, off);
    if (attr.t == JT_INT || attr.t == JT_BOOL)
        return jinja_getitem(c, item, attr, off);
    jfail(c, off, "attribute must be a string or an integer");
}

/* ---- html escape ---- */

jval jinja_markup(jctx *c, jval v)
{
    if (v.t == JT_STR && v.s->markup)
        return v;
    jstr *s = jv_to_str(c, v);
    jval r = jv_str(c, s->s, s->len);
    r.s->markup = true;
    return r;
}

static jval html_escape(jctx *c, jval v);

jval jinja_escape(jctx *c, jval v)
{
    if (v.t == JT_STR && v.s->markup)
        return v;
    return html_escape(c, v);
}

/* Markup.escape(str(v)): always escapes. */
static jval html_escape(jctx *c, jval v)
{
    jstr *s = jv_to_str(c, v);
    jbuf b = {0};
    for (size_t i = 0; i < s->len; i++) {
        switch (s->s[i]) {
        case '&': jb_puts(c, &b, "&amp;"); break;
        case '<': jb_puts(c, &b, "&lt;"); break;
        case '>': jb_puts(c, &b, "&gt;"); break;
        case '"': jb_puts(c, &b, "&#34;"); break;
        case '\'': jb_puts(c, &b, "&#39;"); break;
        default: jb_putc(c, &b, s->s[i]);
        }
    }
    jval r = jv_strbuf(c, &b);
    r.s->markup = true;
    return r;
}

/* ---- printf-style formatting: "%s" % x, |format ---- */

jval jinja_str_format(jctx *c, jval fmt, jval args, uint32_t off);

jval jinja_str_format(jctx *c, jval fmt, jval args, uint32_t off)
{
    const jstr *f = fmt.s;
    jlist *list = NULL;
    jval single = args;
    if (args.t == JT_LIST && args.l->tuple)
        list = args.l;
    size_t ai = 0;
    jbuf b = {0};
    for (size_t i = 0; i < f->len; i++) {
        if (f->s[i] != '%') {
            jb_putc(c, &b, f->s[i]);
            continue;
        }
        if (++i >= f->len)
            jfail(c, off, "incomplete format");
        if (f->s[i] == '%') {
            jb_putc(c, &b, '%');
            continue;
        }
        /* flags, width, precision */
        char spec[32];
        size_t sn = 0;
        spec[sn++] = '%';
        while (i < f->len && strchr("-+ #0", f->s[i]) && sn < 10)
            spec[sn++] = f->s[i++];
        size_t wstart = sn;
        while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9' && sn < 20)
            spec[sn++] = f->s[i++];
        if (sn - wstart > 5)
            jfail(c, off, "format width too large");
        if (i < f->len && f->s[i] == '.') {
            spec[sn++] = f->s[i++];
            size_t pstart = sn;
            while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9' && sn < 28)
                spec[sn++] = f->s[i++];
            if (sn - pstart > 5)
                jfail(c, off, "format precision too large");
        }
        if (i >= f->len)
            jfail(c, off, "incomplete format");
        char conv = f->s[i];
        jval v;
        if (list) {
            if (ai >= list->n)
                jfail(c, off, "not enough arguments for format string");
            v = list->v[ai++];
        } else {
            if (ai++ > 0)
                jfail(c, off, "not enough arguments for format string");
            v = single;
        }
        if (f->markup && conv == 's')
            v = jinja_escape(c, v); /* Markup % args escapes the args */
        switch (conv) {
        case 's':
        case 'r': {
            jbuf t = {0};
            jv_write(c, &t, v, conv == 'r', 0);
            spec[sn] = 0;
            /* flags / width / precision by hand: they count code points, as Python does */
            bool left = strchr(spec, '-') != NULL;
            const char *dot = strchr(spec, '.');
            size_t width = 0, prec = SIZE_MAX;
            for (const char *q = spec + 1; *q && q != dot; q++)
                if (*q >= '0' && *q <= '9')
                    width = width * 10 + (size_t)(*q - '0'); /* a leading 0 flag adds nothing */
            if (dot)
                prec = (size_t)atoi(dot + 1);
            size_t len = t.n, ncp = utf8_ncp(t.p ? t.p : "", t.n);
            if (prec < ncp) {
                size_t i2 = 0, k = 0;
                while (i2 < t.n && k < prec) {
                    utf8_next(t.p, t.n, &i2);
                    k++;
                }
                len = i2;
                ncp = prec;
            }
            size_t pad = width > ncp ? width - ncp : 0;
            for (size_t k = 0; !left && k < pad; k++)
                jb_putc(c, &b, ' ');
            jb_put(c, &b, t.p ? t.p : "", len);
            for (size_t k = 0; left && k < pad; k++)
                jb_putc(c, &b, ' ');
            break;
        }
        case 'd':
        case 'i':
        case 'x':
        case 'X':
        case 'o': {
            if (!jv_is_num(v))
                jfail(c, off, "%%%c format: a real number is required, not %s", conv, jv_type_name(v));
            long long x = v.t == JT_FLOAT ? (long long)v.f : v.t == JT_BOOL ? v.b : v.i;
            spec[sn++] = 'l';
            spec[sn++] = 'l';
            spec[sn++] = conv == 'i' ? 'd' : conv;
            spec[sn] = 0;
            jb_printf(c, &b, spec, x);
            break;
        }
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G': {
            if (!jv_is_num(v))
                jfail(c, off, "must be real number, not %s", jv_type_name(v));
            spec[sn++] = conv;
            spec[sn] = 0;
            jb_printf(c, &b, spec, jv_as_double(v));
            break;
        }
        default:
            jfail(c, off, "unsupported format character '%c'", conv);
        }
    }
    if (list && ai < list->n)
        jfail(c, off, "not all arguments converted during string formatting");
    jval r = jv_strbuf(c, &b);
    r.s->markup = f->markup;
    return r;
}

/* str.format: {} {0} {name} with !r/!s and a simple spec [[fill]align][width][.precision][type]. */
static jval py_format(jctx *c, const jstr *f, jcall *a, uint32_t off)
{
    jbuf b = {0};
    size_t auto_i = 0;
    for (size_t i = 0; i < f->len; i++) {
        char ch = f->s[i];
        if (ch == '}') {
            if (i + 1 < f->len && f->s[i + 1] == '}') {
                jb_putc(c, &b, '}');
                i++;
                continue;
            }
            jfail(c, off, "Single '}' encountered in format string");
        }
        if (ch != '{') {
            jb_putc(c, &b, ch);
            continue;
        }
        if (i + 1 < f->len && f->s[i + 1] == '{') {
            jb_putc(c, &b, '{');
            i++;
            continue;
        }
        const char *close = memchr(f->s + i, '}', f->len - i);
        if (!close)
            jfail(c, off, "Single '{' encountered in format string");
        size_t e = (size_t)(close - f->s);
        const char *field = f->s + i + 1;
        size_t fl = e - i - 1;
        const char *colon = memchr(field, ':', fl), *bang = memchr(field, '!', fl);
        size_t name_len = colon ? (size_t)(colon - field) : fl;
        if (bang && (!colon || bang < colon))
            name_len = (size_t)(bang - field);
        char conv = bang && (!colon || bang < colon) && bang + 1 < field + fl ? bang[1] : 's';
        jval v;
        if (name_len == 0) {
            if (auto_i >= a->n_pos)
                jfail(c, off, "Replacement index %zu out of range for positional args tuple", auto_i);
            v = a->pos[auto_i++];
        } else if (field[0] >= '0' && field[0] <= '9') {
            size_t k = (size_t)strtoul(field, NULL, 10);
            if (k >= a->n_pos)
                jfail(c, off, "Replacement index %zu out of range for positional args tuple", k);
            v = a->pos[k];
        } else {
            size_t k = 0;
            for (; k < a->n_kw; k++)
                if (strlen(a->kw[k]) == name_len && !memcmp(a->kw[k], field, name_len))
                    break;
            if (k == a->n_kw)
                jfail(c, off, "KeyError: '%.*s'", (int)name_len, field);
            v = a->kwv[k];
        }
        jbuf t = {0};
        const char *spec = colon ? colon + 1 : NULL;
        size_t spec_len = colon ? (size_t)(field + fl - colon - 1) : 0;
        char type = spec_len ? spec[spec_len - 1] : 0;
        int prec = -1;
        if (spec_len) {
            const char *dot = memchr(spec, '.', spec_len);
            if (dot)
                prec = atoi(dot + 1);
        }
        if ((type == 'f' || type == 'F' || type == 'e' || type == 'g' || type == '%') && jv_is_num(v)) {
            char fm[16];
            double d = jv_as_double(v) * (type == '%' ? 100 : 1);
            snprintf(fm, sizeof fm, "%%.%d%c", prec < 0 ? 6 : prec, type == '%' ? 'f' : type);
            jb_printf(c, &t, fm, d);
            if (type == '%')
                jb_putc(c, &t, '%');
        } else {
            jv_write(c, &t, v, conv == 'r', 0);
        }
        /* [[fill]align][width] */
        char fill = ' ', align = 0;
        size_t k = 0;
        if (spec_len >= 2 && strchr("<>^", spec[1])) {
            fill = spec[0];
            align = spec[1];
            k = 2;
        } else if (spec_len >= 1 && strchr("<>^", spec[0])) {
            align = spec[0];
            k = 1;
        }
        size_t width = 0;
        while (k < spec_len && spec[k] >= '0' && spec[k] <= '9' && width < 100000)
            width = width * 10 + (size_t)(spec[k++] - '0');
        size_t ncp = utf8_ncp(t.p ? t.p : "", t.n);
        if (!align)
            align = jv_is_num(v) ? '>' : '<';
        size_t pad = width > ncp ? width - ncp : 0, left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
        for (size_t p = 0; p < left; p++)
            jb_putc(c, &b, fill);
        jb_put(c, &b, t.p ? t.p : "", t.n);
        for (size_t p = left; p < pad; p++)
            jb_putc(c, &b, fill);
        i = e;
    }
    return jv_strbuf(c, &b);
}

/* ---- str methods ---- */

#define METHOD(name) static jval name(jctx *c, jfunc *self, jcall *a, uint32_t off)
#define SELF (self->self)

METHOD(m_upper) { no_args(c, a, off, "upper"); return str_case(c, SELF.s, CASE_UPPER); }
METHOD(m_lower) { no_args(c, a, off, "lower"); return str_case(c, SELF.s, CASE_LOWER); }
METHOD(m_title) { no_args(c, a, off, "title"); return str_title(c, SELF.s); }
METHOD(m_capitalize) { no_args(c, a, off, "capitalize"); return str_capitalize(c, SELF.s); }
METHOD(m_strip) { return strip_method(c, SELF, a, off, 3, "strip"); }
METHOD(m_lstrip) { return strip_method(c, SELF, a, off, 1, "lstrip"); }
METHOD(m_rstrip) { return strip_method(c, SELF, a, off, 2, "rstrip"); }

static jval split_method(jctx *c, jfunc *self, jcall *a, uint32_t off, bool right)
{
    static const char *const names[] = { "sep", "maxsplit", NULL };
    jval p[2];
    jbind(c, a, off, right ? "rsplit" : "split", names, p);
    const jstr *sep = jarg_given(p[0]) && p[0].t != JT_NONE ? want_str(c, p[0], off, "sep") : NULL;
    int64_t maxsplit = jarg_given(p[1]) ? want_int(c, p[1], off, "maxsplit") : -1;
    return str_split(c, SELF.s, sep, maxsplit, right, off);
}
METHOD(m_split) { return split_method(c, self, a, off, false); }
METHOD(m_rsplit) { return split_method(c, self, a, off, true); }
METHOD(m_splitlines) { (void)a; return str_splitlines(c, SELF.s, off); }

static bool affix_match(const jstr *s, const jstr *x, bool end)
{
    if (x->len > s->len)
        return false;
    return memcmp(end ? s->s + s->len - x->len : s->s, x->s, x->len) == 0;
}

static jval affix_method(jctx *c, jfunc *self, jcall *a, uint32_t off, bool end)
{
    if (a->n_pos < 1 || a->n_pos > 1 || a->n_kw)
        jfail(c, off, "%s() takes exactly one argument (a str or a tuple of str)", end ? "endswith" : "startswith");
    jval x = a->pos[0];
    if (x.t == JT_STR)
        return jv_bool(affix_match(SELF.s, x.s, end));
    if (x.t == JT_LIST && x.l->tuple) {
        for (size_t i = 0; i < x.l->n; i++) {
            if (x.l->v[i].t != JT_STR)
                jfail(c, off, "tuple for %s must only contain str, not %s", end ? "endswith" : "startswith",
                      jv_type_name(x.l->v[i]));
            if (affix_match(SELF.s, x.l->v[i].s, end))
                return jv_bool(true);
        }
        return jv_bool(false);
    }
    jfail(c, off, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith", jv_type_name(x));
}
METHOD(m_startswith) { return affix_method(c, self, a, off, false); }
METHOD(m_endswith) { return affix_method(c, self, a, off, true); }

METHOD(m_replace)
{
    static const char *const names[] = { "old", "new", "count", NULL };
    jval p[3];
    jbind(c, a, off, "replace", names, p);
    if (!jarg_given(p[0]) || !jarg_given(p[1]))
        jfail(c, off, "replace() takes at least 2 arguments");
    int64_t count = jarg_given(p[2]) ? want_int(c, p[2], off, "count") : -1;
    return str_replace(c, SELF, want_str(c, p[0], off, "replace() argument 1"), want_str(c, p[1], off, "replace() argument 2"),
                       count, off);
}

static jval find_method(jctx *c, jfunc *self, jcall *a, uint32_t off, bool right, bool raise, const char *name)
{
    if (a->n_pos < 1 || a->n_kw)
        jfail(c, off, "%s() takes at least 1 argument", name);
    const jstr *s = SELF.s, *sub = want_str(c, a->pos[0], off, "substring");
    int64_t len = (int64_t)jv_len(c, SELF, off);
    int64_t st = 0, en = len;
    if (a->n_pos > 1 && a->pos[1].t != JT_NONE) {
        st = want_int(c, a->pos[1], off, "start");
        if (st < 0) st = st + len < 0 ? 0 : st + len;
    }
    if (a->n_pos > 2 && a->pos[2].t != JT_NONE) {
        en = want_int(c, a->pos[2], off, "end");
        if (en < 0) en = en + len < 0 ? 0 : en + len;
    }
    if (en > len) en = len;
    int64_t found = -1;
    if (st <= en) {
        size_t b = utf8_cp_off(s, (size_t)st), e = utf8_cp_off(s, (size_t)en);
        if (sub->len <= e - b) {
            if (!right) {
                const char *h = memmem(s->s + b, e - b, sub->s, sub->len);
                if (h)
                    found = (int64_t)utf8_ncp(s->s, (size_t)(h - s->s));
            } else {
                for (size_t k = e - sub->len + 1; k-- > b;)
                    if (memcmp(s->s + k, sub->s, sub->len) == 0) {
                        found = (int64_t)utf8_ncp(s->s, k);
                        break;
                    }
            }
        }
    }
    if (found < 0 && raise)
        jfail(c, off, "substring not found");
    return jv_int(found);
}
METHOD(m_find) { return find_method(c, self, a, off, false, false, "find"); }
METHOD(m_rfind) { return find_method(c, self, a, off, true, false, "rfind"); }
METHOD(m_index) { return find_method(c, self, a, off, false, true, "index"); }
METHOD(m_rindex) { return find_method(c, self, a, off, true, true, "rindex"); }

METHOD(m_count)
{
    if (a->n_pos != 1 || a->n_kw)
        jfail(c, off, "count() takes exactly one argument");
    if (SELF.t == JT_LIST) {
        int64_t k = 0;
        for (size_t i = 0; i < SELF.l->n; i++)
            k += jv_eq(SELF.l->v[i], a->pos[0]);
        return jv_int(k);
    }
    const jstr *s = SELF.s, *sub = want_str(c, a->pos[0], off, "count() argument");
    if (sub->len == 0)
        return jv_int((int64_t)jv_len(c, SELF, off) + 1);
    int64_t k = 0;
    size_t i = 0;
    const char *h;
    while (i <= s->len && (h = memmem(s->s + i, s->len - i, sub->s, sub->len)) != NULL) {
        k++;
        i = (size_t)(h - s->s) + sub->len;
    }
    return jv_int(k);
}

METHOD(m_join)
{
    if (a->n_pos != 1 || a->n_kw)
        jfail(c, off, "join() takes exactly one argument");
    jlist *l = jv_iter_list(c, a->pos[0], off);
    jbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].t != JT_STR)
            jfail(c, off, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l->v[i]));
        if (i)
            jb_put(c, &b, SELF.s->s, SELF.s->len);
        jb_put(c, &b, l->v[i].s->s, l->v[i].s->len);
    }
    return jv_strbuf(c, &b);
}

METHOD(m_format) { return py_format(c, SELF.s, a, off); }

static jval is_method(jctx *c, jfunc *self, jcall *a, uint32_t off, int kind)
{
    no_args(c, a, off, "is...");
    const jstr *s = SELF.s;
    if (s->len == 0)
        return jv_bool(false);
    size_t i = 0;
    bool any_cased = false;
    while (i < s->len) {
        int32_t cp = utf8_next(s->s, s->len, &i);
        utf8proc_category_t cat = utf8proc_category(cp);
        bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        switch (kind) {
        case 0: if (!py_isalnum(cp)) return jv_bool(false); break;
        case 1: if (!letter) return jv_bool(false); break;
        case 2: if (cat != UTF8PROC_CATEGORY_ND && !(cp >= '0' && cp <= '9')) return jv_bool(false); break;
        case 3: if (!py_isspace(cp)) return jv_bool(false); break;
        case 4: /* islower */
            if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return jv_bool(false);
            if (cat == UTF8PROC_CATEGORY_LL) any_cased = true;
            break;
        case 5: /* isupper */
            if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return jv_bool(false);
            if (cat == UTF8PROC_CATEGORY_LU) any_cased = true;
            break;
        }
    }
    return jv_bool(kind >= 4 ? any_cased : true);
}
METHOD(m_isalnum) { return is_method(c, self, a, off, 0); }
METHOD(m_isalpha) { return is_method(c, self, a, off, 1); }
METHOD(m_isdigit) { return is_method(c, self, a, off, 2); }
METHOD(m_isspace) { return is_method(c, self, a, off, 3); }
METHOD(m_islower) { return is_method(c, self, a, off, 4); }
METHOD(m_isupper) { return is_method(c, self, a, off, 5); }

static jval affix_remove(jctx *c, jfunc *self, jcall *a, uint32_t off, bool suffix)
{
    if (a->n_pos != 1 || a->n_kw)
        jfail(c, off, "%s() takes exactly one argument", suffix ? "removesuffix" : "removeprefix");
    const jstr *x = want_str(c, a->pos[0], off, "argument");
    const jstr *s = SELF.s;
    if (x->len && affix_match(s, x, suffix))
        return suffix ? jv_str(c, s->s, s->len - x->len) : jv_str(c, s->s + x->len, s->len - x->len);
    return SELF;
}
METHOD(m_removeprefix) { return affix_remove(c, self, a, off, false); }
METHOD(m_removesuffix) { return affix_remove(c, self, a, off, true); }

static jval pad_method(jctx *c, jfunc *self, jcall *a, uint32_t off, char align, const char *name)
{
    if (a->n_pos < 1 || a->n_pos > 2 || a->n_kw)
        jfail(c, off, "%s() takes 1 or 2 arguments", name);
    int64_t w = want_int(c, a->pos[0], off, "width");
    const jstr *fill = a->n_pos > 1 ? want_str(c, a->pos[1], off, "fill character") : NULL;
    if (fill && utf8_ncp(fill->s, fill->len) != 1)
        jfail(c, off, "The fill character must be exactly one character long");
    int64_t n = (int64_t)jv_len(c, SELF, off);
    if (w <= n)
        return SELF;
    if (w > 10000000)
        jfail(c, off, "width too large");
    int64_t pad = w - n, left = align == '>' ? pad : align == '^' ? pad / 2 + (pad & w & 1) : 0;
    jbuf b = {0};
    for (int64_t i = 0; i < left; i++)
        fill ? jb_put(c, &b, fill->s, fill->len) : jb_putc(c, &b, ' ');
    jb_put(c, &b, SELF.s->s, SELF.s->len);
    for (int64_t i = left; i < pad; i++)
        fill ? jb_put(c, &b, fill->s, fill->len) : jb_putc(c, &b, ' ');
    return jv_strbuf(c, &b);
}
METHOD(m_center) { return pad_method(c, self, a, off, '^', "center"); }
METHOD(m_ljust) { return pad_method(c, self, a, off, '<', "ljust"); }
METHOD(m_rjust) { return pad_method(c, self, a, off, '>', "rjust"); }

/* ---- dict / list methods ---- */

static jlist *dict_pairs(jctx *c, jdict *d);

METHOD(m_items)
{
    no_args(c, a, off, "items");
    return jv_view(c, VK_ITEMS, dict_pairs(c, SELF.d));
}

static jlist *dict_pairs(jctx *c, jdict *d)
{
    jval l = jv_list(c, d->n, false);
    for (size_t i = 0; i < d->n; i++) {
        jval t = jv_list(c, 2, true);
        t.l->v[0] = d->k[i];
        t.l->v[1] = d->v[i];
        t.l->n = 2;
        l.l->v[i] = t;
    }
    l.l->n = d->n;
    return l.l;
}

METHOD(m_keys)
{
    no_args(c, a, off, "keys");
    jval l = jv_list(c, SELF.d->n, false);
    jcopy(l.l->v, SELF.d->k, SELF.d->n * sizeof(jval));
    l.l->n = SELF.d->n;
    return jv_view(c, VK_KEYS, l.l);
}

METHOD(m_values)
{
    no_args(c, a, off, "values");
    jval l = jv_list(c, SELF.d->n, false);
    jcopy(l.l->v, SELF.d->v, SELF.d->n * sizeof(jval));
    l.l->n = SELF.d->n;
    return jv_view(c, VK_VALUES, l.l);
}

METHOD(m_get)
{
    if (a->n_pos < 1 || a->n_pos > 2 || a->n_kw)
        jfail(c, off, "get expected 1 or 2 arguments, got %zu", a->n_pos);
    jval *p = jd_get(SELF.d, a->pos[0]);
    if (p)
        return *p;
    return a->n_pos > 1 ? a->pos[1] : jv_none();
}

METHOD(m_copy)
{
    no_args(c, a, off, "copy");
    if (SELF.t == JT_LIST) {
        jval l = jv_list(c, SELF.l->n, SELF.l->tuple);
        if (SELF.l->n)
            jcopy(l.l->v, SELF.l->v, SELF.l->n * sizeof(jval));
        l.l->n = SELF.l->n;
        return l;
    }
    jval d = jv_dict(c, SELF.d->n);
    for (size_t i = 0; i < SELF.d->n; i++)
        jd_set(c, d.d, SELF.d->k[i], SELF.d->v[i]);
    return d;
}

METHOD(m_list_index)
{
    if (a->n_pos < 1 || a->n_kw)
        jfail(c, off, "index() takes at least 1 argument");
    for (size_t i = 0; i < SELF.l->n; i++)
        if (jv_eq(SELF.l->v[i], a->pos[0]))
            return jv_int((int64_t)i);
    jfail(c, off, "value is not in list");
}

/* cycler / joiner objects */
typedef struct cycler_state {
    jlist *items;
    size_t pos;
} cycler_state;

METHOD(m_cycler_next)
{
    no_args(c, a, off, "next");
    cycler_state *st = SELF.fn->state;
    jval v = st->items->v[st->pos];
    st->pos = (st->pos + 1) % st->items->n;
    return v;
}

METHOD(m_cycler_reset)
{
    no_args(c, a, off, "reset");
    cycler_state *st = SELF.fn->state;
    st->pos = 0;
    return jv_none();
}

typedef struct method_row {
    uint8_t type;
    const char *name;
    jbuiltin_fn fn;
} method_row;

static const method_row k_methods[] = {
    { JT_STR, "upper", m_upper }, { JT_STR, "lower", m_lower }, { JT_STR, "title", m_title },
    { JT_STR, "capitalize", m_capitalize }, { JT_STR, "strip", m_strip }, { JT_STR, "lstrip", m_lstrip },
    { JT_STR, "rstrip", m_rstrip }, { JT_STR, "split", m_split }, { JT_STR, "rsplit", m_rsplit },
    { JT_STR, "splitlines", m_splitlines }, { JT_STR, "startswith", m_startswith },
    { JT_STR, "endswith", m_endswith }, { JT_STR, "replace", m_replace }, { JT_STR, "find", m_find },
    { JT_STR, "rfind", m_rfind }, { JT_STR, "index", m_index }, { JT_STR, "rindex", m_rindex },
    { JT_STR, "count", m_count }, { JT_STR, "join", m_join }, { JT_STR, "format", m_format },
    { JT_STR, "isalnum", m_isalnum }, { JT_STR, "isalpha", m_isalpha }, { JT_STR, "isdigit", m_isdigit },
    { JT_STR, "isspace", m_isspace }, { JT_STR, "islower", m_islower }, { JT_STR, "isupper", m_isupper },
    { JT_STR, "removeprefix", m_removeprefix }, { JT_STR, "removesuffix", m_removesuffix },
    { JT_STR, "center", m_center }, { JT_STR, "ljust", m_ljust }, { JT_STR, "rjust", m_rjust },
    { JT_DICT, "items", m_items }, { JT_DICT, "keys", m_keys }, { JT_DICT, "values", m_values },
    { JT_DICT, "get", m_get }, { JT_DICT, "copy", m_copy },
    { JT_LIST, "count", m_count }, { JT_LIST, "index", m_list_index }, { JT_LIST, "copy", m_copy },
};

/* Mutating methods the immutable sandbox refuses (jinja2.sandbox._mutable_spec). */
static const char *const k_unsafe_dict[] = { "clear", "pop", "popitem", "setdefault", "update", NULL };
static const char *const k_unsafe_list[] = { "append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove", NULL };

bool jinja_method(jctx *c, jval obj, const char *name, jval *out)
{
    if (obj.t == JT_FUNC && obj.fn->state && obj.fn->name && !strcmp(obj.fn->name, "cycler")) {
        cycler_state *st = obj.fn->state;
        if (!strcmp(name, "next") || !strcmp(name, "__next__")) {
            *out = jv_func(c, "next", m_cycler_next, obj);
            return true;
        }
        if (!strcmp(name, "reset")) {
            *out = jv_func(c, "reset", m_cycler_reset, obj);
            return true;
        }
        if (!strcmp(name, "current")) {
            *out = st->items->v[st->pos];
            return true;
        }
        return false;
    }
    if (obj.t == JT_LIST && obj.l->tuple) {
        if (strcmp(name, "count") && strcmp(name, "index"))
            return false;
    }
    if (obj.t == JT_DICT && obj.d->ns)
        return false;
    for (size_t i = 0; i < sizeof k_methods / sizeof k_methods[0]; i++)
        if (k_methods[i].type == obj.t && !strcmp(k_methods[i].name, name)) {
            *out = jv_func(c, k_methods[i].name, k_methods[i].fn, obj);
            return true;
        }
    const char *const *unsafe = obj.t == JT_DICT ? k_unsafe_dict : obj.t == JT_LIST && !obj.l->tuple ? k_unsafe_list : NULL;
    if (unsafe)
        for (size_t i = 0; unsafe[i]; i++)
            if (!strcmp(unsafe[i], name)) {
                char *h = jalloc(c, 128 + strlen(name), 0);
                sprintf(h, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
                *out = jv_undef(h);
                return true;
            }
    return false;
}

/* ---- filters ---- */

#define FILTER(name) static jval name(jctx *c, jval v, jcall *a, uint32_t off)

FILTER(f_abs)
{
    no_args(c, a, off, "abs");
    if (v.t == JT_INT) {
        if (v.i == INT64_MIN)
            jfail(c, off, "integer overflow in abs");
        return jv_int(v.i < 0 ? -v.i : v.i);
    }
    if (v.t == JT_BOOL)
        return jv_int(v.b);
    if (v.t == JT_FLOAT)
        return jv_float(fabs(v.f));
    if (v.t == JT_UNDEF)
        jfail(c, off, "%s", v.hint ? v.hint : "undefined value");
    jfail(c, off, "bad operand type for abs(): '%s'", jv_type_name(v));
}

FILTER(f_attr)
{
    static const char *const names[] = { "name", NULL };
    jval p[1];
    jbind(c, a, off, "attr", names, p);
    jstr *name = want_str(c, p[0], off, "attr name");
    if (v.t == JT_UNDEF)
        jfail(c, off, "%s", v.hint ? v.hint : "undefined value");
    jval m;
    if (v.t == JT_LOOP || (v.t == JT_DICT && v.d->ns))
        return jinja_getattr(c, v, name->s, off);
    if (jinja_method(c, v, name->s, &m))
        return m;
    char *h = jalloc(c, 128 + name->len, off);
    sprintf(h, "'%s object' has no attribute '%s'", jv_type_name(v), name->s);
    return jv_undef(h);
}

FILTER(f_batch)
{
    static const char *const names[] = { "linecount", "fill_with", NULL };
    jval p[2];
    jbind(c, a, off, "batch", names, p);
    int64_t n = want_int(c, p[0], off, "linecount");
    if (n <= 0)
        jfail(c, off, "batch size must be positive");
    jlist *l = jv_iter_list(c, v, off);
    jval out = jv_list(c, 0, false), cur = { .t = JT_NONE };
    for (size_t i = 0; i < l->n; i++) {
        if (cur.t == JT_NONE)
            cur = jv_list(c, 0, false);
        jl_push(c, cur.l, l->v[i]);
        if ((int64_t)cur.l->n == n) {
            jl_push(c, out.l, cur);
            cur = jv_none();
        }
    }
    if (cur.t == JT_LIST) {
        if (jarg_given(p[1]) && p[1].t != JT_NONE)
            while ((int64_t)cur.l->n < n)
                jl_push(c, cur.l, p[1]);
        jl_push(c, out.l, cur);
    }
    return jv_gen(c, "do_batch", out.l);
}

/* soft_str(v).method() keeps a Markup a Markup */
static jval keep_markup(jctx *c, jval in, jval out)
{
    return in.t == JT_STR && in.s->markup && out.t == JT_STR ? jinja_markup(c, out) : out;
}

FILTER(f_capitalize) { no_args(c, a, off, "capitalize"); return keep_markup(c, v, str_capitalize(c, jv_to_str(c, v))); }

FILTER(f_center)
{
    static const char *const names[] = { "width", NULL };
    jval p[1];
    jbind(c, a, off, "center", names, p);
    jval s = { .t = JT_STR };
    s.s = jv_to_str(c, v);
    jfunc self = { .self = s };
    jval w = jarg_given(p[0]) ? p[0] : jv_int(80);
    jcall ca = { .pos = &w, .n_pos = 1 };
    return keep_markup(c, v, m_center(c, &self, &ca, off));
}

FILTER(f_length) { no_args(c, a, off, "length"); return jv_int((int64_t)jv_len(c, v, off)); }

FILTER(f_default)
{
    static const char *const names[] = { "default_value", "boolean", NULL };
    jval p[2];
    jbind(c, a, off, "default", names, p);
    jval dflt = jarg_given(p[0]) ? p[0] : jv_str(c, "", 0);
    bool boolean = jarg_given(p[1]) && jv_truthy(p[1]);
    if (v.t == JT_UNDEF || (boolean && !jv_truthy(v)))
        return dflt;
    return v;
}

FILTER(f_dictsort)
{
    static const char *const names[] = { "case_sensitive", "by", "reverse", NULL };
    jval p[3];
    jbind(c, a, off, "dictsort", names, p);
    if (v.t == JT_UNDEF)
        jfail(c, off, "%s", v.hint ? v.hint : "undefined value");
    if (v.t != JT_DICT || v.d->ns)
        jfail(c, off, "dictsort needs a mapping, not %s", jv_type_name(v));
    bool cs = jarg_given(p[0]) && jv_truthy(p[0]);
    int pos = 0;
    if (jarg_given(p[1])) {
        jstr *by = want_str(c, p[1], off, "by");
        if (!strcmp(by->s, "key"))
            pos = 0;
        else if (!strcmp(by->s, "value"))
            pos = 1;
        else
            jfail(c, off, "You can only sort by either \"key\" or \"value\"");
    }
    jlist *items = dict_pairs(c, v.d);
    jval *keys = jalloc(c, (items->n + 1) * sizeof *keys, off);
    for (size_t i = 0; i < items->n; i++)
        keys[i] = fold_key(c, items->v[i].l->v[pos], !cs);
    return sorted_by(c, items, keys, jarg_given(p[2]) && jv_truthy(p[2]), off);
}

FILTER(f_escape) { no_args(c, a, off, "escape"); return jinja_escape(c, v); }
FILTER(f_forceescape) { no_args(c, a, off, "forceescape"); return html_escape(c, v); }

FILTER(f_first)
{
    no_args(c, a, off, "first");
    if (v.t == JT_UNDEF)
        return jv_undef("No first item, sequence was empty.");
    if (v.t == JT_VIEW && (v.vw->kind == VK_GEN || v.vw->kind == VK_REVITER)) {
        jview *w = v.vw;
        return w->pos < w->items->n ? w->items->v[w->pos++] : jv_undef("No first item, sequence was empty.");
    }
    jlist *l = jv_iter_list(c, v, off);
    return l->n ? l->v[0] : jv_undef("No first item, sequence was empty.");
}

FILTER(f_last)
{
    no_args(c, a, off, "last");
    if (v.t == JT_UNDEF)
        return jv_undef("No last item, sequence was empty.");
    if (v.t == JT_VIEW && (v.vw->kind == VK_GEN || v.vw->kind == VK_REVITER))
        jfail(c, off, "'%s' object is not reversible", jv_type_name(v));
    jlist *l = jv_iter_list(c, v, off);
    return l->n ? l->v[l->n - 1] : jv_undef("No last item, sequence was empty.");
}

/* Python float(str): decimal, inf, nan, underscores between digits; surrounding whitespace. */
static bool parse_py_float(const jstr *s, double *out)
{
    char buf[128];
    size_t b = 0, e = s->len;
    while (b < e && py_isspace((unsigned char)s->s[b]))
        b++;
    while (e > b && py_isspace((unsigned char)s->s[e - 1]))
        e--;
    if (e == b || e - b >= sizeof buf)
        return false;
    size_t n = 0;
    for (size_t i = b; i < e; i++) {
        char ch = s->s[i];
        if (ch == '_') {
            if (i == b || i + 1 == e || !(s->s[i - 1] >= '0' && s->s[i - 1] <= '9') ||
                !(s->s[i + 1] >= '0' && s->s[i + 1] <= '9'))
                return false;
            continue;
        }
        if (!strchr("0123456789+-.eEinfatyINFATY", ch))
            return false;
        buf[n++] = ch;
    }
    buf[n] = 0;
    const char *p = buf;
    if (*p == '+' || *p == '-')
        p++;
    if (!strcasecmp(p, "inf") || !strcasecmp(p, "infinity") || !strcasecmp(p, "nan")) {
        double d = !strcasecmp(p, "nan") ? NAN : INFINITY;
        *out = buf[0] == '-' ? -d : d;
        return true;
    }
    if (strpbrk(p, "xXpP") || strpbrk(p, "iInNaAtTyY"))
        return false;
    char *end;
    *out = strtod(buf, &end);
    return *end == 0;
}

FILTER(f_float)
{
    static const char *const names[] = { "default", NULL };
    jval p[1];
    jbind(c, a, off, "float", names, p);
    if (jv_is_num(v))
        return jv_float(jv_as_double(v));
    if (v.t == JT_STR) {
        double d;
        if (parse_py_float(v.s, &d))
            return jv_float(d);
    }
    return jarg_given(p[0]) ? p[0] : jv_float(0.0); /* jinja returns the default as given */
}

FILTER(f_format)
{
    jstr *s = jv_to_str(c, v);
    jval fmt = { .t = JT_STR };
    fmt.s = s;
    if (a->n_kw && a->n_pos)
        jfail(c, off, "can't handle positional and keyword arguments at the same time");
    jval args = jv_list(c, a->n_pos, true);
    jcopy(args.l->v, a->pos, a->n_pos * sizeof(jval));
    args.l->n = a->n_pos;
    return jinja_str_format(c, fmt, args, off);
}

FILTER(f_indent)
{
    static const char *const names[] = { "width", "first", "blank", NULL };
    jval p[3];
    jbind(c, a, off, "indent", names, p);
    jbuf ind = {0};
    if (jarg_given(p[0]) && p[0].t == JT_STR) {
        jb_put(c, &ind, p[0].s->s, p[0].s->len);
    } else {
        int64_t w = jarg_given(p[0]) ? want_int(c, p[0], off, "width") : 4;
        if (w > 10000)
            jfail(c, off, "indent width too large");
        for (int64_t i = 0; i < w; i++)
            jb_putc(c, &ind, ' ');
    }
    bool first = jarg_given(p[1]) && jv_truthy(p[1]), blank = jarg_given(p[2]) && jv_truthy(p[2]);
    jstr *s0 = jv_to_str(c, v);
    jbuf sb = {0};
    jb_put(c, &sb, s0->s, s0->len);
    jb_putc(c, &sb, '\n'); /* jinja appends a newline so splitlines keeps a trailing empty line */
    jval lines = str_splitlines(c, jv_strbuf(c, &sb).s, off);
    jbuf b = {0};
    for (size_t i = 0; i < lines.l->n; i++) {
        jstr *ln = lines.l->v[i].s;
        if (i) {
            jb_putc(c, &b, '\n');
            if (blank || ln->len)
                jb_put(c, &b, ind.p, ind.n);
        }
        jb_put(c, &b, ln->s, ln->len);
    }
    jval r = jv_strbuf(c, &b);
    if (first) {
        jbuf f = {0};
        jb_put(c, &f, ind.p, ind.n);
        jb_put(c, &f, r.s->s, r.s->len);
        r = jv_strbuf(c, &f);
    }
    return keep_markup(c, v, r);
}

/* Python int(str, base): optional sign, digits with single underscores, base prefixes when base 0. */
static bool parse_py_int(const jstr *s, int base, int64_t *out)
{
    size_t b = 0, e = s->len;
    while (b < e && py_isspace((unsigned char)s->s[b]))
        b++;
    while (e > b && py_isspace((unsigned char)s->s[e - 1]))
        e--;
    bool neg = false;
    if (b < e && (s->s[b] == '+' || s->s[b] == '-'))
        neg = s->s[b++] == '-';
    if (b + 1 < e && s->s[b] == '0' && (base == 16 || base == 8 || base == 2 || base == 0)) {
        char p = (char)(s->s[b + 1] | 0x20);
        int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) {
            base = pb;
            b += 2;
            if (b < e && s->s[b] == '_')
                b++;
        }
    }
    if (base == 0)
        base = 10;
    if (b >= e)
        return false;
    uint64_t v = 0;
    for (size_t i = b; i < e; i++) {
        char ch = s->s[i];
        if (ch == '_') {
            if (i == b || i + 1 == e || s->s[i + 1] == '_')
                return false;
            continue;
        }
        int d = ch >= '0' && ch <= '9' ? ch - '0' : (ch | 0x20) >= 'a' && (ch | 0x20) <= 'z' ? (ch | 0x20) - 'a' + 10 : 99;
        if (d >= base)
            return false;
        if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

FILTER(f_int)
{
    static const char *const names[] = { "default", "base", NULL };
    jval p[2];
    jbind(c, a, off, "int", names, p);
    jval dflt = jarg_given(p[0]) ? p[0] : jv_int(0);
    int base = jarg_given(p[1]) ? (int)want_int(c, p[1], off, "base") : 10;
    if (v.t == JT_INT)
        return v;
    if (v.t == JT_BOOL)
        return jv_int(v.b);
    if (v.t == JT_FLOAT) {
        if (isnan(v.f) || isinf(v.f) || fabs(v.f) >= 9.2e18)
            return dflt;
        return jv_int((int64_t)v.f);
    }
    if (v.t == JT_STR) {
        int64_t i;
        if (parse_py_int(v.s, base, &i))
            return jv_int(i);
        double d;
        if (parse_py_float(v.s, &d) && !isnan(d) && !isinf(d) && fabs(d) < 9.2e18)
            return jv_int((int64_t)d);
    }
    return dflt;
}

FILTER(f_items)
{
    no_args(c, a, off, "items");
    if (v.t == JT_UNDEF)
        return jv_gen(c, "do_items", jv_list(c, 0, false).l);
    if (v.t != JT_DICT || v.d->ns)
        jfail(c, off, "Can only get item pairs from a mapping.");
    return jv_gen(c, "do_items", dict_pairs(c, v.d));
}

FILTER(f_join)
{
    static const char *const names[] = { "d", "attribute", NULL };
    jval p[2];
    jbind(c, a, off, "join", names, p);
    jstr *sep = jarg_given(p[0]) ? jv_to_str(c, p[0]) : jv_str(c, "", 0).s;
    jlist *l = jv_iter_list(c, v, off);
    jbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            jb_put(c, &b, sep->s, sep->len);
        jval item = jarg_given(p[1]) ? attr_get(c, l->v[i], p[1], off) : l->v[i];
        jv_write(c, &b, item, false, 0);
    }
    return jv_strbuf(c, &b);
}

FILTER(f_list)
{
    no_args(c, a, off, "list");
    jlist *l = jv_iter_list(c, v, off);
    jval out = jv_list(c, l->n, false);
    if (l->n)
        jcopy(out.l->v, l->v, l->n * sizeof(jval));
    out.l->n = l->n;
    return out;
}

FILTER(f_lower) { no_args(c, a, off, "lower"); return keep_markup(c, v, str_case(c, jv_to_str(c, v), CASE_LOWER)); }
FILTER(f_upper) { no_args(c, a, off, "upper"); return keep_markup(c, v, str_case(c, jv_to_str(c, v), CASE_UPPER)); }

FILTER(f_map)
{
    /* jinja's do_map is a generator that yields nothing for a false value (None included) */
    jlist *l = jv_truthy(v) ? jv_iter_list(c, v, off) : jv_list(c, 0, false).l;
    jval out = jv_list(c, l->n, false);
    jval attribute = jv_undef(NULL), dflt = jv_undef(NULL);
    for (size_t k = 0; k < a->n_kw; k++) {
        if (!strcmp(a->kw[k], "attribute"))
            attribute = a->kwv[k];
        else if (!strcmp(a->kw[k], "default"))
            dflt = a->kwv[k];
    }
    if (jarg_given(attribute)) {
        for (size_t k = 0; k < a->n_kw; k++)
            if (strcmp(a->kw[k], "attribute") && strcmp(a->kw[k], "default"))
                jfail(c, off, "Unexpected keyword argument '%s'", a->kw[k]);
        if (a->n_pos)
            jfail(c, off, "map() with attribute takes no positional arguments");
        for (size_t i = 0; i < l->n; i++) {
            jval x = attr_get(c, l->v[i], attribute, off);
            if (x.t == JT_UNDEF && jarg_given(dflt))
                x = dflt;
            out.l->v[out.l->n++] = x;
        }
        return jv_gen(c, "sync_do_map", out.l);
    }
    if (a->n_pos < 1)
        jfail(c, off, "map requires a filter argument");
    jstr *fname = want_str(c, a->pos[0], off, "map filter name");
    const jfilter_row *row = jinja_find_filter(fname->s);
    if (!row)
        jfail(c, off, "No filter named '%s'.", fname->s);
    jcall rest = { .pos = a->n_pos > 1 ? a->pos + 1 : NULL, .n_pos = a->n_pos - 1, .kw = a->kw, .kwv = a->kwv, .n_kw = a->n_kw };
    for (size_t i = 0; i < l->n; i++)
        out.l->v[out.l->n++] = row->fn(c, l->v[i], &rest, off);
    return jv_gen(c, "sync_do_map", out.l);
}

static jval minmax(jctx *c, jval v, jcall *a, uint32_t off, bool max)
{
    static const char *const names[] = { "case_sensitive", "attribute", NULL };
    jval p[2];
    jbind(c, a, off, max ? "max" : "min", names, p);
    bool cs = jarg_given(p[0]) && jv_truthy(p[0]);
    jlist *l = jv_iter_list(c, v, off);
    if (l->n == 0)
        return jv_undef(max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
    size_t best = 0;
    jval bk = fold_key(c, jarg_given(p[1]) ? attr_get(c, l->v[0], p[1], off) : l->v[0], !cs);
    for (size_t i = 1; i < l->n; i++) {
        jval k = fold_key(c, jarg_given(p[1]) ? attr_get(c, l->v[i], p[1], off) : l->v[i], !cs);
        int r = jv_cmp(c, k, bk, off);
        if (max ? r > 0 : r < 0) {
            best = i;
            bk = k;
        }
    }
    return l->v[best];
}
FILTER(f_max) { return minmax(c, v, a, off, true); }
FILTER(f_min) { return minmax(c, v, a, off, false); }

FILTER(f_pprint) { no_args(c, a, off, "pprint"); jbuf b = {0}; jv_write(c, &b, v, true, 0); return jv_strbuf(c, &b); }

/* select / reject / selectattr / rejectattr */
static jval select_common(jctx *c, jval v, jcall *a, uint32_t off, bool attr, bool keep)
{
    /* a generator; a false value (None included) yields nothing */
    jlist *l = jv_truthy(v) ? jv_iter_list(c, v, off) : jv_list(c, 0, false).l;
    size_t k = 0;
    jval attribute = { .t = JT_UNDEF };
    if (attr) {
        if (a->n_pos < 1)
            jfail(c, off, "selectattr/rejectattr need an attribute name");
        attribute = a->pos[k++];
    }
    const jtest_row *test = NULL;
    if (a->n_pos > k) {
        jstr *tn = want_str(c, a->pos[k++], off, "test name");
        test = jinja_find_test(tn->s);
        if (!test)
            jfail(c, off, "No test named '%s'.", tn->s);
    }
    jcall rest = { .pos = a->n_pos > k ? a->pos + k : NULL, .n_pos = a->n_pos - k, .kw = a->kw, .kwv = a->kwv, .n_kw = a->n_kw };
    jval out = jv_list(c, 0, false);
    for (size_t i = 0; i < l->n; i++) {
        jval x = attr ? attr_get(c, l->v[i], attribute, off) : l->v[i];
        bool r = test ? test->fn(c, x, &rest, off) : jv_truthy(x);
        if (r == keep)
            jl_push(c, out.l, l->v[i]);
    }
    return jv_gen(c, "select_or_reject", out.l);
}
FILTER(f_select) { return select_common(c, v, a, off, false, true); }
FILTER(f_reject) { return select_common(c, v, a, off, false, false); }
FILTER(f_selectattr) { return select_common(c, v, a, off, true, true); }
FILTER(f_rejectattr) { return select_common(c, v, a, off, true, false); }

FILTER(f_replace)
{
    static const char *const names[] = { "old", "new", "count", NULL };
    jval p[3];
    jbind(c, a, off, "replace", names, p);
    if (!jarg_given(p[0]) || !jarg_given(p[1]))
        jfail(c, off, "replace() needs old and new");
    jval s = { .t = JT_STR };
    s.s = jv_to_str(c, v);
    int64_t count = jarg_given(p[2]) && p[2].t != JT_NONE ? want_int(c, p[2], off, "count") : -1;
    return str_replace(c, s, jv_to_str(c, p[0]), jv_to_str(c, p[1]), count, off);
}

FILTER(f_reverse)
{
    no_args(c, a, off, "reverse");
    if (v.t == JT_STR) {
        jbuf b = {0};
        size_t e = v.s->len;
        while (e > 0) {
            size_t st = e - 1;
            while (st > 0 && ((unsigned char)v.s->s[st] & 0xC0) == 0x80)
                st--;
            jb_put(c, &b, v.s->s + st, e - st);
            e = st;
        }
        return jv_strbuf(c, &b);
    }
    /* reversed(x): an iterator for sequences, dicts and views; a generator is read into a list */
    bool was_gen = v.t == JT_VIEW && (v.vw->kind == VK_GEN || v.vw->kind == VK_REVITER);
    if (v.t == JT_VIEW && v.vw->kind == VK_REVITER)
        jfail(c, off, "'list_reverseiterator' object is not reversible");
    jlist *l = jv_iter_list(c, v, off);
    jval out = jv_list(c, l->n, false);
    for (size_t i = 0; i < l->n; i++)
        out.l->v[i] = l->v[l->n - 1 - i];
    out.l->n = l->n;
    return was_gen ? out : jv_view(c, VK_REVITER, out.l);
}

FILTER(f_round)
{
    static const char *const names[] = { "precision", "method", NULL };
    jval p[2];
    jbind(c, a, off, "round", names, p);
    int64_t prec = jarg_given(p[0]) ? want_int(c, p[0], off, "precision") : 0;
    const char *method = jarg_given(p[1]) ? want_str(c, p[1], off, "method")->s : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        jfail(c, off, "method must be common, ceil or floor");
    if (v.t == JT_UNDEF)
        jfail(c, off, "%s", v.hint ? v.hint : "undefined value");
    if (!jv_is_num(v))
        jfail(c, off, "type %s doesn't define __round__ method", jv_type_name(v));
    if (prec > 300 || prec < -300)
        prec = prec > 0 ? 300 : -300;
    if (!strcmp(method, "common")) {
        if (v.t != JT_FLOAT) {
            /* round(int, n) stays an int; a negative n rounds to tens, hundreds, ... ties to even */
            int64_t x = v.t == JT_BOOL ? v.b : v.i;
            if (prec >= 0)
                return jv_int(x);
            if (prec < -18)
                return jv_int(0);
            int64_t m = 1;
            for (int64_t k = 0; k < -prec; k++)
                m *= 10;
            int64_t q = x / m, r = x % m;
            if (r < 0) {
                r += m;
                q--;
            }
            if (2 * r > m || (2 * r == m && (q & 1)))
                q++;
            int64_t out;
            if (__builtin_mul_overflow(q, m, &out))
                jfail(c, off, "integer overflow in round");
            return jv_int(out);
        }
        if (isnan(v.f) || isinf(v.f))
            return v;
        if (prec >= 0) {
            /* correctly rounded, ties to even on the exact binary value, as CPython does */
            char buf[512];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, v.f);
            return jv_float(strtod(buf, NULL));
        }
        double m = pow(10.0, (double)-prec);
        return jv_float(nearbyint(v.f / m) * m);
    }
    double m = pow(10.0, (double)prec), d = jv_as_double(v);
    return jv_float((!strcmp(method, "ceil") ? ceil(d * m) : floor(d * m)) / m);
}

FILTER(f_safe) { no_args(c, a, off, "safe"); return jinja_markup(c, v); }

FILTER(f_slice)
{
    static const char *const names[] = { "slices", "fill_with", NULL };
    jval p[2];
    jbind(c, a, off, "slice", names, p);
    int64_t slices = want_int(c, p[0], off, "slices");
    if (slices <= 0 || slices > 100000)
        jfail(c, off, "slices must be positive");
    jlist *l = jv_iter_list(c, v, off);
    size_t n = l->n, per = n / (size_t)slices, extra = n % (size_t)slices, offset = 0;
    jval out = jv_list(c, 0, false);
    for (size_t i = 0; i < (size_t)slices; i++) {
        size_t start = offset + i * per;
        if (i < extra)
            offset++;
        size_t end = offset + (i + 1) * per;
        jval tmp = jv_list(c, 0, false);
        for (size_t k = start; k < end && k < n; k++)
            jl_push(c, tmp.l, l->v[k]);
        if (jarg_given(p[1]) && p[1].t != JT_NONE && i >= extra)
            jl_push(c, tmp.l, p[1]);
        jl_push(c, out.l, tmp);
    }
    return jv_gen(c, "do_slice", out.l);
}

FILTER(f_sort)
{
    static const char *const names[] = { "reverse", "case_sensitive", "attribute", NULL };
    jval p[3];
    jbind(c, a, off, "sort", names, p);
    bool rev = jarg_given(p[0]) && jv_truthy(p[0]), cs = jarg_given(p[1]) && jv_truthy(p[1]);
    jlist *l = jv_iter_list(c, v, off);
    jval *keys = jalloc(c, (l->n + 1) * sizeof *keys, off);
    for (size_t i = 0; i < l->n; i++)
        keys[i] = fold_key(c, jarg_given(p[2]) ? attr_get(c, l->v[i], p[2], off) : l->v[i], !cs);
    return sorted_by(c, l, keys, rev, off);
}

FILTER(f_string)
{
    no_args(c, a, off, "string");
    jval r = { .t = JT_STR };
    r.s = jv_to_str(c, v);
    return r;
}

FILTER(f_sum)
{
    static const char *const names[] = { "attribute", "start", NULL };
    jval p[2];
    jbind(c, a, off, "sum", names, p);
    jlist *l = jv_iter_list(c, v, off);
    jval acc = jarg_given(p[1]) ? p[1] : jv_int(0);
    for (size_t i = 0; i < l->n; i++) {
        jval x = jarg_given(p[0]) ? attr_get(c, l->v[i], p[0], off) : l->v[i];
        if (!jv_is_num(acc) || !jv_is_num(x))
            jfail(c, off, "unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(acc), jv_type_name(x));
        if (acc.t == JT_FLOAT || x.t == JT_FLOAT) {
            acc = jv_float(jv_as_double(acc) + jv_as_double(x));
        } else {
            int64_t r, ai = acc.t == JT_BOOL ? acc.b : acc.i, xi = x.t == JT_BOOL ? x.b : x.i;
            if (__builtin_add_overflow(ai, xi, &r))
                jfail(c, off, "integer overflow in sum");
            acc = jv_int(r);
        }
    }
    return acc;
}

/* jinja's title filter: words start after "-", whitespace, "(", "{", "[" or "<". */
FILTER(f_title)
{
    no_args(c, a, off, "title");
    jstr *s = jv_to_str(c, v);
    jbuf b = {0};
    size_t i = 0;
    bool at_start = true;
    while (i < s->len) {
        int32_t cp = utf8_next(s->s, s->len, &i);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp);
        if (sep) {
            put_cp(c, &b, cp);
            at_start = true;
            continue;
        }
        put_case(c, &b, cp, at_start ? CASE_UPPER : CASE_LOWER);
        at_start = false;
    }
    return jv_strbuf(c, &b);
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
FILTER(f_tojson)
{
    static const char *const names[] = { "ensure_ascii", "indent", "separators", "sort_keys", NULL };
    jval p[4];
    jbind(c, a, off, "tojson", names, p);
    jjson_opts o = {0};
    o.ensure_ascii = jarg_given(p[0]) && jv_truthy(p[0]);
    o.sort_keys = jarg_given(p[3]) && jv_truthy(p[3]);
    if (jarg_given(p[1]) && p[1].t != JT_NONE) {
        o.has_indent = true;
        if (p[1].t == JT_STR) {
            o.indent = p[1].s->s;
            o.indent_len = p[1].s->len;
        } else {
            int64_t w = want_int(c, p[1], off, "indent");
            if (w > 1000)
                jfail(c, off, "indent too large");
            char *sp = jalloc(c, (size_t)(w > 0 ? w : 0) + 1, off);
            for (int64_t i = 0; i < w; i++)
                sp[i] = ' ';
            o.indent = sp;
            o.indent_len = (size_t)(w > 0 ? w : 0);
        }
    }
    o.item_sep = o.has_indent ? "," : ", ";
    o.item_sep_len = strlen(o.item_sep);
    o.key_sep = ": ";
    o.key_sep_len = 2;
    if (jarg_given(p[2]) && p[2].t != JT_NONE) {
        jlist *l = jv_iter_list(c, p[2], off);
        if (l->n != 2 || l->v[0].t != JT_STR || l->v[1].t != JT_STR)
            jfail(c, off, "separators must be a pair of strings");
        o.item_sep = l->v[0].s->s;
        o.item_sep_len = l->v[0].s->len;
        o.key_sep = l->v[1].s->s;
        o.key_sep_len = l->v[1].s->len;
    }
    jbuf b = {0};
    jv_write_json(c, &b, v, &o, 0, off);
    return jv_strbuf(c, &b);
}

FILTER(f_trim)
{
    static const char *const names[] = { "chars", NULL };
    jval p[1];
    jbind(c, a, off, "trim", names, p);
    jval s = { .t = JT_STR };
    s.s = jv_to_str(c, v);
    const jstr *chars = jarg_given(p[0]) && p[0].t != JT_NONE ? want_str(c, p[0], off, "chars") : NULL;
    return keep_markup(c, v, str_strip(c, s, chars, 3));
}

FILTER(f_truncate)
{
    static const char *const names[] = { "length", "killwords", "end", "leeway", NULL };
    jval p[4];
    jbind(c, a, off, "truncate", names, p);
    jstr *s = jv_to_str(c, v);
    int64_t length = jarg_given(p[0]) ? want_int(c, p[0], off, "length") : 255;
    bool killwords = jarg_given(p[1]) && jv_truthy(p[1]);
    jstr *end = jarg_given(p[2]) ? jv_to_str(c, p[2]) : jv_cstr(c, "...").s;
    int64_t leeway = jarg_given(p[3]) && p[3].t != JT_NONE ? want_int(c, p[3], off, "leeway") : 5;
    int64_t endn = (int64_t)utf8_ncp(end->s, end->len), n = (int64_t)utf8_ncp(s->s, s->len);
    if (length < endn)
        jfail(c, off, "expected length >= %lld, got %lld", (long long)endn, (long long)length);
    if (leeway < 0)
        jfail(c, off, "expected leeway >= 0, got %lld", (long long)leeway);
    jval sv = { .t = JT_STR };
    sv.s = s;
    if (n <= length + leeway)
        return sv;
    size_t cut = utf8_cp_off(s, (size_t)(length - endn));
    jbuf b = {0};
    if (killwords) {
        jb_put(c, &b, s->s, cut);
    } else {
        /* s[:length - len(end)].rsplit(" ", 1)[0] */
        size_t k = cut;
        while (k > 0 && s->s[k - 1] != ' ')
            k--;
        jb_put(c, &b, s->s, k > 0 ? k - 1 : cut);
    }
    jb_put(c, &b, end->s, end->len);
    return jv_strbuf(c, &b);
}

FILTER(f_unique)
{
    static const char *const names[] = { "case_sensitive", "attribute", NULL };
    jval p[2];
    jbind(c, a, off, "unique", names, p);
    bool cs = jarg_given(p[0]) && jv_truthy(p[0]);
    jlist *l = jv_iter_list(c, v, off);
    jval out = jv_list(c, 0, false), seen = jv_list(c, 0, false);
    for (size_t i = 0; i < l->n; i++) {
        jval k = fold_key(c, jarg_given(p[1]) ? attr_get(c, l->v[i], p[1], off) : l->v[i], !cs);
        bool dup = false;
        for (size_t j = 0; j < seen.l->n && !dup; j++)
            dup = jv_eq(seen.l->v[j], k);
        jinja_step(c, off, seen.l->n / 8);
        if (!dup) {
            jl_push(c, seen.l, k);
            jl_push(c, out.l, l->v[i]);
        }
    }
    return jv_gen(c, "sync_do_unique", out.l);
}

FILTER(f_wordcount)
{
    no_args(c, a, off, "wordcount");
    jstr *s = jv_to_str(c, v);
    int64_t n = 0;
    bool in_word = false;
    size_t i = 0;
    while (i < s->len) {
        int32_t cp = utf8_next(s->s, s->len, &i);
        bool w = cp == '_' || py_isalnum(cp);
        if (w && !in_word)
            n++;
        in_word = w;
    }
    return jv_int(n);
}

static const jfilter_row k_filters[] = {
    { "abs", f_abs }, { "attr", f_attr }, { "batch", f_batch }, { "capitalize", f_capitalize },
    { "center", f_center }, { "count", f_length }, { "d", f_default }, { "default", f_default },
    { "dictsort", f_dictsort }, { "e", f_escape }, { "escape", f_escape }, { "first", f_first },
    { "float", f_float }, { "forceescape", f_forceescape }, { "format", f_format }, { "indent", f_indent },
    { "int", f_int }, { "items", f_items }, { "join", f_join }, { "last", f_last }, { "length", f_length },
    { "list", f_list }, { "lower", f_lower }, { "map", f_map }, { "max", f_max }, { "min", f_min },
    { "pprint", f_pprint }, { "reject", f_reject }, { "rejectattr", f_rejectattr }, { "replace", f_replace },
    { "reverse", f_reverse }, { "round", f_round }, { "safe", f_safe }, { "select", f_select },
    { "selectattr", f_selectattr }, { "slice", f_slice }, { "sort", f_sort }, { "string", f_string },
    { "sum", f_sum }, { "title", f_title }, { "tojson", f_tojson }, { "trim", f_trim },
    { "truncate", f_truncate }, { "unique", f_unique }, { "upper", f_upper }, { "wordcount", f_wordcount },
};

const jfilter_row *jinja_find_filter(const char *name)
{
    for (size_t i = 0; i < sizeof k_filters / sizeof k_filters[0]; i++)
        if (!strcmp(k_filters[i].name, name))
            return &k_filters[i];
    return NULL;
}

/* ---- tests ---- */

#define TEST(name) static bool name(jctx *c, jval v, jcall *a, uint32_t off)

static jval one_arg(jctx *c, jcall *a, uint32_t off, const char *name)
{
    if (a->n_pos + a->n_kw != 1)
        jfail(c, off, "test '%s' takes exactly one argument", name);
    return a->n_pos ? a->pos[0] : a->kwv[0];
}

TEST(t_boolean) { (void)c; (void)a; (void)off; return v.t == JT_BOOL; }
TEST(t_callable) { (void)c; (void)a; (void)off; return v.t == JT_FUNC || v.t == JT_LOOP; }
TEST(t_defined) { (void)c; (void)a; (void)off; return v.t != JT_UNDEF; }
TEST(t_undefined) { (void)c; (void)a; (void)off; return v.t == JT_UNDEF; }
TEST(t_none) { (void)c; (void)a; (void)off; return v.t == JT_NONE; }
TEST(t_string) { (void)c; (void)a; (void)off; return v.t == JT_STR; }
TEST(t_mapping) { (void)c; (void)a; (void)off; return v.t == JT_DICT && !v.d->ns; }
TEST(t_number) { (void)c; (void)a; (void)off; return jv_is_num(v); }
TEST(t_integer) { (void)c; (void)a; (void)off; return v.t == JT_INT; }
TEST(t_float) { (void)c; (void)a; (void)off; return v.t == JT_FLOAT; }
TEST(t_true) { (void)c; (void)a; (void)off; return v.t == JT_BOOL && v.b; }
TEST(t_false) { (void)c; (void)a; (void)off; return v.t == JT_BOOL && !v.b; }
TEST(t_escaped) { (void)c; (void)a; (void)off; (void)v; return false; }
TEST(t_iterable)
{
    (void)c; (void)a; (void)off;
    return v.t == JT_UNDEF || v.t == JT_STR || v.t == JT_LIST || v.t == JT_LOOP || v.t == JT_VIEW ||
           (v.t == JT_DICT && !v.d->ns);
}
TEST(t_sequence)
{
    (void)c; (void)a; (void)off;
    return v.t == JT_UNDEF || v.t == JT_STR || v.t == JT_LIST || (v.t == JT_VIEW && v.vw->kind == VK_RANGE) ||
           (v.t == JT_DICT && !v.d->ns);
}

static bool case_test(jctx *c, jval v, uint32_t off, int kind)
{
    if (v.t != JT_STR)
        jfail(c, off, "'%s' object has no attribute '%s'", jv_type_name(v), kind == 4 ? "islower" : "isupper");
    jfunc self = { .self = v };
    jcall none = {0};
    return is_method(c, &self, &none, off, kind).b;
}
TEST(t_lower) { (void)a; return case_test(c, v, off, 4); }
TEST(t_upper) { (void)a; return case_test(c, v, off, 5); }

static int64_t int_of(jctx *c, jval v, uint32_t off)
{
    if (v.t == JT_INT) return v.i;
    if (v.t == JT_BOOL) return v.b;
    if (v.t == JT_UNDEF)
        jfail(c, off, "%s", v.hint ? v.hint : "undefined value");
    jfail(c, off, "expected an integer, got %s", jv_type_name(v));
}

TEST(t_odd)
{
    no_args(c, a, off, "odd");
    if (v.t == JT_FLOAT)
        return fmod(fabs(v.f), 2.0) == 1.0;
    return (int_of(c, v, off) & 1) != 0;
}
TEST(t_even)
{
    no_args(c, a, off, "even");
    if (v.t == JT_FLOAT)
        return fmod(fabs(v.f), 2.0) == 0.0;
    return (int_of(c, v, off) & 1) == 0;
}
TEST(t_divisibleby)
{
    jval d = one_arg(c, a, off, "divisibleby");
    if (v.t == JT_FLOAT || d.t == JT_FLOAT) {
        double x = jv_as_double(d);
        if (x == 0)
            jfail(c, off, "float modulo");
        return fmod(jv_as_double(v), x) == 0;
    }
    int64_t y = int_of(c, d, off), x = int_of(c, v, off);
    if (y == 0)
        jfail(c, off, "integer division or modulo by zero");
    return y == -1 || x % y == 0;
}
TEST(t_eq) { return jv_eq(v, one_arg(c, a, off, "eq")); }
TEST(t_ne) { return !jv_eq(v, one_arg(c, a, off, "ne")); }

static bool order_test(jctx *c, jval v, jcall *a, uint32_t off, int want)
{
    jval o = one_arg(c, a, off, "comparison");
    if (v.t == JT_UNDEF)
        jfail(c, off, "%s", v.hint ? v.hint : "undefined value");
    bool ok = (jv_is_num(v) && jv_is_num(o)) || (v.t == JT_STR && o.t == JT_STR) || (v.t == JT_LIST && o.t == JT_LIST);
    if (!ok)
        jfail(c, off, "comparison not supported between instances of '%s' and '%s'", jv_type_name(v), jv_type_name(o));
    int r = jv_cmp(c, v, o, off);
    switch (want) {
    case 0: return r < 0;
    case 1: return r <= 0;
    case 2: return r > 0;
    default: return r >= 0;
    }
}
TEST(t_lt) { return order_test(c, v, a, off, 0); }
TEST(t_le) { return order_test(c, v, a, off, 1); }
TEST(t_gt) { return order_test(c, v, a, off, 2); }
TEST(t_ge) { return order_test(c, v, a, off, 3); }

bool jinja_contains(jctx *c, jval container, jval item, uint32_t off);
TEST(t_in) { return jinja_contains(c, one_arg(c, a, off, "in"), v, off); }

TEST(t_sameas)
{
    jval o = one_arg(c, a, off, "sameas");
    if (v.t != o.t)
        return false;
    switch (v.t) {
    case JT_NONE: case JT_UNDEF: return true;
    case JT_BOOL: return v.b == o.b;
    case JT_INT: return v.i == o.i && v.i >= -5 && v.i <= 256; /* CPython's small int cache */
    case JT_STR: return v.s == o.s;
    case JT_LIST: return v.l == o.l;
    case JT_DICT: return v.d == o.d;
    case JT_FUNC: return v.fn == o.fn;
    case JT_LOOP: return v.loop == o.loop;
    case JT_VIEW: return v.vw == o.vw;
    default: return false;
    }
}

TEST(t_filter) { (void)a; (void)off; (void)c; return v.t == JT_STR && jinja_find_filter(v.s->s) != NULL; }
TEST(t_test) { (void)a; (void)off; (void)c; return v.t == JT_STR && jinja_find_test(v.s->s) != NULL; }

static const jtest_row k_tests[] = {
    { "boolean", t_boolean }, { "callable", t_callable }, { "defined", t_defined },
    { "divisibleby", t_divisibleby }, { "eq", t_eq }, { "equalto", t_eq }, { "==", t_eq },
    { "escaped", t_escaped }, { "even", t_even }, { "false", t_false }, { "filter", t_filter },
    { "float", t_float }, { "ge", t_ge }, { ">=", t_ge }, { "gt", t_gt }, { ">", t_gt },
    { "greaterthan", t_gt }, { "in", t_in }, { "integer", t_integer }, { "iterable", t_iterable },
    { "le", t_le }, { "<=", t_le }, { "lower", t_lower }, { "lt", t_lt }, { "<", t_lt },
    { "lessthan", t_lt }, { "mapping", t_mapping }, { "ne", t_ne }, { "!=", t_ne }, { "none", t_none },
    { "number", t_number }, { "odd", t_odd }, { "sameas", t_sameas }, { "sequence", t_sequence },
    { "string", t_string }, { "test", t_test }, { "true", t_true }, { "undefined", t_undefined },
    { "upper", t_upper },
};

const jtest_row *jinja_find_test(const char *name)
{
    for (size_t i = 0; i < sizeof k_tests / sizeof k_tests[0]; i++)
        if (!strcmp(k_tests[i].name, name))
            return &k_tests[i];
    return NULL;
}

/* ---- globals ---- */

METHOD(g_range)
{
    (void)self;
    if (a->n_kw)
        jfail(c, off, "range() takes no keyword arguments");
    if (a->n_pos < 1 || a->n_pos > 3)
        jfail(c, off, "range expected 1 to 3 arguments, got %zu", a->n_pos);
    int64_t start = 0, stop, step = 1;
    if (a->n_pos == 1) {
        stop = want_int(c, a->pos[0], off, "range() argument");
    } else {
        start = want_int(c, a->pos[0], off, "range() argument");
        stop = want_int(c, a->pos[1], off, "range() argument");
        if (a->n_pos == 3)
            step = want_int(c, a->pos[2], off, "range() argument");
    }
    if (step == 0)
        jfail(c, off, "range() arg 3 must not be zero");
    __int128 n = 0;
    if (step > 0 && stop > start)
        n = ((__int128)stop - start + step - 1) / step;
    else if (step < 0 && stop < start)
        n = ((__int128)start - stop - step - 1) / -step;
    if (n > 100000)
        jfail(c, off, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jinja_step(c, off, (uint64_t)n);
    jval l = jv_list(c, (size_t)n, false);
    int64_t x = start;
    for (int64_t i = 0; i < (int64_t)n; i++) {
        l.l->v[i] = jv_int(x);
        if (i + 1 < (int64_t)n)
            x += step; /* stays inside [start, stop): no overflow */
    }
    l.l->n = (size_t)n;
    jval r = jv_view(c, VK_RANGE, l.l);
    r.vw->start = start;
    r.vw->stop = stop;
    r.vw->step = step;
    return r;
}

static void dict_update(jctx *c, jval d, jcall *a, uint32_t off, const char *name)
{
    if (a->n_pos > 1)
        jfail(c, off, "%s expected at most 1 positional argument, got %zu", name, a->n_pos);
    if (a->n_pos == 1) {
        jval src = a->pos[0];
        if (src.t == JT_DICT) {
            for (size_t i = 0; i < src.d->n; i++)
                jd_set(c, d.d, src.d->k[i], src.d->v[i]);
        } else {
            jlist *l = jv_iter_list(c, src, off);
            for (size_t i = 0; i < l->n; i++) {
                jlist *pair = jv_iter_list(c, l->v[i], off);
                if (pair->n != 2)
                    jfail(c, off, "dictionary update sequence element #%zu has length %zu; 2 is required", i, pair->n);
                jd_set(c, d.d, pair->v[0], pair->v[1]);
            }
        }
    }
    for (size_t k = 0; k < a->n_kw; k++)
        jd_set(c, d.d, jv_cstr(c, a->kw[k]), a->kwv[k]);
}

METHOD(g_namespace)
{
    (void)self;
    jval d = jv_dict(c, a->n_kw);
    d.d->ns = true;
    dict_update(c, d, a, off, "namespace");
    return d;
}

METHOD(g_dict)
{
    (void)self;
    jval d = jv_dict(c, a->n_kw);
    dict_update(c, d, a, off, "dict");
    return d;
}

METHOD(g_cycler_call)
{
    (void)a; (void)self;
    jfail(c, off, "'Cycler' object is not callable");
}

METHOD(g_cycler)
{
    (void)self;
    if (a->n_pos == 0)
        jfail(c, off, "at least one item has to be provided");
    cycler_state *st = jalloc(c, sizeof *st, off);
    jval l = jv_list(c, a->n_pos, false);
    jcopy(l.l->v, a->pos, a->n_pos * sizeof(jval));
    l.l->n = a->n_pos;
    st->items = l.l;
    jval f = jv_func(c, "cycler", g_cycler_call, jv_none());
    f.fn->state = st;
    return f;
}

typedef struct joiner_state {
    jstr *sep;
    bool used;
} joiner_state;

METHOD(g_joiner_call)
{
    no_args(c, a, off, "joiner");
    joiner_state *st = self->state;
    if (!st->used) {
        st->used = true;
        return jv_str(c, "", 0);
    }
    jval r = { .t = JT_STR };
    r.s = st->sep;
    return r;
}

METHOD(g_joiner)
{
    (void)self;
    static const char *const names[] = { "sep", NULL };
    jval p[1];
    jbind(c, a, off, "joiner", names, p);
    joiner_state *st = jalloc(c, sizeof *st, off);
    st->sep = jarg_given(p[0]) ? jv_to_str(c, p[0]) : jv_cstr(c, ", ").s;
    jval f = jv_func(c, "joiner", g_joiner_call, jv_none());
    f.fn->state = st;
    return f;
}

METHOD(g_raise_exception)
{
    (void)self;
    static const char *const names[] = { "message", NULL };
    jval p[1];
    jbind(c, a, off, "raise_exception", names, p);
    jstr *s = jv_to_str(c, jarg_given(p[0]) ? p[0] : jv_str(c, "", 0));
    jfail_raw(c, off, s->s, s->len);
}

METHOD(g_strftime_now)
{
    (void)self;
    static const char *const names[] = { "format", NULL };
    jval p[1];
    jbind(c, a, off, "strftime_now", names, p);
    jstr *fmt = want_str(c, p[0], off, "strftime_now format");
    time_t t = c->now_s >= 0 ? (time_t)c->now_s : time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    if (fmt->len == 0)
        return jv_str(c, "", 0);
    if (memchr(fmt->s, 0, fmt->len))
        jfail(c, off, "embedded null character");
    for (size_t cap = 256; cap <= (1u << 20); cap *= 4) {
        char *buf = jalloc(c, cap, off);
        size_t n = strftime(buf, cap, fmt->s, &tm);
        if (n > 0)
            return jv_str(c, buf, n);
    }
    return jv_str(c, "", 0);
}

static const struct {
    const char *name;
    jbuiltin_fn fn;
} k_globals[] = {
    { "range", g_range }, { "namespace", g_namespace }, { "dict", g_dict }, { "cycler", g_cycler },
    { "joiner", g_joiner }, { "raise_exception", g_raise_exception }, { "strftime_now", g_strftime_now },
};

bool jinja_global(jctx *c, const char *name, jval *out)
{
    for (size_t i = 0; i < sizeof k_globals / sizeof k_globals[0]; i++)
        if (!strcmp(k_globals[i].name, name)) {
            *out = jv_func(c, k_globals[i].name, k_globals[i].fn, jv_none());
            return true;
        }
    return false;
}
