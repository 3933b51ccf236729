/* Whole files as bytes, for tests that patch a fixture's bytes (a header shape, a GGUF value). */
#ifndef CDX_TEST_BLOB_H
#define CDX_TEST_BLOB_H

#include "caldrix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n;
} blob;

/* The file's bytes (p NULL when it cannot be read); free(b.p). */
static inline blob slurp(const char *path)
{
    blob b = { NULL, 0 };
    cdx_err e = { 0 };
    if (cdx_file_read_all(path, (size_t)64 << 20, &b.p, &b.n, &e))
        b.p = NULL;
    return b;
}

static inline bool spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f)
        ok &= fclose(f) == 0;
    return ok;
}

/* The first place `s` occurs in b, or NULL. */
static inline char *find(blob b, const char *s)
{
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= b.n; i++)
        if (!memcmp(b.p + i, s, k))
            return b.p + i;
    return NULL;
}

#endif
