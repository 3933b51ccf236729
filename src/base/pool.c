/* Persistent thread pool. A job is n tasks (fn(ctx, i, n) for i < n, n = the pool's size); the
 * tasks are claimed from a shared counter by whichever thread is running, the caller included, so
 * a worker the OS has not scheduled never holds a step up: the caller runs its task too, and
 * waits only for tasks that a running worker has claimed. Workers spin on the job word for a
 * while, then sleep on a condition variable.
 *
 * The job word packs the job's generation (high 32 bits) and its next unclaimed task (low 32):
 * a claim is a compare-and-swap on it, so a worker that wakes late can only claim a task of the
 * job it saw, never one of the next job with the previous job's function. */
#include "caldrix/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 20000 /* ~100 µs of pause before a worker sleeps */

typedef struct worker {
    cdx_pool *pool;
    pthread_t tid;
} worker;

struct cdx_pool {
    int n;
    worker *workers;          /* [n-1]; the caller is the n-th thread */
    cdx_pool_fn fn;
    void *ctx;
    _Atomic uint64_t job;     /* generation << 32 | next task */
    _Atomic int done;         /* tasks of the current job finished */
    _Atomic int quit;
    _Atomic int sleepers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

int cdx_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n; /* the cores this process may run on, not the machine's */
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Claims and runs tasks of job generation gen while there are any. */
static void run_tasks(cdx_pool *p, uint64_t gen, cdx_pool_fn fn, void *ctx)
{
    uint64_t j = atomic_load_explicit(&p->job, memory_order_acquire);
    while ((j >> 32) == gen && (int)(uint32_t)j < p->n) {
        if (!atomic_compare_exchange_weak_explicit(&p->job, &j, j + 1, memory_order_acq_rel, memory_order_acquire))
            continue;
        fn(ctx, (int)(uint32_t)j, p->n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        j = atomic_load_explicit(&p->job, memory_order_acquire);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    cdx_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->job, memory_order_acquire) >> 32) == seen) {
            if (atomic_load_explicit(&p->quit, memory_order_acquire))
                return NULL;
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((atomic_load(&p->job) >> 32) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load_explicit(&p->quit, memory_order_acquire))
            return NULL;
        /* fn and ctx were written before the job word was published (release/acquire); a job
         * that has already moved on fails every claim below */
        pthread_mutex_lock(&p->mu); /* fn/ctx are read under the lock the caller writes them under */
        cdx_pool_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, g, fn, ctx);
    }
}

int cdx_pool_create(int n_threads, cdx_pool **out, cdx_err *err)
{
    *out = NULL;
    if (n_threads <= 0)
        n_threads = cdx_cpu_count();
    if (n_threads > 1024)
        return cdx_err_set(err, CDX_EINVAL, "threads is %d; at most 1024", n_threads);
    cdx_pool *p = calloc(1, sizeof *p);
    if (!p)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory creating the thread pool");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            cdx_pool_destroy(p);
            return cdx_err_set(err, CDX_ENOMEM, "out of memory creating the thread pool");
        }
        for (int i = 1; i < n_threads; i++) {
            worker *w = &p->workers[i - 1];
            w->pool = p;
            if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
                p->n = i; /* destroy joins only the started ones */
                cdx_pool_destroy(p);
                return cdx_err_set(err, CDX_ENOMEM, "cannot start thread %d of %d", i, n_threads);
            }
        }
    }
    *out = p;
    return CDX_OK;
}

void cdx_pool_destroy(cdx_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->workers)
        for (int i = 1; i < p->n; i++)
            pthread_join(p->workers[i - 1].tid, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->workers);
    free(p);
}

int cdx_pool_size(const cdx_pool *p) { return p ? p->n : 1; }

void cdx_pool_run(cdx_pool *p, cdx_pool_fn fn, void *ctx)
{
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const uint64_t gen = (atomic_load_explicit(&p->job, memory_order_relaxed) >> 32) + 1;
    atomic_store(&p->job, gen << 32); /* seq_cst: pairs with the sleepers check in worker_main */
    const bool wake = atomic_load(&p->sleepers) > 0;
    if (wake)
        pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, gen, fn, ctx);
    /* every task is claimed: wait for the ones running workers took */
    while (atomic_load_explicit(&p->done, memory_order_acquire) < p->n)
        cpu_relax();
}
