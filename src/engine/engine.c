/* The engine: requests over one model, a paged KV pool with prefix sharing, continuous batching.
 * The contract is in include/caldrix/engine.h; this file is its one implementation.
 *
 * A sequence is its tokens (prompt, then what it generated) and a block table; n_done of its
 * positions have K/V in the blocks. Each round every running sequence with one token left to
 * compute (decoding) adds it, then sequences with more (prompts, or a preempted sequence coming
 * back) add chunks up to the token budget, all in one cdx_forward_seqs. A sequence whose last
 * token was computed samples the next one. The vLLM scheduling rules, in a CPU engine's sizes. */
#include "engine/engine_grammar.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"
#include "caldrix/pool.h"
#include "caldrix/tokenizer.h"
#include "kv_store.h"

#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KEY_LEN 32
#define IMAGE_CACHE 8              /* images whose features the engine keeps */
#define NONE (-1)

typedef struct kv_block {
    void *k, *v;               /* [n_layer][CDX_KV_BLOCK][kv_dim] elements of kv_type each; NULL until first use */
    int32_t ref;               /* sequences holding it */
    bool keyed;                /* in the prefix table (full, with a key) */
    bool stored;               /* its key's file is in the prefix store */
    uint8_t key[KEY_LEN];
    int32_t hnext;             /* prefix table chain */
    int32_t prev, next;        /* LRU list of keyed blocks no sequence holds */
    void *snap;                /* a hybrid model's recurrent state after the block's last position (keyed
                                * blocks only), or NULL: a prefix may resume only after a block with one */
} kv_block;

typedef struct seq {
    uint64_t id;
    void *user;
    cdx_event_fn on_event;
    int32_t *toks;             /* prompt, then generated tokens */
    int64_t n_toks, n_prompt;
    size_t cap_toks;
    int64_t n_done;            /* positions with K/V in the blocks */
    int32_t *blk;              /* block table (pool indices) */
    void **ktab, **vtab;       /* the same as pointers, for the forward pass */
    int64_t n_blk, cap_blk;
    uint8_t (*keys)[KEY_LEN];  /* keys[i]: block i's prefix key, for i < n_keys */
    int64_t n_keys, cap_keys;
    int64_t n_registered;      /* blocks offered to the prefix table so far */
    int64_t max_tokens, n_gen, n_cached;
    bool ignore_eos, skip_special, cancelled, admitted_once;
    bool logprobs;             /* the request wants logprobs (asked, or top_logprobs > 0) */
    int n_top;
    int32_t *top_ids;
    float *top_logits, *top_lp;
    cdx_sampler *smp;
    const cdx_grammar *grammar; /* borrowed from the request, or NULL */
    cdx_matcher *matcher;      /* its state, made on the first logits */
    char **stop;
    int n_stop;
    size_t max_stop;
    cdx_tok_stream ts;
    char *text;                /* all generated text (stop strings are matched on it) */
    size_t n_text, cap_text, n_emitted;
    char *piece;               /* the last token's piece (cdx_event.piece) */
    size_t n_piece, cap_piece;
    bool piece_first;
    int64_t n_raw;             /* bytes of all pieces so far */
    int64_t n_covered;         /* how many of them the text given so far stands for */
    double t_submit, t_first;
    uint64_t order;            /* admission order: the newest is preempted first */
    void *state;               /* a hybrid model's recurrent state at n_done (NULL for other models) */
    int32_t snap_blk;          /* the block with this sequence's latest decode snapshot, or NONE */
    uint8_t snap_key[KEY_LEN]; /* its key (the block may have gone to another prefix since) */
    struct seq *next;          /* the list it is on (inbox, waiting, running) */
    /* images (vision models): img_row[p] is the feature row of prompt position p, or -1 */
    int32_t *img_row;
    struct seq_image *img;
    int n_img;
} seq;

typedef struct seq_image {
    float *pixels;             /* [n_tiles][3][side][side]; freed once encoded */
    int64_t n_tiles, row0;     /* its first feature row */
    uint8_t key[KEY_LEN];      /* SHA-256 of the pixel floats */
    float *feat;               /* [n_tiles · tokens_per_tile][n_embd] once encoded, else NULL */
} seq_image;

struct cdx_engine {
    eng_grammar eg;            /* the vocabulary trie for grammars (engine thread) */
    const cdx_model *m;
    const cdx_tok *tok;
    const cdx_hparams *hp;
    cdx_engine_opts o;
    cdx_forward_ctx *fc;
    int64_t kv_dim;            /* n_head_kv · head_dim */
    size_t block_floats;       /* elements of K (or V) in one block */
    size_t elem_bytes;         /* 4 (f32) or 2 (f16, bf16) */
    size_t state_bytes;        /* a hybrid model's recurrent state per sequence; 0: none */
    int64_t n_snaps, max_snaps; /* state snapshots held by blocks, and the cap */
    uint8_t root_key[KEY_LEN]; /* the parent key of every sequence's first block */
    char *store;               /* the prefix store's directory, or NULL */
    kv_store_shape shape;
    /* the pool */
    kv_block *blocks;
    int32_t *free_stack;       /* unkeyed blocks no sequence holds */
    int64_t n_free;
    int32_t lru_head, lru_tail;
    int64_t n_lru;
    int32_t *buckets;
    uint64_t n_buckets;
    /* requests: seen by the engine thread only, except the inbox */
    seq *waiting, *running;
    int64_t n_waiting, n_running;
    uint64_t next_order;
    /* per-round buffers */
    int32_t *b_tok, *b_seq;
    const float **b_embd;      /* [budget]: image features replacing a token's embedding, or NULL */
    cdx_vision_info vis;       /* when the model takes images (has_vision) */
    bool has_vision;
    uint64_t t_img_tiles;
    double t_img_ms;
    /* the features of recently encoded images by key, so an image whose prompt is cached only in
     * part (its last rows in a block not yet full) is not encoded again: least recently used out */
    struct { uint8_t key[KEY_LEN]; float *feat; size_t n; uint64_t used; } icache[IMAGE_CACHE];
    uint64_t icache_clock;
    int64_t *b_pos;
    bool *b_want;
    seq **b_seqs;              /* [max_batch] the sequences in this round, in cdx_kv_seq order */
    cdx_kv_seq *b_kv;
    seq **b_logit_seq;         /* [max_batch] whose logits row i is */
    double *b_lse;             /* [max_batch] log-sum-exp of logits row i (NaN: not wanted) */
    int *b_lse_rows;           /* [max_batch] the rows whose request wants logprobs */
    float *logits;             /* [max_batch][n_vocab] */
    /* shared with other threads (mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    seq *inbox, *inbox_tail;
    int64_t n_inbox;
    uint64_t *cancels;
    size_t n_cancels, cap_cancels;
    uint64_t next_id;
    cdx_engine_stats stats;    /* the snapshot */
    uint64_t t_prompt, t_cached, t_generated, t_preempt, t_rounds, t_store_r, t_store_w;
};

cdx_engine_opts cdx_engine_defaults(void)
{
    return (cdx_engine_opts){ .n_threads = 0, .max_batch = 8, .token_budget = 512, .max_queue = 64 };
}

cdx_request cdx_request_defaults(void)
{
    return (cdx_request){ .sampling = cdx_sampler_defaults() };
}

const char *cdx_finish_name(cdx_finish f)
{
    static const char *const names[] = { "", "stop", "length", "cancelled", "error" };
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "";
}

/* ---- keys ---- */

/* key = SHA-256(parent key || the block's token ids as 32-bit little-endian) */
static void block_key(const uint8_t parent[KEY_LEN], const int32_t *toks, uint8_t out[KEY_LEN])
{
    uint8_t buf[KEY_LEN + 4 * CDX_KV_BLOCK];
    memcpy(buf, parent, KEY_LEN);
    for (int i = 0; i < CDX_KV_BLOCK; i++) {
        uint32_t t = (uint32_t)toks[i];
        buf[KEY_LEN + 4 * i] = (uint8_t)t;
        buf[KEY_LEN + 4 * i + 1] = (uint8_t)(t >> 8);
        buf[KEY_LEN + 4 * i + 2] = (uint8_t)(t >> 16);
        buf[KEY_LEN + 4 * i + 3] = (uint8_t)(t >> 24);
    }
    unsigned int n = KEY_LEN;
    EVP_Digest(buf, sizeof buf, out, &n, EVP_sha256(), NULL);
}

/* The key of s's block i: block_key, and when the block holds image tokens, SHA-256 of that key
 * followed by (position in the block, the image's key, the row within the image) for each of them:
 * the same tokens with other pixels never share a block. Text blocks keep their plain keys. */
static void seq_block_key(const seq *s, int64_t i, const uint8_t parent[KEY_LEN], uint8_t out[KEY_LEN])
{
    block_key(parent, s->toks + i * CDX_KV_BLOCK, out);
    if (!s->img_row)
        return;
    uint8_t buf[KEY_LEN + CDX_KV_BLOCK * (8 + KEY_LEN)];
    size_t n = KEY_LEN;
    memcpy(buf, out, KEY_LEN);
    for (int64_t j = 0; j < CDX_KV_BLOCK; j++) {
        const int64_t p = i * CDX_KV_BLOCK + j;
        const int32_t r = p < s->n_prompt ? s->img_row[p] : -1;
        if (r < 0)
            continue;
        int k = 0;
        while (k + 1 < s->n_img && s->img[k + 1].row0 <= r)
            k++;
        const uint32_t w[2] = { (uint32_t)j, (uint32_t)(r - s->img[k].row0) };
        memcpy(buf + n, w, 8);
        memcpy(buf + n + 8, s->img[k].key, KEY_LEN);
        n += 8 + KEY_LEN;
    }
    if (n > KEY_LEN) {
        unsigned int len = KEY_LEN;
        EVP_Digest(buf, n, out, &len, EVP_sha256(), NULL);
    }
}

static uint64_t key_bucket(const cdx_engine *e, const uint8_t key[KEY_LEN])
{
    uint64_t h;
    memcpy(&h, key, sizeof h);
    return h & (e->n_buckets - 1);
}

/* Keys of every full block of s's tokens not keyed yet. */
static int seq_make_keys(seq *s)
{
    const int64_t full = s->n_toks / CDX_KV_BLOCK;
    if (full > s->cap_keys) {
        int64_t cap = s->cap_keys ? s->cap_keys : 16;
        while (cap < full)
            cap *= 2;
        void *g = realloc(s->keys, (size_t)cap * KEY_LEN);
        if (!g)
            return CDX_ENOMEM;
        s->keys = g;
        s->cap_keys = cap;
    }
    return CDX_OK;
}

/* ---- the pool ---- */

static void lru_unlink(cdx_engine *e, int32_t b)
{
    kv_block *k = &e->blocks[b];
    if (k->prev != NONE) e->blocks[k->prev].next = k->next; else e->lru_head = k->next;
    if (k->next != NONE) e->blocks[k->next].prev = k->prev; else e->lru_tail = k->prev;
    k->prev = k->next = NONE;
    e->n_lru--;
}

static void lru_push(cdx_engine *e, int32_t b)
{
    kv_block *k = &e->blocks[b];
    k->prev = e->lru_tail;
    k->next = NONE;
    if (e->lru_tail != NONE) e->blocks[e->lru_tail].next = b; else e->lru_head = b;
    e->lru_tail = b;
    e->n_lru++;
}

static int32_t table_find(const cdx_engine *e, const uint8_t key[KEY_LEN])
{
    for (int32_t b = e->buckets[key_bucket(e, key)]; b != NONE; b = e->blocks[b].hnext)
        if (!memcmp(e->blocks[b].key, key, KEY_LEN))
            return b;
    return NONE;
}

static void table_remove(cdx_engine *e, int32_t b)
{
    int32_t *p = &e->buckets[key_bucket(e, e->blocks[b].key)];
    while (*p != b)
        p = &e->blocks[*p].hnext;
    *p = e->blocks[b].hnext;
    e->blocks[b].hnext = NONE;
    e->blocks[b].keyed = false;
}

static void table_insert(cdx_engine *e, int32_t b, const uint8_t key[KEY_LEN])
{
    kv_block *k = &e->blocks[b];
    memcpy(k->key, key, KEY_LEN);
    uint64_t h = key_bucket(e, key);
    k->hnext = e->buckets[h];
    e->buckets[h] = b;
    k->keyed = true;
}

static void snap_drop(cdx_engine *e, int32_t b)
{
    if (!e->blocks[b].snap)
        return;
    free(e->blocks[b].snap);
    e->blocks[b].snap = NULL;
    e->n_snaps--;
}

/* Blocks a new allocation can have: free ones and cached ones nobody holds. */
static int64_t pool_available(const cdx_engine *e) { return e->n_free + e->n_lru; }

/* A block for a sequence to write (ref 1), or NONE when the pool is dry. Cached blocks go oldest
 * first; their storage is reused as it is. */
static int32_t pool_take(cdx_engine *e)
{
    int32_t b;
    if (e->n_free > 0) {
        b = e->free_stack[--e->n_free];
    } else if (e->lru_head != NONE) {
        b = e->lru_head;
        lru_unlink(e, b);
        if (e->store && !e->blocks[b].stored &&
            !kv_store_write(e->store, &e->shape, e->blocks[b].key, e->blocks[b].k, e->blocks[b].v, e->blocks[b].snap))
            e->t_store_w++;
        table_remove(e, b);
        e->blocks[b].stored = false;
        snap_drop(e, b);
    } else {
        return NONE;
    }
    kv_block *k = &e->blocks[b];
    if (!k->k) {
        k->k = malloc(e->block_floats * e->elem_bytes);
        k->v = malloc(e->block_floats * e->elem_bytes);
        if (!k->k || !k->v) {
            free(k->k);
            free(k->v);
            k->k = k->v = NULL;
            e->free_stack[e->n_free++] = b;
            return NONE;
        }
    }
    k->ref = 1;
    return b;
}

static void pool_hold(cdx_engine *e, int32_t b)
{
    kv_block *k = &e->blocks[b];
    if (k->ref++ == 0)
        lru_unlink(e, b); /* a held block is keyed (only keyed blocks are found) */
}

static void pool_release(cdx_engine *e, int32_t b)
{
    kv_block *k = &e->blocks[b];
    if (--k->ref > 0)
        return;
    if (k->keyed)
        lru_push(e, b);
    else
        e->free_stack[e->n_free++] = b;
}

/* ---- sequences ---- */

static int seq_push_block(seq *s, cdx_engine *e, int32_t b)
{
    if (s->n_blk == s->cap_blk) {
        int64_t cap = s->cap_blk ? 2 * s->cap_blk : 8;
        int32_t *nb = realloc(s->blk, (size_t)cap * sizeof *nb);
        if (nb)
            s->blk = nb;
        void **nk = nb ? realloc(s->ktab, (size_t)cap * sizeof *nk) : NULL;
        if (nk)
            s->ktab = nk;
        void **nv = nk ? realloc(s->vtab, (size_t)cap * sizeof *nv) : NULL;
        if (!nv)
            return CDX_ENOMEM;
        s->vtab = nv;
        s->cap_blk = cap;
    }
    s->blk[s->n_blk] = b;
    s->ktab[s->n_blk] = e->blocks[b].k;
    s->vtab[s->n_blk] = e->blocks[b].v;
    s->n_blk++;
    return CDX_OK;
}

static void seq_release_blocks(cdx_engine *e, seq *s)
{
    for (int64_t i = 0; i < s->n_blk; i++)
        pool_release(e, s->blk[i]);
    s->n_blk = 0;
    s->n_done = 0;
    s->n_registered = 0;
    if (s->state)
        cdx_model_state_reset(e->m, s->state); /* back to position 0 with n_done */
}

static void seq_free(seq *s)
{
    if (!s)
        return;
    free(s->toks);
    free(s->state);
    free(s->blk);
    free(s->ktab);
    free(s->vtab);
    free(s->keys);
    free(s->top_ids);
    free(s->top_logits);
    free(s->top_lp);
    cdx_sampler_free(s->smp);
    cdx_matcher_free(s->matcher);
    for (int i = 0; i < s->n_stop; i++)
        free(s->stop[i]);
    free(s->stop);
    free(s->text);
    free(s->piece);
    for (int i = 0; i < s->n_img; i++) {
        free(s->img[i].pixels);
        free(s->img[i].feat);
    }
    free(s->img);
    free(s->img_row);
    free(s);
}

static int seq_push_token(seq *s, int32_t t)
{
    int32_t *g = cdx_array_grow(s->toks, &s->cap_toks, (size_t)s->n_toks, sizeof *g);
    if (!g)
        return CDX_ENOMEM;
    s->toks = g;
    s->toks[s->n_toks++] = t;
    return CDX_OK;
}

static void text_push(seq *s, const char *p, size_t n)
{
    if (!cdx_bytes_reserve(&s->text, &s->cap_text, s->n_text + n + 1))
        return; /* text is lost, tokens are not */
    memcpy(s->text + s->n_text, p, n);
    s->n_text += n;
    s->text[s->n_text] = 0;
}

/* Keys of s's full blocks up to n_done, offered to the prefix table (a key already there keeps
 * its block; ours stays private). */
static void seq_register_blocks(cdx_engine *e, seq *s)
{
    const int64_t full = s->n_done / CDX_KV_BLOCK;
    if (full <= s->n_registered)
        return;
    if (seq_make_keys(s))
        return; /* no memory for keys: the blocks just stay private */
    for (int64_t i = s->n_keys; i < full; i++)
        seq_block_key(s, i, i ? s->keys[i - 1] : e->root_key, s->keys[i]);
    if (full > s->n_keys)
        s->n_keys = full;
    for (int64_t i = s->n_registered; i < full; i++) {
        const int32_t b = s->blk[i];
        if (!e->blocks[b].keyed && table_find(e, s->keys[i]) == NONE)
            table_insert(e, b, s->keys[i]);
    }
    s->n_registered = full;
}

/* ---- recurrent-state snapshots (hybrid models) ---- */

/* The prompt's snapshot point: the last block boundary before its last token (admission never
 * reuses the block of the last token, so the same prompt again resumes exactly there). */
static int64_t snap_point(const seq *s) { return (s->n_prompt - 1) / CDX_KV_BLOCK * CDX_KV_BLOCK; }

/* Inside a prompt a snapshot is also kept every SNAP_EVERY positions, so that a prompt sharing
 * only part of another resumes near where they part (16 blocks: a few per long prompt; a state
 * is tens of MiB for real models). */
#define SNAP_EVERY (16 * CDX_KV_BLOCK)

/* The next position after n_done, inside the prompt, where s's state must be snapshotted; 0: none. */
static int64_t next_snap(const seq *s)
{
    const int64_t pb = snap_point(s), per = (s->n_done / SNAP_EVERY + 1) * SNAP_EVERY;
    int64_t best = pb > s->n_done ? pb : 0;
    if (per < pb && (!best || per < best))
        best = per;
    return best;
}

/* Room for one more snapshot: under the cap, or after dropping the oldest cached block's. */
static bool snap_room(cdx_engine *e)
{
    for (int32_t b = e->lru_head; e->n_snaps >= e->max_snaps && b != NONE; b = e->blocks[b].next)
        snap_drop(e, b);
    return e->n_snaps < e->max_snaps;
}

/* After a round: when s's state stands at a block boundary that is its prompt's snapshot point or
 * past its prompt (decoding: only the latest is kept), a copy goes with the keyed block of that
 * prefix (ours or the one found under its key), unless that block has one already. The copies
 * are capped (max_snaps); without one a prefix is simply recomputed. */
static void seq_snapshot(cdx_engine *e, seq *s)
{
    if (!e->state_bytes || !s->n_done || s->n_done % CDX_KV_BLOCK)
        return;
    const bool at_prompt = s->n_done == snap_point(s) || (s->n_done % SNAP_EVERY == 0 && s->n_done < s->n_prompt),
               decoding = s->n_done >= s->n_prompt;
    const int64_t bi = s->n_done / CDX_KV_BLOCK - 1;
    if ((!at_prompt && !decoding) || bi >= s->n_keys || bi >= s->n_registered)
        return;
    const int32_t b = table_find(e, s->keys[bi]);
    if (b == NONE || e->blocks[b].snap || cdx_model_state_pos(s->state) != s->n_done || !snap_room(e) ||
        !(e->blocks[b].snap = malloc(e->state_bytes)))
        return;
    memcpy(e->blocks[b].snap, s->state, e->state_bytes);
    e->n_snaps++;
    if (!decoding)
        return;
    const int32_t old = s->snap_blk;
    if (old != NONE && old != b && e->blocks[old].keyed && !memcmp(e->blocks[old].key, s->snap_key, KEY_LEN))
        snap_drop(e, old);
    s->snap_blk = b;
    memcpy(s->snap_key, s->keys[bi], KEY_LEN);
}

/* ---- events ---- */

static void emit(cdx_engine *e, seq *s, cdx_finish f, int32_t token, float lp, const char *text, size_t text_len,
                 const char *message)
{
    cdx_event ev = { .id = s->id, .user = s->user, .finish = f, .token = token, .index = s->n_gen - 1,
                     .logprob = lp, .n_top = f == CDX_FINISH_NONE ? s->n_top : 0, .top_ids = s->top_ids,
                     .top_logits = s->top_logits, .top_logprobs = s->top_lp, .text = text ? text : "",
                     .text_len = text_len, .n_prompt = s->n_prompt, .n_cached = s->n_cached,
                     .n_generated = s->n_gen, .ms_first = s->t_first > 0 ? s->t_first - s->t_submit : 0,
                     .message = message, .n_covered = s->n_covered };
    if (f != CDX_FINISH_NONE) {
        ev.token = -1;
        ev.index = s->n_gen;
    } else {
        ev.piece = s->piece ? s->piece : "";
        ev.piece_len = s->n_piece;
        ev.piece_first = s->piece_first;
    }
    if (s->on_event)
        s->on_event(&ev);
}

/* The request ends: the text still held is given with the final event (not after a stop string,
 * nor when cancelled), the blocks go back to the pool. */
static void seq_finish(cdx_engine *e, seq *s, cdx_finish f, const char *message)
{
    size_t from = s->n_emitted, len = 0;
    if (f == CDX_FINISH_LENGTH || (f == CDX_FINISH_STOP && s->n_emitted <= s->n_text)) {
        if (e->tok) {
            char buf[64];
            int n = cdx_tok_stream_flush(&s->ts, buf, sizeof buf);
            if (n > 0)
                text_push(s, buf, (size_t)n);
        }
        len = s->n_text - from;
        s->n_emitted = s->n_text;
        s->n_covered = s->n_raw; /* a dangling partial sequence went out as U+FFFD */
    }
    emit(e, s, f, -1, 0, s->text ? s->text + from : "", len, message);
    seq_release_blocks(e, s);
    seq_free(s);
}

/* The bytes token t adds to the text (cdx_event.piece), as the detokenizer is about to make them. */
static void seq_piece(const cdx_engine *e, seq *s, int32_t t)
{
    s->piece_first = s->ts.first;
    s->n_piece = 0;
    for (;;) {
        int n = cdx_tok_piece(e->tok, t, s->ts.first, s->ts.skip_special, s->piece, s->cap_piece);
        if (n <= 0)
            return;
        if ((size_t)n <= s->cap_piece) {
            s->n_piece = (size_t)n;
            s->n_raw += n;
            return;
        }
        char *g = realloc(s->piece, (size_t)n);
        if (!g)
            return; /* the piece is lost, the text is not */
        s->piece = g;
        s->cap_piece = (size_t)n;
    }
}

/* After a new piece of text: what can be given now. Returns true when a stop string was found
 * (then everything before it has been given with *out and the request must stop). */
static bool text_ready(seq *s, size_t *out_from, size_t *out_len)
{
    *out_from = s->n_emitted;
    if (!s->n_stop) {
        *out_len = s->n_text - s->n_emitted;
        s->n_emitted = s->n_text;
        return false;
    }
    const size_t start = s->n_emitted >= s->max_stop ? s->n_emitted - s->max_stop + 1 : 0;
    size_t best = (size_t)-1;
    for (int i = 0; i < s->n_stop; i++) {
        const char *hit = memmem(s->text + start, s->n_text - start, s->stop[i], strlen(s->stop[i]));
        if (hit && (size_t)(hit - s->text) < best)
            best = (size_t)(hit - s->text);
    }
    if (best != (size_t)-1) {
        *out_len = best > s->n_emitted ? best - s->n_emitted : 0;
        s->n_emitted = s->n_text + 1; /* nothing more is ever given */
        return true;
    }
    /* hold the longest tail that a stop string starts with */
    size_t hold = 0;
    for (int i = 0; i < s->n_stop; i++) {
        const size_t L = strlen(s->stop[i]);
        for (size_t k = L - 1 < s->n_text - s->n_emitted ? L - 1 : s->n_text - s->n_emitted; k > hold; k--)
            if (!memcmp(s->text + s->n_text - k, s->stop[i], k)) {
                hold = k;
                break;
            }
    }
    *out_len = s->n_text - hold - s->n_emitted;
    s->n_emitted += *out_len;
    return false;
}

static bool is_eog(const cdx_engine *e, int32_t t)
{
    if (e->tok)
        return cdx_tok_is_eog(e->tok, t);
    for (int i = 0; i < e->hp->n_eos; i++)
        if (e->hp->eos_ids[i] == t)
            return true;
    return false;
}

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

/* s's last token was computed and `logits` follow it: choose and tell. Returns why s must end
 * now (CDX_FINISH_NONE: it goes on); *msg gets an error's text. */
static cdx_finish seq_on_logits(cdx_engine *e, seq *s, float *logits, double lse, const char **msg)
{
    const int64_t nv = e->hp->n_vocab;
    if (s->grammar) {
        /* the row is masked in place (it is this request's own); logprobs are then those of the
         * masked distribution */
        const cdx_finish f = eng_grammar_mask(&e->eg, e->tok, nv, s->grammar, &s->matcher, logits, msg);
        if (f != CDX_FINISH_NONE)
            return f;
        if (s->logprobs)
            lse = cdx_logsumexp(cdx_forward_ctx_kernels(e->fc), logits, nv);
    }
    const int32_t t = cdx_sampler_sample(s->smp, logits, s->toks, s->n_toks);
    if ((!s->ignore_eos || s->grammar) && is_eog(e, t))
        return CDX_FINISH_STOP;
    if (s->grammar && eng_grammar_accept(&e->eg, s->matcher, t, msg))
        return CDX_FINISH_ERROR;
    if (seq_push_token(s, t)) {
        *msg = "out of memory for the generated tokens";
        return CDX_FINISH_ERROR;
    }
    s->n_gen++;
    e->t_generated++;
    if (s->n_gen == 1)
        s->t_first = cdx_time_ms();
    if (s->n_top) {
        cdx_top_logits(logits, nv, s->n_top, s->top_ids, s->top_logits);
        for (int i = 0; i < s->n_top; i++)
            s->top_lp[i] = (float)((double)s->top_logits[i] - lse);
    }
    const float lp = s->logprobs ? (float)((double)logits[t] - lse) : NAN;
    bool stopped = false;
    size_t from = s->n_emitted, len = 0;
    if (e->tok) {
        seq_piece(e, s, t);
        char piece[512];
        int n = cdx_tok_stream_put(&s->ts, t, piece, sizeof piece);
        if (n > 0)
            text_push(s, piece, (size_t)n);
        stopped = text_ready(s, &from, &len);
        /* the pieces' bytes the given text stands for: all that the decoder let out, less the
         * text still held (or, after a stop string, the text from the stop string on). Text
         * bytes and piece bytes match one for one except where invalid UTF-8 became U+FFFD. */
        const int64_t out = s->n_raw - (int64_t)s->ts.n_pend - (int64_t)(s->n_text - (from + len));
        s->n_covered = out < s->n_covered ? s->n_covered : out > s->n_raw ? s->n_raw : out;
    }
    emit(e, s, CDX_FINISH_NONE, t, lp, s->text ? s->text + from : "", len, NULL);
    if (stopped)
        return CDX_FINISH_STOP;
    if ((s->max_tokens > 0 && s->n_gen >= s->max_tokens) || s->n_toks >= e->o.n_ctx)
        return CDX_FINISH_LENGTH;
    return CDX_FINISH_NONE;
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

/* ---- create / free ---- */

/* What cdx_engine_create accepts (engine.h): the one place these ranges are written. */
static const cdx_engine_range k_ranges[CDX_OPT_COUNT] = {
    [CDX_OPT_THREADS] = { "--threads", "n_threads", 1, CDX_MAX_THREADS }, /* hi: cdx_threads_max() */
    [CDX_OPT_CTX] = { "--ctx", "n_ctx", 1, 1 << 24 },
    [CDX_OPT_KV_BLOCKS] = { "--kv-blocks", "n_blocks", 1, 1 << 24 },
    [CDX_OPT_MAX_BATCH] = { "--max-batch", "max_batch", 1, 1024 },
    [CDX_OPT_TOKEN_BUDGET] = { "", "token_budget", 1, 1 << 20 }, /* no command sets it */
    [CDX_OPT_MAX_QUEUE] = { "--max-queue", "max_queue", 1, 1 << 20 },
};

cdx_engine_range cdx_engine_opt_range(cdx_engine_opt_id id)
{
    if ((unsigned)id >= CDX_OPT_COUNT)
        return (cdx_engine_range){ "", "", 0, 0 };
    cdx_engine_range r = k_ranges[id];
    if (id == CDX_OPT_THREADS)
        r.hi = cdx_threads_max();
    return r;
}

/* Every option set (> 0) in its row of k_ranges. */
static int check_ranges(const cdx_engine_opts *o, cdx_err *err)
{
    const int64_t given[CDX_OPT_COUNT] = { [CDX_OPT_THREADS] = o->n_threads, [CDX_OPT_CTX] = o->n_ctx,
                                           [CDX_OPT_KV_BLOCKS] = o->n_blocks, [CDX_OPT_MAX_BATCH] = o->max_batch,
                                           [CDX_OPT_TOKEN_BUDGET] = o->token_budget,
                                           [CDX_OPT_MAX_QUEUE] = o->max_queue };
    for (int i = 0; i < CDX_OPT_COUNT; i++) {
        const cdx_engine_range r = cdx_engine_opt_range((cdx_engine_opt_id)i);
        if (given[i] > 0 && (given[i] < r.lo || given[i] > r.hi))
            return cdx_err_set(err, CDX_EINVAL, "%s is %lld; it must be in %lld..%lld%s%s%s", r.field,
                               (long long)given[i], (long long)r.lo, (long long)r.hi, *r.flag ? " (" : "", r.flag,
                               *r.flag ? ")" : "");
    }
    return CDX_OK;
}

int cdx_engine_create(const cdx_model *m, const cdx_tok *tok, const cdx_engine_opts *o, cdx_engine **out,
                      cdx_err *err)
{
    *out = NULL;
    const cdx_hparams *hp = cdx_model_hparams(m);
    cdx_engine_opts eo = o ? *o : cdx_engine_defaults();
    if (eo.max_batch <= 0)
        eo.max_batch = 8;
    if (eo.token_budget <= 0)
        eo.token_budget = 512;
    if (eo.max_queue <= 0)
        eo.max_queue = 64;
    int rc = check_ranges(&eo, err);
    if (rc)
        return rc;
    /* an f16 cache rounds as ggml's does (f32 models); a bf16 cache holds a bf16 model's K and V exactly */
    const bool bf16_model = cdx_model_dtype(m) == CDX_DTYPE_BF16;
    if (eo.kv_type != CDX_TYPE_F32 && eo.kv_type != (bf16_model ? CDX_TYPE_BF16 : CDX_TYPE_F16))
        return cdx_err_set(err, CDX_EINVAL, "KV cache type %s for a model computing in %s; expected f32 or %s",
                           cdx_type_name(eo.kv_type), cdx_dtype_name(cdx_model_dtype(m)), bf16_model ? "bf16" : "f16");
    if (eo.n_ctx <= 0)
        eo.n_ctx = hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    const int64_t per_seq = (eo.n_ctx + CDX_KV_BLOCK - 1) / CDX_KV_BLOCK;
    if (eo.n_blocks <= 0 && (rc = check_ranges(&(cdx_engine_opts){ .n_blocks = per_seq * eo.max_batch }, err)))
        return rc; /* --ctx x --max-batch over the pool's row */
    if (eo.n_blocks <= 0)
        eo.n_blocks = per_seq * eo.max_batch;
    const uint64_t block_bytes = 2 * (uint64_t)cdx_hparams_kv_layers(hp) * CDX_KV_BLOCK *
                                 (uint64_t)(hp->n_head_kv * hp->head_dim) * (eo.kv_type == CDX_TYPE_F32 ? 4 : 2);
    if (eo.kv_bytes_max && (uint64_t)eo.n_blocks > eo.kv_bytes_max / (block_bytes ? block_bytes : 1))
        return cdx_err_set(err, CDX_EINVAL, "n_blocks is %lld (--kv-blocks; by default --max-batch sequences of --ctx): "
                           "a KV pool of %.1f GiB when full (%llu bytes a block of %d positions), more than the %.1f "
                           "GiB it may take", (long long)eo.n_blocks,
                           (double)eo.n_blocks * (double)block_bytes / (1 << 30), (unsigned long long)block_bytes,
                           CDX_KV_BLOCK, (double)eo.kv_bytes_max / (1 << 30));
    if (eo.token_budget < eo.max_batch)
        eo.token_budget = eo.max_batch; /* every decoding sequence fits in one round */
    cdx_engine *e = calloc(1, sizeof *e);
    if (!e)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    e->m = m;
    e->tok = tok;
    e->hp = hp;
    e->o = eo;
    e->o.kv_store = NULL; /* the caller's string: e->store is ours */
    e->kv_dim = hp->n_head_kv * hp->head_dim;
    e->block_floats = (size_t)cdx_hparams_kv_layers(hp) * CDX_KV_BLOCK * (size_t)e->kv_dim;
    e->state_bytes = cdx_model_state_bytes(m);
    /* snapshots: 1 GiB of them, and never fewer than two per running sequence */
    e->max_snaps = e->state_bytes ? (int64_t)(((size_t)1 << 30) / e->state_bytes) : 0;
    if (e->max_snaps < 2 * (int64_t)eo.max_batch + 8)
        e->max_snaps = 2 * (int64_t)eo.max_batch + 8;
    e->elem_bytes = eo.kv_type == CDX_TYPE_F32 ? 4 : 2;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->next_id = 1;
    /* the root key: the model's fingerprint and the KV storage type */
    uint8_t fp[KEY_LEN + 8];
    cdx_model_fingerprint(m, fp);
    memcpy(fp + KEY_LEN, eo.kv_type == CDX_TYPE_F16 ? "kv:f16\0\0" : eo.kv_type == CDX_TYPE_BF16 ? "kv:bf16\0" : "kv:f32\0\0", 8);
    unsigned int kn = KEY_LEN;
    EVP_Digest(fp, sizeof fp, e->root_key, &kn, EVP_sha256(), NULL);

    e->shape = (kv_store_shape){ .positions = CDX_KV_BLOCK, .n_layer = (uint64_t)cdx_hparams_kv_layers(hp),
                                 .kv_dim = (uint64_t)e->kv_dim, .n_elems = e->block_floats,
                                 .elem_bytes = (uint32_t)e->elem_bytes, .state_bytes = e->state_bytes };
    memcpy(e->shape.root, e->root_key, KEY_LEN);
    rc = eo.kv_store ? kv_store_open(eo.kv_store, err) : CDX_OK;
    if (!rc && eo.kv_store && !(e->store = strdup(eo.kv_store)))
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (!rc)
        rc = cdx_forward_ctx_create_on(m, eo.token_budget, eo.n_threads, eo.pool, eo.kernels, &e->fc, err);
    if (rc) {
        cdx_engine_free(e);
        return rc;
    }
    const int64_t nb = eo.n_blocks;
    e->blocks = calloc((size_t)nb, sizeof *e->blocks);
    e->free_stack = malloc((size_t)nb * sizeof *e->free_stack);
    e->n_buckets = 16;
    while (e->n_buckets < (uint64_t)nb * 2)
        e->n_buckets *= 2;
    e->buckets = malloc(e->n_buckets * sizeof *e->buckets);
    const size_t B = (size_t)eo.token_budget, S = (size_t)eo.max_batch;
    e->b_tok = malloc(B * sizeof *e->b_tok);
    e->b_seq = malloc(B * sizeof *e->b_seq);
    e->b_pos = malloc(B * sizeof *e->b_pos);
    e->b_want = malloc(B * sizeof *e->b_want);
    e->b_embd = calloc(B, sizeof *e->b_embd);
    e->has_vision = cdx_model_vision(m, &e->vis);
    e->b_seqs = malloc(S * sizeof *e->b_seqs);
    e->b_kv = malloc(S * sizeof *e->b_kv);
    e->b_logit_seq = malloc(S * sizeof *e->b_logit_seq);
    e->b_lse = malloc(S * sizeof *e->b_lse);
    e->b_lse_rows = malloc(S * sizeof *e->b_lse_rows);
    e->logits = malloc(S * (size_t)hp->n_vocab * sizeof(float));
    if (!e->blocks || !e->free_stack || !e->buckets || !e->b_tok || !e->b_seq || !e->b_pos || !e->b_want || !e->b_embd ||
        !e->b_seqs || !e->b_kv || !e->b_logit_seq || !e->b_lse || !e->b_lse_rows || !e->logits) {
        cdx_engine_free(e);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for an engine of %lld KV blocks", (long long)nb);
    }
    for (uint64_t i = 0; i < e->n_buckets; i++)
        e->buckets[i] = NONE;
    for (int64_t i = 0; i < nb; i++) {
        e->blocks[i].hnext = e->blocks[i].prev = e->blocks[i].next = NONE;
        e->free_stack[i] = (int32_t)(nb - 1 - i); /* block 0 first */
    }
    e->n_free = nb;
    e->lru_head = e->lru_tail = NONE;
    e->stats = (cdx_engine_stats){ .n_ctx = eo.n_ctx, .n_blocks = nb, .blocks_free = nb, .max_batch = eo.max_batch,
                                   .max_queue = eo.max_queue, .kv_pool_bytes = (uint64_t)nb * block_bytes };
    *out = e;
    return CDX_OK;
}

void cdx_engine_free(cdx_engine *e)
{
    if (!e)
        return;
    seq *lists[] = { e->inbox, e->waiting, e->running };
    for (int i = 0; i < 3; i++)
        for (seq *s = lists[i], *n; s; s = n) {
            n = s->next;
            seq_free(s);
        }
    for (int64_t i = 0; e->blocks && e->store && i < e->o.n_blocks; i++)
        if (e->blocks[i].keyed && !e->blocks[i].stored)
            kv_store_write(e->store, &e->shape, e->blocks[i].key, e->blocks[i].k, e->blocks[i].v, e->blocks[i].snap);
    free(e->store);
    for (int64_t i = 0; e->blocks && i < e->o.n_blocks; i++) {
        free(e->blocks[i].k);
        free(e->blocks[i].v);
        free(e->blocks[i].snap);
    }
    free(e->blocks);
    free(e->free_stack);
    free(e->buckets);
    free(e->b_tok);
    free(e->b_seq);
    free(e->b_pos);
    free(e->b_want);
    free(e->b_embd);
    for (int i = 0; i < IMAGE_CACHE; i++)
        free(e->icache[i].feat);
    free(e->b_seqs);
    free(e->b_kv);
    free(e->b_logit_seq);
    free(e->b_lse);
    free(e->b_lse_rows);
    free(e->logits);
    free(e->cancels);
    eng_grammar_free(&e->eg);
    cdx_forward_ctx_free(e->fc);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* ---- submit / cancel (any thread) ---- */

/* ---- images ---- */

/* Copies the request's pixels, keys each image by the SHA-256 of its floats, maps prompt
 * positions to feature rows (counts checked by the caller). */
static int seq_take_images(cdx_engine *e, seq *s, const cdx_request *r, cdx_err *err)
{
    const size_t tile = (size_t)(3 * e->vis.image_size * e->vis.image_size);
    s->img = calloc((size_t)r->n_images, sizeof *s->img);
    s->img_row = malloc((size_t)s->n_prompt * sizeof *s->img_row);
    if (!s->img || !s->img_row)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int64_t row = 0;
    for (int i = 0; i < r->n_images; i++) {
        seq_image *im = &s->img[i];
        const size_t bytes = (size_t)r->images[i].n_tiles * tile * sizeof(float);
        s->n_img = i + 1;
        if (!(im->pixels = malloc(bytes)))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for image %d (%zu MiB of pixels)", i, bytes >> 20);
        memcpy(im->pixels, r->images[i].pixels, bytes);
        im->n_tiles = r->images[i].n_tiles;
        im->row0 = row;
        row += im->n_tiles * e->vis.tokens_per_tile;
        unsigned int n = KEY_LEN;
        EVP_Digest(im->pixels, bytes, im->key, &n, EVP_sha256(), NULL);
    }
    int32_t k = 0;
    for (int64_t p = 0; p < s->n_prompt; p++)
        s->img_row[p] = s->toks[p] == e->vis.image_token_id ? k++ : -1;
    return CDX_OK;
}

/* The features of position p (an image token of the prompt), encoding its image first if needed. */
static int seq_image_row(cdx_engine *e, seq *s, int64_t p, const float **out, cdx_err *err)
{
    *out = NULL;
    const int32_t r = s->img_row && p < s->n_prompt ? s->img_row[p] : -1;
    if (r < 0)
        return CDX_OK;
    int k = 0;
    while (k + 1 < s->n_img && s->img[k + 1].row0 <= r)
        k++;
    seq_image *im = &s->img[k];
    if (!im->feat) {
        const size_t rows = (size_t)(im->n_tiles * e->vis.tokens_per_tile), nf = rows * (size_t)e->vis.n_embd;
        if (!(im->feat = malloc(nf * sizeof(float))))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for image features");
        int slot = 0;
        for (int i = 0; i < IMAGE_CACHE; i++) {
            if (e->icache[i].feat && e->icache[i].n == nf && !memcmp(e->icache[i].key, im->key, KEY_LEN)) {
                memcpy(im->feat, e->icache[i].feat, nf * sizeof(float));
                e->icache[i].used = ++e->icache_clock;
                free(im->pixels);
                im->pixels = NULL;
                *out = im->feat + (size_t)(r - im->row0) * (size_t)e->vis.n_embd;
                return CDX_OK;
            }
            if (e->icache[i].used < e->icache[slot].used)
                slot = i;
        }
        const double t0 = cdx_time_ms();
        int rc = cdx_vision_encode(e->fc, im->pixels, im->n_tiles, im->feat, err);
        if (rc) {
            free(im->feat);
            im->feat = NULL;
            return rc;
        }
        e->t_img_ms += cdx_time_ms() - t0;
        e->t_img_tiles += (uint64_t)im->n_tiles;
        float *keep = malloc(nf * sizeof(float)); /* no memory for the copy: just not kept */
        if (keep) {
            memcpy(keep, im->feat, nf * sizeof(float));
            free(e->icache[slot].feat);
            memcpy(e->icache[slot].key, im->key, KEY_LEN);
            e->icache[slot].feat = keep;
            e->icache[slot].n = nf;
            e->icache[slot].used = ++e->icache_clock;
        }
        free(im->pixels);
        im->pixels = NULL;
    }
    *out = im->feat + (size_t)(r - im->row0) * (size_t)e->vis.n_embd;
    return CDX_OK;
}

int cdx_engine_submit(cdx_engine *e, const cdx_request *r, uint64_t *id, cdx_err *err)
{
    const cdx_hparams *hp = e->hp;
    if (id)
        *id = 0;
    if (!r->prompt || r->n_prompt <= 0)
        return cdx_err_set(err, CDX_EINVAL, "the request has no prompt tokens");
    if (r->grammar && !e->tok)
        return cdx_err_set(err, CDX_EINVAL, "a grammar needs the model's tokenizer (the engine has none)");
    for (int64_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= hp->n_vocab)
            return cdx_err_set(err, CDX_EINVAL, "prompt token %lld is %d, outside the vocabulary (0..%lld)",
                               (long long)i, r->prompt[i], (long long)hp->n_vocab - 1);
    if (r->top_logprobs < 0 || r->top_logprobs > hp->n_vocab)
        return cdx_err_set(err, CDX_EINVAL, "top_logprobs is %d; expected 0..%lld", r->top_logprobs,
                           (long long)hp->n_vocab);
    if (r->n_stop < 0 || r->n_stop > 64 || (r->n_stop && !e->tok))
        return cdx_err_set(err, CDX_EINVAL, r->n_stop && !e->tok ? "stop strings need a tokenizer (this model has none)"
                                                                 : "%d stop strings; expected 0..64", r->n_stop);
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !*r->stop[i] || strlen(r->stop[i]) > 4096)
            return cdx_err_set(err, CDX_EINVAL, "stop string %d is empty or longer than 4096 bytes", i);
    /* images: the model takes them, and the prompt has one image token per feature row */
    int64_t n_img_tok = 0, n_img_rows = 0;
    if (r->n_images < 0 || r->n_images > 256 || (r->n_images && !r->images))
        return cdx_err_set(err, CDX_EINVAL, "%d images; expected 0..256", r->n_images);
    if (r->n_images && !e->has_vision)
        return cdx_err_set(err, CDX_EINVAL, "the request has %d images; this model takes no images", r->n_images);
    for (int i = 0; i < r->n_images; i++) {
        if (!r->images[i].pixels || r->images[i].n_tiles < 1 || r->images[i].n_tiles > 4096)
            return cdx_err_set(err, CDX_EINVAL, "image %d has %lld tiles; expected 1..4096", i,
                               (long long)r->images[i].n_tiles);
        n_img_rows += r->images[i].n_tiles * e->vis.tokens_per_tile;
    }
    for (int64_t i = 0; e->has_vision && i < r->n_prompt; i++)
        n_img_tok += r->prompt[i] == e->vis.image_token_id;
    if (n_img_tok != n_img_rows)
        return cdx_err_set(err, CDX_EINVAL, "the prompt has %lld image tokens (id %d); the %d images give %lld feature "
                           "rows (%lld per tile)", (long long)n_img_tok, e->vis.image_token_id, r->n_images,
                           (long long)n_img_rows, (long long)e->vis.tokens_per_tile);
    /* can it ever fit? */
    const int64_t n_ctx = e->o.n_ctx;
    if (r->n_prompt >= n_ctx || (r->max_tokens > 0 && r->n_prompt + r->max_tokens > n_ctx))
        return cdx_err_set(err, CDX_ERESOURCE_LIMIT, "the request needs %lld positions (%lld prompt + %lld to generate); "
                           "the context holds %lld", (long long)(r->n_prompt + (r->max_tokens > 0 ? r->max_tokens : 1)),
                           (long long)r->n_prompt, (long long)(r->max_tokens > 0 ? r->max_tokens : 1), (long long)n_ctx);
    const int64_t span = r->max_tokens > 0 ? r->n_prompt + r->max_tokens : n_ctx;
    const int64_t need = (span + CDX_KV_BLOCK - 1) / CDX_KV_BLOCK;
    if (need > e->o.n_blocks)
        return cdx_err_set(err, CDX_ERESOURCE_LIMIT, "the request needs up to %lld KV blocks of %d positions; the pool "
                           "has %lld", (long long)need, CDX_KV_BLOCK, (long long)e->o.n_blocks);

    seq *s = calloc(1, sizeof *s);
    if (!s)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    s->cap_toks = (size_t)r->n_prompt + 16;
    s->toks = malloc(s->cap_toks * sizeof *s->toks);
    s->n_top = r->top_logprobs;
    s->logprobs = r->logprobs || r->top_logprobs > 0;
    if (s->n_top) {
        s->top_ids = malloc((size_t)s->n_top * sizeof *s->top_ids);
        s->top_logits = malloc((size_t)s->n_top * sizeof *s->top_logits);
        s->top_lp = malloc((size_t)s->n_top * sizeof *s->top_lp);
    }
    s->stop = r->n_stop ? calloc((size_t)r->n_stop, sizeof *s->stop) : NULL;
    s->snap_blk = NONE; /* a hybrid model's state is allocated on admission (a queued request holds none) */
    int rc = !s->toks || (s->n_top && (!s->top_ids || !s->top_logits || !s->top_lp)) || (r->n_stop && !s->stop)
           ? cdx_err_set(err, CDX_ENOMEM, "out of memory") : CDX_OK;
    if (!rc)
        rc = cdx_sampler_create(&r->sampling, hp->n_vocab, &s->smp, err);
    for (int i = 0; !rc && i < r->n_stop; i++) {
        if (!(s->stop[i] = strdup(r->stop[i])))
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        s->n_stop = i + 1;
        size_t L = strlen(r->stop[i]);
        s->max_stop = L > s->max_stop ? L : s->max_stop;
    }
    if (rc) {
        seq_free(s);
        return rc;
    }
    memcpy(s->toks, r->prompt, (size_t)r->n_prompt * sizeof *s->toks);
    s->n_toks = s->n_prompt = r->n_prompt;
    if (r->n_images && (rc = seq_take_images(e, s, r, err))) {
        seq_free(s);
        return rc;
    }
    s->max_tokens = r->max_tokens;
    s->ignore_eos = r->ignore_eos;
    s->grammar = r->grammar;
    s->skip_special = r->skip_special;
    s->on_event = r->on_event;
    s->user = r->user;
    s->t_submit = cdx_time_ms();
    if (e->tok) {
        cdx_tok_stream_init(&s->ts, e->tok, r->skip_special);
        /* the first piece follows the prompt's text: it keeps its leading space unless the prompt
         * is nothing but special tokens */
        for (int64_t i = 0; i < s->n_prompt; i++)
            if (!(cdx_tok_attr(e->tok, s->toks[i]) & CDX_TOK_CONTROL)) {
                s->ts.first = false;
                break;
            }
    }
    pthread_mutex_lock(&e->mu);
    if (e->n_inbox + e->n_waiting >= e->o.max_queue) {
        const int64_t q = e->n_inbox + e->n_waiting;
        pthread_mutex_unlock(&e->mu);
        seq_free(s);
        return cdx_err_set(err, CDX_ERESOURCE_BUSY, "%lld requests are waiting; the queue holds %d (try again later)",
                           (long long)q, e->o.max_queue);
    }
    const uint64_t sid = s->id = e->next_id++;
    if (e->inbox_tail) e->inbox_tail->next = s; else e->inbox = s;
    e->inbox_tail = s;
    e->n_inbox++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    /* s belongs to the engine thread now (it may already have run and freed it) */
    if (id)
        *id = sid;
    return CDX_OK;
}

void cdx_engine_cancel(cdx_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    uint64_t *g = cdx_array_grow(e->cancels, &e->cap_cancels, e->n_cancels, sizeof *g);
    if (!g) {
        pthread_mutex_unlock(&e->mu);
        return; /* out of memory: the request runs to its end */
    }
    e->cancels = g;
    e->cancels[e->n_cancels++] = id;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

bool cdx_engine_busy(cdx_engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool busy = e->n_inbox + e->n_waiting + e->n_running > 0 || e->n_cancels > 0;
    pthread_mutex_unlock(&e->mu);
    return busy;
}

void cdx_engine_wait(cdx_engine *e, int ms)
{
    pthread_mutex_lock(&e->mu);
    if (!e->n_inbox && !e->n_cancels && !e->n_waiting && !e->n_running) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
}

void cdx_engine_get_stats(cdx_engine *e, cdx_engine_stats *st)
{
    pthread_mutex_lock(&e->mu);
    *st = e->stats;
    pthread_mutex_unlock(&e->mu);
}

/* ---- the round ---- */

/* Ends the cancelled requests of a list. */
static void end_cancelled(cdx_engine *e, seq **head, int64_t *count)
{
    for (seq **p = head; *p;) {
        seq *s = *p;
        if (s->cancelled) {
            *p = s->next;
            (*count)--;
            seq_finish(e, s, CDX_FINISH_CANCELLED, NULL);
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
            if (seq_make_keys(r))
                continue;
            for (int64_t k = r->n_keys; k <= i; k++)
                seq_block_key(r, k, k ? r->keys[k - 1] : e->root_key, r->keys[k]);
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
    if (!seq_make_keys(s)) {
        const int64_t usable = (s->n_toks - 1) / CDX_KV_BLOCK;
        for (int64_t i = 0; i < usable; i++) {
            if (i >= s->n_keys) {
                seq_block_key(s, i, i ? s->keys[i - 1] : e->root_key, s->keys[i]);
                s->n_keys = i + 1;
            }
            int32_t b = table_find(e, s->keys[i]);
            if (b != NONE) {
                pool_hold(e, b);
            } else if (!e->store || !kv_store_has(e->store, s->keys[i]) || (b = pool_take(e)) == NONE) {
                break;
            } else if (kv_store_read(e->store, &e->shape, s->keys[i], e->blocks[b].k, e->blocks[b].v,
                                     e->state_bytes ? &e->blocks[b].snap : NULL)) {
                pool_release(e, b); /* a bad file is gone; the block is computed */
                break;
            } else {
                table_insert(e, b, s->keys[i]);
                e->blocks[b].stored = true;
                e->n_snaps += e->blocks[b].snap != NULL;
                e->t_store_r++;
            }
            if (seq_push_block(s, e, b)) {
                pool_release(e, b);
                break;
            }
            reuse++;
        }
    }
    if (reuse < s->n_keys && reuse < (s->n_toks - 1) / CDX_KV_BLOCK && block_in_flight(e, s, reuse)) {
        seq_release_blocks(e, s);
        return false;
    }
    /* a hybrid model resumes only where a state snapshot was kept: the blocks after the last such
     * block go back (they stay cached) and are computed */
    while (e->state_bytes && reuse > 0 && !e->blocks[s->blk[reuse - 1]].snap) {
        pool_release(e, s->blk[--s->n_blk]);
        reuse--;
    }
    if (e->state_bytes && reuse > 0)
        memcpy(s->state, e->blocks[s->blk[reuse - 1]].snap, e->state_bytes);
    const int64_t need = (s->n_toks + CDX_KV_BLOCK - 1) / CDX_KV_BLOCK - reuse;
    if (need > pool_available(e)) {
        seq_release_blocks(e, s);
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
    seq_release_blocks(e, newest);
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
        int32_t b = pool_take(e);
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
        if (seq_push_block(s, e, b)) {
            pool_release(e, b);
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
    pthread_mutex_unlock(&e->mu);
}

int cdx_engine_step(cdx_engine *e, cdx_err *err)
{
    take_inbox(e);
    while (admit_one(e))
        ;
    /* the batch: decoding sequences first (oldest first), then prompt chunks */
    int64_t n = 0, budget = e->o.token_budget;
    int n_seq = 0, n_logits = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (seq *s = e->running; s && budget > 0;) {
            seq *next = s->next;
            const int64_t left = s->n_toks - s->n_done;
            const bool decoding = left == 1;
            if (left <= 0 || decoding != (pass == 0)) {
                s = next;
                continue;
            }
            int64_t want = left < budget ? left : budget;
            if (e->state_bytes && !decoding) { /* end a chunk where the prompt's snapshot is taken */
                const int64_t pb = next_snap(s);
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
                    n = 0; n_seq = 0; n_logits = 0; budget = e->o.token_budget; pass = -1;
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
            const int si = n_seq++;
            e->b_seqs[si] = s;
            e->b_kv[si] = (cdx_kv_seq){ .k = s->ktab, .v = s->vtab, .n_blocks = s->n_blk, .block = CDX_KV_BLOCK,
                                        .layer_stride = (size_t)CDX_KV_BLOCK * (size_t)e->kv_dim,
                                        .type = e->o.kv_type, .state = s->state };
            for (int64_t p = s->n_done; p < end; p++) {
                if (seq_image_row(e, s, p, &e->b_embd[n], err)) {
                    /* the image cannot be encoded: this request ends, the batch is built again */
                    list_remove(&e->running, s);
                    e->n_running--;
                    seq_finish(e, s, CDX_FINISH_ERROR, err ? err->msg : "the image could not be encoded");
                    n = 0; n_seq = 0; n_logits = 0; budget = e->o.token_budget; pass = -1;
                    goto rebuild;
                }
                e->b_tok[n] = s->toks[p];
                e->b_seq[n] = si;
                e->b_pos[n] = p;
                e->b_want[n] = p == s->n_toks - 1;
                if (e->b_want[n])
                    e->b_logit_seq[n_logits++] = s;
                n++;
            }
            budget -= end - s->n_done;
            s = next;
        }
    rebuild:;
    }
    int rc = CDX_OK;
    if (n > 0) {
        cdx_batch b = { .n = n, .tokens = e->b_tok, .seq = e->b_seq, .pos = e->b_pos, .want_logits = e->b_want,
                        .embd = e->has_vision ? e->b_embd : NULL };
        rc = cdx_forward_seqs(e->fc, e->b_kv, n_seq, &b, e->logits, err);
        e->t_rounds++;
        if (rc) {
            for (int i = 0; i < n_seq; i++) {
                list_remove(&e->running, e->b_seqs[i]);
                e->n_running--;
                seq_finish(e, e->b_seqs[i], CDX_FINISH_ERROR, err ? err->msg : "the forward pass failed");
            }
        } else {
            /* what each sequence computed; full blocks become findable */
            for (int64_t i = 0; i < n; i++) {
                seq *s = e->b_seqs[e->b_seq[i]];
                s->n_done = e->b_pos[i] + 1;
            }
            for (int i = 0; i < n_seq; i++) {
                seq_register_blocks(e, e->b_seqs[i]);
                seq_snapshot(e, e->b_seqs[i]);
            }
            int n_lse = 0;
            for (int i = 0; i < n_logits; i++) {
                e->b_lse[i] = NAN;
                if (e->b_logit_seq[i]->logprobs)
                    e->b_lse_rows[n_lse++] = i;
            }
            lse_job lj = { cdx_forward_ctx_kernels(e->fc), e->logits, e->hp->n_vocab, e->b_lse_rows, n_lse, e->b_lse };
            if (n_lse > 1)
                cdx_pool_run(cdx_forward_ctx_pool(e->fc), lse_part, &lj);
            else
                lse_part(&lj, 0, 1);
            for (int i = 0; i < n_logits; i++) {
                seq *s = e->b_logit_seq[i];
                const char *msg = NULL;
                const cdx_finish f =
                    seq_on_logits(e, s, e->logits + (size_t)i * (size_t)e->hp->n_vocab, e->b_lse[i], &msg);
                if (f != CDX_FINISH_NONE) {
                    list_remove(&e->running, s);
                    e->n_running--;
                    seq_finish(e, s, f, msg);
                }
            }
        }
    }
    snapshot(e);
    return rc;
}
