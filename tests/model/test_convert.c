/* caldrix convert (cdx_convert_hf) against the outside reference conversions in
 * ../shared/fixtures/hf-gguf (shared/tools/fixtures/hf/to_gguf.py, following llama.cpp's
 * convert_hf_to_gguf.py): every metadata value and every tensor, F32 data bit for bit; the other
 * output types against the quant layer's conversions of the same floats; llama.cpp's tensor order. */
#include "caldrix.h"
#include "test.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const k_dense[] = { "llama", "llama_bf16", "llama_f16", "llama3_rope", "qwen2", "qwen3" };

/* Keys where llama.cpp's converter and the shared reference converter (a simplified re-implementation)
 * differ on purpose; the reason is llama.cpp's code, quoted:
 *  - written by llama.cpp, not by the reference: general.type (ModelBase.set_type),
 *    general.size_label (Metadata: size_label(total_params)), general.quantization_version
 *    (prepare_metadata), {arch}.attention.key_length/value_length whenever config.json has head_dim
 *    (TextModel.set_gguf_parameters: `if (head_dim := self.hparams.get("head_dim")) is not None`);
 *  - written by the reference only: qwen2/qwen3 rope.dimension_count and vocab_size (only
 *    LlamaModel.set_gguf_parameters adds them). */
static bool only_ours_ok(const char *k)
{
    static const char *const ok[] = { "general.type", "general.size_label", "general.quantization_version" };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!strcmp(k, ok[i]))
            return true;
    size_t n = strlen(k);
    return (n > 21 && !strcmp(k + n - 21, ".attention.key_length")) ||
           (n > 23 && !strcmp(k + n - 23, ".attention.value_length"));
}

static bool only_ref_ok(const char *k)
{
    return !strcmp(k, "qwen2.rope.dimension_count") || !strcmp(k, "qwen2.vocab_size") ||
           !strcmp(k, "qwen3.rope.dimension_count") || !strcmp(k, "qwen3.vocab_size");
}

static bool values_equal(const cdx_gguf_value *a, const cdx_gguf_value *b)
{
    if (a->type != b->type || a->n != b->n)
        return false;
    if (a->type == CDX_GGUF_STRING)
        return a->str.len == b->str.len && !memcmp(a->str.ptr, b->str.ptr, a->str.len);
    if (a->type != CDX_GGUF_ARRAY)
        return a->num.u == b->num.u;
    if (a->arr_type != b->arr_type)
        return false;
    if (a->arr_type == CDX_GGUF_STRING) {
        for (uint64_t i = 0; i < a->n; i++)
            if (a->str_items[i].len != b->str_items[i].len ||
                memcmp(a->str_items[i].ptr, b->str_items[i].ptr, a->str_items[i].len))
                return false;
        return true;
    }
    if (a->arr_type == CDX_GGUF_ARRAY)
        return false;
    size_t es = a->arr_type == CDX_GGUF_F32 || a->arr_type == CDX_GGUF_I32 || a->arr_type == CDX_GGUF_U32 ? 4 : 8;
    return !memcmp(a->raw, b->raw, (size_t)a->n * es);
}

/* Converts fixture `name` to a temporary file and opens it. */
static int convert_fixture(const char *name, uint32_t type, char *out, size_t cap, cdx_gguf **g, cdx_err *e)
{
    char dir[256];
    snprintf(dir, sizeof dir, SHARED "/fixtures/hf/%s", name);
    snprintf(out, cap, "/tmp/cdx-test-convert-%d-%s-%u.gguf", (int)getpid(), name, type);
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    int rc = cdx_gguf_writer_new(&w, e);
    if (!rc)
        rc = cdx_convert_hf(dir, &(cdx_convert_opts){ .type = type }, w, &c, e);
    if (!rc)
        rc = cdx_tok_export_gguf_dummy(w, (uint32_t)cdx_convert_config(c)->vocab_size, 1, 2, e);
    if (!rc)
        rc = cdx_gguf_writer_write(w, out, e);
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
    if (!rc)
        rc = cdx_gguf_open(out, g, e);
    return rc;
}

static const char *g_name;

static void f32_matches_reference(void)
{
    cdx_err e = {0};
    char out[256], ref[256];
    cdx_gguf *a = NULL, *b = NULL;
    snprintf(ref, sizeof ref, SHARED "/fixtures/hf-gguf/%s.gguf", g_name);
    int rc = convert_fixture(g_name, CDX_TYPE_F32, out, sizeof out, &a, &e);
    CHECKF(rc == 0, "%s", e.msg);
    REQUIRE(rc == 0);
    REQUIRE(cdx_gguf_open(ref, &b, &e) == 0);
    for (uint64_t i = 0; i < b->n_kv; i++) {
        const cdx_gguf_kv *kb = &b->kv[i], *ka = cdx_gguf_find(a, kb->key);
        if (!ka) {
            CHECKF(only_ref_ok(kb->key), "%s: key %s missing", g_name, kb->key);
            continue;
        }
        CHECKF(values_equal(&ka->val, &kb->val), "%s: key %s differs (types %u/%u)", g_name, kb->key, ka->val.type,
               kb->val.type);
    }
    for (uint64_t i = 0; i < a->n_kv; i++)
        if (!cdx_gguf_find(b, a->kv[i].key))
            CHECKF(only_ours_ok(a->kv[i].key), "%s: unexpected key %s", g_name, a->kv[i].key);
    CHECKF(a->n_tensors == b->n_tensors, "%llu vs %llu tensors", (unsigned long long)a->n_tensors,
           (unsigned long long)b->n_tensors);
    for (uint64_t i = 0; i < b->n_tensors; i++) {
        const cdx_gguf_tensor *tb = &b->tensors[i], *ta = cdx_gguf_tensor_find(a, tb->name);
        CHECKF(ta != NULL, "%s: tensor %s missing", g_name, tb->name);
        if (!ta)
            continue;
        CHECKF(ta->type == tb->type && ta->n_dims == tb->n_dims && !memcmp(ta->ne, tb->ne, sizeof ta->ne),
               "%s: tensor %s type/shape", g_name, tb->name);
        CHECKF(ta->n_bytes == tb->n_bytes && !memcmp(ta->data, tb->data, tb->n_bytes), "%s: tensor %s data differs",
               g_name, tb->name);
    }
    /* llama.cpp's order: generated tensors (rope_freqs) first, then the checkpoint's by HF name
     * ("lm_head.weight" < "model.embed_tokens.weight" < "model.layers.0.input_layernorm..." ...) */
    bool rope = cdx_gguf_tensor_find(a, "rope_freqs.weight") != NULL;
    CHECK(!rope || !strcmp(a->tensors[0].name, "rope_freqs.weight"));
    const cdx_gguf_tensor *out_w = cdx_gguf_tensor_find(a, "output.weight");
    CHECK(!strcmp(a->tensors[(rope ? 1 : 0) + (out_w ? 1 : 0)].name, "token_embd.weight"));
    CHECK(!out_w || !strcmp(a->tensors[rope ? 1 : 0].name, "output.weight"));
    CHECK(!strcmp(a->tensors[a->n_tensors - 1].name, "output_norm.weight"));
    cdx_gguf_close(a);
    cdx_gguf_close(b);
    remove(out);
}

/* F16 / BF16 / Q8_0: norms and vectors stay F32; matrices are the quant layer's conversion of the
 * reference floats (the converter quantizes from f32; llama.cpp's gguf-py uses the same rounding:
 * round-to-nearest-even for f16/bf16, ggml's reference Q8_0). general.file_type as llama_ftype. */
static void types_follow_the_request(void)
{
    static const struct { uint32_t type; uint32_t ftype; } k[] = {
        { CDX_TYPE_F16, 1 }, { CDX_TYPE_BF16, 32 }, { CDX_TYPE_Q8_0, 7 },
    };
    cdx_err e = {0};
    char ref[256];
    snprintf(ref, sizeof ref, SHARED "/fixtures/hf-gguf/%s.gguf", g_name);
    cdx_gguf *b = NULL;
    REQUIRE(cdx_gguf_open(ref, &b, &e) == 0);
    for (size_t ti = 0; ti < 3; ti++) {
        char out[256];
        cdx_gguf *a = NULL;
        int rc = convert_fixture(g_name, k[ti].type, out, sizeof out, &a, &e);
        CHECKF(rc == 0, "%s", e.msg);
        if (rc)
            continue;
        uint64_t ft = 99;
        CHECK(cdx_gguf_get_u64(a, "general.file_type", &ft) && ft == k[ti].ftype);
        const cdx_type_traits *tr = cdx_type_get(k[ti].type);
        for (uint64_t i = 0; i < b->n_tensors; i++) {
            const cdx_gguf_tensor *tb = &b->tensors[i], *ta = cdx_gguf_tensor_find(a, tb->name);
            REQUIRE(ta);
            size_t n = strlen(tb->name);
            bool f32 = tb->n_dims == 1 || (n > 12 && !strcmp(tb->name + n - 12, "_norm.weight"));
            uint32_t want = f32 ? CDX_TYPE_F32 : k[ti].type;
            CHECKF(ta->type == want, "%s %s: %s is %s", g_name, cdx_type_name(k[ti].type), tb->name, cdx_type_name(ta->type));
            if (ta->type != want)
                continue;
            if (f32) {
                CHECK(ta->n_bytes == tb->n_bytes && !memcmp(ta->data, tb->data, tb->n_bytes));
                continue;
            }
            size_t row;
            REQUIRE(cdx_type_row_bytes(want, tb->ne[0], &row, &e) == 0);
            uint8_t *exp = malloc(row);
            bool same = ta->n_bytes == row * tb->ne[1];
            for (uint64_t r = 0; same && r < tb->ne[1]; r++) {
                tr->from_f32((const float *)tb->data + r * tb->ne[0], exp, (int64_t)tb->ne[0]);
                same = !memcmp(exp, (const uint8_t *)ta->data + r * row, row);
            }
            free(exp);
            CHECKF(same, "%s %s: %s data", g_name, cdx_type_name(want), tb->name);
        }
        cdx_gguf_close(a);
        remove(out);
    }
    cdx_gguf_close(b);
}

/* What the converter refuses, by name. */
static void refusals_name_the_problem(void)
{
    cdx_err e = {0};
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    /* a mixture of experts converts (issue 15; tests/cli/test_convert.sh runs it to the goldens) */
    CHECKF(cdx_convert_hf(SHARED "/fixtures/hf/qwen3_moe", NULL, w, &c, &e) == 0, "%s", e.msg);
    cdx_convert_free(c);
    c = NULL;
    cdx_gguf_writer_free(w);
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    e = (cdx_err){0};
    CHECK(cdx_convert_hf(SHARED "/fixtures/hf/llama", &(cdx_convert_opts){ .type = CDX_TYPE_Q4_0 }, w, &c, &e) ==
          CDX_EINVAL);
    e = (cdx_err){0};
    CHECK(cdx_convert_hf("/nonexistent-dir", NULL, w, &c, &e) < 0 && c == NULL);
    CHECK(strstr(e.msg, "nonexistent-dir") != NULL);
    cdx_gguf_writer_free(w);
    /* mistral converts (as "llama"), with a note that its window has no GGUF key */
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    int rc = cdx_convert_hf(SHARED "/fixtures/hf/mistral", NULL, w, &c, &e);
    CHECKF(rc == 0, "%s", e.msg);
    if (!rc)
        CHECK(strstr(cdx_convert_notes(c), "sliding_window 8") != NULL);
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
}

/* Llama q/k rows: permuted from rotate-half to adjacent pairs (head h, pair i: rows h*hd + 2i, +1
 * come from h*hd + i and h*hd + hd/2 + i), checked on the safetensors floats directly. */
static void llama_q_rows_are_permuted(void)
{
    cdx_err e = {0};
    char out[256];
    cdx_gguf *a = NULL;
    cdx_safetensors *st = NULL;
    REQUIRE(convert_fixture("llama", CDX_TYPE_F32, out, sizeof out, &a, &e) == 0);
    REQUIRE(cdx_st_open(SHARED "/fixtures/hf/llama", &st, &e) == 0);
    const cdx_st_tensor *q = cdx_st_find(st, "model.layers.1.self_attn.k_proj.weight");
    const cdx_gguf_tensor *g = cdx_gguf_tensor_find(a, "blk.1.attn_k.weight");
    REQUIRE(q && g && q->type == CDX_TYPE_F32);
    int64_t cols = (int64_t)q->shape[1], hd = 16, n_kv = 2;
    bool ok = true;
    for (int64_t h = 0; h < n_kv; h++)
        for (int64_t i = 0; i < hd / 2; i++)
            for (int j = 0; j < 2; j++)
                ok &= !memcmp((const float *)g->data + (h * hd + 2 * i + j) * cols,
                              (const float *)q->data + (h * hd + j * hd / 2 + i) * cols, (size_t)cols * 4);
    CHECK(ok);
    cdx_st_close(st);
    cdx_gguf_close(a);
    remove(out);
}

/* Granite MoE (conversion/granite.py GraniteMoeModel.modify_tensors): input_linear [E, 2I, H] split along its
 * rows, gate the first I of each expert and up the last I; output_linear is ffn_down_exps and the router
 * ffn_gate_inp, all bit for bit; a config.json whose intermediate_size does not halve input_linear is refused
 * naming the tensor. */
static void granitemoe_experts_are_split(void)
{
    cdx_err e = {0};
    char out[256];
    cdx_gguf *a = NULL;
    cdx_safetensors *st = NULL;
    REQUIRE(convert_fixture("granitemoe", CDX_TYPE_F32, out, sizeof out, &a, &e) == 0);
    REQUIRE(cdx_st_open(SHARED "/fixtures/hf/granitemoe", &st, &e) == 0);
    const int64_t E = 8, I = 32, H = 64;
    for (int l = 0; l < 3; l++) {
        char hn[128], gn[128];
        snprintf(hn, sizeof hn, "model.layers.%d.block_sparse_moe.input_linear.weight", l);
        const cdx_st_tensor *in = cdx_st_find(st, hn);
        const cdx_gguf_tensor *gate = NULL, *up = NULL;
        snprintf(gn, sizeof gn, "blk.%d.ffn_gate_exps.weight", l);
        gate = cdx_gguf_tensor_find(a, gn);
        snprintf(gn, sizeof gn, "blk.%d.ffn_up_exps.weight", l);
        up = cdx_gguf_tensor_find(a, gn);
        REQUIRE(in && gate && up && in->type == CDX_TYPE_F32 && gate->type == CDX_TYPE_F32);
        CHECK(gate->n_dims == 3 && gate->ne[0] == (uint64_t)H && gate->ne[1] == (uint64_t)I && gate->ne[2] == (uint64_t)E);
        bool ok = true;
        for (int64_t x = 0; x < E; x++) {
            const float *src = (const float *)in->data + x * 2 * I * H;
            ok &= !memcmp((const float *)gate->data + x * I * H, src, (size_t)(I * H) * 4);
            ok &= !memcmp((const float *)up->data + x * I * H, src + I * H, (size_t)(I * H) * 4);
        }
        CHECKF(ok, "layer %d: gate/up are not input_linear's halves", l);
        static const char *const same[2][2] = { { "block_sparse_moe.output_linear", "ffn_down_exps" },
                                                { "block_sparse_moe.router.layer", "ffn_gate_inp" } };
        for (int k = 0; k < 2; k++) {
            snprintf(hn, sizeof hn, "model.layers.%d.%s.weight", l, same[k][0]);
            snprintf(gn, sizeof gn, "blk.%d.%s.weight", l, same[k][1]);
            const cdx_st_tensor *h = cdx_st_find(st, hn);
            const cdx_gguf_tensor *g = cdx_gguf_tensor_find(a, gn);
            REQUIRE(h && g && g->type == CDX_TYPE_F32);
            CHECKF(g->n_bytes == h->n_bytes && !memcmp(g->data, h->data, h->n_bytes), "%s is not %s", gn, hn);
        }
    }
    cdx_st_close(st);
    cdx_gguf_close(a);
    remove(out);
    /* the fixture's weights under a config.json whose intermediate_size is 16 */
    char dir[128], path[256], link[256];
    snprintf(dir, sizeof dir, "/tmp/cdx-test-convert-%d-gmoe", (int)getpid());
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(link, sizeof link, "%s/model.safetensors", dir);
    REQUIRE(mkdir(dir, 0700) == 0);
    FILE *in = fopen(SHARED "/fixtures/hf/granitemoe/config.json", "rb"), *o = fopen(path, "wb");
    char buf[4096];
    size_t n = in ? fread(buf, 1, sizeof buf - 1, in) : 0;
    buf[n] = 0;
    char *at = strstr(buf, "\"intermediate_size\": 32");
    if (at)
        at[21] = '1', at[22] = '6'; /* "intermediate_size": 16 */
    if (o)
        fputs(buf, o);
    if (in)
        fclose(in);
    if (o)
        fclose(o);
    char real[PATH_MAX];
    int rc = -1;
    if (at && realpath(SHARED "/fixtures/hf/granitemoe/model.safetensors", real) && symlink(real, link) == 0) {
        cdx_gguf_writer *w = NULL;
        cdx_convert *c = NULL;
        e = (cdx_err){0};
        if (cdx_gguf_writer_new(&w, &e) == 0)
            rc = cdx_convert_hf(dir, &(cdx_convert_opts){ .type = CDX_TYPE_F32 }, w, &c, &e);
        cdx_convert_free(c);
        cdx_gguf_writer_free(w);
    }
    CHECKF(at && rc == CDX_EFORMAT && strstr(e.msg, "input_linear.weight\" does not have the shape config.json gives, "
                                                    "[8, 32, 64]"), "rc %d: %s", rc, e.msg);
    remove(link);
    remove(path);
    rmdir(dir);
}

int main(void)
{
    char name[128];
    for (size_t i = 0; i < sizeof k_dense / sizeof *k_dense; i++) {
        g_name = k_dense[i];
        snprintf(name, sizeof name, "%s to F32 equals the reference GGUF (metadata, tensors, bits)", g_name);
        RUN(name, f32_matches_reference);
    }
    const char *const typed[] = { "llama", "qwen3", "llama3_rope" };
    for (size_t i = 0; i < 3; i++) {
        g_name = typed[i];
        snprintf(name, sizeof name, "%s to F16, BF16, Q8_0 gives the requested types and the quantizer's blocks", g_name);
        RUN(name, types_follow_the_request);
    }
    RUN("llama q/k rows are permuted to adjacent RoPE pairs", llama_q_rows_are_permuted);
    RUN("unknown output types and missing directories are refused by name; MoE converts", refusals_name_the_problem);
    RUN("granitemoe's stacked experts split into gate and up as llama.cpp's converter splits them", granitemoe_experts_are_split);
    return t_done("convert");
}
