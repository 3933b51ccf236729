/* Kernel micro-benchmark (not a test): decode matvec GB/s per weight type against the machine's
 * measured read bandwidth, and prefill (n = 128) GFLOP/s. Run with bench/run-kernels.sh.
 *
 *   build/bench-kernels [-t THREADS] [--isa amx|avx512|avx2|scalar|avx512-gemm|amx-gemm] [--rows R] [--cols C] [--secs S]
 *                       [--ws MiB] [-p PREFILL_TOKENS] [--cpu-time] [--types f32,bf16,...]
 *                       [--no-pack] [--act-bf16] [--act-half]
 *
 * The weights of each type are copied until the set is larger than any cache (--ws MiB, default
 * 1024), and the matvec walks the copies in turn, so every byte comes from DRAM, as in decode.
 * Types the kernel set repacks at load (cdx_matmul_pack) run from that layout, as in a model.
 * --cpu-time (with -t 1) times each call by the thread's CPU time instead of the wall clock: on a
 * machine other processes share, a preempted call then still counts only its own time (memory
 * stalls included), so kernel variants can be compared there; read the median column, the
 * CPU-time clock of a VM sometimes misses part of a call. --types limits the run to the named
 * weight types (default: all). --no-pack runs every type from its file layout (what a model
 * read in place would run). */
#include "caldrix.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>

static clockid_t g_clock = CLOCK_MONOTONIC;

static double now(void)
{
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- streaming read bandwidth ---- */

typedef struct {
    const uint8_t *buf;
    size_t bytes;
    double sink[64];
} bw_job;

__attribute__((target("avx2"))) static void bw_read(void *arg, int ith, int nth)
{
    bw_job *j = arg;
    size_t per = j->bytes / (size_t)nth / 256 * 256;
    const __m256i *p = (const __m256i *)(j->buf + per * (size_t)ith), *e = p + per / 32;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (; p < e; p += 8) {
        a = _mm256_xor_si256(a, _mm256_load_si256(p));
        b = _mm256_xor_si256(b, _mm256_load_si256(p + 1));
        c = _mm256_xor_si256(c, _mm256_load_si256(p + 2));
        d = _mm256_xor_si256(d, _mm256_load_si256(p + 3));
        a = _mm256_xor_si256(a, _mm256_load_si256(p + 4));
        b = _mm256_xor_si256(b, _mm256_load_si256(p + 5));
        c = _mm256_xor_si256(c, _mm256_load_si256(p + 6));
        d = _mm256_xor_si256(d, _mm256_load_si256(p + 7));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    j->sink[ith % 64] += (double)_mm256_extract_epi64(a, 0);
}

static double measure_bw(cdx_pool *pool, size_t bytes, double secs)
{
    uint8_t *buf = aligned_alloc(64, bytes);
    memset(buf, 1, bytes);
    /* 16 MiB per call, walking the whole buffer: the same call size as a decode matvec, and the
     * best call, as for the kernels (a shared machine interrupts long passes) */
    const size_t chunk = bytes < (16u << 20) ? bytes : 16u << 20;
    bw_job j = { .buf = buf, .bytes = chunk };
    double best = 0;
    double t_end = now() + secs;
    for (size_t off = 0; now() < t_end; off = (off + chunk) % (bytes - bytes % chunk)) {
        j.buf = buf + off;
        double t0 = now();
        cdx_pool_run(pool, bw_read, &j);
        double gbs = (double)chunk / (now() - t0) / 1e9;
        if (gbs > best)
            best = gbs;
    }
    free(buf);
    return best;
}

/* ---- matvec ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rng = 88172645463325252ull;
static float gauss(void)
{
    float s = 0;
    for (int i = 0; i < 12; i++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        s += (float)((rng >> 40) * (1.0 / 16777216.0));
    }
    return s - 6;
}

int main(int argc, char **argv)
{
    int threads = 2;
    const char *isa = NULL;
    int64_t rows = 2048, cols = 8192, n_pre = 128;
    double secs = 1.0;
    size_t ws_mib = 1024;
    const char *only = NULL;
    bool no_pack = false, act_bf16 = false, act_half = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa = argv[++i];
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) cols = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--secs") && i + 1 < argc) secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ws") && i + 1 < argc) ws_mib = (size_t)atoll(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) n_pre = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cpu-time")) g_clock = CLOCK_THREAD_CPUTIME_ID;
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--no-pack")) no_pack = true;
        else if (!strcmp(argv[i], "--act-bf16")) act_bf16 = true;
        else if (!strcmp(argv[i], "--act-half")) act_half = true;
        else {
            fprintf(stderr, "usage: %s [-t THREADS] [--isa amx|avx512|avx2|scalar|avx512-gemm|amx-gemm] [--rows R] [--cols C] [--secs S] "
                            "[--ws MiB] [-p PREFILL_TOKENS] [--cpu-time] [--types f32,bf16,...] [--no-pack] [--act-bf16] [--act-half]\n", argv[0]);
            return 2;
        }
    }
    if (g_clock != CLOCK_MONOTONIC && threads != 1) {
        fprintf(stderr, "--cpu-time measures one thread's time: use it with -t 1\n");
        return 2;
    }
    if (rows <= 0 || cols <= 0 || n_pre <= 0 || secs <= 0 || threads <= 0) {
        fprintf(stderr, "rows, cols, -p, --secs and -t must be positive\n");
        return 2;
    }
    const cdx_kernels *k = isa ? cdx_kernels_by_isa(isa) : cdx_kernels_best();
    if (!k) {
        fprintf(stderr, "isa %s is not available on this CPU\n", isa);
        return 1;
    }
    cdx_err err = {0};
    cdx_pool *pool;
    if (cdx_pool_create(threads, &pool, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const size_t ws_bytes = ws_mib << 20;
    printf("cpu: %.40s; kernels: %s; threads: %d; matrix %lld x %lld; working set %zu MiB; clock: %s\n",
           cdx_cpu_brand(), cdx_kernels_isa(k), threads, (long long)rows, (long long)cols, ws_mib,
           g_clock == CLOCK_MONOTONIC ? "wall" : "thread CPU time");
    double bw = measure_bw(pool, ws_bytes, secs);
    printf("read bandwidth (%d threads, best 16 MiB call over a %zu MiB buffer): %.1f GB/s\n\n", threads, ws_mib, bw);
    printf("decode: matvec (n = 1) GB/s of weights, best call and median; %% of the read bandwidth (best);\n"
           "prefill: n = %lld activation rows in one call, GFLOP/s best and median, ms of the best call\n\n",
           (long long)n_pre);
    printf("%-8s %8s %9s %6s %6s %9s %9s %8s %8s\n", "type", "MiB/mat", "dec best", "med", "% bw", "us/call",
           "pre best", "med", "ms");

    static const uint32_t types[] = { CDX_TYPE_F32, CDX_TYPE_F16, CDX_TYPE_BF16, CDX_TYPE_Q8_0, CDX_TYPE_Q4_0,
                                      CDX_TYPE_IQ4_NL, CDX_TYPE_Q4_K, CDX_TYPE_Q5_K, CDX_TYPE_Q6_K, CDX_TYPE_IQ4_XS };
    float *f = malloc(sizeof(float) * cols * (size_t)(n_pre > 1 ? n_pre : 1));
    float *y = malloc(sizeof(float) * rows * (size_t)(n_pre > 1 ? n_pre : 1));
    for (int64_t i = 0; i < cols * n_pre; i++)
        f[i] = gauss();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint32_t type = types[ti];
        const cdx_type_traits *t = cdx_type_get(type);
        size_t rb;
        if (cdx_type_row_bytes(type, (uint64_t)cols, &rb, &err) < 0 || !t->from_f32)
            continue;
        if (only) { /* a comma-separated list of type names, case-insensitive */
            bool want = false;
            for (const char *p = only; *p && !want;) {
                size_t l = strcspn(p, ",");
                want = l == strlen(t->name) && !strncasecmp(p, t->name, l);
                p += l + (p[l] == ',');
            }
            if (!want)
                continue;
        }
        size_t mat = rb * (size_t)rows;
        size_t copies = ws_bytes / mat + 1;
        uint8_t *w = aligned_alloc(64, (mat * copies + 63) / 64 * 64);
        for (int64_t r = 0; r < rows; r++)
            t->from_f32(f + (r % n_pre) * cols, w + (size_t)r * rb, cols); /* any values will do */
        for (size_t c = 1; c < copies; c++)
            memcpy(w + c * mat, w, mat);
        madvise(w, (mat * copies + 63) / 64 * 64, MADV_HUGEPAGE); /* as the model's weights */
        /* --act-bf16: bf16 activations, as --dtype bf16 models have them (vdpbf16ps where the CPU has it) */
        /* --act-half: F16/BF16 weights get activations rounded to their type, as a GGUF model's do
         * (what amx-gemm's BF16 tiles take) */
        cdx_mat m = { .type = type, .data = w, .rows = rows, .cols = cols, .row_bytes = rb,
                      .act_bf16 = act_bf16 && type == CDX_TYPE_BF16,
                      .act_half = act_half && !act_bf16 && (type == CDX_TYPE_F16 || type == CDX_TYPE_BF16) };
        /* the kernel set's load-time layout, where it has one, for every copy */
        const size_t pb = no_pack ? 0 : cdx_matmul_pack_bytes(k, &m);
        uint8_t *pk = pb ? aligned_alloc(64, (pb * copies + 63) / 64 * 64) : NULL;
        if (pk) {
            madvise(pk, (pb * copies + 63) / 64 * 64, MADV_HUGEPAGE);
            for (size_t c = 0; c < copies; c++)
                cdx_matmul_pack(k, pool, &m, pk + c * pb);
            m.packed_for = k;
        }
        void *ws = malloc(cdx_matmul_ws_bytes(&m, n_pre, threads));
        /* decode: n = 1, a different copy each call. On a shared machine the wall time of a call
         * includes other processes' time slices, so report the best call and the median. */
        double best = 1e30, bestp = 1e30, *lat = malloc(sizeof(double) * 200000);
        size_t calls = 0;
        double t_end = now() + secs;
        while (calls < 200000 && now() < t_end) {
            m.data = w + (calls % copies) * mat;
            m.packed = pk ? pk + (calls % copies) * pb : NULL;
            double a = now();
            cdx_matmul(k, pool, &m, f, 1, y, ws);
            lat[calls++] = now() - a;
            if (lat[calls - 1] < best)
                best = lat[calls - 1];
        }
        qsort(lat, calls, sizeof(double), cmp_double);
        double med = lat[calls / 2];
        /* prefill: n_pre tokens in one call */
        size_t pcalls = 0;
        t_end = now() + secs;
        while (pcalls < 200000 && now() < t_end) {
            m.data = w + (pcalls % copies) * mat;
            m.packed = pk ? pk + (pcalls % copies) * pb : NULL;
            double a = now();
            cdx_matmul(k, pool, &m, f, n_pre, y, ws);
            lat[pcalls++] = now() - a;
            if (lat[pcalls - 1] < bestp)
                bestp = lat[pcalls - 1];
        }
        qsort(lat, pcalls, sizeof(double), cmp_double);
        double medp = lat[pcalls / 2];
        free(lat);
        const double flop = 2.0 * rows * cols * n_pre;
        printf("%-8s %8.2f %9.1f %6.1f %5.0f%% %9.1f %9.1f %8.1f %8.1f\n", t->name, mat / 1048576.0, mat / best / 1e9,
               mat / med / 1e9, 100 * mat / best / 1e9 / bw, 1e6 * best, flop / bestp / 1e9, flop / medp / 1e9,
               n_pre / bestp * 0 + 1e3 * bestp);
        fflush(stdout);
        free(ws);
        free(w);
        free(pk);
    }
    free(f);
    free(y);
    cdx_pool_destroy(pool);
    return 0;
}
