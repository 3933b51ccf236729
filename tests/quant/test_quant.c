/* quant layer: every type in ../shared/fixtures/quant (ggml's own output, see its README) against
 * the traits table. One loop over the manifest, no per-type copies:
 *   - block size and bytes per block agree with the manifest;
 *   - to_f32(q.bin) reproduces deq.f32 bit for bit;
 *   - from_f32(in.f32) reproduces q.bin byte for byte where ggml quantized without an imatrix,
 *     and the activation type's from_f32(act.f32) reproduces act_q.bin;
 *   - vec_dot(q.bin row, act_q.bin) is within the README's tolerance of dots[r];
 * plus round trips at awkward lengths and the refusal of unknown / retired ids. */
#include "caldrix.h"
#include "quant/quant_ref.h"
#include "test.h"

#include <jansson.h>

#define FIX SHARED "/fixtures/quant"

static json_t *g_manifest;

/* Reads FIX/<type>/<file>; returns NULL (and *len = 0) when absent. */
static void *read_fixture(const char *type, const char *file, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, FIX "/%s/%s", type, file);
    cdx_err e = {0};
    char *buf = NULL;
    size_t n = 0;
    if (cdx_file_read_all(path, (size_t)64 << 20, &buf, &n, &e) < 0) {
        *len = 0;
        return NULL;
    }
    *len = n;
    return buf;
}

/* Calls fn(type_key, entry, traits) for every type in the manifest; counts the calls. */
typedef void (*type_fn)(const char *key, json_t *entry, const cdx_type_traits *t, int *checked);

static int for_each_type(type_fn fn)
{
    const char *key;
    json_t *entry;
    int checked = 0;
    json_t *types = json_object_get(g_manifest, "types");
    json_object_foreach(types, key, entry) {
        int id = (int)json_integer_value(json_object_get(entry, "type_id"));
        const cdx_type_traits *t = cdx_type_get((uint32_t)id);
        CHECKF(t && !t->retired, "%s: type id %d missing from the table", key, id);
        if (!t)
            continue;
        fn(key, entry, t, &checked);
    }
    return checked;
}

static void manifest_loads(void)
{
    json_error_t je;
    g_manifest = json_load_file(FIX "/manifest.json", 0, &je);
    REQUIRE(g_manifest);
    CHECK(json_object_size(json_object_get(g_manifest, "types")) >= 29);
}

/* ---- table agrees with the manifest ---- */

static void check_sizes(const char *key, json_t *e, const cdx_type_traits *t, int *checked)
{
    CHECKF(!strcmp(t->name, json_string_value(json_object_get(e, "name"))), "%s: name %s", key, t->name);
    CHECKF(t->block == json_integer_value(json_object_get(e, "block_size")), "%s: block %u", key, t->block);
    CHECKF(t->bytes == json_integer_value(json_object_get(e, "type_size")), "%s: bytes %u", key, t->bytes);
    const char *vdt = json_string_value(json_object_get(e, "vec_dot_type"));
    if (vdt)
        CHECKF(!strcmp(cdx_type_name(t->vec_dot_type), vdt), "%s: vec_dot_type %s, manifest %s", key,
               cdx_type_name(t->vec_dot_type), vdt);
    CHECK(cdx_type_from_name(key) == (int)(t - cdx_type_get(0)));
    ++*checked;
}

static void table_matches_manifest(void)
{
    REQUIRE(g_manifest);
    CHECK(for_each_type(check_sizes) >= 29);
    /* and the other way: every quantized type of the table has fixtures (F32 and the integer
     * types are not quantization formats; the README says every quantized type is covered) */
    json_t *types = json_object_get(g_manifest, "types");
    for (uint32_t id = 0; id < CDX_TYPE_COUNT; id++) {
        const cdx_type_traits *t = cdx_type_get(id);
        if (!t || t->retired || id == CDX_TYPE_F32 || (id >= CDX_TYPE_I8 && id <= CDX_TYPE_F64))
            continue;
        bool found = false;
        const char *key;
        json_t *e;
        json_object_foreach(types, key, e) found |= json_integer_value(json_object_get(e, "type_id")) == id;
        CHECKF(found, "table type %u (%s) has no fixture", id, t->name);
        CHECKF(t->to_f32 != NULL, "table type %s has no to_f32", t->name);
    }
}

/* ---- to_f32 bit-exact ---- */

static void check_dequant(const char *key, json_t *e, const cdx_type_traits *t, int *checked)
{
    size_t qn, dn;
    uint8_t *q = read_fixture(key, "q.bin", &qn);
    float *deq = read_fixture(key, "deq.f32", &dn);
    if (!deq) { /* only Q8_1 has no deq.f32 (ggml has no q8_1 to_float) */
        CHECKF(!strcmp(key, "Q8_1"), "%s: no deq.f32", key);
        free(q);
        return;
    }
    CHECKF(t->to_f32 != NULL, "%s: no to_f32", key);
    int64_t n = (int64_t)(dn / sizeof(float));
    CHECKF(q && qn == (size_t)(n / t->block) * t->bytes, "%s: q.bin is %zu bytes", key, qn);
    if (t->to_f32 && q && qn == (size_t)(n / t->block) * t->bytes) {
        float *out = malloc(dn);
        t->to_f32(q, out, n);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (memcmp(&out[i], &deq[i], sizeof(float))) {
                if (first < 0)
                    first = i;
                bad++;
            }
        CHECKF(bad == 0, "%s: %lld of %lld values differ; first at %lld: %.9g vs %.9g", key, (long long)bad,
               (long long)n, (long long)first, first >= 0 ? out[first] : 0, first >= 0 ? deq[first] : 0);
        /* row by row gives the same */
        int64_t cols = json_integer_value(json_object_get(e, "cols"));
        size_t row_bytes = 0;
        CHECK(cdx_type_row_bytes((uint32_t)(t - cdx_type_get(0)), (uint64_t)cols, &row_bytes, NULL) == 0);
        for (int64_t r = 0; r < n / cols; r++)
            t->to_f32(q + r * row_bytes, out + r * cols, cols);
        CHECKF(memcmp(out, deq, dn) == 0, "%s: row-by-row dequantization differs", key);
        free(out);
        ++*checked;
    }
    free(q);
    free(deq);
}

static void to_f32_is_bit_exact_for_every_fixture(void)
{
    REQUIRE(g_manifest);
    CHECK(for_each_type(check_dequant) >= 28);
}

/* ---- from_f32 byte-identical (no imatrix) ---- */

static int g_quant_missing;

static int compare_blocks(const char *what, const cdx_type_traits *t, const uint8_t *got, const uint8_t *want, size_t n)
{
    if (!memcmp(got, want, n))
        return 1;
    size_t i = 0;
    while (got[i] == want[i])
        i++;
    CHECKF(0, "%s: bytes differ; first at %zu (block %zu, byte %zu): %u vs %u", what, i, i / t->bytes,
           i % t->bytes, got[i], want[i]);
    return 0;
}

static void check_quant(const char *key, json_t *e, const cdx_type_traits *t, int *checked)
{
    if (json_is_true(json_object_get(e, "needs_imatrix")))
        return; /* ggml quantized these with an importance matrix: not reproducible without one */
    if (!t->from_f32) {
        fprintf(stderr, "  note: %s has no reference quantizer yet\n", key);
        g_quant_missing++;
        return;
    }
    size_t in_n, qn;
    float *in = read_fixture(key, "in.f32", &in_n);
    uint8_t *q = read_fixture(key, "q.bin", &qn);
    REQUIRE(in && q);
    int64_t n = (int64_t)(in_n / sizeof(float));
    uint8_t *out = calloc(1, qn);
    t->from_f32(in, out, n);
    char what[64];
    snprintf(what, sizeof what, "%s from_f32(in.f32) vs q.bin", key);
    *checked += compare_blocks(what, t, out, q, qn);
    free(out);
    free(in);
    free(q);
}

static void from_f32_matches_ggml_reference_quantizer(void)
{
    REQUIRE(g_manifest);
    g_quant_missing = 0;
    int n = for_each_type(check_quant);
    printf("  %d types quantize byte-identically; %d without a quantizer\n", n, g_quant_missing);
    CHECK(n >= 17);
}

static void check_act_quant(const char *key, json_t *e, const cdx_type_traits *t, int *checked)
{
    const cdx_type_traits *a = cdx_type_get(t->vec_dot_type);
    size_t an, aqn;
    float *act = read_fixture(key, "act.f32", &an);
    uint8_t *aq = read_fixture(key, "act_q.bin", &aqn);
    if (!act || !aq) {
        CHECKF(!strcmp(key, "Q8_1") || !strcmp(key, "Q8_K"), "%s: no act.f32/act_q.bin", key);
    } else {
        REQUIRE(a && a->from_f32);
        uint8_t *out = calloc(1, aqn);
        a->from_f32(act, out, (int64_t)(an / sizeof(float)));
        char what[64];
        snprintf(what, sizeof what, "%s: %s from_f32(act.f32) vs act_q.bin", key, a->name);
        *checked += compare_blocks(what, a, out, aq, aqn);
        free(out);
    }
    free(act);
    free(aq);
}

static void activation_quantizers_match_act_q(void)
{
    REQUIRE(g_manifest);
    CHECK(for_each_type(check_act_quant) >= 27);
}

/* ---- dots within tolerance ---- */

/* Whose bits each scalar oracle reproduces: ggml's reference variant (x64, its generic code) unless
 * listed here. Q3_K, Q5_K and IQ4_XS take llama.cpp's x86 AVX2 arithmetic (quant_ref.h,
 * cdx_q8k_lanes_*), which every AVX2 and AVX-512 variant of the fixtures runs; Q4_K and Q6_K take
 * caldrix's 16-row layout's (quant_k.c), held to the tolerance here and to the kernel sets' bits in
 * test_kernels. */
static const char *const k_avx2_variants[] = { "haswell", "skylakex", "cannonlake", "cascadelake", "icelake",
                                               "cooperlake", "zen4", "alderlake", NULL };
static const struct {
    const char *key;
    const char *const *variants; /* NULL: the tolerance only */
} k_dot_bits[] = {
    { "Q3_K", k_avx2_variants }, { "Q5_K", k_avx2_variants }, { "IQ4_XS", k_avx2_variants },
    { "Q4_K", NULL }, { "Q6_K", NULL },
};

static const char *const k_ref_variant[] = { "x64", NULL };
static const char *const *dot_bits_of(const char *key, bool *found)
{
    for (size_t i = 0; i < sizeof k_dot_bits / sizeof k_dot_bits[0]; i++)
        if (!strcmp(k_dot_bits[i].key, key)) {
            *found = true;
            return k_dot_bits[i].variants;
        }
    *found = false;
    return k_ref_variant;
}

static void check_dot(const char *key, json_t *e, const cdx_type_traits *t, int *checked)
{
    size_t qn, aqn;
    char path[512];
    snprintf(path, sizeof path, FIX "/%s/dot.json", key);
    json_error_t je;
    json_t *d = json_load_file(path, 0, &je);
    if (!d) {
        CHECKF(!strcmp(key, "Q8_1") || !strcmp(key, "Q8_K"), "%s: no dot.json", key);
        return;
    }
    uint8_t *q = read_fixture(key, "q.bin", &qn);
    uint8_t *aq = read_fixture(key, "act_q.bin", &aqn);
    CHECKF(t->vec_dot != NULL, "%s: no vec_dot", key);
    if (q && aq && t->vec_dot) {
        int64_t cols = json_integer_value(json_object_get(e, "cols"));
        size_t row_bytes = (size_t)(cols / t->block) * t->bytes;
        json_t *dots = json_object_get(d, "dots"), *abs_sum = json_object_get(d, "abs_sum_f64");
        json_t *by = json_object_get(d, "dots_by_cpu_variant");
        bool listed;
        const char *const *variants = dot_bits_of(key, &listed);
        for (size_t r = 0; r < json_array_size(dots); r++) {
            double want = json_real_value(json_array_get(dots, r));
            double as = json_real_value(json_array_get(abs_sum, r));
            float got = t->vec_dot(cols, q + r * row_bytes, aq);
            double tol = 1e-4 * fabs(want) + 2e-6 * as; /* README, "Contract" 2 */
            CHECKF(fabs(got - want) <= tol, "%s row %zu: dot %.9g, ggml %.9g (tol %.3g)", key, r, got, want, tol);
            /* stronger than the contract: the scalar oracle sums in the order of the variants it
             * follows (k_dot_bits), so it has their bits */
            for (int v = 0; variants && variants[v]; v++) {
                json_t *vd = json_array_get(json_object_get(by, variants[v]), r);
                CHECKF(vd != NULL, "%s: no dots of variant %s", key, variants[v]);
                if (vd)
                    CHECKF(got == (float)json_real_value(vd), "%s row %zu: dot %.9g is not ggml %s's %.9g bit for bit",
                           key, r, got, variants[v], json_real_value(vd));
            }
            /* the listed ones differ from the reference variant somewhere (or the list is stale) */
            if (listed && r == 0) {
                bool any = false;
                for (size_t rr = 0; rr < json_array_size(dots); rr++)
                    any |= t->vec_dot(cols, q + rr * row_bytes, aq) != (float)json_real_value(json_array_get(dots, rr));
                CHECKF(any, "%s: the dot has x64's bits on every row; k_dot_bits need not list it", key);
            }
        }
        ++*checked;
    }
    free(q);
    free(aq);
    json_decref(d);
}

static void vec_dot_within_tolerance_of_ggml(void)
{
    REQUIRE(g_manifest);
    CHECK(for_each_type(check_dot) >= 27);
}

/* ---- awkward lengths: quantize, dequantize and dot at n = block * k ---- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd_gauss(void)
{
    double s = 0;
    for (int i = 0; i < 12; i++) {
        g_rng ^= g_rng << 13;
        g_rng ^= g_rng >> 7;
        g_rng ^= g_rng << 17;
        s += (double)(g_rng >> 11) / 9007199254740992.0;
    }
    return (float)(s - 6.0);
}

static void round_trips_at_awkward_lengths(void)
{
    static const int ks[] = { 1, 2, 3, 5, 7, 13 };
    int tested = 0;
    for (uint32_t id = 0; id < CDX_TYPE_COUNT; id++) {
        const cdx_type_traits *t = cdx_type_get(id);
        if (!t || t->retired || !t->to_f32 || !t->from_f32 || id == CDX_TYPE_F32)
            continue;
        const cdx_type_traits *a = cdx_type_get(t->vec_dot_type);
        /* lengths that are whole blocks of both the type and its activation type */
        int64_t unit = t->block > a->block ? t->block : a->block;
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            int64_t n = unit * ks[ki];
            float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * (n + 1));
            float *act = malloc(sizeof(float) * n), *act_d = malloc(sizeof(float) * n);
            size_t qbytes = (size_t)(n / t->block) * t->bytes, abytes = (size_t)(n / a->block) * a->bytes;
            uint8_t *q = malloc(qbytes + 1), *aq = malloc(abytes + 1);
            q[qbytes] = 0xA5; /* canary: must not be written */
            for (int64_t i = 0; i < n; i++) {
                x[i] = rnd_gauss() * 0.05f;
                act[i] = rnd_gauss();
            }
            y[n] = 12345.0f;
            t->from_f32(x, q, n);
            t->to_f32(q, y, n);
            CHECKF(q[qbytes] == 0xA5 && y[n] == 12345.0f, "%s n=%lld: wrote past the end", t->name, (long long)n);
            double err = 0, ref = 0;
            int finite = 1;
            for (int64_t i = 0; i < n; i++) {
                finite &= isfinite(y[i]) != 0;
                err += (double)(x[i] - y[i]) * (x[i] - y[i]);
                ref += (double)x[i] * x[i];
            }
            /* relative RMS error: ternary/1-bit formats are coarse, but never worse than 1 */
            double rel = sqrt(err / ref), limit = t->block == 1 ? 1e-2 : 1.0;
            if (id == CDX_TYPE_Q8_0 || id == CDX_TYPE_Q8_1 || id == CDX_TYPE_Q8_K)
                limit = 0.02;
            if (id == CDX_TYPE_Q4_0 || id == CDX_TYPE_Q4_1 || id == CDX_TYPE_Q4_K || id == CDX_TYPE_Q5_0 ||
                id == CDX_TYPE_Q5_1 || id == CDX_TYPE_Q5_K || id == CDX_TYPE_Q6_K)
                limit = 0.2;
            CHECKF(finite && rel < limit, "%s n=%lld: relative rms error %.3g (limit %.3g)", t->name, (long long)n,
                   rel, limit);
            /* the dot agrees with the dequantized rows (ties the dot to the to_f32 layout) */
            if (t->vec_dot && a->from_f32 && a->to_f32) {
                a->from_f32(act, aq, n);
                a->to_f32(aq, act_d, n);
                double want = 0, as = 0;
                for (int64_t i = 0; i < n; i++) {
                    want += (double)y[i] * act_d[i];
                    as += fabs((double)y[i] * act_d[i]);
                }
                double got = t->vec_dot(n, q, aq);
                /* q8_1 pairs use the block's rounded fp16 sum for the min term (README: 1.8e-4) */
                double tol = 1e-4 * fabs(want) + (a == cdx_type_get(CDX_TYPE_Q8_1) ? 5e-4 : 2e-6) * as;
                CHECKF(fabs(got - want) <= tol, "%s n=%lld: dot %.9g vs dequantized %.9g", t->name, (long long)n,
                       got, want);
            }
            free(x), free(y), free(act), free(act_d), free(q), free(aq);
        }
        tested++;
    }
    CHECK(tested >= 20);
}

/* ---- arbitrary bytes: to_f32 and dot stay in bounds and agree; NaN/Inf input is survived ---- */

static void random_blocks_dequantize_and_dot_consistently(void)
{
    int compared = 0;
    for (uint32_t id = 0; id < CDX_TYPE_COUNT; id++) {
        const cdx_type_traits *t = cdx_type_get(id);
        if (!t || t->retired || !t->to_f32 || !t->vec_dot || t->block == 1)
            continue;
        const cdx_type_traits *a = cdx_type_get(t->vec_dot_type);
        const int64_t n = (t->block > a->block ? t->block : a->block) * 3;
        const size_t qb = (size_t)(n / t->block) * t->bytes, ab = (size_t)(n / a->block) * a->bytes;
        uint8_t *q = malloc(qb), *aq = malloc(ab);
        float *y = malloc(sizeof(float) * n), *act = malloc(sizeof(float) * n), *ad = malloc(sizeof(float) * n);
        for (int trial = 0; trial < 20; trial++) {
            for (size_t i = 0; i < qb; i++) {
                g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
                q[i] = (uint8_t)(g_rng >> 32);
            }
            for (int64_t i = 0; i < n; i++)
                act[i] = rnd_gauss();
            a->from_f32(act, aq, n);
            a->to_f32(aq, ad, n);
            t->to_f32(q, y, n);
            double want = 0, as = 0;
            int finite = 1;
            for (int64_t i = 0; i < n; i++) {
                finite &= isfinite(y[i]) && fabsf(y[i]) < 1e30f;
                want += (double)y[i] * ad[i];
                as += fabs((double)y[i] * ad[i]);
            }
            if (!finite) /* a random half scale may be Inf/NaN: nothing to compare */
                continue;
            float got = t->vec_dot(n, q, aq);
            double tol = 1e-4 * fabs(want) + (a == cdx_type_get(CDX_TYPE_Q8_1) ? 5e-4 : 2e-6) * as + 1e-30;
            CHECKF(fabs(got - want) <= tol, "%s trial %d: dot %.9g vs dequantized %.9g (tol %.3g)", t->name, trial, got,
                   want, tol);
            compared++;
        }
        /* quantizers survive NaN and Inf (values unspecified, but no fault and nothing written past) */
        if (t->from_f32) {
            for (int64_t i = 0; i < n; i++)
                act[i] = i % 7 == 0 ? NAN : i % 11 == 0 ? INFINITY : i % 13 == 0 ? -INFINITY : rnd_gauss();
            uint8_t *q2 = malloc(qb + 1);
            q2[qb] = 0x5A;
            t->from_f32(act, q2, n);
            t->to_f32(q2, y, n);
            CHECKF(q2[qb] == 0x5A, "%s: wrote past the end on NaN input", t->name);
            free(q2);
        }
        free(q), free(aq), free(y), free(act), free(ad);
    }
    CHECK(compared > 300);
}

/* ---- unknown and retired ids are refused by name ---- */

static void unknown_and_retired_types_are_refused_by_name(void)
{
    static const struct { uint32_t id; const char *needle; } cases[] = {
        { 4, "q4_2" }, { 5, "q4_3" }, { 31, "q4_0_4_4" }, { 33, "q4_0_8_8" }, { 36, "iq4_nl_4_4" },
        { 43, "43" }, { 1000, "1000" }, { 0xFFFFFFFFu, "4294967295" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cdx_err e = {0};
        size_t out = 12345;
        int rc = cdx_type_row_bytes(cases[i].id, 256, &out, &e);
        CHECKF(rc < 0, "id %u accepted", cases[i].id);
        CHECKF(strstr(e.msg, cases[i].needle) != NULL, "id %u: message \"%s\" lacks \"%s\"", cases[i].id, e.msg,
               cases[i].needle);
    }
    /* a known type with a length off its block, and overflow */
    cdx_err e = {0};
    size_t out;
    CHECK(cdx_type_row_bytes(CDX_TYPE_Q4_K, 100, &out, &e) == CDX_EFORMAT && strstr(e.msg, "q4_K"));
    CHECK(cdx_type_row_bytes(CDX_TYPE_F32, UINT64_MAX / 2, &out, &e) < 0);
    CHECK(cdx_type_row_bytes(CDX_TYPE_Q4_K, 512, &out, &e) == 0 && out == 288);
    CHECK(cdx_type_from_name("Q4_K") == CDX_TYPE_Q4_K && cdx_type_from_name("q4_2") == -1);
}

int main(void)
{
    RUN("the fixture manifest loads", manifest_loads);
    RUN("the traits table matches the manifest (names, blocks, sizes, dot types)", table_matches_manifest);
    RUN("to_f32 reproduces ggml's deq.f32 bit for bit for every type", to_f32_is_bit_exact_for_every_fixture);
    RUN("from_f32 reproduces ggml's q.bin for every type quantized without an imatrix",
        from_f32_matches_ggml_reference_quantizer);
    RUN("q8_0 / q8_1 / q8_K activation quantizers reproduce act_q.bin", activation_quantizers_match_act_q);
    RUN("vec_dot is within the README tolerance of ggml's dots", vec_dot_within_tolerance_of_ggml);
    RUN("quantize / dequantize / dot round trips at n = block * k", round_trips_at_awkward_lengths);
    RUN("random blocks: to_f32 and vec_dot agree; quantizers survive NaN/Inf", random_blocks_dequantize_and_dot_consistently);
    RUN("unknown and retired type ids are refused by name", unknown_and_retired_types_are_refused_by_name);
    json_decref(g_manifest);
    return t_done("quant");
}
