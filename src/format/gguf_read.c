/* GGUF v2/v3 reader. Layout (ggml's docs/gguf.md): magic "GGUF", u32 version, u64 n_tensors,
 * u64 n_kv, then n_kv × (string key, u32 type, value), then n_tensors × (string name, u32 n_dims,
 * u64 ne[n_dims], u32 type, u64 offset), padding to general.alignment, then the data section.
 * Every count is checked against the bytes left before it sizes an allocation. */
#include "caldrix/format.h"

#include <stdlib.h>
#include <string.h>

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NESTING 8 /* arrays of arrays of ... deeper than this are refused */

typedef struct {
    const uint8_t *p, *end, *base;
    const char *path;
    cdx_err *err;
} reader;

static uint64_t pos(const reader *r) { return (uint64_t)(r->p - r->base); }

static int need(reader *r, uint64_t n, const char *what)
{
    if ((uint64_t)(r->end - r->p) < n)
        return cdx_err_set(r->err, CDX_EFORMAT, "%s: truncated: %s needs %llu bytes at offset %llu, %llu left",
                           r->path, what, (unsigned long long)n, (unsigned long long)pos(r),
                           (unsigned long long)(r->end - r->p));
    return CDX_OK;
}

static int rd(reader *r, void *out, size_t n, const char *what)
{
    int rc = need(r, n, what);
    if (rc)
        return rc;
    memcpy(out, r->p, n);
    r->p += n;
    return CDX_OK;
}

static int rd_str(reader *r, cdx_gguf_str *s, const char *what)
{
    uint64_t len;
    int rc = rd(r, &len, 8, what);
    if (rc)
        return rc;
    if ((rc = need(r, len, what)))
        return rc;
    s->ptr = (const char *)r->p;
    s->len = len;
    r->p += len;
    return CDX_OK;
}

/* Owned NUL-terminated copy of a key or tensor name, checked to be UTF-8 without NULs. */
static int dup_name(reader *r, const cdx_gguf_str *s, const char *what, char **out)
{
    if (s->len == 0 || s->len > 65535)
        return cdx_err_set(r->err, CDX_EFORMAT, "%s: %s at offset %llu has length %llu; expected 1..65535",
                           r->path, what, (unsigned long long)pos(r), (unsigned long long)s->len);
    if (memchr(s->ptr, 0, s->len) || cdx_utf8_check(s->ptr, s->len) != s->len)
        return cdx_err_set(r->err, CDX_EFORMAT, "%s: %s before offset %llu is not valid UTF-8 text", r->path,
                           what, (unsigned long long)pos(r));
    char *c = malloc(s->len + 1);
    if (!c)
        return cdx_err_set(r->err, CDX_ENOMEM, "%s: out of memory", r->path);
    memcpy(c, s->ptr, s->len);
    c[s->len] = 0;
    *out = c;
    return CDX_OK;
}

static const uint8_t k_vsize[CDX_GGUF_VTYPE_COUNT] = {
    [CDX_GGUF_U8] = 1, [CDX_GGUF_I8] = 1, [CDX_GGUF_U16] = 2, [CDX_GGUF_I16] = 2, [CDX_GGUF_U32] = 4,
    [CDX_GGUF_I32] = 4, [CDX_GGUF_F32] = 4, [CDX_GGUF_BOOL] = 1, [CDX_GGUF_U64] = 8, [CDX_GGUF_I64] = 8,
    [CDX_GGUF_F64] = 8,
};

const char *cdx_gguf_vtype_name(uint32_t t)
{
    static const char *const names[CDX_GGUF_VTYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
    };
    return t < CDX_GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

static void scalar_decode(uint32_t type, const uint8_t *p, cdx_gguf_value *v)
{
    switch (type) {
    case CDX_GGUF_U8: v->num.u = p[0]; break;
    case CDX_GGUF_I8: v->num.i = (int8_t)p[0]; break;
    case CDX_GGUF_BOOL: v->num.u = p[0] != 0; break;
    case CDX_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); v->num.u = x; break; }
    case CDX_GGUF_I16: { int16_t x; memcpy(&x, p, 2); v->num.i = x; break; }
    case CDX_GGUF_U32: { uint32_t x; memcpy(&x, p, 4); v->num.u = x; break; }
    case CDX_GGUF_I32: { int32_t x; memcpy(&x, p, 4); v->num.i = x; break; }
    case CDX_GGUF_F32: { float x; memcpy(&x, p, 4); v->num.f = x; break; }
    case CDX_GGUF_U64: { uint64_t x; memcpy(&x, p, 8); v->num.u = x; break; }
    case CDX_GGUF_I64: { int64_t x; memcpy(&x, p, 8); v->num.i = x; break; }
    case CDX_GGUF_F64: { double x; memcpy(&x, p, 8); v->num.f = x; break; }
    }
}

static void value_free(cdx_gguf_value *v)
{
    if (v->items) {
        for (uint64_t i = 0; i < v->n; i++)
            value_free(&v->items[i]);
        free(v->items);
    }
    free(v->str_items);
    v->items = NULL;
    v->str_items = NULL;
}

static int rd_value(reader *r, uint32_t type, cdx_gguf_value *v, const char *key, int depth)
{
    int rc;
    memset(v, 0, sizeof *v);
    v->type = type;
    v->n = 1;
    if (type >= CDX_GGUF_VTYPE_COUNT)
        return cdx_err_set(r->err, CDX_EFORMAT, "%s: key \"%s\" has value type %u; GGUF types are 0..12", r->path,
                           key, type);
    if (type == CDX_GGUF_STRING)
        return rd_str(r, &v->str, key);
    if (type != CDX_GGUF_ARRAY) {
        if ((rc = need(r, k_vsize[type], key)))
            return rc;
        scalar_decode(type, r->p, v);
        r->p += k_vsize[type];
        return CDX_OK;
    }
    if (depth >= GGUF_MAX_NESTING)
        return cdx_err_set(r->err, CDX_EFORMAT, "%s: key \"%s\" nests arrays deeper than %d", r->path, key,
                           GGUF_MAX_NESTING);
    uint32_t et;
    uint64_t n;
    if ((rc = rd(r, &et, 4, key)) || (rc = rd(r, &n, 8, key)))
        return rc;
    if (et >= CDX_GGUF_VTYPE_COUNT)
        return cdx_err_set(r->err, CDX_EFORMAT, "%s: key \"%s\" is an array of type %u; GGUF types are 0..12",
                           r->path, key, et);
    v->arr_type = et;
    v->n = n;
    size_t left = (size_t)(r->end - r->p);
    if (et == CDX_GGUF_STRING || et == CDX_GGUF_ARRAY) {
        /* each element takes at least 8 (string length) or 12 (array header) bytes */
        uint64_t min_each = et == CDX_GGUF_STRING ? 8 : 12;
        if (n > left / min_each)
            return cdx_err_set(r->err, CDX_EFORMAT,
                               "%s: key \"%s\" claims %llu array elements; only %zu bytes remain", r->path, key,
                               (unsigned long long)n, left);
        if (n == 0)
            return CDX_OK;
        if (et == CDX_GGUF_STRING) {
            v->str_items = malloc((size_t)n * sizeof *v->str_items);
            if (!v->str_items)
                return cdx_err_set(r->err, CDX_ENOMEM, "%s: out of memory for key \"%s\"", r->path, key);
            for (uint64_t i = 0; i < n; i++)
                if ((rc = rd_str(r, &v->str_items[i], key)))
                    return rc;
        } else {
            v->items = calloc((size_t)n, sizeof *v->items);
            if (!v->items)
                return cdx_err_set(r->err, CDX_ENOMEM, "%s: out of memory for key \"%s\"", r->path, key);
            for (uint64_t i = 0; i < n; i++)
                if ((rc = rd_value(r, CDX_GGUF_ARRAY, &v->items[i], key, depth + 1)))
                    return rc;
        }
        return CDX_OK;
    }
    if (n > left / k_vsize[et])
        return cdx_err_set(r->err, CDX_EFORMAT, "%s: key \"%s\" claims %llu %s elements; only %zu bytes remain",
                           r->path, key, (unsigned long long)n, cdx_gguf_vtype_name(et), left);
    v->raw = r->p;
    r->p += n * k_vsize[et];
    return CDX_OK;
}

void cdx_gguf_close(cdx_gguf *g)
{
    if (!g)
        return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            value_free(&g->kv[i].val);
        }
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++)
            free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    cdx_file_unmap(g->file);
    free(g);
}

static int cmp_offset(const void *a, const void *b)
{
    const cdx_gguf_tensor *x = *(const cdx_gguf_tensor *const *)a, *y = *(const cdx_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The alignment a tensor's data needs to be read through its element type. */
static size_t elem_align(uint32_t type)
{
    switch (type) {
    case CDX_TYPE_F32: case CDX_TYPE_I32: return 4;
    case CDX_TYPE_F64: case CDX_TYPE_I64: return 8;
    case CDX_TYPE_I8: return 1;
    default: return 2; /* F16, BF16, I16 and every block type (their scales are halves) */
    }
}

static int cmp_strp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* n names, each a char * found every `stride` bytes from first. */
static int check_unique(const cdx_gguf *g, const char *const *first, size_t stride, uint64_t n, const char *what,
                        cdx_err *err)
{
    if (n < 2)
        return CDX_OK;
    const char **names = malloc((size_t)n * sizeof *names);
    if (!names)
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n; i++)
        names[i] = *(const char *const *)((const char *)first + i * stride);
    qsort(names, (size_t)n, sizeof *names, cmp_strp);
    int rc = CDX_OK;
    for (uint64_t i = 1; i < n && !rc; i++)
        if (!strcmp(names[i - 1], names[i]))
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s \"%s\" appears twice", g->path, what, names[i]);
    free(names);
    return rc;
}

int cdx_gguf_check_magic(const void *head, size_t n, const char *path, cdx_err *err)
{
    const uint8_t *m = head;
    if (n == 0)
        return cdx_err_set(err, CDX_EFORMAT, "%s: not a GGUF file: it is empty", path);
    if (n < 4)
        return cdx_err_set(err, CDX_EFORMAT, "%s: not a GGUF file: it is %zu bytes, less than GGUF's 4-byte magic",
                           path, n);
    if (memcmp(m, "GGUF", 4))
        return cdx_err_set(err, CDX_EFORMAT, "%s: not a GGUF file (magic is %02x %02x %02x %02x, expected \"GGUF\")",
                           path, m[0], m[1], m[2], m[3]);
    return 0;
}

static int parse(cdx_gguf *g, cdx_err *err)
{
    reader r = { g->base, g->base + g->size, g->base, g->path, err };
    int rc;
    uint8_t magic[4];
    if ((rc = cdx_gguf_check_magic(g->base, g->size, g->path, err)) || (rc = rd(&r, magic, 4, "magic")))
        return rc;
    if ((rc = rd(&r, &g->version, 4, "version")))
        return rc;
    if (g->version != 2 && g->version != 3)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: GGUF version is %u; caldrix reads versions 2 and 3",
                           g->path, g->version);
    uint64_t n_tensors, n_kv;
    if ((rc = rd(&r, &n_tensors, 8, "tensor count")) || (rc = rd(&r, &n_kv, 8, "metadata count")))
        return rc;
    size_t left = (size_t)(r.end - r.p);
    /* a kv takes at least 8+1+4+1 bytes, a tensor info at least 8+1+4+8+4+8 */
    if (n_kv > left / 14)
        return cdx_err_set(err, CDX_EFORMAT, "%s: metadata count is %llu; the file has room for at most %zu",
                           g->path, (unsigned long long)n_kv, left / 14);
    if (n_tensors > left / 33)
        return cdx_err_set(err, CDX_EFORMAT, "%s: tensor count is %llu; the file has room for at most %zu",
                           g->path, (unsigned long long)n_tensors, left / 33);
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors)
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", g->path);

    g->alignment = 32;
    for (uint64_t i = 0; i < n_kv; i++) {
        cdx_gguf_str key;
        uint32_t type;
        if ((rc = rd_str(&r, &key, "metadata key")) || (rc = dup_name(&r, &key, "metadata key", &g->kv[i].key)))
            return rc;
        g->n_kv = i + 1;
        if ((rc = rd(&r, &type, 4, g->kv[i].key)) || (rc = rd_value(&r, type, &g->kv[i].val, g->kv[i].key, 0)))
            return rc;
        if (!strcmp(g->kv[i].key, "general.alignment")) {
            const cdx_gguf_value *v = &g->kv[i].val;
            if (v->type != CDX_GGUF_U32 || v->num.u == 0 || (v->num.u & (v->num.u - 1)) || v->num.u > 65536)
                return cdx_err_set(err, CDX_EFORMAT,
                                   "%s: general.alignment is %llu (%s); expected a power of two u32 up to 65536",
                                   g->path, (unsigned long long)v->num.u, cdx_gguf_vtype_name(v->type));
            g->alignment = v->num.u;
        }
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        cdx_gguf_tensor *t = &g->tensors[i];
        cdx_gguf_str name;
        if ((rc = rd_str(&r, &name, "tensor name")) || (rc = dup_name(&r, &name, "tensor name", &t->name)))
            return rc;
        g->n_tensors = i + 1;
        if ((rc = rd(&r, &t->n_dims, 4, t->name)))
            return rc;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" has %u dimensions; expected 1..%d", g->path,
                               t->name, t->n_dims, GGUF_MAX_DIMS);
        uint64_t n_elems = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if ((rc = rd(&r, &t->ne[d], 8, t->name)))
                return rc;
            if (t->ne[d] == 0 || t->ne[d] > ((uint64_t)1 << 40) ||
                __builtin_mul_overflow(n_elems, t->ne[d], &n_elems) || n_elems > ((uint64_t)1 << 42))
                return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" dimension %u is %llu; the shape is out of bounds",
                                   g->path, t->name, d, (unsigned long long)t->ne[d]);
        }
        if ((rc = rd(&r, &t->type, 4, t->name)) || (rc = rd(&r, &t->offset, 8, t->name)))
            return rc;
        size_t row_bytes;
        if ((rc = cdx_type_row_bytes(t->type, t->ne[0], &row_bytes, err)))
            return cdx_err_prefix(err, "%s: tensor \"%s\"", g->path, t->name);
        if (!cdx_mul_size(row_bytes, (size_t)(n_elems / t->ne[0]), &t->n_bytes))
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" size overflows", g->path, t->name);
        if (t->offset % g->alignment)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%s\" offset %llu is not a multiple of the alignment %llu",
                               g->path, t->name, (unsigned long long)t->offset, (unsigned long long)g->alignment);
    }
    /* Names must be unique: sort a scratch list of pointers (O(n log n); a pairwise scan would let
     * a file of a million keys stall the reader). */
    if ((rc = check_unique(g, (const char *const *)&g->kv[0].key, sizeof *g->kv, g->n_kv, "metadata key", err)) ||
        (rc = check_unique(g, (const char *const *)&g->tensors[0].name, sizeof *g->tensors, g->n_tensors, "tensor", err)))
        return rc;

    uint64_t data_off = pos(&r);
    data_off = (data_off + g->alignment - 1) / g->alignment * g->alignment;
    if (data_off > g->size && n_tensors > 0)
        return cdx_err_set(err, CDX_EFORMAT, "%s: data section would start at %llu, past the end of the file (%zu bytes)",
                           g->path, (unsigned long long)data_off, g->size);
    g->data_offset = data_off;
    uint64_t data_size = g->size > data_off ? g->size - data_off : 0;

    /* Bounds and overlap: sort by offset and check each tensor ends before the next begins. */
    const cdx_gguf_tensor **by_off = malloc((n_tensors ? (size_t)n_tensors : 1) * sizeof *by_off);
    if (!by_off)
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n_tensors; i++) {
        cdx_gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_size || t->n_bytes > data_size - t->offset) {
            free(by_off);
            return cdx_err_set(err, CDX_EFORMAT,
                               "%s: tensor \"%s\" (%zu bytes at data offset %llu) runs past the end of the file "
                               "(data section is %llu bytes)",
                               g->path, t->name, t->n_bytes, (unsigned long long)t->offset,
                               (unsigned long long)data_size);
        }
        t->data = g->base + data_off + t->offset;
        /* Kernels read F32/F16/blocks through typed pointers: a general.alignment below the
         * element size (legal in GGUF, never written by llama.cpp) could misplace them. */
        size_t need = elem_align(t->type);
        if ((uintptr_t)t->data % need) {
            free(by_off);
            return cdx_err_set(err, CDX_EFORMAT,
                               "%s: tensor \"%s\" data at file offset %llu is not aligned to %zu bytes "
                               "(general.alignment is %llu)",
                               g->path, t->name, (unsigned long long)(data_off + t->offset), need,
                               (unsigned long long)g->alignment);
        }
        by_off[i] = t;
    }
    qsort(by_off, (size_t)n_tensors, sizeof *by_off, cmp_offset);
    for (uint64_t i = 1; i < n_tensors; i++)
        if (by_off[i - 1]->offset + by_off[i - 1]->n_bytes > by_off[i]->offset) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensors \"%s\" and \"%s\" overlap (offsets %llu+%zu and %llu)",
                             g->path, by_off[i - 1]->name, by_off[i]->name, (unsigned long long)by_off[i - 1]->offset,
                             by_off[i - 1]->n_bytes, (unsigned long long)by_off[i]->offset);
            free(by_off);
            return rc;
        }
    free(by_off);
    return CDX_OK;
}

int cdx_gguf_open_mem(const void *data, size_t size, const char *name, cdx_gguf **out, cdx_err *err)
{
    *out = NULL;
    cdx_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    g->base = data;
    g->size = size;
    g->path = name ? name : "<memory>";
    int rc = parse(g, err);
    if (rc) {
        cdx_gguf_close(g);
        return rc;
    }
    *out = g;
    return CDX_OK;
}

int cdx_gguf_open(const char *path, cdx_gguf **out, cdx_err *err)
{
    *out = NULL;
    cdx_file *f;
    int rc = cdx_file_map(path, &f, err);
    if (rc)
        return rc;
    cdx_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        cdx_file_unmap(f);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    g->file = f;
    g->base = f->data;
    g->size = f->size;
    g->path = f->path;
    if ((rc = parse(g, err))) {
        cdx_gguf_close(g);
        return rc;
    }
    *out = g;
    return CDX_OK;
}

/* ---- lookups ---- */

const cdx_gguf_kv *cdx_gguf_find(const cdx_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

static bool is_unsigned(uint32_t t) { return t == CDX_GGUF_U8 || t == CDX_GGUF_U16 || t == CDX_GGUF_U32 || t == CDX_GGUF_U64; }
static bool is_signed(uint32_t t) { return t == CDX_GGUF_I8 || t == CDX_GGUF_I16 || t == CDX_GGUF_I32 || t == CDX_GGUF_I64; }

bool cdx_gguf_get_u64(const cdx_gguf *g, const char *key, uint64_t *out)
{
    const cdx_gguf_kv *kv = cdx_gguf_find(g, key);
    if (!kv)
        return false;
    if (is_unsigned(kv->val.type)) { *out = kv->val.num.u; return true; }
    if (is_signed(kv->val.type) && kv->val.num.i >= 0) { *out = (uint64_t)kv->val.num.i; return true; }
    return false;
}

bool cdx_gguf_get_i64(const cdx_gguf *g, const char *key, int64_t *out)
{
    const cdx_gguf_kv *kv = cdx_gguf_find(g, key);
    if (!kv)
        return false;
    if (is_signed(kv->val.type)) { *out = kv->val.num.i; return true; }
    if (is_unsigned(kv->val.type) && kv->val.num.u <= INT64_MAX) { *out = (int64_t)kv->val.num.u; return true; }
    return false;
}

bool cdx_gguf_get_f64(const cdx_gguf *g, const char *key, double *out)
{
    const cdx_gguf_kv *kv = cdx_gguf_find(g, key);
    if (!kv)
        return false;
    if (kv->val.type == CDX_GGUF_F32 || kv->val.type == CDX_GGUF_F64) { *out = kv->val.num.f; return true; }
    if (is_signed(kv->val.type)) { *out = (double)kv->val.num.i; return true; }
    if (is_unsigned(kv->val.type)) { *out = (double)kv->val.num.u; return true; }
    return false;
}

bool cdx_gguf_get_bool(const cdx_gguf *g, const char *key, bool *out)
{
    const cdx_gguf_kv *kv = cdx_gguf_find(g, key);
    if (!kv || kv->val.type != CDX_GGUF_BOOL)
        return false;
    *out = kv->val.num.u != 0;
    return true;
}

bool cdx_gguf_get_str(const cdx_gguf *g, const char *key, cdx_gguf_str *out)
{
    const cdx_gguf_kv *kv = cdx_gguf_find(g, key);
    if (!kv || kv->val.type != CDX_GGUF_STRING)
        return false;
    *out = kv->val.str;
    return true;
}

static cdx_gguf_value arr_elem(const cdx_gguf_value *v, uint64_t i)
{
    cdx_gguf_value e = {0};
    e.type = v->arr_type;
    if (v->type == CDX_GGUF_ARRAY && i < v->n && v->arr_type < CDX_GGUF_VTYPE_COUNT && k_vsize[v->arr_type])
        scalar_decode(v->arr_type, v->raw + i * k_vsize[v->arr_type], &e);
    return e;
}

double cdx_gguf_arr_f64(const cdx_gguf_value *v, uint64_t i)
{
    cdx_gguf_value e = arr_elem(v, i);
    if (e.type == CDX_GGUF_F32 || e.type == CDX_GGUF_F64)
        return e.num.f;
    return is_signed(e.type) ? (double)e.num.i : (double)e.num.u;
}

bool cdx_gguf_arr_i64(const cdx_gguf_value *v, uint64_t i, int64_t *out)
{
    if (v->type != CDX_GGUF_ARRAY || i >= v->n)
        return false;
    cdx_gguf_value e = arr_elem(v, i);
    if (is_signed(e.type)) { *out = e.num.i; return true; }
    if (is_unsigned(e.type) && e.num.u <= INT64_MAX) { *out = (int64_t)e.num.u; return true; }
    if (e.type != CDX_GGUF_F32 && e.type != CDX_GGUF_F64)
        return false;
    /* converting a float int64 cannot hold (NaN, +-inf, |x| >= 2^63) is undefined behaviour in C;
     * the range test is false for NaN, and a fraction is refused rather than truncated */
    double f = e.num.f;
    if (!(f >= -0x1p63 && f < 0x1p63) || (double)(int64_t)f != f)
        return false;
    *out = (int64_t)f;
    return true;
}

const cdx_gguf_tensor *cdx_gguf_tensor_find(const cdx_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}
