/* Inside the model layer: a mixture of experts under a weight budget (--weight-budget). The dense
 * weights stay resident; expert matrices are read from the mapped file when a token routes to
 * them and kept in an LRU of expert slots that fits in what the budget leaves. */
#ifndef CDX_MODEL_EXPERT_CACHE_H
#define CDX_MODEL_EXPERT_CACHE_H

#include "arch.h"

typedef struct expert_cache expert_cache;

/* What the budget is weighed against, in file-layout bytes. */
typedef struct xc_sizes {
    size_t dense_bytes;      /* every matrix but the experts', the embedding and the head included */
    size_t expert_max_bytes; /* the largest expert slot (gate + up + down, 64-aligned, in the largest
                                layout of the kernel sets this CPU runs) */
    size_t expert_all_bytes; /* every expert of every layer, in the file */
    size_t expert_all_slots; /* every expert at slot size */
    int64_t n_experts;       /* experts over all sparse layers */
} xc_sizes;

void xc_model_sizes(const cdx_model *m, xc_sizes *out);

/* Called once the model is bound. A budget of 0 or one that holds every expert: everything stays
 * resident (m->xc stays NULL). Below dense + top-k experts of one layer: CDX_ERESOURCE_LIMIT with
 * both numbers. Otherwise m->xc is set, and no expert byte has been read. */
int xc_open(cdx_model *m, uint64_t budget, bool use_pread, const char *path, cdx_err *err);
void xc_close(expert_cache *xc);

/* Whether m->mats[i] is read through the cache (model_pack leaves it alone). */
bool xc_streams_mat(const expert_cache *xc, size_t i);

/* The three matrices of expert e of layer l, resident until xc_release(slot): packed for k when k
 * is the kernel set the model packed for (the same bytes model_pack would make), else the file's
 * layout copied. Thread-safe; the pool runs the reads and packing. */
int xc_acquire(const cdx_model *m, const cdx_kernels *k, cdx_pool *pool, int64_t l, int64_t e, cdx_mat out[3],
               int *slot, cdx_err *err);
void xc_release(const cdx_model *m, int slot);

/* Counters for bench: loads (misses) and hits since open. */
void xc_stats(const cdx_model *m, uint64_t *hits, uint64_t *misses, size_t *n_slots);

#endif
