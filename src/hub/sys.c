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
        if (!cdx_parse_bytes(v, out))
            return cdx_err_set(err, CDX_EINVAL, "CALDRIX_MEM_AVAILABLE is \"%.60s\"; expected a number of bytes, "
                               "optionally with a K, M or G suffix (512K, 2G, 1.5GiB), or unset it", v);
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
