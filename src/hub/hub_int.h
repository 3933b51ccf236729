/* hub internals shared by its files: HTTP over libcurl, file helpers. Not part of the API. */
#ifndef CDX_HUB_INT_H
#define CDX_HUB_INT_H

#include "caldrix/hub.h"

#include <stdarg.h>

char *hub_strdup_printf(const char *fmt, ...) CDX_PRINTF(1, 2);

/* ---- HTTP ---- */

typedef struct hub_http_resp {
    long status;
    char *body;               /* heap, NUL-terminated (get_mem, or an error body) */
    size_t n_body;
    char commit[64];          /* X-Repo-Commit */
    char etag[160];           /* X-Linked-Etag, else ETag; W/ and quotes removed */
    char location[2048];      /* Location */
    char error_code[64];      /* X-Error-Code */
    char error_msg[512];      /* X-Error-Message */
    char content_type[128];
    char link[4096];          /* Link (the paging links of /api/models) */
    uint64_t size;            /* X-Linked-Size, else Content-Length */
    bool has_size;
    uint64_t range_start;     /* Content-Range: bytes START-END/TOTAL */
    bool has_range;
} hub_http_resp;

void hub_http_resp_free(hub_http_resp *r);

typedef void (*hub_progress_fn)(uint64_t done, uint64_t total, void *user);

/* GET into memory (at most max bytes). Follows redirects. Fills r whatever the status;
 * fails only on transport errors (CDX_ENET) or a body over max (CDX_ERANGE). */
int hub_http_get(const char *url, const char *auth_token, const char *accept, size_t max, hub_http_resp *r,
                 cdx_err *err);
/* The same with a Range header ("0-262143"); a 206 answer is the usual success. */
int hub_http_get_range(const char *url, const char *auth_token, const char *accept, const char *range, size_t max,
                       hub_http_resp *r, cdx_err *err);
/* GET into memory without following any redirect (a 3xx comes back as it is): for the model
 * index, which reads nothing from a URL the Hub's answer chose but its own paging links. */
int hub_http_get_here(const char *url, const char *auth_token, size_t max, hub_http_resp *r, cdx_err *err);
/* HEAD, following only redirects relative to the same server (as huggingface_hub does), so that
 * the headers of the Hub's own answer (X-Repo-Commit, X-Linked-Etag) are the ones read. */
int hub_http_head(const char *url, const char *auth_token, hub_http_resp *r, cdx_err *err);
/* GET into path, appending from its current size with a Range request when it already holds
 * bytes (restarting when the server ignores the range). Follows redirects. On a non-2xx answer
 * the file is left as it was and r->status says what came back. */
int hub_http_download(const char *url, const char *auth_token, const char *path, uint64_t expected,
                      hub_progress_fn progress, void *user, hub_http_resp *r, cdx_err *err);
/* "a/b c" -> "a%2Fb%20c" (all but unreserved characters); keep_slash leaves '/' as it is. */
char *hub_url_quote(const char *s, bool keep_slash);

/* ---- the Hub's API ---- */

typedef struct hub_sib {
    char *name;
    uint64_t size;
    char sha256[65];    /* lfs.sha256 when the API gave it */
    char blob_id[41];   /* blobId (the git blob id) when the API gave it */
} hub_sib;
void hub_sibs_free(hub_sib *s, size_t n);
/* GET /api/models/{repo}/revision/{rev}?blobs=true -> commit + top-level files with sizes; follow:
 * whether a redirect (a renamed repo) is followed. */
int hub_api_info(const cdx_hub_env *env, const char *repo, const char *revision, bool follow, char commit[41],
                 hub_sib **out, size_t *n_out, cdx_err *err);
/* Turns a non-2xx Hub answer into a message: what failed, why, and what to do. */
int hub_http_error(const cdx_hub_env *env, const char *repo, const char *what, const hub_http_resp *r,
                   cdx_err *err);
/* What a repo's listing alone refuses, before config.json (no config.json, no supported tokenizer, no
 * weights caldrix reads): the same checks and messages as a pull. 0 when none. */
int hub_listing_check(const hub_sib *s, size_t n, const char *label, cdx_err *err);
/* owner/name under huggingface_hub's repo-id rules (the part of cdx_hub_parse_ref that never looks at
 * the disk): letters, digits, '_', '-', '.', at most 96 each, no "--" or "..", no ".git" ending. */
bool hub_repo_id_ok(const char *id);

/* ---- files ---- */

int hub_mkdirs(const char *path, cdx_err *err);               /* mkdir -p */
int hub_mkdirs_parent(const char *path, cdx_err *err);        /* mkdir -p dirname(path) */
bool hub_exists(const char *path);                           /* follows symlinks */
bool hub_is_dir(const char *path);
int64_t hub_file_size(const char *path);                      /* -1 when absent */
/* A relative symlink at link_path pointing to target (both absolute or both relative to cwd),
 * replacing whatever is there, as huggingface_hub's _create_symlink does. */
int hub_symlink_relative(const char *target, const char *link_path, cdx_err *err);
int hub_write_file(const char *path, const void *data, size_t n, cdx_err *err); /* atomic: tmp + rename */

/* ---- events ---- */
void hub_note(const cdx_hub_opts *o, const char *fmt, ...) CDX_PRINTF(2, 3);
void hub_event(const cdx_hub_opts *o, cdx_hub_event_kind kind, const char *file, uint64_t done, uint64_t total,
               uint32_t n_files);

/* ---- pieces of resolve ---- */
int hub_resolve_hf(const cdx_hub_env *env, const char *repo, const char *revision, const char *label,
                   const cdx_hub_opts *o, char **out, cdx_err *err);
int hub_resolve_ollama(const cdx_hub_env *env, const cdx_hub_ref *ref, const cdx_hub_opts *o, char **out,
                       cdx_err *err);
/* The import rules on config.json text (cdx_hub_check_config), keeping what the config reader read:
 * *cfg and *out are filled even on a refusal, as far as config.json could be read (inspect reports a
 * refused model whole). */
struct cdx_hf_config;
int hub_config_read(const char *text, size_t len, const char *name, cdx_hub_config *out, struct cdx_hf_config *cfg,
                    cdx_err *err);
/* The memory admission refusal (seed 004); weight_bytes from the listing, before any weight. */
int hub_check_memory(const char *label, const cdx_hub_config *c, uint64_t weight_bytes, const cdx_hub_opts *o,
                     const char *downloaded, cdx_err *err);
/* The few GGUF keys that size a model, read from the first bytes of a file (a Range answer):
 * returns true when the architecture and the attention shape were all found. */
bool hub_gguf_peek(const uint8_t *p, size_t n, cdx_hub_config *c);
/* "offline (HF_HUB_OFFLINE is set)", or the phrase that stands for a variable ("the Hub is unreachable") */
const char *hub_offline_reason(const cdx_hub_env *env);

#endif
