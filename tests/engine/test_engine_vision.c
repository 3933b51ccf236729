/* Images through the engine (../shared/fixtures/hf/idefics3, PyTorch goldens): each case from its
 * PNGs, alone and all together in one batch (the same float bits), the same request again with its
 * image blocks from the prefix cache and without encoding the image again (same bits), the same
 * prompt ids with another image (blocks not shared, different logits), and the vision tower's
 * output against the reference's recorded features. */
#include "caldrix.h"
#include "test.h"

#include <jansson.h>

#define FIX "../shared/fixtures/hf/idefics3"
#define NGEN 16

typedef struct {
    int32_t tok[NGEN];
    float top[NGEN][5];
    int32_t top_id[NGEN][5];
    int n, finals;
    int64_t cached;
    cdx_finish fin;
} result;

static json_t *g_gold;
static cdx_model *g_m;

static void on_event(const cdx_event *ev)
{
    result *r = ev->user;
    if (ev->finish != CDX_FINISH_NONE) {
        r->fin = ev->finish;
        r->finals++;
        r->cached = ev->n_cached;
        return;
    }
    if (r->n >= NGEN)
        return;
    r->tok[r->n] = ev->token;
    for (int k = 0; k < 5 && k < ev->n_top; k++) {
        r->top[r->n][k] = ev->top_logits[k];
        r->top_id[r->n][k] = ev->top_ids[k];
    }
    r->n++;
}

typedef struct {
    int32_t ids[128];
    int64_t n;
    cdx_image_tiles tiles[4];
    cdx_request_image req[4];
    int n_img;
} prepared;

static int prepare(json_t *c, const char *const *override_imgs, prepared *p, cdx_err *e)
{
    memset(p, 0, sizeof *p);
    json_t *ids = json_object_get(c, "prompt_ids"), *imgs = json_object_get(c, "images");
    p->n = (int64_t)json_array_size(ids);
    for (int64_t i = 0; i < p->n; i++)
        p->ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    cdx_image_proc pp;
    int rc = cdx_image_proc_read(FIX, &pp, e);
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(c, "processor_kwargs"), k, v) {
        char *s = json_dumps(v, JSON_ENCODE_ANY);
        if (!rc)
            rc = cdx_image_proc_set(&pp, k, s, e);
        free(s);
    }
    for (size_t i = 0; !rc && i < json_array_size(imgs); i++) {
        char path[512];
        snprintf(path, sizeof path, FIX "/%s", override_imgs ? override_imgs[i] : json_string_value(json_array_get(imgs, i)));
        cdx_image im;
        if ((rc = cdx_image_load(path, &im, e)))
            break;
        rc = cdx_image_preprocess(&pp, &im, &p->tiles[i], e);
        cdx_image_free(&im);
        p->req[i] = (cdx_request_image){ p->tiles[i].pixels, p->tiles[i].n_tiles };
        p->n_img = (int)i + 1;
    }
    return rc;
}

static void unprepare(prepared *p)
{
    for (int i = 0; i < p->n_img; i++)
        cdx_image_tiles_free(&p->tiles[i]);
}

static int submit(cdx_engine *e, prepared *p, result *r, cdx_err *err)
{
    memset(r, 0, sizeof *r);
    cdx_request rq = cdx_request_defaults();
    rq.prompt = p->ids;
    rq.n_prompt = p->n;
    rq.max_tokens = NGEN;
    rq.ignore_eos = true;
    rq.sampling.temp = 0;
    rq.top_logprobs = 5;
    rq.on_event = on_event;
    rq.user = r;
    rq.images = p->req;
    rq.n_images = p->n_img;
    uint64_t id;
    return cdx_engine_submit(e, &rq, &id, err);
}

static int drain(cdx_engine *e, cdx_err *err)
{
    while (cdx_engine_busy(e))
        if (cdx_engine_step(e, err))
            return -1;
    return 0;
}

/* tokens exact, every golden top-5 logit within 1e-3 */
static double check_golden(json_t *c, const result *r)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    json_t *toks = json_object_get(c, "tokens"), *steps = json_object_get(c, "steps");
    CHECKF(r->n == NGEN && r->fin == CDX_FINISH_LENGTH && r->finals == 1, "%s: %d tokens, finish %d", name, r->n, r->fin);
    double worst = 0;
    for (int s = 0; s < r->n && s < NGEN; s++) {
        CHECKF(r->tok[s] == json_integer_value(json_array_get(toks, (size_t)s)), "%s step %d: token %d", name, s, r->tok[s]);
        json_t *top = json_object_get(json_array_get(steps, (size_t)s), "top");
        for (size_t k = 0; k < json_array_size(top); k++) {
            json_t *pair = json_array_get(top, k);
            const int32_t id = (int32_t)json_integer_value(json_array_get(pair, 0));
            double d = 1e9;
            for (int j = 0; j < 5; j++)
                if (r->top_id[s][j] == id)
                    d = fabs(r->top[s][j] - json_number_value(json_array_get(pair, 1)));
            worst = d > worst ? d : worst;
        }
    }
    CHECKF(worst <= 1e-3, "%s: worst top-5 logit error %.3g", name, worst);
    return worst;
}

static bool same_bits(const result *a, const result *b)
{
    return a->n == b->n && !memcmp(a->tok, b->tok, sizeof a->tok) && !memcmp(a->top, b->top, sizeof a->top) &&
           !memcmp(a->top_id, b->top_id, sizeof a->top_id);
}

static cdx_engine *engine(cdx_err *err)
{
    cdx_engine_opts o = cdx_engine_defaults();
    o.n_threads = 2;
    o.n_ctx = 256;
    cdx_engine *e = NULL;
    return cdx_engine_create(g_m, NULL, &o, &e, err) ? NULL : e;
}

static void every_case_alone_and_batched_matches_the_golden(void)
{
    cdx_err err = {0};
    json_t *cases = json_object_get(g_gold, "cases");
    const size_t nc = json_array_size(cases);
    REQUIRE(nc == 4);
    prepared p[4];
    result alone[4], together[4];
    for (size_t i = 0; i < nc; i++)
        REQUIRE(prepare(json_array_get(cases, i), NULL, &p[i], &err) == 0);
    for (size_t i = 0; i < nc; i++) {
        cdx_engine *e = engine(&err);
        REQUIRE(e);
        CHECKF(submit(e, &p[i], &alone[i], &err) == 0, "%s", err.msg);
        CHECK(drain(e, &err) == 0);
        const double w = check_golden(json_array_get(cases, i), &alone[i]);
        printf("  %s alone: max |logit - golden| = %.2e\n", json_string_value(json_object_get(json_array_get(cases, i), "name")), w);
        cdx_engine_free(e);
    }
    cdx_engine *e = engine(&err);
    REQUIRE(e);
    for (size_t i = 0; i < nc; i++)
        CHECKF(submit(e, &p[i], &together[i], &err) == 0, "%s", err.msg);
    CHECK(drain(e, &err) == 0);
    for (size_t i = 0; i < nc; i++)
        CHECKF(same_bits(&alone[i], &together[i]), "case %zu: batched differs from alone", i);
    cdx_engine_stats st;
    cdx_engine_get_stats(e, &st);
    CHECK(st.image_tiles_encoded == 1 + 5 + 6 && st.blocks_used == 0);
    cdx_engine_free(e);
    for (size_t i = 0; i < nc; i++)
        unprepare(&p[i]);
}

static void a_cached_image_is_not_encoded_again_and_another_image_shares_no_block(void)
{
    cdx_err err = {0};
    json_t *c = json_array_get(json_object_get(g_gold, "cases"), 1); /* image_split_2x2: 46 ids */
    prepared p, q;
    REQUIRE(prepare(c, NULL, &p, &err) == 0);
    /* the same prompt ids with another image of the same grid: img_b with one pixel value moved by
     * 0.1 (the fixture's sensitivity "pixel_0_0_0_0_plus_0.1": step-0 logits move by 0.0065) */
    REQUIRE(prepare(c, NULL, &q, &err) == 0);
    q.tiles[0].pixels[0] += 0.1f;
    cdx_engine *e = engine(&err);
    REQUIRE(e);
    result a, b, d;
    REQUIRE(submit(e, &p, &a, &err) == 0 && drain(e, &err) == 0);
    cdx_engine_stats s1, s2, s3;
    cdx_engine_get_stats(e, &s1);
    CHECK(s1.image_tiles_encoded == 5);
    REQUIRE(submit(e, &p, &b, &err) == 0 && drain(e, &err) == 0);
    cdx_engine_get_stats(e, &s2);
    /* 46 prompt tokens: blocks 0 and 1 (32 positions, image tokens from position 6 on) come from the cache */
    CHECKF(b.cached == 32, "cached %lld", (long long)b.cached);
    CHECKF(s2.image_tiles_encoded == 5, "the image was encoded again (%llu tiles)", (unsigned long long)s2.image_tiles_encoded);
    CHECK(same_bits(&a, &b));
    check_golden(c, &b);
    REQUIRE(submit(e, &q, &d, &err) == 0 && drain(e, &err) == 0);
    cdx_engine_get_stats(e, &s3);
    CHECKF(d.cached == 0, "another image shared %lld cached positions", (long long)d.cached);
    CHECK(s3.image_tiles_encoded == 10);
    bool differ = false;
    for (int k = 0; k < 5; k++)
        differ |= d.top[0][k] != a.top[0][k];
    CHECK(differ);
    /* a count that does not match is refused with both numbers */
    cdx_request rq = cdx_request_defaults();
    rq.prompt = p.ids;
    rq.n_prompt = p.n;
    rq.images = p.req;
    rq.n_images = 0;
    uint64_t id;
    CHECK(cdx_engine_submit(e, &rq, &id, &err) == CDX_EINVAL && strstr(err.msg, "20 image tokens"));
    cdx_engine_free(e);
    unprepare(&p);
    unprepare(&q);
}

/* The tower + connector alone against the reference's debug record (sum and first values of tile 0). */
static void vision_features_match_the_reference_record(void)
{
    cdx_err err = {0};
    cdx_forward_ctx *fc = NULL;
    REQUIRE(cdx_forward_ctx_create(g_m, 16, 2, NULL, &fc, &err) == 0);
    cdx_vision_info vi;
    REQUIRE(cdx_model_vision(g_m, &vi) && vi.tokens_per_tile == 4 && vi.n_embd == 64 && vi.image_token_id == 310);
    size_t ci;
    json_t *c;
    int n = 0;
    json_array_foreach(json_object_get(g_gold, "cases"), ci, c) {
        json_t *dbg = json_object_get(json_object_get(c, "debug"), "image_features");
        if (!dbg)
            continue;
        prepared p;
        REQUIRE(prepare(c, NULL, &p, &err) == 0);
        int64_t tiles = 0;
        for (int i = 0; i < p.n_img; i++)
            tiles += p.tiles[i].n_tiles;
        float *feat = malloc((size_t)(tiles * 4 * 64) * sizeof *feat);
        int64_t row = 0;
        for (int i = 0; i < p.n_img; i++) {
            CHECKF(cdx_vision_encode(fc, p.tiles[i].pixels, p.tiles[i].n_tiles, feat + row * 64, &err) == 0, "%s", err.msg);
            row += p.tiles[i].n_tiles * 4;
        }
        double sum = 0, worst = 0;
        for (int64_t i = 0; i < tiles * 4 * 64; i++)
            sum += feat[i];
        json_t *f8 = json_object_get(dbg, "tile0_token0_first8");
        for (size_t i = 0; i < 8; i++)
            worst = fmax(worst, fabs(feat[i] - json_number_value(json_array_get(f8, i))));
        CHECKF(worst < 1e-4, "%s: first values off by %.3g", json_string_value(json_object_get(c, "name")), worst);
        CHECK_NEAR(sum, json_number_value(json_object_get(dbg, "sum")), 1e-3);
        /* one tile at a time gives the same bits as all of an image's tiles together */
        float *one = malloc((size_t)(4 * 64) * sizeof *one);
        int64_t t_at = 0;
        bool same = true;
        for (int i = 0; i < p.n_img; i++)
            for (int64_t k = 0; k < p.tiles[i].n_tiles; k++, t_at++) {
                REQUIRE(cdx_vision_encode(fc, p.tiles[i].pixels + k * 3 * 64 * 64, 1, one, &err) == 0);
                same &= !memcmp(one, feat + t_at * 4 * 64, (size_t)(4 * 64) * sizeof *one);
            }
        CHECKF(same, "%s: a tile's features depend on the tiles beside it", json_string_value(json_object_get(c, "name")));
        free(one);
        free(feat);
        unprepare(&p);
        n++;
    }
    CHECK(n == 3);
    CHECK(cdx_vision_encode(fc, NULL, 0, NULL, &err) == CDX_EINVAL);
    cdx_forward_ctx_free(fc);
    /* a text model takes no images */
    cdx_model *t = NULL;
    REQUIRE(cdx_model_open("../shared/fixtures/hf/llama", NULL, &t, &err) == 0);
    CHECK(!cdx_model_vision(t, NULL));
    cdx_model_close(t);
}

int main(void)
{
    json_error_t je;
    cdx_err err = {0};
    g_gold = json_load_file(FIX "/golden.json", 0, &je);
    if (!g_gold || cdx_model_open(FIX, NULL, &g_m, &err)) {
        fprintf(stderr, "cannot open " FIX ": %s %s\n", je.text, err.msg);
        printf("engine_vision: 0 passed, 1 failed\n");
        return 1;
    }
    RUN("every idefics3 case alone and batched matches the PyTorch golden", every_case_alone_and_batched_matches_the_golden);
    RUN("a cached image is not encoded again; another image shares no image block",
        a_cached_image_is_not_encoded_again_and_another_image_shares_no_block);
    RUN("the vision tower's features match the reference's record", vision_features_match_the_reference_record);
    cdx_model_close(g_m);
    json_decref(g_gold);
    return t_done("engine_vision");
}
