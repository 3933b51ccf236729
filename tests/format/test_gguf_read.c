/* GGUF reader against the real stories260K file (facts from its README, read by llama.cpp). */
#include "caldrix.h"
#include "test.h"

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

int main(void)
{
    RUN("stories260K metadata and tensors read as llama.cpp reads them", stories260k_metadata_and_tensors_read);
    RUN("a missing file is named", missing_file_is_named);
    return t_done("gguf_read");
}
