/* Embedding models against ../shared/fixtures/embed (float32 PyTorch goldens of transformers'
 * BertModel / XLMRobertaModel + sentence-transformers' Pooling and Normalize): token ids from the text
 * (BERT), every vector within README.md's tolerance (normalized: 1e-4 per component; raw: 1e-4·max(1, ‖v‖)),
 * alone and in one batch of all inputs, on every kernel set this CPU has; and in caldrix the batched
 * vector is the same bits as the one alone, whatever the thread count. Then the bad inputs the issue
 * lists: an id outside the vocabulary, an empty input, too long an input, a module caldrix does not
 * implement. */
#include "caldrix.h"
#include "test.h"

#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX SHARED "/fixtures/embed/"

static const char *const k_isas[] = { "scalar", "avx2", "avx512" };

static int32_t *ids_of(json_t *a, int64_t *n)
{
    *n = (int64_t)json_array_size(a);
    int32_t *ids = malloc((size_t)(*n ? *n : 1) * sizeof *ids);
    for (int64_t i = 0; i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return ids;
}

/* max |got - want| over the vector, and the golden's L2 norm */
static double diff(const float *got, json_t *want, int64_t D, double *norm)
{
    double d = 0, ss = 0;
    for (int64_t c = 0; c < D; c++) {
        double w = json_number_value(json_array_get(want, (size_t)c));
        ss += w * w;
        double e = fabs(got[c] - w);
        d = e > d ? e : d;
    }
    *norm = sqrt(ss);
    return d;
}

/* One fixture: from_text (BERT: ids from the golden texts through the pipeline's tokenizer) or the
 * golden's input_ids. */
static void check_fixture(const char *name, bool from_text)
{
    char dir[256];
    snprintf(dir, sizeof dir, FIX "%s", name);
    char gp[300];
    snprintf(gp, sizeof gp, "%s/golden.json", dir);
    json_error_t je;
    json_t *g = json_load_file(gp, 0, &je);
    REQUIRE(g);
    cdx_err err = { 0 };
    cdx_model *m = NULL;
    cdx_tok *tok = NULL;
    cdx_st_pipeline p;
    REQUIRE(cdx_model_open(dir, NULL, &m, &err) == 0);
    CHECKF(cdx_model_is_encoder(m), "%s", name);
    CHECK(cdx_st_pipeline_read(dir, &p, &err) == 0);
    if (from_text)
        CHECKF(cdx_tok_open_dir(dir, &tok, &err) == 0, "%s", err.msg);
    json_t *inputs = json_object_get(g, "inputs");
    const int n = (int)json_array_size(inputs);
    const int64_t D = cdx_model_hparams(m)->n_embd;
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int64_t *lens = calloc((size_t)n, sizeof *lens);
    float *alone = malloc((size_t)(n * D) * sizeof *alone), *batch = malloc((size_t)(n * D) * sizeof *batch),
          *other = malloc((size_t)(n * D) * sizeof *other);
    bool normalized = json_is_true(json_object_get(json_object_get(g, "pipeline"), "normalize"));
    int n_sets = 0;
    for (size_t s = 0; s < sizeof k_isas / sizeof k_isas[0]; s++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[s]);
        if (!k) {
            t_skip_isa(k_isas[s]);
            continue;
        }
        n_sets++;
        cdx_embedder *e = NULL;
        cdx_embedder_opts eo = { .n_threads = 2, .kernels = k };
        REQUIRE(cdx_embedder_open(m, tok, &p, &eo, &e, &err) == 0);
        CHECK(cdx_embedder_dim(e) == D);
        for (int i = 0; i < n; i++) {
            json_t *in = json_array_get(inputs, (size_t)i);
            int64_t nw;
            int32_t *want = ids_of(json_object_get(in, "input_ids"), &nw);
            free(ids[i]);
            if (from_text) {
                const char *text = json_string_value(json_object_get(in, "text"));
                int32_t buf[4096];
                size_t got = 0, full = 0;
                CHECKF(cdx_embed_tokenize(e, text, strlen(text), buf, 4096, &got, &full, &err) == 0, "%s", err.msg);
                CHECKF((int64_t)got == nw && !memcmp(buf, want, (size_t)nw * sizeof *want), "%s input %d: ids", name, i);
                CHECKF((int64_t)full == json_integer_value(json_object_get(in, "untruncated_token_count")),
                       "%s input %d: %zu tokens before truncation", name, i, full);
            }
            ids[i] = want;
            lens[i] = nw;
            CHECKF(cdx_embed_ids(e, (const int32_t *const *)&ids[i], &lens[i], 1, alone + i * D, &err) == 0, "%s",
                   err.msg);
            double norm, d = diff(alone + i * D, json_object_get(in, "embedding"), D, &norm);
            double tol = normalized ? 1e-4 : 1e-4 * (norm > 1 ? norm : 1);
            CHECKF(d <= tol, "%s [%s] input %s: max abs diff %.3g (tol %.3g)", name, k_isas[s],
                   json_string_value(json_object_get(in, "name")), d, tol);
        }
        CHECK(cdx_embed_ids(e, (const int32_t *const *)ids, lens, n, batch, &err) == 0);
        for (int i = 0; i < n; i++) {
            double norm, d = diff(batch + i * D, json_object_get(json_array_get(inputs, (size_t)i), "batched_embedding"),
                                  D, &norm);
            CHECKF(d <= (normalized ? 1e-4 : 1e-4 * (norm > 1 ? norm : 1)), "%s [%s] batched %d: %.3g", name, k_isas[s],
                   i, d);
        }
        CHECKF(!memcmp(alone, batch, (size_t)(n * D) * sizeof *alone), "%s [%s]: batched vectors differ from alone",
               name, k_isas[s]);
        /* the texts through cdx_embed_texts give the same bits */
        if (from_text) {
            const char **texts = calloc((size_t)n, sizeof *texts);
            for (int i = 0; i < n; i++)
                texts[i] = json_string_value(json_object_get(json_array_get(inputs, (size_t)i), "text"));
            int64_t nt[64];
            CHECK(cdx_embed_texts(e, texts, n, other, nt, &err) == 0);
            CHECKF(!memcmp(alone, other, (size_t)(n * D) * sizeof *alone), "%s [%s]: texts differ from ids", name,
                   k_isas[s]);
            free(texts);
        }
        cdx_embedder_close(e);
        /* other thread counts, reversed order: the same bits */
        eo.n_threads = 3;
        REQUIRE(cdx_embedder_open(m, tok, &p, &eo, &e, &err) == 0);
        for (int i = 0; i < n / 2; i++) {
            int32_t *t = ids[i];
            ids[i] = ids[n - 1 - i];
            ids[n - 1 - i] = t;
            int64_t l = lens[i];
            lens[i] = lens[n - 1 - i];
            lens[n - 1 - i] = l;
        }
        CHECK(cdx_embed_ids(e, (const int32_t *const *)ids, lens, n, other, &err) == 0);
        for (int i = 0; i < n; i++)
            CHECKF(!memcmp(alone + i * D, other + (n - 1 - i) * D, (size_t)D * sizeof *alone),
                   "%s [%s]: input %d differs on 3 threads in reversed order", name, k_isas[s], i);
        cdx_embedder_close(e);
    }
    CHECK(n_sets >= 1);
    for (int i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(lens);
    free(alone);
    free(batch);
    free(other);
    cdx_tok_close(tok);
    cdx_model_close(m);
    json_decref(g);
}

static void bert_cls_matches_the_goldens(void) { check_fixture("bert_cls", true); }
static void bert_mean_matches_the_goldens(void) { check_fixture("bert_mean", true); }
static void xlmr_cls_matches_the_goldens(void) { check_fixture("xlmr_cls", false); }

/* Qwen3-Embedding (qwen3_embed: no "model." prefix, no lm_head; last-token pooling over the appended
 * EOS, Normalize) from the golden ids; a token budget of 7 makes every input run in chunks and
 * interleave with the others: the same bits. */
static void qwen3_embed_matches_the_goldens(void)
{
    json_error_t je;
    json_t *g = json_load_file(FIX "qwen3_embed/golden.json", 0, &je);
    REQUIRE(g);
    cdx_err err = { 0 };
    cdx_model *m = NULL;
    cdx_st_pipeline p;
    REQUIRE(cdx_model_open(FIX "qwen3_embed", NULL, &m, &err) == 0);
    REQUIRE(cdx_st_pipeline_read(FIX "qwen3_embed", &p, &err) == 0);
    CHECK(p.pooling == CDX_POOL_LAST && p.normalize && cdx_task_declared(m, &p) == CDX_TASK_EMBED);
    CHECK(cdx_st_pipeline_prompt(&p, "query") && strstr(cdx_st_pipeline_prompt(&p, "query"), "Instruct: "));
    json_t *inputs = json_object_get(g, "inputs");
    const int n = (int)json_array_size(inputs);
    const int64_t D = cdx_model_hparams(m)->n_embd;
    int32_t *ids[16];
    int64_t lens[16];
    REQUIRE(n <= 16);
    for (int i = 0; i < n; i++)
        ids[i] = ids_of(json_object_get(json_array_get(inputs, (size_t)i), "input_ids"), &lens[i]);
    float *alone = malloc((size_t)(n * D) * sizeof *alone), *batch = malloc((size_t)(n * D) * sizeof *batch);
    for (size_t s = 0; s < sizeof k_isas / sizeof k_isas[0]; s++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[s]);
        if (!k) {
            t_skip_isa(k_isas[s]);
            continue;
        }
        cdx_embedder *e = NULL;
        cdx_embedder_opts eo = { .n_threads = 2, .kernels = k };
        REQUIRE(cdx_embedder_open(m, NULL, &p, &eo, &e, &err) == 0);
        for (int i = 0; i < n; i++) {
            CHECKF(cdx_embed_ids(e, (const int32_t *const *)&ids[i], &lens[i], 1, alone + i * D, &err) == 0, "%s", err.msg);
            double norm, d = diff(alone + i * D, json_object_get(json_array_get(inputs, (size_t)i), "embedding"), D, &norm);
            CHECKF(d <= 1e-4, "qwen3_embed [%s] input %d: %.3g", k_isas[s], i, d);
        }
        CHECK(cdx_embed_ids(e, (const int32_t *const *)ids, lens, n, batch, &err) == 0);
        CHECKF(!memcmp(alone, batch, (size_t)(n * D) * sizeof *alone), "qwen3_embed [%s]: batched differs", k_isas[s]);
        cdx_embedder_close(e);
        eo.token_budget = 7;
        eo.n_threads = 3;
        REQUIRE(cdx_embedder_open(m, NULL, &p, &eo, &e, &err) == 0);
        CHECK(cdx_embed_ids(e, (const int32_t *const *)ids, lens, n, batch, &err) == 0);
        CHECKF(!memcmp(alone, batch, (size_t)(n * D) * sizeof *alone), "qwen3_embed [%s]: chunked by 7 differs",
               k_isas[s]);
        cdx_embedder_close(e);
    }
    for (int i = 0; i < n; i++)
        free(ids[i]);
    free(alone);
    free(batch);
    cdx_model_close(m);
    json_decref(g);
}

/* Qwen3-Reranker (qwen3_rerank): each formatted pair's score within 1e-4 and its yes/no logits within
 * 1e-3, the ranking exact, alone and batched (the same bits). */
static void qwen3_rerank_matches_the_goldens(void)
{
    json_error_t je;
    json_t *g = json_load_file(FIX "qwen3_rerank/golden.json", 0, &je);
    REQUIRE(g);
    cdx_err err = { 0 };
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(FIX "qwen3_rerank", NULL, &m, &err) == 0);
    CHECK(cdx_task_declared(m, NULL) == CDX_TASK_GENERATE);
    json_t *docs = json_object_get(g, "documents");
    const int n = (int)json_array_size(docs);
    int32_t *ids[16];
    int64_t lens[16];
    REQUIRE(n <= 16);
    for (int i = 0; i < n; i++)
        ids[i] = ids_of(json_object_get(json_array_get(docs, (size_t)i), "input_ids"), &lens[i]);
    float sa[16], sb[16], la[32], lb[32];
    for (size_t s = 0; s < sizeof k_isas / sizeof k_isas[0]; s++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[s]);
        if (!k) {
            t_skip_isa(k_isas[s]);
            continue;
        }
        cdx_embedder *e = NULL;
        cdx_embedder_opts eo = { .n_threads = 2, .kernels = k, .task = CDX_TASK_RERANK,
                                 .yes_id = (int32_t)json_integer_value(json_object_get(g, "yes_token_id")),
                                 .no_id = (int32_t)json_integer_value(json_object_get(g, "no_token_id")) };
        REQUIRE(cdx_embedder_open(m, NULL, NULL, &eo, &e, &err) == 0);
        for (int i = 0; i < n; i++) {
            json_t *d = json_array_get(docs, (size_t)i);
            CHECKF(cdx_rerank_ids(e, (const int32_t *const *)&ids[i], &lens[i], 1, &sa[i], &la[2 * i], &err) == 0, "%s",
                   err.msg);
            CHECK_NEAR(sa[i], json_number_value(json_object_get(d, "score")), 1e-4);
            CHECK_NEAR(la[2 * i], json_number_value(json_object_get(d, "logit_yes")), 1e-3);
            CHECK_NEAR(la[2 * i + 1], json_number_value(json_object_get(d, "logit_no")), 1e-3);
        }
        CHECK(cdx_rerank_ids(e, (const int32_t *const *)ids, lens, n, sb, lb, &err) == 0);
        CHECKF(!memcmp(sa, sb, (size_t)n * sizeof *sa) && !memcmp(la, lb, (size_t)n * 2 * sizeof *la),
               "qwen3_rerank [%s]: batched differs", k_isas[s]);
        /* the ranking, by name */
        json_t *rank = json_object_get(g, "ranking_by_score");
        bool used[16] = { 0 };
        for (size_t r = 0; r < json_array_size(rank); r++) {
            int best = -1;
            for (int i = 0; i < n; i++)
                if (!used[i] && (best < 0 || sa[i] > sa[best]))
                    best = i;
            used[best] = true;
            CHECKF(!strcmp(json_string_value(json_object_get(json_array_get(docs, (size_t)best), "name")),
                           json_string_value(json_array_get(rank, r))), "rank %zu", r);
        }
        float v[64];
        CHECK(cdx_embed_ids(e, (const int32_t *const *)ids, lens, 1, v, &err) == CDX_EINVAL && strstr(err.msg, "rerank"));
        cdx_embedder_close(e);
    }
    /* no answer ids and no tokenizer: refused */
    cdx_embedder *e = NULL;
    cdx_embedder_opts eo = { .task = CDX_TASK_RERANK };
    CHECK(cdx_embedder_open(m, NULL, NULL, &eo, &e, &err) == CDX_EINVAL && strstr(err.msg, "yes"));
    for (int i = 0; i < n; i++)
        free(ids[i]);
    cdx_model_close(m);
    json_decref(g);
}

/* Rerank from text: the query and a document through the real Qwen3 tokenizer and the model card's
 * template (format_instruction, process_inputs) give the ids the Rust tokenizers give
 * (golden.json's real_qwen3_tokenizer_example: prefix + middle + suffix); the tiny model only lends its
 * positions (128: no truncation of these 85 tokens), and a document long enough to pass them keeps the
 * prefix and suffix whole and cuts the middle from the right. */
static void rerank_text_is_formatted_as_the_model_card(void)
{
    json_error_t je;
    json_t *g = json_load_file(FIX "qwen3_rerank/golden.json", 0, &je);
    REQUIRE(g);
    json_t *ex = json_object_get(g, "real_qwen3_tokenizer_example");
    cdx_err err = { 0 };
    cdx_model *m = NULL;
    cdx_tok *tok = NULL;
    REQUIRE(cdx_model_open(FIX "qwen3_rerank", NULL, &m, &err) == 0);
    REQUIRE(cdx_tok_open_dir(SHARED "/fixtures/tokenizers/qwen3", &tok, &err) == 0);
    cdx_embedder *e = NULL;
    cdx_embedder_opts eo = { .n_threads = 1, .task = CDX_TASK_RERANK, .yes_id = 269, .no_id = 104 };
    REQUIRE(cdx_embedder_open(m, tok, NULL, &eo, &e, &err) == 0);
    int64_t np, nm, ns;
    int32_t *pre = ids_of(json_object_get(ex, "prefix_ids"), &np), *mid = ids_of(json_object_get(ex, "middle_ids"), &nm),
            *suf = ids_of(json_object_get(ex, "suffix_ids"), &ns);
    int32_t *ids = NULL;
    int64_t n = 0, n_full = 0;
    CHECKF(cdx_rerank_format(e, "What is the capital of China?", "The capital of China is Beijing.", NULL, &ids, &n,
                             &n_full, &err) == 0, "%s", err.msg);
    CHECKF(n == np + nm + ns && n_full == n, "%lld ids (%lld before truncation); the Rust tokenizers give %lld",
           (long long)n, (long long)n_full, (long long)(np + nm + ns));
    bool same = n == np + nm + ns && !memcmp(ids, pre, (size_t)np * sizeof *ids) &&
                !memcmp(ids + np, mid, (size_t)nm * sizeof *ids) && !memcmp(ids + np + nm, suf, (size_t)ns * sizeof *ids);
    CHECKF(same, "the formatted pair differs from the Rust tokenizers' prefix + middle + suffix");
    free(ids);
    /* a long document: prefix and suffix whole, the middle cut from the right to the positions left */
    char doc[4096] = "The capital of China is Beijing.";
    for (int i = 0; i < 40; i++)
        strcat(doc, " Beijing is large.");
    CHECK(cdx_rerank_format(e, "What is the capital of China?", doc, NULL, &ids, &n, &n_full, &err) == 0);
    const int64_t max = cdx_embedder_max_tokens(e);
    CHECKF(n == max && n_full > max, "%lld ids of %lld (max %lld)", (long long)n, (long long)n_full, (long long)max);
    CHECK(!memcmp(ids, pre, (size_t)np * sizeof *ids) && !memcmp(ids + n - ns, suf, (size_t)ns * sizeof *ids));
    CHECK(!memcmp(ids + np, mid, (size_t)(nm - 8) * sizeof *ids)); /* the middle starts as before */
    free(ids);
    /* an instruction of the caller's own replaces the default */
    CHECK(cdx_rerank_format(e, "q", "d", "Find it", &ids, &n, NULL, &err) == 0);
    int32_t *alt = NULL;
    int64_t na = 0;
    CHECK(cdx_rerank_format(e, "q", "d", NULL, &alt, &na, NULL, &err) == 0);
    CHECK(na > n); /* the default instruction is longer than "Find it" */
    free(ids);
    free(alt);
    free(pre);
    free(mid);
    free(suf);
    cdx_embedder_close(e);
    cdx_tok_close(tok);
    cdx_model_close(m);
    json_decref(g);
}

static void bad_inputs_are_refused_by_name(void)
{
    cdx_err err = { 0 };
    cdx_model *m = NULL;
    cdx_st_pipeline p;
    REQUIRE(cdx_model_open(FIX "bert_mean", NULL, &m, &err) == 0);
    REQUIRE(cdx_st_pipeline_read(FIX "bert_mean", &p, &err) == 0);
    CHECK(p.pooling == CDX_POOL_MEAN && !p.normalize && p.max_seq_length == 20);
    cdx_embedder *e = NULL;
    REQUIRE(cdx_embedder_open(m, NULL, &p, NULL, &e, &err) == 0);
    float v[64];
    const int32_t bad[] = { 101, 30522, 102 }, *pb = bad;
    int64_t n = 3;
    CHECK(cdx_embed_ids(e, &pb, &n, 1, v, &err) == CDX_EINVAL && strstr(err.msg, "30522") &&
          strstr(err.msg, "vocabulary"));
    n = 0;
    CHECK(cdx_embed_ids(e, &pb, &n, 1, v, &err) == CDX_EINVAL && strstr(err.msg, "empty"));
    int32_t longer[21] = { 101 };
    const int32_t *pl = longer;
    n = 21;
    CHECK(cdx_embed_ids(e, &pl, &n, 1, v, &err) == CDX_EINVAL && strstr(err.msg, "21 tokens"));
    size_t got;
    CHECK(cdx_embed_tokenize(e, "x", 1, longer, 21, &got, NULL, &err) == CDX_EINVAL && strstr(err.msg, "tokenizer"));
    cdx_embedder_close(e);
    cdx_model_close(m);
    /* a module caldrix does not implement is refused by name */
    char tmp[] = "/tmp/cdx_embed_XXXXXX";
    REQUIRE(mkdtemp(tmp));
    char path[300];
    snprintf(path, sizeof path, "%s/modules.json", tmp);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
          "{\"idx\":1,\"name\":\"1\",\"path\":\"2_Dense\",\"type\":\"sentence_transformers.models.Dense\"}]", f);
    fclose(f);
    CHECK(cdx_st_pipeline_read(tmp, &p, &err) == CDX_EUNSUPPORTED && strstr(err.msg, "sentence_transformers.models.Dense") &&
          strstr(err.msg, "modules.json"));
    unlink(path);
    rmdir(tmp);
    /* a generation pass over an encoder is refused */
    REQUIRE(cdx_model_open(FIX "bert_cls", NULL, &m, &err) == 0);
    cdx_forward_ctx *fc = NULL;
    REQUIRE(cdx_forward_ctx_create(m, 4, 1, NULL, &fc, &err) == 0);
    cdx_kv kv;
    REQUIRE(cdx_kv_init(&kv, cdx_model_hparams(m), 8, &err) == 0);
    cdx_kv *kp = &kv;
    const int32_t t[2] = { 101, 102 };
    cdx_batch b = { .n = 2, .tokens = t };
    float logits[30522];
    CHECK(cdx_forward(fc, &kp, 1, &b, logits, &err) == CDX_EINVAL && strstr(err.msg, "encoder"));
    cdx_kv_free(&kv);
    cdx_forward_ctx_free(fc);
    cdx_model_close(m);
}

int main(void)
{
    RUN("bert_cls (CLS + Normalize, F16) matches the goldens alone and batched", bert_cls_matches_the_goldens);
    RUN("bert_mean (mean pooling, max_seq_length 20) matches the goldens alone and batched", bert_mean_matches_the_goldens);
    RUN("xlmr_cls (XLM-R positions from pad + 1, CLS + Normalize) matches the goldens alone and batched",
        xlmr_cls_matches_the_goldens);
    RUN("qwen3_embed (decoder, last token, EOS appended) matches the goldens, chunked or not", qwen3_embed_matches_the_goldens);
    RUN("qwen3_rerank scores, logits and ranking match the goldens alone and batched", qwen3_rerank_matches_the_goldens);
    RUN("rerank text is formatted as the model card (the real Qwen3 tokenizer's ids)",
        rerank_text_is_formatted_as_the_model_card);
    RUN("bad inputs are refused by name", bad_inputs_are_refused_by_name);
    return t_done("test_embed");
}
