/* The weights in a kernel set's load-time layout: model_pack packs (or copies onto 2 MiB pages)
 * each matrix once per model, in the foreground or on a background thread whose copies each
 * forward pass installs when it starts (model_use_begin). The packs are a cache of the weights. */
#include "arch.h"
#include "expert_cache.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* Weights read once per token: 2 MiB pages where the kernel offers them (transparent huge pages
 * in "madvise" mode), which spares the TLB a miss every 4 KiB of a streaming matvec. */
#define HUGE_PAGE ((size_t)2 << 20)
void *huge_alloc(size_t bytes)
{
    if (bytes < HUGE_PAGE / 2) /* small matrices (an expert of a tiny model): a page of its own would waste most of it */
        return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    size_t total = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, total);
    if (p)
        madvise(p, total, MADV_HUGEPAGE); /* advice only: without THP this is plain memory */
    return p;
}

/* Maps a matrix's file pages in one call before it is read whole (packing or copying): faulting
 * them in 4 KiB at a time costs more than the copy itself. Advice only; older kernels lack it. */
static void populate(const void *p, size_t bytes)
{
#ifdef MADV_POPULATE_READ
    const uintptr_t page = 4096, a = (uintptr_t)p & ~(page - 1), e = ((uintptr_t)p + bytes + page - 1) & ~(page - 1);
    madvise((void *)a, e - a, MADV_POPULATE_READ);
#else
    (void)p;
    (void)bytes;
#endif
}

/* Once a matrix lives in a copy of its own, its file pages need not stay resident: dropped from
 * this process (they are clean pages of a read-only mapping, read back from the file if ever
 * touched again), so the weights are not held twice. Whole pages inside [p, p + bytes) only. */
static void release(const void *p, size_t bytes)
{
    const uintptr_t page = 4096, a = ((uintptr_t)p + page - 1) & ~(page - 1), e = ((uintptr_t)p + bytes) & ~(page - 1);
    if (e > a)
        madvise((void *)a, e - a, MADV_DONTNEED);
}

typedef struct {
    const uint8_t *src;
    uint8_t *dst;
    size_t bytes;
} copy_job;

static void copy_part(void *arg, int ith, int nth)
{
    copy_job *j = arg;
    size_t a = j->bytes / (size_t)nth * (size_t)ith, e = ith + 1 == nth ? j->bytes : j->bytes / (size_t)nth * (size_t)(ith + 1);
    memcpy(j->dst + a, j->src + a, e - a);
}

static cdx_mat *model_mat(cdx_model *m, size_t i) { return m->mats[i]; }

/* Matrix i would be copied onto huge pages by model_pack (no layout of k's own, read from the
 * mapped file, not streamed by the expert cache). */
static bool copy_candidate(cdx_model *m, const cdx_kernels *k, size_t i)
{
    const cdx_mat *w = model_mat(m, i);
    return !xc_streams_mat(m->xc, i) && cdx_matmul_pack_bytes(k, w) == 0 && !model_owns_data(m, w->data);
}

/* The mappings model_pack has asked about (a checkpoint of several shards maps each), with the
 * answer: enough of their resident pages on 2 MiB entries. smaps walks every mapping's page
 * tables, so each is asked once; where smaps cannot answer, nothing is asked again. */
typedef struct {
    uintptr_t lo, hi;
    bool huge;
} huge_map;
typedef struct {
    huge_map *v;
    size_t n, cap;
    bool unknown;
} huge_maps;

/* Below it the copy pays: Llama-1B F16 decode 6.4-7.0 vs 6.1 tok/s in place with none of the file on
 * 2 MiB entries. With 47 % on them the copy bought ~4 % (6.5 vs 6.3) for 3.2 s of load and a
 * private copy of 2.4 GB (bench/README.md). */
#define HUGE_SHARE_MIN 0.25

static bool mapped_huge(huge_maps *hm, const void *p)
{
    for (size_t j = 0; j < hm->n; j++)
        if ((uintptr_t)p >= hm->v[j].lo && (uintptr_t)p < hm->v[j].hi)
            return hm->v[j].huge;
    if (hm->unknown)
        return false;
    huge_map h = { 0, 0, false };
    const double share = cdx_mem_huge_share(p, &h.lo, &h.hi);
    if (h.hi <= h.lo) { /* no smaps, or p outside every mapping: copy, as without the rule */
        hm->unknown = true;
        return false;
    }
    h.huge = share >= HUGE_SHARE_MIN;
    huge_map *v = cdx_array_grow(hm->v, &hm->cap, hm->n, sizeof *v);
    if (v) {
        hm->v = v;
        hm->v[hm->n++] = h;
    }
    return h.huge;
}

static void model_unpack(cdx_model *m)
{
    for (size_t i = 0; m->packs && i < m->n_packs; i++) {
        if (!m->packs[i])
            continue;
        cdx_mat *w = model_mat(m, i);
        if (m->orig_data[i])
            w->data = m->orig_data[i];
        w->packed = NULL;
        w->packed_for = NULL;
        free(m->packs[i]);
    }
    free(m->packs);
    free(m->orig_data);
    m->packs = NULL;
    m->orig_data = NULL;
    m->n_packs = 0;
    m->packed_k = NULL;
}

/* ---- background packing ----
 *
 * A matrix the kernel set reads in place with its packed layout's bits (cdx_matmul_in_place) need
 * not wait for its packed copy: the packed layout only reads DRAM a little faster, and making it
 * costs the first touch of as much fresh memory (Llama-1B Q8_0: 1.3 GB, 0.4-2.3 s, most of the
 * load). Nor need a matrix model_pack would copy onto 2 MiB pages (the same bytes). A thread packs
 * or copies such matrices after load, one at a time, each on a pool as large as the one the model
 * was packed with (so full speed comes as soon as all cores can bring it: until then forward
 * passes share the cores with it); each forward pass, on entry, installs
 * the copies that are ready (model_use_begin), so no pass sees a matrix change under it and no
 * token's result depends on when that happened. */
typedef struct packer {
    pthread_t thread;
    cdx_model *m;
    const cdx_kernels *k;
    int n_threads;        /* of the packing pool */
    size_t *todo, n_todo; /* matrix indices, in the order they are packed */
    void **bufs;          /* [n_todo]: the packed copy of todo[j], once done > j */
    _Atomic size_t done;  /* how many of todo are packed */
    _Atomic bool stop;    /* the model is closing */
    _Atomic size_t installed; /* how many are installed (changed under use_lock, exclusive) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool finished;        /* the thread is past its last matrix */
} packer;

static void *packer_main(void *arg)
{
    packer *p = arg;
    cdx_pool *pool = NULL;
    cdx_err e = { 0 };
    if (cdx_pool_create(p->n_threads, &pool, &e) == CDX_OK)
        for (size_t j = 0; j < p->n_todo && !atomic_load(&p->stop); j++) {
            const cdx_mat *w = model_mat(p->m, p->todo[j]);
            const size_t pb = cdx_matmul_pack_bytes(p->k, w), bytes = pb ? pb : (size_t)w->rows * w->row_bytes;
            void *buf = huge_alloc(bytes);
            if (!buf)
                break; /* the rest stay in place */
            if (pb)
                cdx_matmul_pack(p->k, pool, w, buf);
            else { /* onto 2 MiB pages (model_pack) */
                copy_job cj = { w->data, buf, bytes };
                cdx_pool_run(pool, copy_part, &cj);
            }
            p->bufs[j] = buf;
            atomic_store_explicit(&p->done, j + 1, memory_order_release);
        }
    cdx_pool_destroy(pool);
    pthread_mutex_lock(&p->mu);
    p->finished = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Starts the packer over todo[n] (taken), packing on n_threads. Without memory or a thread the
 * matrices stay in place. */
static void packer_start(cdx_model *m, const cdx_kernels *k, size_t *todo, size_t n, int n_threads)
{
    packer *p = calloc(1, sizeof *p);
    void **bufs = calloc(n, sizeof *bufs);
    if (!p || !bufs) {
        free(p);
        free(bufs);
        free(todo);
        return;
    }
    *p = (packer){ .m = m, .k = k, .n_threads = n_threads > 0 ? n_threads : 1, .todo = todo, .n_todo = n, .bufs = bufs };
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, packer_main, p)) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        free(bufs);
        free(todo);
        free(p);
        return;
    }
    m->packer = p;
}

/* Stops the packer and frees the copies it made that were never installed. */
static void packer_close(cdx_model *m)
{
    packer *p = m->packer;
    if (!p)
        return;
    atomic_store(&p->stop, true);
    pthread_join(p->thread, NULL);
    for (size_t j = p->installed; j < atomic_load(&p->done); j++)
        free(p->bufs[j]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->bufs);
    free(p->todo);
    free(p);
    m->packer = NULL;
}

void model_use_begin(const cdx_model *cm)
{
    cdx_model *m = (cdx_model *)cm; /* the packs are a cache (struct cdx_model) */
    packer *p = m->packer;
    /* done only grows and installed changes only under the exclusive lock: a stale read here just
     * installs on a later pass */
    if (p && atomic_load_explicit(&p->done, memory_order_acquire) > p->installed &&
        pthread_rwlock_trywrlock(&m->use_lock) == 0) {
        const size_t done = atomic_load_explicit(&p->done, memory_order_acquire);
        for (size_t j = p->installed; j < done; j++) {
            const size_t i = p->todo[j];
            cdx_mat *w = model_mat(m, i);
            const void *file = w->data;
            m->packs[i] = p->bufs[j];
            if (cdx_matmul_pack_bytes(p->k, w)) {
                w->packed = p->bufs[j];
                w->packed_for = p->k;
            } else { /* a copy: the same bytes on huge pages */
                m->orig_data[i] = file;
                w->data = p->bufs[j];
            }
            release(file, (size_t)w->rows * w->row_bytes); /* the file's pages: no longer read */
        }
        p->installed = done;
        pthread_rwlock_unlock(&m->use_lock);
    }
    pthread_rwlock_rdlock(&m->use_lock);
}

void model_use_end(const cdx_model *cm)
{
    pthread_rwlock_unlock(&((cdx_model *)cm)->use_lock);
}

double cdx_model_pack_wait(const cdx_model *cm)
{
    packer *p = cm->packer;
    if (!p)
        return 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_mutex_lock(&p->mu);
    while (!p->finished)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
}

int model_pack(const cdx_model *cm, const cdx_kernels *k, cdx_pool *pool, cdx_err *err)
{
    cdx_model *m = (cdx_model *)cm; /* see struct cdx_model: the packs are a cache */
    pthread_mutex_lock(&m->pack_mu);
    if (m->packed_k || !k) {
        pthread_mutex_unlock(&m->pack_mu);
        return CDX_OK;
    }
    const size_t n_mats = m->n_mats;
    /* cdx_model_opts.weights_io: IN_PLACE reads every such matrix in place, COPY copies every one,
     * AUTO decides by the pages the file is mapped with (below) */
    const bool in_place = m->weights_io == CDX_WEIGHTS_IN_PLACE, always_copy = m->weights_io == CDX_WEIGHTS_COPY;
    m->packs = calloc(n_mats, sizeof *m->packs);
    m->orig_data = calloc(n_mats, sizeof *m->orig_data);
    if (!m->packs || !m->orig_data) {
        model_unpack(m);
        pthread_mutex_unlock(&m->pack_mu);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    m->n_packs = n_mats;
    /* The matrices with no layout of k's own are copied only to sit on 2 MiB pages. Where the
     * file's pages are already mapped that way (large folios in the page cache, which the mapping
     * asks for), the copy buys nothing and costs the first touch of as much fresh memory: read
     * them in place. Mapped first, so the answer covers their pages and they are ready to read. */
    huge_maps maps = { 0 };
    size_t *bg = calloc(n_mats ? n_mats : 1, sizeof *bg), n_bg = 0; /* for the packer */
    if (!bg) {
        model_unpack(m);
        pthread_mutex_unlock(&m->pack_mu);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (size_t i = 0; m->file_mapped && i < n_mats; i++) {
        cdx_mat *w = model_mat(m, i);
        if (copy_candidate(m, k, i) || (!xc_streams_mat(m->xc, i) && !always_copy && cdx_matmul_in_place(k, w)))
            populate(w->data, (size_t)w->rows * w->row_bytes);
    }
    for (size_t i = 0; i < n_mats; i++) {
        cdx_mat *w = model_mat(m, i);
        if (xc_streams_mat(m->xc, i))
            continue; /* under a weight budget: packed when a token first needs it (expert_cache.c) */
        size_t bytes = cdx_matmul_pack_bytes(k, w);
        const bool copy = bytes == 0; /* no layout of k's own: the same bytes, on huge pages */
        const bool owned = model_owns_data(m, w->data);
        if (copy && (in_place || owned))
            continue; /* read in place: the mapped file, or a bf16 copy already on pages of our own */
        if (m->file_mapped && !always_copy && (copy || (!owned && cdx_matmul_in_place(k, w)))) {
            /* read in place until the packer's copy is installed (the same bytes, or the packed
             * layout's bits); a copy not even then where the file is on 2 MiB pages already */
            if (!in_place && !(copy && mapped_huge(&maps, w->data)))
                bg[n_bg++] = i;
            continue;
        }
        if (copy)
            bytes = (size_t)w->rows * w->row_bytes;
        void *buf = huge_alloc(bytes);
        if (!buf)
            continue; /* both are only faster: without memory for them the weights are read in place */
        m->packs[i] = buf;
        if (!copy) /* a copy's pages were mapped in above */
            populate(w->data, (size_t)w->rows * w->row_bytes);
        if (copy) {
            copy_job cj = { w->data, buf, bytes };
            cdx_pool_run(pool, copy_part, &cj);
            m->orig_data[i] = w->data;
            w->data = buf;
            if (m->file_mapped)
                release(cj.src, bytes);
            continue;
        }
        cdx_matmul_pack(k, pool, w, buf);
        if (m->file_mapped && !model_owns_data(m, w->data)) /* never a copy of ours: that would zero it */
            release(w->data, (size_t)w->rows * w->row_bytes);
        w->packed = buf;
        w->packed_for = k;
    }
    free(maps.v);
    m->packed_k = k;
    if (n_bg)
        packer_start(m, k, bg, n_bg, cdx_pool_size(pool)); /* takes bg; without a thread they stay in place */
    else
        free(bg);
    pthread_mutex_unlock(&m->pack_mu);
    return CDX_OK;
}

void model_pack_free(cdx_model *m)
{
    packer_close(m);
    model_unpack(m);
}
