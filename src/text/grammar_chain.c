/* Chains of pure text, the automaton's side (docs/grammar.md, "Pure text"): which states read every
 * pure character (k_pure) into one next state byte by byte (a chain), may end one (its last state),
 * or are a chain's head with a few exceptions. grammar_match.c keeps the chains' lengths per grammar
 * and makes their masks; this file only reads the automaton. */
#include "text/grammar_match_int.h"

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
int32_t gr_chain_step(const cdx_grammar *g, int32_t s)
{
    pure_pair todo[32] = { { PURE_A, s } };
    int32_t next = -1;
    return paths_land(g, todo, 1, &next) ? next : -1;
}

/* A chain may end at s when s reads bytes only and no pure character at all. */
bool gr_chain_end_ok(const cdx_grammar *g, int32_t s)
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
int32_t gr_byte_target(const cdx_grammar *g, const gr_state *st, unsigned b)
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
 * pure character (the multi-byte ones too) leads there as gr_chain_step asks, and the one-byte ones
 * that do not (an object key that must not begin a known key's name, say) are at most 16: those
 * bytes are set in excl (they are walked as any state is). -1: no such state. */
int32_t gr_chain_head_step(const cdx_grammar *g, int32_t q, uint8_t excl[32])
{
    const gr_state *st = &g->st[q];
    if (!chain_state_ok(st))
        return -1;
    int32_t cand[8], votes[8];
    int n_cand = 0;
    for (int k = 0; k < N_PURE_TR; k++) /* the most common target of the one-byte characters */
        if (k_pure[k].from == PURE_A && k_pure[k].to == PURE_A)
            for (unsigned b = k_pure[k].lo; b <= k_pure[k].hi; b++) {
                const int32_t t = gr_byte_target(g, st, b);
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
                if (gr_byte_target(g, st, b) != y) {
                    if (++n_excl > 16)
                        return -1;
                    excl[b / 8] |= (uint8_t)(1u << (b % 8));
                }
    /* the multi-byte characters: each lead byte's path, byte by byte, to y (as gr_chain_step) */
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
