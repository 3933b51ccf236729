/* Persistent thread pool. A job is n tasks (fn(ctx, i, n) for i < n, n = the pool's size); the
 * tasks are claimed from a shared counter by whichever thread is running, the caller included, so
 * a worker the OS has not scheduled never holds a step up: the caller runs its task too, and
 * waits only for tasks that a running worker has claimed. Workers spin on the job word for a
 * while, then sleep on a condition variable.
 *
 * The job word packs the job's generation (high 32 bits) and its next unclaimed task (low 32):
 * a claim is a compare-and-swap on it, so a worker that wakes late can only claim a task of the
 * job it saw, never one of the next job with the previous job's function.
 *
 * A busy machine. A worker that shares its core with another runnable thread is preempted for a
 * time slice at a time: if it holds a claimed task then, the job waits milliseconds for it. That
 * cannot be undone inside a job (a task cannot be taken back from a thread that is running it),
 * so the caller benches a worker it waited on for STRAGGLER_NS or more, longer than its own share
 * of that job took: a benched worker claims nothing and sleeps until its bench ends, and the
 * others (the caller at least) take its tasks. A first bench lasts BENCH_MIN_NS; one after a
 * window of WINDOW_NS that showed it again twice as long, up to BENCH_MAX_NS; each clean window
 * halves the next. A worker the OS put on the caller's own core (where a woken thread starts
 * while the other cores are busy, even with a lower-priority process) would spin there on the
 * caller's time: it moves itself off that core once, by narrowing its CPU mask for a moment.
 * Which thread runs a task never changes its result: only the speed depends on this. */
#include "caldrix/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 20000        /* ~100 µs of pause before a worker sleeps */
#define CALLER_SPIN_ITERS 2000  /* ~10 µs of pause before the caller sleeps on a worker's task */
#define WINDOW_NS 20000000      /* 20 ms */
#define STRAGGLER_NS 500000
#define BENCH_MIN_NS 20000000
#define BENCH_MAX_NS 1280000000

typedef struct worker {
    cdx_pool *pool;
    pthread_t tid;
    _Atomic int holding;           /* it is running a task it claimed */
    _Atomic int64_t benched_until; /* CLOCK_MONOTONIC ns; 0: not benched */
    /* the caller's own */
    int64_t bench_ns; /* the length of its next bench (0: BENCH_MIN_NS) */
    bool straggled;   /* the caller waited on it in this window */
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
    _Atomic int caller_waiting; /* the caller sleeps on `done` (futex) */
    _Atomic int caller_cpu;     /* the CPU the caller published the current job from */
    int64_t window0;          /* the caller's: the current window's start */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* a new job (or quit), for sleeping workers */
    pthread_cond_t bench_cv;  /* quit, for benched ones */
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

int cdx_threads_max(void)
{
    const int n = cdx_cpu_count();
    return n > CDX_MAX_THREADS / 4 ? CDX_MAX_THREADS : 4 * n;
}

#ifdef __linux__
static void done_wake(cdx_pool *p) { syscall(SYS_futex, (int *)&p->done, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); }
static void done_sleep(cdx_pool *p, int seen) { syscall(SYS_futex, (int *)&p->done, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0); }
#else
static void done_wake(cdx_pool *p) { (void)p; }
static void done_sleep(cdx_pool *p, int seen) { (void)p; (void)seen; sched_yield(); }
#endif

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The worker moves off `cpu` (the caller's) if the process may run elsewhere: its CPU mask
 * without `cpu` for a moment, then the whole mask again (the kernel moves it at the first). */
static void move_off(int cpu)
{
    cpu_set_t all, other;
    if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof all, &all) != 0)
        return;
    other = all;
    CPU_CLR(cpu, &other);
    if (CPU_COUNT(&other) == 0)
        return;
    if (sched_setaffinity(0, sizeof other, &other) == 0)
        sched_setaffinity(0, sizeof all, &all);
}

/* The end of a parallel job at time t, the caller's (now: a straggler was seen in it): at the end
 * of a window, or now, each worker's bench. */
static void watch(cdx_pool *p, int64_t t, bool now)
{
    if (!now && t - p->window0 < WINDOW_NS)
        return;
    for (int i = 0; i < p->n - 1; i++) {
        worker *w = &p->workers[i];
        if (atomic_load_explicit(&w->benched_until, memory_order_relaxed) > t)
            continue; /* asleep */
        if (w->straggled) {
            w->bench_ns = w->bench_ns ? (w->bench_ns * 2 < BENCH_MAX_NS ? w->bench_ns * 2 : BENCH_MAX_NS) : BENCH_MIN_NS;
            atomic_store_explicit(&w->benched_until, t + w->bench_ns, memory_order_relaxed);
        } else {
            w->bench_ns = w->bench_ns / 2 < BENCH_MIN_NS ? 0 : w->bench_ns / 2;
        }
        w->straggled = false;
    }
    p->window0 = t;
}

/* Claims and runs tasks of job generation gen while there are any; w: the worker (NULL: the
 * caller). */
static void run_tasks(cdx_pool *p, worker *w, uint64_t gen, cdx_pool_fn fn, void *ctx)
{
    uint64_t j = atomic_load_explicit(&p->job, memory_order_acquire);
    while ((j >> 32) == gen && (int)(uint32_t)j < p->n) {
        if (!atomic_compare_exchange_weak_explicit(&p->job, &j, j + 1, memory_order_acq_rel, memory_order_acquire))
            continue;
        if (w)
            atomic_store_explicit(&w->holding, 1, memory_order_relaxed);
        fn(ctx, (int)(uint32_t)j, p->n);
        if (w)
            atomic_store_explicit(&w->holding, 0, memory_order_relaxed);
        atomic_fetch_add(&p->done, 1); /* seq_cst: pairs with the caller's caller_waiting store */
        if (atomic_load(&p->caller_waiting))
            done_wake(p);
        j = atomic_load_explicit(&p->job, memory_order_acquire);
    }
}

/* A benched worker sleeps until the bench ends (or the pool quits). */
static void sit_out(cdx_pool *p, worker *w, int64_t until)
{
    struct timespec ts = { (time_t)(until / 1000000000), (long)(until % 1000000000) };
    pthread_mutex_lock(&p->mu);
    while (!atomic_load(&p->quit) && now_ns() < until)
        pthread_cond_timedwait(&p->bench_cv, &p->mu, &ts);
    pthread_mutex_unlock(&p->mu);
    atomic_store_explicit(&w->benched_until, 0, memory_order_relaxed);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    cdx_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        int64_t until = 0;
        while ((g = atomic_load_explicit(&p->job, memory_order_acquire) >> 32) == seen) {
            if (atomic_load_explicit(&p->quit, memory_order_acquire))
                return NULL;
            if ((until = atomic_load_explicit(&w->benched_until, memory_order_relaxed)) != 0)
                break;
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
        if (until || (until = atomic_load_explicit(&w->benched_until, memory_order_relaxed)) != 0) {
            sit_out(p, w, until); /* the jobs meanwhile: the others claim their tasks */
            continue;
        }
        seen = g;
        if (atomic_load_explicit(&p->quit, memory_order_acquire))
            return NULL;
        const int here = sched_getcpu();
        if (here >= 0 && here == atomic_load_explicit(&p->caller_cpu, memory_order_relaxed))
            move_off(here);
        /* fn and ctx were written before the job word was published (release/acquire); a job
         * that has already moved on fails every claim below */
        pthread_mutex_lock(&p->mu); /* fn/ctx are read under the lock the caller writes them under */
        cdx_pool_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, w, g, fn, ctx);
    }
}

int cdx_pool_create(int n_threads, cdx_pool **out, cdx_err *err)
{
    *out = NULL;
    if (n_threads <= 0)
        n_threads = cdx_cpu_count();
    if (n_threads > CDX_MAX_THREADS)
        return cdx_err_set(err, CDX_EINVAL, "threads is %d; at most %d", n_threads, CDX_MAX_THREADS);
    cdx_pool *p = calloc(1, sizeof *p);
    if (!p)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory creating the thread pool");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* benches end at CLOCK_MONOTONIC times */
    pthread_cond_init(&p->bench_cv, &ca);
    pthread_condattr_destroy(&ca);
    p->window0 = now_ns();
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
    pthread_cond_broadcast(&p->bench_cv);
    pthread_mutex_unlock(&p->mu);
    if (p->workers)
        for (int i = 1; i < p->n; i++)
            pthread_join(p->workers[i - 1].tid, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->bench_cv);
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
    atomic_store_explicit(&p->caller_cpu, sched_getcpu(), memory_order_relaxed);
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
    const int64_t t0 = now_ns();
    run_tasks(p, NULL, gen, fn, ctx);
    int64_t t1 = now_ns();
    /* every task is claimed: wait for the ones running workers took, briefly spinning, then
     * asleep (so that a worker that shares this core runs) */
    bool straggler = false;
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < p->n;) {
        if (++spins < CALLER_SPIN_ITERS) {
            cpu_relax();
            continue;
        }
        bool held[64]; /* which workers held a task when the caller gave up spinning */
        const int nh = p->n - 1 < 64 ? p->n - 1 : 64;
        for (int i = 0; i < nh; i++)
            held[i] = atomic_load_explicit(&p->workers[i].holding, memory_order_relaxed);
        atomic_store(&p->caller_waiting, 1);
        int d;
        while ((d = atomic_load(&p->done)) < p->n)
            done_sleep(p, d);
        atomic_store(&p->caller_waiting, 0);
        const int64_t t2 = now_ns();
        straggler = t2 - t1 >= STRAGGLER_NS && t2 - t1 > t1 - t0;
        for (int i = 0; straggler && i < nh; i++)
            p->workers[i].straggled |= held[i];
        t1 = t2;
    }
    watch(p, t1, straggler);
}
