/* One verdict per model: for every fixture in ../shared/fixtures/hf (and its GGUF twins in hf-gguf),
 * the import rules run before a download (cdx_hub_check_config on config.json alone), `caldrix
 * inspect` (cdx_hub_inspect_path: headers only, exit 1 on a refusal) and the loader that `run`
 * uses (cdx_model_open) must all accept it or all refuse it, Idefics3 (SmolVLM) included. And where both read config.json, the import rules see the dimensions the loader sees (the same
 * reader, the same transformers defaults for absent keys). */
#include "caldrix.h"
#include "test.h"

#include <dirent.h>
#include <sys/stat.h>

static const char *g_path;

/* inspect's verdict, as cmd_inspect decides its exit status */

static bool inspect_accepts(const char *path, char *why, size_t cap)
{
    cdx_hub_report *r = calloc(1, sizeof *r);
    cdx_err e = { 0 };
    bool ok = false;
    if (!r) {
        snprintf(why, cap, "out of memory");
        return false;
    }
    if (cdx_hub_inspect_path(path, r, &e) < 0)
        snprintf(why, cap, "%s", e.msg);
    else if (r->refusal[0])
        snprintf(why, cap, "%s", r->refusal);
    else if (strcmp(r->missing_required_tensors, "none"))
        snprintf(why, cap, "missing %s", r->missing_required_tensors);
    else if (strcmp(r->unsupported_tensor_types, "none"))
        snprintf(why, cap, "unsupported %s", r->unsupported_tensor_types);
    else
        ok = true;
    free(r);
    return ok;
}

static bool rules_accept(const char *dir, char *why, size_t cap)
{
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    cdx_err e = { 0 };
    if (cdx_file_read_all(p, 1 << 20, &text, &len, &e)) {
        snprintf(why, cap, "%s", e.msg);
        return false;
    }
    cdx_hub_config c;
    int rc = cdx_hub_check_config(text, len, p, &c, &e);
    free(text);
    if (rc)
        snprintf(why, cap, "%s", e.msg);
    return rc == 0;
}

static bool loader_accepts(const char *path, char *why, size_t cap)
{
    cdx_model *m = NULL;
    cdx_err e = { 0 };
    int rc = cdx_model_open(path, NULL, &m, &e);
    if (rc)
        snprintf(why, cap, "%s", e.msg);
    cdx_model_close(m);
    return rc == 0;
}

static void one_verdict(void)
{
    static char w_rules[1100], w_insp[1100], w_load[1100];
    struct stat st;
    REQUIRE(stat(g_path, &st) == 0);
    const bool dir = S_ISDIR(st.st_mode);
    w_rules[0] = w_insp[0] = w_load[0] = 0;
    bool rules = dir ? rules_accept(g_path, w_rules, sizeof w_rules) : true;
    bool insp = inspect_accepts(g_path, w_insp, sizeof w_insp);
    bool load = loader_accepts(g_path, w_load, sizeof w_load);
    CHECKF(insp == load && (!dir || rules == load),
           "%s: %s\n      import rules: %s %s\n      inspect:      %s %s\n      loader:       %s %s", g_path,
           "the verdicts differ", dir ? (rules ? "accept" : "refuse") : "n/a", w_rules, insp ? "accept" : "refuse",
           w_insp, load ? "accept" : "refuse", w_load);
    printf("  %s: %s%s\n", g_path, load ? "accepted" : "refused: ", load ? "" : w_load);
    if (!dir || !rules || !load)
        return;
    /* the dimensions the import reports are the loader's */
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", g_path);
    char *text = NULL;
    size_t len = 0;
    cdx_err e = { 0 };
    REQUIRE(cdx_file_read_all(p, 1 << 20, &text, &len, &e) == 0);
    cdx_hub_config c;
    cdx_hf_config *hf = malloc(sizeof *hf);
    REQUIRE(hf && cdx_hub_check_config(text, len, p, &c, &e) == 0 && cdx_hf_config_parse(text, len, p, hf, &e) == 0);
    CHECKF(c.n_kv_head == hf->n_kv_heads && c.head_dim == hf->head_dim && c.sliding_window == hf->sliding_window &&
           c.ctx_max == hf->max_position_embeddings && c.n_expert == hf->n_experts &&
           c.n_expert_used == hf->n_experts_per_tok, "%s: the import and the loader read config.json differently", p);
    free(hf);
    free(text);
}

/* Configs whose absent keys the two used to default differently (num_key_value_heads, head_dim). */
static void absent_keys_get_the_loaders_defaults(void)
{
    static const struct { const char *json; int64_t kv, hd; } cases[] = {
        { "{\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
          "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":100}", 2, 128 },
        { "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
          "\"num_attention_heads\":4,\"intermediate_size\":128,\"vocab_size\":100}", 4, 16 },
        { "{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
          "\"num_attention_heads\":16,\"intermediate_size\":128,\"vocab_size\":100}", 8, 4 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cdx_hub_config c;
        cdx_err e = { 0 };
        int rc = cdx_hub_check_config(cases[i].json, strlen(cases[i].json), "x/config.json", &c, &e);
        CHECKF(rc == 0 && c.n_kv_head == cases[i].kv && c.head_dim == cases[i].hd, "case %zu: rc %d (%s), kv %lld, "
               "head_dim %lld", i, rc, e.msg, (long long)c.n_kv_head, (long long)c.head_dim);
    }
    /* Qwen2Config's default of 32 kv heads does not divide 4 heads: refused before a download, as the loader does */
    const char *q2 = "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
                     "\"num_attention_heads\":4,\"intermediate_size\":128,\"vocab_size\":100}";
    cdx_err e = { 0 };
    CHECKF(cdx_hub_check_config(q2, strlen(q2), "x/config.json", NULL, &e) == CDX_EUNSUPPORTED &&
           strstr(e.msg, "num_key_value_heads is 32"), "%s", e.msg);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void)
{
    static char paths[64][300], names[64][360];
    char *list[64];
    int n = 0;
    const char *roots[] = { SHARED "/fixtures/hf", SHARED "/fixtures/hf-gguf" };
    for (int r = 0; r < 2; r++) {
        DIR *d = opendir(roots[r]);
        if (!d) {
            fprintf(stderr, "cannot open %s\n", roots[r]);
            return 1;
        }
        struct dirent *de;
        while ((de = readdir(d)) && n < 64) {
            if (de->d_name[0] == '.')
                continue;
            size_t k = strlen(de->d_name);
            char p[300];
            snprintf(p, sizeof p, "%s/%s", roots[r], de->d_name);
            struct stat st;
            if (stat(p, &st))
                continue;
            if (r == 0 ? !S_ISDIR(st.st_mode) : !(k > 5 && !strcmp(de->d_name + k - 5, ".gguf")))
                continue;
            snprintf(paths[n], sizeof paths[n], "%s", p);
            list[n] = paths[n];
            n++;
        }
        closedir(d);
    }
    qsort(list, (size_t)n, sizeof *list, cmp_str);
    for (int i = 0; i < n; i++) {
        g_path = list[i];
        snprintf(names[i], sizeof names[i], "%s: the import rules, inspect and the loader agree", list[i]);
        RUN(names[i], one_verdict);
    }
    RUN("absent config.json keys get the loader's defaults in the import rules", absent_keys_get_the_loaders_defaults);
    return t_done("verdicts");
}
