/* Persistent thread pool. A job is published by bumping `gen`; workers spin on it for a while,
 * then sleep on a condition variable. Completion is counted in `pending`. */
#include "caldrix/pool.h"

#include <pthread.h>
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
    int ith;
    pthread_t tid;
} worker;

struct cdx_pool {
    int n;
    worker *workers;          /* [n-1]; thread 0 is the caller */
    cdx_pool_fn fn;
    void *ctx;
    _Atomic uint64_t gen;     /* job generation */
    _Atomic int pending;      /* workers still running the current job */
    _Atomic int quit;
    _Atomic int sleepers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

int cdx_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    cdx_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->quit, memory_order_acquire))
                return NULL;
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load_explicit(&p->quit, memory_order_acquire))
            return NULL;
        p->fn(p->ctx, w->ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
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
            w->ith = i;
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
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with the sleepers check in worker_main */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0)
        cpu_relax();
}
