/* caldrix verify REF: asks a model a question it cannot answer by luck (seed 004: "What is the
 * capital of France?" -> Paris) and says whether it did. Greedy, so the verdict is reproducible.
 * A model with a chat template is asked as a chat; a base model completes a sentence. */
#include "cli.h"
#include "cli_hub.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The probes, one row per kind of model: what is asked and what the answer must contain. */
typedef struct {
    const char *mode;   /* "chat" or "completion" */
    const char *prompt; /* the user message (chat) or the text to complete */
    const char *expect; /* a substring the greedy answer must contain */
} verify_probe;

static const verify_probe k_probes[] = {
    { "chat", "What is the capital of France? Answer in one word.", "Paris" },
    { "completion", "The capital of France is the city of", "Paris" },
};

static void verify_usage(FILE *f)
{
    fprintf(f,
            "usage: caldrix verify MODEL [--prompt TEXT --expect TEXT] [--chat | --no-chat] [-n N] [-t N] [--json]\n\n"
            "Asks MODEL (a file, folder, alias, owner/name[@rev] or ollama:name[:tag]; downloaded like run)\n"
            "a question it cannot answer by luck, greedily, and checks the answer:\n"
            "  a model with a chat template:  \"%s\" -> must contain \"%s\"\n"
            "  a base model:                  \"%s\" -> must contain \"%s\"\n"
            "Exit status: 0 the answer passed, 1 it did not (or the model did not load), 2 bad usage.\n\n"
            "options:\n"
            "  --prompt TEXT   ask this instead (with --expect)\n"
            "  --expect TEXT   the text the answer must contain (with --prompt)\n"
            "  --chat          ask as a chat (the model's template, else ChatML); --no-chat: complete the\n"
            "                  text as it is (default: chat when the model has a chat template)\n"
            "  -n N            tokens to generate at most (default 48, 1..4096)\n"
            "  -t, --threads N threads (default: the cores this process may use)\n"
            "  --json          one JSON object: model, mode, prompt, expect, answer, tokens, pass\n",
            k_probes[0].prompt, k_probes[0].expect, k_probes[1].prompt, k_probes[1].expect);
}

typedef struct {
    char *text;
    size_t n, cap;
    int64_t tokens;
    cdx_finish finish;
    char error[512];
} verify_answer;

static void on_event(const cdx_event *ev)
{
    verify_answer *a = ev->user;
    if (ev->text_len) {
        if (a->n + ev->text_len + 1 > a->cap) {
            size_t cap = (a->n + ev->text_len + 1) * 2;
            char *g = realloc(a->text, cap);
            if (!g)
                return; /* the answer is cut; the check then fails, it never passes wrongly */
            a->text = g;
            a->cap = cap;
        }
        memcpy(a->text + a->n, ev->text, ev->text_len);
        a->n += ev->text_len;
        a->text[a->n] = 0;
    }
    if (ev->finish != CDX_FINISH_NONE) {
        a->finish = ev->finish;
        if (ev->message)
            snprintf(a->error, sizeof a->error, "%s", ev->message);
    } else {
        a->tokens++;
    }
}

int cmd_verify(int argc, char **argv)
{
    const char *ref = NULL, *prompt = NULL, *expect = NULL;
    int chat = -1; /* -1: by the model */
    long n_gen = 48, threads = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            verify_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--prompt") && more) {
            prompt = argv[++i];
        } else if (!strcmp(a, "--expect") && more) {
            expect = argv[++i];
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
        } else if (!strcmp(a, "--no-chat")) {
            chat = 0;
        } else if (!strcmp(a, "-n") && more) {
            if (cli_parse_int("-n", argv[++i], 1, 4096, &n_gen))
                return 2;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && more) {
            if (cli_parse_engine_opt(a, argv[++i], CDX_OPT_THREADS, &threads))
                return 2;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (a[0] == '-' && a[1]) {
            static const char *const valued[] = { "--prompt", "--expect", "-n", "-t", "--threads" };
            bool needs = false;
            for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
                needs |= !strcmp(a, valued[k]);
            fprintf(stderr, "caldrix verify: %s: %s (caldrix verify --help)\n", a, needs ? "needs a value" : "unknown option");
            return 2;
        } else if (!ref) {
            ref = a;
        } else {
            fprintf(stderr, "caldrix verify: one model at a time (\"%s\" and \"%s\")\n", ref, a);
            return 2;
        }
    }
    if (!ref) {
        verify_usage(stderr);
        return 2;
    }
    if (!prompt != !expect) {
        fprintf(stderr, "caldrix verify: --prompt and --expect go together (the answer is checked against --expect)\n");
        return 2;
    }
    if (expect && !*expect) {
        fprintf(stderr, "caldrix verify: --expect is empty: every answer would pass\n");
        return 2;
    }

    cdx_err err = { 0 };
    cli_hub_ui ui;
    cdx_hub_opts ho;
    cli_hub_opts_init(&ho, &ui, json);
    cdx_engine_opts eo = cdx_engine_defaults();
    if (threads)
        eo.n_threads = (int)threads;
    eo.max_batch = 1;
    cdx_load_opts lo = cli_load_opts(&ho, CDX_DTYPE_AUTO, 0);
    lo.chat = chat != 0;
    lo.engine = &eo;
    cdx_loaded *ld = NULL;
    cdx_load_stage at;
    if (cdx_load(ref, &lo, &ld, &at, &err)) {
        fprintf(stderr, "caldrix verify: %s\n", err.msg);
        return 1;
    }
    int status = 1;
    char *text = NULL;
    int32_t *ids = NULL;
    verify_answer ans = { 0 };
    json_t *msgs = NULL, *kwargs = NULL;
    if (!ld->tok) {
        fprintf(stderr, "caldrix verify: %s has no tokenizer: there is no text to ask it with\n", ref);
        goto done;
    }
    /* chat when asked, or by default when the model carries its own template (ChatML does not count) */
    bool as_chat = chat == 1 || (chat == -1 && ld->chat.tmpl && !ld->chat.chatml);
    const verify_probe *p = &k_probes[as_chat ? 0 : 1];
    const char *question = prompt ? prompt : p->prompt, *want = expect ? expect : p->expect;
    if (as_chat) {
        size_t len = 0;
        msgs = json_pack("[{s:s,s:s}]", "role", "user", "content", question);
        kwargs = json_pack("{s:b}", "enable_thinking", 0); /* a thinking model answers, not muses */
        if (!msgs || !kwargs ||
            cdx_chat_render(ld->chat.tmpl, msgs, true, ld->chat.tokens, kwargs, &text, &len, &err)) {
            fprintf(stderr, "caldrix verify: the chat template: %s\n", msgs && kwargs ? err.msg : "out of memory");
            goto done;
        }
    } else if (!(text = strdup(question))) {
        fprintf(stderr, "caldrix verify: out of memory\n");
        goto done;
    }
    /* a model's own template writes its special tokens; ChatML and a completion get the tokenizer's
     * (its BOS), as run does */
    bool add_special = !as_chat || ld->chat.chatml;
    size_t need = 0, n_ids = 0;
    if (cdx_tok_encode(ld->tok, text, strlen(text), add_special, true, NULL, 0, &need, &err) ||
        !(ids = malloc((need + 1) * sizeof *ids)) ||
        cdx_tok_encode(ld->tok, text, strlen(text), add_special, true, ids, need, &n_ids, &err)) {
        fprintf(stderr, "caldrix verify: tokenizing the prompt: %s\n", ids || !need ? err.msg : "out of memory");
        goto done;
    }
    cdx_request r = cdx_request_defaults();
    r.prompt = ids;
    r.n_prompt = (int64_t)n_ids;
    r.max_tokens = n_gen;
    r.sampling.temp = 0; /* greedy: the same verdict every time */
    r.on_event = on_event;
    r.user = &ans;
    uint64_t id;
    if (cdx_engine_submit(ld->engine, &r, &id, &err)) {
        fprintf(stderr, "caldrix verify: %s\n", err.msg);
        goto done;
    }
    while (cdx_engine_busy(ld->engine))
        if (cdx_engine_step(ld->engine, &err)) {
            fprintf(stderr, "caldrix verify: %s\n", err.msg);
            goto done;
        }
    if (ans.finish == CDX_FINISH_ERROR) {
        fprintf(stderr, "caldrix verify: %s\n", ans.error);
        goto done;
    }
    const char *answer = ans.text ? ans.text : "";
    bool pass = strstr(answer, want) != NULL;
    if (json) {
        json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:b}", "model", ld->path ? ld->path : ref, "mode",
                              as_chat ? "chat" : "completion", "prompt", question, "expect", want, "answer", answer,
                              "tokens", (json_int_t)ans.tokens, "pass", pass);
        char *s = o ? json_dumps(o, JSON_ENSURE_ASCII) : NULL;
        if (!s) {
            fprintf(stderr, "caldrix verify: out of memory\n");
            json_decref(o);
            goto done;
        }
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        printf("%s: %s asked (%s, greedy, %lld tokens) \"%s\"\n  answered: \"%s\"\n  %s \"%s\"\n",
               pass ? "PASS" : "FAIL", ref, as_chat ? "chat" : "completion", (long long)ans.tokens, question, answer,
               pass ? "contains" : "does not contain", want);
    }
    status = pass ? 0 : 1;
done:
    json_decref(msgs);
    json_decref(kwargs);
    free(ids);
    free(text);
    free(ans.text);
    cdx_load_close(ld);
    return status;
}
