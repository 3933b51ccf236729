/* The round target (cdx_engine_opts.max_round_ms, serve --max-round-ms): the prompt budget of a
 * round with decoding streams is what the fitted round cost leaves under the target (at least a
 * block), long prompts are cut across rounds in arrival order while the streams keep decoding, and
 * every token, logprob and top logit has the same float bits as without a target. */
#include "caldrix.h"
#include "engine/engine_impl.h"
#include "test.h"

#include <math.h>

#define STORIES SHARED "/models/stories260K/stories260K.gguf"
#define MAX_GEN 48
#define TOPK 3
#define N_REQ 4

typedef struct {
    int32_t tok[MAX_GEN];
    uint32_t lp[MAX_GEN], top[MAX_GEN][TOPK];
    int n;
    int64_t first_round;    /* the round (counted by the test) of its first token */
    int64_t rounds_with_token[256];
    int finals;
} result;

static int64_t g_round;

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void on_event(const cdx_event *ev)
{
    result *r = ev->user;
    if (ev->finish != CDX_FINISH_NONE) {
        r->finals++;
        return;
    }
    if (r->n == 0)
        r->first_round = g_round;
    if (g_round < 256)
        r->rounds_with_token[g_round]++;
    if (r->n >= MAX_GEN)
        return;
    r->tok[r->n] = ev->token;
    r->lp[r->n] = fbits(ev->logprob);
    for (int k = 0; k < TOPK && k < ev->n_top; k++)
        r->top[r->n][k] = fbits(ev->top_logits[k]);
    r->n++;
}

static void budget_fills_the_rest_of_the_target(void)
{
    /* a round costs 10 + 1·n ms: 150 ms hold 140 tokens, 8 of them decoding */
    CHECK(eng_prefill_budget(10, 1, 150, 8, 16, 504) == 132);
    CHECK(eng_prefill_budget(10, 0.5, 150, 8, 16, 504) == 272);
    /* the decoding tokens alone (180 ms) overrun the target: prompts get as long, 180 / 5 = 36 tokens */
    CHECK(eng_prefill_budget(100, 5, 150, 16, 16, 496) == 36);
    /* and a block at least */
    CHECK(eng_prefill_budget(0.1, 5, 150, 1, 16, 496) == 28 && eng_prefill_budget(0.1, 50, 1, 1, 16, 496) == 16);
    /* not more than the token budget leaves, nor a block when less is left */
    CHECK(eng_prefill_budget(1, 0.01, 150, 8, 16, 504) == 504);
    CHECK(eng_prefill_budget(100, 5, 150, 16, 16, 7) == 7);
    /* not measured yet (b = 0), or a nan: the whole budget */
    CHECK(eng_prefill_budget(0, 0, 150, 8, 16, 504) == 504);
    CHECK(eng_prefill_budget(0, NAN, 150, 8, 16, 504) == 504);
}

static cdx_engine *engine(const cdx_model *m, double max_round_ms)
{
    cdx_engine_opts o = cdx_engine_defaults();
    o.n_threads = 2;
    o.max_batch = 8;
    o.token_budget = 512;
    o.n_ctx = 512;
    o.max_round_ms = max_round_ms;
    cdx_engine *e = NULL;
    cdx_err err = { 0 };
    if (cdx_engine_create(m, NULL, &o, &e, &err))
        fprintf(stderr, "  engine: %s\n", err.msg);
    return e;
}

/* A decodes alone for 3 rounds; then B (200 prompt tokens), C (150) and D (100) arrive together. */
static int run(const cdx_model *m, double max_round_ms, result *rs, int64_t *rounds_after)
{
    static int32_t ids[N_REQ][200];
    static const int n_ids[N_REQ] = { 5, 200, 150, 100 };
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N_REQ; i++)
        for (int j = 0; j < n_ids[i]; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            ids[i][j] = 1 + (int32_t)(x % 500);
        }
    cdx_engine *e = engine(m, max_round_ms);
    if (!e)
        return -1;
    /* the cost model pinned at 15.5 + 1·n ms (two points weighing 10^12 rounds each: the rounds measured
     * here do not move it), so the budget each round gets is known */
    const double w = 1e12;
    e->cost.s0 = 2 * w, e->cost.sx = 100 * w, e->cost.sxx = 1e4 * w, e->cost.sy = 131 * w, e->cost.sxy = 11550 * w;
    cdx_err err = { 0 };
    memset(rs, 0, sizeof(result) * N_REQ);
    g_round = 0;
    int rc = 0;
    for (int i = 0; i < N_REQ && !rc; i++) {
        if (i == 1)
            for (int k = 0; k < 3 && !rc; k++, g_round++)
                rc = cdx_engine_step(e, &err);
        cdx_request rq = cdx_request_defaults();
        rq.prompt = ids[i];
        rq.n_prompt = n_ids[i];
        rq.max_tokens = i == 0 ? MAX_GEN : 8;
        rq.ignore_eos = true;
        rq.sampling.temp = 0.8f;
        rq.sampling.seed = 7 + (uint64_t)i;
        rq.top_logprobs = TOPK;
        rq.on_event = on_event;
        rq.user = &rs[i];
        rc = cdx_engine_submit(e, &rq, NULL, &err);
    }
    const int64_t t0 = g_round;
    for (; !rc && cdx_engine_busy(e) && g_round < 1000; g_round++)
        rc = cdx_engine_step(e, &err);
    if (rc)
        fprintf(stderr, "  %s\n", err.msg);
    *rounds_after = g_round - t0;
    cdx_engine_stats st;
    cdx_engine_get_stats(e, &st);
    if (!rc && !(st.max_round_ms == max_round_ms && st.round_fixed_ms + st.round_token_ms > 0))
        rc = -1;
    cdx_engine_free(e);
    return rc;
}

static void prompts_are_cut_in_arrival_order_with_the_same_bits(void)
{
    cdx_err err = { 0 };
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(STORIES, NULL, &m, &err) == 0);
    static result off[N_REQ], on[N_REQ];
    int64_t r_off = 0, r_on = 0;
    REQUIRE(run(m, 0, off, &r_off) == 0);
    /* a target no round can meet: a round with d decoding tokens adds what they take, 15 + d ms,
     * in prompt tokens: floor(2·(15.5 + d) - 15.5) - d = 15 + d (.5 from any rounding) */
    REQUIRE(run(m, 1e-6, on, &r_on) == 0);
    (void)r_off, (void)r_on;
    for (int i = 0; i < N_REQ; i++) {
        CHECKF(off[i].n == on[i].n && off[i].finals == 1 && on[i].finals == 1, "request %d: %d / %d tokens", i,
               off[i].n, on[i].n);
        CHECKF(!memcmp(off[i].tok, on[i].tok, sizeof off[i].tok) && !memcmp(off[i].lp, on[i].lp, sizeof off[i].lp) &&
                   !memcmp(off[i].top, on[i].top, sizeof off[i].top),
               "request %d: the target changed its bits", i);
    }
    /* without a target the three prompts (450 tokens) fit one round beside A */
    CHECKF(off[1].first_round == 3 && off[2].first_round == 3 && off[3].first_round == 3, "off: first tokens in rounds %lld %lld %lld",
           (long long)off[1].first_round, (long long)off[2].first_round, (long long)off[3].first_round);
    /* with it, oldest first: 16 a round beside A; B's 200 end in round 15 (8 left for C); 17 a round
     * while B decodes (rounds 16-22, its 8 tokens), 16 in 23: C's ends in 24 (9 left for D); 17 a
     * round beside A and C: D's 91 left end in round 30 */
    CHECKF(on[1].first_round == 3 + 12 && on[2].first_round == 3 + 21 && on[3].first_round == 3 + 27,
           "on: first tokens in rounds %lld %lld %lld", (long long)on[1].first_round, (long long)on[2].first_round,
           (long long)on[3].first_round);
    /* and A got a token in every one of those rounds */
    int missed = 0;
    for (int64_t r = 0; r < 3 + 27 && r < on[0].n; r++)
        missed += on[0].rounds_with_token[r] != 1;
    CHECKF(missed == 0 && on[0].n == MAX_GEN, "A missed %d rounds", missed);
    cdx_model_close(m);
}

static void a_bad_target_is_refused_by_name(void)
{
    cdx_err err = { 0 };
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(STORIES, NULL, &m, &err) == 0);
    const double bad[] = { -1, NAN, 1e9 };
    for (int i = 0; i < 3; i++) {
        cdx_engine_opts o = cdx_engine_defaults();
        o.max_round_ms = bad[i];
        cdx_engine *e = NULL;
        CHECK(cdx_engine_create(m, NULL, &o, &e, &err) == CDX_EINVAL && !e && strstr(err.msg, "max_round_ms") &&
              strstr(err.msg, "--max-round-ms"));
    }
    cdx_model_close(m);
}

int main(void)
{
    RUN("the prompt budget fills what the round cost leaves under the target, at least a block",
        budget_fills_the_rest_of_the_target);
    RUN("long prompts are cut across rounds in arrival order, streams decode every round, same bits",
        prompts_are_cut_in_arrival_order_with_the_same_bits);
    RUN("a negative, nan or huge max_round_ms is refused naming it", a_bad_target_is_refused_by_name);
    return t_done("engine/sched");
}
