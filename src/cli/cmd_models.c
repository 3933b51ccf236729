/* caldrix models supported|info|search|related|drafts|update|rules|list|rm: from the tables compiled in,
 * the caches and the model index (SQLite; only `update`, and `info` of a repo the index lacks, ask
 * the Hub). */
#include "cli.h"
#include "cli_hub.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: caldrix models supported [--all] [--json]\n"
               "       caldrix models info REF [--json]\n"
               "       caldrix models search TEXT... [--arch A] [--format gguf|safetensors] [--max-params N]\n"
               "                             [--runnable] [--limit N] [--json]\n"
               "       caldrix models related REPO [--finetunes|--quantizations|--twins] [--json]\n"
               "       caldrix models drafts REF [--json]\n"
               "       caldrix models update [--full] [--search TEXT] [--filter TAG] [--page-size N] [--json]\n"
               "       caldrix models rules [--json]\n"
               "       caldrix models list [--json]\n"
               "       caldrix models rm REF\n\n"
               "supported  the aliases, each a Hugging Face repo at a pinned revision (--all: and the accepted\n"
               "           architectures, and those refused by name with the reason)\n"
               "info       an alias or repo: its pin, what the cache holds (refs, snapshots, completeness) and its\n"
               "           model index entry (files and sizes, the verdict, whether it fits this machine); a repo\n"
               "           the index lacks is asked of the Hub and added, unless offline\n"
               "search     the model index (words match ids, tags and model cards as prefixes; ranked by downloads),\n"
               "           then aliases and cached models whose names contain every TEXT. --arch (a config.json or\n"
               "           GGUF architecture, or a family), --format, --max-params (8B, 500M), --runnable (the\n"
               "           verdict is \"runs\" and it fits this machine's memory) filter the index only\n"
               "related    the index's base_model relatives of REPO, its bases and what derives from it;\n"
               "           --finetunes, --quantizations, or --twins (the same weights in another format)\n"
               "drafts     draft candidates for REF. A model on disk (a path, or an alias, repo or Ollama tag the\n"
               "           caches hold): the cached models judged as run --draft auto judges them (the same\n"
               "           vocabulary, at most half its weight bytes a token, not refused as a draft), best\n"
               "           first (the first is the one --draft auto takes), each with \"last run on this machine:\n"
               "           <draft> was turned off / stayed on\" when run, bench or serve recorded one\n"
               "           (CALDRIX_CACHE/draft-outcomes.json), then those passed over and why. Otherwise (a repo\n"
               "           id not cached): the model index's candidates: the same tokenizer, at most a quarter of\n"
               "           its parameters, dense safetensors that run and fit; the same owner first, then by\n"
               "           downloads\n"
               "update     fills the model index from the Hub (HF_ENDPOINT): the first time every listed repo\n"
               "           caldrix can judge and their base_model relatives, then only what changed (--full: all\n"
               "           again). Cut or failed, the previous index stays as it was, and the next update goes on\n"
               "           from where this one stopped. Progress on stderr\n"
               "rules      what the import refuses, one rule per line (the table the checks read)\n"
               "list       every model in the caches (Hugging Face repos and Ollama tags): its size on disk, whether\n"
               "           it is complete, and whether caldrix can run it (and why not)\n"
               "rm         removes a cached model: a repo's whole models--OWNER--NAME folder (every revision), or an\n"
               "           Ollama tag's manifest and the blobs no other cached tag uses. REF not in the cache:\n"
               "           exit 1, nothing removed\n"
               "The index: CALDRIX_CACHE/models-index.sqlite. Only update, and info of a repo the index lacks,\n"
               "touch the network; with CALDRIX_OFFLINE or HF_HUB_OFFLINE set, update is refused and info reads\n"
               "the index alone. --json: machine-readable; a LoRA alpha (a 32-bit float) prints as the shortest\n"
               "decimal that reads back to it.\n");
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("%s\n", s ? s : "null");
    free(s);
    json_decref(j);
}

static int cmd_supported(int argc, char **argv)
{
    bool json = false, all = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--all")) all = true;
        else { fprintf(stderr, "caldrix models supported: unknown argument \"%s\"\n", argv[i]); return 2; }
    }
    size_t n, na;
    const cdx_hub_alias *a = cdx_hub_aliases(&n);
    const cdx_hub_arch *ar = cdx_hub_archs(&na);
    if (json) {
        json_t *o = json_object(), *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s}", "alias", a[i].alias, "repo", a[i].repo,
                                                 "revision", a[i].revision, "note", a[i].note));
        json_object_set_new(o, "aliases", arr);
        if (all) {
            json_t *aa = json_array();
            for (size_t i = 0; i < na; i++)
                json_array_append_new(aa, json_pack("{s:s,s:s,s:s}", "architecture", ar[i].name, "family",
                                                    ar[i].family, "note", ar[i].note));
            json_object_set_new(o, "architectures", aa);
            size_t nr;
            const cdx_refused_arch *rf = cdx_refused_archs(&nr);
            json_t *ra = json_array();
            for (size_t i = 0; i < nr; i++)
                json_array_append_new(ra, json_pack("{s:o,s:o,s:s,s:s}", "architecture",
                                                    rf[i].hf ? json_string(rf[i].hf) : json_null(), "gguf",
                                                    rf[i].gguf ? json_string(rf[i].gguf) : json_null(), "family",
                                                    rf[i].family, "reason", rf[i].reason));
            json_object_set_new(o, "refused", ra);
        }
        print_json(o);
        return 0;
    }
    printf("%-18s %-42s %s\n", "ALIAS", "HUGGING FACE REPO", "REVISION");
    for (size_t i = 0; i < n; i++)
        printf("%-18s %-42s %s\n", a[i].alias, a[i].repo, a[i].revision);
    if (all) {
        printf("\n%-34s %-10s %s\n", "ARCHITECTURE", "FAMILY", "NOTE");
        for (size_t i = 0; i < na; i++)
            printf("%-34s %-10s %s\n", ar[i].name, ar[i].family, ar[i].note);
        printf("\nAny owner/name[@revision] of these architectures, and ollama:name[:tag] GGUF models, are accepted "
               "too.\n");
        size_t nr;
        const cdx_refused_arch *rf = cdx_refused_archs(&nr);
        printf("\nREFUSED BY NAME (known, not run yet)\n%-34s %-10s %-10s %s\n", "ARCHITECTURE", "GGUF", "FAMILY",
               "REASON");
        for (size_t i = 0; i < nr; i++)
            printf("%-34s %-10s %-10s %s\n", rf[i].hf ? rf[i].hf : "-", rf[i].gguf ? rf[i].gguf : "-", rf[i].family,
                   rf[i].reason);
    }
    return 0;
}

static int cmd_rules(int argc, char **argv)
{
    bool json = argc > 0 && !strcmp(argv[0], "--json");
    size_t n;
    const cdx_hub_rule *r = cdx_hub_rules(&n);
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, json_pack("{s:s,s:s,s:s}", "id", r[i].id, "field", r[i].field, "refuses",
                                                 r[i].doc));
        print_json(arr);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s\t%s\t%s\n", r[i].id, r[i].field, r[i].doc);
    return 0;
}

/* Sum of the file sizes under a snapshot (following the links into blobs/). */
static uint64_t dir_bytes(const char *dir)
{
    uint64_t total = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0)
            total += S_ISDIR(st.st_mode) ? dir_bytes(p) : (uint64_t)st.st_size;
    }
    closedir(d);
    return total;
}

static void list_refs(const char *dir, const char *prefix, json_t *refs)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4600], name[600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        snprintf(name, sizeof name, "%s%s", prefix, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            char pre[620];
            snprintf(pre, sizeof pre, "%s/", name);
            list_refs(p, pre, refs);
            continue;
        }
        char *text = NULL;
        if (cdx_file_read_all(p, 256, &text, NULL, NULL) == 0) {
            size_t n = strlen(text);
            while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' '))
                text[--n] = 0;
            json_object_set_new(refs, name, json_string(text));
            free(text);
        }
    }
    closedir(d);
}

/* An Ollama tag: what caldrix's cache holds for it (resolved through the cache alone). */
static int info_ollama(const char *ref, bool json)
{
    cdx_err err = { 0 };
    cdx_hub_opts o = { .cache_only = true };
    char *path = NULL;
    bool cached = cdx_hub_resolve(ref, &o, &path, &err) == 0;
    json_t *out = json_pack("{s:s,s:b}", "ref", ref, "complete", cached);
    json_object_set_new(out, "path", path ? json_string(path) : json_null());
    json_object_set_new(out, "problem", cached ? json_null() : json_string(err.msg));
    if (cached) {
        cdx_hub_report *r = calloc(1, sizeof *r);
        if (r && cdx_hub_inspect_path(path, r, &err) == 0)
            json_object_set_new(out, "model", json_pack("{s:s,s:I,s:I,s:s,s:I}", "architecture", r->architecture,
                                                        "layers", (json_int_t)r->n_layer, "context",
                                                        (json_int_t)r->ctx, "tensor_types", r->tensor_types,
                                                        "bytes", (json_int_t)r->weight_bytes));
        free(r);
    }
    free(path);
    if (json) {
        print_json(out);
        return 0;
    }
    printf("%s\n", ref);
    if (!cached) {
        printf("  not complete in the cache (caldrix pull %s downloads it)\n", ref);
    } else {
        json_t *m = json_object_get(out, "model");
        printf("  %s\n", json_string_value(json_object_get(out, "path")));
        if (m) {
            char b[32];
            cdx_fmt_bytes((uint64_t)json_integer_value(json_object_get(m, "bytes")), b, sizeof b);
            printf("  %s, %lld layers, context %lld, %s (%s)\n", json_string_value(json_object_get(m, "architecture")),
                   (long long)json_integer_value(json_object_get(m, "layers")),
                   (long long)json_integer_value(json_object_get(m, "context")),
                   json_string_value(json_object_get(m, "tensor_types")), b);
        }
    }
    json_decref(out);
    return 0;
}

/* ---- the model index ---- */

/* Every real number of an index entry is a 32-bit float held as the double of its shortest decimal
 * (cdx_index_search), so 9 significant digits print that decimal: 0.1, not 0.10000000149011612. */
static void print_index_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    printf("%s\n", s ? s : "null");
    free(s);
    json_decref(j);
}

/* The index at its place in caldrix's cache. 0 (with *ix NULL when it is absent and absent_ok), or 1
 * after printing why. */
static int open_index(const cdx_hub_env *env, bool write, bool absent_ok, cdx_index **ix)
{
    *ix = NULL;
    cdx_err err = { 0 };
    char *path = cdx_index_default_path(env);
    int rc = path ? cdx_index_open(path, write, ix, &err) : cdx_err_set(&err, CDX_ENOMEM, "out of memory");
    free(path);
    if (rc == CDX_ENOTFOUND && absent_ok)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    return 0;
}

static uint64_t mem_available(void)
{
    uint64_t m = 0;
    cdx_err err = { 0 };
    if (cdx_hub_mem_available(&m, &err) < 0) {
        fprintf(stderr, "caldrix: %s (what fits this machine is not judged)\n", err.msg);
        m = 0;
    }
    return m;
}

/* 8B, 1.5B, 500M, 7000000000 */
static int parse_params(const char *s, uint64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double mul = !*end ? 1 : !strcasecmp(end, "K") ? 1e3 : !strcasecmp(end, "M") ? 1e6 : !strcasecmp(end, "B") ? 1e9
               : !strcasecmp(end, "T") ? 1e12 : -1;
    if (end == s || mul < 0 || !(v > 0) || v * mul > 1e15) {
        fprintf(stderr, "caldrix models search: --max-params \"%s\": expected a count such as 8B, 1.5B or 500M\n", s);
        return -1;
    }
    *out = (uint64_t)(v * mul);
    return 0;
}

static void fmt_params(json_int_t p, char *b, size_t cap)
{
    if (p <= 0)
        snprintf(b, cap, "-");
    else if (p >= 1000000000)
        snprintf(b, cap, "%.3gB", (double)p / 1e9);
    else
        snprintf(b, cap, "%.3gM", (double)p / 1e6);
}

static void print_entry_line(json_t *e, const char *extra)
{
    char p[32];
    fmt_params(json_integer_value(json_object_get(e, "params")), p, sizeof p);
    const char *arch = json_string_value(json_object_get(e, "architecture"));
    const char *verdict = json_string_value(json_object_get(e, "verdict"));
    printf("%-52s %-30s %-11s %7s %-16s %10lld%s%s\n", json_string_value(json_object_get(e, "id")), arch ? arch : "-",
           json_string_value(json_object_get(e, "format")), p,
           json_is_true(json_object_get(e, "runnable")) ? "runs here"
           : verdict && !strcmp(verdict, "runs")        ? "too big here"
                                                        : verdict ? verdict : "-",
           (long long)json_integer_value(json_object_get(e, "downloads")), extra ? "  " : "", extra ? extra : "");
}

static void print_entry_header(void)
{
    printf("%-52s %-30s %-11s %7s %-16s %10s\n", "REPO", "ARCHITECTURE", "FORMAT", "PARAMS", "VERDICT", "DOWNLOADS");
}

static void on_update_progress(const char *line, void *user)
{
    (void)user;
    fprintf(stderr, "caldrix: models update: %s\n", line);
}

static int cmd_update(int argc, char **argv)
{
    cdx_index_update_opts uo = { 0 };
    bool json = false;
    long page = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--full")) uo.full = true;
        else if (!strcmp(a, "--search") && has) uo.search = argv[++i];
        else if (!strcmp(a, "--filter") && has) uo.filter = argv[++i];
        else if (!strcmp(a, "--page-size") && has) {
            if (cli_parse_int("--page-size", argv[++i], 1, 1000, &page) < 0)
                return 2;
        } else {
            fprintf(stderr, "caldrix models update: unknown or incomplete argument \"%s\"\n", a);
            return 2;
        }
    }
    uo.page_size = (uint32_t)page;
    cdx_hub_env env;
    cdx_err err = { 0 };
    if (cdx_hub_env_load(&env, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    if (env.hf_offline) {
        fprintf(stderr, "caldrix: models update asks the Hub, and %s is set: nothing was asked; the index is as it "
                "was\n", env.offline_var);
        cdx_hub_env_free(&env);
        return 1;
    }
    cdx_index *ix;
    if (open_index(&env, true, false, &ix)) {
        cdx_hub_env_free(&env);
        return 1;
    }
    uo.endpoint = env.endpoint;
    uo.token = env.token;
    uo.progress = on_update_progress;
    cdx_index_stats st;
    double t0 = cdx_time_ms();
    int rc = cdx_index_update(ix, &uo, &st, &err);
    double secs = (cdx_time_ms() - t0) / 1000.0;
    char *status = NULL;
    cdx_err e2 = { 0 };
    cdx_index_status(ix, &status, &e2);
    cdx_index_close(ix);
    cdx_hub_env_free(&env);
    if (rc < 0) {
        fprintf(stderr, "caldrix: models update failed: %s\nThe index is as it was before this update; the pages read "
                "so far are kept, and caldrix models update goes on from there.\n", err.msg);
        free(status);
        return 1;
    }
    json_t *sj = status ? json_loads(status, 0, NULL) : NULL;
    free(status);
    json_t *o = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b,s:f}", "pages", (json_int_t)st.pages, "listed",
                          (json_int_t)st.listed, "detailed", (json_int_t)st.candidates, "unchanged",
                          (json_int_t)st.unchanged, "relatives", (json_int_t)st.relatives, "bad_ids",
                          (json_int_t)st.bad_ids, "published", (json_int_t)st.published, "removed",
                          (json_int_t)st.removed, "repos",
                          (json_int_t)json_integer_value(json_object_get(sj, "repos")), "resumed", st.resumed,
                          "seconds", secs);
    json_decref(sj);
    if (json) {
        print_json(o);
        return 0;
    }
    printf("model index: %lld repos; this update read %lld pages (%lld repos listed), detailed %lld (and %lld "
           "relatives), %lld unchanged, %lld ids refused, %lld removed (gone from the Hub), in %.1f s%s\n",
           (long long)json_integer_value(json_object_get(o, "repos")), (long long)st.pages, (long long)st.listed,
           (long long)st.candidates, (long long)st.relatives, (long long)st.unchanged, (long long)st.bad_ids,
           (long long)st.removed, secs,
           st.resumed ? " (went on from an interrupted update)" : "");
    json_decref(o);
    return 0;
}

/* related and drafts: REPO [flags] [--json] */
static int drafts_local(cdx_loaded *t, const char *ref, bool json);
static int cmd_related(int argc, char **argv, bool drafts)
{
    const char *repo = NULL;
    bool json = false;
    cdx_index_rel kind = CDX_INDEX_REL_ALL;
    const char *cmd = drafts ? "drafts" : "related";
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!drafts && !strcmp(argv[i], "--finetunes")) kind = CDX_INDEX_REL_FINETUNES;
        else if (!drafts && !strcmp(argv[i], "--quantizations")) kind = CDX_INDEX_REL_QUANTIZATIONS;
        else if (!drafts && !strcmp(argv[i], "--twins")) kind = CDX_INDEX_REL_TWINS;
        else if (argv[i][0] != '-' && !repo) repo = argv[i];
        else {
            fprintf(stderr, "caldrix models %s: unexpected argument \"%s\"\n", cmd, argv[i]);
            return 2;
        }
    }
    if (!repo) {
        fprintf(stderr, "usage: caldrix models %s REPO%s [--json]\n", cmd,
                drafts ? "" : " [--finetunes|--quantizations|--twins]");
        return 2;
    }
    if (drafts) {
        /* a model on disk (a path, or a reference the caches hold): the cached models as drafts */
        cdx_hub_opts ho = { .cache_only = true, .skip_memory_check = true };
        cdx_load_opts lo = cdx_load_defaults();
        cli_load_env(&lo);
        lo.paths_only = true;
        lo.hub = &ho;
        cdx_loaded *t = NULL;
        cdx_err le = { 0 };
        if (cdx_load(repo, &lo, &t, NULL, &le) == 0) {
            const int rc = drafts_local(t, repo, json);
            cdx_load_close(t);
            return rc;
        }
    }
    /* an alias stands for its repo */
    const cdx_hub_alias *a = cdx_hub_alias_find(repo);
    if (a)
        repo = a->repo;
    cdx_hub_env env;
    cdx_err err = { 0 };
    if (cdx_hub_env_load(&env, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    cdx_index *ix;
    int bad = open_index(&env, false, false, &ix);
    cdx_hub_env_free(&env);
    if (bad)
        return 1;
    uint64_t mem = mem_available();
    char *text = NULL;
    int rc = drafts ? cdx_index_drafts(ix, repo, mem, &text, &err) : cdx_index_related(ix, repo, kind, mem, &text, &err);
    cdx_index_close(ix);
    if (rc < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    json_t *arr = json_loads(text, 0, NULL);
    free(text);
    if (json) {
        print_index_json(arr);
        return 0;
    }
    if (!json_array_size(arr))
        printf("the index knows no %s for %s\n", drafts ? "draft candidate" : "relative of that kind", repo);
    else
        print_entry_header();
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        char extra[96] = "";
        if (!drafts)
            snprintf(extra, sizeof extra, "%s (%s)", json_string_value(json_object_get(e, "relation")),
                     !strcmp(json_string_value(json_object_get(e, "direction")), "base") ? "its base" : "derived");
        print_entry_line(e, drafts ? NULL : extra);
    }
    json_decref(arr);
    return 0;
}

/* The model index's entry for repo into *out (NULL when none); a repo the index lacks is asked of the
 * Hub and added, unless offline. 1 when the index itself failed (corrupt), after printing why. */
static int index_entry(const cdx_hub_env *env, const char *repo, json_t **out)
{
    *out = NULL;
    cdx_index *ix;
    if (open_index(env, false, true, &ix))
        return 1;
    cdx_err err = { 0 };
    char *text = NULL;
    uint64_t mem = mem_available();
    int rc = ix ? cdx_index_info(ix, repo, mem, &text, &err) : CDX_ENOTFOUND;
    cdx_index_close(ix);
    if (rc == CDX_ENOTFOUND) {
        if (env->hf_offline) {
            fprintf(stderr, "caldrix: %s is not in the model index, and %s is set: the Hub was not asked\n", repo,
                    env->offline_var);
            return 0;
        }
        if (open_index(env, true, false, &ix))
            return 1;
        cdx_index_update_opts uo = { .endpoint = env->endpoint, .token = env->token };
        err = (cdx_err){ 0 };
        rc = cdx_index_fetch_one(ix, &uo, repo, &err);
        if (rc == 0)
            rc = cdx_index_info(ix, repo, mem, &text, &err);
        cdx_index_close(ix);
        if (rc < 0) {
            fprintf(stderr, "caldrix: %s is not in the model index, and the Hub's details of it could not be read: %s\n",
                    repo, err.msg);
            return 0;
        }
    } else if (rc < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    *out = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return 0;
}

static void print_index_entry(json_t *e)
{
    char p[32], w[32], m[32];
    fmt_params(json_integer_value(json_object_get(e, "params")), p, sizeof p);
    cdx_fmt_bytes((uint64_t)json_integer_value(json_object_get(e, "weight_bytes")), w, sizeof w);
    cdx_fmt_bytes((uint64_t)json_integer_value(json_object_get(e, "mem_bytes")), m, sizeof m);
    const char *arch = json_string_value(json_object_get(e, "architecture"));
    const char *dtype = json_string_value(json_object_get(e, "dtype"));
    printf("  index: %s, %s, %s parameters%s%s, %s of weights, needs %s\n", arch ? arch : "architecture unknown",
           json_string_value(json_object_get(e, "format")), p, dtype ? ", " : "", dtype ? dtype : "", w, m);
    const char *refusal = json_string_value(json_object_get(e, "refusal"));
    printf("  verdict: %s%s%s\n", json_string_value(json_object_get(e, "verdict")), refusal ? ": " : "",
           refusal ? refusal : "");
    printf("  this machine: %s\n", json_is_true(json_object_get(e, "runnable")) ? "runs it"
                                   : json_is_true(json_object_get(e, "fits"))    ? "fits in memory, but is refused"
                                                                                 : "does not fit in memory");
    json_t *l = json_object_get(e, "lora");
    if (json_is_object(l)) {
        char a[32] = "-";
        if (json_is_number(json_object_get(l, "alpha")))
            cdx_f32_shortest((float)json_number_value(json_object_get(l, "alpha")), a, sizeof a);
        printf("  adapter: LoRA r %lld, alpha %s\n", (long long)json_integer_value(json_object_get(l, "r")), a);
    }
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(e, "bases"), i, b)
        printf("  base: %s (%s)\n", json_string_value(json_object_get(b, "repo")),
               json_string_value(json_object_get(b, "relation")));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(e, "derived"), k, v)
        printf("  derived: %lld %s\n", (long long)json_integer_value(v), k);
    json_array_foreach(json_object_get(e, "files"), i, b) {
        char sz[32];
        cdx_fmt_bytes((uint64_t)json_integer_value(json_object_get(b, "size")), sz, sizeof sz);
        printf("  file %-48s %10s\n", json_string_value(json_object_get(b, "name")), sz);
    }
}

static int cmd_info(int argc, char **argv)
{
    const char *ref = NULL;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!ref) ref = argv[i];
        else { fprintf(stderr, "caldrix models info: one REF only\n"); return 2; }
    }
    if (!ref) {
        fprintf(stderr, "usage: caldrix models info REF [--json]\n");
        return 2;
    }
    cdx_err err = { 0 };
    cdx_hub_ref r;
    if (cdx_hub_parse_ref(ref, &r, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    if (r.kind == CDX_REF_OLLAMA)
        return info_ollama(ref, json);
    if (r.kind != CDX_REF_ALIAS && r.kind != CDX_REF_HF) {
        fprintf(stderr, "caldrix: models info takes an alias, owner/name or ollama:name[:tag] (\"%s\" is a path; "
                "caldrix inspect reads it)\n", ref);
        return 1;
    }
    cdx_hub_env env;
    if (cdx_hub_env_load(&env, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    json_t *o = json_object();
    json_object_set_new(o, "repo", json_string(r.repo));
    const cdx_hub_alias *a = NULL;
    size_t n;
    const cdx_hub_alias *all = cdx_hub_aliases(&n);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(all[i].repo, r.repo))
            a = &all[i];
    json_object_set_new(o, "alias", a ? json_pack("{s:s,s:s,s:s}", "alias", a->alias, "revision", a->revision,
                                                  "note", a->note) : json_null());
    char *rd = cdx_hub_repo_dir(env.hf_cache, r.repo);
    json_object_set_new(o, "cache", json_string(rd ? rd : ""));
    json_t *refs = json_object(), *snaps = json_array();
    char p[4600];
    snprintf(p, sizeof p, "%s/refs", rd ? rd : "");
    list_refs(p, "", refs);
    snprintf(p, sizeof p, "%s/snapshots", rd ? rd : "");
    DIR *d = opendir(p);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sp[4900];
        snprintf(sp, sizeof sp, "%.4600s/%.255s", p, e->d_name);
        char *note = NULL;
        cdx_err e2 = { 0 };
        bool complete = cdx_hub_check_dir(sp, true, &note, &e2) == 0;
        json_t *s = json_pack("{s:s,s:s,s:b,s:I}", "commit", e->d_name, "path", sp, "complete", complete, "bytes",
                              (json_int_t)dir_bytes(sp));
        json_object_set_new(s, "problem", complete ? json_null() : json_string(e2.msg));
        char cp[5000];
        snprintf(cp, sizeof cp, "%.4800s/config.json", sp);
        char *text = NULL;
        size_t len;
        cdx_hub_config c;
        if (cdx_file_read_all(cp, 16u << 20, &text, &len, NULL) == 0 &&
            cdx_hub_check_config(text, len, cp, &c, NULL) == 0)
            json_object_set_new(s, "config", json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "architecture", c.arch,
                                                       "layers", (json_int_t)c.n_layer, "heads", (json_int_t)c.n_head,
                                                       "kv_heads", (json_int_t)c.n_kv_head, "hidden",
                                                       (json_int_t)c.hidden, "head_dim", (json_int_t)c.head_dim,
                                                       "context", (json_int_t)c.ctx_max));
        free(text);
        free(note);
        json_array_append_new(snaps, s);
    }
    if (d)
        closedir(d);
    json_object_set_new(o, "refs", refs);
    json_object_set_new(o, "snapshots", snaps);
    free(rd);
    json_t *entry;
    int bad = index_entry(&env, r.repo, &entry);
    cdx_hub_env_free(&env);
    if (bad) {
        json_decref(o);
        return 1;
    }
    json_object_set_new(o, "index", entry ? entry : json_null());
    if (json) {
        print_index_json(o);
        return 0;
    }
    printf("%s\n", r.repo);
    if (a)
        printf("  alias %s, pinned at %s: %s\n", a->alias, a->revision, a->note);
    printf("  cache: %s\n", json_string_value(json_object_get(o, "cache")));
    const char *k;
    json_t *v;
    json_object_foreach(refs, k, v)
        printf("  ref %s -> %s\n", k, json_string_value(v));
    if (!json_array_size(snaps))
        printf("  not in the cache (caldrix pull %s downloads it)\n", ref);
    for (size_t i = 0; i < json_array_size(snaps); i++) {
        json_t *s = json_array_get(snaps, i);
        char b[32];
        cdx_fmt_bytes((uint64_t)json_integer_value(json_object_get(s, "bytes")), b, sizeof b);
        json_t *c = json_object_get(s, "config");
        printf("  snapshot %s: %s, %s", json_string_value(json_object_get(s, "commit")),
               json_is_true(json_object_get(s, "complete")) ? "complete" : "incomplete", b);
        if (c)
            printf(", %s, %lld layers, hidden %lld", json_string_value(json_object_get(c, "architecture")),
                   (long long)json_integer_value(json_object_get(c, "layers")),
                   (long long)json_integer_value(json_object_get(c, "hidden")));
        printf("\n");
        if (!json_is_true(json_object_get(s, "complete")))
            printf("    %s\n", json_string_value(json_object_get(s, "problem")));
    }
    if (entry)
        print_index_entry(entry);
    else
        printf("  not in the model index\n");
    json_decref(o);
    return 0;
}

static bool matches(const char *hay, int n_words, char **words)
{
    for (int i = 0; i < n_words; i++)
        if (!strcasestr(hay, words[i]))
            return false;
    return true;
}

static void walk_ollama(const char *dir, const char *rel, int depth, int n_words, char **words, json_t *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4600], r[1200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        snprintf(r, sizeof r, "%s%s%s", rel, rel[0] ? (depth == 3 ? ":" : "/") : "", e->d_name);
        if (depth < 3) {
            walk_ollama(p, depth == 0 ? "" : r, depth + 1, n_words, words, out);
            continue;
        }
        /* manifests/<host>/<ns>/<name>/<tag>: r is "ns/name:tag" */
        char name[1300];
        snprintf(name, sizeof name, "ollama:%s", !strncmp(r, "library/", 8) ? r + 8 : r);
        if (matches(name, n_words, words))
            json_array_append_new(out, json_pack("{s:s,s:s}", "ref", name, "where", "caldrix cache"));
    }
    closedir(d);
}

static int cmd_search(int argc, char **argv)
{
    bool json = false;
    char *words[64];
    int n_words = 0;
    cdx_index_query q = { 0 };
    long limit = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--runnable")) q.runnable = true;
        else if (!strcmp(a, "--arch") && has) q.arch = argv[++i];
        else if (!strcmp(a, "--format") && has) {
            q.format = argv[++i];
            if (strcmp(q.format, "gguf") && strcmp(q.format, "safetensors")) {
                fprintf(stderr, "caldrix models search: --format \"%s\": expected gguf or safetensors\n", q.format);
                return 2;
            }
        } else if (!strcmp(a, "--max-params") && has) {
            if (parse_params(argv[++i], &q.max_params) < 0)
                return 2;
        } else if (!strcmp(a, "--limit") && has) {
            if (cli_parse_int("--limit", argv[++i], 1, 100000, &limit) < 0)
                return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "caldrix models search: unknown or incomplete option \"%s\"\n", a);
            return 2;
        } else if (n_words < 64) words[n_words++] = argv[i];
    }
    bool filtered = q.runnable || q.arch || q.format || q.max_params;
    if (!n_words && !filtered) {
        fprintf(stderr, "usage: caldrix models search TEXT... [--arch A] [--format gguf|safetensors] [--max-params N] "
                "[--runnable] [--limit N] [--json]\n");
        return 2;
    }
    json_t *out = json_array();
    /* the index first (a filter restricts the answer to it: only its entries carry those facts) */
    {
        cdx_hub_env env;
        cdx_err err = { 0 };
        cdx_index *ix = NULL;
        if (cdx_hub_env_load(&env, &err) == 0) {
            int bad = open_index(&env, false, true, &ix);
            cdx_hub_env_free(&env);
            if (bad) {
                json_decref(out);
                return 1;
            }
        }
        if (!ix)
            fprintf(stderr, "caldrix: the model index is not there yet (caldrix models update fills it); searching the "
                    "aliases and the caches only\n");
        char *text = NULL;
        q.words = (const char *const *)words;
        q.n_words = (size_t)n_words;
        q.limit = (uint32_t)limit;
        if (ix && q.runnable)
            q.mem_available = mem_available();
        int rc = ix ? cdx_index_search(ix, &q, &text, &err) : 0;
        cdx_index_close(ix);
        if (rc < 0) {
            fprintf(stderr, "caldrix: %s\n", err.msg);
            json_decref(out);
            return 1;
        }
        json_t *arr = text ? json_loads(text, 0, NULL) : NULL;
        free(text);
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) {
            json_t *m = json_pack("{s:O,s:s}", "ref", json_object_get(e, "id"), "where", "index");
            json_object_update(m, e);
            json_array_append_new(out, m);
        }
        json_decref(arr);
    }
    if (filtered)
        goto print;
    size_t n;
    const cdx_hub_alias *a = cdx_hub_aliases(&n);
    for (size_t i = 0; i < n; i++) {
        char hay[600];
        snprintf(hay, sizeof hay, "%s %s %s", a[i].alias, a[i].repo, a[i].note);
        if (matches(hay, n_words, words))
            json_array_append_new(out, json_pack("{s:s,s:s,s:s}", "ref", a[i].alias, "where", "alias", "repo",
                                                 a[i].repo));
    }
    cdx_hub_env env;
    cdx_err err = { 0 };
    if (cdx_hub_env_load(&env, &err) == 0) {
        DIR *d = opendir(env.hf_cache);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, "models--", 8))
                continue;
            char repo[512];
            const char *s = e->d_name + 8, *sep = strstr(s, "--");
            if (!sep)
                continue;
            snprintf(repo, sizeof repo, "%.*s/%s", (int)(sep - s), s, sep + 2);
            if (matches(repo, n_words, words))
                json_array_append_new(out, json_pack("{s:s,s:s}", "ref", repo, "where", "hugging face cache"));
        }
        if (d)
            closedir(d);
        char mp[4200];
        snprintf(mp, sizeof mp, "%s/ollama/manifests", env.caldrix_cache);
        walk_ollama(mp, "", 0, n_words, words, out);
        cdx_hub_env_free(&env);
    }
print:
    if (json) {
        print_index_json(out);
        return 0;
    }
    if (!json_array_size(out))
        printf("no %s matches\n", filtered ? "model of the index" : "model of the index, alias or cached model");
    bool header = false;
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *m = json_array_get(out, i);
        if (!strcmp(json_string_value(json_object_get(m, "where")), "index")) {
            if (!header)
                print_entry_header();
            header = true;
            print_entry_line(m, NULL);
            continue;
        }
        json_t *repo = json_object_get(m, "repo");
        printf("%-40s %s%s%s\n", json_string_value(json_object_get(m, "ref")),
               json_string_value(json_object_get(m, "where")), repo ? " " : "", repo ? json_string_value(repo) : "");
    }
    json_decref(out);
    return 0;
}

/* ---- list and rm ---- */

/* One cached model's row. runs: complete, passes the import rules and inspect finds nothing missing. */
static json_t *list_row(const char *ref, const char *where, const char *path, uint64_t bytes, bool complete,
                        const char *problem)
{
    char why[1200] = "";
    bool runs = false;
    if (complete) {
        cdx_hub_report *r = calloc(1, sizeof *r);
        cdx_err e = { 0 };
        if (!r)
            snprintf(why, sizeof why, "out of memory");
        else if (cdx_hub_inspect_path(path, r, &e) < 0)
            snprintf(why, sizeof why, "%s", e.msg);
        else if (r->refusal[0])
            snprintf(why, sizeof why, "%s", r->refusal);
        else if (strcmp(r->missing_required_tensors, "none"))
            snprintf(why, sizeof why, "missing tensors: %s", r->missing_required_tensors);
        else
            runs = true;
        free(r);
    } else {
        snprintf(why, sizeof why, "%s", problem ? problem : "not complete in the cache");
    }
    json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:b,s:b}", "ref", ref, "where", where, "path", path, "bytes",
                          (json_int_t)bytes, "complete", complete, "runs", runs);
    json_object_set_new(o, "problem", runs ? json_null() : json_string(why));
    return o;
}

static void list_ollama(const char *dir, const char *rel, int depth, json_t *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4600], r[1200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        snprintf(r, sizeof r, "%s%s%s", rel, rel[0] ? (depth == 3 ? ":" : "/") : "", e->d_name);
        if (depth < 3) {
            list_ollama(p, depth == 0 ? "" : r, depth + 1, out);
            continue;
        }
        char name[1300];
        snprintf(name, sizeof name, "ollama:%s", !strncmp(r, "library/", 8) ? r + 8 : r);
        cdx_err err = { 0 };
        cdx_hub_opts o = { .cache_only = true };
        char *path = NULL;
        bool complete = cdx_hub_resolve(name, &o, &path, &err) == 0;
        struct stat st;
        uint64_t bytes = path && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
        json_array_append_new(out, list_row(name, "caldrix cache", path ? path : p, bytes, complete, err.msg));
        free(path);
    }
    closedir(d);
}

json_t *cli_models_cached(const cdx_hub_env *envp)
{
    const cdx_hub_env env = *envp;
    json_t *out = json_array();
    if (!out)
        return NULL;
    DIR *d = opendir(env.hf_cache);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *s = e->d_name + 8, *sep = strncmp(e->d_name, "models--", 8) ? NULL : strstr(s, "--");
        if (!sep)
            continue;
        char repo[600], rd[4600], p[4700];
        snprintf(repo, sizeof repo, "%.*s/%s", (int)(sep - s), s, sep + 2);
        snprintf(rd, sizeof rd, "%s/%s", env.hf_cache, e->d_name);
        snprintf(p, sizeof p, "%s/blobs", rd);
        uint64_t bytes = dir_bytes(p); /* the snapshots are links into blobs/ */
        /* the snapshot main points to, else the newest complete one, else any */
        char commit[41] = "";
        cdx_err e2 = { 0 };
        char snap[4900] = "";
        if (cdx_hub_cache_commit(env.hf_cache, repo, "main", commit, &e2) == 0 && commit[0])
            snprintf(snap, sizeof snap, "%.4600s/snapshots/%.40s", rd, commit);
        snprintf(p, sizeof p, "%s/snapshots", rd);
        DIR *sd = opendir(p);
        struct dirent *se;
        bool complete = false;
        char problem[1024] = "no snapshot";
        if (snap[0] && cdx_hub_check_dir(snap, false, NULL, &e2) == 0)
            complete = true;
        while (!complete && sd && (se = readdir(sd))) {
            if (se->d_name[0] == '.')
                continue;
            snprintf(snap, sizeof snap, "%.4700s/%.190s", p, se->d_name);
            memset(&e2, 0, sizeof e2);
            complete = cdx_hub_check_dir(snap, false, NULL, &e2) == 0;
            if (!complete)
                snprintf(problem, sizeof problem, "%s", e2.msg);
        }
        if (sd)
            closedir(sd);
        json_array_append_new(out, list_row(repo, "hugging face cache", snap[0] ? snap : rd, bytes, complete, problem));
    }
    if (d)
        closedir(d);
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/ollama/manifests", env.caldrix_cache);
    list_ollama(mp, "", 0, out);
    return out;
}

int cli_draft_candidates(const char *cmd, char ***paths, int *n)
{
    *paths = NULL;
    *n = 0;
    cdx_hub_env env;
    cdx_err err = { 0 };
    if (cdx_hub_env_load(&env, &err) < 0) {
        fprintf(stderr, "%s: --draft auto: %s\n", cmd, err.msg);
        return 1;
    }
    json_t *rows = cli_models_cached(&env);
    cdx_hub_env_free(&env);
    const size_t nr = json_array_size(rows);
    char **p = calloc(nr + 1, sizeof *p);
    if (!p) {
        json_decref(rows);
        fprintf(stderr, "%s: out of memory\n", cmd);
        return 1;
    }
    int k = 0;
    for (size_t i = 0; i < nr; i++) {
        json_t *r = json_array_get(rows, i);
        if (json_is_true(json_object_get(r, "complete")) && (p[k] = strdup(json_string_value(json_object_get(r, "path")))))
            k++;
    }
    json_decref(rows);
    *paths = p;
    *n = k;
    return 0;
}

/* ---- the drafts' outcomes on this machine ---- */

/* CALDRIX_CACHE/draft-outcomes.json: {"<model path>": {"<draft path>": {"outcome": "stayed on" | "turned
 * off", "proposed": N, "accepted": N, "by": "run" | "bench" | "serve", "at": "<UTC time>"}}}, paths
 * made absolute (realpath). The latest outcome of each pair replaces the one before. */
static char *outcomes_path(void)
{
    cdx_hub_env env;
    cdx_err err = { 0 };
    if (cdx_hub_env_load(&env, &err) < 0)
        return NULL;
    char *p = malloc(strlen(env.caldrix_cache) + 32);
    if (p)
        sprintf(p, "%s/draft-outcomes.json", env.caldrix_cache);
    cdx_hub_env_free(&env);
    return p;
}

static json_t *outcomes_read(const char *path)
{
    json_t *o = path ? json_load_file(path, 0, NULL) : NULL;
    if (!json_is_object(o)) { /* absent or damaged: starts over */
        json_decref(o);
        o = json_object();
    }
    return o;
}

static void abs_path(const char *p, char *out, size_t cap)
{
    char rp[PATH_MAX];
    snprintf(out, cap, "%s", realpath(p, rp) ? rp : p);
}

void cli_draft_outcome_save(const char *cmd, const char *model, const char *draft, int64_t proposed, int64_t accepted,
                            bool turned_off)
{
    char *path = outcomes_path();
    if (!path || !model || !draft)
        goto out;
    char mk[PATH_MAX], dk[PATH_MAX], tmp[PATH_MAX + 16], when[32];
    abs_path(model, mk, sizeof mk);
    abs_path(draft, dk, sizeof dk);
    json_t *all = outcomes_read(path), *m = json_object_get(all, mk);
    if (!json_is_object(m)) {
        m = json_object();
        json_object_set_new(all, mk, m);
    }
    const time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    json_object_set_new(m, dk, json_pack("{s:s,s:I,s:I,s:s,s:s}", "outcome", turned_off ? "turned off" : "stayed on",
                                         "proposed", (json_int_t)proposed, "accepted", (json_int_t)accepted, "by",
                                         cmd, "at", when));
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *q = dir + 1; *q; q++) /* the cache folder and those above it, as needed */
        if (*q == '/') {
            *q = 0;
            mkdir(dir, 0755);
            *q = '/';
        }
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        mkdir(dir, 0755);
    }
    if (json_dump_file(all, tmp, JSON_INDENT(1) | JSON_SORT_KEYS) || rename(tmp, path)) {
        fprintf(stderr, "caldrix %s: could not record the draft's outcome in %s: %s\n", cmd, path, strerror(errno));
        unlink(tmp);
    }
    json_decref(all);
out:
    free(path);
}

/* The last outcome of draft for model ("" when none), as "<draft> was turned off" / "stayed on". */
static json_t *outcome_of(json_t *all, const char *model, const char *draft)
{
    char mk[PATH_MAX], dk[PATH_MAX];
    abs_path(model, mk, sizeof mk);
    abs_path(draft, dk, sizeof dk);
    return json_object_get(json_object_get(all, mk), dk);
}

/* models drafts REF where REF is on disk (a path, or an alias, repo or Ollama tag in the caches): the
 * cached models judged as --draft auto judges them, best first, each with its last outcome here. */
static int drafts_local(cdx_loaded *t, const char *ref, bool json)
{
    char **paths = NULL;
    int n = 0;
    if (cli_draft_candidates("caldrix models drafts", &paths, &n))
        return 1;
    cdx_draft_verdict *v = NULL;
    int nv = 0;
    cdx_err err = { 0 };
    const int rc = cdx_load_judge_drafts(t, ref, (const char *const *)paths, n, &v, &nv, &err);
    char *op = outcomes_path();
    json_t *all = outcomes_read(op);
    free(op);
    int status = 0;
    if (rc) {
        fprintf(stderr, "caldrix models drafts: %s\n", err.msg);
        status = 1;
        goto done;
    }
    if (json) {
        json_t *arr = json_array();
        for (int i = 0; i < nv; i++) {
            json_t *last = outcome_of(all, t->path, v[i].path);
            json_array_append_new(arr, json_pack("{s:s,s:I,s:b,s:s?,s:O?}", "path", v[i].path, "weight_bytes",
                                                 (json_int_t)v[i].weight_bytes, "ok", v[i].ok, "why",
                                                 v[i].ok ? NULL : v[i].why, "last_run", last));
        }
        json_t *o = json_pack("{s:s,s:s,s:I,s:o}", "model", ref, "path", t->path ? t->path : "", "weight_bytes",
                              (json_int_t)cdx_model_weight_bytes(t->model), "candidates", arr);
        print_json(o);
        goto done;
    }
    int n_ok = 0;
    for (int i = 0; i < nv; i++)
        n_ok += v[i].ok;
    printf("%d draft candidate%s for %s among %d cached model%s (%zu weight bytes a token)%s\n", n_ok,
           n_ok == 1 ? "" : "s", ref, n, n == 1 ? "" : "s", cdx_model_weight_bytes(t->model), n_ok ? ", best first:" : "");
    for (int i = 0; i < nv; i++) {
        if (!v[i].ok)
            continue;
        json_t *last = outcome_of(all, t->path, v[i].path);
        printf("  %s (%llu weight bytes a token)", v[i].path, (unsigned long long)v[i].weight_bytes);
        if (last)
            printf("; last run on this machine: %s %s (accepted %lld of %lld, caldrix %s, %s)", v[i].path,
                   !strcmp(json_string_value(json_object_get(last, "outcome")) ?: "", "turned off") ? "was turned off"
                                                                                                  : "stayed on",
                   (long long)json_integer_value(json_object_get(last, "accepted")),
                   (long long)json_integer_value(json_object_get(last, "proposed")),
                   json_string_value(json_object_get(last, "by")), json_string_value(json_object_get(last, "at")));
        printf("\n");
    }
    if (nv > n_ok)
        printf("passed over:\n");
    for (int i = 0; i < nv; i++)
        if (!v[i].ok)
            printf("  %s: %s\n", v[i].path, v[i].why);
done:
    json_decref(all);
    free(v);
    for (int i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    return status;
}

static int cmd_list(int argc, char **argv)
{
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else { fprintf(stderr, "caldrix models list: unexpected argument \"%s\" (caldrix models --help)\n", argv[i]); return 2; }
    }
    cdx_hub_env env;
    cdx_err err = { 0 };
    if (cdx_hub_env_load(&env, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    json_t *out = cli_models_cached(&env);
    cdx_hub_env_free(&env);
    if (json) {
        print_json(out);
        return 0;
    }
    if (!json_array_size(out))
        printf("the caches hold no model (caldrix pull REF downloads one)\n");
    else
        printf("%-40s %10s  %s\n", "MODEL", "SIZE", "RUNS");
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *m = json_array_get(out, i);
        char b[32];
        cdx_fmt_bytes((uint64_t)json_integer_value(json_object_get(m, "bytes")), b, sizeof b);
        bool runs = json_is_true(json_object_get(m, "runs"));
        printf("%-40s %10s  %s%s%s\n", json_string_value(json_object_get(m, "ref")), b,
               runs ? "yes" : json_is_true(json_object_get(m, "complete")) ? "no: " : "no (incomplete): ",
               runs ? "" : json_string_value(json_object_get(m, "problem")), "");
    }
    json_decref(out);
    return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static int rm_tree(const char *dir) { return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* The blobs the links under dir point to (realpaths), appended to out. */
static void linked_blobs(const char *dir, json_t *out)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4600], real[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            linked_blobs(p, out);
        else if (S_ISLNK(st.st_mode) && realpath(p, real))
            json_array_append_new(out, json_string(real));
    }
    if (d)
        closedir(d);
}

static int rm_ollama(const cdx_hub_ref *r, const char *ref)
{
    cdx_hub_env env;
    cdx_err err = { 0 };
    if (cdx_hub_env_load(&env, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    /* where hub_resolve_ollama puts a tag: the registry host with ':' as '_' */
    const char *h = strstr(env.ollama_registry, "://");
    h = h ? h + 3 : env.ollama_registry;
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)strcspn(h, "/"), h);
    for (char *c = host; *c; c++)
        if (*c == ':')
            *c = '_';
    char mpath[4600], mdir[4600], models[4400];
    snprintf(mpath, sizeof mpath, "%s/ollama/manifests/%s/%s/%s/%s", env.caldrix_cache, host, r->ns, r->name, r->tag);
    snprintf(mdir, sizeof mdir, "%s/ollama/models/%s/%s/%s/%s", env.caldrix_cache, host, r->ns, r->name, r->tag);
    snprintf(models, sizeof models, "%s/ollama/models", env.caldrix_cache);
    struct stat st;
    if (stat(mpath, &st) != 0 && lstat(mdir, &st) != 0) {
        fprintf(stderr, "caldrix models rm: %s is not in the cache (no %s); nothing removed\n", ref, mpath);
        cdx_hub_env_free(&env);
        return 1;
    }
    json_t *mine = json_array(), *others = json_array();
    linked_blobs(mdir, mine);
    int bad = (stat(mpath, &st) == 0 && unlink(mpath) != 0) || (lstat(mdir, &st) == 0 && rm_tree(mdir) != 0);
    linked_blobs(models, others);
    uint64_t freed = 0;
    for (size_t i = 0; i < json_array_size(mine); i++) {
        const char *b = json_string_value(json_array_get(mine, i));
        bool shared = false;
        for (size_t k = 0; k < json_array_size(others) && !shared; k++)
            shared = !strcmp(b, json_string_value(json_array_get(others, k)));
        if (!shared && stat(b, &st) == 0) {
            freed += (uint64_t)st.st_size;
            bad |= unlink(b) != 0;
        }
    }
    json_decref(mine);
    json_decref(others);
    char sz[32];
    cdx_fmt_bytes(freed, sz, sizeof sz);
    if (bad)
        fprintf(stderr, "caldrix models rm: %s: could not remove every file (%s)\n", ref, strerror(errno));
    else
        printf("removed %s (%s freed)\n", ref, sz);
    cdx_hub_env_free(&env);
    return bad ? 1 : 0;
}

static int cmd_rm(int argc, char **argv)
{
    if (argc != 1 || argv[0][0] == '-') {
        fprintf(stderr, "usage: caldrix models rm REF (an alias, owner/name or ollama:name[:tag])\n");
        return 2;
    }
    const char *ref = argv[0];
    cdx_err err = { 0 };
    cdx_hub_ref r;
    if (cdx_hub_parse_ref(ref, &r, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 2;
    }
    if (r.kind == CDX_REF_OLLAMA)
        return rm_ollama(&r, ref);
    if (r.kind != CDX_REF_ALIAS && r.kind != CDX_REF_HF) {
        fprintf(stderr, "caldrix models rm: \"%s\" is a path, not a cached model; caldrix removes only what is in "
                "its caches\n", ref);
        return 2;
    }
    if (r.kind == CDX_REF_HF && strchr(ref, '@')) {
        fprintf(stderr, "caldrix models rm: %s names a revision; rm removes a repo with every revision: give %s\n",
                ref, r.repo);
        return 2;
    }
    cdx_hub_env env;
    if (cdx_hub_env_load(&env, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    char *rd = cdx_hub_repo_dir(env.hf_cache, r.repo);
    struct stat st;
    int rc = 0;
    if (!rd || stat(rd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "caldrix models rm: %s is not in the cache (no %s); nothing removed\n", ref, rd ? rd : "?");
        rc = 1;
    } else {
        char p[4600], sz[32];
        snprintf(p, sizeof p, "%s/blobs", rd);
        cdx_fmt_bytes(dir_bytes(p), sz, sizeof sz);
        if (rm_tree(rd) != 0) {
            fprintf(stderr, "caldrix models rm: %s: cannot remove %s: %s\n", ref, rd, strerror(errno));
            rc = 1;
        } else {
            printf("removed %s (%s freed: %s)\n", ref, sz, rd);
        }
    }
    free(rd);
    cdx_hub_env_free(&env);
    return rc;
}

int cmd_models(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    if (!strcmp(argv[1], "supported")) return cmd_supported(argc - 2, argv + 2);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 2, argv + 2);
    if (!strcmp(argv[1], "search")) return cmd_search(argc - 2, argv + 2);
    if (!strcmp(argv[1], "related")) return cmd_related(argc - 2, argv + 2, false);
    if (!strcmp(argv[1], "drafts")) return cmd_related(argc - 2, argv + 2, true);
    if (!strcmp(argv[1], "update")) return cmd_update(argc - 2, argv + 2);
    if (!strcmp(argv[1], "rules")) return cmd_rules(argc - 2, argv + 2);
    if (!strcmp(argv[1], "list")) return cmd_list(argc - 2, argv + 2);
    if (!strcmp(argv[1], "rm")) return cmd_rm(argc - 2, argv + 2);
    fprintf(stderr, "caldrix models: unknown subcommand \"%s\" (supported, info, search, related, drafts, update, rules, list, rm)\n", argv[1]);
    return 2;
}
