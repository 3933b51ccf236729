/* Growable arrays and text buffers: the one doubling rule the writers, the CLI's lists, the
 * engine's and the server's text share. */
#include "caldrix/base.h"

#include <stdint.h>
#include <stdlib.h>

void *cdx_array_grow(void *items, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return items;
    size_t new_cap = *cap ? *cap * 2 : 64, bytes;
    if (new_cap < *cap || !cdx_mul_size(new_cap, elem, &bytes))
        return NULL;
    void *p = realloc(items, bytes);
    if (p)
        *cap = new_cap;
    return p;
}

bool cdx_bytes_reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t new_cap = *cap ? *cap : 256;
    while (new_cap < need) {
        if (new_cap > SIZE_MAX / 2)
            return false;
        new_cap *= 2;
    }
    char *p = realloc(*buf, new_cap);
    if (!p)
        return false;
    *buf = p;
    *cap = new_cap;
    return true;
}
