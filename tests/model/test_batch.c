/* A batch that mixes sequences gives each sequence exactly the logits it gets alone. */
#include "caldrix.h"
#include "caldrix/model.h"
#include "test.h"

static void mixed_batch_equals_separate_runs(void)
{
    cdx_err e = {0};
    cdx_model *m;
    REQUIRE(cdx_model_open(SHARED "/fixtures/hf/qwen3", NULL, &m, &e) == 0);
    const cdx_hparams *hp = cdx_model_hparams(m);
    int64_t V = hp->n_vocab;
    cdx_forward_ctx *fc;
    REQUIRE(cdx_forward_ctx_create(m, 16, 2, NULL, &fc, &e) == 0);
    const int32_t a[] = { 5, 17, 99, 250, 3, 44 }, bq[] = { 200, 7, 8 };
    float *la = malloc(sizeof(float) * V * 2), *lb = malloc(sizeof(float) * V * 2), *lm = malloc(sizeof(float) * V * 4);
    /* alone: a's first 4, then a's last 2 (incremental); b's 3 */
    cdx_kv ka, kb;
    REQUIRE(cdx_kv_init(&ka, hp, 32, &e) == 0 && cdx_kv_init(&kb, hp, 32, &e) == 0);
    cdx_kv *pa = &ka, *pb = &kb;
    cdx_batch b1 = { .n = 4, .tokens = a };
    REQUIRE(cdx_forward(fc, &pa, 1, &b1, la, &e) == 0);
    cdx_batch b2 = { .n = 2, .tokens = a + 4 };
    REQUIRE(cdx_forward(fc, &pa, 1, &b2, la + V, &e) == 0);
    cdx_batch b3 = { .n = 3, .tokens = bq };
    REQUIRE(cdx_forward(fc, &pb, 1, &b3, lb, &e) == 0);
    cdx_kv_free(&ka);
    cdx_kv_free(&kb);
    /* together: interleaved tokens of both sequences, logits wanted at a[3], b[2], a[5] */
    REQUIRE(cdx_kv_init(&ka, hp, 32, &e) == 0 && cdx_kv_init(&kb, hp, 32, &e) == 0);
    cdx_kv *both[2] = { &ka, &kb };
    const int32_t toks[] = { a[0], bq[0], a[1], a[2], bq[1], a[3], bq[2] };
    const int32_t seq[] = { 0, 1, 0, 0, 1, 0, 1 };
    const bool want[] = { false, false, false, false, false, true, true };
    cdx_batch bm = { .n = 7, .tokens = toks, .seq = seq, .want_logits = want };
    REQUIRE(cdx_forward(fc, both, 2, &bm, lm, &e) == 0);
    CHECK(ka.n_past == 4 && kb.n_past == 3);
    const int32_t toks2[] = { a[4], a[5] };
    const int32_t seq2[] = { 0, 0 };
    cdx_batch bm2 = { .n = 2, .tokens = toks2, .seq = seq2 };
    REQUIRE(cdx_forward(fc, both, 2, &bm2, lm + 2 * V, &e) == 0);
    double d1 = 0, d2 = 0, d3 = 0;
    for (int64_t i = 0; i < V; i++) {
        d1 = fmax(d1, fabs(lm[i] - la[i]));
        d2 = fmax(d2, fabs(lm[V + i] - lb[i]));
        d3 = fmax(d3, fabs(lm[2 * V + i] - la[V + i]));
    }
    CHECKF(d1 < 1e-5 && d2 < 1e-5 && d3 < 1e-5, "differences %g %g %g", d1, d2, d3);
    /* a full context is refused without changing the cache */
    cdx_kv small;
    REQUIRE(cdx_kv_init(&small, hp, 2, &e) == 0);
    cdx_kv *ps = &small;
    cdx_batch big = { .n = 3, .tokens = a };
    CHECK(cdx_forward(fc, &ps, 1, &big, la, &e) == CDX_ERANGE);
    CHECK(small.n_past == 0);
    CHECK(strstr(e.msg, "context is full") != NULL);
    const int32_t bad = (int32_t)V;
    cdx_batch bb = { .n = 1, .tokens = &bad };
    CHECK(cdx_forward(fc, &ps, 1, &bb, la, &e) == CDX_EINVAL);
    cdx_kv_free(&small);
    cdx_kv_free(&ka);
    cdx_kv_free(&kb);
    free(la); free(lb); free(lm);
    cdx_forward_ctx_free(fc);
    cdx_model_close(m);
}

static void bad_models_are_refused_by_name(void)
{
    cdx_err e = {0};
    cdx_model *m = NULL;
    /* (mixtures of experts run since issue 15: tests/model/test_hf_golden.c) */
    /* (Qwen3.5 runs since issue 18: tests/model/test_qwen35.c) */
    CHECK(cdx_model_open("tests/does-not-exist", NULL, &m, &e) == CDX_ENOTFOUND);
    CHECK(m == NULL);
}

int main(void)
{
    RUN("a mixed batch equals separate runs, and a full context is refused", mixed_batch_equals_separate_runs);
    RUN("models caldrix cannot run are refused by name", bad_models_are_refused_by_name);
    return t_done("batch");
}
