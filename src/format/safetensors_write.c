/* safetensors writer: one file. The header lists tensors in name order after
 * and then "__metadata__": {"format": "pt"}, compact, padded with spaces to a multiple of 8 (the
 * layout of the fixtures' writer; huggingface/safetensors pads the same way). The data section packs tensors without holes (the
 * safetensors library refuses holes), widest element first and then by name, as
 * huggingface/safetensors orders them, so every tensor starts aligned to its element size. */
#include "caldrix/format.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    uint32_t type, n_dims, elem;
    uint64_t shape[ST_MAX_DIMS];
    size_t n_bytes;
    const void *data;
    uint64_t begin; /* offset in the data section, set when writing */
} wtensor;

struct cdx_st_writer {
    wtensor *t;
    size_t n, cap;
};

int cdx_st_writer_new(cdx_st_writer **out, cdx_err *err)
{
    *out = calloc(1, sizeof **out);
    return *out ? CDX_OK : cdx_err_set(err, CDX_ENOMEM, "out of memory");
}

void cdx_st_writer_free(cdx_st_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    free(w->t);
    free(w);
}

static const char *dtype_name(uint32_t type, uint32_t *elem)
{
    switch (type) {
    case CDX_TYPE_F32: *elem = 4; return "F32";
    case CDX_TYPE_F16: *elem = 2; return "F16";
    case CDX_TYPE_BF16: *elem = 2; return "BF16";
    default: return NULL;
    }
}

int cdx_st_writer_add(cdx_st_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *shape,
                      const void *data, cdx_err *err)
{
    uint32_t elem = 0;
    size_t len = name ? strlen(name) : 0;
    if (!len || cdx_utf8_check(name, len) != len || !strcmp(name, "__metadata__"))
        return cdx_err_set(err, CDX_EINVAL, "safetensors writer: tensor name \"%.200s\" is empty, reserved or not UTF-8",
                           name ? name : "(null)");
    if (!dtype_name(type, &elem))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "safetensors writer: tensor \"%.200s\" has type %s; F32, F16 and BF16 are written",
                           name, cdx_type_name(type));
    if (n_dims > ST_MAX_DIMS)
        return cdx_err_set(err, CDX_EINVAL, "safetensors writer: tensor \"%.200s\" has %u dimensions; at most %d", name,
                           n_dims, ST_MAX_DIMS);
    for (size_t i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name))
            return cdx_err_set(err, CDX_EINVAL, "safetensors writer: tensor \"%.200s\" added twice", name);
    size_t n_bytes = elem;
    for (uint32_t d = 0; d < n_dims; d++)
        if (shape[d] > SIZE_MAX || !cdx_mul_size(n_bytes, (size_t)shape[d], &n_bytes))
            return cdx_err_set(err, CDX_ERANGE, "safetensors writer: tensor \"%.200s\" is too large", name);
    if (n_bytes && !data)
        return cdx_err_set(err, CDX_EINVAL, "safetensors writer: tensor \"%.200s\" has no data", name);
    wtensor *grown = cdx_array_grow(w->t, &w->cap, w->n, sizeof *w->t);
    if (!grown)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    w->t = grown;
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    t->type = type;
    t->elem = elem;
    t->n_dims = n_dims;
    if (n_dims)
        memcpy(t->shape, shape, n_dims * sizeof *shape);
    t->n_bytes = n_bytes;
    t->data = data;
    w->n++;
    return CDX_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(wtensor *const *)a)->name, (*(wtensor *const *)b)->name);
}

static int by_layout(const void *a, const void *b)
{
    const wtensor *x = *(wtensor *const *)a, *y = *(wtensor *const *)b;
    if (x->elem != y->elem)
        return x->elem > y->elem ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* A growing text buffer; `ok` turns false on the first allocation failure. */
typedef struct {
    char *p;
    size_t len, cap;
    bool ok;
} text;

static void put(text *s, const char *p, size_t n)
{
    if (!s->ok)
        return;
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *q = realloc(s->p, cap);
        if (!q) {
            s->ok = false;
            return;
        }
        s->p = q;
        s->cap = cap;
    }
    memcpy(s->p + s->len, p, n);
    s->len += n;
    s->p[s->len] = 0;
}

static void puts_(text *s, const char *p) { put(s, p, strlen(p)); }

static void putf(text *s, uint64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    put(s, b, (size_t)n);
}

/* A JSON string literal (RFC 8259 escapes; UTF-8 passes through). */
static void put_json_str(text *s, const char *str)
{
    put(s, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)str; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = { '\\', (char)*c };
            put(s, e, 2);
        } else if (*c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", *c);
            put(s, e, 6);
        } else
            put(s, (const char *)c, 1);
    }
    put(s, "\"", 1);
}

int cdx_st_writer_write(cdx_st_writer *w, const char *path, cdx_err *err)
{
    int rc = CDX_OK;
    wtensor **order = malloc((w->n ? w->n : 1) * sizeof *order);
    text h = { .ok = true };
    char *tmp = NULL;
    FILE *f = NULL;
    if (!order) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < w->n; i++)
        order[i] = &w->t[i];
    qsort(order, w->n, sizeof *order, by_layout);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        order[i]->begin = off;
        off += order[i]->n_bytes; /* each fits in size_t and the sum of mapped buffers does too */
    }
    qsort(order, w->n, sizeof *order, by_name);
    puts_(&h, "{");
    for (size_t i = 0; i < w->n; i++) {
        const wtensor *t = order[i];
        uint32_t elem;
        put_json_str(&h, t->name);
        puts_(&h, ":{\"dtype\":\"");
        puts_(&h, dtype_name(t->type, &elem));
        puts_(&h, "\",\"shape\":[");
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (d)
                puts_(&h, ",");
            putf(&h, t->shape[d]);
        }
        puts_(&h, "],\"data_offsets\":[");
        putf(&h, t->begin);
        puts_(&h, ",");
        putf(&h, t->begin + t->n_bytes);
        puts_(&h, "]},");
    }
    puts_(&h, "\"__metadata__\":{\"format\":\"pt\"}}");
    while (h.ok && h.len % 8)
        puts_(&h, " ");
    if (!h.ok) {
        rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory building the header", path);
        goto out;
    }
    qsort(order, w->n, sizeof *order, by_layout);
    size_t plen = strlen(path);
    if (!(tmp = malloc(plen + 5))) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    if (!(f = fopen(tmp, "wb"))) {
        rc = cdx_err_set(err, CDX_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h.p, 1, h.len, f) == h.len;
    for (size_t i = 0; ok && i < w->n; i++)
        ok = !order[i]->n_bytes || fwrite(order[i]->data, 1, order[i]->n_bytes, f) == order[i]->n_bytes;
    if (fclose(f) != 0)
        ok = false;
    f = NULL;
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
    free(order);
    return rc;
}
