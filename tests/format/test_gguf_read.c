/* GGUF reader against the real stories260K file (facts from its README, read by llama.cpp). */
#include "caldrix.h"
#include "test.h"

#include <stdint.h>
#include <unistd.h>

static void stories260k_metadata_and_tensors_read(void)
{
    cdx_err e = {0};
    cdx_gguf *g = NULL;
    REQUIRE(cdx_gguf_open(SHARED "/models/stories260K/stories260K.gguf", &g, &e) == CDX_OK);
    CHECK(g->version == 3);
    CHECK(g->n_kv == 19);
    CHECK(g->n_tensors == 48);
    CHECK(g->data_offset == 14176);
    uint64_t u;
    CHECK(cdx_gguf_get_u64(g, "llama.embedding_length", &u) && u == 64);
    CHECK(cdx_gguf_get_u64(g, "llama.block_count", &u) && u == 5);
    CHECK(cdx_gguf_get_u64(g, "llama.attention.head_count_kv", &u) && u == 4);
    double f;
    CHECK(cdx_gguf_get_f64(g, "llama.attention.layer_norm_rms_epsilon", &f) && (float)f == 1e-5f);
    cdx_gguf_str s;
    CHECK(cdx_gguf_get_str(g, "general.architecture", &s) && s.len == 5 && !memcmp(s.ptr, "llama", 5));
    const cdx_gguf_kv *toks = cdx_gguf_find(g, "tokenizer.ggml.tokens");
    REQUIRE(toks && toks->val.type == CDX_GGUF_ARRAY && toks->val.arr_type == CDX_GGUF_STRING);
    CHECK(toks->val.n == 512);
    CHECK(toks->val.str_items[13].len == 6 && !memcmp(toks->val.str_items[13].ptr, "<0x0A>", 6));
    const cdx_gguf_kv *scores = cdx_gguf_find(g, "tokenizer.ggml.scores");
    REQUIRE(scores && scores->val.n == 512);
    CHECK(cdx_gguf_arr_f64(&scores->val, 260) == -1.0);
    const cdx_gguf_tensor *t = cdx_gguf_tensor_find(g, "blk.4.ffn_down.weight");
    REQUIRE(t);
    CHECK(t->type == CDX_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 172 && t->ne[1] == 64);
    CHECK(t->n_bytes == 172 * 64 * 4);
    CHECK(cdx_gguf_tensor_find(g, "nope") == NULL);
    CHECK(cdx_gguf_find(g, "nope") == NULL);
    cdx_gguf_close(g);
}

static void missing_file_is_named(void)
{
    cdx_err e = {0};
    cdx_gguf *g = NULL;
    CHECK(cdx_gguf_open("tests/no-such.gguf", &g, &e) == CDX_ENOTFOUND);
    CHECK(strstr(e.msg, "no-such.gguf") != NULL);
}

/* A float element is an integer only when it holds one exactly and int64 can hold it: NaN, 2.5,
 * 1e30 and 2^63 are refused (converting them is undefined behaviour in C; on x86 they all came back
 * as INT64_MIN), as is a u64 above INT64_MAX (it came back negative). */
static void integer_reads_of_array_elements_refuse_what_int64_cannot_hold(void)
{
    char dir[] = "/tmp/cdx_gguf_read_XXXXXX", path[64];
    REQUIRE(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/arrays.gguf", dir);
    const float f32[] = { 3.0f, 2.5f, NAN, 1e30f, -0x1p63f, 0x1p63f, -0.0f, INFINITY, 16777216.0f };
    const double f64[] = { 9007199254740993.0 /* rounds to 2^53 */, -0x1p63, 0x1p63, 0x1.fffffffffffffp62, -1e-300 };
    const uint64_t u64[] = { (uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX };
    const int8_t i8[] = { -128 };
    const uint8_t b[] = { 1 };
    cdx_err e = {0};
    cdx_gguf_writer *w;
    REQUIRE(cdx_gguf_writer_new(&w, &e) == CDX_OK);
    cdx_gguf_writer_set_arr(w, "a.f32", CDX_GGUF_F32, f32, sizeof f32 / sizeof *f32);
    cdx_gguf_writer_set_arr(w, "a.f64", CDX_GGUF_F64, f64, sizeof f64 / sizeof *f64);
    cdx_gguf_writer_set_arr(w, "a.u64", CDX_GGUF_U64, u64, 3);
    cdx_gguf_writer_set_arr(w, "a.i8", CDX_GGUF_I8, i8, 1);
    cdx_gguf_writer_set_arr(w, "a.bool", CDX_GGUF_BOOL, b, 1);
    const char *strs[] = { "7" };
    cdx_gguf_writer_set_arr_str(w, "a.str", strs, 1);
    REQUIRE(cdx_gguf_writer_write(w, path, &e) == CDX_OK);
    cdx_gguf_writer_free(w);
    cdx_gguf *g = NULL;
    REQUIRE(cdx_gguf_open(path, &g, &e) == CDX_OK);
    const cdx_gguf_value *a32 = &cdx_gguf_find(g, "a.f32")->val, *a64 = &cdx_gguf_find(g, "a.f64")->val;
    const cdx_gguf_value *au = &cdx_gguf_find(g, "a.u64")->val;
    int64_t x = 12345;
    CHECK(cdx_gguf_arr_i64(a32, 0, &x) && x == 3);
    static const struct { uint64_t i; const char *what; } bad32[] = {
        { 1, "2.5" }, { 2, "NaN" }, { 3, "1e30" }, { 5, "2^63" }, { 7, "infinity" },
    };
    for (size_t k = 0; k < sizeof bad32 / sizeof *bad32; k++) {
        x = 12345;
        CHECKF(!cdx_gguf_arr_i64(a32, bad32[k].i, &x) && x == 12345, "f32 %s: %lld", bad32[k].what, (long long)x);
    }
    CHECK(cdx_gguf_arr_i64(a32, 4, &x) && x == INT64_MIN); /* -2^63 fits exactly */
    CHECK(cdx_gguf_arr_i64(a32, 6, &x) && x == 0);
    CHECK(cdx_gguf_arr_i64(a32, 8, &x) && x == 16777216);
    CHECK(!cdx_gguf_arr_i64(a32, 9, &x)); /* past the end */
    CHECK(cdx_gguf_arr_i64(a64, 0, &x) && x == 9007199254740992);
    CHECK(cdx_gguf_arr_i64(a64, 1, &x) && x == INT64_MIN);
    CHECK(!cdx_gguf_arr_i64(a64, 2, &x));
    CHECK(cdx_gguf_arr_i64(a64, 3, &x) && x == INT64_MAX - 1023);
    CHECK(!cdx_gguf_arr_i64(a64, 4, &x));
    CHECK(cdx_gguf_arr_i64(au, 0, &x) && x == INT64_MAX);
    CHECK(!cdx_gguf_arr_i64(au, 1, &x) && !cdx_gguf_arr_i64(au, 2, &x));
    CHECK(cdx_gguf_arr_i64(&cdx_gguf_find(g, "a.i8")->val, 0, &x) && x == -128);
    CHECK(!cdx_gguf_arr_i64(&cdx_gguf_find(g, "a.bool")->val, 0, &x));
    CHECK(!cdx_gguf_arr_i64(&cdx_gguf_find(g, "a.str")->val, 0, &x));
    /* the f64 reads stay as they were, NaN included */
    CHECK(cdx_gguf_arr_f64(a32, 1) == 2.5 && isnan(cdx_gguf_arr_f64(a32, 2)));
    cdx_gguf_close(g);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    RUN("stories260K metadata and tensors read as llama.cpp reads them", stories260k_metadata_and_tensors_read);
    RUN("a missing file is named", missing_file_is_named);
    RUN("integer reads of array elements refuse NaN, fractions and values int64 cannot hold",
        integer_reads_of_array_elements_refuse_what_int64_cannot_hold);
    return t_done("gguf_read");
}
