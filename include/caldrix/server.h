/* caldrix server layer: an OpenAI-compatible HTTP server (libmicrohttpd) over one engine.
 *
 *   cdx_server_opts so = cdx_server_defaults();  so.port = 8080;
 *   cdx_server *s;  cdx_server_start(&so, &s, &err);        // listening: /health answers 503
 *   ... load the model, its tokenizer, create the engine ...
 *   cdx_server_model sm = { .engine = e, .model = m, .tok = tok, .name = "stories260K", ... };
 *   cdx_server_ready(s, &sm, &err);                          // the engine thread starts; 200
 *   ... wait for a signal ...
 *   cdx_server_stop(s);                                      // connections end, the thread joins
 *   cdx_engine_free(e); ...
 *
 * Threads: libmicrohttpd runs one thread per connection; those threads parse, validate, submit to
 * the engine and stream. One engine thread (started by cdx_server_ready) runs cdx_engine_step;
 * its event callback only pushes into the request's queue (a mutex and a condition variable),
 * which the connection's thread drains. Routes, fields, errors and metrics: docs/api.md.
 * Nothing here prints or exits; nothing a client sends names a file.
 */
#ifndef CALDRIX_SERVER_H
#define CALDRIX_SERVER_H

#include "caldrix/base.h"
#include "caldrix/embed.h"
#include "caldrix/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cdx_server cdx_server;
typedef struct cdx_tmpl cdx_tmpl;
struct json_t;

/* One answered request, for a request log (cdx_server_opts.on_request). Strings are borrowed for
 * the call only. */
typedef struct cdx_server_request_log {
    int64_t t_unix_ms;          /* when the request arrived (wall clock, ms since the Unix epoch) */
    const char *method;         /* "POST", ... */
    const char *route;          /* the route's path, or the path asked for when none matched (control
                                 * and non-ASCII bytes as '?', at most 120 bytes) */
    const char *model;          /* the model's name when the request ran it, else NULL */
    int status;                 /* HTTP status; 499: the client left before an answer */
    int64_t prompt_tokens;      /* -1: no generation ran */
    int64_t completion_tokens;  /* -1: no generation ran */
    double ms;                  /* from arrival to the end of the answer (the stream's last byte) */
} cdx_server_request_log;
/* Called once per request on the connection's thread, so from several threads at once: it must be
 * thread-safe and quick (the connection waits for it). */
typedef void (*cdx_server_log_fn)(void *user, const cdx_server_request_log *r);

typedef struct cdx_server_opts {
    const char *host;         /* numeric address or name to bind (default "127.0.0.1") */
    int port;                 /* 0: any free port (cdx_server_port tells which) */
    const char *api_key;      /* NULL/"": no auth; else every route but /health needs Bearer KEY */
    int max_connections;      /* default 256 */
    int timeout_s;            /* idle connection timeout (default 60) */
    size_t max_body_bytes;    /* default 8 MiB; larger bodies get 413 */
    const char *cors_origin;  /* NULL/"": no CORS headers; else Access-Control-Allow-Origin (an origin
                               * or "*") on every answer, and OPTIONS answers preflights (204) */
    cdx_server_log_fn on_request; /* NULL: no request log */
    void *log_user;           /* passed to on_request */
    const char *page;         /* the chat page answered at GET / (HTML, borrowed until cdx_server_stop; caldrix
                               * serve passes the one built into the binary); NULL: / is 404. It needs no API
                               * key (it holds none; the page asks for one). Its inline <script> and <style>
                               * elements are allowed by their SHA-256 in its Content-Security-Policy */
    size_t page_len;
} cdx_server_opts;

CDX_API cdx_server_opts cdx_server_defaults(void);

/* A LoRA adapter served (serve --lora NAME=DIR[:SCALE]); its id is its index in the list. A request's
 * "lora" picks adapters by id or name (llama-server's [{"id", "scale"}]); GET /lora-adapters lists
 * them, POST /lora-adapters sets the default scales (what a request without "lora" gets). */
typedef struct cdx_server_lora {
    const char *name;              /* unique; copied */
    const char *path;              /* a PEFT folder or a GGUF adapter; copied */
    const struct cdx_lora *lora;   /* cdx_server_model: opened on its model by the caller (borrowed until
                                    * cdx_server_stop); cdx_server_models: NULL (the registry opens path on the
                                    * first model at each of its loads) */
    float scale;                   /* the default scale (0: loaded, applied only when a request asks) */
} cdx_server_lora;

/* What the server serves. Everything is borrowed and must outlive cdx_server_stop. */
typedef struct cdx_server_model {
    cdx_engine *engine;            /* owned by the caller; the server's thread is its only stepper */
    const cdx_tok *tok;            /* NULL: no text routes (ids only) */
    const cdx_tmpl *tmpl;          /* the chat template (cdx_chat_setup_open); NULL: ChatML, as that rule gives */
    const struct json_t *tmpl_tokens; /* special tokens for the template (bos_token, ...); may be NULL */
    bool tmpl_chatml;              /* tmpl is ChatML standing in: /v1/models says chat_template false, and
                                    * the rendered prompt gets the tokenizer's own BOS */
    const struct json_t *tmpl_kwargs; /* template variables every chat gets (--chat-template-kwargs), under
                                       * the request's chat_template_kwargs; may be NULL */
    const char *name;              /* the model's id in /v1/models and responses */
    int64_t n_vocab;
    int64_t n_ctx;                 /* context per sequence */
    int32_t bos_id;                /* -1: none */
    const struct cdx_image_proc *image_proc; /* a vision model's processor settings; NULL: no images */
    cdx_task task;                 /* GENERATE: engine runs it; EMBED / RERANK: embedder does (engine NULL) */
    cdx_embedder *embedder;        /* owned by the caller; the server's engine thread is its only caller */
    const struct cdx_st_pipeline *pipe; /* the embedder's folder files (Matryoshka sizes, prompts); may be NULL */
    const char *spec_off_reason;   /* the server's --spec that this model cannot take (cdx_loaded.spec_note):
                                    * /v1/models says it as speculation_off_reason; NULL: none */
    const cdx_server_lora *lora;   /* [n_lora], each opened on this model (at most 16); copied */
    int n_lora;
    const char *no_images_why;     /* a vision-language model run as its text model: why image parts are refused
                                    * (cdx_model_images_refused); NULL: none */
} cdx_server_model;

/* The routes the server answers (its one route table), for --help and docs: *n rows, static storage. */
typedef struct cdx_server_route {
    const char *path;
    const char *alias;             /* NULL: none */
    const char *method;            /* "GET" or "POST" */
    const char *help;
} cdx_server_route;
CDX_API const cdx_server_route *cdx_server_routes(size_t *n);

/* Binds and starts answering (/health: 503 "loading" until cdx_server_ready). */
CDX_API int cdx_server_start(const cdx_server_opts *o, cdx_server **out, cdx_err *err);
/* The port bound (useful with port 0). */
CDX_API int cdx_server_port(const cdx_server *s);
/* The model is loaded: starts the engine thread; routes answer from now on. Once only. */
CDX_API int cdx_server_ready(cdx_server *s, const cdx_server_model *m, cdx_err *err);
/* Several models (the registry): each entry loads through cdx_load on first use (or at start when
 * preloaded or pinned), at most max_loaded at once within memory_bytes (weights + KV pools), the
 * least recently used idle unpinned model unloaded to make room. A request's "model" picks one
 * (404 model_not_found otherwise; with one entry any name selects it). Every entry gets inspect's
 * verdict first (no weight read): incompatible entries are refused (400 INCOMPATIBLE_MODEL), unknown
 * ones too unless allow_unknown (400 UNKNOWN_MODEL_COMPATIBILITY). All engines share one thread
 * pool of load->engine->n_threads; one thread steps them, one round at a time, round-robin over the
 * engines that have work. Once, instead of cdx_server_ready; a preload that fails is the error. */
typedef struct cdx_server_entry {
    const char *name;              /* the id clients name (unique) */
    const char *path;              /* a .gguf file or a checkpoint folder (references resolved by the caller) */
    bool pinned;                   /* loaded at start and never unloaded */
    bool preload;                  /* loaded at start */
    bool task_set;                 /* served for task (else load->task_set's, else what it declares) */
    cdx_task task;
} cdx_server_entry;
typedef struct cdx_server_models {
    const cdx_server_entry *entries; /* copied */
    int n_entries;
    const struct cdx_load_opts *load; /* how each loads (copied; its strings, engine options' strings and
                                        * image_opts are borrowed until cdx_server_stop); its task_set
                                        * serves every model for that task, else each for what it declares */
    const struct json_t *tmpl_kwargs; /* as cdx_server_model's, for every model; borrowed */
    bool autoload;                 /* load on a request's first use (else only POST /models/load) */
    bool allow_unknown;            /* run models whose compatibility is unknown */
    int max_loaded;                /* 0: no limit */
    int idle_unload_s;             /* 0: never */
    uint64_t memory_bytes;         /* the ledger's budget; 0: no limit */
    const cdx_server_lora *lora;   /* [n_lora] (at most 16), their lora NULL: adapters of the first entry,
                                    * which must be pinned (opened at its load at start; a failure to open
                                    * one is the error, naming it) */
    int n_lora;
} cdx_server_models;
CDX_API int cdx_server_ready_models(cdx_server *s, const cdx_server_models *o, cdx_err *err);
/* Stops listening, ends every connection (their requests are cancelled), joins the engine thread
 * and frees the server. NULL: no-op. */
CDX_API void cdx_server_stop(cdx_server *s);

#ifdef __cplusplus
}
#endif
#endif
