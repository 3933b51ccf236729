/* CPU feature detection: cpuid for what the core implements, xgetbv for what the OS enabled.
 * An AVX-512 core under an OS that does not save zmm/k registers must not run AVX-512 code,
 * so each ISA level needs both (Intel SDM vol. 1, 13.3 "Enabling the XSAVE feature set"). */
#include "caldrix/kernel.h"

#include <pthread.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

/* Asks Linux for the AMX tile data state (ARCH_REQ_XCOMP_PERM 0x1023, XFEATURE_XTILEDATA 18): a
 * one-time grant for the whole process, which threads started before or after it share. */
static bool amx_permitted(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return false;
#endif
}

static cdx_cpu_features g_feat;
static char g_brand[49];
static char g_vendor[13];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return;
    memcpy(g_vendor, &b, 4);
    memcpy(g_vendor + 4, &d, 4);
    memcpy(g_vendor + 8, &c, 4);
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    bool osxsave = c & bit_OSXSAVE;
    g_feat.sse42 = c & bit_SSE4_2;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6;        /* XMM and YMM state */
    bool os_avx512 = (xcr0 & 0xE6) == 0xE6;   /* plus opmask, ZMM_Hi256, Hi16_ZMM */
    g_feat.avx = os_avx && (c & bit_AVX);
    g_feat.fma = g_feat.avx && (c & bit_FMA);
    g_feat.f16c = g_feat.avx && (c & bit_F16C);
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        g_feat.avx2 = g_feat.avx && (b & bit_AVX2);
        g_feat.bmi2 = b & bit_BMI2;
        g_feat.avx512f = os_avx512 && (b & bit_AVX512F);
        g_feat.avx512bw = g_feat.avx512f && (b & bit_AVX512BW);
        g_feat.avx512vl = g_feat.avx512f && (b & bit_AVX512VL);
        g_feat.avx512dq = g_feat.avx512f && (b & bit_AVX512DQ);
        g_feat.avx512vbmi = g_feat.avx512f && (c & bit_AVX512VBMI);
        g_feat.avx512vnni = g_feat.avx512f && (c & bit_AVX512VNNI);
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        g_feat.avx512bf16 = g_feat.avx512f && (a1 & (1u << 5));
        g_feat.avx_vnni = g_feat.avx && (a1 & (1u << 4));
        /* AMX: cpuid 7.0 EDX bits 22 (BF16), 24 (TILE), 25 (INT8); XCR0 bits 17-18 (XTILECFG,
         * XTILEDATA); on Linux the tile data state is off until the process asks for it (5.16+;
         * Documentation/arch/x86/xstate.rst) */
        bool os_amx = (xcr0 & 0x60000) == 0x60000 && (d & (1u << 24)) && amx_permitted();
        g_feat.amx_tile = os_amx;
        g_feat.amx_int8 = os_amx && (d & (1u << 25));
        g_feat.amx_bf16 = os_amx && (d & (1u << 22));
    }
    g_feat.x86_64_v3 = g_feat.avx2 && g_feat.fma && g_feat.f16c && g_feat.bmi2;
    g_feat.x86_64_v4 = g_feat.x86_64_v3 && g_feat.avx512f && g_feat.avx512bw && g_feat.avx512vl && g_feat.avx512dq;
    if (__get_cpuid_max(0x80000000, NULL) >= 0x80000004) {
        unsigned *w = (unsigned *)g_brand;
        for (unsigned i = 0; i < 3; i++)
            __cpuid(0x80000002 + i, w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
        g_brand[48] = 0;
        char *s = g_brand; /* some CPUs pad the brand string with leading spaces */
        while (*s == ' ')
            s++;
        memmove(g_brand, s, strlen(s) + 1);
        for (size_t n = strlen(g_brand); n > 0 && g_brand[n - 1] == ' '; n--) /* and trailing ones */
            g_brand[n - 1] = 0;
    }
#endif
}

const cdx_cpu_features *cdx_cpu_features_get(void)
{
    pthread_once(&g_once, detect);
    return &g_feat;
}

const char *cdx_cpu_brand(void)
{
    pthread_once(&g_once, detect);
    return g_brand;
}

const char *cdx_cpu_vendor(void)
{
    pthread_once(&g_once, detect);
    return g_vendor;
}
