/* A model split by layers across the ranks of an Open MPI job (include/caldrix/split.h).
 * Placement (parsing --split-layers, proportional slices) needs no MPI and is always built; the job
 * itself is compiled only where the build found Open MPI (CDX_HAVE_MPI, from pkg-config ompi-c), and
 * otherwise every call of it says that this build has none. MPI is called only after cdx_split_init. */
#include "caldrix/split.h"
#include "caldrix/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- placement ---- */

static int parse_num(const char **p, int64_t *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return -1;
    int64_t v = 0;
    while (*s >= '0' && *s <= '9') {
        if (v > (int64_t)1 << 40)
            return -1;
        v = v * 10 + (*s++ - '0');
    }
    *p = s;
    *out = v;
    return 0;
}

int cdx_split_parse_layers(const char *spec, int64_t n_layer, int n_ranks, int64_t *bounds, cdx_err *err)
{
    const char *p = spec;
    int r = 0;
    int64_t next = 0; /* the first layer the next range must start at */
    while (*p) {
        const char *item = p;
        int64_t a, b;
        if (parse_num(&p, &a))
            return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\": \"%s\" is not a layer range a-b (whole layers, "
                               "from 0)", spec, item);
        b = a;
        if (*p == '-') {
            p++;
            if (parse_num(&p, &b))
                return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\": \"%s\" is not a layer range a-b (whole "
                                   "layers, from 0)", spec, item);
        }
        if (*p && *p != ',')
            return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\": \"%s\" is not a layer range a-b (whole layers, "
                               "from 0)", spec, item);
        const int len = (int)(p - item);
        if (*p == ',')
            p++;
        if (b < a)
            return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\": range %.*s ends before it starts", spec, len, item);
        if (b >= n_layer)
            return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\": range %.*s names layer %lld; the model has "
                               "layers 0-%lld", spec, len, item, (long long)b, (long long)n_layer - 1);
        if (a < next)
            return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\": range %.*s overlaps the one before (layer %lld "
                               "is in both)", spec, len, item, (long long)a);
        if (a > next)
            return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\": range %.*s leaves a gap (layer%s %lld%s%.0lld in "
                               "no range)", spec, len, item, a - next > 1 ? "s" : "", (long long)next,
                               a - next > 1 ? "-" : "", a - next > 1 ? (long long)a - 1 : 0LL);
        if (r >= n_ranks)
            return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\" gives more ranges than the %d ranks mpirun "
                               "started", spec, n_ranks);
        bounds[r++] = a;
        next = b + 1;
    }
    if (r == 0)
        return cdx_err_set(err, CDX_EINVAL, "--split-layers is empty");
    if (next < n_layer)
        return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\" leaves layers %lld-%lld in no range (the model has "
                           "layers 0-%lld)", spec, (long long)next, (long long)n_layer - 1, (long long)n_layer - 1);
    if (r != n_ranks)
        return cdx_err_set(err, CDX_EINVAL, "--split-layers \"%s\" gives %d ranges for the %d ranks mpirun started",
                           spec, r, n_ranks);
    bounds[n_ranks] = n_layer;
    return CDX_OK;
}

int cdx_split_plan(int64_t n_layer, const uint64_t *mem, int n_ranks, int64_t *bounds, cdx_err *err)
{
    if (n_ranks < 1)
        return cdx_err_set(err, CDX_EINVAL, "%d ranks", n_ranks);
    if (n_ranks > n_layer)
        return cdx_err_set(err, CDX_EINVAL, "%d ranks for a model of %lld layers: each rank needs at least one layer "
                           "(start at most %lld)", n_ranks, (long long)n_layer, (long long)n_layer);
    double total = 0;
    for (int r = 0; r < n_ranks; r++)
        total += (double)mem[r];
    bounds[0] = 0;
    double cum = 0;
    for (int r = 1; r < n_ranks; r++) {
        cum += total > 0 ? (double)mem[r - 1] : 1;
        int64_t b = (int64_t)(cum / (total > 0 ? total : n_ranks) * (double)n_layer + 0.5);
        /* at least one layer for this rank and for each after it */
        if (b < bounds[r - 1] + 1)
            b = bounds[r - 1] + 1;
        if (b > n_layer - (n_ranks - r))
            b = n_layer - (n_ranks - r);
        bounds[r] = b;
    }
    bounds[n_ranks] = n_layer;
    return CDX_OK;
}

static void gib(char *buf, size_t cap, uint64_t b) { cdx_fmt_bytes(b, buf, cap); }

int cdx_split_fit(int64_t n_layer, uint64_t layer_bytes, const uint64_t *mem, int n_ranks, bool may_whole, bool *whole,
                  int64_t *bounds, cdx_err *err)
{
    *whole = false;
    if (n_ranks < 1 || n_layer < 1)
        return cdx_err_set(err, CDX_EINVAL, "%d ranks, %lld layers", n_ranks, (long long)n_layer);
    const uint64_t lb = layer_bytes ? layer_bytes : 1;
    int64_t cap[256], total_cap = 0;
    char gives[1024] = "";
    size_t o = 0;
    for (int r = 0; r < n_ranks && r < 256; r++) {
        cap[r] = (int64_t)(mem[r] / lb);
        if (cap[r] > n_layer)
            cap[r] = n_layer;
        total_cap += cap[r];
        char g[32];
        gib(g, sizeof g, mem[r]);
        if (o < sizeof gives - 48)
            o += (size_t)snprintf(gives + o, sizeof gives - o, "%srank %d %s", r ? ", " : "", r, g);
    }
    if (may_whole && cap[0] >= n_layer) {
        *whole = true;
        return CDX_OK;
    }
    if (n_ranks > n_layer)
        return cdx_split_plan(n_layer, mem, n_ranks, bounds, err); /* its refusal */
    char need[32], one[32];
    gib(need, sizeof need, (uint64_t)n_layer * layer_bytes);
    gib(one, sizeof one, layer_bytes);
    for (int r = 0; r < n_ranks; r++)
        if (cap[r] < 1)
            return cdx_err_set(err, CDX_ERESOURCE_LIMIT, "the model does not fit even split: it needs %s (%s a layer, "
                               "weights and KV cache); rank %d gives less than one layer (%s)", need, one, r, gives);
    if (total_cap < n_layer)
        return cdx_err_set(err, CDX_ERESOURCE_LIMIT, "the model does not fit even split: it needs %s (%lld layers of %s, "
                           "weights and KV cache); the %d ranks hold %lld layers together (%s)", need,
                           (long long)n_layer, one, n_ranks, (long long)total_cap, gives);
    /* in proportion to what each holds, each within it, at least one layer for every rank after */
    int64_t rem = n_layer, rem_cap = total_cap;
    bounds[0] = 0;
    for (int r = 0; r < n_ranks; r++) {
        int64_t take = rem;
        if (r < n_ranks - 1) {
            take = (int64_t)((double)rem * (double)cap[r] / (double)rem_cap + 0.5);
            const int64_t lo_t = rem - (rem_cap - cap[r]), hi_t = rem - (n_ranks - 1 - r); /* the rest must fit */
            take = take > cap[r] ? cap[r] : take;
            take = take < lo_t ? lo_t : take;
            take = take > hi_t ? hi_t : take;
            take = take < 1 ? 1 : take;
        }
        bounds[r + 1] = bounds[r] + take;
        rem -= take;
        rem_cap -= cap[r];
    }
    return CDX_OK;
}

#ifndef CDX_HAVE_MPI

/* ---- a build without Open MPI ---- */

#define NO_MPI(err) cdx_err_set(err, CDX_EUNSUPPORTED, "this build of caldrix has no Open MPI (pkg-config ompi-c was not " \
                                "found when it was built): install libopenmpi-dev (scripts/deps) and rebuild to split a model")

bool cdx_split_built(void) { return false; }
int cdx_split_init(cdx_split **out, cdx_err *err) { *out = NULL; return NO_MPI(err); }
int cdx_split_rank(const cdx_split *sp) { return 0; }
int cdx_split_size(const cdx_split *sp) { return 1; }
void cdx_split_set_timeout(cdx_split *sp, double seconds) {}
void cdx_split_end(cdx_split *sp) {}
int cdx_split_hello(cdx_split *sp, const uint8_t build_id[32], uint64_t mem, cdx_split_peer *peers, cdx_err *err)
{
    return NO_MPI(err);
}
int cdx_split_send_plan(cdx_split *sp, int status, const int64_t *bounds, const char *why, cdx_err *err) { return NO_MPI(err); }
int cdx_split_recv_plan(cdx_split *sp, int *status, int64_t *bounds, char *why, size_t cap, cdx_err *err)
{
    return NO_MPI(err);
}
int cdx_split_stage_of(cdx_split *sp, cdx_stage *out, cdx_err *err) { return NO_MPI(err); }
int cdx_split_start(cdx_split *sp, const cdx_model *m, int64_t n_blocks, int64_t max_tokens, uint32_t kv_type, cdx_err *err)
{
    return NO_MPI(err);
}
int cdx_split_stage_run(cdx_split *sp, const cdx_model *m, int n_threads, const cdx_kernels *k, cdx_err *err)
{
    return NO_MPI(err);
}
void cdx_split_stop(cdx_split *sp) {}
const char *cdx_split_lost(const cdx_split *sp) { return NULL; }
void cdx_split_stats(const cdx_split *sp, uint64_t *bytes_sent, uint64_t *bytes_recv, double *wait_ms)
{
    *bytes_sent = *bytes_recv = 0;
    *wait_ms = 0;
}

#else

#include <mpi.h>
#include <errno.h>
#include <stdatomic.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

/* ---- the job ---- */

enum { TAG_HELLO = 1, TAG_PLAN, TAG_START, TAG_START_ACK, TAG_BATCH, TAG_OUT, TAG_ERR };
enum { MAX_RANKS = 256, WHY_LEN = 512, N_OUTBOX = 16 };

/* A message on its way (MPI_Isend): its own copy, kept until the send completes, so the stage computes
 * on while it travels (rank 0 its next micro-batch, a later rank its next batch). */
typedef struct {
    uint8_t *buf;
    size_t cap;
    MPI_Request rq;        /* MPI_REQUEST_NULL: free */
    int dst;
} outbox;

struct cdx_split {
    int rank, size;
    double timeout_s;
    int64_t bounds[MAX_RANKS + 1];
    cdx_split_peer peers[MAX_RANKS];   /* rank 0: what each rank said at hello */
    bool have_peers, started;
    char host[64];
    uint8_t *buf;                      /* a batch message being built or read */
    size_t cap;
    int64_t n_vocab, n_embd;
    uint64_t bytes_sent, bytes_recv;
    double wait_ms;
    outbox out[N_OUTBOX];              /* messages on their way, used in turn */
    int out_next;
    _Atomic int lost;                  /* a rank was lost (rank 0 saw it, or told this rank so at the stop):
                                        * every later batch fails at once, and no MPI_Finalize waits for it */
    char lost_msg[400];                /* why (written before lost is set) */
};

bool cdx_split_built(void) { return true; }

static int mpi_fail(cdx_err *err, int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, s, &len);
    return cdx_err_set(err, CDX_EIO, "MPI: %s: %.*s", what, len, s);
}

int cdx_split_init(cdx_split **out, cdx_err *err)
{
    *out = NULL;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (inited)
        return cdx_err_set(err, CDX_EINVAL, "MPI is already initialised in this process");
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Init_thread");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    cdx_split *sp = calloc(1, sizeof *sp);
    if (!sp) {
        MPI_Finalize();
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &sp->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &sp->size);
    sp->timeout_s = 120;
    for (int i = 0; i < N_OUTBOX; i++)
        sp->out[i].rq = MPI_REQUEST_NULL;
    gethostname(sp->host, sizeof sp->host - 1);
    if (sp->size > MAX_RANKS) {
        int n = sp->size;
        cdx_split_end(sp);
        return cdx_err_set(err, CDX_EINVAL, "%d ranks; a split takes at most %d", n, MAX_RANKS);
    }
    *out = sp;
    return CDX_OK;
}

int cdx_split_rank(const cdx_split *sp) { return sp ? sp->rank : 0; }
int cdx_split_size(const cdx_split *sp) { return sp ? sp->size : 1; }
void cdx_split_set_timeout(cdx_split *sp, double seconds) { sp->timeout_s = seconds > 0 ? seconds : 120; }

void cdx_split_end(cdx_split *sp)
{
    if (!sp)
        return;
    free(sp->buf);
    for (int i = 0; i < N_OUTBOX; i++)
        free(sp->out[i].buf);
    const bool lost = sp->lost;
    free(sp);
    /* MPI_Finalize is collective: with a rank gone it can wait for that rank (Open MPI 4.1 under
     * --enable-recovery sometimes does, for minutes). A split that lost a rank ends without it. */
    if (!lost)
        MPI_Finalize();
}

void cdx_split_stats(const cdx_split *sp, uint64_t *bytes_sent, uint64_t *bytes_recv, double *wait_ms)
{
    *bytes_sent = sp->bytes_sent;
    *bytes_recv = sp->bytes_recv;
    *wait_ms = sp->wait_ms;
}

/* Whether rank r's process is gone: known only for a rank on this host (its pid is gone or a zombie). */
static bool rank_gone(const cdx_split *sp, int r)
{
    if (!sp->have_peers || strcmp(sp->peers[r].host, sp->host) != 0 || sp->peers[r].pid <= 0)
        return false;
    char path[64], st[256];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)sp->peers[r].pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return kill((pid_t)sp->peers[r].pid, 0) != 0 && errno == ESRCH;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = 0;
    const char *close = strrchr(st, ')'); /* "pid (comm) S ..." */
    return close && (close[2] == 'Z' || close[2] == 'X');
}

/* Names the ranks that are gone (or, with none known, all that could be) into err. */
static int lost(cdx_split *sp, const char *waiting, cdx_err *err)
{
    char names[256] = "";
    size_t o = 0;
    for (int r = 1; r < sp->size; r++)
        if (rank_gone(sp, r) && o < sizeof names - 32)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%d (pid %lld)", o ? ", " : "", r,
                                  (long long)sp->peers[r].pid);
    if (o)
        cdx_err_set(err, CDX_EIO, "split_rank_lost: rank %s of the split is gone while %s", names, waiting);
    else
        cdx_err_set(err, CDX_EIO, "split_rank_lost: no answer from ranks 1-%d of the split within %.0f s while %s "
                    "(a rank stopped answering)", sp->size - 1, sp->timeout_s, waiting);
    if (sp->rank == 0 && !sp->lost) {
        snprintf(sp->lost_msg, sizeof sp->lost_msg, "%.390s", err->msg);
        sp->lost = 1;
    }
    return CDX_EIO;
}

const char *cdx_split_lost(const cdx_split *sp) { return sp && sp->lost ? sp->lost_msg : NULL; }

static void nap(int spins)
{
    if (spins < 2000)
        return;
    struct timespec ts = { 0, spins < 20000 ? 20000 : 200000 };
    nanosleep(&ts, NULL);
}

/* Waits for a message from src with tag (MPI_ANY_*), and on rank 0 gives up past the timeout or when
 * a rank is gone. */
static int wait_msg(cdx_split *sp, int src, int tag, MPI_Status *status, const char *waiting, cdx_err *err)
{
    const double t0 = cdx_time_ms();
    double t_check = t0;
    for (int spins = 0;; spins++) {
        int flag = 0, rc = MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, status);
        if (rc != MPI_SUCCESS)
            return mpi_fail(err, rc, waiting);
        if (flag)
            break;
        nap(spins);
        if (sp->rank == 0 && (spins & 63) == 0) {
            const double t = cdx_time_ms();
            if (t - t_check > 50) {
                t_check = t;
                for (int r = 1; r < sp->size; r++)
                    if (rank_gone(sp, r))
                        return lost(sp, waiting, err);
            }
            if (t - t0 > sp->timeout_s * 1000)
                return lost(sp, waiting, err);
        }
    }
    if (sp->rank == 0)
        sp->wait_ms += cdx_time_ms() - t0;
    return CDX_OK;
}

/* Waits for the send rq to dst to complete; rank 0 gives up as wait_msg does (a large message waits
 * for its receiver). */
static int complete(cdx_split *sp, MPI_Request *rq, int dst, const char *what, cdx_err *err)
{
    const double t0 = cdx_time_ms();
    for (int spins = 0;; spins++) {
        int flag = 0, rc = MPI_Test(rq, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return mpi_fail(err, rc, what);
        if (flag)
            break;
        nap(spins);
        if (sp->rank == 0 && (spins & 63) == 0 &&
            (cdx_time_ms() - t0 > sp->timeout_s * 1000 || rank_gone(sp, dst))) {
            MPI_Cancel(rq);
            MPI_Request_free(rq);
            return lost(sp, what, err);
        }
    }
    if (sp->rank == 0)
        sp->wait_ms += cdx_time_ms() - t0;
    return CDX_OK;
}

static int post(cdx_split *sp, const void *data, size_t n, int dst, int tag, MPI_Request *rq, const char *what,
                cdx_err *err)
{
    if (n > INT32_MAX)
        return cdx_err_set(err, CDX_ERANGE, "a message of %zu bytes to rank %d", n, dst);
    int rc = MPI_Isend(data, (int)n, MPI_BYTE, dst, tag, MPI_COMM_WORLD, rq);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, what);
    sp->bytes_sent += n;
    return CDX_OK;
}

/* A send that returns once the message is gone. */
static int send_msg(cdx_split *sp, const void *data, size_t n, int dst, int tag, const char *what, cdx_err *err)
{
    MPI_Request rq;
    int rc = post(sp, data, n, dst, tag, &rq, what, err);
    return rc ? rc : complete(sp, &rq, dst, what, err);
}

/* The next outbox, its last message gone, with room for n bytes. */
static int outbox_take(cdx_split *sp, size_t n, outbox **ob, cdx_err *err)
{
    outbox *o = &sp->out[sp->out_next];
    int rc = o->rq != MPI_REQUEST_NULL ? complete(sp, &o->rq, o->dst, "sending on", err) : CDX_OK;
    if (rc)
        return rc;
    if (n > o->cap) {
        uint8_t *g = realloc(o->buf, n);
        if (!g)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for a message of %zu bytes", n);
        o->buf = g;
        o->cap = n;
    }
    sp->out_next = (sp->out_next + 1) % N_OUTBOX;
    *ob = o;
    return CDX_OK;
}

static int outbox_post(cdx_split *sp, outbox *o, size_t n, int dst, int tag, const char *what, cdx_err *err)
{
    o->dst = dst;
    return post(sp, o->buf, n, dst, tag, &o->rq, what, err);
}

/* Every message on its way gone (rank 0 gives up on a lost rank's); a rank past its loop waits at most
 * 2 s for each, then lets it go (its receiver may be gone). */
static void outbox_drain(cdx_split *sp)
{
    for (int i = 0; i < N_OUTBOX; i++) {
        outbox *o = &sp->out[i];
        if (o->rq == MPI_REQUEST_NULL)
            continue;
        cdx_err e = { 0 };
        if (sp->rank == 0) {
            if (sp->lost && rank_gone(sp, o->dst)) {
                MPI_Cancel(&o->rq);
                MPI_Request_free(&o->rq);
            } else
                complete(sp, &o->rq, o->dst, "sending on", &e);
            o->rq = MPI_REQUEST_NULL;
            continue;
        }
        const double t0 = cdx_time_ms();
        for (int spins = 0;; spins++) {
            int flag = 0;
            if (MPI_Test(&o->rq, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag)
                break;
            nap(spins);
            if (cdx_time_ms() - t0 > 2000) {
                MPI_Cancel(&o->rq);
                MPI_Request_free(&o->rq);
                break;
            }
        }
        o->rq = MPI_REQUEST_NULL;
    }
}

/* Receives the probed message into sp->buf; *n its bytes. */
static int recv_probed(cdx_split *sp, const MPI_Status *st, size_t *n, cdx_err *err)
{
    int count = 0;
    MPI_Get_count(st, MPI_BYTE, &count);
    if ((size_t)count + 1 > sp->cap) {
        uint8_t *g = realloc(sp->buf, (size_t)count + 1);
        if (!g)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for a message of %d bytes", count);
        sp->buf = g;
        sp->cap = (size_t)count + 1;
    }
    int rc = MPI_Recv(sp->buf, count, MPI_BYTE, st->MPI_SOURCE, st->MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "receiving");
    sp->buf[count] = 0;
    *n = (size_t)count;
    sp->bytes_recv += (size_t)count;
    return CDX_OK;
}

int cdx_split_hello(cdx_split *sp, const uint8_t build_id[32], uint64_t mem, cdx_split_peer *peers, cdx_err *err)
{
    cdx_split_peer me = { .mem = mem, .pid = (int64_t)getpid() };
    memcpy(me.build_id, build_id, 32);
    memcpy(me.host, sp->host, sizeof me.host);
    if (sp->rank != 0)
        return send_msg(sp, &me, sizeof me, 0, TAG_HELLO, "saying hello to rank 0", err);
    sp->peers[0] = me;
    for (int r = 1; r < sp->size; r++) {
        MPI_Status st;
        size_t n = 0;
        int rc = wait_msg(sp, r, TAG_HELLO, &st, "waiting for the ranks to start", err);
        if (!rc)
            rc = recv_probed(sp, &st, &n, err);
        if (rc)
            return rc;
        if (n != sizeof me)
            return cdx_err_set(err, CDX_EINVAL, "rank %d said hello in %zu bytes, not %zu: another build of caldrix", r,
                               n, sizeof me);
        memcpy(&sp->peers[r], sp->buf, sizeof me);
        sp->peers[r].host[sizeof me.host - 1] = 0;
    }
    sp->have_peers = true;
    if (peers)
        memcpy(peers, sp->peers, (size_t)sp->size * sizeof *peers);
    for (int r = 1; r < sp->size; r++)
        if (memcmp(sp->peers[r].build_id, build_id, 32) != 0)
            return cdx_err_set(err, CDX_EINVAL, "rank %d (host %s, pid %lld) runs another build of caldrix than rank 0: "
                               "every rank must run the same binary", r, sp->peers[r].host, (long long)sp->peers[r].pid);
    return CDX_OK;
}

int cdx_split_send_plan(cdx_split *sp, int status, const int64_t *bounds, const char *why, cdx_err *err)
{
    struct { int64_t status; int64_t bounds[MAX_RANKS + 1]; char why[WHY_LEN]; } msg = { .status = status };
    if (!status)
        memcpy(msg.bounds, bounds, (size_t)(sp->size + 1) * sizeof *bounds);
    snprintf(msg.why, sizeof msg.why, "%s", why ? why : "");
    if (!status)
        memcpy(sp->bounds, bounds, (size_t)(sp->size + 1) * sizeof *bounds);
    for (int r = 1; r < sp->size; r++) {
        int rc = send_msg(sp, &msg, sizeof msg, r, TAG_PLAN, "sending the plan", err);
        if (rc)
            return rc;
    }
    return CDX_OK;
}

int cdx_split_recv_plan(cdx_split *sp, int *status, int64_t *bounds, char *why, size_t cap, cdx_err *err)
{
    struct { int64_t status; int64_t bounds[MAX_RANKS + 1]; char why[WHY_LEN]; } msg;
    MPI_Status st;
    size_t n = 0;
    int rc = wait_msg(sp, 0, TAG_PLAN, &st, "waiting for the plan", err);
    if (!rc)
        rc = recv_probed(sp, &st, &n, err);
    if (rc)
        return rc;
    if (n != sizeof msg)
        return cdx_err_set(err, CDX_EINVAL, "rank 0 sent a plan of %zu bytes: another build of caldrix", n);
    memcpy(&msg, sp->buf, sizeof msg);
    msg.why[WHY_LEN - 1] = 0;
    *status = (int)msg.status;
    if (why && cap)
        snprintf(why, cap, "%s", msg.why);
    if (!msg.status) {
        memcpy(sp->bounds, msg.bounds, (size_t)(sp->size + 1) * sizeof *bounds);
        memcpy(bounds, msg.bounds, (size_t)(sp->size + 1) * sizeof *bounds);
    }
    return CDX_OK;
}

/* ---- batches ---- */

/* A batch message: int64 header[8] = { kind (1 batch, 0 stop, 2 a batch failed at an earlier rank: its
 * message follows the header), n, n_out, n_seq, n_ids, has_want },
 * int64 pos[n], int64 per sequence { n_blocks, rope_len }, int32 seq[n], int32 ids[n_ids] (padded
 * to 8 bytes), uint8 want[n] (padded), float x[n][n_embd]. */
typedef struct {
    size_t pos, seqinfo, seq, ids, want, x, end;
} layout;

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

static layout layout_of(int64_t n, int64_t n_seq, int64_t n_ids, int64_t E)
{
    layout l;
    l.pos = 64;
    l.seqinfo = l.pos + (size_t)n * 8;
    l.seq = l.seqinfo + (size_t)n_seq * 16;
    l.ids = l.seq + (size_t)n * 4;
    l.want = pad8(l.ids + (size_t)n_ids * 4);
    l.x = pad8(l.want + (size_t)n);
    l.end = l.x + (size_t)n * (size_t)E * 4;
    return l;
}

/* The batch sb as a message in a fresh outbox; *n its bytes. */
static int pack(cdx_split *sp, const cdx_stage_batch *sb, outbox **ob, size_t *n_bytes, cdx_err *err)
{
    int64_t n_ids = 0;
    for (int s = 0; s < sb->n_seq; s++) {
        if (!sb->seqs[s].ids)
            return cdx_err_set(err, CDX_EINVAL, "sequence %d of the batch has no block ids for the next stage", s);
        n_ids += sb->seqs[s].n_blocks;
    }
    const layout l = layout_of(sb->n, sb->n_seq, n_ids, sp->n_embd);
    int rc = outbox_take(sp, l.end, ob, err);
    if (rc)
        return rc;
    uint8_t *b = (*ob)->buf;
    const int64_t hdr[8] = { 1, sb->n, sb->n_out, sb->n_seq, n_ids, sb->want_logits != NULL, 0, 0 };
    memcpy(b, hdr, sizeof hdr);
    memcpy(b + l.pos, sb->pos, (size_t)sb->n * 8);
    int64_t *si = (int64_t *)(b + l.seqinfo);
    int32_t *ids = (int32_t *)(b + l.ids);
    for (int s = 0; s < sb->n_seq; s++) {
        si[2 * s] = sb->seqs[s].n_blocks;
        si[2 * s + 1] = sb->seqs[s].rope_len;
        memcpy(ids, sb->seqs[s].ids, (size_t)sb->seqs[s].n_blocks * 4);
        ids += sb->seqs[s].n_blocks;
    }
    memcpy(b + l.seq, sb->seq, (size_t)sb->n * 4);
    for (int64_t i = 0; i < sb->n; i++)
        b[l.want + (size_t)i] = sb->want_logits ? sb->want_logits[i] : i == sb->n - 1;
    memcpy(b + l.x, sb->x, (size_t)(sb->n * sp->n_embd) * 4);
    *n_bytes = l.end;
    return CDX_OK;
}

/* Rank 0's send: the rows go to rank 1, and travel while rank 0 computes on. */
static int send_rank0(void *user, const cdx_stage_batch *sb, cdx_err *err)
{
    cdx_split *sp = user;
    if (sp->lost) /* the pipeline is broken: no batch goes through it again */
        return cdx_err_set(err, CDX_EIO, "%s", sp->lost_msg);
    outbox *o = NULL;
    size_t n = 0;
    int rc = pack(sp, sb, &o, &n, err);
    return rc ? rc : outbox_post(sp, o, n, 1, TAG_BATCH, "sending a batch to rank 1", err);
}

/* Rank 0's recv: the answer to the oldest batch sent: its wanted rows after the last layer, from the
 * last rank, or the error of the rank where it failed, handed down the line (batch_failed): each batch
 * gets one answer, in the order they were sent. */
static int recv_rank0(void *user, int64_t n_out, float *x_out, cdx_err *err)
{
    cdx_split *sp = user;
    if (sp->lost)
        return cdx_err_set(err, CDX_EIO, "%s", sp->lost_msg);
    MPI_Status st;
    size_t n = 0;
    int rc;
    if ((rc = wait_msg(sp, MPI_ANY_SOURCE, MPI_ANY_TAG, &st, "waiting for a batch's last hidden states", err)) ||
        (rc = recv_probed(sp, &st, &n, err)))
        return rc;
    if (st.MPI_TAG == TAG_ERR)
        return cdx_err_set(err, CDX_EIO, "%s", (const char *)sp->buf); /* "rank R of the split: ..." from rank R */
    const size_t want = (size_t)n_out * (size_t)sp->n_embd * sizeof(float);
    if (st.MPI_TAG != TAG_OUT || st.MPI_SOURCE != sp->size - 1 || n != want)
        return cdx_err_set(err, CDX_EIO, "rank %d of the split answered a batch with %zu bytes (tag %d); %zu bytes of "
                           "hidden states from rank %d expected", st.MPI_SOURCE, n, st.MPI_TAG, want, sp->size - 1);
    memcpy(x_out, sp->buf, n);
    return CDX_OK;
}

int cdx_split_stage_of(cdx_split *sp, cdx_stage *out, cdx_err *err)
{
    if (sp->rank != 0)
        return cdx_err_set(err, CDX_EINVAL, "rank %d runs a stage loop (cdx_split_stage_run), not the front end", sp->rank);
    *out = (cdx_stage){ .layer0 = sp->bounds[0], .layer1 = sp->bounds[1], .send = sp->size > 1 ? send_rank0 : NULL,
                        .recv = sp->size > 1 ? recv_rank0 : NULL, .n_micro = sp->size, .user = sp };
    return CDX_OK;
}

/* The start message: the pool and the model's fingerprint. */
typedef struct {
    int64_t n_blocks, max_tokens;
    uint32_t kv_type, lost; /* lost: a stop (no blocks) after a rank was lost */
    uint8_t fingerprint[32];
} start_msg;

int cdx_split_start(cdx_split *sp, const cdx_model *m, int64_t n_blocks, int64_t max_tokens, uint32_t kv_type,
                    cdx_err *err)
{
    const cdx_hparams *hp = cdx_model_hparams(m);
    sp->n_vocab = hp->n_vocab;
    sp->n_embd = hp->n_embd;
    start_msg msg = { .n_blocks = n_blocks, .max_tokens = max_tokens, .kv_type = kv_type };
    cdx_model_fingerprint(m, msg.fingerprint);
    for (int r = 1; r < sp->size; r++) {
        int rc = send_msg(sp, &msg, sizeof msg, r, TAG_START, "starting the stages", err);
        if (rc)
            return rc;
    }
    sp->started = true; /* from here a stop goes to the ranks' loops */
    for (int r = 1; r < sp->size; r++) {
        MPI_Status st;
        size_t n = 0;
        int rc = wait_msg(sp, r, TAG_START_ACK, &st, "waiting for the ranks to load their slices", err);
        if (!rc)
            rc = recv_probed(sp, &st, &n, err);
        if (rc)
            return rc;
        if (n > 0 && sp->buf[0])
            return cdx_err_set(err, CDX_EINVAL, "rank %d (host %s): %s", r, sp->peers[r].host, (const char *)sp->buf);
    }
    return CDX_OK;
}

void cdx_split_stop(cdx_split *sp)
{
    if (!sp || sp->rank != 0 || sp->size < 2)
        return;
    const int64_t hdr[8] = { 0, sp->lost ? 1 : 0 }; /* kind 0: stop; then whether a rank was lost */
    const start_msg msg = { .lost = sp->lost ? 1 : 0 };
    outbox_drain(sp); /* the stop follows the last batch on each line */
    for (int r = 1; r < sp->size; r++) { /* to each rank: one that failed must not hold up the others */
        cdx_err err = { 0 };
        if (sp->lost && rank_gone(sp, r))
            continue;
        if (sp->started) /* every rank is in its loop (or has left it) */
            send_msg(sp, hdr, sizeof hdr, r, TAG_BATCH, "stopping the stages", &err);
        else /* every rank waits for its start message; a start of no blocks ends it */
            send_msg(sp, &msg, sizeof msg, r, TAG_START, "stopping the stages", &err);
    }
    sp->started = false;
}

/* ---- a later stage ---- */

typedef struct {
    cdx_split *sp;
    const cdx_model *m;
    bool last;
    int64_t n_blocks;
    uint32_t kv_type;
    size_t block_bytes;
    void **kb, **vb;         /* [n_blocks], allocated on first use */
    void **tab;              /* the batch's block pointers: K then V per sequence */
    size_t tab_cap;
    cdx_kv_seq *seqs;
    float *x_out;            /* the last stage's wanted rows for rank 0 */
    size_t x_out_cap;
} stage_rt;

/* A middle stage's send: the rows go on to the next rank (sb points into the message this stage read). */
static int send_middle(void *user, const cdx_stage_batch *sb, cdx_err *err)
{
    stage_rt *rt = user;
    outbox *o = NULL;
    size_t n = 0;
    int rc = pack(rt->sp, sb, &o, &n, err);
    return rc ? rc : outbox_post(rt->sp, o, n, rt->sp->rank + 1, TAG_BATCH, "sending a batch on", err);
}

static int stage_batch(stage_rt *rt, size_t n_bytes, cdx_forward_ctx *fc, int64_t max_tokens, cdx_err *err)
{
    cdx_split *sp = rt->sp;
    const uint8_t *b = sp->buf;
    int64_t hdr[8];
    if (n_bytes < sizeof hdr)
        return cdx_err_set(err, CDX_EINVAL, "a batch message of %zu bytes", n_bytes);
    memcpy(hdr, b, sizeof hdr);
    const int64_t n = hdr[1], n_out = hdr[2], n_seq = hdr[3], n_ids = hdr[4];
    if (n <= 0 || n > max_tokens || n_seq <= 0 || n_seq > n || n_out < 0 || n_out > n || n_ids < 0 ||
        n_ids > n_seq * rt->n_blocks)
        return cdx_err_set(err, CDX_EINVAL, "a batch of %lld tokens, %lld sequences, %lld block ids (this stage takes "
                           "1..%lld tokens and %lld blocks a sequence)", (long long)n, (long long)n_seq,
                           (long long)n_ids, (long long)max_tokens, (long long)rt->n_blocks);
    const layout l = layout_of(n, n_seq, n_ids, sp->n_embd);
    if (l.end != n_bytes)
        return cdx_err_set(err, CDX_EINVAL, "a batch message of %zu bytes; its header says %zu", n_bytes, l.end);
    const int64_t *si = (const int64_t *)(b + l.seqinfo);
    const int32_t *ids = (const int32_t *)(b + l.ids);
    for (int64_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= rt->n_blocks)
            return cdx_err_set(err, CDX_EINVAL, "block id %d; the pool has %lld", ids[i], (long long)rt->n_blocks);
    if ((size_t)n_ids * 2 > rt->tab_cap || (size_t)n_seq > rt->tab_cap) {
        size_t c = (size_t)(n_ids * 2 > n_seq ? n_ids * 2 : n_seq) + 16;
        void **t = realloc(rt->tab, c * sizeof *t);
        cdx_kv_seq *s = t ? realloc(rt->seqs, c * sizeof *s) : NULL;
        if (t)
            rt->tab = t;
        if (s)
            rt->seqs = s;
        if (!t || !s)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        rt->tab_cap = c;
    }
    const cdx_hparams *hp = cdx_model_hparams(rt->m);
    const int64_t kvd = hp->n_head_kv * hp->head_dim;
    int64_t o = 0;
    for (int64_t s = 0; s < n_seq; s++) {
        const int64_t nb = si[2 * s];
        if (nb < 0 || o + nb > n_ids)
            return cdx_err_set(err, CDX_EINVAL, "sequence %lld names %lld blocks", (long long)s, (long long)nb);
        void **kt = rt->tab + 2 * o, **vt = kt + nb;
        for (int64_t i = 0; i < nb; i++) {
            const int32_t id = ids[o + i];
            if (!rt->kb[id] && (!(rt->kb[id] = malloc(rt->block_bytes)) || !(rt->vb[id] = malloc(rt->block_bytes))))
                return cdx_err_set(err, CDX_ENOMEM, "out of memory for KV block %d", id);
            kt[i] = rt->kb[id];
            vt[i] = rt->vb[id];
        }
        rt->seqs[s] = (cdx_kv_seq){ .k = kt, .v = vt, .n_blocks = nb, .block = CDX_KV_BLOCK,
                                    .layer_stride = (size_t)CDX_KV_BLOCK * (size_t)kvd, .type = rt->kv_type,
                                    .rope_len = si[2 * s + 1], .ids = ids + o };
        o += nb;
    }
    if (o != n_ids)
        return cdx_err_set(err, CDX_EINVAL, "the sequences name %lld blocks of %lld", (long long)o, (long long)n_ids);
    const int32_t *seq = (const int32_t *)(b + l.seq);
    const bool *want = hdr[5] ? (const bool *)(b + l.want) : NULL;
    for (int64_t i = 0; want && i < n; i++)
        if (b[l.want + (size_t)i] > 1)
            return cdx_err_set(err, CDX_EINVAL, "want_logits of token %lld is %u", (long long)i, b[l.want + (size_t)i]);
    if (rt->last) {
        const size_t need = (size_t)(n_out > 0 ? n_out : 1) * (size_t)hp->n_embd;
        if (need > rt->x_out_cap) {
            float *g = realloc(rt->x_out, need * sizeof *g);
            if (!g)
                return cdx_err_set(err, CDX_ENOMEM, "out of memory for %lld hidden rows", (long long)n_out);
            rt->x_out = g;
            rt->x_out_cap = need;
        }
    }
    int64_t n_want = 0;
    for (int64_t i = 0; i < n; i++)
        n_want += want ? want[i] : i == n - 1;
    if (n_want != n_out)
        return cdx_err_set(err, CDX_EINVAL, "a batch of %lld wanted rows says %lld", (long long)n_want, (long long)n_out);
    const cdx_batch bt = { .n = n, .seq = seq, .pos = (const int64_t *)(b + l.pos), .want_logits = want,
                           .x_in = (const float *)(b + l.x), .x_out = rt->last ? rt->x_out : NULL };
    int rc = cdx_forward_seqs(fc, rt->seqs, (int)n_seq, &bt, NULL, err);
    if (rc || !rt->last)
        return rc;
    const size_t out_bytes = (size_t)n_out * (size_t)hp->n_embd * sizeof(float);
    outbox *ob = NULL;
    if ((rc = outbox_take(sp, out_bytes, &ob, err)))
        return rc;
    memcpy(ob->buf, rt->x_out, out_bytes);
    return outbox_post(sp, ob, out_bytes, 0, TAG_OUT, "sending the last hidden states to rank 0", err);
}

static void stage_rt_free(stage_rt *rt)
{
    for (int64_t i = 0; rt->kb && i < rt->n_blocks; i++) {
        free(rt->kb[i]);
        free(rt->vb[i]);
    }
    free(rt->kb);
    free(rt->vb);
    free(rt->tab);
    free(rt->seqs);
    free(rt->x_out);
}

/* Tells rank 0 what failed here (best effort: rank 0 may be gone). */
static void tell_rank0(cdx_split *sp, int tag, const char *msg)
{
    cdx_err e2 = { 0 };
    send_msg(sp, msg, strlen(msg) + 1, 0, tag, "telling rank 0", &e2);
}

/* A batch failed here (msg says why): its one answer goes to rank 0 in the order of the batches. The last
 * rank tells rank 0; a middle rank hands it on down the line (kind 2), so that it cannot overtake the
 * answers of the batches before it, which rank 0 takes back in order (several batches are in flight). */
static void batch_failed(cdx_split *sp, const char *msg)
{
    if (sp->rank == sp->size - 1) {
        tell_rank0(sp, TAG_ERR, msg);
        return;
    }
    const size_t len = strlen(msg) + 1;
    outbox *o = NULL;
    cdx_err e2 = { 0 };
    if (outbox_take(sp, 64 + len, &o, &e2)) {
        tell_rank0(sp, TAG_ERR, msg); /* the line is broken: rank 0 hears it at least */
        return;
    }
    const int64_t hdr[8] = { 2 };
    memcpy(o->buf, hdr, sizeof hdr);
    memcpy(o->buf + 64, msg, len);
    if (outbox_post(sp, o, 64 + len, sp->rank + 1, TAG_BATCH, "handing a failure on", &e2))
        tell_rank0(sp, TAG_ERR, msg);
}

int cdx_split_stage_run(cdx_split *sp, const cdx_model *m, int n_threads, const cdx_kernels *k, cdx_err *err)
{
    if (sp->rank == 0)
        return cdx_err_set(err, CDX_EINVAL, "rank 0 is the front end: it runs no stage loop");
    char why[WHY_LEN] = "";
    if (!m) /* the model did not load here: rank 0 hears why when it starts the stages */
        snprintf(why, sizeof why, "%.500s", err->msg);
    const cdx_hparams *hp = m ? cdx_model_hparams(m) : NULL;
    sp->n_vocab = hp ? hp->n_vocab : 0;
    sp->n_embd = hp ? hp->n_embd : 0;
    MPI_Status st;
    size_t n = 0;
    int rc = wait_msg(sp, 0, TAG_START, &st, "waiting for rank 0 to start", err);
    if (!rc)
        rc = recv_probed(sp, &st, &n, err);
    if (rc)
        return rc;
    start_msg msg;
    if (n != sizeof msg) {
        tell_rank0(sp, TAG_START_ACK, "a start message of another build of caldrix");
        return cdx_err_set(err, CDX_EINVAL, "rank 0 sent a start message of %zu bytes: another build of caldrix", n);
    }
    memcpy(&msg, sp->buf, sizeof msg);
    if (msg.n_blocks == 0 && msg.lost)
        sp->lost = 1;
    if (msg.n_blocks == 0) /* rank 0 stopped before it started */
        return *why ? CDX_EINVAL : CDX_OK;
    if (*why) {
        tell_rank0(sp, TAG_START_ACK, why);
        return CDX_EINVAL;
    }
    uint8_t fp[32];
    cdx_model_fingerprint(m, fp);
    stage_rt rt = { .sp = sp, .m = m, .last = sp->rank == sp->size - 1, .n_blocks = msg.n_blocks, .kv_type = msg.kv_type };
    const int64_t l0 = sp->bounds[sp->rank], l1 = sp->bounds[sp->rank + 1];
    const cdx_stage stage = { .layer0 = l0, .layer1 = l1, .send = rt.last ? NULL : send_middle, .user = &rt };
    const size_t elem = msg.kv_type == CDX_TYPE_F32 ? 4 : 2;
    rt.block_bytes = (size_t)(l1 - l0) * CDX_KV_BLOCK * (size_t)(hp->n_head_kv * hp->head_dim) * elem;
    cdx_forward_ctx *fc = NULL;
    if (memcmp(fp, msg.fingerprint, 32) != 0)
        snprintf(why, sizeof why, "its model is not rank 0's (the model fingerprints differ): every rank must open the "
                 "same model");
    else if (msg.n_blocks < 0 || msg.n_blocks > (1 << 24) || msg.max_tokens <= 0 ||
             (msg.kv_type != CDX_TYPE_F32 && msg.kv_type != CDX_TYPE_F16 && msg.kv_type != CDX_TYPE_BF16))
        snprintf(why, sizeof why, "a pool of %lld blocks, batches of %lld tokens, KV type %u: not a pool this stage makes",
                 (long long)msg.n_blocks, (long long)msg.max_tokens, msg.kv_type);
    else if (!(rt.kb = calloc((size_t)msg.n_blocks, sizeof *rt.kb)) || !(rt.vb = calloc((size_t)msg.n_blocks, sizeof *rt.vb)))
        snprintf(why, sizeof why, "out of memory for a pool of %lld blocks", (long long)msg.n_blocks);
    else if ((rc = cdx_forward_ctx_create(m, msg.max_tokens, n_threads, k, &fc, err)) ||
             (rc = cdx_forward_ctx_set_stage(fc, &stage, err)))
        snprintf(why, sizeof why, "%.500s", err->msg);
    tell_rank0(sp, TAG_START_ACK, why);
    if (*why) {
        cdx_forward_ctx_free(fc);
        stage_rt_free(&rt);
        return cdx_err_set(err, CDX_EINVAL, "%s", why);
    }
    for (;;) {
        /* batches come from the rank before; the stop from rank 0, to every rank, once no batch is on its way */
        if ((rc = wait_msg(sp, MPI_ANY_SOURCE, TAG_BATCH, &st, "waiting for a batch", err)) ||
            (rc = recv_probed(sp, &st, &n, err)))
            break;
        int64_t kind = 0;
        if (n >= 8)
            memcpy(&kind, sp->buf, 8);
        if (kind == 0 && st.MPI_SOURCE == 0) {
            int64_t was_lost = 0;
            if (n >= 16)
                memcpy(&was_lost, sp->buf + 8, 8);
            if (was_lost)
                sp->lost = 1;
            break;
        }
        if (st.MPI_SOURCE != sp->rank - 1) {
            char e[200];
            snprintf(e, sizeof e, "rank %d of the split: a batch from rank %d; batches come from rank %d", sp->rank,
                     st.MPI_SOURCE, sp->rank - 1);
            batch_failed(sp, e);
            continue;
        }
        if (kind == 2) { /* a batch that failed at an earlier rank: its answer goes on in its place */
            char e[600];
            snprintf(e, sizeof e, "%.590s", n > 64 ? (const char *)sp->buf + 64 : "a batch failed at an earlier rank");
            batch_failed(sp, e);
            continue;
        }
        if ((rc = stage_batch(&rt, n, fc, msg.max_tokens, err))) {
            char e[600];
            snprintf(e, sizeof e, "rank %d of the split: %.560s", sp->rank, err->msg);
            batch_failed(sp, e);
            rc = CDX_OK; /* rank 0 fails that batch's requests; the stage goes on */
        }
    }
    outbox_drain(sp);
    cdx_forward_ctx_free(fc);
    stage_rt_free(&rt);
    return rc;
}

#endif /* CDX_HAVE_MPI */
