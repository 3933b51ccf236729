/* The Hugging Face Hub: resolve a revision to its commit, list the repo, then fetch in seed 000's
 * order into huggingface_hub's cache layout:
 *
 *   <cache>/models--owner--name/refs/<revision>            the commit a branch or tag pointed at
 *   <cache>/models--owner--name/blobs/<etag>               file contents, named by ETag
 *   <cache>/models--owner--name/blobs/<etag>.incomplete    a download in progress (resumed by Range)
 *   <cache>/models--owner--name/snapshots/<commit>/<file>  relative symlink ../../blobs/<etag>
 *   <cache>/.locks/models--owner--name/<etag>.lock         flock()ed while a blob is written
 */
#include "caldrix/hub.h"
#include "hub/hub_int.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_JSON_BYTES (64u << 20)     /* API answers, index files */
#define MAX_SMALL_FILE (16u << 20)     /* config.json and friends, read in full */
#define MAX_PROCESSOR_BYTES (1u << 20) /* preprocessor_config.json / processor_config.json size cap */

typedef hub_sib sib;

typedef struct hfctx {
    const cdx_hub_env *env;
    const cdx_hub_opts *o;
    const char *repo, *label;
    char commit[41];
    char *repo_dir, *snap;
    sib *sibs;
    size_t n_sibs;
    int n_downloaded;      /* files fetched over the network by this call */
    size_t n_cached;       /* files of the groups fetched (the CACHED event's count) */
    uint64_t cached_bytes; /* their sizes */
    uint64_t weight_bytes;
} hfctx;

static bool is_commit(const char *s)
{
    if (strlen(s) != 40)
        return false;
    for (int i = 0; i < 40; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
            return false;
    return true;
}

char *cdx_hub_repo_dir(const char *cache, const char *repo)
{
    /* huggingface_hub's repo_folder_name: "models--" + repo id with "/" -> "--" */
    size_t n = strlen(cache) + strlen(repo) * 2 + 16;
    char *s = malloc(n);
    if (!s)
        return NULL;
    int k = snprintf(s, n, "%s/models--", cache);
    for (const char *p = repo; *p; p++) {
        if (*p == '/')
            s[k++] = '-', s[k++] = '-';
        else
            s[k++] = *p;
    }
    s[k] = 0;
    return s;
}

int cdx_hub_cache_commit(const char *cache, const char *repo, const char *revision, char commit[41], cdx_err *err)
{
    if (is_commit(revision)) {
        memcpy(commit, revision, 41);
        return 0;
    }
    char *dir = cdx_hub_repo_dir(cache, repo);
    char *ref = dir ? hub_strdup_printf("%s/refs/%s", dir, revision) : NULL;
    free(dir);
    if (!ref)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    char *text = NULL;
    cdx_err e2 = { 0 };
    int rc = cdx_file_read_all(ref, 256, &text, NULL, &e2);
    if (rc < 0) {
        rc = cdx_err_set(err, CDX_ENOTFOUND, "%s: the cache has no commit recorded for revision \"%s\" (%s)", repo,
                         revision, ref);
        free(ref);
        return rc;
    }
    char *s = text;
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    if (!is_commit(s)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: holds \"%.60s\"; expected a 40-hex commit", ref, s);
    } else {
        memcpy(commit, s, 41);
        rc = 0;
    }
    free(text);
    free(ref);
    return rc;
}

/* ---- listing ---- */

void hub_sibs_free(sib *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i].name);
    free(s);
}

static const sib *find_sib(const hfctx *x, const char *name)
{
    for (size_t i = 0; i < x->n_sibs; i++)
        if (!strcmp(x->sibs[i].name, name))
            return &x->sibs[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

int hub_http_error(const cdx_hub_env *env, const char *repo, const char *what, const hub_http_resp *r,
                      cdx_err *err)
{
    const char *code = r->error_code;
    char detail[600] = "";
    if (r->error_msg[0])
        snprintf(detail, sizeof detail, " (%s%s%s)", code, code[0] ? ": " : "", r->error_msg);
    else if (code[0])
        snprintf(detail, sizeof detail, " (%s)", code);
    if (r->status == 401 || r->status == 403) {
        if (!strcmp(code, "GatedRepo") || (r->status == 403 && env->token))
            return cdx_err_set(err, CDX_EAUTH,
                               "%s: %s: the Hub answered %ld%s. %s is a gated repo: accept its terms at %s/%s with "
                               "your account, then set HF_TOKEN to a token of that account (or write it to "
                               "$HF_HOME/token)%s", repo, what, r->status, detail, repo, env->endpoint, repo,
                               env->token ? "; the token sent was refused" : "; no token was set");
        return cdx_err_set(err, CDX_EAUTH,
                           "%s: %s: the Hub answered %ld%s. The repo does not exist, or it is private or gated: check "
                           "the name, and for a private or gated repo set HF_TOKEN (or $HF_HOME/token)%s", repo, what,
                           r->status, detail, env->token ? "; the token sent was refused" : "; no token was set");
    }
    if (r->status == 404) {
        if (!strcmp(code, "RevisionNotFound"))
            return cdx_err_set(err, CDX_ENOTFOUND, "%s: %s: no such revision%s", repo, what, detail);
        if (!strcmp(code, "EntryNotFound"))
            return cdx_err_set(err, CDX_ENOTFOUND, "%s: %s: no such file at this commit%s", repo, what, detail);
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: %s: not found on %s%s", repo, what, env->endpoint, detail);
    }
    return cdx_err_set(err, CDX_ENET, "%s: %s: the Hub answered HTTP %ld%s%s%.200s", repo, what, r->status, detail,
                       r->body && r->body[0] && !detail[0] ? ": " : "", r->body && !detail[0] ? r->body : "");
}

int hub_api_info(const cdx_hub_env *env, const char *repo, const char *revision, bool follow, char commit[41],
                 sib **out, size_t *n_out, cdx_err *err)
{
    *out = NULL;
    *n_out = 0;
    char *qrev = hub_url_quote(revision, false);
    char *url = qrev ? hub_strdup_printf("%s/api/models/%s/revision/%s?blobs=true", env->endpoint, repo, qrev) : NULL;
    free(qrev);
    if (!url)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    hub_http_resp r;
    int rc = follow ? hub_http_get(url, env->token, "application/json", MAX_JSON_BYTES, &r, err)
                    : hub_http_get_here(url, env->token, MAX_JSON_BYTES, &r, err);
    if (rc < 0) {
        cdx_err_prefix(err, "%s", repo);
        goto done;
    }
    if (r.status != 200) {
        char what[400];
        snprintf(what, sizeof what, "revision %s", revision);
        rc = hub_http_error(env, repo, what, &r, err);
        goto done;
    }
    json_error_t je;
    json_t *root = json_loadb(r.body, r.n_body, 0, &je);
    json_t *sha = json_object_get(root, "sha");
    json_t *sibs = json_object_get(root, "siblings");
    if (!json_is_string(sha) || !is_commit(json_string_value(sha)) || !json_is_array(sibs)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s: the answer has no 40-hex \"sha\" and \"siblings\" list", repo, url);
        json_decref(root);
        goto done;
    }
    memcpy(commit, json_string_value(sha), 41);
    size_t n = json_array_size(sibs);
    sib *s = calloc(n ? n : 1, sizeof *s);
    if (!s) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        json_decref(root);
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(sibs, i);
        const char *name = json_string_value(json_object_get(e, "rfilename"));
        if (!name || !*name || strchr(name, '/') || name[0] == '.')
            continue; /* only the top level is read */
        s[k].name = strdup(name);
        if (!s[k].name)
            break;
        json_t *lfs = json_object_get(e, "lfs");
        json_t *sz = json_object_get(e, "size");
        if (!json_is_integer(sz))
            sz = json_object_get(lfs, "size");
        s[k].size = json_is_integer(sz) && json_integer_value(sz) > 0 ? (uint64_t)json_integer_value(sz) : 0;
        const char *h = json_string_value(json_object_get(lfs, "sha256"));
        if (h && strlen(h) == 64)
            memcpy(s[k].sha256, h, 65);
        const char *b = json_string_value(json_object_get(e, "blobId"));
        if (b && strlen(b) == 40)
            memcpy(s[k].blob_id, b, 41);
        k++;
    }
    json_decref(root);
    *out = s;
    *n_out = k;
    rc = 0;
done:
    hub_http_resp_free(&r);
    free(url);
    return rc;
}

/* ---- one file into the cache ---- */

typedef struct prog { const cdx_hub_opts *o; const char *file; } prog;
static void on_progress(uint64_t done, uint64_t total, void *user)
{
    prog *p = user;
    hub_event(p->o, CDX_HUB_EV_PROGRESS, p->file, done, total, 0);
}

static bool etag_ok(const char *e)
{
    size_t n = strlen(e);
    if (n == 0 || n > 128 || e[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)e[i]) || e[i] == '-' || e[i] == '_' || e[i] == '.'))
            return false;
    return true;
}

static int fetch_file(hfctx *x, const char *file, cdx_err *err)
{
    char *pointer = hub_strdup_printf("%s/%s", x->snap, file);
    if (!pointer)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (hub_exists(pointer)) {
        const sib *ks = find_sib(x, file);
        if (x->o && x->o->verify && ks && ks->sha256[0]) {
            /* pull --verify: a kept file is read again and held to the listing's LFS digest */
            char got_hex[65];
            int vrc = cdx_sha256_file(pointer, got_hex, err);
            if (vrc == 0 && strcmp(got_hex, ks->sha256))
                vrc = cdx_err_set(err, CDX_EFORMAT, "%s: %s in the cache (%s) has sha256 %s, and the Hub's LFS metadata "
                                  "gives %s: the cached copy is damaged; remove it (caldrix models rm %s) and pull again",
                                  x->label, file, pointer, got_hex, ks->sha256, x->repo);
            if (vrc < 0) {
                free(pointer);
                return vrc;
            }
        }
        hub_event(x->o, CDX_HUB_EV_KEPT, file, 0, 0, 0);
        free(pointer);
        return 0;
    }
    char *qf = hub_url_quote(file, true);
    char *url = qf ? hub_strdup_printf("%s/%s/resolve/%s/%s", x->env->endpoint, x->repo, x->commit, qf) : NULL;
    free(qf);
    char *blob = NULL, *incomplete = NULL, *lock = NULL;
    int lock_fd = -1, rc;
    hub_http_resp r = { 0 };
    if (!url) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = hub_http_head(url, x->env->token, &r, err)) < 0) {
        cdx_err_prefix(err, "%s", x->label);
        goto done;
    }
    if (r.status >= 400) {
        rc = hub_http_error(x->env, x->repo, file, &r, err);
        goto done;
    }
    if (r.commit[0] && strcmp(r.commit, x->commit)) {
        rc = cdx_err_set(err, CDX_ENET, "%s: %s: the Hub answered for commit %s; asked for %s", x->repo, file,
                         r.commit, x->commit);
        goto done;
    }
    if (!etag_ok(r.etag)) {
        rc = cdx_err_set(err, CDX_ENET, "%s: %s: the Hub's answer has no usable ETag (\"%s\"), which names the blob",
                         x->repo, file, r.etag);
        goto done;
    }
    const sib *s = find_sib(x, file);
    uint64_t expected = r.has_size ? r.size : s ? s->size : 0;
    /* an LFS file's digest: the listing's lfs.sha256, else the X-Linked-Etag (64 hex) the blob is named by */
    char want[65] = "";
    if (s && s->sha256[0])
        snprintf(want, sizeof want, "%s", s->sha256);
    else if (strlen(r.etag) == 64 && strspn(r.etag, "0123456789abcdef") == 64)
        snprintf(want, sizeof want, "%.64s", r.etag);
    blob = hub_strdup_printf("%s/blobs/%s", x->repo_dir, r.etag);
    incomplete = hub_strdup_printf("%s/blobs/%s.incomplete", x->repo_dir, r.etag);
    const char *base = strrchr(x->repo_dir, '/');
    lock = hub_strdup_printf("%s/.locks/%s/%s.lock", x->env->hf_cache, base ? base + 1 : x->repo_dir, r.etag);
    if (!blob || !incomplete || !lock) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = hub_mkdirs_parent(blob, err)) < 0 || (rc = hub_mkdirs_parent(lock, err)) < 0)
        goto done;
    /* the same lock file huggingface_hub's filelock takes, so the two never write one blob at once */
    lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0) {
        rc = cdx_err_set(err, CDX_EIO, "%s: cannot lock: %s", lock, strerror(errno));
        goto done;
    }
    int64_t have = hub_file_size(blob);
    if (have < 0 || (expected && (uint64_t)have != expected)) {
        if (have >= 0)
            unlink(blob); /* a blob of the wrong size is not this file */
        int64_t part = hub_file_size(incomplete);
        hub_event(x->o, CDX_HUB_EV_START, file, part > 0 ? (uint64_t)part : 0, expected, 0);
        prog p = { x->o, file };
        hub_http_resp_free(&r);
        rc = hub_http_download(url, x->env->token, incomplete, expected, on_progress, &p, &r, err);
        if (rc < 0) {
            cdx_err_prefix(err, "%s: %s (the partial download is kept and resumes on the next try)", x->label, file);
            goto done;
        }
        if (r.status >= 400) {
            rc = hub_http_error(x->env, x->repo, file, &r, err);
            goto done;
        }
        x->n_downloaded++;
        int64_t got = hub_file_size(incomplete);
        if (got < 0 || (expected && (uint64_t)got != expected)) {
            if (got > 0 && (uint64_t)got > expected)
                unlink(incomplete);
            rc = cdx_err_set(err, CDX_ENET, "%s: %s: the download ended at %lld bytes of %llu; run again to resume",
                             x->label, file, (long long)got, (unsigned long long)expected);
            goto done;
        }
        if (want[0]) {
            /* checked before it is moved into place: a file whose content is not the digest the Hub gave
             * never enters the cache */
            char got_hex[65];
            if ((rc = cdx_sha256_file(incomplete, got_hex, err)) < 0)
                goto done;
            if (strcmp(got_hex, want)) {
                unlink(incomplete);
                rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s: the download's sha256 is %s, and the Hub's LFS metadata "
                                 "gives %s: the file was deleted and nothing was stored (a damaged or tampered "
                                 "transfer; run again to download it afresh)", x->label, file, got_hex, want);
                goto done;
            }
        }
        if (rename(incomplete, blob) != 0) {
            rc = cdx_err_set(err, CDX_EIO, "%s: cannot move into place: %s", blob, strerror(errno));
            goto done;
        }
        chmod(blob, 0644);
    }
    if ((rc = hub_symlink_relative(blob, pointer, err)) < 0)
        goto done;
    hub_event(x->o, CDX_HUB_EV_END, file, expected, expected, 0);
    rc = 0;
done:
    if (lock_fd >= 0)
        close(lock_fd); /* releases the flock */
    hub_http_resp_free(&r);
    free(url);
    free(blob);
    free(incomplete);
    free(lock);
    free(pointer);
    return rc;
}

/* Reads a small file of the snapshot (already fetched). */
static int read_snap(const hfctx *x, const char *file, size_t max, char **text, size_t *len, cdx_err *err)
{
    char *p = hub_strdup_printf("%s/%s", x->snap, file);
    if (!p)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int rc = cdx_file_read_all(p, max, text, len, err);
    free(p);
    return rc;
}

/* ---- the tokenizer fallbacks: checked before any weight ---- */

/* SentencePiece's ModelProto: field 2 is trainer_spec, whose field 3 is model_type
 * (1 UNIGRAM, the default; 2 BPE; 3 WORD; 4 CHAR). Field 1 repeats the pieces. */
static int sp_model_type(const uint8_t *p, size_t n, int *model_type, int *n_pieces)
{
    *model_type = 1;
    *n_pieces = 0;
    size_t i = 0;
    while (i < n) {
        uint64_t key = 0;
        int shift = 0;
        while (i < n && shift < 64) {
            key |= (uint64_t)(p[i] & 0x7f) << shift;
            shift += 7;
            if (!(p[i++] & 0x80))
                break;
        }
        unsigned field = (unsigned)(key >> 3), wt = key & 7;
        uint64_t len = 0;
        if (wt == 0) {
            shift = 0;
            while (i < n && shift < 64) {
                if (!(p[i++] & 0x80))
                    break;
                shift += 7;
            }
            continue;
        }
        if (wt == 5) { i += 4; continue; }
        if (wt == 1) { i += 8; continue; }
        if (wt != 2)
            return -1;
        shift = 0;
        while (i < n && shift < 64) {
            len |= (uint64_t)(p[i] & 0x7f) << shift;
            shift += 7;
            if (!(p[i++] & 0x80))
                break;
        }
        if (len > n - i)
            return -1;
        if (field == 1)
            (*n_pieces)++;
        if (field == 2) {
            const uint8_t *q = p + i;
            size_t j = 0;
            while (j < len) {
                uint8_t k = q[j++];
                if (k == (3 << 3 | 0) && j < len) {
                    *model_type = q[j] & 0x7f;
                    break;
                }
                unsigned w = k & 7;
                if (w == 0) { while (j < len && (q[j++] & 0x80)) ; }
                else if (w == 2) {
                    uint64_t l = 0; int s2 = 0;
                    while (j < len && s2 < 64) { l |= (uint64_t)(q[j] & 0x7f) << s2; s2 += 7; if (!(q[j++] & 0x80)) break; }
                    if (l > len - j) return -1;
                    j += l;
                } else if (w == 5) j += 4;
                else if (w == 1) j += 8;
                else if (k & 0x80) { while (j < len && (q[j++] & 0x80)) ; } /* multi-byte key */
                else return -1;
            }
        }
        i += len;
    }
    return 0;
}

static const char *tokenizer_class(const char *dir)
{
    static __thread char cls[128];
    cls[0] = 0;
    char *p = hub_strdup_printf("%s/tokenizer_config.json", dir);
    json_t *root = p ? json_load_file(p, 0, NULL) : NULL;
    free(p);
    const char *s = json_string_value(json_object_get(root, "tokenizer_class"));
    if (s)
        snprintf(cls, sizeof cls, "%s", s);
    json_decref(root);
    return cls;
}

static bool class_in(const char *cls, const char *const *list)
{
    char base[128];
    snprintf(base, sizeof base, "%s", cls);
    if (ends_with(base, "Fast"))
        base[strlen(base) - 4] = 0;
    for (; *list; list++)
        if (!strcmp(base, *list))
            return true;
    return false;
}

/* kind: "sentencepiece" or "bpe-pair". Checks what the text layer converts. */
static int check_tokenizer_fallback(const char *dir, const char *label, bool pair, cdx_err *err)
{
    static const char *const k_sp_classes[] = { "LlamaTokenizer", "CodeLlamaTokenizer", NULL };
    static const char *const k_pair_classes[] = { "GPT2Tokenizer", "Qwen2Tokenizer", NULL };
    const char *cls = tokenizer_class(dir);
    if (cls[0] && !class_in(cls, pair ? k_pair_classes : k_sp_classes))
        return cdx_err_set(err, CDX_EUNSUPPORTED,
                           "%s: tokenizer_config.json: tokenizer_class is \"%s\"; without tokenizer.json caldrix "
                           "converts %s only", label, cls,
                           pair ? "GPT2Tokenizer and Qwen2Tokenizer (vocab.json + merges.txt)"
                                : "LlamaTokenizer and CodeLlamaTokenizer (a SentencePiece BPE tokenizer.model)");
    if (!pair) {
        char *p = hub_strdup_printf("%s/tokenizer.model", dir);
        cdx_file *f = NULL;
        int rc = p ? cdx_file_map(p, &f, err) : cdx_err_set(err, CDX_ENOMEM, "out of memory");
        free(p);
        if (rc < 0)
            return rc;
        int mt, n_pieces;
        rc = f->size ? sp_model_type(f->data, f->size, &mt, &n_pieces) : -1;
        cdx_file_unmap(f);
        if (rc < 0 || n_pieces == 0)
            return cdx_err_set(err, CDX_EFORMAT, "%s: tokenizer.model: not a SentencePiece model (no pieces)", label);
        if (mt != 2) {
            static const char *const names[] = { "?", "UNIGRAM", "BPE", "WORD", "CHAR" };
            return cdx_err_set(err, CDX_EUNSUPPORTED,
                               "%s: tokenizer.model: trainer_spec.model_type is %s; caldrix converts SentencePiece "
                               "BPE models only", label, mt >= 0 && mt <= 4 ? names[mt] : "unknown");
        }
        return 0;
    }
    char *vp = hub_strdup_printf("%s/vocab.json", dir);
    json_error_t je;
    json_t *v = vp ? json_load_file(vp, 0, &je) : NULL;
    free(vp);
    if (!json_is_object(v) || json_object_size(v) == 0) {
        json_decref(v);
        return cdx_err_set(err, CDX_EFORMAT, "%s: vocab.json: expected a JSON object of token -> id", label);
    }
    const char *k;
    json_t *val;
    json_object_foreach(v, k, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0) {
            int rc = cdx_err_set(err, CDX_EFORMAT, "%s: vocab.json: token \"%.40s\" has a non-integer id", label, k);
            json_decref(v);
            return rc;
        }
    }
    json_decref(v);
    char *mp = hub_strdup_printf("%s/merges.txt", dir);
    char *text = NULL;
    int rc = mp ? cdx_file_read_all(mp, 256u << 20, &text, NULL, err) : cdx_err_set(err, CDX_ENOMEM, "oom");
    free(mp);
    if (rc < 0)
        return rc;
    int line_no = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        line_no++;
        size_t n = strlen(line);
        if (n && line[n - 1] == '\r')
            line[--n] = 0;
        if (!n || (line_no == 1 && !strncmp(line, "#version", 8)))
            continue;
        char *sp = strchr(line, ' ');
        if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' ')) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: merges.txt line %d is \"%.60s\"; expected two tokens separated "
                             "by one space", label, line_no, line);
            break;
        }
    }
    free(text);
    return rc;
}

/* ---- the choice of weights (transformers' rule) ---- */

typedef struct names { char **v; size_t n, cap; } names;
static int names_add(names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], name))
            return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    if (!(s->v[s->n] = strdup(name)))
        return -1;
    s->n++;
    return 0;
}
static void names_free(names *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}
static bool names_has(const names *s, const char *n)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], n))
            return true;
    return false;
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The shard names of model.safetensors.index.json's weight_map, sorted, each a plain file name. */
static int index_files(const char *text, size_t len, const char *label, names *out, cdx_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        json_decref(root);
        return cdx_err_set(err, CDX_EFORMAT, "%s: model.safetensors.index.json: no weight_map object", label);
    }
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        const char *f = json_string_value(v);
        if (!f || !*f || strchr(f, '/') || f[0] == '.' || !ends_with(f, ".safetensors")) {
            int rc = cdx_err_set(err, CDX_EFORMAT,
                                 "%s: model.safetensors.index.json: weight_map[\"%.80s\"] is \"%.80s\"; expected a "
                                 ".safetensors file beside the index", label, k, f ? f : "(not a string)");
            json_decref(root);
            return rc;
        }
        if (names_add(out, f) < 0) {
            json_decref(root);
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        }
    }
    json_decref(root);
    if (out->n) qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return 0;
}

/* What the repo (or folder) offers instead of safetensors, for the refusal. */
static void other_formats(const names *all, char *buf, size_t cap)
{
    buf[0] = 0;
    for (size_t i = 0; i < all->n; i++) {
        const char *f = all->v[i];
        if (ends_with(f, ".gguf") || ends_with(f, ".bin") || ends_with(f, ".pt") || ends_with(f, ".pth") ||
            ends_with(f, ".ckpt") || ends_with(f, ".h5") || ends_with(f, ".msgpack") || ends_with(f, ".onnx")) {
            size_t n = strlen(buf);
            if (n + strlen(f) + 8 < cap)
                snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", f);
        }
    }
}

/* all: every top-level file; index text (when the index is the rule) already read by the caller.
 * Fills chosen; returns a refusal when there is nothing to read. */
static int choose_weights(const names *all, const char *index_text, size_t index_len, const char *label,
                          names *chosen, cdx_err *err)
{
    if (names_has(all, "model.safetensors"))
        return names_add(chosen, "model.safetensors") < 0 ? cdx_err_set(err, CDX_ENOMEM, "out of memory") : 0;
    if (names_has(all, "model.safetensors.index.json")) {
        int rc = index_files(index_text ? index_text : "", index_len, label, chosen, err);
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < chosen->n; i++)
            if (!names_has(all, chosen->v[i]))
                return cdx_err_set(err, CDX_EFORMAT,
                                   "%s: model.safetensors.index.json names %s, which is not there", label,
                                   chosen->v[i]);
        return 0;
    }
    bool adapter = names_has(all, "adapter_config.json");
    for (size_t i = 0; i < all->n; i++)
        if (ends_with(all->v[i], ".safetensors") && !(adapter && !strcmp(all->v[i], "adapter_model.safetensors")))
            if (names_add(chosen, all->v[i]) < 0)
                return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (chosen->n) qsort(chosen->v, chosen->n, sizeof *chosen->v, cmp_str);
    if (chosen->n)
        return 0;
    char other[600];
    other_formats(all, other, sizeof other);
    if (adapter)
        return cdx_err_set(err, CDX_EUNSUPPORTED,
                           "%s: holds an adapter (adapter_config.json) and no model weights; adapters are not "
                           "supported: run its base model (base_model_name_or_path in adapter_config.json)", label);
    return cdx_err_set(err, CDX_EUNSUPPORTED,
                       "%s: has no *.safetensors file%s%s; caldrix reads safetensors (GGUF, .bin and other weight "
                       "formats are not supported: for a GGUF build use its file path or an ollama: tag)", label,
                       other[0] ? "; it has " : "", other);
}

/* The note for .safetensors files the rule leaves out, and adapter files beside a model. */
static char *not_read_note(const names *all, const names *chosen)
{
    char buf[2048] = "", reads[512] = "";
    for (size_t i = 0; i < all->n; i++) {
        const char *f = all->v[i];
        bool left_out = (ends_with(f, ".safetensors") && !names_has(chosen, f)) ||
                        (!strcmp(f, "adapter_config.json") && chosen->n);
        if (left_out) {
            size_t n = strlen(buf);
            snprintf(buf + n, sizeof buf - n, "%s%s", n ? ", " : "", f);
        }
    }
    if (!buf[0])
        return NULL;
    if (chosen->n == 1)
        snprintf(reads, sizeof reads, "%s", chosen->v[0]);
    else
        snprintf(reads, sizeof reads, "the %zu files %s", chosen->n,
                 names_has(all, "model.safetensors.index.json") ? "model.safetensors.index.json names"
                                                                : "*.safetensors holds");
    return hub_strdup_printf("reads %s (as transformers loads it); not read: %s", reads, buf);
}

/* ---- a local folder, checked as the import checks it ---- */

static int list_dir(const char *dir, names *out, cdx_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return cdx_err_set(err, CDX_EIO, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *p = hub_strdup_printf("%s/%s", dir, e->d_name);
        bool file = p && hub_exists(p) && !hub_is_dir(p);
        free(p);
        if (file && names_add(out, e->d_name) < 0) {
            closedir(d);
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        }
    }
    closedir(d);
    if (out->n) qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return 0;
}

static const char *tokenizer_kind(const names *all)
{
    if (names_has(all, "tokenizer.json"))
        return "tokenizer.json";
    if (names_has(all, "tokenizer.model"))
        return "tokenizer.model";
    if (names_has(all, "vocab.json") && names_has(all, "merges.txt"))
        return "vocab.json";
    return NULL;
}

int hub_listing_check(const hub_sib *s, size_t n, const char *label, cdx_err *err)
{
    names all = { 0 }, chosen = { 0 };
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (names_add(&all, s[i].name) < 0)
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (rc == 0 && !names_has(&all, "config.json"))
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the repo has no config.json%s", label,
                         names_has(&all, "adapter_config.json")
                             ? " (it holds an adapter: adapters are not supported; run its base model)" : "");
    else if (rc == 0 && !tokenizer_kind(&all))
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the repo has no supported tokenizer: none of tokenizer.json, "
                         "tokenizer.model, or vocab.json with merges.txt", label);
    else if (rc == 0 && (names_has(&all, "model.safetensors") || !names_has(&all, "model.safetensors.index.json")))
        rc = choose_weights(&all, NULL, 0, label, &chosen, err);
    names_free(&all);
    names_free(&chosen);
    return rc;
}

int cdx_hub_check_dir(const char *dir, bool check_config, char **notes, cdx_err *err)
{
    if (notes)
        *notes = NULL;
    names all = { 0 }, chosen = { 0 };
    char *text = NULL;
    size_t len = 0;
    int rc = list_dir(dir, &all, err);
    if (rc < 0)
        goto done;
    if (!names_has(&all, "config.json")) {
        rc = cdx_err_set(err, CDX_ENOTFOUND, "%s: no config.json%s", dir,
                         names_has(&all, "adapter_config.json") ? " (it holds an adapter: run its base model)" : "");
        goto done;
    }
    char *cp = hub_strdup_printf("%s/config.json", dir);
    rc = cp ? cdx_file_read_all(cp, MAX_SMALL_FILE, &text, &len, err) : cdx_err_set(err, CDX_ENOMEM, "oom");
    cdx_hub_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (rc == 0) {
        cdx_err e2 = { 0 };
        int crc = cdx_hub_check_config(text, len, cp, &cfg, check_config ? err : &e2);
        if (check_config)
            rc = crc;
    }
    free(cp);
    free(text);
    text = NULL;
    if (rc < 0)
        goto done;
    const char *tk = tokenizer_kind(&all);
    if (!tk) {
        rc = cdx_err_set(err, CDX_ENOTFOUND,
                         "%s: no supported tokenizer: none of tokenizer.json, tokenizer.model, or vocab.json with "
                         "merges.txt", dir);
        goto done;
    }
    if (strcmp(tk, "tokenizer.json") && (rc = check_tokenizer_fallback(dir, dir, !strcmp(tk, "vocab.json"), err)) < 0)
        goto done;
    if (cfg.vision) {
        for (int i = 0; i < 2; i++) {
            const char *f = i ? "processor_config.json" : "preprocessor_config.json";
            char *p = hub_strdup_printf("%s/%s", dir, f);
            int64_t sz = p ? hub_file_size(p) : -1;
            free(p);
            if (sz < 0 || sz > (int64_t)MAX_PROCESSOR_BYTES) {
                rc = cdx_err_set(err, sz < 0 ? CDX_ENOTFOUND : CDX_ERANGE,
                                 "%s: %s is %s; a vision model needs it, at most %u bytes", dir, f,
                                 sz < 0 ? "missing" : "too large", MAX_PROCESSOR_BYTES);
                goto done;
            }
        }
    }
    if (!names_has(&all, "model.safetensors") && names_has(&all, "model.safetensors.index.json")) {
        char *ip = hub_strdup_printf("%s/model.safetensors.index.json", dir);
        rc = ip ? cdx_file_read_all(ip, MAX_JSON_BYTES, &text, &len, err) : cdx_err_set(err, CDX_ENOMEM, "oom");
        free(ip);
        if (rc < 0)
            goto done;
    }
    if ((rc = choose_weights(&all, text, len, dir, &chosen, err)) < 0)
        goto done;
    if (notes)
        *notes = not_read_note(&all, &chosen);
done:
    free(text);
    names_free(&all);
    names_free(&chosen);
    return rc;
}

/* ---- resolve: offline ---- */

static int resolve_offline(hfctx *x, const char *revision, char **out, cdx_err *err)
{
    int rc = cdx_hub_cache_commit(x->env->hf_cache, x->repo, revision, x->commit, err);
    if (rc < 0)
        return cdx_err_set(err, CDX_EOFFLINE,
                           "%s: %s and the cache under %s has no commit for revision \"%s\"; run "
                           "caldrix pull %s with the network first", x->label, hub_offline_reason(x->env), x->env->hf_cache,
                           revision, x->label);
    x->snap = hub_strdup_printf("%s/snapshots/%s", x->repo_dir, x->commit);
    if (!x->snap)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    char *notes = NULL;
    cdx_err e2 = { 0 };
    if (!hub_is_dir(x->snap) || cdx_hub_check_dir(x->snap, true, &notes, &e2) < 0)
        return cdx_err_set(err, e2.code == CDX_EUNSUPPORTED ? CDX_EUNSUPPORTED : CDX_EOFFLINE,
                           "%s: %s and commit %s is not complete in the cache: %s; run caldrix pull "
                           "%s with the network first", x->label, hub_offline_reason(x->env), x->commit,
                           e2.msg[0] ? e2.msg : "no snapshot folder", x->label);
    if (notes)
        hub_note(x->o, "%s", notes);
    free(notes);
    *out = strdup(x->snap);
    return *out ? 0 : cdx_err_set(err, CDX_ENOMEM, "out of memory");
}

/* ---- the adapter check (seed 000): full weights beside adapter_config.json ---- */

static int check_adapter(hfctx *x, const names *chosen, cdx_err *err)
{
    int rc = fetch_file(x, "adapter_config.json", err);
    if (rc < 0)
        return rc;
    char *text = NULL;
    size_t len;
    if ((rc = read_snap(x, "adapter_config.json", MAX_SMALL_FILE, &text, &len, err)) < 0)
        return rc;
    json_t *root = json_loadb(text, len, 0, NULL);
    free(text);
    const char *base = json_string_value(json_object_get(root, "base_model_name_or_path"));
    char basebuf[256] = "";
    if (base)
        snprintf(basebuf, sizeof basebuf, "%s", base);
    json_decref(root);
    cdx_hub_ref bref;
    cdx_err e2 = { 0 };
    if (!basebuf[0] || cdx_hub_parse_ref(basebuf, &bref, &e2) < 0 || bref.kind != CDX_REF_HF) {
        hub_note(x->o, "%s ships an adapter (adapter_config.json) beside full weights; its base model \"%s\" is not "
                 "a Hub repo, so the two cannot be compared: the shipped model is run; not read: adapter files",
                 x->label, basebuf);
        return 0;
    }
    char bcommit[41];
    sib *bs = NULL;
    size_t nb = 0;
    if (hub_api_info(x->env, bref.repo, bref.revision, true, bcommit, &bs, &nb, &e2) < 0) {
        hub_note(x->o, "%s ships an adapter beside full weights; the checksums of its base %s could not be read (%s): "
                 "the shipped model is run; not read: adapter files", x->label, bref.repo, e2.msg);
        return 0;
    }
    int same = 0, unknown = 0;
    for (size_t i = 0; i < chosen->n; i++) {
        const sib *s = find_sib(x, chosen->v[i]);
        if (!s || !s->sha256[0]) {
            unknown++;
            continue;
        }
        for (size_t j = 0; j < nb; j++)
            if (!strcmp(bs[j].sha256, s->sha256)) {
                same++;
                break;
            }
    }
    hub_sibs_free(bs, nb);
    if (unknown) {
        hub_note(x->o, "%s ships an adapter beside full weights; the Hub gave no checksum for %d weight file(s), so "
                 "they cannot be compared with %s: the shipped model is run; not read: adapter files", x->label,
                 unknown, bref.repo);
        return 0;
    }
    if ((size_t)same == chosen->n)
        return cdx_err_set(err, CDX_EUNSUPPORTED,
                           "%s: an adapter over %s: its weight files are %s's own (same checksums) and adapters are "
                           "not supported; run %s itself. Nothing but config.json and adapter_config.json was "
                           "downloaded", x->label, bref.repo, bref.repo, bref.repo);
    return 0; /* different weights: the shipped model runs; the note names the adapter files */
}

/* ---- resolve: online ---- */

static int fetch_group(hfctx *x, const names *files, cdx_err *err)
{
    uint64_t total = 0;
    for (size_t i = 0; i < files->n; i++) {
        const sib *s = find_sib(x, files->v[i]);
        total += s ? s->size : 0;
    }
    x->n_cached += files->n;
    x->cached_bytes += total;
    /* the plan announces a download: a group already in the cache has none */
    bool missing = false;
    for (size_t i = 0; i < files->n && !missing; i++) {
        char *p = hub_strdup_printf("%s/%s", x->snap, files->v[i]);
        missing = !p || !hub_exists(p);
        free(p);
    }
    if (missing) {
        hub_event(x->o, CDX_HUB_EV_PLAN, NULL, 0, total, (uint32_t)files->n);
        for (size_t i = 0; i < files->n; i++) {
            const sib *s = find_sib(x, files->v[i]);
            hub_event(x->o, CDX_HUB_EV_FILE, files->v[i], 0, s ? s->size : 0, 0);
        }
    }
    for (size_t i = 0; i < files->n; i++) {
        int rc = fetch_file(x, files->v[i], err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* What a refusal before the weights cost: the files this call fetched are all small ones. */
static const char *nothing_else(const hfctx *x)
{
    if (x->n_downloaded == 0)
        return "Nothing was downloaded (config.json was already in the cache).";
    return x->n_downloaded == 1 ? "Nothing else was downloaded (config.json alone)."
                                : "Nothing else was downloaded (config.json and the small files before the weights "
                                  "alone).";
}

int hub_resolve_hf(const cdx_hub_env *env, const char *repo, const char *revision, const char *label,
                   const cdx_hub_opts *o, char **out, cdx_err *err)
{
    hfctx x = { .env = env, .o = o, .repo = repo, .label = label };
    names all = { 0 }, chosen = { 0 }, rest = { 0 };
    char *text = NULL;
    size_t len = 0;
    int rc;
    *out = NULL;
    x.repo_dir = cdx_hub_repo_dir(env->hf_cache, repo);
    if (!x.repo_dir)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (env->hf_offline) {
        rc = resolve_offline(&x, revision, out, err);
        goto done;
    }
    if ((rc = hub_api_info(env, repo, revision, true, x.commit, &x.sibs, &x.n_sibs, err)) < 0) {
        /* the Hub unreachable (no HTTP answer at all): use the cache when it holds the model, as
         * huggingface_hub does; an HTTP refusal (401, 404) is never papered over */
        cdx_err e2 = { 0 };
        if (rc == CDX_ENET && !strstr(err->msg, "answered")) {
            cdx_hub_env off = *env;
            off.offline_var = "the Hub is unreachable";
            x.env = &off;
            if (resolve_offline(&x, revision, out, &e2) == 0) {
                hub_note(o, "%s: the Hub at %s is unreachable (%s); using the cached commit %s", label, env->endpoint,
                         err->msg, x.commit);
                rc = 0;
            } else {
                size_t n = strlen(err->msg);
                snprintf(err->msg + n, sizeof err->msg - n, " (and the cache does not hold it complete)");
            }
            x.env = env;
        }
        goto done;
    }
    if (strcmp(revision, x.commit)) {
        /* as huggingface_hub: refs/<revision> holds the commit the revision resolved to */
        char *ref = hub_strdup_printf("%s/refs/%s", x.repo_dir, revision);
        rc = ref ? hub_write_file(ref, x.commit, 40, err) : cdx_err_set(err, CDX_ENOMEM, "out of memory");
        free(ref);
        if (rc < 0)
            goto done;
    }
    x.snap = hub_strdup_printf("%s/snapshots/%s", x.repo_dir, x.commit);
    if (!x.snap) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < x.n_sibs; i++)
        if (names_add(&all, x.sibs[i].name) < 0) {
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto done;
        }
    if (all.n) qsort(all.v, all.n, sizeof *all.v, cmp_str);

    /* 1. what the listing alone refuses: nothing is downloaded */
    const char *tk = tokenizer_kind(&all);
    if (!names_has(&all, "config.json")) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the repo has no config.json%s. Nothing was downloaded", label,
                         names_has(&all, "adapter_config.json")
                             ? " (it holds an adapter: adapters are not supported; run its base model)" : "");
        goto done;
    }
    if (!tk) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED,
                         "%s: the repo has no supported tokenizer: none of tokenizer.json, tokenizer.model, or "
                         "vocab.json with merges.txt. Nothing was downloaded", label);
        goto done;
    }
    bool has_index = !names_has(&all, "model.safetensors") && names_has(&all, "model.safetensors.index.json");
    if (!has_index && (rc = choose_weights(&all, NULL, 0, label, &chosen, err)) < 0) {
        snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg), ". Nothing was downloaded");
        goto done;
    }

    /* 2. config.json, first and alone, checked by the import rules */
    if ((rc = fetch_file(&x, "config.json", err)) < 0)
        goto done;
    if ((rc = read_snap(&x, "config.json", MAX_SMALL_FILE, &text, &len, err)) < 0)
        goto done;
    char cname[300];
    snprintf(cname, sizeof cname, "%s: config.json", label);
    cdx_hub_config cfg;
    rc = cdx_hub_check_config(text, len, cname, &cfg, err);
    free(text);
    text = NULL;
    if (rc < 0) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n, ". %s", nothing_else(&x));
        goto done;
    }

    /* 3. a tokenizer without tokenizer.json: fetched right after config.json and checked */
    if (strcmp(tk, "tokenizer.json")) {
        names tf = { 0 };
        bool pair = !strcmp(tk, "vocab.json");
        static const char *const k_sp[] = { "tokenizer.model", "added_tokens.json", "tokenizer_config.json", NULL };
        static const char *const k_pair[] = { "vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json",
                                              NULL };
        for (const char *const *f = pair ? k_pair : k_sp; *f; f++)
            if (names_has(&all, *f))
                names_add(&tf, *f);
        rc = fetch_group(&x, &tf, err);
        names_free(&tf);
        if (rc < 0)
            goto done;
        if ((rc = check_tokenizer_fallback(x.snap, label, pair, err)) < 0) {
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof err->msg - n, ". %s", nothing_else(&x));
            goto done;
        }
    }

    /* 4. the weights the rule chooses, and memory admission before any of them */
    if (has_index) {
        if ((rc = fetch_file(&x, "model.safetensors.index.json", err)) < 0 ||
            (rc = read_snap(&x, "model.safetensors.index.json", MAX_JSON_BYTES, &text, &len, err)) < 0 ||
            (rc = choose_weights(&all, text, len, label, &chosen, err)) < 0)
            goto done;
        free(text);
        text = NULL;
    }
    bool weights_missing = false;
    for (size_t i = 0; i < chosen.n; i++) {
        const sib *s = find_sib(&x, chosen.v[i]);
        x.weight_bytes += s ? s->size : 0;
        char *p = hub_strdup_printf("%s/%s", x.snap, chosen.v[i]);
        weights_missing |= !p || !hub_exists(p);
        free(p);
    }
    /* admission before the first weight byte; weights already here are the loader's to judge */
    if (weights_missing) {
        const char *spent = x.n_downloaded == 0 ? "Nothing was downloaded, so nothing was spent finding this out."
                            : x.n_downloaded == 1 ? "Nothing but config.json was downloaded, so nothing was spent "
                                                    "finding this out."
                                                  : "Only config.json and the small files before the weights were "
                                                    "downloaded.";
        if ((rc = hub_check_memory(label, &cfg, x.weight_bytes, o, spent, err)) < 0)
            goto done;
    }

    /* 5. a vision model's processor files, within their caps, before any weight */
    if (cfg.vision) {
        static const char *const k_vis[] = { "preprocessor_config.json", "processor_config.json" };
        for (int i = 0; i < 2; i++) {
            const sib *s = find_sib(&x, k_vis[i]);
            if (!s || s->size > MAX_PROCESSOR_BYTES) {
                rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is %s; a vision model needs it, at most %u bytes. %s",
                                 label, k_vis[i], s ? "too large" : "missing from the repo", MAX_PROCESSOR_BYTES,
                                 nothing_else(&x));
                goto done;
            }
        }
    }

    /* 6. full weights beside an adapter */
    if (names_has(&all, "adapter_config.json") && (rc = check_adapter(&x, &chosen, err)) < 0)
        goto done;

    /* 7. the rest, in order: tokenizer files, processor files, weights */
    static const char *const k_tok_json[] = { "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                              "chat_template.json", "chat_template.jinja", NULL };
    static const char *const k_tok_other[] = { "generation_config.json", "chat_template.json", "chat_template.jinja",
                                               NULL };
    for (const char *const *f = strcmp(tk, "tokenizer.json") ? k_tok_other : k_tok_json; *f; f++)
        if (names_has(&all, *f))
            names_add(&rest, *f);
    if (cfg.vision) {
        names_add(&rest, "preprocessor_config.json");
        names_add(&rest, "processor_config.json");
    }
    for (size_t i = 0; i < chosen.n; i++)
        names_add(&rest, chosen.v[i]);
    if ((rc = fetch_group(&x, &rest, err)) < 0)
        goto done;
    char *note = not_read_note(&all, &chosen);
    if (note && names_has(&all, "adapter_config.json")) {
        /* the Hub's other .safetensors are not named (seed 000); the adapter files are */
        free(note);
        note = hub_strdup_printf("reads %s (as transformers loads it); not read: adapter_config.json%s",
                                 chosen.n == 1 ? chosen.v[0] : "the model's weight files",
                                 names_has(&all, "adapter_model.safetensors") ? ", adapter_model.safetensors" : "");
        hub_note(o, "%s", note);
    } else {
        /* an already-downloaded copy may hold .safetensors the rule leaves out */
        free(note);
        note = NULL;
        cdx_err e2 = { 0 };
        if (cdx_hub_check_dir(x.snap, false, &note, &e2) == 0 && note)
            hub_note(o, "%s", note);
    }
    free(note);
    if (x.n_downloaded == 0) /* config.json and every group were already here */
        hub_event(o, CDX_HUB_EV_CACHED, label, 0, x.cached_bytes, (uint32_t)(x.n_cached + 1));
    *out = strdup(x.snap);
    rc = *out ? 0 : cdx_err_set(err, CDX_ENOMEM, "out of memory");
done:
    free(text);
    names_free(&all);
    names_free(&chosen);
    names_free(&rest);
    hub_sibs_free(x.sibs, x.n_sibs);
    free(x.repo_dir);
    free(x.snap);
    return rc;
}

/* The "not read" note for a local folder, whatever else it lacks (fixtures carry no tokenizer). */
int hub_dir_note(const char *dir, char **note)
{
    *note = NULL;
    names all = { 0 }, chosen = { 0 };
    char *text = NULL;
    size_t len = 0;
    cdx_err e = { 0 };
    int rc = list_dir(dir, &all, &e);
    if (rc == 0 && !names_has(&all, "model.safetensors") && names_has(&all, "model.safetensors.index.json")) {
        char *ip = hub_strdup_printf("%s/model.safetensors.index.json", dir);
        rc = ip ? cdx_file_read_all(ip, MAX_JSON_BYTES, &text, &len, &e) : -1;
        free(ip);
    }
    if (rc == 0 && choose_weights(&all, text, len, dir, &chosen, &e) == 0)
        *note = not_read_note(&all, &chosen);
    free(text);
    names_free(&all);
    names_free(&chosen);
    return 0;
}
