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
 * whole subtree and a walk is one forward scan. The first visit of a state that reads a character
 * class in a loop is grammar_class.c's (class runs); the types both files read are in
 * grammar_match_int.h. */
#include "text/grammar_match_int.h"
#include "caldrix/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the vocabulary trie ---- */

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

static void trie_free(gr_trie *t)
{
    free(t->byte);
    free(t->depth);
    free(t->end);
    free(t->tok0);
    free(t->ids);
    free(t->parent);
    memset(t, 0, sizeof *t);
}

/* The trie of entries e[0..n) (sorted here). */
static int trie_build(tok_entry *e, size_t n, gr_trie *t, cdx_err *err)
{
    memset(t, 0, sizeof *t);
    qsort(e, n, sizeof *e, cmp_entry);
    size_t total = 1;
    for (size_t i = 0; i < n; i++)
        total += e[i].len;
    /* upper bound on nodes: every byte of every token */
    if (total > INT32_MAX)
        return cdx_err_set(err, CDX_ERANGE, "vocabulary of %zu bytes is too large", total);
    t->byte = malloc(total);
    t->depth = malloc(total * sizeof *t->depth);
    t->end = malloc(total * sizeof *t->end);
    t->tok0 = calloc(total + 1, sizeof *t->tok0);
    t->ids = malloc((n ? n : 1) * sizeof *t->ids);
    t->parent = malloc(total * sizeof *t->parent);
    if (!t->byte || !t->depth || !t->end || !t->tok0 || !t->ids || !t->parent) {
        trie_free(t);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    /* Sorted byte strings give the trie in preorder: each entry shares its longest common prefix
     * with the one before, and its end node is never before the previous entry's. */
    int32_t path[MAX_TOKEN_BYTES + 3];
    int plen = 0; /* nodes on the current path below the root */
    int32_t nn = 1;
    t->byte[0] = 0;
    t->depth[0] = 0;
    t->parent[0] = -1;
    path[0] = 0;
    const tok_entry *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t lcp = 0;
        if (prev)
            while (lcp < prev->len && lcp < e[i].len && prev->b[lcp] == e[i].b[lcp])
                lcp++;
        while ((uint32_t)plen > lcp) {
            t->end[path[plen]] = nn;
            plen--;
        }
        for (uint32_t k = lcp; k < e[i].len; k++) {
            t->byte[nn] = e[i].b[k];
            t->depth[nn] = (uint16_t)(k + 1);
            t->parent[nn] = path[plen];
            path[++plen] = nn++;
        }
        t->ids[i] = e[i].id;
        t->tok0[path[plen] + 1]++;
        if ((int)e[i].len > t->max_depth)
            t->max_depth = (int)e[i].len;
        prev = &e[i];
    }
    while (plen > 0) {
        t->end[path[plen]] = nn;
        plen--;
    }
    t->end[0] = nn;
    t->n_nodes = nn;
    for (int32_t k = 0; k < nn; k++)
        t->tok0[k + 1] += t->tok0[k];
    return CDX_OK;
}

/* Sorts the usable tokens into pure ones and tails (see k_pure). */
static int pure_build(cdx_grammar_vocab *v, const tok_entry *e, size_t n, cdx_err *err)
{
    int8_t dfa[PURE_N][256];
    pure_dfa(dfa);
    uint16_t *pe = malloc((n ? n : 1) * sizeof *pe); /* per entry: e of a pure token, or 0 */
    uint16_t *pc = malloc((n ? n : 1) * sizeof *pc); /* per entry: characters before its tail */
    uint32_t *pa = malloc((n ? n : 1) * sizeof *pa); /* per entry: where its tail starts */
    int rc = CDX_OK;
    if (!pe || !pc || !pa) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    size_t n_tail = 0, tail_bytes = 0;
    v->max_e = 0;
    for (size_t i = 0; i < n; i++) {
        int d = PURE_A, c = 0, ca = 0;
        uint32_t a = 0, k = 0;
        for (; k < e[i].len; k++) {
            int nd = dfa[d][e[i].b[k]];
            if (nd < 0)
                break;
            d = nd;
            if (d == PURE_A) {
                c++;
                a = k + 1;
                ca = c;
            }
        }
        if (k == e[i].len) { /* every byte read: pure */
            pe[i] = (uint16_t)(c + (d != PURE_A));
            if (pe[i] > v->max_e)
                v->max_e = pe[i];
        } else {
            pe[i] = 0;
            pc[i] = (uint16_t)ca;
            pa[i] = a;
            n_tail++;
            tail_bytes += 2 + e[i].len - a;
        }
    }
    v->pure_upto = calloc((size_t)(PURE_ECAP + 1) * v->n_words, sizeof *v->pure_upto);
    v->pure_all = calloc(v->n_words, sizeof *v->pure_all);
    size_t n_long = 0;
    for (size_t i = 0; i < n; i++)
        n_long += pe[i] > PURE_ECAP;
    v->long_ids = malloc((n_long ? n_long : 1) * sizeof *v->long_ids);
    v->long_e = malloc((n_long ? n_long : 1) * sizeof *v->long_e);
    uint8_t *kb = malloc(tail_bytes ? tail_bytes : 1);
    tok_entry *te = malloc((n_tail ? n_tail : 1) * sizeof *te);
    if (!v->pure_upto || !v->pure_all || !v->long_ids || !v->long_e || !kb || !te) {
        free(kb);
        free(te);
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    size_t nt = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        const int32_t id = e[i].id;
        if (pe[i]) {
            v->pure_all[id / 32] |= 1u << (id % 32);
            if (pe[i] <= PURE_ECAP)
                v->pure_upto[(size_t)pe[i] * v->n_words + id / 32] |= 1u << (id % 32);
            else {
                v->long_ids[v->n_long] = id;
                v->long_e[v->n_long++] = pe[i];
            }
            continue;
        }
        uint8_t *key = kb + at;
        key[0] = (uint8_t)(pc[i] >> 8);
        key[1] = (uint8_t)pc[i];
        memcpy(key + 2, e[i].b + pa[i], e[i].len - pa[i]);
        te[nt++] = (tok_entry){ key, (uint32_t)(2 + e[i].len - pa[i]), id };
        at += 2 + e[i].len - pa[i];
    }
    /* rows are cumulative: row e holds every pure token of at most e characters */
    for (int r = 1; r <= PURE_ECAP; r++)
        for (size_t w = 0; w < v->n_words; w++)
            v->pure_upto[(size_t)r * v->n_words + w] |= v->pure_upto[(size_t)(r - 1) * v->n_words + w];
    rc = trie_build(te, nt, &v->tail, err);
    free(kb);
    free(te);
    v->pure_on = rc == CDX_OK;
done:
    free(pe);
    free(pc);
    free(pa);
    return rc;
}

static int vocab_build(tok_entry *e, size_t n, int64_t n_vocab, const int32_t *eog, int n_eog,
                       cdx_grammar_vocab **out, cdx_err *err)
{
    cdx_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    pthread_mutex_init(&v->memo_mu, NULL);
    v->n_vocab = n_vocab;
    v->n_words = (size_t)(n_vocab + 31) / 32;
    v->usable = calloc(v->n_words, sizeof *v->usable);
    v->eog = calloc(v->n_words, sizeof *v->eog);
    v->node_of = malloc((size_t)n_vocab * sizeof *v->node_of);
    v->first = calloc((size_t)n_vocab, 1);
    if (!v->usable || !v->eog || !v->node_of || !v->first) {
        cdx_grammar_vocab_free(v);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    int rc = trie_build(e, n, &v->tr, err);
    if (rc) {
        cdx_grammar_vocab_free(v);
        return rc;
    }
    const gr_trie *t = &v->tr;
    for (int64_t i = 0; i < n_vocab; i++)
        v->node_of[i] = -1;
    for (int32_t u = 1; u < t->n_nodes; u = t->end[u]) /* the root's children: every token below u starts so */
        for (int32_t j = t->tok0[u]; j < t->tok0[t->end[u]]; j++)
            v->first[t->ids[j]] = t->byte[u];
    for (int32_t k = 0; k < t->n_nodes; k++)
        for (int32_t j = t->tok0[k]; j < t->tok0[k + 1]; j++) {
            const int32_t id = t->ids[j];
            v->node_of[id] = k;
            v->usable[id / 32] |= 1u << (id % 32);
            v->n_usable++;
        }
    /* FNV-1a over the trie and its ids */
    uint64_t h = 0xCBF29CE484222325ull ^ (uint64_t)n_vocab;
    for (int32_t k = 0; k < t->n_nodes; k++)
        h = (h ^ (uint64_t)(t->byte[k] | (uint32_t)t->depth[k] << 8)) * 0x100000001B3ull;
    for (size_t k = 0; k < n; k++)
        h = (h ^ (uint64_t)(uint32_t)t->ids[k]) * 0x100000001B3ull;
    v->fingerprint = h;
    /* the tokens' bytes in a row (the class runs walk a few tokens each: the trie's parent links
     * would cost a dependent load a byte) */
    if (!(v->tb0 = malloc(((size_t)n_vocab + 1) * sizeof *v->tb0))) {
        cdx_grammar_vocab_free(v);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    v->tb0[0] = 0;
    for (int64_t i = 0; i < n_vocab; i++)
        v->tb0[i + 1] = v->tb0[i] + (v->node_of[i] >= 0 ? t->depth[v->node_of[i]] : 0);
    if (!(v->tb = malloc(v->tb0[n_vocab] ? v->tb0[n_vocab] : 1))) {
        cdx_grammar_vocab_free(v);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (size_t k = 0; k < n; k++)
        memcpy(v->tb + v->tb0[e[k].id], e[k].b, e[k].len);
    for (int i = 0; i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab)
            v->eog[eog[i] / 32] |= 1u << (eog[i] % 32);
    if ((rc = pure_build(v, e, n, err)) || (rc = gr_class_build(v, e, n, err))) {
        cdx_grammar_vocab_free(v);
        return rc;
    }
    *out = v;
    return CDX_OK;
}

void gr_vocab_set_pure(cdx_grammar_vocab *v, bool on) { v->pure_on = on && v->pure_all; }

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
        /* special tokens never match a grammar, except the tool-call and channel marks: a model
         * writes "[TOOL_CALLS]" as its one token, and the grammar that forces a call reads its text
         * (llama.cpp's grammar reads every special token's text) */
        int a = cdx_tok_attr(tok, (int32_t)i);
        if ((a & (CDX_TOK_CONTROL | CDX_TOK_UNKNOWN | CDX_TOK_UNUSED)) && !cdx_tok_is_mark(tok, (int32_t)i))
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
    trie_free(&v->tr);
    trie_free(&v->tail);
    free(v->usable);
    free(v->eog);
    free(v->node_of);
    free(v->first);
    free(v->pure_upto);
    free(v->pure_all);
    free(v->long_ids);
    free(v->long_e);
    gr_class_free(v);
    gr_memo_free(v);
    pthread_mutex_destroy(&v->memo_mu);
    free(v->tb0);
    free(v->tb);
    free(v);
}

int64_t cdx_grammar_vocab_size(const cdx_grammar_vocab *v) { return v->n_vocab; }

bool cdx_grammar_vocab_is_eog(const cdx_grammar_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_vocab && (v->eog[id / 32] >> (id % 32) & 1);
}

/* ---- stacks ---- */

typedef struct gnode {
    int32_t st, par, next;
} gnode;

typedef struct pstate {
    bool ready;          /* read and written atomically (matchers of several threads share it) */
    int32_t n_ids, n_chk;
    int32_t *ids;        /* the accepted ids, when bits is NULL */
    uint32_t *bits;      /* [n_words] the accepted ids, when they are many */
    int32_t *chk;        /* trie nodes where the rule may end: their subtrees are checked at the caller
                          * (negated: nodes of the vocabulary's tail trie) */
    uint8_t *excl;       /* [32] a chain head's exceptions (gr_chain_head_step): tokens that start with one
                          * of these bytes are not the tail trie's to give; NULL: none */
    bool run;            /* made by a class run (tests count them) */
    bool cb;             /* made by chain_bytes (tests count them) */
} pstate;

/* Chains (per state of the grammar, in gr_cache): ch_n is how many pure characters (k_pure) the
 * state reads one after the other, each through states that only read bytes, before it reaches a
 * state that takes no pure character at all; CH_INF when it never does (a loop, or more characters
 * than a token has). ch_next is the state after one pure character. */
enum { CH_UNKNOWN = -2, CH_NO = -1, CH_ON_PATH = -3 };
#define CH_INF INT32_MAX
#define CH_CAP (2 * (MAX_TOKEN_BYTES + 1))

struct gr_cache {
    uint64_t fingerprint;
    int64_t n_vocab;
    bool pure;           /* made with the pure-text shortcut (a test compares both ways) */
    pstate *pc;          /* [n_st] */
    int32_t *ch_n;       /* [n_st] */
    int32_t *ch_next;    /* [n_st] */
    struct gr_cache *next;
};

void gr_cache_free(cdx_grammar *g)
{
    for (struct gr_cache *c = g->caches, *nx; c; c = nx) {
        nx = c->next;
        for (int32_t i = 0; i < g->n_st; i++) {
            free(c->pc[i].ids);
            free(c->pc[i].bits);
            free(c->pc[i].chk);
            free(c->pc[i].excl);
        }
        free(c->pc);
        free(c->ch_n);
        free(c->ch_next);
        free(c);
    }
    g->caches = NULL;
}

/* The cache of g for v, made on first use; NULL out of memory. */
static struct gr_cache *cache_for(const cdx_grammar *cg, const cdx_grammar_vocab *v)
{
    cdx_grammar *g = (cdx_grammar *)cg; /* the cache is the one mutable part, under g->mu */
    pthread_mutex_lock(&g->mu);
    struct gr_cache *c = g->caches;
    while (c && (c->fingerprint != v->fingerprint || c->n_vocab != v->n_vocab || c->pure != v->pure_on))
        c = c->next;
    if (!c && (c = calloc(1, sizeof *c))) {
        c->pc = calloc((size_t)g->n_st, sizeof *c->pc);
        c->ch_n = malloc((size_t)g->n_st * sizeof *c->ch_n);
        c->ch_next = malloc((size_t)g->n_st * sizeof *c->ch_next);
        if (!c->pc || !c->ch_n || !c->ch_next) {
            free(c->pc);
            free(c->ch_n);
            free(c->ch_next);
            free(c);
            c = NULL;
        } else {
            for (int32_t i = 0; i < g->n_st; i++) {
                c->ch_n[i] = CH_UNKNOWN;
                c->ch_next[i] = -1;
            }
            c->fingerprint = v->fingerprint;
            c->n_vocab = v->n_vocab;
            c->pure = v->pure_on;
            c->next = g->caches;
            g->caches = c;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

typedef struct centry {
    int32_t st, par;     /* key; st < 0: empty slot */
    int32_t n;
    int32_t *ids;
} centry;


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

static bool ensure_walk(cdx_matcher *m, size_t need)
{
    if (!grow_items(&m->wb, &m->cap_wb, need)) {
        m->oom = true;
        return false;
    }
    return true;
}

/* ---- walks: configurations as DFA states ---- */

/* Forgets the configurations: their items name stack nodes of this matcher, which stay, but the
 * caches grow with every walk. */
static void dfa_reset(cdx_matcher *m)
{
    m->n_ci = 0;
    m->n_cfg = 0;
    if (m->c_hash)
        memset(m->c_hash, 0xFF, ((size_t)m->c_hmask + 1) * sizeof *m->c_hash);
}

static uint32_t items_hash(const item *it, size_t n)
{
    uint32_t h = 0x811C9DC5u ^ (uint32_t)n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ hash2(it[i].st, it[i].par)) * 0x01000193u;
    return h;
}

static bool dfa_rehash(cdx_matcher *m, uint32_t nb)
{
    int32_t *h = malloc((size_t)nb * sizeof *h);
    if (!h)
        return false;
    memset(h, 0xFF, (size_t)nb * sizeof *h);
    for (int32_t c = 0; c < m->n_cfg; c++) {
        uint32_t k = items_hash(m->ci + m->c_off[c], (size_t)m->c_n[c]) & (nb - 1);
        while (h[k] >= 0)
            k = (k + 1) & (nb - 1);
        h[k] = c;
    }
    free(m->c_hash);
    m->c_hash = h;
    m->c_hmask = nb - 1;
    return true;
}

/* The id of configuration it[0..n) (sorted here), made on first sight; -1 out of memory. */
int32_t gr_dfa_intern(cdx_matcher *m, item *it, size_t n)
{
    if (n > 16)
        qsort(it, n, sizeof *it, cmp_item);
    else /* most configurations hold one to three items: qsort's setup would dominate */
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && cmp_item(&it[j - 1], &it[j]) > 0; j--) {
                const item t = it[j];
                it[j] = it[j - 1];
                it[j - 1] = t;
            }
    if (!m->c_hash && !dfa_rehash(m, 256)) {
        m->oom = true;
        return -1;
    }
    const uint32_t h = items_hash(it, n);
    uint32_t k = h & m->c_hmask;
    for (int32_t c; (c = m->c_hash[k]) >= 0; k = (k + 1) & m->c_hmask)
        if ((size_t)m->c_n[c] == n && !memcmp(m->ci + m->c_off[c], it, n * sizeof *it))
            return c;
    if (m->n_cfg >= DFA_NONE - 1) {
        m->oom = true;
        return -1;
    }
    if (m->n_cfg == m->cap_cfg) {
        int32_t nc = m->cap_cfg ? 2 * m->cap_cfg : 64;
        int32_t *o = realloc(m->c_off, (size_t)nc * sizeof *o);
        if (o)
            m->c_off = o;
        int32_t *l = realloc(m->c_n, (size_t)nc * sizeof *l);
        if (l)
            m->c_n = l;
        int32_t *t = realloc(m->c_tr, (size_t)nc * 256 * sizeof *t);
        if (t)
            m->c_tr = t;
        uint8_t *f = realloc(m->c_full, (size_t)nc);
        if (f)
            m->c_full = f;
        if (!o || !l || !t || !f) {
            m->oom = true;
            return -1;
        }
        m->cap_cfg = nc;
    }
    if (!grow_items(&m->ci, &m->cap_ci, m->n_ci + n + 1)) {
        m->oom = true;
        return -1;
    }
    const int32_t c = m->n_cfg++;
    memcpy(m->ci + m->n_ci, it, n * sizeof *it);
    m->c_off[c] = (int32_t)m->n_ci;
    m->c_n[c] = (int32_t)n;
    m->n_ci += n;
    m->c_full[c] = 0;
    for (int b = 0; b < 256; b++)
        m->c_tr[(size_t)c * 256 + b] = DFA_UNSET;
    if ((uint32_t)m->n_cfg * 2 > m->c_hmask + 1) {
        if (!dfa_rehash(m, 2 * (m->c_hmask + 1))) {
            m->oom = true;
            return -1;
        }
    } else {
        k = h & m->c_hmask;
        while (m->c_hash[k] >= 0)
            k = (k + 1) & m->c_hmask;
        m->c_hash[k] = c;
    }
    return c;
}

/* The move of configuration c over byte b (cached in c_tr). */
int32_t gr_dfa_move(cdx_matcher *m, int32_t c, uint8_t b)
{
    int32_t r = m->c_tr[(size_t)c * 256 + b];
    if (r != DFA_UNSET)
        return r;
    const size_t n_from = (size_t)m->c_n[c];
    if (!ensure_walk(m, 2 * n_from + 64))
        return DFA_DEAD;
    memcpy(m->wb, m->ci + m->c_off[c], n_from * sizeof *m->wb);
    bool popped = false;
    const size_t n = advance(m, 0, n_from, b, n_from, &popped);
    if (m->oom)
        return DFA_DEAD;
    int32_t to = DFA_NONE;
    if (n && (to = gr_dfa_intern(m, m->wb + n_from, n)) < 0)
        return DFA_DEAD;
    r = !n && !popped ? DFA_DEAD : to | (popped ? DFA_POPPED : 0);
    m->c_tr[(size_t)c * 256 + b] = r;
    return r;
}

/* Walks nodes [lo, hi) of trie v, the subtree of a node at depth d0 whose configuration is c0.
 * Check mode (chk == NULL): collects in tl the tokens fully consumed (the stack alive, or the
 * bottom reached). Precompute mode: the same into tl, plus in *chk the nodes where the bottom rule
 * may end and that have children. */
static void walk(cdx_matcher *m, const gr_trie *v, int32_t lo, int32_t hi, int d0, int32_t c0, int32_t **chk,
                 size_t *n_chk, size_t *cap_chk)
{
    /* check-list entries of the tail trie are stored negated */
    const int32_t sign = v == &m->v->tr ? 1 : -1;
    m->cs[d0] = c0;
    int32_t i = lo;
    /* room for every token of the subtree first, so the loop pushes without checks */
    const size_t need = m->n_tl + (size_t)(v->tok0[hi] - v->tok0[lo]);
    if (need > m->cap_tl) {
        int32_t *t = realloc(m->tl, need * sizeof *t);
        if (!t) {
            m->oom = true;
            return;
        }
        m->tl = t;
        m->cap_tl = need;
    }
    int32_t *tl = m->tl;
    size_t n_tl = m->n_tl;
    while (i < hi && !m->oom) {
        if (m->budget && !--m->budget) { /* out of nodes: the caller may go on from i */
            m->stop = i;
            break;
        }
        const int d = v->depth[i];
        int32_t r = gr_dfa_step(m, m->cs[d - 1], v->byte[i]);
        if (r == DFA_DEAD) {
            i = v->end[i];
            continue;
        }
        for (int32_t k = v->tok0[i]; k < v->tok0[i + 1]; k++)
            tl[n_tl++] = v->ids[k];
        if ((r & DFA_POPPED) && chk && v->end[i] > i + 1 && !tl_push(chk, n_chk, cap_chk, sign * i))
            m->oom = true;
        if ((r & DFA_NONE) == DFA_NONE) {
            i = v->end[i];
            continue;
        }
        m->cs[d] = r & DFA_NONE;
        i++;
    }
    m->n_tl = n_tl;
}

/* The configuration of the lone item (q, -1). */
int32_t gr_dfa_single(cdx_matcher *m, int32_t q)
{
    item it = { q, -1 };
    return gr_dfa_intern(m, &it, 1);
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

/* ---- chains of pure text ---- */


/* ch_n of q (see gr_cache), made on first use along the whole chain; under g->mu. */
static int32_t chain_levels(cdx_matcher *m, int32_t q)
{
    const cdx_grammar *g = m->g;
    int32_t *cn = m->gc->ch_n, *cx = m->gc->ch_next;
    if (cn[q] != CH_UNKNOWN)
        return cn[q];
    m->n_tl2 = 0;
    int32_t x = q, val;
    for (;;) {
        if (cn[x] == CH_ON_PATH || m->n_tl2 == CH_CAP) { /* a loop, or longer than any token */
            val = CH_INF;
            break;
        }
        if (cn[x] != CH_UNKNOWN) {
            val = cn[x];
            break;
        }
        const int32_t y = chain_state_ok(&g->st[x]) ? gr_chain_step(g, x) : -1;
        if (y < 0) {
            val = cn[x] = gr_chain_end_ok(g, x) ? 0 : CH_NO;
            break;
        }
        if (!tl_push(&m->tl2, &m->n_tl2, &m->cap_tl2, x)) {
            m->oom = true;
            val = CH_NO;
            break;
        }
        cn[x] = CH_ON_PATH;
        cx[x] = y;
        x = y;
    }
    const bool capped = m->n_tl2 == CH_CAP;
    for (size_t i = m->n_tl2; i-- > 0;) {
        if (val != CH_NO && val != CH_INF)
            val++;
        /* capped: only the states with more levels than any token has characters are known */
        cn[m->tl2[i]] = capped && i > CH_CAP - MAX_TOKEN_BYTES - 2 ? CH_UNKNOWN : val;
    }
    return cn[q] == CH_UNKNOWN ? CH_NO : cn[q];
}

/* bits = the pure tokens of at most n characters. */
static void pure_fill(const cdx_grammar_vocab *v, int32_t n, uint32_t *bits)
{
    const size_t nw = v->n_words;
    if (n >= v->max_e) {
        memcpy(bits, v->pure_all, nw * sizeof *bits);
        return;
    }
    memcpy(bits, v->pure_upto + (size_t)(n < PURE_ECAP ? n : PURE_ECAP) * nw, nw * sizeof *bits);
    for (int32_t k = 0; k < v->n_long; k++)
        if (v->long_e[k] <= n)
            bits[v->long_ids[k] / 32] |= 1u << (v->long_ids[k] % 32);
}

/* For state q at the head of a chain of n levels: the tails' walks, each from the state its
 * count of pure characters leads to (the pure tokens themselves are pure_fill's). first: the
 * state after one character when q is a head with exceptions (gr_chain_head_step), else -1. */
static void walk_tails(cdx_matcher *m, int32_t q, int32_t first, int32_t n, int32_t **chk, size_t *n_chk,
                       size_t *cap_chk)
{
    const gr_trie *t = &m->v->tail;
    int32_t x = q, cx = 0;
    for (int32_t i = 1; i < t->n_nodes && !m->oom; i = t->end[i])        /* high byte of the count */
        for (int32_t j = i + 1; j < t->end[i] && !m->oom; j = t->end[j]) { /* low byte */
            const int32_t c = t->byte[i] << 8 | t->byte[j];
            if (c > n)
                return;
            while (cx < c) {
                x = cx == 0 && first >= 0 ? first : m->gc->ch_next[x];
                cx++;
            }
            const int32_t c0 = gr_dfa_single(m, x);
            if (c0 >= 0)
                walk(m, t, j + 1, t->end[j], 2, c0, chk, n_chk, cap_chk);
        }
}

/* A state whose pure one-byte characters, those that live, each lead to a chain, as a string's
 * escape does (after '\\', "n" leads back to the string's characters; most bytes die): per first
 * byte of the trie, the tokens that begin with such a byte b, read into a chain state of n levels,
 * are the pure ones of at most n + 1 characters (bit tests against the pure sets, no walk) and the
 * others walked one by one; the other first bytes' subtrees, and those of a chain shorter than
 * CB_LEVELS (a walk stops early there), are walked as usual. Taken where the chains' subtrees hold
 * CB_MIN tokens or more; false (nothing set) where not. */
#define CB_MIN 512
#define CB_LEVELS 3
static bool chain_bytes(cdx_matcher *m, int32_t q, uint32_t **bits, int32_t **chk, size_t *n_chk, size_t *cap_chk)
{
    const cdx_grammar *g = m->g;
    const cdx_grammar_vocab *v = m->v;
    const gr_trie *t = &v->tr;
    const gr_state *st = &g->st[q];
    bool any = false; /* an edge into a chain at all (most states have none: a quick no) */
    for (int32_t e = 0; e < st->ne && !any; e++) {
        const gr_edge *ed = &g->edges[st->e0 + e];
        any = ed->lo <= 0x7E && ed->hi >= 0x20 && chain_state_ok(&g->st[ed->to]) && chain_levels(m, ed->to) >= CB_LEVELS;
    }
    if (!any)
        return false;
    int32_t ny[256]; /* per first byte of the trie: its chain's levels, or -1 (walked) */
    int64_t n_tok = 0;
    for (int32_t u = 1; u < t->n_nodes; u = t->end[u]) {
        const unsigned b = t->byte[u];
        ny[b] = -1;
        if (b < 0x20 || b > 0x7E || b == '"' || b == '\\') /* (the one-byte pure characters, k_pure) */
            continue;
        const int32_t y = gr_byte_target(g, st, b);
        if (y < 0 || !chain_state_ok(&g->st[y]) || (ny[b] = chain_levels(m, y)) < CB_LEVELS) {
            ny[b] = -1;
            continue;
        }
        n_tok += t->tok0[t->end[u]] - t->tok0[u];
    }
    const int32_t c0 = gr_dfa_single(m, q);
    if (m->oom || c0 < 0 || n_tok < CB_MIN)
        return false;
    const size_t nw = v->n_words, chk0 = *n_chk;
    uint32_t *f = calloc(nw, sizeof *f), *tmp = NULL;
    if (!f || (!m->mark && !(m->mark = calloc((size_t)(t->n_nodes + 31) / 32, sizeof *m->mark)))) {
        free(f);
        m->oom = true;
        return false;
    }
    m->n_tl = 0;
    int32_t row_n = -1;
    const uint32_t *row = NULL;
    for (int32_t u = 1; u < t->n_nodes && !m->oom; u = t->end[u]) {
        const unsigned b = t->byte[u];
        if (ny[b] < 0) {
            walk(m, t, u, t->end[u], 0, c0, chk, n_chk, cap_chk);
            continue;
        }
        if (ny[b] != row_n) { /* the pure tokens of at most n + 1 characters (pure_fill's) */
            row_n = ny[b];
            if (row_n >= v->max_e)
                row = v->pure_all;
            else if (row_n + 1 <= PURE_ECAP)
                row = v->pure_upto + (size_t)(row_n + 1) * nw;
            else if (tmp || (tmp = malloc(nw * sizeof *tmp))) {
                pure_fill(v, row_n + 1, tmp);
                row = tmp;
            } else {
                m->oom = true;
                break;
            }
        }
        for (int32_t k = t->tok0[u]; k < t->tok0[t->end[u]]; k++) {
            const int32_t id = t->ids[k];
            if (bit(v->pure_all, id)) {
                f[id / 32] |= (uint32_t)bit(row, id) << (id % 32);
            } else if (!gr_walk_token(m, c0, 0, id, v->tb + v->tb0[id], (int)(v->tb0[id + 1] - v->tb0[id]), chk, n_chk,
                                      cap_chk)) {
                m->oom = true;
                break;
            }
        }
    }
    for (size_t i = chk0; i < *n_chk; i++) /* the marks gr_walk_token set, cleared */
        m->mark[(*chk)[i] / 32] = 0;
    free(tmp);
    if (m->oom) {
        free(f);
        return false;
    }
    *bits = f;
    return true;
}

static pstate *first_visit(cdx_matcher *m, int32_t q);

/* State q's sets (under g->mu): the grammar's cache, else the vocabulary's memo (a state of the same
 * automaton met before, by any grammar), else a first visit, which the memo then keeps. */
static pstate *precompute_locked(cdx_matcher *m, int32_t q)
{
    pstate *ps = &m->pc[q];
    if (ps->ready)
        return ps;
    const uint32_t *key = NULL;
    size_t n_key = 0;
    gr_state_sets s;
    if (m->v->pure_on && gr_memo_key(m, q, &key, &n_key) && gr_memo_get((cdx_grammar_vocab *)m->v, key, n_key, &s)) {
        free(ps->excl); /* a try that ran out of memory before */
        ps->ids = s.ids;
        ps->bits = s.bits;
        ps->chk = s.chk;
        ps->excl = s.excl;
        ps->n_ids = s.n_ids;
        ps->n_chk = s.n_chk;
        ps->run = s.run;
        ps->cb = s.cb;
        __atomic_store_n(&ps->ready, true, __ATOMIC_RELEASE);
        return ps;
    }
    ps = first_visit(m, q);
    if (ps && key) {
        s = (gr_state_sets){ ps->n_ids, ps->n_chk, ps->ids, ps->bits, ps->chk, ps->excl, ps->run, ps->cb };
        gr_memo_put((cdx_grammar_vocab *)m->v, key, n_key, &s);
    }
    return ps;
}

static pstate *first_visit(cdx_matcher *m, int32_t q)
{
    pstate *ps = &m->pc[q];
    const cdx_grammar_vocab *v = m->v;
    const size_t nw = v->n_words;
    m->n_tl = 0;
    size_t n_chk = 0, cap_chk = 0;
    int32_t *chk = NULL;
    uint32_t *bits = NULL;
    int32_t n = v->pure_on ? chain_levels(m, q) : CH_NO, first = -1;
    uint8_t excl[32];
    if (n == CH_NO && v->pure_on && (first = gr_chain_head_step(m->g, q, excl)) >= 0) {
        const int32_t ny = chain_levels(m, first);
        n = ny == CH_NO ? CH_NO : ny == CH_INF ? CH_INF : ny + 1;
    }
    const bool head = n >= 0 && first >= 0;
    free(ps->excl); /* a try that ran out of memory before */
    ps->excl = NULL;
    if (head && !(ps->excl = malloc(32))) {
        m->oom = true;
        return NULL;
    }
    dfa_reset(m);
    if (n >= 0) {
        if (!(bits = malloc(nw * sizeof *bits))) {
            m->oom = true;
            return NULL;
        }
        pure_fill(v, n, bits);
        walk_tails(m, q, head ? first : -1, n, &chk, &n_chk, &cap_chk);
        if (head) {
            /* the tokens that start with an exception are the main trie's to walk, from q */
            memcpy(ps->excl, excl, 32);
            size_t w = 0;
            for (size_t i = 0; i < m->n_tl; i++)
                if (!(excl[v->first[m->tl[i]] / 8] >> (v->first[m->tl[i]] % 8) & 1))
                    m->tl[w++] = m->tl[i];
            m->n_tl = w;
            const gr_trie *t = &v->tr;
            for (int32_t u = 1; u < t->n_nodes && !m->oom; u = t->end[u]) {
                if (!(excl[t->byte[u] / 8] >> (t->byte[u] % 8) & 1))
                    continue;
                for (int32_t j = t->tok0[u]; j < t->tok0[t->end[u]]; j++)
                    bits[t->ids[j] / 32] &= ~(1u << (t->ids[j] % 32));
                const int32_t c0 = gr_dfa_single(m, q);
                if (c0 >= 0)
                    walk(m, t, u, t->end[u], 0, c0, &chk, &n_chk, &cap_chk);
            }
        }
    } else {
        /* A state that reads a class of letters (gr_class_likely) tries a class run first, and is
         * walked whole where it is none. Of the others, a state whose walk is short is walked (most
         * are); the rest try a class run where the walk passed CR_WALK_FIRST nodes, and the walk goes
         * on from there where it is none (its configurations stay in m->cs) */
        const int32_t c0 = gr_dfa_single(m, q);
        const bool cb = ps->cb = c0 >= 0 && v->pure_on && chain_bytes(m, q, &bits, &chk, &n_chk, &cap_chk);
        const bool likely = !cb && c0 >= 0 && v->pure_on && gr_class_likely(m, c0);
        ps->run = likely && gr_class_run(m, q, &bits, &chk, &n_chk, &cap_chk);
        if (c0 >= 0 && !cb && !ps->run && !m->oom) {
            m->budget = v->pure_on && !likely ? CR_WALK_FIRST : 0;
            m->stop = -1;
            walk(m, &v->tr, 1, v->tr.n_nodes, 0, c0, &chk, &n_chk, &cap_chk);
            m->budget = 0;
            if (m->stop >= 0 && !m->oom) {
                const size_t n_tl = m->n_tl, n_chk0 = n_chk;
                n_chk = 0;
                if ((ps->run = gr_class_run(m, q, &bits, &chk, &n_chk, &cap_chk)))
                    ;
                else if (!m->oom) {
                    m->n_tl = n_tl;
                    n_chk = n_chk0;
                    walk(m, &v->tr, m->stop, v->tr.n_nodes, 0, c0, &chk, &n_chk, &cap_chk);
                }
            }
        }
    }
    if (!m->oom && !bits && m->n_tl > nw && !(bits = calloc(nw, sizeof *bits)))
        m->oom = true;
    if (m->oom) {
        free(chk);
        free(bits);
        return NULL;
    }
    if (bits) { /* many: a bit set, which a mask ORs in whole */
        for (size_t i = 0; i < m->n_tl; i++)
            bits[m->tl[i] / 32] |= 1u << (m->tl[i] % 32);
        ps->bits = bits;
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

int32_t gr_class_run_states(const cdx_grammar *g, const cdx_grammar_vocab *v) { return gr_shortcut_states(g, v, 0); }

int32_t gr_shortcut_states(const cdx_grammar *g, const cdx_grammar_vocab *v, int kind)
{
    int32_t n = 0;
    cdx_grammar *gm = (cdx_grammar *)g; /* the caches, under g->mu */
    pthread_mutex_lock(&gm->mu);
    for (const struct gr_cache *c = g->caches; c; c = c->next)
        if (c->fingerprint == v->fingerprint && c->n_vocab == v->n_vocab && c->pure == v->pure_on)
            for (int32_t i = 0; i < g->n_st; i++)
                n += c->pc[i].ready && (kind ? c->pc[i].cb : c->pc[i].run);
    pthread_mutex_unlock(&gm->mu);
    return n;
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
    dfa_reset(m);
    const int32_t c0 = n ? gr_dfa_intern(m, m->wb, n) : -1;
    for (int32_t c = 0; c < ps->n_chk && c0 >= 0; c++) {
        const gr_trie *t = ps->chk[c] < 0 ? &v->tail : &v->tr;
        const int32_t u = ps->chk[c] < 0 ? -ps->chk[c] : ps->chk[c];
        const size_t before = m->n_tl;
        walk(m, t, u + 1, t->end[u], t->depth[u], c0, NULL, NULL, NULL);
        if (ps->excl && t == &v->tail) { /* a head's exceptions: those tokens came from the main trie */
            size_t w = before;
            for (size_t i = before; i < m->n_tl; i++)
                if (!(ps->excl[v->first[m->tl[i]] / 8] >> (v->first[m->tl[i]] % 8) & 1))
                    m->tl[w++] = m->tl[i];
            m->n_tl = w;
        }
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
    m->gc = cache_for(g, v);
    m->pc = m->gc ? m->gc->pc : NULL;
    m->stamp = calloc((size_t)g->n_st, sizeof *m->stamp);
    m->cs = calloc((size_t)(v->tr.max_depth > v->tail.max_depth ? v->tr.max_depth : v->tail.max_depth) + 3,
                   sizeof *m->cs);
    if (!m->pc || !m->stamp || !m->cs || !rehash(m, 1024) || start(m)) {
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
    free(m->mx);
    free(m->nodes);
    free(m->heads);
    free(m->cur);
    free(m->wb);
    free(m->cs);
    free(m->ci);
    free(m->c_off);
    free(m->c_n);
    free(m->c_tr);
    free(m->c_full);
    free(m->mark);
    free(m->c_hash);
    free(m->work);
    free(m->vis);
    free(m->tl);
    free(m->tl2);
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
            if (ps->bits) {
                for (size_t w = 0; w < nw; w++)
                    bits[w] |= ps->bits[w];
            } else {
                for (int32_t k = 0; k < ps->n_ids; k++)
                    bits[ps->ids[k] / 32] |= 1u << (ps->ids[k] % 32);
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
    return gr_mask_finish(bits, v->usable, m->done ? v->eog : NULL, nw);
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
    const int d = v->tr.depth[x];
    for (int k = d - 1; k >= 0; k--, x = v->tr.parent[x])
        buf[k] = v->tr.byte[x];
    return cdx_matcher_accept_bytes(m, buf, (size_t)d, err);
}
