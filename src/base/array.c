/* Growable arrays: the one doubling rule the writers and the CLI's lists share. */
#include "caldrix/base.h"

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
