/* The machine, for caldrix doctor and memory admission: CPU features (cpuid), memory, disk. */
#include "caldrix/hub.h"

#include <cpuid.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

/* ---- CPU: cpuid leaves 1 and 7, and XGETBV for what the OS saves (Intel SDM vol. 2A, CPUID) ---- */

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

void cdx_hub_cpu_detect(cdx_hub_cpu *c)
{
    memset(c, 0, sizeof *c);
    unsigned a, b, cx, d;
    if (!__get_cpuid(0, &a, &b, &cx, &d))
        return;
    unsigned max_leaf = a;
    memcpy(c->vendor, &b, 4);
    memcpy(c->vendor + 4, &d, 4);
    memcpy(c->vendor + 8, &cx, 4);
    __get_cpuid(1, &a, &b, &cx, &d);
    bool osxsave = cx & (1u << 27);
    c->fma = cx & (1u << 12);
    c->f16c = cx & (1u << 29);
    c->avx = cx & (1u << 28);
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm = (xcr0 & 0x6) == 0x6;          /* SSE and AVX state */
    bool zmm = ymm && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, cx, d);
        c->avx2 = b & (1u << 5);
        c->bmi2 = b & (1u << 8);
        c->avx512f = b & (1u << 16);
        c->avx512dq = b & (1u << 17);
        c->avx512bw = b & (1u << 30);
        c->avx512vl = b & (1u << 31);
        c->avx512vbmi = cx & (1u << 1);
        c->avx512vnni = cx & (1u << 11);
        __cpuid_count(7, 1, a, b, cx, d);
        c->avx512bf16 = a & (1u << 5);
    }
    if (!ymm)
        c->avx = c->avx2 = c->fma = c->f16c = false;
    if (!zmm)
        c->avx512f = c->avx512dq = c->avx512bw = c->avx512vl = c->avx512vbmi = c->avx512vnni = c->avx512bf16 = false;
    c->x86_64_v3 = c->avx2 && c->fma && c->f16c && c->bmi2;
    c->x86_64_v4 = c->x86_64_v3 && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    __get_cpuid(0x80000000, &a, &b, &cx, &d);
    if (a >= 0x80000004) {
        unsigned *w = (unsigned *)(void *)c->brand;
        for (unsigned leaf = 0; leaf < 3; leaf++)
            __get_cpuid(0x80000002 + leaf, &w[4 * leaf], &w[4 * leaf + 1], &w[4 * leaf + 2], &w[4 * leaf + 3]);
        c->brand[48] = 0;
        char *s = c->brand;
        while (*s == ' ')
            s++;
        memmove(c->brand, s, strlen(s) + 1);
        for (size_t n = strlen(c->brand); n && c->brand[n - 1] == ' ';)
            c->brand[--n] = 0;
    }
}

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
