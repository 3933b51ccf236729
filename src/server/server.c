/* caldrix server: HTTP on libmicrohttpd (one thread per connection), the OpenAI routes, SSE
 * streaming, and the engine thread.
 *
 * A generation is a job shared by three holders, each with a reference: the engine (from submit
 * to its final event), the connection (until libmicrohttpd says the request is over) and, when
 * streaming, the response (until libmicrohttpd frees it). The engine's callback only appends to
 * the job's queue under its mutex and signals; the connection's thread drains the queue, and
 * while it waits it watches its socket, so a client that hangs up is cancelled at once. */
#include "server/sv_int.h"

#include <microhttpd.h>
#include <openssl/evp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

struct cdx_server {
    struct MHD_Daemon *d;
    sv_grammars *grammars;    /* compiled grammars shared by requests (NULL: out of memory, none) */
    sv_gate *gate;            /* accepts, checks each request's framing, hands the socket to d */
    char *api_key;
    size_t api_key_len;
    char *cors_origin;        /* NULL: no CORS */
    const char *page;         /* the chat page (borrowed; NULL: / is 404) */
    size_t page_len;
    char *page_csp;           /* its Content-Security-Policy */
    cdx_server_log_fn on_log;
    void *log_user;
    size_t max_body;
    int port;
    time_t created;
    atomic_bool ready, stopping, engine_stop;
    sv_registry reg;          /* the models: one (cdx_server_ready) or several (cdx_server_ready_models) */
    pthread_t engine_thread;
    bool thread_started;
    sv_metrics met;
    atomic_uint_fast64_t n_ids;
    atomic_int n_active;      /* connections holding a generation, until their answer is sent */
};

cdx_server_opts cdx_server_defaults(void)
{
    return (cdx_server_opts){ .host = "127.0.0.1", .port = 8080, .max_connections = 256, .timeout_s = 60,
                              .max_body_bytes = (size_t)8 << 20 };
}

/* ---- jobs: one generation, shared with the engine ---- */

typedef struct sv_piece {
    int32_t token;                  /* -1: the final event's held text */
    float logprob;
    int n_top;
    int32_t top_ids[CDX_MAX_TOP];
    float top_lp[CDX_MAX_TOP];
    char *text;
    size_t text_len;
    char *raw;                      /* the token's piece (cdx_event.piece) */
    size_t raw_len;
    bool raw_first;
    int64_t pos;                    /* where raw starts in all pieces, concatenated */
    int64_t covered;                /* cdx_event.n_covered at this event */
} sv_piece;

typedef struct sv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs;
    cdx_server *s;
    sv_model *mdl;                  /* the model it runs on (held until the connection completes) */
    uint64_t id;                    /* the engine's */
    /* filled by the engine thread under mu */
    sv_piece *pieces;
    size_t n, cap;
    bool done, oom;
    cdx_finish finish;
    char *message;
    int64_t n_prompt, n_cached, n_generated;
    int64_t spec_proposed, spec_accepted; /* speculative decoding's draft tokens, and those kept */
    bool spec;                      /* the request speculated (a proposer was on for it) */
    int64_t n_raw, covered;         /* the pieces' bytes so far, and cdx_event.n_covered */
    double t_last_ms;               /* engine thread only */
    /* the connection's side */
    sv_params p;
    struct MHD_Connection *c;
    size_t read;                    /* pieces turned into output so far */
    char rid[48];
    char call_base[56];             /* the stem of its tool calls' ids (call_id_base) */
    long long created;
    int phase;                      /* streaming: 0 head, 1 body, 2 tail written, 3 ended */
    char *out;
    size_t out_n, out_off, out_cap;
    size_t lp_done;                 /* pieces whose logprobs went out (or were passed over) */
    size_t text_offset;             /* completions' logprobs text_offset, in code points */
    char *acc;                      /* streaming with tools: the reply so far; acc[0..released) is sent */
    size_t acc_n, acc_cap, released;
    size_t h_sent_r, h_sent_c;      /* streaming a harmony reply: its reasoning and content sent so far */
    bool gone;                      /* the client hung up or the server stops */
    bool shutdown;                  /* ... the server stops: the answer says so (stream: error event
                                     * and [DONE]; whole answer: 503) */
    /* n > 1: one job per choice, all of one request. The first (the lead) holds the mutex, the
     * references, the request's parameters and the output; the others borrow them (their p is a
     * shallow copy with their own seed) and are freed with the lead. */
    struct sv_job *lead;            /* the first choice's job (itself for the first) */
    int index;                      /* choices[index] */
    struct sv_job **sib;            /* the lead's: every choice's job, [n_sib], sib[0] the lead */
    int n_sib;
    bool tail_sent;                 /* streaming: its finish chunk went out */
} sv_job;

/* A choice's own parts (not the lead's shared ones). */
static void job_free_choice(sv_job *q)
{
    for (size_t i = 0; i < q->n; i++) {
        free(q->pieces[i].text);
        free(q->pieces[i].raw);
    }
    free(q->pieces);
    free(q->message);
    free(q->acc);
}

/* j: the lead (every reference is the lead's: the connection's, the response's, one per choice
 * the engine holds). */
static void job_unref(sv_job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    for (int i = 1; i < j->n_sib; i++) {
        job_free_choice(j->sib[i]);
        free(j->sib[i]);
    }
    free(j->sib);
    job_free_choice(j);
    free(j->out);
    sv_params_free(&j->p);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Cancels every choice still running (an id the engine has finished is a no-op). */
static void job_cancel_all(sv_job *L)
{
    for (int i = 0; i < L->n_sib; i++)
        if (L->sib[i]->id && !L->sib[i]->done)
            cdx_engine_cancel(L->mdl->m.engine, L->sib[i]->id);
}

/* The engine thread: copy the event into the queue. */
static void on_event(const cdx_event *ev)
{
    sv_job *j = ev->user, *L = j->lead;
    cdx_server *s = j->s;
    double now = cdx_time_ms();
    pthread_mutex_lock(&L->mu);
    bool piece = ev->finish == CDX_FINISH_NONE || ev->text_len > 0;
    if (piece) {
        sv_piece *g = cdx_array_grow(j->pieces, &j->cap, j->n, sizeof *j->pieces);
        char *t = malloc(ev->text_len + 1), *r = malloc(ev->piece_len + 1);
        if (!g || !t || !r) {
            free(t);
            free(r);
            j->oom = true;
        } else {
            j->pieces = g;
            sv_piece *pc = &j->pieces[j->n++];
            memset(pc, 0, sizeof *pc);
            memcpy(t, ev->text ? ev->text : "", ev->text_len);
            t[ev->text_len] = 0;
            pc->text = t;
            pc->text_len = ev->text_len;
            if (ev->piece_len)
                memcpy(r, ev->piece, ev->piece_len);
            pc->raw = r;
            pc->raw_len = ev->piece_len;
            pc->raw_first = ev->piece_first;
            pc->pos = j->n_raw;
            pc->covered = ev->n_covered;
            j->n_raw += (int64_t)ev->piece_len;
            pc->token = ev->finish == CDX_FINISH_NONE ? ev->token : -1;
            pc->logprob = ev->logprob;
            pc->n_top = ev->finish == CDX_FINISH_NONE ? (ev->n_top < CDX_MAX_TOP ? ev->n_top : CDX_MAX_TOP) : 0;
            for (int i = 0; i < pc->n_top; i++) {
                pc->top_ids[i] = ev->top_ids[i];
                pc->top_lp[i] = ev->top_logprobs[i];
            }
        }
    }
    j->n_prompt = ev->n_prompt;
    j->n_cached = ev->n_cached;
    j->n_generated = ev->n_generated;
    j->spec = ev->spec_proposer != NULL;
    j->spec_proposed = ev->spec_proposed;
    j->spec_accepted = ev->spec_accepted;
    j->covered = ev->n_covered;
    if (ev->finish != CDX_FINISH_NONE) {
        j->done = true;
        j->finish = ev->finish;
        if (ev->message)
            j->message = strdup(ev->message);
    }
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
    if (ev->finish == CDX_FINISH_NONE) {
        if (ev->index == 0)
            sv_metrics_ttft(&s->met, ev->ms_first / 1e3);
        else
            sv_metrics_tpot(&s->met, (now - j->t_last_ms) / 1e3);
        j->t_last_ms = now;
    } else {
        sv_metrics_finish(&s->met, ev->finish);
        if (ev->finish >= 0 && ev->finish < 5)
            atomic_fetch_add(&j->mdl->finished[ev->finish], 1);
        job_unref(L); /* the engine's reference */
    }
}

/* Whether the client has hung up (its socket reads end of stream or an error). */
static bool client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd pf = { .fd = ci->connect_fd, .events = POLLRDHUP };
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Whether the choices (mu held) are all done, or (unless all) one has pieces past its read or an
 * end not yet sent. */
static bool job_ready(const sv_job *L, bool all)
{
    bool all_done = true, news = false;
    for (int i = 0; i < L->n_sib; i++) {
        const sv_job *q = L->sib[i];
        all_done &= q->done;
        news |= q->read < q->n || (q->done && !q->tail_sent);
    }
    return all_done || (!all && news);
}

/* Waits (the lead's mu held) until job_ready; cancels every choice when the client goes away or
 * the server stops (then j->shutdown). Returns false when it was cancelled that way. */
static bool job_wait(sv_job *j, bool all)
{
    while (!job_ready(j, all)) {
        const bool stopping = atomic_load(&j->s->stopping);
        if (stopping || client_gone(j->c)) {
            j->gone = true;
            j->shutdown = stopping;
            job_cancel_all(j);
            return false;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    return true;
}

/* ---- JSON helpers ---- */

static json_t *jstr(const char *s, size_t n)
{
    json_t *v = json_stringn(s, n);
    if (v)
        return v;
    char *clean = sv_utf8_sanitize(s, n, &n);
    v = clean ? json_stringn(clean, n) : json_string("");
    free(clean);
    return v;
}

/* ---- logprobs: they spell the returned text ----
 * Each token is shown as the bytes it added to the text (cdx_event.piece: a SentencePiece token's
 * leading space included after the prompt, a skipped special token empty), so the `bytes` of the
 * entries concatenate to the text's UTF-8 and, where every token holds whole characters, the
 * `token` strings concatenate to the text. A token that splits a character shows its valid
 * characters and writes each byte of the split one as \xNN (as OpenAI does); its `bytes` are the
 * raw bytes. Alternatives are shown as they would have entered the text at that point, except
 * that a special token shows its text (it is not in the text, but "" would hide which it is). */

/* The piece as the `token` string: valid UTF-8 as it is, any other byte as the 4 characters \xNN. */
static json_t *piece_json(const char *p, size_t n, json_t **bytes)
{
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)p[i]));
    }
    char *o = malloc(n * 4 + 1);
    if (!o)
        return json_string("");
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t ok = cdx_utf8_check(p + i, n - i);
        memcpy(o + w, p + i, ok);
        w += ok;
        i += ok;
        if (i < n)
            w += (size_t)snprintf(o + w, 5, "\\x%02x", (unsigned char)p[i++]);
    }
    json_t *v = json_stringn(o, w);
    free(o);
    return v ? v : json_string("");
}

/* An alternative token, as it would have entered the text where pc's token did (specials shown). */
static json_t *alt_json(const sv_model *md, int32_t id, bool first, json_t **bytes)
{
    char buf[1024];
    int n = md->m.tok ? cdx_tok_piece(md->m.tok, id, first, false, buf, sizeof buf) : 0;
    n = n < 0 ? 0 : n > (int)sizeof buf ? (int)sizeof buf : n;
    return piece_json(buf, (size_t)n, bytes);
}

/* Chat's logprobs entry for a token shown as its first len bytes: {token, logprob, bytes, top_logprobs} */
static json_t *chat_lp_entry(const sv_model *s, const sv_piece *pc, size_t len)
{
    json_t *bytes, *tok = piece_json(pc->raw, len, &bytes);
    json_t *tops = json_array();
    for (int i = 0; i < pc->n_top; i++) {
        json_t *b, *t = alt_json(s, pc->top_ids[i], pc->raw_first, &b);
        json_array_append_new(tops, json_pack("{s:o,s:f,s:o}", "token", t, "logprob", (double)pc->top_lp[i], "bytes", b));
    }
    return json_pack("{s:o,s:f,s:o,s:o}", "token", tok, "logprob", (double)pc->logprob, "bytes", bytes, "top_logprobs",
                     tops);
}

/* The logprobs of the tokens among pieces [j->lp_done, upto) that the text given so far covers:
 * a token whose whole piece lies within `covered`, and at the end (final) also one that the
 * returned text ends inside, cut to it. Tokens past the returned text (a stop string's) never
 * show. Advances j->lp_done. Chat: {content:[...]}; completions: {tokens, token_logprobs,
 * top_logprobs, text_offset} with text_offset in code points of the text. *n_out: tokens shown. */
static json_t *lp_json(sv_job *j, size_t upto, int64_t covered, bool final, size_t *n_out)
{
    bool chat = j->p.kind == SV_CHAT;
    json_t *content = json_array(), *toks = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    size_t n = 0;
    for (; j->lp_done < upto; j->lp_done++) {
        const sv_piece *pc = &j->pieces[j->lp_done];
        if (pc->token < 0)
            continue;
        size_t len = pc->raw_len;
        if (pc->pos + (int64_t)len > covered) {
            if (!final || pc->pos >= covered)
                break;
            len = (size_t)(covered - pc->pos);
        }
        n++;
        if (chat) {
            json_array_append_new(content, chat_lp_entry(j->mdl, pc, len));
            continue;
        }
        json_array_append_new(toks, piece_json(pc->raw, len, NULL));
        json_array_append_new(lps, json_real(pc->logprob));
        json_t *top = json_object();
        for (int k = 0; k < pc->n_top; k++) {
            json_t *tk = alt_json(j->mdl, pc->top_ids[k], pc->raw_first, NULL);
            json_object_set_new(top, json_string_value(tk), json_real(pc->top_lp[k]));
            json_decref(tk);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)j->text_offset));
        for (size_t b = 0; b < len; b++)
            j->text_offset += ((unsigned char)pc->raw[b] & 0xC0) != 0x80;
    }
    if (final) /* what the returned text does not reach is never shown */
        j->lp_done = upto;
    if (n_out)
        *n_out = n;
    if (chat) {
        json_decref(toks), json_decref(lps), json_decref(tops), json_decref(offs);
        return json_pack("{s:o}", "content", content);
    }
    json_decref(content);
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset",
                     offs);
}

/* The request's usage (L: the lead): the prompt once, as OpenAI counts it for n > 1 (the first
 * choice's cached tokens), the completion tokens of every choice. */
static json_t *usage_json(const sv_job *L)
{
    int64_t gen = 0, acc = 0, prop = 0;
    bool spec = false;
    for (int i = 0; i < L->n_sib; i++) {
        gen += L->sib[i]->n_generated;
        acc += L->sib[i]->spec_accepted;
        prop += L->sib[i]->spec_proposed;
        spec |= L->sib[i]->spec;
    }
    json_t *u = json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)L->n_prompt, "completion_tokens",
                          (json_int_t)gen, "total_tokens", (json_int_t)(L->n_prompt + gen), "prompt_tokens_details",
                          "cached_tokens", (json_int_t)L->n_cached);
    /* speculative decoding (OpenAI's names for its predicted outputs): draft tokens kept and not */
    if (u && spec)
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:I,s:I}", "accepted_prediction_tokens", (json_int_t)acc,
                                      "rejected_prediction_tokens", (json_int_t)(prop - acc)));
    return u;
}

static const char *finish_reason(cdx_finish f)
{
    return f == CDX_FINISH_LENGTH ? "length" : "stop";
}

/* The tool-call ids' stem: the request id's random part, and for choice i > 0 "_i" after it (ids
 * are unique across the choices of one answer). */
static const char *call_id_base(sv_job *j)
{
    if (!j->call_base[0]) {
        const char *d = strchr(j->rid, '-');
        int w = snprintf(j->call_base, sizeof j->call_base, "%s", d ? d + 1 : j->rid);
        if (j->index && w > 0 && (size_t)w < sizeof j->call_base)
            snprintf(j->call_base + w, sizeof j->call_base - (size_t)w, "_%d", j->index);
    }
    return j->call_base;
}

/* One choice of the whole (non-streamed) result; NULL: no memory. */
static json_t *result_choice(sv_job *j)
{
    bool chat = j->p.kind == SV_CHAT;
    size_t len = 0;
    for (size_t i = 0; i < j->n; i++)
        len += j->pieces[i].text_len;
    char *text = malloc(len + 1), *w = text;
    if (!text)
        return NULL;
    for (size_t i = 0; i < j->n; i++) {
        memcpy(w, j->pieces[i].text, j->pieces[i].text_len);
        w += j->pieces[i].text_len;
    }
    *w = 0;
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(j->index));
    json_t *lp = j->p.logprobs ? lp_json(j, j->n, j->covered, true, NULL) : json_null();
    json_t *calls = NULL, *reasoning = NULL;
    if (chat && j->mdl->form == SV_FORM_HARMONY) {
        sv_harmony h;
        if (sv_harmony_parse(text, len, true, j->p.tools, call_id_base(j), &h) < 0) {
            free(text);
            json_decref(choice);
            json_decref(lp);
            return NULL;
        }
        free(text);
        calls = h.calls;
        text = h.content;
        len = h.content_len;
        if (h.reasoning_len)
            reasoning = jstr(h.reasoning, h.reasoning_len);
        free(h.reasoning);
    } else if (chat && j->p.tools) {
        char *rest = NULL;
        size_t rest_n = 0;
        if (sv_tool_calls(text, len, j->p.tools, call_id_base(j), &calls, &rest, &rest_n) < 0) {
            free(text);
            json_decref(choice);
            json_decref(lp);
            return NULL;
        }
        free(text);
        text = rest;
        len = rest_n;
    }
    if (chat) {
        json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                                calls && !len ? json_null() : jstr(text, len));
        if (reasoning)
            json_object_set_new(msg, "reasoning_content", reasoning);
        if (calls)
            json_object_set_new(msg, "tool_calls", calls);
        json_object_set_new(choice, "message", msg);
    } else
        json_object_set_new(choice, "text", jstr(text, len));
    free(text);
    json_object_set_new(choice, "logprobs", lp);
    json_object_set_new(choice, "finish_reason", json_string(calls ? "tool_calls" : finish_reason(j->finish)));
    if (j->p.return_tokens) {
        json_t *ids = json_array();
        for (size_t i = 0; i < j->n; i++)
            if (j->pieces[i].token >= 0)
                json_array_append_new(ids, json_integer(j->pieces[i].token));
        json_object_set_new(choice, "tokens", ids);
    }
    return choice;
}

/* The whole (non-streamed) result (L: the lead). */
static char *result_body(sv_job *L)
{
    json_t *choices = json_array();
    for (int i = 0; choices && i < L->n_sib; i++) {
        json_t *c = result_choice(L->sib[i]);
        if (!c) {
            json_decref(choices);
            return NULL;
        }
        json_array_append_new(choices, c);
    }
    json_t *root = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", L->rid, "object",
                             L->p.kind == SV_CHAT ? "chat.completion" : "text_completion", "created",
                             (json_int_t)L->created, "model", L->mdl->name, "choices", choices, "usage", usage_json(L));
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}

/* ---- streaming ---- */

static void out_add(sv_job *j, const char *s, size_t n)
{
    j = j->lead; /* one output for every choice */
    if (!cdx_bytes_reserve(&j->out, &j->out_cap, j->out_n + n + 1))
        return; /* the chunk is lost; the stream still ends with [DONE] if memory comes back */
    memcpy(j->out + j->out_n, s, n);
    j->out_n += n;
}

static void out_event(sv_job *j, json_t *obj)
{
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s)
        return;
    out_add(j, "data: ", 6);
    out_add(j, s, strlen(s));
    out_add(j, "\n\n", 2);
    free(s);
}

static json_t *chunk(sv_job *j, json_t *choice)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", j->rid, "object",
                          j->p.kind == SV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)j->created, "model", j->mdl->name, "choices",
                          choice ? json_pack("[o]", choice) : json_array());
    if (o && j->p.include_usage)
        json_object_set_new(o, "usage", json_null());
    return o;
}

/* Streaming with tools: adds the piece to the reply and says how much of it may go out now. */
static bool acc_push(sv_job *j, const char *s, size_t n, const char **out, size_t *out_n)
{
    if (!cdx_bytes_reserve(&j->acc, &j->acc_cap, j->acc_n + n + 1))
        return false;
    memcpy(j->acc + j->acc_n, s, n);
    j->acc_n += n;
    size_t h = sv_tool_hold_from(j->acc, j->acc_n);
    *out = j->acc + j->released;
    *out_n = h > j->released ? h - j->released : 0;
    j->released += *out_n;
    return true;
}

static bool harmony_chat(const sv_job *j) { return j->p.kind == SV_CHAT && j->mdl->form == SV_FORM_HARMONY; }

/* Streaming a harmony reply: the reasoning and content it adds to what was sent (parsed afresh from
 * the reply so far each time: O(reply) a piece; sv_harmony_parse's parts of a reply still coming
 * are prefixes of the whole's), as one delta; at the end (final) also its calls. NULL: no memory. */
static json_t *harmony_delta(sv_job *j, bool final, json_t **calls)
{
    sv_harmony h;
    if (sv_harmony_parse(j->acc ? j->acc : "", j->acc_n, final, j->p.tools, call_id_base(j), &h) < 0)
        return NULL;
    json_t *d = json_object();
    if (d && h.reasoning_len > j->h_sent_r) {
        json_object_set_new(d, "reasoning_content", jstr(h.reasoning + j->h_sent_r, h.reasoning_len - j->h_sent_r));
        j->h_sent_r = h.reasoning_len;
    }
    if (d && h.content_len > j->h_sent_c) {
        json_object_set_new(d, "content", jstr(h.content + j->h_sent_c, h.content_len - j->h_sent_c));
        j->h_sent_c = h.content_len;
    }
    if (calls) {
        *calls = h.calls;
        h.calls = NULL;
    }
    sv_harmony_free(&h);
    return d;
}

static void out_piece(sv_job *j, size_t i)
{
    const sv_piece *pc = &j->pieces[i];
    if (harmony_chat(j)) {
        json_t *d = NULL;
        if (cdx_bytes_reserve(&j->acc, &j->acc_cap, j->acc_n + pc->text_len + 1)) {
            memcpy(j->acc + j->acc_n, pc->text, pc->text_len);
            j->acc_n += pc->text_len;
            d = harmony_delta(j, false, NULL);
        }
        if (!d) {
            j->oom = true;
            return;
        }
        size_t n_lp = 0;
        json_t *lp = j->p.logprobs ? lp_json(j, i + 1, pc->covered, pc->token < 0, &n_lp) : json_null();
        if (!json_object_size(d) && !n_lp) {
            json_decref(d);
            json_decref(lp);
            return;
        }
        if (!json_object_size(d))
            json_object_set_new(d, "content", json_string(""));
        out_event(j, chunk(j, json_pack("{s:i,s:o,s:o,s:n}", "index", j->index, "delta", d, "logprobs", lp,
                                        "finish_reason")));
        return;
    }
    const char *text = pc->text;
    size_t text_len = pc->text_len;
    if (j->p.tools && !acc_push(j, pc->text, pc->text_len, &text, &text_len)) {
        j->oom = true;
        return;
    }
    size_t n_lp = 0;
    json_t *lp = j->p.logprobs ? lp_json(j, i + 1, pc->covered, pc->token < 0, &n_lp) : json_null();
    if (text_len == 0 && !n_lp) {
        json_decref(lp);
        return;
    }
    json_t *choice;
    if (j->p.kind == SV_CHAT)
        choice = json_pack("{s:i,s:{s:o},s:o,s:n}", "index", j->index, "delta", "content", jstr(text, text_len),
                           "logprobs", lp, "finish_reason");
    else
        choice = json_pack("{s:i,s:o,s:o,s:n}", "index", j->index, "text", jstr(pc->text, pc->text_len), "logprobs",
                           lp, "finish_reason");
    out_event(j, chunk(j, choice));
}

/* What a request cut short by the server's stop is told (a stream: as its last event before [DONE]). */
static void shutdown_error(sv_error *e)
{
    sv_fail(e, 503, "server_error", "server_shutting_down", NULL,
            "the server is shutting down; the generation was stopped (send the request again)");
}

static void out_error_event(sv_job *j, const sv_error *e)
{
    char *b = sv_error_body(e);
    if (b) {
        out_add(j, "data: ", 6);
        out_add(j, b, strlen(b));
        out_add(j, "\n\n", 2);
        free(b);
    }
}

/* A request the engine failed: 503 split_rank_lost when a rank of a split model was lost (the engine's
 * message starts with that name, src/engine/split.c); 400 grammar_dead_end when the request's grammar
 * could not go on and was not complete (src/engine/engine_grammar.c; the field the grammar came from
 * is the param), else 500 generation_failed. */
static void generation_failed(sv_error *e, const sv_job *j)
{
    const char *msg = j->oom ? "out of memory for the generated text" : j->message ? j->message : "generation failed";
    if (!strncmp(msg, "split_rank_lost:", 16))
        sv_fail(e, 503, "server_error", "split_rank_lost", NULL, "%s", msg);
    else if (!strncmp(msg, "grammar_dead_end: ", 18))
        sv_fail(e, 400, "invalid_request_error", "grammar_dead_end", j->p.grammar_param[0] ? j->p.grammar_param : NULL,
                "%s", msg + 18);
    else
        sv_fail(e, 500, "server_error", "generation_failed", NULL, "%s", msg);
}

/* A choice's end: its last logprobs, held text or tool calls, and its finish chunk; or, when it
 * failed, the error event (then true: the stream ends). */
static bool out_tail(sv_job *j)
{
    if (j->finish == CDX_FINISH_ERROR || j->oom) {
        sv_error e;
        generation_failed(&e, j);
        out_error_event(j, &e);
        return true;
    } else {
        const char *reason = finish_reason(j->finish);
        size_t n_lp = 0; /* a token the returned text ends inside is shown at the end, cut */
        json_t *lp = j->p.logprobs ? lp_json(j, j->n, j->covered, true, &n_lp) : NULL;
        if (n_lp)
            out_event(j, chunk(j, j->p.kind == SV_CHAT ? json_pack("{s:i,s:{s:s},s:o,s:n}", "index", j->index, "delta",
                                                                   "content", "", "logprobs", lp, "finish_reason")
                                                       : json_pack("{s:i,s:s,s:o,s:n}", "index", j->index, "text", "",
                                                                   "logprobs", lp, "finish_reason")));
        else
            json_decref(lp);
        if (harmony_chat(j)) { /* the held tail: the last message's rest, its calls */
            json_t *calls = NULL, *d = harmony_delta(j, true, &calls);
            if (d && json_object_size(d))
                out_event(j, chunk(j, json_pack("{s:i,s:O,s:n,s:n}", "index", j->index, "delta", d, "logprobs",
                                                "finish_reason")));
            json_decref(d);
            size_t k;
            json_t *c;
            json_array_foreach(calls, k, c) json_object_set_new(c, "index", json_integer((json_int_t)k));
            if (calls) {
                out_event(j, chunk(j, json_pack("{s:i,s:{s:o},s:n,s:n}", "index", j->index, "delta", "tool_calls",
                                                calls, "logprobs", "finish_reason")));
                reason = "tool_calls";
            }
        } else if (j->p.tools) { /* the held tail: calls, or text after all */
            json_t *calls = NULL;
            char *rest = NULL;
            size_t rest_n = 0;
            if (sv_tool_calls(j->acc ? j->acc + j->released : "", j->acc_n - j->released, j->p.tools, call_id_base(j),
                              &calls, &rest, &rest_n) >= 0) {
                if (rest_n)
                    out_event(j, chunk(j, json_pack("{s:i,s:{s:o},s:n,s:n}", "index", j->index, "delta", "content",
                                                    jstr(rest, rest_n), "logprobs", "finish_reason")));
                size_t k;
                json_t *c;
                json_array_foreach(calls, k, c) json_object_set_new(c, "index", json_integer((json_int_t)k));
                if (calls) {
                    out_event(j, chunk(j, json_pack("{s:i,s:{s:o},s:n,s:n}", "index", j->index, "delta", "tool_calls",
                                                    calls, "logprobs", "finish_reason")));
                    reason = "tool_calls";
                }
                free(rest);
            }
        }
        json_t *choice = j->p.kind == SV_CHAT ? json_pack("{s:i,s:{},s:n,s:s}", "index", j->index, "delta", "logprobs",
                                                          "finish_reason", reason)
                                              : json_pack("{s:i,s:s,s:n,s:s}", "index", j->index, "text", "",
                                                          "logprobs", "finish_reason", finish_reason(j->finish));
        out_event(j, chunk(j, choice));
        return false;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    sv_job *j = cls;
    while (j->out_off == j->out_n) {
        j->out_off = j->out_n = 0;
        if (j->phase == 3)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (j->phase == 0) {
            for (int i = 0; j->p.kind == SV_CHAT && i < j->n_sib; i++)
                out_event(j, chunk(j, json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", i, "delta", "role", "assistant",
                                                "content", "", "logprobs", "finish_reason")));
            j->phase = 1;
            continue;
        }
        pthread_mutex_lock(&j->mu);
        if (!job_wait(j, false)) {
            const bool shutdown = j->shutdown;
            pthread_mutex_unlock(&j->mu);
            if (!shutdown)
                return MHD_CONTENT_READER_END_WITH_ERROR; /* the client left: nobody to tell */
            sv_error e;
            shutdown_error(&e);
            out_error_event(j, &e);
            out_add(j, "data: [DONE]\n\n", 14);
            j->phase = 3;
            continue;
        }
        /* the engine appends (and may move the array) under mu: read under it too; each choice's
         * chunks go out as they come, its finish chunk once it is done */
        bool done[j->n_sib];
        for (int i = 0; i < j->n_sib; i++) {
            sv_job *q = j->sib[i];
            done[i] = q->done;
            for (; q->read < q->n; q->read++)
                out_piece(q, q->read);
        }
        pthread_mutex_unlock(&j->mu);
        bool failed = false, all_sent = true;
        for (int i = 0; i < j->n_sib && !failed; i++) {
            sv_job *q = j->sib[i];
            if (done[i] && !q->tail_sent) {
                failed = out_tail(q); /* after done, the engine writes nothing more to q */
                q->tail_sent = true;
            }
            all_sent &= q->tail_sent;
        }
        if (failed) {
            pthread_mutex_lock(&j->mu);
            job_cancel_all(j);
            pthread_mutex_unlock(&j->mu);
        } else if (all_sent && j->p.include_usage) {
            json_t *u = chunk(j, NULL);
            json_object_set_new(u, "usage", usage_json(j));
            out_event(j, u);
        }
        if (failed || all_sent) {
            out_add(j, "data: [DONE]\n\n", 14);
            j->phase = 3;
        }
    }
    size_t k = j->out_n - j->out_off < max ? j->out_n - j->out_off : max;
    memcpy(buf, j->out + j->out_off, k);
    j->out_off += k;
    return (ssize_t)k;
}

static void stream_free(void *cls)
{
    sv_job *j = cls;
    pthread_mutex_lock(&j->s->met.mu);
    j->s->met.streams_open--;
    pthread_mutex_unlock(&j->s->met.mu);
    job_unref(j);
}

/* ---- connections ---- */

typedef struct sv_conn {
    cdx_server *s;
    int route;
    bool post;
    double t0_ms;                   /* arrival (cdx_time_ms) */
    int64_t t_unix_ms;              /* arrival, wall clock */
    char method[16];
    char path[121];                 /* the URL asked for, for the request log (sanitized) */
    char *body;
    size_t n, cap;
    bool too_big;
    int status;
    sv_job *job;
    int64_t emb_tokens;             /* an embed or rerank answer's input tokens (0: none) */
    sv_model *mdl;                  /* acquired: released when the connection completes */
} sv_conn;

/* The headers every answer carries: CORS's when --cors is set. */
static void common_headers(const cdx_server *s, struct MHD_Response *r)
{
    /* one request per connection: every request's head then passes the gate (sv_gate.c) */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (!s->cors_origin)
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", s->cors_origin);
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "Retry-After");
    if (strcmp(s->cors_origin, "*"))
        MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result reply(sv_conn *k, struct MHD_Connection *c, int status, char *body, const char *type,
                             const char *retry_after)
{
    size_t len = body ? strlen(body) : 0;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body ? body : (char *)"",
                                                             body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    common_headers(k->s, r);
    if (retry_after)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, retry_after);
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 405)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, k->route == SV_R_LORA ? "GET, POST" : k->post ? "POST" : "GET");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    k->status = status;
    return ret;
}

static enum MHD_Result reply_json(sv_conn *k, struct MHD_Connection *c, int status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return MHD_NO;
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (t) {
        t[n] = '\n';
        t[n + 1] = 0;
        s = t;
    }
    return reply(k, c, status, s, "application/json", NULL);
}

static enum MHD_Result reply_error(sv_conn *k, struct MHD_Connection *c, const sv_error *e)
{
    char *b = sv_error_body(e);
    return reply(k, c, e->status, b, "application/json",
                 e->status == 429 || e->status == 503 ? "1" : NULL);
}

/* The route table's rows (SV_ROUTES in sv_int.h) with their handlers. */
typedef enum MHD_Result (*route_fn)(sv_conn *k, struct MHD_Connection *c, const char *url);
typedef struct { const char *path, *alias; int post; int route; route_fn handler; } route_def; /* post: SV_ROUTES' methods */
static enum MHD_Result route_health(sv_conn *k, struct MHD_Connection *c, const char *url);
static enum MHD_Result route_models(sv_conn *k, struct MHD_Connection *c, const char *url);
static enum MHD_Result route_parsed(sv_conn *k, struct MHD_Connection *c, const char *url);
static enum MHD_Result route_metrics(sv_conn *k, struct MHD_Connection *c, const char *url);
static enum MHD_Result route_admin(sv_conn *k, struct MHD_Connection *c, const char *url);
static enum MHD_Result route_page(sv_conn *k, struct MHD_Connection *c, const char *url);
static enum MHD_Result route_embed(sv_conn *k, struct MHD_Connection *c, const char *url);
static enum MHD_Result route_chunk(sv_conn *k, struct MHD_Connection *c, const char *url);
static enum MHD_Result route_lora(sv_conn *k, struct MHD_Connection *c, const char *url);
static const route_def k_routes[] = {
#define SV_X_(id, path, alias, post, handler, help) { path, alias, post, SV_R_##id, handler },
    SV_ROUTES(SV_X_)
#undef SV_X_
};
static const cdx_server_route k_public_routes[] = {
#define SV_X_(id, path, alias, post, handler, help) { path, alias, post == 2 ? "GET, POST" : post ? "POST" : "GET", help },
    SV_ROUTES(SV_X_)
#undef SV_X_
};

const cdx_server_route *cdx_server_routes(size_t *n)
{
    *n = sizeof k_public_routes / sizeof k_public_routes[0];
    return k_public_routes;
}

static const route_def *find_route(const char *url)
{
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++)
        if (!strcmp(url, k_routes[i].path) || (k_routes[i].alias && !strcmp(url, k_routes[i].alias)))
            return &k_routes[i];
    if (!strncmp(url, "/v1/models/", 11) && url[11])
        return &k_routes[SV_R_MODELS];
    return NULL;
}

/* Checks the Authorization header against --api-key. The scheme is case-insensitive (RFC 7235
 * 2.1: "bearer" is "Bearer"); the key is compared in constant time in the length of what was sent.
 * Fills e (401) and returns -1 unless the key is right; the message tells a missing key from a
 * wrong one. */
static int check_key(const cdx_server *s, const char *auth, sv_error *e)
{
    if (!auth || !*auth)
        return sv_fail(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                       "this server needs an API key: Authorization: Bearer KEY");
    if (strncasecmp(auth, "Bearer", 6) || (auth[6] && auth[6] != ' ' && auth[6] != '\t'))
        return sv_fail(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                       "the Authorization header must be \"Bearer KEY\" (another scheme was sent)");
    const char *got = auth + 6;
    while (*got == ' ' || *got == '\t')
        got++;
    size_t n = strlen(got);
    unsigned diff = (unsigned)(n != s->api_key_len);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)got[i] ^ (unsigned char)s->api_key[i % (s->api_key_len ? s->api_key_len : 1)];
    if (diff)
        return sv_fail(e, 401, "invalid_request_error", "invalid_api_key", NULL, "wrong API key");
    return 0;
}

/* A CORS preflight (OPTIONS with --cors): 204 with what the route allows. It carries no
 * Authorization header (browsers never send one on a preflight), so it needs no key. The headers
 * a browser asks to send are allowed as asked when they are plain header names. */
static enum MHD_Result reply_preflight(sv_conn *k, struct MHD_Connection *c, const route_def *rd)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    bool plain = want && *want && strlen(want) < 1024;
    for (const char *p = want; plain && *p; p++)
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                *p == '_' || *p == ',' || *p == ' ';
    common_headers(k->s, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", rd->post == 2 ? "GET, HEAD, POST, OPTIONS"
                                                                    : rd->post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", plain ? want : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    k->status = 204;
    return ret;
}

static enum MHD_Result route_models(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    cdx_server *s = k->s;
    sv_error e;
    if (!strncmp(url, "/v1/models/", 11)) {
        sv_model *m = sv_reg_find(&s->reg, url + 11); /* one model: any name selects it */
        if (!m)
            return sv_reg_not_found(&s->reg, url + 11, &e), reply_error(k, c, &e);
        return reply_json(k, c, 200, sv_reg_model_json(&s->reg, m, (long long)s->created));
    }
    json_t *list = json_array();
    for (int i = 0; i < s->reg.n; i++)
        json_array_append_new(list, sv_reg_model_json(&s->reg, &s->reg.models[i], (long long)s->created));
    return reply_json(k, c, 200, json_pack("{s:s,s:o}", "object", "list", "data", list));
}

/* POST /models/load and /models/unload {"model": NAME} */
static enum MHD_Result route_admin(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    cdx_server *s = k->s;
    sv_error e;
    json_error_t je;
    json_t *root = k->body ? json_loadb(k->body, k->n, 0, &je) : NULL;
    const char *name = json_string_value(json_object_get(root, "model"));
    if (!name) {
        json_decref(root);
        sv_fail(&e, 400, "invalid_request_error", root ? "invalid_type" : "invalid_json", "model",
                "the body must be a JSON object with \"model\": NAME");
        return reply_error(k, c, &e);
    }
    sv_model *m = s->reg.multi ? sv_reg_find(&s->reg, name) : (strcmp(name, s->reg.models[0].name) ? NULL : &s->reg.models[0]);
    int rc = !m ? sv_reg_not_found(&s->reg, name, &e)
             : k->route == SV_R_MODELS_LOAD ? sv_reg_acquire(&s->reg, m, true, &e) : sv_reg_unload(&s->reg, m, &e);
    json_decref(root);
    if (rc)
        return reply_error(k, c, &e);
    if (k->route == SV_R_MODELS_LOAD)
        sv_reg_release(&s->reg, m);
    return reply_json(k, c, 200, sv_reg_model_json(&s->reg, m, (long long)s->created));
}

static int encode(const sv_model *s, const char *text, size_t len, bool add_special, int32_t **ids, int64_t *n,
                  sv_error *e, const char *param)
{
    cdx_err err = {0};
    size_t need = 0;
    if (cdx_tok_encode(s->m.tok, text, len, add_special, true, NULL, 0, &need, &err))
        return sv_fail(e, 400, "invalid_request_error", "invalid_value", param, "%s: %s", param, err.msg);
    *ids = malloc((need + 1) * sizeof **ids);
    if (!*ids)
        return sv_fail(e, 500, "server_error", "out_of_memory", param, "out of memory for %zu tokens", need);
    if (cdx_tok_encode(s->m.tok, text, len, add_special, true, *ids, need, &need, &err))
        return sv_fail(e, 400, "invalid_request_error", "invalid_value", param, "%s: %s", param, err.msg);
    *n = (int64_t)need;
    return 0;
}

static enum MHD_Result route_tokenize(sv_conn *k, struct MHD_Connection *c, sv_params *p)
{
    sv_error e;
    int32_t *ids = NULL;
    int64_t n = 0;
    if (encode(k->mdl, p->text, p->text_len, p->add_special, &ids, &n, &e, "content"))
        return free(ids), reply_error(k, c, &e);
    json_t *a = json_array();
    for (int64_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    free(ids);
    return reply_json(k, c, 200, json_pack("{s:o}", "tokens", a));
}

static enum MHD_Result route_detokenize(sv_conn *k, struct MHD_Connection *c, sv_params *p)
{
    cdx_err err = {0};
    size_t need = 0;
    sv_error e;
    if (cdx_tok_decode(k->mdl->m.tok, p->ids, (size_t)p->n_ids, false, NULL, 0, &need, &err)) {
        sv_fail(&e, 400, "invalid_request_error", "invalid_value", "tokens", "tokens: %s", err.msg);
        return reply_error(k, c, &e);
    }
    char *text = malloc(need + 1);
    if (!text || cdx_tok_decode(k->mdl->m.tok, p->ids, (size_t)p->n_ids, false, text, need + 1, &need, &err)) {
        free(text);
        sv_fail(&e, 500, "server_error", "internal_error", "tokens", "cannot decode the tokens");
        return reply_error(k, c, &e);
    }
    json_t *j = json_pack("{s:o}", "content", jstr(text, need));
    free(text);
    return reply_json(k, c, 200, j);
}

/* The images of a request decoded and preprocessed (on the connection's thread; the engine encodes them). */
static int prepare_images(const sv_model *s, sv_params *p, sv_error *e)
{
    if (!p->n_img)
        return 0;
    p->tiles = calloc((size_t)p->n_img, sizeof *p->tiles);
    p->req_img = calloc((size_t)p->n_img, sizeof *p->req_img);
    if (!p->tiles || !p->req_img)
        return sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    cdx_image_proc pp = *s->m.image_proc;
    const char *key;
    json_t *val;
    json_object_foreach(p->image_opts, key, val) {
        cdx_err err = {0};
        char param[96], *txt = json_dumps(val, JSON_ENCODE_ANY);
        snprintf(param, sizeof param, "image_opts.%.60s", key);
        int rc = txt ? cdx_image_proc_set(&pp, key, txt, &err) : CDX_ENOMEM;
        free(txt);
        if (!rc && (pp.max_image_size != s->m.image_proc->max_image_size ||
                    pp.image_seq_len != s->m.image_proc->image_seq_len))
            rc = cdx_err_set(&err, CDX_EINVAL, "%s: the vision tower takes tiles of %lld pixels and %lld tokens", key,
                             (long long)s->m.image_proc->max_image_size, (long long)s->m.image_proc->image_seq_len);
        if (rc)
            return sv_fail(e, 400, "invalid_request_error", "invalid_value", param, "%s: %s", param, err.msg);
    }
    for (int i = 0; i < p->n_img; i++) {
        cdx_err err = {0};
        cdx_image im;
        int rc = cdx_image_decode(p->img[i], p->img_len[i], p->img_param[i], &im, &err);
        if (!rc)
            rc = cdx_image_preprocess(&pp, &im, &p->tiles[i], &err);
        cdx_image_free(&im);
        if (rc)
            return sv_fail(e, rc == CDX_ENOMEM ? 500 : 400, rc == CDX_ENOMEM ? "server_error" : "invalid_request_error",
                           "invalid_image", p->img_param[i], "%s", err.msg);
        p->req_img[i] = (cdx_request_image){ .pixels = p->tiles[i].pixels, .n_tiles = p->tiles[i].n_tiles };
    }
    return 0;
}

/* The prompt of a chat or completion request as token ids (into p->ids). */
static int build_prompt(const sv_model *s, sv_params *p, sv_error *e)
{
    if (prepare_images(s, p, e))
        return -1;
    if (p->kind == SV_CHAT) {
        cdx_err err = {0};
        char *text = NULL;
        size_t len = 0;
        if (s->form == SV_FORM_HARMONY)
            sv_harmony_messages(p->messages);
        json_t *kw = p->extra; /* the server's kwargs, then the request's over them */
        if (s->m.tmpl_kwargs && (kw = json_deep_copy(s->m.tmpl_kwargs)) && p->extra)
            json_object_update(kw, p->extra);
        int rr = cdx_chat_render(s->m.tmpl, p->messages, p->add_generation_prompt, s->m.tmpl_tokens, kw, &text, &len,
                                 &err);
        if (kw != p->extra)
            json_decref(kw);
        if (rr)
            return sv_fail(e, 400, "invalid_request_error", "template_error", "messages",
                           "the chat template refused the messages: %s", err.msg);
        if (p->force && sv_tool_grammar(p, s->form, e)) {
            free(text);
            return -1;
        }
        if (p->n_img) { /* the processor's expansion of each <image> the parts left in the text */
            char *ex = NULL;
            const int rc = cdx_idefics3_expand(text, p->tiles, p->n_img, s->m.image_proc->image_seq_len, &ex, &err);
            free(text);
            if (rc)
                return sv_fail(e, 400, "invalid_request_error", "invalid_value", "messages", "%s", err.msg);
            text = ex;
            len = strlen(ex);
        }
        /* a rendered template carries its own special tokens; ChatML on a model without a template
         * gets what the tokenizer adds by itself (BOS) */
        int rc = encode(s, text, len, s->m.tmpl_chatml, &p->ids, &p->n_ids, e, "messages");
        free(text);
        if (rc)
            return rc;
    } else if (!p->ids) {
        if (encode(s, p->text, p->text_len, true, &p->ids, &p->n_ids, e, "prompt"))
            return -1;
    }
    if (p->n_ids == 0 && s->m.bos_id >= 0)
        p->ids[p->n_ids++] = s->m.bos_id;
    if (p->n_ids == 0)
        return sv_fail(e, 400, "invalid_request_error", "invalid_value", p->kind == SV_CHAT ? "messages" : "prompt",
                       "the prompt is empty and the model has no BOS token to start from");
    return 0;
}

/* max_tokens past what the context leaves is cut to it (finish_reason "length" when the context
 * fills), as llama-server and vLLM do: OpenAI clients send large values routinely. Only a prompt
 * that leaves no position to generate is refused, naming the prompt. */
static int fit_context(const sv_model *s, sv_params *p, sv_error *e)
{
    if (p->n_ids >= s->n_room)
        return sv_fail(e, 400, "invalid_request_error", "MODEL_RESOURCE_LIMIT", p->kind == SV_CHAT ? "messages" : "prompt",
                       "%lld prompt tokens leave no room to generate: the context holds %lld", (long long)p->n_ids,
                       (long long)s->n_room);
    const int64_t left = s->n_room - p->n_ids;
    if (p->max_tokens > left || (p->max_tokens <= 0 && s->n_room < s->m.n_ctx))
        p->max_tokens = left;
    return 0;
}

static enum MHD_Result route_generate(sv_conn *k, struct MHD_Connection *c, sv_params *p)
{
    cdx_server *s = k->s;
    sv_error e;
    if (build_prompt(k->mdl, p, &e) || fit_context(k->mdl, p, &e))
        return reply_error(k, c, &e);
    const int n = p->n > 1 ? p->n : 1;
    sv_job *j = calloc(1, sizeof *j), **sib = calloc((size_t)n, sizeof *sib);
    if (!j || !sib) {
        free(j);
        free(sib);
        return MHD_NO;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->s = s;
    j->mdl = k->mdl;
    j->c = c;
    j->p = *p;
    *p = (sv_params){0};
    j->lead = j;
    j->sib = sib;
    sib[0] = j;
    j->n_sib = 1;
    atomic_store(&j->refs, 1); /* the connection's; one more for each choice the engine takes */
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        r = (uint64_t)cdx_time_ms() * 0x9E3779B97F4A7C15ull;
    snprintf(j->rid, sizeof j->rid, "%s-%016llx%llx", j->p.kind == SV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)r, (unsigned long long)atomic_fetch_add(&s->n_ids, 1));
    j->created = (long long)time(NULL);
    if (!j->p.seed_set && getrandom(&j->p.sp.seed, sizeof j->p.sp.seed, 0) != sizeof j->p.sp.seed)
        j->p.sp.seed = r ^ 0x5851F42D4C957F2Dull;
    /* n > 1: choice i is the same request with seed + i (a shallow copy of the lead's parameters);
     * the engine's prefix cache lets them share the prompt's KV blocks */
    for (int i = 1; i < n; i++) {
        sv_job *q = calloc(1, sizeof *q);
        if (!q) {
            job_unref(j);
            return MHD_NO;
        }
        *q = (sv_job){ .s = s, .mdl = k->mdl, .c = c, .p = j->p, .created = j->created, .lead = j, .index = i };
        q->p.sp.seed = j->p.sp.seed + (uint64_t)i;
        memcpy(q->rid, j->rid, sizeof q->rid);
        sib[j->n_sib++] = q;
    }
    cdx_request rq = cdx_request_defaults();
    rq.prompt = j->p.ids;
    rq.n_prompt = j->p.n_ids;
    rq.sampling = j->p.sp;
    rq.max_tokens = j->p.max_tokens;
    rq.ignore_eos = j->p.ignore_eos;
    rq.no_speculation = !j->p.speculative;
    rq.stop = j->p.stop;
    rq.n_stop = j->p.n_stop;
    rq.top_logprobs = j->p.logprobs ? j->p.top_logprobs : 0;
    rq.logprobs = j->p.logprobs;
    /* a harmony chat reply is read by its channels' marks, which are special tokens */
    rq.skip_special = !(j->p.kind == SV_CHAT && k->mdl->form == SV_FORM_HARMONY);
    /* a reply scanned for calls, or held to a grammar that may read a mark, keeps the marks' text */
    rq.keep_marks = j->p.tools || j->p.grammar;
    rq.on_event = on_event;
    rq.images = j->p.req_img;
    rq.n_images = j->p.n_img;
    rq.grammar = j->p.grammar;
    cdx_lora_use lora_use[SV_MAX_LORA]; /* copied at submit; the adapters stay open while the model is held */
    const cdx_lora_set lora_set = { lora_use, sv_reg_lora_use(&s->reg, k->mdl, &j->p, lora_use) };
    rq.lora = lora_set.n ? &lora_set : NULL;
    k->job = j;
    atomic_fetch_add(&s->n_active, 1); /* until on_completed: cdx_server_stop waits for its last words */
    cdx_err err = {0};
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        sv_job *q = sib[i];
        rq.user = q;
        rq.sampling.seed = q->p.sp.seed;
        atomic_fetch_add(&j->refs, 1); /* the engine's */
        rc = cdx_engine_submit(k->mdl->m.engine, &rq, &q->id, &err);
        if (rc) {
            atomic_fetch_sub(&j->refs, 1); /* the engine never took it */
            for (int k2 = i; k2 < n; k2++)
                sib[k2]->done = true;
        }
    }
    sv_reg_kick(&s->reg); /* the engine thread may be waiting on another engine */
    if (rc) {
        pthread_mutex_lock(&j->mu);
        job_cancel_all(j); /* the choices already submitted */
        pthread_mutex_unlock(&j->mu);
        if (rc == CDX_ERESOURCE_LIMIT)
            sv_fail(&e, 400, "invalid_request_error", "MODEL_RESOURCE_LIMIT", j->p.kind == SV_CHAT ? "messages" : "prompt",
                    "%s", err.msg);
        else if (rc == CDX_ERESOURCE_BUSY)
            sv_fail(&e, 429, "rate_limit_error", "MODEL_RESOURCE_BUSY", NULL, "%s", err.msg);
        else if (rc == CDX_EINVAL)
            sv_fail(&e, 400, "invalid_request_error", "invalid_value", j->p.kind == SV_CHAT ? "messages" : "prompt",
                    "%s", err.msg);
        else
            sv_fail(&e, 500, "server_error", "internal_error", NULL, "%s", err.msg);
        return reply_error(k, c, &e);
    }
    if (j->p.stream) {
        atomic_fetch_add(&j->refs, 1); /* the response's */
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, j,
                                                                      stream_free);
        if (!resp) {
            job_unref(j);
            return MHD_NO;
        }
        pthread_mutex_lock(&s->met.mu);
        s->met.streams_open++;
        pthread_mutex_unlock(&s->met.mu);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        common_headers(s, resp);
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        k->status = 200;
        return ret;
    }
    pthread_mutex_lock(&j->mu);
    job_wait(j, true);
    const bool gone = j->gone, shutdown = j->shutdown;
    pthread_mutex_unlock(&j->mu);
    if (shutdown)
        return shutdown_error(&e), reply_error(k, c, &e);
    if (gone)
        return MHD_NO; /* nobody to answer */
    for (int i = 0; i < j->n_sib; i++) {
        const sv_job *q = j->sib[i];
        if (q->finish == CDX_FINISH_ERROR || q->oom) {
            generation_failed(&e, q);
            return reply_error(k, c, &e);
        }
    }
    char *body = result_body(j);
    if (!body)
        return MHD_NO;
    return reply(k, c, 200, body, "application/json", NULL);
}

/* Speculative decoding by model: each loaded model whose engine speculates, with its proposer
 * ("lookup" or "draft"), appended to t[0..*n) (realloc'd; NULL: no memory, t freed). */
static char *spec_metrics(cdx_server *s, char *t, size_t *n)
{
    static const char *const names[2] = { "caldrix_model_spec_draft_tokens_total",
                                          "caldrix_model_spec_accepted_tokens_total" };
    static const char *const helps[2] = { "Draft tokens proposed by speculative decoding, by model and proposer.",
                                          "Draft tokens kept (the model drew the same token), by model and proposer." };
    size_t cap = 1024 + (size_t)s->reg.n * 512, w = 0;
    char *x = malloc(cap);
    if (!x) {
        free(t);
        return NULL;
    }
#define PUT(...) (w += (size_t)snprintf(x + w, w < cap ? cap - w : 0, __VA_ARGS__))
    for (int k = 0; k < 2; k++) {
        PUT("# HELP %s %s\n# TYPE %s counter\n", names[k], helps[k], names[k]);
        pthread_mutex_lock(&s->reg.mu);
        for (int i = 0; i < s->reg.n && w < cap; i++) {
            const sv_model *m = &s->reg.models[i];
            if (m->state != SV_LOADED || !m->m.engine) /* an embedder speculates on nothing */
                continue;
            cdx_engine_stats st;
            cdx_engine_get_stats(m->m.engine, &st);
            if (st.spec_proposer)
                PUT("%s{model=\"%s\",proposer=\"%s\"} %llu\n", names[k], m->name, st.spec_proposer,
                    (unsigned long long)(k ? st.spec_accepted : st.spec_proposed));
        }
        pthread_mutex_unlock(&s->reg.mu);
    }
#undef PUT
    char *g = w < cap ? realloc(t, *n + w + 1) : t; /* more models than the estimate: left out, never cut */
    if (!g) {
        free(x);
        free(t);
        return NULL;
    }
    if (w < cap) {
        memcpy(g + *n, x, w + 1);
        *n += w;
    }
    free(x);
    return g;
}

/* The engines' statistics summed over the loaded models (one model: its own), and the registry's
 * gauges after them. */
static char *metrics_text(cdx_server *s, size_t *n)
{
    cdx_engine_stats sum = { 0 };
    pthread_mutex_lock(&s->reg.mu);
    for (int i = 0; i < s->reg.n; i++) {
        const sv_model *m = &s->reg.models[i];
        if (m->state != SV_LOADED || !m->m.engine)
            continue;
        cdx_engine_stats st;
        cdx_engine_get_stats(m->m.engine, &st);
        sum.n_ctx = st.n_ctx > sum.n_ctx ? st.n_ctx : sum.n_ctx;
        sum.n_blocks += st.n_blocks;
        sum.blocks_used += st.blocks_used;
        sum.blocks_cached += st.blocks_cached;
        sum.blocks_free += st.blocks_free;
        sum.running += st.running;
        sum.waiting += st.waiting;
        sum.prompt_tokens += st.prompt_tokens;
        sum.cached_tokens += st.cached_tokens;
        sum.spec_proposed += st.spec_proposed;
        sum.spec_accepted += st.spec_accepted;
        sum.spec_verifies += st.spec_verifies;
        sum.generated_tokens += st.generated_tokens;
        sum.preemptions += st.preemptions;
        sum.rounds += st.rounds;
        sum.split_overlapped += st.split_overlapped;
    }
    pthread_mutex_unlock(&s->reg.mu);
    char *t = sv_metrics_text(&s->met, &sum, true, n);
    pthread_mutex_lock(&s->reg.mu);
    const uint64_t ep = s->reg.emb_passes, ei = s->reg.emb_inputs, er = s->reg.emb_requests;
    pthread_mutex_unlock(&s->reg.mu);
    int64_t gh = 0, gm = 0;
    if (s->grammars)
        sv_grammars_counts(s->grammars, &gh, &gm);
    char em[1024];
    const int en = snprintf(em, sizeof em,
                            "# HELP caldrix_grammar_cache_hits_total Constrained requests that reused a grammar "
                            "compiled for an earlier one (and its mask caches).\n"
                            "# TYPE caldrix_grammar_cache_hits_total counter\ncaldrix_grammar_cache_hits_total %lld\n"
                            "# HELP caldrix_grammar_cache_misses_total Constrained requests whose grammar was "
                            "compiled anew.\n"
                            "# TYPE caldrix_grammar_cache_misses_total counter\ncaldrix_grammar_cache_misses_total %lld\n"
                            "# HELP caldrix_embed_requests_total Embed and rerank requests queued.\n"
                            "# TYPE caldrix_embed_requests_total counter\ncaldrix_embed_requests_total %llu\n"
                            "# HELP caldrix_embed_passes_total Embed and rerank passes run (the inputs of every queued "
                            "request packed).\n# TYPE caldrix_embed_passes_total counter\ncaldrix_embed_passes_total %llu\n"
                            "# HELP caldrix_embed_inputs_total Inputs embedded or scored.\n"
                            "# TYPE caldrix_embed_inputs_total counter\ncaldrix_embed_inputs_total %llu\n",
                            (long long)gh, (long long)gm, (unsigned long long)er, (unsigned long long)ep,
                            (unsigned long long)ei);
    char *t2 = t && en > 0 && (size_t)en < sizeof em ? realloc(t, *n + (size_t)en + 1) : NULL;
    if (t2) {
        memcpy(t2 + *n, em, (size_t)en + 1);
        *n += (size_t)en;
        t = t2;
    }
    if (t && !(t = spec_metrics(s, t, n)))
        return NULL;
    if (!t || !s->reg.multi)
        return t;
    uint64_t used, budget;
    int n_loaded;
    sv_reg_ledger(&s->reg, &used, &budget, &n_loaded);
    /* several models: the registry's gauges, and every per-request series again with a model label */
    size_t cap = 4096 + (size_t)s->reg.n * 2048, w = 0;
    char *x = malloc(cap);
    if (!x)
        return t;
#define PUT(...) (w += (size_t)snprintf(x + w, w < cap ? cap - w : 0, __VA_ARGS__))
    PUT("# HELP caldrix_models_loaded Models loaded (or loading).\n# TYPE caldrix_models_loaded gauge\n"
        "caldrix_models_loaded %d\n"
        "# HELP caldrix_memory_ledger_bytes The memory ledger: bytes held by loaded models (weights and KV pools), "
        "and the budget (0: none).\n# TYPE caldrix_memory_ledger_bytes gauge\n"
        "caldrix_memory_ledger_bytes{kind=\"used\"} %llu\ncaldrix_memory_ledger_bytes{kind=\"budget\"} %llu\n",
        n_loaded, (unsigned long long)used, (unsigned long long)budget);
    static const char *const reasons[5] = { "none", "stop", "length", "cancelled", "error" };
    PUT("# HELP caldrix_model_requests_total HTTP requests answered, by model, route and status.\n"
        "# TYPE caldrix_model_requests_total counter\n");
    pthread_mutex_lock(&s->met.mu);
    const int n_codes = s->met.n_codes;
    int codes[16];
    memcpy(codes, s->met.codes, sizeof codes);
    pthread_mutex_unlock(&s->met.mu);
    pthread_mutex_lock(&s->reg.mu);
    for (int i = 0; i < s->reg.n && w < cap; i++)
        for (int r = 0; r < SV_N_ROUTES; r++)
            for (int c = 0; c < n_codes; c++)
                if (s->reg.models[i].requests[r][c])
                    PUT("caldrix_model_requests_total{model=\"%s\",route=\"%s\",status=\"%d\"} %llu\n",
                        s->reg.models[i].name, sv_route_names[r], codes[c],
                        (unsigned long long)s->reg.models[i].requests[r][c]);
    PUT("# HELP caldrix_model_generations_total Generation requests finished, by model and finish reason.\n"
        "# TYPE caldrix_model_generations_total counter\n");
    for (int i = 0; i < s->reg.n && w < cap; i++)
        for (int f = 1; f < 5; f++)
            PUT("caldrix_model_generations_total{model=\"%s\",reason=\"%s\"} %llu\n", s->reg.models[i].name,
                reasons[f], (unsigned long long)atomic_load(&s->reg.models[i].finished[f]));
    PUT("# HELP caldrix_model_resident_bytes What the ledger holds for a model (0: not loaded).\n"
        "# TYPE caldrix_model_resident_bytes gauge\n");
    for (int i = 0; i < s->reg.n && w < cap; i++)
        PUT("caldrix_model_resident_bytes{model=\"%s\"} %llu\n", s->reg.models[i].name,
            (unsigned long long)s->reg.models[i].held_bytes);
    pthread_mutex_unlock(&s->reg.mu);
#undef PUT
    if (w >= cap) { /* more models than the estimate: the registry's series are left out, never cut */
        free(x);
        return t;
    }
    char *g = realloc(t, *n + w + 1);
    if (!g) {
        free(x);
        return t;
    }
    memcpy(g + *n, x, w + 1);
    *n += w;
    free(x);
    return g;
}

/* The model a request names ("model", a string, when the body is a JSON object), acquired for the
 * request (its verdict, and a load when needed). */
static int pick_model(sv_conn *k, sv_error *e)
{
    cdx_server *s = k->s;
    json_t *root = k->body ? json_loadb(k->body, k->n, 0, NULL) : NULL;
    if (!json_is_object(root)) {
        json_decref(root);
        return 1; /* not a JSON object: the parser says so, naming no model */
    }
    const char *name = json_string_value(json_object_get(root, "model"));
    sv_model *m = sv_reg_find(&s->reg, name);
    int rc = m ? sv_reg_acquire(&s->reg, m, false, e) : sv_reg_not_found(&s->reg, name, e);
    json_decref(root);
    if (!rc)
        k->mdl = m;
    return rc;
}

/* ---- the chat page ---- */

/* The page's Content-Security-Policy: nothing from anywhere (default-src 'none') but its own inline
 * <script> and <style> elements, each allowed by its SHA-256 (CSP 3, "hash-source"), fetches to
 * this server, and images from data: and blob: URLs (attachments, the favicon). Heap; NULL: no memory. */
static char *page_csp(const char *page, size_t len)
{
    static const char *const tags[2][3] = { { "script-src", "<script>", "</script>" },
                                            { "style-src", "<style>", "</style>" } };
    char *csp = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&csp, &n);
    if (!f)
        return NULL;
    bool ok = fputs("default-src 'none'", f) >= 0;
    for (int t = 0; t < 2 && ok; t++) {
        fprintf(f, "; %s", tags[t][0]);
        const size_t open_len = strlen(tags[t][1]), close_len = strlen(tags[t][2]);
        bool any = false;
        for (const char *p = page, *end = page + len, *a, *b; ok && p < end; p = b + close_len) {
            if (!(a = memmem(p, (size_t)(end - p), tags[t][1], open_len)))
                break;
            a += open_len;
            if (!(b = memmem(a, (size_t)(end - a), tags[t][2], close_len)))
                break;
            uint8_t md[32];
            unsigned char b64[48]; /* 44 characters and the NUL */
            cdx_sha256 h;
            ok = cdx_sha256_init(&h) == 0;
            cdx_sha256_update(&h, a, (size_t)(b - a));
            ok = cdx_sha256_final(&h, md) == 0 && ok;
            EVP_EncodeBlock(b64, md, 32);
            fprintf(f, " 'sha256-%s'", (const char *)b64);
            any = true;
        }
        if (!any)
            fputs(" 'none'", f);
    }
    fputs("; connect-src 'self'; img-src data: blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'", f);
    ok = !ferror(f) && ok;
    if (fclose(f) || !ok)
        return free(csp), NULL;
    return csp;
}

static enum MHD_Result route_page(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    cdx_server *s = k->s;
    if (!s->page) {
        sv_error e;
        sv_fail(&e, 404, "invalid_request_error", "not_found", NULL, "no route GET / (the chat page is off: --no-ui)");
        return reply_error(k, c, &e);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(s->page_len, (void *)s->page, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", s->page_csp);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    common_headers(s, r);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    k->status = 200;
    return ret;
}

static enum MHD_Result route_health(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    return reply_json(k, c, 200, json_pack("{s:s}", "status", "ok"));
}

static enum MHD_Result route_metrics(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    size_t n = 0;
    char *t = metrics_text(k->s, &n);
    return t ? reply(k, c, 200, t, "text/plain; version=0.0.4", NULL) : MHD_NO;
}

/* /v1/embeddings and /v1/rerank, on the model the body names (sv_embed.c). */
static enum MHD_Result route_embed(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    sv_error e;
    const int picked = pick_model(k, &e);
    char *body = NULL;
    if (picked < 0)
        return reply_error(k, c, &e);
    int64_t nt = -1;
    if (!picked && sv_embed_answer(&k->s->reg, k->mdl, k->route == SV_R_RERANK, k->body, k->n, &body, &nt, &e))
        return reply_error(k, c, &e);
    if (picked) { /* not a JSON object: the parser says so */
        if (!sv_embed_answer(&k->s->reg, &k->s->reg.models[0], k->route == SV_R_RERANK, k->body, k->n, &body, &nt, &e))
            sv_fail(&e, 400, "invalid_request_error", "invalid_json", NULL, "the body must be a JSON object");
        free(body);
        return reply_error(k, c, &e);
    }
    k->emb_tokens = nt;
    return reply(k, c, 200, body, "application/json", NULL);
}

/* POST /chunk, on the model the body names (its tokenizer; sv_embed.c). */
static enum MHD_Result route_chunk(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    sv_error e;
    char *body = NULL;
    const int picked = pick_model(k, &e);
    if (picked < 0)
        return reply_error(k, c, &e);
    if (picked) { /* not a JSON object: the parser says so */
        sv_fail(&e, 400, "invalid_request_error", "invalid_json", NULL, "the body must be a JSON object with text, "
                "target_tokens and overlap_tokens");
        return reply_error(k, c, &e);
    }
    if (sv_chunk_answer(k->mdl, k->body, k->n, &body, &e))
        return reply_error(k, c, &e);
    return reply(k, c, 200, body, "application/json", NULL);
}

/* The "lora" field's view of md's adapters (names has room for SV_MAX_LORA). */
static void lora_limits(cdx_server *s, const sv_model *md, sv_limits *lim, const char **names)
{
    for (int i = 0; md && i < md->n_lora && i < SV_MAX_LORA; i++)
        names[i] = md->lora[i].name;
    lim->lora_names = names;
    lim->n_lora = md ? md->n_lora : 0;
    const sv_model *owner = sv_reg_lora_model(&s->reg);
    lim->lora_owner = owner && owner != md ? owner->name : NULL;
}

/* GET /lora-adapters: [{"id", "name", "path", "scale"}] (llama-server's list, with the name caldrix's
 * requests may give as "id"); POST [{"id", "scale"}]: the default scales, the adapters not listed 0
 * (llama-server's), {"success": true}. The adapters of the model they were given for. */
static enum MHD_Result route_lora(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    cdx_server *s = k->s;
    sv_model *m = sv_reg_lora_model(&s->reg);
    sv_error e;
    if (!k->post) {
        json_t *a = json_array();
        pthread_mutex_lock(&s->reg.mu);
        for (int i = 0; m && i < m->n_lora; i++)
            json_array_append_new(a, json_pack("{s:i,s:s,s:s,s:f}", "id", i, "name", m->lora[i].name, "path",
                                               m->lora[i].path, "scale", (double)m->lora[i].scale));
        pthread_mutex_unlock(&s->reg.mu);
        return reply_json(k, c, 200, a);
    }
    json_error_t je;
    json_t *root = k->body ? json_loadb(k->body, k->n, 0, &je) : NULL;
    if (!json_is_array(root)) { /* llama-server's words */
        json_decref(root);
        sv_fail(&e, 400, "invalid_request_error", root ? "invalid_type" : "invalid_json", NULL,
                "Request body must be an array of {\"id\", \"scale\"} objects");
        return reply_error(k, c, &e);
    }
    sv_limits lim = { 0 };
    const char *names[SV_MAX_LORA];
    lora_limits(s, m, &lim, names);
    float sc[SV_MAX_LORA];
    int rc = sv_lora_list_parse(root, "body", &lim, sc, &e);
    json_decref(root);
    if (rc)
        return reply_error(k, c, &e);
    pthread_mutex_lock(&s->reg.mu);
    for (int i = 0; m && i < m->n_lora; i++)
        m->lora[i].scale = sc[i];
    pthread_mutex_unlock(&s->reg.mu);
    return reply_json(k, c, 200, json_pack("{s:b}", "success", 1));
}

/* The routes whose body sv_parse reads, on the model the body names. */
static enum MHD_Result route_parsed(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    sv_error e;
    const int picked = pick_model(k, &e);
    if (picked < 0)
        return reply_error(k, c, &e);
    const sv_model *md = k->mdl;
    static const sv_kind kinds[] = { [SV_R_CHAT] = SV_CHAT, [SV_R_COMPLETIONS] = SV_COMPLETION,
                                     [SV_R_TOKENIZE] = SV_TOKENIZE, [SV_R_DETOKENIZE] = SV_DETOKENIZE };
    cdx_engine_stats est = { .max_queue = 1 };
    if (md && md->m.engine)
        cdx_engine_get_stats(md->m.engine, &est);
    if (md && md->task != CDX_TASK_GENERATE && (k->route == SV_R_CHAT || k->route == SV_R_COMPLETIONS)) {
        sv_fail(&e, 400, "invalid_request_error", "invalid_model_task", "model", "model \"%s\" is served for %s, not "
                "generate: use %s", md->name, cdx_task_name(md->task),
                md->task == CDX_TASK_RERANK ? "/v1/rerank" : "/v1/embeddings");
        return reply_error(k, c, &e);
    }
    sv_limits lim = { .n_vocab = md ? md->m.n_vocab : 1, .has_tok = md && md->m.tok != NULL,
                      .images = md && md->m.image_proc != NULL, .max_n = est.max_queue,
                      .no_images_why = md ? md->m.no_images_why : NULL,
                      .grammars = k->s->grammars };
    const char *lora_names[SV_MAX_LORA];
    lora_limits(k->s, md, &lim, lora_names);
    sv_params p;
    enum MHD_Result ret;
    if (!md) { /* not a JSON object: the parser's error */
        if (sv_parse(k->body ? k->body : "", k->n, kinds[k->route], &lim, &p, &e) == 0)
            sv_fail(&e, 400, "invalid_request_error", "invalid_json", NULL, "the body must be a JSON object");
        sv_params_free(&p);
        return reply_error(k, c, &e);
    }
    if (sv_parse(k->body ? k->body : "", k->n, kinds[k->route], &lim, &p, &e))
        ret = reply_error(k, c, &e);
    else if (k->route == SV_R_TOKENIZE)
        ret = route_tokenize(k, c, &p);
    else if (k->route == SV_R_DETOKENIZE)
        ret = route_detokenize(k, c, &p);
    else
        ret = route_generate(k, c, &p);
    sv_params_free(&p);
    return ret;
}

static enum MHD_Result dispatch(sv_conn *k, struct MHD_Connection *c, const char *url)
{
    const route_def *rd = &k_routes[k->route];
    if (k->post && k->too_big) {
        sv_error e;
        sv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL, "the body is over %zu bytes",
                k->s->max_body);
        return reply_error(k, c, &e);
    }
    return rd->handler(k, c, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    cdx_server *s = cls;
    sv_conn *k = *con_cls;
    if (!k) {
        if (!(k = calloc(1, sizeof *k)))
            return MHD_NO;
        k->s = s;
        *con_cls = k;
        sv_error e;
        const route_def *rd = find_route(url);
        k->route = rd ? rd->route : SV_R_OTHER;
        k->post = rd && (rd->post == 1 || (rd->post == 2 && !strcmp(method, "POST")));
        k->t0_ms = cdx_time_ms();
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        k->t_unix_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
        snprintf(k->method, sizeof k->method, "%s", method);
        snprintf(k->path, sizeof k->path, "%s", !rd ? url : rd->alias && !strcmp(url, rd->alias) ? rd->alias : rd->path);
        sv_printable(k->path);
        sv_printable(k->method);
        bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        if (rd && s->cors_origin && !strcmp(method, "OPTIONS"))
            return reply_preflight(k, c, rd);
        /* the key first: without it, a client learns nothing about which routes exist */
        const bool no_key = k->route == SV_R_HEALTH || (k->route == SV_R_PAGE && s->page);
        if (!no_key && s->api_key &&
            check_key(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), &e))
            return reply_error(k, c, &e);
        if (!rd)
            return sv_fail(&e, 404, "invalid_request_error", "not_found", NULL, "no route %s %.200s", method, url),
                   reply_error(k, c, &e);
        if (rd->post == 2 ? !get && strcmp(method, "POST") : rd->post ? strcmp(method, "POST") : !get)
            return sv_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes %s, not %.20s",
                           rd->path, rd->post == 2 ? "GET or POST" : rd->post ? "POST" : "GET", method),
                   reply_error(k, c, &e);
        if (atomic_load(&s->stopping))
            return shutdown_error(&e), reply_error(k, c, &e);
        if (!atomic_load(&s->ready) && k->route != SV_R_METRICS && k->route != SV_R_PAGE)
            return sv_fail(&e, 503, "server_error", "model_loading", NULL, "the model is loading"),
                   reply(k, c, 503, sv_error_body(&e), "application/json", "1");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->max_body)
            return sv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                           "the body is %.30s bytes; at most %zu", cl, s->max_body),
                   reply_error(k, c, &e);
        return MHD_YES;
    }
    if (k->status)
        return *upload_size = 0, MHD_YES; /* answered early; the rest is discarded */
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (k->too_big || k->n + n > s->max_body) {
            k->too_big = true;
            return MHD_YES;
        }
        if (k->n + n + 1 > k->cap) {
            size_t cap = k->cap ? k->cap : 4096;
            while (cap < k->n + n + 1)
                cap *= 2;
            char *g = realloc(k->body, cap);
            if (!g)
                return MHD_NO;
            k->body = g;
            k->cap = cap;
        }
        memcpy(k->body + k->n, upload, n);
        k->n += n;
        k->body[k->n] = 0;
        return MHD_YES;
    }
    if (k->route == SV_R_METRICS && !atomic_load(&s->ready)) {
        size_t n = 0;
        char *t = sv_metrics_text(&s->met, NULL, false, &n);
        return t ? reply(k, c, 200, t, "text/plain; version=0.0.4", NULL) : MHD_NO;
    }
    return dispatch(k, c, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    cdx_server *s = cls;
    sv_conn *k = *con_cls;
    if (!k)
        return;
    const int slot = sv_metrics_request(&s->met, k->route, k->status ? k->status : 499);
    if (k->mdl && slot >= 0) {
        pthread_mutex_lock(&s->reg.mu);
        k->mdl->requests[k->route][slot]++;
        pthread_mutex_unlock(&s->reg.mu);
    }
    cdx_server_request_log rl = { .t_unix_ms = k->t_unix_ms, .method = k->method, .route = k->path,
                                  .status = k->status ? k->status : 499, .prompt_tokens = -1,
                                  .completion_tokens = -1, .ms = cdx_time_ms() - k->t0_ms };
    if (k->mdl)
        rl.model = k->mdl->name;
    if (k->emb_tokens > 0) { /* an embed or rerank request: its inputs' tokens, nothing generated */
        rl.prompt_tokens = k->emb_tokens;
        rl.completion_tokens = 0;
    }
    if (k->job) {
        sv_job *j = k->job;
        pthread_mutex_lock(&j->mu);
        rl.prompt_tokens = j->n_prompt ? j->n_prompt : j->p.n_ids;
        rl.completion_tokens = 0;
        for (int i = 0; i < j->n_sib; i++)
            rl.completion_tokens += j->sib[i]->n_generated;
        job_cancel_all(j); /* whatever is left */
        pthread_mutex_unlock(&j->mu);
        job_unref(j);
        atomic_fetch_sub(&s->n_active, 1);
    }
    if (k->mdl)
        sv_reg_release(&s->reg, k->mdl); /* after the cancel: an idle model may go once its engine is idle */
    if (s->on_log)
        s->on_log(s->log_user, &rl);
    free(k->body);
    free(k);
    *con_cls = NULL;
}

/* The gate hands a connection over. */
static int gate_pass(void *user, int fd, const struct sockaddr *addr, unsigned addrlen)
{
    cdx_server *s = user;
    return MHD_add_connection(s->d, fd, addr, (socklen_t)addrlen) == MHD_YES ? 0 : -1;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    cdx_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED)
        sv_gate_closed(s->gate);
}

/* ---- the engine thread ---- */

/* One thread steps every engine, one round at a time, so rounds of different engines never run
 * at once on the shared pool. Fairness: round-robin over the engines that have work, one round
 * each in turn (a round is at most --max-batch sequences and the token budget), so a busy model
 * delays another by at most one of its rounds between two of the other's. */
static void *engine_main(void *arg)
{
    cdx_server *s = arg;
    for (;;) {
        sv_model *m = sv_reg_next(&s->reg);
        if (m) {
            sv_reg_step(&s->reg, m);
            continue;
        }
        if (atomic_load(&s->engine_stop))
            break;
        sv_reg_idle(&s->reg, 50);
    }
    return NULL;
}

/* ---- start, ready, stop ---- */

int cdx_server_start(const cdx_server_opts *o, cdx_server **out, cdx_err *err)
{
    *out = NULL;
    cdx_server_opts d = cdx_server_defaults();
    if (!o)
        o = &d;
    if (o->port < 0 || o->port > 65535)
        return cdx_err_set(err, CDX_EINVAL, "port %d is outside 0..65535", o->port);
    for (const char *p = o->cors_origin; p && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return cdx_err_set(err, CDX_EINVAL, "CORS origin \"%.80s\": a control character cannot go in a header",
                               o->cors_origin);
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g || !ai)
        return cdx_err_set(err, CDX_EINVAL, "host \"%s\": %s", host, g ? gai_strerror(g) : "no address");
    cdx_server *s = calloc(1, sizeof *s);
    if (!s) {
        freeaddrinfo(ai);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    sv_metrics_init(&s->met);
    s->grammars = sv_grammars_new();
    s->created = time(NULL);
    s->max_body = o->max_body_bytes ? o->max_body_bytes : d.max_body_bytes;
    if (o->api_key && *o->api_key) {
        s->api_key = strdup(o->api_key);
        s->api_key_len = strlen(o->api_key);
    }
    if (o->cors_origin && *o->cors_origin)
        s->cors_origin = strdup(o->cors_origin);
    if (o->page && !(s->page_csp = page_csp(o->page, o->page_len))) {
        sv_metrics_destroy(&s->met);
        sv_grammars_free(s->grammars);
        free(s->api_key);
        free(s->cors_origin);
        free(s);
        freeaddrinfo(ai);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    s->page = o->page;
    s->page_len = o->page_len;
    s->on_log = o->on_request;
    s->log_user = o->log_user;
    /* libmicrohttpd listens on nothing: the gate accepts and hands it each checked connection.
     * The gate holds the connection limit; libmicrohttpd's is looser, so that a connection it has
     * closed but not yet counted out never makes it refuse one the gate let in. */
    const int max_conn = o->max_connections > 0 ? o->max_connections : 256;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn + 64,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->timeout_s > 0 ? o->timeout_s : 60),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
                            s, MHD_OPTION_END);
    cdx_err gerr = {0};
    const sv_gate_cfg gc = { .max_body = s->max_body, .timeout_s = o->timeout_s > 0 ? o->timeout_s : 60,
                             .max_conn = max_conn, .pass = gate_pass, .user = s, .cors_origin = s->cors_origin,
                             .metrics = &s->met, .on_log = s->on_log, .log_user = s->log_user };
    if (s->d && sv_gate_start(ai, &gc, &s->gate, &s->port, &gerr)) {
        MHD_stop_daemon(s->d);
        s->d = NULL;
    } else if (!s->d)
        snprintf(gerr.msg, sizeof gerr.msg, "%s", errno ? strerror(errno) : "libmicrohttpd refused");
    freeaddrinfo(ai);
    if (!s->d) {
        sv_metrics_destroy(&s->met);
        sv_grammars_free(s->grammars);
        free(s->api_key);
        free(s->cors_origin);
        free(s->page_csp);
        free(s);
        return cdx_err_set(err, CDX_EIO, "cannot listen on %s port %d: %s", host, o->port, gerr.msg);
    }
    *out = s;
    return CDX_OK;
}

int cdx_server_port(const cdx_server *s)
{
    return s ? s->port : 0;
}

static int start_engine_thread(cdx_server *s, cdx_err *err)
{
    if (pthread_create(&s->engine_thread, NULL, engine_main, s))
        return cdx_err_set(err, CDX_ENOMEM, "cannot start the engine thread");
    s->thread_started = true;
    atomic_store(&s->ready, true);
    return CDX_OK;
}

int cdx_server_ready(cdx_server *s, const cdx_server_model *m, cdx_err *err)
{
    if (!m || (!m->engine && !m->embedder) || (m->embedder && m->task == CDX_TASK_GENERATE))
        return cdx_err_set(err, CDX_EINVAL, "cdx_server_ready: no engine (or an embedder without its task)");
    if (atomic_load(&s->ready) || s->reg.inited)
        return cdx_err_set(err, CDX_EINVAL, "cdx_server_ready: already ready");
    int rc = sv_reg_init_one(&s->reg, m, err);
    return rc ? rc : start_engine_thread(s, err);
}

int cdx_server_ready_models(cdx_server *s, const cdx_server_models *o, cdx_err *err)
{
    if (atomic_load(&s->ready) || s->reg.inited)
        return cdx_err_set(err, CDX_EINVAL, "cdx_server_ready_models: already ready");
    int rc = sv_reg_init(&s->reg, o, err);
    if (!rc)
        rc = sv_reg_preload(&s->reg, err);
    return rc ? rc : start_engine_thread(s, err);
}

void cdx_server_stop(cdx_server *s)
{
    if (!s)
        return;
    /* waiting connections cancel their jobs and say why (a stream: an error event and [DONE]; a
     * whole answer: 503), requests on open connections get 503, the gate takes no new ones; the
     * connections close once those words are sent, or after 5 s for a client that does not read them */
    atomic_store(&s->stopping, true);
    sv_gate_stop(s->gate);
    for (int i = 0; i < 500 && atomic_load(&s->n_active) > 0; i++) {
        struct timespec t = { 0, 10 * 1000000L };
        nanosleep(&t, NULL);
    }
    MHD_stop_daemon(s->d);
    sv_gate_free(s->gate);
    if (s->thread_started) {
        atomic_store(&s->engine_stop, true);
        pthread_join(s->engine_thread, NULL);
    }
    sv_reg_free(&s->reg);
    sv_grammars_free(s->grammars);
    sv_metrics_destroy(&s->met);
    free(s->api_key);
    free(s->cors_origin);
    free(s->page_csp);
    free(s);
}
