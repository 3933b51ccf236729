/* safetensors reader against the ten tiny HF fixtures. The expected tensor list of each checkpoint
 * is built from its config (the shapes transformers' modules give for those hyperparameters, as the
 * fixtures' INDEX.md lists them); spot values were read with Python's struct module. */
#include "caldrix.h"
#include "test.h"

#include <unistd.h>

#define HF SHARED "/fixtures/hf/"

typedef struct {
    const char *dir;
    uint32_t type;
    int head_dim;
    int tied, qkv_bias, qk_norm;
    int moe;            /* 0 dense, 1 qwen-style mlp.experts, 2 mixtral block_sparse_moe */
    int n_experts, expert_ff, shared_ff;
    int dense_layer;    /* a layer index in mlp_only_layers, or -1 */
    int n_shards;
} fixture;

/* From each fixture's config.json: hidden 64, 4 heads / 2 kv heads, 3 layers, vocab 320, FFN 160. */
static const fixture k_fixtures[] = {
    { "llama", CDX_TYPE_F32, 16, 0, 0, 0, 0, 0, 0, 0, -1, 1 },
    { "llama_bf16", CDX_TYPE_BF16, 16, 0, 0, 0, 0, 0, 0, 0, -1, 1 },
    { "llama_f16", CDX_TYPE_F16, 16, 0, 0, 0, 0, 0, 0, 0, -1, 1 },
    { "llama3_rope", CDX_TYPE_F32, 16, 1, 0, 0, 0, 0, 0, 0, -1, 2 },
    { "mistral", CDX_TYPE_F32, 16, 0, 0, 0, 0, 0, 0, 0, -1, 1 },
    { "qwen2", CDX_TYPE_F32, 16, 1, 1, 0, 0, 0, 0, 0, -1, 1 },
    { "qwen3", CDX_TYPE_F32, 32, 0, 0, 1, 0, 0, 0, 0, -1, 1 },
    { "qwen3_moe", CDX_TYPE_F32, 32, 0, 0, 1, 1, 8, 48, 0, 1, 1 },
    { "mixtral", CDX_TYPE_F32, 16, 0, 0, 0, 2, 4, 96, 0, -1, 1 },
    { "qwen2_moe", CDX_TYPE_F32, 16, 0, 1, 0, 1, 8, 32, 96, -1, 1 },
};

typedef struct {
    char name[96];
    int n_dims;
    uint64_t shape[2];
} want;

static int add(want *w, int n, const char *name, int n_dims, uint64_t a, uint64_t b)
{
    snprintf(w[n].name, sizeof w[n].name, "%s", name);
    w[n].n_dims = n_dims;
    w[n].shape[0] = a;
    w[n].shape[1] = b;
    return n + 1;
}

static int expected(const fixture *f, want *w)
{
    const int H = 64, nh = 4, nkv = 2, ff = 160, V = 320, hd = f->head_dim;
    int n = 0;
    char b[96];
    n = add(w, n, "model.embed_tokens.weight", 2, V, H);
    n = add(w, n, "model.norm.weight", 1, H, 0);
    if (!f->tied)
        n = add(w, n, "lm_head.weight", 2, V, H);
    for (int l = 0; l < 3; l++) {
#define P(fmt, ...) (snprintf(b, sizeof b, "model.layers.%d." fmt, l, ##__VA_ARGS__), b)
        n = add(w, n, P("input_layernorm.weight"), 1, H, 0);
        n = add(w, n, P("post_attention_layernorm.weight"), 1, H, 0);
        n = add(w, n, P("self_attn.q_proj.weight"), 2, nh * hd, H);
        n = add(w, n, P("self_attn.k_proj.weight"), 2, nkv * hd, H);
        n = add(w, n, P("self_attn.v_proj.weight"), 2, nkv * hd, H);
        n = add(w, n, P("self_attn.o_proj.weight"), 2, H, nh * hd);
        if (f->qkv_bias) {
            n = add(w, n, P("self_attn.q_proj.bias"), 1, nh * hd, 0);
            n = add(w, n, P("self_attn.k_proj.bias"), 1, nkv * hd, 0);
            n = add(w, n, P("self_attn.v_proj.bias"), 1, nkv * hd, 0);
        }
        if (f->qk_norm) {
            n = add(w, n, P("self_attn.q_norm.weight"), 1, hd, 0);
            n = add(w, n, P("self_attn.k_norm.weight"), 1, hd, 0);
        }
        if (f->moe == 2) {
            n = add(w, n, P("block_sparse_moe.gate.weight"), 2, f->n_experts, H);
            for (int e = 0; e < f->n_experts; e++) {
                n = add(w, n, P("block_sparse_moe.experts.%d.w1.weight", e), 2, f->expert_ff, H);
                n = add(w, n, P("block_sparse_moe.experts.%d.w2.weight", e), 2, H, f->expert_ff);
                n = add(w, n, P("block_sparse_moe.experts.%d.w3.weight", e), 2, f->expert_ff, H);
            }
        } else if (f->moe == 1 && l != f->dense_layer) {
            n = add(w, n, P("mlp.gate.weight"), 2, f->n_experts, H);
            for (int e = 0; e < f->n_experts; e++) {
                n = add(w, n, P("mlp.experts.%d.gate_proj.weight", e), 2, f->expert_ff, H);
                n = add(w, n, P("mlp.experts.%d.up_proj.weight", e), 2, f->expert_ff, H);
                n = add(w, n, P("mlp.experts.%d.down_proj.weight", e), 2, H, f->expert_ff);
            }
            if (f->shared_ff) {
                n = add(w, n, P("mlp.shared_expert.gate_proj.weight"), 2, f->shared_ff, H);
                n = add(w, n, P("mlp.shared_expert.up_proj.weight"), 2, f->shared_ff, H);
                n = add(w, n, P("mlp.shared_expert.down_proj.weight"), 2, H, f->shared_ff);
                n = add(w, n, P("mlp.shared_expert_gate.weight"), 2, 1, H);
            }
        } else {
            n = add(w, n, P("mlp.gate_proj.weight"), 2, ff, H);
            n = add(w, n, P("mlp.up_proj.weight"), 2, ff, H);
            n = add(w, n, P("mlp.down_proj.weight"), 2, H, ff);
        }
#undef P
    }
    return n;
}

static void every_fixture_has_the_tensors_its_config_implies(void)
{
    static want w[512];
    for (size_t i = 0; i < sizeof k_fixtures / sizeof k_fixtures[0]; i++) {
        const fixture *f = &k_fixtures[i];
        char dir[256];
        snprintf(dir, sizeof dir, HF "%s", f->dir);
        cdx_err e = {0};
        cdx_safetensors *st = NULL;
        int rc = cdx_st_open(dir, &st, &e);
        CHECKF(rc == CDX_OK, "%s: %s", f->dir, e.msg);
        if (rc)
            continue;
        int n = expected(f, w);
        CHECKF(st->n_tensors == (uint64_t)n, "%s: %llu tensors, expected %d", f->dir, (unsigned long long)st->n_tensors, n);
        CHECKF(st->n_files == (uint32_t)f->n_shards, "%s: %u files", f->dir, st->n_files);
        for (int k = 0; k < n; k++) {
            const cdx_st_tensor *t = cdx_st_find(st, w[k].name);
            CHECKF(t != NULL, "%s: %s missing", f->dir, w[k].name);
            if (!t)
                continue;
            size_t es = f->type == CDX_TYPE_F32 ? 4 : 2;
            CHECKF(t->type == f->type && t->n_dims == (uint32_t)w[k].n_dims && t->shape[0] == w[k].shape[0] &&
                       (w[k].n_dims == 1 || t->shape[1] == w[k].shape[1]) &&
                       t->n_bytes == es * w[k].shape[0] * (w[k].n_dims == 2 ? w[k].shape[1] : 1),
                   "%s: %s type %u dims %u shape [%llu, %llu]", f->dir, w[k].name, t->type, t->n_dims,
                   (unsigned long long)t->shape[0], (unsigned long long)t->shape[1]);
            CHECK(t->data != NULL && (uintptr_t)t->data % es == 0);
        }
        for (uint64_t k = 1; k < st->n_tensors; k++)
            CHECK(strcmp(st->tensors[k - 1].name, st->tensors[k].name) < 0);
        cdx_st_close(st);
    }
}

static void tensor_data_matches_an_independent_reader(void)
{
    cdx_err e = {0};
    cdx_safetensors *st = NULL;
    const char *q = "model.layers.2.self_attn.q_proj.weight";
    REQUIRE(cdx_st_open(HF "llama/model.safetensors", &st, &e) == CDX_OK);
    const cdx_st_tensor *t = cdx_st_find(st, q);
    REQUIRE(t && t->type == CDX_TYPE_F32);
    CHECK(((const float *)t->data)[0] == -0.14490431547164917f && ((const float *)t->data)[1] == -0.2910785377025604f);
    cdx_st_close(st);

    REQUIRE(cdx_st_open(HF "llama_bf16", &st, &e) == CDX_OK);
    t = cdx_st_find(st, q);
    REQUIRE(t && t->type == CDX_TYPE_BF16);
    const uint16_t *h = t->data;
    CHECK(h[0] == 15667 && h[1] == 15698 && h[2] == 15813 && h[3] == 48625);
    cdx_st_close(st);

    REQUIRE(cdx_st_open(HF "llama_f16/", &st, &e) == CDX_OK);
    t = cdx_st_find(st, q);
    REQUIRE(t && t->type == CDX_TYPE_F16);
    h = t->data;
    CHECK(h[0] == 43334 && h[1] == 43313 && h[2] == 45852 && h[3] == 11119);
    cdx_st_close(st);
}

static void a_sharded_checkpoint_opens_from_its_index(void)
{
    cdx_err e = {0};
    cdx_safetensors *st = NULL;
    REQUIRE(cdx_st_open(HF "llama3_rope/model.safetensors.index.json", &st, &e) == CDX_OK);
    CHECK(st->n_files == 2);
    const cdx_st_tensor *t = cdx_st_find(st, "model.norm.weight");
    REQUIRE(t);
    CHECK(t->shard == 1 && strstr(st->files[t->shard]->path, "model-00002-of-00002.safetensors"));
    CHECK(((const float *)t->data)[0] == 2.5788214206695557f && ((const float *)t->data)[1] == -1.5312565565109253f);
    t = cdx_st_find(st, "model.embed_tokens.weight");
    CHECK(t && t->shard == 0);
    CHECK(cdx_st_find(st, "lm_head.weight") == NULL);
    CHECK(cdx_st_find(st, "") == NULL && cdx_st_find(st, "zzz") == NULL && cdx_st_find(st, "a") == NULL);
    cdx_st_close(st);
    /* One shard alone is a valid file too. */
    REQUIRE(cdx_st_open(HF "llama3_rope/model-00002-of-00002.safetensors", &st, &e) == CDX_OK);
    CHECK(st->n_files == 1 && cdx_st_find(st, "model.norm.weight") && !cdx_st_find(st, "model.embed_tokens.weight"));
    cdx_st_close(st);
}

static void a_missing_path_is_named(void)
{
    cdx_err e = {0};
    cdx_safetensors *st = NULL;
    CHECK(cdx_st_open("tests/no-such-dir", &st, &e) == CDX_ENOTFOUND && st == NULL);
    CHECK(strstr(e.msg, "no-such-dir") != NULL);
    CHECK(cdx_st_open("tests", &st, &e) == CDX_ENOTFOUND && strstr(e.msg, "tests"));
    cdx_st_close(NULL);
}

static void a_file_in_memory_reads_like_a_mapped_one(void)
{
    cdx_err e = {0};
    cdx_file *f = NULL;
    REQUIRE(cdx_file_map(HF "qwen3/model.safetensors", &f, &e) == CDX_OK);
    cdx_safetensors *st = NULL, *sm = NULL;
    REQUIRE(cdx_st_open(HF "qwen3", &st, &e) == CDX_OK);
    REQUIRE(cdx_st_open_mem(f->data, f->size, "qwen3.mem", &sm, &e) == CDX_OK);
    CHECK(sm->n_files == 0 && sm->n_tensors == st->n_tensors);
    for (uint64_t i = 0; i < st->n_tensors && i < sm->n_tensors; i++)
        CHECK(!strcmp(st->tensors[i].name, sm->tensors[i].name) && st->tensors[i].n_bytes == sm->tensors[i].n_bytes &&
              !memcmp(st->tensors[i].data, sm->tensors[i].data, st->tensors[i].n_bytes));
    cdx_st_close(sm);
    cdx_st_close(st);
    cdx_file_unmap(f);
}

/* A checkpoint with an I8 tensor: refused by the loader's open naming the dtype; the headers-only
 * open reads it, names its dtype and still checks its size. */
static void headers_only_reads_every_dtype(void)
{
    char path[] = "/tmp/caldrix-st-hdr-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    const char *hdr = "{\"w\":{\"dtype\":\"I8\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                      "\"v\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}";
    uint64_t hl = strlen(hdr);
    uint8_t b8[8];
    for (int k = 0; k < 8; k++)
        b8[k] = (uint8_t)(hl >> (8 * k));
    FILE *f = fdopen(fd, "wb");
    REQUIRE(f);
    fwrite(b8, 1, 8, f);
    fwrite(hdr, 1, hl, f);
    fwrite("\1\2\3\4\0\0\0\0", 1, 8, f);
    fclose(f);
    cdx_safetensors *st = NULL;
    cdx_err e = { 0 };
    CHECK(cdx_st_open(path, &st, &e) == CDX_EUNSUPPORTED && strstr(e.msg, "dtype I8") && !st);
    REQUIRE(cdx_st_open_headers(path, &st, &e) == CDX_OK);
    const cdx_st_tensor *w = cdx_st_find(st, "w"), *v = cdx_st_find(st, "v");
    REQUIRE(w && v);
    CHECK(w->type == CDX_TYPE_COUNT && !strcmp(w->dtype, "I8") && w->n_bytes == 4 && w->shape[0] == 2);
    CHECK(v->type == CDX_TYPE_BF16 && !strcmp(v->dtype, "BF16") && v->n_bytes == 4);
    cdx_st_close(st);
    unlink(path);
}

int main(void)
{
    RUN("every fixture has the tensors, shapes and dtypes its config implies", every_fixture_has_the_tensors_its_config_implies);
    RUN("tensor data matches an independent reader (F32, BF16, F16)", tensor_data_matches_an_independent_reader);
    RUN("a sharded checkpoint opens from its index and maps each shard", a_sharded_checkpoint_opens_from_its_index);
    RUN("a missing path is named", a_missing_path_is_named);
    RUN("a file in memory reads like a mapped one", a_file_in_memory_reads_like_a_mapped_one);
    RUN("the headers-only open reads every dtype and checks its size", headers_only_reads_every_dtype);
    return t_done("safetensors_read");
}
