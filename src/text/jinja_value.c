/* Jinja values: the arena they live in, Python's str()/repr()/==/< on them, json.dumps, and the
 * conversion from jansson. See jinja.h for the model. */
#include "text/jinja.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- arena ---- */

struct jchunk {
    jchunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

#define JA_CHUNK (64 * 1024)

static void *ja_alloc_impl(jarena *a, size_t n, bool zero);

void *ja_alloc(jarena *a, size_t n) { return ja_alloc_impl(a, n, true); }
void *ja_alloc_raw(jarena *a, size_t n) { return ja_alloc_impl(a, n, false); }

static void *ja_alloc_impl(jarena *a, size_t n, bool zero)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    jchunk *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > JA_CHUNK / 4 ? n : JA_CHUNK;
        size_t total;
        if (!cdx_add_size(cap, sizeof(jchunk), &total))
            return NULL;
        if (a->cap_bytes && (a->used_bytes > a->cap_bytes || cap > a->cap_bytes - a->used_bytes))
            return NULL;
        /* a spare chunk from an earlier render (the smallest that fits) saves the page faults of
         * fresh memory, which cost more than the rendering itself */
        jchunk **best = NULL;
        for (jchunk **pp = &a->spare; *pp; pp = &(*pp)->next)
            if ((*pp)->cap >= cap && (!best || (*pp)->cap < (*best)->cap))
                best = pp;
        jchunk *c;
        if (best && (!a->cap_bytes || (*best)->cap <= a->cap_bytes - a->used_bytes)) {
            c = *best;
            *best = c->next;
            cap = c->cap;
        } else {
            c = malloc(total);
            if (!c)
                return NULL;
            c->cap = cap;
        }
        c->used = 0;
        a->used_bytes += cap;
        if (h && cap != JA_CHUNK && h->cap - h->used >= JA_CHUNK / 4) {
            /* a big one-off block: keep filling the current chunk afterwards */
            c->next = h->next;
            h->next = c;
        } else {
            c->next = h;
            a->head = c;
        }
        h = c;
    }
    void *p = h->data + h->used;
    h->used += n;
    if (zero)
        memset(p, 0, n);
    return p;
}

/* Grows the most recent allocation p (old_n bytes) to new_n bytes in place when the current
 * chunk has room; returns false otherwise. Growing buffers this way avoids copying each time. */
static bool ja_extend(jarena *a, void *p, size_t old_n, size_t new_n)
{
    jchunk *h = a->head;
    old_n = (old_n + 15) & ~(size_t)15;
    new_n = (new_n + 15) & ~(size_t)15;
    if (!h || (unsigned char *)p + old_n != h->data + h->used || new_n < old_n || new_n - old_n > h->cap - h->used)
        return false;
    h->used += new_n - old_n;
    return true;
}

static void free_chunks(jchunk *c)
{
    while (c) {
        jchunk *next = c->next;
        free(c);
        c = next;
    }
}

void ja_free_all(jarena *a)
{
    free_chunks(a->head);
    free_chunks(a->spare);
    a->head = a->spare = NULL;
    a->used_bytes = 0;
}

/* ---- chunk cache: the memory of one render, kept for the next ---- */

#define JA_CACHE_MAX_BYTES ((size_t)64 << 20)

struct jchunk_cache {
    pthread_mutex_t mu;
    jchunk *list;
    size_t bytes;
};

jchunk_cache *ja_cache_new(void)
{
    jchunk_cache *k = calloc(1, sizeof *k);
    if (k)
        pthread_mutex_init(&k->mu, NULL);
    return k;
}

void ja_cache_free(jchunk_cache *k)
{
    if (!k)
        return;
    free_chunks(k->list);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

void ja_take_spares(jarena *a, jchunk_cache *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    a->spare = k->list; /* this render owns them now; a concurrent one mallocs its own */
    k->list = NULL;
    k->bytes = 0;
    pthread_mutex_unlock(&k->mu);
}

void ja_release(jarena *a, jchunk_cache *k)
{
    if (!k) {
        ja_free_all(a);
        return;
    }
    jchunk *all[2] = { a->head, a->spare };
    a->head = a->spare = NULL;
    a->used_bytes = 0;
    pthread_mutex_lock(&k->mu);
    for (int i = 0; i < 2; i++) {
        jchunk *c = all[i];
        while (c) {
            jchunk *next = c->next;
            if (k->bytes + c->cap <= JA_CACHE_MAX_BYTES) {
                c->next = k->list;
                k->list = c;
                k->bytes += c->cap;
            } else {
                free(c);
            }
            c = next;
        }
    }
    pthread_mutex_unlock(&k->mu);
}

void *jalloc(jctx *c, size_t n, uint32_t off)
{
    void *p = ja_alloc(&c->arena, n);
    if (!p)
        jfail(c, off, "the render needs more than %zu bytes of memory (limit)", c->arena.cap_bytes);
    return p;
}

void *jalloc_raw(jctx *c, size_t n, uint32_t off)
{
    void *p = ja_alloc_raw(&c->arena, n);
    if (!p)
        jfail(c, off, "the render needs more than %zu bytes of memory (limit)", c->arena.cap_bytes);
    return p;
}

/* ---- buffers ---- */

/* A buffer's bytes sit right after room for a jstr header, so jv_strbuf can turn it into a string
 * without copying. */
#define JSTR_HDR offsetof(jstr, s)

static void jb_reserve(jctx *c, jbuf *b, size_t extra)
{
    size_t need;
    if (!cdx_add_size(b->n, extra, &need) || !cdx_add_size(need, 1 + JSTR_HDR, &need))
        jfail(c, 0, "output too large");
    need -= JSTR_HDR;
    if (need <= b->cap)
        return;
    if (b == c->out && need > c->max_output_bytes)
        jfail(c, 0, "the output passes %zu bytes (limit)", c->max_output_bytes);
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 4)
            jfail(c, 0, "output too large");
        cap *= 2;
    }
    if (b->p && ja_extend(&c->arena, b->p - JSTR_HDR, JSTR_HDR + b->cap, JSTR_HDR + cap)) {
        b->cap = cap;
        return;
    }
    char *p = (char *)jalloc_raw(c, JSTR_HDR + cap, 0) + JSTR_HDR;
    if (b->n)
        jcopy(p, b->p, b->n);
    b->p = p;
    b->cap = cap;
}

void jb_need(jctx *c, jbuf *b, size_t extra) { jb_reserve(c, b, extra); }

void jb_put(jctx *c, jbuf *b, const char *s, size_t n)
{
    if (!n)
        return;
    jb_reserve(c, b, n);
    jcopy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_puts(jctx *c, jbuf *b, const char *s) { jb_put(c, b, s, strlen(s)); }
void jb_putc(jctx *c, jbuf *b, char ch) { jb_put(c, b, &ch, 1); }

void jb_printf(jctx *c, jbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        jb_put(c, b, tmp, (size_t)n);
        return;
    }
    jb_reserve(c, b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

/* ---- constructors ---- */

static bool all_ascii(const char *s, size_t n);

jval jv_str(jctx *c, const char *s, size_t n)
{
    if (n > SIZE_MAX - sizeof(jstr) - 1)
        jfail(c, 0, "string too large");
    jstr *p = jalloc_raw(c, sizeof(jstr) + n + 1, 0);
    p->len = n;
    p->markup = false;
    p->ascii = all_ascii(s, n);
    if (n)
        jcopy(p->s, s, n);
    p->s[n] = 0;
    jval v = { .t = JT_STR };
    v.s = p;
    return v;
}

jval jv_cstr(jctx *c, const char *s) { return jv_str(c, s, strlen(s)); }
static bool all_ascii(const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull)
            return false;
    }
    for (; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return false;
    return true;
}

jval jv_strbuf(jctx *c, const jbuf *b)
{
    if (!b->p)
        return jv_str(c, "", 0);
    jstr *s = (jstr *)(void *)(b->p - JSTR_HDR);
    s->len = b->n;
    s->ascii = all_ascii(b->p, b->n);
    s->markup = false;
    b->p[b->n] = 0;
    jval v = { .t = JT_STR };
    v.s = s;
    return v;
}

jval jv_list(jctx *c, size_t cap, bool tuple)
{
    jlist *l = jalloc(c, sizeof *l, 0);
    l->tuple = tuple;
    if (cap) {
        size_t bytes;
        if (!cdx_mul_size(cap, sizeof(jval), &bytes))
            jfail(c, 0, "list too large");
        l->v = jalloc_raw(c, bytes, 0);
        l->cap = cap;
    }
    jval v = { .t = JT_LIST };
    v.l = l;
    return v;
}

void jl_push(jctx *c, jlist *l, jval v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4, bytes;
        if (!cdx_mul_size(cap, sizeof(jval), &bytes))
            jfail(c, 0, "list too large");
        jval *p = jalloc_raw(c, bytes, 0);
        if (l->n)
            jcopy(p, l->v, l->n * sizeof(jval));
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jval jv_dict(jctx *c, size_t cap)
{
    jdict *d = jalloc(c, sizeof *d, 0);
    if (cap) {
        size_t bytes;
        if (!cdx_mul_size(cap, sizeof(jval), &bytes))
            jfail(c, 0, "dict too large");
        d->k = jalloc_raw(c, bytes, 0);
        d->v = jalloc_raw(c, bytes, 0);
        d->cap = cap;
    }
    jval v = { .t = JT_DICT };
    v.d = d;
    return v;
}

/* Dict keys compare as Python's hash+eq would for the key types templates use:
 * 1 == 1.0 == True, strings by content. */
static bool key_eq(jval a, jval b)
{
    if (a.t == JT_STR && b.t == JT_STR)
        return a.s->len == b.s->len && memcmp(a.s->s, b.s->s, a.s->len) == 0;
    return jv_eq(a, b);
}

jval *jd_get(jdict *d, jval key)
{
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], key))
            return &d->v[i];
    return NULL;
}

jval *jd_get_s(jdict *d, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JT_STR && d->k[i].s->len == n && memcmp(d->k[i].s->s, key, n) == 0)
            return &d->v[i];
    return NULL;
}

void jd_set(jctx *c, jdict *d, jval key, jval v)
{
    jval *p = jd_get(d, key);
    if (p) {
        *p = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4, bytes;
        if (!cdx_mul_size(cap, sizeof(jval), &bytes))
            jfail(c, 0, "dict too large");
        jval *k = jalloc_raw(c, bytes, 0), *vv = jalloc_raw(c, bytes, 0);
        if (d->n) {
            jcopy(k, d->k, d->n * sizeof(jval));
            jcopy(vv, d->v, d->n * sizeof(jval));
        }
        d->k = k;
        d->v = vv;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n] = v;
    d->n++;
}

jval jv_func(jctx *c, const char *name, jbuiltin_fn fn, jval self)
{
    jfunc *f = jalloc(c, sizeof *f, 0);
    f->kind = JF_BUILTIN;
    f->name = name;
    f->fn = fn;
    f->self = self;
    jval v = { .t = JT_FUNC };
    v.fn = f;
    return v;
}

jval jv_view(jctx *c, int kind, jlist *items)
{
    jview *w = jalloc(c, sizeof *w, 0);
    w->kind = (uint8_t)kind;
    w->items = items;
    jval v = { .t = JT_VIEW };
    v.vw = w;
    return v;
}

jval jv_gen(jctx *c, const char *name, jlist *items)
{
    jval v = jv_view(c, VK_GEN, items);
    v.vw->gen_name = name;
    return v;
}

static bool view_consumable(const jview *w) { return w->kind == VK_GEN || w->kind == VK_REVITER; }

static const char *view_type_name(const jview *w)
{
    switch (w->kind) {
    case VK_GEN: return "generator";
    case VK_REVITER: return "list_reverseiterator";
    case VK_ITEMS: return "dict_items";
    case VK_KEYS: return "dict_keys";
    case VK_VALUES: return "dict_values";
    default: return "range";
    }
}

/* ---- unicode ---- */

int32_t utf8_next(const char *s, size_t n, size_t *i)
{
    utf8proc_int32_t cp = -1;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
    if (k <= 0) {
        (*i)++;
        return 0xFFFD;
    }
    *i += (size_t)k;
    return cp;
}

size_t utf8_ncp(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            k++;
    return k;
}

size_t utf8_cp_off(const jstr *s, size_t i)
{
    if (s->ascii)
        return i < s->len ? i : s->len;
    size_t k = 0;
    for (size_t b = 0; b < s->len; b++)
        if (((unsigned char)s->s[b] & 0xC0) != 0x80) {
            if (k == i)
                return b;
            k++;
        }
    return s->len;
}

bool py_isspace(int32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f);
    const utf8proc_property_t *p = utf8proc_get_property(cp);
    return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

bool py_isalnum(int32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return true;
    default:
        return false;
    }
}

bool py_isprintable(int32_t cp)
{
    if (cp < 0x80)
        return cp >= 0x20 && cp < 0x7f;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

/* ---- Python semantics ---- */

bool jv_is_num(jval v) { return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL; }

double jv_as_double(jval v)
{
    switch (v.t) {
    case JT_INT: return (double)v.i;
    case JT_FLOAT: return v.f;
    case JT_BOOL: return v.b ? 1.0 : 0.0;
    default: return 0.0;
    }
}

bool jv_truthy(jval v)
{
    switch (v.t) {
    case JT_UNDEF: case JT_NONE: return false;
    case JT_BOOL: return v.b;
    case JT_INT: return v.i != 0;
    case JT_FLOAT: return v.f != 0.0;
    case JT_STR: return v.s->len != 0;
    case JT_LIST: return v.l->n != 0;
    case JT_DICT: return v.d->ns || v.d->n != 0;
    case JT_VIEW: return view_consumable(v.vw) || v.vw->items->n != 0;
    default: return true;
    }
}

const char *jv_type_name(jval v)
{
    switch (v.t) {
    case JT_UNDEF: return "Undefined";
    case JT_NONE: return "NoneType";
    case JT_BOOL: return "bool";
    case JT_INT: return "int";
    case JT_FLOAT: return "float";
    case JT_STR: return "str";
    case JT_LIST: return v.l->tuple ? "tuple" : "list";
    case JT_DICT: return v.d->ns ? "Namespace" : "dict";
    case JT_FUNC: return v.fn->kind == JF_MACRO ? "Macro" : "builtin_function_or_method";
    case JT_LOOP: return "LoopContext";
    case JT_VIEW: return view_type_name(v.vw);
    }
    return "object";
}

bool jv_eq(jval a, jval b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t == JT_FLOAT || b.t == JT_FLOAT)
            return jv_as_double(a) == jv_as_double(b);
        int64_t x = a.t == JT_BOOL ? a.b : a.i, y = b.t == JT_BOOL ? b.b : b.i;
        return x == y;
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JT_UNDEF: case JT_NONE: return true;
    case JT_STR: return a.s->len == b.s->len && memcmp(a.s->s, b.s->s, a.s->len) == 0;
    case JT_LIST:
        if (a.l->tuple != b.l->tuple || a.l->n != b.l->n)
            return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!jv_eq(a.l->v[i], b.l->v[i]))
                return false;
        return true;
    case JT_DICT:
        if (a.d->ns || b.d->ns)
            return a.d == b.d;
        if (a.d->n != b.d->n)
            return false;
        for (size_t i = 0; i < a.d->n; i++) {
            jval *o = jd_get(b.d, a.d->k[i]);
            if (!o || !jv_eq(a.d->v[i], *o))
                return false;
        }
        return true;
    case JT_FUNC: return a.fn == b.fn;
    case JT_LOOP: return a.loop == b.loop;
    case JT_VIEW:
        if (a.vw == b.vw)
            return true;
        if (a.vw->kind != b.vw->kind || a.vw->items->n != b.vw->items->n)
            return false;
        if (a.vw->kind == VK_RANGE) {
            for (size_t i = 0; i < a.vw->items->n; i++)
                if (!jv_eq(a.vw->items->v[i], b.vw->items->v[i]))
                    return false;
            return true;
        }
        if (a.vw->kind == VK_ITEMS || a.vw->kind == VK_KEYS) { /* set-like */
            for (size_t i = 0; i < a.vw->items->n; i++) {
                bool found = false;
                for (size_t j = 0; j < b.vw->items->n && !found; j++)
                    found = jv_eq(a.vw->items->v[i], b.vw->items->v[j]);
                if (!found)
                    return false;
            }
            return true;
        }
        return false;
    }
    return false;
}

int jv_cmp(jctx *c, jval a, jval b, uint32_t off)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t == JT_FLOAT || b.t == JT_FLOAT) {
            double x = jv_as_double(a), y = jv_as_double(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = a.t == JT_BOOL ? a.b : a.i, y = b.t == JT_BOOL ? b.b : b.i;
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.t == JT_STR && b.t == JT_STR) {
        /* UTF-8 byte order is code point order */
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int r = memcmp(a.s->s, b.s->s, n);
        if (r)
            return r < 0 ? -1 : 1;
        return a.s->len < b.s->len ? -1 : a.s->len > b.s->len ? 1 : 0;
    }
    if (a.t == JT_LIST && b.t == JT_LIST && a.l->tuple == b.l->tuple) {
        size_t n = a.l->n < b.l->n ? a.l->n : b.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_eq(a.l->v[i], b.l->v[i]))
                continue;
            return jv_cmp(c, a.l->v[i], b.l->v[i], off);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n ? 1 : 0;
    }
    jfail(c, off, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

size_t jv_len(jctx *c, jval v, uint32_t off)
{
    switch (v.t) {
    case JT_UNDEF: return 0;
    case JT_STR: return v.s->ascii ? v.s->len : utf8_ncp(v.s->s, v.s->len);
    case JT_LIST: return v.l->n;
    case JT_DICT:
        if (!v.d->ns)
            return v.d->n;
        break;
    case JT_VIEW:
        if (!view_consumable(v.vw))
            return v.vw->items->n;
        break;
    default: break;
    }
    jfail(c, off, "object of type '%s' has no len()", jv_type_name(v));
}

jlist *jv_iter_list(jctx *c, jval v, uint32_t off)
{
    switch (v.t) {
    case JT_UNDEF: return jv_list(c, 0, false).l;
    case JT_VIEW: {
        jview *w = v.vw;
        if (!view_consumable(w))
            return w->items;
        /* a generator yields what is left once */
        jval rest = jv_list(c, w->items->n - w->pos, false);
        if (w->items->n > w->pos)
            jcopy(rest.l->v, w->items->v + w->pos, (w->items->n - w->pos) * sizeof(jval));
        rest.l->n = w->items->n - w->pos;
        w->pos = w->items->n;
        return rest.l;
    }
    case JT_LIST: return v.l;
    case JT_DICT:
        if (v.d->ns)
            break;
        {
            jval l = jv_list(c, v.d->n, false);
            for (size_t i = 0; i < v.d->n; i++)
                l.l->v[i] = v.d->k[i];
            l.l->n = v.d->n;
            return l.l;
        }
    case JT_STR: {
        jval l = jv_list(c, 0, false);
        size_t i = 0;
        while (i < v.s->len) {
            size_t start = i;
            utf8_next(v.s->s, v.s->len, &i);
            jl_push(c, l.l, jv_str(c, v.s->s + start, i - start));
        }
        jinja_step(c, off, l.l->n);
        return l.l;
    }
    default: break;
    }
    jfail(c, off, "'%s' object is not iterable", jv_type_name(v));
}

/* ---- str() / repr() ---- */

void py_float_repr(double d, char out[32])
{
    if (isnan(d)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(d)) {
        strcpy(out, d < 0 ? "-inf" : "inf");
        return;
    }
    if (d == 0) {
        strcpy(out, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    /* the shortest digits that read back as d, as Python's repr picks them */
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg)
        p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20)
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int e = atoi(p + 1);
    int decpt = e + 1;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -decpt; i++)
                *o++ = '0';
            jcopy(o, digits, (size_t)nd);
            o += nd;
        } else if (decpt >= nd) {
            jcopy(o, digits, (size_t)nd);
            o += nd;
            for (int i = nd; i < decpt; i++)
                *o++ = '0';
            *o++ = '.';
            *o++ = '0';
        } else {
            jcopy(o, digits, (size_t)decpt);
            o += decpt;
            *o++ = '.';
            jcopy(o, digits + decpt, (size_t)(nd - decpt));
            o += nd - decpt;
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            jcopy(o, digits + 1, (size_t)(nd - 1));
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

static void write_str_repr(jctx *c, jbuf *b, const jstr *s)
{
    bool has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_putc(c, b, q);
    size_t i = 0;
    while (i < s->len) {
        size_t start = i;
        int32_t cp = utf8_next(s->s, s->len, &i);
        if (cp == q || cp == '\\') {
            jb_putc(c, b, '\\');
            jb_putc(c, b, (char)cp);
        } else if (cp == '\t') {
            jb_puts(c, b, "\\t");
        } else if (cp == '\n') {
            jb_puts(c, b, "\\n");
        } else if (cp == '\r') {
            jb_puts(c, b, "\\r");
        } else if (py_isprintable(cp) || cp == ' ') {
            jb_put(c, b, s->s + start, i - start);
        } else if (cp <= 0xff) {
            jb_printf(c, b, "\\x%02x", (unsigned)cp);
        } else if (cp <= 0xffff) {
            jb_printf(c, b, "\\u%04x", (unsigned)cp);
        } else {
            jb_printf(c, b, "\\U%08x", (unsigned)cp);
        }
    }
    jb_putc(c, b, q);
}

void jv_write(jctx *c, jbuf *b, jval v, bool repr, int depth)
{
    if (depth > 200)
        jfail(c, 0, "value nested too deeply to print");
    char num[40];
    switch (v.t) {
    case JT_UNDEF:
        if (repr)
            jb_puts(c, b, "Undefined");
        return;
    case JT_NONE: jb_puts(c, b, "None"); return;
    case JT_BOOL: jb_puts(c, b, v.b ? "True" : "False"); return;
    case JT_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.i);
        jb_puts(c, b, num);
        return;
    case JT_FLOAT:
        py_float_repr(v.f, num);
        jb_puts(c, b, num);
        return;
    case JT_STR:
        if (repr)
            write_str_repr(c, b, v.s);
        else
            jb_put(c, b, v.s->s, v.s->len);
        return;
    case JT_LIST:
        jb_putc(c, b, v.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                jb_puts(c, b, ", ");
            jv_write(c, b, v.l->v[i], true, depth + 1);
        }
        if (v.l->tuple && v.l->n == 1)
            jb_putc(c, b, ',');
        jb_putc(c, b, v.l->tuple ? ')' : ']');
        return;
    case JT_DICT:
        if (v.d->ns)
            jb_puts(c, b, "<Namespace ");
        jb_putc(c, b, '{');
        for (size_t i = 0; i < v.d->n; i++) {
            if (i)
                jb_puts(c, b, ", ");
            jv_write(c, b, v.d->k[i], true, depth + 1);
            jb_puts(c, b, ": ");
            jv_write(c, b, v.d->v[i], true, depth + 1);
        }
        jb_putc(c, b, '}');
        if (v.d->ns)
            jb_putc(c, b, '>');
        return;
    case JT_FUNC:
        if (v.fn->kind == JF_MACRO)
            jb_printf(c, b, "<Macro '%s'>", v.fn->name ? v.fn->name : "caller");
        else
            jb_printf(c, b, "<built-in method %s>", v.fn->name ? v.fn->name : "?");
        return;
    case JT_LOOP:
        jb_puts(c, b, "<LoopContext>");
        return;
    case JT_VIEW: {
        jview *w = v.vw;
        switch (w->kind) {
        case VK_GEN:
            jb_printf(c, b, "<generator object %s at 0x7f0000000000>", w->gen_name ? w->gen_name : "?");
            return;
        case VK_REVITER:
            jb_puts(c, b, "<list_reverseiterator object at 0x7f0000000000>");
            return;
        case VK_RANGE:
            if (w->step == 1)
                jb_printf(c, b, "range(%lld, %lld)", (long long)w->start, (long long)w->stop);
            else
                jb_printf(c, b, "range(%lld, %lld, %lld)", (long long)w->start, (long long)w->stop, (long long)w->step);
            return;
        default: {
            jb_printf(c, b, "%s(", view_type_name(w));
            jval l = { .t = JT_LIST };
            l.l = w->items;
            jv_write(c, b, l, true, depth + 1);
            jb_putc(c, b, ')');
            return;
        }
        }
    }
    }
}

jstr *jv_to_str(jctx *c, jval v)
{
    if (v.t == JT_STR)
        return v.s;
    jbuf b = {0};
    jv_write(c, &b, v, false, 0);
    return jv_strbuf(c, &b).s;
}

/* ---- json.dumps ---- */

static void json_str(jctx *c, jbuf *b, const char *s, size_t n, bool ensure_ascii)
{
    jb_putc(c, b, '"');
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\' && (ensure_ascii ? ch < 0x7f : true)) {
            i++;
            run++;
            continue;
        }
        jb_put(c, b, s + i - run, run);
        run = 0;
        if (ch < 0x80) {
            i++;
            switch (ch) {
            case 0x7f: jb_puts(c, b, "\\u007f"); break;
            case '"': jb_puts(c, b, "\\\""); break;
            case '\\': jb_puts(c, b, "\\\\"); break;
            case '\n': jb_puts(c, b, "\\n"); break;
            case '\r': jb_puts(c, b, "\\r"); break;
            case '\t': jb_puts(c, b, "\\t"); break;
            case '\b': jb_puts(c, b, "\\b"); break;
            case '\f': jb_puts(c, b, "\\f"); break;
            default: jb_printf(c, b, "\\u%04x", ch); break;
            }
        } else {
            int32_t cp = utf8_next(s, n, &i);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                jb_printf(c, b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                jb_printf(c, b, "\\u%04x", (unsigned)cp);
            }
        }
    }
    jb_put(c, b, s + i - run, run);
    jb_putc(c, b, '"');
}

static void json_float(jctx *c, jbuf *b, double d)
{
    if (isnan(d))
        jb_puts(c, b, "NaN");
    else if (isinf(d))
        jb_puts(c, b, d < 0 ? "-Infinity" : "Infinity");
    else {
        char num[40];
        py_float_repr(d, num);
        jb_puts(c, b, num);
    }
}

static void json_newline(jctx *c, jbuf *b, const jjson_opts *o, int level)
{
    jb_putc(c, b, '\n');
    for (int i = 0; i < level; i++)
        jb_put(c, b, o->indent, o->indent_len);
}

/* A dict key as json.dumps writes it (str, or int/float/bool/None converted). */
static jstr *json_key(jctx *c, jval k, uint32_t off)
{
    char num[40];
    switch (k.t) {
    case JT_STR: return k.s;
    case JT_INT: snprintf(num, sizeof num, "%lld", (long long)k.i); return jv_cstr(c, num).s;
    case JT_FLOAT:
        if (isnan(k.f)) return jv_cstr(c, "NaN").s;
        if (isinf(k.f)) return jv_cstr(c, k.f < 0 ? "-Infinity" : "Infinity").s;
        py_float_repr(k.f, num);
        return jv_cstr(c, num).s;
    case JT_BOOL: return jv_cstr(c, k.b ? "true" : "false").s;
    case JT_NONE: return jv_cstr(c, "null").s;
    default: break;
    }
    jfail(c, off, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
}

static int cmp_jstr(const void *a, const void *b)
{
    const jstr *x = *(jstr *const *)a, *y = *(jstr *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->s, y->s, n);
    return r ? r : (x->len < y->len ? -1 : x->len > y->len);
}

void jv_write_json(jctx *c, jbuf *b, jval v, const jjson_opts *o, int level, uint32_t off)
{
    if (level > 500)
        jfail(c, off, "value nested too deeply for tojson");
    jinja_step(c, off, 1);
    switch (v.t) {
    case JT_NONE: jb_puts(c, b, "null"); return;
    case JT_BOOL: jb_puts(c, b, v.b ? "true" : "false"); return;
    case JT_INT: jb_printf(c, b, "%lld", (long long)v.i); return;
    case JT_FLOAT: json_float(c, b, v.f); return;
    case JT_STR: json_str(c, b, v.s->s, v.s->len, o->ensure_ascii); return;
    case JT_LIST:
        if (v.l->n == 0) {
            jb_puts(c, b, "[]");
            return;
        }
        jb_putc(c, b, '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                jb_put(c, b, o->item_sep, o->item_sep_len);
            if (o->has_indent)
                json_newline(c, b, o, level + 1);
            jv_write_json(c, b, v.l->v[i], o, level + 1, off);
        }
        if (o->has_indent)
            json_newline(c, b, o, level);
        jb_putc(c, b, ']');
        return;
    case JT_DICT: {
        if (v.d->ns)
            break;
        if (v.d->n == 0) {
            jb_puts(c, b, "{}");
            return;
        }
        size_t n = v.d->n;
        jstr **keys = jalloc(c, n * sizeof *keys, off);
        size_t *order = jalloc(c, n * sizeof *order, off);
        for (size_t i = 0; i < n; i++) {
            keys[i] = json_key(c, v.d->k[i], off);
            order[i] = i;
        }
        if (o->sort_keys) {
            /* sort (key, index) pairs by key; a stable insertion sort keeps it simple */
            for (size_t i = 1; i < n; i++) {
                size_t j = i, cur = order[i];
                while (j > 0 && cmp_jstr(&keys[order[j - 1]], &keys[cur]) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = cur;
            }
            jinja_step(c, off, n * n / 8);
        }
        jb_putc(c, b, '{');
        for (size_t i = 0; i < n; i++) {
            if (i)
                jb_put(c, b, o->item_sep, o->item_sep_len);
            if (o->has_indent)
                json_newline(c, b, o, level + 1);
            json_str(c, b, keys[order[i]]->s, keys[order[i]]->len, o->ensure_ascii);
            jb_put(c, b, o->key_sep, o->key_sep_len);
            jv_write_json(c, b, v.d->v[order[i]], o, level + 1, off);
        }
        if (o->has_indent)
            json_newline(c, b, o, level);
        jb_putc(c, b, '}');
        return;
    }
    default: break;
    }
    jfail(c, off, "Object of type %s is not JSON serializable", jv_type_name(v));
}

/* ---- from jansson ---- */

jval jv_from_json(jctx *c, const json_t *j, int depth)
{
    if (depth > 500)
        jfail(c, 0, "input JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: return jv_str(c, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jval l = jv_list(c, n, false);
        for (size_t i = 0; i < n; i++)
            l.l->v[i] = jv_from_json(c, json_array_get(j, i), depth + 1);
        l.l->n = n;
        return l;
    }
    case JSON_OBJECT: {
        jval d = jv_dict(c, json_object_size(j));
        for (void *it = json_object_iter((json_t *)j); it; it = json_object_iter_next((json_t *)j, it)) {
            jval k = jv_str(c, json_object_iter_key(it), json_object_iter_key_len(it));
            jd_set(c, d.d, k, jv_from_json(c, json_object_iter_value(it), depth + 1));
        }
        return d;
    }
    }
    return jv_none();
}
