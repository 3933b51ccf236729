/* Malformed-input corpus. Each bad file is built here: a valid GGUF / safetensors file is written
 * with caldrix's writers, then corrupted. Every row names the builder, the expected code and a
 * substring of the message; the runner also checks that the message names the file. Sweeps over
 * every truncation and many byte flips must never crash (run under ASan/UBSan: make SAN=1 test). */
#include "caldrix.h"
#include "test.h"

#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

typedef struct {
    uint8_t *p;
    size_t n;
} blob;

static blob g_gguf, g_st; /* the valid files, read back into memory */
static uint64_t g_gguf_data_off;

static blob dup_blob(blob b)
{
    blob r = { malloc(b.n ? b.n : 1), b.n };
    if (b.n)
        memcpy(r.p, b.p, b.n);
    return r;
}

static blob read_file(const char *path)
{
    blob b = { NULL, 0 };
    cdx_err e;
    char *text;
    size_t len;
    if (cdx_file_read_all(path, 1 << 20, &text, &len, &e) == CDX_OK) {
        b.p = (uint8_t *)text;
        b.n = len;
    }
    return b;
}

static const char *tmp_path(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    for (char *c = p + strlen(g_dir) + 1; *c; c++)
        if (*c == '/')
            *c = '_';
    return p;
}

/* ---- the valid files ---- */

static int build_valid_files(void)
{
    cdx_err e = {0};
    static float fa[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, fb[8] = { -1, -2, -3, -4, -5, -6, -7, -8 };
    static uint16_t hc[16];
    for (int i = 0; i < 16; i++)
        hc[i] = cdx_f32_to_f16((float)i);
    cdx_gguf_writer *w;
    if (cdx_gguf_writer_new(&w, &e))
        return -1;
    cdx_gguf_writer_set_str(w, "general.architecture", "llama");
    cdx_gguf_writer_set_u32(w, "general.alignment", 32);
    cdx_gguf_writer_set_u32(w, "x.count", 7);
    const char *strs[] = { "a", "bc" };
    cdx_gguf_writer_set_arr_str(w, "x.list", strs, 2);
    cdx_gguf_writer_set_bool(w, "x.keyA", true);
    cdx_gguf_writer_set_bool(w, "x.keyB", false);
    uint64_t ne_a[1] = { 8 }, ne_b[2] = { 4, 2 }, ne_c[1] = { 16 };
    if (cdx_gguf_writer_add_tensor(w, "t.a", CDX_TYPE_F32, 1, ne_a, fa, &e) ||
        cdx_gguf_writer_add_tensor(w, "t.b", CDX_TYPE_F32, 2, ne_b, fb, &e) ||
        cdx_gguf_writer_add_tensor(w, "t.c", CDX_TYPE_F16, 1, ne_c, hc, &e) ||
        cdx_gguf_writer_write(w, tmp_path("valid.gguf"), &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    cdx_gguf_writer_free(w);
    g_gguf = read_file(tmp_path("valid.gguf"));

    cdx_st_writer *sw;
    if (cdx_st_writer_new(&sw, &e))
        return -1;
    uint64_t s_a[2] = { 2, 3 }, s_b[1] = { 4 }, s_c[2] = { 2, 2 };
    if (cdx_st_writer_add(sw, "w.a", CDX_TYPE_F32, 2, s_a, fa, &e) || cdx_st_writer_add(sw, "w.b", CDX_TYPE_F16, 1, s_b, hc, &e) ||
        cdx_st_writer_add(sw, "w.c", CDX_TYPE_BF16, 2, s_c, hc, &e) || cdx_st_writer_write(sw, tmp_path("valid.safetensors"), &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    cdx_st_writer_free(sw);
    g_st = read_file(tmp_path("valid.safetensors"));

    cdx_gguf *g;
    if (!g_gguf.p || !g_st.p || cdx_gguf_open_mem(g_gguf.p, g_gguf.n, NULL, &g, &e))
        return -1;
    g_gguf_data_off = g->data_offset;
    cdx_gguf_close(g);
    return 0;
}

/* ---- GGUF corruptions ---- */

static void put32(blob b, size_t at, uint32_t v) { memcpy(b.p + at, &v, 4); }
static void put64(blob b, size_t at, uint64_t v) { memcpy(b.p + at, &v, 8); }

/* Offset just past a length-prefixed name in the GGUF header (the field that follows it). */
static size_t after(blob b, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 8; i + n <= g_gguf_data_off; i++)
        if (!memcmp(b.p + i, name, n)) {
            uint64_t len;
            memcpy(&len, b.p + i - 8, 8);
            if (len == n)
                return i + n;
        }
    fprintf(stderr, "corpus builder: %s not found\n", name);
    abort();
}

static blob truncate_to(size_t n)
{
    blob b = dup_blob(g_gguf);
    b.n = n;
    return b;
}

static blob g_empty(void) { return truncate_to(0); }
static blob g_cut3(void) { return truncate_to(3); }
static blob g_cut_header(void) { return truncate_to(after(g_gguf, "t.b") + 6); }
static blob g_cut_data(void) { return truncate_to(g_gguf.n - 10); }
static blob g_bad_magic(void) { blob b = dup_blob(g_gguf); b.p[3] = 'X'; return b; }
static blob g_version1(void) { blob b = dup_blob(g_gguf); put32(b, 4, 1); return b; }
static blob g_version4(void) { blob b = dup_blob(g_gguf); put32(b, 4, 4); return b; }
static blob g_tensors_huge(void) { blob b = dup_blob(g_gguf); put64(b, 8, (uint64_t)1 << 60); return b; }
static blob g_kv_huge(void) { blob b = dup_blob(g_gguf); put64(b, 16, (uint64_t)1 << 60); return b; }
static blob g_tensors_more(void) { blob b = dup_blob(g_gguf); put64(b, 8, 4); return b; }
static blob g_ndims0(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "t.b"), 0); return b; }
static blob g_ndims9(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "t.b"), 9); return b; }
static blob g_dim_huge(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "t.a") + 4, (uint64_t)1 << 50); return b; }
static blob g_dim_zero(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "t.a") + 4, 0); return b; }
static blob g_dims_overflow(void)
{
    blob b = dup_blob(g_gguf);
    size_t at = after(b, "t.b") + 4;
    put64(b, at, (uint64_t)1 << 32);
    put64(b, at + 8, (uint64_t)1 << 32);
    return b;
}
/* t.b: n_dims(4) ne(16) type(4) offset(8); t.a and t.c: n_dims(4) ne(8) type(4) offset(8) */
static blob g_offset_past_end(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "t.c") + 16, (uint64_t)1 << 40); return b; }
static blob g_offset_max(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "t.c") + 16, UINT64_MAX - 31); return b; }
static blob g_overlap(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "t.b") + 24, 0); return b; }
static blob g_misaligned(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "t.b") + 24, 36); return b; }
static blob g_type99(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "t.a") + 12, 99); return b; }
static blob g_type4(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "t.a") + 12, 4); return b; }
static blob g_type_q8_short_row(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "t.a") + 12, CDX_TYPE_Q8_0); return b; }
static blob g_dup_tensor(void) { blob b = dup_blob(g_gguf); b.p[after(b, "t.b") - 1] = 'a'; return b; }
static blob g_dup_key(void) { blob b = dup_blob(g_gguf); b.p[after(b, "x.keyB") - 1] = 'A'; return b; }
static blob g_key_not_utf8(void) { blob b = dup_blob(g_gguf); b.p[after(b, "x.keyA") - 1] = 0xff; return b; }
static blob g_key_nul(void) { blob b = dup_blob(g_gguf); b.p[after(b, "x.keyA") - 2] = 0; return b; }
static blob g_name_not_utf8(void) { blob b = dup_blob(g_gguf); b.p[after(b, "t.c") - 1] = 0xc0; return b; }
static blob g_name_empty(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "t.a") - 11, 0); return b; }
static blob g_value_type13(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "x.count"), 13); return b; }
static blob g_array_type13(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "x.list") + 4, 13); return b; }
static blob g_array_huge(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "x.list") + 8, (uint64_t)1 << 61); return b; }
static blob g_string_long(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "general.architecture") + 4, (uint64_t)1 << 40); return b; }
static blob g_string_max(void) { blob b = dup_blob(g_gguf); put64(b, after(b, "general.architecture") + 4, UINT64_MAX); return b; }
static blob g_alignment3(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "general.alignment") + 4, 3); return b; }
static blob g_alignment1(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "general.alignment") + 4, 1); return b; }
static blob g_alignment_type(void) { blob b = dup_blob(g_gguf); put32(b, after(b, "general.alignment"), CDX_GGUF_I32); return b; }

/* One key whose value nests arrays 100000 deep: [[[[...]]]]. */
static blob g_depth_bomb(void)
{
    size_t depth = 100000, n = 4 + 4 + 8 + 8 + 8 + 4 + 4 + depth * 12;
    blob b = { calloc(1, n), n };
    size_t at = 0;
    memcpy(b.p, "GGUF", 4);
    put32(b, 4, 3);
    put64(b, 8, 0);
    put64(b, 16, 1);
    put64(b, 24, 4);
    memcpy(b.p + 32, "bomb", 4);
    at = 36;
    put32(b, at, CDX_GGUF_ARRAY);
    at += 4;
    for (size_t i = 0; i < depth && at + 12 <= n; i++, at += 12) {
        put32(b, at, CDX_GGUF_ARRAY);
        put64(b, at + 4, 1);
    }
    return b;
}

/* ---- safetensors corruptions ---- */

static blob st_header(void) /* the valid file's header text, NUL-terminated */
{
    uint64_t n;
    memcpy(&n, g_st.p, 8);
    blob h = { malloc(n + 1), n };
    memcpy(h.p, g_st.p + 8, n);
    h.p[n] = 0;
    return h;
}

/* Rebuilds the file with header text `h` (re-padded) and the valid file's data. */
static blob st_pack(const char *h)
{
    uint64_t old;
    memcpy(&old, g_st.p, 8);
    size_t data = g_st.n - 8 - old, hn = strlen(h), pad = (8 - hn % 8) % 8;
    blob b = { malloc(8 + hn + pad + data), 8 + hn + pad + data };
    put64(b, 0, hn + pad);
    memcpy(b.p + 8, h, hn);
    memset(b.p + 8 + hn, ' ', pad);
    memcpy(b.p + 8 + hn + pad, g_st.p + 8 + old, data);
    return b;
}

/* The valid header with the first `from` replaced by `to`. */
static blob st_edit(const char *from, const char *to)
{
    blob h = st_header();
    char *at = strstr((char *)h.p, from);
    if (!at) {
        fprintf(stderr, "corpus builder: %s not in the header %s\n", from, (char *)h.p);
        abort();
    }
    size_t n = strlen((char *)h.p) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - (char *)h.p), (char *)h.p, to, at + strlen(from));
    blob b = st_pack(out);
    free(out);
    free(h.p);
    return b;
}

static blob s_short(void) { blob b = dup_blob(g_st); b.n = 5; return b; }
static blob s_len_past_eof(void) { blob b = dup_blob(g_st); put64(b, 0, b.n - 7); return b; }
static blob s_len_huge(void) { blob b = dup_blob(g_st); put64(b, 0, (uint64_t)1 << 63); return b; }
static blob s_len_zero(void) { blob b = dup_blob(g_st); put64(b, 0, 0); return b; }
static blob s_not_json(void) { return st_pack("{\"w.a\": not json"); }
static blob s_not_object(void) { return st_pack("[1,2,3]"); }
static blob s_dtype_i8(void) { return st_edit("\"F16\"", "\"I8\""); }
static blob s_dtype_unknown(void) { return st_edit("\"F16\"", "\"Q4_K\""); }
static blob s_dtype_number(void) { return st_edit("\"F16\"", "16"); }
static blob s_no_dtype(void) { return st_edit("\"dtype\":\"F16\",", ""); }
static blob s_shape_mismatch(void) { return st_edit("[2,3]", "[2,4]"); }
static blob s_shape_negative(void) { return st_edit("[2,3]", "[2,-3]"); }
static blob s_shape_string(void) { return st_edit("[2,3]", "[2,\"3\"]"); }
static blob s_shape_overflow(void) { return st_edit("[2,3]", "[4294967296,4294967296,4294967296]"); }
static blob s_shape_9dims(void) { return st_edit("[2,3]", "[1,1,1,1,1,1,1,2,3]"); }
static blob s_overlap(void) { return st_edit("[32,40]", "[30,38]"); }
static blob s_past_eof(void) { return st_edit("[32,40]", "[1000,1008]"); }
static blob s_reversed(void) { return st_edit("[32,40]", "[40,32]"); }
static blob s_not_pair(void) { return st_edit("[32,40]", "[32]"); }
static blob s_dup_name(void) { return st_edit("\"w.c\"", "\"w.b\""); }
static blob s_name_nul(void) { return st_edit("\"w.c\"", "\"w\\u0000c\""); }
static blob s_name_not_utf8(void) { return st_edit("\"w.c\"", "\"w\xff" "c\""); }
static blob s_metadata(void) { return st_edit("{\"format\":\"pt\"}", "5"); }
static blob s_tensor_not_object(void)
{
    blob h = st_header();
    (void)h;
    free(h.p);
    return st_pack("{\"w.a\":[1,2]}");
}
static blob s_cut_data(void) { blob b = dup_blob(g_st); b.n -= 4; return b; }

typedef struct {
    const char *name;
    blob (*build)(void);
    int code;
    const char *msg;
} bad_file;

static const bad_file k_gguf[] = {
    { "gguf/empty.gguf", g_empty, CDX_EFORMAT, "not a GGUF file: it is empty" },
    { "gguf/cut_at_3.gguf", g_cut3, CDX_EFORMAT, "not a GGUF file: it is 3 bytes, less than GGUF's 4-byte magic" },
    { "gguf/cut_in_tensor_table.gguf", g_cut_header, CDX_EFORMAT, "truncated" },
    { "gguf/cut_in_data.gguf", g_cut_data, CDX_EFORMAT, "tensor \"t.c\" (32 bytes at data offset 64) runs past the end" },
    { "gguf/bad_magic.gguf", g_bad_magic, CDX_EFORMAT, "not a GGUF file (magic is 47 47 55 58" },
    { "gguf/version_1.gguf", g_version1, CDX_EUNSUPPORTED, "GGUF version is 1" },
    { "gguf/version_4.gguf", g_version4, CDX_EUNSUPPORTED, "GGUF version is 4" },
    { "gguf/tensor_count_2e60.gguf", g_tensors_huge, CDX_EFORMAT, "tensor count is 1152921504606846976" },
    { "gguf/kv_count_2e60.gguf", g_kv_huge, CDX_EFORMAT, "metadata count is 1152921504606846976" },
    { "gguf/tensor_count_plus_one.gguf", g_tensors_more, CDX_EFORMAT, "tensor name at offset 333 has length 0" },
    { "gguf/ndims_0.gguf", g_ndims0, CDX_EFORMAT, "tensor \"t.b\" has 0 dimensions" },
    { "gguf/ndims_9.gguf", g_ndims9, CDX_EFORMAT, "tensor \"t.b\" has 9 dimensions" },
    { "gguf/dim_2e50.gguf", g_dim_huge, CDX_EFORMAT, "tensor \"t.a\" dimension 0 is 1125899906842624" },
    { "gguf/dim_0.gguf", g_dim_zero, CDX_EFORMAT, "tensor \"t.a\" dimension 0 is 0" },
    { "gguf/dims_overflow.gguf", g_dims_overflow, CDX_EFORMAT, "tensor \"t.b\" dimension 1 is 4294967296" },
    { "gguf/offset_past_end.gguf", g_offset_past_end, CDX_EFORMAT, "tensor \"t.c\" (32 bytes at data offset 1099511627776) runs past the end" },
    { "gguf/offset_near_max.gguf", g_offset_max, CDX_EFORMAT, "runs past the end" },
    { "gguf/overlap.gguf", g_overlap, CDX_EFORMAT, "tensors \"t.a\" and \"t.b\" overlap" },
    { "gguf/misaligned.gguf", g_misaligned, CDX_EFORMAT, "tensor \"t.b\" offset 36 is not a multiple of the alignment 32" },
    { "gguf/type_99.gguf", g_type99, CDX_EUNSUPPORTED, "tensor \"t.a\": tensor type id 99 is unknown" },
    { "gguf/type_4_retired.gguf", g_type4, CDX_EUNSUPPORTED, "tensor \"t.a\": tensor type 4 (" },
    { "gguf/q8_0_short_row.gguf", g_type_q8_short_row, CDX_EFORMAT, "row of 8 values is not a multiple of the q8_0 block" },
    { "gguf/duplicate_tensor.gguf", g_dup_tensor, CDX_EFORMAT, "tensor \"t.a\" appears twice" },
    { "gguf/duplicate_key.gguf", g_dup_key, CDX_EFORMAT, "metadata key \"x.keyA\" appears twice" },
    { "gguf/key_not_utf8.gguf", g_key_not_utf8, CDX_EFORMAT, "metadata key before offset" },
    { "gguf/key_with_nul.gguf", g_key_nul, CDX_EFORMAT, "is not valid UTF-8 text" },
    { "gguf/name_not_utf8.gguf", g_name_not_utf8, CDX_EFORMAT, "tensor name before offset" },
    { "gguf/name_empty.gguf", g_name_empty, CDX_EFORMAT, "has length 0; expected 1..65535" },
    { "gguf/value_type_13.gguf", g_value_type13, CDX_EFORMAT, "key \"x.count\" has value type 13" },
    { "gguf/array_type_13.gguf", g_array_type13, CDX_EFORMAT, "key \"x.list\" is an array of type 13" },
    { "gguf/array_count_2e61.gguf", g_array_huge, CDX_EFORMAT, "key \"x.list\" claims 2305843009213693952 array elements" },
    { "gguf/string_longer_than_file.gguf", g_string_long, CDX_EFORMAT, "truncated: general.architecture needs 1099511627776 bytes" },
    { "gguf/string_len_u64_max.gguf", g_string_max, CDX_EFORMAT, "truncated: general.architecture needs 18446744073709551615 bytes" },
    { "gguf/alignment_3.gguf", g_alignment3, CDX_EFORMAT, "general.alignment is 3" },
    { "gguf/alignment_1_misaligned_f32.gguf", g_alignment1, CDX_EFORMAT, "tensor \"t.a\" data at file offset 325 is not aligned to 4 bytes" },
    { "gguf/alignment_i32.gguf", g_alignment_type, CDX_EFORMAT, "general.alignment is 32 (i32)" },
    { "gguf/array_depth_bomb.gguf", g_depth_bomb, CDX_EFORMAT, "key \"bomb\" nests arrays deeper than 8" },
};

static const bad_file k_st[] = {
    { "st/too_short.safetensors", s_short, CDX_EFORMAT, "file is 5 bytes" },
    { "st/header_len_past_eof.safetensors", s_len_past_eof, CDX_EFORMAT, "header length is" },
    { "st/header_len_2e63.safetensors", s_len_huge, CDX_EFORMAT, "header length is 9223372036854775808; only" },
    { "st/header_len_0.safetensors", s_len_zero, CDX_EFORMAT, "header (0 bytes at offset 8) is not a JSON object" },
    { "st/header_not_json.safetensors", s_not_json, CDX_EFORMAT, "header is not valid JSON" },
    { "st/header_not_object.safetensors", s_not_object, CDX_EFORMAT, "is not a JSON object" },
    { "st/dtype_I8.safetensors", s_dtype_i8, CDX_EUNSUPPORTED, "tensor \"w.b\" has dtype I8; caldrix reads F32, F16 and BF16" },
    { "st/dtype_Q4_K.safetensors", s_dtype_unknown, CDX_EUNSUPPORTED, "tensor \"w.b\" has dtype Q4_K" },
    { "st/dtype_number.safetensors", s_dtype_number, CDX_EFORMAT, "tensor \"w.b\" has no \"dtype\" string" },
    { "st/dtype_missing.safetensors", s_no_dtype, CDX_EFORMAT, "tensor \"w.b\" has no \"dtype\" string" },
    { "st/shape_offset_mismatch.safetensors", s_shape_mismatch, CDX_EFORMAT,
      "tensor \"w.a\" has 24 bytes at data_offsets [0, 24]; its shape and dtype F32 need 32" },
    { "st/shape_negative.safetensors", s_shape_negative, CDX_EFORMAT, "tensor \"w.a\" shape[1] is -3" },
    { "st/shape_string.safetensors", s_shape_string, CDX_EFORMAT, "tensor \"w.a\" shape[1] is \"3\"" },
    { "st/shape_overflow.safetensors", s_shape_overflow, CDX_EFORMAT, "tensor \"w.a\" shape overflows" },
    { "st/shape_9_dims.safetensors", s_shape_9dims, CDX_EFORMAT, "at most 8 dimensions" },
    { "st/offsets_overlap.safetensors", s_overlap, CDX_EFORMAT, "tensors \"w.b\" [24, 32] and \"w.c\" [30, 38] overlap" },
    { "st/offsets_past_eof.safetensors", s_past_eof, CDX_EFORMAT, "tensor \"w.c\" data_offsets [1000, 1008] lie outside the data section (40 bytes)" },
    { "st/offsets_reversed.safetensors", s_reversed, CDX_EFORMAT, "data_offsets [40, 32] lie outside" },
    { "st/offsets_not_a_pair.safetensors", s_not_pair, CDX_EFORMAT, "\"data_offsets\" is not [begin, end]" },
    { "st/duplicate_name.safetensors", s_dup_name, CDX_EFORMAT, "duplicate object key" },
    { "st/name_with_nul.safetensors", s_name_nul, CDX_EFORMAT, "header is not valid JSON" },
    { "st/name_not_utf8.safetensors", s_name_not_utf8, CDX_EFORMAT, "header is not valid JSON" },
    { "st/metadata_not_object.safetensors", s_metadata, CDX_EFORMAT, "__metadata__ is not a JSON object" },
    { "st/tensor_not_object.safetensors", s_tensor_not_object, CDX_EFORMAT, "tensor \"w.a\" is not a JSON object" },
    { "st/cut_in_data.safetensors", s_cut_data, CDX_EFORMAT, "lie outside the data section (36 bytes)" },
};

static void write_blob(const char *path, blob b)
{
    FILE *f = fopen(path, "wb");
    if (!f || (b.n && fwrite(b.p, 1, b.n, f) != b.n)) {
        fprintf(stderr, "cannot write %s\n", path);
        abort();
    }
    fclose(f);
}

static void run_table(const bad_file *rows, size_t n, bool gguf)
{
    for (size_t i = 0; i < n; i++) {
        blob b = rows[i].build();
        const char *path = tmp_path(rows[i].name);
        write_blob(path, b);
        cdx_err e = {0};
        int rc;
        if (gguf) {
            cdx_gguf *g = (cdx_gguf *)1;
            rc = cdx_gguf_open(path, &g, &e);
            CHECKF(g == NULL, "%s: out not cleared", rows[i].name);
        } else {
            cdx_safetensors *st = (cdx_safetensors *)1;
            rc = cdx_st_open(path, &st, &e);
            CHECKF(st == NULL, "%s: out not cleared", rows[i].name);
        }
        if (getenv("CDX_VERBOSE"))
            printf("  %-40s %d %s\n", rows[i].name, rc, e.msg);
        CHECKF(rc == rows[i].code && strstr(e.msg, rows[i].msg) && strstr(e.msg, path),
               "%s: rc %d \"%s\"; expected %d with \"%s\"", rows[i].name, rc, e.msg, rows[i].code, rows[i].msg);
        /* The same bytes from memory (exactly sized, so ASan sees any over-read) give the same answer. */
        uint8_t *exact = malloc(b.n ? b.n : 1);
        memcpy(exact, b.p, b.n);
        cdx_err em = {0};
        if (gguf) {
            cdx_gguf *g = NULL;
            rc = cdx_gguf_open_mem(exact, b.n, "mem", &g, &em);
        } else {
            cdx_safetensors *st = NULL;
            rc = cdx_st_open_mem(exact, b.n, "mem", &st, &em);
        }
        CHECKF(rc == rows[i].code && strstr(em.msg, rows[i].msg), "%s from memory: rc %d \"%s\"", rows[i].name, rc, em.msg);
        free(exact);
        free(b.p);
        unlink(path);
    }
}

static void gguf_corpus_is_refused_row_by_row(void) { run_table(k_gguf, sizeof k_gguf / sizeof k_gguf[0], true); }
static void safetensors_corpus_is_refused_row_by_row(void) { run_table(k_st, sizeof k_st / sizeof k_st[0], false); }

static void the_valid_files_open(void)
{
    cdx_err e = {0};
    cdx_gguf *g = NULL;
    cdx_safetensors *st = NULL;
    CHECK(cdx_gguf_open_mem(g_gguf.p, g_gguf.n, NULL, &g, &e) == CDX_OK && g->n_tensors == 3 && g->n_kv == 6);
    cdx_gguf_close(g);
    CHECK(cdx_st_open_mem(g_st.p, g_st.n, NULL, &st, &e) == CDX_OK && st->n_tensors == 3);
    cdx_st_close(st);
    /* a header with the keys in another order and no padding is still valid */
    blob b = st_pack("{\"x\":{\"data_offsets\":[0,4],\"shape\":[],\"dtype\":\"F32\"}}");
    CHECK(cdx_st_open_mem(b.p, b.n, NULL, &st, &e) == CDX_OK && st->n_tensors == 1 && st->tensors[0].n_dims == 0);
    cdx_st_close(st);
    free(b.p);
    /* A header that is not padded (other writers) leaves F32 data misaligned in the file: the
     * reader hands out an aligned copy with the same bytes. */
    const char *h = "{\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t hn = strlen(h);
    CHECK(hn % 4 != 0);
    blob raw = { malloc(8 + hn + 8), 8 + hn + 8 };
    put64(raw, 0, hn);
    memcpy(raw.p + 8, h, hn);
    float two[2] = { 1.5f, -2.25f };
    memcpy(raw.p + 8 + hn, two, 8);
    const char *path = tmp_path("unpadded.safetensors");
    write_blob(path, raw);
    REQUIRE(cdx_st_open(path, &st, &e) == CDX_OK);
    const cdx_st_tensor *t = cdx_st_find(st, "y");
    CHECK(t && (uintptr_t)t->data % 4 == 0 && ((const float *)t->data)[0] == 1.5f && ((const float *)t->data)[1] == -2.25f);
    cdx_st_close(st);
    unlink(path);
    free(raw.p);
}

/* Every prefix of a valid file is refused; single-byte changes anywhere in the headers are
 * either read or refused, never a crash. */
static void every_truncation_and_byte_flip_is_handled(void)
{
    blob *bases[2] = { &g_gguf, &g_st };
    for (int k = 0; k < 2; k++) {
        blob base = *bases[k];
        size_t header = k == 0 ? (size_t)g_gguf_data_off : 8 + (size_t)(*(uint64_t *)base.p);
        for (size_t n = 0; n < base.n; n++) {
            uint8_t *p = malloc(n ? n : 1);
            memcpy(p, base.p, n);
            cdx_err e = {0};
            int rc;
            if (k == 0) {
                cdx_gguf *g = NULL;
                rc = cdx_gguf_open_mem(p, n, NULL, &g, &e);
                cdx_gguf_close(g);
            } else {
                cdx_safetensors *st = NULL;
                rc = cdx_st_open_mem(p, n, NULL, &st, &e);
                cdx_st_close(st);
            }
            CHECKF(rc == CDX_EFORMAT, "%s cut at %zu: rc %d %s", k ? "safetensors" : "gguf", n, rc, e.msg);
            free(p);
        }
        static const uint8_t flips[] = { 0x00, 0xff, 0x80, 0x01, 0x7f, '"', '[', '9' };
        for (size_t at = 0; at < header; at++)
            for (size_t f = 0; f < sizeof flips; f++) {
                uint8_t *p = malloc(base.n);
                memcpy(p, base.p, base.n);
                p[at] = flips[f];
                cdx_err e = {0};
                int rc;
                if (k == 0) {
                    cdx_gguf *g = NULL;
                    rc = cdx_gguf_open_mem(p, base.n, NULL, &g, &e);
                    cdx_gguf_close(g);
                } else {
                    cdx_safetensors *st = NULL;
                    rc = cdx_st_open_mem(p, base.n, NULL, &st, &e);
                    cdx_st_close(st);
                }
                CHECK(rc == CDX_OK || (rc < 0 && e.msg[0]));
                free(p);
            }
    }
}

/* Sharded checkpoints: the index must agree with the shards. */
static void bad_sharded_checkpoints_are_refused(void)
{
    char dir[160];
    snprintf(dir, sizeof dir, "%s/sharded", g_dir);
    mkdir(dir, 0700);
    char p[256];
    snprintf(p, sizeof p, "%s/model-1.safetensors", dir);
    write_blob(p, g_st);
    snprintf(p, sizeof p, "%s/model-2.safetensors", dir);
    write_blob(p, g_st); /* same tensor names as shard 1 */
    static const struct {
        const char *index;
        int code;
        const char *msg;
    } rows[] = {
        { "{\"weight_map\":{\"w.a\":\"model-1.safetensors\",\"w.b\":\"model-2.safetensors\"}}", CDX_EFORMAT,
          "tensor \"w.a\" appears twice" },
        { "{\"weight_map\":{\"w.a\":\"model-1.safetensors\",\"w.zz\":\"model-1.safetensors\"}}", CDX_EFORMAT,
          "weight_map lists tensor \"w.zz\" in model-1.safetensors, which does not hold it" },
        { "{\"weight_map\":{\"w.a\":\"model-3.safetensors\"}}", CDX_ENOTFOUND, "model-3.safetensors" },
        { "{\"weight_map\":{\"w.a\":\"../model-1.safetensors\"}}", CDX_EFORMAT,
          "weight_map[\"w.a\"] is \"../model-1.safetensors\"; expected a shard file name" },
        { "{\"weight_map\":{\"w.a\":7}}", CDX_EFORMAT, "weight_map[\"w.a\"] is 7" },
        { "{\"weight_map\":[]}", CDX_EFORMAT, "weight_map is missing or not a JSON object" },
        { "{\"weight_map\":{}}", CDX_EFORMAT, "weight_map is empty" },
        { "{\"weight_map\":", CDX_EFORMAT, "not valid JSON" },
    };
    char index[256];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        write_blob(index, (blob){ (uint8_t *)rows[i].index, strlen(rows[i].index) });
        cdx_err e = {0};
        cdx_safetensors *st = NULL;
        int rc = cdx_st_open(dir, &st, &e);
        CHECKF(rc == rows[i].code && strstr(e.msg, rows[i].msg) && st == NULL, "index %zu: rc %d \"%s\"", i, rc, e.msg);
    }
    /* Without the index the folder is read as all its *.safetensors files: duplicates again. */
    unlink(index);
    cdx_err e = {0};
    cdx_safetensors *st = NULL;
    CHECK(cdx_st_open(dir, &st, &e) == CDX_EFORMAT && strstr(e.msg, "appears twice") && strstr(e.msg, "model-2.safetensors"));
    snprintf(p, sizeof p, "%s/model-2.safetensors", dir);
    unlink(p);
    CHECK(cdx_st_open(dir, &st, &e) == CDX_OK && st->n_tensors == 3);
    cdx_st_close(st);
    snprintf(p, sizeof p, "%s/model-1.safetensors", dir);
    unlink(p);
    rmdir(dir);
}

/* ---- config.json: the import rules (seed 000, "What the import refuses") ----
 * Each row is refused by the checkpoint reader every local load goes through
 * (cdx_hf_config_parse), naming the field and the value; the hub's import rules
 * (cdx_hub_check_config) are that reader, so they refuse it with the same message (a refusal's
 * code there is EUNSUPPORTED, a malformed value's EFORMAT). */
#define CFG_DIMS "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4," \
                 "\"num_key_value_heads\":2,\"vocab_size\":100"
#define CFG_LLAMA "\"architectures\":[\"LlamaForCausalLM\"]," CFG_DIMS

static const struct {
    const char *name, *json;
    int code; /* the checkpoint reader's */
    const char *msg;
} k_cfg[] = {
    { "two architectures", "{\"architectures\":[\"LlamaForCausalLM\",\"MistralForCausalLM\"]," CFG_DIMS "}",
      CDX_EUNSUPPORTED, "architectures is [\"LlamaForCausalLM\",\"MistralForCausalLM\"], not exactly one name" },
    { "an empty architectures list", "{\"architectures\":[]," CFG_DIMS "}", CDX_EUNSUPPORTED,
      "architectures is [], not exactly one name" },
    { "an architecture outside the list", "{\"architectures\":[\"GPT2LMHeadModel\"]," CFG_DIMS "}",
      CDX_EUNSUPPORTED, "\"GPT2LMHeadModel\"" },
    { "torch_dtype int8", "{" CFG_LLAMA ",\"torch_dtype\":\"int8\"}", CDX_EUNSUPPORTED, "torch_dtype is \"int8\"" },
    { "torch_dtype float64", "{" CFG_LLAMA ",\"torch_dtype\":\"float64\"}", CDX_EUNSUPPORTED,
      "torch_dtype is \"float64\"" },
    { "dtype float8_e4m3fn (transformers v5's key)", "{" CFG_LLAMA ",\"dtype\":\"float8_e4m3fn\"}",
      CDX_EUNSUPPORTED, "dtype is \"float8_e4m3fn\"" },
    { "an activation other than SiLU", "{" CFG_LLAMA ",\"hidden_act\":\"gelu\"}", CDX_EUNSUPPORTED,
      "hidden_act is \"gelu\"" },
    { "rope_scaling of a kind transformers lacks", "{" CFG_LLAMA ",\"rope_scaling\":{\"rope_type\":\"xpos\",\"factor\":4}}",
      CDX_EUNSUPPORTED, "rope_scaling.rope_type is \"xpos\"" },
    { "odd head_dim", "{" CFG_LLAMA ",\"head_dim\":15}", CDX_ERANGE, "head_dim is 15" },
    { "kv heads that do not divide the heads", "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
      "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":3,"
      "\"vocab_size\":100}", CDX_ERANGE, "num_key_value_heads is 3" },
    { "a quantized checkpoint", "{" CFG_LLAMA ",\"quantization_config\":{\"quant_method\":\"gptq\"}}",
      CDX_EUNSUPPORTED, "quantization_config is present (quant_method \"gptq\")" },
    { "interleaved RoPE", "{" CFG_LLAMA ",\"rope_interleaved\":true}", CDX_EUNSUPPORTED, "rope_interleaved is true" },
    { "an MLP bias", "{" CFG_LLAMA ",\"mlp_bias\":true}", CDX_EUNSUPPORTED, "mlp_bias is true" },
    { "an attention bias outside Qwen2", "{" CFG_LLAMA ",\"attention_bias\":true}", CDX_EUNSUPPORTED,
      "attention_bias is true" },
    { "a key given twice", "{" CFG_LLAMA ",\"hidden_act\":\"silu\",\"hidden_act\":\"gelu\"}", CDX_EFORMAT,
      "duplicate object key" },
};

static void config_corpus_is_refused_row_by_row(void)
{
    cdx_hf_config *c = malloc(sizeof *c);
    REQUIRE(c);
    for (size_t i = 0; i < sizeof k_cfg / sizeof k_cfg[0]; i++) {
        const char *j = k_cfg[i].json;
        cdx_err e = {0};
        int rc = cdx_hf_config_parse(j, strlen(j), "x/config.json", c, &e);
        CHECKF(rc == k_cfg[i].code && strstr(e.msg, k_cfg[i].msg) && !strncmp(e.msg, "x/config.json: ", 15),
               "%s: checkpoint reader: rc %d \"%s\"", k_cfg[i].name, rc, e.msg);
        cdx_err h = {0};
        cdx_hub_config hc;
        rc = cdx_hub_check_config(j, strlen(j), "x/config.json", &hc, &h);
        CHECKF(rc == (k_cfg[i].code == CDX_EFORMAT ? CDX_EFORMAT : CDX_EUNSUPPORTED) && !strcmp(h.msg, e.msg),
               "%s: import rules: rc %d \"%s\"; the reader said \"%s\"", k_cfg[i].name, rc, h.msg, e.msg);
    }
    /* and the accepted dtypes pass both */
    static const char *const ok[] = { "bfloat16", "float32", "float16" };
    for (size_t i = 0; i < 3; i++) {
        char j[512];
        snprintf(j, sizeof j, "{" CFG_LLAMA ",\"torch_dtype\":\"%s\"}", ok[i]);
        cdx_err e = {0};
        cdx_hub_config hc;
        CHECKF(cdx_hf_config_parse(j, strlen(j), "x/config.json", c, &e) == CDX_OK && !strcmp(c->torch_dtype, ok[i]),
               "%s: %s", ok[i], e.msg);
        CHECKF(cdx_hub_check_config(j, strlen(j), "x/config.json", &hc, &e) == CDX_OK, "%s: %s", ok[i], e.msg);
    }
    free(c);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/cdx-malformed-XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(g_dir) || build_valid_files()) {
        fprintf(stderr, "cannot build the corpus in %s\n", g_dir);
        return 1;
    }
    RUN("the valid files open", the_valid_files_open);
    RUN("the GGUF corpus is refused row by row, from a file and from memory", gguf_corpus_is_refused_row_by_row);
    RUN("the safetensors corpus is refused row by row, from a file and from memory", safetensors_corpus_is_refused_row_by_row);
    RUN("every truncation and byte flip is handled", every_truncation_and_byte_flip_is_handled);
    RUN("bad sharded checkpoints are refused", bad_sharded_checkpoints_are_refused);
    RUN("the config.json corpus is refused row by row, by the reader and by the import rules",
        config_corpus_is_refused_row_by_row);
    /* CDX_FUZZ_SEEDS=dir keeps the valid files there as fuzzing seeds. */
    const char *seeds = getenv("CDX_FUZZ_SEEDS");
    if (seeds) {
        char p[512];
        snprintf(p, sizeof p, "%s/valid.gguf", seeds);
        write_blob(p, g_gguf);
        snprintf(p, sizeof p, "%s/valid.safetensors", seeds);
        write_blob(p, g_st);
    }
    unlink(tmp_path("valid.gguf"));
    unlink(tmp_path("valid.safetensors"));
    rmdir(g_dir);
    free(g_gguf.p);
    free(g_st.p);
    return t_done("malformed");
}
