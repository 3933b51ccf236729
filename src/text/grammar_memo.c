/* The vocabulary's memo of states' token sets (docs/grammar.md, "Shared states"): a state's first
 * visit depends only on the part of the automaton it can reach (the rest of its rule and the rules
 * that rule calls, down to the rule's end) and on the vocabulary. So the sets a first visit made
 * (accepted ids or bits, check nodes, a chain head's exceptions) are kept per vocabulary under that
 * part, written out state by state in the order a breadth-first walk from the state meets them;
 * a state of another grammar, or of the same one, that writes out the same way takes a copy
 * instead of walking (JSON Schema's strings, formats and keys come back in many schemas, an email's
 * labels twice in one). Bounded: states that reach more than GM_STATES states are not kept, and
 * the memo stops taking entries at GM_BYTES. */
#include "text/grammar_match_int.h"

#define GM_STATES 128        /* states a kept state may reach */
#define GM_KEY (16 * GM_STATES) /* words of a key at most */
#define GM_BYTES (16u << 20)  /* bytes of a vocabulary's memo */

typedef struct {
    uint64_t h;
    int64_t serial;       /* the entry's number (entries are never removed) */
    uint32_t *key;
    size_t n_key;
    gr_state_sets s;
} gm_entry;

struct gr_memo {
    gm_entry *e;          /* open addressing, key NULL: empty */
    size_t cap, n;
    size_t bytes;
    int64_t hits, misses;
    int64_t horizon;      /* >= 0: only entries numbered below it are seen, and none is added (gr_memo_limit) */
};

static uint64_t gm_hash(const uint32_t *k, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ k[i]) * 0x100000001B3ull, h ^= h >> 29;
    return h;
}

/* (grammar_match_int.h) */
bool gr_memo_key(cdx_matcher *m, int32_t q, const uint32_t **key, size_t *n_key)
{
    const cdx_grammar *g = m->g;
    *key = NULL;
    *n_key = 0;
    if (!m->mx) { /* the scratch, once per matcher */
        m->mx = malloc((size_t)g->n_st * sizeof *m->mx + GM_STATES * sizeof *m->mq + GM_KEY * sizeof *m->mk);
        if (!m->mx)
            return false;
        memset(m->mx, 0xFF, (size_t)g->n_st * sizeof *m->mx);
        m->mq = m->mx + g->n_st;
        m->mk = (uint32_t *)(m->mq + GM_STATES);
    }
    int32_t *qu = m->mq, n_q = 0;
    uint32_t *k = m->mk;
    size_t n = 0;
    bool ok = true;
/* the index of state s in the walk's order, s queued on first sight; ok false past the bounds */
#define GM_IDX(s) (m->mx[s] >= 0 ? (uint32_t)m->mx[s] : n_q < GM_STATES ? (qu[n_q] = (s), (uint32_t)(m->mx[s] = n_q++)) : (ok = false, 0u))
    GM_IDX(q);
    for (int32_t i = 0; ok && i < n_q; i++) {
        const gr_state *st = &g->st[qu[i]];
        if (n + 1 + 2 * (size_t)st->ne + 2 * (size_t)st->nc > GM_KEY || st->ne >= 1 << 15 || st->nc >= 1 << 15) {
            ok = false;
            break;
        }
        k[n++] = (uint32_t)st->final | (uint32_t)st->ne << 1 | (uint32_t)st->nc << 16;
        for (int32_t e = 0; e < st->ne && ok; e++) {
            const gr_edge *ed = &g->edges[st->e0 + e];
            k[n++] = (uint32_t)ed->lo | (uint32_t)ed->hi << 8;
            k[n++] = GM_IDX(ed->to);
        }
        for (int32_t c = 0; c < st->nc && ok; c++) {
            const gr_call *gc = &g->calls[st->c0 + c];
            k[n++] = GM_IDX(g->rule_start[gc->rule]);
            k[n++] = GM_IDX(gc->ret);
        }
    }
#undef GM_IDX
    for (int32_t i = 0; i < n_q; i++)
        m->mx[qu[i]] = -1;
    if (!ok)
        return false;
    *key = k;
    *n_key = n;
    return true;
}

static gm_entry *gm_find(struct gr_memo *mm, const uint32_t *key, size_t n, uint64_t h)
{
    if (!mm || !mm->cap)
        return NULL;
    for (size_t i = h & (mm->cap - 1);; i = (i + 1) & (mm->cap - 1)) {
        gm_entry *e = &mm->e[i];
        if (!e->key)
            return e;
        if (e->h == h && e->n_key == n && !memcmp(e->key, key, n * sizeof *key))
            return e;
    }
}

/* a copy of n items of size sz, or NULL (n == 0 too) */
static void *gm_dup(const void *p, size_t n, size_t sz, bool *oom)
{
    if (!p || !n)
        return NULL;
    void *d = malloc(n * sz);
    if (!d)
        *oom = true;
    else
        memcpy(d, p, n * sz);
    return d;
}

static bool sets_copy(gr_state_sets *to, const gr_state_sets *from, size_t nw)
{
    bool oom = false;
    gr_state_sets s = *from;
    s.ids = from->bits ? NULL : gm_dup(from->ids, (size_t)from->n_ids ? (size_t)from->n_ids : 1, sizeof *s.ids, &oom);
    s.bits = gm_dup(from->bits, nw, sizeof *s.bits, &oom);
    s.chk = gm_dup(from->chk, (size_t)from->n_chk, sizeof *s.chk, &oom);
    s.excl = gm_dup(from->excl, 32, 1, &oom);
    if (from->ids && !from->bits && !s.ids)
        oom = true;
    if (oom) {
        free(s.ids);
        free(s.bits);
        free(s.chk);
        free(s.excl);
        return false;
    }
    *to = s;
    return true;
}

/* (grammar_match_int.h) */
bool gr_memo_get(cdx_grammar_vocab *v, const uint32_t *key, size_t n_key, gr_state_sets *out)
{
    const uint64_t h = gm_hash(key, n_key);
    pthread_mutex_lock(&v->memo_mu);
    gm_entry *e = gm_find(v->memo, key, n_key, h);
    const bool hit = e && e->key && (v->memo->horizon < 0 || e->serial < v->memo->horizon) &&
                     sets_copy(out, &e->s, v->n_words);
    if (v->memo)
        hit ? v->memo->hits++ : v->memo->misses++;
    pthread_mutex_unlock(&v->memo_mu);
    return hit;
}

/* (grammar_match_int.h) */
void gr_memo_put(cdx_grammar_vocab *v, const uint32_t *key, size_t n_key, const gr_state_sets *s)
{
    const uint64_t h = gm_hash(key, n_key);
    const size_t sz = n_key * sizeof *key + (s->bits ? v->n_words * sizeof *s->bits : (size_t)s->n_ids * sizeof *s->ids) +
                      (size_t)s->n_chk * sizeof *s->chk + (s->excl ? 32 : 0) + sizeof(gm_entry);
    pthread_mutex_lock(&v->memo_mu);
    struct gr_memo *mm = v->memo;
    if (!mm) {
        if (!(mm = v->memo = calloc(1, sizeof *mm)))
            goto out;
        mm->horizon = -1;
    }
    if (mm->bytes + sz > GM_BYTES || mm->horizon >= 0)
        goto out;
    if ((mm->n + 1) * 2 > mm->cap) { /* grow: rehash */
        const size_t nc = mm->cap ? 2 * mm->cap : 256;
        gm_entry *t = calloc(nc, sizeof *t);
        if (!t)
            goto out;
        for (size_t i = 0; i < mm->cap; i++)
            if (mm->e[i].key) {
                size_t j = mm->e[i].h & (nc - 1);
                while (t[j].key)
                    j = (j + 1) & (nc - 1);
                t[j] = mm->e[i];
            }
        mm->bytes += (nc - mm->cap) * sizeof *t;
        free(mm->e);
        mm->e = t;
        mm->cap = nc;
    }
    gm_entry *e = gm_find(mm, key, n_key, h);
    if (e->key) /* a matcher of another thread put it first */
        goto out;
    uint32_t *k = malloc(n_key * sizeof *k);
    if (!k || !sets_copy(&e->s, s, v->n_words)) {
        free(k);
        goto out;
    }
    memcpy(k, key, n_key * sizeof *k);
    e->key = k;
    e->n_key = n_key;
    e->h = h;
    e->serial = (int64_t)mm->n;
    mm->n++;
    mm->bytes += sz;
out:
    pthread_mutex_unlock(&v->memo_mu);
}

/* (grammar_match_int.h) */
void gr_memo_free(cdx_grammar_vocab *v)
{
    struct gr_memo *mm = v->memo;
    for (size_t i = 0; mm && i < mm->cap; i++)
        if (mm->e[i].key) {
            free(mm->e[i].key);
            free(mm->e[i].s.ids);
            free(mm->e[i].s.bits);
            free(mm->e[i].s.chk);
            free(mm->e[i].s.excl);
        }
    if (mm)
        free(mm->e);
    free(mm);
    v->memo = NULL;
}

/* (grammar_int.h) */
void gr_memo_stats(const cdx_grammar_vocab *v, int64_t *entries, int64_t *bytes, int64_t *hits, int64_t *misses)
{
    cdx_grammar_vocab *w = (cdx_grammar_vocab *)v; /* the memo, under its lock */
    pthread_mutex_lock(&w->memo_mu);
    const struct gr_memo *mm = v->memo;
    *entries = mm ? (int64_t)mm->n : 0;
    *bytes = mm ? (int64_t)mm->bytes : 0;
    *hits = mm ? mm->hits : 0;
    *misses = mm ? mm->misses : 0;
    pthread_mutex_unlock(&w->memo_mu);
}

/* (grammar_int.h) */
void gr_memo_limit(cdx_grammar_vocab *v, int64_t n)
{
    pthread_mutex_lock(&v->memo_mu);
    if (!v->memo && (v->memo = calloc(1, sizeof *v->memo)))
        v->memo->horizon = -1;
    if (v->memo)
        v->memo->horizon = n;
    pthread_mutex_unlock(&v->memo_mu);
}
