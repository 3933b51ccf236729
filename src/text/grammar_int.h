/* The grammar engine's model, shared by its files (text layer, internal):
 *   grammar_gbnf.c    GBNF text -> rules -> a byte-level pushdown automaton (this model)
 *   grammar_schema.c  JSON Schema -> GBNF text
 *   grammar_match.c   the token trie of a vocabulary and the incremental matcher over the model
 *   grammar_class.c   class runs: the first visit of a state that reads a character class
 *                     (the matcher's internals it shares: grammar_match_int.h)
 *
 * The automaton. Every rule of the grammar is a small automaton over BYTES (character classes are
 * expanded into their UTF-8 byte sequences at compile time, so a token that ends in the middle of
 * a code point simply leaves the matcher in the middle of a rule). A state has byte-range edges,
 * call edges (enter rule `rule`, and when it ends continue at state `ret`) and a final flag (the
 * rule may end here). Epsilon moves were removed at compile time: a state's edges are those of its
 * whole epsilon closure inside the rule. A parse position is a stack of states: the top is where
 * the innermost rule is, the rest are return states (see grammar_match.c). */
#ifndef CDX_GRAMMAR_INT_H
#define CDX_GRAMMAR_INT_H

#include "caldrix/grammar.h"

#include <pthread.h>

typedef struct gr_edge {
    uint8_t lo, hi;    /* byte range, inclusive */
    int32_t to;
} gr_edge;

typedef struct gr_call {
    int32_t rule;
    int32_t ret;       /* state where the caller goes on once the rule ended */
} gr_call;

typedef struct gr_state {
    int32_t e0, ne;    /* edges[e0 .. e0+ne) */
    int32_t c0, nc;    /* calls[c0 .. c0+nc) */
    int32_t rule;      /* the rule it belongs to (messages) */
    bool final;        /* the rule may end here */
} gr_state;

struct cdx_grammar {
    int refs;              /* cdx_grammar_ref / cdx_grammar_free (atomic) */
    gr_state *st;
    int32_t n_st;
    gr_edge *edges;
    int32_t n_edges;
    gr_call *calls;
    int32_t n_calls;
    int32_t *rule_start;   /* [n_rules] */
    char **rule_name;      /* [n_rules] */
    int32_t n_rules;
    int32_t root;          /* rule index of `root` */
    /* Token sets per state, per vocabulary (grammar_match.c), shared by every matcher of the
     * grammar: made on first use under mu; the grammar is otherwise immutable. */
    pthread_mutex_t mu;
    struct gr_cache *caches;
};

/* Frees the caches of g (grammar_match.c). */
void gr_cache_free(cdx_grammar *g);

/* Turns the pure-text shortcut of v's masks on or off (grammar_match.c, "Pure text"): tests compare
 * its masks with the plain trie walk's. On by default. */
void gr_vocab_set_pure(cdx_grammar_vocab *v, bool on);

/* How many states of g have their token sets for v from a class run (grammar_class.c; counted in the
 * caches of grammar_match.c): tests check that the grammars meant for them take them. */
int32_t gr_class_run_states(const cdx_grammar *g, const cdx_grammar_vocab *v);
/* The same for a kind of shortcut: 0 class runs, 1 first bytes into chains (grammar_match.c,
 * chain_bytes: a string's escape) */
int32_t gr_shortcut_states(const cdx_grammar *g, const cdx_grammar_vocab *v, int kind);

/* The vocabulary's memo of states' token sets (grammar_memo.c): its entries and bytes, and how many
 * first visits found their sets there (hits) or not (misses) */
void gr_memo_stats(const cdx_grammar_vocab *v, int64_t *entries, int64_t *bytes, int64_t *hits, int64_t *misses);
/* n >= 0: the memo shows only its first n entries (in the order they were kept) and keeps no more;
 * -1: all, and it keeps new ones again. The bench's reruns of a cold generation see the memo as the
 * first run did. */
void gr_memo_limit(cdx_grammar_vocab *v, int64_t n);

/* Limits of compilation (one table of them, quoted in messages and docs/grammar.md). */
#define GR_MAX_STATES   (1 << 20)  /* automaton states before epsilon removal */
#define GR_MAX_RULES    (1 << 16)
#define GR_MAX_TEXT     (16u << 20) /* bytes of GBNF text (also what a JSON schema may expand to) */
#define GR_MAX_REPEAT   100000     /* m and n of x{m,n} */

#endif
