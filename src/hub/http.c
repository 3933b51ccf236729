/* HTTP for the hub layer, over libcurl: small GETs into memory, HEADs that keep the Hub's own
 * headers, and resumable downloads into a file. */
#include "hub/hub_int.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define USER_AGENT "caldrix/0.1.0"
#define MAX_ERROR_BODY 4096

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

void hub_http_resp_free(hub_http_resp *r)
{
    if (!r)
        return;
    free(r->body);
    memset(r, 0, sizeof *r);
}

char *hub_url_quote(const char *s, bool keep_slash)
{
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *p = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
            *p++ = (char)c;
        else
            p += sprintf(p, "%%%02X", c);
    }
    *p = 0;
    return out;
}

/* ---- one transfer ---- */

typedef struct xfer {
    hub_http_resp *r;
    /* memory sink */
    char *buf;
    size_t n, cap, max;
    bool too_big;
    /* file sink */
    int fd;
    uint64_t offset;          /* bytes the file held when this transfer started */
    bool file_mode, truncated, bad_range, write_failed;
    bool linked_etag, linked_size;
    int write_errno;
    uint64_t expected;
    hub_progress_fn progress;
    void *user;
} xfer;

static void copy_value(char *dst, size_t cap, const char *v, size_t n)
{
    while (n && isspace((unsigned char)*v))
        v++, n--;
    while (n && isspace((unsigned char)v[n - 1]))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *ud)
{
    xfer *x = ud;
    hub_http_resp *r = x->r;
    size_t n = size * nitems;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        /* a new response (after a redirect): forget the previous one's framing headers */
        const char *sp = memchr(line, ' ', n);
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->has_range = false;
        r->content_type[0] = 0;
        r->location[0] = 0;
        return n; /* X-Linked-* from a redirect answer are kept: the CDN's answer lacks them */
    }
    const char *colon = memchr(line, ':', n);
    if (!colon)
        return n;
    size_t kn = (size_t)(colon - line);
    const char *v = colon + 1;
    size_t vn = n - kn - 1;
    char tmp[2048];
#define IS(name) (kn == strlen(name) && !strncasecmp(line, name, kn))
    if (IS("x-repo-commit")) {
        copy_value(r->commit, sizeof r->commit, v, vn);
    } else if (IS("x-linked-etag") || (IS("etag") && !x->linked_etag)) {
        /* huggingface_hub: X-Linked-Etag (an LFS file's sha256) wins over ETag (the git blob id) */
        copy_value(tmp, sizeof tmp, v, vn);
        char *e = tmp;
        if (!strncmp(e, "W/", 2))
            e += 2;
        size_t en = strlen(e);
        if (en >= 2 && e[0] == '"' && e[en - 1] == '"')
            e[en - 1] = 0, e++;
        snprintf(r->etag, sizeof r->etag, "%.159s", e);
        if (IS("x-linked-etag"))
            x->linked_etag = true;
    } else if (IS("x-linked-size")) {
        copy_value(tmp, sizeof tmp, v, vn);
        r->size = strtoull(tmp, NULL, 10);
        r->has_size = x->linked_size = true;
    } else if (IS("content-length")) {
        copy_value(tmp, sizeof tmp, v, vn);
        /* a redirect's own (empty) body says nothing about the file */
        if (!x->linked_size && (r->status < 300 || r->status >= 400))
            r->size = strtoull(tmp, NULL, 10), r->has_size = true;
    } else if (IS("content-range")) {
        copy_value(tmp, sizeof tmp, v, vn);
        unsigned long long a;
        if (sscanf(tmp, "bytes %llu-", &a) == 1)
            r->range_start = a, r->has_range = true;
    } else if (IS("location")) {
        copy_value(r->location, sizeof r->location, v, vn);
    } else if (IS("x-error-code")) {
        copy_value(r->error_code, sizeof r->error_code, v, vn);
    } else if (IS("x-error-message")) {
        copy_value(r->error_msg, sizeof r->error_msg, v, vn);
    } else if (IS("link")) {
        copy_value(r->link, sizeof r->link, v, vn);
    } else if (IS("content-type")) {
        copy_value(r->content_type, sizeof r->content_type, v, vn);
    }
#undef IS
    return n;
}

static int mem_append(xfer *x, const char *p, size_t n, size_t max)
{
    if (x->n + n > max) {
        x->too_big = true;
        return -1;
    }
    if (x->n + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 4096;
        while (cap < x->n + n + 1)
            cap *= 2;
        char *b = realloc(x->buf, cap);
        if (!b)
            return -1;
        x->buf = b;
        x->cap = cap;
    }
    memcpy(x->buf + x->n, p, n);
    x->n += n;
    x->buf[x->n] = 0;
    return 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    long st = x->r->status;
    if (!x->file_mode || st < 200 || st >= 300) {
        /* small answers and error bodies go to memory */
        size_t max = x->file_mode ? MAX_ERROR_BODY : x->max;
        if (mem_append(x, p, n, max) < 0)
            return x->file_mode ? n : 0; /* an error body is cut, not failed */
        return n;
    }
    if (!x->truncated) {
        x->truncated = true; /* first body bytes of a 2xx: decide where they go */
        if (st == 206) {
            if (!x->r->has_range || x->r->range_start != x->offset) {
                x->bad_range = true;
                return 0;
            }
        } else if (x->offset) {
            /* the server ignored the Range: start over */
            if (ftruncate(x->fd, 0) != 0 || lseek(x->fd, 0, SEEK_SET) < 0) {
                x->write_failed = true, x->write_errno = errno;
                return 0;
            }
            x->offset = 0;
        }
    }
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(x->fd, p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            x->write_failed = true, x->write_errno = errno;
            return 0;
        }
        done += (size_t)w;
    }
    return n;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ult, curl_off_t ulnow)
{
    xfer *x = ud;
    if (x->progress && x->r->status >= 200 && x->r->status < 300)
        x->progress(x->offset + (uint64_t)dlnow, x->expected, x->user);
    return 0;
}

static CURL *make_handle(const char *url, const char *auth_token, const char *accept, struct curl_slist **hdrs,
                         xfer *x)
{
    pthread_once(&g_once, global_init);
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_USERAGENT, USER_AGENT);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);   /* a stalled transfer fails after a minute */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    /* files must arrive byte for byte: no transparent decompression */
    *hdrs = curl_slist_append(*hdrs, "Accept-Encoding: identity");
    if (accept) {
        char h[512];
        snprintf(h, sizeof h, "Accept: %s", accept);
        *hdrs = curl_slist_append(*hdrs, h);
    }
    if (auth_token) {
        /* libcurl drops a custom Authorization header when a redirect leaves the host */
        size_t n = strlen(auth_token) + 32;
        char *h = malloc(n);
        if (h) {
            snprintf(h, n, "Authorization: Bearer %s", auth_token);
            *hdrs = curl_slist_append(*hdrs, h);
            memset(h, 0, n);
            free(h);
        }
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    return c;
}

static int net_error(cdx_err *err, const char *what, const char *url, CURLcode rc, const char *errbuf)
{
    return cdx_err_set(err, CDX_ENET, "%s %s: %s", what, url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
}

int hub_http_get(const char *url, const char *auth_token, const char *accept, size_t max, hub_http_resp *r,
                 cdx_err *err)
{
    return hub_http_get_range(url, auth_token, accept, NULL, max, r, err);
}

static int get_impl(const char *url, const char *auth_token, const char *accept, const char *range, size_t max,
                    bool follow, hub_http_resp *r, cdx_err *err)
{
    memset(r, 0, sizeof *r);
    xfer x = { .r = r, .max = max, .fd = -1 };
    struct curl_slist *hdrs = NULL;
    CURL *c = make_handle(url, auth_token, accept, &hdrs, &x);
    if (!c)
        return cdx_err_set(err, CDX_ENOMEM, "GET %s: cannot create a curl handle", url);
    if (range) {
        char h[96];
        snprintf(h, sizeof h, "Range: bytes=%s", range);
        hdrs = curl_slist_append(hdrs, h);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    r->body = x.buf;
    r->n_body = x.n;
    if (x.too_big)
        return cdx_err_set(err, CDX_ERANGE, "GET %s: the answer is over %zu bytes", url, max);
    if (rc != CURLE_OK)
        return net_error(err, "GET", url, rc, errbuf);
    if (!r->body) {
        r->body = calloc(1, 1);
        if (!r->body)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    return 0;
}

int hub_http_get_range(const char *url, const char *auth_token, const char *accept, const char *range, size_t max,
                       hub_http_resp *r, cdx_err *err)
{
    return get_impl(url, auth_token, accept, range, max, true, r, err);
}

int hub_http_get_here(const char *url, const char *auth_token, size_t max, hub_http_resp *r, cdx_err *err)
{
    return get_impl(url, auth_token, "application/json", NULL, max, false, r, err);
}

int hub_http_head(const char *url, const char *auth_token, hub_http_resp *r, cdx_err *err)
{
    char *cur = hub_strdup_printf("%s", url);
    for (int hop = 0; cur && hop < 10; hop++) {
        memset(r, 0, sizeof *r);
        xfer x = { .r = r, .fd = -1, .max = MAX_ERROR_BODY };
        struct curl_slist *hdrs = NULL;
        CURL *c = make_handle(cur, auth_token, NULL, &hdrs, &x);
        if (!c) {
            free(cur);
            return cdx_err_set(err, CDX_ENOMEM, "HEAD %s: cannot create a curl handle", url);
        }
        char errbuf[CURL_ERROR_SIZE] = "";
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        CURLcode rc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        curl_easy_cleanup(c);
        curl_slist_free_all(hdrs);
        free(x.buf);
        if (rc != CURLE_OK) {
            int e = net_error(err, "HEAD", cur, rc, errbuf);
            free(cur);
            return e;
        }
        if (r->status >= 300 && r->status < 400 && r->location[0] == '/') {
            /* a relative redirect (a renamed repo): same server, follow it */
            const char *p = strstr(cur, "://");
            const char *slash = p ? strchr(p + 3, '/') : NULL;
            size_t n_base = slash ? (size_t)(slash - cur) : strlen(cur);
            char *next = hub_strdup_printf("%.*s%s", (int)n_base, cur, r->location);
            free(cur);
            cur = next;
            continue;
        }
        free(cur);
        return 0;
    }
    free(cur);
    return cdx_err_set(err, CDX_ENET, "HEAD %s: too many redirects", url);
}

int hub_http_download(const char *url, const char *auth_token, const char *path, uint64_t expected,
                      hub_progress_fn progress, void *user, hub_http_resp *r, cdx_err *err)
{
    memset(r, 0, sizeof *r);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return cdx_err_set(err, CDX_EIO, "%s: cannot open for writing: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return cdx_err_set(err, CDX_EIO, "%s: fstat failed: %s", path, strerror(errno));
    }
    xfer x = { .r = r, .fd = fd, .offset = (uint64_t)st.st_size, .file_mode = true, .expected = expected,
               .progress = progress, .user = user };
    struct curl_slist *hdrs = NULL;
    CURL *c = make_handle(url, auth_token, NULL, &hdrs, &x);
    if (!c) {
        close(fd);
        return cdx_err_set(err, CDX_ENOMEM, "GET %s: cannot create a curl handle", url);
    }
    char range[64];
    if (x.offset) {
        snprintf(range, sizeof range, "Range: bytes=%llu-", (unsigned long long)x.offset);
        hdrs = curl_slist_append(hdrs, range);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
    if (progress)
        progress(x.offset, expected, user);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    int close_rc = close(fd);
    r->body = x.buf;
    r->n_body = x.n;
    if (x.write_failed)
        return cdx_err_set(err, CDX_EIO, "%s: write failed: %s", path, strerror(x.write_errno));
    if (x.bad_range)
        return cdx_err_set(err, CDX_ENET, "GET %s: asked for bytes from %llu, the server answered from %llu", url,
                           (unsigned long long)x.offset, (unsigned long long)r->range_start);
    if (r->status == 416 && expected && x.offset == expected)
        return 0; /* already whole */
    if (rc != CURLE_OK)
        return net_error(err, "GET", url, rc, errbuf);
    if (close_rc != 0)
        return cdx_err_set(err, CDX_EIO, "%s: close failed: %s", path, strerror(errno));
    return 0;
}
