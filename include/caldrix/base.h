/* caldrix base layer: errors as values, checked sizes, mapped files.
 *
 *   cdx_err err = {0};
 *   cdx_file *f = NULL;
 *   if (cdx_file_map("model.gguf", &f, &err) < 0) { fprintf(stderr, "%s\n", err.msg); return 1; }
 *   ... f->data, f->size ...
 *   cdx_file_unmap(f);
 */
#ifndef CALDRIX_BASE_H
#define CALDRIX_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CDX_API __attribute__((visibility("default")))
#define CDX_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* One table for every error code: the enum, cdx_err_name and docs read it.
 * Codes only ever grow at the end. */
#define CDX_ERRORS(X)                                          \
    X(CDX_ENOMEM,       -1, "out of memory")                   \
    X(CDX_EIO,          -2, "i/o error")                       \
    X(CDX_EFORMAT,      -3, "malformed file")                  \
    X(CDX_EUNSUPPORTED, -4, "unsupported by caldrix")          \
    X(CDX_EINVAL,       -5, "invalid argument")                \
    X(CDX_ENOTFOUND,    -6, "not found")                       \
    X(CDX_ENET,         -7, "network error")                   \
    X(CDX_EAUTH,        -8, "authentication required")         \
    X(CDX_ERANGE,       -9, "value out of range")              \
    X(CDX_ETEMPLATE,   -10, "template error")                  \
    X(CDX_EOFFLINE,    -11, "offline and not in the cache")    \
    X(CDX_EDIGEST,     -12, "digest mismatch")                 \
    X(CDX_ERESOURCE_LIMIT, -13, "request can never fit")       \
    X(CDX_ERESOURCE_BUSY,  -14, "busy: too many requests waiting")

enum {
    CDX_OK = 0,
#define CDX_X_ENUM(name, val, text) name = val,
    CDX_ERRORS(CDX_X_ENUM)
#undef CDX_X_ENUM
};

/* The message names the file, the field and the value. */
typedef struct cdx_err {
    int code;
    char msg[1024];
} cdx_err;

/* Fills err (NULL: ignored) and returns code, so callers can `return cdx_err_set(...)`. */
CDX_API int cdx_err_set(cdx_err *err, int code, const char *fmt, ...) CDX_PRINTF(3, 4);
/* Prepends "prefix: " to an error already set (e.g. a file name). Returns err->code. */
CDX_API int cdx_err_prefix(cdx_err *err, const char *fmt, ...) CDX_PRINTF(2, 3);
/* Short text for a code ("malformed file"); "unknown error" for codes not in the table. */
CDX_API const char *cdx_err_name(int code);

/* Overflow-checked size arithmetic: true when the result fits. */
static inline bool cdx_mul_size(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool cdx_add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

/* Room for one more item in a growable array (items: *cap items of elem bytes, n in use): returns
 * items itself while n < *cap, else the array reallocated to twice the capacity (64 at first) with
 * *cap updated; NULL when out of memory, items and *cap then unchanged. */
CDX_API void *cdx_array_grow(void *items, size_t *cap, size_t n, size_t elem);
/* Room for need bytes in a growable text buffer: *buf reallocated to a doubling of *cap (256 at
 * first) that holds need, *cap updated. False when out of memory, *buf and *cap then unchanged. */
CDX_API bool cdx_bytes_reserve(char **buf, size_t *cap, size_t need);

/* A read-only file mapped into memory. A zero-length file maps to data == NULL, size 0. */
typedef struct cdx_file {
    const uint8_t *data;
    size_t size;
    char *path;        /* owned copy of the path it was opened with */
} cdx_file;

/* On success *out owns the mapping; free with cdx_file_unmap. The mapping asks for 2 MiB pages
 * (MADV_HUGEPAGE): where the file system keeps large folios, pages read through it arrive as 2 MiB
 * folios mapped by one entry each, which a streaming reader needs as much as anonymous memory. */
CDX_API int cdx_file_map(const char *path, cdx_file **out, cdx_err *err);
CDX_API void cdx_file_unmap(cdx_file *f); /* NULL: no-op */

/* Of the resident pages of the mapping that holds p, the share (0 to 1) the kernel maps with
 * 2 MiB entries (FilePmdMapped plus AnonHugePages of /proc/self/smaps); -1 when it cannot tell (no
 * /proc, p not mapped, nothing resident). *lo and *hi (optional) get that mapping's range (both 0
 * when p is in none), so a caller asking about many addresses reads smaps once per mapping. */
CDX_API double cdx_mem_huge_share(const void *p, uintptr_t *lo, uintptr_t *hi);

/* Reads a whole (small) file into a NUL-terminated heap buffer, refusing files over max_bytes. */
CDX_API int cdx_file_read_all(const char *path, size_t max_bytes, char **out, size_t *out_len, cdx_err *err);

/* A byte count: digits with an optional fraction and a K, M, G or T suffix (powers of 1024; an
 * optional "i" and "B" after it): "8G", "512M", "1.5GiB", "4096". False on anything else. */
CDX_API bool cdx_parse_bytes(const char *s, uint64_t *out);
/* A byte count for people, in the units cdx_parse_bytes reads (IEC, powers of 1024): "512 B",
 * "1.5 KiB", "12.3 MiB", "1.25 GiB", "2.00 TiB". The one formatter every message uses. */
CDX_API void cdx_fmt_bytes(uint64_t n, char *buf, size_t cap);

/* Monotonic clock in milliseconds. */
CDX_API double cdx_time_ms(void);

/* Checks that s[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
 * Returns the byte offset of the first bad byte, or len when all is well. */
CDX_API size_t cdx_utf8_check(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
