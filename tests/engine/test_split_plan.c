/* A split's placement without MPI (src/engine/split.c): --split-layers parsed into slices and its
 * refusals naming the range, slices in proportion to each rank's memory, the forward context's
 * stage range checks, and two batches in flight through a first stage (cdx_forward_begin/end) over an
 * in-process line, the same logits bits as whole. The split itself runs in tests/split/ (it needs
 * mpirun). */
#include "caldrix/split.h"
#include "test.h"

static cdx_err err;

static void parse_good(void)
{
    int64_t b[4];
    CHECK(cdx_split_parse_layers("0-3,4-7", 8, 2, b, &err) == CDX_OK);
    CHECK(b[0] == 0 && b[1] == 4 && b[2] == 8);
    CHECK(cdx_split_parse_layers("0,1-5,6-7", 8, 3, b, &err) == CDX_OK);
    CHECK(b[0] == 0 && b[1] == 1 && b[2] == 6 && b[3] == 8);
    CHECK(cdx_split_parse_layers("0-7", 8, 1, b, &err) == CDX_OK && b[1] == 8);
}

static void refused(const char *spec, int64_t n_layer, int n_ranks, const char *want)
{
    int64_t b[8];
    err.msg[0] = 0;
    const int rc = cdx_split_parse_layers(spec, n_layer, n_ranks, b, &err);
    CHECKF(rc == CDX_EINVAL && strstr(err.msg, want), "\"%s\": rc %d, \"%s\"; wanted \"%s\"", spec, rc, err.msg, want);
}

static void parse_refusals(void)
{
    refused("0-3,3-7", 8, 2, "range 3-7 overlaps the one before (layer 3 is in both)");
    refused("0-2,4-7", 8, 2, "range 4-7 leaves a gap (layer 3 in no range)");
    refused("0-1,4-7", 8, 2, "leaves a gap (layers 2-3 in no range)");
    refused("0-3,4-8", 8, 2, "range 4-8 names layer 8; the model has layers 0-7");
    refused("0-3", 8, 1, "leaves layers 4-7 in no range");
    refused("1-7", 8, 1, "range 1-7 leaves a gap (layer 0 in no range)");
    refused("0-3.5,4-7", 8, 2, "is not a layer range a-b");
    refused("0-3,,4-7", 8, 2, "is not a layer range a-b");
    refused("0-3,-4", 8, 2, "is not a layer range a-b");
    refused("5-2,3-7", 8, 2, "range 5-2 ends before it starts");
    refused("0-3,4-7", 8, 3, "gives 2 ranges for the 3 ranks");
    refused("0-1,2-3,4-7", 8, 2, "gives more ranges than the 2 ranks");
    refused("", 8, 1, "--split-layers is empty");
    refused("99999999999999999999-1", 8, 1, "is not a layer range a-b");
}

static void plan(void)
{
    int64_t b[5];
    CHECK(cdx_split_plan(8, (const uint64_t[]){ 1, 3 }, 2, b, &err) == CDX_OK);
    CHECK(b[0] == 0 && b[1] == 2 && b[2] == 8);
    CHECK(cdx_split_plan(6, (const uint64_t[]){ 0, 0, 0 }, 3, b, &err) == CDX_OK); /* unknown memory: equal */
    CHECK(b[1] == 2 && b[2] == 4 && b[3] == 6);
    CHECK(cdx_split_plan(3, (const uint64_t[]){ 100, 1, 1 }, 3, b, &err) == CDX_OK); /* one layer each at least */
    CHECK(b[1] == 1 && b[2] == 2 && b[3] == 3);
    CHECK(cdx_split_plan(4, (const uint64_t[]){ 1, 1, 1, 100 }, 4, b, &err) == CDX_OK);
    CHECK(b[1] == 1 && b[2] == 2 && b[3] == 3 && b[4] == 4);
    CHECK(cdx_split_plan(2, (const uint64_t[]){ 1, 1, 1 }, 3, b, &err) == CDX_EINVAL);
    CHECK(strstr(err.msg, "3 ranks for a model of 2 layers") != NULL);
}

static void fit(void)
{
    int64_t b[4];
    bool whole = false;
    const uint64_t G = 1 << 30;
    /* 8 layers of 1 GiB: rank 0 holds it all: whole unless a split is asked for */
    CHECK(cdx_split_fit(8, G, (const uint64_t[]){ 9 * G, 9 * G }, 2, true, &whole, b, &err) == CDX_OK && whole);
    CHECK(cdx_split_fit(8, G, (const uint64_t[]){ 9 * G, 9 * G }, 2, false, &whole, b, &err) == CDX_OK && !whole);
    CHECK(b[0] == 0 && b[1] == 4 && b[2] == 8);
    /* 3 GiB a rank: 3 ranks hold 9 layers, every slice within its rank */
    CHECK(cdx_split_fit(8, G, (const uint64_t[]){ 3 * G, 3 * G, 3 * G }, 3, true, &whole, b, &err) == CDX_OK && !whole);
    CHECK(b[1] - b[0] <= 3 && b[2] - b[1] <= 3 && b[3] - b[2] <= 3 && b[3] == 8 && b[1] >= 1 && b[2] > b[1]);
    /* uneven: 6 and 2 GiB for 8 layers: 6 and 2 */
    CHECK(cdx_split_fit(8, G, (const uint64_t[]){ 6 * G, 2 * G }, 2, true, &whole, b, &err) == CDX_OK);
    CHECK(b[1] == 6 && b[2] == 8);
    CHECK(cdx_split_fit(8, G, (const uint64_t[]){ 3 * G, 3 * G }, 2, true, &whole, b, &err) == CDX_ERESOURCE_LIMIT);
    CHECKF(strstr(err.msg, "does not fit even split: it needs 8.00 GiB (8 layers of 1.00 GiB") &&
               strstr(err.msg, "the 2 ranks hold 6 layers together (rank 0 3.00 GiB, rank 1 3.00 GiB)"), "%s", err.msg);
    CHECK(cdx_split_fit(8, G, (const uint64_t[]){ 8 * G, G / 2 }, 2, false, &whole, b, &err) == CDX_ERESOURCE_LIMIT);
    CHECK(strstr(err.msg, "rank 1 gives less than one layer") != NULL);
}

static void stage_range(void)
{
    cdx_model *m = NULL;
    cdx_forward_ctx *fc = NULL;
    REQUIRE(cdx_model_open("models/stories260K.gguf", NULL, &m, &err) == CDX_OK);
    REQUIRE(cdx_forward_ctx_create(m, 4, 1, NULL, &fc, &err) == CDX_OK);
    const int64_t L = cdx_model_hparams(m)->n_layer;
    CHECK(cdx_forward_ctx_set_stage(fc, &(cdx_stage){ .layer0 = 0, .layer1 = L + 1 }, &err) == CDX_EINVAL);
    CHECK(strstr(err.msg, "not a slice of the model's") != NULL);
    CHECK(cdx_forward_ctx_set_stage(fc, &(cdx_stage){ .layer0 = 2, .layer1 = 2 }, &err) == CDX_EINVAL);
    CHECK(cdx_forward_ctx_set_stage(fc, &(cdx_stage){ .layer0 = 0, .layer1 = 2 }, &err) == CDX_EINVAL);
    CHECK(strstr(err.msg, "needs a next stage") != NULL);
    CHECK(cdx_forward_ctx_set_stage(fc, &(cdx_stage){ .layer0 = 2, .layer1 = L }, &err) == CDX_OK);
    /* a later stage takes hidden rows, not tokens */
    cdx_kv kv;
    REQUIRE(cdx_kv_init(&kv, cdx_model_hparams(m), 16, &err) == CDX_OK);
    cdx_kv *kvs[1] = { &kv };
    float *logits = malloc((size_t)cdx_model_hparams(m)->n_vocab * sizeof(float));
    const int32_t tok[1] = { 1 };
    CHECK(cdx_forward(fc, kvs, 1, &(cdx_batch){ .n = 1, .tokens = tok }, logits, &err) == CDX_EINVAL);
    CHECK(strstr(err.msg, "takes the hidden rows of the stage before") != NULL);
    CHECK(cdx_forward_ctx_set_stage(fc, NULL, &err) == CDX_OK);
    CHECK(cdx_forward(fc, kvs, 1, &(cdx_batch){ .n = 1, .tokens = tok }, logits, &err) == CDX_OK);
    free(logits);
    cdx_kv_free(&kv);
    cdx_forward_ctx_free(fc);
    cdx_model_close(m);
}

/* ---- an in-process line: the first stage's send runs the later stage at once and queues its rows ---- */

enum { LINE_Q = 4, LINE_ROWS = 8 };
typedef struct {
    cdx_forward_ctx *later;     /* layers 2..L, the last stage */
    cdx_kv_seq *cur;            /* the later stage's cache of the sequence being sent */
    float *out[LINE_Q];         /* [LINE_ROWS][n_embd] each: answers not yet taken */
    int64_t n_out[LINE_Q];
    int head, tail;
    int64_t E;                  /* n_embd */
} line;

static int line_send(void *user, const cdx_stage_batch *sb, cdx_err *e)
{
    line *ln = user;
    const cdx_batch b = { .n = sb->n, .seq = sb->seq, .pos = sb->pos, .want_logits = sb->want_logits, .x_in = sb->x,
                          .x_out = ln->out[ln->tail % LINE_Q] };
    int rc = cdx_forward_seqs(ln->later, ln->cur, 1, &b, NULL, e);
    if (!rc)
        ln->n_out[ln->tail++ % LINE_Q] = sb->n_out;
    return rc;
}

static int line_recv(void *user, int64_t n_out, float *x_out, cdx_err *e)
{
    line *ln = user;
    if (ln->head == ln->tail || ln->n_out[ln->head % LINE_Q] != n_out)
        return cdx_err_set(e, CDX_EINVAL, "the line has no answer of %lld rows", (long long)n_out);
    memcpy(x_out, ln->out[ln->head++ % LINE_Q], (size_t)n_out * (size_t)ln->E * sizeof(float));
    return CDX_OK;
}

/* Two sequences, each a prompt then 3 decoded tokens, with both batches in flight at once through a
 * first stage (layers 0..1) and an in-process later stage: every logits row the same bits as whole. */
static void two_in_flight(void)
{
    cdx_model *m = NULL;
    cdx_forward_ctx *whole = NULL, *first = NULL;
    line ln = { 0 };
    REQUIRE(cdx_model_open("models/stories260K.gguf", NULL, &m, &err) == CDX_OK);
    const cdx_hparams *hp = cdx_model_hparams(m);
    const int64_t L = hp->n_layer, V = hp->n_vocab;
    ln.E = hp->n_embd;
    REQUIRE(cdx_forward_ctx_create(m, LINE_ROWS, 1, NULL, &whole, &err) == CDX_OK);
    REQUIRE(cdx_forward_ctx_create(m, LINE_ROWS, 1, NULL, &first, &err) == CDX_OK);
    REQUIRE(cdx_forward_ctx_create(m, LINE_ROWS, 1, NULL, &ln.later, &err) == CDX_OK);
    REQUIRE(cdx_forward_ctx_set_stage(ln.later, &(cdx_stage){ .layer0 = 2, .layer1 = L }, &err) == CDX_OK);
    REQUIRE(cdx_forward_ctx_set_stage(first, &(cdx_stage){ .layer0 = 0, .layer1 = 2, .send = line_send,
                                                          .recv = line_recv, .n_micro = 1, .user = &ln }, &err) == CDX_OK);
    for (int i = 0; i < LINE_Q; i++)
        REQUIRE((ln.out[i] = malloc((size_t)LINE_ROWS * (size_t)ln.E * sizeof(float))) != NULL);
    cdx_kv kw[2], k0[2], k1[2]; /* whole; the first stage's and the later stage's caches */
    for (int s = 0; s < 2; s++)
        REQUIRE(cdx_kv_init(&kw[s], hp, 32, &err) == CDX_OK && cdx_kv_init(&k0[s], hp, 32, &err) == CDX_OK &&
                cdx_kv_init(&k1[s], hp, 32, &err) == CDX_OK);
    float *lw = malloc((size_t)V * sizeof(float)), *lp[2] = { malloc((size_t)V * sizeof(float)),
                                                            malloc((size_t)V * sizeof(float)) };
    REQUIRE(lw && lp[0] && lp[1]);
    /* refusals: a whole context runs no halves; none in flight to end */
    const int32_t t1[1] = { 1 };
    const int64_t p0[1] = { 0 };
    CHECK(cdx_forward_begin(whole, &kw[0].seq, 1, &(cdx_batch){ .n = 1, .tokens = t1, .pos = p0 }, &err) == CDX_EINVAL);
    CHECK(strstr(err.msg, "only the first stage of a split model") != NULL);
    CHECK(cdx_forward_end(first, &k0[0].seq, 1, &(cdx_batch){ .n = 1, .tokens = t1, .pos = p0 }, lp[0], &err) ==
          CDX_EINVAL);
    int32_t toks[2][8] = { { 1, 5, 9, 13 }, { 2, 7, 11 } };
    int64_t n_tok[2] = { 4, 3 }, pos[2][8];
    int same = 0, rows = 0;
    for (int step = 0; step < 4; step++) {
        cdx_batch b[2];
        for (int s = 0; s < 2; s++) { /* step 0: the prompt; then the last token drawn */
            const int64_t a = step ? n_tok[s] - 1 : 0, n = step ? 1 : n_tok[s];
            for (int64_t i = 0; i < n; i++)
                pos[s][i] = a + i;
            b[s] = (cdx_batch){ .n = n, .tokens = toks[s] + a, .pos = pos[s] };
            ln.cur = &k1[s].seq;
            CHECK(cdx_forward_begin(first, &k0[s].seq, 1, &b[s], &err) == CDX_OK);
        }
        CHECK(cdx_forward_in_flight(first) == 2);
        CHECK(cdx_forward_seqs(first, &k0[0].seq, 1, &b[0], lp[0], &err) == CDX_EINVAL); /* answers on the line */
        for (int s = 0; s < 2; s++) {
            CHECK(cdx_forward_end(first, &k0[s].seq, 1, &b[s], lp[s], &err) == CDX_OK);
            cdx_kv *kv[1] = { &kw[s] };
            CHECK(cdx_forward(whole, kv, 1, &(cdx_batch){ .n = b[s].n, .tokens = b[s].tokens }, lw, &err) == CDX_OK);
            same += !memcmp(lw, lp[s], (size_t)V * sizeof(float));
            rows++;
            int64_t best = 0; /* greedy */
            for (int64_t v = 1; v < V; v++)
                best = lw[v] > lw[best] ? v : best;
            toks[s][n_tok[s]++] = (int32_t)best;
        }
    }
    CHECKF(same == rows && rows == 8, "%d of %d logits rows the same bits as whole", same, rows);
    CHECK(cdx_forward_in_flight(first) == 0);
    for (int s = 0; s < 2; s++) {
        cdx_kv_free(&kw[s]);
        cdx_kv_free(&k0[s]);
        cdx_kv_free(&k1[s]);
    }
    free(lw);
    free(lp[0]);
    free(lp[1]);
    for (int i = 0; i < LINE_Q; i++)
        free(ln.out[i]);
    cdx_forward_ctx_free(ln.later);
    cdx_forward_ctx_free(first);
    cdx_forward_ctx_free(whole);
    cdx_model_close(m);
}

static void model_slice(void)
{
    cdx_model *whole = NULL, *a = NULL, *b = NULL, *bad = NULL;
    const char *path = "models/stories260K.gguf";
    REQUIRE(cdx_model_open(path, NULL, &whole, &err) == CDX_OK);
    const int64_t L = cdx_model_hparams(whole)->n_layer;
    REQUIRE(cdx_model_open(path, &(cdx_model_opts){ .layer0 = 0, .layer1 = 2 }, &a, &err) == CDX_OK);
    REQUIRE(cdx_model_open(path, &(cdx_model_opts){ .layer0 = 2, .layer1 = L }, &b, &err) == CDX_OK);
    /* each slice holds its layers' matrices, the head with the first: together the whole */
    const size_t w = cdx_model_weight_bytes(whole), wa = cdx_model_weight_bytes(a), wb = cdx_model_weight_bytes(b);
    CHECKF(wa < w && wb < w && wa + wb == w, "whole %zu, slices %zu + %zu", w, wa, wb);
    uint8_t f0[32], f1[32], f2[32];
    cdx_model_fingerprint(whole, f0);
    cdx_model_fingerprint(a, f1);
    cdx_model_fingerprint(b, f2);
    CHECK(!memcmp(f0, f1, 32) && !memcmp(f0, f2, 32)); /* one model, whatever the slice */
    CHECK(cdx_model_open(path, &(cdx_model_opts){ .layer0 = 3, .layer1 = L + 1 }, &bad, &err) == CDX_EINVAL);
    CHECK(strstr(err.msg, "are not a slice of") != NULL);
    cdx_model_close(bad);
    bad = NULL;
    CHECK(cdx_model_open(path, &(cdx_model_opts){ .layer0 = 1, .layer1 = 2, .weight_budget = 1 << 30 }, &bad, &err) ==
          CDX_EUNSUPPORTED);
    cdx_model_close(bad);
    cdx_model_close(a);
    cdx_model_close(b);
    cdx_model_close(whole);
}

int main(void)
{
    RUN("--split-layers: one range per rank, in order, covering every layer", parse_good);
    RUN("--split-layers refusals name the range: overlap, gap, missing layer, part of a layer, count", parse_refusals);
    RUN("slices in proportion to memory, one layer each at least; more ranks than layers refused", plan);
    RUN("slices within each rank's memory; whole when rank 0 holds it; refusals with both numbers", fit);
    RUN("a forward context's stage: range checks, hidden rows in, whole again", stage_range);
    RUN("a model opened as a slice sizes its own layers (and the head with the first), same fingerprint", model_slice);
    RUN("two batches in flight through a first stage (cdx_forward_begin/end): the logits bits of whole", two_in_flight);
    return t_done("split_plan");
}
