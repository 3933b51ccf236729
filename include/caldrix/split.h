/* caldrix split: one model cut by layers across the ranks of an Open MPI job (docs/models.md, "One
 * model over several machines"). Rank 0 is the front end and computes the first slice through an
 * engine made with cdx_engine_opts.stage; every other rank runs cdx_split_stage_run for its slice.
 * Only the hidden rows of a batch cross (with their positions, sequences and block ids), and the
 * last rank sends the wanted tokens' rows after the last layer back to rank 0, which has the head.
 *
 *   cdx_split *sp;  cdx_split_init(&sp, &err);                 // MPI_Init: only when asked
 *   cdx_split_hello(sp, build_id, mem, peers, &err);             // every rank, before loading
 *   rank 0: cdx_split_send_plan(sp, 0, bounds, "", &err); load; cdx_split_stage_of(sp, &st);
 *           engine with eo.stage = &st; cdx_split_start(sp, m, ...); run; cdx_split_stop(sp);
 *   rank k: cdx_split_recv_plan(sp, ...); load; cdx_split_stage_run(sp, m, ...);
 *   cdx_split_end(sp);                                           // MPI_Finalize
 *
 * The MPI parts exist only in a build that found Open MPI (pkg-config ompi-c); elsewhere they return
 * CDX_EUNSUPPORTED saying so, and cdx_split_built() is false. Nothing here calls MPI unless the
 * caller called cdx_split_init: a single process never touches it. Not thread-safe: one thread
 * makes every call of one cdx_split (the engine thread, on rank 0). */
#ifndef CALDRIX_SPLIT_H
#define CALDRIX_SPLIT_H

#include "caldrix/base.h"
#include "caldrix/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether this build has Open MPI (the split can run). */
CDX_API bool cdx_split_built(void);

/* ---- placement (no MPI) ---- */

/* "0-3,4-7" (--split-layers): one contiguous range a-b (or one layer a) per rank, in rank order,
 * covering layers 0..n_layer-1 once. Writes bounds[0..n_ranks]: rank r computes [bounds[r],
 * bounds[r+1]). CDX_EINVAL naming the range for a malformed, overlapping, gapped or out-of-range
 * spec, or one whose count of ranges is not n_ranks. */
CDX_API int cdx_split_parse_layers(const char *spec, int64_t n_layer, int n_ranks, int64_t *bounds, cdx_err *err);
/* Contiguous slices proportional to mem[r] (bytes rank r can give; all 0: equal), at least one layer
 * each. CDX_EINVAL when there are more ranks than layers. */
CDX_API int cdx_split_plan(int64_t n_layer, const uint64_t *mem, int n_ranks, int64_t *bounds, cdx_err *err);

/* The slices for a model of n_layer layers of layer_bytes each (weights and KV cache) over ranks that
 * can give mem[r] bytes: *whole true (bounds not written) when rank 0 alone holds it and may_whole;
 * else contiguous slices in proportion to what each rank holds, each within its rank's memory.
 * CDX_ERESOURCE_LIMIT when it does not fit even split, giving what it needs and what each rank gives;
 * CDX_EINVAL for more ranks than layers. */
CDX_API int cdx_split_fit(int64_t n_layer, uint64_t layer_bytes, const uint64_t *mem, int n_ranks, bool may_whole,
                          bool *whole, int64_t *bounds, cdx_err *err);

/* ---- the job ---- */

typedef struct cdx_split cdx_split;

/* What a rank says of itself at start. */
typedef struct cdx_split_peer {
    uint8_t build_id[32];      /* the caller's id of its binary (e.g. a SHA-256 of it) */
    uint64_t mem;              /* bytes it can give */
    int64_t pid;
    char host[64];
} cdx_split_peer;

/* MPI_Init_thread (serialized); *out owns the job's handle. */
CDX_API int cdx_split_init(cdx_split **out, cdx_err *err);
CDX_API int cdx_split_rank(const cdx_split *sp);
CDX_API int cdx_split_size(const cdx_split *sp);
/* Seconds rank 0 waits for an answer before it fails the batch naming the ranks (default 120).
 * A rank on this host whose process is gone is named at once. */
CDX_API void cdx_split_set_timeout(cdx_split *sp, double seconds);
/* MPI_Finalize and free; NULL: no-op. */
CDX_API void cdx_split_end(cdx_split *sp);

/* Every rank tells rank 0 about itself; on rank 0 peers[size] is filled. Rank 0 refuses (CDX_EINVAL)
 * a rank whose build_id differs from its own, naming the rank and its host. */
CDX_API int cdx_split_hello(cdx_split *sp, const uint8_t build_id[32], uint64_t mem, cdx_split_peer *peers,
                            cdx_err *err);
/* Rank 0 tells every rank its slice (bounds[size + 1]), or status != 0 and why: then each rank stops. */
CDX_API int cdx_split_send_plan(cdx_split *sp, int status, const int64_t *bounds, const char *why, cdx_err *err);
/* On rank k > 0: the plan. *status != 0: rank 0 refused (why, cap bytes, says what). */
CDX_API int cdx_split_recv_plan(cdx_split *sp, int *status, int64_t *bounds, char *why, size_t cap, cdx_err *err);

/* Rank 0's stage: its layers, a send that hands the rows to rank 1 without waiting (MPI_Isend of a
 * copy), a recv that takes the last rank's rows back in order, and n_micro = the ranks: a batch of
 * several sequences goes through in as many micro-batches, so the ranks compute at the same time. */
CDX_API int cdx_split_stage_of(cdx_split *sp, cdx_stage *out, cdx_err *err);
/* Rank 0, once its engine exists: tells every rank the pool (n_blocks blocks, a batch of up to
 * max_tokens tokens, kv_type) and m's fingerprint; each rank checks the fingerprint against its own
 * model and answers. CDX_EINVAL naming the rank for another model, or that rank's own error. */
CDX_API int cdx_split_start(cdx_split *sp, const cdx_model *m, int64_t n_blocks, int64_t max_tokens, uint32_t kv_type,
                            cdx_err *err);
/* Rank k > 0: answers start, then computes its slice of every batch until rank 0 stops it (0), or
 * fails (its error; rank 0 is told). m NULL: the model did not load here, and err->msg says why:
 * that is rank 0's answer at start. A batch that fails here fails on rank 0 and the loop goes on. */
CDX_API int cdx_split_stage_run(cdx_split *sp, const cdx_model *m, int n_threads, const cdx_kernels *k, cdx_err *err);
/* Rank 0: every rank's stage loop ends (sent to each), or, before start, each rank's wait for it. */
CDX_API void cdx_split_stop(cdx_split *sp);
/* Rank 0: NULL, or why a rank was lost ("split_rank_lost: ..."); from then on every batch fails at
 * once with that message. Any thread may ask. */
CDX_API const char *cdx_split_lost(const cdx_split *sp);
/* Bytes rank 0 sent and received for batches, and ms it spent waiting in MPI for them. */
CDX_API void cdx_split_stats(const cdx_split *sp, uint64_t *bytes_sent, uint64_t *bytes_recv, double *wait_ms);

#ifdef __cplusplus
}
#endif
#endif
