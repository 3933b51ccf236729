/* Expert streaming under a weight budget. Each slot holds one expert's three matrices in the
 * layout the resident model would compute with (cdx_matmul_pack for the packed kernel set, else
 * the file's bytes), so a streamed run computes the same bits as a resident one. Nothing is read
 * at load: a slot is filled the first time a token routes to its expert, and the least recently
 * used unpinned slot is refilled on a miss.
 *
 * Two ways to read an expert's file bytes (CALDRIX_EXPERT_IO; bench/compare-moe measured mmap, the
 * default, faster: prefill 24.5 vs 19.6 tok/s, decode 3.9 vs 3.7 on a loaded 2-core machine):
 *   pread: explicit reads from the file into a staging buffer (or straight into the slot when the
 *          kernel set keeps the file layout); the mapping is never touched, so the process holds
 *          only the budget.
 *   mmap (default): madvise(MADV_WILLNEED) on the expert's range of the mapping, pack or copy from it, then
 *          madvise(MADV_DONTNEED) so the mapped pages leave the process again (they stay in the
 *          page cache). */
#include "expert_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct xslot {
    uint8_t *buf;                 /* slot_bytes, 64-aligned; NULL until first used */
    int64_t layer, expert;        /* -1: empty */
    const cdx_kernels *k;         /* what the slot was prepared for (NULL: the file layout) */
    cdx_mat mats[3];
    int pins;
    int prev, next;               /* LRU list: head most recent */
} xslot;

typedef struct xfile {
    const uint8_t *data;
    size_t size;
    const char *path;
    int fd;                       /* -1 until first pread */
} xfile;

struct expert_cache {
    pthread_mutex_t mu;
    size_t slot_bytes;            /* 0 until the first acquire sizes it for its kernel set */
    int n_slots;
    xslot *slots;
    int head, tail;
    int32_t *where;               /* [n_layer][n_expert]: its slot or -1 */
    int64_t n_expert;
    bool *streamed;               /* [n_mats] */
    size_t n_mats;
    uint64_t budget, dense_bytes;
    bool use_pread;
    xfile *files;
    int n_files;
    uint8_t *staging;             /* pread mode: one matrix's file bytes before packing */
    size_t staging_bytes;
    uint64_t hits, misses;
};

static size_t mat_bytes(const cdx_mat *w) { return (size_t)w->rows * w->row_bytes; }
static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Bytes of one expert's slot for kernel set k (NULL: the file layout): each matrix 64-aligned, in
 * k's packed layout where it has one (which may be a little larger than the file's). */
static size_t slot_bytes_for(const cdx_kernels *k, const cdx_mat *const w[3], size_t *stage)
{
    size_t b = 0;
    for (int i = 0; i < 3; i++) {
        size_t raw = mat_bytes(w[i]), pb = k ? cdx_matmul_pack_bytes(k, w[i]) : 0;
        b += up64(pb > raw ? pb : raw);
        if (stage)
            *stage = raw > *stage ? raw : *stage;
    }
    return b;
}

void xc_model_sizes(const cdx_model *m, xc_sizes *s)
{
    /* an expert's size is its slot's in the largest layout of any kernel set this CPU runs, so the
     * minimum stated at open holds whichever set the forward pass then uses */
    const cdx_kernels *sets[] = { NULL, cdx_kernels_by_isa("scalar"), cdx_kernels_by_isa("avx2"),
                                  cdx_kernels_by_isa("avx512"), cdx_kernels_by_isa("amx") };
    memset(s, 0, sizeof *s);
    const cdx_hparams *hp = &m->hp;
    /* dense: every tensor of the file but the experts' (as inspect counts them) */
    size_t total = 0;
    for (uint64_t i = 0; m->gguf && i < m->gguf->n_tensors; i++)
        total += m->gguf->tensors[i].n_bytes;
    for (uint64_t i = 0; m->st && i < m->st->n_tensors; i++)
        total += m->st->tensors[i].n_bytes;
    for (int64_t l = 0; m->layers && l < hp->n_layer; l++) { /* an encoder keeps its layers elsewhere: no experts */
        const layer_weights *L = &m->layers[l];
        for (int64_t e = 0; L->moe && e < hp->n_expert; e++) {
            const cdx_mat *w[3] = { &L->exp_gate[e], &L->exp_up[e], &L->exp_down[e] };
            s->expert_all_bytes += mat_bytes(w[0]) + mat_bytes(w[1]) + mat_bytes(w[2]);
            for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
                size_t b = (k == 0 || sets[k]) ? slot_bytes_for(sets[k], w, NULL) : 0;
                s->expert_max_bytes = b > s->expert_max_bytes ? b : s->expert_max_bytes;
            }
            s->n_experts++;
        }
    }
    s->dense_bytes = total - s->expert_all_bytes;
    /* all experts at slot size: the budget above which nothing streams */
    s->expert_all_slots = s->expert_max_bytes * (size_t)s->n_experts;
}

void xc_close(expert_cache *xc)
{
    if (!xc)
        return;
    for (int i = 0; xc->slots && i < xc->n_slots; i++)
        free(xc->slots[i].buf);
    for (int i = 0; i < xc->n_files; i++)
        if (xc->files[i].fd >= 0)
            close(xc->files[i].fd);
    pthread_mutex_destroy(&xc->mu);
    free(xc->slots);
    free(xc->where);
    free(xc->streamed);
    free(xc->files);
    free(xc->staging);
    free(xc);
}

bool xc_streams_mat(const expert_cache *xc, size_t i) { return xc && i < xc->n_mats && xc->streamed[i]; }

int xc_open(cdx_model *m, uint64_t budget, bool use_pread, const char *path, cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    if (!budget)
        return CDX_OK;
    xc_sizes s;
    xc_model_sizes(m, &s);
    const uint64_t need = (uint64_t)s.dense_bytes + (uint64_t)hp->n_expert_used * s.expert_max_bytes;
    char b1[32], b2[32], b3[32], b4[32];
    if (!s.n_experts) {
        if (budget >= s.dense_bytes)
            return CDX_OK; /* a dense model: every weight is needed for every token */
        cdx_fmt_bytes(budget, b1, sizeof b1);
        cdx_fmt_bytes(s.dense_bytes, b2, sizeof b2);
        return cdx_err_set(err, CDX_ERESOURCE_LIMIT, "%s: --weight-budget %s (%llu bytes) is below what one token "
                           "needs: %s (%llu bytes); a dense model reads every weight for every token", path, b1,
                           (unsigned long long)budget, b2, (unsigned long long)s.dense_bytes);
    }
    if (budget < need) {
        cdx_fmt_bytes(budget, b1, sizeof b1);
        cdx_fmt_bytes(need, b2, sizeof b2);
        cdx_fmt_bytes(s.dense_bytes, b3, sizeof b3);
        cdx_fmt_bytes(s.expert_max_bytes, b4, sizeof b4);
        return cdx_err_set(err, CDX_ERESOURCE_LIMIT, "%s: --weight-budget %s (%llu bytes) is below what one token "
                           "needs: %s (%llu bytes: %s of dense weights + %lld experts of one layer × %s)", path, b1,
                           (unsigned long long)budget, b2, (unsigned long long)need, b3, (long long)hp->n_expert_used,
                           b4);
    }
    if (budget >= (uint64_t)s.dense_bytes + s.expert_all_bytes && budget >= (uint64_t)s.dense_bytes + s.expert_all_slots)
        return CDX_OK; /* everything fits: the resident path */
    expert_cache *xc = calloc(1, sizeof *xc);
    if (!xc)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    pthread_mutex_init(&xc->mu, NULL);
    xc->budget = budget;
    xc->dense_bytes = s.dense_bytes;
    xc->n_expert = hp->n_expert;
    xc->head = xc->tail = -1;
    xc->use_pread = use_pread; /* the mapping by default: faster in bench/compare-moe (one copy fewer) */
    size_t nw;
    xc->n_mats = m->n_mats;
    if (!cdx_mul_size((size_t)hp->n_layer, (size_t)hp->n_expert, &nw) ||
        !(xc->where = malloc(nw * sizeof *xc->where)) || !(xc->streamed = calloc(m->n_mats ? m->n_mats : 1, 1))) {
        xc_close(xc);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < nw; i++)
        xc->where[i] = -1;
    for (size_t i = 0; i < m->n_mats; i++)
        for (int64_t l = 0; l < hp->n_layer && !xc->streamed[i]; l++) {
            const layer_weights *L = &m->layers[l];
            const cdx_mat *w = m->mats[i];
            xc->streamed[i] = L->moe && ((w >= L->exp_gate && w < L->exp_gate + hp->n_expert) ||
                                         (w >= L->exp_up && w < L->exp_up + hp->n_expert) ||
                                         (w >= L->exp_down && w < L->exp_down + hp->n_expert));
        }
    /* the files the experts lie in, for pread */
    const cdx_file *one[1] = { m->gguf ? m->gguf->file : NULL };
    cdx_file *const *fl = m->gguf ? (cdx_file *const *)one : m->st ? m->st->files : NULL;
    int nf = m->gguf ? (one[0] ? 1 : 0) : m->st ? (int)m->st->n_files : 0;
    xc->files = calloc(nf ? (size_t)nf : 1, sizeof *xc->files);
    if (!xc->files) {
        xc_close(xc);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (int i = 0; i < nf; i++)
        xc->files[i] = (xfile){ fl[i]->data, fl[i]->size, fl[i]->path, -1 };
    xc->n_files = nf;
    m->xc = xc;
    return CDX_OK;
}

/* ---- slots ---- */

static void lru_unlink(expert_cache *xc, int i)
{
    xslot *s = &xc->slots[i];
    if (s->prev >= 0) xc->slots[s->prev].next = s->next; else xc->head = s->next;
    if (s->next >= 0) xc->slots[s->next].prev = s->prev; else xc->tail = s->prev;
    s->prev = s->next = -1;
}

static void lru_front(expert_cache *xc, int i)
{
    xslot *s = &xc->slots[i];
    s->prev = -1;
    s->next = xc->head;
    if (xc->head >= 0)
        xc->slots[xc->head].prev = i;
    xc->head = i;
    if (xc->tail < 0)
        xc->tail = i;
}

/* Sizes the slots for kernel set k (its packed layouts may differ from the file's in size). */
static int size_slots(const cdx_model *m, expert_cache *xc, const cdx_kernels *k, cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    size_t sb = 0, stage = 0;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        for (int64_t e = 0; L->moe && e < hp->n_expert; e++) {
            const cdx_mat *w[3] = { &L->exp_gate[e], &L->exp_up[e], &L->exp_down[e] };
            size_t b = slot_bytes_for(k, w, &stage);
            sb = b > sb ? b : sb;
        }
    }
    const uint64_t room = xc->budget - xc->dense_bytes; /* xc_open checked budget >= dense + k experts */
    uint64_t n = room / (sb ? sb : 1);
    const uint64_t all = (uint64_t)hp->n_layer * (uint64_t)hp->n_expert;
    if (n < (uint64_t)hp->n_expert_used) {
        char b1[32], b2[32];
        cdx_fmt_bytes(xc->budget, b1, sizeof b1);
        cdx_fmt_bytes((uint64_t)xc->dense_bytes + (uint64_t)hp->n_expert_used * sb, b2, sizeof b2);
        return cdx_err_set(err, CDX_ERESOURCE_LIMIT, "--weight-budget %s (%llu bytes) is below what one token needs "
                           "in the %s kernels' layouts: %s (%llu bytes)", b1, (unsigned long long)xc->budget,
                           cdx_kernels_isa(k), b2,
                           (unsigned long long)((uint64_t)xc->dense_bytes + (uint64_t)hp->n_expert_used * sb));
    }
    if (n > all)
        n = all;
    if (n > (1u << 30))
        n = 1u << 30;
    xc->slots = calloc((size_t)n, sizeof *xc->slots);
    if (!xc->slots)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for %llu expert slots", (unsigned long long)n);
    xc->n_slots = (int)n;
    xc->slot_bytes = sb;
    for (int i = 0; i < xc->n_slots; i++) {
        xc->slots[i] = (xslot){ .layer = -1, .expert = -1, .prev = -1, .next = -1 };
        lru_front(xc, i);
    }
    xc->staging_bytes = stage;
    return CDX_OK;
}

static int file_of(expert_cache *xc, const void *p, size_t bytes, size_t *off)
{
    const uint8_t *q = p;
    for (int i = 0; i < xc->n_files; i++)
        if (xc->files[i].data && q >= xc->files[i].data && (size_t)(q - xc->files[i].data) <= xc->files[i].size &&
            bytes <= xc->files[i].size - (size_t)(q - xc->files[i].data)) {
            *off = (size_t)(q - xc->files[i].data);
            return i;
        }
    return -1; /* not in a mapping (an aligned copy of a safetensors tensor, or a model in memory) */
}

typedef struct {
    int fd;
    uint8_t *dst;
    size_t off, bytes;
    const uint8_t *src;           /* memcpy instead when fd < 0 */
    int failed;                   /* errno of the first failed read */
} read_job;

static void read_part(void *arg, int ith, int nth)
{
    read_job *j = arg;
    const size_t step = (j->bytes / (size_t)nth + 4095) & ~(size_t)4095;
    size_t a = step * (size_t)ith, e = a + step < j->bytes ? a + step : j->bytes;
    if (a >= e)
        return;
    if (j->fd < 0) {
        memcpy(j->dst + a, j->src + a, e - a);
        return;
    }
    while (a < e) {
        ssize_t r = pread(j->fd, j->dst + a, e - a, (off_t)(j->off + a));
        if (r <= 0) {
            __atomic_store_n(&j->failed, r < 0 ? errno : EIO, __ATOMIC_RELAXED);
            return;
        }
        a += (size_t)r;
    }
}

static void advise(const void *p, size_t bytes, int advice)
{
    const uintptr_t page = 4096, a = (uintptr_t)p & ~(page - 1), e = ((uintptr_t)p + bytes + page - 1) & ~(page - 1);
    madvise((void *)a, e - a, advice);
}

/* Fills slot s with expert e of layer l for kernel set kk (NULL: the file layout). */
static int fill(const cdx_model *m, expert_cache *xc, xslot *s, const cdx_kernels *k, const cdx_kernels *kk,
                cdx_pool *pool, int64_t l, int64_t e, cdx_err *err)
{
    const layer_weights *L = &m->layers[l];
    const cdx_mat *src[3] = { &L->exp_gate[e], &L->exp_up[e], &L->exp_down[e] };
    if (!s->buf && !(s->buf = aligned_alloc(64, xc->slot_bytes)))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for an expert slot of %zu bytes", xc->slot_bytes);
    if (xc->use_pread && !xc->staging && !(xc->staging = aligned_alloc(64, up64(xc->staging_bytes))))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for an expert staging buffer of %zu bytes",
                           xc->staging_bytes);
    if (!xc->use_pread)
        for (int i = 0; i < 3; i++)
            advise(src[i]->data, mat_bytes(src[i]), MADV_WILLNEED);
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        const size_t raw = mat_bytes(src[i]), pb = kk ? cdx_matmul_pack_bytes(kk, src[i]) : 0;
        uint8_t *dst = s->buf + at;
        s->mats[i] = *src[i];
        s->mats[i].packed = NULL;
        s->mats[i].packed_for = NULL;
        const uint8_t *from = src[i]->data;
        if (xc->use_pread) {
            size_t off = 0;
            int f = file_of(xc, from, raw, &off);
            if (f >= 0 && xc->files[f].fd < 0 && (xc->files[f].fd = open(xc->files[f].path, O_RDONLY | O_CLOEXEC)) < 0)
                return cdx_err_set(err, CDX_EIO, "%s: cannot open it to read experts: %s", xc->files[f].path,
                                   strerror(errno));
            read_job j = { .fd = f >= 0 ? xc->files[f].fd : -1, .dst = pb ? xc->staging : dst, .off = off,
                           .bytes = raw, .src = from };
            cdx_pool_run(pool, read_part, &j);
            if (j.failed)
                return cdx_err_set(err, CDX_EIO, "%s: reading expert %lld of layer %lld (%zu bytes at %zu): %s",
                                   f >= 0 ? xc->files[f].path : "model", (long long)e, (long long)l, raw, off,
                                   strerror(j.failed));
            if (pb) {
                cdx_mat tmp = *src[i];
                tmp.data = xc->staging;
                cdx_matmul_pack(kk, pool, &tmp, dst);
            } else
                s->mats[i].data = dst;
        } else {
            if (pb)
                cdx_matmul_pack(kk, pool, src[i], dst);
            else {
                read_job j = { .fd = -1, .dst = dst, .bytes = raw, .src = from };
                cdx_pool_run(pool, read_part, &j);
                s->mats[i].data = dst;
            }
            advise(from, raw, MADV_DONTNEED);
        }
        if (pb) {
            s->mats[i].packed = dst;
            s->mats[i].packed_for = kk;
        }
        at += up64(pb > raw ? pb : raw);
    }
    (void)k;
    return CDX_OK;
}

int xc_acquire(const cdx_model *m, const cdx_kernels *k, cdx_pool *pool, int64_t l, int64_t e, cdx_mat out[3],
               int *slot, cdx_err *err)
{
    expert_cache *xc = m->xc;
    /* the layout the resident model would compute with: packed only for the set model_pack chose */
    const cdx_kernels *kk = k == m->packed_k ? k : NULL;
    int rc = CDX_OK;
    pthread_mutex_lock(&xc->mu);
    if (!xc->slots && (rc = size_slots(m, xc, m->packed_k ? m->packed_k : k, err)))
        goto out;
    const size_t wi = (size_t)l * (size_t)xc->n_expert + (size_t)e;
    int i = xc->where[wi];
    if (i >= 0 && xc->slots[i].k == kk) {
        xc->hits++;
    } else {
        if (i >= 0 && xc->slots[i].pins) {
            rc = cdx_err_set(err, CDX_ERESOURCE_BUSY, "expert %lld of layer %lld is in use by another kernel set",
                             (long long)e, (long long)l);
            goto out;
        }
        if (i < 0) /* the least recently used slot nobody holds */
            for (i = xc->tail; i >= 0 && xc->slots[i].pins; i = xc->slots[i].prev)
                ;
        if (i < 0) {
            rc = cdx_err_set(err, CDX_ERESOURCE_BUSY, "all %d expert slots are in use", xc->n_slots);
            goto out;
        }
        xslot *s = &xc->slots[i];
        if (s->layer >= 0)
            xc->where[(size_t)s->layer * (size_t)xc->n_expert + (size_t)s->expert] = -1;
        s->layer = s->expert = -1;
        if ((rc = fill(m, xc, s, k, kk, pool, l, e, err)))
            goto out;
        s->layer = l;
        s->expert = e;
        s->k = kk;
        xc->where[wi] = i;
        xc->misses++;
    }
    lru_unlink(xc, i);
    lru_front(xc, i);
    xc->slots[i].pins++;
    memcpy(out, xc->slots[i].mats, sizeof xc->slots[i].mats);
    *slot = i;
out:
    pthread_mutex_unlock(&xc->mu);
    return rc;
}

void xc_release(const cdx_model *m, int slot)
{
    expert_cache *xc = m->xc;
    pthread_mutex_lock(&xc->mu);
    if (slot >= 0 && slot < xc->n_slots && xc->slots[slot].pins > 0)
        xc->slots[slot].pins--;
    pthread_mutex_unlock(&xc->mu);
}

void xc_stats(const cdx_model *m, uint64_t *hits, uint64_t *misses, size_t *n_slots)
{
    expert_cache *xc = m->xc;
    *hits = *misses = 0;
    *n_slots = 0;
    if (!xc)
        return;
    pthread_mutex_lock(&xc->mu);
    *hits = xc->hits;
    *misses = xc->misses;
    *n_slots = (size_t)xc->n_slots;
    pthread_mutex_unlock(&xc->mu);
}

void cdx_model_expert_stats(const cdx_model *m, uint64_t *hits, uint64_t *misses, size_t *n_slots)
{
    xc_stats(m, hits, misses, n_slots);
}

void cdx_model_weight_split(const cdx_model *m, size_t *dense, size_t *expert_max, size_t *experts_all)
{
    xc_sizes s;
    xc_model_sizes(m, &s);
    *dense = s.dense_bytes;
    *expert_max = s.expert_max_bytes;
    *experts_all = s.expert_all_bytes;
}
