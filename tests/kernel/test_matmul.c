/* Generic matmul and the thread pool against a double-precision loop. */
#include "caldrix.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

static _Atomic int hits[8];
static void mark(void *ctx, int ith, int nth) { (void)ctx; (void)nth; atomic_fetch_add(&hits[ith], 1); }

static void pool_runs_every_thread_each_time(void)
{
    cdx_err e = {0};
    cdx_pool *p;
    REQUIRE(cdx_pool_create(4, &p, &e) == CDX_OK);
    CHECK(cdx_pool_size(p) == 4);
    for (int i = 0; i < 1000; i++)
        cdx_pool_run(p, mark, NULL);
    for (int i = 0; i < 4; i++)
        CHECK(atomic_load(&hits[i]) == 1000);
    cdx_pool_destroy(p);
}

/* Threads that keep every core busy, so the pool meets preempted workers and shares its cores
 * (its serial stretches, pool.c): every task must still run once per job, before the job returns. */
static _Atomic int spin_stop;
static void *spin(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
        ;
    return NULL;
}
static _Atomic int job_hits[3];
static void mark_job(void *ctx, int ith, int nth) { (void)ctx; (void)nth; atomic_fetch_add(&job_hits[ith], 1); }

static void pool_runs_every_task_once_on_a_busy_machine(void)
{
    cdx_err e = {0};
    cdx_pool *p;
    REQUIRE(cdx_pool_create(3, &p, &e) == CDX_OK);
    pthread_t busy[4];
    const int n_busy = 2 * cdx_cpu_count() < 4 ? 2 * cdx_cpu_count() : 4;
    for (int i = 0; i < n_busy; i++)
        REQUIRE(pthread_create(&busy[i], NULL, spin, NULL) == 0);
    int bad = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int j = 0;; j++) { /* 20,000 jobs and 0.3 s at least: the pool's watch windows are 20 ms */
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (j >= 20000 && (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= 300)
            break;
        cdx_pool_run(p, mark_job, NULL);
        for (int i = 0; i < 3; i++)
            bad += atomic_exchange(&job_hits[i], 0) != 1;
    }
    atomic_store(&spin_stop, 1);
    for (int i = 0; i < n_busy; i++)
        pthread_join(busy[i], NULL);
    CHECK(bad == 0);
    cdx_pool_destroy(p);
}

static float frand(unsigned *s) { *s = *s * 1664525u + 1013904223u; return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f; }

static void check_type(uint32_t type, const char *isa)
{
    const int64_t rows = 37, cols = 96, n = 3;
    unsigned s = 7;
    float *wf = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * n * cols), *y = malloc(sizeof(float) * n * rows);
    uint16_t *wh = malloc(2 * rows * cols);
    for (int64_t i = 0; i < rows * cols; i++) {
        wf[i] = frand(&s);
        if (type == CDX_TYPE_F16) { wh[i] = cdx_f32_to_f16(wf[i]); wf[i] = cdx_f16_to_f32(wh[i]); }
        if (type == CDX_TYPE_BF16) { wh[i] = cdx_f32_to_bf16(wf[i]); wf[i] = cdx_bf16_to_f32(wh[i]); }
    }
    for (int64_t i = 0; i < n * cols; i++)
        x[i] = frand(&s);
    cdx_mat w = { .type = type, .data = type == CDX_TYPE_F32 ? (void *)wf : (void *)wh, .rows = rows, .cols = cols,
                  .row_bytes = (size_t)cols * (type == CDX_TYPE_F32 ? 4 : 2) };
    cdx_err e = {0};
    cdx_pool *p;
    cdx_pool_create(2, &p, &e);
    const cdx_kernels *k = cdx_kernels_by_isa(isa);
    if (k) {
        void *ws = malloc(cdx_matmul_ws_bytes(&w, n, 2));
        cdx_matmul(k, p, &w, x, n, y, ws);
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < rows; r++) {
                double ref = 0;
                for (int64_t c = 0; c < cols; c++)
                    ref += (double)wf[r * cols + c] * x[t * cols + c];
                CHECK_NEAR(y[t * rows + r], ref, 1e-4);
            }
        free(ws);
    }
    cdx_pool_destroy(p);
    free(wf); free(x); free(y); free(wh);
}

static void matmul_f32_f16_bf16_match_double_reference(void)
{
    const char *isas[] = { "scalar", "avx2", "avx512" };
    for (int i = 0; i < 3; i++) {
        if (!cdx_kernels_by_isa(isas[i])) {
            t_skip_isa(isas[i]);
            continue;
        }
        check_type(CDX_TYPE_F32, isas[i]);
        check_type(CDX_TYPE_F16, isas[i]);
        check_type(CDX_TYPE_BF16, isas[i]);
    }
}

int main(void)
{
    RUN("pool runs every thread each time", pool_runs_every_thread_each_time);
    RUN("pool runs every task once per job on a busy machine", pool_runs_every_task_once_on_a_busy_machine);
    RUN("matmul f32/f16/bf16 match a double reference on every ISA", matmul_f32_f16_bf16_match_double_reference);
    return t_done("matmul");
}
