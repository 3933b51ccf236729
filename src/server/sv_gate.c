/* caldrix server: the gate in front of libmicrohttpd. It accepts each connection, reads (without
 * consuming: MSG_PEEK) the head of its request and checks the framing, then hands the socket to
 * libmicrohttpd, which reads the same bytes again.
 *
 * Why: libmicrohttpd answers framing errors itself, in HTML, and 0.9.75 (Debian 12's) sends the
 * status line and headers twice for a bad Content-Length ("-5", a 20-digit value): it queues its
 * error response in parse_connection_headers and then moves the connection on to
 * HEADERS_PROCESSED anyway, which builds the header a second time. Its handler is never called,
 * so the server cannot answer in its place. The gate refuses those heads first, with the JSON
 * error every other route gives. Each connection carries one request (every answer says
 * "Connection: close"), so every request's head passes the gate.
 *
 * What the gate checks is only the framing: the request line, header syntax, Content-Length and
 * Transfer-Encoding, the head's size, and a chunked body's chunks (chunked_request: the gate reads
 * such a body itself and relays). Routes, methods and bodies' contents stay libmicrohttpd's and
 * server.c's. */
#include "server/sv_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the head's framing (no sockets: unit-tested on its own) ---- */

static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c);
}

#define BAD_HEAD(status, code, ...) sv_fail(e, status, "invalid_request_error", code, NULL, __VA_ARGS__)

int sv_http_head_check(const char *buf, size_t n, size_t max_body, sv_head *h, sv_error *e)
{
    memset(h, 0, sizeof *h);
    /* the end of the head: an empty line (CRLF, or a bare LF as libmicrohttpd also takes) */
    size_t end = 0; /* just past the last header line's LF */
    for (size_t i = 0; i + 1 < n && !end; i++)
        if (buf[i] == '\n' && (buf[i + 1] == '\n' || (buf[i + 1] == '\r' && i + 2 < n && buf[i + 2] == '\n'))) {
            end = i + 1;
            h->head_bytes = end + (buf[i + 1] == '\n' ? 1 : 2);
        }
    if (!end) {
        /* a request line that is already wrong need not wait for the rest */
        const char *nl = memchr(buf, '\n', n);
        if (!nl && n >= SV_MAX_HEAD)
            return BAD_HEAD(431, "request_header_too_large", "the request line is over %d bytes", SV_MAX_HEAD);
        if (n >= SV_MAX_HEAD)
            return BAD_HEAD(431, "request_header_too_large", "the request head is over %d bytes", SV_MAX_HEAD);
        return 1;
    }
    bool have_cl = false, have_te = false;
    int line_no = 0;
    for (size_t at = 0; at < end;) {
        const char *l = buf + at, *nl = memchr(l, '\n', end - at);
        size_t len = (size_t)(nl - l);
        at += len + 1;
        if (len && l[len - 1] == '\r')
            len--;
        if (line_no++ == 0) { /* METHOD SP target SP HTTP/1.x */
            size_t m = 0;
            while (m < len && is_tchar((unsigned char)l[m]))
                m++;
            const char *sp = m < len ? memchr(l + m + 1, ' ', len - m - 1) : NULL;
            if (m == 0 || m >= sizeof h->method || m == len || l[m] != ' ' || !sp || sp == l + m + 1)
                return BAD_HEAD(400, "bad_request_line", "the request line is not METHOD TARGET HTTP/1.1");
            memcpy(h->method, l, m);
            const size_t tl = (size_t)(sp - (l + m + 1));
            snprintf(h->target, sizeof h->target, "%.*s", (int)(tl < sizeof h->target ? tl : sizeof h->target - 1),
                     l + m + 1);
            const char *ver = sp + 1;
            const size_t vl = (size_t)(l + len - ver);
            if (vl != 8 || strncmp(ver, "HTTP/1.", 7) || (ver[7] != '0' && ver[7] != '1'))
                return BAD_HEAD(vl >= 5 && !strncmp(ver, "HTTP/", 5) ? 505 : 400, "http_version_not_supported",
                                "the request is \"%.*s\"; this server speaks HTTP/1.0 and HTTP/1.1", (int)(vl < 16 ? vl : 16),
                                ver);
            continue;
        }
        if (len == 0)
            break;
        if (l[0] == ' ' || l[0] == '\t')
            return BAD_HEAD(400, "bad_header", "header line %d is folded onto the one before (obsolete; RFC 9112 5.2)",
                            line_no);
        size_t k = 0;
        while (k < len && is_tchar((unsigned char)l[k]))
            k++;
        if (k == 0 || k == len || l[k] != ':')
            return BAD_HEAD(400, "bad_header", "header line %d is not \"Name: value\"", line_no);
        const char *v = l + k + 1, *ve = l + len;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        if (k == 14 && !strncasecmp(l, "Content-Length", 14)) {
            uint64_t x = 0;
            const char *d = v;
            for (; d < ve && *d >= '0' && *d <= '9'; d++) {
                if (x > (UINT64_MAX - 9) / 10)
                    return BAD_HEAD(413, "request_too_large", "Content-Length %.*s is over %zu bytes",
                                    (int)(ve - v < 40 ? ve - v : 40), v, max_body);
                x = x * 10 + (uint64_t)(*d - '0');
            }
            if (d == v || d != ve)
                return BAD_HEAD(400, "bad_content_length", "Content-Length \"%.*s\" is not a number of bytes",
                                (int)(ve - v < 40 ? ve - v : 40), v);
            if (have_cl && x != h->content_length)
                return BAD_HEAD(400, "bad_content_length", "the request has two different Content-Length headers");
            have_cl = true;
            h->content_length = x;
        } else if (k == 6 && !strncasecmp(l, "Expect", 6)) {
            h->expect_continue = ve - v == 12 && !strncasecmp(v, "100-continue", 12);
        } else if (k == 17 && !strncasecmp(l, "Transfer-Encoding", 17)) {
            if ((size_t)(ve - v) != 7 || strncasecmp(v, "chunked", 7) || have_te)
                return BAD_HEAD(501, "unsupported_transfer_encoding",
                                "Transfer-Encoding \"%.*s\" is not supported (only one \"chunked\")",
                                (int)(ve - v < 40 ? ve - v : 40), v);
            have_te = true;
        }
    }
    if (have_cl && have_te) /* the way to smuggle a second request past a proxy (RFC 9112 6.3) */
        return BAD_HEAD(400, "bad_content_length", "the request has both Content-Length and Transfer-Encoding");
    if (have_cl && h->content_length > max_body)
        return BAD_HEAD(413, "request_too_large", "the body is %llu bytes; at most %zu",
                        (unsigned long long)h->content_length, max_body);
    h->has_length = have_cl;
    h->chunked = have_te;
    return 0;
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One line of p[at..n): returns its length without the line end and sets *next past it, or -1
 * when no line end has come yet. */
static long next_line(const char *p, size_t n, size_t at, size_t *next)
{
    const char *nl = memchr(p + at, '\n', n - at);
    if (!nl)
        return -1;
    size_t len = (size_t)(nl - (p + at));
    *next = at + len + 1;
    return (long)(len && p[at + len - 1] == '\r' ? len - 1 : len);
}

int sv_http_chunks_scan(sv_chunks *st, const char *p, size_t n, size_t max_body, char *out, sv_error *e)
{
    size_t next;
    while (!st->trailers) {
        long len = next_line(p, n, st->at, &next);
        if (len < 0)
            return n - st->at > 64 ? BAD_HEAD(400, "bad_chunk", "a chunk size line is over 64 bytes") : 1;
        const char *l = p + st->at;
        size_t d = 0;
        uint64_t size = 0;
        for (; d < (size_t)len && hex_value(l[d]) >= 0; d++) {
            if (d == 16)
                return BAD_HEAD(400, "bad_chunk", "a chunk size has more than 16 hex digits");
            size = size << 4 | (uint64_t)hex_value(l[d]);
        }
        size_t x = d;
        while (x < (size_t)len && (l[x] == ' ' || l[x] == '\t'))
            x++;
        if (d == 0 || (x < (size_t)len && l[x] != ';'))
            return BAD_HEAD(400, "bad_chunk", "the chunk size line \"%.*s\" is not hex digits", (int)(len < 24 ? len : 24), l);
        if (size == 0) {
            st->at = next;
            st->trailers = true;
            break;
        }
        if (size > max_body - st->total)
            return BAD_HEAD(413, "request_too_large", "the chunked body is over %zu bytes", max_body);
        size_t at = next; /* st->at moves only past whole chunks: an incomplete one is read again */
        if (n - at < size + 1)
            return 1;
        const size_t data = at;
        at += (size_t)size;
        const size_t crlf = p[at] == '\r' ? 2 : 1;
        if (n - at < crlf)
            return 1;
        if (p[at + crlf - 1] != '\n')
            return BAD_HEAD(400, "bad_chunk", "a chunk's data is not followed by CRLF (its size says %llu bytes)",
                            (unsigned long long)size);
        if (out)
            memcpy(out + st->total, p + data, (size_t)size);
        st->total += (size_t)size;
        st->at = at + crlf;
    }
    for (;;) { /* trailer fields, then the empty line */
        long len = next_line(p, n, st->at, &next);
        if (len < 0)
            return 1;
        if (len == 0) {
            st->at = next;
            return 0;
        }
        if (!memchr(p + st->at, ':', (size_t)len))
            return BAD_HEAD(400, "bad_chunk", "a trailer line after the last chunk is not \"Name: value\"");
        st->at = next;
    }
}

int sv_http_chunks_check(const char *p, size_t n, size_t max_body, sv_error *e)
{
    sv_chunks st = {0};
    return sv_http_chunks_scan(&st, p, n, max_body, NULL, e);
}

/* ---- the gate's threads ---- */

struct sv_gate {
    sv_gate_cfg cfg;
    int listen_fd;
    int wake[2];                 /* written once at stop: every poll of the gate wakes */
    pthread_t accept_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_pending;               /* connections still in the gate (their threads) */
    atomic_int n_open;           /* pending + handed over and not yet closed */
    atomic_bool stop;
};

typedef struct {
    sv_gate *g;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addrlen;
} gate_conn;

/* false: the peer went away (or a send timed out) */
static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static const char *reason(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* Answers with e and closes: the rest of what the client sends is read and dropped for a moment,
 * so the close does not reset the connection before the client has read the answer. */
static void refuse(gate_conn *k, const sv_head *h, const sv_error *e, double t0_ms, int64_t t_unix_ms)
{
    sv_gate *g = k->g;
    char *body = sv_error_body(e);
    char head[512];
    const size_t blen = body ? strlen(body) : 0;
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n%s%s%s%s%s\r\n",
                      e->status, reason(e->status), blen + 1, g->cfg.cors_origin ? "Access-Control-Allow-Origin: " : "",
                      g->cfg.cors_origin ? g->cfg.cors_origin : "", g->cfg.cors_origin ? "\r\n" : "",
                      g->cfg.cors_origin && strcmp(g->cfg.cors_origin, "*") ? "Vary: Origin\r\n" : "",
                      g->cfg.cors_origin ? "Access-Control-Expose-Headers: Retry-After\r\n" : "");
    send_all(k->fd, head, (size_t)hn);
    send_all(k->fd, body ? body : "", blen);
    send_all(k->fd, "\n", 1);
    free(body);
    shutdown(k->fd, SHUT_WR);
    char sink[4096];
    size_t dropped = 0;
    for (int i = 0; i < 20 && dropped < (1u << 20); i++) { /* at most 1 s and 1 MiB */
        struct pollfd pf[2] = { { .fd = k->fd, .events = POLLIN }, { .fd = g->wake[0], .events = POLLIN } };
        if (poll(pf, 2, 50) <= 0)
            continue;
        if (pf[1].revents)
            break;
        ssize_t r = recv(k->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r <= 0)
            break;
        dropped += (size_t)r;
    }
    if (g->cfg.metrics)
        sv_metrics_request(g->cfg.metrics, SV_R_OTHER, e->status);
    if (g->cfg.on_log) {
        char target[121];
        snprintf(target, sizeof target, "%s", h->target[0] ? h->target : "-");
        sv_printable(target);
        const cdx_server_request_log rl = { .t_unix_ms = t_unix_ms, .method = h->method[0] ? h->method : "-",
                                            .route = target, .status = e->status, .prompt_tokens = -1,
                                            .completion_tokens = -1, .ms = cdx_time_ms() - t0_ms };
        g->cfg.on_log(g->cfg.log_user, &rl);
    }
}

/* A connection leaves the gate: closed unless it was handed over (fd -1). */
static void conn_end(gate_conn *k)
{
    sv_gate *g = k->g;
    if (k->fd >= 0) {
        close(k->fd);
        atomic_fetch_sub(&g->n_open, 1);
    }
    free(k);
    pthread_mutex_lock(&g->mu);
    if (--g->n_pending == 0)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Relays a request handed to libmicrohttpd through a socket pair: req[0..req_n) goes to it (mfd),
 * its answer to the client (cfd), until it closes its end. The client's hang-up is passed on (a
 * half-close as a half-close), so libmicrohttpd sees what it would see on the client's socket. */
static void relay(sv_gate *g, int cfd, int mfd, const char *req, size_t req_n)
{
    fcntl(mfd, F_SETFL, fcntl(mfd, F_GETFL) | O_NONBLOCK);
    const struct timeval tv = { .tv_sec = g->cfg.timeout_s }; /* a client that stops reading */
    setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    size_t sent = 0;
    bool half = false;
    double stop_by = 0;
    char b[16384];
    for (;;) {
        if (atomic_load(&g->stop) && !stop_by)
            stop_by = cdx_time_ms() + 6000.0; /* cdx_server_stop gives open answers 5 s */
        if (stop_by && cdx_time_ms() > stop_by)
            break;
        struct pollfd pf[3] = { { .fd = mfd, .events = POLLIN | (sent < req_n ? POLLOUT : 0) },
                                { .fd = cfd, .events = half || sent < req_n ? 0 : POLLRDHUP },
                                { .fd = g->wake[0], .events = POLLIN } };
        int r = poll(pf, stop_by ? 2 : 3, stop_by ? 100 : -1); /* the wake pipe stays readable once stopping */
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if ((pf[0].revents & POLLOUT) && sent < req_n) {
            ssize_t w = send(mfd, req + sent, req_n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR)
                sent = req_n; /* it stopped reading: it has answered already */
        }
        if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t m = recv(mfd, b, sizeof b, MSG_DONTWAIT);
            if (m == 0 || (m < 0 && errno != EAGAIN && errno != EINTR))
                break; /* the answer is complete */
            if (m > 0 && !send_all(cfd, b, (size_t)m))
                break; /* the client went away */
        }
        if (pf[1].revents & (POLLHUP | POLLERR))
            break;
        if ((pf[1].revents & POLLRDHUP) && !half) {
            shutdown(mfd, SHUT_WR);
            half = true;
        }
    }
}

/* raw's head (h) with its framing replaced: Transfer-Encoding and Expect out, Content-Length:
 * body_n in; NULL: no memory. */
static char *head_with_length(const char *raw, const sv_head *h, size_t body_n, size_t *len)
{
    char *out = malloc(h->head_bytes + 48);
    size_t w = 0;
    for (size_t at = 0; out && at < h->head_bytes;) {
        const char *l = raw + at, *nl = memchr(l, '\n', h->head_bytes - at);
        const size_t n = (size_t)(nl - l) + 1; /* the line and its LF */
        at += n;
        if (n == 1 || (n == 2 && l[0] == '\r')) { /* the empty line that ends the head */
            w += (size_t)sprintf(out + w, "Content-Length: %zu\r\n\r\n", body_n);
            break;
        }
        if ((n > 18 && !strncasecmp(l, "Transfer-Encoding:", 18)) || (n > 7 && !strncasecmp(l, "Expect:", 7)))
            continue;
        memcpy(out + w, l, n);
        w += n;
    }
    *len = w;
    return out;
}

/* A chunked body. libmicrohttpd reads one itself, but answers its framing errors in HTML, and the
 * gate cannot check a body it does not consume: a peek sees no further than the socket's receive
 * buffer, and the client stops sending once that is full. So the gate reads the request whole and
 * checks the chunks as they come (a bad one is refused in JSON like every other framing error, a
 * body over max_body is a 413 as soon as a chunk size says so), then hands libmicrohttpd the same
 * request with a Content-Length body through a socket pair and relays its answer.
 * "Expect: 100-continue" is answered here. */
static void chunked_request(gate_conn *k, const sv_head *h, double t0, int64_t t_unix_ms)
{
    sv_gate *g = k->g;
    sv_error e;
    const size_t hb = h->head_bytes, max_raw = hb + 2 * g->cfg.max_body + 65536; /* room for the framing */
    size_t cap = hb + 65536, n = 0, body_cap = 0;
    char *raw = malloc(cap), *body = NULL;
    sv_chunks st = {0};
    int rc = 1;
    bool continued = !h->expect_continue;
    double deadline = cdx_time_ms() + 1000.0 * g->cfg.timeout_s;
    while (raw && rc == 1 && !atomic_load(&g->stop)) {
        if (!continued && n >= hb) {
            send_all(k->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
            continued = true;
        }
        if (n == cap) {
            const size_t want = cap * 2 < max_raw ? cap * 2 : max_raw;
            char *grown = cap < max_raw ? realloc(raw, want) : NULL;
            if (!grown) {
                if (cap >= max_raw)
                    rc = sv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                                 "the chunked body is over %zu bytes with its framing", max_raw - hb);
                break;
            }
            raw = grown;
            cap = want;
        }
        const double left = deadline - cdx_time_ms();
        if (left <= 0)
            break; /* stalled past --timeout: dropped */
        struct pollfd pf[2] = { { .fd = k->fd, .events = POLLIN }, { .fd = g->wake[0], .events = POLLIN } };
        int r = poll(pf, 2, (int)(left + 1));
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0 || pf[1].revents)
            continue;
        ssize_t m = recv(k->fd, raw + n, cap - n, MSG_DONTWAIT);
        if (m == 0 || (m < 0 && errno != EAGAIN && errno != EINTR))
            break; /* the client left */
        if (m < 0)
            continue;
        n += (size_t)m;
        deadline = cdx_time_ms() + 1000.0 * g->cfg.timeout_s;
        if (n <= hb)
            continue;
        if (n - hb > body_cap) { /* the data is never longer than its framing */
            char *grown = realloc(body, n - hb);
            if (!grown)
                break;
            body = grown;
            body_cap = n - hb;
        }
        rc = sv_http_chunks_scan(&st, raw + hb, n - hb, g->cfg.max_body, body, &e);
    }
    if (rc < 0)
        refuse(k, h, &e, t0, t_unix_ms);
    size_t head_n = 0;
    char *head = rc == 0 ? head_with_length(raw, h, st.total, &head_n) : NULL, *req = NULL;
    if (head && (req = malloc(head_n + st.total + 1))) {
        memcpy(req, head, head_n);
        if (st.total)
            memcpy(req + head_n, body, st.total);
    }
    free(head);
    free(raw);
    free(body);
    int sp[2];
    if (req && !socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp)) {
        if (g->cfg.pass(g->cfg.user, sp[0], (struct sockaddr *)&k->addr, k->addrlen) == 0) {
            /* the connection's count goes with sp[0]: sv_gate_closed when libmicrohttpd closes it */
            const int cfd = k->fd;
            k->fd = -1;
            relay(g, cfd, sp[1], req, head_n + st.total);
            close(cfd);
        }
        close(sp[1]);
    }
    free(req);
}

static void *gate_main(void *arg)
{
    gate_conn *k = arg;
    sv_gate *g = k->g;
    const double t0 = cdx_time_ms();
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const int64_t t_unix_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    double deadline = t0 + 1000.0 * g->cfg.timeout_s;
    size_t have = 0;
    char *buf = malloc(SV_MAX_HEAD);
    sv_head h;
    sv_error e;
    while (buf && !atomic_load(&g->stop)) {
        const double left = deadline - cdx_time_ms();
        if (left <= 0)
            break; /* idle past --timeout: dropped, as libmicrohttpd drops an idle one */
        struct pollfd pf[2] = { { .fd = k->fd, .events = POLLIN }, { .fd = g->wake[0], .events = POLLIN } };
        int r = poll(pf, 2, (int)(left + 1));
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0 || pf[1].revents)
            continue;
        ssize_t n = recv(k->fd, buf, SV_MAX_HEAD, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break; /* the client left */
        if (n < 0)
            continue;
        if ((size_t)n == have) { /* nothing new: the bytes stay queued (a peek), so poll would not wait */
            nanosleep(&(struct timespec){ 0, 2 * 1000000L }, NULL);
            continue;
        }
        have = (size_t)n;
        deadline = cdx_time_ms() + 1000.0 * g->cfg.timeout_s;
        int rc = sv_http_head_check(buf, have, g->cfg.max_body, &h, &e);
        if (rc == 1)
            continue;
        if (rc == 0 && h.chunked) {
            chunked_request(k, &h, t0, t_unix_ms);
        } else if (rc == 0) {
            /* -1: libmicrohttpd closed the socket (its connection limit, or no memory) */
            if (g->cfg.pass(g->cfg.user, k->fd, (struct sockaddr *)&k->addr, k->addrlen))
                atomic_fetch_sub(&g->n_open, 1);
            k->fd = -1;
        } else
            refuse(k, &h, &e, t0, t_unix_ms);
        break;
    }
    free(buf);
    conn_end(k);
    return NULL;
}

static void *accept_main(void *arg)
{
    sv_gate *g = arg;
    while (!atomic_load(&g->stop)) {
        struct pollfd pf[2] = { { .fd = g->listen_fd, .events = POLLIN }, { .fd = g->wake[0], .events = POLLIN } };
        if (poll(pf, 2, -1) <= 0 || pf[1].revents)
            continue;
        gate_conn *k = calloc(1, sizeof *k);
        if (!k) {
            nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
            continue;
        }
        k->g = g;
        k->addrlen = sizeof k->addr;
        k->fd = accept4(g->listen_fd, (struct sockaddr *)&k->addr, &k->addrlen, SOCK_CLOEXEC);
        if (k->fd < 0) {
            free(k);
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
            continue;
        }
        /* over --max-connections: closed at once, as libmicrohttpd does */
        if (atomic_fetch_add(&g->n_open, 1) >= g->cfg.max_conn) {
            atomic_fetch_sub(&g->n_open, 1);
            close(k->fd);
            free(k);
            continue;
        }
        pthread_mutex_lock(&g->mu);
        g->n_pending++;
        pthread_mutex_unlock(&g->mu);
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 256 * 1024);
        int rc = pthread_create(&t, &at, gate_main, k);
        pthread_attr_destroy(&at);
        if (rc)
            conn_end(k);
    }
    return NULL;
}

int sv_gate_start(const struct addrinfo *ai, const sv_gate_cfg *cfg, sv_gate **out, int *port, cdx_err *err)
{
    *out = NULL;
    sv_gate *g = calloc(1, sizeof *g);
    if (!g)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    g->cfg = *cfg;
    g->wake[0] = g->wake[1] = -1;
    g->listen_fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, e = 0;
    if (g->listen_fd < 0)
        e = errno;
    else {
        setsockopt(g->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6) /* IPv6 only, as libmicrohttpd binds it without dual stack */
            setsockopt(g->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        if (bind(g->listen_fd, ai->ai_addr, ai->ai_addrlen) || listen(g->listen_fd, 128) || pipe2(g->wake, O_CLOEXEC))
            e = errno;
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (!e && getsockname(g->listen_fd, (struct sockaddr *)&sa, &sl))
        e = errno;
    if (!e) {
        *port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&sa)->sin_port);
        pthread_mutex_init(&g->mu, NULL);
        pthread_cond_init(&g->cv, NULL);
        if (pthread_create(&g->accept_thread, NULL, accept_main, g)) {
            e = EAGAIN;
            pthread_mutex_destroy(&g->mu);
            pthread_cond_destroy(&g->cv);
        }
    }
    if (e) {
        if (g->listen_fd >= 0)
            close(g->listen_fd);
        if (g->wake[0] >= 0)
            close(g->wake[0]), close(g->wake[1]);
        free(g);
        return cdx_err_set(err, CDX_EIO, "%s", strerror(e));
    }
    *out = g;
    return CDX_OK;
}

void sv_gate_closed(sv_gate *g)
{
    if (g)
        atomic_fetch_sub(&g->n_open, 1);
}

void sv_gate_stop(sv_gate *g)
{
    if (!g || atomic_exchange(&g->stop, true))
        return;
    if (write(g->wake[1], "x", 1) < 0) { /* a pipe with room for one byte: cannot fail here */
    }
    pthread_join(g->accept_thread, NULL);
    close(g->listen_fd);
    pthread_mutex_lock(&g->mu);
    while (g->n_pending)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

void sv_gate_free(sv_gate *g)
{
    if (!g)
        return;
    sv_gate_stop(g);
    close(g->wake[0]);
    close(g->wake[1]);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}
