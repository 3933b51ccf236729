/* GGUF and safetensors writers: write -> read back -> equal, for every metadata type (nested
 * arrays included) and several tensor types and shapes; a rewrite of stories260K.gguf. */
#include "caldrix.h"
#include "test.h"

#include <unistd.h>

static char g_dir[64];

static const char *tmp_path(const char *name)
{
    static char p[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

static bool str_eq(cdx_gguf_str a, cdx_gguf_str b) { return a.len == b.len && !memcmp(a.ptr, b.ptr, a.len); }

static const uint8_t k_vsize[CDX_GGUF_VTYPE_COUNT] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

static bool values_equal(const cdx_gguf_value *a, const cdx_gguf_value *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case CDX_GGUF_STRING: return str_eq(a->str, b->str);
    case CDX_GGUF_F32: case CDX_GGUF_F64: return a->num.f == b->num.f || (a->num.f != a->num.f && b->num.f != b->num.f);
    case CDX_GGUF_ARRAY:
        if (a->arr_type != b->arr_type || a->n != b->n)
            return false;
        for (uint64_t i = 0; i < a->n; i++) {
            if (a->arr_type == CDX_GGUF_STRING && !str_eq(a->str_items[i], b->str_items[i]))
                return false;
            if (a->arr_type == CDX_GGUF_ARRAY && !values_equal(&a->items[i], &b->items[i]))
                return false;
        }
        if (a->arr_type != CDX_GGUF_STRING && a->arr_type != CDX_GGUF_ARRAY)
            return a->n == 0 || !memcmp(a->raw, b->raw, a->n * k_vsize[a->arr_type]);
        return true;
    default: return a->num.u == b->num.u;
    }
}

/* ---- GGUF ---- */

static void gguf_metadata_of_every_type_round_trips(void)
{
    cdx_err e = {0};
    cdx_gguf_writer *w = NULL;
    REQUIRE(cdx_gguf_writer_new(&w, &e) == CDX_OK);
    CHECK(cdx_gguf_writer_set_u32(w, "t.u32", 4000000000u) == CDX_OK);
    CHECK(cdx_gguf_writer_set_i32(w, "t.i32", -7) == CDX_OK);
    CHECK(cdx_gguf_writer_set_u64(w, "t.u64", 0xfedcba9876543210ull) == CDX_OK);
    CHECK(cdx_gguf_writer_set_i64(w, "t.i64", INT64_MIN) == CDX_OK);
    CHECK(cdx_gguf_writer_set_f32(w, "t.f32", 1e-5f) == CDX_OK);
    CHECK(cdx_gguf_writer_set_f64(w, "t.f64", 0.1) == CDX_OK);
    CHECK(cdx_gguf_writer_set_bool(w, "t.bool", true) == CDX_OK);
    CHECK(cdx_gguf_writer_set_str(w, "t.str", "héllo \"world\"") == CDX_OK);
    CHECK(cdx_gguf_writer_set_str(w, "t.empty", "") == CDX_OK);
    /* The narrow scalar types have no setter; copy_kv writes them from a value. */
    cdx_gguf_kv k8 = { "t.u8", { .type = CDX_GGUF_U8, .n = 1, .num.u = 200 } };
    cdx_gguf_kv ki8 = { "t.i8", { .type = CDX_GGUF_I8, .n = 1, .num.i = -100 } };
    cdx_gguf_kv k16 = { "t.u16", { .type = CDX_GGUF_U16, .n = 1, .num.u = 65535 } };
    cdx_gguf_kv ki16 = { "t.i16", { .type = CDX_GGUF_I16, .n = 1, .num.i = -32768 } };
    CHECK(cdx_gguf_writer_copy_kv(w, &k8) == CDX_OK && cdx_gguf_writer_copy_kv(w, &ki8) == CDX_OK);
    CHECK(cdx_gguf_writer_copy_kv(w, &k16) == CDX_OK && cdx_gguf_writer_copy_kv(w, &ki16) == CDX_OK);
    /* Arrays of every fixed-size type. */
    static const uint8_t a8[3] = { 1, 2, 255 };
    static const int16_t a16[2] = { -1, 300 };
    static const uint32_t a32[4] = { 1, 2, 3, 4 };
    static const float af[3] = { 0.5f, -2.0f, 3e38f };
    static const int64_t a64[2] = { -5, INT64_MAX };
    static const double ad[2] = { 1.0 / 3, -0.0 };
    static const uint8_t ab[3] = { 1, 0, 1 };
    CHECK(cdx_gguf_writer_set_arr(w, "a.u8", CDX_GGUF_U8, a8, 3) == CDX_OK);
    CHECK(cdx_gguf_writer_set_arr(w, "a.i16", CDX_GGUF_I16, a16, 2) == CDX_OK);
    CHECK(cdx_gguf_writer_set_arr(w, "a.u32", CDX_GGUF_U32, a32, 4) == CDX_OK);
    CHECK(cdx_gguf_writer_set_arr(w, "a.f32", CDX_GGUF_F32, af, 3) == CDX_OK);
    CHECK(cdx_gguf_writer_set_arr(w, "a.i64", CDX_GGUF_I64, a64, 2) == CDX_OK);
    CHECK(cdx_gguf_writer_set_arr(w, "a.f64", CDX_GGUF_F64, ad, 2) == CDX_OK);
    CHECK(cdx_gguf_writer_set_arr(w, "a.bool", CDX_GGUF_BOOL, ab, 3) == CDX_OK);
    CHECK(cdx_gguf_writer_set_arr(w, "a.empty", CDX_GGUF_I32, NULL, 0) == CDX_OK);
    CHECK(cdx_gguf_writer_set_arr(w, "a.bad", CDX_GGUF_STRING, a8, 1) == CDX_EINVAL);
    const char *strs[] = { "<unk>", "", "▁the", "\xe2\x82\xac" };
    /* The failed setter above made the writer fail; start over with a fresh one for the rest. */
    cdx_gguf_writer *w2 = NULL;
    REQUIRE(cdx_gguf_writer_new(&w2, &e) == CDX_OK);
    CHECK(cdx_gguf_writer_write(w, tmp_path("failed.gguf"), &e) == CDX_EINVAL && strstr(e.msg, "a.bad"));
    CHECK(access(tmp_path("failed.gguf"), F_OK) != 0);
    cdx_gguf_writer_free(w);
    w = w2;
    CHECK(cdx_gguf_writer_set_arr_str(w, "a.str", strs, 4) == CDX_OK);
    CHECK(cdx_gguf_writer_copy_kv(w, &k8) == CDX_OK);
    CHECK(cdx_gguf_writer_set_u32(w, "t.twice", 1) == CDX_OK && cdx_gguf_writer_set_str(w, "t.twice", "last") == CDX_OK);
    CHECK(cdx_gguf_writer_set_arr(w, "a.f32", CDX_GGUF_F32, af, 3) == CDX_OK);
    /* Nested: [[1,2],[3]] of u32, [["a","bc"],[]] of strings, and [[[7]]] three deep. */
    cdx_gguf_str s_a = { "a", 1 }, s_bc[2] = { { "a", 1 }, { "bc", 2 } };
    (void)s_a;
    cdx_gguf_value inner_u[2] = {
        { .type = CDX_GGUF_ARRAY, .arr_type = CDX_GGUF_U32, .n = 2, .raw = (const uint8_t *)a32 },
        { .type = CDX_GGUF_ARRAY, .arr_type = CDX_GGUF_U32, .n = 1, .raw = (const uint8_t *)(a32 + 2) },
    };
    cdx_gguf_kv nested_u = { "n.u32", { .type = CDX_GGUF_ARRAY, .arr_type = CDX_GGUF_ARRAY, .n = 2, .items = inner_u } };
    cdx_gguf_value inner_s[2] = {
        { .type = CDX_GGUF_ARRAY, .arr_type = CDX_GGUF_STRING, .n = 2, .str_items = s_bc },
        { .type = CDX_GGUF_ARRAY, .arr_type = CDX_GGUF_STRING, .n = 0 },
    };
    cdx_gguf_kv nested_s = { "n.str", { .type = CDX_GGUF_ARRAY, .arr_type = CDX_GGUF_ARRAY, .n = 2, .items = inner_s } };
    static const int32_t seven = 7;
    cdx_gguf_value d3 = { .type = CDX_GGUF_ARRAY, .arr_type = CDX_GGUF_I32, .n = 1, .raw = (const uint8_t *)&seven };
    cdx_gguf_value d2 = { .type = CDX_GGUF_ARRAY, .arr_type = CDX_GGUF_ARRAY, .n = 1, .items = &d3 };
    cdx_gguf_kv deep = { "n.deep", { .type = CDX_GGUF_ARRAY, .arr_type = CDX_GGUF_ARRAY, .n = 1, .items = &d2 } };
    CHECK(cdx_gguf_writer_copy_kv(w, &nested_u) == CDX_OK);
    CHECK(cdx_gguf_writer_copy_kv(w, &nested_s) == CDX_OK);
    CHECK(cdx_gguf_writer_copy_kv(w, &deep) == CDX_OK);
    const char *path = tmp_path("meta.gguf");
    REQUIRE(cdx_gguf_writer_write(w, path, &e) == CDX_OK);
    cdx_gguf_writer_free(w);

    cdx_gguf *g = NULL;
    REQUIRE(cdx_gguf_open(path, &g, &e) == CDX_OK);
    CHECK(g->version == 3 && g->n_tensors == 0 && g->n_kv == 7);
    cdx_gguf_str s;
    CHECK(cdx_gguf_get_str(g, "t.twice", &s) && s.len == 4 && !memcmp(s.ptr, "last", 4));
    CHECK(g->kv[1].key && !strcmp(g->kv[1].key, "t.u8")); /* insertion order */
    CHECK(values_equal(&cdx_gguf_find(g, "t.u8")->val, &k8.val));
    CHECK(values_equal(&cdx_gguf_find(g, "n.u32")->val, &nested_u.val));
    CHECK(values_equal(&cdx_gguf_find(g, "n.str")->val, &nested_s.val));
    CHECK(values_equal(&cdx_gguf_find(g, "n.deep")->val, &deep.val));
    const cdx_gguf_kv *as = cdx_gguf_find(g, "a.str");
    REQUIRE(as && as->val.arr_type == CDX_GGUF_STRING && as->val.n == 4);
    for (int i = 0; i < 4; i++)
        CHECK(as->val.str_items[i].len == strlen(strs[i]) && !memcmp(as->val.str_items[i].ptr, strs[i], strlen(strs[i])));
    const cdx_gguf_kv *af_kv = cdx_gguf_find(g, "a.f32");
    REQUIRE(af_kv && af_kv->val.n == 3);
    CHECK(cdx_gguf_arr_f64(&af_kv->val, 2) == (double)3e38f);
    cdx_gguf_close(g);

    /* The first writer's values (all scalar and array types), written by a writer that did not fail. */
    REQUIRE(cdx_gguf_writer_new(&w, &e) == CDX_OK);
    cdx_gguf_writer_set_u32(w, "t.u32", 4000000000u);
    cdx_gguf_writer_set_i32(w, "t.i32", -7);
    cdx_gguf_writer_set_u64(w, "t.u64", 0xfedcba9876543210ull);
    cdx_gguf_writer_set_i64(w, "t.i64", INT64_MIN);
    cdx_gguf_writer_set_f32(w, "t.f32", 1e-5f);
    cdx_gguf_writer_set_f64(w, "t.f64", 0.1);
    cdx_gguf_writer_set_bool(w, "t.bool", true);
    cdx_gguf_writer_set_str(w, "t.str", "héllo \"world\"");
    cdx_gguf_writer_set_str(w, "t.empty", "");
    cdx_gguf_writer_copy_kv(w, &k8);
    cdx_gguf_writer_copy_kv(w, &ki8);
    cdx_gguf_writer_copy_kv(w, &k16);
    cdx_gguf_writer_copy_kv(w, &ki16);
    cdx_gguf_writer_set_arr(w, "a.u8", CDX_GGUF_U8, a8, 3);
    cdx_gguf_writer_set_arr(w, "a.i16", CDX_GGUF_I16, a16, 2);
    cdx_gguf_writer_set_arr(w, "a.u32", CDX_GGUF_U32, a32, 4);
    cdx_gguf_writer_set_arr(w, "a.i64", CDX_GGUF_I64, a64, 2);
    cdx_gguf_writer_set_arr(w, "a.f64", CDX_GGUF_F64, ad, 2);
    cdx_gguf_writer_set_arr(w, "a.bool", CDX_GGUF_BOOL, ab, 3);
    cdx_gguf_writer_set_arr(w, "a.empty", CDX_GGUF_I32, NULL, 0);
    REQUIRE(cdx_gguf_writer_write(w, path, &e) == CDX_OK);
    cdx_gguf_writer_free(w);
    REQUIRE(cdx_gguf_open(path, &g, &e) == CDX_OK);
    CHECK(g->n_kv == 20);
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    CHECK(cdx_gguf_get_u64(g, "t.u32", &u) && u == 4000000000u && cdx_gguf_find(g, "t.u32")->val.type == CDX_GGUF_U32);
    CHECK(cdx_gguf_get_i64(g, "t.i32", &i) && i == -7 && cdx_gguf_find(g, "t.i32")->val.type == CDX_GGUF_I32);
    CHECK(cdx_gguf_get_u64(g, "t.u64", &u) && u == 0xfedcba9876543210ull);
    CHECK(cdx_gguf_get_i64(g, "t.i64", &i) && i == INT64_MIN);
    CHECK(cdx_gguf_get_f64(g, "t.f32", &f) && (float)f == 1e-5f && cdx_gguf_find(g, "t.f32")->val.type == CDX_GGUF_F32);
    CHECK(cdx_gguf_get_f64(g, "t.f64", &f) && f == 0.1 && cdx_gguf_find(g, "t.f64")->val.type == CDX_GGUF_F64);
    CHECK(cdx_gguf_get_bool(g, "t.bool", &b) && b);
    CHECK(cdx_gguf_get_str(g, "t.str", &s) && s.len == strlen("héllo \"world\"") && !memcmp(s.ptr, "héllo \"world\"", s.len));
    CHECK(cdx_gguf_get_str(g, "t.empty", &s) && s.len == 0);
    CHECK(values_equal(&cdx_gguf_find(g, "t.u8")->val, &k8.val) && values_equal(&cdx_gguf_find(g, "t.i8")->val, &ki8.val));
    CHECK(values_equal(&cdx_gguf_find(g, "t.u16")->val, &k16.val) && values_equal(&cdx_gguf_find(g, "t.i16")->val, &ki16.val));
    CHECK(cdx_gguf_get_i64(g, "t.i8", &i) && i == -100);
    struct { const char *key; uint32_t t; uint64_t n; const void *d; size_t bytes; } arrs[] = {
        { "a.u8", CDX_GGUF_U8, 3, a8, 3 }, { "a.i16", CDX_GGUF_I16, 2, a16, 4 }, { "a.u32", CDX_GGUF_U32, 4, a32, 16 },
        { "a.i64", CDX_GGUF_I64, 2, a64, 16 }, { "a.f64", CDX_GGUF_F64, 2, ad, 16 }, { "a.bool", CDX_GGUF_BOOL, 3, ab, 3 },
        { "a.empty", CDX_GGUF_I32, 0, NULL, 0 },
    };
    for (size_t k = 0; k < sizeof arrs / sizeof arrs[0]; k++) {
        const cdx_gguf_kv *kv = cdx_gguf_find(g, arrs[k].key);
        CHECKF(kv && kv->val.type == CDX_GGUF_ARRAY && kv->val.arr_type == arrs[k].t && kv->val.n == arrs[k].n &&
                   (!arrs[k].bytes || !memcmp(kv->val.raw, arrs[k].d, arrs[k].bytes)),
               "%s", arrs[k].key);
    }
    int64_t x;
    CHECK(cdx_gguf_arr_i64(&cdx_gguf_find(g, "a.i16")->val, 0, &x) && x == -1);
    CHECK(cdx_gguf_arr_f64(&cdx_gguf_find(g, "a.f64")->val, 0) == 1.0 / 3);
    cdx_gguf_close(g);
}

static void gguf_tensors_of_several_types_round_trip_aligned(void)
{
    cdx_err e = {0};
    float f32[5] = { 1, -2, 3.5f, 1e-30f, -0.0f };
    uint16_t f16[12], bf16[24];
    uint8_t q8[2 * 2 * 34];
    for (int k = 0; k < 12; k++)
        f16[k] = cdx_f32_to_f16((float)k / 3);
    for (int k = 0; k < 24; k++)
        bf16[k] = cdx_f32_to_bf16((float)k * 1.5f - 7);
    for (size_t k = 0; k < sizeof q8; k++)
        q8[k] = (uint8_t)(k * 37 + 11);
    int32_t i32[3] = { -1, 0, 1 << 30 };
    for (int align = 0; align < 2; align++) {
        cdx_gguf_writer *w = NULL;
        REQUIRE(cdx_gguf_writer_new(&w, &e) == CDX_OK);
        if (align)
            cdx_gguf_writer_set_u32(w, "general.alignment", 64);
        cdx_gguf_writer_set_str(w, "general.architecture", "llama");
        uint64_t ne1[1] = { 5 }, ne2[2] = { 4, 3 }, ne4[4] = { 2, 3, 2, 2 }, neq[2] = { 64, 2 }, nei[1] = { 3 };
        REQUIRE(cdx_gguf_writer_add_tensor(w, "f32.vec", CDX_TYPE_F32, 1, ne1, f32, &e) == CDX_OK);
        REQUIRE(cdx_gguf_writer_add_tensor(w, "f16.mat", CDX_TYPE_F16, 2, ne2, f16, &e) == CDX_OK);
        REQUIRE(cdx_gguf_writer_add_tensor(w, "bf16.4d", CDX_TYPE_BF16, 4, ne4, bf16, &e) == CDX_OK);
        REQUIRE(cdx_gguf_writer_add_tensor(w, "q8.mat", CDX_TYPE_Q8_0, 2, neq, q8, &e) == CDX_OK);
        REQUIRE(cdx_gguf_writer_add_tensor(w, "i32.vec", CDX_TYPE_I32, 1, nei, i32, &e) == CDX_OK);
        CHECK(cdx_gguf_writer_add_tensor(w, "f32.vec", CDX_TYPE_F32, 1, ne1, f32, &e) == CDX_EINVAL && strstr(e.msg, "twice"));
        uint64_t bad[1] = { 33 };
        CHECK(cdx_gguf_writer_add_tensor(w, "q8.bad", CDX_TYPE_Q8_0, 1, bad, q8, &e) < 0 && strstr(e.msg, "q8.bad"));
        CHECK(cdx_gguf_writer_add_tensor(w, "retired", 4, 1, ne1, q8, &e) < 0);
        CHECK(cdx_gguf_writer_add_tensor(w, "dims5", CDX_TYPE_F32, 5, ne4, f32, &e) == CDX_EINVAL);
        const char *path = tmp_path("tensors.gguf");
        REQUIRE(cdx_gguf_writer_write(w, path, &e) == CDX_OK);
        cdx_gguf_writer_free(w);
        cdx_gguf *g = NULL;
        REQUIRE(cdx_gguf_open(path, &g, &e) == CDX_OK);
        uint64_t A = align ? 64 : 32;
        CHECK(g->alignment == A && g->data_offset % A == 0 && g->n_tensors == 5);
        struct { const char *n; uint32_t t, nd; const uint64_t *ne; const void *d; size_t bytes; } want[] = {
            { "f32.vec", CDX_TYPE_F32, 1, ne1, f32, sizeof f32 }, { "f16.mat", CDX_TYPE_F16, 2, ne2, f16, sizeof f16 },
            { "bf16.4d", CDX_TYPE_BF16, 4, ne4, bf16, sizeof bf16 }, { "q8.mat", CDX_TYPE_Q8_0, 2, neq, q8, sizeof q8 },
            { "i32.vec", CDX_TYPE_I32, 1, nei, i32, sizeof i32 },
        };
        for (int k = 0; k < 5; k++) {
            const cdx_gguf_tensor *t = &g->tensors[k];
            CHECKF(!strcmp(t->name, want[k].n) && t->type == want[k].t && t->n_dims == want[k].nd &&
                       t->n_bytes == want[k].bytes && !memcmp(t->data, want[k].d, want[k].bytes) && t->offset % A == 0,
                   "%s", want[k].n);
            for (uint32_t d = 0; d < 4; d++)
                CHECK(t->ne[d] == (d < want[k].nd ? want[k].ne[d] : 1));
        }
        cdx_gguf_close(g);
    }
}

static void stories260k_rewritten_reads_back_identical(void)
{
    cdx_err e = {0};
    cdx_gguf *src = NULL, *g = NULL;
    REQUIRE(cdx_gguf_open(SHARED "/models/stories260K/stories260K.gguf", &src, &e) == CDX_OK);
    cdx_gguf_writer *w = NULL;
    REQUIRE(cdx_gguf_writer_new(&w, &e) == CDX_OK);
    for (uint64_t i = 0; i < src->n_kv; i++)
        CHECK(cdx_gguf_writer_copy_kv(w, &src->kv[i]) == CDX_OK);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const cdx_gguf_tensor *t = &src->tensors[i];
        CHECKF(cdx_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &e) == CDX_OK, "%s", e.msg);
    }
    const char *path = tmp_path("stories260K.gguf");
    REQUIRE(cdx_gguf_writer_write(w, path, &e) == CDX_OK);
    cdx_gguf_writer_free(w);
    REQUIRE(cdx_gguf_open(path, &g, &e) == CDX_OK);
    CHECK(g->n_kv == src->n_kv && g->n_tensors == src->n_tensors && g->data_offset == src->data_offset);
    for (uint64_t i = 0; i < src->n_kv && i < g->n_kv; i++)
        CHECKF(!strcmp(g->kv[i].key, src->kv[i].key) && values_equal(&g->kv[i].val, &src->kv[i].val), "%s", src->kv[i].key);
    for (uint64_t i = 0; i < src->n_tensors && i < g->n_tensors; i++) {
        const cdx_gguf_tensor *a = &src->tensors[i], *b = &g->tensors[i];
        CHECKF(!strcmp(a->name, b->name) && a->type == b->type && a->n_dims == b->n_dims && a->offset == b->offset &&
                   !memcmp(a->ne, b->ne, sizeof a->ne) && a->n_bytes == b->n_bytes && !memcmp(a->data, b->data, a->n_bytes),
               "%s", a->name);
    }
    /* llama.cpp's writer lays the file out the same way, so the copy is byte-identical. */
    CHECK(g->size == src->size && !memcmp(g->base, src->base, src->size));
    cdx_gguf_close(g);
    cdx_gguf_close(src);
}

/* ---- safetensors ---- */

static void safetensors_round_trips_sorted_padded_and_aligned(void)
{
    cdx_err e = {0};
    cdx_st_writer *w = NULL;
    REQUIRE(cdx_st_writer_new(&w, &e) == CDX_OK);
    float f[6] = { 1, 2, 3, 4, 5, 6 }, scalar = 42;
    uint16_t h[3] = { 0x3c00, 0xbc00, 0x7bff }, bh[5] = { 0x3f80, 1, 2, 3, 4 };
    uint64_t s23[2] = { 2, 3 }, s3[1] = { 3 }, s5[3] = { 1, 5, 1 }, s0[2] = { 0, 4 };
    REQUIRE(cdx_st_writer_add(w, "z.f16", CDX_TYPE_F16, 1, s3, h, &e) == CDX_OK); /* odd byte count first */
    REQUIRE(cdx_st_writer_add(w, "a.f32", CDX_TYPE_F32, 2, s23, f, &e) == CDX_OK);
    REQUIRE(cdx_st_writer_add(w, "m.bf16", CDX_TYPE_BF16, 3, s5, bh, &e) == CDX_OK);
    REQUIRE(cdx_st_writer_add(w, "scalar", CDX_TYPE_F32, 0, NULL, &scalar, &e) == CDX_OK);
    REQUIRE(cdx_st_writer_add(w, "empty", CDX_TYPE_F32, 2, s0, NULL, &e) == CDX_OK);
    REQUIRE(cdx_st_writer_add(w, "q\"uote\\d ü", CDX_TYPE_F32, 1, s3, f + 3, &e) == CDX_OK);
    CHECK(cdx_st_writer_add(w, "a.f32", CDX_TYPE_F32, 1, s3, f, &e) == CDX_EINVAL);
    CHECK(cdx_st_writer_add(w, "q", CDX_TYPE_Q8_0, 1, s3, f, &e) == CDX_EUNSUPPORTED && strstr(e.msg, "q8_0"));
    CHECK(cdx_st_writer_add(w, "__metadata__", CDX_TYPE_F32, 1, s3, f, &e) == CDX_EINVAL);
    const char *path = tmp_path("rt.safetensors");
    REQUIRE(cdx_st_writer_write(w, path, &e) == CDX_OK);
    cdx_st_writer_free(w);

    cdx_file *file = NULL;
    REQUIRE(cdx_file_map(path, &file, &e) == CDX_OK);
    uint64_t n;
    memcpy(&n, file->data, 8);
    CHECK(n % 8 == 0 && n + 8 <= file->size);
    const char *head = "{\"a.f32\":{\"dtype\":\"F32\"", *tail = "]},\"__metadata__\":{\"format\":\"pt\"}}";
    CHECK(!memcmp(file->data + 8, head, strlen(head)));
    CHECK(memmem(file->data + 8, n, tail, strlen(tail)) != NULL);
    cdx_file_unmap(file);

    cdx_safetensors *st = NULL;
    REQUIRE(cdx_st_open(path, &st, &e) == CDX_OK);
    CHECK(st->n_tensors == 6);
    const cdx_st_tensor *t = cdx_st_find(st, "a.f32");
    CHECK(t && t->type == CDX_TYPE_F32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
          !memcmp(t->data, f, 24) && (uintptr_t)t->data % 4 == 0);
    t = cdx_st_find(st, "z.f16");
    CHECK(t && t->type == CDX_TYPE_F16 && t->n_dims == 1 && t->n_bytes == 6 && !memcmp(t->data, h, 6));
    t = cdx_st_find(st, "m.bf16");
    CHECK(t && t->type == CDX_TYPE_BF16 && t->n_dims == 3 && t->shape[1] == 5 && !memcmp(t->data, bh, 10));
    t = cdx_st_find(st, "scalar");
    CHECK(t && t->n_dims == 0 && t->n_bytes == 4 && *(const float *)t->data == 42);
    t = cdx_st_find(st, "empty");
    CHECK(t && t->n_dims == 2 && t->shape[0] == 0 && t->n_bytes == 0);
    t = cdx_st_find(st, "q\"uote\\d ü");
    CHECK(t && !memcmp(t->data, f + 3, 12) && (uintptr_t)t->data % 4 == 0);
    cdx_st_close(st);
}

static void a_sharded_fixture_rewritten_as_one_file_reads_back_identical(void)
{
    cdx_err e = {0};
    cdx_safetensors *src = NULL, *st = NULL;
    REQUIRE(cdx_st_open(SHARED "/fixtures/hf/llama3_rope", &src, &e) == CDX_OK);
    cdx_st_writer *w = NULL;
    REQUIRE(cdx_st_writer_new(&w, &e) == CDX_OK);
    for (uint64_t i = src->n_tensors; i-- > 0;) {
        const cdx_st_tensor *t = &src->tensors[i];
        CHECK(cdx_st_writer_add(w, t->name, t->type, t->n_dims, t->shape, t->data, &e) == CDX_OK);
    }
    const char *path = tmp_path("one.safetensors");
    REQUIRE(cdx_st_writer_write(w, path, &e) == CDX_OK);
    cdx_st_writer_free(w);
    REQUIRE(cdx_st_open(path, &st, &e) == CDX_OK);
    CHECK(st->n_tensors == src->n_tensors);
    for (uint64_t i = 0; i < src->n_tensors && i < st->n_tensors; i++) {
        const cdx_st_tensor *a = &src->tensors[i], *b = &st->tensors[i];
        CHECK(!strcmp(a->name, b->name) && a->type == b->type && a->n_dims == b->n_dims &&
              !memcmp(a->shape, b->shape, sizeof a->shape) && a->n_bytes == b->n_bytes &&
              !memcmp(a->data, b->data, a->n_bytes));
    }
    cdx_st_close(st);
    cdx_st_close(src);
    /* The single-file fixture has the same layout as our writer: the rewrite is byte-identical. */
    REQUIRE(cdx_st_open(SHARED "/fixtures/hf/qwen3/model.safetensors", &src, &e) == CDX_OK);
    REQUIRE(cdx_st_writer_new(&w, &e) == CDX_OK);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const cdx_st_tensor *t = &src->tensors[i];
        CHECK(cdx_st_writer_add(w, t->name, t->type, t->n_dims, t->shape, t->data, &e) == CDX_OK);
    }
    path = tmp_path("qwen3.safetensors");
    REQUIRE(cdx_st_writer_write(w, path, &e) == CDX_OK);
    cdx_st_writer_free(w);
    cdx_file *a = NULL, *b = NULL;
    REQUIRE(cdx_file_map(path, &a, &e) == CDX_OK);
    REQUIRE(cdx_file_map(SHARED "/fixtures/hf/qwen3/model.safetensors", &b, &e) == CDX_OK);
    CHECKF(a->size == b->size && !memcmp(a->data, b->data, a->size), "%zu vs %zu bytes", a->size, b->size);
    cdx_file_unmap(a);
    cdx_file_unmap(b);
    cdx_st_close(src);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/cdx-writers-XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN("gguf metadata of every type round-trips, nested arrays included", gguf_metadata_of_every_type_round_trips);
    RUN("gguf tensors of several types and shapes round-trip, aligned", gguf_tensors_of_several_types_round_trip_aligned);
    RUN("stories260K rewritten reads back identical", stories260k_rewritten_reads_back_identical);
    RUN("safetensors round-trips: sorted, padded header, aligned data", safetensors_round_trips_sorted_padded_and_aligned);
    RUN("a sharded fixture rewritten as one file reads back identical", a_sharded_fixture_rewritten_as_one_file_reads_back_identical);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return t_done("writers");
}
