/* caldrix models supported|info|search|rules|list|rm: offline, from the tables compiled in and the caches. */
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
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: caldrix models supported [--all] [--json]\n"
               "       caldrix models info REF [--json]\n"
               "       caldrix models search TEXT... [--json]\n"
               "       caldrix models rules [--json]\n"
               "       caldrix models list [--json]\n"
               "       caldrix models rm REF\n\n"
               "supported  the aliases, each a Hugging Face repo at a pinned revision (--all: and the accepted\n"
               "           architectures)\n"
               "info       an alias or repo: its pin, and what the cache holds (refs, snapshots, completeness)\n"
               "search     aliases and cached models whose names contain every TEXT (case-insensitive)\n"
               "rules      what the import refuses, one rule per line (the table the checks read)\n"
               "list       every model in the caches (Hugging Face repos and Ollama tags): its size on disk, whether\n"
               "           it is complete, and whether caldrix can run it (and why not)\n"
               "rm         removes a cached model: a repo's whole models--OWNER--NAME folder (every revision), or an\n"
               "           Ollama tag's manifest and the blobs no other cached tag uses. REF not in the cache:\n"
               "           exit 1, nothing removed\n"
               "All offline: nothing here touches the network.\n");
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
    cdx_hub_env_free(&env);
    if (json) {
        print_json(o);
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
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (n_words < 64) words[n_words++] = argv[i];
    }
    if (!n_words) {
        fprintf(stderr, "usage: caldrix models search TEXT... [--json]\n");
        return 2;
    }
    json_t *out = json_array();
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
    if (json) {
        print_json(out);
        return 0;
    }
    if (!json_array_size(out))
        printf("no alias or cached model matches\n");
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *m = json_array_get(out, i);
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
    json_t *out = json_array();
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
    if (!strcmp(argv[1], "rules")) return cmd_rules(argc - 2, argv + 2);
    if (!strcmp(argv[1], "list")) return cmd_list(argc - 2, argv + 2);
    if (!strcmp(argv[1], "rm")) return cmd_rm(argc - 2, argv + 2);
    fprintf(stderr, "caldrix models: unknown subcommand \"%s\" (supported, info, search, rules, list, rm)\n", argv[1]);
    return 2;
}
