/* The model index: a SQLite database in caldrix's cache of the Hub repos caldrix can judge, filled
 * by `caldrix models update` from the Hub's API the way huggingface_hub lists and details models,
 * and read offline by `caldrix models search / info / related / drafts`.
 *
 *   repos       one row per repo: what the Hub says of it and caldrix's verdict (the pull's rules
 *               over config.json), sizes, the tokenizer fingerprint (drafts), the adapter's LoRA
 *   rel         child -> parent, kind finetune | quantized | adapter | merge | base (base_model tags)
 *   repos_fts   FTS5 over id, tags (with the architecture) and the card summary; rowid = repos.rank,
 *               the repo's place by downloads, so a search reads matches best first and stops at its
 *               limit (re-ranked when an update is published; a repo added between updates goes last);
 *               prefix indexes for 1 to 6 characters, so a prefix term ("qwen3"*) is one doclist read
 *               lazily rather than every matching token's merged (25 ms -> 0.3 ms over 64,000 repos)
 *   stage*      an update in progress: pages detailed so far and where the listing stopped, committed
 *               page by page; published into repos/rel/repos_fts in one transaction at the end
 *
 * Nothing here reads the environment or prints; progress goes to opts->progress. */
#include "caldrix/hub.h"
#include "caldrix/model.h"
#include "hub/hub_int.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define SCHEMA_VERSION "3"
#define MAX_PAGE_BYTES (256u << 20)
#define MAX_DETAIL_BYTES (16u << 20)
#define MAX_CONFIG_BYTES (16u << 20)
#define STAGE_BATCH 25

struct cdx_index {
    sqlite3 *db;
    char *path;
};

/* What a details call asks for (huggingface_hub's ExpandModelProperty_T names). */
static const char *const k_expand[] = { "sha", "lastModified", "downloads", "likes", "gated", "tags", "config",
                                        "cardData", "safetensors", "gguf", "baseModels", "childrenModelCount",
                                        "pipeline_tag", "library_name" };
/* What a listing page asks for: enough to tell a judgeable repo and a relative, and what changed. */
static const char *const k_expand_list[] = { "sha", "lastModified", "tags", "config", "gguf" };
/* The base_model tag kinds the Hub writes (base_model:KIND:owner/name) */
static const char *const k_rel_kinds[] = { "finetune", "quantized", "adapter", "merge" };

static const char k_schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS repos(rid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, sha TEXT, last_modified TEXT,"
    " downloads INTEGER, likes INTEGER, gated INTEGER, tags TEXT, architecture TEXT, family TEXT, format TEXT,"
    " params INTEGER, dtype TEXT, weight_bytes INTEGER, mem_bytes INTEGER, moe INTEGER, verdict TEXT, refusal TEXT,"
    " tokenizer TEXT, summary TEXT, children INTEGER, lora_r INTEGER, lora_alpha REAL, files TEXT, search_tags TEXT,"
    " rank INTEGER UNIQUE);"
    "CREATE INDEX IF NOT EXISTS repos_tok ON repos(tokenizer);"
    "CREATE INDEX IF NOT EXISTS repos_dl ON repos(downloads);"
    "CREATE TABLE IF NOT EXISTS rel(child TEXT NOT NULL, parent TEXT NOT NULL, kind TEXT NOT NULL,"
    " PRIMARY KEY(child, parent, kind)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS rel_parent ON rel(parent, kind);"
    "CREATE VIRTUAL TABLE IF NOT EXISTS repos_fts USING fts5(id, tags, summary, prefix='1 2 3 4 5 6');"
    "CREATE TABLE IF NOT EXISTS stage(id TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS stage_maybe(id TEXT PRIMARY KEY, bases TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS stage_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    /* every id a whole listing (--full, no search or filter) named: what is not in it was deleted */
    "CREATE TABLE IF NOT EXISTS stage_seen(id TEXT PRIMARY KEY) WITHOUT ROWID;";

/* ---- SQLite helpers ---- */

static int db_error(cdx_index *ix, int src, const char *what, cdx_err *err)
{
    int code = src == SQLITE_CORRUPT || src == SQLITE_NOTADB ? CDX_EFORMAT
               : src == SQLITE_NOMEM                          ? CDX_ENOMEM
                                                              : CDX_EIO;
    if (code == CDX_EFORMAT)
        return cdx_err_set(err, code, "the model index %s is corrupt or not a caldrix index (%s: %s); remove it and "
                           "run caldrix models update", ix->path, what, sqlite3_errmsg(ix->db));
    return cdx_err_set(err, code, "the model index %s: %s: %s", ix->path, what, sqlite3_errmsg(ix->db));
}

static int exec(cdx_index *ix, const char *sql, cdx_err *err)
{
    int rc = sqlite3_exec(ix->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : db_error(ix, rc, sql, err);
}

static int prep(cdx_index *ix, const char *sql, sqlite3_stmt **st, cdx_err *err)
{
    int rc = sqlite3_prepare_v2(ix->db, sql, -1, st, NULL);
    return rc == SQLITE_OK ? 0 : db_error(ix, rc, "prepare", err);
}

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

/* A value of meta or stage_meta (heap; NULL when absent). */
static char *meta_get(cdx_index *ix, const char *table, const char *key)
{
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT value FROM %s WHERE key=?", table);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL) != SQLITE_OK)
        return NULL;
    bind_text(st, 1, key);
    char *v = NULL;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        v = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return v;
}

static int meta_set(cdx_index *ix, const char *table, const char *key, const char *value, cdx_err *err)
{
    char sql[128];
    snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO %s(key, value) VALUES(?, ?)", table);
    sqlite3_stmt *st;
    int rc = prep(ix, sql, &st, err);
    if (rc < 0)
        return rc;
    bind_text(st, 1, key);
    bind_text(st, 2, value ? value : "");
    int s = sqlite3_step(st);
    sqlite3_finalize(st);
    return s == SQLITE_DONE ? 0 : db_error(ix, s, "write", err);
}

/* ---- open ---- */

char *cdx_index_default_path(const cdx_hub_env *env)
{
    return hub_strdup_printf("%s/models-index.sqlite", env->caldrix_cache);
}

int cdx_index_open(const char *path, bool write, cdx_index **out, cdx_err *err)
{
    *out = NULL;
    if (!write && access(path, F_OK) != 0)
        return cdx_err_set(err, CDX_ENOTFOUND, "the model index %s does not exist yet: run caldrix models update "
                           "(it lists the Hub's models once, then only what changed)", path);
    if (write && hub_mkdirs_parent(path, err) < 0)
        return err ? err->code : CDX_EIO;
    cdx_index *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->path = strdup(path))) {
        free(ix);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    int flags = write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
    int rc = sqlite3_open_v2(path, &ix->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        rc = db_error(ix, rc, "open", err);
        cdx_index_close(ix);
        return rc;
    }
    sqlite3_busy_timeout(ix->db, 10000);
    sqlite3_extended_result_codes(ix->db, 0);
    /* the first read of the schema tells a database from anything else */
    rc = exec(ix, "SELECT count(*) FROM sqlite_schema", err);
    if (rc == 0 && write)
        rc = exec(ix, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", err);
    if (rc == 0 && write)
        rc = exec(ix, k_schema, err);
    char *ver = rc == 0 ? meta_get(ix, "meta", "schema") : NULL;
    if (rc == 0 && !ver && write)
        rc = meta_set(ix, "meta", "schema", SCHEMA_VERSION, err);
    else if (rc == 0 && (!ver || strcmp(ver, SCHEMA_VERSION)))
        rc = cdx_err_set(err, CDX_EFORMAT, "the model index %s is not a caldrix index of schema %s (it says %s); "
                         "remove it and run caldrix models update", path, SCHEMA_VERSION, ver ? ver : "nothing");
    free(ver);
    if (rc < 0) {
        cdx_index_close(ix);
        return rc;
    }
    *out = ix;
    return 0;
}

void cdx_index_close(cdx_index *ix)
{
    if (!ix)
        return;
    sqlite3_close(ix->db);
    free(ix->path);
    free(ix);
}

/* ---- floats ---- */

const char *cdx_f32_shortest(float f, char *buf, size_t cap)
{
    if (!isfinite(f)) {
        snprintf(buf, cap, "%s", isnan(f) ? "nan" : f > 0 ? "inf" : "-inf");
        return buf;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
    return buf;
}

/* A float32 as the double of its shortest decimal (see cdx_index_search). */
static json_t *json_f32(double stored)
{
    char b[32];
    return json_real(strtod(cdx_f32_shortest((float)stored, b, sizeof b), NULL));
}

/* ---- one repo's record, from the Hub ---- */

typedef struct upd {
    cdx_index *ix;
    const cdx_index_update_opts *o;
    cdx_hub_env env;           /* endpoint and token only, for hub_api_info */
    char *host;                /* scheme://host:port of the endpoint */
    char mark[600];            /* the meta key of this listing's newest lastModified: "newest_modified", or
                                * with the search and filter it was made with (a filtered listing does
                                * not move the whole listing's mark) */
    cdx_index_stats *st;
    bool whole;                /* a full listing of every repo (--full, no search or filter): repos it
                                * does not name are gone from the Hub and leave the index */
} upd;

static void progress(const upd *u, const char *fmt, ...) CDX_PRINTF(2, 3);
static void progress(const upd *u, const char *fmt, ...)
{
    if (!u->o->progress)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    u->o->progress(line, u->o->user);
}

static bool ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* GET a small JSON answer from the Hub itself (no redirect followed); the parsed body or an error. */
static int get_json(upd *u, const char *url, const char *what, size_t max, json_t **out, long *status, cdx_err *err)
{
    *out = NULL;
    hub_http_resp r;
    int rc = hub_http_get_here(url, u->o->token, max, &r, err);
    if (status)
        *status = r.status;
    if (rc < 0) {
        hub_http_resp_free(&r);
        return rc;
    }
    if (r.status != 200) {
        if (status && r.status >= 300 && r.status < 400) {
            hub_http_resp_free(&r);
            return 0; /* the caller says what a redirect means */
        }
        rc = r.status >= 300 && r.status < 400
                 ? cdx_err_set(err, CDX_ENET, "%s: %s: the Hub answered %ld with a redirect to %s; the index follows "
                               "no redirect", what, url, r.status, r.location[0] ? r.location : "(no Location)")
                 : hub_http_error(&u->env, what, url, &r, err);
        hub_http_resp_free(&r);
        return rc;
    }
    json_error_t je;
    *out = json_loadb(r.body, r.n_body, 0, &je);
    if (!*out)
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s: the answer is not JSON (line %d, column %d: %s)", what, url,
                         je.line, je.column, je.text);
    hub_http_resp_free(&r);
    return rc;
}

static const char *jstr(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

/* Parameters from config.json's dimensions, when the Hub gives no count. */
static uint64_t params_estimate(const cdx_hub_config *c)
{
    if (c->hidden <= 0 || c->n_layer <= 0)
        return 0;
    double h = (double)c->hidden, hd = (double)(c->head_dim ? c->head_dim : c->hidden / (c->n_head ? c->n_head : 1));
    double attn = h * hd * (2.0 * (double)c->n_head + 2.0 * (double)c->n_kv_head);
    double mlp = c->n_expert > 0 ? (double)c->n_expert * 3.0 * h * (double)c->moe_ffn : 3.0 * h * (double)c->ffn;
    double emb = (double)c->vocab * h * (c->tied ? 1.0 : 2.0);
    return (uint64_t)(emb + (double)c->n_layer * (attn + mlp));
}

/* The base_model relations of a tag list: [{"repo", "relation"}], ids checked. */
static json_t *bases_of(json_t *tags)
{
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tags, i, t) {
        const char *s = json_string_value(t);
        if (!s || strncmp(s, "base_model:", 11))
            continue;
        const char *rest = s + 11, *kind = "base";
        for (size_t k = 0; k < sizeof k_rel_kinds / sizeof *k_rel_kinds; k++) {
            size_t n = strlen(k_rel_kinds[k]);
            if (!strncmp(rest, k_rel_kinds[k], n) && rest[n] == ':') {
                kind = k_rel_kinds[k];
                rest += n + 1;
            }
        }
        if (!hub_repo_id_ok(rest))
            continue;
        /* "base_model:X" beside "base_model:quantized:X": the kinded one says more */
        size_t j;
        json_t *e;
        bool dup = false;
        json_array_foreach(out, j, e) {
            if (strcmp(jstr(e, "repo"), rest))
                continue;
            dup = true;
            if (!strcmp(jstr(e, "relation"), "base"))
                json_object_set_new(e, "relation", json_string(kind));
        }
        if (!dup)
            json_array_append_new(out, json_pack("{s:s,s:s}", "repo", rest, "relation", kind));
    }
    return out;
}

/* The architecture a listing or details entry names, and whether the loader's tables hold it. */
static bool judgeable(json_t *e, const char **arch, bool *gguf)
{
    json_t *archs = json_object_get(json_object_get(e, "config"), "architectures");
    const char *a = json_string_value(json_array_get(archs, 0));
    cdx_arch x;
    *arch = a;
    *gguf = false;
    if (a && json_array_size(archs) == 1 && cdx_model_arch_of(a, false, false, &x))
        return true;
    const char *g = jstr(json_object_get(e, "gguf"), "architecture");
    if (g && (cdx_model_arch_of(g, true, false, &x) || cdx_model_arch_of(g, true, true, &x))) {
        *arch = g;
        *gguf = true;
        return true;
    }
    if (!a && g)
        *arch = g, *gguf = true;
    return false;
}

static void summary_add(char *buf, size_t cap, json_t *v)
{
    size_t n = strlen(buf);
    if (json_is_string(v)) {
        snprintf(buf + n, cap - n, "%s%s", n ? " " : "", json_string_value(v));
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) summary_add(buf, cap, x);
    }
}

/* Details of one repo into a record (the staged form, which put_record stores). */
static int fetch_record(upd *u, const char *id, json_t **out, cdx_err *err)
{
    *out = NULL;
    char q[1024] = "";
    for (size_t i = 0; i < sizeof k_expand / sizeof *k_expand; i++)
        snprintf(q + strlen(q), sizeof q - strlen(q), "%sexpand%%5B%%5D=%s", i ? "&" : "", k_expand[i]);
    char *url = hub_strdup_printf("%s/api/models/%s?%s", u->o->endpoint, id, q);
    json_t *d = NULL;
    hub_sib *sibs = NULL;
    size_t n_sibs = 0;
    int rc = url ? get_json(u, url, id, MAX_DETAIL_BYTES, &d, NULL, err) : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (rc < 0)
        goto done;
    const char *sha = jstr(d, "sha");
    if (!json_is_object(d) || !sha || strlen(sha) != 40) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s: the answer has no 40-hex \"sha\"", id, url);
        goto done;
    }
    char commit[41];
    if ((rc = hub_api_info(&u->env, id, sha, false, commit, &sibs, &n_sibs, err)) < 0)
        goto done;

    json_t *tags = json_object_get(d, "tags");
    if (!json_is_array(tags))
        tags = NULL;
    const char *arch = NULL;
    bool gguf_arch = false;
    judgeable(d, &arch, &gguf_arch);
    bool has_cfg = false, has_adapter = false, has_st = false, has_gguf = false;
    uint64_t st_bytes = 0, gguf_min = 0;
    const char *tok = NULL;
    char tok_fp[128] = "";
    json_t *files = json_array();
    for (size_t i = 0; i < n_sibs; i++) {
        const hub_sib *s = &sibs[i];
        json_t *f = json_pack("{s:s,s:I}", "name", s->name, "size", (json_int_t)s->size);
        json_object_set_new(f, "sha256", s->sha256[0] ? json_string(s->sha256) : json_null());
        json_array_append_new(files, f);
        has_cfg |= !strcmp(s->name, "config.json");
        has_adapter |= !strcmp(s->name, "adapter_config.json");
        if (ends_with(s->name, ".safetensors") && strcmp(s->name, "adapter_model.safetensors"))
            has_st = true, st_bytes += s->size;
        if (ends_with(s->name, ".gguf")) {
            has_gguf = true;
            if (!gguf_min || s->size < gguf_min)
                gguf_min = s->size;
        }
        /* the tokenizer fingerprint: the content id of tokenizer.json, else of tokenizer.model */
        if ((!strcmp(s->name, "tokenizer.json") || (!strcmp(s->name, "tokenizer.model") && !tok)) &&
            (s->sha256[0] || s->blob_id[0])) {
            tok = s->name;
            snprintf(tok_fp, sizeof tok_fp, "%s:%s", s->sha256[0] ? "sha256" : "git", s->sha256[0] ? s->sha256 : s->blob_id);
        }
    }
    const char *format = has_st ? "safetensors" : has_gguf ? "gguf" : has_adapter ? "adapter" : "other";

    cdx_hub_config cfg;
    memset(&cfg, 0, sizeof cfg);
    bool cfg_read = false;
    char verdict[16] = "refused", refusal[1024] = "";
    cdx_err e2 = { 0 };
    if (!strcmp(format, "gguf")) {
        cdx_arch x;
        if (arch && gguf_arch && (cdx_model_arch_of(arch, true, false, &x) || cdx_model_arch_of(arch, true, true, &x)))
            snprintf(verdict, sizeof verdict, "runs");
        else {
            char list[256];
            cdx_model_gguf_archs(list, sizeof list);
            snprintf(refusal, sizeof refusal, "%s: GGUF architecture \"%s\" is not one the loader maps (%s)", id,
                     arch ? arch : "(unknown)", list);
        }
    } else if (hub_listing_check(sibs, n_sibs, id, &e2) < 0) {
        snprintf(refusal, sizeof refusal, "%s", e2.msg);
    }
    if (has_cfg) {
        /* config.json at the commit, from the Hub itself, judged by the pull's rules */
        char *curl = hub_strdup_printf("%s/%s/resolve/%s/config.json", u->o->endpoint, id, sha);
        hub_http_resp r;
        memset(&r, 0, sizeof r);
        rc = curl ? hub_http_get_here(curl, u->o->token, MAX_CONFIG_BYTES, &r, err)
                  : cdx_err_set(err, CDX_ENOMEM, "out of memory");
        if (rc == 0 && r.status == 200) {
            char name[300];
            snprintf(name, sizeof name, "%s: config.json", id);
            cdx_hf_config *hc = malloc(sizeof *hc);
            e2 = (cdx_err){ 0 };
            int crc = hc ? hub_config_read(r.body, r.n_body, name, &cfg, hc, &e2) : CDX_ENOMEM;
            free(hc);
            cfg_read = true;
            if (crc < 0 && !refusal[0] && strcmp(format, "gguf"))
                snprintf(refusal, sizeof refusal, "%s", e2.msg);
            if (cfg.arch[0] && strcmp(format, "gguf"))
                arch = NULL; /* the record's architecture is config.json's (cfg.arch) */
        } else if (rc == 0 && r.status >= 300 && r.status < 400 && !refusal[0] && strcmp(format, "gguf")) {
            snprintf(refusal, sizeof refusal, "%s: config.json is stored outside the Hub's git (a redirect to %.300s); "
                     "the index follows no redirect, so it is not judged", id, r.location);
            snprintf(verdict, sizeof verdict, "unknown");
        } else if (rc == 0 && (r.status == 401 || r.status == 403) && strcmp(format, "gguf")) {
            /* a gated repo's files need its terms accepted and a token: listed, not judged */
            snprintf(refusal, sizeof refusal, "%s: config.json: the Hub answered %ld (%s): a gated repo, judged once "
                     "its terms are accepted and HF_TOKEN is set", id, r.status, r.error_code[0] ? r.error_code : "no code");
            snprintf(verdict, sizeof verdict, "unknown");
        } else if (rc == 0 && r.status != 200 && r.status != 401 && r.status != 403) {
            rc = hub_http_error(&u->env, id, "config.json", &r, err);
        }
        hub_http_resp_free(&r);
        free(curl);
        if (rc < 0)
            goto done;
    }
    if (!refusal[0] && strcmp(format, "gguf") && strcmp(verdict, "unknown"))
        snprintf(verdict, sizeof verdict, "runs");
    if (!strcmp(verdict, "runs"))
        refusal[0] = 0;

    /* an adapter: its LoRA rank and alpha (alpha held at 32-bit precision, as PEFT's float) */
    json_t *lora = json_null();
    if (has_adapter) {
        char *aurl = hub_strdup_printf("%s/%s/resolve/%s/adapter_config.json", u->o->endpoint, id, sha);
        json_t *ac = NULL;
        long status = 0;
        cdx_err e3 = { 0 };
        if (aurl && get_json(u, aurl, id, MAX_CONFIG_BYTES, &ac, &status, &e3) == 0 && json_is_object(ac)) {
            json_t *r = json_object_get(ac, "r"), *al = json_object_get(ac, "lora_alpha");
            json_decref(lora);
            lora = json_object();
            if (json_is_integer(r))
                json_object_set_new(lora, "r", json_integer(json_integer_value(r)));
            if (json_is_number(al))
                json_object_set_new(lora, "alpha", json_real((double)(float)json_number_value(al)));
            const char *b = jstr(ac, "base_model_name_or_path");
            if (b)
                json_object_set_new(lora, "base", json_string(b));
        }
        json_decref(ac);
        free(aurl);
    }

    /* parameters: the Hub's count from the safetensors or GGUF header, else from the dimensions */
    json_t *stj = json_object_get(d, "safetensors"), *gj = json_object_get(d, "gguf");
    uint64_t params = 0;
    if (json_is_integer(json_object_get(stj, "total")))
        params = (uint64_t)json_integer_value(json_object_get(stj, "total"));
    else if (json_is_integer(json_object_get(gj, "total")))
        params = (uint64_t)json_integer_value(json_object_get(gj, "total"));
    else if (cfg_read)
        params = params_estimate(&cfg);
    char dtype[32] = "";
    json_t *pp = json_object_get(stj, "parameters");
    if (json_is_object(pp)) {
        const char *k, *best = NULL;
        json_t *v;
        json_int_t most = -1;
        json_object_foreach(pp, k, v) if (json_integer_value(v) > most) most = json_integer_value(v), best = k;
        if (best)
            snprintf(dtype, sizeof dtype, "%s", best);
    } else if (cfg.dtype[0]) {
        snprintf(dtype, sizeof dtype, "%s", cfg.dtype);
    }
    /* memory: the weights a pull would read (every model *.safetensors, or the smallest GGUF file) and,
     * from config.json, the KV cache at the default context as the default compute type holds it */
    uint64_t weight_bytes = has_st ? st_bytes : gguf_min, kv = 0;
    if (cfg_read && has_st) {
        cfg.kv_value_bytes = cdx_hub_kv_value_bytes(&cfg, 0);
        kv = cdx_hub_kv_bytes(&cfg, 0);
    }
    const char *family = NULL;
    cdx_arch x;
    const char *rec_arch = cfg.arch[0] && strcmp(format, "gguf") ? cfg.arch : arch;
    if (rec_arch && cdx_model_arch_of(rec_arch, gguf_arch && !strcmp(format, "gguf"), cfg.n_expert > 0, &x))
        family = cdx_model_arch_family(x);
    else if (cfg.model_type[0])
        family = cfg.model_type;

    char summary[2048] = "";
    json_t *card = json_object_get(d, "cardData");
    static const char *const k_card[] = { "pipeline_tag", "license", "language", "datasets", "tags", "base_model",
                                          "model_name" };
    summary_add(summary, sizeof summary, json_object_get(d, "pipeline_tag"));
    summary_add(summary, sizeof summary, json_object_get(d, "library_name"));
    for (size_t i = 0; i < sizeof k_card / sizeof *k_card; i++)
        summary_add(summary, sizeof summary, json_object_get(card, k_card[i]));

    json_t *gated = json_object_get(d, "gated");
    json_t *rec = json_pack("{s:s,s:s,s:I,s:I,s:b,s:O,s:s,s:I,s:I,s:I,s:b,s:s,s:s,s:I}",
                            "id", id, "sha", sha,
                            "downloads", (json_int_t)json_integer_value(json_object_get(d, "downloads")),
                            "likes", (json_int_t)json_integer_value(json_object_get(d, "likes")),
                            "gated", json_is_string(gated) || json_is_true(gated),
                            "tags", tags ? tags : json_array(),
                            "format", format, "params", (json_int_t)params,
                            "weight_bytes", (json_int_t)weight_bytes, "mem_bytes", (json_int_t)(weight_bytes + kv),
                            "moe", cfg.n_expert > 0, "verdict", verdict, "summary", summary,
                            "children", (json_int_t)json_integer_value(json_object_get(d, "childrenModelCount")));
    if (!tags)
        json_decref(json_object_get(rec, "tags")); /* the s:O took a reference of a fresh array */
    json_object_set_new(rec, "last_modified", jstr(d, "lastModified") ? json_string(jstr(d, "lastModified")) : json_null());
    json_object_set_new(rec, "architecture", rec_arch ? json_string(rec_arch) : json_null());
    json_object_set_new(rec, "family", family ? json_string(family) : json_null());
    json_object_set_new(rec, "dtype", dtype[0] ? json_string(dtype) : json_null());
    json_object_set_new(rec, "refusal", refusal[0] ? json_string(refusal) : json_null());
    json_object_set_new(rec, "tokenizer", tok_fp[0] ? json_string(tok_fp) : json_null());
    json_object_set_new(rec, "lora", lora);
    json_object_set_new(rec, "files", files);
    json_object_set_new(rec, "bases", bases_of(tags));
    if (!rec) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        goto done;
    }
    *out = rec;
    rc = 0;
done:
    hub_sibs_free(sibs, n_sibs);
    json_decref(d);
    free(url);
    return rc;
}

/* ---- storing a record ---- */

static int put_record(cdx_index *ix, json_t *rec, cdx_err *err)
{
    static const char sql[] =
        "INSERT INTO repos(id, sha, last_modified, downloads, likes, gated, tags, architecture, family, format, params,"
        " dtype, weight_bytes, mem_bytes, moe, verdict, refusal, tokenizer, summary, children, lora_r, lora_alpha, files)"
        " VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23)"
        " ON CONFLICT(id) DO UPDATE SET sha=?2, last_modified=?3, downloads=?4, likes=?5, gated=?6, tags=?7,"
        " architecture=?8, family=?9, format=?10, params=?11, dtype=?12, weight_bytes=?13, mem_bytes=?14, moe=?15,"
        " verdict=?16, refusal=?17, tokenizer=?18, summary=?19, children=?20, lora_r=?21, lora_alpha=?22, files=?23"
        " RETURNING rid";
    const char *id = jstr(rec, "id");
    if (!id || !hub_repo_id_ok(id))
        return cdx_err_set(err, CDX_EFORMAT, "a staged record has no valid repo id");
    sqlite3_stmt *st;
    int rc = prep(ix, sql, &st, err);
    if (rc < 0)
        return rc;
    char *tags = json_dumps(json_object_get(rec, "tags"), JSON_COMPACT);
    char *files = json_dumps(json_object_get(rec, "files"), JSON_COMPACT);
    json_t *lora = json_object_get(rec, "lora");
    bind_text(st, 1, id);
    bind_text(st, 2, jstr(rec, "sha"));
    bind_text(st, 3, jstr(rec, "last_modified"));
    sqlite3_bind_int64(st, 4, json_integer_value(json_object_get(rec, "downloads")));
    sqlite3_bind_int64(st, 5, json_integer_value(json_object_get(rec, "likes")));
    sqlite3_bind_int(st, 6, json_is_true(json_object_get(rec, "gated")));
    bind_text(st, 7, tags);
    bind_text(st, 8, jstr(rec, "architecture"));
    bind_text(st, 9, jstr(rec, "family"));
    bind_text(st, 10, jstr(rec, "format"));
    sqlite3_bind_int64(st, 11, json_integer_value(json_object_get(rec, "params")));
    bind_text(st, 12, jstr(rec, "dtype"));
    sqlite3_bind_int64(st, 13, json_integer_value(json_object_get(rec, "weight_bytes")));
    sqlite3_bind_int64(st, 14, json_integer_value(json_object_get(rec, "mem_bytes")));
    sqlite3_bind_int(st, 15, json_is_true(json_object_get(rec, "moe")));
    bind_text(st, 16, jstr(rec, "verdict"));
    bind_text(st, 17, jstr(rec, "refusal"));
    bind_text(st, 18, jstr(rec, "tokenizer"));
    bind_text(st, 19, jstr(rec, "summary"));
    sqlite3_bind_int64(st, 20, json_integer_value(json_object_get(rec, "children")));
    if (json_is_integer(json_object_get(lora, "r")))
        sqlite3_bind_int64(st, 21, json_integer_value(json_object_get(lora, "r")));
    if (json_is_number(json_object_get(lora, "alpha")))
        sqlite3_bind_double(st, 22, (double)(float)json_number_value(json_object_get(lora, "alpha")));
    bind_text(st, 23, files);
    int s = sqlite3_step(st);
    sqlite3_int64 rid = s == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    free(files);
    if (s != SQLITE_ROW) {
        free(tags);
        return db_error(ix, s, "store a repo", err);
    }
    /* the searchable text: id, tags with the architecture and family, the card; kept in the row for
     * the re-ranking, which rebuilds repos_fts */
    char *fts_tags = hub_strdup_printf("%s %s %s %s", tags ? tags : "", jstr(rec, "architecture") ? jstr(rec, "architecture") : "",
                                       jstr(rec, "family") ? jstr(rec, "family") : "", jstr(rec, "format"));
    free(tags);
    sqlite3_stmt *f1 = NULL, *f2 = NULL, *d = NULL, *r = NULL, *k = NULL;
    rc = 0;
    if ((rc = prep(ix, "UPDATE repos SET search_tags=?2, rank=coalesce(rank, (SELECT coalesce(max(rank), 0) + 1 FROM "
                   "repos)) WHERE rid=?1 RETURNING rank", &k, err)) == 0 &&
        (rc = prep(ix, "DELETE FROM repos_fts WHERE rowid=?", &f1, err)) == 0 &&
        (rc = prep(ix, "INSERT INTO repos_fts(rowid, id, tags, summary) VALUES(?,?,?,?)", &f2, err)) == 0 &&
        (rc = prep(ix, "DELETE FROM rel WHERE child=?", &d, err)) == 0 &&
        (rc = prep(ix, "INSERT OR IGNORE INTO rel(child, parent, kind) VALUES(?,?,?)", &r, err)) == 0) {
        sqlite3_bind_int64(k, 1, rid);
        bind_text(k, 2, fts_tags);
        s = sqlite3_step(k);
        sqlite3_int64 rank = s == SQLITE_ROW ? sqlite3_column_int64(k, 0) : 0;
        if (s == SQLITE_ROW)
            s = sqlite3_step(k);
        if (s != SQLITE_DONE)
            rc = db_error(ix, s, "rank a repo", err);
        sqlite3_bind_int64(f1, 1, rank);
        sqlite3_bind_int64(f2, 1, rank);
        bind_text(f2, 2, id);
        bind_text(f2, 3, fts_tags);
        bind_text(f2, 4, jstr(rec, "summary"));
        bind_text(d, 1, id);
        if (rc == 0 && ((s = sqlite3_step(f1)) != SQLITE_DONE || (s = sqlite3_step(f2)) != SQLITE_DONE ||
                        (s = sqlite3_step(d)) != SQLITE_DONE))
            rc = db_error(ix, s, "store a repo", err);
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(rec, "bases"), i, b) {
            if (rc < 0)
                break;
            sqlite3_reset(r);
            bind_text(r, 1, id);
            bind_text(r, 2, jstr(b, "repo"));
            bind_text(r, 3, jstr(b, "relation"));
            if ((s = sqlite3_step(r)) != SQLITE_DONE)
                rc = db_error(ix, s, "store a relation", err);
        }
    }
    sqlite3_finalize(f1);
    sqlite3_finalize(f2);
    sqlite3_finalize(d);
    sqlite3_finalize(r);
    sqlite3_finalize(k);
    free(fts_tags);
    return rc;
}

/* Every repo's rank by downloads (then id), and repos_fts rebuilt in that rowid order. */
static int rerank(cdx_index *ix, cdx_err *err)
{
    return exec(ix,
                "UPDATE repos SET rank=NULL;"
                "UPDATE repos SET rank=o.rk FROM (SELECT rid, row_number() OVER (ORDER BY downloads DESC, id) AS rk "
                "FROM repos) AS o WHERE o.rid=repos.rid;"
                "DELETE FROM repos_fts;"
                "INSERT INTO repos_fts(rowid, id, tags, summary) SELECT rank, id, search_tags, summary FROM repos "
                "ORDER BY rank;"
                "INSERT INTO repos_fts(repos_fts) VALUES('optimize');", err);
}

static int stage_put(cdx_index *ix, json_t *rec, cdx_err *err)
{
    char *text = json_dumps(rec, JSON_COMPACT);
    sqlite3_stmt *st;
    int rc = text ? prep(ix, "INSERT OR REPLACE INTO stage(id, record) VALUES(?, ?)", &st, err)
                  : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (rc == 0) {
        bind_text(st, 1, jstr(rec, "id"));
        bind_text(st, 2, text);
        int s = sqlite3_step(st);
        sqlite3_finalize(st);
        if (s != SQLITE_DONE)
            rc = db_error(ix, s, "stage a repo", err);
    }
    free(text);
    return rc;
}

/* ---- the update ---- */

/* "scheme://host[:port]" of a URL (heap), or NULL */
static char *origin_of(const char *url)
{
    const char *p = strstr(url, "://");
    if (!p)
        return NULL;
    const char *e = strchr(p + 3, '/');
    return hub_strdup_printf("%.*s", (int)(e ? (size_t)(e - url) : strlen(url)), url);
}

/* The rel="next" URL of a Link header (heap), or NULL. */
static char *link_next(const char *link)
{
    const char *p = link;
    while (p && *p) {
        const char *lt = strchr(p, '<'), *gt = lt ? strchr(lt, '>') : NULL;
        if (!gt)
            return NULL;
        const char *end = strchr(gt, ',');
        size_t n = end ? (size_t)(end - gt) : strlen(gt);
        char params[512];
        snprintf(params, sizeof params, "%.*s", (int)(n < sizeof params ? n : sizeof params - 1), gt);
        if (strstr(params, "rel=\"next\"") || strstr(params, "rel=next"))
            return hub_strdup_printf("%.*s", (int)(gt - lt - 1), lt + 1);
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

/* Whether id is (or is being) in the index with this commit. */
static bool known_sha(cdx_index *ix, const char *id, const char *sha)
{
    sqlite3_stmt *st;
    bool same = false;
    if (sqlite3_prepare_v2(ix->db, "SELECT 1 FROM repos WHERE id=?1 AND sha=?2 UNION ALL "
                           "SELECT 1 FROM stage WHERE id=?1 AND json_extract(record, '$.sha')=?2", -1, &st, NULL) == SQLITE_OK) {
        bind_text(st, 1, id);
        bind_text(st, 2, sha);
        same = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    return same;
}

static bool known_id(cdx_index *ix, const char *id)
{
    sqlite3_stmt *st;
    bool yes = false;
    if (sqlite3_prepare_v2(ix->db, "SELECT 1 FROM repos WHERE id=?1 UNION ALL SELECT 1 FROM stage WHERE id=?1", -1, &st,
                           NULL) == SQLITE_OK) {
        bind_text(st, 1, id);
        yes = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    return yes;
}

static char *first_url(const upd *u)
{
    char q[1024] = "";
    for (size_t i = 0; i < sizeof k_expand_list / sizeof *k_expand_list; i++)
        snprintf(q + strlen(q), sizeof q - strlen(q), "&expand%%5B%%5D=%s", k_expand_list[i]);
    char *search = u->o->search ? hub_url_quote(u->o->search, false) : NULL;
    char *filter = u->o->filter ? hub_url_quote(u->o->filter, false) : NULL;
    char *url = hub_strdup_printf("%s/api/models?sort=lastModified&direction=-1&limit=%u%s%s%s%s%s", u->o->endpoint,
                                  u->o->page_size ? u->o->page_size : 1000, search ? "&search=" : "",
                                  search ? search : "", filter ? "&filter=" : "", filter ? filter : "", q);
    free(search);
    free(filter);
    return url;
}

/* One listing page: details of what is judgeable and changed, relatives set aside; staged in one
 * transaction with the next page's URL. *next: heap or NULL at the end (or at the last seen). */
static int do_page(upd *u, const char *url, const char *stop_at, char **newest, char **next, cdx_err *err)
{
    *next = NULL;
    hub_http_resp r;
    int rc = hub_http_get_here(url, u->o->token, MAX_PAGE_BYTES, &r, err);
    if (rc < 0) {
        hub_http_resp_free(&r);
        return rc;
    }
    u->st->pages++;
    if (r.status != 200) {
        rc = r.status >= 300 && r.status < 400
                 ? cdx_err_set(err, CDX_ENET, "page %llu of the listing, %s: the Hub answered %ld (a redirect); the "
                               "index follows no redirect", (unsigned long long)u->st->pages, url, r.status)
                 : hub_http_error(&u->env, "the model listing", url, &r, err);
        hub_http_resp_free(&r);
        return rc;
    }
    json_error_t je;
    json_t *page = json_loadb(r.body, r.n_body, 0, &je);
    if (!json_is_array(page)) {
        rc = page ? cdx_err_set(err, CDX_EFORMAT, "page %llu of the listing, %s: expected a JSON array of models",
                                (unsigned long long)u->st->pages, url)
                  : cdx_err_set(err, CDX_EFORMAT, "page %llu of the listing, %s: not JSON (line %d, column %d: %s)",
                                (unsigned long long)u->st->pages, url, je.line, je.column, je.text);
        json_decref(page);
        hub_http_resp_free(&r);
        return rc;
    }
    char *nx = link_next(r.link);
    hub_http_resp_free(&r);
    bool stop = false;
    json_t *recs = json_array();
    json_t *maybe = json_array();
    json_t *seen = json_array();
    size_t i, n_detail = 0;
    json_t *e;
    json_array_foreach(page, i, e) {
        const char *id = jstr(e, "id"), *lm = jstr(e, "lastModified"), *sha = jstr(e, "sha");
        if (stop_at && lm && strcmp(lm, stop_at) < 0) {
            stop = true; /* sorted newest first: the rest the index has seen */
            break;
        }
        u->st->listed++;
        if (!id || !hub_repo_id_ok(id)) {
            if (u->st->bad_ids++ < 5)
                progress(u, "skipped a listing entry whose id is not a repo id: \"%.120s\"", id ? id : "(none)");
            continue;
        }
        if (u->whole)
            json_array_append_new(seen, json_string(id));
        if (lm && (!*newest || strcmp(lm, *newest) > 0)) {
            free(*newest);
            *newest = strdup(lm);
        }
        const char *arch;
        bool g;
        bool judge = judgeable(e, &arch, &g);
        json_t *bases = bases_of(json_object_get(e, "tags"));
        if (!judge && !json_array_size(bases)) {
            json_decref(bases);
            continue;
        }
        if (sha && known_sha(u->ix, id, sha)) {
            u->st->unchanged++;
            json_decref(bases);
            continue;
        }
        if (!judge) {
            json_array_append_new(maybe, json_pack("{s:s,s:o}", "id", id, "bases", bases));
            continue;
        }
        json_decref(bases);
        u->st->candidates++;
        json_t *rec;
        if ((rc = fetch_record(u, id, &rec, err)) == CDX_ENOTFOUND || rc == CDX_EAUTH) {
            progress(u, "skipped %s: %s", id, err ? err->msg : "");
            rc = 0;
            continue;
        }
        if (rc < 0)
            break;
        json_array_append_new(recs, rec);
        if (++n_detail % 100 == 0)
            progress(u, "page %llu: %zu repos detailed", (unsigned long long)u->st->pages, n_detail);
    }
    json_decref(page);
    if (rc == 0 && nx && !stop) {
        /* only the Hub's own paging, on the same scheme, host and port, and never a page twice */
        char *o = origin_of(nx);
        if (!o || strcmp(o, u->host) || strncmp(nx + strlen(o), "/api/models?", 12))
            rc = cdx_err_set(err, CDX_ENET, "page %llu of the listing: its Link rel=\"next\" is %s, not a listing "
                             "page of %s; refused", (unsigned long long)u->st->pages, nx, u->host);
        free(o);
    }
    if (rc == 0) {
        if ((rc = exec(u->ix, "BEGIN IMMEDIATE", err)) == 0) {
            json_array_foreach(recs, i, e) if (rc == 0) rc = stage_put(u->ix, e, err);
            json_array_foreach(maybe, i, e) {
                if (rc < 0)
                    break;
                sqlite3_stmt *st;
                char *b = json_dumps(json_object_get(e, "bases"), JSON_COMPACT);
                if ((rc = prep(u->ix, "INSERT OR REPLACE INTO stage_maybe(id, bases) VALUES(?, ?)", &st, err)) == 0) {
                    bind_text(st, 1, jstr(e, "id"));
                    bind_text(st, 2, b);
                    int s = sqlite3_step(st);
                    sqlite3_finalize(st);
                    if (s != SQLITE_DONE)
                        rc = db_error(u->ix, s, "stage a relative", err);
                }
                free(b);
            }
            json_array_foreach(seen, i, e) {
                if (rc < 0)
                    break;
                sqlite3_stmt *st;
                if ((rc = prep(u->ix, "INSERT OR IGNORE INTO stage_seen(id) VALUES(?)", &st, err)) == 0) {
                    bind_text(st, 1, json_string_value(e));
                    int s = sqlite3_step(st);
                    sqlite3_finalize(st);
                    if (s != SQLITE_DONE)
                        rc = db_error(u->ix, s, "stage a listed id", err);
                }
            }
            if (rc == 0)
                rc = meta_set(u->ix, "stage_meta", "next", nx && !stop ? nx : "", err);
            if (rc == 0 && *newest)
                rc = meta_set(u->ix, "stage_meta", "newest", *newest, err);
            rc = rc == 0 ? exec(u->ix, "COMMIT", err) : (exec(u->ix, "ROLLBACK", NULL), rc);
        }
    }
    json_decref(recs);
    json_decref(maybe);
    json_decref(seen);
    if (rc == 0 && !stop && nx)
        *next = nx;
    else
        free(nx);
    return rc;
}

/* Relatives set aside while listing: detailed when one of their bases is in the index. */
static int do_relatives(upd *u, cdx_err *err)
{
    for (;;) {
        sqlite3_stmt *st;
        int rc = prep(u->ix, "SELECT id, bases FROM stage_maybe LIMIT 200", &st, err);
        if (rc < 0)
            return rc;
        json_t *batch = json_array();
        while (sqlite3_step(st) == SQLITE_ROW)
            json_array_append_new(batch, json_pack("{s:s,s:s}", "id", sqlite3_column_text(st, 0), "bases",
                                                   sqlite3_column_text(st, 1)));
        sqlite3_finalize(st);
        if (!json_array_size(batch)) {
            json_decref(batch);
            return 0;
        }
        json_t *recs = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(batch, i, e) {
            json_t *bases = json_loads(jstr(e, "bases"), 0, NULL);
            size_t j;
            json_t *b;
            bool wanted = false;
            json_array_foreach(bases, j, b) wanted |= jstr(b, "repo") && known_id(u->ix, jstr(b, "repo"));
            json_decref(bases);
            if (!wanted)
                continue;
            json_t *rec;
            if ((rc = fetch_record(u, jstr(e, "id"), &rec, err)) == CDX_ENOTFOUND || rc == CDX_EAUTH) {
                progress(u, "skipped %s: %s", jstr(e, "id"), err ? err->msg : "");
                rc = 0;
                continue;
            }
            if (rc < 0)
                break;
            u->st->relatives++;
            json_array_append_new(recs, rec);
            if (json_array_size(recs) % STAGE_BATCH == 0)
                progress(u, "relatives: %llu detailed", (unsigned long long)u->st->relatives);
        }
        if (rc == 0 && (rc = exec(u->ix, "BEGIN IMMEDIATE", err)) == 0) {
            json_array_foreach(recs, i, e) if (rc == 0) rc = stage_put(u->ix, e, err);
            json_array_foreach(batch, i, e) {
                sqlite3_stmt *d;
                if (rc == 0 && (rc = prep(u->ix, "DELETE FROM stage_maybe WHERE id=?", &d, err)) == 0) {
                    bind_text(d, 1, jstr(e, "id"));
                    if (sqlite3_step(d) != SQLITE_DONE)
                        rc = db_error(u->ix, SQLITE_ERROR, "stage", err);
                    sqlite3_finalize(d);
                }
            }
            rc = rc == 0 ? exec(u->ix, "COMMIT", err) : (exec(u->ix, "ROLLBACK", NULL), rc);
        }
        json_decref(recs);
        json_decref(batch);
        if (rc < 0)
            return rc;
    }
}

/* Everything staged into the index, in one transaction. */
static int publish(upd *u, cdx_err *err)
{
    int rc = exec(u->ix, "BEGIN IMMEDIATE", err);
    if (rc < 0)
        return rc;
    sqlite3_stmt *st;
    if ((rc = prep(u->ix, "SELECT record FROM stage", &st, err)) == 0) {
        int s;
        while (rc == 0 && (s = sqlite3_step(st)) == SQLITE_ROW) {
            json_t *rec = json_loads((const char *)sqlite3_column_text(st, 0), 0, NULL);
            rc = rec ? put_record(u->ix, rec, err) : cdx_err_set(err, CDX_EFORMAT, "a staged record is not JSON");
            json_decref(rec);
            u->st->published += rc == 0;
        }
        sqlite3_finalize(st);
    }
    if (rc == 0 && u->whole) {
        /* the listing named every repo the Hub has: one the index holds that it did not name was
         * deleted (or made private) since, and leaves the index with its relations as a child */
        sqlite3_stmt *gone;
        if ((rc = prep(u->ix, "DELETE FROM repos WHERE id NOT IN (SELECT id FROM stage_seen)", &gone, err)) == 0) {
            int s = sqlite3_step(gone);
            sqlite3_finalize(gone);
            if (s != SQLITE_DONE)
                rc = db_error(u->ix, s, "remove the repos the Hub no longer lists", err);
            else
                u->st->removed = (uint64_t)sqlite3_changes(u->ix->db);
        }
        if (rc == 0)
            rc = exec(u->ix, "DELETE FROM rel WHERE child NOT IN (SELECT id FROM stage_seen);", err);
    }
    if (rc == 0)
        rc = rerank(u->ix, err);
    char *newest = meta_get(u->ix, "stage_meta", "newest"), *old = meta_get(u->ix, "meta", u->mark);
    if (rc == 0 && newest && newest[0] && (!old || strcmp(newest, old) > 0))
        rc = meta_set(u->ix, "meta", u->mark, newest, err);
    free(newest);
    free(old);
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    if (rc == 0)
        rc = meta_set(u->ix, "meta", "last_update", now, err);
    if (rc == 0)
        rc = exec(u->ix, "DELETE FROM stage; DELETE FROM stage_maybe; DELETE FROM stage_meta; DELETE FROM stage_seen;", err);
    return rc == 0 ? exec(u->ix, "COMMIT", err) : (exec(u->ix, "ROLLBACK", NULL), rc);
}

static int upd_init(upd *u, cdx_index *ix, const cdx_index_update_opts *o, cdx_index_stats *st, cdx_err *err)
{
    memset(u, 0, sizeof *u);
    memset(st, 0, sizeof *st);
    u->ix = ix;
    u->o = o;
    u->st = st;
    u->env.endpoint = (char *)o->endpoint;
    u->env.token = (char *)o->token;
    u->host = o->endpoint ? origin_of(o->endpoint) : NULL;
    u->whole = o->full && !o->search && !o->filter;
    if (o->search || o->filter)
        snprintf(u->mark, sizeof u->mark, "newest_modified search=%.250s filter=%.250s", o->search ? o->search : "",
                 o->filter ? o->filter : "");
    else
        snprintf(u->mark, sizeof u->mark, "newest_modified");
    if (!u->host)
        return cdx_err_set(err, CDX_EINVAL, "the Hub endpoint \"%s\" is not a URL", o->endpoint ? o->endpoint : "");
    return 0;
}

int cdx_index_update(cdx_index *ix, const cdx_index_update_opts *o, cdx_index_stats *st, cdx_err *err)
{
    cdx_index_stats local;
    upd u;
    int rc = upd_init(&u, ix, o, st ? st : &local, err);
    if (rc < 0)
        return rc;
    char *params = hub_strdup_printf("%s|%s|%s|%u|%d", o->endpoint, o->search ? o->search : "",
                                     o->filter ? o->filter : "", o->page_size, o->full);
    char *staged = meta_get(ix, "stage_meta", "params");
    char *url = NULL, *newest = NULL, *stop_at = NULL;
    if (staged && params && !strcmp(staged, params)) {
        /* an earlier update was cut: go on from the page it had reached */
        u.st->resumed = true;
        url = meta_get(ix, "stage_meta", "next");
        newest = meta_get(ix, "stage_meta", "newest");
        stop_at = meta_get(ix, "stage_meta", "stop_at");
        progress(&u, "resuming an interrupted update%s", url && url[0] ? "" : " (its listing was complete)");
    } else {
        rc = exec(ix, "BEGIN IMMEDIATE; DELETE FROM stage; DELETE FROM stage_maybe; DELETE FROM stage_meta; "
                  "DELETE FROM stage_seen;", err);
        stop_at = o->full ? NULL : meta_get(ix, "meta", u.mark);
        url = first_url(&u);
        if (rc == 0 && (rc = meta_set(ix, "stage_meta", "params", params, err)) == 0 &&
            (rc = meta_set(ix, "stage_meta", "stop_at", stop_at ? stop_at : "", err)) == 0)
            rc = meta_set(ix, "stage_meta", "next", url, err);
        rc = rc == 0 ? exec(ix, "COMMIT", err) : (exec(ix, "ROLLBACK", NULL), rc);
        if (stop_at)
            progress(&u, "listing what changed since %s", stop_at);
    }
    if (stop_at && !stop_at[0]) {
        free(stop_at);
        stop_at = NULL;
    }
    char **seen = NULL;
    size_t n_seen = 0;
    uint32_t max_pages = o->max_pages ? o->max_pages : 100000;
    while (rc == 0 && url && url[0]) {
        for (size_t i = 0; i < n_seen && rc == 0; i++)
            if (!strcmp(seen[i], url))
                rc = cdx_err_set(err, CDX_ENET, "the listing's Link rel=\"next\" loops back to a page already read "
                                 "(%s); stopped after %llu pages", url, (unsigned long long)u.st->pages);
        if (rc == 0 && n_seen >= max_pages)
            rc = cdx_err_set(err, CDX_ERANGE, "the listing is longer than %u pages; stopped", max_pages);
        if (rc < 0)
            break;
        char **s2 = realloc(seen, (n_seen + 1) * sizeof *seen);
        if (!s2) {
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            break;
        }
        seen = s2;
        seen[n_seen++] = url;
        char *next = NULL;
        rc = do_page(&u, url, stop_at, &newest, &next, err);
        url = next;
        if (rc == 0)
            progress(&u, "page %llu: %llu listed, %llu detailed, %llu unchanged", (unsigned long long)u.st->pages,
                     (unsigned long long)u.st->listed, (unsigned long long)u.st->candidates,
                     (unsigned long long)u.st->unchanged);
    }
    for (size_t i = 0; i < n_seen; i++)
        free(seen[i]);
    free(seen);
    if (rc == 0 && (rc = do_relatives(&u, err)) == 0)
        rc = publish(&u, err);
    if (rc == 0)
        progress(&u, "published %llu repos into %s", (unsigned long long)u.st->published, ix->path);
    /* the staged pages' space: given back when it is most of the file (a failure here leaves the
     * index as published, only larger) */
    sqlite3_stmt *fl;
    if (rc == 0 && sqlite3_prepare_v2(ix->db, "SELECT (SELECT freelist_count FROM pragma_freelist_count) * 2 > "
                                      "(SELECT page_count FROM pragma_page_count)", -1, &fl, NULL) == SQLITE_OK) {
        bool vacuum = sqlite3_step(fl) == SQLITE_ROW && sqlite3_column_int(fl, 0);
        sqlite3_finalize(fl);
        if (vacuum)
            sqlite3_exec(ix->db, "VACUUM", NULL, NULL, NULL);
    }
    free(url);
    free(params);
    free(staged);
    free(newest);
    free(stop_at);
    free(u.host);
    return rc;
}

int cdx_index_fetch_one(cdx_index *ix, const cdx_index_update_opts *o, const char *repo, cdx_err *err)
{
    if (!hub_repo_id_ok(repo))
        return cdx_err_set(err, CDX_EINVAL, "\"%s\" is not a Hugging Face repo id (owner/name)", repo);
    cdx_index_stats st;
    upd u;
    int rc = upd_init(&u, ix, o, &st, err);
    json_t *rec = NULL;
    if (rc == 0 && (rc = fetch_record(&u, repo, &rec, err)) == 0 && (rc = exec(ix, "BEGIN IMMEDIATE", err)) == 0) {
        rc = put_record(ix, rec, err);
        rc = rc == 0 ? exec(ix, "COMMIT", err) : (exec(ix, "ROLLBACK", NULL), rc);
    }
    json_decref(rec);
    free(u.host);
    return rc;
}

/* ---- queries ---- */

#define ENTRY_COLS \
    "r.id, r.sha, r.last_modified, r.downloads, r.likes, r.gated, r.tags, r.architecture, r.family, r.format," \
    " r.params, r.dtype, r.weight_bytes, r.mem_bytes, r.moe, r.verdict, r.refusal, r.tokenizer, r.summary," \
    " r.children, r.lora_r, r.lora_alpha, r.files"

static json_t *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? json_string((const char *)t) : json_null();
}

static json_t *entry_of(cdx_index *ix, sqlite3_stmt *st, uint64_t mem, bool full)
{
    json_t *e = json_object();
    const char *id = (const char *)sqlite3_column_text(st, 0);
    json_object_set_new(e, "id", col_text(st, 0));
    json_object_set_new(e, "architecture", col_text(st, 7));
    json_object_set_new(e, "family", col_text(st, 8));
    json_object_set_new(e, "format", col_text(st, 9));
    json_object_set_new(e, "params", json_integer(sqlite3_column_int64(st, 10)));
    json_object_set_new(e, "dtype", col_text(st, 11));
    json_object_set_new(e, "weight_bytes", json_integer(sqlite3_column_int64(st, 12)));
    json_object_set_new(e, "mem_bytes", json_integer(sqlite3_column_int64(st, 13)));
    json_object_set_new(e, "moe", json_boolean(sqlite3_column_int(st, 14)));
    const char *verdict = (const char *)sqlite3_column_text(st, 15);
    json_object_set_new(e, "verdict", col_text(st, 15));
    json_object_set_new(e, "refusal", col_text(st, 16));
    uint64_t need = (uint64_t)sqlite3_column_int64(st, 13);
    bool fits = !mem || need <= mem;
    json_object_set_new(e, "fits", json_boolean(fits));
    json_object_set_new(e, "runnable", json_boolean(verdict && !strcmp(verdict, "runs") && fits));
    json_object_set_new(e, "gated", json_boolean(sqlite3_column_int(st, 5)));
    json_object_set_new(e, "downloads", json_integer(sqlite3_column_int64(st, 3)));
    json_object_set_new(e, "likes", json_integer(sqlite3_column_int64(st, 4)));
    json_object_set_new(e, "last_modified", col_text(st, 2));
    json_object_set_new(e, "tokenizer", col_text(st, 17));
    json_object_set_new(e, "children", json_integer(sqlite3_column_int64(st, 19)));
    if (sqlite3_column_type(st, 20) != SQLITE_NULL || sqlite3_column_type(st, 21) != SQLITE_NULL) {
        json_t *l = json_object();
        json_object_set_new(l, "r", sqlite3_column_type(st, 20) == SQLITE_NULL ? json_null()
                                                                              : json_integer(sqlite3_column_int64(st, 20)));
        json_object_set_new(l, "alpha", sqlite3_column_type(st, 21) == SQLITE_NULL ? json_null()
                                                                                  : json_f32(sqlite3_column_double(st, 21)));
        json_object_set_new(e, "lora", l);
    } else {
        json_object_set_new(e, "lora", json_null());
    }
    json_t *bases = json_array();
    sqlite3_stmt *b;
    if (sqlite3_prepare_v2(ix->db, "SELECT parent, kind FROM rel WHERE child=? ORDER BY parent", -1, &b, NULL) == SQLITE_OK) {
        bind_text(b, 1, id);
        while (sqlite3_step(b) == SQLITE_ROW)
            json_array_append_new(bases, json_pack("{s:s,s:s}", "repo", sqlite3_column_text(b, 0), "relation",
                                                   sqlite3_column_text(b, 1)));
    }
    sqlite3_finalize(b);
    json_object_set_new(e, "bases", bases);
    const char *tags = (const char *)sqlite3_column_text(st, 6);
    json_t *tj = tags ? json_loads(tags, 0, NULL) : NULL;
    json_object_set_new(e, "tags", tj ? tj : json_array());
    if (full) {
        json_object_set_new(e, "sha", col_text(st, 1));
        json_object_set_new(e, "summary", col_text(st, 18));
        const char *files = (const char *)sqlite3_column_text(st, 22);
        json_t *fj = files ? json_loads(files, 0, NULL) : NULL;
        json_object_set_new(e, "files", fj ? fj : json_array());
    }
    return e;
}

static int run_list(cdx_index *ix, sqlite3_stmt *st, uint64_t mem, char **json, const char *what, cdx_err *err)
{
    json_t *arr = json_array();
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW)
        json_array_append_new(arr, entry_of(ix, st, mem, false));
    int rc = s == SQLITE_DONE ? 0 : db_error(ix, s, what, err);
    sqlite3_finalize(st);
    *json = rc == 0 ? json_dumps(arr, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(arr);
    return rc == 0 && !*json ? cdx_err_set(err, CDX_ENOMEM, "out of memory") : rc;
}

int cdx_index_search(cdx_index *ix, const cdx_index_query *q, char **json, cdx_err *err)
{
    *json = NULL;
    /* each word a quoted FTS5 prefix phrase ("qwen3-0.6b" -> "qwen3-0.6b"*: tokens qwen3 0 6b*) */
    size_t cap = 16;
    for (size_t i = 0; i < q->n_words; i++)
        cap += 2 * strlen(q->words[i]) + 8;
    char *match = calloc(1, cap), *p = match;
    if (!match)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    bool any = false;
    for (size_t i = 0; i < q->n_words; i++) {
        bool word = false;
        for (const char *c = q->words[i]; *c; c++)
            word |= (unsigned char)*c >= 0x80 || (*c >= '0' && *c <= '9') || ((*c | 32) >= 'a' && (*c | 32) <= 'z');
        if (!word)
            continue; /* only separators: it matches nothing in particular */
        *p++ = '"';
        for (const char *c = q->words[i]; *c; c++) {
            if (*c == '"')
                *p++ = '"';
            *p++ = *c;
        }
        p += sprintf(p, "\"* ");
        any = true;
    }
    char sql[1400];
    snprintf(sql, sizeof sql,
             "SELECT " ENTRY_COLS " FROM %s WHERE %s"
             " (?2 IS NULL OR r.architecture=?2 COLLATE NOCASE OR r.family=?2 COLLATE NOCASE)"
             " AND (?3 IS NULL OR r.format=?3) AND (?4=0 OR (r.params>0 AND r.params<=?4))"
             " AND (?5=0 OR (r.verdict='runs' AND (?6=0 OR r.mem_bytes<=?6)))"
             " ORDER BY %s LIMIT ?7",
             any ? "repos_fts f JOIN repos r ON r.rank=f.rowid" : "repos r", any ? "repos_fts MATCH ?1 AND" : "",
             any ? "f.rowid" : "r.downloads DESC, r.id");
    sqlite3_stmt *st;
    int rc = prep(ix, sql, &st, err);
    if (rc == 0) {
        if (any)
            bind_text(st, 1, match);
        bind_text(st, 2, q->arch);
        bind_text(st, 3, q->format);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)q->max_params);
        sqlite3_bind_int(st, 5, q->runnable);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)q->mem_available);
        sqlite3_bind_int(st, 7, q->limit ? (int)q->limit : 20);
        rc = run_list(ix, st, q->mem_available, json, "search", err);
    }
    free(match);
    return rc;
}

static int find_one(cdx_index *ix, const char *repo, sqlite3_stmt **st, cdx_err *err)
{
    int rc = prep(ix, "SELECT " ENTRY_COLS " FROM repos r WHERE r.id=? COLLATE NOCASE", st, err);
    if (rc < 0)
        return rc;
    bind_text(*st, 1, repo);
    int s = sqlite3_step(*st);
    if (s == SQLITE_ROW)
        return 0;
    rc = s == SQLITE_DONE ? cdx_err_set(err, CDX_ENOTFOUND, "%s is not in the model index %s", repo, ix->path)
                          : db_error(ix, s, "read", err);
    sqlite3_finalize(*st);
    *st = NULL;
    return rc;
}

int cdx_index_info(cdx_index *ix, const char *repo, uint64_t mem_available, char **json, cdx_err *err)
{
    *json = NULL;
    sqlite3_stmt *st;
    int rc = find_one(ix, repo, &st, err);
    if (rc < 0)
        return rc;
    json_t *e = entry_of(ix, st, mem_available, true);
    sqlite3_finalize(st);
    /* how many repos the index relates to it, by kind */
    json_t *derived = json_object();
    sqlite3_stmt *c;
    if (sqlite3_prepare_v2(ix->db, "SELECT kind, count(*) FROM rel WHERE parent=? GROUP BY kind ORDER BY kind", -1, &c,
                           NULL) == SQLITE_OK) {
        bind_text(c, 1, jstr(e, "id"));
        while (sqlite3_step(c) == SQLITE_ROW)
            json_object_set_new(derived, (const char *)sqlite3_column_text(c, 0), json_integer(sqlite3_column_int64(c, 1)));
    }
    sqlite3_finalize(c);
    json_object_set_new(e, "derived", derived);
    *json = json_dumps(e, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(e);
    return *json ? 0 : cdx_err_set(err, CDX_ENOMEM, "out of memory");
}

int cdx_index_related(cdx_index *ix, const char *repo, cdx_index_rel kind, uint64_t mem_available, char **json,
                      cdx_err *err)
{
    *json = NULL;
    sqlite3_stmt *st;
    int rc = find_one(ix, repo, &st, err);
    if (rc < 0)
        return rc;
    char id[256], format[32];
    snprintf(id, sizeof id, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(format, sizeof format, "%s", sqlite3_column_text(st, 9) ? (const char *)sqlite3_column_text(st, 9) : "");
    sqlite3_finalize(st);
    /* (repo, relation, direction) rows, then each entry */
    const char *sql =
        kind == CDX_INDEX_REL_FINETUNES ? "SELECT child, kind, 'derived' FROM rel WHERE parent=?1 AND kind='finetune'"
        : kind == CDX_INDEX_REL_QUANTIZATIONS ? "SELECT child, kind, 'derived' FROM rel WHERE parent=?1 AND kind='quantized'"
        : kind == CDX_INDEX_REL_TWINS
            ? "SELECT x.child, x.kind, 'derived' FROM rel x JOIN repos t ON t.id=x.child WHERE x.parent=?1 AND"
              " x.kind='quantized' AND t.format<>?2 UNION SELECT x.parent, x.kind, 'base' FROM rel x JOIN repos t ON"
              " t.id=x.parent WHERE x.child=?1 AND x.kind='quantized' AND t.format<>?2"
            : "SELECT child, kind, 'derived' FROM rel WHERE parent=?1 UNION SELECT parent, kind, 'base' FROM rel WHERE child=?1";
    char sql2[1400];
    snprintf(sql2, sizeof sql2,
             "WITH q(id, kind, dir) AS (%s) SELECT " ENTRY_COLS ", q.kind, q.dir FROM q JOIN repos r ON r.id=q.id"
             " ORDER BY q.dir DESC, r.downloads DESC, r.id", sql);
    if ((rc = prep(ix, sql2, &st, err)) < 0)
        return rc;
    bind_text(st, 1, id);
    bind_text(st, 2, format);
    json_t *arr = json_array();
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *e = entry_of(ix, st, mem_available, false);
        json_object_set_new(e, "relation", col_text(st, 23));
        json_object_set_new(e, "direction", col_text(st, 24));
        json_array_append_new(arr, e);
    }
    rc = s == SQLITE_DONE ? 0 : db_error(ix, s, "related", err);
    sqlite3_finalize(st);
    *json = rc == 0 ? json_dumps(arr, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(arr);
    return rc;
}

int cdx_index_drafts(cdx_index *ix, const char *repo, uint64_t mem_available, char **json, cdx_err *err)
{
    *json = NULL;
    sqlite3_stmt *st;
    int rc = find_one(ix, repo, &st, err);
    if (rc < 0)
        return rc;
    char id[256], tok[160] = "";
    snprintf(id, sizeof id, "%s", (const char *)sqlite3_column_text(st, 0));
    if (sqlite3_column_text(st, 17))
        snprintf(tok, sizeof tok, "%s", (const char *)sqlite3_column_text(st, 17));
    sqlite3_int64 params = sqlite3_column_int64(st, 10);
    sqlite3_finalize(st);
    if (!tok[0])
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: the index has no tokenizer fingerprint for it (no tokenizer.json "
                           "or tokenizer.model with a content id in its listing), so no draft can be matched", id);
    if (params <= 0)
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: the index has no parameter count for it, so no draft can be sized",
                           id);
    if ((rc = prep(ix,
                   "SELECT " ENTRY_COLS " FROM repos r WHERE r.tokenizer=?1 AND r.id<>?2 AND r.format='safetensors'"
                   " AND r.moe=0 AND r.verdict='runs' AND r.params>0 AND r.params*4<=?3 AND (?4=0 OR r.mem_bytes<=?4)"
                   " ORDER BY (substr(r.id, 1, instr(r.id, '/'))=substr(?2, 1, instr(?2, '/'))) DESC,"
                   " r.downloads DESC, r.params, r.id LIMIT 20", &st, err)) < 0)
        return rc;
    bind_text(st, 1, tok);
    bind_text(st, 2, id);
    sqlite3_bind_int64(st, 3, params);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)mem_available);
    return run_list(ix, st, mem_available, json, "drafts", err);
}

int cdx_index_status(cdx_index *ix, char **json, cdx_err *err)
{
    *json = NULL;
    sqlite3_stmt *st;
    int rc = prep(ix, "SELECT (SELECT count(*) FROM repos), (SELECT count(*) FROM stage)", &st, err);
    if (rc < 0)
        return rc;
    int s = sqlite3_step(st);
    if (s != SQLITE_ROW) {
        sqlite3_finalize(st);
        return db_error(ix, s, "read", err);
    }
    json_t *o = json_pack("{s:s,s:I,s:I}", "path", ix->path, "repos", (json_int_t)sqlite3_column_int64(st, 0), "staged",
                          (json_int_t)sqlite3_column_int64(st, 1));
    sqlite3_finalize(st);
    char *lu = meta_get(ix, "meta", "last_update"), *nm = meta_get(ix, "meta", "newest_modified");
    json_object_set_new(o, "last_update", lu ? json_string(lu) : json_null());
    json_object_set_new(o, "newest_modified", nm ? json_string(nm) : json_null());
    free(lu);
    free(nm);
    *json = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return *json ? 0 : cdx_err_set(err, CDX_ENOMEM, "out of memory");
}
