/* Byte counts as people write them: --weight-budget 8G, CALDRIX_MEM_AVAILABLE=512M. */
#include "caldrix/base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cdx_fmt_bytes(uint64_t n, char *buf, size_t cap)
{
    static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB" };
    if (n < 1024) {
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
        return;
    }
    double x = (double)n / 1024.0;
    int u = 0;
    while (x >= 1024.0 && u < 3)
        x /= 1024.0, u++;
    snprintf(buf, cap, u >= 2 ? "%.2f %s" : "%.1f %s", x, unit[u]);
}

bool cdx_parse_bytes(const char *v, uint64_t *out)
{
    /* digits, an optional fraction, then K, M, G or T (powers of 1024), an optional i and B */
    if (!v || !*v)
        return false;
    char *end = NULL;
    errno = 0;
    double x = (*v >= '0' && *v <= '9') ? strtod(v, &end) : -1;
    if (end && end != v + strspn(v, "0123456789.")) /* no hex, exponents or signs */
        x = -1;
    double mul = 1;
    if (end && (*end == 'K' || *end == 'k')) mul = 1024.0, end++;
    else if (end && (*end == 'M' || *end == 'm')) mul = 1024.0 * 1024, end++;
    else if (end && (*end == 'G' || *end == 'g')) mul = 1024.0 * 1024 * 1024, end++;
    else if (end && (*end == 'T' || *end == 't')) mul = 1024.0 * 1024 * 1024 * 1024, end++;
    if (end && mul > 1 && *end == 'i') end++;
    if (end && (*end == 'B' || *end == 'b')) end++;
    if (errno || !end || *end || !(x >= 0) || !(x * mul < 1.8e19))
        return false;
    *out = (uint64_t)(x * mul);
    return true;
}
