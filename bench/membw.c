/* Streaming-read memory bandwidth: what a decode step can at best draw from memory.
 *
 *   bench/out/membw [-t THREADS] [-m MIB] [-r PASSES]
 *
 * Each thread sums its own slice of a buffer far larger than the caches (default 1 GiB), reading
 * every byte once per pass, as a matrix-vector product reads its weights. Prints one JSON object
 * with the best pass over all threads: {"threads":2,"bytes":...,"read_gb_s":...}. GB are 1e9 bytes.
 * Compiled by bench/setup with the host's vector width (-march=native); not part of `make`.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const uint64_t *p;
    size_t n;             /* uint64 words */
    uint64_t sum;
    pthread_barrier_t *go;
} slice;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *reader(void *arg)
{
    slice *s = arg;
    pthread_barrier_wait(s->go);
    /* eight independent accumulators: the compiler turns this into wide vector loads */
    uint64_t a[8] = { 0 };
    for (size_t i = 0; i + 8 <= s->n; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] += s->p[i + k];
    s->sum = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    pthread_barrier_wait(s->go);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 2, passes = 5;
    size_t mib = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-m"))
            mib = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-r"))
            passes = atoi(argv[i + 1]);
    }
    if (threads < 1 || threads > 256 || mib < 64 || mib > 65536 || passes < 1) {
        fprintf(stderr, "usage: membw [-t THREADS 1..256] [-m MIB 64..65536] [-r PASSES]\n");
        return 2;
    }
    size_t bytes = mib << 20, words = bytes / 8;
    uint64_t *buf = aligned_alloc(4096, bytes);
    if (!buf) {
        fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < words; i++) /* touch every page: no first-touch faults in the timing */
        buf[i] = i * 0x9e3779b97f4a7c15ull;
    double best = 0;
    uint64_t check = 0;
    for (int r = 0; r < passes; r++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, (unsigned)threads + 1);
        slice *sl = calloc((size_t)threads, sizeof *sl);
        pthread_t *th = calloc((size_t)threads, sizeof *th);
        size_t per = words / (size_t)threads / 8 * 8;
        for (int t = 0; t < threads; t++) {
            sl[t] = (slice){ .p = buf + per * (size_t)t, .n = per, .go = &go };
            pthread_create(&th[t], NULL, reader, &sl[t]);
        }
        pthread_barrier_wait(&go);
        double t0 = now_s();
        pthread_barrier_wait(&go);
        double dt = now_s() - t0;
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            check += sl[t].sum;
        }
        double gbs = (double)(per * (size_t)threads * 8) / dt / 1e9;
        best = gbs > best ? gbs : best;
        pthread_barrier_destroy(&go);
        free(sl);
        free(th);
    }
    printf("{\"threads\": %d, \"bytes\": %zu, \"passes\": %d, \"read_gb_s\": %.3f, \"check\": %llu}\n", threads, bytes,
           passes, best, (unsigned long long)(check & 0xffff));
    free(buf);
    return 0;
}
