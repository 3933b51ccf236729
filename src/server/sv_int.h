/* caldrix server: what the server's files share. sv_request.c and sv_metrics.c use no engine
 * symbols (their unit tests link without one); server.c holds HTTP, the queues and the engine thread. */
#ifndef CDX_SV_INT_H
#define CDX_SV_INT_H

#include "caldrix.h"
#include "caldrix/server.h"

#include <jansson.h>
#include <pthread.h>

/* ---- errors: OpenAI's shape {"error":{"message","type","param","code"}} ---- */

typedef struct sv_error {
    int status;           /* HTTP status */
    const char *type;     /* "invalid_request_error", ... */
    const char *code;     /* "invalid_type", "MODEL_RESOURCE_BUSY", ... (NULL: null) */
    char param[96];       /* the field ("" : null) */
    char message[1024];
} sv_error;

/* Fills e and returns -1. */
int sv_fail(sv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    CDX_PRINTF(6, 7);
/* The error as a JSON text (heap, NUL-terminated). */
char *sv_error_body(const sv_error *e);

/* ---- requests ---- */

typedef enum { SV_CHAT, SV_COMPLETION, SV_TOKENIZE, SV_DETOKENIZE } sv_kind;

#define SV_MAX_STOP 16
#define SV_MAX_STOP_BYTES 1024
#define SV_MAX_TOKENS_FIELD (1L << 30)

/* The server's compiled grammars (sv_grammars.c): requests that constrain their output alike share
 * one compiled grammar and its mask caches. */
typedef struct sv_grammars sv_grammars;
#define SV_GRAMMARS 32       /* grammars kept, least recently used out first */
sv_grammars *sv_grammars_new(void);
void sv_grammars_free(sv_grammars *c);
/* cdx_grammar_from_gbnf (gbnf) or cdx_grammar_from_json_schema (else; text NULL: any JSON object),
 * or the grammar compiled from the same kind, name and text before (a new reference). c NULL: no
 * cache. */
int sv_grammars_compile(sv_grammars *c, bool gbnf, const char *name, const char *text, size_t len,
                        struct cdx_grammar **out, cdx_err *err);
void sv_grammars_counts(sv_grammars *c, int64_t *hits, int64_t *misses);

typedef struct sv_limits {
    int64_t n_vocab;
    bool has_tok;
    bool images;             /* the model takes images (image_url parts) */
    const char *no_images_why; /* when it does not, and it is a vision-language model's text path: why (or NULL) */
    int max_n;               /* the most choices a request may ask for (0: SV_MAX_N) */
    const char *const *lora_names; /* the model's LoRA adapters (serve --lora NAME=DIR), by id */
    int n_lora;
    const char *lora_owner;  /* the model the server's adapters belong to, when it is another (several
                                models): "lora" on this one is refused naming it; NULL: none */
    sv_grammars *grammars;   /* compiled grammars to share; NULL: compile each request's own */
} sv_limits;

#define SV_MAX_LORA 16       /* serve --lora, at most */

/* A "lora" list, llama-server's [{"id": N, "scale": F}, ...] (caldrix also takes the adapter's NAME
 * as "id"), in arr, the field param: scales[0..lim->n_lora) get each listed adapter's scale and 0
 * for the others (llama-server's construct_lora_list; a listed entry without "scale" is 0, as there;
 * an id listed twice: the last wins). 0, or -1 with e (400 naming the entry: an unknown id, a scale
 * that is not a finite number, not an array, a model without adapters). */
int sv_lora_list_parse(const json_t *arr, const char *param, const sv_limits *lim, float *scales, sv_error *e);

#define SV_MAX_N 128         /* OpenAI's limit on n */

#define SV_MAX_IMAGES 16

typedef enum { SV_FORCE_NONE, SV_FORCE_REQUIRED, SV_FORCE_NAMED } sv_tool_force;

/* A parsed, validated request. Strings and JSON point into root (owned here). */
typedef struct sv_params {
    sv_kind kind;
    json_t *root;
    /* chat */
    json_t *messages;        /* a normalized copy (text parts joined); owned */
    json_t *extra;           /* tools and chat_template_kwargs for the template; owned; may be NULL */
    const json_t *tools;     /* the request's tools when the reply is scanned for calls (tool_choice not "none"), else NULL */
    sv_tool_force force;     /* tool_choice "required" or a named function: the reply is forced to be calls */
    const char *force_name;  /* the named function (force SV_FORCE_NAMED), in root */
    bool parallel_tool_calls; /* "required": one call or several (default true) */
    bool add_generation_prompt;
    /* completion, tokenize */
    const char *text;        /* the prompt or content as text, or NULL */
    size_t text_len;
    int32_t *ids;            /* the prompt or tokens as ids (owned), or NULL */
    int64_t n_ids;
    bool add_special;        /* tokenize */
    /* generation */
    cdx_sampler_params sp;   /* sp.bias points at bias */
    cdx_logit_bias *bias;    /* logit_bias, owned */
    bool seed_set;
    int64_t max_tokens;      /* 0: until the end of generation or a full context */
    const char *stop[SV_MAX_STOP];
    int n_stop;
    bool logprobs;
    int top_logprobs;
    bool stream, include_usage, ignore_eos;
    bool return_tokens;      /* caldrix's extension: choices[i].tokens holds the generated ids */
    bool speculative;        /* caldrix's extension "speculative" (default true): false opts out of
                                the server's speculative decoding (--spec) */
    int n;                   /* choices (1..SV_MAX_N); choice i samples with seed + i */
    bool lora_given;         /* "lora" is a non-empty list: lora_scale replaces the server's defaults */
    float lora_scale[SV_MAX_LORA]; /* by adapter id (lim->n_lora of them); 0: not applied */
    /* images: the decoded bytes of each image_url data: URL, in order (chat: where the part was,
     * the joined content holds "<image>"; completions: caldrix's "images" list, prompt as ids) */
    uint8_t *img[SV_MAX_IMAGES];
    size_t img_len[SV_MAX_IMAGES];
    char img_param[SV_MAX_IMAGES][128];
    int n_img;
    /* constrained decoding (docs/api.md, "Structured output"): response_format json_object or
     * json_schema, llama-server's json_schema or grammar (sv_parse compiles them), or the forced
     * tool calls' grammar (sv_tool_grammar, once the model is known); owned, NULL: none */
    struct cdx_grammar *grammar;
    char grammar_param[64];  /* the field it came from */
    sv_grammars *grammars;   /* where grammars are compiled (sv_limits.grammars) */
    json_t *image_opts;      /* caldrix's extension: processor settings for this request's images (in root) */
    struct cdx_image_tiles *tiles;          /* [n_img], made by the server before submit */
    struct cdx_request_image *req_img;      /* [n_img] */
} sv_params;

/* ---- tool calls (sv_tools.c) ---- */

/* Finds the tool calls in a chat reply (Hermes <tool_call> blocks, Mistral's [TOOL_CALLS], or a
 * Llama 3 reply that is one JSON call), each naming one of tools. *calls_out: an array of OpenAI
 * tool_calls (ids "call_<id_base>_<i>"), NULL when none; *content_out (heap): the text without the
 * calls, trimmed (the whole text when there are none). Returns the number of calls, -1: no memory. */
int sv_tool_calls(const char *text, size_t len, const json_t *tools, const char *id_base, json_t **calls_out,
                  char **content_out, size_t *content_len);
/* Streaming: text[0..len) so far may be released up to the returned offset; from there on it may
 * be (the start of) a tool call and is held until the end. */
size_t sv_tool_hold_from(const char *text, size_t len);

/* gpt-oss's harmony reply (OpenAI's harmony format), split by channel: analysis messages joined
 * → reasoning; final messages, commentary messages without a recipient (preambles), text outside any
 * message and calls that do not count (as written, header included) joined in order → content; a
 * commentary (or analysis) message to "functions.NAME" whose body is a JSON object, NAME one of
 * tools → a call (as sv_tool_calls gives them). Every part is heap, NUL-terminated; calls NULL when
 * none. */
typedef struct {
    char *reasoning, *content;
    size_t reasoning_len, content_len;
    json_t *calls;
} sv_harmony;
/* Parses text[0..len) (the reply after the prompt's "<|start|>assistant"; tools NULL: no call counts).
 * final false (streaming): a reply still coming; what may yet change is left out (the rest of a
 * message that may be a call, a tail that may begin a mark, a header not yet closed by
 * "<|message|>"), so each part is a prefix of the same part of the finished reply. Returns the number
 * of calls, -1: no memory. Free *out with sv_harmony_free. */
int sv_harmony_parse(const char *text, size_t len, bool final, const json_t *tools, const char *id_base, sv_harmony *out);
void sv_harmony_free(sv_harmony *h);
/* A chat request's messages (the server's normalized copy) as gpt-oss's template reads them: each
 * assistant turn's "reasoning_content" as "thinking", a call's arguments given as a JSON text as the
 * object, a null content left out. */
void sv_harmony_messages(json_t *messages);

/* The form a chat template gives a model's tool calls, seen by rendering a conversation whose
 * assistant turn makes one call: SV_FORM_NONE when it shows none of the forms above. SV_FORM_HARMONY
 * (gpt-oss) also means the reply is parsed by channel (sv_harmony_parse), with or without tools. */
typedef enum { SV_FORM_NONE, SV_FORM_HERMES, SV_FORM_MISTRAL, SV_FORM_LLAMA3, SV_FORM_XML, SV_FORM_GRANITE,
               SV_FORM_HARMONY } sv_tool_form;
sv_tool_form sv_tool_form_of(const cdx_tmpl *t, const json_t *tokens);
extern const char *const sv_tool_form_names[7];
/* p->grammar for p->force: the reply is one call (named, or "required" without parallel calls)
 * or one or more calls (required) of the request's tools in form f, each call's arguments valid
 * under its tool's parameters schema. 0, or -1 with e (400 naming the tool's parameters and the
 * schema keyword, or the form). */
int sv_tool_grammar(sv_params *p, sv_tool_form f, sv_error *e);

/* Parses and validates body[0..len) for a route. Returns 0, or -1 with e set (status 400 naming
 * the field). On success free p with sv_params_free (also safe after a failure). */
int sv_parse(const char *body, size_t len, sv_kind kind, const sv_limits *lim, sv_params *p, sv_error *e);
void sv_params_free(sv_params *p);

/* A copy of s[0..n) with every invalid UTF-8 sequence replaced by U+FFFD (heap, NUL-terminated). */
char *sv_utf8_sanitize(const char *s, size_t n, size_t *out_len);

/* Replaces control and non-ASCII bytes of s with '?' in place (for text a client sent that goes to a log). */
void sv_printable(char *s);

/* The text the built-in ChatML template renders (a model without a chat template). */

/* ---- metrics ---- */

/* The routes, one row each: id, path (also the route's label in /metrics and the request log),
 * alias (NULL: none), methods (0: GET/HEAD, 1: POST, 2: both), handler (server.c), what it does (serve --help). The
 * router, /metrics and cdx_server_routes are made from it: a new endpoint is one row. */
#define SV_ROUTES(X)                                                                                          \
    X(HEALTH, "/health", "/v1/health", false, route_health, "{\"status\":\"ok\"}; never needs the API key")     \
    X(MODELS, "/v1/models", "/models", false, route_models,                                                   \
      "the models, their compatibility and state; /v1/models/NAME: one")                                      \
    X(CHAT, "/v1/chat/completions", "/chat/completions", true, route_parsed, "chat (streamed or not)")         \
    X(COMPLETIONS, "/v1/completions", "/completions", true, route_parsed, "text completion (streamed or not)") \
    X(TOKENIZE, "/tokenize", NULL, true, route_parsed, "text to token ids")                                   \
    X(DETOKENIZE, "/detokenize", NULL, true, route_parsed, "token ids to text")                               \
    X(EMBEDDINGS, "/v1/embeddings", "/embedding", true, route_embed,                                           \
      "vectors of an embed model (OpenAI's shape; float or base64)")                                          \
    X(RERANK, "/v1/rerank", "/rerank", true, route_embed,                                                     \
      "relevance scores of a rerank model: query, documents, top_n -> results")                                \
    X(CHUNK, "/chunk", NULL, true, route_chunk,                                                               \
      "a text cut into chunks of at most target_tokens tokens (overlap_tokens) on the model's tokenizer")     \
    X(METRICS, "/metrics", NULL, false, route_metrics, "Prometheus text")                                     \
    X(MODELS_LOAD, "/models/load", NULL, true, route_admin, "{\"model\": NAME}: load it (several models)")     \
    X(MODELS_UNLOAD, "/models/unload", NULL, true, route_admin, "{\"model\": NAME}: unload it")          \
    X(LORA, "/lora-adapters", NULL, 2, route_lora,                                                            \
      "GET: the LoRA adapters [{id, name, path, scale}]; POST [{id, scale}]: set their default scales")        \
    X(PAGE, "/", NULL, false, route_page, "the chat page (HTML; no API key needed; serve --no-ui: off)")

enum {
#define SV_X_(id, path, alias, post, handler, help) SV_R_##id,
    SV_ROUTES(SV_X_)
#undef SV_X_
    SV_R_OTHER,
    SV_N_ROUTES
};
extern const char *const sv_route_names[SV_N_ROUTES];

#define SV_N_BUCKETS 14
typedef struct sv_hist {
    uint64_t counts[SV_N_BUCKETS + 1]; /* the last is +Inf */
    double sum;
    uint64_t n;
} sv_hist;

typedef struct sv_metrics {
    pthread_mutex_t mu;
    uint64_t requests[SV_N_ROUTES][16]; /* by route and by the index of the status in codes */
    int codes[16];                      /* the statuses seen, in the order first seen */
    int n_codes;
    sv_hist ttft, tpot;
    uint64_t finished[5];              /* by cdx_finish */
    int64_t streams_open;
} sv_metrics;

void sv_metrics_init(sv_metrics *m);
void sv_metrics_destroy(sv_metrics *m);
/* Returns the status's slot in m->codes (-1: more than 16 statuses seen), for per-model counts. */
int sv_metrics_request(sv_metrics *m, int route, int status);
void sv_metrics_ttft(sv_metrics *m, double seconds);
void sv_metrics_tpot(sv_metrics *m, double seconds);
void sv_metrics_finish(sv_metrics *m, int finish);
/* Prometheus text (heap). st may be NULL (still loading). */
char *sv_metrics_text(sv_metrics *m, const cdx_engine_stats *st, bool ready, size_t *len);

/* ---- the gate in front of libmicrohttpd (sv_gate.c) ---- */

#define SV_MAX_HEAD (16 * 1024) /* request line and headers, bytes (libmicrohttpd's pool is 32 KiB) */

/* What the gate read from a request's head. */
typedef struct sv_head {
    char method[16];
    char target[121];           /* truncated */
    size_t head_bytes;
    bool has_length, chunked;
    bool expect_continue;       /* Expect: 100-continue */
    uint64_t content_length;
} sv_head;

/* Checks the framing of buf[0..n), the start of a request: the request line (METHOD TARGET
 * HTTP/1.0|1.1), "Name: value" header lines, one numeric Content-Length (at most max_body) or
 * Transfer-Encoding: chunked (not both), a head of at most SV_MAX_HEAD bytes. Returns 0 (h filled),
 * 1: the head is not complete yet, -1: e says why (400, 413, 431, 501 or 505). */
int sv_http_head_check(const char *buf, size_t n, size_t max_body, sv_head *h, sv_error *e);

/* A chunked body's framing in p[0..n) (what follows the head): hex sizes (with extensions), data
 * followed by CRLF, the last chunk, trailers, the empty line; the decoded size at most max_body.
 * Returns 0: complete and well formed, 1: not complete yet, -1: e says why (400 or 413). */
int sv_http_chunks_check(const char *p, size_t n, size_t max_body, sv_error *e);

/* The same, resumable over a buffer that grows: st (zeroed at first) moves past each whole chunk,
 * whose data is appended to out (NULL: not kept; else room for max_body bytes) at out[st->total]. */
typedef struct sv_chunks {
    size_t at;                  /* p[0..at) is read: whole chunks (and trailer lines) */
    size_t total;               /* the data of those chunks, bytes */
    bool trailers;              /* the last chunk is read */
} sv_chunks;
int sv_http_chunks_scan(sv_chunks *st, const char *p, size_t n, size_t max_body, char *out, sv_error *e);

struct addrinfo;
struct sockaddr;
typedef struct sv_gate sv_gate;
typedef struct sv_gate_cfg {
    size_t max_body;
    int timeout_s;              /* a head not complete by then: the connection is closed */
    int max_conn;               /* connections open at once, in the gate and handed over */
    /* hands a checked connection over; returns 0, or -1 when it was refused (and the socket closed) */
    int (*pass)(void *user, int fd, const struct sockaddr *addr, unsigned addrlen);
    void *user;
    const char *cors_origin;    /* borrowed; NULL: none */
    sv_metrics *metrics;        /* refusals are counted under route "other"; may be NULL */
    cdx_server_log_fn on_log;
    void *log_user;
} sv_gate_cfg;

/* Binds ai, starts accepting; *port: the port bound. */
int sv_gate_start(const struct addrinfo *ai, const sv_gate_cfg *cfg, sv_gate **out, int *port, cdx_err *err);
/* A connection handed over has closed. */
void sv_gate_closed(sv_gate *g);
/* Stops accepting and ends the connections still in the gate (waits for them). */
void sv_gate_stop(sv_gate *g);
void sv_gate_free(sv_gate *g); /* stops first; NULL: no-op */

/* ---- the model registry (sv_registry.c) ---- */

typedef enum { SV_UNLOADED, SV_LOADING, SV_LOADED, SV_UNLOADING, SV_FAILED } sv_state;
typedef enum { SV_COMPATIBLE, SV_INCOMPATIBLE, SV_UNKNOWN } sv_compat;

/* One request's inputs for an embed or rerank model, queued for the engine thread, which packs the
 * inputs of every queued request into forwards of up to SV_EMB_BUDGET tokens (an input's vector is
 * the same bits whatever else is in the pass). The connection owns it and waits until done. */
#define SV_EMB_BUDGET 8192
typedef struct sv_emb_job {
    struct sv_emb_job *next;
    int n;                      /* inputs */
    int32_t **ids;              /* [n] */
    int64_t *lens;              /* [n] */
    float *out;                 /* embed: [n][dim]; rerank: [n] scores */
    float *logits;              /* rerank: [n][2] {yes, no} */
    int taken;                  /* inputs handed to a pass so far (engine thread, under mu) */
    int finished;               /* inputs whose results are in out */
    int rc;                     /* a failed pass: CDX_E* and msg */
    char msg[512];
    bool done;
} sv_emb_job;

/* A LoRA adapter of a model (serve --lora NAME=DIR[:SCALE]): its id is its index. */
typedef struct sv_lora {
    char *name, *path;
    const cdx_lora *lora;       /* open while the model is loaded (NULL otherwise) */
    bool owned;                 /* opened by the registry (else the caller's, cdx_server_model.lora) */
    float scale;                /* the default (POST /lora-adapters sets it; r->mu) */
} sv_lora;

/* One model the server knows: the array never moves once the server is ready. */
typedef struct sv_model {
    char *name;
    char *path;                 /* what cdx_load opens (NULL: the caller's model, or the bundled one) */
    bool external;              /* the caller's model (cdx_server_ready): never unloaded */
    bool pinned, preload;
    bool task_set;              /* --task NAME=TASK: this model's own task */
    cdx_task task_want;
    sv_compat compat;           /* inspect's verdict, before any load */
    cdx_task task;              /* what it is served for (known before a load: the option, modules.json,
                                 * an encoder's architecture; the load's own finding replaces it) */
    char reason[1024];          /* why not compatible */
    sv_state state;
    char error[1024];           /* the last load's failure (state FAILED) */
    cdx_loaded *ld;             /* owned when loaded by the server */
    cdx_server_model m;         /* the view routes read (state LOADED) */
    int64_t n_room;             /* positions one sequence can have: the context, or the KV pool if smaller */
    cdx_chat_setup chatml;      /* ChatML, when the model has no template */
    sv_tool_form form;          /* how its template writes tool calls (sv_tool_form_of, at load) */
    int inflight;               /* requests holding it (acquire .. release) */
    bool stepping;              /* the engine thread is in one of its rounds */
    double last_use_ms;         /* CLOCK_MONOTONIC */
    int64_t ctx_hint;           /* the context inspect assumes (before a load) */
    uint64_t est_bytes, est_kv_seq; /* inspect's weights + one sequence's KV, and that KV */
    uint64_t resident_bytes;    /* what it took when last loaded (0: never loaded) */
    uint64_t held_bytes;        /* what the ledger holds for it now */
    uint64_t loads, unloads;
    sv_emb_job *emb_head, *emb_tail; /* embed/rerank requests waiting for a pass (mu) */
    uint64_t requests[SV_N_ROUTES][16]; /* answered, by route and the status's slot in sv_metrics.codes (mu) */
    _Atomic uint64_t finished[5];       /* generations by cdx_finish */
    sv_lora *lora;              /* [n_lora]: the adapters bound to this model (the first one, or the one
                                 * served); opened at its load, closed at its unload */
    int n_lora;
    bool lora_failed;           /* its last load failed opening an adapter (error says which) */
} sv_model;

typedef struct sv_registry {
    bool inited;
    pthread_mutex_t mu;         /* states, counts, the ledger */
    pthread_cond_t cv;          /* a state changed, a request was submitted */
    pthread_cond_t emb_cv;      /* an embed or rerank request's pass is done */
    pthread_mutex_t run_mu;     /* the shared pool: one round, load or unload at a time */
    sv_model *models;
    int n;
    bool multi;                 /* more than one model: requests' "model" must name one */
    cdx_load_opts lo;
    cdx_engine_opts eo;
    cdx_pool *pool;
    const json_t *tmpl_kwargs;
    bool autoload, allow_unknown;
    int max_loaded, idle_unload_s;
    uint64_t budget, used;      /* the ledger (budget 0: no limit) */
    int n_loaded;               /* loaded or loading */
    uint64_t kick;
    size_t rr;                  /* where the round-robin looks first */
    uint64_t emb_passes, emb_inputs, emb_requests; /* embed/rerank passes run, inputs in them, requests (mu) */
} sv_registry;

int sv_reg_init_one(sv_registry *r, const cdx_server_model *m, cdx_err *err);
int sv_reg_init(sv_registry *r, const cdx_server_models *o, cdx_err *err);
int sv_reg_preload(sv_registry *r, cdx_err *err);
void sv_reg_free(sv_registry *r);
/* The model a request names (NULL: none by that name; a one-model server: always it). */
sv_model *sv_reg_find(sv_registry *r, const char *name);
int sv_reg_not_found(sv_registry *r, const char *name, sv_error *e); /* 404 naming the models; returns -1 */
/* Makes m usable (its verdict, then a load when needed, evicting as the ledger and --models-max
 * demand) and counts a request in flight on it until sv_reg_release. 0, or -1 with e. load: an
 * explicit load (POST /models/load), which --models-autoload off allows. */
int sv_reg_acquire(sv_registry *r, sv_model *m, bool load, sv_error *e);
void sv_reg_release(sv_registry *r, sv_model *m);
int sv_reg_unload(sv_registry *r, sv_model *m, sv_error *e);
/* The engine thread: the next engine with work after the last one stepped (NULL: none), one round of it. */
sv_model *sv_reg_next(sv_registry *r);
void sv_reg_step(sv_registry *r, sv_model *m);
void sv_reg_kick(sv_registry *r);
/* Queues j on m (an embed or rerank model, acquired) and waits until its every input is done. */
void sv_reg_emb_run(sv_registry *r, sv_model *m, sv_emb_job *j);
/* Waits up to ms for work; unloads models idle past --idle-unload. */
void sv_reg_idle(sv_registry *r, int ms);
/* /v1/embeddings (is_rerank false) or /v1/rerank on m (acquired): *out (heap) the JSON answer and *n_tokens
 * the inputs' tokens (for the request log), or -1 with e
 * (400 naming the field; 400 invalid_model_task for a model served for another task). sv_embed.c. */
int sv_embed_answer(sv_registry *r, sv_model *m, bool is_rerank, const char *body, size_t len, char **out,
                    int64_t *n_tokens, sv_error *e);
/* POST /chunk on m (acquired; any task, with a tokenizer): *out (heap) the JSON answer, or -1 with e
 * (400 InvalidChunkOverlap when overlap_tokens >= target_tokens). sv_embed.c. */
int sv_chunk_answer(sv_model *m, const char *body, size_t len, char **out, sv_error *e);
json_t *sv_reg_model_json(sv_registry *r, sv_model *m, long long created);
/* The model the server's LoRA adapters belong to (NULL: none given). */
sv_model *sv_reg_lora_model(sv_registry *r);
/* The adapter set of a request on m (acquired, so its adapters are open): p's scales when given, else
 * the defaults, the adapters of scale 0 left out, in id order (llama-server's order). use has room for
 * SV_MAX_LORA. Returns how many. */
int sv_reg_lora_use(sv_registry *r, sv_model *m, const sv_params *p, cdx_lora_use *use);
void sv_reg_ledger(sv_registry *r, uint64_t *used, uint64_t *budget, int *n_loaded);
const char *sv_state_name(sv_state s);

#endif
