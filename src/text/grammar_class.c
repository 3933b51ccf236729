/* Class runs (docs/grammar.md, "Class runs"): the vocabulary's tokens sorted by byte group
 * (gr_class_build, once per vocabulary), and the first visit of a state that reads a character class
 * in a loop (gr_class_run): the tokens made of the class come from those tables, and only the tokens
 * holding a byte that leads elsewhere are walked, one at a time. grammar_match.c calls both; this
 * file reads the matcher's walks (configurations as DFA states) through grammar_match_int.h. */
#include "text/grammar_match_int.h"

/* ---- byte groups of the vocabulary ---- */

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

/* The byte of a group of one printable byte (G_PUNCT ...). */
static unsigned punct_byte(int g)
{
    const int i = g - G_PUNCT;
    return (unsigned)(i < 15 ? 0x21 + i : i < 22 ? 0x3A + i - 15 : i < 28 ? 0x5B + i - 22 : 0x7B + i - 28);
}

/* A word of group g's stream: g's byte, then dense ASCII bytes only (at least one), g in pure text. */
static bool sp_word(const tok_entry *e, int g)
{
    if (g < G_PUNCT || !grp_pure(g) || e->len < 2 || e->b[0] != punct_byte(g))
        return false;
    for (uint32_t k = 1; k < e->len; k++)
        if (grp_of(e->b[k]) >= G_HIGH)
            return false;
    return true;
}

#define CR_WORDS 1024 /* words that give a stream a bit set of them (n_vocab / 8 bytes: 4 streams of Qwen3's) */

/* The stream of group g (sparse), or G_MALF's. */
static int stream_of(int g) { return g == G_MALF ? N_STREAM - 1 : g - G_SPARSE; }

/* Sorts the usable tokens by byte group and indexes them by non-ASCII character (see grp_of). */
int gr_class_build(cdx_grammar_vocab *v, const tok_entry *e, size_t n, cdx_err *err)
{
    int8_t dfa[PURE_N][256];
    pure_dfa(dfa);
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
                    if (sp_word(&e[i], g)) {
                        v->fbw[st]++;
                        v->fbwb[st] += e[i].len;
                    }
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
    uint32_t pw[N_STREAM]; /* the words first */
    size_t pwb[N_STREAM];
    for (int g = G_PUNCT; g < GRP_N; g++) {
        const int st = stream_of(g);
        const unsigned b = punct_byte(g);
        pw[st] = pe[st][b];
        pwb[st] = pb[st][b];
        pe[st][b] += v->fbw[st];
        pb[st][b] += v->fbwb[st];
    }
    for (size_t i = 0; i < n; i++)
        for (int g = 0; g < GRP_N; g++)
            if (gm[i] >> g & 1 && (g >= G_SPARSE || g == G_MALF)) {
                const int st = stream_of(g), b0 = e[i].b[0];
                const bool wd = sp_word(&e[i], g);
                const uint32_t at = wd ? pw[st]++ : pe[st][b0]++;
                size_t *bo = wd ? &pwb[st] : &pb[st][b0];
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
                memcpy(v->spb + *bo, e[i].b, e[i].len);
                *bo += e[i].len;
            }
    free(pe);
    free(pb);
    for (int g = G_PUNCT; g < GRP_N; g++) {
        const int st = stream_of(g);
        if (v->fbw[st] < CR_WORDS)
            continue;
        if (!(v->wbit[st] = calloc(v->n_words, sizeof *v->wbit[st]))) {
            free(gm);
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        }
        for (uint32_t i = v->fbe[st][punct_byte(g)], j = 0; j < v->fbw[st]; i++, j++) {
            const uint32_t id = v->spid[i] & ~ST_ONLY;
            v->wbit[st][id / 32] |= 1u << (id % 32);
        }
    }
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

void gr_class_free(cdx_grammar_vocab *v)
{
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
    for (int st = 0; st < N_STREAM; st++)
        free(v->wbit[st]);
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
            r = gr_dfa_step(m, c, (uint8_t)b);
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
                    const int32_t c1 = gr_dfa_intern(m, u.it, (size_t)u.n);
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
                    r = gr_dfa_intern(m, u.it, (size_t)u.n);
                } else {
                    cr_set u = *p;
                    const int32_t c1 = gr_dfa_intern(m, u.it, (size_t)u.n);
                    r = c1 < 0 ? -1 : gr_dfa_move(m, c1, (uint8_t)a);
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
        int32_t r = gr_dfa_step(m, c, tb[i]);
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

/* (grammar_match_int.h) */
bool gr_walk_token(cdx_matcher *m, int32_t c, int i0, int32_t id, const uint8_t *tb, int d, int32_t **chk,
                   size_t *n_chk, size_t *cap_chk)
{
    return cr_walk_token(m, c, i0, id, tb, d, chk, n_chk, cap_chk, NULL);
}

/* ASCII letters that do not die from configuration c (its moves made here); -1 out of memory. */
static int cr_letters(cdx_matcher *m, int32_t c)
{
    if (!cfg_moves(m, c, 128))
        return -1;
    int n = 0;
    for (unsigned b = 'A'; b <= 'z'; b++)
        n += ((b | 32) >= 'a' && (b | 32) <= 'z') && m->c_tr[(size_t)c * 256 + b] != DFA_DEAD;
    return n;
}

/* (grammar_match_int.h) */
bool gr_class_likely(cdx_matcher *m, int32_t c0)
{
    const int n = cr_letters(m, c0);
    if (n < 0 || n >= 26)
        return n >= 26;
    int32_t alive[3];
    int n_alive = 0;
    for (unsigned b = 0; b < 128 && n_alive < 3; b++) {
        const int32_t r = m->c_tr[(size_t)c0 * 256 + b];
        if (r != DFA_DEAD)
            alive[n_alive++] = r;
    }
    for (int i = 0; i < n_alive && n_alive < 3; i++)
        if (cr_plain(alive[i]) && cr_letters(m, alive[i]) >= 26)
            return true;
    return false;
}

/* (grammar_match_int.h) */
bool gr_class_run(cdx_matcher *m, int32_t q, uint32_t **bits, int32_t **chk, size_t *n_chk, size_t *cap_chk)
{
    const cdx_grammar_vocab *v = m->v;
    const size_t nw = v->n_words;
    crun *x = calloc(1, sizeof *x);
    if (!x) {
        m->oom = true;
        return false;
    }
    x->m = m;
    const int32_t c0 = gr_dfa_single(m, q);
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
    /* A class of sparse groups alone (a '.' before a domain's label): f is its streams' tokens made
     * of their own byte only ("." "...": nothing before it, nothing but sparse bytes after), the way
     * (b) finds them */
    bool sparse_only = !x->hi_in;
    for (int g = 0; g < G_HIGH; g++)
        sparse_only &= !x->in[g];
    const bool sub = !sparse_only && cost_a <= cost_b;
    const uint32_t *other = v->grp + (size_t)G_OTHER * nw, *base = x->hi_in ? v->pure_all : v->pure_ascii;
    if (sparse_only)
        memset(f, 0, nw * sizeof *f);
    else if (sub) /* (each a loop of its own: a test inside keeps the compiler from vectorizing it) */
        memcpy(f, base, nw * sizeof *f);
    else
        for (size_t w = 0; w < nw; w++)
            f[w] = base[w] & ~other[w];
    for (int g = G_SPARSE; g < GRP_N; g++) {
        const int st = stream_of(g);
        if (grp_pure(g) && x->in[g] != sub) {
            /* a stream's words (wbit) in one pass (they hold one sparse byte, and are pure ASCII);
             * its other entries one by one */
            uint32_t w0 = v->fbe[st][256], w1 = w0;
            if (v->wbit[st]) {
                w0 = v->fbe[st][punct_byte(g)];
                w1 = w0 + v->fbw[st];
                if (sub)
                    for (size_t w = 0; w < nw; w++)
                        f[w] &= ~v->wbit[st][w];
                else if (!sparse_only) /* (a word holds a dense byte: never one of its own byte only) */
                    for (size_t w = 0; w < nw; w++)
                        f[w] |= v->wbit[st][w] & base[w];
            }
            for (uint32_t i = v->fbe[st][0]; i < v->fbe[st][256]; i++) {
                if (i == w0) {
                    i = w1 - 1;
                    continue;
                }
                const uint32_t id = v->spid[i] & ~ST_ONLY;
                if (sub)
                    f[id / 32] &= ~(1u << (id % 32));
                else if (v->spid[i] & ST_ONLY && base[id / 32] >> (id % 32) & 1 &&
                         (!sparse_only || (!v->sp[i].pre && !(v->sp[i].post & 0x7F))))
                    f[id / 32] |= 1u << (id % 32);
            }
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
        if (((g != G_HIGH && !x->in[g]) || (g == G_HIGH && !x->hi_in) || g == G_MALF) &&
            (x->hi_in || (g != G_HIGH && g != G_MALF)) && !sparse_only)
            for (size_t w = 0; w < nw; w++)
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
    int64_t n_k = k ? gr_and_not_count(k, f, nw) : 0; /* tokens to walk, about: a stream's whose first byte lives */
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
    /* The words of a stream of one byte b (wbit) from c0, where b leads to a configuration z that
     * has a run over dense groups (cr_zrun), as the entries below would find them one by one: the
     * words made of the run's groups, of at most its count of characters, are accepted by bit-set
     * passes; those holding another dense group are walked; the rest are refused. Their entries are
     * skipped below (a word is in no other stream; a run's groups never end its rule, so no check
     * node is missed). Else (b dies, ends the rule, or z has no run) the entries tell. */
    bool wdone[N_STREAM] = { false };
    for (int g = G_PUNCT; g < GRP_N; g++) {
        const int st = stream_of(g);
        const unsigned b = punct_byte(g);
        if (!v->wbit[st] || walk_s[st] != 2 || !(has0[b / 8] >> (b % 8) & 1))
            continue;
        int32_t r = gr_dfa_step(m, c0, (uint8_t)b);
        if (m->oom)
            goto oom;
        if (!cr_plain(r) || cr_zrun_cfg(x, zr, &n_zr, r, 0, 0) == DFA_UNSET)
            continue;
        if (m->oom)
            goto oom;
        int iz = 0;
        while (zr[iz].z != r)
            iz++;
        const uint32_t *off[G_HIGH], *row = zr[iz].n >= 0 ? v->pure_upto + (size_t)(zr[iz].n + 1) * nw : NULL;
        int n_off = 0;
        for (int h = 0; h < G_HIGH; h++)
            if (!(zr[iz].cz >> h & 1))
                off[n_off++] = v->grp + (size_t)h * nw;
        const uint32_t *wb = v->wbit[st];
        for (size_t w = 0; w < nw; w++) {
            const uint32_t t = wb[w] & ~f[w] & (k ? ~k[w] : ~0u);
            if (!t)
                continue;
            uint32_t o = 0;
            for (int i = 0; i < n_off; i++)
                o |= off[i][w];
            f[w] |= t & ~o & (row ? row[w] : ~0u);
            for (uint32_t bb = t & o; bb; bb &= bb - 1) {
                const int32_t id = (int32_t)(w * 32 + (size_t)__builtin_ctz(bb));
                if (!cr_walk_token(m, c0, 0, id, v->tb + v->tb0[id], (int)(v->tb0[id + 1] - v->tb0[id]), chk, n_chk,
                                   cap_chk, NULL))
                    goto oom;
            }
        }
        wdone[st] = true;
    }
    for (int st = 0; st < N_STREAM; st++)
        for (int b = 0; walk_s[st] && b < 256; b++) {
            if (!(has0[b / 8] >> (b % 8) & 1))
                continue;
            const uint8_t *tb = v->spb + v->fbb[st][b];
            uint32_t i = v->fbe[st][b];
            if (wdone[st] && b == (int)punct_byte(st + G_SPARSE)) { /* the words, done above */
                tb += v->fbwb[st];
                i += v->fbw[st];
            }
            for (; i < v->fbe[st][b + 1]; tb += v->sp[i++].len) {
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
                        int32_t r = gr_dfa_step(m, c, tb[i0]);
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

