/* Tokenizer tests against outside references only:
 *   fixtures/tokenizers/<name>/golden.jsonl  (Rust tokenizers / transformers ids and decodes)
 *   models/llamacpp-vocab/ggml-vocab-NAME.gguf.inp and .out (llama.cpp's test-tokenizer-0 vectors)
 * plus malformed input and the streaming detokenizer checked against the golden decodes. */
#include "test.h"

#include "caldrix.h"

#include <jansson.h>
#include <pthread.h>

#define TOKS SHARED "/fixtures/tokenizers"
#define VOCAB SHARED "/models/llamacpp-vocab"
#ifndef VOCAB_VECTORS /* where llama.cpp's .inp/.out vectors are; -D to point it elsewhere (a missing one must fail) */
#define VOCAB_VECTORS VOCAB
#endif

/* Tokenizers are opened once per path and shared by the cases (the big tokenizer.json files
 * take a while to parse under ASan); they are closed at the end of main. */
static struct { char path[256]; cdx_tok *t; } g_open[16];

static cdx_tok *open_or_null(const char *path)
{
    for (int i = 0; i < 16; i++)
        if (g_open[i].t && !strcmp(g_open[i].path, path))
            return g_open[i].t;
    cdx_err err = {0};
    cdx_tok *t = NULL;
    if (cdx_tok_open(path, &t, &err) < 0) {
        fprintf(stderr, "  cannot open %s: %s\n", path, err.msg);
        return NULL;
    }
    for (int i = 0; i < 16; i++)
        if (!g_open[i].t) {
            snprintf(g_open[i].path, sizeof g_open[i].path, "%s", path);
            g_open[i].t = t;
            return t;
        }
    return t;
}

static void release(cdx_tok *t)
{
    for (int i = 0; i < 16; i++)
        if (g_open[i].t == t)
            return; /* shared: closed at the end */
    cdx_tok_close(t);
}

static void close_all(void)
{
    for (int i = 0; i < 16; i++)
        cdx_tok_close(g_open[i].t), g_open[i].t = NULL;
}

static int32_t *encode(const cdx_tok *t, const char *s, size_t n, bool add, bool parse, size_t *n_ids)
{
    cdx_err err = {0};
    size_t need = 0;
    if (cdx_tok_encode(t, s, n, add, parse, NULL, 0, &need, &err) < 0) {
        fprintf(stderr, "  encode failed: %s\n", err.msg);
        return NULL;
    }
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    if (cdx_tok_encode(t, s, n, add, parse, ids, need, n_ids, &err) < 0 || *n_ids != need) {
        free(ids);
        return NULL;
    }
    return ids;
}

static char *decode(const cdx_tok *t, const int32_t *ids, size_t n, size_t *len)
{
    cdx_err err = {0};
    size_t need = 0;
    if (cdx_tok_decode(t, ids, n, false, NULL, 0, &need, &err) < 0)
        return NULL;
    char *s = malloc(need + 1);
    if (cdx_tok_decode(t, ids, n, false, s, need + 1, len, &err) < 0) {
        free(s);
        return NULL;
    }
    return s;
}

static bool ids_equal(json_t *want, const int32_t *got, size_t n)
{
    if (!json_is_array(want) || json_array_size(want) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, i)) != got[i])
            return false;
    return true;
}

/* ---- fixtures/tokenizers golden.jsonl ---- */

static void golden(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, TOKS "/%s", name);
    cdx_tok *t = open_or_null(path);
    REQUIRE(t);
    snprintf(path, sizeof path, TOKS "/%s/golden.jsonl", name);
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    char *line = NULL;
    size_t cap = 0, n_lines = 0, ok_ids = 0, ok_dec = 0, ok_stream = 0, n_stream = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o) continue;
        n_lines++;
        json_t *text = json_object_get(o, "text");
        bool add = json_is_true(json_object_get(o, "add_special_tokens"));
        size_t n = 0, dl = 0;
        int32_t *ids = encode(t, json_string_value(text), json_string_length(text), add, true, &n);
        if (ids && ids_equal(json_object_get(o, "ids"), ids, n))
            ok_ids++;
        else if (n_lines - ok_ids <= 3)
            fprintf(stderr, "  %s: ids differ for %.60s\n", name, json_string_value(text));
        /* decode the golden ids (not ours): decode is checked on its own */
        json_t *want_ids = json_object_get(o, "ids");
        size_t wn = json_array_size(want_ids);
        int32_t *w = malloc((wn + 1) * sizeof *w);
        for (size_t i = 0; i < wn; i++)
            w[i] = (int32_t)json_integer_value(json_array_get(want_ids, i));
        char *d = decode(t, w, wn, &dl);
        json_t *wd = json_object_get(o, "decoded");
        if (d && dl == json_string_length(wd) && !memcmp(d, json_string_value(wd), dl))
            ok_dec++;
        else if (n_lines - ok_dec <= 3)
            fprintf(stderr, "  %s: decode differs for %.60s: got \"%.60s\"\n", name, json_string_value(text), d ? d : "(null)");
        /* the streaming detokenizer, token by token, gives the tokenizers decode of a
         * special-free sequence whenever transformers adds no clean-up of its own */
        if (!add && strcmp(name, "bert")) {
            cdx_tok_stream st;
            cdx_tok_stream_init(&st, t, false);
            char buf[1024];
            size_t sl = 0;
            char *acc = malloc(dl * 4 + 64 * (wn + 1));
            for (size_t i = 0; i < wn; i++) {
                int k = cdx_tok_stream_put(&st, w[i], buf, sizeof buf);
                if (k > 0) { memcpy(acc + sl, buf, (size_t)k); sl += (size_t)k; }
            }
            int k = cdx_tok_stream_flush(&st, buf, sizeof buf);
            if (k > 0) { memcpy(acc + sl, buf, (size_t)k); sl += (size_t)k; }
            n_stream++;
            if (sl == json_string_length(wd) && !memcmp(acc, json_string_value(wd), sl))
                ok_stream++;
            else if (n_stream - ok_stream <= 3)
                fprintf(stderr, "  %s: stream differs for %.60s: got \"%.*s\"\n", name, json_string_value(text), (int)(sl > 60 ? 60 : sl), acc);
            free(acc);
        }
        free(w); free(d); free(ids);
        json_decref(o);
    }
    free(line);
    fclose(f);
    printf("  %s: %zu lines, ids %zu ok, decoded %zu ok, stream %zu/%zu ok\n", name, n_lines, ok_ids, ok_dec, ok_stream, n_stream);
    CHECK(n_lines == 374);
    CHECKF(ok_ids == n_lines, "%s ids: %zu of %zu", name, ok_ids, n_lines);
    CHECKF(ok_dec == n_lines, "%s decoded: %zu of %zu", name, ok_dec, n_lines);
    CHECKF(ok_stream == n_stream, "%s stream: %zu of %zu", name, ok_stream, n_stream);
    release(t);
}

static void golden_qwen3(void) { golden("qwen3"); }
static void golden_llama3(void) { golden("llama3"); }
static void golden_smollm2(void) { golden("smollm2"); }
static void golden_mistral(void) { golden("mistral"); }
static void golden_bert(void) { golden("bert"); }

/* ---- llama.cpp vectors ---- */

typedef struct { char **text; size_t *len; char **out; size_t n; } vectors;

static bool read_vectors(const char *name, vectors *v)
{
    char path[512];
    cdx_err err = {0};
    char *inp = NULL, *out = NULL;
    size_t il = 0, ol = 0;
    memset(v, 0, sizeof *v);
    snprintf(path, sizeof path, VOCAB_VECTORS "/ggml-vocab-%s.gguf.inp", name);
    if (cdx_file_read_all(path, 1 << 20, &inp, &il, &err) < 0) { fprintf(stderr, "  %s\n", err.msg); return false; }
    snprintf(path, sizeof path, VOCAB_VECTORS "/ggml-vocab-%s.gguf.out", name);
    if (cdx_file_read_all(path, 1 << 20, &out, &ol, &err) < 0) { fprintf(stderr, "  %s\n", err.msg); free(inp); return false; }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t pos = 0;
    while (pos < il) {
        char *m = memmem(inp + pos, il - pos, sep, sizeof sep - 1);
        if (!m) break;
        v->text = realloc(v->text, (v->n + 1) * sizeof *v->text);
        v->len = realloc(v->len, (v->n + 1) * sizeof *v->len);
        v->len[v->n] = (size_t)(m - (inp + pos));
        v->text[v->n] = malloc(v->len[v->n] + 1);
        memcpy(v->text[v->n], inp + pos, v->len[v->n]);
        v->text[v->n][v->len[v->n]] = 0;
        v->n++;
        pos = (size_t)(m - inp) + sizeof sep - 1;
    }
    v->out = calloc(v->n, sizeof *v->out);
    char *p = out;
    for (size_t i = 0; i < v->n && p && p < out + ol; i++) {
        char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        v->out[i] = malloc(l + 1);
        memcpy(v->out[i], p, l);
        v->out[i][l] = 0;
        p = nl ? nl + 1 : NULL;
    }
    free(inp); free(out);
    return v->n > 0;
}

static void free_vectors(vectors *v)
{
    for (size_t i = 0; i < v->n; i++) { free(v->text[i]); free(v->out[i]); }
    free(v->text); free(v->len); free(v->out);
}

static size_t check_vectors(const cdx_tok *t, const vectors *v, const char *name)
{
    size_t ok = 0;
    for (size_t i = 0; i < v->n; i++) {
        size_t n = 0;
        int32_t *ids = encode(t, v->text[i], v->len[i], false, false, &n);
        bool same = ids && v->out[i];
        const char *p = v->out[i] ? v->out[i] : "";
        size_t k = 0;
        while (same) {
            while (*p == ' ') p++;
            if (!*p) break;
            char *end;
            long want = strtol(p, &end, 10);
            if (end == p || k >= n || ids[k] != want) { same = false; break; }
            k++;
            p = end;
        }
        if (same && k == n) ok++;
        else if (i - ok < 3) fprintf(stderr, "  %s: vector %zu differs (%.40s)\n", name, i, v->text[i]);
        free(ids);
    }
    return ok;
}

static void vocab_case(const char *name, const char *model)
{
    char path[512];
    if (!model) {
        snprintf(path, sizeof path, VOCAB "/ggml-vocab-%s.gguf", name);
        model = path;
    }
    vectors v;
    REQUIRE(read_vectors(name, &v));
    cdx_tok *t = open_or_null(model);
    if (!t) { free_vectors(&v); REQUIRE(t); }
    size_t ok = check_vectors(t, &v, name);
    printf("  %s (%s): %zu/%zu vectors\n", name, model, ok, v.n);
    CHECK(v.n == 46);
    CHECKF(ok == v.n, "%s: %zu of %zu", name, ok, v.n);
    release(t);
    free_vectors(&v);
}

static void v_llama_spm(void) { vocab_case("llama-spm", NULL); }
static void v_phi3(void) { vocab_case("phi-3", NULL); }
static void v_gpt2(void) { vocab_case("gpt-2", NULL); }
static void v_bert_bge(void) { vocab_case("bert-bge", NULL); }
static void v_deepseek_llm(void) { vocab_case("deepseek-llm", NULL); }
static void v_deepseek_coder(void) { vocab_case("deepseek-coder", NULL); }
static void v_falcon(void) { vocab_case("falcon", NULL); }
static void v_mpt(void) { vocab_case("mpt", NULL); }
static void v_refact(void) { vocab_case("refact", NULL); }
static void v_starcoder(void) { vocab_case("starcoder", NULL); }
static void v_llama_bpe(void) { vocab_case("llama-bpe", NULL); }
static void v_qwen2(void) { vocab_case("qwen2", NULL); }
static void v_llama_bpe_json(void) { vocab_case("llama-bpe", TOKS "/llama3"); }
static void v_qwen2_json(void) { vocab_case("qwen2", TOKS "/qwen3"); }
static void v_r1_qwen_json(void) { vocab_case("deepseek-r1-qwen", TOKS "/qwen3"); }

/* test-tokenizer-0 also runs every vector on several threads at once */
typedef struct { const cdx_tok *t; const vectors *v; size_t ok; } thr_arg;
static void *thr_main(void *p)
{
    thr_arg *a = p;
    for (int r = 0; r < 3; r++)
        a->ok += check_vectors(a->t, a->v, "threads");
    return NULL;
}

static void vectors_on_threads(void)
{
    vectors v;
    REQUIRE(read_vectors("gpt-2", &v));
    cdx_tok *t = open_or_null(VOCAB "/ggml-vocab-gpt-2.gguf");
    REQUIRE(t);
    pthread_t th[4];
    thr_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (thr_arg){ t, &v, 0 };
        pthread_create(&th[i], NULL, thr_main, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(a[i].ok == 3 * v.n);
    }
    release(t);
    free_vectors(&v);
}

/* ---- accessors, from the files' own settings ---- */

static void special_ids_follow_the_files(void)
{
    cdx_tok *t = open_or_null(TOKS "/llama3");
    REQUIRE(t);
    CHECK(cdx_tok_bos(t) == 128000);             /* tokenizer_config.json bos_token <|begin_of_text|> */
    CHECK(cdx_tok_eos(t) == 128009);             /* eos_token <|eot_id|> */
    CHECK(cdx_tok_add_bos(t));                   /* TemplateProcessing adds it */
    CHECK(cdx_tok_is_eog(t, 128009));
    CHECK(cdx_tok_n_vocab(t) == 128256);
    CHECK(cdx_tok_chat_template(t) != NULL);
    CHECK(cdx_tok_find(t, "<|eot_id|>", 10) == 128009);
    release(t);
    t = open_or_null(TOKS "/qwen3");
    REQUIRE(t);
    CHECK(!cdx_tok_add_bos(t));
    CHECK(cdx_tok_eos(t) == 151645);             /* <|im_end|> */
    CHECK(cdx_tok_pad(t) == 151643);
    CHECK(cdx_tok_eot(t) == 151645);
    CHECK(cdx_tok_is_eog(t, 151643));            /* <|endoftext|> ends generation too */
    release(t);
    t = open_or_null(VOCAB "/ggml-vocab-llama-spm.gguf");
    REQUIRE(t);
    CHECK(cdx_tok_bos(t) == 1 && cdx_tok_eos(t) == 2 && cdx_tok_add_bos(t) && !cdx_tok_add_eos(t));
    size_t n = 0;
    int32_t *ids = encode(t, "Hello", 5, true, true, &n);
    CHECK(ids && n >= 2 && ids[0] == 1);
    free(ids);
    /* parse_special: "<s>" is BOS when parsed, text otherwise */
    ids = encode(t, "<s>", 3, false, true, &n);
    CHECK(ids && n == 1 && ids[0] == 1);
    free(ids);
    ids = encode(t, "<s>", 3, false, false, &n);
    CHECK(ids && n > 1);
    free(ids);
    release(t);
}

/* ---- pieces ---- */

static void pieces_handle_spm_space_and_bytes(void)
{
    cdx_tok *t = open_or_null(VOCAB "/ggml-vocab-llama-spm.gguf");
    REQUIRE(t);
    char buf[64];
    /* vector 0 of llama-spm: "ied 4 ½ months" -> 474 287 29871 29946 ...: ▁i, ed, ▁, 4 */
    int n = cdx_tok_piece(t, 474, true, false, buf, sizeof buf);
    CHECK(n == 1 && !memcmp(buf, "i", 1));       /* first token: the prefix space goes */
    n = cdx_tok_piece(t, 474, false, false, buf, sizeof buf);
    CHECK(n == 2 && !memcmp(buf, " i", 2));
    int32_t nl = cdx_tok_find(t, "<0x0A>", 6);
    CHECK(nl >= 0 && cdx_tok_piece(t, nl, false, false, buf, sizeof buf) == 1 && buf[0] == '\n');
    CHECK(cdx_tok_piece(t, 1, false, true, buf, sizeof buf) == 0);      /* <s> skipped as special */
    CHECK(cdx_tok_piece(t, 1, false, false, buf, sizeof buf) == 3);
    CHECK(cdx_tok_piece(t, -1, false, false, buf, sizeof buf) < 0);
    CHECK(cdx_tok_piece(t, (int32_t)cdx_tok_n_vocab(t), false, false, buf, sizeof buf) < 0);
    /* a 3-byte character as byte tokens streams out whole, once complete */
    cdx_tok_stream st;
    cdx_tok_stream_init(&st, t, true);
    int32_t e2 = cdx_tok_find(t, "<0xE2>", 6), x82 = cdx_tok_find(t, "<0x82>", 6), xac = cdx_tok_find(t, "<0xAC>", 6);
    REQUIRE(e2 >= 0 && x82 >= 0 && xac >= 0);
    CHECK(cdx_tok_stream_put(&st, e2, buf, sizeof buf) == 0);
    CHECK(cdx_tok_stream_put(&st, x82, buf, sizeof buf) == 0);
    CHECK(cdx_tok_stream_put(&st, xac, buf, sizeof buf) == 3 && !memcmp(buf, "\xe2\x82\xac", 3));
    /* a dangling lead byte flushes as U+FFFD */
    CHECK(cdx_tok_stream_put(&st, e2, buf, sizeof buf) == 0);
    CHECK(cdx_tok_stream_flush(&st, buf, sizeof buf) == 3 && !memcmp(buf, "\xef\xbf\xbd", 3));
    release(t);
}


/* ---- stories260K: llama.cpp's prompt ids and detokenization (fixtures/llamacpp) ---- */

static void stories260k_prompts_and_text_match_llama_cpp(void)
{
    cdx_tok *t = open_or_null(SHARED "/models/stories260K/stories260K.gguf");
    REQUIRE(t);
    json_error_t je;
    json_t *root = json_load_file(SHARED "/fixtures/llamacpp/stories260K.json", 0, &je);
    REQUIRE(root);
    size_t i, n_prompt = 0, n_text = 0;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        json_t *prompt = json_object_get(c, "prompt"), *pids = json_object_get(c, "prompt_ids");
        if (json_is_string(prompt)) {
            size_t n = 0;
            int32_t *ids = encode(t, json_string_value(prompt), json_string_length(prompt),
                                  json_is_true(json_object_get(c, "add_bos")), false, &n);
            CHECKF(ids && ids_equal(pids, ids, n), "case %zu prompt ids", i);
            free(ids);
            n_prompt++;
        }
        json_t *toks = json_object_get(c, "tokens");
        size_t nt = json_array_size(toks), dl = 0;
        int32_t *w = malloc(nt * sizeof *w);
        for (size_t k = 0; k < nt; k++)
            w[k] = (int32_t)json_integer_value(json_array_get(toks, k));
        /* text_alone: the ids detokenized on their own (leading space of the first piece dropped) */
        char *d = decode(t, w, nt, &dl);
        json_t *alone = json_object_get(c, "text_alone"), *text = json_object_get(c, "text");
        CHECKF(d && dl == json_string_length(alone) && !memcmp(d, json_string_value(alone), dl), "case %zu text_alone: %s", i, d);
        free(d);
        /* text: the same ids streamed after the prompt (not first, so the space stays) */
        cdx_tok_stream st;
        cdx_tok_stream_init(&st, t, true);
        st.first = false;
        char acc[4096], buf[256];
        size_t al = 0;
        for (size_t k = 0; k < nt; k++) {
            int r = cdx_tok_stream_put(&st, w[k], buf, sizeof buf);
            if (r > 0 && al + (size_t)r < sizeof acc) { memcpy(acc + al, buf, (size_t)r); al += (size_t)r; }
        }
        CHECKF(al == json_string_length(text) && !memcmp(acc, json_string_value(text), al), "case %zu text: %.*s", i, (int)al, acc);
        n_text++;
        free(w);
    }
    printf("  stories260K: %zu prompts, %zu detokenizations checked\n", n_prompt, n_text);
    CHECK(n_prompt == 3 && n_text == 5);
    json_decref(root);
    release(t);
}

/* ---- SentencePiece tokenizer.model ---- */

static void sentencepiece_model_agrees_away_from_whitespace(void)
{
    /* The fixture README: SentencePiece and the HF BPE differ only on texts with leading or
     * repeated spaces (and the Metaspace "first" rule after special tokens). Elsewhere the
     * tokenizer.model must give the golden ids. */
    char dir[] = "/tmp/cdx_spm_XXXXXX";
    REQUIRE(mkdtemp(dir));
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp " TOKS "/mistral/tokenizer.model " TOKS "/mistral/tokenizer_config.json %s/", dir);
    REQUIRE(system(cmd) == 0);
    cdx_tok *t = open_or_null(dir);
    REQUIRE(t);
    CHECK(!strcmp(cdx_tok_model_name(t), "spm"));
    CHECK(cdx_tok_n_vocab(t) == 32768);
    FILE *f = fopen(TOKS "/mistral/golden.jsonl", "r");
    REQUIRE(f);
    char *line = NULL;
    size_t cap = 0, checked = 0, ok = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *s = json_string_value(json_object_get(o, "text"));
        size_t l = json_string_length(json_object_get(o, "text"));
        bool add = json_is_true(json_object_get(o, "add_special_tokens"));
        if (s && l && s[0] != ' ' && !strstr(s, "  ") && !strstr(s, "\xe2\x96\x81") && !strchr(s, '<') && !strchr(s, '[')) {
            size_t n = 0;
            int32_t *ids = encode(t, s, l, add, true, &n);
            checked++;
            if (ids && ids_equal(json_object_get(o, "ids"), ids, n)) ok++;
            else if (checked - ok <= 3) fprintf(stderr, "  spm differs: %.60s\n", s);
            free(ids);
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    printf("  tokenizer.model: %zu/%zu golden lines away from whitespace/specials\n", ok, checked);
    CHECK(checked > 250);
    CHECK(ok == checked);
    release(t);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}


/* ---- vocab.json + merges.txt ---- */

static void vocab_json_and_merges_txt_load_as_gpt2(void)
{
    /* Writes GPT-2's vocabulary and merges (from llama.cpp's gpt-2 vocab GGUF) in the original
     * vocab.json + merges.txt layout, then runs llama.cpp's gpt-2 vectors through that directory. */
    cdx_err err = {0};
    cdx_gguf *g = NULL;
    REQUIRE(cdx_gguf_open(VOCAB "/ggml-vocab-gpt-2.gguf", &g, &err) == 0);
    const cdx_gguf_kv *tk = cdx_gguf_find(g, "tokenizer.ggml.tokens"), *mk = cdx_gguf_find(g, "tokenizer.ggml.merges");
    if (!tk || !mk) { cdx_gguf_close(g); REQUIRE(tk && mk); }
    char dir[] = "/tmp/cdx_bpe_XXXXXX", path[512];
    REQUIRE(mkdtemp(dir));
    json_t *vocab = json_object();
    for (uint64_t i = 0; i < tk->val.n; i++) {
        char *k = strndup(tk->val.str_items[i].ptr, tk->val.str_items[i].len);
        json_object_set_new(vocab, k, json_integer((json_int_t)i));
        free(k);
    }
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    CHECK(json_dump_file(vocab, path, JSON_COMPACT) == 0);
    json_decref(vocab);
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "#version: 0.2\n");
    for (uint64_t i = 0; i < mk->val.n; i++)
        fprintf(f, "%.*s\n", (int)mk->val.str_items[i].len, mk->val.str_items[i].ptr);
    fclose(f);
    cdx_gguf_close(g);
    cdx_tok *t = NULL;
    CHECKF(cdx_tok_open_dir(dir, &t, &err) == 0, "%s", err.msg);
    vectors v;
    bool have = t && read_vectors("gpt-2", &v);
    /* vectors that cannot be read fail the case: nothing was checked */
    CHECKF(have || !t, "llama.cpp's gpt-2 vectors (" VOCAB_VECTORS "/ggml-vocab-gpt-2.gguf.inp/.out) could not be read");
    if (have) {
        size_t ok = check_vectors(t, &v, "gpt-2 vocab.json");
        printf("  gpt-2 from vocab.json + merges.txt: %zu/%zu vectors\n", ok, v.n);
        CHECK(ok == v.n && v.n == 46);
        free_vectors(&v);
        /* decode is byte-level: a round trip gives the text back */
        size_t n = 0, dl = 0;
        const char *s = "Hello world, \xc3\xa9t\xc3\xa9 \xf0\x9f\xa6\x99!";
        int32_t *ids = encode(t, s, strlen(s), false, false, &n);
        char *d = ids ? decode(t, ids, n, &dl) : NULL;
        CHECK(d && dl == strlen(s) && !memcmp(d, s, dl));
        free(ids); free(d);
    }
    cdx_tok_close(t);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}


static void chat_template_file_wins_over_the_config(void)
{
    char dir[] = "/tmp/cdx_tpl_XXXXXX", cmd[600], path[300];
    REQUIRE(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cp " TOKS "/bert/tokenizer.json %s/ && printf '{\"chat_template\": \"from config\"}' > %s/tokenizer_config.json",
             dir, dir);
    REQUIRE(system(cmd) == 0);
    cdx_err err = {0};
    cdx_tok *t = NULL;
    REQUIRE(cdx_tok_open_dir(dir, &t, &err) == 0);
    CHECK(cdx_tok_chat_template(t) && !strcmp(cdx_tok_chat_template(t), "from config"));
    cdx_tok_close(t);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("{{ messages }}", f);
    fclose(f);
    REQUIRE(cdx_tok_open_dir(dir, &t, &err) == 0);
    CHECK(cdx_tok_chat_template(t) && !strcmp(cdx_tok_chat_template(t), "{{ messages }}"));
    cdx_tok_close(t);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}


static void long_whitespace_runs_encode_and_round_trip(void)
{
    /* PCRE2's default JIT stack is too small for \s+(?!\S) over a long run: the encoder must
     * still split it (on a bigger stack), not fail or cut the text */
    cdx_tok *t = open_or_null(TOKS "/qwen3");
    REQUIRE(t);
    size_t n = 100000;
    char *s = malloc(n + 3);
    memset(s, ' ', n);
    memcpy(s + n, "x\n", 3);
    size_t k = 0, dl = 0;
    int32_t *ids = encode(t, s, n + 2, false, true, &k);
    CHECK(ids && k > 0 && k < n / 4);
    char *d = ids ? decode(t, ids, k, &dl) : NULL;
    CHECK(d && dl == n + 2 && !memcmp(d, s, dl));
    free(d); free(ids); free(s);
    release(t);
}

/* ---- bad input ---- */

static void invalid_utf8_is_refused(void)
{
    cdx_tok *t = open_or_null(TOKS "/smollm2");
    REQUIRE(t);
    static const char *const bad[] = { "abc\xff", "\xc3", "a\xed\xa0\x80z" /* surrogate */, "\xc0\xaf" /* overlong */ };
    for (size_t i = 0; i < 4; i++) {
        cdx_err err = {0};
        size_t n = 99;
        int32_t ids[16];
        int rc = cdx_tok_encode(t, bad[i], strlen(bad[i]), true, true, ids, 16, &n, &err);
        CHECKF(rc == CDX_EINVAL && strstr(err.msg, "UTF-8") && strstr(err.msg, "offset"), "case %zu: rc %d msg %s", i, rc, err.msg);
    }
    cdx_err err = {0};
    int32_t bad_id = 1 << 30;
    size_t need;
    CHECK(cdx_tok_decode(t, &bad_id, 1, false, NULL, 0, &need, &err) == CDX_ERANGE && strstr(err.msg, "out of range"));
    release(t);
}

static void malformed_tokenizer_json_gives_clear_errors(void)
{
    static const struct { const char *json; int code; const char *msg; } cases[] = {
        { "", CDX_EFORMAT, "invalid JSON" },
        { "{\"model\": ", CDX_EFORMAT, "invalid JSON at line 1" },
        { "[]", CDX_EFORMAT, "\"model\" is missing" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": [], \"merges\": []}}", CDX_EFORMAT, "model.vocab" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": []}}", CDX_EFORMAT, "model.vocab[\"a\"]" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", CDX_EFORMAT, "not in the vocabulary" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}}", CDX_EFORMAT, "merges[0]" },
        { "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", CDX_EUNSUPPORTED, "model.type \"Unigram\"" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"Precompiled\"}}",
          CDX_EUNSUPPORTED, "normalizer \"Precompiled\"" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
          "\"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}", CDX_EFORMAT, "does not compile" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
          "\"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}}", CDX_EFORMAT, "behavior \"Sideways\"" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": \"x\"}]}",
          CDX_EFORMAT, "added_tokens[0]" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"post_processor\": {\"type\": "
          "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], \"special_tokens\": {}}}",
          CDX_EFORMAT, "\"<s>\" has no \"ids\"" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999999}, \"merges\": []}}", CDX_EFORMAT, "not an id" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 5555555}, \"merges\": []}}", CDX_EFORMAT, "ids go up to 5555555" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cdx_err err = {0};
        cdx_tok *t = (cdx_tok *)1;
        int rc = cdx_tok_open_json(cases[i].json, strlen(cases[i].json), NULL, 0, "bad.json", &t, &err);
        CHECKF(rc == cases[i].code && t == NULL && strstr(err.msg, cases[i].msg) && strstr(err.msg, "bad.json"),
               "case %zu: rc %d, msg \"%s\"", i, rc, err.msg);
    }
    /* a malformed tokenizer_config.json is named as such */
    const char *ok = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}";
    cdx_err err = {0};
    cdx_tok *t = NULL;
    CHECK(cdx_tok_open_json(ok, strlen(ok), "{oops", 5, "x.json", &t, &err) == CDX_EFORMAT && strstr(err.msg, "tokenizer_config.json"));
    /* and a minimal valid one works, dropping the unknown char without an unk token */
    CHECK(cdx_tok_open_json(ok, strlen(ok), NULL, 0, "x.json", &t, &err) == 0 && t);
    if (t) {
        int32_t ids[4];
        size_t n = 0;
        CHECK(cdx_tok_encode(t, "aba", 3, true, true, ids, 4, &n, &err) == 0 && n == 2 && ids[0] == 0 && ids[1] == 0);
        release(t);
    }
    CHECK(cdx_tok_open(TOKS "/no-such-dir", &t, &err) == CDX_ENOTFOUND);
}


static void json_string_escapes_decode_exactly(void)
{
    /* vocab keys with every kind of escape; ignore_merges looks a whole word up, so each text
     * must map to its own id */
    const char *js = "{\"added_tokens\": [], \"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"merges\": [[\"a\", \"b\"]],"
                     " \"vocab\": {\"\\u00e9t\\u00E9\": 0, \"a\\\"b\": 1, \"\\ud83e\\udd99\": 2, \"x\\\\y\\/\": 3,"
                     " \"\\t\\n\": 4, \"a\": 5, \"b\": 6, \"ab\": 7}}}";
    cdx_err err = {0};
    cdx_tok *t = NULL;
    REQUIRE(cdx_tok_open_json(js, strlen(js), NULL, 0, "esc.json", &t, &err) == 0);
    static const struct { const char *s; int32_t id; } k[] = {
        { "\xc3\xa9t\xc3\xa9", 0 }, { "a\"b", 1 }, { "\xf0\x9f\xa6\x99", 2 }, { "x\\y/", 3 }, { "\t\n", 4 }, { "ab", 7 },
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        int32_t ids[8];
        size_t n = 0;
        CHECKF(cdx_tok_encode(t, k[i].s, strlen(k[i].s), false, true, ids, 8, &n, &err) == 0 && n == 1 && ids[0] == k[i].id,
               "case %zu: n %zu id %d", i, n, n ? ids[0] : -1);
    }
    cdx_tok_close(t);
    /* a lone surrogate is refused (by jansson, after the scanner hands over) */
    const char *bad = "{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {\"\\ud83e\": 0}}}";
    CHECK(cdx_tok_open_json(bad, strlen(bad), NULL, 0, "esc.json", &t, &err) == CDX_EFORMAT && strstr(err.msg, "invalid JSON"));
}

static void bpe_merges_follow_rank_order(void)
{
    /* "abc": merges rank 0 "b c", rank 1 "a b": rank 0 wins, so a + bc -> "a" "bc" (no "abc"
     * although "ab" + "c" could make it), as tokenizers and llama.cpp both do. */
    const char *js = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"bc\": 4, \"abc\": 5},"
                     " \"merges\": [\"b c\", \"a b\", \"ab c\"]}}";
    cdx_err err = {0};
    cdx_tok *t = NULL;
    REQUIRE(cdx_tok_open_json(js, strlen(js), NULL, 0, "m.json", &t, &err) == 0);
    int32_t ids[8];
    size_t n = 0;
    CHECK(cdx_tok_encode(t, "abc", 3, false, true, ids, 8, &n, &err) == 0 && n == 2 && ids[0] == 0 && ids[1] == 4);
    CHECK(cdx_tok_encode(t, "abab", 4, false, true, ids, 8, &n, &err) == 0 && n == 2 && ids[0] == 3 && ids[1] == 3);
    /* the cap is respected and n_need is the full count */
    CHECK(cdx_tok_encode(t, "abab", 4, false, true, ids, 1, &n, &err) == 0 && n == 2);
    release(t);
}

int main(void)
{
    RUN("qwen3 tokenizer.json matches every golden line (ids, decode, stream)", golden_qwen3);
    RUN("llama3 tokenizer.json matches every golden line", golden_llama3);
    RUN("smollm2 tokenizer.json matches every golden line", golden_smollm2);
    RUN("mistral tokenizer.json matches every golden line", golden_mistral);
    RUN("bert tokenizer.json matches every golden line", golden_bert);
    RUN("llama.cpp vectors: llama-spm", v_llama_spm);
    RUN("llama.cpp vectors: phi-3", v_phi3);
    RUN("llama.cpp vectors: gpt-2", v_gpt2);
    RUN("llama.cpp vectors: bert-bge", v_bert_bge);
    RUN("llama.cpp vectors: deepseek-llm", v_deepseek_llm);
    RUN("llama.cpp vectors: deepseek-coder", v_deepseek_coder);
    RUN("llama.cpp vectors: falcon", v_falcon);
    RUN("llama.cpp vectors: mpt", v_mpt);
    RUN("llama.cpp vectors: refact", v_refact);
    RUN("llama.cpp vectors: starcoder", v_starcoder);
    RUN("llama.cpp vectors: llama-bpe", v_llama_bpe);
    RUN("llama.cpp vectors: qwen2", v_qwen2);
    RUN("llama.cpp llama-bpe vectors with the llama3 tokenizer.json", v_llama_bpe_json);
    RUN("llama.cpp qwen2 vectors with the qwen3 tokenizer.json", v_qwen2_json);
    RUN("llama.cpp deepseek-r1-qwen vectors with the qwen3 tokenizer.json", v_r1_qwen_json);
    RUN("vectors tokenize identically on 4 threads at once", vectors_on_threads);
    RUN("special ids and flags follow the tokenizer files", special_ids_follow_the_files);
    RUN("pieces drop the SPM first space and stream byte tokens as whole characters", pieces_handle_spm_space_and_bytes);
    RUN("stories260K prompt ids and detokenized text match llama.cpp", stories260k_prompts_and_text_match_llama_cpp);
    RUN("tokenizer.model (SentencePiece) agrees with the goldens away from whitespace", sentencepiece_model_agrees_away_from_whitespace);
    RUN("vocab.json + merges.txt load as GPT-2 byte-level BPE (llama.cpp gpt-2 vectors)", vocab_json_and_merges_txt_load_as_gpt2);
    RUN("chat_template.jinja wins over tokenizer_config.json", chat_template_file_wins_over_the_config);
    RUN("long whitespace runs encode and round-trip", long_whitespace_runs_encode_and_round_trip);
    RUN("invalid UTF-8 and bad ids are refused with the offset", invalid_utf8_is_refused);
    RUN("malformed tokenizer.json gives clear errors", malformed_tokenizer_json_gives_clear_errors);
    RUN("bpe merges respect rank order", bpe_merges_follow_rank_order);
    RUN("JSON string escapes in the vocabulary decode exactly", json_string_escapes_decode_exactly);
    close_all();
    return t_done("text/tokenizer");
}
