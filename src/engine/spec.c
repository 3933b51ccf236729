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
#define SPEC_PROBE 32      /* lookup, turned off: tokens generated before it tries again */
#define SPEC_MIN_ACC 0.1   /* below this acceptance per draft token speculation never pays: each
                            * guess costs a logits row (and its log-sum-exp) and the proposer's time */
#define COST_DECAY 0.95    /* weight of the earlier rounds in the cost model */
#define COST_PRIOR (1.0 / 64) /* ms of one more token in a round / ms of the round's fixed part, until
                               * rounds of different sizes were measured (a decode round reads every
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

/* The draft model's greedy continuation (argmax, lowest id on a tie). Its cache keeps the tokens it
 * has seen: each round it is cut back to what it shares with the request's tokens (a guess not
 * kept is dropped there), takes the tokens it lacks in chunks, then drafts one token a pass. A
 * guess outside the target's vocabulary ends the draft. Sampling at any temperature stays exact:
 * a guess is kept only where the target's own sampler draws it (scheduler.c). */
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
    int64_t c = 0;
    while (c < kv->n_past && c < s->n_toks && sp->dtoks[c] == s->toks[c])
        c++;
    if (c == s->n_toks)
        c--; /* the last token again: its logits are the first guess's */
    kv->n_past = c;
    const double t0 = cdx_time_ms();
    cdx_kv *const kvs[1] = { kv };
    for (int64_t p = c; p < s->n_toks;) {
        int64_t n = s->n_toks - p;
        if (n > e->o.token_budget)
            n = e->o.token_budget;
        const cdx_batch b = { .n = n, .tokens = s->toks + p };
        if (cdx_forward(e->draft_fc, kvs, 1, &b, e->draft_logits, &err)) {
            kv->n_past = 0;
            return 0;
        }
        memcpy(sp->dtoks + p, s->toks + p, (size_t)n * sizeof *sp->dtoks);
        p += n;
    }
    int k = 0;
    while (k < k_max) {
        const int32_t t = cdx_argmax(e->draft_logits, e->draft_vocab);
        if (t >= e->hp->n_vocab)
            break;
        draft[k++] = t;
        if (k == k_max || kv->n_past >= e->o.n_ctx - 1)
            break;
        const cdx_batch b = { .n = 1, .tokens = &draft[k - 1] };
        sp->dtoks[kv->n_past] = t;
        if (cdx_forward(e->draft_fc, kvs, 1, &b, e->draft_logits, &err)) {
            kv->n_past = 0;
            break;
        }
    }
    e->draft_ms = e->draft_ms * COST_DECAY + (cdx_time_ms() - t0);
    e->draft_n = e->draft_n * COST_DECAY + k;
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

void eng_spec_round(cdx_engine *e, int64_t n, double ms)
{
    const double x = (double)n, y = ms;
    e->cm_s0 = e->cm_s0 * COST_DECAY + 1;
    e->cm_sx = e->cm_sx * COST_DECAY + x;
    e->cm_sxx = e->cm_sxx * COST_DECAY + x * x;
    e->cm_sy = e->cm_sy * COST_DECAY + y;
    e->cm_sxy = e->cm_sxy * COST_DECAY + x * y;
}

void eng_cost_fit(const cdx_engine *e, double *a, double *b)
{
    const double s0 = e->cm_s0, det = s0 * e->cm_sxx - e->cm_sx * e->cm_sx;
    *a = *b = 0;
    if (s0 < 1)
        return;
    if (s0 >= 3 && det > 1e-6 * s0 * s0) {
        *b = (s0 * e->cm_sxy - e->cm_sx * e->cm_sy) / det;
        *a = (e->cm_sy - *b * e->cm_sx) / s0;
        if (*b > 0 && *a >= 0)
            return;
    }
    /* rounds of one size (or a fit with a negative part): the prior's split of their mean */
    const double x = e->cm_sx / s0, y = e->cm_sy / s0;
    *a = y / (1 + COST_PRIOR * x);
    *b = COST_PRIOR * *a;
}

/* The predicted ms of a round of n tokens, a + b·n (0: not measured yet). */
double eng_round_ms(const cdx_engine *e, int64_t n)
{
    const double s0 = e->cm_s0, det = s0 * e->cm_sxx - e->cm_sx * e->cm_sx;
    if (s0 < 1)
        return 0;
    if (s0 < 3 || det <= 1e-6 * s0 * s0)
        return e->cm_sy / s0;
    const double b = (s0 * e->cm_sxy - e->cm_sx * e->cm_sy) / det, a = (e->cm_sy - b * e->cm_sx) / s0;
    const double ms = a + b * (double)n;
    return ms > 0 ? ms : e->cm_sy / s0;
}

/* The share of a round of n tokens that its tokens' own compute takes, b·n / (a + b·n) with the
 * round's cost a + b·n fitted to the measured rounds (least squares, recent rounds weighing more):
 * near 0 where a round is bound by reading the weights (more tokens are almost free), near 1 where
 * it is bound by compute (every token costs its full share). */
static double cost_share(const cdx_engine *e, int64_t n)
{
    const double s0 = e->cm_s0, det = s0 * e->cm_sxx - e->cm_sx * e->cm_sx;
    double r = COST_PRIOR; /* b / a */
    if (s0 >= 3 && det > 1e-6 * s0 * s0) {
        const double b = (s0 * e->cm_sxy - e->cm_sx * e->cm_sy) / det, a = (e->cm_sy - b * e->cm_sx) / s0;
        if (b <= 0)
            return 0;
        if (a <= 0)
            return 1;
        r = b / a;
    }
    return (double)n * r / (1 + (double)n * r);
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
    if (!e->proposer || opted_out)
        return CDX_OK;
    if (!(sp->draft = malloc((size_t)e->o.draft_max * sizeof *sp->draft)))
        return CDX_ENOMEM;
    sp->on = true;
    sp->k = e->o.draft_max < 4 ? e->o.draft_max : 4;
    if (sp->k < e->o.draft_min)
        sp->k = e->o.draft_min;
    return CDX_OK;
}

/* Speculation pays for a request when the tokens it gains per draft token beat the share of the
 * round those draft tokens cost: a round of n tokens with K more and G more kept gives
 * (n + G) / (a + b·(n + K)) tokens a millisecond against n / (a + b·n), better exactly when
 * G / K > b·n / (a + b·n). The draft length is cut until that holds; when even one guess does
 * not, speculation turns off (lookup tries again after SPEC_PROBE tokens). */
int eng_spec_draft(cdx_engine *e, seq *s, int64_t spare)
{
    eng_spec_state *sp = &s->sp;
    sp->n_draft = 0;
    if (!sp->on || spare <= 0)
        return 0;
    if (sp->off) {
        if (e->proposer != &eng_proposer_lookup || s->n_gen - sp->off_at < SPEC_PROBE)
            return 0;
        sp->off = false; /* a probe: from the prior again */
        sp->acc = sp->prop = 0;
        sp->k = e->o.draft_min;
    }
    int64_t k = sp->k;
    if (k > spare)
        k = spare;
    if (s->max_tokens > 0 && k > s->max_tokens - s->n_gen - 1)
        k = s->max_tokens - s->n_gen - 1; /* the last token to sample is the one after the draft */
    if (k > e->o.n_ctx - s->n_toks - 1)
        k = e->o.n_ctx - s->n_toks - 1;
    if (k <= 0)
        return 0;
    if (!e->o.spec_keep_on) {
        const double p = (sp->acc + 0.5) / (sp->prop + 1);
        double need = cost_share(e, e->n_running);
        /* a draft model's own time per guess, as a share of the round it saves */
        const double rm = eng_round_ms(e, e->n_running);
        if (e->draft && e->draft_n > 0 && rm > 0)
            need += e->draft_ms / e->draft_n / rm;
        const double bar = need > SPEC_MIN_ACC ? need : SPEC_MIN_ACC;
        if (p < bar) {
            sp->off = sp->turned_off = true;
            sp->off_at = s->n_gen;
            return 0;
        }
        while (k > 1 && expected_kept(p, (int)k) < bar * (double)k)
            k--;
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
    sp->acc = sp->acc * SPEC_DECAY + n_kept;
    sp->prop = sp->prop * SPEC_DECAY + n;
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
