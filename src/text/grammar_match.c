/* The incremental matcher: a set of parse stacks over the automaton of grammar_int.h, advanced
 * byte by byte, and the token masks computed from it over a trie of the vocabulary's bytes.
 *
 * Stacks. A stack is an item (state, parent) whose parent is a node (return state, parent) in a
 * hash-consed store, so stacks that share their bottom share their nodes and two equal stacks are
 * the same pair of numbers. The matcher holds the set of items after the text so far (each item's
 * state has byte edges: calls and rule ends were expanded by the closure), and `done` when the
 * root rule may end there.
 *
 * Masks (the idea of XGrammar's adaptive token-mask cache, written for this automaton). For a state
 * s, which tokens can be consumed starting at s does not depend on the stack below s, except for
 * tokens whose bytes run past the end of s's rule. So the first time s is on top, one walk of the
 * vocabulary trie from the lone item (s, bottom) sorts every token into: accepted (consumed inside
 * the rule, or ending exactly where the rule may end), or "to check" (some path ends the rule in
 * the middle of the token: the rest of it belongs to the caller). The walk records the trie nodes
 * where the rule can end; the tokens below them are checked at mask time against the real caller,
 * and that result is cached per (s, parent node). A mask is then a copy of s's accepted set (a
 * list of ids, or of the rejected ids when that is shorter) plus the cached checked ids: O(n_vocab
 * / 32) words, a few microseconds on 150k tokens, after the first visit of each (state, parent).
 * The trie is stored in preorder with each node's subtree end, so a rejected prefix skips its
 * whole subtree and a walk is one forward scan. */
#include "text/grammar_int.h"
#include "caldrix/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the vocabulary trie ---- */

#define MAX_TOKEN_BYTES 1024 /* longer tokens never match (none of the known vocabularies has one) */

struct cdx_grammar_vocab {
    int64_t n_vocab;
    int32_t n_nodes;
    uint8_t *byte;       /* [n_nodes] the byte on the edge into the node (node 0: the root) */
    uint16_t *depth;     /* [n_nodes] */
    int32_t *end;        /* [n_nodes] one past the last node of the subtree */
    int32_t *tok0;       /* [n_nodes + 1] node i's tokens are ids[tok0[i] .. tok0[i+1]) */
    int32_t *ids;
    int max_depth;
    size_t n_words;      /* (n_vocab + 31) / 32 */
    uint32_t *usable;    /* [n_words] in the trie */
    uint32_t *eog;       /* [n_words] end of generation */
    int64_t n_usable;
    uint64_t fingerprint; /* of the trie: grammars key their caches by it */
    int32_t *node_of;    /* [n_vocab] the node where the token ends, or -1 */
    int32_t *parent;     /* [n_nodes] */
};

typedef struct {
    const uint8_t *b;
    uint32_t len;
    int32_t id;
} tok_entry;

static int cmp_entry(const void *a, const void *b)
{
    const tok_entry *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->b, y->b, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int vocab_build(tok_entry *e, size_t n, int64_t n_vocab, const int32_t *eog, int n_eog,
                       cdx_grammar_vocab **out, cdx_err *err)
{
    cdx_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    v->n_vocab = n_vocab;
    v->n_words = (size_t)(n_vocab + 31) / 32;
    qsort(e, n, sizeof *e, cmp_entry);
    size_t total = 1;
    for (size_t i = 0; i < n; i++)
        total += e[i].len;
    /* upper bound on nodes: every byte of every token */
    if (total > INT32_MAX) {
        free(v);
        return cdx_err_set(err, CDX_ERANGE, "vocabulary of %zu bytes is too large", total);
    }
    v->byte = malloc(total);
    v->depth = malloc(total * sizeof *v->depth);
    v->end = malloc(total * sizeof *v->end);
    v->tok0 = calloc(total + 1, sizeof *v->tok0);
    v->ids = malloc((n ? n : 1) * sizeof *v->ids);
    v->usable = calloc(v->n_words, sizeof *v->usable);
    v->eog = calloc(v->n_words, sizeof *v->eog);
    if (!v->byte || !v->depth || !v->end || !v->tok0 || !v->ids || !v->usable || !v->eog) {
        cdx_grammar_vocab_free(v);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    v->node_of = malloc((size_t)n_vocab * sizeof *v->node_of);
    v->parent = malloc(total * sizeof *v->parent);
    if (!v->node_of || !v->parent) {
        cdx_grammar_vocab_free(v);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n_vocab; i++)
        v->node_of[i] = -1;
    /* Sorted byte strings give the trie in preorder: each entry shares its longest common prefix
     * with the one before, and its end node is never before the previous entry's. */
    int32_t path[MAX_TOKEN_BYTES + 1];
    int plen = 0; /* nodes on the current path below the root */
    int32_t nn = 1;
    v->byte[0] = 0;
    v->depth[0] = 0;
    v->parent[0] = -1;
    path[0] = 0;
    const tok_entry *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t lcp = 0;
        if (prev)
            while (lcp < prev->len && lcp < e[i].len && prev->b[lcp] == e[i].b[lcp])
                lcp++;
        while ((uint32_t)plen > lcp) {
            v->end[path[plen]] = nn;
            plen--;
        }
        for (uint32_t k = lcp; k < e[i].len; k++) {
            v->byte[nn] = e[i].b[k];
            v->depth[nn] = (uint16_t)(k + 1);
            v->parent[nn] = path[plen];
            path[++plen] = nn++;
        }
        v->ids[i] = e[i].id;
        v->node_of[e[i].id] = path[plen];
        v->tok0[path[plen] + 1]++;
        v->usable[e[i].id / 32] |= 1u << (e[i].id % 32);
        v->n_usable++;
        if ((int)e[i].len > v->max_depth)
            v->max_depth = (int)e[i].len;
        prev = &e[i];
    }
    while (plen > 0) {
        v->end[path[plen]] = nn;
        plen--;
    }
    v->end[0] = nn;
    v->n_nodes = nn;
    for (int32_t k = 0; k < nn; k++)
        v->tok0[k + 1] += v->tok0[k];
    /* FNV-1a over the trie and its ids */
    uint64_t h = 0xCBF29CE484222325ull ^ (uint64_t)n_vocab;
    for (int32_t k = 0; k < nn; k++)
        h = (h ^ (uint64_t)(v->byte[k] | (uint32_t)v->depth[k] << 8)) * 0x100000001B3ull;
    for (size_t k = 0; k < n; k++)
        h = (h ^ (uint64_t)(uint32_t)v->ids[k]) * 0x100000001B3ull;
    v->fingerprint = h;
    for (int i = 0; i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab)
            v->eog[eog[i] / 32] |= 1u << (eog[i] % 32);
    *out = v;
    return CDX_OK;
}

int cdx_grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens, int64_t n_vocab,
                                  const int32_t *eog, int n_eog, cdx_grammar_vocab **out, cdx_err *err)
{
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > (1 << 24))
        return cdx_err_set(err, CDX_EINVAL, "vocabulary of %lld tokens is out of range", (long long)n_vocab);
    tok_entry *e = malloc((size_t)n_vocab * sizeof *e);
    if (!e)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    size_t n = 0;
    for (int64_t i = 0; i < n_vocab; i++)
        if (pieces[i] && lens[i] > 0 && lens[i] <= MAX_TOKEN_BYTES)
            e[n++] = (tok_entry){ (const uint8_t *)pieces[i], (uint32_t)lens[i], (int32_t)i };
    int rc = vocab_build(e, n, n_vocab, eog, n_eog, out, err);
    free(e);
    return rc;
}

int cdx_grammar_vocab_from_tok(const cdx_tok *tok, int64_t n_vocab, cdx_grammar_vocab **out, cdx_err *err)
{
    *out = NULL;
    int64_t nt = cdx_tok_n_vocab(tok);
    if (n_vocab <= 0)
        n_vocab = nt;
    if (n_vocab > (1 << 24))
        return cdx_err_set(err, CDX_EINVAL, "vocabulary of %lld tokens is out of range", (long long)n_vocab);
    char **pieces = calloc((size_t)n_vocab, sizeof *pieces);
    size_t *lens = calloc((size_t)n_vocab, sizeof *lens);
    int32_t *eog = malloc((size_t)n_vocab * sizeof *eog);
    int n_eog = 0, rc = 0;
    if (!pieces || !lens || !eog) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n_vocab && i < nt; i++) {
        if (cdx_tok_is_eog(tok, (int32_t)i))
            eog[n_eog++] = (int32_t)i;
        int a = cdx_tok_attr(tok, (int32_t)i);
        if (a & (CDX_TOK_CONTROL | CDX_TOK_UNKNOWN | CDX_TOK_UNUSED))
            continue;
        char buf[MAX_TOKEN_BYTES];
        int k = cdx_tok_piece(tok, (int32_t)i, false, false, buf, sizeof buf);
        if (k <= 0 || k > MAX_TOKEN_BYTES)
            continue;
        pieces[i] = malloc((size_t)k);
        if (!pieces[i]) {
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto done;
        }
        memcpy(pieces[i], buf, (size_t)k);
        lens[i] = (size_t)k;
    }
    rc = cdx_grammar_vocab_from_pieces((const char *const *)pieces, lens, n_vocab, eog, n_eog, out, err);
done:
    if (pieces)
        for (int64_t i = 0; i < n_vocab; i++)
            free(pieces[i]);
    free(pieces);
    free(lens);
    free(eog);
    return rc;
}

void cdx_grammar_vocab_free(cdx_grammar_vocab *v)
{
    if (!v)
        return;
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok0);
    free(v->ids);
    free(v->usable);
    free(v->eog);
    free(v->node_of);
    free(v->parent);
    free(v);
}

int64_t cdx_grammar_vocab_size(const cdx_grammar_vocab *v) { return v->n_vocab; }

bool cdx_grammar_vocab_is_eog(const cdx_grammar_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_vocab && (v->eog[id / 32] >> (id % 32) & 1);
}

/* ---- stacks ---- */

typedef struct {
    int32_t st, par;   /* par: a node, or -1 (the bottom) */
} item;

typedef struct {
    int32_t st, par, next;
} gnode;

typedef struct {
    bool ready;          /* read and written atomically (matchers of several threads share it) */
    bool compl;          /* compl: ids are the rejected ones (of the usable tokens) */
    int32_t n_ids, n_chk;
    int32_t *ids;
    int32_t *chk;        /* trie nodes where the rule may end: their subtrees are checked at the caller */
} pstate;

struct gr_cache {
    uint64_t fingerprint;
    int64_t n_vocab;
    pstate *pc;          /* [n_st] */
    struct gr_cache *next;
};

void gr_cache_free(cdx_grammar *g)
{
    for (struct gr_cache *c = g->caches, *nx; c; c = nx) {
        nx = c->next;
        for (int32_t i = 0; i < g->n_st; i++) {
            free(c->pc[i].ids);
            free(c->pc[i].chk);
        }
        free(c->pc);
        free(c);
    }
    g->caches = NULL;
}

/* The cache of g for v, made on first use; NULL out of memory. */
static pstate *cache_for(const cdx_grammar *cg, const cdx_grammar_vocab *v)
{
    cdx_grammar *g = (cdx_grammar *)cg; /* the cache is the one mutable part, under g->mu */
    pthread_mutex_lock(&g->mu);
    struct gr_cache *c = g->caches;
    while (c && (c->fingerprint != v->fingerprint || c->n_vocab != v->n_vocab))
        c = c->next;
    if (!c && (c = calloc(1, sizeof *c))) {
        c->pc = calloc((size_t)g->n_st, sizeof *c->pc);
        if (!c->pc) {
            free(c);
            c = NULL;
        } else {
            c->fingerprint = v->fingerprint;
            c->n_vocab = v->n_vocab;
            c->next = g->caches;
            g->caches = c;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return c ? c->pc : NULL;
}

typedef struct {
    int32_t st, par;     /* key; st < 0: empty slot */
    int32_t n;
    int32_t *ids;
} centry;

struct cdx_matcher {
    const cdx_grammar *g;
    const cdx_grammar_vocab *v;
    gnode *nodes;
    size_t n_nodes, cap_nodes;
    int32_t *heads;
    uint32_t hmask;
    item *cur;
    size_t n_cur, cap_cur;
    bool done;
    int64_t n_bytes;
    pstate *pc;          /* [n_st] the grammar's cache for this vocabulary (shared) */
    centry *cc;          /* checked tokens per (state, parent), open addressing */
    size_t n_cc, cap_cc;
    /* scratch */
    item *wb;            /* configurations along the trie path */
    size_t cap_wb;
    size_t *woff;        /* [max_depth + 2] cfg at depth d is wb[woff[d] .. woff[d+1]) */
    item *work, *vis;    /* closure */
    size_t cap_work, cap_vis, n_vis;
    int32_t *tl;         /* token list */
    size_t n_tl, cap_tl;
    int32_t *tl2;
    size_t n_tl2, cap_tl2;
    uint32_t *stamp;     /* [n_st] */
    uint32_t stamp_now;
    uint8_t *keep;       /* scratch bits for complement lists */
    size_t cap_keep;
    bool oom;
};

static uint32_t hash2(int32_t a, int32_t b)
{
    uint64_t x = (uint64_t)(uint32_t)a * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)b * 0xC2B2AE3D27D4EB4Full;
    return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

static bool rehash(cdx_matcher *m, uint32_t nb)
{
    int32_t *h = malloc((size_t)nb * sizeof *h);
    if (!h)
        return false;
    for (uint32_t i = 0; i < nb; i++)
        h[i] = -1;
    for (size_t i = 0; i < m->n_nodes; i++) {
        uint32_t b = hash2(m->nodes[i].st, m->nodes[i].par) & (nb - 1);
        m->nodes[i].next = h[b];
        h[b] = (int32_t)i;
    }
    free(m->heads);
    m->heads = h;
    m->hmask = nb - 1;
    return true;
}

/* The node (st, par), made on first use; -1 out of memory. */
static int32_t cons(cdx_matcher *m, int32_t st, int32_t par)
{
    uint32_t b = hash2(st, par) & m->hmask;
    for (int32_t i = m->heads[b]; i >= 0; i = m->nodes[i].next)
        if (m->nodes[i].st == st && m->nodes[i].par == par)
            return i;
    if (m->n_nodes >= INT32_MAX / 2) {
        m->oom = true;
        return -1;
    }
    gnode *nn = cdx_array_grow(m->nodes, &m->cap_nodes, m->n_nodes, sizeof *m->nodes);
    if (!nn) {
        m->oom = true;
        return -1;
    }
    m->nodes = nn;
    int32_t id = (int32_t)m->n_nodes++;
    m->nodes[id] = (gnode){ st, par, m->heads[b] };
    m->heads[b] = id;
    if (m->n_nodes > 2 * ((size_t)m->hmask + 1) && !rehash(m, 2 * (m->hmask + 1)))
        m->oom = true;
    return id;
}

static bool grow_items(item **a, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    item *n = realloc(*a, c * sizeof *n);
    if (!n)
        return false;
    *a = n;
    *cap = c;
    return true;
}

/* Appends the items of the closure of (q, p) to wb[at + *n ...], without duplicates; sets *popped
 * when the bottom rule may end. */
static void closure(cdx_matcher *m, int32_t q, int32_t p, size_t at, size_t *n, bool *popped)
{
    const cdx_grammar *g = m->g;
    const gr_state *s = &g->st[q];
    if (!s->nc && !s->final) {
        /* the common case: a state that only reads bytes (or a dead one) */
        if (!s->ne)
            return;
        for (size_t i = 0; i < *n; i++)
            if (m->wb[at + i].st == q && m->wb[at + i].par == p)
                return;
        if (!grow_items(&m->wb, &m->cap_wb, at + *n + 1)) {
            m->oom = true;
            return;
        }
        m->wb[at + (*n)++] = (item){ q, p };
        return;
    }
    size_t nw = 0;
    m->n_vis = 0;
    if (!grow_items(&m->work, &m->cap_work, 1)) {
        m->oom = true;
        return;
    }
    m->work[nw++] = (item){ q, p };
    while (nw && !m->oom) {
        item it = m->work[--nw];
        bool seen = false;
        for (size_t i = 0; i < m->n_vis && !seen; i++)
            seen = m->vis[i].st == it.st && m->vis[i].par == it.par;
        if (seen)
            continue;
        if (!grow_items(&m->vis, &m->cap_vis, m->n_vis + 1)) {
            m->oom = true;
            return;
        }
        m->vis[m->n_vis++] = it;
        s = &g->st[it.st];
        if (s->ne) {
            bool dup = false;
            for (size_t i = 0; i < *n && !dup; i++)
                dup = m->wb[at + i].st == it.st && m->wb[at + i].par == it.par;
            if (!dup) {
                if (!grow_items(&m->wb, &m->cap_wb, at + *n + 1)) {
                    m->oom = true;
                    return;
                }
                m->wb[at + (*n)++] = it;
            }
        }
        if (!grow_items(&m->work, &m->cap_work, nw + (size_t)s->nc + 1)) {
            m->oom = true;
            return;
        }
        for (int32_t c = 0; c < s->nc; c++) {
            const gr_call *gc = &g->calls[s->c0 + c];
            int32_t np = cons(m, gc->ret, it.par);
            if (np < 0)
                return;
            m->work[nw++] = (item){ g->rule_start[gc->rule], np };
        }
        if (s->final) {
            if (it.par < 0)
                *popped = true;
            else
                m->work[nw++] = (item){ m->nodes[it.par].st, m->nodes[it.par].par };
        }
    }
}

/* cfg = wb[from .. from+n_from) advanced over byte b, written at wb[at ...]; returns the count. */
static size_t advance(cdx_matcher *m, size_t from, size_t n_from, uint8_t b, size_t at, bool *popped)
{
    const cdx_grammar *g = m->g;
    size_t n = 0;
    for (size_t i = 0; i < n_from; i++) {
        item it = m->wb[from + i];
        const gr_state *s = &g->st[it.st];
        const gr_edge *e = g->edges + s->e0;
        for (int32_t k = 0; k < s->ne; k++)
            if (b >= e[k].lo && b <= e[k].hi)
                closure(m, e[k].to, it.par, at, &n, popped);
    }
    return n;
}

static bool tl_push(int32_t **a, size_t *n, size_t *cap, int32_t v)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 256;
        int32_t *x = realloc(*a, c * sizeof *x);
        if (!x)
            return false;
        *a = x;
        *cap = c;
    }
    (*a)[(*n)++] = v;
    return true;
}

static bool ensure_walk(cdx_matcher *m, size_t need)
{
    if (!grow_items(&m->wb, &m->cap_wb, need)) {
        m->oom = true;
        return false;
    }
    return true;
}

/* Walks trie nodes [lo, hi) whose parent config is at depth d0 (woff[d0], woff[d0+1] set).
 * Check mode (chk == NULL): collects in tl the tokens fully consumed (the stack alive, or the
 * bottom reached). Precompute mode: the same into tl, plus in *chk the nodes where the bottom rule
 * may end and that have children. */
static void walk(cdx_matcher *m, int32_t lo, int32_t hi, int32_t **chk, size_t *n_chk, size_t *cap_chk)
{
    const cdx_grammar_vocab *v = m->v;
    int32_t i = lo;
    while (i < hi && !m->oom) {
        int d = v->depth[i];
        size_t from = m->woff[d - 1], nf = m->woff[d] - from;
        bool popped = false;
        size_t n = nf ? advance(m, from, nf, v->byte[i], m->woff[d], &popped) : 0;
        m->woff[d + 1] = m->woff[d] + n;
        if (!n && !popped) {
            i = v->end[i];
            continue;
        }
        for (int32_t k = v->tok0[i]; k < v->tok0[i + 1]; k++)
            if (!tl_push(&m->tl, &m->n_tl, &m->cap_tl, v->ids[k]))
                m->oom = true;
        if (popped && chk && v->end[i] > i + 1 && !tl_push(chk, n_chk, cap_chk, i))
            m->oom = true;
        if (!n) {
            i = v->end[i];
            continue;
        }
        /* room for the next depth's configuration */
        if (!ensure_walk(m, m->woff[d + 1] + 64))
            return;
        i++;
    }
}

static bool bit(const uint32_t *b, int32_t i) { return b[i / 32] >> (i % 32) & 1; }

static pstate *precompute_locked(cdx_matcher *m, int32_t q);

static pstate *precompute(cdx_matcher *m, int32_t q)
{
    pstate *ps = &m->pc[q];
    if (__atomic_load_n(&ps->ready, __ATOMIC_ACQUIRE))
        return ps;
    cdx_grammar *g = (cdx_grammar *)m->g;
    pthread_mutex_lock(&g->mu);
    ps = precompute_locked(m, q);
    pthread_mutex_unlock(&g->mu);
    return ps;
}

static pstate *precompute_locked(cdx_matcher *m, int32_t q)
{
    pstate *ps = &m->pc[q];
    if (ps->ready)
        return ps;
    const cdx_grammar_vocab *v = m->v;
    if (!ensure_walk(m, 64))
        return NULL;
    m->wb[0] = (item){ q, -1 };
    m->woff[0] = 0;
    m->woff[1] = 1;
    m->n_tl = 0;
    size_t n_chk = 0, cap_chk = 0;
    int32_t *chk = NULL;
    walk(m, 1, v->n_nodes, &chk, &n_chk, &cap_chk);
    if (m->oom) {
        free(chk);
        return NULL;
    }
    /* accepted ids, or the rejected ones when fewer */
    int64_t n_acc = (int64_t)m->n_tl;
    if (n_acc > v->n_usable / 2) {
        size_t nw = v->n_words;
        if (m->cap_keep < nw * 4) {
            uint8_t *k = realloc(m->keep, nw * 4);
            if (!k) {
                free(chk);
                m->oom = true;
                return NULL;
            }
            m->keep = k;
            m->cap_keep = nw * 4;
        }
        uint32_t *acc = (uint32_t *)m->keep;
        memset(acc, 0, nw * 4);
        for (size_t i = 0; i < m->n_tl; i++)
            acc[m->tl[i] / 32] |= 1u << (m->tl[i] % 32);
        int64_t n_rej = v->n_usable - n_acc;
        ps->ids = malloc((size_t)(n_rej > 0 ? n_rej : 1) * sizeof *ps->ids);
        if (!ps->ids) {
            free(chk);
            m->oom = true;
            return NULL;
        }
        int32_t k = 0;
        for (int64_t id = 0; id < v->n_vocab; id++)
            if (bit(v->usable, (int32_t)id) && !bit(acc, (int32_t)id))
                ps->ids[k++] = (int32_t)id;
        ps->n_ids = k;
        ps->compl = true;
    } else {
        ps->ids = malloc((m->n_tl ? m->n_tl : 1) * sizeof *ps->ids);
        if (!ps->ids) {
            free(chk);
            m->oom = true;
            return NULL;
        }
        if (m->n_tl)
            memcpy(ps->ids, m->tl, m->n_tl * sizeof *ps->ids);
        ps->n_ids = (int32_t)m->n_tl;
    }
    ps->chk = chk;
    ps->n_chk = (int32_t)n_chk;
    __atomic_store_n(&ps->ready, true, __ATOMIC_RELEASE);
    return ps;
}

/* The tokens of q's check list that the caller p lets through (cached per (q, p)). */
static centry *checked(cdx_matcher *m, int32_t q, int32_t p, const pstate *ps)
{
    if (m->n_cc * 2 >= m->cap_cc) {
        size_t nc = m->cap_cc ? 2 * m->cap_cc : 256;
        centry *t = malloc(nc * sizeof *t);
        if (!t) {
            m->oom = true;
            return NULL;
        }
        for (size_t i = 0; i < nc; i++)
            t[i].st = -1;
        for (size_t i = 0; i < m->cap_cc; i++)
            if (m->cc[i].st >= 0) {
                size_t h = hash2(m->cc[i].st, m->cc[i].par) & (nc - 1);
                while (t[h].st >= 0)
                    h = (h + 1) & (nc - 1);
                t[h] = m->cc[i];
            }
        free(m->cc);
        m->cc = t;
        m->cap_cc = nc;
    }
    size_t h = hash2(q, p) & (m->cap_cc - 1);
    while (m->cc[h].st >= 0) {
        if (m->cc[h].st == q && m->cc[h].par == p)
            return &m->cc[h];
        h = (h + 1) & (m->cap_cc - 1);
    }
    const cdx_grammar_vocab *v = m->v;
    m->n_tl = 0;
    /* the caller's configuration once q's rule ended */
    bool done = false;
    size_t n = 0;
    if (!ensure_walk(m, 64))
        return NULL;
    closure(m, m->nodes[p].st, m->nodes[p].par, 0, &n, &done);
    if (m->oom)
        return NULL;
    for (int32_t c = 0; c < ps->n_chk && n; c++) {
        int32_t u = ps->chk[c];
        int d = v->depth[u];
        if (!ensure_walk(m, 2 * n + 64))
            return NULL;
        /* layout: wb[0..n) is the caller's config; walk's depth d reads woff[d]..woff[d+1) */
        m->woff[d] = 0;
        m->woff[d + 1] = n;
        walk(m, u + 1, v->end[u], NULL, NULL, NULL);
        if (m->oom)
            return NULL;
    }
    int32_t *ids = malloc((m->n_tl ? m->n_tl : 1) * sizeof *ids);
    if (!ids) {
        m->oom = true;
        return NULL;
    }
    if (m->n_tl) /* m->tl is NULL until the first token lands in it */
        memcpy(ids, m->tl, m->n_tl * sizeof *ids);
    m->cc[h] = (centry){ q, p, (int32_t)m->n_tl, ids };
    m->n_cc++;
    return &m->cc[h];
}

/* ---- the matcher ---- */

static int start(cdx_matcher *m)
{
    size_t n = 0;
    bool done = false;
    if (!ensure_walk(m, 64))
        return CDX_ENOMEM;
    closure(m, m->g->rule_start[m->g->root], -1, 0, &n, &done);
    if (m->oom || !grow_items(&m->cur, &m->cap_cur, n + 1))
        return CDX_ENOMEM;
    memcpy(m->cur, m->wb, n * sizeof *m->cur);
    m->n_cur = n;
    m->done = done;
    m->n_bytes = 0;
    return CDX_OK;
}

int cdx_matcher_create(const cdx_grammar *g, const cdx_grammar_vocab *v, cdx_matcher **out, cdx_err *err)
{
    *out = NULL;
    cdx_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    m->g = g;
    m->v = v;
    m->pc = cache_for(g, v);
    m->stamp = calloc((size_t)g->n_st, sizeof *m->stamp);
    m->woff = calloc((size_t)v->max_depth + 3, sizeof *m->woff);
    if (!m->pc || !m->stamp || !m->woff || !rehash(m, 1024) || start(m)) {
        cdx_matcher_free(m);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    *out = m;
    return CDX_OK;
}

void cdx_matcher_free(cdx_matcher *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap_cc; i++)
        if (m->cc[i].st >= 0)
            free(m->cc[i].ids);
    free(m->cc);
    free(m->stamp);
    free(m->nodes);
    free(m->heads);
    free(m->cur);
    free(m->wb);
    free(m->woff);
    free(m->work);
    free(m->vis);
    free(m->tl);
    free(m->tl2);
    free(m->keep);
    free(m);
}

void cdx_matcher_reset(cdx_matcher *m)
{
    m->oom = false;
    if (start(m))
        m->oom = true;
}

bool cdx_matcher_done(const cdx_matcher *m) { return m->done; }
bool cdx_matcher_closed(const cdx_matcher *m) { return m->done && m->n_cur == 0; }
int64_t cdx_matcher_n_bytes(const cdx_matcher *m) { return m->n_bytes; }

/* One byte for a message: 'c' when printable, else 0xHH. */
static int put_byte(char *b, size_t n, unsigned v)
{
    return v >= 0x20 && v < 0x7F && v != '\'' && v != '\\' ? snprintf(b, n, "'%c'", v) : snprintf(b, n, "0x%02X", v);
}

size_t cdx_matcher_expected(const cdx_matcher *m, char *buf, size_t cap)
{
    if (!cap)
        return 0;
    buf[0] = 0;
    uint8_t want[32] = { 0 };
    int32_t rules[3];
    int n_rules = 0, more_rules = 0;
    for (size_t i = 0; i < m->n_cur; i++) {
        const gr_state *s = &m->g->st[m->cur[i].st];
        for (int32_t k = 0; k < s->ne; k++) {
            const gr_edge *e = &m->g->edges[s->e0 + k];
            for (unsigned b = e->lo; b <= e->hi; b++)
                want[b / 8] |= (uint8_t)(1u << (b % 8));
        }
        bool seen = false;
        for (int r = 0; r < n_rules; r++)
            seen = seen || rules[r] == s->rule;
        if (!seen && n_rules < 3)
            rules[n_rules++] = s->rule;
        else if (!seen)
            more_rules = 1;
    }
    size_t w = 0;
#define PUT(...)                                                                                                      \
    do {                                                                                                              \
        int k_ = snprintf(buf + w, w < cap ? cap - w : 0, __VA_ARGS__);                                               \
        w += k_ > 0 ? (size_t)k_ : 0;                                                                                 \
    } while (0)
    if (!n_rules) {
        PUT("the grammar is complete and nothing may follow");
    } else {
        PUT("in rule%s ", n_rules > 1 ? "s" : "");
        for (int r = 0; r < n_rules; r++)
            PUT("%s\"%s\"", r ? ", " : "", m->g->rule_name[rules[r]]);
        PUT("%s the next byte must be ", more_rules ? ", ..." : "");
        int n_ranges = 0;
        for (unsigned b = 0; b < 256;) {
            if (!(want[b / 8] >> (b % 8) & 1)) {
                b++;
                continue;
            }
            unsigned e = b;
            while (e + 1 < 256 && want[(e + 1) / 8] >> ((e + 1) % 8) & 1)
                e++;
            if (n_ranges == 8) {
                PUT(", ...");
                break;
            }
            char lo[8], hi[8];
            put_byte(lo, sizeof lo, b);
            put_byte(hi, sizeof hi, e);
            PUT("%s%s%s%s", n_ranges ? ", " : "", lo, e > b ? "-" : "", e > b ? hi : "");
            n_ranges++;
            b = e + 1;
        }
    }
#undef PUT
    if (w >= cap) { /* cut: end with "..." */
        if (cap > 4)
            memcpy(buf + cap - 4, "...", 4);
        buf[cap - 1] = 0;
        w = cap - 1;
    }
    return w;
}

int64_t cdx_matcher_mask(cdx_matcher *m, uint32_t *bits, cdx_err *err)
{
    const cdx_grammar_vocab *v = m->v;
    const size_t nw = v->n_words;
    memset(bits, 0, nw * sizeof *bits);
    if (m->oom)
        return cdx_err_set(err, CDX_ENOMEM, "grammar matcher: out of memory");
    if (++m->stamp_now == 0) {
        memset(m->stamp, 0, (size_t)m->g->n_st * sizeof *m->stamp);
        m->stamp_now = 1;
    }
    /* cur is copied: the walks below use the scratch buffers */
    for (size_t i = 0; i < m->n_cur; i++) {
        const item it = m->cur[i];
        pstate *ps = precompute(m, it.st);
        if (!ps)
            return cdx_err_set(err, CDX_ENOMEM, "grammar matcher: out of memory");
        if (m->stamp[it.st] != m->stamp_now) {
            m->stamp[it.st] = m->stamp_now;
            if (!ps->compl) {
                for (int32_t k = 0; k < ps->n_ids; k++)
                    bits[ps->ids[k] / 32] |= 1u << (ps->ids[k] % 32);
            } else {
                /* bits |= usable \ rejected: keep the old bits of the rejected ids */
                if (m->cap_keep < (size_t)ps->n_ids + 1) {
                    uint8_t *k = realloc(m->keep, (size_t)ps->n_ids + 1);
                    if (!k)
                        return cdx_err_set(err, CDX_ENOMEM, "grammar matcher: out of memory");
                    m->keep = k;
                    m->cap_keep = (size_t)ps->n_ids + 1;
                }
                for (int32_t k = 0; k < ps->n_ids; k++)
                    m->keep[k] = bit(bits, ps->ids[k]);
                memset(bits, 0xFF, nw * sizeof *bits);
                for (int32_t k = 0; k < ps->n_ids; k++)
                    if (!m->keep[k])
                        bits[ps->ids[k] / 32] &= ~(1u << (ps->ids[k] % 32));
            }
        }
        if (ps->n_chk && it.par >= 0) {
            const centry *ce = checked(m, it.st, it.par, ps);
            if (!ce)
                return cdx_err_set(err, CDX_ENOMEM, "grammar matcher: out of memory");
            for (int32_t k = 0; k < ce->n; k++)
                bits[ce->ids[k] / 32] |= 1u << (ce->ids[k] % 32);
        }
    }
    int64_t count = 0;
    for (size_t w = 0; w < nw; w++) {
        bits[w] &= v->usable[w];
        if (m->done)
            bits[w] |= v->eog[w];
        count += __builtin_popcount(bits[w]);
    }
    return count;
}

int cdx_matcher_accept_bytes(cdx_matcher *m, const void *bytes, size_t len, cdx_err *err)
{
    const uint8_t *b = bytes;
    if (m->oom)
        return cdx_err_set(err, CDX_ENOMEM, "grammar matcher: out of memory");
    if (!ensure_walk(m, m->n_cur + 64))
        return cdx_err_set(err, CDX_ENOMEM, "grammar matcher: out of memory");
    memcpy(m->wb, m->cur, m->n_cur * sizeof *m->wb);
    size_t from = 0, n = m->n_cur;
    bool popped = m->done;
    for (size_t i = 0; i < len; i++) {
        popped = false;
        size_t at = from + n;
        size_t nn = advance(m, from, n, b[i], at, &popped);
        if (m->oom)
            return cdx_err_set(err, CDX_ENOMEM, "grammar matcher: out of memory");
        if (!nn && !(popped && i == len - 1))
            return cdx_err_set(err, CDX_EINVAL, "the grammar does not allow byte %zu (0x%02X) of the token here "
                               "(after %lld bytes of output)", i, b[i], (long long)m->n_bytes);
        /* keep the working set at the front of the buffer */
        memmove(m->wb, m->wb + at, nn * sizeof *m->wb);
        from = 0;
        n = nn;
    }
    if (!grow_items(&m->cur, &m->cap_cur, n + 1))
        return cdx_err_set(err, CDX_ENOMEM, "grammar matcher: out of memory");
    memcpy(m->cur, m->wb, n * sizeof *m->cur);
    m->n_cur = n;
    m->done = popped;
    m->n_bytes += (int64_t)len;
    return CDX_OK;
}

int cdx_matcher_accept(cdx_matcher *m, int32_t id, cdx_err *err)
{
    const cdx_grammar_vocab *v = m->v;
    if (id < 0 || id >= v->n_vocab)
        return cdx_err_set(err, CDX_EINVAL, "token %d is outside the vocabulary", (int)id);
    if (!bit(v->usable, id))
        return cdx_err_set(err, CDX_EINVAL, "token %d cannot be matched by a grammar (a control or empty token)",
                           (int)id);
    uint8_t buf[MAX_TOKEN_BYTES];
    int32_t x = v->node_of[id];
    const int d = v->depth[x];
    for (int k = d - 1; k >= 0; k--, x = v->parent[x])
        buf[k] = v->byte[x];
    return cdx_matcher_accept_bytes(m, buf, (size_t)d, err);
}
