/* The scheduler: the run lists, admission with the cached prefix, preemption when the pool is dry,
 * and the round (docs/engine.md, "Requests and rounds" and "Admission"). */
#include "engine/engine_impl.h"
#include "caldrix/pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The logits rows of a round whose requests want logprobs, on the forward pass's threads (a
 * whole-vocabulary pass of exp per row: 8 streams spent ~10 % of a decode round on it on one
 * thread, so rows nobody asked for are skipped). Each row is one call of cdx_logsumexp (max + log
 * of the sum of expf(x - max) in double), whichever thread runs it: the same bits. */
typedef struct {
    const cdx_kernels *k;
    const float *logits;
    int64_t nv;
    const int *rows;
    int n;
    double *lse;
} lse_job;

static void lse_part(void *arg, int ith, int nth)
{
    const lse_job *j = arg;
    for (int k = ith; k < j->n; k += nth)
        j->lse[j->rows[k]] = cdx_logsumexp(j->k, j->logits + (size_t)j->rows[k] * (size_t)j->nv, j->nv);
}

/* lse[rows[k]] = the log-sum-exp of logits row rows[k], k < n: on the pass's threads when there are
 * several rows */
static void lse_rows(cdx_engine *e, const float *logits, const int *rows, int n, double *lse)
{
    lse_job lj = { cdx_forward_ctx_kernels(e->fc), logits, e->hp->n_vocab, rows, n, lse };
    if (n > 1)
        cdx_pool_run(cdx_forward_ctx_pool(e->fc), lse_part, &lj);
    else
        lse_part(&lj, 0, 1);
}


/* ---- the round target ---- */

int64_t eng_prefill_budget(double a, double b, double target_ms, int64_t n_dec, int64_t lo, int64_t hi)
{
    if (lo > hi)
        lo = hi;
    if (!(b > 0))
        return hi;
    /* where the decoding tokens alone take more than half the target, prompts still get as much of
     * the round as they do: rounds of a few prompt tokens would read every weight again and again
     * for little (on two loaded cores a 16-stream round took 1 s: a 16-token floor halved the
     * throughput and doubled the time to first token) */
    const double dec_ms = a + b * (double)n_dec, t = target_ms > 2 * dec_ms ? target_ms : 2 * dec_ms;
    const double fit = floor((t - a) / b) - (double)n_dec;
    return fit < (double)lo ? lo : fit > (double)hi ? hi : (int64_t)fit;
}

/* ---- lists ---- */

static void list_remove(seq **head, seq *s)
{
    while (*head != s)
        head = &(*head)->next;
    *head = s->next;
    s->next = NULL;
}

static void list_append(seq **head, seq *s)
{
    while (*head)
        head = &(*head)->next;
    s->next = NULL;
    *head = s;
}

/* ---- the round ---- */

/* Ends the cancelled requests of a list. */
static void end_cancelled(cdx_engine *e, seq **head, int64_t *count)
{
    for (seq **p = head; *p;) {
        seq *s = *p;
        if (s->cancelled && !s->in_flight) { /* one in flight ends when its group does */
            *p = s->next;
            (*count)--;
            eng_seq_finish(e, s, CDX_FINISH_CANCELLED, NULL);
        } else {
            p = &s->next;
        }
    }
}

/* Takes what other threads handed in: new requests to the waiting list, cancellations. */
static void take_inbox(cdx_engine *e)
{
    pthread_mutex_lock(&e->mu);
    seq *in = e->inbox;
    e->inbox = e->inbox_tail = NULL;
    e->n_waiting += e->n_inbox;
    e->n_inbox = 0;
    for (size_t i = 0; i < e->n_cancels; i++) {
        const uint64_t id = e->cancels[i];
        for (seq *s = in; s; s = s->next)
            s->cancelled |= s->id == id;
        for (seq *s = e->waiting; s; s = s->next)
            s->cancelled |= s->id == id;
        for (seq *s = e->running; s; s = s->next)
            s->cancelled |= s->id == id;
    }
    e->n_cancels = 0;
    pthread_mutex_unlock(&e->mu);
    while (in) {
        seq *n = in->next;
        list_append(&e->waiting, in);
        in = n;
    }
    end_cancelled(e, &e->waiting, &e->n_waiting);
    end_cancelled(e, &e->running, &e->n_running);
}

/* Whether a running sequence is computing s's block i (the first s could not find) as part of its
 * own prompt: the same key, a block of its prompt, not computed yet. Then s waits for it rather than
 * computing it a second time: n requests with one prompt (a server's n > 1, or clients asking the
 * same thing at once) compute it once, and the others take it from the cache a round or two later.
 * Only prompt blocks count: a block still to be decoded would keep s waiting a token a round. */
static bool block_in_flight(cdx_engine *e, const seq *s, int64_t i)
{
    for (seq *r = e->running; r; r = r->next) {
        if ((i + 1) * CDX_KV_BLOCK > r->n_prompt || r->n_done >= (i + 1) * CDX_KV_BLOCK)
            continue;
        if (r->n_keys <= i) { /* r's keys up to block i, made now (they are the ones it registers later) */
            if (eng_seq_make_keys(r))
                continue;
            for (int64_t k = r->n_keys; k <= i; k++)
                eng_seq_block_key(r, k, k ? r->keys[k - 1] : r->root, r->keys[k]);
            r->n_keys = i + 1;
        }
        if (!memcmp(r->keys[i], s->keys[i], KEY_LEN))
            return true;
    }
    return false;
}

/* Admission of the oldest waiting request: its cached prefix is taken (whole blocks, never the
 * block of its last token, whose logits must be computed), and it runs when the pool can hold
 * the rest of what it has to compute now, unless a running request is computing its next block
 * (block_in_flight): then it waits for that, and so does the queue behind it. */
static bool admit_one(cdx_engine *e)
{
    seq *s = e->waiting;
    if (!s || e->n_running >= e->o.max_batch)
        return false;
    if (e->state_bytes && !s->state) {
        if (!(s->state = malloc(e->state_bytes)))
            return false; /* it waits; the next round tries again */
        cdx_model_state_reset(e->m, s->state);
    }
    int64_t reuse = 0;
    if (!e->hp->rope_pass && !eng_seq_make_keys(s)) { /* (a RoPE scaling by length: no prefix is shared) */
        const int64_t usable = (s->n_toks - 1) / CDX_KV_BLOCK;
        for (int64_t i = 0; i < usable; i++) {
            if (i >= s->n_keys) {
                eng_seq_block_key(s, i, i ? s->keys[i - 1] : s->root, s->keys[i]);
                s->n_keys = i + 1;
            }
            int32_t b = eng_table_find(e, s->keys[i]);
            if (b != NONE) {
                eng_pool_hold(e, b);
            } else if (!e->store || !kv_store_has(e->store, s->keys[i]) || (b = eng_pool_take(e)) == NONE) {
                break;
            } else if (kv_store_read(e->store, &e->shape, s->keys[i], e->blocks[b].k, e->blocks[b].v,
                                     e->state_bytes ? &e->blocks[b].snap : NULL)) {
                eng_pool_release(e, b); /* a bad file is gone; the block is computed */
                break;
            } else {
                eng_table_insert(e, b, s->keys[i]);
                e->blocks[b].stored = true;
                e->n_snaps += e->blocks[b].snap != NULL;
                e->t_store_r++;
            }
            if (eng_seq_push_block(s, e, b)) {
                eng_pool_release(e, b);
                break;
            }
            reuse++;
        }
    }
    if (reuse < s->n_keys && reuse < (s->n_toks - 1) / CDX_KV_BLOCK && block_in_flight(e, s, reuse)) {
        eng_seq_release_blocks(e, s);
        return false;
    }
    /* a hybrid model resumes only where a state snapshot was kept: the blocks after the last such
     * block go back (they stay cached) and are computed */
    while (e->state_bytes && reuse > 0 && !e->blocks[s->blk[reuse - 1]].snap) {
        eng_pool_release(e, s->blk[--s->n_blk]);
        reuse--;
    }
    if (e->state_bytes && reuse > 0)
        memcpy(s->state, e->blocks[s->blk[reuse - 1]].snap, e->state_bytes);
    const int64_t need = (s->n_toks + CDX_KV_BLOCK - 1) / CDX_KV_BLOCK - reuse;
    if (need > eng_pool_available(e)) {
        eng_seq_release_blocks(e, s);
        return false;
    }
    s->n_done = reuse * CDX_KV_BLOCK;
    s->n_registered = reuse;
    if (!s->admitted_once) {
        s->n_cached = s->n_done;
        e->t_prompt += (uint64_t)s->n_prompt;
        e->t_cached += (uint64_t)s->n_done;
        s->admitted_once = true;
    }
    e->waiting = s->next;
    e->n_waiting--;
    s->order = e->next_order++;
    list_append(&e->running, s);
    e->n_running++;
    return true;
}

/* The newest running request goes back to the front of the queue, its blocks to the pool. */
static void preempt_newest(cdx_engine *e)
{
    seq *newest = NULL;
    for (seq *s = e->running; s; s = s->next)
        if (!newest || s->order > newest->order)
            newest = s;
    if (!newest)
        return;
    list_remove(&e->running, newest);
    e->n_running--;
    eng_seq_release_blocks(e, newest);
    newest->next = e->waiting;
    e->waiting = newest;
    e->n_waiting++;
    e->t_preempt++;
}

static bool seq_is_running(const cdx_engine *e, const seq *x)
{
    for (const seq *s = e->running; s; s = s->next)
        if (s == x)
            return true;
    return false;
}

/* Blocks for s's positions up to (not including) end; preempts the newest others when the pool
 * is dry. Returns how far s can go (<= end); n_done when nothing could be had. */
static int64_t grow_to(cdx_engine *e, seq *s, int64_t end)
{
    while (s->n_blk * CDX_KV_BLOCK < end) {
        int32_t b = eng_pool_take(e);
        if (b == NONE) {
            /* preempt someone newer than s, else stop short */
            seq *newest = NULL;
            for (seq *x = e->running; x; x = x->next)
                if (x != s && x->order > s->order && (!newest || x->order > newest->order))
                    newest = x;
            if (!newest)
                break;
            preempt_newest(e);
            continue;
        }
        if (eng_seq_push_block(s, e, b)) {
            eng_pool_release(e, b);
            break;
        }
    }
    const int64_t cap = s->n_blk * CDX_KV_BLOCK;
    return end < cap ? end : cap;
}

static void snapshot(cdx_engine *e)
{
    /* every block is free (the stack), cached (the LRU) or held: no walk over the pool */
    const int64_t used = e->o.n_blocks - e->n_free - e->n_lru;
    pthread_mutex_lock(&e->mu);
    e->stats.blocks_used = used;
    e->stats.blocks_cached = e->n_lru;
    e->stats.blocks_free = e->n_free;
    e->stats.running = e->n_running;
    e->stats.waiting = e->n_waiting + e->n_inbox;
    e->stats.prompt_tokens = e->t_prompt;
    e->stats.cached_tokens = e->t_cached;
    e->stats.generated_tokens = e->t_generated;
    e->stats.preemptions = e->t_preempt;
    e->stats.rounds = e->t_rounds;
    e->stats.store_reads = e->t_store_r;
    e->stats.store_writes = e->t_store_w;
    e->stats.image_tiles_encoded = e->t_img_tiles;
    e->stats.image_encode_ms = e->t_img_ms;
    e->stats.spec_proposed = e->t_spec_prop;
    e->stats.spec_accepted = e->t_spec_acc;
    e->stats.spec_verifies = e->t_spec_verify;
    eng_cost_fit(e, &e->stats.round_fixed_ms, &e->stats.round_token_ms);
    e->stats.spec_requests = e->t_spec_req;
    e->stats.spec_turned_off = e->t_spec_off;
    e->stats.split_overlapped = e->t_overlap;
    pthread_mutex_unlock(&e->mu);
}

/* ---- a split model's pipeline across rounds ----
 * When two or more sequences decode and nothing else runs (no prompt chunk, no draft), rank 0 keeps up
 * to n_groups groups of them in flight: a round takes back and samples the oldest group (its logits
 * computed by the later ranks meanwhile), then begins that group's next token: rank 0's layers, sent
 * on without waiting, so rank 0 computes one group while the later ranks compute another. Each row is
 * the same ops in the same order as in one batch (batch invariance), so every request's tokens and
 * logprobs are those of a round over all of them; only the order of the events between requests
 * differs. Anything else (a prompt, a preemption, one sequence left) first ends every group in flight
 * and runs the round whole. */

/* Whether this round may run pipelined: every running sequence not in flight decodes, at least two
 * decode, and the pool holds each free one's next block. */
static bool pipe_ok(cdx_engine *e)
{
    if (e->n_groups < 2 || e->has_vision || e->hp->rope_pass)
        return false;
    int64_t n_dec = 0, need = 0;
    for (seq *s = e->running; s; s = s->next) {
        if (s->in_flight) {
            n_dec++;
            continue;
        }
        if (s->n_toks - s->n_done != 1 || s->cancelled || s->sp.on)
            return false;
        n_dec++;
        need += s->n_blk * CDX_KV_BLOCK < s->n_toks;
    }
    return n_dec >= 2 && need <= eng_pool_available(e);
}

/* Ends s (removed from the running list) with f. */
static void finish_running(cdx_engine *e, seq *s, cdx_finish f, const char *msg)
{
    list_remove(&e->running, s);
    e->n_running--;
    eng_seq_finish(e, s, f, msg);
}

/* Begins the next group: up to an even share of the decoding sequences, from the free ones (oldest
 * admitted first). Returns how many it took (0: none free), or the pass's error, after which they
 * have ended with it. */
static int pipe_begin(cdx_engine *e, int *n_taken, cdx_err *err)
{
    *n_taken = 0;
    int64_t share = (e->n_running + e->n_groups - 1) / e->n_groups; /* every running sequence decodes (pipe_ok) */
    share = share > e->fl_cap ? e->fl_cap : share;
    eng_flight *f = &e->fl[(e->fl_head + e->n_fl) % e->n_groups];
    int n = 0;
    f->any_lora = false;
    for (seq *s = e->running; s && n < share; s = s->next) {
        if (s->in_flight || s->n_toks - s->n_done != 1 || s->cancelled)
            continue;
        if (s->n_blk * CDX_KV_BLOCK < s->n_toks) { /* its next block; never a preemption here */
            const int32_t b = eng_pool_take(e);
            if (b == NONE)
                continue; /* it waits: the next round runs whole and preempts */
            if (eng_seq_push_block(s, e, b)) {
                eng_pool_release(e, b);
                continue;
            }
        }
        const int64_t p = s->n_toks - 1;
        s->sp.n_draft = 0;
        s->rope_len = s->n_toks;
        f->seqs[n] = s;
        f->kv[n] = (cdx_kv_seq){ .k = s->ktab, .v = s->vtab, .n_blocks = s->n_blk, .block = CDX_KV_BLOCK,
                                 .layer_stride = (size_t)CDX_KV_BLOCK * (size_t)e->kv_dim, .type = e->o.kv_type,
                                 .state = s->state, .rope_len = s->n_toks, .ids = s->blk };
        f->tok[n] = s->toks[p];
        f->seq[n] = n;
        f->pos[n] = p;
        f->want[n] = true;
        f->lora[n] = s->lora.n ? &s->lora : NULL;
        f->any_lora |= s->lora.n > 0;
        n++;
    }
    f->n = n;
    if (n == 0)
        return CDX_OK;
    const cdx_batch b = { .n = n, .tokens = f->tok, .seq = f->seq, .pos = f->pos, .want_logits = f->want,
                          .lora = f->any_lora ? f->lora : NULL };
    const int rc = cdx_forward_begin(e->fc, f->kv, n, &b, err);
    e->t_rounds++;
    if (rc) {
        for (int i = 0; i < n; i++)
            finish_running(e, f->seqs[i], CDX_FINISH_ERROR, err ? err->msg : "the forward pass failed");
        return rc;
    }
    for (int i = 0; i < n; i++)
        f->seqs[i]->in_flight = true;
    e->t_overlap += e->n_fl > 0;
    e->n_fl++;
    *n_taken = n;
    return CDX_OK;
}

/* Ends the oldest group in flight: its logits taken back, each sequence's token sampled and streamed
 * (a cancelled one ends here). An error ends its requests with it. */
static int pipe_end(cdx_engine *e, cdx_err *err)
{
    eng_flight *f = &e->fl[e->fl_head];
    e->fl_head = (e->fl_head + 1) % e->n_groups;
    e->n_fl--;
    const cdx_batch b = { .n = f->n, .tokens = f->tok, .seq = f->seq, .pos = f->pos, .want_logits = f->want,
                          .lora = f->any_lora ? f->lora : NULL };
    const int rc = cdx_forward_end(e->fc, f->kv, f->n, &b, f->logits, err);
    for (int i = 0; i < f->n; i++)
        f->seqs[i]->in_flight = false;
    if (rc) {
        for (int i = 0; i < f->n; i++)
            finish_running(e, f->seqs[i], CDX_FINISH_ERROR, err ? err->msg : "the forward pass failed");
        return rc;
    }
    int n_lse = 0;
    for (int i = 0; i < f->n; i++) {
        seq *s = f->seqs[i];
        s->n_done = s->n_toks;
        eng_seq_register_blocks(e, s);
        f->lse[i] = NAN;
        if (s->logprobs)
            f->lse_rows[n_lse++] = i;
    }
    lse_rows(e, f->logits, f->lse_rows, n_lse, f->lse);
    for (int i = 0; i < f->n; i++) {
        seq *s = f->seqs[i];
        const char *msg = NULL;
        if (s->cancelled) { /* cancelled while in flight: it ends now, its token not drawn */
            finish_running(e, s, CDX_FINISH_CANCELLED, NULL);
            continue;
        }
        const cdx_finish fin = eng_seq_on_logits(e, s, f->logits + (size_t)i * (size_t)e->hp->n_vocab, f->lse[i], &msg);
        if (fin != CDX_FINISH_NONE)
            finish_running(e, s, fin, msg);
    }
    return CDX_OK;
}

void eng_pipe_drain(cdx_engine *e)
{
    while (e->n_fl > 0) {
        eng_flight *f = &e->fl[e->fl_head];
        e->fl_head = (e->fl_head + 1) % e->n_groups;
        e->n_fl--;
        cdx_err ignored = { 0 };
        const cdx_batch b = { .n = f->n, .tokens = f->tok, .seq = f->seq, .pos = f->pos, .want_logits = f->want };
        cdx_forward_end(e->fc, f->kv, f->n, &b, NULL, &ignored);
        for (int i = 0; i < f->n; i++)
            f->seqs[i]->in_flight = false;
    }
}

/* A pipelined round: the oldest group ends when every group is in flight (or no sequence is free),
 * then groups begin while there is room and a free sequence. */
static int pipe_round(cdx_engine *e, cdx_err *err)
{
    int rc = CDX_OK;
    bool any_free = false;
    for (seq *s = e->running; s && !any_free; s = s->next)
        any_free = !s->in_flight;
    if (e->n_fl == e->n_groups || (e->n_fl > 0 && !any_free))
        rc = pipe_end(e, err);
    while (e->n_fl < e->n_groups) {
        int taken = 0;
        cdx_err e2 = { 0 };
        const int r = pipe_begin(e, &taken, rc ? &e2 : err);
        if (!rc)
            rc = r;
        if (r || taken == 0)
            break;
    }
    return rc;
}

int cdx_engine_step(cdx_engine *e, cdx_err *err)
{
    take_inbox(e);
    while (admit_one(e))
        ;
    if (pipe_ok(e)) {
        const int prc = pipe_round(e, err);
        snapshot(e);
        return prc;
    }
    if (e->n_fl > 0) { /* the round runs whole: every group in flight ends first */
        int prc = CDX_OK;
        while (e->n_fl > 0) {
            cdx_err e2 = { 0 };
            const int r = pipe_end(e, prc ? &e2 : err);
            prc = prc ? prc : r;
        }
        if (prc) {
            snapshot(e);
            return prc;
        }
        take_inbox(e); /* the sequences that ended make room */
        while (admit_one(e))
            ;
    }
    /* the batch: decoding sequences first (oldest first), then prompt chunks */
    int64_t n = 0, budget = e->o.token_budget, dec_left = 0;
    int n_seq = 0, n_logits = 0;
    bool any_lora = false;
    for (int pass = 0; pass < 2; pass++) {
        for (seq *s = e->running; pass == 0 && s; s = s->next)
            dec_left += s->n_toks - s->n_done == 1; /* decoding sequences still to place: drafts leave them room */
        /* with decoding tokens placed and a round target, prompts get what the measured rates fit in
         * the rest of it (at least as much time as the decoding tokens take, and a block), the oldest
         * admitted first, so a long prompt is cut across rounds and no decoding stream waits for a
         * whole budget of prompts */
        if (pass == 1 && n > 0 && e->o.max_round_ms > 0) {
            double a, b;
            eng_cost_fit(e, &a, &b);
            budget = eng_prefill_budget(a, b, e->o.max_round_ms, n, CDX_KV_BLOCK, budget);
        }
        for (seq *s = e->running; s && budget > 0;) {
            seq *next = s->next;
            /* LongRoPE past the original length: every cached position is computed again */
            if (s->n_done > 0 && cdx_model_rope_restart(e->m, s->rope_len, s->n_toks))
                eng_seq_release_blocks(e, s);
            const int64_t left = s->n_toks - s->n_done;
            const bool decoding = left == 1;
            if (left <= 0 || decoding != (pass == 0)) {
                s = next;
                continue;
            }
            dec_left -= decoding;
            s->sp.n_draft = 0;
            int64_t want = left < budget ? left : budget;
            if (e->state_bytes && !decoding) { /* end a chunk where the prompt's snapshot is taken */
                const int64_t pb = eng_next_snap(s);
                if (pb > s->n_done && pb < s->n_done + want)
                    want = pb - s->n_done;
            }
            const int64_t end = grow_to(e, s, s->n_done + want);
            /* grow_to may have preempted sequences already placed in this batch */
            if (n_seq > 0) {
                int keep = 0;
                for (int i = 0; i < n_seq; i++)
                    keep += seq_is_running(e, e->b_seqs[i]);
                if (keep != n_seq) { /* rebuild from scratch: rare (the pool ran dry) */
                    n = 0; n_seq = 0; n_logits = 0; budget = e->o.token_budget; pass = -1; dec_left = 0;
                    break;
                }
            }
            if (!seq_is_running(e, s)) {
                s = next;
                continue;
            }
            if (end <= s->n_done) {
                s = next;
                continue;
            }
            /* a decoding request's draft follows its last token, in budget the other decoding requests
             * do not need and in free blocks (never a preemption, never a cached prefix's block) */
            int64_t last = end, spare = budget - 1 - dec_left;
            const int64_t room = e->n_free * CDX_KV_BLOCK + s->n_blk * CDX_KV_BLOCK - end;
            if (decoding && s->sp.on && eng_spec_draft(e, s, spare < room ? spare : room) > 0) {
                while (s->n_blk * CDX_KV_BLOCK < end + s->sp.n_draft) {
                    const int32_t b = eng_pool_take(e);
                    if (b == NONE)
                        break;
                    if (eng_seq_push_block(s, e, b)) {
                        eng_pool_release(e, b);
                        break;
                    }
                }
                if (end + s->sp.n_draft > s->n_blk * CDX_KV_BLOCK)
                    s->sp.n_draft = (int)(s->n_blk * CDX_KV_BLOCK - end);
                last = end + s->sp.n_draft;
            }
            const int si = n_seq++;
            e->b_seqs[si] = s;
            e->b_kv[si] = (cdx_kv_seq){ .k = s->ktab, .v = s->vtab, .n_blocks = s->n_blk, .block = CDX_KV_BLOCK,
                                        .layer_stride = (size_t)CDX_KV_BLOCK * (size_t)e->kv_dim,
                                        .type = e->o.kv_type, .state = s->state, .rope_len = s->n_toks,
                                        .ids = s->blk };
            s->rope_len = s->n_toks;
            for (int64_t p = s->n_done; p < last; p++) {
                if (eng_seq_image_row(e, s, p, &e->b_embd[n], err)) {
                    /* the image cannot be encoded: this request ends, the batch is built again */
                    list_remove(&e->running, s);
                    e->n_running--;
                    eng_seq_finish(e, s, CDX_FINISH_ERROR, err ? err->msg : "the image could not be encoded");
                    n = 0; n_seq = 0; n_logits = 0; budget = e->o.token_budget; pass = -1; dec_left = 0;
                    goto rebuild;
                }
                e->b_tok[n] = p < s->n_toks ? s->toks[p] : s->sp.draft[p - s->n_toks];
                e->b_seq[n] = si;
                e->b_lora[n] = s->lora.n ? &s->lora : NULL;
                any_lora |= s->lora.n > 0;
                e->b_pos[n] = p;
                e->b_want[n] = p >= s->n_toks - 1; /* the last token, then each guess */
                if (e->b_want[n]) {
                    e->b_logit_rows[n_logits] = p == s->n_toks - 1 ? 1 + s->sp.n_draft : 0;
                    e->b_logit_seq[n_logits++] = s;
                }
                n++;
            }
            budget -= last - s->n_done;
            s = next;
        }
    rebuild:;
    }
    int rc = CDX_OK;
    const double t_round = cdx_time_ms();
    if (n > 0) {
        cdx_batch b = { .n = n, .tokens = e->b_tok, .seq = e->b_seq, .pos = e->b_pos, .want_logits = e->b_want,
                        .embd = e->has_vision ? e->b_embd : NULL, .lora = any_lora ? e->b_lora : NULL };
        rc = cdx_forward_seqs(e->fc, e->b_kv, n_seq, &b, e->logits, err);
        e->t_rounds++;
        if (rc) {
            for (int i = 0; i < n_seq; i++) {
                list_remove(&e->running, e->b_seqs[i]);
                e->n_running--;
                eng_seq_finish(e, e->b_seqs[i], CDX_FINISH_ERROR, err ? err->msg : "the forward pass failed");
            }
        } else {
            /* what each sequence computed (a draft's positions count once its guesses are kept);
             * full blocks become findable */
            for (int64_t i = 0; i < n; i++) {
                seq *s = e->b_seqs[e->b_seq[i]];
                s->n_done = e->b_pos[i] < s->n_toks ? e->b_pos[i] + 1 : s->n_toks;
            }
            for (int i = 0; i < n_seq; i++) {
                eng_seq_register_blocks(e, e->b_seqs[i]);
                eng_seq_snapshot(e, e->b_seqs[i]);
            }
            int n_lse = 0;
            for (int i = 0; i < n_logits; i++) {
                e->b_lse[i] = NAN;
                if (e->b_logit_seq[i]->logprobs)
                    e->b_lse_rows[n_lse++] = i;
            }
            lse_rows(e, e->logits, e->b_lse_rows, n_lse, e->b_lse);
            /* each sequence samples its rows in order: its last token's, then one after each guess
             * as long as the guess is the token its sampler drew (the same draw plain decoding
             * makes there), so it stops at the first guess it did not draw, with the token it drew */
            for (int i = 0; i < n_logits;) {
                seq *s = e->b_logit_seq[i];
                const int rows = e->b_logit_rows[i];
                const char *msg = NULL;
                cdx_finish f = CDX_FINISH_NONE;
                int kept = 0;
                for (int r = 0; r < rows; r++) {
                    f = eng_seq_on_logits(e, s, e->logits + (size_t)(i + r) * (size_t)e->hp->n_vocab, e->b_lse[i + r],
                                          &msg);
                    if (f != CDX_FINISH_NONE || r == rows - 1 || s->toks[s->n_toks - 1] != s->sp.draft[r])
                        break;
                    kept++;
                    s->n_done++; /* the guess's K/V is the kept token's */
                }
                i += rows;
                if (rows > 1) { /* the kept guesses' full blocks become findable */
                    eng_spec_settle(e, s, kept);
                    eng_seq_register_blocks(e, s);
                }
                if (f != CDX_FINISH_NONE) {
                    list_remove(&e->running, s);
                    e->n_running--;
                    eng_seq_finish(e, s, f, msg);
                } else if (rows > 1) {
                    /* blocks past the next token go back (they hold only guesses not kept, never keyed) */
                    while (s->n_blk > 0 && (s->n_blk - 1) * CDX_KV_BLOCK >= s->n_toks)
                        eng_pool_release(e, s->blk[--s->n_blk]);
                }
            }
        }
    }
    if (n > 0 && rc == CDX_OK)
        eng_spec_round(e, n, cdx_time_ms() - t_round);
    snapshot(e);
    return rc;
}
