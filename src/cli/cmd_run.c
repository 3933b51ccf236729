/* caldrix run: generate text from a model, streaming to stdout (or one JSON object with --json). */
#include "cli.h"
#include "cli_hub.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"
#include "caldrix/template.h"
#include "caldrix/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char k_run_usage[] =
    "usage: caldrix run [MODEL] [-p TEXT | --prompt-ids 1,2,3] [options]\n"
    "\n"
    "MODEL is a .gguf file, a Hugging Face checkpoint directory, an alias (caldrix models supported),\n"
    "owner/name[@revision] from the Hugging Face Hub, or ollama:name[:tag]; a model named that way is\n"
    "checked and downloaded into its cache first. Without MODEL, the bundled stories260K model runs.\n"
    "\n"
    "  -p, --prompt TEXT      prompt text (tokenized with the model's tokenizer, BOS added if it says so)\n"
    "  --prompt-ids IDS       comma-separated token ids, used exactly as given\n"
    "  -n N                   tokens to generate (default 256)\n"
    "  --temp T               temperature; 0 is greedy (default 0.8)\n"
    "  --top-k K              keep the K most likely tokens (default 40; 0 = off)\n"
    "  --top-p P              nucleus sampling (default 0.95; 1 = off)\n"
    "  --min-p P              drop tokens below P x the top probability (default 0.05; 0 = off)\n"
    "  --repeat-penalty R     penalise recent tokens (default 1 = off)\n"
    "  --seed S               sampling seed (default 0)\n"
    "  --ctx N                context length (default min(4096, the model's))\n"
    "  --dtype f32            compute type (f32 is the only one on the CPU for now)\n"
    "  --threads N            worker threads (default: all cores)\n"
    "  --isa NAME             force a kernel set: avx512, avx2 or scalar (default: the best this CPU has)\n"
    "  --chat                 wrap the prompt (-p, or stdin when it is not a terminal) in the model's chat\n"
    "                         template as one user message, with the generation prompt\n"
    "  --system TEXT          with --chat, a system message before the user's\n"
    "  --ignore-eos           do not stop at end-of-generation tokens\n"
    "  --top-logits K         with --json, the K highest raw logits of every step\n"
    "  --json                 print one JSON object instead of streaming text\n";

typedef struct {
    const char *model, *prompt, *prompt_ids, *isa, *system;
    long n_gen, ctx, threads, top_logits;
    bool json, ignore_eos, chat;
    cdx_sampler_params sp;
} run_opts;

static int parse_ids(const char *s, int32_t **out, size_t *n_out)
{
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "caldrix: --prompt-ids: \"%s\" is not a comma-separated list of token ids\n", s);
            free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *g = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!g) {
                free(ids);
                return -1;
            }
            ids = g;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(stderr, "caldrix: --prompt-ids is empty\n");
        free(ids);
        return -1;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

static int parse_run_args(int argc, char **argv, run_opts *o)
{
    *o = (run_opts){ .n_gen = 256, .ctx = 0, .threads = 0, .sp = cdx_sampler_defaults() };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        double d;
#define NEED_VALUE()                                                                   \
    do {                                                                               \
        if (!v) {                                                                      \
            fprintf(stderr, "caldrix run: %s needs a value (caldrix run --help)\n", a); \
            return 2;                                                                  \
        }                                                                              \
        i++;                                                                           \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(k_run_usage, stdout);
            exit(0);
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            NEED_VALUE();
            o->prompt = v;
        } else if (!strcmp(a, "--prompt-ids")) {
            NEED_VALUE();
            o->prompt_ids = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 0, 1 << 24, &o->n_gen)) return 2;
        } else if (!strcmp(a, "--temp")) {
            NEED_VALUE();
            if (cli_parse_float(a, v, 0, 100, &d)) return 2;
            o->sp.temp = (float)d;
        } else if (!strcmp(a, "--top-k")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 0, 1 << 24, &l)) return 2;
            o->sp.top_k = (int32_t)l;
        } else if (!strcmp(a, "--top-p")) {
            NEED_VALUE();
            if (cli_parse_float(a, v, 0, 1, &d)) return 2;
            o->sp.top_p = (float)d;
        } else if (!strcmp(a, "--min-p")) {
            NEED_VALUE();
            if (cli_parse_float(a, v, 0, 1, &d)) return 2;
            o->sp.min_p = (float)d;
        } else if (!strcmp(a, "--repeat-penalty")) {
            NEED_VALUE();
            if (cli_parse_float(a, v, 1e-3, 100, &d)) return 2;
            o->sp.repeat_penalty = (float)d;
        } else if (!strcmp(a, "--seed")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 0, INT64_MAX, &l)) return 2;
            o->sp.seed = (uint64_t)l;
        } else if (!strcmp(a, "--ctx")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 1, 1 << 24, &o->ctx)) return 2;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 1, 1024, &o->threads)) return 2;
        } else if (!strcmp(a, "--top-logits")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 0, 1 << 20, &o->top_logits)) return 2;
        } else if (!strcmp(a, "--dtype")) {
            NEED_VALUE();
            if (strcmp(v, "f32")) {
                fprintf(stderr, "caldrix run: --dtype is \"%s\"; the CPU computes in f32 only for now (use --dtype f32)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--isa")) {
            NEED_VALUE();
            o->isa = v;
        } else if (!strcmp(a, "--system")) {
            NEED_VALUE();
            o->system = v;
        } else if (!strcmp(a, "--chat")) {
            o->chat = true;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "caldrix run: unknown option \"%s\" (caldrix run --help)\n", a);
            return 2;
        } else if (!o->model) {
            o->model = a;
        } else {
            fprintf(stderr, "caldrix run: unexpected argument \"%s\" (one MODEL only)\n", a);
            return 2;
        }
#undef NEED_VALUE
    }
    if (o->chat && o->prompt_ids) {
        fprintf(stderr, "caldrix run: --chat renders text through the chat template; it takes -p, not --prompt-ids\n");
        return 2;
    }
    if (o->prompt && o->prompt_ids) {
        fprintf(stderr, "caldrix run: give either -p or --prompt-ids, not both\n");
        return 2;
    }
    return 0;
}

/* A tokenizer for the model: the GGUF's own vocabulary, or the checkpoint's tokenizer files.
 * Returns NULL (and no error) when a checkpoint has none. */
static int open_tokenizer(const char *path, const cdx_model *m, cdx_tok **tok, cdx_err *err)
{
    *tok = NULL;
    const cdx_gguf *g = cdx_model_gguf(m);
    if (g)
        return cdx_gguf_find(g, "tokenizer.ggml.model") ? cdx_tok_open_gguf(g, tok, err) : CDX_OK;
    static const char *const files[] = { "tokenizer.json", "tokenizer.model", "vocab.json" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", path, files[i]);
        if (stat(p, &st) == 0)
            return cdx_tok_open_dir(path, tok, err);
    }
    return CDX_OK;
}

/* The model's chat template around one user message (and an optional system message), as
 * transformers' apply_chat_template(add_generation_prompt=True) renders it. *out: heap text. */
static int render_chat(const char *model, const char *system, const char *user, char **out, cdx_err *err)
{
    char *src = NULL;
    json_t *tokens = NULL, *msgs = json_array();
    cdx_tmpl *t = NULL;
    size_t len = 0;
    int rc = cdx_chat_template_load(model, NULL, &src, &tokens, err);
    if (!rc)
        rc = cdx_tmpl_parse(src, strlen(src), &t, err);
    if (!rc) {
        if (system)
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", user));
        rc = cdx_chat_render(t, msgs, true, tokens, NULL, out, &len, err);
    }
    cdx_tmpl_free(t);
    json_decref(msgs);
    json_decref(tokens);
    free(src);
    return rc;
}

static char *read_stdin_text(void)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *g = cap > ((size_t)64 << 20) ? NULL : realloc(buf, cap *= 2);
            if (!g) {
                free(buf);
                return NULL;
            }
            buf = g;
        }
    }
    if (buf) {
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            n--;
        buf[n] = 0;
    }
    return buf;
}

typedef struct {
    int32_t *tokens;
    size_t n, cap;
} id_list;

static int id_push(id_list *l, int32_t id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        int32_t *g = realloc(l->tokens, cap * sizeof *g);
        if (!g)
            return -1;
        l->tokens = g;
        l->cap = cap;
    }
    l->tokens[l->n++] = id;
    return 0;
}

static bool is_eog(const cdx_hparams *hp, const cdx_tok *tok, int32_t id)
{
    if (tok)
        return cdx_tok_is_eog(tok, id);
    for (int i = 0; i < hp->n_eos; i++)
        if (hp->eos_ids[i] == id)
            return true;
    return false;
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    int rc = parse_run_args(argc, argv, &o);
    if (rc)
        return rc;
    cdx_err err = {0};
    cdx_model *m = NULL;
    cdx_tok *tok = NULL;
    cdx_forward_ctx *fc = NULL;
    cdx_sampler *smp = NULL;
    cdx_kv kv = {0};
    float *logits = NULL;
    int32_t *top_ids = NULL;
    float *top_vals = NULL;
    id_list prompt = {0}, out = {0};
    json_t *steps = o.json ? json_array() : NULL;
    char *chat_text = NULL, *stdin_text = NULL;
    int status = 1;
    double t0 = cdx_time_ms();

    const cdx_kernels *k = o.isa ? cdx_kernels_by_isa(o.isa) : cdx_kernels_best();
    if (!k) {
        fprintf(stderr, "caldrix run: --isa \"%s\" is unknown or this CPU lacks it (avx512, avx2, scalar)\n", o.isa);
        return 2;
    }
    char *resolved = NULL;
    if (o.model) {
        /* a path opens as it is; anything else is a reference the hub resolves (and downloads) */
        struct stat st;
        if (stat(o.model, &st) != 0) {
            cli_hub_ui ui;
            cdx_hub_opts ho;
            cli_hub_opts_init(&ho, &ui, o.json);
            ho.ctx = (uint32_t)o.ctx;
            if (cdx_hub_resolve(o.model, &ho, &resolved, &err) < 0) {
                fprintf(stderr, "caldrix: %s\n", err.msg);
                goto done;
            }
            o.model = resolved;
        }
        rc = cdx_model_open(o.model, NULL, &m, &err);
    } else
        rc = cdx_model_open_gguf_mem(cdx_embedded_model, (size_t)(cdx_embedded_model_end - cdx_embedded_model),
                                     "stories260K.gguf (bundled)", &m, &err);
    if (rc) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        goto done;
    }
    const cdx_hparams *hp = cdx_model_hparams(m);
    const char *notes = cdx_model_notes(m);
    if (*notes && !o.json)
        fprintf(stderr, "caldrix: %s", notes);
    if ((rc = open_tokenizer(o.model, m, &tok, &err))) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        goto done;
    }

    /* the prompt */
    if (o.prompt_ids) {
        if (parse_ids(o.prompt_ids, &prompt.tokens, &prompt.n))
            goto done;
        prompt.cap = prompt.n;
    } else if (o.prompt || !tok) {
        if (!tok) {
            if (o.prompt)
                fprintf(stderr, "caldrix: %s has no tokenizer files (tokenizer.json, tokenizer.model or vocab.json + "
                                "merges.txt); give the prompt as --prompt-ids\n", o.model);
            else
                fprintf(stderr, "caldrix: %s has no tokenizer: give a prompt with --prompt-ids\n", o.model);
            goto done;
        }
    }
    if (o.chat) {
        if (!o.model) {
            fprintf(stderr, "caldrix: the bundled model has no chat template; --chat needs a chat model\n");
            goto done;
        }
        if (!o.prompt) {
            if (isatty(0)) {
                fprintf(stderr, "caldrix run: --chat without -p reads the message from standard input, which is a "
                                "terminal; interactive chat is not implemented yet: give -p TEXT\n");
                goto done;
            }
            if (!(stdin_text = read_stdin_text())) {
                fprintf(stderr, "caldrix: cannot read the message from standard input\n");
                goto done;
            }
            o.prompt = stdin_text;
        }
        if ((rc = render_chat(o.model, o.system, o.prompt, &chat_text, &err))) {
            fprintf(stderr, "caldrix: %s: chat template: %s\n", o.model, err.msg);
            goto done;
        }
    }
    if (!prompt.n) {
        /* a rendered chat template carries its own special tokens: nothing is added to it */
        const char *text = chat_text ? chat_text : o.prompt ? o.prompt : "";
        bool add_special = chat_text == NULL;
        size_t len = strlen(text), need = 0;
        if ((rc = cdx_tok_encode(tok, text, len, add_special, true, NULL, 0, &need, &err))) {
            fprintf(stderr, "caldrix: prompt: %s\n", err.msg);
            goto done;
        }
        prompt.cap = need + 1;
        prompt.tokens = malloc(prompt.cap * sizeof(int32_t));
        if (!prompt.tokens || cdx_tok_encode(tok, text, len, add_special, true, prompt.tokens, need, &prompt.n, &err)) {
            fprintf(stderr, "caldrix: prompt: %s\n", err.msg);
            goto done;
        }
        if (prompt.n == 0 && hp->bos_id >= 0)
            prompt.tokens[prompt.n++] = hp->bos_id;
        if (prompt.n == 0) {
            fprintf(stderr, "caldrix: the prompt is empty and the model has no BOS token to start from\n");
            goto done;
        }
    }
    for (size_t i = 0; i < prompt.n; i++)
        if (prompt.tokens[i] >= hp->n_vocab) {
            fprintf(stderr, "caldrix: prompt token %d is outside the vocabulary (0..%lld)\n", prompt.tokens[i],
                    (long long)hp->n_vocab - 1);
            goto done;
        }

    int64_t n_ctx = o.ctx ? o.ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (hp->sliding_window > 0 && o.ctx == 0 && n_ctx < (int64_t)prompt.n + o.n_gen)
        n_ctx = (int64_t)prompt.n + o.n_gen;
    if ((int64_t)prompt.n + o.n_gen > n_ctx && !o.ctx) {
        n_ctx = (int64_t)prompt.n + o.n_gen;
        if (n_ctx > hp->n_ctx_train && hp->n_ctx_train > 0)
            n_ctx = hp->n_ctx_train > (int64_t)prompt.n ? hp->n_ctx_train : (int64_t)prompt.n + 1;
    }
    if ((int64_t)prompt.n >= n_ctx) {
        fprintf(stderr, "caldrix: the prompt has %zu tokens; --ctx %lld leaves no room to generate\n", prompt.n,
                (long long)n_ctx);
        goto done;
    }
    int64_t batch = prompt.n < 512 ? (int64_t)prompt.n : 512;
    if ((rc = cdx_kv_init(&kv, hp, n_ctx, &err)) ||
        (rc = cdx_forward_ctx_create(m, batch, (int)o.threads, k, &fc, &err)) ||
        (rc = cdx_sampler_create(&o.sp, hp->n_vocab, &smp, &err))) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        goto done;
    }
    logits = malloc((size_t)hp->n_vocab * sizeof(float));
    if (o.top_logits) {
        top_ids = malloc((size_t)o.top_logits * sizeof *top_ids);
        top_vals = malloc((size_t)o.top_logits * sizeof *top_vals);
    }
    if (!logits || (o.top_logits && (!top_ids || !top_vals))) {
        fprintf(stderr, "caldrix: out of memory\n");
        goto done;
    }
    double t_loaded = cdx_time_ms();

    /* prefill */
    cdx_kv *kvp = &kv;
    for (size_t i = 0; i < prompt.n; i += (size_t)batch) {
        cdx_batch b = { .n = (int64_t)(prompt.n - i < (size_t)batch ? prompt.n - i : (size_t)batch),
                        .tokens = prompt.tokens + i };
        if ((rc = cdx_forward(fc, &kvp, 1, &b, logits, &err))) {
            fprintf(stderr, "caldrix: %s\n", err.msg);
            goto done;
        }
    }
    double t_prefilled = cdx_time_ms();

    /* decode */
    cdx_tok_stream ts;
    if (tok) {
        cdx_tok_stream_init(&ts, tok, false);
        /* the first generated piece follows the prompt's text: keep its leading space unless the
         * prompt holds nothing but special tokens */
        for (size_t i = 0; i < prompt.n; i++)
            if (!(cdx_tok_attr(tok, prompt.tokens[i]) & CDX_TOK_CONTROL))
                ts.first = false;
    }
    id_list hist = {0};
    for (size_t i = 0; i < prompt.n; i++)
        id_push(&hist, prompt.tokens[i]);
    char piece[512];
    json_t *text = o.json ? json_string("") : NULL;
    size_t text_len = 0;
    char *text_buf = NULL;
    for (long step = 0; step < o.n_gen; step++) {
        int32_t next = cdx_sampler_sample(smp, logits, hist.tokens, (int64_t)hist.n);
        if (!o.ignore_eos && is_eog(hp, tok, next))
            break;
        if (o.json) {
            json_t *top = json_array();
            if (o.top_logits) {
                cdx_top_logits(logits, hp->n_vocab, (int)o.top_logits, top_ids, top_vals);
                int kk = o.top_logits < hp->n_vocab ? (int)o.top_logits : (int)hp->n_vocab;
                for (int t = 0; t < kk; t++)
                    json_array_append_new(top, json_pack("[i,f]", top_ids[t], (double)top_vals[t]));
            }
            json_array_append_new(steps, json_pack("{s:i,s:o}", "token", next, "top", top));
        }
        id_push(&out, next);
        id_push(&hist, next);
        if (tok) {
            int np = cdx_tok_stream_put(&ts, next, piece, sizeof piece);
            if (np > 0) {
                if (o.json) {
                    char *g = realloc(text_buf, text_len + (size_t)np + 1);
                    if (g) {
                        text_buf = g;
                        memcpy(text_buf + text_len, piece, (size_t)np);
                        text_len += (size_t)np;
                    }
                } else {
                    fwrite(piece, 1, (size_t)np, stdout);
                    fflush(stdout);
                }
            }
        }
        if (step + 1 == o.n_gen)
            break;
        if (kv.n_past >= kv.n_ctx) {
            fprintf(stderr, "\ncaldrix: the context (%lld tokens) is full; stopping (raise --ctx)\n", (long long)kv.n_ctx);
            break;
        }
        cdx_batch b = { .n = 1, .tokens = &next };
        if ((rc = cdx_forward(fc, &kvp, 1, &b, logits, &err))) {
            fprintf(stderr, "caldrix: %s\n", err.msg);
            free(hist.tokens);
            free(text_buf);
            json_decref(text);
            goto done;
        }
    }
    if (tok) {
        int np = cdx_tok_stream_flush(&ts, piece, sizeof piece);
        if (np > 0 && !o.json)
            fwrite(piece, 1, (size_t)np, stdout);
        else if (np > 0) {
            char *g = realloc(text_buf, text_len + (size_t)np + 1);
            if (g) {
                text_buf = g;
                memcpy(text_buf + text_len, piece, (size_t)np);
                text_len += (size_t)np;
            }
        }
    }
    free(hist.tokens);
    double t_end = cdx_time_ms();
    double prefill_s = (t_prefilled - t_loaded) / 1e3, decode_s = (t_end - t_prefilled) / 1e3;
    size_t n_decoded = out.n > 0 ? out.n - 1 : 0; /* the first token comes from the prefill's logits */
    if (o.json) {
        json_t *jp = json_array(), *jt = json_array();
        for (size_t i = 0; i < prompt.n; i++)
            json_array_append_new(jp, json_integer(prompt.tokens[i]));
        for (size_t i = 0; i < out.n; i++)
            json_array_append_new(jt, json_integer(out.tokens[i]));
        json_decref(text);
        json_t *root = json_pack("{s:o,s:o,s:s%,s:o,s:{s:f,s:f,s:f}}", "prompt", jp, "tokens", jt, "text",
                                 text_buf ? text_buf : "", text_len, "steps", steps, "timings", "load_ms",
                                 t_loaded - t0, "prefill_tok_s", prefill_s > 0 ? (double)prompt.n / prefill_s : 0.0,
                                 "decode_tok_s", decode_s > 0 ? (double)n_decoded / decode_s : 0.0);
        steps = NULL;
        if (!root) {
            fprintf(stderr, "caldrix: cannot build the JSON result\n");
            free(text_buf);
            goto done;
        }
        json_dumpf(root, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
        fputc('\n', stdout);
        json_decref(root);
    } else {
        fputc('\n', stdout);
        fflush(stdout); /* the summary on stderr comes after the text */
        fprintf(stderr, "caldrix: %zu prompt tokens at %.1f tok/s, %zu generated at %.1f tok/s (%s kernels)\n",
                prompt.n, prefill_s > 0 ? (double)prompt.n / prefill_s : 0.0, out.n,
                decode_s > 0 ? (double)n_decoded / decode_s : 0.0, cdx_kernels_isa(k));
    }
    free(text_buf);
    status = 0;
done:
    json_decref(steps);
    free(prompt.tokens);
    free(out.tokens);
    free(logits);
    free(top_ids);
    free(top_vals);
    cdx_sampler_free(smp);
    cdx_forward_ctx_free(fc);
    cdx_kv_free(&kv);
    cdx_tok_close(tok);
    cdx_model_close(m);
    free(resolved);
    free(chat_text);
    free(stdin_text);
    return status;
}
