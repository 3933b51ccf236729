/* caldrix serve: the OpenAI-compatible HTTP server (src/server/) over one model. This file only
 * parses flags, loads the model as `run` does, and waits for a signal. */
#include "cli.h"
#include "cli_hub.h"
#include "cli_split.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <time.h>

static const char k_serve_usage[] =
    "usage: caldrix serve [MODEL] [options]\n"
    "\n"
    "An OpenAI-compatible HTTP server (docs/api.md; its routes are listed at the end). MODEL as for\n"
    "caldrix run (a .gguf file, a checkpoint directory, an alias, owner/name[@revision],\n"
    "ollama:name[:tag]); without MODEL, the bundled stories260K model. The options are checked, the model loaded and the engine made before the\n"
    "server listens: a bad option exits 2, a model that cannot load 1, before \"listening on\".\n"
    "SIGINT or SIGTERM stops it: open streams end with an error event and [DONE], requests waiting\n"
    "for a whole answer get 503, then it exits 0.\n"
    "\n"
    "Several models (docs/api.md, \"Several models\"): with --model or --models-dir the server keeps a\n"
    "registry; a request's \"model\" names one (404 model_not_found lists them), which loads on first use.\n"
    "  --model REF[=NAME]   a model to serve, as MODEL above, under NAME (default: its file or folder name\n"
    "                       without .gguf); repeat for more. References are resolved (downloaded) at start\n"
    "  --models-dir DIR     every .gguf file and every folder holding a config.json in DIR, named by it\n"
    "  --models-autoload    load a model on its first request (the default); --no-models-autoload: only\n"
    "                       POST /models/load loads\n"
    "  --preload NAME       load NAME at start (repeat)\n"
    "  --pin NAME           load NAME at start and never unload it (repeat)\n"
    "  --models-max N       at most N models loaded at once (default: no limit); the least recently used\n"
    "                       idle, unpinned one is unloaded to make room\n"
    "  --idle-unload S      unload a model no request used for S seconds (default: never)\n"
    "  --memory BYTES       the memory ledger's budget for weights and KV pools (8G, 512M; default: the\n"
    "                       memory available at start, as caldrix inspect counts it). A model that cannot\n"
    "                       fit is 400 MODEL_RESOURCE_LIMIT; one that fits once requests finish, 429\n"
    "                       MODEL_RESOURCE_BUSY with Retry-After\n"
    "  --allow-unknown-models  serve models whose compatibility inspect cannot decide (never an\n"
    "                       incompatible one, never past --memory)\n"
    "\n"
    "  --lora [NAME=]DIR[:SCALE]  a LoRA adapter (a PEFT folder or a llama.cpp GGUF adapter) for requests to\n"
    "                       choose (docs/api.md, \"LoRA adapters\"); repeat for more (at most 16). Its id is\n"
    "                       its place in the order given (0, 1, ...), NAME (default: DIR's last part without\n"
    "                       .gguf) another way to name it. A request's \"lora\": [{\"id\": N or NAME, \"scale\": F}]\n"
    "                       applies those (the others not); without it a request gets the default scales:\n"
    "                       SCALE (default 1), as llama-server does, set by POST /lora-adapters. Adapters\n"
    "                       are added per row, never merged: requests with other adapters share a batch.\n"
    "                       With several models (--model, --models-dir) the adapters belong to the first\n"
    "                       one, which is then pinned; \"lora\" on another model is 400. An adapter that does\n"
    "                       not fit its model (shapes, targets, architecture) exits 2 naming the mismatch\n"
    "  --lora-init-without-apply  the default scales start at 0: no adapter unless a request (or POST\n"
    "                       /lora-adapters) asks (llama-server's option)\n"
    "  --task [NAME=]embed|rerank|generate  what the model is served for (default: what its folder\n"
    "                       declares: an encoder or a sentence-transformers folder (modules.json) embeds,\n"
    "                       anything else generates; a reranker such as Qwen3-Reranker is a causal LM on\n"
    "                       disk: name it with --task rerank). With several models: every one of them, or\n"
    "                       with NAME= the one of that name (repeat)\n"
    "  --yes-id N, --no-id N  a reranker's answer tokens (default: the tokenizer's \"yes\" and \"no\")\n"
    "  --host H             address to bind (default 127.0.0.1: this machine only)\n"
    "  --port P             TCP port (default 8080; 0 = any free port, printed on stderr)\n"
    "  --max-batch N        sequences decoded at once (default 8)\n"
    "  --max-queue N        requests waiting for a slot before 429 MODEL_RESOURCE_BUSY (default 64)\n"
    "  --max-round-ms MS    a round with decoding streams aims to last at most MS (default 150): prompts\n"
    "                       are cut to what the measured rates fit in the rest, so streams keep moving\n"
    "                       while long prompts are read; 0: no target (every round takes up to 512\n"
    "                       prompt tokens, the most throughput for the most latency)\n"
    "  --ctx N              context of each sequence (default min(4096, the model's); more than the\n"
    "                       model was trained for is allowed with a warning)\n"
    "  --kv-blocks N        KV cache pool in blocks of 16 positions (default max-batch sequences of --ctx)\n"
    "  --threads N          worker threads (default: all cores)\n"
    "  --isa NAME           force a kernel set: amx, avx512, avx2 or scalar (avx512-gemm, amx-gemm:\n"
    "                       faster prefill that is not batch invariant)\n"
    CLI_SPLIT_HELP
    "  --dtype auto|f32|bf16  compute type (default auto: bf16 for bf16/f16 checkpoints; caldrix run --help)\n"
    "  --weight-budget BYTES memory the weights may hold (8G, 512M): a mixture of experts larger than\n"
    "                       that keeps its dense weights resident and reads experts from the file when\n"
    "                       tokens route to them, in an LRU within the budget (same output)\n"
    "  --kv-type f32|f16|bf16 KV cache storage (default bf16 for bf16 compute, else f32; f16: half the\n"
    "                       memory with llama.cpp's rounding, f32 compute only)\n"
    "  --kv-store DIR       a prefix store shared by processes: K/V blocks pushed out of memory, and\n"
    "                       all of them at exit, are kept in DIR and read back by prefix (also after\n"
    "                       a restart); bad or foreign files are deleted\n"
    "  --api-key KEY        every route but /health, /v1/health and the chat page (/) needs\n"
    "                       \"Authorization: Bearer KEY\" (the page asks for the key)\n"
    "                       (default: the CALDRIX_API_KEY environment variable, else no key)\n"
    "  --spec lookup|auto|off  speculative decoding for every request (default off; see caldrix run\n"
    "                       --help): the same tokens and logprobs, turned off per request while it does\n"
    "                       not pay; a request's \"speculative\": false opts out; usage gains\n"
    "                       completion_tokens_details.accepted/rejected_prediction_tokens, /metrics\n"
    "                       caldrix_spec_*_total\n"
    "                       A model that cannot speculate (Qwen3.5's recurrent state) is served without\n"
    "                       it, and says why (stderr; /v1/models speculation_off_reason)\n"
    "  --draft MODEL|auto   a draft model for the served model (one MODEL only; any reference run\n"
    "                       takes; implies --spec auto): loaded with it and refused as caldrix run\n"
    "                       refuses it (exit 2); /metrics caldrix_model_spec_*_total{proposer=\"draft\"};\n"
    "                       auto: as caldrix run --draft auto picks one from the caches\n"
    "  --draft-max K, --draft-min K   the draft length's bounds (default 8 and 1)\n"
    "  --spec-keep-on       never turn speculation off (for measurements)\n"
    "  --max-connections N  open connections at once (default 256)\n"
    "  --timeout S          idle connection timeout in seconds (default 60)\n"
    "  --cors ORIGIN        let a browser page from ORIGIN (e.g. http://localhost:3000, or *) call the API:\n"
    "                       Access-Control-Allow-Origin on every answer, OPTIONS answers preflights\n"
    "                       (default: off, no CORS headers)\n"
    "  --no-ui              no chat page at / (default: GET / answers the page built into caldrix, which\n"
    "                       chats through this server's API; docs/api.md, \"The chat page\")\n"
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

/* --max-round-ms's default (issue 44's suggestion for this class of machine): with the Llama-1B Q4_0
 * bench model and 16 clients it cut the token gap's p99 to 0.11-0.32x of no target; bench/README.md,
 * "Latency under load: the round target", has the runs and their caveats. */
#define SERVE_MAX_ROUND_MS 150

/* The engine's options serve takes, for the ranges line of --help. */
static const cdx_engine_opt_id k_serve_engine_opts[] = { CDX_OPT_MAX_BATCH, CDX_OPT_MAX_QUEUE, CDX_OPT_CTX,
                                                         CDX_OPT_KV_BLOCKS, CDX_OPT_THREADS, CDX_OPT_DRAFT_MAX,
                                                         CDX_OPT_DRAFT_MIN };

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

/* ---- --lora ---- */

typedef struct {
    cdx_server_lora l[16];
    cdx_lora *open[16];      /* one served model: opened here (the registry opens its own) */
    int n;
} serve_lora;

static void lora_free(serve_lora *sl)
{
    for (int i = 0; i < sl->n; i++) {
        cdx_lora_close(sl->open[i]);
        free((char *)sl->l[i].name);
        free((char *)sl->l[i].path);
    }
    sl->n = 0;
}

/* The --lora values: names unique. 0, or 2 (said). */
static int lora_parse_all(const char *const *args, int n, bool no_apply, serve_lora *sl)
{
    *sl = (serve_lora){ .n = 0 };
    for (int i = 0; i < n; i++) {
        char *nm = NULL, *pa = NULL;
        float sc = 1;
        if (cli_parse_lora("caldrix serve", args[i], &nm, &pa, &sc)) {
            lora_free(sl);
            return 2;
        }
        for (int k = 0; k < sl->n; k++)
            if (!strcmp(sl->l[k].name, nm)) {
                fprintf(stderr, "caldrix serve: --lora %s: another adapter is named \"%s\" (%s): give one of them "
                                "another NAME=\n", args[i], nm, sl->l[k].path);
                free(nm);
                free(pa);
                lora_free(sl);
                return 2;
            }
        sl->l[sl->n++] = (cdx_server_lora){ .name = nm, .path = pa, .scale = no_apply ? 0.0f : sc };
    }
    return 0;
}

/* Opens the adapters on the one model served. 0, or 2 (said: the flag, its value, the mismatch). */
static int lora_open_all(serve_lora *sl, const char *const *args, const cdx_model *m)
{
    for (int i = 0; i < sl->n; i++) {
        cdx_err err = { 0 };
        if (cdx_lora_open(m, sl->l[i].path, &sl->open[i], &err)) {
            fprintf(stderr, "caldrix serve: --lora %s: %s\n", args[i], err.msg);
            return 2;
        }
        sl->l[i].lora = sl->open[i];
    }
    return 0;
}

/* ---- several models: --model, --models-dir ---- */

#define MAX_MODELS 64
typedef struct { const char *v[MAX_MODELS]; int n; } reg_list;
typedef struct {
    reg_list refs, preload, pin, task; /* task: --task NAME=TASK */
    const char *dir;
    bool no_autoload, allow_unknown;
    int max, idle_s;
    uint64_t memory;
} reg_args;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The registry's entries: each --model (resolved: a reference is downloaded now, as serve MODEL
 * does), then --models-dir's files and folders in name order. 0, 1 (a reference that does not
 * resolve) or 2 (bad options), said on stderr. names/paths are heap strings in *own. */
static int build_entries(const reg_args *rg, const char *model, cdx_server_entry *ent, int *n_ent, char ***own,
                         int *n_own, uint32_t ctx)
{
    char **o = calloc(4 * MAX_MODELS + 8, sizeof *o);
    int n = 0;
    *own = o;
    *n_own = 0; /* counted as they are made: the caller frees them also after a failure */
    if (!o)
        return 1;
    const char *refs[MAX_MODELS + 1];
    int nr = 0;
    if (model)
        refs[nr++] = model;
    for (int i = 0; i < rg->refs.n; i++)
        refs[nr++] = rg->refs.v[i];
    for (int i = 0; i < nr && nr <= MAX_MODELS; i++) {
        char *ref = strdup(refs[i]), *eq = strrchr(ref, '='), *nm = NULL;
        o[(*n_own)++] = ref;
        if (eq && eq != ref && eq[1] && !strchr(eq, '/')) {
            *eq = 0;
            nm = eq + 1;
        } else if (eq && !eq[1]) {
            fprintf(stderr, "caldrix serve: --model \"%s\": the name after '=' is empty\n", refs[i]);
            return 2;
        }
        char *name = nm ? strdup(nm) : model_name(ref);
        o[(*n_own)++] = name;
        const char *path = ref;
        struct stat st;
        if (stat(ref, &st) != 0) {
            cli_hub_ui ui;
            cdx_hub_opts ho;
            cli_hub_opts_init(&ho, &ui, false);
            ho.ctx = ctx;
            cdx_err err = { 0 };
            char *res = NULL;
            if (cdx_hub_resolve(ref, &ho, &res, &err) < 0) {
                fprintf(stderr, "caldrix serve: %s\n", err.msg);
                return 1;
            }
            o[(*n_own)++] = res;
            path = res;
        }
        ent[n++] = (cdx_server_entry){ .name = name, .path = path };
    }
    if (rg->dir) {
        DIR *d = opendir(rg->dir);
        if (!d) {
            fprintf(stderr, "caldrix serve: --models-dir %s: %s\n", rg->dir, strerror(errno));
            return 2;
        }
        char *found[MAX_MODELS];
        int nf = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.')
                continue;
            size_t len = strlen(de->d_name);
            char p[4096], cj[4200];
            snprintf(p, sizeof p, "%s/%s", rg->dir, de->d_name);
            snprintf(cj, sizeof cj, "%s/config.json", p);
            struct stat st;
            const bool gguf = len > 5 && !strcmp(de->d_name + len - 5, ".gguf") && stat(p, &st) == 0 && S_ISREG(st.st_mode);
            const bool ckpt = stat(cj, &st) == 0;
            if (!gguf && !ckpt)
                continue;
            if (nf == MAX_MODELS || n + nf >= MAX_MODELS) {
                fprintf(stderr, "caldrix serve: --models-dir %s holds more than %d models\n", rg->dir, MAX_MODELS);
                closedir(d);
                for (int i = 0; i < nf; i++)
                    free(found[i]);
                return 2;
            }
            found[nf++] = strdup(p);
        }
        closedir(d);
        qsort(found, (size_t)nf, sizeof *found, cmp_str);
        for (int i = 0; i < nf; i++) {
            o[(*n_own)++] = found[i];
            char *name = model_name(found[i]);
            o[(*n_own)++] = name;
            ent[n++] = (cdx_server_entry){ .name = name, .path = found[i] };
        }
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < i; k++)
            if (!strcmp(ent[i].name, ent[k].name)) {
                fprintf(stderr, "caldrix serve: two models are named \"%s\" (%s and %s): name one with --model REF=NAME\n",
                        ent[i].name, ent[k].path, ent[i].path);
                return 2;
            }
    const reg_list *lists[3] = { &rg->preload, &rg->pin, &rg->task };
    static const char *const opt[3] = { "--preload", "--pin", "--task" };
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < lists[l]->n; i++) {
            const char *want = lists[l]->v[i], *eq = l == 2 ? strrchr(want, '=') : NULL;
            const size_t wl = eq ? (size_t)(eq - want) : strlen(want);
            int k = 0;
            while (k < n && (strlen(ent[k].name) != wl || strncmp(ent[k].name, want, wl)))
                k++;
            if (k < n && l == 2) {
                ent[k].task_set = true;
                cdx_task_from_name(eq + 1, &ent[k].task); /* checked when parsed */
                continue;
            }
            if (k == n) {
                fprintf(stderr, "caldrix serve: %s %s: no model has that name (", opt[l], want);
                for (int j = 0; j < n; j++)
                    fprintf(stderr, "%s%s", j ? ", " : "", ent[j].name);
                fprintf(stderr, ")\n");
                return 2;
            }
            *(l == 1 ? &ent[k].pinned : &ent[k].preload) = true;
        }
    if (!n) {
        fprintf(stderr, "caldrix serve: --models-dir %s holds no model (.gguf files, folders with a config.json)\n",
                rg->dir);
        return 2;
    }
    *n_ent = n;
    return 0;
}

/* --task, --yes-id, --no-id */
typedef struct {
    bool set;
    cdx_task task;
    int32_t yes_id, no_id;
} load_task;

static void set_task(cdx_load_opts *lo, const load_task *lt)
{
    lo->tasks = true;
    lo->task_set = lt->set;
    lo->task = lt->task;
    lo->yes_id = lt->yes_id;
    lo->no_id = lt->no_id;
}

/* A split's rank 0: lost ranks end the server (no whole copy of the model is here to go on with). */
static const cdx_split *g_split;

/* Until SIGINT/SIGTERM (0), or a split's rank is lost (1, said). */
/* The draft's outcome on this machine (caldrix models drafts): turned off when the rule turned
 * off most requests. Saved when the count of speculating requests has changed, so a server that is
 * killed rather than stopped has still left what it learned. */
static void draft_outcome_save(cdx_loaded *ld, int64_t *saved_requests)
{
    if (!ld || !ld->draft || !ld->draft->path || !ld->path || !ld->engine)
        return;
    cdx_engine_stats es;
    cdx_engine_get_stats(ld->engine, &es);
    if (es.spec_requests <= 0 || (int64_t)es.spec_requests == *saved_requests)
        return;
    *saved_requests = (int64_t)es.spec_requests;
    cli_draft_outcome_save("serve", ld->path, ld->draft->path, (int64_t)es.spec_proposed, (int64_t)es.spec_accepted,
                           es.spec_turned_off * 2 > es.spec_requests);
}

/* Until SIGINT/SIGTERM (or a lost split rank); every 10 s, the draft outcome of ld (may be NULL). */
static int wait_for_signal(cdx_loaded *ld, int64_t *saved_requests)
{
    for (int tick = 1; !g_stop; tick++) {
        struct timespec t = { 0, 100 * 1000000L };
        nanosleep(&t, NULL);
        if (tick % 100 == 0)
            draft_outcome_save(ld, saved_requests);
        const char *lost = cdx_split_lost(g_split);
        if (lost) {
            fprintf(stderr, "caldrix serve: %s; stopping (this rank holds only a slice of the model)\n", lost);
            return 1;
        }
    }
    fprintf(stderr, "caldrix serve: stopping (signal %d)\n", (int)g_stop);
    return 0;
}

static void on_signals(void)
{
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void say_listening(const cdx_server_opts *so, cdx_server *srv)
{
    fprintf(stderr, "caldrix serve: listening on http://%s%s%s:%d\n", strchr(so->host, ':') ? "[" : "", so->host,
            strchr(so->host, ':') ? "]" : "", cdx_server_port(srv));
    if (so->page)
        fprintf(stderr, "caldrix serve: chat page: http://%s%s%s:%d/\n", strchr(so->host, ':') ? "[" : "", so->host,
                strchr(so->host, ':') ? "]" : "", cdx_server_port(srv));
}

static int serve_models(const reg_args *rg, const char *model, const cdx_server_opts *so, cdx_engine_opts *eo,
                        cdx_dtype dtype, uint64_t budget, const char *chat_template, json_t *chat_kwargs,
                        bool kv_type_set, const load_task *lt, serve_lora *sl)
{
    cdx_server_entry ent[MAX_MODELS + 1];
    char **own = NULL;
    int n = 0, n_own = 0, status = 1;
    cdx_server *srv = NULL;
    cdx_err err = { 0 };
    on_signals();
    int rc = build_entries(rg, model, ent, &n, &own, &n_own, (uint32_t)eo->n_ctx);
    if (rc) {
        status = rc;
        goto done;
    }
    if (sl->n)
        ent[0].pinned = true; /* the adapters' model: open from the start to the end */
    uint64_t memory = rg->memory;
    if (!memory && cdx_hub_mem_available(&memory, &err) < 0) {
        fprintf(stderr, "caldrix serve: %s\n", err.msg);
        status = 2;
        goto done;
    }
    cdx_load_opts lo = cli_load_opts(NULL, dtype, budget);
    lo.chat = true;
    lo.chat_template = chat_template;
    lo.images = CDX_LOAD_IMAGES_IF_VISION;
    lo.engine = eo;
    lo.kv_type_set = kv_type_set;
    set_task(&lo, lt);
    lo.spec_if_able = true; /* one --spec for every model: one that cannot take it is served without */
    const cdx_server_models sm = { .entries = ent, .n_entries = n, .load = &lo, .tmpl_kwargs = chat_kwargs,
                                   .autoload = !rg->no_autoload, .allow_unknown = rg->allow_unknown,
                                   .max_loaded = rg->max, .idle_unload_s = rg->idle_s, .memory_bytes = memory,
                                   .lora = sl->l, .n_lora = sl->n };
    rc = cdx_server_start(so, &srv, &err);
    if (rc) {
        fprintf(stderr, "caldrix serve: %s\n", err.msg);
        status = rc == CDX_EINVAL ? 2 : 1;
        goto done;
    }
    if ((rc = cdx_server_ready_models(srv, &sm, &err))) {
        fprintf(stderr, "caldrix serve: %s\n", err.msg);
        status = rc == CDX_EINVAL && !strstr(err.msg, "failed to load") ? 2 : 1;
        goto done;
    }
    char mem[32];
    cdx_fmt_bytes(memory, mem, sizeof mem);
    fprintf(stderr, "caldrix serve: ready: %d models (", n);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s%s%s", i ? ", " : "", ent[i].name, ent[i].pinned ? " pinned" : ent[i].preload ? " loaded" : "");
    fprintf(stderr, "), memory budget %s%s%s\n", mem, rg->max ? ", --models-max set" : "",
            so->api_key ? ", API key required" : "");
    say_listening(so, srv);
    status = wait_for_signal(NULL, NULL);
done:
    cdx_server_stop(srv);
    for (int i = 0; i < n_own; i++)
        free(own[i]);
    free(own);
    json_decref(chat_kwargs);
    lora_free(sl);
    return status;
}

int cmd_serve(int argc, char **argv)
{
    reg_args rg = { 0 };
    cdx_server_opts so = cdx_server_defaults();
    cdx_engine_opts eo = cdx_engine_defaults();
    eo.max_round_ms = SERVE_MAX_ROUND_MS;
    const char *model = NULL, *isa = NULL, *kv_store = NULL, *chat_template = NULL, *draft = NULL;
    json_t *chat_kwargs = NULL; /* --chat-template-kwargs */
    uint64_t budget = 0;
    cdx_dtype dtype = CDX_DTYPE_AUTO;
    bool kv_type_set = false, task_set = false, lora_no_apply = false;
    cdx_task task = CDX_TASK_GENERATE;
    const char *lora_arg[16];
    int n_lora_arg = 0;
    int32_t yes_id = -1, no_id = -1;
    long l;
    cli_split_opts split_o = { 0 }; /* --allow-split, --nodes, --split-layers, --split-timeout */
    so.api_key = getenv("CALDRIX_API_KEY");
    so.page = cdx_embedded_page;
    so.page_len = (size_t)(cdx_embedded_page_end - cdx_embedded_page);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = !strcmp(a, "--host") || !strcmp(a, "--port") || !strcmp(a, "--max-batch") ||
                     !strcmp(a, "--max-queue") || !strcmp(a, "--ctx") || !strcmp(a, "--threads") ||
                     !strcmp(a, "-t") || !strcmp(a, "--kv-store") || !strcmp(a, "--api-key") ||
                     !strcmp(a, "--kv-type") || !strcmp(a, "--dtype") || !strcmp(a, "--isa") ||
                     !strcmp(a, "--max-connections") || !strcmp(a, "--timeout") || !strcmp(a, "--kv-blocks") ||
                     !strcmp(a, "--weight-budget") || !strcmp(a, "--cors") || !strcmp(a, "--chat-template") ||
                     !strcmp(a, "--chat-template-kwargs") || !strcmp(a, "--model") || !strcmp(a, "--models-dir") ||
                     !strcmp(a, "--preload") || !strcmp(a, "--pin") || !strcmp(a, "--models-max") ||
                     !strcmp(a, "--idle-unload") || !strcmp(a, "--memory") || !strcmp(a, "--spec") ||
                     !strcmp(a, "--draft-max") || !strcmp(a, "--draft-min") || !strcmp(a, "--task") ||
                     !strcmp(a, "--max-round-ms") || !strcmp(a, "--lora") ||
                     !strcmp(a, "--yes-id") || !strcmp(a, "--no-id") || !strcmp(a, "--draft");
        if (strcmp(a, "--memory") && cli_split_is_opt(a)) { /* serve's --memory is the registry's budget */
            if (cli_split_parse("caldrix serve", argc, argv, &i, &split_o))
                return 2;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(k_serve_usage, stdout);
            cli_print_engine_ranges(stdout, k_serve_engine_opts,
                                    (int)(sizeof k_serve_engine_opts / sizeof k_serve_engine_opts[0]));
            size_t nr = 0;
            const cdx_server_route *rt = cdx_server_routes(&nr); /* the server's route table */
            fputs("\nroutes:\n", stdout);
            for (size_t r = 0; r < nr; r++) {
                char p[96];
                snprintf(p, sizeof p, "%s%s%s%s", rt[r].path, rt[r].alias ? " (" : "", rt[r].alias ? rt[r].alias : "",
                         rt[r].alias ? ")" : "");
                printf("  %-9s %-44s %s\n", rt[r].method, p, rt[r].help);
            }
            return 0;
        }
        if (takes && !v) {
            fprintf(stderr, "caldrix serve: %s needs a value (caldrix serve --help)\n", a);
            return 2;
        }
        if (takes)
            i++;
        if (!strcmp(a, "--model") || !strcmp(a, "--preload") || !strcmp(a, "--pin")) {
            reg_list *L = a[2] == 'm' ? &rg.refs : a[3] == 'r' ? &rg.preload : &rg.pin;
            if (L->n == MAX_MODELS) {
                fprintf(stderr, "caldrix serve: more than %d %s options\n", MAX_MODELS, a);
                return 2;
            }
            L->v[L->n++] = v;
        } else if (!strcmp(a, "--task") && strchr(v, '=')) { /* --task NAME=TASK: one of several models */
            cdx_task t;
            if (cdx_task_from_name(strrchr(v, '=') + 1, &t) || rg.task.n == MAX_MODELS) {
                fprintf(stderr, "caldrix serve: --task \"%s\"; expected [NAME=]embed, rerank or generate\n", v);
                return 2;
            }
            rg.task.v[rg.task.n++] = v;
        } else if (!strcmp(a, "--task")) {
            if (cdx_task_from_name(v, &task)) {
                fprintf(stderr, "caldrix serve: --task is \"%s\"; expected embed, rerank or generate\n", v);
                return 2;
            }
            task_set = true;
        } else if (!strcmp(a, "--yes-id") || !strcmp(a, "--no-id")) {
            if (cli_parse_int(a, v, 0, INT32_MAX, &l)) return 2;
            *(a[2] == 'y' ? &yes_id : &no_id) = (int32_t)l;
        } else if (!strcmp(a, "--lora")) {
            if (n_lora_arg == 16) {
                fprintf(stderr, "caldrix serve: --lora %s: more than 16 --lora options\n", v);
                return 2;
            }
            lora_arg[n_lora_arg++] = v;
        } else if (!strcmp(a, "--lora-init-without-apply")) {
            lora_no_apply = true;
        } else if (!strcmp(a, "--models-dir")) {
            rg.dir = v;
        } else if (!strcmp(a, "--models-autoload") || !strcmp(a, "--no-models-autoload")) {
            rg.no_autoload = a[2] == 'n';
        } else if (!strcmp(a, "--allow-unknown-models")) {
            rg.allow_unknown = true;
        } else if (!strcmp(a, "--models-max")) {
            if (cli_parse_int(a, v, 1, MAX_MODELS, &l)) return 2;
            rg.max = (int)l;
        } else if (!strcmp(a, "--idle-unload")) {
            if (cli_parse_int(a, v, 1, 30 * 86400, &l)) return 2;
            rg.idle_s = (int)l;
        } else if (!strcmp(a, "--memory")) {
            if (cli_parse_bytes(a, v, &rg.memory)) return 2;
        } else if (!strcmp(a, "--host"))
            so.host = v;
        else if (!strcmp(a, "--port")) {
            if (cli_parse_int(a, v, 0, 65535, &l)) return 2;
            so.port = (int)l;
        } else if (!strcmp(a, "--max-batch")) {
            if (cli_parse_engine_opt(a, v, CDX_OPT_MAX_BATCH, &l)) return 2;
            eo.max_batch = (int)l;
        } else if (!strcmp(a, "--max-round-ms")) {
            if (cli_parse_int(a, v, 0, 3600000, &l)) return 2;
            eo.max_round_ms = (double)l;
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
        } else if (!strcmp(a, "--spec")) {
            if ((eo.spec = cdx_spec_parse(v)) < 0) {
                fprintf(stderr, "caldrix serve: --spec is \"%s\"; expected lookup, auto or off\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--draft")) {
            draft = v;
        } else if (!strcmp(a, "--spec-keep-on")) {
            eo.spec_keep_on = true;
        } else if (!strcmp(a, "--draft-max")) {
            if (cli_parse_engine_opt(a, v, CDX_OPT_DRAFT_MAX, &l)) return 2;
            eo.draft_max = (int)l;
        } else if (!strcmp(a, "--draft-min")) {
            if (cli_parse_engine_opt(a, v, CDX_OPT_DRAFT_MIN, &l)) return 2;
            eo.draft_min = (int)l;
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
        } else if (!strcmp(a, "--no-ui")) {
            so.page = NULL;
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
        char sets[160];
        fprintf(stderr, "caldrix serve: --isa \"%s\" is unknown or this CPU lacks it (this CPU runs: %s)\n", isa,
                cli_isa_list(sets, sizeof sets));
        return 2;
    }

    if ((yes_id < 0) != (no_id < 0)) {
        fprintf(stderr, "caldrix serve: give both --yes-id and --no-id, or neither\n");
        json_decref(chat_kwargs);
        return 2;
    }
    const load_task lt = { task_set, task, yes_id, no_id };
    if ((rg.refs.n || rg.dir) && (split_o.allow || split_o.nodes || split_o.layers)) {
        fprintf(stderr, "caldrix serve: --allow-split serves one model split across mpirun's ranks; it does not go with "
                        "--model or --models-dir (several models)\n");
        json_decref(chat_kwargs);
        return 2;
    }
    if (draft && eo.spec == CDX_SPEC_LOOKUP) {
        fprintf(stderr, "caldrix serve: --draft %s with --spec lookup: lookup uses no draft (give --spec auto)\n", draft);
        json_decref(chat_kwargs);
        return 2;
    }
    if (draft && (rg.refs.n || rg.dir)) {
        fprintf(stderr, "caldrix serve: --draft %s is for one served model (caldrix serve MODEL --draft DRAFT), not "
                        "with --model or --models-dir\n", draft);
        json_decref(chat_kwargs);
        return 2;
    }
    if (draft)
        eo.spec = CDX_SPEC_AUTO; /* a draft given is a draft used */
    if (split_o.allow && !rg.refs.n && !rg.dir) { /* --memory: what this rank gives the split */
        split_o.memory = rg.memory;
        rg.memory = 0;
    }
    if (n_lora_arg && split_o.allow) {
        fprintf(stderr, "caldrix serve: --lora %s with a model split over ranks (--allow-split) is not supported\n",
                lora_arg[0]);
        json_decref(chat_kwargs);
        return 2;
    }
    serve_lora sl;
    if (lora_parse_all(lora_arg, n_lora_arg, lora_no_apply, &sl)) {
        json_decref(chat_kwargs);
        return 2;
    }
    if (rg.refs.n || rg.dir)
        return serve_models(&rg, model, &so, &eo, dtype, budget, chat_template, chat_kwargs, kv_type_set, &lt, &sl);
    if (rg.task.n && !(rg.refs.n || rg.dir)) {
        fprintf(stderr, "caldrix serve: --task NAME=TASK names one of several models (--model, --models-dir); serve one "
                        "with --task TASK\n");
        json_decref(chat_kwargs);
        lora_free(&sl);
        return 2;
    }
    if (rg.preload.n || rg.pin.n || rg.max || rg.idle_s || rg.memory || rg.no_autoload || rg.allow_unknown) {
        fprintf(stderr, "caldrix serve: --preload, --pin, --models-max, --idle-unload, --memory, --no-models-autoload "
                        "and --allow-unknown-models are for several models: give them with --model or --models-dir\n");
        json_decref(chat_kwargs);
        lora_free(&sl);
        return 2;
    }
    /* a split across mpirun's ranks: planned, or refused, before any rank loads a byte */
    cdx_split *split = NULL;
    cdx_stage stage;
    int64_t split_l0 = 0, split_l1 = 0;
    int status = cli_split_begin("caldrix serve", &split_o, model, &split, &split_l0, &split_l1);
    if (status) {
        json_decref(chat_kwargs);
        lora_free(&sl);
        return status < 0 ? 0 : status;
    }
    if (split && cdx_split_rank(split) > 0) { /* a later stage: its layers, until rank 0 stops */
        status = cli_split_stage("caldrix serve", split, model, dtype, eo.n_threads, eo.kernels, split_l0, split_l1);
        cdx_split_end(split);
        json_decref(chat_kwargs);
        lora_free(&sl);
        return status;
    }
    cdx_err err = {0};
    cdx_server *srv = NULL;
    cdx_loaded *ld = NULL;
    int64_t outcome_saved = 0; /* speculating requests when the draft outcome was last saved */
    char **cands = NULL; /* --draft auto */
    int n_cands = 0;
    char *name = model_name(model);
    status = 1;
    on_signals();
    if (split && cdx_split_stage_of(split, &stage, &err)) {
        fprintf(stderr, "caldrix serve: %s\n", err.msg);
        goto done;
    }
    if (split && split_o.micro)
        stage.n_micro = (int)split_o.micro;
    eo.stage = split ? &stage : NULL;
    eo.split_groups = cli_split_groups(split, &split_o);

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
    lo.layer0 = split_l0; /* a split: only this rank's slice is packed or copied */
    lo.layer1 = split_l1;
    set_task(&lo, &lt);
    lo.draft = draft;
    lo.spec_if_able = true;
    if (draft && !strcmp(draft, "auto")) {
        lo.draft = NULL; /* the first cached model that passes run's checks */
        if (cli_draft_candidates("caldrix serve", &cands, &n_cands))
            goto done;
        lo.draft_candidates = (const char *const *)cands;
        lo.n_draft_candidates = n_cands;
        if (!n_cands)
            fprintf(stderr, "caldrix serve: --draft auto: the caches hold no model to draft with; speculating by "
                            "prompt lookup\n");
    }
    cdx_load_stage at;
    int rc = cdx_load(model, &lo, &ld, &at, &err);
    if (rc) {
        fprintf(stderr, "caldrix serve: %s%s\n", at == CDX_LOAD_CHAT ? "--chat-template: " : "", err.msg);
        if (at == CDX_LOAD_ENGINE)
            status = rc == CDX_EINVAL ? 2 : 1; /* options that do not go together (or with this model) */
        else if (at == CDX_LOAD_DRAFT_REFUSED)
            status = 2; /* a draft that cannot draft for this model: bad input, as a bad option is */
        goto done;
    }
    if (split && !ld->engine) {
        fprintf(stderr, "caldrix serve: --allow-split: %s is served for %s, which is not split (a generating model is)\n",
                name, cdx_task_name(ld->task));
        status = 2;
        goto done;
    }
    if (split) { /* every rank checks rank 0's model fingerprint and makes its pool */
        cdx_engine_stats es;
        cdx_engine_get_stats(ld->engine, &es);
        if ((rc = cdx_split_start(split, ld->model, es.n_blocks, es.token_budget, ld->kv_type, &err))) {
            fprintf(stderr, "caldrix serve: --allow-split: %s\n", err.msg);
            status = rc == CDX_EINVAL ? 2 : 1;
            goto done;
        }
        fprintf(stderr, "caldrix serve: split over %d ranks: layers 0-%lld here, the rest on ranks 1-%d\n",
                cdx_split_size(split), (long long)split_l1 - 1, cdx_split_size(split) - 1);
    }
    if (ld->spec_note[0])
        fprintf(stderr, "caldrix serve: %s\n", ld->spec_note);
    if (ld->draft_note[0])
        fprintf(stderr, "caldrix serve: %s%s\n", ld->draft_note, ld->draft ? "" : "; speculating by prompt lookup");
    else if (ld->draft)
        fprintf(stderr, "caldrix serve: draft model %s (%s)\n", draft, ld->draft->path ? ld->draft->path : "");
    const cdx_model *m = ld->model;
    if (sl.n && ld->task != CDX_TASK_GENERATE) {
        fprintf(stderr, "caldrix serve: --lora %s: %s is served for %s; adapters are for generating models\n",
                lora_arg[0], name, cdx_task_name(ld->task));
        status = 2;
        goto done;
    }
    if (sl.n && (status = lora_open_all(&sl, lora_arg, m)))
        goto done;
    status = 1;
    if (*cdx_model_notes(m))
        fprintf(stderr, "caldrix: %s", cdx_model_notes(m));
    const cdx_hparams *hp = cdx_model_hparams(m);
    if (eo.n_ctx && hp->n_ctx_train > 0 && eo.n_ctx > hp->n_ctx_train)
        fprintf(stderr, "caldrix serve: warning: --ctx %lld is more than the %lld positions %s was trained for; output "
                        "past them may degrade\n", (long long)eo.n_ctx, (long long)hp->n_ctx_train, name);
    if (ld->task != CDX_TASK_GENERATE) {
        /* an embed or rerank model: its embedder, no engine */
        const int64_t mt = cdx_embedder_max_tokens(ld->embedder);
        if (!ld->tok)
            fprintf(stderr, "caldrix serve: %s has no tokenizer: token-id inputs only\n", name);
        cdx_server_model sm = { .tok = ld->tok, .name = name, .n_vocab = hp->n_vocab, .n_ctx = mt, .bos_id = hp->bos_id,
                                .task = ld->task, .embedder = ld->embedder, .pipe = &ld->pipe };
        if ((rc = cdx_server_start(&so, &srv, &err))) {
            fprintf(stderr, "caldrix serve: %s\n", err.msg);
            status = rc == CDX_EINVAL ? 2 : 1;
            goto done;
        }
        if (cdx_server_ready(srv, &sm, &err)) {
            fprintf(stderr, "caldrix serve: %s\n", err.msg);
            goto done;
        }
        fprintf(stderr, "caldrix serve: ready: %s for %s (%s), %lld dimensions, at most %lld tokens an input%s\n", name,
                cdx_task_name(ld->task), ld->task == CDX_TASK_RERANK ? "/v1/rerank" : "/v1/embeddings",
                (long long)cdx_embedder_dim(ld->embedder), (long long)mt, so.api_key ? ", API key required" : "");
        say_listening(&so, srv);
        wait_for_signal(NULL, NULL);
        status = 0;
        goto done;
    }
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
                            .image_proc = ld->has_image_proc ? &ld->image_proc : NULL,
                            .spec_off_reason = ld->spec_note[0] ? ld->spec_note : NULL, .lora = sl.l, .n_lora = sl.n,
                            .no_images_why = cdx_model_images_refused(ld->model) };
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
    for (int i = 0; i < sl.n; i++) {
        cdx_lora_info li;
        cdx_lora_get_info(sl.open[i], &li);
        fprintf(stderr, "caldrix serve: LoRA adapter %d \"%s\": %s (%s, r %lld, alpha %g, %s), default scale %g\n", i,
                sl.l[i].name, sl.l[i].path, li.format, (long long)li.rank, li.alpha, li.targets, (double)sl.l[i].scale);
    }
    fprintf(stderr, "caldrix serve: ready: %s, context %lld, %lld KV blocks, batch %d, queue %d%s\n", name,
            (long long)st.n_ctx, (long long)st.n_blocks, st.max_batch, st.max_queue,
            so.api_key ? ", API key required" : "");
    say_listening(&so, srv);
    g_split = split;
    status = wait_for_signal(ld, &outcome_saved);
done:
    cdx_server_stop(srv);
    draft_outcome_save(ld, &outcome_saved);
    lora_free(&sl); /* the adapters before their model */
    cdx_load_close(ld);
    if (split) {
        cdx_split_stop(split);
        cdx_split_end(split);
    }
    for (int i = 0; i < n_cands; i++)
        free(cands[i]);
    free(cands);
    json_decref(chat_kwargs);
    free(name);
    return status;
}
