/* The float GEMM (F32/F16/BF16 weights × f32 activations, kern_tmpl.h's fg_rows) and the n = 1
 * rows (tile_f) against their scalar twin, cdx_dot_lanes_ref, bit for bit; and batch invariance:
 * a token's outputs have the same bits at n = 1 as among n = 3, 8, 64 or 1030 others, for odd row
 * counts, row lengths with and without a tail, shorter than one vector, and longer than one
 * column block of the GEMM. The twin itself is checked on sums whose value depends on the lane
 * order, the lane tree and the single rounding of a fused multiply-add (worked out by hand). */
#include "caldrix.h"
#include "kernel/kernel_impl.h"
#include "test.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *isa;
    int lanes;
} k_sets[] = { { "avx512", 16 }, { "avx2", 8 } };
static const uint32_t k_types[] = { CDX_TYPE_F32, CDX_TYPE_F16, CDX_TYPE_BF16 };

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float unif(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* w (rows × cols of `type`) from f; f gets the values the weights hold. */
static void *make_w(uint32_t type, float *f, int64_t rows, int64_t cols, size_t *rb)
{
    const size_t es = type == CDX_TYPE_F32 ? 4 : 2;
    *rb = (size_t)cols * es;
    uint8_t *w = malloc(*rb * (size_t)rows + 1);
    for (int64_t i = 0; i < rows * cols; i++) {
        if (type == CDX_TYPE_F32) {
            memcpy(w + 4 * i, &f[i], 4);
        } else {
            uint16_t h = type == CDX_TYPE_F16 ? cdx_f32_to_f16(f[i]) : cdx_f32_to_bf16(f[i]);
            memcpy(w + 2 * i, &h, 2);
            f[i] = type == CDX_TYPE_F16 ? cdx_f16_to_f32(h) : cdx_bf16_to_f32(h);
        }
    }
    return w;
}

/* One row of n columns, one token, through cdx_matmul on set k at batch n_tok (the token repeated). */
static float kernel_dot(const cdx_kernels *k, cdx_pool *pool, uint32_t type, const float *wf, const float *x, int64_t cols,
                        int64_t n_tok)
{
    float *f = malloc(sizeof(float) * (size_t)cols), *xs = malloc(sizeof(float) * (size_t)(cols * n_tok));
    float *y = malloc(sizeof(float) * (size_t)n_tok);
    memcpy(f, wf, sizeof(float) * (size_t)cols);
    for (int64_t t = 0; t < n_tok; t++)
        memcpy(xs + t * cols, x, sizeof(float) * (size_t)cols);
    size_t rb;
    void *w = make_w(type, f, 1, cols, &rb);
    cdx_mat m = { .type = type, .data = w, .rows = 1, .cols = cols, .row_bytes = rb };
    void *ws = malloc(cdx_matmul_ws_bytes(&m, n_tok, cdx_pool_size(pool)));
    cdx_matmul(k, pool, &m, xs, n_tok, y, ws);
    float r = y[n_tok - 1];
    for (int64_t t = 0; t < n_tok; t++)
        if (memcmp(&y[t], &r, 4))
            r = NAN;
    free(f); free(xs); free(y); free(w); free(ws);
    return r;
}

/* Each check: the twin on its hand-worked value, and every SIMD set of the right width (at n = 1
 * and inside the GEMM, n = 9) on the same value. */
static void check_hand(cdx_pool *pool, const float *wf, const float *x, int64_t cols, int lanes, float want,
                       const char *what)
{
    for (size_t ti = 0; ti < 3; ti++) {
        size_t rb;
        float *f = malloc(sizeof(float) * (size_t)cols);
        memcpy(f, wf, sizeof(float) * (size_t)cols);
        void *w = make_w(k_types[ti], f, 1, cols, &rb);
        REQUIRE(!memcmp(f, wf, sizeof(float) * (size_t)cols)); /* the hand values are exact in every type */
        const float got = cdx_dot_lanes_ref(k_types[ti], w, x, cols, lanes);
        CHECKF(got == want, "%s: twin (%d lanes, %s) gives %a, want %a", what, lanes, cdx_type_name(k_types[ti]),
               (double)got, (double)want);
        free(w);
        free(f);
        for (size_t si = 0; si < sizeof k_sets / sizeof k_sets[0]; si++) {
            const cdx_kernels *k = cdx_kernels_by_isa(k_sets[si].isa);
            if (!k || k_sets[si].lanes != lanes)
                continue;
            for (int64_t n = 1; n <= 9; n += 8) {
                const float y = kernel_dot(k, pool, k_types[ti], wf, x, cols, n);
                CHECKF(y == want, "%s: %s %s at n = %lld gives %a, want %a", what, k_sets[si].isa,
                       cdx_type_name(k_types[ti]), (long long)n, (double)y, (double)want);
            }
        }
    }
}

static void twin_follows_lanes_tree_and_fused_rounding(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const float tiny = 0x1p-24f;
    for (int lanes = 8; lanes <= 16; lanes *= 2) {
        const int64_t cols = 2 * lanes;
        float w[64], x[64];
        /* lanes 0, q, 2q, 3q (q = lanes/4) hold 1, tiny, tiny, -1: the tree adds l0 + l(2q) = 1 + tiny
         * (a tie: 1) and l(q) + l(3q) = -(1 - tiny) exactly, then 1 - (1 - tiny) = tiny. Summed in
         * column order the two tinies vanish into 1 and the result is 0. */
        const int q = lanes / 4;
        for (int i = 0; i < cols; i++) {
            w[i] = 1.0f;
            x[i] = 0.0f;
        }
        x[0] = 1.0f;
        x[2 * q] = tiny;
        x[q] = tiny;
        x[3 * q] = -1.0f;
        check_hand(pool, w, x, cols, lanes, tiny, "lane tree");
        /* lane 0: -1 from column 0, then (1 + 2^-7)(1 + 2^-17) = 1 + 2^-7 + 2^-17 + 2^-24 at column
         * `lanes`: fused, -1 + that is exact; a rounded product would lose the 2^-24 (a tie, to even) */
        for (int i = 0; i < cols; i++)
            x[i] = 0.0f;
        w[0] = 1.0f;
        x[0] = -1.0f;
        w[lanes] = 1.0f + 0x1p-7f;
        x[lanes] = 1.0f + 0x1p-17f;
        check_hand(pool, w, x, cols, lanes, 0x1p-7f + 0x1p-17f + 0x1p-24f, "fused multiply-add");
        /* the tail: a column past the last whole vector comes after the tree, its product rounded
         * first: lane sum -1 (column 0), then + (1 + 2^-7)(1 + 2^-17) rounded to 1 + 2^-7 + 2^-17
         * (fused, as above, it would keep the 2^-24) */
        const int64_t ct = lanes + 1;
        for (int i = 0; i < ct; i++) {
            w[i] = 1.0f;
            x[i] = 0.0f;
        }
        x[0] = -1.0f;
        w[lanes] = 1.0f + 0x1p-7f;
        x[lanes] = 1.0f + 0x1p-17f;
        check_hand(pool, w, x, ct, lanes, 0x1p-7f + 0x1p-17f, "tail after the tree");
    }
    cdx_pool_destroy(pool);
}

/* rows × cols of one type at batch n on set k (lanes wide): every output equals the twin's bits and
 * the same token's output at n = 1. Returns the number of differing outputs. */
static int check_batch(const cdx_kernels *k, int lanes, cdx_pool *pool, uint32_t type, int64_t rows, int64_t cols,
                       int64_t n)
{
    float *f = malloc(sizeof(float) * (size_t)(rows * cols)), *x = malloc(sizeof(float) * (size_t)(cols * n));
    float *y = malloc(sizeof(float) * (size_t)(rows * n)), *y1 = malloc(sizeof(float) * (size_t)rows);
    for (int64_t i = 0; i < rows * cols; i++)
        f[i] = unif();
    for (int64_t i = 0; i < cols * n; i++)
        x[i] = unif() * (i % 53 == 5 ? 16.0f : 1.0f);
    size_t rb;
    uint8_t *w = make_w(type, f, rows, cols, &rb);
    cdx_mat m = { .type = type, .data = w, .rows = rows, .cols = cols, .row_bytes = rb };
    void *ws = malloc(cdx_matmul_ws_bytes(&m, n, cdx_pool_size(pool)));
    for (int64_t i = 0; i < rows * n; i++)
        y[i] = NAN;
    cdx_matmul(k, pool, &m, x, n, y, ws);
    int bad = 0;
    /* n = 1 for a few tokens (first, last, one inside), all of them when n is small */
    for (int64_t t = 0; t < n; t++) {
        if (n > 8 && t != 0 && t != n - 1 && t != n / 2 + 1)
            continue;
        cdx_matmul(k, pool, &m, x + t * cols, 1, y1, ws);
        for (int64_t r = 0; r < rows; r++)
            if (memcmp(&y1[r], &y[t * rows + r], 4) && bad++ < 3)
                fprintf(stderr, "    %s %s %lldx%lld n %lld: token %lld row %lld: %a at n = 1, %a in the batch\n",
                        cdx_kernels_isa(k), cdx_type_name(type), (long long)rows, (long long)cols, (long long)n,
                        (long long)t, (long long)r, (double)y1[r], (double)y[t * rows + r]);
    }
    if (lanes) /* the oracle, every output (a stride of tokens for the largest batch) */
        for (int64_t t = 0; t < n; t += n > 64 ? 7 : 1)
            for (int64_t r = 0; r < rows; r++) {
                const float ref = cdx_dot_lanes_ref(type, w + (size_t)r * rb, x + t * cols, cols, lanes);
                if (memcmp(&ref, &y[t * rows + r], 4) && bad++ < 3)
                    fprintf(stderr, "    %s %s %lldx%lld n %lld: y[%lld][%lld] = %a, twin %a\n", cdx_kernels_isa(k),
                            cdx_type_name(type), (long long)rows, (long long)cols, (long long)n, (long long)t,
                            (long long)r, (double)y[t * rows + r], (double)ref);
            }
    free(f); free(x); free(y); free(y1); free(w); free(ws);
    return bad;
}

static void float_rows_equal_twin_and_n1_at_every_batch(void)
{
    cdx_err e = {0};
    cdx_pool *pools[2];
    REQUIRE(cdx_pool_create(2, &pools[0], &e) == CDX_OK);
    REQUIRE(cdx_pool_create(3, &pools[1], &e) == CDX_OK);
    /* cols: one vector and a bit, no tail, a tail, shorter than a vector, several column blocks with
     * a tail; rows odd and even, a GEMM row pair left over, more than one panel */
    const struct {
        int64_t rows, cols;
    } shapes[] = { { 37, 96 }, { 7, 768 }, { 13, 775 }, { 5, 5 }, { 9, 1603 }, { 3, 12 }, { 131, 64 } };
    const int64_t ns[] = { 1, 3, 8, 64, 1030 };
    const char *sets[] = { "avx512", "avx2", "scalar" };
    int checked = 0;
    for (size_t si = 0; si < 3; si++) {
        const cdx_kernels *k = cdx_kernels_by_isa(sets[si]);
        if (!k) {
            t_skip_isa(sets[si]);
            continue;
        }
        const int lanes = !strcmp(sets[si], "avx512") ? 16 : !strcmp(sets[si], "avx2") ? 8 : 0;
        for (size_t ti = 0; ti < 3; ti++) {
            int bad = 0;
            for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    if (ns[ni] > 64 && shapes[sh].rows * shapes[sh].cols > 20000)
                        continue; /* the largest batch on the smaller shapes (the twin is slow) */
                    bad += check_batch(k, lanes, pools[(sh + ni) % 2], k_types[ti], shapes[sh].rows, shapes[sh].cols,
                                       ns[ni]);
                    checked++;
                }
            CHECKF(bad == 0, "%s %s: %d outputs differ from the twin or from n = 1", sets[si],
                   cdx_type_name(k_types[ti]), bad);
        }
    }
    CHECK(checked > 0);
    cdx_pool_destroy(pools[0]);
    cdx_pool_destroy(pools[1]);
}

/* A vision-tower shape: 3072 × 768 and 768 × 3072 at n = 1024, a few tokens against n = 1 and the
 * twin (each GEMM panel, column block and token group is exercised). */
static void float_gemm_tower_shapes(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    for (size_t si = 0; si < sizeof k_sets / sizeof k_sets[0]; si++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_sets[si].isa);
        if (!k) {
            t_skip_isa(k_sets[si].isa);
            continue;
        }
        int bad = check_batch(k, k_sets[si].lanes, pool, CDX_TYPE_BF16, 3072, 768, 1024);
        bad += check_batch(k, k_sets[si].lanes, pool, CDX_TYPE_F16, 768, 3072, 1024);
        CHECKF(bad == 0, "%s: %d outputs differ", k_sets[si].isa, bad);
    }
    cdx_pool_destroy(pool);
}

int main(void)
{
    RUN("twin: lanes, lane tree, fused rounding and tail (hand-worked values)", twin_follows_lanes_tree_and_fused_rounding);
    RUN("float rows: twin's bits and n = 1's bits at n = 1, 3, 8, 64, 1030", float_rows_equal_twin_and_n1_at_every_batch);
    RUN("float GEMM at the vision tower's shapes (n = 1024)", float_gemm_tower_shapes);
    return t_done("fgemm");
}
