/* caldrix server: counters and histograms, written as Prometheus text for GET /metrics. */
#include "server/sv_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sv_route_names[SV_N_ROUTES] = {
#define SV_X_(id, path, alias, post, handler, help) [SV_R_##id] = path,
    SV_ROUTES(SV_X_)
#undef SV_X_
    [SV_R_OTHER] = "other",
};

/* Upper bounds in seconds, shared by both latency histograms. */
static const double k_buckets[SV_N_BUCKETS] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,  0.5,    1,     2.5,  5,     10,  30 };

void sv_metrics_init(sv_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void sv_metrics_destroy(sv_metrics *m)
{
    pthread_mutex_destroy(&m->mu);
}

int sv_metrics_request(sv_metrics *m, int route, int status)
{
    if (route < 0 || route >= SV_N_ROUTES)
        route = SV_R_OTHER;
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_codes && m->codes[i] != status)
        i++;
    if (i == m->n_codes && m->n_codes < 16)
        m->codes[m->n_codes++] = status;
    if (i < 16)
        m->requests[route][i]++;
    pthread_mutex_unlock(&m->mu);
    return i < 16 ? i : -1;
}

static void hist_add(sv_hist *h, double v)
{
    int b = 0;
    while (b < SV_N_BUCKETS && v > k_buckets[b])
        b++;
    h->counts[b]++;
    h->sum += v;
    h->n++;
}

void sv_metrics_ttft(sv_metrics *m, double s)
{
    pthread_mutex_lock(&m->mu);
    hist_add(&m->ttft, s);
    pthread_mutex_unlock(&m->mu);
}

void sv_metrics_tpot(sv_metrics *m, double s)
{
    pthread_mutex_lock(&m->mu);
    hist_add(&m->tpot, s);
    pthread_mutex_unlock(&m->mu);
}

void sv_metrics_finish(sv_metrics *m, int finish)
{
    if (finish < 0 || finish > 4)
        return;
    pthread_mutex_lock(&m->mu);
    m->finished[finish]++;
    pthread_mutex_unlock(&m->mu);
}

/* ---- text ---- */

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) CDX_PRINTF(2, 3);
static void put(sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        if (!cdx_bytes_reserve(&b->s, &b->cap, b->n + (size_t)k + 1)) {
            b->oom = true;
            return;
        }
    }
}

static void put_hist(sbuf *b, const char *name, const char *help, const sv_hist *h)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SV_N_BUCKETS; i++) {
        cum += h->counts[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, k_buckets[i], (unsigned long long)cum);
    }
    cum += h->counts[SV_N_BUCKETS];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name, h->sum,
        name, (unsigned long long)h->n);
}

static void put_gauge(sbuf *b, const char *name, const char *help, const char *type, long long v)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name, type, name, v);
}

char *sv_metrics_text(sv_metrics *m, const cdx_engine_stats *st, bool ready, size_t *len)
{
    sbuf b = {0};
    pthread_mutex_lock(&m->mu);
    put(&b, "# HELP caldrix_requests_total HTTP requests answered, by route and status.\n"
            "# TYPE caldrix_requests_total counter\n");
    for (int r = 0; r < SV_N_ROUTES; r++)
        for (int i = 0; i < m->n_codes; i++)
            if (m->requests[r][i])
                put(&b, "caldrix_requests_total{route=\"%s\",status=\"%d\"} %llu\n", sv_route_names[r], m->codes[i],
                    (unsigned long long)m->requests[r][i]);
    put(&b, "# HELP caldrix_generations_total Generation requests finished, by finish reason.\n"
            "# TYPE caldrix_generations_total counter\n");
    static const char *const reasons[5] = { "none", "stop", "length", "cancelled", "error" };
    for (int f = 1; f < 5; f++)
        put(&b, "caldrix_generations_total{reason=\"%s\"} %llu\n", reasons[f], (unsigned long long)m->finished[f]);
    put_hist(&b, "caldrix_time_to_first_token_seconds", "Submit to first generated token.", &m->ttft);
    put_hist(&b, "caldrix_time_per_output_token_seconds", "Time between consecutive generated tokens of a request.",
             &m->tpot);
    put_gauge(&b, "caldrix_streams_open", "Streaming responses in progress.", "gauge", (long long)m->streams_open);
    pthread_mutex_unlock(&m->mu);
    put_gauge(&b, "caldrix_ready", "1 once the model is loaded.", "gauge", ready ? 1 : 0);
    if (st) {
        put_gauge(&b, "caldrix_prompt_tokens_total", "Prompt tokens submitted.", "counter", (long long)st->prompt_tokens);
        put_gauge(&b, "caldrix_prompt_cached_tokens_total", "Prompt tokens whose K/V came from the prefix cache.",
                  "counter", (long long)st->cached_tokens);
        put_gauge(&b, "caldrix_generated_tokens_total", "Tokens generated.", "counter", (long long)st->generated_tokens);
        put_gauge(&b, "caldrix_queue_depth", "Requests waiting for a batch slot.", "gauge", (long long)st->waiting);
        put_gauge(&b, "caldrix_active_sequences", "Requests running.", "gauge", (long long)st->running);
        put(&b, "# HELP caldrix_kv_blocks KV cache blocks by state (used: held by a sequence; cached: held by none, "
                "findable by prefix; free).\n# TYPE caldrix_kv_blocks gauge\n");
        put(&b, "caldrix_kv_blocks{state=\"used\"} %lld\ncaldrix_kv_blocks{state=\"cached\"} %lld\n"
                "caldrix_kv_blocks{state=\"free\"} %lld\n",
            (long long)st->blocks_used, (long long)st->blocks_cached, (long long)st->blocks_free);
        put_gauge(&b, "caldrix_kv_blocks_total", "KV cache blocks in the pool.", "gauge", (long long)st->n_blocks);
        put_gauge(&b, "caldrix_preemptions_total", "Running requests preempted when the KV pool ran dry.", "counter",
                  (long long)st->preemptions);
        put_gauge(&b, "caldrix_engine_rounds_total", "Engine scheduling rounds.", "counter", (long long)st->rounds);
        put_gauge(&b, "caldrix_split_rounds_overlapped_total", "Rounds of a split model begun while another was in "
                  "flight on the later ranks (--allow-split, --split-pipeline).", "counter",
                  (long long)st->split_overlapped);
        put_gauge(&b, "caldrix_spec_draft_tokens_total", "Draft tokens proposed by speculative decoding (--spec).",
                  "counter", (long long)st->spec_proposed);
        put_gauge(&b, "caldrix_spec_accepted_tokens_total", "Draft tokens kept (the target drew the same token).",
                  "counter", (long long)st->spec_accepted);
        put_gauge(&b, "caldrix_spec_verifies_total", "Request-rounds that scored a draft.", "counter",
                  (long long)st->spec_verifies);
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.n;
    return b.s;
}
