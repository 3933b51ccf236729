/* SIMD kernels against their scalar twins (the quant layer's references) and ggml's fixtures:
 * every ISA this CPU runs, every type with a fast row kernel, awkward shapes. */
#include "caldrix.h"
#include "kernel/kern_erf.h"
#include "kernel/kernel_impl.h"
#include "quant/quant_ref.h"
#include "test.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static const uint32_t k_types_fast[] = {
    CDX_TYPE_F32, CDX_TYPE_F16, CDX_TYPE_BF16, CDX_TYPE_Q8_0, CDX_TYPE_Q4_0, CDX_TYPE_IQ4_NL,
    CDX_TYPE_Q4_K, CDX_TYPE_Q5_K, CDX_TYPE_Q6_K, CDX_TYPE_IQ4_XS,
};
#define N_FAST (sizeof k_types_fast / sizeof k_types_fast[0])
static const char *const k_isas[] = { "amx", "avx512", "avx2", "avx512-gemm", "amx-gemm", "scalar" };
/* the opt-in sets whose prefill sums in another order (not batch invariant) */
static bool gemm_set(const cdx_kernels *k) { return !strcmp(cdx_kernels_isa(k), "avx512-gemm") || !strcmp(cdx_kernels_isa(k), "amx-gemm"); }
#define N_ISAS (sizeof k_isas / sizeof k_isas[0])

/* ---- random numbers (xorshift; gaussian by Irwin-Hall) ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float unif(void) { return (float)((rnd() >> 40) * (1.0 / 16777216.0)); }
static float gauss(void)
{
    float s = 0;
    for (int i = 0; i < 12; i++)
        s += unif();
    return s - 6;
}

static void *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (len)
        *len = (size_t)n;
    return p;
}

static void upper(const char *s, char *out)
{
    while ((*out++ = (char)((*s >= 'a' && *s <= 'z') ? *s - 32 : *s)))
        s++;
}

/* ---- activation quantizers ---- */

/* Activations with the awkward cases: zero blocks, exact ties at x·id = k + 0.5, one huge value,
 * negative maxima, tiny magnitudes. */
static void fill_act(float *x, int64_t n, int pattern)
{
    for (int64_t i = 0; i < n; i++) {
        switch (pattern) {
        case 0: x[i] = gauss(); break;
        case 1: x[i] = (i / 32) % 3 == 1 ? 0.0f : gauss() * 1e-3f; break;
        case 2: x[i] = (float)((int)(rnd() % 255) - 127) * 0.5f; break;  /* many .5 ties after scaling */
        case 3: x[i] = i % 97 == 5 ? -40.0f : gauss(); break;
        default: x[i] = gauss() * 1e-30f; break; /* tiny, but 1/d stays finite (near FLT_MIN the
                                                        * reference itself overflows to inf) */
        }
    }
}

static void quantizers_are_byte_identical_to_scalar(void)
{
    const uint32_t qt[] = { CDX_TYPE_Q8_0, CDX_TYPE_Q8_1, CDX_TYPE_Q8_K };
    const int64_t n = 256 * 7;
    float *x = malloc(sizeof(float) * n);
    uint8_t *a = malloc(400 * 8), *b = malloc(400 * 8);
    int tested = 0;
    for (size_t ii = 0; ii < N_ISAS - 1; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        for (size_t q = 0; q < 3; q++) {
            const cdx_type_traits *t = cdx_type_get(qt[q]);
            REQUIRE(t && t->from_f32 && k->quantize[qt[q]]);
            /* the scalar oracle of run-time activations (q8_0/q8_1: not the file quantizer) */
            const cdx_from_f32_fn oracle = t->act_from_f32 ? t->act_from_f32 : t->from_f32;
            size_t bytes = (size_t)(n / t->block) * t->bytes;
            for (int pat = 0; pat < 5; pat++) {
                for (int rep = 0; rep < 4; rep++) {
                    fill_act(x, n, pat);
                    memset(a, 0xAB, bytes);
                    memset(b, 0xAB, bytes);
                    oracle(x, a, n);
                    k->quantize[qt[q]](x, b, n);
                    CHECKF(!memcmp(a, b, bytes), "%s %s pattern %d", k_isas[ii], t->name, pat);
                    tested++;
                }
            }
            /* ggml's own bytes for the fixture inputs: its file quantizer's (q.bin), which the
             * run-time one equals on these inputs */
            char dir[64], path[256];
            upper(t->name, dir);
            snprintf(path, sizeof path, SHARED "/fixtures/quant/%s/in.f32", dir);
            size_t len, qlen;
            float *in = read_all(path, &len);
            snprintf(path, sizeof path, SHARED "/fixtures/quant/%s/q.bin", dir);
            uint8_t *want = read_all(path, &qlen);
            REQUIRE(in && want && len == 2048 * sizeof(float));
            uint8_t *got = calloc(1, qlen);
            k->quantize[qt[q]](in, got, 2048);
            CHECKF(!memcmp(got, want, qlen), "%s %s vs ggml's q.bin", k_isas[ii], t->name);
            free(in); free(want); free(got);
        }
    }
    CHECK(tested > 0);
    free(x); free(a); free(b);
}

/* llama.cpp's CPU backend (AVX2 build) quantizes activations to q8_0/q8_1 with 127/amax and rounds
 * half to even, unlike quantize_row_q8_0_ref; tests/golden/q8-act holds its bytes for inputs that
 * tell the two apart (scripts/goldens/ggml-act-quant.c). Every kernel set must give those bytes. */
static void activation_quantizers_match_ggml_cpu_run_time(void)
{
    size_t len, l0, l1;
    float *in = read_all("tests/golden/q8-act/in.f32", &len);
    uint8_t *w0 = read_all("tests/golden/q8-act/q8_0.bin", &l0), *w1 = read_all("tests/golden/q8-act/q8_1.bin", &l1);
    REQUIRE(in && w0 && w1 && len % (32 * sizeof(float)) == 0);
    const int64_t n = (int64_t)(len / sizeof(float));
    REQUIRE(l0 == (size_t)(n / 32) * 34 && l1 == (size_t)(n / 32) * 36);
    uint8_t *got = malloc(l1);
    const struct { uint32_t type; const uint8_t *want; size_t bytes; } c[] = {
        { CDX_TYPE_Q8_0, w0, l0 }, { CDX_TYPE_Q8_1, w1, l1 } };
    for (int i = 0; i < 2; i++) {
        const cdx_type_traits *t = cdx_type_get(c[i].type);
        REQUIRE(t->act_from_f32);
        t->act_from_f32(in, got, n);
        CHECKF(!memcmp(got, c[i].want, c[i].bytes), "scalar %s activations vs ggml-cpu", t->name);
        t->from_f32(in, got, n); /* the inputs do tell the file quantizer apart */
        CHECKF(memcmp(got, c[i].want, c[i].bytes), "%s: the file quantizer should differ on these inputs", t->name);
        for (size_t ii = 0; ii < 2; ii++) {
            const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
            if (!k)
                continue;
            k->quantize[c[i].type](in, got, n);
            CHECKF(!memcmp(got, c[i].want, c[i].bytes), "%s %s activations vs ggml-cpu", k_isas[ii], t->name);
        }
    }
    free(in); free(w0); free(w1); free(got);
}

/* ---- row kernels against ggml's dots ---- */

static void row_kernels_match_ggml_fixture_dots(void)
{
    int checked = 0;
    for (size_t ti = 0; ti < N_FAST; ti++) {
        uint32_t type = k_types_fast[ti];
        const cdx_type_traits *t = cdx_type_get(type);
        if (type == CDX_TYPE_F32 || type == CDX_TYPE_F16 || type == CDX_TYPE_BF16)
            continue; /* the fixtures' dots for these use f16/bf16 activations, not f32 */
        char dir[64], path[256];
        upper(t->name, dir);
        size_t qlen, alen;
        snprintf(path, sizeof path, SHARED "/fixtures/quant/%s/q.bin", dir);
        uint8_t *q = read_all(path, &qlen);
        snprintf(path, sizeof path, SHARED "/fixtures/quant/%s/act_q.bin", dir);
        uint8_t *act = read_all(path, &alen);
        snprintf(path, sizeof path, SHARED "/fixtures/quant/%s/dot.json", dir);
        json_error_t je;
        json_t *dj = json_load_file(path, 0, &je);
        REQUIRE(q && act && dj);
        json_t *dots = json_object_get(dj, "dots"), *abs = json_object_get(dj, "abs_sum_f64");
        cdx_mat w = { .type = type, .data = q, .rows = 4, .cols = 512, .row_bytes = qlen / 4 };
        for (size_t ii = 0; ii < N_ISAS - 1; ii++) {
            const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
            if (!k) {
                t_skip_isa(k_isas[ii]);
                continue;
            }
            REQUIRE(k->row[type]);
            float y[4];
            k->row[type](&w, 0, 4, NULL, act, alen, 1, y, NULL);
            for (int r = 0; r < 4; r++) {
                double want = json_real_value(json_array_get(dots, r)), as = json_real_value(json_array_get(abs, r));
                CHECKF(fabs(y[r] - want) <= 1e-4 * fabs(want) + 2e-6 * as, "%s %s row %d: %.9g vs %.9g",
                       k_isas[ii], t->name, r, y[r], want);
                /* Q5_K and IQ4_XS: llama.cpp's AVX2 / AVX-512 libraries' bits (haswell and zen4 run
                 * the same code) */
                if (type == CDX_TYPE_Q5_K || type == CDX_TYPE_IQ4_XS)
                    for (int v = 0; v < 2; v++) {
                        const char *var = v ? "zen4" : "haswell";
                        json_t *g = json_array_get(json_object_get(json_object_get(dj, "dots_by_cpu_variant"), var), r);
                        CHECKF(g && y[r] == (float)json_real_value(g), "%s %s row %d: %.9g, not llama.cpp %s's %.9g",
                               k_isas[ii], t->name, r, y[r], var, g ? json_real_value(g) : 0.0);
                    }
                checked++;
            }
        }
        json_decref(dj);
        free(q); free(act);
    }
    CHECK(checked > 0);
}

/* ---- row kernels against the scalar dots on random blocks ---- */

/* Weights for `rows` rows: half from the reference quantizer, half raw random bytes with the
 * block scales overwritten by sane halves (so every bit pattern of the quants and sub-scales
 * appears, not only those a quantizer emits). */
static void make_weights(uint32_t type, const cdx_type_traits *t, uint8_t *w, size_t rb, int64_t rows, int64_t cols)
{
    float *f = malloc(sizeof(float) * cols);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = w + r * rb;
        for (int64_t c = 0; c < cols; c++)
            f[c] = gauss() * (r % 3 == 2 ? 0.02f : 1.0f);
        if (r % 2 == 0 || type == CDX_TYPE_F32 || type == CDX_TYPE_F16 || type == CDX_TYPE_BF16) {
            t->from_f32(f, row, cols);
            continue;
        }
        for (size_t i = 0; i < rb; i++)
            row[i] = (uint8_t)rnd();
        for (int64_t b = 0; b < cols / t->block; b++) {
            uint8_t *blk = row + b * t->bytes;
            uint16_t d = cdx_f32_to_f16(0.001f + unif() * 0.05f), dm = cdx_f32_to_f16(unif() * 0.01f);
            switch (type) {
            case CDX_TYPE_Q8_0: case CDX_TYPE_Q4_0: case CDX_TYPE_IQ4_NL: case CDX_TYPE_IQ4_XS:
                memcpy(blk, &d, 2);
                break;
            case CDX_TYPE_Q4_K: case CDX_TYPE_Q5_K:
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &dm, 2);
                break;
            case CDX_TYPE_Q6_K:
                memcpy(blk + 208, &d, 2);
                break;
            }
        }
    }
    free(f);
}

static double abs_dot(const cdx_type_traits *t, const cdx_type_traits *vt, const uint8_t *wrow, const void *xq,
                      const float *x, int64_t cols, float *wf, float *af)
{
    t->to_f32(wrow, wf, cols);
    if (xq)
        vt->to_f32(xq, af, cols);
    else
        memcpy(af, x, sizeof(float) * cols);
    double s = 0;
    for (int64_t c = 0; c < cols; c++)
        s += fabs((double)wf[c] * af[c]);
    return s;
}

static int check_case_packed(const cdx_kernels *k, cdx_pool *pool, uint32_t type, int64_t rows, int64_t nblk,
                             int64_t n, bool pack)
{
    const cdx_type_traits *t = cdx_type_get(type);
    const bool fl = type == CDX_TYPE_F32 || type == CDX_TYPE_F16 || type == CDX_TYPE_BF16;
    const cdx_type_traits *vt = fl ? NULL : cdx_type_get(t->vec_dot_type);
    /* float rows: a length that is not a multiple of any vector width */
    const int64_t cols = fl ? nblk * 32 + (nblk % 2 ? 7 : 0) : nblk * t->block;
    size_t rb = (size_t)(cols / t->block) * t->bytes;
    uint8_t *w = malloc(rb * rows);
    float *x = malloc(sizeof(float) * cols * n), *y = malloc(sizeof(float) * rows * n);
    float *wf = malloc(sizeof(float) * cols), *af = malloc(sizeof(float) * cols);
    make_weights(type, t, w, rb, rows, cols);
    for (int64_t i = 0; i < cols * n; i++)
        x[i] = gauss() * (i % 61 == 7 ? 8 : 1);
    size_t xrb = fl ? 0 : (size_t)(cols / vt->block) * vt->bytes;
    uint8_t *xq = fl ? NULL : malloc(xrb * n);
    for (int64_t i = 0; !fl && i < n; i++)
        (vt->act_from_f32 ? vt->act_from_f32 : vt->from_f32)(x + i * cols, xq + i * xrb, cols); /* as matmul does */
    cdx_mat m = { .type = type, .data = w, .rows = rows, .cols = cols, .row_bytes = rb };
    void *packed = NULL;
    if (pack) {
        size_t pb = cdx_matmul_pack_bytes(k, &m);
        packed = pb ? aligned_alloc(64, (pb + 63) & ~(size_t)63) : NULL;
        if (packed) {
            memset(packed, 0xA5, (pb + 63) & ~(size_t)63);
            cdx_matmul_pack(k, pool, &m, packed);
            m.packed = packed;
            m.packed_for = k;
        }
    }
    void *ws = malloc(cdx_matmul_ws_bytes(&m, n, cdx_pool_size(pool)));
    for (int64_t i = 0; i < rows * n; i++)
        y[i] = NAN;
    cdx_matmul(k, pool, &m, x, n, y, ws);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++) {
            double ref, as = abs_dot(t, vt, w + r * rb, fl ? NULL : xq + i * xrb, x + i * cols, cols, wf, af);
            if (fl) {
                ref = 0;
                for (int64_t c = 0; c < cols; c++)
                    ref += (double)wf[c] * x[i * cols + c];
            } else {
                ref = t->vec_dot(cols, w + r * rb, xq + i * xrb);
            }
            double got = y[i * rows + r];
            /* the q8_K dots have the scalar twin's bits on every set (quant_ref.h, quant_k.c); only
             * the opt-in avx512-gemm and amx-gemm prefills sum in another order */
            const bool bits = vt && t->vec_dot_type == CDX_TYPE_Q8_K && (!gemm_set(k) || n < CDX_GEMM_MIN_N);
            if (bits ? got != ref : !(fabs(got - ref) <= 1e-5 * fabs(ref) + 2e-6 * as + 1e-30)) {
                if (bad++ < 3)
                    fprintf(stderr, "    %s %s rows %lld blocks %lld n %lld: y[%lld][%lld] = %.9g, scalar %.9g\n",
                            cdx_kernels_isa(k), t->name, (long long)rows, (long long)nblk, (long long)n,
                            (long long)i, (long long)r, got, ref);
            }
        }
    free(w); free(x); free(y); free(wf); free(af); free(xq); free(ws); free(packed);
    return bad;
}

static int check_case(const cdx_kernels *k, cdx_pool *pool, uint32_t type, int64_t rows, int64_t nblk, int64_t n)
{
    return check_case_packed(k, pool, type, rows, nblk, n, false);
}

/* The load-time layouts (cdx_matmul_pack) against the scalar dots: decode (n = 1), batches and
 * prefill, one or several 16-row groups per thread. */
static void packed_layouts_match_scalar(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    /* row lengths in units of 256 values: 1, 3 and 8 super-blocks (8, 24 and 64 blocks of 32) */
    /* 544 rows: chunks of 48 rows per thread, so decode also walks two groups at once */
    const int64_t rows_v[] = { 16, 48, 160, 544 }, len_v[] = { 1, 3, 8 }, n_v[] = { 1, 2, 7, 8, 9, 19 };
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        int packed_types = 0;
        for (size_t ti = 0; ti < N_FAST; ti++) {
            uint32_t type = k_types_fast[ti];
            const cdx_type_traits *t = cdx_type_get(type);
            cdx_mat probe = { .type = type, .rows = 32, .cols = 256, .row_bytes = 256 / t->block * t->bytes };
            if (!cdx_matmul_pack_bytes(k, &probe))
                continue;
            packed_types++;
            cdx_mat ragged = probe;
            ragged.rows = 40;
            CHECKF(cdx_matmul_pack_bytes(k, &ragged) == 0, "%s %s: rows not a multiple of 16 are left unpacked",
                   k_isas[ii], t->name);
            int bad = 0;
            for (size_t a = 0; a < 4; a++)
                for (size_t b = 0; b < 3; b++)
                    for (size_t c = 0; c < 6; c++)
                        bad += check_case_packed(k, pool, type, rows_v[a], len_v[b] * 256 / t->block, n_v[c], true);
            CHECKF(bad == 0, "%s %s packed: %d mismatches", k_isas[ii], t->name, bad);
        }
        if (!strcmp(k_isas[ii], "avx2"))
            CHECKF(packed_types >= 5, "%s packs Q8_0, Q4_0, IQ4_NL, Q4_K and Q6_K (%d types)", k_isas[ii],
                   packed_types);
        if (!strcmp(k_isas[ii], "amx") || !strcmp(k_isas[ii], "avx512"))
            CHECKF(packed_types >= 7, "%s packs Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K and IQ4_XS (%d types)", k_isas[ii],
                   packed_types);
    }
    cdx_pool_destroy(pool);
}

static void row_kernels_match_scalar_on_random_blocks(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const int64_t rows_v[] = { 1, 3, 6, 13 }, blk_v[] = { 1, 2, 3, 5 }, n_v[] = { 1, 2, 3, 5, 8, 17 };
    int cases = 0;
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        for (size_t ti = 0; ti < N_FAST; ti++) {
            uint32_t type = k_types_fast[ti];
            if (ii < N_ISAS - 1)
                REQUIRE(k->row[type]);
            int bad = 0;
            for (size_t a = 0; a < 4; a++)
                for (size_t b = 0; b < 4; b++)
                    for (size_t c = 0; c < 6; c++, cases++)
                        bad += check_case(k, pool, type, rows_v[a], blk_v[b], n_v[c]);
            CHECKF(bad == 0, "%s %s: %d mismatches", k_isas[ii], cdx_type_name(type), bad);
        }
    }
    CHECK(cases > 0);
    cdx_pool_destroy(pool);
}

/* Enough activation rows that the prefill path cuts them into several L2 panels. */
static void prefill_tiles_span_several_panels(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const uint32_t types[] = { CDX_TYPE_Q8_0, CDX_TYPE_Q4_K, CDX_TYPE_Q6_K, CDX_TYPE_F16, CDX_TYPE_Q5_K, CDX_TYPE_IQ4_XS };
    for (size_t ii = 0; ii < N_ISAS - 1; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            int bad = check_case(k, pool, types[ti], 9, types[ti] == CDX_TYPE_F16 ? 64 : 8, 131);
            CHECKF(bad == 0, "%s %s: %d mismatches", k_isas[ii], cdx_type_name(types[ti]), bad);
        }
    }
    cdx_pool_destroy(pool);
}

/* Rows longer than the prefill path's 4096-column unpack chunk, and a ragged last panel. */
static void prefill_handles_long_rows(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const uint32_t types[] = { CDX_TYPE_Q4_0, CDX_TYPE_Q8_0, CDX_TYPE_Q4_K, CDX_TYPE_Q6_K, CDX_TYPE_IQ4_XS, CDX_TYPE_Q5_K };
    for (size_t ii = 0; ii < N_ISAS - 1; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const cdx_type_traits *t = cdx_type_get(types[ti]);
            int bad = check_case(k, pool, types[ti], 19, 5120 / t->block, 9);
            CHECKF(bad == 0, "%s %s: %d mismatches", k_isas[ii], t->name, bad);
        }
    }
    cdx_pool_destroy(pool);
}

/* cdx_matmul_multi (q/k/v, gate/up in one dispatch) gives each matrix exactly what cdx_matmul gives
 * it alone: fused when the activations match (Q4_K with Q6_K: both q8_K), one after another when
 * they do not (Q8_0 with F16), packed or not, for decode and prefill. */
static void matmul_multi_equals_separate_calls(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const uint32_t sets[][3] = { { CDX_TYPE_Q4_K, CDX_TYPE_Q6_K, CDX_TYPE_Q4_K },
                                 { CDX_TYPE_Q8_0, CDX_TYPE_F16, CDX_TYPE_Q4_0 },
                                 { CDX_TYPE_Q5_K, CDX_TYPE_Q6_K, CDX_TYPE_IQ4_XS } };
    const int64_t rows[3] = { 512, 128, 160 }, cols = 512, n_v[] = { 1, 9, 40 };
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++)
            for (size_t ni = 0; ni < sizeof n_v / sizeof n_v[0]; ni++) {
                const int64_t n = n_v[ni];
                cdx_mat m[3];
                const cdx_mat *mp[3];
                float *y[3], *ys[3];
                void *data[3], *packed[3];
                size_t ws_bytes = 0;
                float *x = malloc(sizeof(float) * (size_t)(cols * n));
                for (int64_t i = 0; i < cols * n; i++)
                    x[i] = gauss();
                for (int i = 0; i < 3; i++) {
                    const cdx_type_traits *t = cdx_type_get(sets[si][i]);
                    size_t rb = (size_t)(cols / t->block) * t->bytes;
                    data[i] = malloc(rb * (size_t)rows[i]);
                    make_weights(sets[si][i], t, data[i], rb, rows[i], cols);
                    m[i] = (cdx_mat){ .type = sets[si][i], .data = data[i], .rows = rows[i], .cols = cols, .row_bytes = rb };
                    size_t pb = cdx_matmul_pack_bytes(k, &m[i]);
                    packed[i] = pb ? aligned_alloc(64, (pb + 63) & ~(size_t)63) : NULL;
                    if (packed[i]) {
                        cdx_matmul_pack(k, pool, &m[i], packed[i]);
                        m[i].packed = packed[i];
                        m[i].packed_for = k;
                    }
                    mp[i] = &m[i];
                    y[i] = malloc(sizeof(float) * (size_t)(rows[i] * n));
                    ys[i] = malloc(sizeof(float) * (size_t)(rows[i] * n));
                    size_t b = cdx_matmul_ws_bytes(&m[i], n, 2);
                    ws_bytes = b > ws_bytes ? b : ws_bytes;
                }
                void *ws = malloc(ws_bytes);
                cdx_matmul_multi(k, pool, mp, 3, x, n, y, ws);
                int bad = 0;
                for (int i = 0; i < 3; i++) {
                    cdx_matmul(k, pool, &m[i], x, n, ys[i], ws);
                    bad += memcmp(y[i], ys[i], sizeof(float) * (size_t)(rows[i] * n)) != 0;
                }
                CHECKF(bad == 0, "%s set %zu n %lld: %d matrices differ", k_isas[ii], si, (long long)n, bad);
                for (int i = 0; i < 3; i++) {
                    free(data[i]); free(packed[i]); free(y[i]); free(ys[i]);
                }
                free(ws);
                free(x);
            }
    }
    cdx_pool_destroy(pool);
}

/* Batch invariance: a row's result has the same bits whether its activation row is computed alone
 * or among n others (packed layouts and native, every type, every batch-invariant set). The
 * opt-in avx512-gemm and amx-gemm sets are the ones that are not, and are left out. */
static void matmul_rows_are_batch_invariant(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const uint32_t types[] = { CDX_TYPE_F32, CDX_TYPE_F16, CDX_TYPE_BF16, CDX_TYPE_Q8_0, CDX_TYPE_Q4_0, CDX_TYPE_Q4_1,
                               CDX_TYPE_Q5_0, CDX_TYPE_Q5_1, CDX_TYPE_IQ4_NL, CDX_TYPE_Q2_K, CDX_TYPE_Q3_K, CDX_TYPE_Q4_K,
                               CDX_TYPE_Q5_K, CDX_TYPE_Q6_K, CDX_TYPE_IQ4_XS };
    const char *sets[] = { "amx", "avx512", "avx2", "scalar" };
    const int64_t rows = 48, cols = 512, n_max = 33;
    int checked = 0;
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++) {
        const cdx_kernels *k = cdx_kernels_by_isa(sets[si]);
        if (!k) {
            t_skip_isa(sets[si]);
            continue;
        }
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const cdx_type_traits *t = cdx_type_get(types[ti]);
            REQUIRE(t);
            int bad = 0, type_checked = 0; /* this set and type's: a failure is reported where it is */
            const size_t rb = (size_t)(cols / t->block) * t->bytes;
            uint8_t *w = malloc(rb * rows);
            float *x = malloc(sizeof(float) * cols * n_max), *y1 = malloc(sizeof(float) * rows),
                  *yn = malloc(sizeof(float) * rows * n_max);
            make_weights(types[ti], t, w, rb, rows, cols);
            for (int64_t i = 0; i < cols * n_max; i++)
                x[i] = gauss();
            for (int pack = 0; pack < 2; pack++) {
                cdx_mat m = { .type = types[ti], .data = w, .rows = rows, .cols = cols, .row_bytes = rb };
                void *packed = NULL;
                size_t pb = pack ? cdx_matmul_pack_bytes(k, &m) : 0;
                if (pack && !pb)
                    continue;
                if (pb) {
                    packed = aligned_alloc(64, (pb + 63) & ~(size_t)63);
                    cdx_matmul_pack(k, pool, &m, packed);
                    m.packed = packed;
                    m.packed_for = k;
                }
                void *ws = malloc(cdx_matmul_ws_bytes(&m, n_max, cdx_pool_size(pool)));
                /* n mod 4 = 0..3 and mod 8 = 0..7 (the AVX2 micro kernels take 4 or 8 tokens a call)
                 * and long batches */
                const int64_t ns[] = { 2, 3, 4, 5, 6, 7, 8, 9, 14, 16, 19, 33 };
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    cdx_matmul(k, pool, &m, x, ns[ni], yn, ws);
                    for (int64_t i = 0; i < ns[ni]; i++) {
                        cdx_matmul(k, pool, &m, x + i * cols, 1, y1, ws);
                        bad += memcmp(y1, yn + i * rows, sizeof(float) * rows) != 0;
                        checked++, type_checked++;
                    }
                }
                free(ws);
                free(packed);
            }
            CHECKF(bad == 0, "%s %s: %d of %d rows differ between batch sizes", sets[si], cdx_type_name(types[ti]),
                   bad, type_checked);
            free(w); free(x); free(y1); free(yn);
        }
    }
    CHECK(checked > 0);
    cdx_pool_destroy(pool);
}

/* CALDRIX_ISA picks a lesser set; a set the CPU lacks, or a made-up name, is refused. */
static void isa_env_names_a_set_or_is_refused(void)
{
    const char *saved = getenv("CALDRIX_ISA");
    char keep[32] = "";
    if (saved)
        snprintf(keep, sizeof keep, "%s", saved);
    cdx_err e = { 0 };
    setenv("CALDRIX_ISA", "scalar", 1);
    CHECK(!strcmp(cdx_kernels_isa(cdx_kernels_best()), "scalar") && cdx_kernels_env_check(&e) == CDX_OK);
    setenv("CALDRIX_ISA", "vax", 1);
    CHECK(cdx_kernels_env_check(&e) == CDX_EINVAL && strstr(e.msg, "vax"));
    unsetenv("CALDRIX_ISA");
    CHECK(cdx_kernels_best() == cdx_kernels_by_isa(cdx_kernels_by_isa("amx")      ? "amx"
                                                  : cdx_kernels_by_isa("avx512") ? "avx512"
                                                  : cdx_kernels_by_isa("avx2")   ? "avx2" : "scalar"));
    /* the set the kernel layer names first in its table, whatever this CPU runs */
    CHECK(cdx_kernels_name_at(0) && !strcmp(cdx_kernels_name_at(0), "amx"));
    size_t n_sets = 0;
    while (cdx_kernels_name_at(n_sets))
        n_sets++;
    CHECK(n_sets == 6 && !strcmp(cdx_kernels_name_at(n_sets - 1), "scalar"));
    if (!cdx_kernels_by_isa("avx512")) {
        setenv("CALDRIX_ISA", "avx512", 1);
        CHECK(cdx_kernels_env_check(&e) == CDX_EINVAL);
    }
    if (saved)
        setenv("CALDRIX_ISA", keep, 1);
    else
        unsetenv("CALDRIX_ISA");
}

/* The detector against the Linux kernel's own reading of cpuid (/proc/cpuinfo's flags, which it
 * also clears for state the OS does not save): every feature must agree. */
static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The activations' rounding to f16 / bf16 (ggml converts an F16 / BF16 matrix's activations to its
 * type): every set's round_half gives the scalar twin's bits on random bit patterns (every exponent,
 * nan, inf, subnormals) and on the cases a rounding gets wrong first; a few values by hand. */
static void half_rounding_matches_scalar(void)
{
    enum { N = 4099 }; /* a tail after the vectors */
    float *x = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N), *got = malloc(sizeof(float) * N);
    REQUIRE(x && want && got);
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        uint32_t u = (uint32_t)(r >> 16);
        switch (i % 8) {
        case 0: u &= 0xFFFFE000u, u |= 0x1000u; break;            /* an f16 tie */
        case 1: u &= 0xFFFF0000u, u |= 0x8000u; break;            /* a bf16 tie */
        case 2: u = (u & 0x807FFFFFu) | ((uint32_t)(103 + i % 12) << 23); break; /* f16 subnormals */
        case 3: u = (u & 0x807FFFFFu) | (142u << 23); break;      /* near f16's largest */
        default: break;
        }
        x[i] = f_of(u);
    }
    const uint32_t special[] = { 0x7F800000u, 0xFF800000u, 0x7FC00001u, 0xFFBFFFFFu, 0x80000000u, 0, 0x477FF000u,
                                 0x477FEFFFu, 0x00000001u, 0x33000000u, 0x33000001u, 0x7F7FFFFFu };
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        x[i * 8 + 5] = f_of(special[i]);
    /* to_half (a K/V row into an F16 / BF16 cache) stores the same roundings as 16-bit values:
       cdx_f32_to_f16 / cdx_f32_to_bf16's bits on every set and tail length */
    uint16_t *hw = malloc(sizeof(uint16_t) * N), *hg = malloc(sizeof(uint16_t) * N);
    REQUIRE(hw && hg);
    for (int f16 = 0; f16 < 2; f16++) {
        for (int i = 0; i < N; i++)
            hw[i] = f16 ? cdx_f32_to_f16(x[i]) : cdx_f32_to_bf16(x[i]);
        for (size_t ii = 0; ii < sizeof k_isas / sizeof k_isas[0]; ii++) {
            const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
            if (!k)
                continue; /* t_skip_isa says so below */
            for (int n = 0; n < 40; n++) {
                memset(hg, 0x55, sizeof(uint16_t) * N);
                cdx_to_half(k, x + n % 3, hg, n, f16);
                CHECKF(!memcmp(hg, hw + n % 3, sizeof(uint16_t) * (size_t)n) && hg[n] == 0x5555,
                       "to_half %s f16=%d n=%d", k_isas[ii], f16, n);
            }
            cdx_to_half(k, x, hg, N, f16);
            int bad = 0;
            for (int i = 0; i < N; i++)
                bad += hg[i] != hw[i];
            CHECKF(bad == 0, "to_half %s f16=%d: %d of %d values differ from cdx_f32_to_%s", k_isas[ii], f16, bad, N,
                   f16 ? "f16" : "bf16");
        }
    }
    free(hw), free(hg);
    for (int f16 = 0; f16 < 2; f16++) {
        cdx_vec_scalar.round_half(x, want, N, f16);
        for (size_t ii = 0; ii < sizeof k_isas / sizeof k_isas[0]; ii++) {
            const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
            if (!k) {
                t_skip_isa(k_isas[ii]);
                continue;
            }
            if (!k->vec)
                continue; /* the scalar set uses the twin itself */
            for (int n = 0; n < 20; n++) { /* every tail length, then the whole */
                memset(got, 0x55, sizeof(float) * N);
                k->vec->round_half(x, got, n, f16);
                CHECKF(!memcmp(got, want, sizeof(float) * (size_t)n), "%s f16=%d n=%d", k_isas[ii], f16, n);
            }
            k->vec->round_half(x, got, N, f16);
            int bad = 0;
            for (int i = 0; i < N; i++)
                bad += u_of(got[i]) != u_of(want[i]);
            CHECKF(bad == 0, "%s f16=%d: %d of %d values differ from the scalar twin", k_isas[ii], f16, bad, N);
        }
    }
    /* by hand: ties go to even, f16 overflows to inf from 65520, nan stays nan */
    float in[6] = { 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 65519.0f, f_of(0x7FC00000u), 0x1p-25f }, out[6];
    cdx_vec_scalar.round_half(in, out, 6, 1);
    CHECK(out[0] == 1.0f && out[1] == 1.0f + 0x1p-9f && isinf(out[2]) && out[3] == 65504.0f && isnan(out[4]) &&
          out[5] == 0.0f);
    float bin[3] = { 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, f_of(0x7F800001u) }, bout[3];
    cdx_vec_scalar.round_half(bin, bout, 3, 0);
    CHECK(bout[0] == 1.0f && bout[1] == 1.0f + 0x1p-6f && isnan(bout[2]));
    free(x), free(want), free(got);
}

/* The SIMD sets' exp (softmax, attention) and SiLU repeat the C library's expf lane by lane
 * (kern_expf.h): their bits must be expf's (the oracle here is expf itself) on a sweep of every
 * 4099th float bit pattern, on the edges of expf's slow path (|x| >= 88, overflow, underflow, inf,
 * nan) set among ordinary lanes, and on every tail length. (All 2^32 floats were checked once, on
 * Zen 5, both sets: none differed.) */
static void exp_and_silu_have_expf_bits(void)
{
    enum { N = (int)((1ull << 32) / 4099) + 1 };
    float *x = malloc(sizeof(float) * N), *got = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    REQUIRE(x && got && u);
    for (int i = 0; i < N; i++) {
        x[i] = f_of((uint32_t)((uint64_t)i * 4099u));
        u[i] = 0.5f + (float)(i % 7) * 0.25f;
    }
    const uint32_t special[] = { 0x42AFFFFFu, 0x42B00000u, 0xC2AFFFFFu, 0xC2B00000u, 0x42B17217u, 0x42B17218u,
                                 0xC2CFF1B4u, 0xC2CFF1B5u, 0xC2CE8ED0u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                                 0xFFC00001u, 0x80000000u, 0, 0x00000001u, 0x3F800000u, 0xBF800000u };
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        x[1000 + i * 37] = f_of(special[i]);
    for (size_t ii = 0; ii < sizeof k_isas / sizeof k_isas[0]; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        if (!k->vec)
            continue; /* the scalar set uses the twins, which call expf */
        memcpy(got, x, sizeof(float) * N);
        k->vec->exp_sum(got, 0.0f, N);
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad += u_of(got[i]) != u_of(expf(x[i]));
        CHECKF(bad == 0, "%s exp: %d of %d values differ from expf", k_isas[ii], bad, N);
        /* the subtraction is the float one: exp(x - 1.5) */
        memcpy(got, x, sizeof(float) * 4096);
        k->vec->exp_sum(got, 1.5f, 4096);
        bad = 0;
        for (int i = 0; i < 4096; i++)
            bad += u_of(got[i]) != u_of(expf(x[i] - 1.5f));
        CHECKF(bad == 0, "%s exp(x - 1.5): %d of 4096 values differ from expf", k_isas[ii], bad);
        memcpy(got, x, sizeof(float) * N);
        k->vec->silu_mul(got, u, N);
        bad = 0;
        for (int i = 0; i < N; i++)
            bad += u_of(got[i]) != u_of(x[i] / (1.0f + expf(-x[i])) * u[i]);
        CHECKF(bad == 0, "%s silu: %d of %d values differ from x / (1 + expf(-x)) * u", k_isas[ii], bad, N);
        for (int n = 0; n < 40; n++) { /* every tail length, a slow-path lane inside (x[1000..]) */
            memcpy(got, x + 990, sizeof(float) * (size_t)n);
            k->vec->silu_mul(got, u + 990, n);
            bad = 0;
            for (int i = 0; i < n; i++)
                bad += u_of(got[i]) != u_of(x[990 + i] / (1.0f + expf(-x[990 + i])) * u[990 + i]);
            CHECKF(bad == 0, "%s silu n=%d: %d differ", k_isas[ii], n, bad);
        }
        /* SiLU alone */
        memcpy(got, x, sizeof(float) * N);
        k->vec->silu(got, N);
        bad = 0;
        for (int i = 0; i < N; i++)
            bad += u_of(got[i]) != u_of(x[i] / (1.0f + expf(-x[i])));
        CHECKF(bad == 0, "%s silu alone: %d of %d values differ from x / (1 + expf(-x))", k_isas[ii], bad, N);
        for (int n = 0; n < 40; n++) {
            memcpy(got, x + 990, sizeof(float) * (size_t)n);
            k->vec->silu(got, n);
            bad = 0;
            for (int i = 0; i < n; i++)
                bad += u_of(got[i]) != u_of(x[990 + i] / (1.0f + expf(-x[990 + i])));
            CHECKF(bad == 0, "%s silu alone n=%d: %d differ", k_isas[ii], n, bad);
        }
    }
    free(x), free(got), free(u);
}

/* ulps between two floats (the distance of their places on the ordered line of floats) */
static int64_t ulps(float a, float b)
{
    const int32_t ia = (int32_t)u_of(a), ib = (int32_t)u_of(b);
    const int64_t oa = ia < 0 ? (int64_t)INT32_MIN - ia : ia, ob = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return oa > ob ? oa - ob : ob - oa;
}

/* erf and the exact GELU (BERT's activation) are one algorithm on every set (kern_erf.h): the
 * scalar twin within 1 ulp of glibc's erff (and ±0, ±1, nan where erff gives them) on a sweep of
 * every 4099th float bit pattern, every float of [-4.5, 4.5] whose low 8 bits are 0x5a, and the
 * edges (all 2^32 floats were checked once, on Zen 5: at most 1 ulp from erff, 2.96 % of them 1 ulp
 * off, erff's own misroundings but for 0.0003 % of them); every set gives the twin's bits for erf
 * and GELU, special lanes among ordinary ones, every tail length; GELU is exactly x, or -0, wherever
 * x · 0.5 · (1 + erff(x / √2)) is. */
static void erf_and_gelu_have_the_twin_bits_on_every_set(void)
{
    enum { NS = (int)((1ull << 32) / 4099) + 1, ND = 2 * (0x40900000 >> 8) };
    const int N = NS + ND;
    float *x = malloc(sizeof(float) * (size_t)N), *got = malloc(sizeof(float) * (size_t)N);
    REQUIRE(x && got);
    for (int i = 0; i < NS; i++)
        x[i] = f_of((uint32_t)((uint64_t)i * 4099u));
    for (int i = 0; i < ND / 2; i++) { /* |x| <= 4.5: every interval of the polynomials, both signs */
        x[NS + 2 * i] = f_of(((uint32_t)i << 8) | 0x5a);
        x[NS + 2 * i + 1] = -x[NS + 2 * i];
    }
    const uint32_t special[] = { 0, 0x80000000u, 0x00000001u, 0x80000001u, 0x007FFFFFu, 0x00800000u, 0x0DA24260u,
                                 0x3F000000u, 0x3F800000u, 0x40000000u, 0x407AE148u, 0x407FFFFFu, 0x40800000u,
                                 0xC07FFFFFu, 0xC0800000u, 0x40B1A000u, 0xC0B1A000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                                 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u };
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        x[1000 + i * 5] = f_of(special[i]);

    int far = 0, edge = 0;
    int64_t worst = 0;
    for (int i = 0; i < N; i++) {
        const float r = cdx_erf_ref(x[i]), l = erff(x[i]);
        if (isnan(x[i])) {
            far += !isnan(r);
            continue;
        }
        const int64_t d = ulps(r, l);
        worst = d > worst ? d : worst;
        far += d > 1;
        /* where erff is ±0 or ±1 (the GELU's limits hang on it) the twin is too, sign and all */
        edge += (l == 0 || fabsf(l) == 1) && u_of(r) != u_of(l);
    }
    CHECKF(far == 0, "erf twin: %d of %d values more than 1 ulp from erff (largest %lld)", far, N, (long long)worst);
    CHECKF(edge == 0, "erf twin: %d values differ from erff where it is +-0 or +-1", edge);
    CHECK(u_of(cdx_erf_ref(-0.0f)) == 0x80000000u && cdx_erf_ref(INFINITY) == 1 && cdx_erf_ref(-INFINITY) == -1);
    CHECK(isnan(cdx_erf_ref(NAN)) && cdx_erf_ref(4.0f) == 1 && cdx_erf_ref(-1e30f) == -1);

    /* GELU's limits: x itself for large x, -0 for large negative x, as the libm formula gives them */
    int lim = 0, n_lim = 0;
    for (int i = 0; i < N; i++) {
        const float l = x[i] * 0.5f * (1.0f + erff(x[i] * CDX_GELU_RSQRT2)), r = cdx_gelu_ref(x[i]);
        if (!isnan(x[i]) && (l == x[i] || l == 0) && fabsf(x[i]) > 1) {
            n_lim++;
            lim += u_of(r) != u_of(l);
        }
    }
    CHECKF(lim == 0 && n_lim > 1000, "gelu: %d of %d values differ where x*0.5*(1+erff(x/sqrt2)) is x or 0", lim, n_lim);
    CHECK(cdx_gelu_ref(5.6f) == 5.6f && u_of(cdx_gelu_ref(-5.6f)) == 0x80000000u && cdx_gelu_ref(1e30f) == 1e30f);

    for (size_t ii = 0; ii < sizeof k_isas / sizeof k_isas[0]; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        for (int g = 0; g < 2; g++) {
            const char *what = g ? "gelu" : "erf";
            memcpy(got, x, sizeof(float) * (size_t)N);
            (g ? cdx_gelu : cdx_erf)(k, got, N);
            int bad = 0;
            for (int i = 0; i < N; i++)
                bad += u_of(got[i]) != u_of(g ? cdx_gelu_ref(x[i]) : cdx_erf_ref(x[i]));
            CHECKF(bad == 0, "%s %s: %d of %d values differ from the scalar twin", k_isas[ii], what, bad, N);
            for (int n = 0; n < 40; n++) { /* every tail length, special lanes inside (x[1000..]) */
                memcpy(got, x + 990, sizeof(float) * (size_t)n);
                (g ? cdx_gelu : cdx_erf)(k, got, n);
                bad = 0;
                for (int i = 0; i < n; i++)
                    bad += u_of(got[i]) != u_of(g ? cdx_gelu_ref(x[990 + i]) : cdx_erf_ref(x[990 + i]));
                CHECKF(bad == 0, "%s %s n=%d: %d differ", k_isas[ii], what, n, bad);
            }
        }
    }
    free(x), free(got);
}

/* cdx_add (the encoder's bias and residual adds) is y + x rounded once on every set: the bits of the
 * plain loop, on values of every magnitude and every tail length. */
static void add_is_the_plain_sum_on_every_set(void)
{
    enum { N = 4096 + 37 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N), *got = malloc(sizeof(float) * N);
    REQUIRE(x && y && got);
    for (int i = 0; i < N; i++) {
        x[i] = gauss() * ldexpf(1.0f, (int)(rnd() % 40) - 20);
        y[i] = gauss() * ldexpf(1.0f, (int)(rnd() % 40) - 20);
    }
    for (size_t ii = 0; ii < sizeof k_isas / sizeof k_isas[0]; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        for (int n = 0; n < 40; n++) {
            const int len = n < 39 ? n : N;
            memcpy(got, y, sizeof(float) * (size_t)len);
            cdx_add(k, got, x, len);
            int bad = 0;
            for (int i = 0; i < len; i++)
                bad += u_of(got[i]) != u_of(y[i] + x[i]);
            CHECKF(bad == 0, "%s add n=%d: %d of %d sums differ from y + x", k_isas[ii], len, bad, len);
        }
    }
    free(x), free(y), free(got);
}

/* cdx_logsumexp (logprobs' denominator) on every set against log Σ e^(x - max) + max in long double
 * with expl, not caldrix's: rows of vocabulary length with logits spread over ±15, rows with terms
 * on expf's slow path (far below the max, -inf), and short rows (every tail); and every set gives
 * the scalar twin's bits (one order of the sum on all sets: a logprob does not depend on the set). */
static void logsumexp_matches_long_double(void)
{
    enum { N = 151936 + 5 };
    float *x = malloc(sizeof(float) * N);
    REQUIRE(x);
    uint64_t r = 0x243F6A8885A308D3ull;
    for (int i = 0; i < N; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 30.0 - 15.0);
    }
    const int64_t lens[] = { 1, 2, 7, 15, 16, 17, 33, 1000, 128256, N };
    for (int variant = 0; variant < 2; variant++) {
        if (variant == 1) /* slow-path lanes: far below the max, -inf, one huge logit */
            for (int i = 0; i < N; i += 97)
                x[i] = i % 3 == 0 ? -1000.0f : i % 3 == 1 ? -INFINITY : -150.0f;
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t n = lens[li];
            long double mx = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; i++)
                mx = x[i] > mx ? x[i] : mx;
            for (int64_t i = 0; i < n; i++)
                sum += expl((long double)x[i] - mx);
            const double want = (double)(mx + logl(sum));
            for (size_t ii = 0; ii < sizeof k_isas / sizeof k_isas[0]; ii++) {
                const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
                if (!k) {
                    t_skip_isa(k_isas[ii]);
                    continue;
                }
                const double got = cdx_logsumexp(k, x, n), again = cdx_logsumexp(k, x, n);
                const double twin = cdx_logsumexp(cdx_kernels_by_isa("scalar"), x, n);
                /* expf's terms are within 0.5 ulp of float: a relative 6e-8 on the sum */
                CHECKF(fabs(got - want) <= 2e-7 * (fabs(want) + 1) && got == again, "%s n=%lld variant %d: %.9g vs %.9g",
                       k_isas[ii], (long long)n, variant, got, want);
                CHECKF(!memcmp(&got, &twin, sizeof got), "%s n=%lld variant %d: %.17g, the scalar twin %.17g",
                       k_isas[ii], (long long)n, variant, got, twin);
            }
        }
    }
    free(x);
}

static void cpu_features_match_proc_cpuinfo(void)
{
    FILE *fp = fopen("/proc/cpuinfo", "r");
    REQUIRE(fp); /* caldrix runs on Linux */
    static char line[16384];
    char flags[16384] = "";
    while (fgets(line, sizeof line, fp))
        if (!strncmp(line, "flags", 5)) {
            snprintf(flags, sizeof flags, " %s ", strchr(line, ':') ? strchr(line, ':') + 1 : "");
            break;
        }
    fclose(fp);
    REQUIRE(flags[0]);
    for (char *c = flags; *c; c++)
        if (*c == '\n' || *c == '\t')
            *c = ' ';
    const cdx_cpu_features *f = cdx_cpu_features_get();
    const struct { const char *flag; bool have; } rows[] = {
        { "sse4_2", f->sse42 }, { "avx", f->avx }, { "avx2", f->avx2 }, { "fma", f->fma }, { "f16c", f->f16c },
        { "bmi2", f->bmi2 }, { "avx512f", f->avx512f }, { "avx512bw", f->avx512bw }, { "avx512vl", f->avx512vl },
        { "avx512dq", f->avx512dq }, { "avx512_vnni", f->avx512vnni }, { "avx512_bf16", f->avx512bf16 },
        { "avx512vbmi", f->avx512vbmi }, { "avx_vnni", f->avx_vnni },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char want[40];
        snprintf(want, sizeof want, " %s ", rows[i].flag);
        CHECKF((strstr(flags, want) != NULL) == rows[i].have, "%s: /proc/cpuinfo %s, caldrix %s", rows[i].flag,
               strstr(flags, want) ? "has it" : "lacks it", rows[i].have ? "has it" : "lacks it");
    }
    /* AMX also needs Linux's grant (arch_prctl), which a sandbox may refuse: caldrix never claims a
     * tile feature the kernel does not list, and lists all three where it has the tiles */
    const struct { const char *flag; bool have; } amx[] = {
        { "amx_tile", f->amx_tile }, { "amx_int8", f->amx_int8 }, { "amx_bf16", f->amx_bf16 },
    };
    for (size_t i = 0; i < sizeof amx / sizeof amx[0]; i++) {
        char want[40];
        snprintf(want, sizeof want, " %s ", amx[i].flag);
        CHECKF(!amx[i].have || strstr(flags, want), "%s: caldrix has it, /proc/cpuinfo lacks it", amx[i].flag);
        if (f->amx_tile)
            CHECKF(amx[i].have == (strstr(flags, want) != NULL), "%s: /proc/cpuinfo and caldrix disagree", amx[i].flag);
    }
    CHECK(f->x86_64_v3 == (f->avx2 && f->fma && f->f16c && f->bmi2));
    CHECK(f->x86_64_v4 == (f->x86_64_v3 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq));
    CHECK(strlen(cdx_cpu_vendor()) == 12);
}

static void isa_table_picks_what_the_cpu_runs(void)
{
    const cdx_cpu_features *f = cdx_cpu_features_get();
    CHECK(cdx_kernels_by_isa("scalar") != NULL);
    CHECK((cdx_kernels_by_isa("avx2") != NULL) == (f->avx2 && f->fma && f->f16c));
    CHECK(cdx_kernels_by_isa("nonsense") == NULL);
    const char *best = cdx_kernels_isa(cdx_kernels_best());
    const char *forced = getenv("CALDRIX_ISA");
    cdx_err e = { 0 };
    CHECK(cdx_kernels_env_check(&e) == CDX_OK);
    CHECK((cdx_kernels_by_isa("amx") != NULL) == (cdx_kernels_by_isa("avx512") && f->amx_tile && f->amx_int8));
    if (forced && *forced) /* tests/run --isa: the named set stands in for the best */
        CHECK(!strcmp(best, forced));
    else if (cdx_kernels_by_isa("amx"))
        CHECK(!strcmp(best, "amx"));
    else if (cdx_kernels_by_isa("avx512"))
        CHECK(!strcmp(best, "avx512"));
    else if (cdx_kernels_by_isa("avx2"))
        CHECK(!strcmp(best, "avx2"));
    else
        CHECK(!strcmp(best, "scalar"));
}

/* A matrix a set reads in place (cdx_matmul_in_place: AVX2 and AVX-512; Q8_0, Q4_0, IQ4_NL, Q4_K, Q6_K, and on
 * AVX-512 Q5_K and IQ4_XS) gives its packed layout's bits,
 * for decode and for every batch size (the model reads it in place until its packed copy is made
 * in the background, and results must not change when that copy arrives); the rest is refused. */
static void in_place_rows_match_packed_bits(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    /* 2064 rows: chunks that are not whole pairs of 16-row groups; 64 blocks: one Llama row */
    const int64_t rows_v[] = { 16, 48, 544, 2064 }, nb_v[] = { 1, 3, 64 };
    const int64_t ns[] = { 1, 2, 3, 4, 5, 7, 8, 9, 16, 19, 33 };
    const uint32_t types[] = { CDX_TYPE_Q8_0, CDX_TYPE_Q4_0, CDX_TYPE_IQ4_NL, CDX_TYPE_Q4_K, CDX_TYPE_Q6_K,
                               CDX_TYPE_Q5_K, CDX_TYPE_IQ4_XS };
    int sets = 0;
    for (size_t ii = 0; ii < sizeof k_isas / sizeof k_isas[0]; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        cdx_mat probe = { .type = CDX_TYPE_Q8_0, .rows = 48, .cols = 64, .row_bytes = 2 * cdx_type_get(CDX_TYPE_Q8_0)->bytes };
        if (!cdx_matmul_in_place(k, &probe)) {
            printf("    # %s reads no matrix in place: nothing to compare\n", k_isas[ii]);
            continue;
        }
        sets++;
        cdx_mat ragged = probe, q5k = { .type = CDX_TYPE_Q5_K, .rows = 48, .cols = 256, .row_bytes = cdx_type_get(CDX_TYPE_Q5_K)->bytes };
        cdx_mat q4k_ragged = { .type = CDX_TYPE_Q4_K, .rows = 40, .cols = 256, .row_bytes = cdx_type_get(CDX_TYPE_Q4_K)->bytes };
        ragged.rows = 40;
        CHECKF(!cdx_matmul_in_place(k, &ragged), "%s: 40 rows (no whole 16-row groups) are not read in place", k_isas[ii]);
        CHECKF(!cdx_matmul_in_place(k, &q4k_ragged), "%s: Q4_K, 40 rows, is not read in place", k_isas[ii]);
        CHECKF(cdx_matmul_in_place(k, &q5k) == (cdx_matmul_pack_bytes(k, &q5k) > 0),
               "%s: Q5_K is read in place where the set packs it, only there", k_isas[ii]);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const cdx_type_traits *t = cdx_type_get(types[ti]);
        cdx_mat tprobe = { .type = types[ti], .rows = 48, .cols = 256, .row_bytes = 256 / t->block * t->bytes };
        if (!cdx_matmul_pack_bytes(k, &tprobe)) /* Q5_K, IQ4_XS on AVX2: no layout, nothing to compare */
            continue;
        int bad = 0, cases = 0;
        for (size_t a = 0; a < sizeof rows_v / sizeof rows_v[0]; a++)
            for (size_t b = 0; b < sizeof nb_v / sizeof nb_v[0]; b++) {
                /* the K types' 256-value blocks: 1, 3 and 8 of them (8: one Llama row, as 64 of 32) */
                const int64_t nblk = t->block == 256 && nb_v[b] > 8 ? 8 : nb_v[b];
                const int64_t rows = rows_v[a], cols = nblk * t->block, n_max = 33;
                const size_t rb = (size_t)nblk * t->bytes;
                uint8_t *w = malloc(rb * (size_t)rows);
                float *x = malloc(sizeof(float) * (size_t)(cols * n_max));
                float *yp = malloc(sizeof(float) * (size_t)(rows * n_max)), *yi = malloc(sizeof(float) * (size_t)(rows * n_max));
                make_weights(types[ti], t, w, rb, rows, cols);
                for (int64_t i = 0; i < cols * n_max; i++)
                    x[i] = gauss() * (i % 37 == 5 ? 6 : 1);
                cdx_mat in = { .type = types[ti], .data = w, .rows = rows, .cols = cols, .row_bytes = rb };
                cdx_mat pk = in;
                const size_t pb = cdx_matmul_pack_bytes(k, &pk);
                void *packed = pb ? aligned_alloc(64, (pb + 63) & ~(size_t)63) : NULL;
                REQUIRE(packed);
                cdx_matmul_pack(k, pool, &pk, packed);
                pk.packed = packed;
                pk.packed_for = k;
                REQUIRE(cdx_matmul_in_place(k, &in));
                void *ws = malloc(cdx_matmul_ws_bytes(&in, n_max, cdx_pool_size(pool)));
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    for (int64_t i = 0; i < rows * ns[ni]; i++)
                        yp[i] = yi[i] = NAN;
                    cdx_matmul(k, pool, &pk, x, ns[ni], yp, ws);
                    cdx_matmul(k, pool, &in, x, ns[ni], yi, ws);
                    cases++;
                    if (memcmp(yp, yi, sizeof(float) * (size_t)(rows * ns[ni])) && bad++ < 3)
                        fprintf(stderr, "    %s %s %lld x %lld, n %lld: in place differs from packed\n", k_isas[ii], t->name,
                                (long long)rows, (long long)cols, (long long)ns[ni]);
                }
                free(ws); free(packed); free(w); free(x); free(yp); free(yi);
            }
        CHECKF(bad == 0, "%s %s: %d of %d in-place cases differ from the packed bits", k_isas[ii], t->name, bad, cases);
        }
    }
    CHECKF(sets > 0 || !cdx_kernels_by_isa("avx2"), "the avx2 set reads in place (%d sets checked)", sets);
    cdx_pool_destroy(pool);
}

/* The amx set's batches (tiles of 16 tokens, the rest by the AVX-512 micro kernels) have the avx512
 * set's bits, row for row: packed and read in place, groups of 16 rows one or several per thread,
 * odd block counts, token counts around the tile size (kern_amx.h says why they must). */
static void amx_batches_have_the_avx512_bits(void)
{
    const cdx_kernels *ka = cdx_kernels_by_isa("amx"), *kv = cdx_kernels_by_isa("avx512");
    if (!ka || !kv) {
        t_skip_isa("amx");
        return;
    }
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const uint32_t types[] = { CDX_TYPE_Q8_0, CDX_TYPE_Q4_0, CDX_TYPE_IQ4_NL, CDX_TYPE_Q4_K, CDX_TYPE_Q6_K,
                               CDX_TYPE_Q5_K, CDX_TYPE_IQ4_XS };
    const int64_t rows_v[] = { 16, 48, 544 }, cols_v[] = { 256, 768, 2048 }, ns[] = { 15, 16, 17, 31, 32, 40, 64 };
    int checked = 0, bad = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const cdx_type_traits *t = cdx_type_get(types[ti]);
        for (size_t ri = 0; ri < 3; ri++)
            for (size_t ci = 0; ci < 3; ci++) {
                const int64_t rows = rows_v[ri], cols = cols_v[ci], n_max = 64;
                const size_t rb = (size_t)(cols / t->block) * t->bytes;
                uint8_t *w = malloc(rb * (size_t)rows);
                float *x = malloc(sizeof(float) * (size_t)(cols * n_max));
                float *ya = malloc(sizeof(float) * (size_t)(rows * n_max)), *yv = malloc(sizeof(float) * (size_t)(rows * n_max));
                REQUIRE(w && x && ya && yv);
                make_weights(types[ti], t, w, rb, rows, cols);
                for (int64_t i = 0; i < cols * n_max; i++)
                    x[i] = gauss() * (i % 61 == 7 ? 8 : 1);
                for (int pack = 0; pack < 2; pack++) {
                    cdx_mat ma = { .type = types[ti], .data = w, .rows = rows, .cols = cols, .row_bytes = rb }, mv = ma;
                    void *pa = NULL, *pv = NULL;
                    if (pack) {
                        size_t pb = cdx_matmul_pack_bytes(ka, &ma);
                        REQUIRE(pb && pb == cdx_matmul_pack_bytes(kv, &mv));
                        pa = aligned_alloc(64, (pb + 63) & ~(size_t)63);
                        pv = aligned_alloc(64, (pb + 63) & ~(size_t)63);
                        cdx_matmul_pack(ka, pool, &ma, pa);
                        cdx_matmul_pack(kv, pool, &mv, pv);
                        ma.packed = pa, ma.packed_for = ka;
                        mv.packed = pv, mv.packed_for = kv;
                    }
                    void *ws = malloc(cdx_matmul_ws_bytes(&ma, n_max, cdx_pool_size(pool)));
                    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                        const int64_t n = ns[ni];
                        for (int64_t i = 0; i < rows * n; i++)
                            ya[i] = NAN, yv[i] = -1;
                        cdx_matmul(ka, pool, &ma, x, n, ya, ws);
                        cdx_matmul(kv, pool, &mv, x, n, yv, ws);
                        for (int64_t i = 0; i < rows * n; i++, checked++)
                            if (memcmp(&ya[i], &yv[i], sizeof(float))) {
                                if (bad++ < 3)
                                    fprintf(stderr, "    amx %s rows %lld cols %lld n %lld %s: y[%lld] = %.9g, avx512 %.9g\n",
                                            t->name, (long long)rows, (long long)cols, (long long)n,
                                            pack ? "packed" : "in place", (long long)i, ya[i], yv[i]);
                            }
                    }
                    free(ws); free(pa); free(pv);
                }
                free(w); free(x); free(ya); free(yv);
            }
    }
    CHECKF(bad == 0, "%d of %d values differ between the amx and avx512 sets", bad, checked);
    CHECK(checked > 0);
    cdx_pool_destroy(pool);
}

/* The amx-gemm set's BF16 tiles (F16/BF16 weights, activations rounded to the weights' type as
 * ggml rounds them, cdx_mat.act_half): each product is exact (two bf16 halves a side), so a row is
 * the f32 sum of the exact products in some order: within f32's summation bound of the double dot
 * (Higham: |error| <= (K·u)·Σ|w·a|, u = 2^-24, here with K = cols + 32), and equal to it where every
 * partial sum is exact. A lost half-product (2^-9 of a term) fails both. Whole token tiles go to the
 * tiles, the tokens past them to the float GEMM: n = 32, 33, 47, 64, 80. */
static void amx_gemm_float_tiles_are_exact_products(void)
{
    const cdx_kernels *k = cdx_kernels_by_isa("amx-gemm");
    if (!k) {
        t_skip_isa("amx-gemm");
        return;
    }
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const uint32_t types[] = { CDX_TYPE_F16, CDX_TYPE_BF16 };
    const int64_t rows_v[] = { 16, 48 }, cols_v[] = { 64, 512, 1056 }, ns[] = { 32, 33, 47, 64, 80 };
    int checked = 0, bad = 0;
    for (size_t ti = 0; ti < 2; ti++) {
        const bool f16 = types[ti] == CDX_TYPE_F16;
        for (size_t ri = 0; ri < 2; ri++)
            for (size_t ci = 0; ci < 3; ci++) {
                const int64_t rows = rows_v[ri], cols = cols_v[ci], n_max = 80;
                uint16_t *w = malloc(sizeof(uint16_t) * (size_t)(rows * cols));
                float *wf = malloc(sizeof(float) * (size_t)(rows * cols)), *x = malloc(sizeof(float) * (size_t)(cols * n_max));
                float *y = malloc(sizeof(float) * (size_t)(rows * n_max));
                REQUIRE(w && wf && x && y);
                for (int64_t i = 0; i < rows * cols; i++) {
                    w[i] = f16 ? cdx_f32_to_f16(gauss() * 0.1f) : cdx_f32_to_bf16(gauss() * 0.1f);
                    wf[i] = f16 ? cdx_f16_to_f32(w[i]) : cdx_bf16_to_f32(w[i]);
                }
                for (int64_t i = 0; i < cols * n_max; i++) { /* the values matmul rounds them to */
                    const float v = gauss() * (i % 61 == 7 ? 8 : 1);
                    x[i] = f16 ? cdx_f16_to_f32(cdx_f32_to_f16(v)) : cdx_bf16_to_f32(cdx_f32_to_bf16(v));
                }
                cdx_mat m = { .type = types[ti], .data = w, .rows = rows, .cols = cols, .row_bytes = (size_t)cols * 2,
                              .act_half = true };
                void *ws = malloc(cdx_matmul_ws_bytes(&m, n_max, cdx_pool_size(pool)));
                REQUIRE(ws);
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    const int64_t n = ns[ni];
                    for (int64_t i = 0; i < rows * n; i++)
                        y[i] = NAN;
                    cdx_matmul(k, pool, &m, x, n, y, ws);
                    for (int64_t t = 0; t < n; t++)
                        for (int64_t r = 0; r < rows; r++, checked++) {
                            double ref = 0, as = 0;
                            for (int64_t c = 0; c < cols; c++) {
                                ref += (double)wf[r * cols + c] * x[t * cols + c];
                                as += fabs((double)wf[r * cols + c] * x[t * cols + c]);
                            }
                            const double got = y[t * rows + r], tol = (double)(cols + 32) * 0x1p-24 * as;
                            if (!(fabs(got - ref) <= tol) && bad++ < 3)
                                fprintf(stderr, "    amx-gemm %s rows %lld cols %lld n %lld: y[%lld][%lld] = %.9g, "
                                        "double %.9g (tolerance %.3g)\n", f16 ? "f16" : "bf16", (long long)rows,
                                        (long long)cols, (long long)n, (long long)t, (long long)r, got, ref, tol);
                        }
                }
                free(ws); free(w); free(wf); free(x); free(y);
            }
        /* exact sums: 8 equal terms a row (the other columns 0), each term (1 + h)(1 + h) with h = 2^-10
         * (f16: hi 1, lo 2^-10, so the lo·lo product 2^-20 counts) or 2^-7 (bf16); every partial sum
         * of m <= 8 terms fits f32's 24 bits, so any order gives 8·(1 + 2h + h²) exactly */
        const int64_t rows = 32, cols = 64, n = 40;
        const float h = f16 ? 0x1p-10f : 0x1p-7f;
        uint16_t *w = calloc((size_t)(rows * cols), sizeof(uint16_t));
        float *x = calloc((size_t)(cols * n), sizeof(float)), *y = malloc(sizeof(float) * (size_t)(rows * n));
        REQUIRE(w && x && y);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 3; c < cols; c += 8)
                w[r * cols + c] = f16 ? cdx_f32_to_f16(1 + h) : cdx_f32_to_bf16(1 + h);
        for (int64_t i = 0; i < cols * n; i++)
            x[i] = 1 + h;
        cdx_mat m = { .type = types[ti], .data = w, .rows = rows, .cols = cols, .row_bytes = (size_t)cols * 2,
                      .act_half = true };
        void *ws = malloc(cdx_matmul_ws_bytes(&m, n, cdx_pool_size(pool)));
        REQUIRE(ws);
        cdx_matmul(k, pool, &m, x, n, y, ws);
        const float want = 8 * (1 + 2 * h + h * h);
        int off = 0;
        for (int64_t i = 0; i < rows * n; i++, checked++)
            off += y[i] != want;
        CHECKF(off == 0, "%s exact sums: %d of %lld differ (y[0] = %.9g, want %.9g)", f16 ? "f16" : "bf16", off,
               (long long)(rows * n), y[0], want);
        free(ws); free(w); free(x); free(y);
    }
    CHECKF(bad == 0, "%d of %d outputs outside f32's summation bound", bad, checked);
    CHECK(checked > 0);
    cdx_pool_destroy(pool);
}

int main(void)
{
    RUN("cpu features match /proc/cpuinfo's flags", cpu_features_match_proc_cpuinfo);
    RUN("isa table picks what the cpu runs", isa_table_picks_what_the_cpu_runs);
    RUN("CALDRIX_ISA names a set or is refused", isa_env_names_a_set_or_is_refused);
    RUN("matmul rows are batch invariant (every type, packed and not)", matmul_rows_are_batch_invariant);
    RUN("activation quantizers are byte-identical to the scalar ones", quantizers_are_byte_identical_to_scalar);
    RUN("q8_0/q8_1 activations are llama.cpp's run-time ones", activation_quantizers_match_ggml_cpu_run_time);
    RUN("row kernels match ggml's fixture dots", row_kernels_match_ggml_fixture_dots);
    RUN("row kernels match the scalar dot on random blocks", row_kernels_match_scalar_on_random_blocks);
    RUN("prefill tiles span several panels", prefill_tiles_span_several_panels);
    RUN("packed layouts match the scalar dot", packed_layouts_match_scalar);
    RUN("in-place rows match the packed bits", in_place_rows_match_packed_bits);
    RUN("amx batches have the avx512 set's bits", amx_batches_have_the_avx512_bits);
    RUN("amx-gemm's bf16 tiles sum exact products (f16, bf16)", amx_gemm_float_tiles_are_exact_products);
    RUN("matmul_multi equals separate calls", matmul_multi_equals_separate_calls);
    RUN("prefill handles rows longer than one unpack chunk", prefill_handles_long_rows);
    RUN("f16/bf16 activation rounding matches the scalar twin", half_rounding_matches_scalar);
    RUN("exp and SiLU have expf's bits on every set", exp_and_silu_have_expf_bits);
    RUN("log-sum-exp matches long double on every set", logsumexp_matches_long_double);
    RUN("erf and GELU have the scalar twin's bits on every set", erf_and_gelu_have_the_twin_bits_on_every_set);
    RUN("add is the plain sum on every set", add_is_the_plain_sum_on_every_set);
    return t_done("kernels");
}
