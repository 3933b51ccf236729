/* safetensors reader (huggingface/safetensors docs, "Format"): u64 little-endian header length N,
 * N bytes of UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data section; offsets are relative to its start. A checkpoint may be split into shards
 * listed by model.safetensors.index.json ({"weight_map": {tensor: file}}).
 *
 * Every length and offset is checked against the file before it is used. Tensors point into the
 * mapping; the rare tensor whose data is not aligned to its element size (a writer that does not
 * pad the header) gets an aligned heap copy, so callers may always read data as float/uint16_t. */
#include "caldrix/format.h"

#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The safetensors library refuses headers above 100 MB (MAX_HEADER_SIZE); so do we. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
#define ST_MAX_DIMS 8
#define ST_MAX_INDEX_BYTES ((size_t)64 << 20)

/* The dtypes caldrix reads, then the other fixed-size dtypes of the safetensors format (refused by
 * name when loading; counted with their sizes when only the headers are read). */
#define ST_N_COMPUTED 3
static const struct { const char *name; uint32_t type; uint32_t size; } k_dtypes[] = {
    { "F32", CDX_TYPE_F32, 4 },  { "F16", CDX_TYPE_F16, 2 },     { "BF16", CDX_TYPE_BF16, 2 },
    { "F64", CDX_TYPE_COUNT, 8 }, { "I64", CDX_TYPE_COUNT, 8 },  { "U64", CDX_TYPE_COUNT, 8 },
    { "I32", CDX_TYPE_COUNT, 4 }, { "U32", CDX_TYPE_COUNT, 4 },  { "I16", CDX_TYPE_COUNT, 2 },
    { "U16", CDX_TYPE_COUNT, 2 }, { "I8", CDX_TYPE_COUNT, 1 },   { "U8", CDX_TYPE_COUNT, 1 },
    { "BOOL", CDX_TYPE_COUNT, 1 }, { "F8_E5M2", CDX_TYPE_COUNT, 1 }, { "F8_E4M3", CDX_TYPE_COUNT, 1 },
    { "F8_E8M0", CDX_TYPE_COUNT, 1 },
};

/* The reader's private state; the public struct comes first so it can be handed out. */
typedef struct {
    cdx_safetensors pub;
    void **copies; /* aligned copies of misaligned tensors */
    size_t n_copies;
    size_t cap_tensors;
    bool headers_only;  /* cdx_st_open_headers */
    bool bytes_u8;      /* cdx_st_open_u8: U8 tensors read too, as bytes (type CDX_TYPE_COUNT, dtype "U8") */
} st_impl;

void cdx_st_close(cdx_safetensors *st)
{
    if (!st)
        return;
    st_impl *s = (st_impl *)st;
    for (uint64_t i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    for (uint32_t i = 0; i < st->n_files; i++)
        cdx_file_unmap(st->files[i]);
    free(st->files);
    for (size_t i = 0; i < s->n_copies; i++)
        free(s->copies[i]);
    free(s->copies);
    free(st->dir);
    free(s);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const cdx_st_tensor *)a)->name, ((const cdx_st_tensor *)b)->name);
}

const cdx_st_tensor *cdx_st_find(const cdx_safetensors *st, const char *name)
{
    if (!st || !name)
        return NULL;
    uint64_t lo = 0, hi = st->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (c == 0)
            return &st->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- one file ---- */

typedef struct {
    uint64_t begin, end;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

static bool json_uint(const json_t *j, uint64_t *out)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return false;
    *out = (uint64_t)json_integer_value(j);
    return true;
}

/* Parses one file's header and appends its tensors to st. `path` names the file in messages. */
static int parse_one(st_impl *s, const uint8_t *data, size_t size, const char *path, uint32_t shard, cdx_err *err)
{
    cdx_safetensors *st = &s->pub;
    if (size < 8)
        return cdx_err_set(err, CDX_EFORMAT, "%s: file is %zu bytes; a safetensors file starts with an 8-byte header length",
                           path, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | data[i];
    if (n > size - 8)
        return cdx_err_set(err, CDX_EFORMAT, "%s: header length is %llu; only %zu bytes follow it", path,
                           (unsigned long long)n, size - 8);
    if (n > ST_MAX_HEADER)
        return cdx_err_set(err, CDX_EFORMAT, "%s: header length is %llu; the limit is %llu bytes", path,
                           (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
    if (n < 2 || data[8] != '{')
        return cdx_err_set(err, CDX_EFORMAT, "%s: header (%llu bytes at offset 8) is not a JSON object", path,
                           (unsigned long long)n);
    const uint8_t *body = data + 8 + n;
    uint64_t body_size = size - 8 - n;

    json_error_t je;
    json_t *root = json_loadb((const char *)data + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return cdx_err_set(err, CDX_EFORMAT, "%s: header is not valid JSON: %s (at byte %d of the header)", path,
                           je.text, je.position);
    int rc = CDX_OK;
    span *spans = NULL;
    size_t n_spans = 0;
    if (!json_is_object(root)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: header is not a JSON object", path);
        goto out;
    }
    size_t count = json_object_size(root), need;
    if (!cdx_add_size(st->n_tensors, count, &need)) {
        rc = cdx_err_set(err, CDX_ENOMEM, "%s: too many tensors", path);
        goto out;
    }
    if (need > s->cap_tensors) {
        size_t cap = need < 64 ? 64 : need, bytes;
        if (!cdx_mul_size(cap, sizeof *st->tensors, &bytes)) {
            rc = cdx_err_set(err, CDX_ENOMEM, "%s: too many tensors (%zu)", path, need);
            goto out;
        }
        cdx_st_tensor *t = realloc(st->tensors, bytes);
        if (!t) {
            rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory for %zu tensors", path, need);
            goto out;
        }
        st->tensors = t;
        s->cap_tensors = cap;
    }
    spans = malloc((count ? count : 1) * sizeof *spans);
    if (!spans) {
        rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", path);
        goto out;
    }

    const char *name;
    json_t *v;
    json_object_foreach(root, name, v) {
        if (!strcmp(name, "__metadata__")) {
            if (!json_is_object(v)) {
                rc = cdx_err_set(err, CDX_EFORMAT, "%s: __metadata__ is not a JSON object", path);
                goto out;
            }
            continue;
        }
        if (name[0] == 0) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: a tensor has an empty name", path);
            goto out;
        }
        if (!json_is_object(v)) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%.200s\" is not a JSON object", path, name);
            goto out;
        }
        json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
               *jo = json_object_get(v, "data_offsets");
        if (!json_is_string(jd)) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%.200s\" has no \"dtype\" string", path, name);
            goto out;
        }
        const char *dt = json_string_value(jd);
        size_t k = 0;
        const size_t n_known = sizeof k_dtypes / sizeof k_dtypes[0];
        while (k < n_known && strcmp(k_dtypes[k].name, dt))
            k++;
        if (!s->headers_only && k >= ST_N_COMPUTED && !(s->bytes_u8 && !strcmp(dt, "U8"))) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: tensor \"%.200s\" has dtype %.40s; caldrix reads F32, F16 and BF16",
                             path, name, dt);
            goto out;
        }
        if (!json_is_array(js) || json_array_size(js) > ST_MAX_DIMS) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%.200s\": \"shape\" is not an array of at most %d dimensions",
                             path, name, ST_MAX_DIMS);
            goto out;
        }
        cdx_st_tensor *t = &st->tensors[st->n_tensors];
        memset(t, 0, sizeof *t);
        t->type = k < n_known ? k_dtypes[k].type : CDX_TYPE_COUNT;
        snprintf(t->dtype, sizeof t->dtype, "%s", dt);
        t->shard = shard;
        t->n_dims = (uint32_t)json_array_size(js);
        size_t n_bytes = k < n_known ? k_dtypes[k].size : 1; /* a dtype safetensors added since: size unchecked */
        for (uint32_t d = 0; d < t->n_dims; d++) {
            json_t *e = json_array_get(js, d);
            if (!json_uint(e, &t->shape[d])) {
                char *txt = json_dumps(e, JSON_ENCODE_ANY | JSON_COMPACT);
                rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%.200s\" shape[%u] is %.40s; expected a non-negative integer",
                                 path, name, d, txt ? txt : "?");
                free(txt);
                goto out;
            }
            if (t->shape[d] > SIZE_MAX || !cdx_mul_size(n_bytes, (size_t)t->shape[d], &n_bytes)) {
                rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%.200s\" shape overflows (dimension %u is %llu)", path,
                                 name, d, (unsigned long long)t->shape[d]);
                goto out;
            }
        }
        uint64_t b, e;
        if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_uint(json_array_get(jo, 0), &b) ||
            !json_uint(json_array_get(jo, 1), &e)) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%.200s\": \"data_offsets\" is not [begin, end] of two non-negative integers",
                             path, name);
            goto out;
        }
        if (e < b || e > body_size) {
            rc = cdx_err_set(err, CDX_EFORMAT,
                             "%s: tensor \"%.200s\" data_offsets [%llu, %llu] lie outside the data section (%llu bytes)",
                             path, name, (unsigned long long)b, (unsigned long long)e, (unsigned long long)body_size);
            goto out;
        }
        if (k >= n_known)
            n_bytes = (size_t)(e - b);
        if (e - b != n_bytes) {
            rc = cdx_err_set(err, CDX_EFORMAT,
                             "%s: tensor \"%.200s\" has %llu bytes at data_offsets [%llu, %llu]; its shape and dtype %s need %zu",
                             path, name, (unsigned long long)(e - b), (unsigned long long)b, (unsigned long long)e, dt,
                             n_bytes);
            goto out;
        }
        if (!(t->name = strdup(name))) {
            rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        st->n_tensors++;
        t->n_bytes = n_bytes;
        t->data = body + b;
        /* 8 + n + b is the file offset; the mapping (or the fuzzer's buffer) is at least 8-aligned. */
        if (!s->headers_only && ((uintptr_t)t->data % k_dtypes[k].size) != 0) {
            void **cp = realloc(s->copies, (s->n_copies + 1) * sizeof *cp);
            if (!cp) {
                rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            s->copies = cp;
            void *c = malloc(n_bytes ? n_bytes : 1);
            if (!c) {
                rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory copying tensor \"%.200s\"", path, name);
                goto out;
            }
            memcpy(c, t->data, n_bytes);
            s->copies[s->n_copies++] = c;
            t->data = c;
        }
        if (e > b)
            spans[n_spans++] = (span){ b, e, t->name };
    }
    qsort(spans, n_spans, sizeof *spans, cmp_span);
    for (size_t i = 1; i < n_spans; i++)
        if (spans[i].begin < spans[i - 1].end) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: tensors \"%.200s\" [%llu, %llu] and \"%.200s\" [%llu, %llu] overlap",
                             path, spans[i - 1].name, (unsigned long long)spans[i - 1].begin,
                             (unsigned long long)spans[i - 1].end, spans[i].name, (unsigned long long)spans[i].begin,
                             (unsigned long long)spans[i].end);
            goto out;
        }
out:
    free(spans);
    json_decref(root);
    return rc;
}

static int map_shard(st_impl *s, const char *path, cdx_err *err)
{
    cdx_safetensors *st = &s->pub;
    cdx_file **files = realloc(st->files, (st->n_files + 1) * sizeof *files);
    if (!files)
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", path);
    st->files = files;
    cdx_file *f;
    int rc = cdx_file_map(path, &f, err);
    if (rc)
        return rc;
    st->files[st->n_files++] = f;
    return parse_one(s, f->data, f->size, path, st->n_files - 1, err);
}

/* Sorts by name and refuses a name that appears twice (in one shard or across shards). */
static int finish(st_impl *s, const char *where, cdx_err *err)
{
    cdx_safetensors *st = &s->pub;
    if (st->n_tensors)
        qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_name);
    for (uint64_t i = 1; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, st->tensors[i - 1].name)) {
            const cdx_st_tensor *a = &st->tensors[i - 1], *b = &st->tensors[i];
            return cdx_err_set(err, CDX_EFORMAT, "%s: tensor \"%.200s\" appears twice (in %s and %s)", where, a->name,
                               st->n_files ? st->files[a->shard]->path : where,
                               st->n_files ? st->files[b->shard]->path : where);
        }
    return CDX_OK;
}

static st_impl *new_impl(const char *path)
{
    st_impl *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (!(s->pub.dir = strdup(path))) {
        free(s);
        return NULL;
    }
    return s;
}

int cdx_st_open_mem(const void *data, size_t size, const char *name, cdx_safetensors **out, cdx_err *err)
{
    *out = NULL;
    if (!name)
        name = "<memory>";
    st_impl *s = new_impl(name);
    if (!s)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int rc = parse_one(s, data, size, name, 0, err);
    if (!rc)
        rc = finish(s, name, err);
    if (rc) {
        cdx_st_close(&s->pub);
        return rc;
    }
    *out = &s->pub;
    return CDX_OK;
}

/* ---- sharded checkpoints and directories ---- */

static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A shard name from an index: a relative path without ".." (it is joined to the index's folder). */
static bool shard_name_ok(const char *n)
{
    if (!n[0] || n[0] == '/')
        return false;
    for (const char *p = n; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || (len == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += len + (e ? 1 : 0);
    }
    return true;
}

static int open_index(st_impl *s, const char *index_path, cdx_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = cdx_file_read_all(index_path, ST_MAX_INDEX_BYTES, &text, &len, err);
    if (rc)
        return rc;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root)
        return cdx_err_set(err, CDX_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", index_path, je.text,
                           je.line, je.column);
    char *dir = dir_of(index_path);
    const char **names = NULL;
    size_t n_names = 0;
    json_t *wm = json_object_get(root, "weight_map");
    if (!dir) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto out;
    }
    if (!json_is_object(wm)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: weight_map is missing or not a JSON object", index_path);
        goto out;
    }
    size_t count = json_object_size(wm);
    names = malloc((count ? count : 1) * sizeof *names);
    if (!names) {
        rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", index_path);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v) || !shard_name_ok(json_string_value(v))) {
            char *txt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: weight_map[\"%.200s\"] is %.200s; expected a shard file name",
                             index_path, key, txt ? txt : "?");
            free(txt);
            goto out;
        }
        names[n_names++] = json_string_value(v);
    }
    if (n_names == 0) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: weight_map is empty", index_path);
        goto out;
    }
    qsort(names, n_names, sizeof *names, cmp_str);
    for (size_t i = 0; i < n_names; i++) {
        if (i && !strcmp(names[i], names[i - 1]))
            continue; /* each shard is mapped once */
        char *p = join(dir, names[i]);
        if (!p) {
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto out;
        }
        rc = map_shard(s, p, err);
        free(p);
        if (rc)
            goto out;
    }
    if ((rc = finish(s, index_path, err)))
        goto out;
    /* Every tensor the index lists must be in the shard it names. */
    json_object_foreach(wm, key, v) {
        const cdx_st_tensor *t = cdx_st_find(&s->pub, key);
        if (!t) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: weight_map lists tensor \"%.200s\" in %s, which does not hold it",
                             index_path, key, json_string_value(v));
            goto out;
        }
        const char *fp = s->pub.files[t->shard]->path, *base = strrchr(fp, '/');
        size_t dl = strlen(dir), fl = strlen(fp);
        const char *rel = fl > dl + 1 && !strncmp(fp, dir, dl) && fp[dl] == '/' ? fp + dl + 1 : (base ? base + 1 : fp);
        if (strcmp(rel, json_string_value(v))) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: weight_map puts tensor \"%.200s\" in %s, but it is in %s", index_path,
                             key, json_string_value(v), fp);
            goto out;
        }
    }
out:
    free(names);
    free(dir);
    json_decref(root);
    return rc;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* transformers' order: model.safetensors, else model.safetensors.index.json; we also take a
 * folder of *.safetensors without an index (all of them, sorted by name). */
static int open_dir(st_impl *s, const char *dir, cdx_err *err)
{
    static const char *const k_single = "model.safetensors", *const k_index = "model.safetensors.index.json";
    char *p = join(dir, k_single);
    if (!p)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int rc;
    if (is_file(p)) {
        rc = map_shard(s, p, err);
        free(p);
        return rc ? rc : finish(s, dir, err);
    }
    free(p);
    if (!(p = join(dir, k_index)))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (is_file(p)) {
        rc = open_index(s, p, err);
        free(p);
        return rc;
    }
    free(p);
    DIR *d = opendir(dir);
    if (!d)
        return cdx_err_set(err, CDX_EIO, "%s: cannot list the folder", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    rc = CDX_OK;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !ends_with(de->d_name, ".safetensors"))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) {
                rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
                break;
            }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (!rc && n == 0)
        rc = cdx_err_set(err, CDX_ENOTFOUND, "%s: no model.safetensors, model.safetensors.index.json or *.safetensors file",
                         dir);
    if (!rc)
        qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && !rc; i++) {
        char *fp = join(dir, names[i]);
        if (!fp)
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        else {
            rc = map_shard(s, fp, err);
            free(fp);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc ? rc : finish(s, dir, err);
}

static int open_path(const char *path, bool headers_only, bool bytes_u8, cdx_safetensors **out, cdx_err *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: no such file or folder", path);
    st_impl *s = new_impl(path);
    if (!s)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    s->headers_only = headers_only;
    s->bytes_u8 = bytes_u8;
    int rc;
    if (S_ISDIR(sb.st_mode))
        rc = open_dir(s, path, err);
    else if (ends_with(path, ".json"))
        rc = open_index(s, path, err);
    else {
        rc = map_shard(s, path, err);
        if (!rc)
            rc = finish(s, path, err);
    }
    if (rc) {
        cdx_st_close(&s->pub);
        return rc;
    }
    *out = &s->pub;
    return CDX_OK;
}

int cdx_st_open(const char *path, cdx_safetensors **out, cdx_err *err) { return open_path(path, false, false, out, err); }

int cdx_st_open_u8(const char *path, cdx_safetensors **out, cdx_err *err) { return open_path(path, false, true, out, err); }

int cdx_st_open_headers(const char *path, cdx_safetensors **out, cdx_err *err) { return open_path(path, true, false, out, err); }
