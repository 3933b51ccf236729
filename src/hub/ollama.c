/* The Ollama registry: ollama:[namespace/]name[:tag] -> manifest -> the GGUF layer, its digest
 * verified, stored under caldrix's own cache (not Ollama's):
 *
 *   <caldrix cache>/ollama/manifests/<registry host>/<namespace>/<name>/<tag>   the manifest JSON
 *   <caldrix cache>/ollama/blobs/sha256-<hex>                                   layers by digest
 *   <caldrix cache>/ollama/blobs/sha256-<hex>.partial                           a download in progress
 *   <caldrix cache>/ollama/models/<host>/<namespace>/<name>/<tag>/model.gguf    -> ../../../../../../blobs/sha256-<hex>
 *   (and template, params beside it when the manifest has those layers)
 *
 * The registry speaks the Docker distribution API: GET /v2/<ns>/<name>/manifests/<tag> and
 * GET /v2/<ns>/<name>/blobs/sha256:<hex> (usually a redirect to a CDN).
 */
#include "caldrix/format.h"
#include "caldrix/hub.h"
#include "hub/hub_int.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MANIFEST_ACCEPT "application/vnd.docker.distribution.manifest.v2+json"
#define MEDIA_MODEL "application/vnd.ollama.image.model"
#define PEEK_BYTES (512u << 10) /* the GGUF header keys that size a model sit in its first bytes */

/* The layers caldrix keeps, by media type, and the name each gets beside model.gguf. */
static const struct { const char *media; const char *file; bool required; } k_layers[] = {
    { MEDIA_MODEL,                          "model.gguf", true },
    { "application/vnd.ollama.image.template", "template", false },
    { "application/vnd.ollama.image.params",   "params",   false },
};

typedef struct layer { const char *media; char hex[65]; uint64_t size; const char *file; } layer;

static bool digest_hex(const char *digest, char hex[65])
{
    if (!digest || strncmp(digest, "sha256:", 7) || strlen(digest) != 71)
        return false;
    for (int i = 0; i < 64; i++) {
        char c = digest[7 + i];
        if (!isxdigit((unsigned char)c))
            return false;
        hex[i] = (char)tolower((unsigned char)c);
    }
    hex[64] = 0;
    return true;
}

/* "https://registry.ollama.ai" -> "registry.ollama.ai"; "http://127.0.0.1:8080" -> "127.0.0.1_8080" */
static void registry_host(const char *url, char *out, size_t cap)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t k = 0;
    for (; *p && *p != '/' && k + 1 < cap; p++)
        out[k++] = (isalnum((unsigned char)*p) || *p == '.' || *p == '-') ? *p : '_';
    out[k] = 0;
}

/* Parses a manifest: the layers caldrix keeps. */
static int parse_manifest(const char *label, const char *text, size_t len, layer *out, int *n_out, cdx_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    json_t *layers = json_object_get(root, "layers");
    if (!json_is_array(layers)) {
        json_decref(root);
        return cdx_err_set(err, CDX_EFORMAT, "%s: the manifest has no \"layers\" list", label);
    }
    int n = 0, rc = 0;
    for (size_t k = 0; k < sizeof k_layers / sizeof k_layers[0]; k++) {
        int found = 0;
        for (size_t i = 0; i < json_array_size(layers); i++) {
            json_t *l = json_array_get(layers, i);
            const char *mt = json_string_value(json_object_get(l, "mediaType"));
            if (!mt || strcmp(mt, k_layers[k].media))
                continue;
            if (++found > 1) {
                rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the manifest has more than one %s layer (an adapter or "
                                 "projector beside the model); caldrix reads one model", label, mt);
                goto done;
            }
            const char *digest = json_string_value(json_object_get(l, "digest"));
            json_t *size = json_object_get(l, "size");
            if (!digest_hex(digest, out[n].hex) || !json_is_integer(size) || json_integer_value(size) <= 0) {
                rc = cdx_err_set(err, CDX_EFORMAT, "%s: layer %s: digest \"%s\" or size is malformed", label, mt,
                                 digest ? digest : "(none)");
                goto done;
            }
            out[n].media = k_layers[k].media;
            out[n].file = k_layers[k].file;
            out[n].size = (uint64_t)json_integer_value(size);
            n++;
        }
        if (!found && k_layers[k].required) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the manifest has no %s layer (no GGUF model)", label,
                             k_layers[k].media);
            goto done;
        }
    }
    *n_out = n;
done:
    json_decref(root);
    return rc;
}

typedef struct prog { const cdx_hub_opts *o; const char *file; } prog;
static void on_progress(uint64_t done, uint64_t total, void *user)
{
    prog *p = user;
    hub_event(p->o, CDX_HUB_EV_PROGRESS, p->file, done, total, 0);
}

static int fetch_blob(const cdx_hub_env *env, const cdx_hub_ref *ref, const char *label, const layer *l,
                      const char *blob, const cdx_hub_opts *o, cdx_err *err)
{
    int64_t have = hub_file_size(blob);
    if (have >= 0 && (uint64_t)have == l->size) {
        hub_event(o, CDX_HUB_EV_KEPT, l->file, 0, l->size, 0);
        return 0;
    }
    char *partial = hub_strdup_printf("%s.partial", blob);
    char *url = hub_strdup_printf("%s/v2/%s/%s/blobs/sha256:%s", env->ollama_registry, ref->ns, ref->name, l->hex);
    int rc = 0;
    hub_http_resp r = { 0 };
    if (!partial || !url) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = hub_mkdirs_parent(blob, err)) < 0)
        goto done;
    int64_t part = hub_file_size(partial);
    if (part > 0 && (uint64_t)part > l->size)
        unlink(partial), part = 0;
    hub_event(o, CDX_HUB_EV_START, l->file, part > 0 ? (uint64_t)part : 0, l->size, 0);
    prog p = { o, l->file };
    if ((rc = hub_http_download(url, NULL, partial, l->size, on_progress, &p, &r, err)) < 0) {
        cdx_err_prefix(err, "%s: %s (the partial download is kept and resumes on the next try)", label, l->file);
        goto done;
    }
    if (r.status >= 400) {
        rc = cdx_err_set(err, r.status == 404 ? CDX_ENOTFOUND : CDX_ENET, "%s: GET %s: the registry answered HTTP %ld",
                         label, url, r.status);
        goto done;
    }
    int64_t got = hub_file_size(partial);
    if (got < 0 || (uint64_t)got != l->size) {
        if (got > 0 && (uint64_t)got > l->size)
            unlink(partial);
        rc = cdx_err_set(err, CDX_ENET, "%s: %s: the download ended at %lld bytes of %llu; run again to resume",
                         label, l->file, (long long)got, (unsigned long long)l->size);
        goto done;
    }
    char hex[65];
    if ((rc = cdx_sha256_file(partial, hex, err)) < 0)
        goto done;
    if (strcmp(hex, l->hex)) {
        unlink(partial); /* never promoted: a wrong file must not be resumed or read */
        rc = cdx_err_set(err, CDX_EDIGEST,
                         "%s: %s: digest mismatch: the manifest says sha256:%s, the download is sha256:%s; the file "
                         "was removed and nothing was stored", label, l->file, l->hex, hex);
        goto done;
    }
    if (rename(partial, blob) != 0)
        rc = cdx_err_set(err, CDX_EIO, "%s: cannot move into place: %s", blob, strerror(errno));
    else
        hub_event(o, CDX_HUB_EV_END, l->file, l->size, l->size, 0);
done:
    hub_http_resp_free(&r);
    free(partial);
    free(url);
    return rc;
}

int hub_resolve_ollama(const cdx_hub_env *env, const cdx_hub_ref *ref, const cdx_hub_opts *o, char **out,
                       cdx_err *err)
{
    char label[512], host[256];
    snprintf(label, sizeof label, "ollama:%s%s%s:%s", strcmp(ref->ns, "library") ? ref->ns : "",
             strcmp(ref->ns, "library") ? "/" : "", ref->name, ref->tag);
    registry_host(env->ollama_registry, host, sizeof host);
    char *root = hub_strdup_printf("%s/ollama", env->caldrix_cache);
    char *mpath = root ? hub_strdup_printf("%s/manifests/%s/%s/%s/%s", root, host, ref->ns, ref->name, ref->tag) : NULL;
    char *mdir = root ? hub_strdup_printf("%s/models/%s/%s/%s/%s", root, host, ref->ns, ref->name, ref->tag) : NULL;
    char *text = NULL, *url = NULL;
    size_t len = 0;
    hub_http_resp r = { 0 };
    layer layers[4];
    int n_layers = 0, rc;
    if (!root || !mpath || !mdir) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    if (env->offline) {
        cdx_err e2 = { 0 };
        if (cdx_file_read_all(mpath, 1u << 20, &text, &len, &e2) < 0) {
            rc = cdx_err_set(err, CDX_EOFFLINE, "%s: %s and not in the cache (%s); run caldrix pull "
                             "%s with the network first", label, hub_offline_reason(env), mpath, label);
            goto done;
        }
    } else {
        url = hub_strdup_printf("%s/v2/%s/%s/manifests/%s", env->ollama_registry, ref->ns, ref->name, ref->tag);
        if (!url) {
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto done;
        }
        if ((rc = hub_http_get(url, NULL, MANIFEST_ACCEPT, 1u << 20, &r, err)) < 0) {
            cdx_err_prefix(err, "%s", label);
            goto done;
        }
        if (r.status == 404) {
            rc = cdx_err_set(err, CDX_ENOTFOUND, "%s: the registry %s has no such model or tag (GET %s answered 404)",
                             label, env->ollama_registry, url);
            goto done;
        }
        if (r.status != 200) {
            rc = cdx_err_set(err, CDX_ENET, "%s: GET %s: the registry answered HTTP %ld", label, url, r.status);
            goto done;
        }
        text = r.body;
        len = r.n_body;
        r.body = NULL;
    }
    if ((rc = parse_manifest(label, text, len, layers, &n_layers, err)) < 0)
        goto done;

    /* sized before any download: the model layer's size, and the KV cache from its GGUF header */
    char *model_blob = hub_strdup_printf("%s/blobs/sha256-%s", root, layers[0].hex);
    if (!model_blob) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    bool have_model = hub_file_size(model_blob) == (int64_t)layers[0].size;
    free(model_blob);
    if (!env->offline && !have_model && !(o && o->skip_memory_check)) {
        cdx_hub_config cfg;
        memset(&cfg, 0, sizeof cfg);
        bool sized = false;
        char *burl = hub_strdup_printf("%s/v2/%s/%s/blobs/sha256:%s", env->ollama_registry, ref->ns, ref->name,
                                       layers[0].hex);
        hub_http_resp pr = { 0 };
        char range[48];
        snprintf(range, sizeof range, "0-%u", PEEK_BYTES - 1);
        cdx_err e2 = { 0 };
        if (burl && hub_http_get_range(burl, NULL, NULL, range, PEEK_BYTES + 1024, &pr, &e2) == 0 &&
            (pr.status == 206 || pr.status == 200))
            sized = hub_gguf_peek((const uint8_t *)pr.body, pr.n_body, &cfg);
        hub_http_resp_free(&pr);
        free(burl);
        if ((rc = hub_check_memory(label, sized ? &cfg : NULL, layers[0].size, o,
                                   "Nothing was downloaded but the file's first bytes, so nothing was spent finding "
                                   "this out.", err)) < 0)
            goto done;
    }
    uint64_t total = 0;
    for (int i = 0; i < n_layers; i++)
        total += layers[i].size;
    bool missing = false;
    for (int i = 0; i < n_layers && !missing; i++) {
        char *blob = hub_strdup_printf("%s/blobs/sha256-%s", root, layers[i].hex);
        missing = !blob || hub_file_size(blob) != (int64_t)layers[i].size;
        free(blob);
    }
    if (missing && !env->offline) {
        hub_event(o, CDX_HUB_EV_PLAN, NULL, 0, total, (uint32_t)n_layers);
        for (int i = 0; i < n_layers; i++)
            hub_event(o, CDX_HUB_EV_FILE, layers[i].file, 0, layers[i].size, 0);
    }
    for (int i = 0; i < n_layers; i++) {
        char *blob = hub_strdup_printf("%s/blobs/sha256-%s", root, layers[i].hex);
        char *link = hub_strdup_printf("%s/%s", mdir, layers[i].file);
        if (!blob || !link) {
            free(blob), free(link);
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto done;
        }
        if (env->offline) {
            if (hub_file_size(blob) != (int64_t)layers[i].size)
                rc = cdx_err_set(err, CDX_EOFFLINE, "%s: %s and %s is not complete in the cache "
                                 "(%s)", label, hub_offline_reason(env), layers[i].file, blob);
        } else {
            rc = fetch_blob(env, ref, label, &layers[i], blob, o, err);
        }
        if (rc == 0)
            rc = hub_symlink_relative(blob, link, err);
        free(blob);
        free(link);
        if (rc < 0)
            goto done;
    }
    if (!env->offline && (rc = hub_write_file(mpath, text, len, err)) < 0)
        goto done;
    if (!missing)
        hub_event(o, CDX_HUB_EV_CACHED, label, 0, total, (uint32_t)n_layers);
    *out = hub_strdup_printf("%s/model.gguf", mdir);
    rc = *out ? 0 : cdx_err_set(err, CDX_ENOMEM, "out of memory");
done:
    hub_http_resp_free(&r);
    free(text);
    free(url);
    free(root);
    free(mpath);
    free(mdir);
    return rc;
}

/* ---- a GGUF header, read only as far as the keys that size the model ---- */

typedef struct rd { const uint8_t *p; size_t n, i; bool bad; } rd;
static uint64_t rd_u(rd *r, int bytes)
{
    if (r->bad || r->n - r->i < (size_t)bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int k = 0; k < bytes; k++)
        v |= (uint64_t)r->p[r->i + k] << (8 * k);
    r->i += (size_t)bytes;
    return v;
}
static const int k_vsize[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

static bool skip_value(rd *r, uint32_t t, int depth)
{
    if (t > 12 || depth > 3)
        return false;
    if (t == 8) {
        uint64_t n = rd_u(r, 8);
        if (r->bad || n > r->n - r->i)
            return r->bad = true, false;
        r->i += (size_t)n;
        return true;
    }
    if (t == 9) {
        uint32_t et = (uint32_t)rd_u(r, 4);
        uint64_t n = rd_u(r, 8);
        if (r->bad || et > 12)
            return false;
        if (et != 8 && et != 9) {
            if (n > (r->n - r->i) / (uint64_t)k_vsize[et])
                return r->bad = true, false;
            r->i += (size_t)(n * (uint64_t)k_vsize[et]);
            return true;
        }
        for (uint64_t k = 0; k < n && !r->bad; k++)
            if (!skip_value(r, et, depth + 1))
                return false;
        return !r->bad;
    }
    rd_u(r, k_vsize[t]);
    return !r->bad;
}

bool hub_gguf_peek(const uint8_t *p, size_t n, cdx_hub_config *c)
{
    rd r = { p, n, 0, false };
    if (n < 24 || memcmp(p, "GGUF", 4))
        return false;
    r.i = 4;
    uint32_t version = (uint32_t)rd_u(&r, 4);
    if (version < 2 || version > 3)
        return false;
    rd_u(&r, 8); /* tensors */
    uint64_t n_kv = rd_u(&r, 8);
    memset(c, 0, sizeof *c);
    for (uint64_t k = 0; k < n_kv && !r.bad; k++) {
        uint64_t kl = rd_u(&r, 8);
        if (r.bad || kl > r.n - r.i || kl > 255)
            goto end; /* out of bytes: judge what was found */
        char key[256];
        memcpy(key, r.p + r.i, kl);
        key[kl] = 0;
        r.i += kl;
        uint32_t t = (uint32_t)rd_u(&r, 4);
        if (r.bad)
            goto end; /* out of bytes: judge what was found */
        const char *dot = strchr(key, '.');
        if (t == 8 && !strcmp(key, "general.architecture")) {
            uint64_t sl = rd_u(&r, 8);
            if (r.bad || sl > r.n - r.i)
                goto end; /* out of bytes: judge what was found */
            snprintf(c->arch, sizeof c->arch, "%.*s", (int)(sl < 63 ? sl : 63), (const char *)r.p + r.i);
            r.i += sl;
            continue;
        }
        if (dot && c->arch[0] && !strncmp(key, c->arch, strlen(c->arch)) && key[strlen(c->arch)] == '.' &&
            (t == 4 || t == 5 || t == 10 || t == 11)) {
            int64_t v = (int64_t)rd_u(&r, k_vsize[t]);
            const char *s = key + strlen(c->arch) + 1;
            /* the key table (caldrix/format.h) */
            if (!strcmp(s, cdx_gguf_key_suffix(CDX_GK_BLOCK_COUNT))) c->n_layer = v;
            else if (!strcmp(s, cdx_gguf_key_suffix(CDX_GK_HEAD_COUNT))) c->n_head = v;
            else if (!strcmp(s, cdx_gguf_key_suffix(CDX_GK_HEAD_COUNT_KV))) c->n_kv_head = v;
            else if (!strcmp(s, cdx_gguf_key_suffix(CDX_GK_EMBEDDING_LENGTH))) c->hidden = v;
            else if (!strcmp(s, cdx_gguf_key_suffix(CDX_GK_KEY_LENGTH))) c->head_dim = v;
            else if (!strcmp(s, cdx_gguf_key_suffix(CDX_GK_CONTEXT_LENGTH))) c->ctx_max = v;
            continue;
        }
        if (!skip_value(&r, t, 0))
            goto end; /* out of bytes: judge what was found */
    }
end:
    if (!c->n_kv_head)
        c->n_kv_head = c->n_head;
    if (!c->head_dim && c->n_head)
        c->head_dim = c->hidden / c->n_head;
    bool ok = c->arch[0] && c->n_layer > 0 && c->n_layer <= 1024 && c->n_kv_head > 0 && c->n_kv_head <= 1024 &&
              c->head_dim > 0 && c->head_dim <= 4096;
    return ok;
}
