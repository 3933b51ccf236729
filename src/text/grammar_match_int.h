/* The matcher's internals, shared by its files (text layer, internal; grammar_int.h is the model):
 *   grammar_match.c  the vocabulary's trie and tables, stacks, walks, chains of pure text, the matcher
 *   grammar_chain.c  chains of pure text, the automaton's side: which states are chains or their heads
 *   grammar_memo.c   the vocabulary's memo of states' token sets, shared by grammars
 *   grammar_bits.c   the bit-set passes that count (popcnt where the CPU has it)
 *   grammar_class.c  class runs: the vocabulary's byte-group tables and the first visit of a state
 *                    that reads a character class (docs/grammar.md, "Class runs")
 * Not a public header. */
#ifndef CDX_GRAMMAR_MATCH_INT_H
#define CDX_GRAMMAR_MATCH_INT_H

#include "text/grammar_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the vocabulary ---- */

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

/* dfa[d][b]: k_pure's move from d over byte b, or -1 */
static inline void pure_dfa(int8_t dfa[PURE_N][256])
{
    memset(dfa, -1, (size_t)PURE_N * 256);
    for (int k = 0; k < N_PURE_TR; k++)
        for (unsigned b = k_pure[k].lo; b <= k_pure[k].hi; b++)
            dfa[k_pure[k].from][b] = (int8_t)k_pure[k].to;
}

/* Class runs (grammar_class.c). A state that reads a character class in a loop (`\w+`, an email's characters, a
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
    /* class runs (above; made by grammar_class.c) */
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
    /* A stream of one printable byte b: its words (b, then only dense ASCII bytes: ".com", "_id")
     * come first among its entries of first byte b, fbw[s] of them, fbwb[s] bytes; where they are
     * many (CR_WORDS), also as a bit set wbit[s] (else NULL): a class run takes them by bit-set
     * passes. */
    uint32_t fbw[N_STREAM];
    size_t fbwb[N_STREAM];
    uint32_t *wbit[N_STREAM];
    int32_t n_cp;        /* distinct non-ASCII characters in the well-formed tokens */
    uint32_t *cp;        /* [n_cp] ascending */
    int32_t *cp_tok0;    /* [n_cp + 1] the tokens holding cp[i]: cp_ids[cp_tok0[i] .. cp_tok0[i+1]) */
    int32_t *cp_ids;
    uint32_t *tb0;       /* [n_vocab + 1] token i's bytes are tb[tb0[i] .. tb0[i+1]) (none: not usable) */
    uint8_t *tb;
    /* states' token sets by the automaton they reach (grammar_memo.c), made on first use under memo_mu */
    struct gr_memo *memo;
    pthread_mutex_t memo_mu;
};

typedef struct {
    const uint8_t *b;
    uint32_t len;
    int32_t id;
} tok_entry;


/* ---- the matcher ---- */

typedef struct {
    int32_t st, par;   /* par: a node, or -1 (the bottom) */
} item;

/* A matcher (grammar_match.c, "the matcher"); the class runs use its walks' configurations and scratch. */
struct cdx_matcher {
    const cdx_grammar *g;
    const cdx_grammar_vocab *v;
    struct gnode *nodes;
    size_t n_nodes, cap_nodes;
    int32_t *heads;
    uint32_t hmask;
    item *cur;
    size_t n_cur, cap_cur;
    bool done;
    int64_t n_bytes;
    struct gr_cache *gc; /* the grammar's cache for this vocabulary (shared) */
    struct pstate *pc;   /* gc->pc */
    struct centry *cc;   /* checked tokens per (state, parent), open addressing */
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
    int32_t *mx;         /* [n_st] gr_memo_key's scratch (-1 between keys), one block with mq and mk */
    int32_t *mq;
    uint32_t *mk;
    uint32_t stamp_now;
    bool oom;
};

enum { DFA_UNSET = -2, DFA_DEAD = -1 };
#define DFA_POPPED (1 << 30)     /* the bottom rule may end after the byte */
#define DFA_NONE 0x3FFFFFFF      /* ... and no item is left */

static inline int cmp_item(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->st != y->st)
        return x->st < y->st ? -1 : 1;
    return x->par < y->par ? -1 : x->par > y->par;
}

/* Without -mpopcnt __builtin_popcount is a libgcc call per word: 4,700 calls a mask on 150k tokens */
static inline int popcount32(uint32_t x)
{
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    return (int)((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
}

static inline bool tl_push(int32_t **a, size_t *n, size_t *cap, int32_t v)
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

/* A state inside a chain reads bytes only: no call, no end of its rule, some byte edge. */
static inline bool chain_state_ok(const gr_state *s) { return !s->final && !s->nc && s->ne > 0; }


/* ---- across the two files ---- */

/* grammar_match.c, "walks": configurations as DFA states */
int32_t gr_dfa_intern(cdx_matcher *m, item *it, size_t n); /* the id of it[0..n) (sorted here); -1 out of memory */
int32_t gr_dfa_move(cdx_matcher *m, int32_t c, uint8_t b); /* c's move over byte b (cached in c_tr) */
int32_t gr_dfa_single(cdx_matcher *m, int32_t q);          /* the configuration of the lone item (q, -1) */
/* c's move over byte b: the cached one, else gr_dfa_move (the walks' step; m->oom says if it failed) */
static inline int32_t gr_dfa_step(cdx_matcher *m, int32_t c, uint8_t b)
{
    const int32_t r = m->c_tr[(size_t)c * 256 + b];
    return r == DFA_UNSET ? gr_dfa_move(m, c, b) : r;
}

/* A state's token sets from its first visit (grammar_match.c's per-state cache holds them; the
 * vocabulary's memo keeps copies): the accepted ids (or, when many, bits), the trie nodes where the
 * rule may end inside a token (negated: the tail trie's), a chain head's exceptions. */
typedef struct {
    int32_t n_ids, n_chk;
    int32_t *ids;        /* when bits is NULL */
    uint32_t *bits;      /* [n_words] */
    int32_t *chk;
    uint8_t *excl;       /* [32] or NULL */
    bool run, cb;        /* made by a class run, by chain_bytes (tests count them) */
} gr_state_sets;

/* grammar_memo.c */
/* The key of state q: the automaton it reaches, written out (into the matcher's scratch, valid until
 * the next key); false where it reaches too much (or out of memory) */
bool gr_memo_key(cdx_matcher *m, int32_t q, const uint32_t **key, size_t *n_key);
bool gr_memo_get(cdx_grammar_vocab *v, const uint32_t *key, size_t n_key, gr_state_sets *out); /* a copy, or false */
void gr_memo_put(cdx_grammar_vocab *v, const uint32_t *key, size_t n_key, const gr_state_sets *s); /* copies s */
void gr_memo_free(cdx_grammar_vocab *v);

/* grammar_bits.c */
/* bits: only usable ids, and eog's where eog is not NULL; the count of bits left */
int64_t gr_mask_finish(uint32_t *bits, const uint32_t *usable, const uint32_t *eog, size_t nw);
int64_t gr_and_not_count(uint32_t *k, const uint32_t *f, size_t nw); /* k &= ~f; the count of k's bits */

/* grammar_chain.c */
int32_t gr_chain_step(const cdx_grammar *g, int32_t s);   /* the state after any one pure character, or -1 */
bool gr_chain_end_ok(const cdx_grammar *g, int32_t s);    /* a chain may end at s */
int32_t gr_byte_target(const cdx_grammar *g, const gr_state *st, unsigned b); /* st's one target on b: -1 none, -2 several */
/* A chain head with at most 16 one-byte exceptions (set in excl): the state most pure characters
 * lead q to, or -1 */
int32_t gr_chain_head_step(const cdx_grammar *g, int32_t q, uint8_t excl[32]);

/* grammar_class.c */
#define CR_WALK_FIRST 2000 /* trie nodes a state's walk may visit before a class run is tried */
/* Sorts the usable tokens e[0..n) by byte group (v's class-run tables); gr_class_free frees them. */
int gr_class_build(cdx_grammar_vocab *v, const tok_entry *e, size_t n, cdx_err *err);
void gr_class_free(cdx_grammar_vocab *v);
/* Whether configuration c0 (a state's lone item) reads a class of letters: 26 or more ASCII letters
 * do not die there, or after the one or two bytes that do (an email domain's '.'). On the schema
 * corpus every such state walked more than CR_WALK_FIRST trie nodes, and most of them were class
 * runs: the run is tried first. */
bool gr_class_likely(cdx_matcher *m, int32_t c0);
/* State q as a class run: *bits (taken by the caller) = the tokens of the class it accepts, m->tl =
 * the others it accepts, chk = the nodes where its rule may end inside a token, as a walk of the
 * whole trie gives them. False (nothing set) where q is no class run or its walks would be many. */
bool gr_class_run(cdx_matcher *m, int32_t q, uint32_t **bits, int32_t **chk, size_t *n_chk, size_t *cap_chk);
/* Walks token id (bytes tb[0..d)) from configuration c at byte i0 as a walk of the trie would its
 * path: accepted, it goes to m->tl; the trie nodes where the rule may end inside it go to chk once
 * each (m->mark, which the caller allocates and clears). False out of memory. */
bool gr_walk_token(cdx_matcher *m, int32_t c, int i0, int32_t id, const uint8_t *tb, int d, int32_t **chk,
                   size_t *n_chk, size_t *cap_chk);

#endif
