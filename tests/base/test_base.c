/* base layer: errors, mapped files, UTF-8 validation. */
#include "caldrix.h"
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

static void err_set_formats_and_returns_code(void)
{
    cdx_err e = {0};
    int rc = cdx_err_set(&e, CDX_EFORMAT, "%s: field %s is %d", "a.gguf", "n_dims", 9);
    CHECK(rc == CDX_EFORMAT);
    CHECK(e.code == CDX_EFORMAT);
    CHECK(strcmp(e.msg, "a.gguf: field n_dims is 9") == 0);
    cdx_err_prefix(&e, "loading %s", "x");
    CHECK(strcmp(e.msg, "loading x: a.gguf: field n_dims is 9") == 0);
    CHECK(strcmp(cdx_err_name(CDX_ENOMEM), "out of memory") == 0);
    CHECK(strcmp(cdx_err_name(12345), "unknown error") == 0);
    CHECK(cdx_err_set(NULL, CDX_EIO, "ignored") == CDX_EIO);
}

static void size_helpers_detect_overflow(void)
{
    size_t out;
    CHECK(cdx_mul_size(1u << 20, 1u << 10, &out) && out == (size_t)1 << 30);
    CHECK(!cdx_mul_size(SIZE_MAX / 2 + 1, 2, &out));
    CHECK(!cdx_add_size(SIZE_MAX, 1, &out));
}

static void file_map_reads_bytes_and_names_missing_file(void)
{
    char path[] = "/tmp/cdx_test_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "hello", 5) == 5);
    close(fd);
    cdx_err e = {0};
    cdx_file *f = NULL;
    CHECK(cdx_file_map(path, &f, &e) == CDX_OK);
    REQUIRE(f);
    CHECK(f->size == 5 && memcmp(f->data, "hello", 5) == 0);
    /* a one-page file: resident (just read), and on a 4 KiB entry however the kernel is set up */
    uintptr_t lo = 0, hi = 0;
    CHECK(cdx_mem_huge_share(f->data + 2, &lo, &hi) == 0.0);
    CHECK(lo == (uintptr_t)f->data && hi - lo == (uintptr_t)sysconf(_SC_PAGESIZE));
    cdx_file_unmap(f);
    CHECK(cdx_mem_huge_share((const void *)(uintptr_t)4096, NULL, NULL) == -1); /* nothing mapped there */
    char *buf;
    size_t n;
    CHECK(cdx_file_read_all(path, 100, &buf, &n, &e) == CDX_OK && n == 5 && !strcmp(buf, "hello"));
    free(buf);
    CHECK(cdx_file_read_all(path, 4, &buf, &n, &e) == CDX_ERANGE);
    unlink(path);
    CHECK(cdx_file_map(path, &f, &e) == CDX_ENOTFOUND);
    CHECK(f == NULL);
    CHECK(strstr(e.msg, path) != NULL);
    cdx_file_unmap(NULL);
}

static void utf8_check_rejects_bad_sequences(void)
{
    CHECK(cdx_utf8_check("abc", 3) == 3);
    CHECK(cdx_utf8_check("h\xc3\xa9llo", 6) == 6);
    CHECK(cdx_utf8_check("\xf0\x9f\x98\x80", 4) == 4);
    CHECK(cdx_utf8_check("ab\xc3", 3) == 2);           /* truncated */
    CHECK(cdx_utf8_check("\xc0\xaf", 2) == 0);         /* overlong */
    CHECK(cdx_utf8_check("\xed\xa0\x80", 3) == 0);     /* surrogate */
    CHECK(cdx_utf8_check("\xf4\x90\x80\x80", 4) == 0); /* > U+10FFFF */
    CHECK(cdx_utf8_check("a\xff", 2) == 1);
}

static void array_grow_doubles_and_refuses_overflow(void)
{
    size_t cap = 0, n = 0;
    int *a = NULL;
    for (int i = 0; i < 200; i++) {
        int *g = cdx_array_grow(a, &cap, n, sizeof *a);
        REQUIRE(g);
        a = g;
        a[n++] = i;
    }
    CHECK(cap == 256); /* 64, 128, 256 */
    int ok = 1;
    for (int i = 0; i < 200; i++)
        ok &= a[i] == i;
    CHECK(ok);
    CHECK(cdx_array_grow(a, &cap, 10, sizeof *a) == a); /* room left: the same array */
    size_t big = (size_t)1 << 62;
    CHECK(cdx_array_grow(a, &big, big, 16) == NULL && big == (size_t)1 << 62); /* size overflow */
    free(a);
}

static void bytes_reserve_doubles_and_keeps_the_text(void)
{
    char *b = NULL;
    size_t cap = 0;
    REQUIRE(cdx_bytes_reserve(&b, &cap, 5) && b && cap == 256);
    memcpy(b, "abcd", 5);
    char *same = b;
    CHECK(cdx_bytes_reserve(&b, &cap, 256) && b == same && cap == 256); /* room enough: unchanged */
    REQUIRE(cdx_bytes_reserve(&b, &cap, 1000) && cap == 1024 && !strcmp(b, "abcd"));
    size_t huge = cap;
    CHECK(!cdx_bytes_reserve(&b, &huge, SIZE_MAX) && huge == 1024 && !strcmp(b, "abcd")); /* refused, kept */
    free(b);
}

int main(void)
{
    RUN("err_set formats the message and returns the code", err_set_formats_and_returns_code);
    RUN("size helpers detect overflow", size_helpers_detect_overflow);
    RUN("array_grow doubles and refuses an overflowing size", array_grow_doubles_and_refuses_overflow);
    RUN("bytes_reserve doubles and keeps the text", bytes_reserve_doubles_and_keeps_the_text);
    RUN("file_map reads bytes, says how it is mapped and names a missing file", file_map_reads_bytes_and_names_missing_file);
    RUN("utf8_check rejects bad sequences", utf8_check_rejects_bad_sequences);
    return t_done("base");
}
