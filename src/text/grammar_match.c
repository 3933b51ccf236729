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

/* A trie of byte strings in preorder: node i's subtree is [i, end[i]), so a rejected prefix skips
 * its whole subtree and a walk is one forward scan. Node 0 is the root. */
typedef struct {
    int32_t n_nodes;
    uint8_t *byte;       /* [n_nodes] the byte on the edge into the node */
    uint16_t *depth;     /* [n_nodes] */
    int32_t *end;        /* [n_nodes] one past the last node of the subtree */
    int32_t *tok0;       /* [n_nodes + 1] node i's tokens are ids[tok0[i] .. tok0[i+1]) */
    int32_t *ids;
    int32_t *parent;     /* [n_nodes] */
    int max_depth;
} gr_trie;

/* Pure text. Most of a vocabulary is text that a JSON string (or any "any character but a few"
 * rule) takes whole: the characters U+0020..U+10FFFF but '"', '\\' and U+007F, as well-formed UTF-8
 * (no surrogates). This DFA over bytes reads that text; state 0 is "between characters". For a state
 * of the grammar that reads every such character into one next state (grammar_match.c, chains), a
 * token's fate depends only on how many characters its pure beginning has and on the rest (its
 * tail): so each token is sorted once per vocabulary into "pure" (every byte read, ending after e
 * characters or inside character e) or a tail keyed by the count of characters before it. The
 * idea is llguidance's slicer (docs/optimizations.md there), written for this automaton. */
enum { PURE_A = 0, PURE_N = 8, PURE_ECAP = 64 };
typedef struct {
    uint8_t from, lo, hi, to;
} pure_tr;
static const pure_tr k_pure[] = {
    { 0, 0x20, 0x21, 0 }, { 0, 0x23, 0x5B, 0 }, { 0, 0x5D, 0x7E, 0 }, { 0, 0xC2, 0xDF, 1 }, { 0, 0xE0, 0xE0, 4 },
    { 0, 0xE1, 0xEC, 2 }, { 0, 0xED, 0xED, 5 }, { 0, 0xEE, 0xEF, 2 }, { 0, 0xF0, 0xF0, 6 }, { 0, 0xF1, 0xF3, 3 },
    { 0, 0xF4, 0xF4, 7 }, { 1, 0x80, 0xBF, 0 }, { 2, 0x80, 0xBF, 1 }, { 3, 0x80, 0xBF, 2 },
    { 4, 0xA0, 0xBF, 1 }, { 5, 0x80, 0x9F, 1 }, { 6, 0x90, 0xBF, 2 }, { 7, 0x80, 0x8F, 2 },
};
#define N_PURE_TR ((int)(sizeof k_pure / sizeof *k_pure))

/* Class runs. A state that reads a character class in a loop (`\w+`, an email's characters, a
 * pattern's `[^0-9\s]{1,8}`) accepts every token made only of that class's characters, up to a
 * count; only the tokens that also hold a byte which leads elsewhere need a walk. Which tokens are
 * made of which characters is known per vocabulary, by byte group: digits, A-F, G-Z, a-f, g-z (the
 * ranges patterns name), space, non-ASCII bytes, and the tokens that are not whole well-formed UTF-8
 * characters (G_MALF), each a bit set ("dense": many tokens); then each other printable byte,
 * controls and DEL ("sparse": few tokens each), each a stream of its tokens with their bytes, read
 * in order (a mask's first visit runs with cold caches: a forward pass came between). G_OTHER's bit
 * set: the tokens holding a sparse byte. */
enum {
    G_DIGIT, G_UAF, G_UGZ, G_LAF, G_LGZ, G_SPACE, G_HIGH, G_MALF, G_OTHER,
    G_CTRL, G_DEL, G_PUNCT, /* 32 of them: 0x21-0x2F, 0x3A-0x40, 0x5B-0x60, 0x7B-0x7E */
    GRP_N = G_PUNCT + 32
};
#define G_SPARSE G_CTRL              /* the first sparse group; the rows of grp are the groups below */
#define N_STREAM (GRP_N - G_SPARSE + 1) /* a stream per sparse group, and one of G_MALF's tokens */
#define ST_ONLY 0x80000000u          /* a stream entry's flag: the token holds no other sparse group */

static int grp_of(unsigned b)
{
    if (b < 0x20)
        return G_CTRL;
    if (b == 0x20)
        return G_SPACE;
    if (b == 0x7F)
        return G_DEL;
    if (b >= 0x80)
        return G_HIGH;
    if (b >= '0' && b <= '9')
        return G_DIGIT;
    if (b >= 'A' && b <= 'Z')
        return b <= 'F' ? G_UAF : G_UGZ;
    if (b >= 'a' && b <= 'z')
        return b <= 'f' ? G_LAF : G_LGZ;
    return G_PUNCT + (int)(b <= 0x2F ? b - 0x21 : b <= 0x40 ? 15 + b - 0x3A : b <= 0x60 ? 22 + b - 0x5B : 28 + b - 0x7B);
}

/* A group whose characters pure text holds (k_pure): a pure token is made of these and non-ASCII ones. */
static bool grp_pure(int g)
{
    return (g <= G_SPACE || g >= G_PUNCT) && g != grp_of('"') && g != grp_of('\\');
}

/* A stream's entry: a token, and how its first sparse byte splits it. The dense groups of a part
 * (pre, post): bit g for g < G_HIGH, bit 6 non-ASCII, bit 7 not whole characters (post: or another
 * sparse byte). */
typedef struct {
    uint32_t id;         /* | ST_ONLY */
    uint16_t len;
    uint16_t at;         /* where the first sparse byte is */
    uint16_t pre_chars;  /* the characters before it, and after it */
    uint16_t post_chars;
    uint8_t pre, post;
} sp_entry;

struct cdx_grammar_vocab {
    int64_t n_vocab;
    gr_trie tr;          /* every usable token */
    size_t n_words;      /* (n_vocab + 31) / 32 */
    uint32_t *usable;    /* [n_words] in the trie */
    uint32_t *eog;       /* [n_words] end of generation */
    int64_t n_usable;
    uint64_t fingerprint; /* of the trie: grammars key their caches by it */
    int32_t *node_of;    /* [n_vocab] the node where the token ends, or -1 */
    uint8_t *first;      /* [n_vocab] the token's first byte (usable tokens) */
    /* pure text (above) */
    bool pure_on;        /* the chains' shortcut is used (tests turn it off to compare) */
    int max_e;           /* the most characters of a pure token */
    uint32_t *pure_upto; /* [(PURE_ECAP + 1) * n_words] row e: the pure tokens of at most e characters */
    uint32_t *pure_all;  /* [n_words] every pure token */
    int32_t *long_ids;   /* pure tokens of more than PURE_ECAP characters, by count */
    uint16_t *long_e;
    int32_t n_long;
    gr_trie tail;        /* the other tokens: 2 bytes of character count (big-endian), then the tail */
    /* class runs (below, "Class runs") */
    uint32_t *grp;       /* [G_SPARSE * n_words] row g: the tokens holding a byte of dense group g */
    /* the streams (of the sparse groups, and G_MALF's): entries in the trie's byte order, so by
     * first byte; stream s's entries with first byte b are [fbe[s][b], fbe[s][b+1]), their bytes
     * from spb + fbb[s][b] */
    sp_entry *sp;        /* [entries] */
    uint32_t *spid;      /* [entries] their ids | ST_ONLY again, in a row (the bit sets' passes read these) */
    uint32_t *pure_ascii; /* [n_words] the pure tokens without a non-ASCII byte */
    uint8_t *spb;        /* their bytes in a row */
    uint32_t (*fbe)[257];
    size_t (*fbb)[257];
    uint32_t (*fbm)[257]; /* counts of the entries without ST_ONLY before first byte b */
    int32_t n_cp;        /* distinct non-ASCII characters in the well-formed tokens */
    uint32_t *cp;        /* [n_cp] ascending */
    int32_t *cp_tok0;    /* [n_cp + 1] the tokens holding cp[i]: cp_ids[cp_tok0[i] .. cp_tok0[i+1]) */
    int32_t *cp_ids;
    uint32_t *tb0;       /* [n_vocab + 1] token i's bytes are tb[tb0[i] .. tb0[i+1]) (none: not usable) */
    uint8_t *tb;
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
    memset(dfa, -1, sizeof dfa);
    for (int k = 0; k < N_PURE_TR; k++)
        for (unsigned b = k_pure[k].lo; b <= k_pure[k].hi; b++)
            dfa[k_pure[k].from][b] = (int8_t)k_pure[k].to;
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

typedef struct {
    uint32_t cp;
    int32_t id;
} cp_pair;

static int cmp_cp_pair(const void *a, const void *b)
{
    const cp_pair *x = a, *y = b;
    if (x->cp != y->cp)
        return x->cp < y->cp ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The token's non-ASCII characters into out (when not NULL); the count, or -1 when the token is not
 * whole well-formed UTF-8. */
static int64_t token_cps(const int8_t dfa[PURE_N][256], const tok_entry *e, cp_pair *out)
{
    int64_t n = 0;
    for (uint32_t k = 0; k < e->len;) {
        const uint8_t b = e->b[k];
        if (b < 0x80) {
            k++;
            continue;
        }
        int d = dfa[PURE_A][b];
        if (d <= PURE_A)
            return -1;
        uint32_t cp = b < 0xE0 ? b & 0x1Fu : b < 0xF0 ? b & 0x0Fu : b & 0x07u;
        for (k++; d != PURE_A; k++) {
            if (k == e->len || (d = dfa[d][e->b[k]]) < 0)
                return -1;
            cp = cp << 6 | (e->b[k] & 0x3Fu);
        }
        if (out)
            out[n] = (cp_pair){ cp, e->id };
        n++;
    }
    return n;
}

/* The dense groups of bytes b[0..n) (as sp_entry's pre) and their count of characters. */
static uint8_t part_groups(const int8_t dfa[PURE_N][256], const uint8_t *b, uint32_t n, uint16_t *chars)
{
    uint8_t dm = 0;
    uint32_t c = 0;
    int d = PURE_A; /* whole characters? */
    for (uint32_t j = 0; j < n; j++) {
        const int g = grp_of(b[j]);
        dm |= (uint8_t)(g >= G_SPARSE ? 0x80 : g == G_HIGH ? 0x40 : 1u << g);
        c += (b[j] & 0xC0) != 0x80;
        d = d < 0 ? d : b[j] < 0x80 ? (d == PURE_A ? PURE_A : -1) : dfa[d][b[j]];
    }
    *chars = (uint16_t)c;
    return (uint8_t)(dm | (d == PURE_A ? 0 : 0x80));
}

/* The stream of group g (sparse), or G_MALF's. */
static int stream_of(int g) { return g == G_MALF ? N_STREAM - 1 : g - G_SPARSE; }

/* Sorts the usable tokens by byte group and indexes them by non-ASCII character (see grp_of). */
static int class_build(cdx_grammar_vocab *v, const tok_entry *e, size_t n, cdx_err *err)
{
    int8_t dfa[PURE_N][256];
    memset(dfa, -1, sizeof dfa);
    for (int k = 0; k < N_PURE_TR; k++)
        for (unsigned b = k_pure[k].lo; b <= k_pure[k].hi; b++)
            dfa[k_pure[k].from][b] = (int8_t)k_pure[k].to;
    uint64_t *gm = malloc((n ? n : 1) * sizeof *gm); /* per entry: its groups */
    v->grp = calloc((size_t)G_SPARSE * v->n_words, sizeof *v->grp);
    if (!gm || !v->grp) {
        free(gm);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    size_t n_pairs = 0;
    v->fbe = calloc(N_STREAM, sizeof *v->fbe);
    v->fbb = calloc(N_STREAM, sizeof *v->fbb);
    v->fbm = calloc(N_STREAM, sizeof *v->fbm);
    if (!v->fbe || !v->fbb || !v->fbm) {
        free(gm);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) { /* counts first, per stream and first byte (at index b + 1) */
        gm[i] = 0;
        for (uint32_t k = 0; k < e[i].len; k++)
            gm[i] |= 1ull << grp_of(e[i].b[k]);
        const int64_t c = token_cps(dfa, &e[i], NULL);
        if (c < 0)
            gm[i] |= 1ull << G_MALF;
        else
            n_pairs += (size_t)c;
        if (gm[i] >> G_SPARSE)
            gm[i] |= 1ull << G_OTHER;
        for (int g = 0; g < GRP_N; g++)
            if (gm[i] >> g & 1) {
                if (g < G_SPARSE)
                    v->grp[(size_t)g * v->n_words + e[i].id / 32] |= 1u << (e[i].id % 32);
                if (g >= G_SPARSE || g == G_MALF) {
                    const int st = stream_of(g), b1 = e[i].b[0] + 1;
                    v->fbe[st][b1]++;
                    v->fbb[st][b1] += e[i].len;
                    v->fbm[st][b1] += __builtin_popcountll(gm[i] >> G_SPARSE) != 1;
                }
            }
    }
    uint32_t ne = 0;
    size_t nb = 0;
    for (int st = 0; st < N_STREAM; st++) {
        v->fbe[st][0] = ne;
        v->fbb[st][0] = nb;
        for (int b = 1; b <= 256; b++) {
            ne += v->fbe[st][b];
            nb += v->fbb[st][b];
            v->fbe[st][b] = ne;
            v->fbb[st][b] = nb;
            v->fbm[st][b] += v->fbm[st][b - 1];
        }
    }
    v->sp = malloc((ne ? ne : 1) * sizeof *v->sp);
    v->spid = malloc((ne ? ne : 1) * sizeof *v->spid);
    v->pure_ascii = malloc(v->n_words * sizeof *v->pure_ascii);
    v->spb = malloc(nb ? nb : 1);
    uint32_t (*pe)[257] = malloc(N_STREAM * sizeof *pe);
    size_t (*pb)[257] = malloc(N_STREAM * sizeof *pb);
    if (!v->sp || !v->spid || !v->pure_ascii || !v->spb || !pe || !pb) {
        free(gm);
        free(pe);
        free(pb);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    memcpy(pe, v->fbe, N_STREAM * sizeof *pe);
    memcpy(pb, v->fbb, N_STREAM * sizeof *pb);
    for (size_t i = 0; i < n; i++)
        for (int g = 0; g < GRP_N; g++)
            if (gm[i] >> g & 1 && (g >= G_SPARSE || g == G_MALF)) {
                const int st = stream_of(g), b0 = e[i].b[0];
                const uint32_t at = pe[st][b0]++;
                sp_entry *se = &v->sp[at];
                se->id = (uint32_t)e[i].id | (__builtin_popcountll(gm[i] >> G_SPARSE) == 1 ? ST_ONLY : 0);
                se->len = (uint16_t)e[i].len;
                /* the parts before and after the first sparse byte */
                uint32_t k = 0;
                while (k < e[i].len && grp_of(e[i].b[k]) < G_SPARSE)
                    k++;
                se->at = (uint16_t)k;
                se->pre = part_groups(dfa, e[i].b, k, &se->pre_chars);
                se->post = k < e[i].len ? part_groups(dfa, e[i].b + k + 1, e[i].len - k - 1, &se->post_chars) : 0x80;
                v->spid[at] = se->id;
                memcpy(v->spb + pb[st][b0], e[i].b, e[i].len);
                pb[st][b0] += e[i].len;
            }
    free(pe);
    free(pb);
    for (size_t w = 0; w < v->n_words; w++)
        v->pure_ascii[w] = v->pure_all[w] & ~v->grp[(size_t)G_HIGH * v->n_words + w];
    free(gm);
    cp_pair *p = malloc((n_pairs ? n_pairs : 1) * sizeof *p);
    if (!p)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t c = token_cps(dfa, &e[i], p + at);
        at += c > 0 ? (size_t)c : 0;
    }
    qsort(p, n_pairs, sizeof *p, cmp_cp_pair);
    size_t w = 0, n_cp = 0; /* one pair per (character, token) */
    for (size_t i = 0; i < n_pairs; i++)
        if (!w || p[i].cp != p[w - 1].cp || p[i].id != p[w - 1].id) {
            n_cp += !w || p[i].cp != p[w - 1].cp;
            p[w++] = p[i];
        }
    v->cp = malloc((n_cp ? n_cp : 1) * sizeof *v->cp);
    v->cp_tok0 = malloc((n_cp + 1) * sizeof *v->cp_tok0);
    v->cp_ids = malloc((w ? w : 1) * sizeof *v->cp_ids);
    if (!v->cp || !v->cp_tok0 || !v->cp_ids) {
        free(p);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    v->n_cp = 0;
    for (size_t i = 0; i < w; i++) {
        if (!i || p[i].cp != p[i - 1].cp) {
            v->cp_tok0[v->n_cp] = (int32_t)i;
            v->cp[v->n_cp++] = p[i].cp;
        }
        v->cp_ids[i] = p[i].id;
    }
    v->cp_tok0[v->n_cp] = (int32_t)w;
    free(p);
    return CDX_OK;
}

static int vocab_build(tok_entry *e, size_t n, int64_t n_vocab, const int32_t *eog, int n_eog,
                       cdx_grammar_vocab **out, cdx_err *err)
{
    cdx_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
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
    if ((rc = pure_build(v, e, n, err)) || (rc = class_build(v, e, n, err))) {
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
    free(v->grp);
    free(v->sp);
    free(v->spid);
    free(v->pure_ascii);
    free(v->spb);
    free(v->fbe);
    free(v->fbb);
    free(v->fbm);
    free(v->cp);
    free(v->cp_tok0);
    free(v->cp_ids);
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

typedef struct {
    int32_t st, par;   /* par: a node, or -1 (the bottom) */
} item;

typedef struct {
    int32_t st, par, next;
} gnode;

typedef struct {
    bool ready;          /* read and written atomically (matchers of several threads share it) */
    int32_t n_ids, n_chk;
    int32_t *ids;        /* the accepted ids, when bits is NULL */
    uint32_t *bits;      /* [n_words] the accepted ids, when they are many */
    int32_t *chk;        /* trie nodes where the rule may end: their subtrees are checked at the caller
                          * (negated: nodes of the vocabulary's tail trie) */
    uint8_t *excl;       /* [32] a chain head's exceptions (chain_head_step): tokens that start with one
                          * of these bytes are not the tail trie's to give; NULL: none */
    bool run;            /* made by a class run (tests count them) */
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
    struct gr_cache *gc; /* the grammar's cache for this vocabulary (shared) */
    pstate *pc;          /* gc->pc */
    centry *cc;          /* checked tokens per (state, parent), open addressing */
    size_t n_cc, cap_cc;
    /* scratch */
    item *wb;            /* configurations along the trie path */
    size_t cap_wb;
    int32_t *cs;         /* [max_depth + 3] a walk's configuration at each depth of the trie path */
    /* Configurations of the current walks, interned, with their moves cached (dfa_*): a walk then
     * costs one table lookup per trie node instead of one advance() */
    item *ci;            /* items of every configuration, each sorted */
    size_t n_ci, cap_ci;
    int32_t *c_off, *c_n; /* [n_cfg] */
    int32_t n_cfg, cap_cfg;
    int32_t *c_tr;       /* [n_cfg * 256] DFA_UNSET, DFA_DEAD, or a packed move */
    uint8_t *c_full;     /* [n_cfg] the row of c_tr is complete (cfg_moves) */
    uint32_t *mark;      /* [trie nodes / 32] a class run's check nodes so far (zero between runs) */
    int32_t budget;      /* walk(): nodes left before it stops at node stop (0: no limit) */
    int32_t stop;
    int32_t *c_hash;     /* open addressing over configuration ids, -1 empty */
    uint32_t c_hmask;
    item *work, *vis;    /* closure */
    size_t cap_work, cap_vis, n_vis;
    int32_t *tl;         /* token list */
    size_t n_tl, cap_tl;
    int32_t *tl2;
    size_t n_tl2, cap_tl2;
    uint32_t *stamp;     /* [n_st] */
    uint32_t stamp_now;
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

/* ---- walks: configurations as DFA states ---- */

enum { DFA_UNSET = -2, DFA_DEAD = -1 };
#define DFA_POPPED (1 << 30)     /* the bottom rule may end after the byte */
#define DFA_NONE 0x3FFFFFFF      /* ... and no item is left */

static int cmp_item(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->st != y->st)
        return x->st < y->st ? -1 : 1;
    return x->par < y->par ? -1 : x->par > y->par;
}

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
static int32_t dfa_intern(cdx_matcher *m, item *it, size_t n)
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
static int32_t dfa_move(cdx_matcher *m, int32_t c, uint8_t b)
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
    if (n && (to = dfa_intern(m, m->wb + n_from, n)) < 0)
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
        int32_t r = m->c_tr[(size_t)m->cs[d - 1] * 256 + v->byte[i]];
        if (r == DFA_UNSET)
            r = dfa_move(m, m->cs[d - 1], v->byte[i]);
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
static int32_t dfa_single(cdx_matcher *m, int32_t q)
{
    item it = { q, -1 };
    return dfa_intern(m, &it, 1);
}

/* Without -mpopcnt __builtin_popcount is a libgcc call per word: 4,700 calls a mask on 150k tokens */
static inline int popcount32(uint32_t x)
{
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    return (int)((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
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

/* A state inside a chain reads bytes only: no call, no end of its rule, some byte edge. */
static bool chain_state_ok(const gr_state *s) { return !s->final && !s->nc && s->ne > 0; }

/* The one target of st's byte edges over every byte lo..hi, or -1 (a byte without an edge, or two
 * targets). */
static int32_t range_target(const cdx_grammar *g, const gr_state *st, unsigned lo, unsigned hi)
{
    const gr_edge *e = g->edges + st->e0;
    int32_t to = -1;
    for (int32_t k = 0; k < st->ne; k++)
        if (e[k].lo <= hi && e[k].hi >= lo) {
            if (to >= 0 && e[k].to != to)
                return -1;
            to = e[k].to;
        }
    for (unsigned b = lo; b <= hi;) { /* every byte covered */
        unsigned reach = 0;
        bool found = false;
        for (int32_t k = 0; k < st->ne; k++)
            if (e[k].lo <= b && b <= e[k].hi && (!found || e[k].hi > reach)) {
                reach = e[k].hi;
                found = true;
            }
        if (!found)
            return -1;
        b = reach + 1;
    }
    return to;
}

/* The multi-byte characters' paths: from each (DFA state, grammar state) of todo[0..n_todo), every
 * byte of k_pure's ranges must go to one state that only reads bytes, until the character ends,
 * and every character must end on one state, *y (set here when -1). False where any does not. */
typedef struct {
    int32_t d, x;
} pure_pair;
static bool paths_land(const cdx_grammar *g, pure_pair *todo, int n_todo, int32_t *y)
{
    pure_pair seen[32];
    int n_seen = 0;
    while (n_todo) {
        const pure_pair p = todo[--n_todo];
        bool dup = false;
        for (int i = 0; i < n_seen && !dup; i++)
            dup = seen[i].d == p.d && seen[i].x == p.x;
        if (dup)
            continue;
        if (n_seen == 32)
            return false;
        seen[n_seen++] = p;
        for (int k = 0; k < N_PURE_TR; k++) {
            if (k_pure[k].from != p.d)
                continue;
            const int32_t to = range_target(g, &g->st[p.x], k_pure[k].lo, k_pure[k].hi);
            if (to < 0)
                return false;
            if (k_pure[k].to == PURE_A) {
                if (*y >= 0 && to != *y)
                    return false;
                *y = to;
                continue;
            }
            if (!chain_state_ok(&g->st[to]) || n_todo == 32)
                return false;
            todo[n_todo++] = (pure_pair){ k_pure[k].to, to };
        }
    }
    return true;
}

/* The state s reaches after any one pure character, when every pure character (k_pure) leads there
 * byte by byte through states that only read bytes; else -1. */
static int32_t chain_step(const cdx_grammar *g, int32_t s)
{
    pure_pair todo[32] = { { PURE_A, s } };
    int32_t next = -1;
    return paths_land(g, todo, 1, &next) ? next : -1;
}

/* A chain may end at s when s reads bytes only and no pure character at all. */
static bool chain_end_ok(const cdx_grammar *g, int32_t s)
{
    const gr_state *st = &g->st[s];
    if (!chain_state_ok(st))
        return false;
    for (int32_t k = 0; k < st->ne; k++) {
        const gr_edge *e = &g->edges[st->e0 + k];
        for (int t = 0; t < N_PURE_TR; t++)
            if (k_pure[t].from == PURE_A && e->lo <= k_pure[t].hi && e->hi >= k_pure[t].lo)
                return false;
    }
    return true;
}

/* The one target of st's byte edges on byte b: -1 none, -2 several. */
static int32_t byte_target(const cdx_grammar *g, const gr_state *st, unsigned b)
{
    int32_t to = -1;
    for (int32_t k = 0; k < st->ne; k++) {
        const gr_edge *e = &g->edges[st->e0 + k];
        if (e->lo <= b && b <= e->hi) {
            if (to >= 0 && e->to != to)
                return -2;
            to = e->to;
        }
    }
    return to;
}

/* A chain head with exceptions: the state most one-byte pure characters lead q to, when every other
 * pure character (the multi-byte ones too) leads there as chain_step asks, and the one-byte ones
 * that do not (an object key that must not begin a known key's name, say) are at most 16: those
 * bytes are set in excl (they are walked as any state is). -1: no such state. */
static int32_t chain_head_step(const cdx_grammar *g, int32_t q, uint8_t excl[32])
{
    const gr_state *st = &g->st[q];
    if (!chain_state_ok(st))
        return -1;
    int32_t cand[8], votes[8];
    int n_cand = 0;
    for (int k = 0; k < N_PURE_TR; k++) /* the most common target of the one-byte characters */
        if (k_pure[k].from == PURE_A && k_pure[k].to == PURE_A)
            for (unsigned b = k_pure[k].lo; b <= k_pure[k].hi; b++) {
                const int32_t t = byte_target(g, st, b);
                if (t < 0)
                    continue;
                int i = 0;
                while (i < n_cand && cand[i] != t)
                    i++;
                if (i == n_cand) {
                    if (n_cand == 8)
                        return -1;
                    cand[n_cand] = t;
                    votes[n_cand++] = 0;
                }
                votes[i]++;
            }
    if (!n_cand)
        return -1;
    int best = 0;
    for (int i = 1; i < n_cand; i++)
        if (votes[i] > votes[best])
            best = i;
    const int32_t y = cand[best];
    memset(excl, 0, 32);
    int n_excl = 0;
    for (int k = 0; k < N_PURE_TR; k++)
        if (k_pure[k].from == PURE_A && k_pure[k].to == PURE_A)
            for (unsigned b = k_pure[k].lo; b <= k_pure[k].hi; b++)
                if (byte_target(g, st, b) != y) {
                    if (++n_excl > 16)
                        return -1;
                    excl[b / 8] |= (uint8_t)(1u << (b % 8));
                }
    /* the multi-byte characters: each lead byte's path, byte by byte, to y (as chain_step) */
    pure_pair todo[32];
    int n_todo = 0;
    for (int k = 0; k < N_PURE_TR; k++) {
        if (k_pure[k].from != PURE_A || k_pure[k].to == PURE_A)
            continue;
        const int32_t to = range_target(g, st, k_pure[k].lo, k_pure[k].hi);
        if (to < 0 || !chain_state_ok(&g->st[to]) || n_todo == 32)
            return -1;
        todo[n_todo++] = (pure_pair){ k_pure[k].to, to };
    }
    int32_t land = y;
    return paths_land(g, todo, n_todo, &land) ? y : -1;
}

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
        const int32_t y = chain_state_ok(&g->st[x]) ? chain_step(g, x) : -1;
        if (y < 0) {
            val = cn[x] = chain_end_ok(g, x) ? 0 : CH_NO;
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
 * state after one character when q is a head with exceptions (chain_head_step), else -1. */
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
            const int32_t c0 = dfa_single(m, x);
            if (c0 >= 0)
                walk(m, t, j + 1, t->end[j], 2, c0, chk, n_chk, cap_chk);
        }
}

/* ---- class runs ---- */

/* From state q, a run of a character class C: the configurations after k characters of C, level by
 * level, until every character of C dies (n = k), a level repeats (no end), or CR_LEVELS. Every
 * configuration of a level below n must take every character of C to a plain configuration (alive,
 * the rule not ended): then a token made of at most n characters of C is accepted without a walk
 * (its groups are all C's), and one made of more is refused. C is byte groups (grp_of) whose every
 * byte does so, and the non-ASCII characters: all of them but exceptions, or none but exceptions
 * (exc). A byte group or a character off C that is not dead somewhere ("live") marks the tokens
 * that hold it for a walk, one token at a time, from q. A level may hold more configurations than
 * are really reached (a group that left C added its moves before): that only asks more of them. */
#define CR_LEVELS 32 /* levels followed; the tokens of C with more characters are walked */
#define CR_WIDTH 8   /* configurations a level may hold */
#define CR_EXC 64    /* ranges of non-ASCII characters outside C */
#define CR_MEMO 128
#define CR_WALK_FIRST 2000 /* trie nodes a state's walk may visit before a class run is tried */

/* A position inside a character held without a configuration: a few items whose states read bytes
 * only (their own closure), sorted. */
#define CR_SET 4
typedef struct cr_set_ {
    item it[CR_SET];
    int n;
} cr_set;

typedef struct {
    uint32_t lo, hi;
    bool live;
} cr_exc;

/* The configurations the characters below a position lead to (few: else not kept) */
typedef struct {
    int32_t t[4];
    int n;
    bool many;
} cr_tg;

static void cr_tg_add(cr_tg *a, int32_t t)
{
    for (int i = 0; i < a->n; i++)
        if (a->t[i] == t)
            return;
    if (a->n == 4)
        a->many = true;
    else
        a->t[a->n++] = t;
}

typedef struct {
    cdx_matcher *m;
    bool in[GRP_N];       /* the byte groups of C */
    bool live[GRP_N];     /* groups with a byte not dead off the run */
    bool hi_in;           /* the non-ASCII characters are in C (but exc), else none is */
    cr_exc exc[CR_EXC];
    int n_exc;
    int32_t next[CR_WIDTH]; /* the next level's configurations */
    uint64_t next_pv[CR_WIDTH]; /* the groups that led to each (bit G_HIGH: a non-ASCII character) */
    int n_next;
    bool wide;            /* more than CR_WIDTH */
    uint64_t prov;        /* cr_high's moves: the groups that led to its configuration */
    struct {
        int d;
        bool alive;
        int32_t c;
        struct cr_set_ p; /* c < 0 */
        cr_tg t;          /* the configurations its characters lead to */
    } memo[CR_MEMO];      /* (pure DFA state, position) whose characters all did as asked, for the
                           * whole run: the same characters come back at each level and pass */
    int n_memo;
    /* the levels of the last pass: one[k] the configuration of level k where it is alone, else -1;
     * levels 0 .. n_lv - 1, and level n_lv is level cyc again when the run has no end */
    int32_t one[CR_LEVELS + 1];
    int n_lv, cyc;
} crun;

/* A byte that starts a well-formed character of two bytes or more. */
static bool cr_lead(unsigned b) { return b >= 0xC2 && b <= 0xF4; }

/* Alive, and the rule not ended. */
static bool cr_plain(int32_t r) { return r >= 0 && !(r & DFA_POPPED); }

/* A group a run's class may hold: one of bytes below 0x80. */
static bool cr_ascii(int g) { return g != G_HIGH && g != G_MALF && g != G_OTHER; }

/* Makes the row of configuration c in c_tr complete for the bytes below hi (128: ASCII, where a
 * run's levels look; the moves of lead bytes make configurations inside characters, which the
 * levels reach by edges instead): one move per run of bytes that the same edges take. */
static bool cfg_moves(cdx_matcher *m, int32_t c, int hi)
{
    const uint8_t done = hi > 128 ? 2 : 1; /* c_full: bit 0 the ASCII half, bit 1 all */
    if (m->c_full[c] & (done == 2 ? 2 : 3))
        return true;
    uint8_t cut[32] = { 1 }; /* bytes where a run starts */
    const item *it = m->ci + m->c_off[c];
    for (int32_t i = 0; i < m->c_n[c]; i++) {
        const gr_state *s = &m->g->st[it[i].st];
        for (int32_t k = 0; k < s->ne; k++) {
            const gr_edge *e = &m->g->edges[s->e0 + k];
            cut[e->lo / 8] |= (uint8_t)(1u << (e->lo % 8));
            if (e->hi < 255)
                cut[(e->hi + 1) / 8] |= (uint8_t)(1u << ((e->hi + 1) % 8));
        }
    }
    int32_t r = DFA_DEAD;
    for (int b = 0; b < hi; b++) {
        if (cut[b / 8] >> (b % 8) & 1) {
            r = m->c_tr[(size_t)c * 256 + b];
            if (r == DFA_UNSET)
                r = dfa_move(m, c, (uint8_t)b);
            if (m->oom)
                return false;
        }
        m->c_tr[(size_t)c * 256 + b] = r;
    }
    m->c_full[c] |= done;
    return true;
}

/* The bytes that some item of configuration c has an edge for (a byte without one dies there). */
static void cfg_edges(const cdx_matcher *m, int32_t c, uint8_t has[32])
{
    memset(has, 0, 32);
    const item *it = m->ci + m->c_off[c];
    for (int32_t i = 0; i < m->c_n[c]; i++) {
        const gr_state *s = &m->g->st[it[i].st];
        for (int32_t k = 0; k < s->ne; k++)
            for (unsigned b = m->g->edges[s->e0 + k].lo; b <= m->g->edges[s->e0 + k].hi; b++)
                has[b / 8] |= (uint8_t)(1u << (b % 8));
    }
}

static void cr_next(crun *x, int32_t r, uint64_t prov)
{
    for (int i = 0; i < x->n_next; i++)
        if (x->next[i] == r) {
            x->next_pv[i] |= prov;
            return;
        }
    if (x->n_next == CR_WIDTH)
        x->wide = true;
    else {
        x->next_pv[x->n_next] = prov;
        x->next[x->n_next++] = r;
    }
}

/* The code points of the characters that go on from the pure DFA's state d with bits cp so far:
 * [*lo, *hi] (UTF-8 keeps the order of code points, and past a lead byte every state has one range). */
static void cp_span(int d, uint32_t cp, uint32_t *lo, uint32_t *hi)
{
    *lo = *hi = cp;
    while (d != PURE_A)
        for (int k = 0; k < N_PURE_TR; k++)
            if (k_pure[k].from == d) {
                *lo = *lo << 6 | (k_pure[k].lo & 0x3Fu);
                *hi = *hi << 6 | (k_pure[k].hi & 0x3Fu);
                d = k_pure[k].to;
                break;
            }
}

static bool cr_add_exc(crun *x, uint32_t lo, uint32_t hi, bool live)
{
    for (int i = 0; i < x->n_exc; i++)
        if (x->exc[i].lo == lo && x->exc[i].hi == hi) {
            x->exc[i].live |= live;
            return true;
        }
    if (x->n_exc == CR_EXC)
        return false;
    x->exc[x->n_exc++] = (cr_exc){ lo, hi, live };
    return true;
}

static bool cr_set_eq(const cr_set *a, const cr_set *b)
{
    return a->n == b->n && !memcmp(a->it, b->it, (size_t)a->n * sizeof *a->it);
}

/* The non-ASCII characters from a position inside a character: the pure DFA at d, bits cp so far
 * (exact: cp is one prefix, not a range of them), the matcher at configuration c, or, when c < 0,
 * at the items of p (most positions: they need no configuration of their own, a move is an edge).
 * alive asks each character to lead to a plain configuration (added to next), else to die; the
 * others become exceptions. 0: all did as asked; 1: some are exceptions; -1: too many exceptions,
 * or out of memory; -2: an exception needs an exact prefix (the caller goes byte by byte). */
static int cr_high(crun *x, int d, int32_t c, const cr_set *p, uint32_t cp, bool exact, bool alive, cr_tg *up)
{
    cdx_matcher *m = x->m;
    const cdx_grammar *g = m->g;
    for (int i = 0; i < x->n_memo; i++)
        if (x->memo[i].d == d && x->memo[i].alive == alive && x->memo[i].c == c &&
            (c >= 0 || cr_set_eq(&x->memo[i].p, p))) {
            for (int j = 0; j < x->memo[i].t.n; j++) {
                cr_next(x, x->memo[i].t.t[j], x->prov);
                cr_tg_add(up, x->memo[i].t.t[j]);
            }
            return 0;
        }
    cr_tg tg = { .n = 0 };
    /* per byte: a configuration's move (c >= 0), or the index of its items in sets (-1: none) */
    int32_t res[256];
    cr_set sets[16];
    int n_sets = 0;
    if (c < 0) {
        uint8_t cut[32] = { 0 }; /* bytes where the edges that take a byte change */
        for (int i = 0; i < p->n; i++) {
            const gr_state *st = &g->st[p->it[i].st];
            for (int32_t e = 0; e < st->ne; e++) {
                const gr_edge *ed = &g->edges[st->e0 + e];
                cut[ed->lo / 8] |= (uint8_t)(1u << (ed->lo % 8));
                if (ed->hi < 255)
                    cut[(ed->hi + 1) / 8] |= (uint8_t)(1u << ((ed->hi + 1) % 8));
            }
        }
        for (int k = 0; k < N_PURE_TR; k++) {
            const pure_tr t = k_pure[k];
            if (t.from != d || (d == PURE_A && t.to == PURE_A))
                continue;
            for (unsigned y = t.lo; y <= t.hi; y++) {
                if (y > t.lo && !(cut[y / 8] >> (y % 8) & 1)) { /* the same edges as y - 1 */
                    res[y] = res[y - 1];
                    continue;
                }
                cr_set s = { .n = 0 };
                bool big = false;
                for (int i = 0; i < p->n && !big; i++) {
                    const gr_state *st = &g->st[p->it[i].st];
                    for (int32_t e = 0; e < st->ne && !big; e++) {
                        const gr_edge *ed = &g->edges[st->e0 + e];
                        if (y < ed->lo || y > ed->hi)
                            continue;
                        const item it = { ed->to, p->it[i].par };
                        int j = 0; /* insert, sorted, once */
                        while (j < s.n && cmp_item(&s.it[j], &it) < 0)
                            j++;
                        if (j < s.n && !cmp_item(&s.it[j], &it))
                            continue;
                        if (s.n == CR_SET) {
                            big = true;
                            break;
                        }
                        memmove(s.it + j + 1, s.it + j, (size_t)(s.n - j) * sizeof *s.it);
                        s.it[j] = it;
                        s.n++;
                    }
                }
                int j = 0;
                while (!big && j < n_sets && !cr_set_eq(&sets[j], &s))
                    j++;
                if (big || (j == n_sets && n_sets == 16)) { /* many: a configuration */
                    cr_set u = *p;
                    const int32_t c1 = dfa_intern(m, u.it, (size_t)u.n);
                    return c1 < 0 ? -1 : cr_high(x, d, c1, NULL, cp, exact, alive, up);
                }
                if (j == n_sets)
                    sets[n_sets++] = s;
                res[y] = s.n ? j : -1;
            }
        }
    } else {
        if (!cfg_moves(m, c, 256))
            return -1;
        memcpy(res, m->c_tr + (size_t)c * 256, sizeof res);
    }
    int dev = 0;
    for (int k = 0; k < N_PURE_TR; k++) {
        const pure_tr t = k_pure[k];
        if (t.from != d || (d == PURE_A && t.to == PURE_A))
            continue;
        for (unsigned a = t.lo, b; a <= t.hi; a = b + 1) {
            for (b = a; b < t.hi && res[b + 1] == res[a];)
                b++;
            /* the payload of byte y: a lead byte's low bits, or six more bits */
#define CR_BITS(y) (d == PURE_A ? ((y) < 0xE0 ? (y) & 0x1Fu : (y) < 0xF0 ? (y) & 0x0Fu : (y) & 0x07u) : cp << 6 | ((y) & 0x3Fu))
            int32_t r = res[a];
            if (c < 0 && r >= 0) { /* the items after the byte */
                const cr_set *s = &sets[r];
                bool plain = true;
                for (int i = 0; i < s->n; i++)
                    plain &= chain_state_ok(&g->st[s->it[i].st]);
                if (t.to != PURE_A && plain) { /* inside a character still */
                    x->live[G_HIGH] |= !alive; /* a token ending here lives: walked (G_MALF) */
                    int v = cr_high(x, t.to, -1, s, CR_BITS(a), exact && a == b, alive, &tg);
                    for (unsigned y = a; v == -2 && y <= b; y++)
                        v = cr_high(x, t.to, -1, s, CR_BITS(y), true, alive, &tg);
                    if (v < 0)
                        return v;
                    dev |= v;
                    continue;
                }
                /* the configuration after the byte: the items, or their closure */
                if (plain) {
                    cr_set u = *s;
                    r = dfa_intern(m, u.it, (size_t)u.n);
                } else {
                    cr_set u = *p;
                    const int32_t c1 = dfa_intern(m, u.it, (size_t)u.n);
                    r = c1 < 0 ? -1 : dfa_move(m, c1, (uint8_t)a);
                }
                if (r == -1 || m->oom)
                    return -1;
            } else if (c < 0)
                r = DFA_DEAD;
            if (t.to != PURE_A && cr_plain(r)) { /* inside a character: go on */
                x->live[G_HIGH] |= !alive;
                int v = cr_high(x, t.to, r, NULL, CR_BITS(a), exact && a == b, alive, &tg);
                for (unsigned y = a; v == -2 && y <= b; y++)
                    v = cr_high(x, t.to, r, NULL, CR_BITS(y), true, alive, &tg);
                if (v < 0)
                    return v;
                dev |= v;
                continue;
            }
            /* every character from here has r's fate */
            const bool ok = t.to == PURE_A ? (alive ? cr_plain(r) : r == DFA_DEAD) : r == DFA_DEAD && !alive;
            if (ok) {
                if (alive) {
                    cr_next(x, r, x->prov);
                    cr_tg_add(&tg, r);
                }
                continue;
            }
            if (!exact)
                return -2;
            uint32_t lo, hi, l2, h2;
            cp_span(t.to, CR_BITS(a), &lo, &l2);
            cp_span(t.to, CR_BITS(b), &h2, &hi);
#undef CR_BITS
            if (!cr_add_exc(x, lo, hi, r != DFA_DEAD))
                return -1;
            dev = 1;
        }
    }
    for (int j = 0; j < tg.n; j++)
        cr_tg_add(up, tg.t[j]);
    up->many |= tg.many;
    if (!dev && !tg.many && x->n_memo < CR_MEMO) {
        x->memo[x->n_memo].d = d;
        x->memo[x->n_memo].alive = alive;
        x->memo[x->n_memo].c = c;
        if (c < 0)
            x->memo[x->n_memo].p = *p;
        x->memo[x->n_memo].t = tg;
        x->n_memo++;
    }
    return dev;
}

/* cr_high from configuration c at a character's start: by its items where they read bytes only. */
static int cr_high_at(crun *x, int32_t c, bool alive)
{
    const cdx_matcher *m = x->m;
    cr_set p = { .n = m->c_n[c] };
    bool plain = p.n <= CR_SET;
    for (int i = 0; i < p.n && plain; i++) {
        p.it[i] = m->ci[m->c_off[c] + i];
        plain = chain_state_ok(&m->g->st[p.it[i].st]);
    }
    cr_tg tg = { .n = 0 };
    return plain ? cr_high(x, PURE_A, -1, &p, 0, true, alive, &tg) : cr_high(x, PURE_A, c, NULL, 0, true, alive, &tg);
}

/* The exceptions' code points, counted (a mode's cost). */
static uint64_t cr_exc_span(const crun *x)
{
    uint64_t s = 0;
    for (int i = 0; i < x->n_exc; i++)
        s += x->exc[i].hi - x->exc[i].lo + 1;
    return s;
}

/* One pass over the levels with the groups of C as they stand: 1 done (*n, *capped set), 0 no run,
 * 2 groups left C (go again). A level whose configurations disagree on C is split by what led to
 * them (prov: the groups on the way): the groups that led only to the odd ones leave C (an escape
 * such as '\\' leads to a state of its own); else the groups that disagree leave. */
static int cr_pass(crun *x, int32_t c0, int32_t *n, bool *capped)
{
    cdx_matcher *m = x->m;
    int32_t lv[CR_LEVELS + 1][CR_WIDTH];
    uint64_t pv[CR_LEVELS + 1][CR_WIDTH];
    int nlv[CR_LEVELS + 1];
    uint64_t cm = 0; /* C's byte groups */
    for (int g = 0; g < GRP_N; g++)
        if (x->in[g])
            cm |= 1ull << g;
    if (!cm)
        return 0;
    x->n_exc = 0;
    lv[0][0] = c0;
    pv[0][0] = 0;
    nlv[0] = 1;
    *capped = false;
    for (int k = 0;; k++) {
        x->one[k] = nlv[k] == 1 ? lv[k][0] : -1;
        x->n_lv = k + 1;
        if (k == CR_LEVELS) {
            x->n_lv = k;
            *n = k;
            *capped = true;
            return 1;
        }
        uint64_t svm[CR_WIDTH], ddm[CR_WIDTH]; /* per configuration: groups all plain, all dead */
        x->n_next = 0;
        x->wide = false;
        for (int i = 0; i < nlv[k]; i++) {
            const int32_t c = lv[k][i];
            if (!cfg_moves(m, c, 128))
                return 0;
            const int32_t *res = m->c_tr + (size_t)c * 256;
            uint8_t has[32];
            cfg_edges(m, c, has);
            svm[i] = ddm[i] = ~0ull;
            for (unsigned b = 0; b < 128; b++) {
                const int g = grp_of(b);
                const int32_t r = res[b];
                if (r != DFA_DEAD && !x->in[g])
                    x->live[g] = true;
                if (!cr_plain(r))
                    svm[i] &= ~(1ull << g);
                else if (x->in[g])
                    cr_next(x, r, pv[k][i] | 1ull << g);
                if (r != DFA_DEAD)
                    ddm[i] &= ~(1ull << g);
            }
            for (unsigned b = 128; b < 256; b++) /* a byte no character starts with: a token ending so walks */
                if (has[b / 8] >> (b % 8) & 1 && !cr_lead(b))
                    x->live[G_HIGH] = true;
        }
        bool all_sv = true, all_dd = true;
        for (int i = 0; i < nlv[k]; i++) {
            all_sv &= (svm[i] & cm) == cm;
            all_dd &= (ddm[i] & cm) == cm;
        }
        if (!all_sv && !all_dd) {
            int main = 0; /* the configuration most groups led to */
            for (int i = 1; i < nlv[k]; i++)
                if (__builtin_popcountll(pv[k][i]) > __builtin_popcountll(pv[k][main]))
                    main = i;
            uint64_t rm = 0;
            for (int i = 0; i < nlv[k]; i++)
                if ((svm[i] & cm) != (svm[main] & cm) || (ddm[i] & cm) != (ddm[main] & cm))
                    rm |= pv[k][i];
            rm &= ~pv[k][main] & cm;
            if (!rm) {
                uint64_t sv = cm, dd = cm;
                for (int i = 0; i < nlv[k]; i++)
                    sv &= svm[i], dd &= ddm[i];
                rm = cm & ~sv & ~dd;
                if (!rm) /* each group agrees, but some go on and some end: those that end lived before */
                    rm = dd;
            }
            for (int g = 0; g < GRP_N; g++)
                if (rm >> g & 1)
                    x->in[g] = false, x->live[g] = true;
            return 2;
        }
        for (int i = 0; i < nlv[k]; i++) {
            x->prov = pv[k][i] | 1ull << G_HIGH;
            if (cr_high_at(x, lv[k][i], all_sv && x->hi_in) < 0)
                return 0;
        }
        if (!all_sv) {
            *n = k;
            return 1;
        }
        if (x->wide)
            return 0;
        for (int i = 1; i < x->n_next; i++) /* sorted, so equal levels compare equal */
            for (int j = i; j > 0 && x->next[j - 1] > x->next[j]; j--) {
                const int32_t t = x->next[j];
                x->next[j] = x->next[j - 1];
                x->next[j - 1] = t;
                const uint64_t p = x->next_pv[j];
                x->next_pv[j] = x->next_pv[j - 1];
                x->next_pv[j - 1] = p;
            }
        memcpy(lv[k + 1], x->next, (size_t)x->n_next * sizeof *x->next);
        memcpy(pv[k + 1], x->next_pv, (size_t)x->n_next * sizeof *x->next_pv);
        nlv[k + 1] = x->n_next;
        for (int j = 0; j <= k; j++)
            if (nlv[j] == nlv[k + 1] && !memcmp(lv[j], lv[k + 1], (size_t)nlv[j] * sizeof *lv[j])) {
                x->cyc = j;
                *n = -1;
                return 1;
            }
    }
}

/* The run from c0 (see above): sets *n (-1: no end) and *capped (levels stopped at CR_LEVELS: the
 * tokens of C of more characters are walked). False where q is no such state. */
static bool cr_levels(crun *x, int32_t c0, int32_t *n, bool *capped)
{
    cdx_matcher *m = x->m;
    if (!cfg_moves(m, c0, 128))
        return false;
    for (int g = 0; g < GRP_N; g++)
        x->in[g] = cr_ascii(g);
    for (unsigned b = 0; b < 128; b++)
        if (!cr_plain(m->c_tr[(size_t)c0 * 256 + b]))
            x->in[grp_of(b)] = false;
    /* the non-ASCII characters: all in C but a few, or none but a few; the fewer exceptions */
    x->n_memo = x->n_exc = 0;
    const bool alive_ok = cr_high_at(x, c0, true) >= 0;
    const uint64_t alive_span = cr_exc_span(x);
    x->hi_in = alive_ok && !alive_span;
    if (!x->hi_in) {
        x->n_memo = x->n_exc = 0;
        const bool dead_ok = cr_high_at(x, c0, false) >= 0;
        if (!alive_ok && !dead_ok)
            return false;
        x->hi_in = alive_ok && (!dead_ok || alive_span <= cr_exc_span(x));
    }
    /* A class of a few punctuation bytes, digits or blanks holds few tokens, and the trie walk
     * was short: no run. But letters, non-ASCII characters, or a class of punctuation that no
     * dense byte may begin (the tokens of its streams are all there is to walk) */
    bool dense0 = false;
    for (unsigned b = 0; b < 128; b++)
        dense0 |= grp_of(b) < G_HIGH && m->c_tr[(size_t)c0 * 256 + b] != DFA_DEAD;
    if (!x->hi_in && !x->in[G_LAF] && !x->in[G_LGZ] && !x->in[G_UAF] && !x->in[G_UGZ] && dense0)
        return false;
    for (int round = 0; round <= GRP_N; round++) {
        const int r = cr_pass(x, c0, n, capped);
        if (r != 2)
            return r == 1;
    }
    return false;
}

/* bits |= the tokens of an exception; clear: those are cleared from bits instead. */
static void cr_exc_tokens(const cdx_grammar_vocab *v, const cr_exc *e, uint32_t *bits, bool clear)
{
    int32_t lo = 0, hi = v->n_cp; /* the first character >= e->lo */
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (v->cp[mid] < e->lo)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int32_t i = lo; i < v->n_cp && v->cp[i] <= e->hi; i++)
        for (int32_t j = v->cp_tok0[i]; j < v->cp_tok0[i + 1]; j++) {
            const int32_t id = v->cp_ids[j];
            if (clear)
                bits[id / 32] &= ~(1u << (id % 32));
            else
                bits[id / 32] |= 1u << (id % 32);
        }
}

/* The configuration after j characters of C when every level has one: DFA_DEAD (the run ended
 * before), or DFA_UNSET (not known: levels of several configurations, or past CR_LEVELS). */
static int32_t cr_level_cfg(const crun *x, int32_t n, int32_t j)
{
    if (n >= 0 && j > n)
        return x->n_lv > n ? DFA_DEAD : DFA_UNSET; /* (capped: n_lv == n) */
    if (j >= x->n_lv) {
        if (n >= 0)
            return DFA_UNSET;
        j = x->n_lv - x->cyc == 1 ? x->cyc : x->cyc + (j - x->cyc) % (x->n_lv - x->cyc);
    }
    return x->one[j] >= 0 ? x->one[j] : DFA_UNSET;
}

/* The last walk from a run's first configuration: the next one shares its moves over the bytes both
 * begin with (the streams are in the trie's order: neighbours share beginnings, as in a walk of the
 * trie). */
typedef struct {
    const uint8_t *b;
    int len;
    int n_ok;            /* bytes read alive: cfg[i] the configuration after byte i */
    int stop;            /* the byte where it died or the rule ended with nothing left (none), or -1 */
    bool none;
    int32_t cfg[MAX_TOKEN_BYTES];
} cr_share;

/* Walks token id (bytes tb[0..d)) from configuration c at byte i0 as walk() would its trie path:
 * accepted, it goes to m->tl; the nodes where the rule may end inside it go to chk, once each
 * (m->mark). sh: the walk before from the same first configuration at byte 0, or NULL. */
static bool cr_walk_token(cdx_matcher *m, int32_t c, int i0, int32_t id, const uint8_t *tb, int d, int32_t **chk,
                          size_t *n_chk, size_t *cap_chk, cr_share *sh)
{
    const gr_trie *t = &m->v->tr;
    int i = i0;
    if (sh) {
        int l = 0;
        while (l < d && l < sh->len && tb[l] == sh->b[l])
            l++;
        if (sh->stop >= 0 && l > sh->stop) /* it ends where the last one did */
            return !(sh->none && d == sh->stop + 1) || tl_push(&m->tl, &m->n_tl, &m->cap_tl, id);
        if (l >= d) /* a beginning of the last one, alive */
            return tl_push(&m->tl, &m->n_tl, &m->cap_tl, id);
        i = l;
        c = l ? sh->cfg[l - 1] : c;
        sh->b = tb;
        sh->len = d;
        sh->stop = -1;
        sh->none = false;
        sh->n_ok = d;
    }
    for (; i < d; i++) {
        int32_t r = m->c_tr[(size_t)c * 256 + tb[i]];
        if (r == DFA_UNSET)
            r = dfa_move(m, c, tb[i]);
        if (m->oom)
            return false;
        if (r == DFA_DEAD) {
            if (sh)
                sh->stop = sh->n_ok = i;
            return true;
        }
        if (i == d - 1 && !tl_push(&m->tl, &m->n_tl, &m->cap_tl, id))
            return false;
        if (r & DFA_POPPED) { /* the node of tb[0..i] */
            int32_t u = m->v->node_of[id];
            for (int j = d - 1; j > i; j--)
                u = t->parent[u];
            if (t->end[u] > u + 1 && !(m->mark[u / 32] >> (u % 32) & 1)) {
                m->mark[u / 32] |= 1u << (u % 32);
                if (!tl_push(chk, n_chk, cap_chk, u))
                    return false;
            }
        }
        if ((r & DFA_NONE) == DFA_NONE) {
            if (sh) {
                sh->stop = sh->n_ok = i;
                sh->none = true;
            }
            return true;
        }
        c = r & DFA_NONE;
        if (sh)
            sh->cfg[i] = c;
    }
    return true;
}

/* From a configuration z that a sparse byte leads to, a run of its own over dense ASCII groups (cz,
 * as sp_entry's post): the groups whose bytes all lead z to one plain configuration, the one most
 * lead to; then one configuration a level, every group of cz to the next, until all die (n) or a
 * level repeats (cyc). ok false: not so (then the tokens are walked). */
#define CR_ZRUNS 8
typedef struct {
    int32_t z, n;
    int32_t lv[CR_LEVELS];
    int n_lv, cyc;
    uint8_t cz;
    bool ok;
} cr_zrun;

static void cr_zrun_make(crun *x, int32_t z, cr_zrun *zr)
{
    cdx_matcher *m = x->m;
    zr->z = z;
    zr->ok = false;
    zr->cz = 0;
    if (!cfg_moves(m, z, 128))
        return;
    int32_t tg[G_HIGH]; /* per dense ASCII group: its bytes' one plain target, or -1 */
    for (int g = 0; g < G_HIGH; g++)
        tg[g] = DFA_UNSET;
    for (unsigned b = 0; b < 128; b++) {
        const int g = grp_of(b);
        const int32_t r = m->c_tr[(size_t)z * 256 + b];
        if (g < G_HIGH)
            tg[g] = !cr_plain(r) || (tg[g] != DFA_UNSET && tg[g] != r) ? -1 : r;
    }
    int best = -1, votes = 0;
    for (int g = 0; g < G_HIGH; g++) {
        int n_same = 0;
        for (int h = 0; h < G_HIGH && tg[g] >= 0; h++)
            n_same += tg[h] == tg[g];
        if (n_same > votes)
            votes = n_same, best = g;
    }
    for (int g = 0; best >= 0 && g < G_HIGH; g++)
        if (tg[g] == tg[best])
            zr->cz |= (uint8_t)(1u << g);
    if (!zr->cz)
        return;
    int32_t cur = z;
    for (int k = 0; k < CR_LEVELS; k++) {
        zr->lv[k] = cur;
        zr->n_lv = k + 1;
        if (!cfg_moves(m, cur, 128))
            return;
        int32_t to = -1;
        bool dead = false;
        for (unsigned b = 0; b < 128; b++) {
            const int g = grp_of(b);
            if (g >= G_HIGH || !(zr->cz >> g & 1))
                continue;
            const int32_t r = m->c_tr[(size_t)cur * 256 + b];
            if (r == DFA_DEAD)
                dead = true;
            else if (!cr_plain(r) || (to >= 0 && r != to))
                return;
            else
                to = r;
        }
        if (to >= 0 && dead)
            return;
        if (to < 0) {
            zr->n = k;
            zr->ok = true;
            return;
        }
        for (int j = 0; j <= k; j++)
            if (zr->lv[j] == to) {
                zr->cyc = j;
                zr->n = -1;
                zr->ok = true;
                return;
            }
        cur = to;
    }
}

/* The configuration after the characters of part mask post, count j, from z (its run made on first
 * use among zr[0..*n_zr)): DFA_DEAD, or DFA_UNSET when not known. */
static int32_t cr_zrun_cfg(crun *x, cr_zrun *zr, int *n_zr, int32_t z, uint8_t post, int32_t j)
{
    int i = 0;
    while (i < *n_zr && zr[i].z != z)
        i++;
    if (i == *n_zr) {
        if (i == CR_ZRUNS)
            return DFA_UNSET;
        cr_zrun_make(x, z, &zr[i]);
        (*n_zr)++;
    }
    const cr_zrun *r = &zr[i];
    if (!r->ok || (post & ~r->cz))
        return DFA_UNSET;
    if (r->n >= 0)
        return j > r->n ? DFA_DEAD : r->lv[j];
    if (j >= r->n_lv) /* (a loop of one level mostly: no division) */
        j = r->n_lv - r->cyc == 1 ? r->cyc : r->cyc + (j - r->cyc) % (r->n_lv - r->cyc);
    return r->lv[j];
}

/* State q as a class run: *bits = the tokens of C it accepts, m->tl = the others it accepts (walked),
 * chk = the nodes where its rule may end inside a token, as a walk of the whole trie gives them.
 * False (nothing set) where q is no class run or its walks would be many. */
static bool class_run(cdx_matcher *m, int32_t q, uint32_t **bits, int32_t **chk, size_t *n_chk, size_t *cap_chk)
{
    const cdx_grammar_vocab *v = m->v;
    const size_t nw = v->n_words;
    crun *x = calloc(1, sizeof *x);
    if (!x) {
        m->oom = true;
        return false;
    }
    x->m = m;
    const int32_t c0 = dfa_single(m, q);
    int32_t n = -1;
    bool capped = false;
    if (c0 < 0 || !cr_levels(x, c0, &n, &capped)) {
        free(x);
        return false;
    }
    /* f: the pure tokens made of C, of at most n characters; k: the tokens to walk (dense groups;
     * the sparse groups' tokens are walked from their streams) */
    uint8_t has0[32]; /* the first bytes that do not die at once */
    cfg_edges(m, c0, has0);
    /* A class of sparse groups only (a '.' before a domain's label, say), whose first byte is no
     * dense one: a token with a live dense byte either begins with a byte of C, so is in C's
     * streams (walked whole below), or dies at its first byte. Its dense groups need no bit set */
    bool dense_first = x->hi_in;
    for (unsigned b = 0; b < 128; b++)
        dense_first |= grp_of(b) < G_HIGH && (x->in[grp_of(b)] || has0[b / 8] >> (b % 8) & 1);
    /* k only where dense groups live, an exception lives, or the levels stopped short (else the
     * streams are all: a token in two of them is walked twice) */
    bool need_k = capped;
    for (int g = 0; g < G_SPARSE; g++)
        need_k |= x->live[g] && dense_first && g != G_HIGH && g != G_MALF && g != G_OTHER;
    for (int i = 0; i < x->n_exc; i++)
        need_k |= x->exc[i].live || x->hi_in;
    uint32_t *f = malloc(nw * sizeof *f), *k = need_k ? calloc(nw, sizeof *k) : NULL;
    if (!f || (need_k && !k) || (!m->mark && !(m->mark = calloc((size_t)(v->tr.n_nodes + 31) / 32, sizeof *m->mark)))) {
        free(f);
        free(k);
        free(x);
        m->oom = true;
        return false;
    }
    /* With the non-ASCII characters in C, an exception may have been C's at an earlier level (alive
     * there) and die at a later one, or the other way: each is walked. (Without them, an exception is
     * one alive somewhere, and a character dead at every level never becomes one.) */
    bool exc_live = false;
    for (int i = 0; i < x->n_exc; i++) {
        x->exc[i].live |= x->hi_in;
        exc_live |= x->exc[i].live;
    }
    /* The sparse groups of pure text: f clears the tokens of those off C (a), or keeps the tokens
     * with none and adds those whose one sparse group is C's (b), then walks the tokens of C's
     * groups that hold another sparse byte. Whichever reads fewer entries. */
    int walk_s[N_STREAM] = { 0 }; /* per stream: 2 walk its tokens, 1 those without ST_ONLY */
    int64_t cost_a = 0, cost_b = 0;
    for (int g = G_SPARSE; g < GRP_N; g++) {
        const int st = stream_of(g);
        if (!grp_pure(g))
            continue;
        const int64_t n_e = v->fbe[st][256] - v->fbe[st][0];
        if (!x->in[g])
            cost_a += n_e;
        else /* and a walk (~4 reads) of each token that holds another sparse byte */
            cost_b += n_e + 4 * (int64_t)v->fbm[st][256];
    }
    const bool sub = cost_a <= cost_b;
    const uint32_t *other = v->grp + (size_t)G_OTHER * nw, *base = x->hi_in ? v->pure_all : v->pure_ascii;
    for (size_t w = 0; w < nw; w++)
        f[w] = sub ? base[w] : base[w] & ~other[w];
    for (int g = G_SPARSE; g < GRP_N; g++) {
        const int st = stream_of(g);
        if (grp_pure(g) && x->in[g] != sub)
            for (uint32_t i = v->fbe[st][0]; i < v->fbe[st][256]; i++) {
                const uint32_t id = v->spid[i] & ~ST_ONLY;
                if (sub)
                    f[id / 32] &= ~(1u << (id % 32));
                else if (v->spid[i] & ST_ONLY && base[id / 32] >> (id % 32) & 1)
                    f[id / 32] |= 1u << (id % 32);
            }
        /* walked: groups off C that live, groups of C that pure text lacks; a token of C's group
         * left out of f for a dense group, a character or its length is the walk of that one's, or
         * refused */
        walk_s[st] = x->live[g] || (x->in[g] && (!grp_pure(g) || !dense_first)) ? 2 : x->in[g] && !sub;
    }
    for (int g = 0; g < G_SPARSE; g++) {
        const uint32_t *t = v->grp + (size_t)g * nw;
        if (g == G_OTHER)
            continue;
        /* (without the non-ASCII characters, base has no such token) */
        if ((g != G_HIGH && !x->in[g]) || (g == G_HIGH && !x->hi_in) || g == G_MALF)
            for (size_t w = 0; w < nw && (x->hi_in || (g != G_HIGH && g != G_MALF)); w++)
                f[w] &= ~t[w];
        if (g == G_MALF) /* a token ending inside a character that may go on */
            walk_s[stream_of(g)] = x->hi_in || x->live[G_HIGH] || exc_live ? 2 : 0;
        else if (x->live[g] && dense_first && g != G_HIGH) /* (G_HIGH lives by its tokens ending inside characters) */
            for (size_t w = 0; w < nw; w++)
                k[w] |= t[w];
    }
    for (int i = 0; i < x->n_exc; i++) {
        cr_exc_tokens(v, &x->exc[i], f, true);
        if (x->exc[i].live)
            cr_exc_tokens(v, &x->exc[i], k, false);
    }
    if (n >= 0 && n < v->max_e) { /* at most n characters (n <= CR_LEVELS < PURE_ECAP: one row) */
        const uint32_t *row = v->pure_upto + (size_t)n * nw;
        for (size_t w = 0; w < nw; w++) {
            if (capped)
                k[w] |= f[w] & ~row[w];
            f[w] &= row[w];
        }
    }
    int64_t n_k = 0; /* tokens to walk, about: a stream's whose first byte lives */
    for (size_t w = 0; k && w < nw; w++) {
        k[w] &= ~f[w];
        n_k += popcount32(k[w]);
    }
    for (int st = 0; st < N_STREAM; st++)
        for (int b = 0; walk_s[st] && b < 256; b++)
            if (has0[b / 8] >> (b % 8) & 1)
                n_k += walk_s[st] == 2 ? v->fbe[st][b + 1] - v->fbe[st][b] : v->fbm[st][b + 1] - v->fbm[st][b];
    if (n_k > v->n_usable / 8) { /* a walk of the trie is cheaper */
        free(f);
        free(k);
        free(x);
        return false;
    }
    /* the dense groups (as sp_entry's pre) of C, and those that live off it or cannot be told apart */
    uint8_t cdm = 0, ldm = 0x80;
    for (int g = 0; g < G_HIGH; g++) {
        cdm |= (uint8_t)(x->in[g] << g);
        ldm |= (uint8_t)(!x->in[g] && x->live[g]) << g;
    }
    if (x->hi_in && !x->n_exc)
        cdm |= 0x40;
    else if (x->hi_in || x->live[G_HIGH] || exc_live)
        ldm |= 0x40;
    /* the walks; k becomes "walked": a token of several streams is walked once. A token whose first
     * byte dies is refused without one (its stream's entries of that byte are skipped whole) */
    const size_t chk0 = *n_chk;
    cr_share *sh = malloc(sizeof *sh);
    cr_zrun zr[CR_ZRUNS];
    int n_zr = 0;
    if (!sh)
        goto oom;
    sh->len = 0;
    sh->stop = -1;
    sh->n_ok = 0;
    sh->none = false;
    m->n_tl = 0;
    for (size_t w = 0; k && w < nw; w++)
        for (uint32_t bb = k[w]; bb; bb &= bb - 1) {
            const int32_t id = (int32_t)(w * 32 + (size_t)__builtin_ctz(bb));
            const uint8_t *tb = v->tb + v->tb0[id];
            if (has0[tb[0] / 8] >> (tb[0] % 8) & 1 &&
                !cr_walk_token(m, c0, 0, id, tb, (int)(v->tb0[id + 1] - v->tb0[id]), chk, n_chk, cap_chk, NULL))
                goto oom;
        }
    for (int st = 0; st < N_STREAM; st++)
        for (int b = 0; walk_s[st] && b < 256; b++) {
            if (!(has0[b / 8] >> (b % 8) & 1))
                continue;
            const uint8_t *tb = v->spb + v->fbb[st][b];
            for (uint32_t i = v->fbe[st][b]; i < v->fbe[st][b + 1]; tb += v->sp[i++].len) {
                const sp_entry *se = &v->sp[i];
                const uint32_t id = se->id & ~ST_ONLY;
                if ((walk_s[st] == 1 && se->id & ST_ONLY) || (k && k[id / 32] >> (id % 32) & 1) || f[id / 32] >> (id % 32) & 1)
                    continue;
                if (k)
                    k[id / 32] |= 1u << (id % 32);
                /* a beginning made of C's characters leads to a level's configuration: the walk
                 * starts at the first sparse byte; one holding a dense group off C that lives is
                 * walked whole, one whose groups off C all die is refused. When the rest is made of
                 * C's characters too and the sparse byte leads to a plain configuration, the rest
                 * is that configuration's run over C (cr_zrun) */
                int32_t c = c0, i0 = 0;
                const uint8_t pm = se->pre & ~cdm;
                if (pm & ldm)
                    ;
                else if (pm || (c = cr_level_cfg(x, n, se->pre_chars)) == DFA_DEAD)
                    continue;
                else if (c == DFA_UNSET)
                    c = c0;
                else {
                    i0 = se->at;
                    if (!(se->post & 0xC0)) {
                        int32_t r = m->c_tr[(size_t)c * 256 + tb[i0]];
                        if (r == DFA_UNSET)
                            r = dfa_move(m, c, tb[i0]);
                        if (m->oom)
                            goto oom;
                        if (r == DFA_DEAD)
                            continue;
                        const int32_t z = cr_plain(r) ? cr_zrun_cfg(x, zr, &n_zr, r, se->post, se->post_chars) : DFA_UNSET;
                        if (m->oom)
                            goto oom;
                        if (z == DFA_DEAD)
                            continue;
                        if (z != DFA_UNSET) {
                            if (!tl_push(&m->tl, &m->n_tl, &m->cap_tl, (int32_t)id))
                                goto oom;
                            continue;
                        }
                    }
                }
                if (!cr_walk_token(m, c, i0, (int32_t)id, tb, se->len, chk, n_chk, cap_chk, i0 ? NULL : sh))
                    goto oom;
            }
        }
    for (size_t i = chk0; i < *n_chk; i++) /* the marks, cleared for the next run */
        m->mark[(*chk)[i] / 32] = 0;
    free(sh);
    free(k);
    free(x);
    *bits = f;
    return true;
oom:
    m->oom = true;
    free(sh);
    free(f);
    free(k);
    free(x);
    return false;
}

static pstate *precompute_locked(cdx_matcher *m, int32_t q)
{
    pstate *ps = &m->pc[q];
    if (ps->ready)
        return ps;
    const cdx_grammar_vocab *v = m->v;
    const size_t nw = v->n_words;
    m->n_tl = 0;
    size_t n_chk = 0, cap_chk = 0;
    int32_t *chk = NULL;
    uint32_t *bits = NULL;
    int32_t n = v->pure_on ? chain_levels(m, q) : CH_NO, first = -1;
    uint8_t excl[32];
    if (n == CH_NO && v->pure_on && (first = chain_head_step(m->g, q, excl)) >= 0) {
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
                const int32_t c0 = dfa_single(m, q);
                if (c0 >= 0)
                    walk(m, t, u, t->end[u], 0, c0, &chk, &n_chk, &cap_chk);
            }
        }
    } else {
        /* A state whose walk is short is walked (most are); the rest try a class run first, then
         * the walk goes on where it stopped (its configurations stay in m->cs) */
        const int32_t c0 = dfa_single(m, q);
        m->budget = v->pure_on ? CR_WALK_FIRST : 0;
        m->stop = -1;
        if (c0 >= 0)
            walk(m, &v->tr, 1, v->tr.n_nodes, 0, c0, &chk, &n_chk, &cap_chk);
        m->budget = 0;
        if (c0 >= 0 && m->stop >= 0 && !m->oom) {
            const size_t n_tl = m->n_tl, n_chk0 = n_chk;
            n_chk = 0;
            if ((ps->run = class_run(m, q, &bits, &chk, &n_chk, &cap_chk)))
                ;
            else if (!m->oom) {
                m->n_tl = n_tl;
                n_chk = n_chk0;
                walk(m, &v->tr, m->stop, v->tr.n_nodes, 0, c0, &chk, &n_chk, &cap_chk);
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

int32_t gr_class_run_states(const cdx_grammar *g, const cdx_grammar_vocab *v)
{
    int32_t n = 0;
    cdx_grammar *gm = (cdx_grammar *)g; /* the caches, under g->mu */
    pthread_mutex_lock(&gm->mu);
    for (const struct gr_cache *c = g->caches; c; c = c->next)
        if (c->fingerprint == v->fingerprint && c->n_vocab == v->n_vocab && c->pure == v->pure_on)
            for (int32_t i = 0; i < g->n_st; i++)
                n += c->pc[i].ready && c->pc[i].run;
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
    const int32_t c0 = n ? dfa_intern(m, m->wb, n) : -1;
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
    int64_t count = 0;
    for (size_t w = 0; w < nw; w++) {
        bits[w] &= v->usable[w];
        if (m->done)
            bits[w] |= v->eog[w];
        count += popcount32(bits[w]);
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
    const int d = v->tr.depth[x];
    for (int k = d - 1; k >= 0; k--, x = v->tr.parent[x])
        buf[k] = v->tr.byte[x];
    return cdx_matcher_accept_bytes(m, buf, (size_t)d, err);
}
