/* One verdict per model, with one message. For every fixture in ../shared/fixtures/hf and
 * ../shared/fixtures/hf-gguf, for a refusal case of every rule in the import rules' table
 * (cdx_hub_rules: each is one edit of a fixture's config.json), and for the malformed mixtures of
 * experts (expert count 0, top-k above the experts, expert shapes that disagree, experts missing):
 *   - the hub's pre-download check (cdx_hub_check_config on config.json alone),
 *   - `caldrix inspect` (cdx_hub_inspect_path, and the binary: its whole report, exit 1 on a refusal,
 *     0 only when run would run the model),
 *   - and what `caldrix run` opens with (cdx_model_open, and the binary's message)
 * accept together or refuse together, with the same message. The pre-download check reads
 * config.json alone, so it refuses every config.json refusal and accepts the models whose fault is
 * in their tensors (which inspect and run then refuse alike). Where both read config.json, the
 * import rules see the dimensions the loader sees. */
#include "caldrix.h"
#include "test.h"
#include "test_blob.h"

#include <dirent.h>
#include <jansson.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_tmp[64];
static const char *g_caldrix;

typedef struct {
    bool ok;
    char msg[1100];
} verdict;

/* ---- the three verdicts ---- */

static verdict rules_verdict(const char *dir)
{
    verdict v = { false, "" };
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    cdx_err e = { 0 };
    if (cdx_file_read_all(p, 1 << 20, &text, &len, &e)) {
        snprintf(v.msg, sizeof v.msg, "%s", e.msg);
        return v;
    }
    cdx_hub_config c;
    v.ok = cdx_hub_check_config(text, len, p, &c, &e) == 0;
    if (!v.ok)
        snprintf(v.msg, sizeof v.msg, "%s", e.msg);
    free(text);
    return v;
}

/* inspect's verdict, as cmd_inspect decides its exit status */
static verdict inspect_verdict(const char *path)
{
    verdict v = { false, "" };
    cdx_hub_report *r = calloc(1, sizeof *r);
    cdx_err e = { 0 };
    if (!r)
        snprintf(v.msg, sizeof v.msg, "out of memory");
    else if (cdx_hub_inspect_path(path, r, &e) < 0)
        snprintf(v.msg, sizeof v.msg, "%s", e.msg);
    else if (r->refusal[0])
        snprintf(v.msg, sizeof v.msg, "%s", r->refusal);
    else if (strcmp(r->missing_required_tensors, "none"))
        snprintf(v.msg, sizeof v.msg, "missing %s", r->missing_required_tensors);
    else if (strcmp(r->unsupported_tensor_types, "none"))
        snprintf(v.msg, sizeof v.msg, "unsupported %s", r->unsupported_tensor_types);
    else
        v.ok = true;
    free(r);
    return v;
}

static verdict loader_verdict(const char *path)
{
    verdict v = { false, "" };
    cdx_model *m = NULL;
    cdx_err e = { 0 };
    v.ok = cdx_model_open(path, NULL, &m, &e) == 0;
    if (!v.ok)
        snprintf(v.msg, sizeof v.msg, "%s", e.msg);
    cdx_model_close(m);
    return v;
}

/* ---- the binary ---- */

/* Runs `caldrix ARGS PATH` with stdout and stderr into files; returns the exit status (-1: not run). */
static int run_cli(const char *args, const char *path, const char *out, const char *errf)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' >'%s' 2>'%s'", g_caldrix, args, path, out, errf);
    int st = system(cmd);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

static char *slurp_text(const char *path)
{
    char *t = NULL;
    size_t n;
    cdx_err e = { 0 };
    return cdx_file_read_all(path, 1 << 20, &t, &n, &e) ? NULL : t;
}

/* inspect prints its whole report whatever the verdict, then exits 0 or 1; run refuses with the message */
static void check_cli(const char *path, bool gguf, const verdict *load)
{
    char out[128], errf[128];
    snprintf(out, sizeof out, "%s/cli.out", g_tmp);
    snprintf(errf, sizeof errf, "%s/cli.err", g_tmp);
    int rc = run_cli("inspect", path, out, errf);
    char *o = slurp_text(out), *e = slurp_text(errf);
    REQUIRE(o && e);
    CHECKF(rc == (load->ok ? 0 : 1), "%s: caldrix inspect exited %d; run %s it", path, rc,
           load->ok ? "opens" : "refuses");
    static const char *const lines[] = { "architecture=", "  family=", "  tensor_types=", "  unsupported_tensor_types=",
                                         "  missing_required_tensors=", "  estimated_memory=" };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        CHECKF(strstr(o, lines[i]), "%s: the report lacks \"%s\":\n%s", path, lines[i], o);
    if (!gguf)
        CHECKF(strstr(o, "  unused_tensors="), "%s: the report lacks unused_tensors:\n%s", path, o);
    if (!load->ok) {
        char want[1200];
        snprintf(want, sizeof want, "  refused: %s\n", load->msg);
        CHECKF(strstr(o, want), "%s: inspect's report does not end with run's refusal \"%s\":\n%s", path, load->msg, o);
        snprintf(want, sizeof want, "caldrix cannot run this model: %s\n", load->msg);
        CHECKF(strstr(e, want), "%s: inspect's stderr lacks \"%s\": %s", path, want, e);
    } else
        CHECKF(!strstr(o, "refused:"), "%s: inspect refuses a model run opens:\n%s", path, o);
    free(o);
    free(e);
    if (load->ok)
        return;
    rc = run_cli("run -n 1 -p hi", path, out, errf);
    e = slurp_text(errf);
    REQUIRE(e);
    char want[1200];
    snprintf(want, sizeof want, "caldrix: %s\n", load->msg);
    CHECKF(rc != 0 && strstr(e, want), "%s: caldrix run exited %d with \"%s\"; the loader says \"%s\"", path, rc, e,
           load->msg);
    free(e);
}

/* The three verdicts of one model. config_refusal: a case whose fault is in config.json (the
 * pre-download check must refuse it); a fixture or a tensor-level case: it must accept it. */
static void judge(const char *path, bool config_refusal, bool expect_ok, const char *want)
{
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    const bool dir = S_ISDIR(st.st_mode);
    const verdict rules = dir ? rules_verdict(path) : (verdict){ true, "" };
    const verdict insp = inspect_verdict(path), load = loader_verdict(path);
    printf("  %s: %s%s\n", path, load.ok ? "accepted" : "refused: ", load.ok ? "" : load.msg);
    CHECKF(load.ok == expect_ok, "%s: run %s it", path, load.ok ? "opens" : "refuses");
    CHECKF(insp.ok == load.ok && (load.ok || !strcmp(insp.msg, load.msg)),
           "%s: inspect and run differ\n      inspect: %s %s\n      run:     %s %s", path,
           insp.ok ? "accept" : "refuse", insp.msg, load.ok ? "accept" : "refuse", load.msg);
    if (dir) {
        CHECKF(rules.ok == !config_refusal, "%s: the pre-download check %s it: %s", path,
               rules.ok ? "accepts" : "refuses", rules.msg);
        CHECKF(rules.ok || !strcmp(rules.msg, load.msg),
               "%s: the pre-download check and run differ\n      check: %s\n      run:   %s", path, rules.msg, load.msg);
    }
    if (want)
        CHECKF(strstr(load.msg, want), "%s: run's refusal \"%s\" does not name \"%s\"", path, load.msg, want);
    check_cli(path, !dir, &load);
    if (!dir || !rules.ok || !load.ok)
        return;
    /* the dimensions the import reports are the loader's */
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", path);
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

/* ---- the fixtures ---- */

static const char *g_path;

/* BitNet (no fixture in ../shared: scripts/goldens/tiny_fixtures.py writes it): the packed checkpoint and its
 * SiLU variant's GGUF (caldrix convert) are accepted by all three; the same bytes without quantization_config
 * (plain linears over U8 weights), and a BitLinear weight that is not packed U8, are refused alike. */
static char g_bn[5][200];
static void bitnet_fixture(void) { judge(g_bn[0], false, true, NULL); }
static void bitnet_gguf(void) { judge(g_bn[1], false, true, NULL); }
static void bitnet_no_quant_config(void) { judge(g_bn[2], false, false, "has dtype U8"); }
static void bitnet_unpacked(void) { judge(g_bn[3], false, false, "a BitLinear's packed weight is U8"); }
static void bitnet_zero_scale(void) { judge(g_bn[4], false, false, "weight_scale\" is 0; a BitLinear divides by it"); }

static void fixture_verdict(void) { judge(g_path, false, true, NULL); }

/* A fixture of a family caldrix does not run yet (tests/hub/families_not_yet.txt): refused by all
 * three, by config.json, with a message naming its architecture. */
static char g_arch[128];
static void fixture_not_yet(void) { judge(g_path, true, false, g_arch); }

static bool not_yet(const char *name)
{
    FILE *f = fopen("tests/hub/families_not_yet.txt", "r");
    CHECKF(f, "cannot open tests/hub/families_not_yet.txt");
    if (!f)
        return false;
    char line[128];
    bool hit = false;
    while (!hit && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        hit = line[0] != '#' && !strcmp(line, name);
    }
    fclose(f);
    return hit;
}

/* The single name of config.json's "architectures" (read with jansson, not caldrix's reader). */
static void config_arch(const char *dir, char *out, size_t cap)
{
    char p[400];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_error_t je;
    json_t *c = json_load_file(p, 0, &je);
    const char *a = c ? json_string_value(json_array_get(json_object_get(c, "architectures"), 0)) : NULL;
    snprintf(out, cap, "%s", a ? a : "?");
    json_decref(c);
}

/* ---- the refusal cases: one edit of a fixture each ---- */

typedef struct {
    const char *rule;      /* the rule of cdx_hub_rules it exercises; NULL: a fault in the tensors */
    const char *fixture;   /* ../shared/fixtures/hf/<fixture>, or hf-gguf/<fixture>.gguf when gguf */
    bool gguf;
    const char *merge;     /* JSON object merged into config.json (recursively), or NULL */
    const char *from, *to; /* bytes of model.safetensors / the GGUF file replaced (same length), or NULL */
    const char *u32_key;   /* a GGUF u32 metadata value set to u32 */
    uint32_t u32;
    const char *want;      /* what the message names */
} vcase;

static const vcase k_cases[] = {
    /* config.json: a case for every rule */
    { "architecture", "llama", false, "{\"architectures\":[\"GPT2LMHeadModel\"]}", NULL, NULL, NULL, 0, "GPT2LMHeadModel" },
    { "architecture", "llama", false, "{\"architectures\":null}", NULL, NULL, NULL, 0, "architectures is absent" },
    { "architecture", "llama", false, "{\"architectures\":[\"LlamaForCausalLM\",\"X\"]}", NULL, NULL, NULL, 0, "not exactly one" },
    { "dtype", "llama", false, "{\"torch_dtype\":\"int8\"}", NULL, NULL, NULL, 0, "torch_dtype is \"int8\"" },
    { "quantized", "llama", false, "{\"quantization_config\":{\"quant_method\":\"awq\"}}", NULL, NULL, NULL, 0, "quantization_config" },
    { "activation", "llama", false, "{\"hidden_act\":\"gelu\"}", NULL, NULL, NULL, 0, "hidden_act is \"gelu\"" },
    { "activation", "qwen3", false, "{\"hidden_activation\":\"gelu_pytorch_tanh\"}", NULL, NULL, NULL, 0, "hidden_activation" },
    { "mlp_bias", "llama", false, "{\"mlp_bias\":true}", NULL, NULL, NULL, 0, "mlp_bias is true" },
    { "attention_bias", "llama", false, "{\"attention_bias\":true}", NULL, NULL, NULL, 0, "attention_bias is true" },
    { "rope_interleaved", "qwen2", false, "{\"rope_interleaved\":true}", NULL, NULL, NULL, 0, "rope_interleaved is true" },
    { "rope_scaling", "llama", false, "{\"rope_scaling\":{\"rope_type\":\"proportional\",\"factor\":4}}", NULL, NULL, NULL, 0, "proportional" },
    { "rope_scaling", "llama", false, "{\"rope_scaling\":{\"rope_type\":\"default\",\"factor\":2}}", NULL, NULL, NULL, 0, "rope_scaling.factor is 2" },
    { "sliding_window", "qwen2", false, "{\"use_sliding_window\":true,\"sliding_window\":16,\"layer_types\":"
      "[\"full_attention\",\"sliding_attention\",\"sliding_attention\"]}", NULL, NULL, NULL, 0, "some layers only" },
    { "dimensions", "llama", false, "{\"num_key_value_heads\":3}", NULL, NULL, NULL, 0, "num_key_value_heads is 3" },
    { "dimensions", "qwen3", false, "{\"head_dim\":15}", NULL, NULL, NULL, 0, "head_dim is 15" },
    { "dimensions", "llama", false, "{\"hidden_size\":131072}", NULL, NULL, NULL, 0, "hidden_size is 131072" },
    { "experts", "mixtral", false, "{\"num_local_experts\":0}", NULL, NULL, NULL, 0, "num_local_experts is 0" },
    { "experts", "qwen2_moe", false, "{\"num_experts\":0}", NULL, NULL, NULL, 0, "num_experts is 0" },
    { "experts", "mixtral", false, "{\"num_experts_per_tok\":5}", NULL, NULL, NULL, 0, "num_experts_per_tok is 5" },
    { "experts", "qwen3_moe", false, "{\"num_experts_per_tok\":9}", NULL, NULL, NULL, 0, "num_experts_per_tok is 9" },
    { "experts", "qwen2_moe", false, "{\"shared_expert_intermediate_size\":0}", NULL, NULL, NULL, 0, "shared_expert_intermediate_size is 0" },
    { "qwen3_5_keys", "qwen3_5", false, "{\"new_thing\":1}", NULL, NULL, NULL, 0, "new_thing is 1" },
    { "qwen3_5_window", "qwen3_5", false, "{\"use_sliding_window\":true,\"sliding_window\":16}", NULL, NULL, NULL, 0, "sliding_window 16" },
    { "qwen3_5_layers", "qwen3_5", false, "{\"attn_output_gate\":false}", NULL, NULL, NULL, 0, "attn_output_gate is false" },
    { "qwen3_5_layers", "qwen3_5_vl", false, "{\"text_config\":{\"mamba_ssm_dtype\":\"bfloat16\"}}", NULL, NULL, NULL, 0, "mamba_ssm_dtype" },
    { "vision", "idefics3", false, "{\"vision_config\":{\"hidden_act\":\"gelu\"}}", NULL, NULL, NULL, 0, "vision_config: hidden_act" },
    { "malformed", "llama", false, "{\"hidden_size\":\"64\"}", NULL, NULL, NULL, 0, "hidden_size is \"64\"" },
    { "malformed", "llama", false, "{\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}", NULL, NULL, NULL, 0, "low_freq_factor is missing" },
    /* malformed mixtures of experts in their tensors: mismatched expert shapes, missing experts */
    { NULL, "qwen2_moe", false, "{\"moe_intermediate_size\":16}", NULL, NULL, NULL, 0,
      "\"model.layers.0.mlp.experts.0.gate_proj.weight\" has shape [32, 64]" },
    { NULL, "mixtral", false, "{\"num_local_experts\":5}", NULL, NULL, NULL, 0, "\"model.layers.0.block_sparse_moe.gate.weight\" has shape" },
    { NULL, "mixtral", false, NULL, "\"model.layers.0.block_sparse_moe.experts.2.w1.weight\":{\"dtype\":\"F32\",\"shape\":[96,64]",
      "\"model.layers.0.block_sparse_moe.experts.2.w1.weight\":{\"dtype\":\"F32\",\"shape\":[64,96]", NULL, 0,
      "\"model.layers.0.block_sparse_moe.experts.2.w1.weight\" has shape [64, 96]" },
    { NULL, "mixtral", false, NULL, "\"model.layers.1.block_sparse_moe.experts.3.w3.weight\"",
      "\"model.layers.1.block_sparse_moe.experts.9.w3.weight\"", NULL, 0,
      "\"model.layers.1.block_sparse_moe.experts.3.w3.weight\" is missing" },
    { NULL, "qwen2_moe", false, NULL, "\"model.layers.2.mlp.shared_expert.up_proj.weight\"",
      "\"model.layers.2.mlp.shared_expert.up_proj.weighx\"", NULL, 0, "\"model.layers.2.mlp.shared_expert.up_proj.weight\" is missing" },
    /* the GGUF twins: counts in the metadata, a stack missing or of the wrong shape */
    { NULL, "qwen2_moe", true, NULL, NULL, NULL, "qwen2moe.expert_count", 0, "qwen2moe.expert_count is 0" },
    { NULL, "mixtral", true, NULL, NULL, NULL, "llama.expert_used_count", 5, "llama.expert_used_count is 5" },
    { NULL, "qwen2_moe", true, NULL, NULL, NULL, "qwen2moe.expert_feed_forward_length", 16, "\"blk.0.ffn_gate_exps.weight\" has shape" },
    { NULL, "mixtral", true, NULL, "blk.1.ffn_up_exps.weight", "blk.1.ffn_up_expz.weight", NULL, 0, "\"blk.1.ffn_up_exps.weight\" is missing" },
    { NULL, "qwen3", true, NULL, NULL, NULL, "qwen3.block_count", 0, "layers is 0" },
};

/* Writes the case's model under g_tmp; the other files of the fixture are linked. */
static bool make_case(const vcase *c, int i, char *path, size_t cap)
{
    char src[300];
    if (c->gguf) {
        snprintf(src, sizeof src, SHARED "/fixtures/hf-gguf/%s.gguf", c->fixture);
        snprintf(path, cap, "%s/case%02d-%s.gguf", g_tmp, i, c->fixture);
        blob b = slurp(src);
        bool ok = b.p != NULL;
        if (ok && c->u32_key) {
            char *at = find(b, c->u32_key);
            uint32_t type = 0;
            ok = at && (memcpy(&type, at + strlen(c->u32_key), 4), type == 4); /* GGUF_TYPE_UINT32 */
            if (ok)
                memcpy(at + strlen(c->u32_key) + 4, &c->u32, 4);
        }
        if (ok && c->from) {
            char *at = find(b, c->from);
            ok = at && strlen(c->from) == strlen(c->to);
            if (ok)
                memcpy(at, c->to, strlen(c->to));
        }
        ok = ok && spit(path, b.p, b.n);
        free(b.p);
        return ok;
    }
    snprintf(src, sizeof src, SHARED "/fixtures/hf/%s", c->fixture);
    snprintf(path, cap, "%s/case%02d-%s", g_tmp, i, c->fixture);
    if (mkdir(path, 0700))
        return false;
    char p[700], s2[700];
    /* config.json with the edit merged in */
    snprintf(p, sizeof p, "%s/config.json", src);
    json_t *cfg = json_load_file(p, 0, NULL), *m = c->merge ? json_loads(c->merge, 0, NULL) : NULL;
    bool ok = cfg && (!c->merge || (m && json_object_update_recursive(cfg, m) == 0));
    snprintf(p, sizeof p, "%s/config.json", path);
    ok = ok && json_dump_file(cfg, p, 0) == 0;
    json_decref(cfg);
    json_decref(m);
    /* model.safetensors: patched, or linked */
    snprintf(s2, sizeof s2, "%s/model.safetensors", src);
    snprintf(p, sizeof p, "%s/model.safetensors", path);
    if (ok && c->from) {
        blob b = slurp(s2);
        char *at = b.p ? find(b, c->from) : NULL;
        ok = at && strlen(c->from) == strlen(c->to);
        if (ok)
            memcpy(at, c->to, strlen(c->to));
        ok = ok && spit(p, b.p, b.n);
        free(b.p);
    }
    DIR *d = opendir(src);
    struct dirent *de;
    while (ok && d && (de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "config.json") ||
            (c->from && !strcmp(de->d_name, "model.safetensors")))
            continue;
        char abs[PATH_MAX];
        snprintf(s2, sizeof s2, "%s/%s", src, de->d_name);
        snprintf(p, sizeof p, "%s/%s", path, de->d_name);
        ok = realpath(s2, abs) && symlink(abs, p) == 0;
    }
    if (d)
        closedir(d);
    return ok && d;
}

static int g_case;

static void case_verdict(void)
{
    const vcase *c = &k_cases[g_case];
    char path[400];
    REQUIRE(make_case(c, g_case, path, sizeof path));
    judge(path, c->rule != NULL, false, c->want);
}

/* Every rule of the table has a case above: a rule added without one fails here. */
static void every_rule_has_a_refusal_case(void)
{
    size_t n;
    const cdx_hub_rule *r = cdx_hub_rules(&n);
    CHECK(n >= 10);
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0] && !found; k++)
            found = k_cases[k].rule && !strcmp(k_cases[k].rule, r[i].id);
        CHECKF(found, "rule %s has no refusal case in k_cases", r[i].id);
    }
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        bool known = !k_cases[k].rule;
        for (size_t i = 0; i < n && !known; i++)
            known = !strcmp(k_cases[k].rule, r[i].id);
        CHECKF(known, "case %zu names rule %s, which the table does not have", k, k_cases[k].rule);
    }
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
    g_caldrix = getenv("CALDRIX") ? getenv("CALDRIX") : "build/caldrix";
    snprintf(g_tmp, sizeof g_tmp, "/tmp/cdx_verdicts_XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
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
        const char *base = strrchr(list[i], '/') + 1;
        if (not_yet(base)) {
            config_arch(list[i], g_arch, sizeof g_arch);
            snprintf(names[i], sizeof names[i], "%s: a family not run yet (%s): refused by name by all three", list[i],
                     g_arch);
            RUN(names[i], fixture_not_yet);
            continue;
        }
        snprintf(names[i], sizeof names[i], "%s: the pre-download check, inspect and run accept it", list[i]);
        RUN(names[i], fixture_verdict);
    }
    static char cnames[sizeof k_cases / sizeof k_cases[0]][400];
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const vcase *c = &k_cases[i];
        snprintf(cnames[i], sizeof cnames[i], "%s%s (%s%s, %s): %s, inspect and run refuse it with one message",
                 c->rule ? "rule " : "tensors", c->rule ? c->rule : "", c->fixture, c->gguf ? ".gguf" : "",
                 c->merge ? c->merge : c->u32_key ? c->u32_key : c->to,
                 c->rule ? "the pre-download check" : "the pre-download check accepts its config.json");
        g_case = (int)i;
        RUN(cnames[i], case_verdict);
    }
    for (int i = 0; i < 5; i++)
        snprintf(g_bn[i], sizeof g_bn[i], "%s/bitnet%d%s", g_tmp, i, i == 1 ? ".gguf" : "");
    char bcmd[4096];
    snprintf(bcmd, sizeof bcmd,
             "python3 scripts/goldens/tiny_fixtures.py bitnet %s && "
             "python3 scripts/goldens/tiny_fixtures.py bitnet %s/bs '{\"hidden_act\": \"silu\"}' && "
             "%s convert %s/bs %s --type F32 >/dev/null 2>&1 && "
             "cp -r %s %s && python3 -c \"import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); "
             "del c['quantization_config']; json.dump(c, open(p, 'w'))\" %s && "
             "cp -r %s %s && python3 -c \"import json,struct,sys; p=sys.argv[1]+'/model.safetensors'; b=open(p,'rb').read(); "
             "n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); t=h['model.layers.0.self_attn.q_proj.weight']; "
             "t['dtype']='F32'; t['shape']=[16,16]; hb=json.dumps(h).encode(); hb+=b' '*(-len(hb)%%8); "
             "open(p,'wb').write(struct.pack('<Q',len(hb))+hb+b[8+n:])\" %s && "
             "cp -r %s %s && python3 -c \"import json,struct,sys; p=sys.argv[1]+'/model.safetensors'; b=bytearray(open(p,'rb').read()); "
             "n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); o=8+n+h['model.layers.1.mlp.up_proj.weight_scale']['data_offsets'][0]; "
             "b[o:o+2]=bytes(2); open(p,'wb').write(b)\" %s",
             g_bn[0], g_tmp, g_caldrix, g_tmp, g_bn[1], g_bn[0], g_bn[2], g_bn[2], g_bn[0], g_bn[3], g_bn[3], g_bn[0],
             g_bn[4], g_bn[4]);
    if (system(bcmd) != 0) {
        printf("not ok - the BitNet fixtures could not be written\n");
        t_failed++;
    } else {
        RUN("bitnet (tiny_fixtures.py, packed BitLinear weights): the pre-download check, inspect and run accept it",
            bitnet_fixture);
        RUN("bitnet's SiLU variant converted to GGUF: inspect and run accept it", bitnet_gguf);
        RUN("bitnet without quantization_config (its U8 weights as plain linears): inspect and run refuse it alike",
            bitnet_no_quant_config);
        RUN("bitnet with a BitLinear weight that is not packed U8: inspect and run refuse it alike", bitnet_unpacked);
        RUN("bitnet with a weight_scale of 0: inspect and run refuse it alike", bitnet_zero_scale);
    }
    RUN("every rule of the import rules' table has a refusal case here", every_rule_has_a_refusal_case);
    RUN("absent config.json keys get the loader's defaults in the import rules", absent_keys_get_the_loaders_defaults);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_tmp);
    return t_done("verdicts");
}
