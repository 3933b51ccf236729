/* caldrix models supported|info|search|rules: offline, from the tables compiled in and the caches. */
#include "cli.h"
#include "cli_hub.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: caldrix models supported [--all] [--json]\n"
               "       caldrix models info REF [--json]\n"
               "       caldrix models search TEXT... [--json]\n"
               "       caldrix models rules [--json]\n\n"
               "supported  the aliases, each a Hugging Face repo at a pinned revision (--all: and the accepted\n"
               "           architectures)\n"
               "info       an alias or repo: its pin, and what the cache holds (refs, snapshots, completeness)\n"
               "search     aliases and cached models whose names contain every TEXT (case-insensitive)\n"
               "rules      what the import refuses, one rule per line (the table the checks read)\n"
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
            cli_fmt_bytes((uint64_t)json_integer_value(json_object_get(m, "bytes")), b, sizeof b);
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
        cli_fmt_bytes((uint64_t)json_integer_value(json_object_get(s, "bytes")), b, sizeof b);
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
    fprintf(stderr, "caldrix models: unknown subcommand \"%s\" (supported, info, search, rules)\n", argv[1]);
    return 2;
}
