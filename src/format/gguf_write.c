/* GGUF v3 writer. Metadata values are encoded when they are set (so a key set twice keeps its
 * last value, in its first position); tensors are borrowed and written in the order they were
 * added, each at an offset that is a multiple of general.alignment (32 unless that key is set),
 * as ggml's docs/gguf.md lays the file out. The file is written to "<path>.tmp" and renamed. */
#include "caldrix/format.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NESTING 8

typedef struct {
    uint8_t *p;
    size_t len, cap;
} buf;

typedef struct {
    char *key;
    buf val; /* u32 type followed by the encoded value */
} wkv;

typedef struct {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
    size_t n_bytes;
    const void *data;
} wtensor;

struct cdx_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    int rc;           /* sticky: the first failure of a setter, reported by cdx_gguf_writer_write */
    char msg[512];
};

static const uint8_t k_vsize[CDX_GGUF_VTYPE_COUNT] = {
    [CDX_GGUF_U8] = 1, [CDX_GGUF_I8] = 1, [CDX_GGUF_U16] = 2, [CDX_GGUF_I16] = 2, [CDX_GGUF_U32] = 4,
    [CDX_GGUF_I32] = 4, [CDX_GGUF_F32] = 4, [CDX_GGUF_BOOL] = 1, [CDX_GGUF_U64] = 8, [CDX_GGUF_I64] = 8,
    [CDX_GGUF_F64] = 8,
};

static bool put(buf *b, const void *p, size_t n)
{
    size_t need;
    if (!cdx_add_size(b->len, n, &need))
        return false;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need)
            if (!cdx_mul_size(cap, 2, &cap))
                return false;
        uint8_t *q = realloc(b->p, cap);
        if (!q)
            return false;
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len = need;
    return true;
}

static bool put_u32(buf *b, uint32_t v) { return put(b, &v, 4); }
static bool put_u64(buf *b, uint64_t v) { return put(b, &v, 8); }
static bool put_str(buf *b, const char *s, uint64_t n) { return put_u64(b, n) && put(b, s, (size_t)n); }

int cdx_gguf_writer_new(cdx_gguf_writer **out, cdx_err *err)
{
    *out = calloc(1, sizeof **out);
    return *out ? CDX_OK : cdx_err_set(err, CDX_ENOMEM, "out of memory");
}

void cdx_gguf_writer_free(cdx_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

static int fail(cdx_gguf_writer *w, int rc, const char *fmt, const char *arg)
{
    if (!w->rc) {
        w->rc = rc;
        snprintf(w->msg, sizeof w->msg, fmt, arg);
    }
    return rc;
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= 65535 && cdx_utf8_check(s, n) == n;
}

/* Takes the encoded value b (freed on failure); replaces the value of a key set before. */
static int set_encoded(cdx_gguf_writer *w, const char *key, buf *b)
{
    if (w->rc) {
        free(b->p);
        return w->rc;
    }
    if (!key || !name_ok(key)) {
        free(b->p);
        return fail(w, CDX_EINVAL, "metadata key \"%.200s\" is empty or not UTF-8", key ? key : "(null)");
    }
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            free(w->kv[i].val.p);
            w->kv[i].val = *b;
            return CDX_OK;
        }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            free(b->p);
            return fail(w, CDX_ENOMEM, "out of memory adding \"%.200s\"", key);
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(b->p);
        return fail(w, CDX_ENOMEM, "out of memory adding \"%.200s\"", key);
    }
    w->kv[w->n_kv++] = (wkv){ k, *b };
    return CDX_OK;
}

static int set_scalar(cdx_gguf_writer *w, const char *key, uint32_t type, const void *v)
{
    buf b = {0};
    if (!put_u32(&b, type) || !put(&b, v, k_vsize[type])) {
        free(b.p);
        return fail(w, CDX_ENOMEM, "out of memory adding \"%.200s\"", key ? key : "");
    }
    return set_encoded(w, key, &b);
}

int cdx_gguf_writer_set_u32(cdx_gguf_writer *w, const char *key, uint32_t v) { return set_scalar(w, key, CDX_GGUF_U32, &v); }
int cdx_gguf_writer_set_i32(cdx_gguf_writer *w, const char *key, int32_t v) { return set_scalar(w, key, CDX_GGUF_I32, &v); }
int cdx_gguf_writer_set_u64(cdx_gguf_writer *w, const char *key, uint64_t v) { return set_scalar(w, key, CDX_GGUF_U64, &v); }
int cdx_gguf_writer_set_i64(cdx_gguf_writer *w, const char *key, int64_t v) { return set_scalar(w, key, CDX_GGUF_I64, &v); }
int cdx_gguf_writer_set_f32(cdx_gguf_writer *w, const char *key, float v) { return set_scalar(w, key, CDX_GGUF_F32, &v); }
int cdx_gguf_writer_set_f64(cdx_gguf_writer *w, const char *key, double v) { return set_scalar(w, key, CDX_GGUF_F64, &v); }

int cdx_gguf_writer_set_bool(cdx_gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, CDX_GGUF_BOOL, &b);
}

int cdx_gguf_writer_set_str(cdx_gguf_writer *w, const char *key, const char *v)
{
    buf b = {0};
    if (!v)
        return fail(w, CDX_EINVAL, "metadata key \"%.200s\": NULL string", key ? key : "");
    if (!put_u32(&b, CDX_GGUF_STRING) || !put_str(&b, v, strlen(v))) {
        free(b.p);
        return fail(w, CDX_ENOMEM, "out of memory adding \"%.200s\"", key ? key : "");
    }
    return set_encoded(w, key, &b);
}

int cdx_gguf_writer_set_arr(cdx_gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n)
{
    if (elem_type >= CDX_GGUF_VTYPE_COUNT || !k_vsize[elem_type])
        return fail(w, CDX_EINVAL, "metadata key \"%.200s\": array element type must be a fixed-size type",
                    key ? key : "");
    size_t bytes;
    if (n > SIZE_MAX || !cdx_mul_size((size_t)n, k_vsize[elem_type], &bytes) || (bytes && !data))
        return fail(w, CDX_EINVAL, "metadata key \"%.200s\": array too large or NULL", key ? key : "");
    buf b = {0};
    if (!put_u32(&b, CDX_GGUF_ARRAY) || !put_u32(&b, elem_type) || !put_u64(&b, n) || !put(&b, data, bytes)) {
        free(b.p);
        return fail(w, CDX_ENOMEM, "out of memory adding \"%.200s\"", key ? key : "");
    }
    return set_encoded(w, key, &b);
}

int cdx_gguf_writer_set_arr_str(cdx_gguf_writer *w, const char *key, const char *const *strs, uint64_t n)
{
    buf b = {0};
    bool ok = put_u32(&b, CDX_GGUF_ARRAY) && put_u32(&b, CDX_GGUF_STRING) && put_u64(&b, n);
    for (uint64_t i = 0; ok && i < n; i++) {
        if (!strs[i]) {
            free(b.p);
            return fail(w, CDX_EINVAL, "metadata key \"%.200s\": NULL string in the array", key ? key : "");
        }
        ok = put_str(&b, strs[i], strlen(strs[i]));
    }
    if (!ok) {
        free(b.p);
        return fail(w, CDX_ENOMEM, "out of memory adding \"%.200s\"", key ? key : "");
    }
    return set_encoded(w, key, &b);
}

/* Encodes the payload of v (without its type tag) as the reader laid it out. */
static bool encode_value(buf *b, const cdx_gguf_value *v, int depth)
{
    if (v->type >= CDX_GGUF_VTYPE_COUNT || depth > GGUF_MAX_NESTING)
        return false;
    if (v->type == CDX_GGUF_STRING)
        return put_str(b, v->str.ptr, v->str.len);
    if (v->type != CDX_GGUF_ARRAY) {
        uint8_t tmp[8];
        switch (v->type) {
        case CDX_GGUF_U8: case CDX_GGUF_BOOL: tmp[0] = (uint8_t)v->num.u; break;
        case CDX_GGUF_I8: tmp[0] = (uint8_t)(int8_t)v->num.i; break;
        case CDX_GGUF_U16: { uint16_t x = (uint16_t)v->num.u; memcpy(tmp, &x, 2); break; }
        case CDX_GGUF_I16: { int16_t x = (int16_t)v->num.i; memcpy(tmp, &x, 2); break; }
        case CDX_GGUF_U32: { uint32_t x = (uint32_t)v->num.u; memcpy(tmp, &x, 4); break; }
        case CDX_GGUF_I32: { int32_t x = (int32_t)v->num.i; memcpy(tmp, &x, 4); break; }
        case CDX_GGUF_F32: { float x = (float)v->num.f; memcpy(tmp, &x, 4); break; }
        case CDX_GGUF_U64: memcpy(tmp, &v->num.u, 8); break;
        case CDX_GGUF_I64: memcpy(tmp, &v->num.i, 8); break;
        case CDX_GGUF_F64: memcpy(tmp, &v->num.f, 8); break;
        }
        return put(b, tmp, k_vsize[v->type]);
    }
    if (v->arr_type >= CDX_GGUF_VTYPE_COUNT || !put_u32(b, v->arr_type) || !put_u64(b, v->n))
        return false;
    if (v->arr_type == CDX_GGUF_STRING) {
        for (uint64_t i = 0; i < v->n; i++)
            if (!v->str_items || !put_str(b, v->str_items[i].ptr, v->str_items[i].len))
                return false;
        return true;
    }
    if (v->arr_type == CDX_GGUF_ARRAY) {
        for (uint64_t i = 0; i < v->n; i++)
            if (!v->items || v->items[i].type != CDX_GGUF_ARRAY || !encode_value(b, &v->items[i], depth + 1))
                return false;
        return true;
    }
    size_t bytes;
    if (v->n > SIZE_MAX || !cdx_mul_size((size_t)v->n, k_vsize[v->arr_type], &bytes) || (bytes && !v->raw))
        return false;
    return put(b, v->raw, bytes);
}

int cdx_gguf_writer_copy_kv(cdx_gguf_writer *w, const cdx_gguf_kv *kv)
{
    buf b = {0};
    if (!kv || !kv->key)
        return fail(w, CDX_EINVAL, "%s", "copy_kv: NULL key/value");
    if (!put_u32(&b, kv->val.type) || !encode_value(&b, &kv->val, 0)) {
        free(b.p);
        return fail(w, CDX_EINVAL, "metadata key \"%.200s\": cannot encode its value (bad type, nesting or memory)",
                    kv->key);
    }
    return set_encoded(w, kv->key, &b);
}

int cdx_gguf_writer_add_tensor(cdx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                               const uint64_t *ne, const void *data, cdx_err *err)
{
    if (!name || !name_ok(name))
        return cdx_err_set(err, CDX_EINVAL, "gguf writer: tensor name \"%.200s\" is empty or not UTF-8",
                           name ? name : "(null)");
    if (n_dims < 1 || n_dims > 4)
        return cdx_err_set(err, CDX_EINVAL, "gguf writer: tensor \"%.200s\" has %u dimensions; expected 1..4", name, n_dims);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return cdx_err_set(err, CDX_EINVAL, "gguf writer: tensor \"%.200s\" added twice", name);
    size_t n_bytes;
    int rc = cdx_type_row_bytes(type, ne[0], &n_bytes, err);
    if (rc)
        return cdx_err_prefix(err, "gguf writer: tensor \"%.200s\"", name);
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0)
            return cdx_err_set(err, CDX_EINVAL, "gguf writer: tensor \"%.200s\" dimension %u is 0", name, d);
        if (d > 0 && (ne[d] > SIZE_MAX || !cdx_mul_size(n_bytes, (size_t)ne[d], &n_bytes)))
            return cdx_err_set(err, CDX_ERANGE, "gguf writer: tensor \"%.200s\" is too large", name);
    }
    if (!data)
        return cdx_err_set(err, CDX_EINVAL, "gguf writer: tensor \"%.200s\" has no data", name);
    wtensor *grown = cdx_array_grow(w->t, &w->cap_t, w->n_t, sizeof *w->t);
    if (!grown)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    w->t = grown;
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < 4; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->n_bytes = n_bytes;
    t->data = data;
    w->n_t++;
    return CDX_OK;
}

static size_t pad_to(size_t x, size_t a) { return (a - x % a) % a; }

int cdx_gguf_writer_write(cdx_gguf_writer *w, const char *path, cdx_err *err)
{
    if (w->rc)
        return cdx_err_set(err, w->rc, "%s: %s", path, w->msg);
    uint64_t align = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, "general.alignment")) {
            uint32_t type, a = 0;
            memcpy(&type, w->kv[i].val.p, 4);
            if (type == CDX_GGUF_U32)
                memcpy(&a, w->kv[i].val.p + 4, 4);
            if (type != CDX_GGUF_U32 || a == 0 || (a & (a - 1)) || a > 65536)
                return cdx_err_set(err, CDX_EINVAL, "%s: general.alignment must be a power-of-two u32 up to 65536 (got %u)",
                                   path, a);
            align = a;
        }
    /* The header: everything before the data section, built in memory. */
    buf h = {0};
    bool ok = put(&h, "GGUF", 4) && put_u32(&h, 3) && put_u64(&h, w->n_t) && put_u64(&h, w->n_kv);
    for (size_t i = 0; ok && i < w->n_kv; i++)
        ok = put_str(&h, w->kv[i].key, strlen(w->kv[i].key)) && put(&h, w->kv[i].val.p, w->kv[i].val.len);
    uint64_t off = 0;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        ok = put_str(&h, t->name, strlen(t->name)) && put_u32(&h, t->n_dims);
        for (uint32_t d = 0; ok && d < t->n_dims; d++)
            ok = put_u64(&h, t->ne[d]);
        ok = ok && put_u32(&h, t->type) && put_u64(&h, off);
        ok = ok && !__builtin_add_overflow(off, t->n_bytes + pad_to(t->n_bytes, align), &off);
    }
    static const uint8_t zeros[64] = {0};
    size_t pad = pad_to(h.len, align);
    while (ok && pad) {
        size_t k = pad < sizeof zeros ? pad : sizeof zeros;
        ok = put(&h, zeros, k);
        pad -= k;
    }
    if (!ok) {
        free(h.p);
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory building the header", path);
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) {
        free(h.p);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    int rc = CDX_OK;
    if (!f) {
        rc = cdx_err_set(err, CDX_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    ok = fwrite(h.p, 1, h.len, f) == h.len;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        size_t tp = pad_to(t->n_bytes, align);
        ok = fwrite(t->data, 1, t->n_bytes, f) == t->n_bytes;
        while (ok && tp) {
            size_t k = tp < sizeof zeros ? tp : sizeof zeros;
            ok = fwrite(zeros, 1, k, f) == k;
            tp -= k;
        }
    }
    if (fclose(f) != 0)
        ok = false;
    if (!ok) {
        rc = cdx_err_set(err, CDX_EIO, "%s: write failed: %s", tmp, strerror(errno));
        remove(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        rc = cdx_err_set(err, CDX_EIO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        remove(tmp);
    }
out:
    free(tmp);
    free(h.p);
    return rc;
}
