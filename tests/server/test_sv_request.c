/* The server's request validation (src/server/sv_request.c) and metrics text, without a model:
 * every refusal is a 400 naming the field; defaults are OpenAI's. */
#include "server/sv_int.h"
#include "test.h"

#include <caldrix/grammar.h>

static const sv_limits k_lim = { .n_vocab = 512, .has_tok = true };

static int parse(const char *body, sv_kind kind, sv_params *p, sv_error *e)
{
    memset(e, 0, sizeof *e);
    return sv_parse(body, strlen(body), kind, &k_lim, p, e);
}

/* The body must be refused with status and param (NULL: none). */
static void refused(const char *body, sv_kind kind, int status, const char *param)
{
    sv_params p;
    sv_error e;
    int rc = parse(body, kind, &p, &e);
    CHECKF(rc == -1, "accepted: %s", body);
    if (rc == -1) {
        CHECKF(e.status == status, "%s: status %d, want %d (%s)", body, e.status, status, e.message);
        CHECKF(!strcmp(e.param, param ? param : ""), "%s: param \"%s\", want \"%s\" (%s)", body, e.param,
               param ? param : "", e.message);
        char *j = sv_error_body(&e);
        json_t *o = j ? json_loads(j, 0, NULL) : NULL;
        json_t *err = json_object_get(o, "error");
        CHECKF(json_is_string(json_object_get(err, "message")) && json_is_string(json_object_get(err, "type")) &&
                   json_object_get(err, "param") && json_object_get(err, "code"),
               "error body %s", j ? j : "(null)");
        json_decref(o);
        free(j);
    }
    sv_params_free(&p);
}

static void chat_defaults_are_openais(void)
{
    sv_params p;
    sv_error e;
    REQUIRE(parse("{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", SV_CHAT, &p, &e) == 0);
    CHECK(p.sp.temp == 1.0f && p.sp.top_p == 1.0f && p.sp.top_k == 0 && p.sp.min_p == 0.0f);
    CHECK(p.sp.repeat_penalty == 1.0f && p.sp.presence_penalty == 0 && p.sp.frequency_penalty == 0);
    CHECK(!p.seed_set && p.max_tokens == 0 && !p.stream && !p.logprobs && p.n_stop == 0);
    CHECK(p.add_generation_prompt && json_array_size(p.messages) == 1);
    sv_params_free(&p);
}

static void chat_fields_are_read(void)
{
    sv_params p;
    sv_error e;
    REQUIRE(parse("{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
                  "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                  "\"temperature\":0,\"top_p\":0.5,\"top_k\":7,\"min_p\":0.1,\"presence_penalty\":-1.5,"
                  "\"frequency_penalty\":2,\"repetition_penalty\":1.1,\"seed\":-3,\"max_completion_tokens\":9,"
                  "\"stop\":[\"x\",\"\",\"yz\"],\"n\":3,\"best_of\":3,\"logprobs\":true,\"top_logprobs\":3,\"stream\":true,"
                  "\"stream_options\":{\"include_usage\":true},\"user\":\"u\",\"unknown\":{\"a\":1},"
                  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
                  SV_CHAT, &p, &e) == 0);
    CHECK(p.sp.temp == 0.0f && p.sp.top_p == 0.5f && p.sp.top_k == 7 && fabsf(p.sp.min_p - 0.1f) < 1e-7f);
    CHECK(p.sp.presence_penalty == -1.5f && p.sp.frequency_penalty == 2.0f && fabsf(p.sp.repeat_penalty - 1.1f) < 1e-6f);
    CHECK(p.seed_set && p.sp.seed == (uint64_t)-3 && p.max_tokens == 9);
    CHECK(p.n_stop == 2 && !strcmp(p.stop[0], "x") && !strcmp(p.stop[1], "yz"));
    CHECK(p.logprobs && p.top_logprobs == 3 && p.stream && p.include_usage && p.n == 3);
    const char *joined = json_string_value(json_object_get(json_array_get(p.messages, 1), "content"));
    CHECK(joined && !strcmp(joined, "ab"));
    CHECK(json_is_array(json_object_get(p.extra, "tools")));
    sv_params_free(&p);
}

static void completion_prompts(void)
{
    sv_params p;
    sv_error e;
    REQUIRE(parse("{\"prompt\":\"Once\",\"logprobs\":2,\"stop\":\"end\"}", SV_COMPLETION, &p, &e) == 0);
    CHECK(p.text && !strcmp(p.text, "Once") && !p.ids && p.logprobs && p.top_logprobs == 2 && p.n_stop == 1);
    sv_params_free(&p);
    REQUIRE(parse("{\"prompt\":[1,2,511]}", SV_COMPLETION, &p, &e) == 0);
    CHECK(p.n_ids == 3 && p.ids[2] == 511 && !p.text);
    sv_params_free(&p);
    REQUIRE(parse("{\"prompt\":[[5,6]],\"logprobs\":0}", SV_COMPLETION, &p, &e) == 0);
    CHECK(p.n_ids == 2 && p.logprobs && p.top_logprobs == 0);
    sv_params_free(&p);
}

static void bad_requests_name_the_field(void)
{
    refused("", SV_CHAT, 400, NULL);
    refused("{", SV_CHAT, 400, NULL);
    refused("[1]", SV_CHAT, 400, NULL);
    refused("{\"a\":1,\"a\":2}", SV_CHAT, 400, NULL);
    refused("{}", SV_CHAT, 400, "messages");
    refused("{\"messages\":{}}", SV_CHAT, 400, "messages");
    refused("{\"messages\":[]}", SV_CHAT, 400, "messages");
    refused("{\"messages\":[3]}", SV_CHAT, 400, "messages[0]");
    refused("{\"messages\":[{\"content\":\"x\"}]}", SV_CHAT, 400, "messages[0].role");
    refused("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", SV_CHAT, 400, "messages[0].content");
    refused("{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\"}]}", SV_CHAT, 400,
            "messages[1].content");
    refused("{\"messages\":[{\"role\":\"user\",\"content\":null}]}", SV_CHAT, 400, "messages[0].content");
    refused("{\"prompt\":\"x\",\"logit_bias\":[1]}", SV_COMPLETION, 400, "logit_bias");
    refused("{\"prompt\":\"x\",\"logit_bias\":{\"512\":1}}", SV_COMPLETION, 400, "logit_bias");
    refused("{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", SV_COMPLETION, 400, "logit_bias");
    refused("{\"prompt\":\"x\",\"logit_bias\":{\" 7\":1}}", SV_COMPLETION, 400, "logit_bias");
    refused("{\"prompt\":\"x\",\"logit_bias\":{\"7\":101}}", SV_COMPLETION, 400, "logit_bias");
    refused("{\"prompt\":\"x\",\"logit_bias\":{\"7\":\"up\"}}", SV_COMPLETION, 400, "logit_bias");
    {
        sv_params p;
        sv_error e;
        REQUIRE(parse("{\"prompt\":\"x\",\"logit_bias\":{\"7\":-100,\"511\":2.5}}", SV_COMPLETION, &p, &e) == 0);
        CHECK(p.sp.n_bias == 2 && p.sp.bias == p.bias);
        CHECK(p.bias[0].id == 7 && p.bias[0].bias == -100.0f && p.bias[1].id == 511 && p.bias[1].bias == 2.5f);
        sv_params_free(&p);
    }
    {
        sv_params p;
        sv_error e;
        REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null},"
                      "{\"role\":\"user\",\"content\":\"y\"}]}", SV_CHAT, &p, &e) == 0);
        sv_params_free(&p);
    }
    refused("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", SV_CHAT, 400,
            "messages[0].content[0]");
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    static const struct { const char *field; const char *param; } cases[] = {
        { "\"temperature\":\"hot\"", "temperature" }, { "\"temperature\":2.5", "temperature" },
        { "\"temperature\":-1", "temperature" },      { "\"top_p\":1.5", "top_p" },
        { "\"top_k\":1.5", "top_k" },                 { "\"top_k\":-1", "top_k" },
        { "\"min_p\":true", "min_p" },                { "\"presence_penalty\":3", "presence_penalty" },
        { "\"frequency_penalty\":-9", "frequency_penalty" }, { "\"repetition_penalty\":0", "repetition_penalty" },
        { "\"seed\":1.5", "seed" },                   { "\"seed\":\"1\"", "seed" },
        { "\"max_tokens\":0", "max_tokens" },         { "\"max_tokens\":-5", "max_tokens" },
        { "\"max_tokens\":99999999999", "max_tokens" }, { "\"max_completion_tokens\":\"9\"", "max_completion_tokens" },
        { "\"n\":0", "n" },                           { "\"n\":\"1\"", "n" },
        { "\"n\":129", "n" },                         { "\"n\":2,\"best_of\":3", "best_of" },
        { "\"stop\":5", "stop" },                     { "\"stop\":[\"a\",3]", "stop[1]" },
        { "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]", "stop" },
        { "\"logprobs\":1", "logprobs" },             { "\"top_logprobs\":2", "top_logprobs" },
        { "\"logprobs\":true,\"top_logprobs\":21", "top_logprobs" }, { "\"stream\":1", "stream" },
        { "\"stream_options\":[]", "stream_options" }, { "\"stream_options\":{\"include_usage\":1}", "stream_options.include_usage" },
        { "\"user\":5", "user" },                     { "\"model\":[]", "model" },
        { "\"tools\":{}", "tools" },                  { "\"add_generation_prompt\":\"yes\"", "add_generation_prompt" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{%s,%s}", m, cases[i].field);
        refused(body, SV_CHAT, 400, cases[i].param);
    }
    refused("{\"prompt\":5}", SV_COMPLETION, 400, "prompt");
    refused("{\"prompt\":[]}", SV_COMPLETION, 400, "prompt");
    refused("{\"prompt\":[1,512]}", SV_COMPLETION, 400, "prompt[1]");
    refused("{\"prompt\":[1,-1]}", SV_COMPLETION, 400, "prompt[1]");
    refused("{\"prompt\":[1,\"a\"]}", SV_COMPLETION, 400, "prompt[1]");
    refused("{\"prompt\":[\"a\",\"b\"]}", SV_COMPLETION, 400, "prompt");
    refused("{\"prompt\":\"x\",\"logprobs\":21}", SV_COMPLETION, 400, "logprobs");
    refused("{\"prompt\":\"x\",\"echo\":true}", SV_COMPLETION, 400, "echo");
    refused("{\"prompt\":\"x\",\"max_tokens\":1e400}", SV_COMPLETION, 400, NULL);
    refused("{\"content\":3}", SV_TOKENIZE, 400, "content");
    refused("{\"tokens\":\"a\"}", SV_DETOKENIZE, 400, "tokens");
    refused("{\"tokens\":[1,1000]}", SV_DETOKENIZE, 400, "tokens[1]");
}

static void invalid_utf8_names_the_field(void)
{
    refused("{\"prompt\":\"ab\xff\"}", SV_COMPLETION, 400, "prompt");
    refused("{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}", SV_CHAT, 400, "content");
    refused("{\"\xed\xa0\x80\":1}", SV_CHAT, 400, NULL);
}

static void tokenize_fields(void)
{
    sv_params p;
    sv_error e;
    REQUIRE(parse("{\"content\":\"hi\"}", SV_TOKENIZE, &p, &e) == 0);
    CHECK(!p.add_special && p.text_len == 2);
    sv_params_free(&p);
    REQUIRE(parse("{\"content\":\"hi\",\"add_special\":true}", SV_TOKENIZE, &p, &e) == 0);
    CHECK(p.add_special);
    sv_params_free(&p);
    REQUIRE(parse("{\"tokens\":[]}", SV_DETOKENIZE, &p, &e) == 0);
    CHECK(p.n_ids == 0);
    sv_params_free(&p);
}

static void sanitize_and_metrics(void)
{
    size_t n;
    char *s = sv_utf8_sanitize("a\xff" "b", 3, &n);
    CHECK(s && n == 5 && !memcmp(s, "a\xEF\xBF\xBD" "b", 5));
    free(s);
    sv_metrics m;
    sv_metrics_init(&m);
    sv_metrics_request(&m, SV_R_CHAT, 200);
    sv_metrics_request(&m, SV_R_CHAT, 400);
    sv_metrics_request(&m, SV_R_CHAT, 200);
    sv_metrics_ttft(&m, 0.003);
    sv_metrics_tpot(&m, 100);
    cdx_engine_stats st = { .n_blocks = 10, .blocks_used = 2, .blocks_cached = 3, .blocks_free = 5, .waiting = 4,
                            .running = 1, .cached_tokens = 16 };
    char *t = sv_metrics_text(&m, &st, true, &n);
    REQUIRE(t);
    CHECK(strstr(t, "caldrix_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 2\n"));
    CHECK(strstr(t, "caldrix_requests_total{route=\"/v1/chat/completions\",status=\"400\"} 1\n"));
    CHECK(strstr(t, "caldrix_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
    CHECK(strstr(t, "caldrix_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"));
    CHECK(strstr(t, "caldrix_time_per_output_token_seconds_bucket{le=\"+Inf\"} 1\n"));
    CHECK(strstr(t, "caldrix_kv_blocks{state=\"used\"} 2\n") && strstr(t, "caldrix_kv_blocks{state=\"free\"} 5\n"));
    CHECK(strstr(t, "caldrix_queue_depth 4\n") && strstr(t, "caldrix_prompt_cached_tokens_total 16\n"));
    free(t);
    sv_metrics_destroy(&m);
}

/* One reply scanned as a whole (the non-streamed path) and as a stream cut into pieces of every
 * size (what is released as it comes, then the held tail scanned at the end): the same calls, and
 * the released text never shows a call. The expected calls are read off the formats' definitions. */
static json_t *g_tools;

static int scan(const char *text, json_t **calls, char **content)
{
    size_t n = 0;
    return sv_tool_calls(text, strlen(text), g_tools, "x", calls, content, &n);
}

static void streamed_equals_whole(const char *text)
{
    json_t *want_calls;
    char *want_content;
    int want = scan(text, &want_calls, &want_content);
    size_t len = strlen(text);
    for (size_t piece = 1; piece <= len; piece++) {
        size_t released = 0;
        for (size_t at = 0; at < len;) {
            at = at + piece < len ? at + piece : len;
            size_t h = sv_tool_hold_from(text, at);
            if (h > released)
                released = h;
        }
        json_t *calls;
        char *rest;
        size_t rest_n;
        int got = sv_tool_calls(text + released, len - released, g_tools, "x", &calls, &rest, &rest_n);
        CHECKF(got == want, "pieces of %zu: %d calls, whole: %d", piece, got, want);
        CHECKF(!want || !memmem(text, released, "<tool_call>", 11), "pieces of %zu released a call", piece);
        if (calls && want_calls)
            CHECK(json_equal(calls, want_calls));
        json_decref(calls);
        free(rest);
    }
    json_decref(want_calls);
    free(want_content);
}

static void tool_calls_are_found_in_every_form(void)
{
    g_tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{}}},"
                         "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}]", 0, NULL);
    REQUIRE(g_tools);
    json_t *c;
    char *t;
    /* Hermes / Qwen: text before, a block, the text kept and trimmed */
    CHECK(scan("I'll check.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>", &c,
               &t) == 1);
    CHECK(!strcmp(t, "I'll check."));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(json_array_get(c, 0), "function"), "name")),
                  "get_time"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(json_array_get(c, 0), "function"), "arguments")),
                  "{\"tz\":\"UTC\"}"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(c, 0), "id")), "call_x_0"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(c, 0), "type")), "function"));
    json_decref(c);
    free(t);
    /* two blocks: two calls, nothing else */
    CHECK(scan("<tool_call>{\"name\":\"add\",\"arguments\":{\"a\":1}}</tool_call>\n<tool_call>{\"name\":\"get_time\","
               "\"arguments\":{}}</tool_call>", &c, &t) == 2);
    CHECK(!strcmp(t, "") && !strcmp(json_string_value(json_object_get(json_array_get(c, 1), "id")), "call_x_1"));
    json_decref(c);
    free(t);
    /* a tool the request does not have, or JSON that does not parse: text */
    CHECK(scan("<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", &c, &t) == 0 && !c);
    CHECK(!strcmp(t, "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>"));
    free(t);
    CHECK(scan("<tool_call>{\"name\":\"add\",</tool_call>", &c, &t) == 0 && !c);
    free(t);
    CHECK(scan("<tool_call>{\"name\":\"add\",\"arguments\":{}}", &c, &t) == 0 && !c); /* never closed */
    free(t);
    /* Mistral */
    CHECK(scan("[TOOL_CALLS][{\"name\":\"add\",\"arguments\":{\"a\":2}},{\"name\":\"get_time\",\"arguments\":{}}]", &c,
               &t) == 2);
    json_decref(c);
    free(t);
    CHECK(scan("[TOOL_CALLS][{\"name\":\"add\",\"arguments\":{}},{\"name\":\"nope\",\"arguments\":{}}]", &c, &t) == 0);
    free(t);
    /* Granite 3.x: <|tool_call|> and a JSON list */
    CHECK(scan("<|tool_call|>[{\"name\":\"add\",\"arguments\":{\"a\":2}},{\"name\":\"get_time\",\"arguments\":{}}]",
               &c, &t) == 2 && !strcmp(t, ""));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(json_array_get(c, 1), "function"), "name")),
                  "get_time"));
    json_decref(c);
    free(t);
    CHECK(scan("<|tool_call|>[{\"name\":\"nope\",\"arguments\":{}}]", &c, &t) == 0 && !c);
    free(t);
    /* Llama 3: the reply is one JSON call, "parameters" for its arguments */
    CHECK(scan("{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}", &c, &t) == 1);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(json_array_get(c, 0), "function"), "arguments")),
                  "{\"tz\":\"UTC\"}"));
    json_decref(c);
    free(t);
    CHECK(scan("{\"a\": 1}", &c, &t) == 0 && !strcmp(t, "{\"a\": 1}"));

    free(t);
    /* Qwen3.5's XML form (its chat template's own rendering of a call): a string parameter raw, others
     * JSON (vLLM's qwen3_coder parser reads them so), one newline after the tag and before the close dropped */
    {
        json_t *saved = g_tools;
        g_tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                             "\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},\"o\":{\"type\":"
                             "\"object\"},\"e\":{\"enum\":[\"1\",\"2\"]}}}}}]", 0, NULL);
        REQUIRE(g_tools);
        const char *x = "Let me call.\n<tool_call>\n<function=f>\n<parameter=s>\n123\nline two\n</parameter>\n"
                        "<parameter=n>\n7\n</parameter>\n<parameter=o>\n{\"k\": [1, 2]}\n</parameter>\n"
                        "<parameter=e>\n2\n</parameter>\n<parameter=extra>\nnot json\n</parameter>\n</function>\n</tool_call>";
        CHECK(scan(x, &c, &t) == 1 && !strcmp(t, "Let me call."));
        const char *args = json_string_value(json_object_get(json_object_get(json_array_get(c, 0), "function"), "arguments"));
        CHECKF(args && !strcmp(args, "{\"s\":\"123\\nline two\",\"n\":7,\"o\":{\"k\":[1,2]},\"e\":\"2\",\"extra\":\"not json\"}"),
               "XML arguments: %s", args ? args : "(none)");
        json_decref(c);
        free(t);
        streamed_equals_whole(x);
        /* not closed, or a function the request does not have: text */
        CHECK(scan("<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n</tool_call>", &c, &t) == 0 && !c);
        free(t);
        CHECK(scan("<tool_call>\n<function=g>\n</function>\n</tool_call>", &c, &t) == 0 && !c);
        free(t);
        json_decref(g_tools);
        g_tools = saved;
    }
    /* arguments given as a string pass as sent */
    CHECK(scan("<tool_call>{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":3}\"}</tool_call>", &c, &t) == 1);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(json_array_get(c, 0), "function"), "arguments")),
                  "{\"a\":3}"));
    json_decref(c);
    free(t);
    /* plain text is released whole; a lone "<" only until it is not a marker */
    CHECK(sv_tool_hold_from("Hello <b>", 9) == 9);
    CHECK(sv_tool_hold_from("Hello <tool_", 12) == 6);
    CHECK(sv_tool_hold_from("  {\"name\"", 9) == 2);
    CHECK(sv_tool_hold_from("[TOOL", 5) == 0);
    CHECK(sv_tool_hold_from(" <|tool_ca", 10) == 1);
    CHECK(sv_tool_hold_from("<|im", 4) == 4); /* cannot become a marker */
    streamed_equals_whole("I'll check.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
    streamed_equals_whole("Hello <b>world</b> and <tool_call>{\"name\":\"add\",\"arguments\":{\"a\":1}}</tool_call>");
    streamed_equals_whole("[TOOL_CALLS][{\"name\":\"add\",\"arguments\":{}}]");
    streamed_equals_whole("<|tool_call|>[{\"name\":\"add\",\"arguments\":{\"a\":1}}]");
    streamed_equals_whole("{\"name\": \"get_time\", \"parameters\": {}}");
    streamed_equals_whole("Just text, with a < and a [ and a {.");
    json_decref(g_tools);
}

/* gpt-oss's harmony replies (OpenAI's harmony format, docs/format.md of github.com/openai/harmony):
 * the spec's own examples, the expected parts read off the spec by hand (analysis → reasoning,
 * final and recipient-less commentary → content, a message to functions.NAME → a call). Streamed:
 * every cut of the reply parsed as "still coming" gives parts that are prefixes of the whole's, that
 * grow, and that never end in the start of a mark. */
typedef struct {
    const char *text, *reasoning, *content, *call_name, *call_args;
} harmony_case;

static void harmony_check(const json_t *tools, const harmony_case *c)
{
    const size_t len = strlen(c->text);
    sv_harmony w;
    REQUIRE(sv_harmony_parse(c->text, len, true, tools, "x", &w) >= 0);
    CHECKF(!strcmp(w.reasoning, c->reasoning), "%.60s: reasoning \"%s\", want \"%s\"", c->text, w.reasoning, c->reasoning);
    CHECKF(!strcmp(w.content, c->content), "%.60s: content \"%s\", want \"%s\"", c->text, w.content, c->content);
    CHECKF(w.reasoning_len == strlen(w.reasoning) && w.content_len == strlen(w.content), "%.60s: lengths", c->text);
    if (c->call_name) {
        const json_t *fn = json_object_get(json_array_get(w.calls, 0), "function");
        CHECKF(json_array_size(w.calls) == 1 && !strcmp(json_string_value(json_object_get(fn, "name")), c->call_name) &&
                   !strcmp(json_string_value(json_object_get(fn, "arguments")), c->call_args) &&
                   !strcmp(json_string_value(json_object_get(json_array_get(w.calls, 0), "id")), "call_x_0"),
               "%.60s: the call %s(%s)", c->text, c->call_name, c->call_args);
    } else
        CHECKF(!w.calls, "%.60s: no call wanted", c->text);
    for (size_t at = 0; at <= len; at++) {
        sv_harmony h;
        REQUIRE(sv_harmony_parse(c->text, at, false, tools, "x", &h) >= 0);
        CHECKF(!h.calls || memmem(c->text, at, "<|call|>", 8), "%.60s: a call before its message closed (at %zu)",
               c->text, at);
        CHECKF(h.reasoning_len <= w.reasoning_len && !memcmp(h.reasoning, w.reasoning, h.reasoning_len),
               "%.60s: at %zu the reasoning \"%s\" is no prefix of the whole's", c->text, at, h.reasoning);
        CHECKF(h.content_len <= w.content_len && !memcmp(h.content, w.content, h.content_len),
               "%.60s: at %zu the content \"%s\" is no prefix of the whole's", c->text, at, h.content);
        /* held back: a tail that may begin a mark is not shown */
        CHECKF(!(h.reasoning_len && h.reasoning[h.reasoning_len - 1] == '<') &&
                   !(h.content_len && h.content[h.content_len - 1] == '<' && w.content_len > h.content_len &&
                     w.content[h.content_len] == '|'),
               "%.60s: at %zu a mark's start was released", c->text, at);
        sv_harmony_free(&h);
    }
    sv_harmony_free(&w);
}

static void harmony_replies_are_split_by_channel(void)
{
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_current_weather\",\"parameters\":{}}},"
                               "{\"type\":\"function\",\"function\":{\"name\":\"generate_file\"}}]", 0, NULL);
    REQUIRE(tools);
    static const harmony_case cases[] = {
        /* the spec's reply with chain of thought ("<|return|>" ends the generation, so the text the
         * server sees ends before it; both spellings) */
        { "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
          "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.", "2 + 2 = 4.", NULL, NULL },
        { "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.",
          "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.", "2 + 2 = 4.", NULL, NULL },
        /* the spec's function call, the recipient in the channel section, with and without <|call|> */
        { "<|channel|>analysis<|message|>Need to use function get_current_weather.<|end|><|start|>assistant"
          "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>"
          "{\"location\":\"San Francisco\"}<|call|>",
          "Need to use function get_current_weather.", "", "get_current_weather", "{\"location\":\"San Francisco\"}" },
        { "<|channel|>analysis<|message|>Need to use function get_current_weather.<|end|><|start|>assistant"
          "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>"
          "{\"location\":\"San Francisco\"}",
          "Need to use function get_current_weather.", "", "get_current_weather", "{\"location\":\"San Francisco\"}" },
        /* the recipient in the role section (the spec allows either; the first message's role is the
         * prompt's last word, so the reply opens with " to=") */
        { " to=functions.get_current_weather<|channel|>commentary json<|message|>{\"location\": \"Paris\", \"unit\": "
          "\"celsius\"}",
          "", "", "get_current_weather", "{\"location\":\"Paris\",\"unit\":\"celsius\"}" },
        /* the spec's preamble: a commentary message without a recipient is for the user */
        { "<|channel|>analysis<|message|>{long chain of thought}<|end|><|start|>assistant<|channel|>commentary"
          "<|message|>**Action plan**:\n1. Generate an HTML file\n2. Generate a JavaScript for the Node.js server\n"
          "3. Start the server\n---\nWill start executing the plan step by step<|end|><|start|>assistant<|channel|>"
          "commentary to=functions.generate_file<|constrain|>json<|message|>{\"template\": \"basic_html\", \"path\": "
          "\"index.html\"}<|call|>",
          "{long chain of thought}",
          "**Action plan**:\n1. Generate an HTML file\n2. Generate a JavaScript for the Node.js server\n"
          "3. Start the server\n---\nWill start executing the plan step by step",
          "generate_file", "{\"template\":\"basic_html\",\"path\":\"index.html\"}" },
        /* a call to a function the request does not have, or whose body is no JSON object: text, as written */
        { "<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{}",
          "", "<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{}", NULL, NULL },
        { "<|channel|>commentary to=browser.search <|constrain|>json<|message|>{\"query\":\"x\"}",
          "", "<|channel|>commentary to=browser.search <|constrain|>json<|message|>{\"query\":\"x\"}", NULL, NULL },
        { "<|channel|>commentary to=functions.generate_file <|constrain|>json<|message|>{\"path\":",
          "", "<|channel|>commentary to=functions.generate_file <|constrain|>json<|message|>{\"path\":", NULL, NULL },
        /* cut short (max_tokens): the open message's text so far */
        { "<|channel|>analysis<|message|>Thinking about <b> and 2<3", "Thinking about <b> and 2<3", "", NULL, NULL },
        /* cut short inside a header: what follows the last whole message is content as written */
        { "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary to=functions.get_cur",
          "a", "<|start|>assistant<|channel|>commentary to=functions.get_cur", NULL, NULL },
        /* a reply outside the format: content as written */
        { "Hello <|there", "", "Hello <|there", NULL, NULL },
        { "", "", "", NULL, NULL },
        /* a stray "<|channel|>commentary to=assistant" before the channel (gpt-oss-20b writes it at
         * times; llama.cpp reads past it): the message is the analysis it heads */
        { "<|channel|>commentary to=assistant<|channel|>analysis<|message|>think<|end|><|start|>assistant"
          "<|channel|>final<|message|>ok",
          "think", "ok", NULL, NULL },
        { "<|channel|>commentary to=assistant<|channel|>commentary to=functions.get_current_weather <|constrain|>json"
          "<|message|>{\"location\":\"Oslo\"}",
          "", "", "get_current_weather", "{\"location\":\"Oslo\"}" },
        /* several analysis messages are joined */
        { "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>"
          "<|start|>assistant<|channel|>final<|message|>c",
          "ab", "c", NULL, NULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        harmony_check(tools, &cases[i]);
    /* without tools (tool_choice "none", or none given) no call counts */
    harmony_check(NULL, &(harmony_case){ "<|channel|>commentary to=functions.generate_file <|constrain|>json"
                                         "<|message|>{}",
                                         "", "<|channel|>commentary to=functions.generate_file <|constrain|>json"
                                         "<|message|>{}", NULL, NULL });
    /* random replies spelled from harmony's pieces (a fixed LCG): every cut's parts are prefixes of
     * the whole's and grow */
    {
        static const char *const parts[] = { "<|channel|>", "<|message|>", "<|end|>", "<|start|>", "assistant",
                                             " to=functions.get_current_weather", " to=python", "analysis", "final",
                                             "commentary", " json", "<|constrain|>", "{\"location\":\"x\"}", "hi",
                                             "<", "|", " ", "<|ret" };
        uint64_t st = 12345;
        int bad = 0;
        for (int r = 0; r < 400 && !bad; r++) {
            char text[512] = "";
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            const int n_parts = 1 + (int)(st >> 60);
            for (int k = 0; k < n_parts; k++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                strcat(text, parts[(st >> 33) % (sizeof parts / sizeof *parts)]);
            }
            const size_t len = strlen(text);
            sv_harmony w, h;
            REQUIRE(sv_harmony_parse(text, len, true, tools, "x", &w) >= 0);
            size_t last_r = 0, last_c = 0;
            for (size_t at = 0; at <= len && !bad; at++) {
                REQUIRE(sv_harmony_parse(text, at, false, tools, "x", &h) >= 0);
                bad = h.reasoning_len > w.reasoning_len || memcmp(h.reasoning, w.reasoning, h.reasoning_len) ||
                      h.content_len > w.content_len || memcmp(h.content, w.content, h.content_len) ||
                      h.reasoning_len < last_r || h.content_len < last_c;
                CHECKF(!bad, "random reply \"%s\": at %zu the parts \"%s\" / \"%s\" are no prefixes of \"%s\" / \"%s\"",
                       text, at, h.reasoning, h.content, w.reasoning, w.content);
                last_r = h.reasoning_len;
                last_c = h.content_len;
                sv_harmony_free(&h);
            }
            sv_harmony_free(&w);
        }
    }
    /* held back while streaming: a mark's start, a header not yet closed, a call's body */
    sv_harmony h;
    static const struct { const char *text, *reasoning, *content; } held[] = {
        { "<|channel|>analysis<|message|>ok<|e", "ok", "" },
        { "<|channel|>analysis<|message|>ok<", "ok", "" },
        { "<|channel|>analysis<|message|>ok<b", "ok<b", "" },
        { "<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|chan", "ok", "" },
        { "<|channel|>final<|message|>hi<|end|><|star", "", "hi" },
        { "<|channel|>fin", "", "" },
        { " to=functions.get_current_weather<|channel|>commentary json<|message|>{\"location\": \"Pa", "", "" },
        { "Plain", "", "Plain" },
    };
    for (size_t i = 0; i < sizeof held / sizeof *held; i++) {
        REQUIRE(sv_harmony_parse(held[i].text, strlen(held[i].text), false, tools, "x", &h) >= 0);
        CHECKF(!strcmp(h.reasoning, held[i].reasoning) && !strcmp(h.content, held[i].content) && !h.calls,
               "%s: streamed so far \"%s\" / \"%s\", want \"%s\" / \"%s\"", held[i].text, h.reasoning, h.content,
               held[i].reasoning, held[i].content);
        sv_harmony_free(&h);
    }
    json_decref(tools);
}

/* The form of a call, read off each template by rendering one (../shared/fixtures/chat): gpt-oss's
 * is harmony's message to functions.NAME. */
static void tool_forms_are_read_off_templates(void)
{
    static const struct { const char *dir; sv_tool_form form; } cases[] = {
        { "gpt-oss", SV_FORM_HARMONY }, { "qwen3", SV_FORM_HERMES }, { "granite-3.3", SV_FORM_GRANITE },
        { "mistral-v0.3", SV_FORM_MISTRAL }, { "llama3.1", SV_FORM_LLAMA3 }, { "qwen3.5", SV_FORM_XML },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[256];
        snprintf(path, sizeof path, "../shared/fixtures/chat/%s/template.jinja", cases[i].dir);
        FILE *f = fopen(path, "rb");
        if (!f) {
            CHECKF(0, "%s: cannot open", path);
            continue;
        }
        char buf[1 << 16];
        const size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        cdx_tmpl *t = NULL;
        cdx_err err = { 0 };
        REQUIRE(cdx_tmpl_parse(buf, n, &t, &err) == 0);
        json_t *tokens = json_pack("{s:s,s:s}", "bos_token", "<s>", "eos_token", "</s>");
        const sv_tool_form got = sv_tool_form_of(t, tokens);
        CHECKF(got == cases[i].form, "%s: form %s, want %s", cases[i].dir, sv_tool_form_names[got],
               sv_tool_form_names[cases[i].form]);
        json_decref(tokens);
        cdx_tmpl_free(t);
    }
}

/* A tool call and its result sent back to gpt-oss (tests/golden/harmony-roundtrip.json, made by
 * scripts/goldens/jinja-harmony-roundtrip.py): the messages as an OpenAI client sends them, after the
 * server's rewrite, render through caldrix's template engine as Python Jinja2 renders transformers'
 * form of the same conversation (the date the template writes masked); without the rewrite they do not. */
static void mask_date(char *s)
{
    for (char *d = strstr(s, "Current date: "); d && *d; d = NULL)
        for (char *q = d + 14; *q && q < d + 24; q++)
            if (*q >= '0' && *q <= '9')
                *q = 'D';
}

static void harmony_round_trip_renders_as_jinja2(void)
{
    json_error_t je;
    json_t *g = json_load_file("tests/golden/harmony-roundtrip.json", 0, &je);
    REQUIRE(g);
    FILE *f = fopen("../shared/fixtures/chat/gpt-oss/template.jinja", "rb");
    REQUIRE(f);
    static char buf[1 << 16];
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    cdx_tmpl *t = NULL;
    cdx_err err = { 0 };
    REQUIRE(cdx_tmpl_parse(buf, n, &t, &err) == 0);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *extra = json_object_get(c, "extra");
        json_t *kw = json_pack("{s:O}", "tools", json_object_get(extra, "tools"));
        json_t *tokens = json_deep_copy(extra);
        json_object_del(tokens, "tools");
        char *want = strdup(json_string_value(json_object_get(c, "rendered")));
        mask_date(want);
        for (int rewrite = 1; rewrite >= 0; rewrite--) {
            json_t *msgs = json_deep_copy(json_object_get(c, "openai_messages"));
            if (rewrite)
                sv_harmony_messages(msgs);
            char *text = NULL;
            size_t len = 0;
            const int rc = cdx_chat_render(t, msgs, true, tokens, kw, &text, &len, &err);
            if (text)
                mask_date(text);
            if (rewrite)
                CHECKF(!rc && !strcmp(text, want), "%s: renders as Jinja2 does (%s)\n--- got\n%s\n--- want\n%s", name,
                       rc ? err.msg : "", text ? text : "", want);
            else
                CHECKF(rc || strcmp(text, want), "%s: the client's form renders the same without the rewrite", name);
            free(text);
            json_decref(msgs);
        }
        free(want);
        json_decref(kw);
        json_decref(tokens);
    }
    cdx_tmpl_free(t);
    json_decref(g);
}

/* Whether the whole text is a sentence of g (a vocabulary of the 256 bytes). */
static bool grammar_accepts(const cdx_grammar *g, const char *text)
{
    static char bytes[256][1];
    const char *pieces[257];
    size_t lens[257];
    for (int b = 0; b < 256; b++)
        bytes[b][0] = (char)b, pieces[b] = bytes[b], lens[b] = 1;
    pieces[256] = NULL, lens[256] = 0;
    const int32_t eog = 256;
    cdx_grammar_vocab *v = NULL;
    cdx_matcher *m = NULL;
    cdx_err err = { 0 };
    bool ok = cdx_grammar_vocab_from_pieces(pieces, lens, 257, &eog, 1, &v, &err) == 0 &&
              cdx_matcher_create(g, v, &m, &err) == 0 && cdx_matcher_accept_bytes(m, text, strlen(text), &err) == 0 &&
              cdx_matcher_done(m);
    cdx_matcher_free(m);
    cdx_grammar_vocab_free(v);
    return ok;
}

/* tool_choice on gpt-oss: the reply is one message to functions.NAME on the commentary channel whose
 * body is the arguments under the tool's schema (the spec's call, without the <|call|> that ends
 * the generation), and the parser reads it back as that call. */
static void harmony_calls_are_forced(void)
{
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_current_weather\",\"parameters\":"
                        "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"}},\"required\":[\"location\"],"
                        "\"additionalProperties\":false}}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]";
    static const char call[] = "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>"
                               "{\"location\":\"San Francisco\"}";
    char body[1024];
    sv_params p;
    sv_error e;
    for (int named = 0; named < 2; named++) {
        snprintf(body, sizeof body, "{%s,%s,\"tool_choice\":%s}", m, tools,
                 named ? "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}" : "\"required\"");
        REQUIRE(parse(body, SV_CHAT, &p, &e) == 0);
        CHECKF(sv_tool_grammar(&p, SV_FORM_HARMONY, &e) == 0 && p.grammar, "the grammar: %s", e.message);
        if (p.grammar) {
            CHECK(grammar_accepts(p.grammar, call) == !named);
            CHECK(grammar_accepts(p.grammar, "<|channel|>commentary to=functions.g <|constrain|>json<|message|>{}"));
            CHECK(!grammar_accepts(p.grammar, "<|channel|>commentary to=functions.get_current_weather <|constrain|>json"
                                              "<|message|>{\"where\":\"SF\"}"));
            CHECK(!grammar_accepts(p.grammar, "<|channel|>final<|message|>Hi"));
        }
        sv_params_free(&p);
    }
    json_t *t = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_current_weather\"}}]", 0, NULL);
    sv_harmony h;
    CHECK(sv_harmony_parse(call, strlen(call), true, t, "x", &h) == 1 && !strcmp(h.content, ""));
    sv_harmony_free(&h);
    json_decref(t);
}

static void tool_fields_are_checked(void)
{
    refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}", SV_CHAT, 400,
            "tools[0].function.name");
    refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", SV_CHAT, 400,
            "tool_choice");
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    char body[512];
    sv_params p;
    sv_error e;
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}", tools);
    REQUIRE(parse(body, SV_CHAT, &p, &e) == 0);
    CHECK(p.tools && json_array_size(p.tools) == 1);
    sv_params_free(&p);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"none\"}", tools);
    REQUIRE(parse(body, SV_CHAT, &p, &e) == 0);
    CHECK(!p.tools && p.extra); /* the template still sees them; the reply is not scanned */
    sv_params_free(&p);
}

/* Structured output (issue 40): response_format json_object/json_schema, llama-server's json_schema and
 * grammar compile into p.grammar; bad ones are 400s naming the field, the place and the reason. */
static void structured_output_fields(void)
{
    static const char *const ok_cases[][2] = {
        { "\"response_format\":{\"type\":\"json_object\"}", "response_format" },
        { "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":"
          "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}", "response_format.json_schema.schema" },
        { "\"response_format\":{\"type\":\"json_object\",\"schema\":{\"type\":\"array\"}}", "response_format.schema" },
        { "\"json_schema\":{\"type\":\"string\",\"maxLength\":5}", "json_schema" },
        { "\"grammar\":\"root ::= [a-z]+\"", "grammar" },
    };
    char body[768];
    sv_params p;
    sv_error e;
    for (size_t i = 0; i < sizeof ok_cases / sizeof ok_cases[0]; i++)
        for (int chat = 0; chat < 2; chat++) {
            snprintf(body, sizeof body, chat ? "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}"
                                             : "{\"prompt\":\"x\",%s}", ok_cases[i][0]);
            int rc = parse(body, chat ? SV_CHAT : SV_COMPLETION, &p, &e);
            CHECKF(rc == 0 && p.grammar && !strcmp(p.grammar_param, ok_cases[i][1]), "%s: rc %d, %s", body, rc,
                   rc ? e.message : p.grammar_param);
            sv_params_free(&p);
        }
    /* refusals: body, param, a part of the message */
    static const char *const bad[][3] = {
        { "\"response_format\":{\"type\":\"bogus\"}", "response_format.type", "\"bogus\" is unknown" },
        { "\"response_format\":{}", "response_format.type", "must be a string" },
        { "\"response_format\":\"json\"", "response_format", "must be an object" },
        { "\"response_format\":{\"type\":\"json_schema\"}", "response_format.json_schema", "is missing" },
        { "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":"
          "{\"a\":{\"type\":\"integer\",\"multipleOf\":3}}}}}", "response_format.json_schema.schema",
          "#/properties/a: keyword \"multipleOf\" is not supported" },
        { "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"strict\":1}}",
          "response_format.json_schema.strict", "must be a boolean" },
        { "\"json_schema\":{\"$ref\":\"#/$defs/nowhere\"}", "json_schema", "nowhere" },
        { "\"json_schema\":{\"type\":\"string\",\"maxLength\":100000}", "json_schema", "maxLength" },
        { "\"json_schema\":[1]", "json_schema", "must be a JSON Schema" },
        { "\"grammar\":\"root ::= (\\\"a\\\" | \\\"b\\\"\"", "grammar", "grammar:1:10: unbalanced '('" },
        { "\"grammar\":\"root ::= item\"", "grammar", "undefined rule 'item'" },
        { "\"grammar\":7", "grammar", "must be a string" },
        { "\"json_schema\":{\"type\":\"string\"},\"grammar\":\"root ::= \\\"a\\\"\"", "grammar", "already constrains" },
        { "\"response_format\":{\"type\":\"json_object\"},\"json_schema\":{}", "json_schema", "already constrains" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{\"prompt\":\"x\",%s}", bad[i][0]);
        refused(body, SV_COMPLETION, 400, bad[i][1]);
        if (parse(body, SV_COMPLETION, &p, &e))
            CHECKF(strstr(e.message, bad[i][2]) != NULL, "%s: message names \"%s\": %s", body, bad[i][2], e.message);
        sv_params_free(&p);
    }
    CHECK(parse("{\"prompt\":\"x\",\"response_format\":{\"type\":\"text\"}}", SV_COMPLETION, &p, &e) == 0 && !p.grammar);
    sv_params_free(&p);
    CHECK(parse("{\"prompt\":\"x\",\"response_format\":null,\"grammar\":null}", SV_COMPLETION, &p, &e) == 0 && !p.grammar);
    sv_params_free(&p);
}

/* tool_choice "required" and a named function force calls (the grammar is built once the model's
 * form is known); a name not among the tools, "required" without tools, another constraint beside it: 400. */
static void tool_choice_forcing(void)
{
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]";
    char body[768];
    sv_params p;
    sv_error e;
    snprintf(body, sizeof body, "{%s,%s,\"tool_choice\":\"required\"}", m, tools);
    REQUIRE(parse(body, SV_CHAT, &p, &e) == 0);
    CHECK(p.force == SV_FORCE_REQUIRED && p.tools && p.parallel_tool_calls && !p.grammar);
    sv_params_free(&p);
    snprintf(body, sizeof body, "{%s,%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},"
             "\"parallel_tool_calls\":false}", m, tools);
    REQUIRE(parse(body, SV_CHAT, &p, &e) == 0);
    CHECK(p.force == SV_FORCE_NAMED && !strcmp(p.force_name, "g") && !p.parallel_tool_calls);
    sv_params_free(&p);
    snprintf(body, sizeof body, "{%s,%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"h\"}}}", m, tools);
    refused(body, SV_CHAT, 400, "tool_choice.function.name");
    snprintf(body, sizeof body, "{%s,%s,\"tool_choice\":{\"type\":\"function\"}}", m, tools);
    refused(body, SV_CHAT, 400, "tool_choice");
    snprintf(body, sizeof body, "{%s,%s,\"tool_choice\":\"always\"}", m, tools);
    refused(body, SV_CHAT, 400, "tool_choice");
    snprintf(body, sizeof body, "{%s,%s,\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}", m,
             tools);
    refused(body, SV_CHAT, 400, "tool_choice");
    snprintf(body, sizeof body, "{%s,%s,\"tool_choice\":\"required\",\"parallel_tool_calls\":1}", m, tools);
    refused(body, SV_CHAT, 400, "parallel_tool_calls");
}

/* Issue 35 item 8: a role outside OpenAI's list is a 400 naming it; jansson's flag names stay inside. */
static void roles_and_json_messages(void)
{
    refused("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", SV_CHAT, 400, "messages[0].role");
    {
        sv_params p;
        sv_error e;
        if (parse("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", SV_CHAT, &p, &e))
            CHECKF(strstr(e.message, "\"wizard\"") && strstr(e.message, "system, developer, user, assistant, tool, function"),
                   "the message names the role and the allowed ones: %s", e.message);
        sv_params_free(&p);
    }
    refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"\",\"content\":\"y\"}]}", SV_CHAT, 400,
            "messages[1].role");
    static const char *const roles[] = { "system", "developer", "user", "assistant", "tool", "function" };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"%s\",\"content\":\"x\"}]}", roles[i]);
        sv_params p;
        sv_error e;
        CHECKF(parse(body, SV_CHAT, &p, &e) == 0, "role %s refused: %s", roles[i], e.message);
        sv_params_free(&p);
    }
    static const char *const bodies[] = { "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000\"}]}",
                                          "{\"prompt\":\"x\",\"prompt\":\"y\"}" };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        refused(bodies[i], SV_CHAT, 400, NULL);
        sv_params p;
        sv_error e;
        if (parse(bodies[i], SV_CHAT, &p, &e))
            CHECKF(!strstr(e.message, "JSON_") && !strstr(e.message, "jansson") && strstr(e.message, "line 1"),
                   "message without library internals: %s", e.message);
        sv_params_free(&p);
    }
}

/* Issue 35 item 8: the framing libmicrohttpd 0.9.75 answers in HTML (twice, for a bad
 * Content-Length) is refused by the gate first, with the status it deserves. */
static void request_heads_are_checked(void)
{
    static const struct { const char *head; int rc, status; const char *code; } cases[] = {
        { "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 0, 0, NULL },
        { "GET /health HTTP/1.0\n\n", 0, 0, NULL },
        { "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", 0, 0, NULL },
        { "POST /v1/completions HTTP/1.1\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n", 0, 0, NULL },
        { "POST /v1/completions HTTP/1.1\r\nHost: x\r\n", 1, 0, NULL },
        { "POST /v1/comp", 1, 0, NULL },
        { "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n", -1, 400, "bad_content_length" },
        { "POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", -1, 413, "request_too_large" },
        { "POST /v1/completions HTTP/1.1\r\nContent-Length: 9000000\r\n\r\n", -1, 413, "request_too_large" },
        { "POST /v1/completions HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n", -1, 400, "bad_content_length" },
        { "POST /v1/completions HTTP/1.1\r\nContent-Length:\r\n\r\n", -1, 400, "bad_content_length" },
        { "POST /v1/completions HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", -1, 400, "bad_content_length" },
        { "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", -1, 400, "bad_content_length" },
        { "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", -1, 501, "unsupported_transfer_encoding" },
        { "GARBAGE\r\n\r\n", -1, 400, "bad_request_line" },
        { "GET  /health HTTP/1.1\r\n\r\n", -1, 400, "bad_request_line" },
        { "GET /health HTTP/2.0\r\n\r\n", -1, 505, "http_version_not_supported" },
        { "GET /health FTP/1.1\r\n\r\n", -1, 400, "http_version_not_supported" },
        { "GET /health HTTP/1.1\r\nNo colon here\r\n\r\n", -1, 400, "bad_header" },
        { "GET /health HTTP/1.1\r\nHost : x\r\n\r\n", -1, 400, "bad_header" },
        { "GET /health HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", -1, 400, "bad_header" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sv_head h;
        sv_error e = {0};
        int rc = sv_http_head_check(cases[i].head, strlen(cases[i].head), (size_t)8 << 20, &h, &e);
        CHECKF(rc == cases[i].rc, "case %zu: rc %d, want %d (%s)", i, rc, cases[i].rc, e.message);
        if (rc == -1 && cases[i].rc == -1)
            CHECKF(e.status == cases[i].status && !strcmp(e.code, cases[i].code), "case %zu: %d %s, want %d %s (%s)", i,
                   e.status, e.code, cases[i].status, cases[i].code, e.message);
    }
    sv_head h;
    sv_error e;
    const char *ok = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1234\r\n\r\nbody";
    REQUIRE(sv_http_head_check(ok, strlen(ok), 1 << 20, &h, &e) == 0);
    CHECK(!strcmp(h.method, "POST") && !strcmp(h.target, "/v1/chat/completions") && h.has_length &&
          h.content_length == 1234 && !h.chunked && h.head_bytes == strlen(ok) - 4);
    /* a head that never ends is refused once it passes SV_MAX_HEAD, not waited on */
    char *big = malloc(SV_MAX_HEAD + 64);
    REQUIRE(big);
    int n = snprintf(big, SV_MAX_HEAD + 64, "GET /health HTTP/1.1\r\nX: ");
    memset(big + n, 'a', SV_MAX_HEAD + 64 - (size_t)n);
    CHECK(sv_http_head_check(big, SV_MAX_HEAD, 1 << 20, &h, &e) == -1 && e.status == 431);
    memcpy(big, "GET /", 5);
    memset(big + 5, 'a', SV_MAX_HEAD + 59);
    CHECK(sv_http_head_check(big, SV_MAX_HEAD, 1 << 20, &h, &e) == -1 && e.status == 431);
    free(big);
}

/* Chunked bodies: libmicrohttpd answers a bad chunk in HTML; the gate checks the framing itself. */
static void chunked_bodies_are_checked(void)
{
    static const struct { const char *body; int rc, status; } cases[] = {
        { "2\r\n{}\r\n0\r\n\r\n", 0, 0 },
        { "1;ext=1\r\n{\r\n1\r\n}\r\n0\r\nX-Trailer: y\r\n\r\n", 0, 0 },
        { "A\n0123456789\n0\n\n", 0, 0 },
        { "2\r\n{}\r\n0\r\n", 1, 0 },
        { "2\r\n{", 1, 0 },
        { "2", 1, 0 },
        { "", 1, 0 },
        { "zz\r\n", -1, 400 },
        { "\r\n", -1, 400 },
        { "2 x\r\n{}\r\n0\r\n\r\n", -1, 400 },
        { "2\r\n{}}\r\n0\r\n\r\n", -1, 400 },
        { "11111111111111111\r\n", -1, 400 },
        { "FFFFFFFF\r\n", -1, 413 },
        { "2\r\n{}\r\n0\r\nnot a trailer\r\n\r\n", -1, 400 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sv_error e = {0};
        int rc = sv_http_chunks_check(cases[i].body, strlen(cases[i].body), 1 << 20, &e);
        CHECKF(rc == cases[i].rc && (rc != -1 || e.status == cases[i].status), "case %zu: rc %d status %d, want %d %d (%s)",
               i, rc, e.status, cases[i].rc, cases[i].status, e.message);
    }
}

/* The gate reads a chunked body as it arrives: the scan resumes where it stopped, over a buffer that
 * grows a byte at a time, and gives the data of every chunk, the same as a scan of the whole. */
static void chunked_scan_resumes(void)
{
    const char *body = "3;x=y\r\nabc\r\n1\r\nd\r\n10\r\n0123456789abcdef\r\n0\r\nT: 1\r\n\r\n";
    const size_t n = strlen(body);
    char out[64] = {0};
    sv_chunks st = {0};
    sv_error e = {0};
    int rc = 1;
    size_t upto = 0;
    while (rc == 1 && upto < n)
        rc = sv_http_chunks_scan(&st, body, ++upto, 1 << 20, out, &e);
    CHECKF(rc == 0 && upto == n && st.at == n && st.total == 20 && !memcmp(out, "abcd0123456789abcdef", 20),
           "rc %d after %zu of %zu bytes, at %zu, total %zu, data \"%.20s\"", rc, upto, n, st.at, st.total, out);
    sv_chunks st2 = {0};
    CHECK(sv_http_chunks_scan(&st2, "8\r\nabcd", 8, 10, NULL, &e) == 1 && st2.at == 0 && st2.total == 0);
    CHECK(sv_http_chunks_scan(&st2, "8\r\nabcdefgh\r\n8\r\n", 17, 10, NULL, &e) == -1 && e.status == 413 &&
          st2.total == 8);
}

int main(void)
{
    RUN("chat defaults are OpenAI's (temperature 1, top_p 1, no top-k/min-p, random seed)", chat_defaults_are_openais);
    RUN("chat fields are read, text parts joined, unknown fields ignored", chat_fields_are_read);
    RUN("completion prompts: a string, ids, a list of one", completion_prompts);
    RUN("bad requests are 400s naming the field", bad_requests_name_the_field);
    RUN("invalid UTF-8 is a 400 naming the key it sits in", invalid_utf8_names_the_field);
    RUN("tokenize and detokenize bodies", tokenize_fields);
    RUN("UTF-8 sanitizing and the metrics text", sanitize_and_metrics);
    RUN("tool calls are found in every form, streamed or whole", tool_calls_are_found_in_every_form);
    RUN("harmony replies are split by channel: reasoning, content, calls; streamed parts are prefixes of the whole's",
        harmony_replies_are_split_by_channel);
    RUN("the tool-call form is read off each chat template (gpt-oss: harmony)", tool_forms_are_read_off_templates);
    RUN("a tool call and its result sent back render through gpt-oss's template as Jinja2 renders them",
        harmony_round_trip_renders_as_jinja2);
    RUN("tool_choice on gpt-oss forces one harmony call to functions.NAME, its body the arguments", harmony_calls_are_forced);
    RUN("tools and tool_choice are checked", tool_fields_are_checked);
    RUN("response_format, json_schema and grammar compile; bad ones are 400s naming field, place and reason",
        structured_output_fields);
    RUN("tool_choice required / named force calls; bad ones are 400s naming the field", tool_choice_forcing);
    RUN("unknown message roles are 400s; JSON errors name no library flag", roles_and_json_messages);
    RUN("request heads: bad Content-Length, request line, headers, encodings are refused with their status",
        request_heads_are_checked);
    RUN("chunked bodies: bad sizes, data without CRLF, bad trailers are refused; partial ones wait", chunked_bodies_are_checked);
    RUN("a chunked body's scan resumes over a growing buffer and gives the data", chunked_scan_resumes);
    return t_done("server_request");
}
