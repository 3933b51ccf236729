/* Every case of ../shared/fixtures/chat/<model>/cases.jsonl (rendered by Python Jinja2 in
 * transformers' chat-template environment) renders byte for byte, and every expected error is
 * raised with its message. One test case per model folder. */
#include "caldrix.h"
#include "test.h"

#include <dirent.h>
#include <jansson.h>

#define CHAT_DIR "../shared/fixtures/chat"

static int g_cases, g_pass;
static char g_model[256];

static void show_diff(const char *want, size_t wn, const char *got, size_t gn)
{
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i])
        i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "    first difference at byte %zu\n    want: %.*s\n    got:  %.*s\n", i,
            (int)((wn - from) > 160 ? 160 : (wn - from)), want + from, (int)((gn - from) > 160 ? 160 : (gn - from)),
            got + from);
}

static void run_model(void)
{
    char path[512];
    snprintf(path, sizeof path, CHAT_DIR "/%s/template.jinja", g_model);
    char *src = NULL;
    size_t src_len = 0;
    cdx_err err = {0};
    REQUIRE(cdx_file_read_all(path, 1 << 24, &src, &src_len, &err) == 0);
    cdx_tmpl *t = NULL;
    int rc = cdx_tmpl_parse(src, src_len, &t, &err);
    free(src);
    CHECKF(rc == 0, "%s: %s", path, err.msg);
    if (rc)
        return;
    snprintf(path, sizeof path, CHAT_DIR "/%s/cases.jsonl", g_model);
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int local = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *c = json_loadb(line, (size_t)n, 0, &je);
        CHECKF(c != NULL, "%s: bad line: %s", path, je.text);
        if (!c)
            continue;
        local++;
        g_cases++;
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *want = json_object_get(c, "rendered"), *want_err = json_object_get(c, "error");
        char *out = NULL;
        size_t out_len = 0;
        cdx_err e = {0};
        rc = cdx_chat_render(t, json_object_get(c, "messages"), json_is_true(json_object_get(c, "add_generation_prompt")),
                             NULL, json_object_get(c, "extra"), &out, &out_len, &e);
        if (want) {
            bool ok = rc == 0 && out_len == json_string_length(want) &&
                      memcmp(out, json_string_value(want), out_len) == 0;
            CHECKF(ok, "%s/%s: %s", g_model, name, rc ? e.msg : "output differs");
            if (!ok && rc == 0)
                show_diff(json_string_value(want), json_string_length(want), out, out_len);
            g_pass += ok;
        } else {
            bool ok = rc == CDX_ETEMPLATE && strstr(e.msg, json_string_value(want_err)) != NULL;
            CHECKF(ok, "%s/%s: expected error \"%s\", got rc %d: %s", g_model, name, json_string_value(want_err), rc,
                   rc ? e.msg : "(rendered)");
            g_pass += ok;
        }
        free(out);
        json_decref(c);
    }
    free(line);
    fclose(f);
    CHECKF(local > 0, "%s: no cases", path);
    cdx_tmpl_free(t);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void)
{
    DIR *d = opendir(CHAT_DIR);
    if (!d) {
        fprintf(stderr, "%s is missing: the chat fixtures are needed\n", CHAT_DIR);
        printf("template_golden: 0 passed, 1 failed\n");
        return 1;
    }
    char *names[256];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 256) {
        if (e->d_name[0] == '.')
            continue;
        char p[512];
        snprintf(p, sizeof p, CHAT_DIR "/%s/cases.jsonl", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f)
            continue;
        fclose(f);
        names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof names[0], cmp_str);
    for (int i = 0; i < nn; i++) {
        snprintf(g_model, sizeof g_model, "%s", names[i]);
        char title[320];
        snprintf(title, sizeof title, "chat template %s renders every case like Python Jinja2", names[i]);
        RUN(title, run_model);
        free(names[i]);
    }
    fprintf(stderr, "chat fixture cases: %d of %d pass\n", g_pass, g_cases);
    return t_done("template_golden");
}
