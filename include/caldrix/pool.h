/* A persistent thread pool: n threads (the caller is thread 0) run one function together.
 *
 *   cdx_pool *p; cdx_pool_create(4, &p, &err);
 *   cdx_pool_run(p, work, ctx);   // work(ctx, ith, nth) once for each ith < nth = 4, each on
 *                                 // whichever thread claims it; returns when all are done
 *   cdx_pool_destroy(p);
 *
 * Workers spin briefly between jobs (decode issues hundreds of small jobs per token), then sleep.
 * On a busy machine a worker that has to share its core sits jobs out for a while and the others
 * (the caller at least) take its tasks (pool.c). One caller at a time: cdx_pool_run is not
 * reentrant and not thread-safe.
 */
#ifndef CALDRIX_POOL_H
#define CALDRIX_POOL_H

#include "caldrix/base.h"

typedef struct cdx_pool cdx_pool;
typedef void (*cdx_pool_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0: the number of online CPUs. */
CDX_API int cdx_pool_create(int n_threads, cdx_pool **out, cdx_err *err);
CDX_API void cdx_pool_destroy(cdx_pool *p); /* NULL: no-op */
CDX_API int cdx_pool_size(const cdx_pool *p);
CDX_API void cdx_pool_run(cdx_pool *p, cdx_pool_fn fn, void *ctx);
/* Number of online CPUs (at least 1). */
CDX_API int cdx_cpu_count(void);
/* The most threads a command may ask for (every command's --threads, and the engine's n_threads):
 * 4 x cdx_cpu_count(), and never more than CDX_MAX_THREADS, the pool's own limit. */
#define CDX_MAX_THREADS 1024
CDX_API int cdx_threads_max(void);

#endif
