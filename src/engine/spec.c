/* Speculative decoding: the proposers behind one interface, each request's adaptive draft length,
 * and the rule that turns speculation off while it does not pay (docs/engine.md, "Speculative
 * decoding"). The scheduler scores a request's draft in the round's forward pass after its last
 * token and keeps each guess that its own sampler draws (scheduler.c); nothing here touches the
 * KV pool or the logits, so a proposer can only change how fast a request goes, never its bits. */
#include "engine/engine_impl.h"

#include <stdlib.h>
#include <string.h>

#define LOOKUP_NGRAM_MAX 4
#define LOOKUP_NGRAM_MIN 2
#define SPEC_DECAY 0.9     /* weight of the earlier verifies in a request's acceptance estimate */
#define SPEC_PROBE 32      /* turned off: tokens generated before it tries again (doubling each time) */
#define SPEC_MIN_ACC 0.1   /* below this acceptance per draft token speculation never pays: each
                            * guess costs a logits row (and its log-sum-exp) and the proposer's time */
#define SPEC_PRIOR_WEIGHT 8 /* the engine's earlier requests count as at most this many guesses in a new
                             * request's acceptance estimate */
#define SPEC_ENGINE_DECAY 0.98 /* weight of the earlier verifies in the engine's acceptance estimate */
#define SPEC_WINDOW 16     /* tokens a draft model's probe sees (the latest ones) */
#define SPEC_HORIZON 256   /* tokens ahead a draft model's whole catch-up must pay back within */
#define COST_DECAY 0.95    /* weight of the earlier passes in a cost model */
#define COST_PRIOR (1.0 / 64) /* ms of one more token in a pass / ms of the pass's fixed part, until
                               * passes of different sizes were measured (a decode round reads every
                               * weight once, which a CPU does in the time of ~64 tokens' compute) */

/* ---- prompt lookup ---- */

/* The latest earlier occurrence of the last n tokens (n from LOOKUP_NGRAM_MAX down), and what
 * followed it; a continuation that runs into the text's end goes on with the draft itself, so a
 * repeating loop is proposed whole. */
static int lookup_propose(cdx_engine *e, seq *s, int32_t *draft, int k_max)
{
    const int32_t *t = s->toks;
    const int64_t n = s->n_toks;
    for (int g = LOOKUP_NGRAM_MAX; g >= LOOKUP_NGRAM_MIN; g--) {
        if (n <= g)
            continue;
        const int32_t *tail = t + n - g;
        for (int64_t i = n - g - 1; i >= 0; i--) {
            if (t[i] != tail[0] || memcmp(t + i, tail, (size_t)g * sizeof *t))
                continue;
            int k = 0;
            for (; k < k_max; k++) {
                const int64_t j = i + g + k; /* < n, or a draft token already written */
                draft[k] = j < n ? t[j] : draft[j - n];
            }
            return k;
        }
    }
    return 0;
}

const eng_proposer eng_proposer_lookup = { "lookup", lookup_propose };

/* ---- a draft model ---- */

static void cost_add(eng_cost *c, double n, double ms);

/* One pass of the draft over n tokens, timed into the draft's cost model. */
static int draft_pass(cdx_engine *e, cdx_kv *kv, const int32_t *toks, int64_t n, cdx_err *err)
{
    cdx_kv *const kvs[1] = { kv };
    const cdx_batch b = { .n = n, .tokens = toks };
    const double t0 = cdx_time_ms();
    const int rc = cdx_forward(e->draft_fc, kvs, 1, &b, e->draft_logits, err);
    cost_add(&e->dcost, (double)n, cdx_time_ms() - t0);
    return rc;
}

/* The draft model's greedy continuation (argmax, lowest id on a tie). Its cache keeps the tokens it
 * has seen from the request's position doff on (0: the whole text; more while a probe sees only a
 * window of the latest tokens, which eng_spec_draft chooses through restart_at): each round it is cut
 * back to what it shares with the request's tokens (a guess not kept is dropped there), takes the
 * tokens it lacks in chunks, then drafts one token a pass. A guess outside the target's vocabulary
 * ends the draft. Sampling at any temperature stays exact: a guess is kept only where the target's
 * own sampler draws it (scheduler.c). */
static int draft_propose(cdx_engine *e, seq *s, int32_t *draft, int k_max)
{
    eng_spec_state *sp = &s->sp;
    cdx_err err = { 0 };
    if (!sp->dkv) {
        cdx_kv *kv = calloc(1, sizeof *kv);
        int32_t *dt = malloc((size_t)e->o.n_ctx * sizeof *dt);
        if (!kv || !dt || cdx_kv_init_model(kv, e->draft, e->o.n_ctx, &err)) {
            free(kv);
            free(dt);
            return 0; /* no memory for a draft cache: this round goes without */
        }
        sp->dkv = kv;
        sp->dtoks = dt;
    }
    cdx_kv *kv = sp->dkv;
    if (sp->restart_at >= 0) {
        sp->doff = sp->restart_at;
        kv->n_past = 0;
    }
    const int32_t *t = s->toks + sp->doff;
    const int64_t n_toks = s->n_toks - sp->doff;
    int64_t c = 0;
    while (c < kv->n_past && c < n_toks && sp->dtoks[c] == t[c])
        c++;
    if (c == n_toks)
        c--; /* the last token again: its logits are the first guess's */
    kv->n_past = c;
    for (int64_t p = c; p < n_toks;) {
        int64_t n = n_toks - p;
        if (n > e->o.token_budget)
            n = e->o.token_budget;
        if (draft_pass(e, kv, t + p, n, &err)) {
            kv->n_past = 0;
            return 0;
        }
        memcpy(sp->dtoks + p, t + p, (size_t)n * sizeof *sp->dtoks);
        p += n;
    }
    int k = 0;
    while (k < k_max) {
        const int32_t tk = cdx_argmax(e->draft_logits, e->draft_vocab);
        if (tk >= e->hp->n_vocab)
            break;
        draft[k++] = tk;
        if (k == k_max || kv->n_past >= e->o.n_ctx - 1)
            break;
        sp->dtoks[kv->n_past] = tk;
        if (draft_pass(e, kv, &draft[k - 1], 1, &err)) {
            kv->n_past = 0;
            break;
        }
    }
    return k;
}

const eng_proposer eng_proposer_draft = { "draft", draft_propose };

void eng_spec_free(seq *s)
{
    if (s->sp.dkv) {
        cdx_kv_free(s->sp.dkv);
        free(s->sp.dkv);
    }
    free(s->sp.dtoks);
    free(s->sp.draft);
}

/* ---- the turn-off rule ---- */

static void cost_add(eng_cost *c, double n, double ms)
{
    c->s0 = c->s0 * COST_DECAY + 1;
    c->sx = c->sx * COST_DECAY + n;
    c->sxx = c->sxx * COST_DECAY + n * n;
    c->sy = c->sy * COST_DECAY + ms;
    c->sxy = c->sxy * COST_DECAY + n * ms;
}

/* a and b of ms = a + b·n fitted to c (least squares, recent passes weighing more); false while c has
 * no pass. With passes of one size only, b/a is taken as COST_PRIOR. */
static bool cost_fit(const eng_cost *c, double *a, double *b)
{
    if (c->s0 < 0.5)
        return false;
    const double det = c->s0 * c->sxx - c->sx * c->sx, mean_n = c->sx / c->s0, mean_ms = c->sy / c->s0;
    if (c->s0 >= 2 && det > 1e-6 * c->s0 * c->s0) {
        *b = (c->s0 * c->sxy - c->sx * c->sy) / det;
        *a = (c->sy - *b * c->sx) / c->s0;
        if (*b >= 0 && *a > 0)
            return true;
        if (*b < 0) { /* noise: bigger passes measured faster */
            *b = 0;
            *a = mean_ms;
            return true;
        }
        /* a <= 0: all compute */
        *a = 0;
        *b = mean_ms / mean_n;
        return true;
    }
    *a = mean_ms / (1 + COST_PRIOR * mean_n);
    *b = *a * COST_PRIOR;
    return true;
}

void eng_spec_round(cdx_engine *e, int64_t n, double ms)
{
    cost_add(&e->cost, (double)n, ms);
}

/* The round cost a + b·n the round target reads (both 0 before the first round): a fit over at
 * least three rounds of different sizes, else the prior's split of their mean. */
void eng_cost_fit(const cdx_engine *e, double *a, double *b)
{
    const eng_cost *c = &e->cost;
    const double s0 = c->s0, det = s0 * c->sxx - c->sx * c->sx;
    *a = *b = 0;
    if (s0 < 1)
        return;
    if (s0 >= 3 && det > 1e-6 * s0 * s0) {
        *b = (s0 * c->sxy - c->sx * c->sy) / det;
        *a = (c->sy - *b * c->sx) / s0;
        if (*b > 0 && *a >= 0)
            return;
    }
    /* rounds of one size (or a fit with a negative part): the prior's split of their mean */
    const double x = c->sx / s0, y = c->sy / s0;
    *a = y / (1 + COST_PRIOR * x);
    *b = COST_PRIOR * *a;
}

/* The predicted ms of a round of n tokens, a + b·n (0: not measured yet). */
double eng_round_ms(const cdx_engine *e, int64_t n)
{
    const eng_cost *c = &e->cost;
    const double s0 = c->s0, det = s0 * c->sxx - c->sx * c->sx;
    if (s0 < 1)
        return 0;
    if (s0 < 3 || det <= 1e-6 * s0 * s0)
        return c->sy / s0;
    const double b = (s0 * c->sxy - c->sx * c->sy) / det, a = (c->sy - b * c->sx) / s0;
    const double ms = a + b * (double)n;
    return ms > 0 ? ms : c->sy / s0;
}

/* Draft tokens a round with k guesses is expected to keep, when each is kept with probability p. */
static double expected_kept(double p, int k)
{
    double sum = 0, pi = 1;
    for (int i = 0; i < k; i++)
        sum += pi *= p;
    return sum;
}

int eng_spec_init(cdx_engine *e, seq *s, bool opted_out)
{
    eng_spec_state *sp = &s->sp;
    memset(sp, 0, sizeof *sp);
    sp->restart_at = -1;
    if (!e->proposer || opted_out)
        return CDX_OK;
    if (!(sp->draft = malloc((size_t)e->o.draft_max * sizeof *sp->draft)))
        return CDX_ENOMEM;
    sp->on = true;
    sp->k = e->o.draft_max < 4 ? e->o.draft_max : 4;
    if (sp->k < e->o.draft_min)
        sp->k = e->o.draft_min;
    /* what the engine's earlier requests kept, worth at most SPEC_PRIOR_WEIGHT guesses of its own */
    if (e->prop_e > 0) {
        const double w = e->prop_e > SPEC_PRIOR_WEIGHT ? SPEC_PRIOR_WEIGHT / e->prop_e : 1;
        sp->acc = e->acc_e * w;
        sp->prop = e->prop_e * w;
    }
    return CDX_OK;
}

/* The rule's view of one round: its n tokens cost a + b·n ms on the model, and a draft model's pass
 * over m tokens da + db·m. A request's round with k guesses, each kept with probability p (so G
 * expected kept), and a draft costing D(k) ms gives the batch n + G tokens in a + b·(n + k) + D(k) ms
 * against n in a + b·n: it saves S(k) = G·(a + b·n)/n − b·k − D(k) ms a round. The draft's first
 * pass takes the c tokens its cache lacks (the last token at least), each further guess a pass of one:
 * D(k) = D1(c) + (k − 1)·D1(1). */
typedef struct {
    double a, b, da, db; /* da = db = 0: lookup */
    double n;
} spec_costs;

static double draft_ms(const spec_costs *sc, double c, int k)
{
    if (sc->da <= 0 && sc->db <= 0)
        return 0;
    return sc->da + sc->db * c + (k - 1) * (sc->da + sc->db);
}

static double saved_ms(const spec_costs *sc, double p, int k, double c)
{
    return expected_kept(p, k) * (sc->a + sc->b * sc->n) / sc->n - sc->b * k - draft_ms(sc, c, k);
}

/* The draft length in 1..k_max saving the most per round from a first pass over c tokens (0: none
 * saves anything), its saving in *best. */
static int best_k(const spec_costs *sc, double p, int k_max, double c, double *best)
{
    int k = 0;
    *best = 0;
    for (int i = 1; i <= k_max; i++) {
        const double sv = saved_ms(sc, p, i, c);
        if (sv > *best) {
            *best = sv;
            k = i;
        }
    }
    return k;
}

static void turn_off(eng_spec_state *sp, int64_t n_gen)
{
    sp->off = sp->turned_off = true;
    sp->off_at = n_gen;
}

/* Speculation pays for a request when a round with its guesses saves time by the costs above; the
 * draft length is the one saving the most, and when none saves anything speculation turns off. A
 * draft model's catch-up beyond the steady one token (its cache's first fill, or the tokens made
 * while it was off) is paid for once: it is made whole only when the request's own guesses were kept
 * often enough that the rounds left (up to SPEC_HORIZON tokens) save more than it costs; otherwise the
 * draft starts over on a window of the latest SPEC_WINDOW tokens (a cheap probe: it proposes from less
 * context, which changes only what it guesses). An off request probes again with one draft token
 * SPEC_PROBE tokens later, then twice as late after each probe that did not turn it back on. */
int eng_spec_draft(cdx_engine *e, seq *s, int64_t spare)
{
    eng_spec_state *sp = &s->sp;
    sp->n_draft = 0;
    sp->probing = false;
    sp->restart_at = -1;
    if (!sp->on || spare <= 0)
        return 0;
    if (sp->off) {
        const int sh = sp->n_probes < 8 ? sp->n_probes : 8;
        if (s->n_gen - sp->off_at < (int64_t)SPEC_PROBE << sh)
            return 0;
        sp->probing = true;
    }
    int64_t k = sp->probing ? e->o.draft_min : sp->k;
    if (k > spare)
        k = spare;
    if (s->max_tokens > 0 && k > s->max_tokens - s->n_gen - 1)
        k = s->max_tokens - s->n_gen - 1; /* the last token to sample is the one after the draft */
    if (k > e->o.n_ctx - s->n_toks - 1)
        k = e->o.n_ctx - s->n_toks - 1;
    /* LongRoPE: the round's positions take the factors of the request's length (kv rope_len); guesses
     * past the original context while the text is within it would be rotated otherwise than plain
     * decoding rotates them, so a draft stops at that edge */
    while (k > 0 && cdx_model_rope_restart(e->m, s->n_toks, s->n_toks + k))
        k--;
    if (k <= 0)
        return 0;
    /* a draft model's catch-up: the tokens its cache lacks as it stands, or from the start */
    double c = 1, c_full = 1;
    bool windowed = false;
    if (e->draft) {
        int64_t have = 0;
        if (sp->dkv)
            while (have < sp->dkv->n_past && sp->doff + have < s->n_toks && sp->dtoks[have] == s->toks[sp->doff + have])
                have++;
        c = (double)(s->n_toks - sp->doff - have);
        c = c < 1 ? 1 : c;
        c_full = sp->doff > 0 ? (double)s->n_toks : c;
    }
    if (!e->o.spec_keep_on) {
        spec_costs sc = { .n = e->n_running > 0 ? (double)e->n_running : 1 };
        if (!cost_fit(&e->cost, &sc.a, &sc.b)) {
            sc.a = 1;
            sc.b = COST_PRIOR;
        }
        if (e->draft && !cost_fit(&e->dcost, &sc.da, &sc.db)) {
            sc.da = sc.a * e->draft_ratio; /* not measured yet: a pass costs the model's in proportion
                                            * to the weight bytes it reads */
            sc.db = sc.b * e->draft_ratio;
        }
        const double p = (sp->acc + 0.5) / (sp->prop + 1);
        double sv = 0;
        const int kb = best_k(&sc, p, (int)k, 1, &sv);
        if (!sp->probing && (p < SPEC_MIN_ACC || kb == 0)) {
            turn_off(sp, s->n_gen);
            return 0;
        }
        if (!sp->probing)
            k = kb;
        if (e->draft && c_full > SPEC_WINDOW) {
            /* the catch-up made whole only when the request's own guesses showed it pays */
            const double left = s->max_tokens > 0 ? (double)(s->max_tokens - s->n_gen) : SPEC_HORIZON;
            const double h = left < SPEC_HORIZON ? left : SPEC_HORIZON;
            const double extra = sc.db * (c_full - 1) + sc.da * (double)((int64_t)(c_full - 1) / e->o.token_budget);
            const bool own = sp->proposed > 0 && !sp->probing;
            if (!own || h * sv / (1 + expected_kept(p, (int)k)) <= extra)
                windowed = true;
        }
    } else if (e->draft && sp->doff > 0) {
        sp->restart_at = 0; /* the rule is off: the whole text */
    }
    if (e->draft) {
        if (windowed) {
            if (c > SPEC_WINDOW) /* (a window already in place that lacks few tokens goes on) */
                sp->restart_at = s->n_toks - SPEC_WINDOW;
        } else if (sp->doff > 0) {
            sp->restart_at = 0;
        }
    }
    return sp->n_draft = e->proposer->propose(e, s, sp->draft, (int)k);
}

void eng_spec_settle(cdx_engine *e, seq *s, int n_kept)
{
    eng_spec_state *sp = &s->sp;
    const int n = sp->n_draft;
    if (n <= 0)
        return;
    sp->n_draft = 0;
    sp->proposed += n;
    sp->accepted += n_kept;
    if (sp->probing) { /* a probe is judged on its own: every guess kept turns speculation back on */
        sp->probing = false;
        sp->acc = sp->prop = 0;
        if (n_kept == n) {
            sp->off = false;
            sp->n_probes = 0;
        } else {
            sp->n_probes++;
            sp->off_at = s->n_gen;
        }
    }
    sp->acc = sp->acc * SPEC_DECAY + n_kept;
    sp->prop = sp->prop * SPEC_DECAY + n;
    e->acc_e = e->acc_e * SPEC_ENGINE_DECAY + n_kept;
    e->prop_e = e->prop_e * SPEC_ENGINE_DECAY + n;
    e->t_spec_prop += (uint64_t)n;
    e->t_spec_acc += (uint64_t)n_kept;
    e->t_spec_verify++;
    /* grow on a draft kept whole, shrink to just past what was kept otherwise */
    if (n_kept == n && n == sp->k)
        sp->k += sp->k / 2 > 1 ? sp->k / 2 : 1;
    else if (n_kept < n)
        sp->k = n_kept + 1;
    if (sp->k > e->o.draft_max)
        sp->k = e->o.draft_max;
    if (sp->k < e->o.draft_min)
        sp->k = e->o.draft_min;
}
