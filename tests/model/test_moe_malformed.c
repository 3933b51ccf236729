/* Malformed mixtures of experts are refused cleanly, naming the field or tensor and the value:
 * expert counts of 0, top-k above the expert count, experts missing or left over, expert shapes
 * that disagree with the hyperparameters. Each bad model is one edit of a fixture
 * (../shared/fixtures/hf/{mixtral,qwen2_moe}, hf-gguf/{mixtral,qwen2_moe}.gguf): a config.json
 * key, a GGUF metadata value or tensor name patched in place, a safetensors header shape. */
#include "caldrix.h"
#include "test.h"
#include "test_blob.h"

#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

/* ---- checkpoints: a copy of a fixture folder with one edit ---- */

/* Writes dir/<case>/ with the fixture's config.json (key set to the JSON value `val`, NULL: as is)
 * and its model.safetensors (the header text `from` replaced by `to` of the same length, NULL: as
 * is); opens it and checks the code and that the message holds both `want` strings. */
static void checkpoint_case(const char *fixture, const char *key, const char *val, const char *from, const char *to,
                            const char *want1, const char *want2)
{
    char src[256], dir[256], path[300];
    static int n_case;
    snprintf(dir, sizeof dir, "%s/c%d", g_dir, n_case++);
    REQUIRE(mkdir(dir, 0700) == 0);
    snprintf(src, sizeof src, SHARED "/fixtures/hf/%s/config.json", fixture);
    json_t *cfg = json_load_file(src, 0, NULL);
    REQUIRE(cfg);
    if (key)
        json_object_set_new(cfg, key, json_loads(val, JSON_DECODE_ANY, NULL));
    snprintf(path, sizeof path, "%s/config.json", dir);
    REQUIRE(json_dump_file(cfg, path, 0) == 0);
    json_decref(cfg);
    snprintf(src, sizeof src, SHARED "/fixtures/hf/%s/model.safetensors", fixture);
    blob st = slurp(src);
    REQUIRE(st.p);
    if (from) {
        REQUIRE(strlen(from) == strlen(to));
        char *at = find(st, from);
        REQUIRE(at);
        memcpy(at, to, strlen(to));
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(spit(path, st.p, st.n));
    free(st.p);
    cdx_model *m = NULL;
    cdx_err e = { 0 };
    int rc = cdx_model_open(dir, NULL, &m, &e);
    CHECKF(rc < 0 && m == NULL, "%s: %s=%s opened (rc %d)", fixture, key ? key : "-", val ? val : "-", rc);
    CHECKF(strstr(e.msg, want1) && (!want2 || strstr(e.msg, want2)), "%s: message \"%s\" lacks \"%s\" / \"%s\"",
           fixture, e.msg, want1, want2 ? want2 : "");
    printf("  %s\n", e.msg);
    cdx_model_close(m);
}

static void checkpoints_with_bad_experts_are_refused(void)
{
    /* counts in config.json */
    checkpoint_case("mixtral", "num_local_experts", "0", NULL, NULL, "num_local_experts", "0");
    checkpoint_case("qwen2_moe", "num_experts", "0", NULL, NULL, "num_experts", "0");
    checkpoint_case("mixtral", "num_experts_per_tok", "5", NULL, NULL, "num_experts_per_tok", "5");
    checkpoint_case("qwen2_moe", "num_experts_per_tok", "9", NULL, NULL, "num_experts_per_tok", "9");
    checkpoint_case("qwen2_moe", "shared_expert_intermediate_size", "0", NULL, NULL, "shared_expert_intermediate_size",
                    "0");
    /* a count the router disagrees with; an expert missing (its name changed in the header) */
    checkpoint_case("mixtral", "num_local_experts", "5", NULL, NULL,
                    "\"model.layers.0.block_sparse_moe.gate.weight\" has shape [4, 64]", "[5, 64]");
    checkpoint_case("mixtral", NULL, NULL, "\"model.layers.1.block_sparse_moe.experts.3.w3.weight\"",
                    "\"model.layers.1.block_sparse_moe.experts.9.w3.weight\"",
                    "\"model.layers.1.block_sparse_moe.experts.3.w3.weight\" is missing", "4 experts");
    checkpoint_case("qwen2_moe", NULL, NULL, "\"model.layers.2.mlp.shared_expert.up_proj.weight\"",
                    "\"model.layers.2.mlp.shared_expert.up_proj.weighx\"",
                    "\"model.layers.2.mlp.shared_expert.up_proj.weight\" is missing", NULL);
    /* shapes: the widths in config.json disagree with the tensors, or one expert with the rest */
    checkpoint_case("qwen2_moe", "moe_intermediate_size", "16", NULL, NULL,
                    "\"model.layers.0.mlp.experts.0.gate_proj.weight\" has shape [32, 64]", "[16, 64]");
    checkpoint_case("qwen2_moe", "shared_expert_intermediate_size", "95", NULL, NULL,
                    "\"model.layers.0.mlp.shared_expert.gate_proj.weight\" has shape [96, 64]", "[95, 64]");
    checkpoint_case("mixtral", NULL, NULL,
                    "\"model.layers.0.block_sparse_moe.experts.2.w1.weight\":{\"dtype\":\"F32\",\"shape\":[96,64]",
                    "\"model.layers.0.block_sparse_moe.experts.2.w1.weight\":{\"dtype\":\"F32\",\"shape\":[64,96]",
                    "\"model.layers.0.block_sparse_moe.experts.2.w1.weight\" has shape [64, 96]", "[96, 64]");
}

/* ---- GGUF: the fixture's bytes with a metadata value or a tensor name patched ---- */

/* Sets the u32 value of metadata key `key` (written as a u32 by the fixtures' converter). */
static void set_u32(blob b, const char *key, uint32_t v)
{
    char *at = find(b, key);
    REQUIRE(at);
    uint32_t type;
    memcpy(&type, at + strlen(key), 4);
    REQUIRE(type == 4); /* GGUF_TYPE_UINT32 */
    memcpy(at + strlen(key) + 4, &v, 4);
}

static void gguf_case(const char *fixture, const char *key, uint32_t v, const char *from, const char *to,
                      const char *want1, const char *want2)
{
    char path[256];
    snprintf(path, sizeof path, SHARED "/fixtures/hf-gguf/%s.gguf", fixture);
    blob b = slurp(path);
    REQUIRE(b.p);
    if (key)
        set_u32(b, key, v);
    if (from) {
        char *at = find(b, from);
        REQUIRE(at && strlen(from) == strlen(to));
        memcpy(at, to, strlen(to));
    }
    cdx_model *m = NULL;
    cdx_err e = { 0 };
    int rc = cdx_model_open_gguf_mem(b.p, b.n, path, &m, &e);
    CHECKF(rc < 0 && m == NULL, "%s: %s=%u opened (rc %d)", fixture, key ? key : from, v, rc);
    CHECKF(strstr(e.msg, want1) && (!want2 || strstr(e.msg, want2)), "%s: message \"%s\" lacks \"%s\" / \"%s\"",
           fixture, e.msg, want1, want2 ? want2 : "");
    CHECKF(strstr(e.msg, fixture) != NULL, "message \"%s\" does not name the file", e.msg);
    printf("  %s\n", e.msg);
    cdx_model_close(m);
    free(b.p);
}

static void gguf_files_with_bad_experts_are_refused(void)
{
    gguf_case("qwen2_moe", "qwen2moe.expert_count", 0, NULL, NULL, "qwen2moe.expert_count is 0", NULL);
    gguf_case("qwen2_moe", "qwen2moe.expert_count", 5000, NULL, NULL, "qwen2moe.expert_count is 5000", "1..4096");
    gguf_case("mixtral", "llama.expert_used_count", 5, NULL, NULL, "llama.expert_used_count is 5", "1..4");
    gguf_case("qwen2_moe", "qwen2moe.expert_used_count", 0, NULL, NULL, "qwen2moe.expert_used_count is 0", NULL);
    /* the stacks disagree with the counts and widths */
    gguf_case("mixtral", "llama.expert_count", 5, NULL, NULL, "\"blk.0.ffn_gate_inp.weight\" has shape [4, 64]",
              "[5, 64]");
    gguf_case("mixtral", "llama.expert_count", 0, NULL, NULL, "\"blk.0.ffn_gate.weight\" is missing", NULL);
    gguf_case("qwen2_moe", "qwen2moe.expert_feed_forward_length", 16, NULL, NULL,
              "\"blk.0.ffn_gate_exps.weight\" has shape [8, 32, 64]", "[8, 16, 64]");
    gguf_case("qwen2_moe", "qwen2moe.expert_shared_feed_forward_length", 95, NULL, NULL,
              "\"blk.0.ffn_gate_shexp.weight\" has shape [96, 64]", "[95, 64]");
    /* a stack missing: its name changed */
    gguf_case("mixtral", NULL, 0, "blk.1.ffn_up_exps.weight", "blk.1.ffn_up_expz.weight",
              "\"blk.1.ffn_up_exps.weight\" is missing", NULL);
    gguf_case("qwen2_moe", NULL, 0, "blk.2.ffn_gate_inp_shexp.weight", "blk.2.ffn_gate_inp_shexq.weight",
              "\"blk.2.ffn_gate_inp_shexp.weight\" is missing", NULL);
}

/* A key the fixtures do not carry: the file rewritten with it added (cdx_gguf_writer). */
static void gguf_with_extra_key(const char *fixture, const char *key, bool is_f32, double v, const char *want)
{
    char src[256], dst[256];
    snprintf(src, sizeof src, SHARED "/fixtures/hf-gguf/%s.gguf", fixture);
    snprintf(dst, sizeof dst, "%s/%s-extra.gguf", g_dir, fixture);
    cdx_err e = { 0 };
    cdx_gguf *g = NULL;
    cdx_gguf_writer *w = NULL;
    REQUIRE(cdx_gguf_open(src, &g, &e) == 0 && cdx_gguf_writer_new(&w, &e) == 0);
    int rc = 0;
    for (uint64_t i = 0; i < g->n_kv && !rc; i++)
        rc = cdx_gguf_writer_copy_kv(w, &g->kv[i]);
    rc = rc ? rc : is_f32 ? cdx_gguf_writer_set_f32(w, key, (float)v) : cdx_gguf_writer_set_u32(w, key, (uint32_t)v);
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const cdx_gguf_tensor *t = &g->tensors[i];
        rc = cdx_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &e);
    }
    rc = rc ? rc : cdx_gguf_writer_write(w, dst, &e);
    cdx_gguf_writer_free(w);
    cdx_gguf_close(g);
    REQUIRE(rc == 0);
    cdx_model *m = NULL;
    rc = cdx_model_open(dst, NULL, &m, &e);
    CHECKF(rc == CDX_EUNSUPPORTED && strstr(e.msg, want) && strstr(e.msg, dst), "%s: rc %d, \"%s\"", key, rc, e.msg);
    printf("  %s\n", e.msg);
    cdx_model_close(m);
}

static void gguf_routing_keys_outside_softmax_are_refused(void)
{
    gguf_with_extra_key("mixtral", "llama.expert_gating_func", false, 2, "llama.expert_gating_func is 2");
    gguf_with_extra_key("qwen2_moe", "qwen2moe.expert_weights_scale", true, 2.5, "qwen2moe.expert_weights_scale is 2.5");
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/cdx_moe_bad_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN("checkpoints with bad experts are refused, naming the field", checkpoints_with_bad_experts_are_refused);
    RUN("GGUF files with bad experts are refused, naming the key or tensor", gguf_files_with_bad_experts_are_refused);
    RUN("GGUF routing other than softmax over unscaled weights is refused by key",
        gguf_routing_keys_outside_softmax_are_refused);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return t_done("moe_malformed");
}
