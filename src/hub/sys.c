/* The machine, for caldrix doctor and memory admission: memory and disk (the CPU: kernel/cpu_features.c). */
#include "caldrix/hub.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

/* ---- memory ---- */

void cdx_hub_meminfo(uint64_t *total, uint64_t *available)
{
    *total = *available = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            *total = (uint64_t)kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            *available = (uint64_t)kb * 1024;
    }
    fclose(f);
}

int cdx_hub_mem_available(uint64_t *out, cdx_err *err)
{
    *out = 0;
    const char *v = getenv("CALDRIX_MEM_AVAILABLE");
    if (v && *v) {
        /* digits, an optional fraction, then K, M or G (powers of 1024), an optional i and B */
        char *end = NULL;
        errno = 0;
        double x = (*v >= '0' && *v <= '9') ? strtod(v, &end) : -1;
        if (end && end != v + strspn(v, "0123456789.")) /* no hex, exponents or signs */
            x = -1;
        double mul = 1;
        if (end && (*end == 'K' || *end == 'k')) mul = 1024.0, end++;
        else if (end && (*end == 'M' || *end == 'm')) mul = 1024.0 * 1024, end++;
        else if (end && (*end == 'G' || *end == 'g')) mul = 1024.0 * 1024 * 1024, end++;
        if (end && mul > 1 && *end == 'i') end++;
        if (end && (*end == 'B' || *end == 'b')) end++;
        if (errno || !end || *end || !(x >= 0) || !(x * mul < 1.8e19))
            return cdx_err_set(err, CDX_EINVAL, "CALDRIX_MEM_AVAILABLE is \"%.60s\"; expected a number of bytes, "
                               "optionally with a K, M or G suffix (512K, 2G, 1.5GiB), or unset it", v);
        *out = (uint64_t)(x * mul);
        return 0;
    }
    uint64_t total;
    cdx_hub_meminfo(&total, out);
    return 0;
}

/* ---- disk ---- */

int cdx_hub_disk_free(const char *path, uint64_t *free_bytes, cdx_err *err)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (;;) {
        struct statvfs st;
        if (statvfs(buf, &st) == 0) {
            *free_bytes = (uint64_t)st.f_bavail * st.f_frsize;
            return 0;
        }
        char *slash = strrchr(buf, '/');
        if (!slash)
            return cdx_err_set(err, CDX_EIO, "%s: no existing folder to measure free space", path);
        if (slash == buf) {
            if (buf[1] == 0)
                return cdx_err_set(err, CDX_EIO, "%s: statvfs failed: %s", path, strerror(errno));
            buf[1] = 0;
        } else {
            *slash = 0;
        }
    }
}
