/* caldrix serve: the OpenAI-compatible HTTP server (src/server/) over one model. This file only
 * parses flags, loads the model as `run` does, and waits for a signal. */
#include "cli.h"
#include "cli_hub.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const char k_serve_usage[] =
    "usage: caldrix serve [MODEL] [options]\n"
    "\n"
    "An OpenAI-compatible HTTP server (docs/api.md): /v1/chat/completions, /v1/completions, /v1/models,\n"
    "/tokenize, /detokenize, /health, /metrics. MODEL as for caldrix run (a .gguf file, a checkpoint\n"
    "directory, an alias, owner/name[@revision], ollama:name[:tag]); without MODEL, the bundled\n"
    "stories260K model. The options are checked, the model loaded and the engine made before the\n"
    "server listens: a bad option exits 2, a model that cannot load 1, before \"listening on\".\n"
    "SIGINT or SIGTERM stops it: open streams end with an error event and [DONE], requests waiting\n"
    "for a whole answer get 503, then it exits 0.\n"
    "\n"
    "  --host H             address to bind (default 127.0.0.1: this machine only)\n"
    "  --port P             TCP port (default 8080; 0 = any free port, printed on stderr)\n"
    "  --max-batch N        sequences decoded at once (default 8)\n"
    "  --max-queue N        requests waiting for a slot before 429 MODEL_RESOURCE_BUSY (default 64)\n"
    "  --ctx N              context of each sequence (default min(4096, the model's); more than the\n"
    "                       model was trained for is allowed with a warning)\n"
    "  --kv-blocks N        KV cache pool in blocks of 16 positions (default max-batch sequences of --ctx)\n"
    "  --threads N          worker threads (default: all cores)\n"
    "  --isa NAME           force a kernel set: avx512, avx2 or scalar\n"
    "  --dtype auto|f32|bf16  compute type (default auto: bf16 for bf16/f16 checkpoints; caldrix run --help)\n"
    "  --weight-budget BYTES memory the weights may hold (8G, 512M): a mixture of experts larger than\n"
    "                       that keeps its dense weights resident and reads experts from the file when\n"
    "                       tokens route to them, in an LRU within the budget (same output)\n"
    "  --kv-type f32|f16|bf16 KV cache storage (default bf16 for bf16 compute, else f32; f16: half the\n"
    "                       memory with llama.cpp's rounding, f32 compute only)\n"
    "  --kv-store DIR       a prefix store shared by processes: K/V blocks pushed out of memory, and\n"
    "                       all of them at exit, are kept in DIR and read back by prefix (also after\n"
    "                       a restart); bad or foreign files are deleted\n"
    "  --api-key KEY        every route but /health and /v1/health needs \"Authorization: Bearer KEY\"\n"
    "                       (default: the CALDRIX_API_KEY environment variable, else no key)\n"
    "  --max-connections N  open connections at once (default 256)\n"
    "  --timeout S          idle connection timeout in seconds (default 60)\n"
    "  --cors ORIGIN        let a browser page from ORIGIN (e.g. http://localhost:3000, or *) call the API:\n"
    "                       Access-Control-Allow-Origin on every answer, OPTIONS answers preflights\n"
    "                       (default: off, no CORS headers)\n"
    "  --log-requests       one line per request on stderr: time, method, route, model, status,\n"
    "                       prompt and completion tokens, milliseconds\n"
    "  --chat-template FILE chat renders with the Jinja template in FILE instead of the model's (for a\n"
    "                       model whose template is missing or wrong); a model without one gets\n"
    "                       ChatML, and says so on stderr (as caldrix run --chat)\n"
    "  --chat-template-kwargs JSON\n"
    "                       template variables every chat gets, as transformers' apply_chat_template\n"
    "                       (**kwargs), e.g. '{\"enable_thinking\": false}'; a request's\n"
    "                       chat_template_kwargs override them key by key\n";

/* --log-requests: one line per request, written with one call so lines from several connections
 * never interleave. "-" where a request ran no model. */
static void log_request(void *user, const cdx_server_request_log *r)
{
    (void)user;
    time_t t = (time_t)(r->t_unix_ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char when[32], tok[64] = "-", line[512];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    if (r->prompt_tokens >= 0)
        snprintf(tok, sizeof tok, "prompt=%lld completion=%lld", (long long)r->prompt_tokens,
                 (long long)r->completion_tokens);
    snprintf(line, sizeof line, "%s.%03dZ %s %s %s %d %s %.1fms\n", when, (int)(r->t_unix_ms % 1000), r->method,
             r->route, r->model ? r->model : "-", r->status, tok, r->ms);
    fputs(line, stderr);
}

/* The engine's options serve takes, for the ranges line of --help. */
static const cdx_engine_opt_id k_serve_engine_opts[] = { CDX_OPT_MAX_BATCH, CDX_OPT_MAX_QUEUE, CDX_OPT_CTX,
                                                         CDX_OPT_KV_BLOCKS, CDX_OPT_THREADS };

static volatile sig_atomic_t g_stop;
static void on_signal(int sig)
{
    g_stop = sig;
}


/* The model's id as clients see it: the last part of what was named, without .gguf. */
static char *model_name(const char *ref)
{
    if (!ref)
        return strdup("stories260K");
    const char *p = ref;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    if (strchr(ref, '/') && ref[0] != '/' && ref[0] != '.' && strncmp(ref, "ollama:", 7)) {
        struct stat st;
        if (stat(ref, &st) != 0) /* owner/name: keep it whole */
            return strndup(p, n);
    }
    const char *b = p + n;
    while (b > p && b[-1] != '/')
        b--;
    size_t len = (size_t)(p + n - b);
    if (len > 5 && !strncmp(b + len - 5, ".gguf", 5))
        len -= 5;
    return strndup(b, len);
}

int cmd_serve(int argc, char **argv)
{
    cdx_server_opts so = cdx_server_defaults();
    cdx_engine_opts eo = cdx_engine_defaults();
    const char *model = NULL, *isa = NULL, *kv_store = NULL, *chat_template = NULL;
    json_t *chat_kwargs = NULL; /* --chat-template-kwargs */
    uint64_t budget = 0;
    cdx_dtype dtype = CDX_DTYPE_AUTO;
    bool kv_type_set = false;
    long l;
    so.api_key = getenv("CALDRIX_API_KEY");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = !strcmp(a, "--host") || !strcmp(a, "--port") || !strcmp(a, "--max-batch") ||
                     !strcmp(a, "--max-queue") || !strcmp(a, "--ctx") || !strcmp(a, "--threads") ||
                     !strcmp(a, "-t") || !strcmp(a, "--kv-store") || !strcmp(a, "--api-key") ||
                     !strcmp(a, "--kv-type") || !strcmp(a, "--dtype") || !strcmp(a, "--isa") ||
                     !strcmp(a, "--max-connections") || !strcmp(a, "--timeout") || !strcmp(a, "--kv-blocks") ||
                     !strcmp(a, "--weight-budget") || !strcmp(a, "--cors") || !strcmp(a, "--chat-template") ||
                     !strcmp(a, "--chat-template-kwargs");
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(k_serve_usage, stdout);
            cli_print_engine_ranges(stdout, k_serve_engine_opts,
                                    (int)(sizeof k_serve_engine_opts / sizeof k_serve_engine_opts[0]));
            return 0;
        }
        if (takes && !v) {
            fprintf(stderr, "caldrix serve: %s needs a value (caldrix serve --help)\n", a);
            return 2;
        }
        if (takes)
            i++;
        if (!strcmp(a, "--host"))
            so.host = v;
        else if (!strcmp(a, "--port")) {
            if (cli_parse_int(a, v, 0, 65535, &l)) return 2;
            so.port = (int)l;
        } else if (!strcmp(a, "--max-batch")) {
            if (cli_parse_engine_opt(a, v, CDX_OPT_MAX_BATCH, &l)) return 2;
            eo.max_batch = (int)l;
        } else if (!strcmp(a, "--max-queue")) {
            if (cli_parse_engine_opt(a, v, CDX_OPT_MAX_QUEUE, &l)) return 2;
            eo.max_queue = (int)l;
        } else if (!strcmp(a, "--ctx")) {
            if (cli_parse_engine_opt(a, v, CDX_OPT_CTX, &l)) return 2;
            eo.n_ctx = l;
        } else if (!strcmp(a, "--kv-blocks")) {
            if (cli_parse_engine_opt(a, v, CDX_OPT_KV_BLOCKS, &l)) return 2;
            eo.n_blocks = l;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (cli_parse_engine_opt(a, v, CDX_OPT_THREADS, &l)) return 2;
            eo.n_threads = (int)l;
        } else if (!strcmp(a, "--max-connections")) {
            if (cli_parse_int(a, v, 1, 1 << 16, &l)) return 2;
            so.max_connections = (int)l;
        } else if (!strcmp(a, "--timeout")) {
            if (cli_parse_int(a, v, 1, 86400, &l)) return 2;
            so.timeout_s = (int)l;
        } else if (!strcmp(a, "--api-key")) {
            so.api_key = v;
        } else if (!strcmp(a, "--cors")) {
            so.cors_origin = v;
        } else if (!strcmp(a, "--log-requests")) {
            so.on_request = log_request;
        } else if (!strcmp(a, "--isa")) {
            isa = v;
        } else if (!strcmp(a, "--chat-template")) {
            chat_template = v;
        } else if (!strcmp(a, "--chat-template-kwargs")) {
            json_decref(chat_kwargs);
            chat_kwargs = NULL;
            if (cli_parse_json_object("caldrix serve", a, v, &chat_kwargs))
                return 2;
        } else if (!strcmp(a, "--weight-budget")) {
            if (cli_parse_bytes(a, v, &budget)) return 2;
        } else if (!strcmp(a, "--kv-store")) {
            kv_store = v;
        } else if (!strcmp(a, "--kv-type")) {
            if (cli_parse_kv_type("caldrix serve", v, &eo.kv_type))
                return 2;
            kv_type_set = true;
        } else if (!strcmp(a, "--dtype")) {
            if (cli_parse_dtype("caldrix serve", v, &dtype))
                return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "caldrix serve: unknown option \"%s\" (caldrix serve --help)\n", a);
            return 2;
        } else if (!model)
            model = a;
        else {
            fprintf(stderr, "caldrix serve: unexpected argument \"%s\" (one MODEL only)\n", a);
            return 2;
        }
    }
    eo.kv_store = kv_store;
    if (so.api_key && !*so.api_key)
        so.api_key = NULL;
    eo.kernels = isa ? cdx_kernels_by_isa(isa) : cdx_kernels_best();
    if (!eo.kernels) {
        fprintf(stderr, "caldrix serve: --isa \"%s\" is unknown or this CPU lacks it (avx512, avx2, scalar)\n", isa);
        return 2;
    }

    cdx_err err = {0};
    cdx_server *srv = NULL;
    cdx_loaded *ld = NULL;
    char *name = model_name(model);
    int status = 1;
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* everything that can fail is done before the server listens: a script that waits for
     * "listening on" never sees the server die after it */
    if (!model && dtype == CDX_DTYPE_BF16) {
        fprintf(stderr, "caldrix serve: the bundled model is a GGUF file: it computes as llama.cpp does; --dtype bf16 "
                        "applies to safetensors checkpoints\n");
        goto done;
    }
    cli_hub_ui ui;
    cdx_hub_opts ho;
    cli_hub_opts_init(&ho, &ui, false);
    ho.ctx = (uint32_t)eo.n_ctx;
    uint64_t mem_avail = 0;
    cdx_hub_meminfo(&eo.kv_bytes_max, &mem_avail); /* a pool that could never fit in memory is refused now */
    cdx_load_opts lo = cli_load_opts(&ho, dtype, budget);
    lo.chat = true;
    lo.chat_template = chat_template;
    lo.images = CDX_LOAD_IMAGES_IF_VISION;
    lo.engine = &eo;
    lo.kv_type_set = kv_type_set;
    cdx_load_stage at;
    int rc = cdx_load(model, &lo, &ld, &at, &err);
    if (rc) {
        fprintf(stderr, "caldrix serve: %s%s\n", at == CDX_LOAD_CHAT ? "--chat-template: " : "", err.msg);
        if (at == CDX_LOAD_ENGINE)
            status = rc == CDX_EINVAL ? 2 : 1; /* options that do not go together (or with this model) */
        goto done;
    }
    const cdx_model *m = ld->model;
    if (*cdx_model_notes(m))
        fprintf(stderr, "caldrix: %s", cdx_model_notes(m));
    const cdx_hparams *hp = cdx_model_hparams(m);
    if (eo.n_ctx && hp->n_ctx_train > 0 && eo.n_ctx > hp->n_ctx_train)
        fprintf(stderr, "caldrix serve: warning: --ctx %lld is more than the %lld positions %s was trained for; output "
                        "past them may degrade\n", (long long)eo.n_ctx, (long long)hp->n_ctx_train, name);
    if (!ld->tok)
        fprintf(stderr, "caldrix serve: %s has no tokenizer: only token-id prompts on /v1/completions\n", name);
    /* the chat template, by run --chat's rule: --chat-template, else the model's, else ChatML
     * (said here; /v1/models then says chat_template false) */
    if (!ld->tok && chat_template) {
        fprintf(stderr, "caldrix serve: --chat-template: %s has no tokenizer, so no chat\n", name);
        goto done;
    }
    if (ld->chat.note[0])
        fprintf(stderr, "caldrix serve: %s\n", ld->chat.note);
    fprintf(stderr, "caldrix serve: %s compute (%s), %s KV cache\n", cdx_dtype_name(cdx_model_dtype(m)),
            cdx_model_dtype_why(m), cdx_type_name(ld->kv_type));
    cdx_engine_stats st;
    cdx_engine_get_stats(ld->engine, &st);
    cdx_server_model sm = { .engine = ld->engine, .tok = ld->tok, .tmpl = ld->chat.tmpl, .tmpl_tokens = ld->chat.tokens,
                            .tmpl_chatml = ld->chat.chatml, .tmpl_kwargs = chat_kwargs, .name = name,
                            .n_vocab = hp->n_vocab, .n_ctx = st.n_ctx, .bos_id = hp->bos_id,
                            .image_proc = ld->has_image_proc ? &ld->image_proc : NULL };
    rc = cdx_server_start(&so, &srv, &err);
    if (rc) {
        fprintf(stderr, "caldrix serve: %s\n", err.msg);
        status = rc == CDX_EINVAL ? 2 : 1; /* --host that does not resolve: 2; a port in use: 1 */
        goto done;
    }
    if (cdx_server_ready(srv, &sm, &err)) {
        fprintf(stderr, "caldrix serve: %s\n", err.msg);
        goto done;
    }
    fprintf(stderr, "caldrix serve: ready: %s, context %lld, %lld KV blocks, batch %d, queue %d%s\n", name,
            (long long)st.n_ctx, (long long)st.n_blocks, st.max_batch, st.max_queue,
            so.api_key ? ", API key required" : "");
    fprintf(stderr, "caldrix serve: listening on http://%s%s%s:%d\n", strchr(so.host, ':') ? "[" : "", so.host,
            strchr(so.host, ':') ? "]" : "", cdx_server_port(srv));
    while (!g_stop) {
        struct timespec t = { 0, 100 * 1000000L };
        nanosleep(&t, NULL);
    }
    fprintf(stderr, "caldrix serve: stopping (signal %d)\n", (int)g_stop);
    status = 0;
done:
    cdx_server_stop(srv);
    cdx_load_close(ld);
    json_decref(chat_kwargs);
    free(name);
    return status;
}
