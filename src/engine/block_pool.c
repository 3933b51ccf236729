/* The KV pool: block keys, the prefix hash table, the pool and its LRU of cached blocks, a
 * sequence's block table, the prefix registration of its full blocks, and a hybrid model's state
 * snapshots kept with keyed blocks (docs/engine.md, "The KV pool" and "Prefix sharing"). */
#include "engine/engine_impl.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
void eng_seq_block_key(const seq *s, int64_t i, const uint8_t parent[KEY_LEN], uint8_t out[KEY_LEN])
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
int eng_seq_make_keys(seq *s)
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

int32_t eng_table_find(const cdx_engine *e, const uint8_t key[KEY_LEN])
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

void eng_table_insert(cdx_engine *e, int32_t b, const uint8_t key[KEY_LEN])
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

/* Storage for a block's K and V (2 · block_floats · elem_bytes bytes, K first), carved from slabs
 * of several blocks (at least 2 MiB, 2 MiB-aligned) that the kernel is asked to back with huge
 * pages: decode at long contexts reads a KV head's rows a position's whole K apart in every block,
 * and with one 4 KiB-paged allocation per block it waited on the TLB (Llama-1B shape, 16k
 * positions, F16: 69 -> 59 ms per token's attention, bench/README.md "Long contexts"). A slab
 * never holds more blocks than the pool has left to give, so the pool's memory bound stays. */
#define SLAB_ALIGN ((size_t)2 << 20)
#define SLAB_MIN_BLOCKS 8
static char *block_storage(cdx_engine *e)
{
    const size_t bb = 2 * e->block_floats * e->elem_bytes;
    if (e->slab_left == 0) {
        int64_t n = (int64_t)(SLAB_ALIGN / bb) > SLAB_MIN_BLOCKS ? (int64_t)(SLAB_ALIGN / bb) : SLAB_MIN_BLOCKS;
        const int64_t rest = e->o.n_blocks - e->n_carved;
        n = n < rest ? n : rest;
        if (n <= 0)
            return NULL;
        char **sl = realloc(e->slabs, (size_t)(e->n_slabs + 1) * sizeof *sl);
        if (!sl)
            return NULL;
        e->slabs = sl;
        char *p = NULL;
        size_t bytes = 0;
        while (1) {
            bytes = ((size_t)n * bb + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN;
            if ((p = aligned_alloc(SLAB_ALIGN, bytes)) || n == 1)
                break;
            n = 1; /* short of memory: a slab of one block */
        }
        if (!p)
            return NULL;
        madvise(p, bytes, MADV_HUGEPAGE); /* a hint: without huge pages the slab works as well */
        e->slabs[e->n_slabs++] = p;
        e->slab_next = p;
        e->slab_left = n;
    }
    char *b = e->slab_next;
    e->slab_next += bb;
    e->slab_left--;
    e->n_carved++;
    return b;
}

/* Blocks a new allocation can have: free ones and cached ones nobody holds. */
int64_t eng_pool_available(const cdx_engine *e) { return e->n_free + e->n_lru; }

/* A block for a sequence to write (ref 1), or NONE when the pool is dry. Cached blocks go oldest
 * first; their storage is reused as it is. */
int32_t eng_pool_take(cdx_engine *e)
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
        char *st = block_storage(e);
        if (!st) {
            e->free_stack[e->n_free++] = b;
            return NONE;
        }
        k->k = st;
        k->v = st + e->block_floats * e->elem_bytes;
    }
    k->ref = 1;
    return b;
}

void eng_pool_hold(cdx_engine *e, int32_t b)
{
    kv_block *k = &e->blocks[b];
    if (k->ref++ == 0)
        lru_unlink(e, b); /* a held block is keyed (only keyed blocks are found) */
}

void eng_pool_release(cdx_engine *e, int32_t b)
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

int eng_seq_push_block(seq *s, cdx_engine *e, int32_t b)
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

void eng_seq_release_blocks(cdx_engine *e, seq *s)
{
    for (int64_t i = 0; i < s->n_blk; i++)
        eng_pool_release(e, s->blk[i]);
    s->n_blk = 0;
    s->n_done = 0;
    s->n_registered = 0;
    if (s->state)
        cdx_model_state_reset(e->m, s->state); /* back to position 0 with n_done */
}


/* Keys of s's full blocks up to n_done, offered to the prefix table (a key already there keeps
 * its block; ours stays private). */
void eng_seq_register_blocks(cdx_engine *e, seq *s)
{
    if (e->hp->rope_pass) /* its keys depend on the whole sequence's length: never shared */
        return;
    const int64_t full = s->n_done / CDX_KV_BLOCK;
    if (full <= s->n_registered)
        return;
    if (eng_seq_make_keys(s))
        return; /* no memory for keys: the blocks just stay private */
    for (int64_t i = s->n_keys; i < full; i++)
        eng_seq_block_key(s, i, i ? s->keys[i - 1] : s->root, s->keys[i]);
    if (full > s->n_keys)
        s->n_keys = full;
    for (int64_t i = s->n_registered; i < full; i++) {
        const int32_t b = s->blk[i];
        if (!e->blocks[b].keyed && eng_table_find(e, s->keys[i]) == NONE)
            eng_table_insert(e, b, s->keys[i]);
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
int64_t eng_next_snap(const seq *s)
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
void eng_seq_snapshot(cdx_engine *e, seq *s)
{
    if (!e->state_bytes || !s->n_done || s->n_done % CDX_KV_BLOCK)
        return;
    const bool at_prompt = s->n_done == snap_point(s) || (s->n_done % SNAP_EVERY == 0 && s->n_done < s->n_prompt),
               decoding = s->n_done >= s->n_prompt;
    const int64_t bi = s->n_done / CDX_KV_BLOCK - 1;
    if ((!at_prompt && !decoding) || bi >= s->n_keys || bi >= s->n_registered)
        return;
    const int32_t b = eng_table_find(e, s->keys[bi]);
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
