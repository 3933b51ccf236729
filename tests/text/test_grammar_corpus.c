/* The schema corpus (tests/text/data/grammar_schemas.json) through the whole engine: a random-weight
 * model (caldrix synth, tiny layers with Qwen3's and Llama 3's vocabulary sizes, their real
 * tokenizers from ../shared/fixtures/tokenizers) samples at temperature 1 (no top-k/top-p/min-p)
 * with SEEDS seeds per schema on Qwen3 (one on Llama 3), all requests batched together; every
 * output must be complete and validate under the schema with an independent validator (Python's
 * jsonschema, Draft 2020-12, with its format checker: tests/text/validate_json.py). A logit bias
 * (+6) on tokens holding a closing '"', '}' or ']' (or '@', which emails need) and no opening '{'
 * or '[' keeps random strings and containers short; it cannot unmask anything (masked logits are
 * -inf). Then a sample of requests is run again alone: the tokens must be identical (batch
 * invariance of constrained requests). Needs $CALDRIX (tests/run sets it; default build/caldrix)
 * for synth.
 * san-skip: its grammar and engine code runs sanitized in test_grammar(_pure), test_structured.sh, test_engine
 */
#include "caldrix.h"
#include "test.h"

#include <jansson.h>
#include <unistd.h>

#define SEEDS 3
#define MAX_TOKENS 300

typedef struct {
    int schema, seed;
    int32_t toks[MAX_TOKENS + 1];
    int n;
    char text[16384];
    size_t n_text;
    cdx_finish finish;
    char msg[256];
} out_t;

static void on_event(const cdx_event *ev)
{
    out_t *o = ev->user;
    if (ev->finish != CDX_FINISH_NONE) {
        static int done;
        if (++done % 10 == 0)
            fprintf(stderr, "  %d requests done\n", done);
        o->finish = ev->finish;
        if (ev->message)
            snprintf(o->msg, sizeof o->msg, "%s", ev->message);
    } else if (o->n < MAX_TOKENS) {
        o->toks[o->n++] = ev->token;
    }
    if (ev->text_len && o->n_text + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->n_text, ev->text, ev->text_len);
        o->n_text += ev->text_len;
    }
}

static const char *caldrix_bin(void)
{
    const char *c = getenv("CALDRIX");
    return c && *c ? c : "build/caldrix";
}

/* Writes a random-weight checkpoint of `shape` with the tokenizer of fixtures/tokenizers/`tk`. */
static bool make_model(const char *dir, const char *shape, const char *tk)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' synth --safetensors '%s' --shape %s --type BF16 >/dev/null 2>&1 && "
             "cp ../shared/fixtures/tokenizers/%s/tokenizer.json ../shared/fixtures/tokenizers/%s/tokenizer_config.json '%s'/",
             caldrix_bin(), dir, shape, tk, tk, dir);
    return system(cmd) == 0;
}

typedef struct {
    cdx_grammar **g;
    int n;
    json_t *schemas;
} corpus;

static int run_requests(cdx_engine *e, const int32_t *prompt, int64_t n_prompt, const cdx_logit_bias *bias, int n_bias,
                        const corpus *c, out_t *outs, int n_outs)
{
    cdx_err err = { 0 };
    int next = 0, rc = 0;
    while (next < n_outs || cdx_engine_busy(e)) {
        cdx_engine_stats st;
        cdx_engine_get_stats(e, &st);
        while (next < n_outs && st.waiting < 4) {
            out_t *o = &outs[next++];
            cdx_request r = cdx_request_defaults();
            r.prompt = prompt;
            r.n_prompt = n_prompt;
            r.max_tokens = MAX_TOKENS;
            r.sampling.temp = 1.0f;
            r.sampling.top_k = 0;
            r.sampling.top_p = 1.0f;
            r.sampling.min_p = 0.0f;
            r.sampling.seed = (uint64_t)o->seed;
            r.sampling.bias = bias;
            r.sampling.n_bias = n_bias;
            r.grammar = c->g[o->schema];
            r.on_event = on_event;
            r.user = o;
            uint64_t id;
            if ((rc = cdx_engine_submit(e, &r, &id, &err))) {
                fprintf(stderr, "  submit: %s\n", err.msg);
                return rc;
            }
            st.waiting++;
        }
        if ((rc = cdx_engine_step(e, &err))) {
            fprintf(stderr, "  step: %s\n", err.msg);
            return rc;
        }
    }
    return 0;
}

static void run_vocab(const char *shape, const char *tk, const corpus *c, int seeds, const char *label)
{
    char dir[] = "/tmp/cdx-grammar-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char mdir[600];
    snprintf(mdir, sizeof mdir, "%s/model", dir);
    REQUIRE(make_model(mdir, shape, tk));
    cdx_err err = { 0 };
    cdx_model *m = NULL;
    cdx_tok *tok = NULL;
    cdx_engine *e = NULL;
    REQUIRE(cdx_model_open(mdir, NULL, &m, &err) == 0);
    REQUIRE(cdx_tok_open_dir(mdir, &tok, &err) == 0);
    cdx_engine_opts eo = cdx_engine_defaults();
    eo.n_ctx = 1024;
    eo.max_batch = 8;
    eo.n_threads = 2;
    REQUIRE(cdx_engine_create(m, tok, &eo, &e, &err) == 0);
    int32_t prompt[16];
    size_t n_prompt = 0;
    REQUIRE(cdx_tok_encode(tok, "JSON:", 5, true, true, prompt, 16, &n_prompt, &err) == 0 && n_prompt > 0);
    /* the bias toward closing characters */
    const int64_t nv = cdx_model_hparams(m)->n_vocab;
    cdx_logit_bias *bias = malloc((size_t)nv * sizeof *bias);
    int n_bias = 0;
    for (int64_t i = 0; i < nv && i < cdx_tok_n_vocab(tok); i++) {
        char p[256];
        int k = cdx_tok_piece(tok, (int32_t)i, false, false, p, sizeof p);
        if (k > 0 && !memchr(p, '{', (size_t)k) && !memchr(p, '[', (size_t)k) &&
            (memchr(p, '"', (size_t)k) || memchr(p, '}', (size_t)k) || memchr(p, ']', (size_t)k) || memchr(p, '@', (size_t)k)))
            bias[n_bias++] = (cdx_logit_bias){ (int32_t)i, 6.0f };
    }
    const int n_outs = c->n * seeds;
    out_t *outs = calloc((size_t)n_outs, sizeof *outs);
    REQUIRE(outs && bias);
    for (int i = 0; i < n_outs; i++) {
        outs[i].schema = i / seeds;
        outs[i].seed = 1 + i % seeds;
    }
    double t0 = cdx_time_ms();
    REQUIRE(run_requests(e, prompt, (int64_t)n_prompt, bias, n_bias, c, outs, n_outs) == 0);
    int64_t n_tok = 0;
    for (int i = 0; i < n_outs; i++)
        n_tok += outs[i].n;
    printf("  %s: %lld tokens in %.1f s\n", label, (long long)n_tok, (cdx_time_ms() - t0) / 1000);
    /* every output to the validator */
    char path[700];
    snprintf(path, sizeof path, "%s/outputs.jsonl", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    int n_complete = 0;
    for (int i = 0; i < n_outs; i++) {
        json_t *line = json_pack("{s:s, s:O, s:s#, s:s, s:s}", "name",
                                 json_string_value(json_object_get(json_array_get(c->schemas, outs[i].schema), "name")),
                                 "schema", json_object_get(json_array_get(c->schemas, outs[i].schema), "schema"),
                                 "text", outs[i].text, outs[i].n_text, "finish", cdx_finish_name(outs[i].finish),
                                 "message", outs[i].msg);
        char *s = json_dumps(line, JSON_COMPACT);
        fprintf(f, "%s\n", s);
        free(s);
        json_decref(line);
        n_complete += outs[i].finish == CDX_FINISH_STOP;
    }
    fclose(f);
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "python3 tests/text/validate_json.py '%s'", path);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    char buf[4096];
    int valid = -1, total = -1;
    while (fgets(buf, sizeof buf, p)) {
        if (sscanf(buf, "valid %d of %d", &valid, &total) == 2)
            continue;
        fprintf(stderr, "  %s: %s", label, buf);
    }
    int prc = pclose(p);
    printf("  %s: %d outputs (%d schemas x %d seeds), %d complete, %d valid\n", label, n_outs, c->n, seeds,
           n_complete, valid);
    CHECKF(prc == 0 && valid == n_outs && total == n_outs, "%s: %d of %d outputs valid (validator exit %d)", label,
           valid, n_outs, prc);
    /* batch invariance: the first seed of every 8th schema alone */
    int n_alone = 0, same = 0;
    for (int i = 0; i < n_outs; i += seeds * 8) {
        out_t *alone = calloc(1, sizeof *alone);
        alone->schema = outs[i].schema;
        alone->seed = outs[i].seed;
        REQUIRE(run_requests(e, prompt, (int64_t)n_prompt, bias, n_bias, c, alone, 1) == 0);
        n_alone++;
        bool eq = alone->n == outs[i].n && !memcmp(alone->toks, outs[i].toks, (size_t)alone->n * sizeof(int32_t));
        same += eq;
        CHECKF(eq, "%s: schema \"%s\" seed %d: %d tokens alone, %d batched (or different ids)", label,
               json_string_value(json_object_get(json_array_get(c->schemas, alone->schema), "name")), alone->seed,
               alone->n, outs[i].n);
        free(alone);
    }
    printf("  %s: %d of %d requests gave the same tokens alone as batched\n", label, same, n_alone);
    free(outs);
    free(bias);
    cdx_engine_free(e);
    cdx_tok_close(tok);
    cdx_model_close(m);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {
    }
}

static corpus g_corpus;

static void test_corpus_compiles(void)
{
    json_error_t je;
    json_t *root = json_load_file("tests/text/data/grammar_schemas.json", 0, &je);
    REQUIRE(root);
    g_corpus.schemas = json_incref(json_object_get(root, "schemas"));
    json_decref(root);
    g_corpus.n = (int)json_array_size(g_corpus.schemas);
    g_corpus.g = calloc((size_t)g_corpus.n, sizeof *g_corpus.g);
    CHECKF(g_corpus.n >= 60, "%d schemas", g_corpus.n);
    for (int i = 0; i < g_corpus.n; i++) {
        json_t *it = json_array_get(g_corpus.schemas, i);
        char *s = json_dumps(json_object_get(it, "schema"), JSON_COMPACT | JSON_ENCODE_ANY);
        cdx_err err = { 0 };
        int rc = cdx_grammar_from_json_schema(s, strlen(s), json_string_value(json_object_get(it, "name")),
                                              &g_corpus.g[i], &err);
        CHECKF(rc == 0, "%s", err.msg);
        free(s);
    }
}

static void test_qwen3(void)
{
    REQUIRE(g_corpus.n > 0);
    for (int i = 0; i < g_corpus.n; i++)
        REQUIRE(g_corpus.g[i]);
    run_vocab("tiny-qwen3-vocab", "qwen3", &g_corpus, SEEDS, "qwen3 vocabulary");
}

static void test_llama3(void)
{
    REQUIRE(g_corpus.n > 0);
    for (int i = 0; i < g_corpus.n; i++)
        REQUIRE(g_corpus.g[i]);
    run_vocab("tiny-llama3-vocab", "llama3", &g_corpus, 1, "llama3 vocabulary");
}

int main(void)
{
    RUN("every schema of the corpus compiles", test_corpus_compiles);
    RUN("Qwen3 vocabulary: every sampled output is complete and valid; batched = alone", test_qwen3);
    RUN("Llama 3 vocabulary: every sampled output is complete and valid; batched = alone", test_llama3);
    for (int i = 0; i < g_corpus.n; i++)
        cdx_grammar_free(g_corpus.g[i]);
    free(g_corpus.g);
    json_decref(g_corpus.schemas);
    printf("grammar_corpus: %d passed, %d failed\n", t_passed, t_failed);
    return t_failed != 0;
}
