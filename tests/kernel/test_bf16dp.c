/* The AVX512_BF16 matmul (vdpbf16ps) for --dtype bf16 models and its scalar twin. The twin is
 * checked on sums whose value depends on the order Intel's pseudocode gives (each lane takes the
 * odd product of a pair before the even one; lanes are added as a tree; denormal inputs are read as
 * zero); the kernel, on CPUs that have AVX512_BF16, must give the twin's bits for every length, row
 * count and batch size, directly and through cdx_matmul. Elsewhere that part is skipped, out loud. */
#include "caldrix.h"
#include "kernel/kernel_impl.h"
#include "test.h"

static uint16_t b(float f) { return cdx_f32_to_bf16(f); }

static void twin_takes_the_odd_product_first_lane_by_lane(void)
{
    /* lane 0 sees x[1], x[0], x[33], x[32]: (1 + 2^-24) rounds to 1 (a tie, to even), + 2^-24
     * again rounds to 1, - 1 gives 0. Index order would give 2^-24, the exact sum 2^-23. */
    uint16_t w[34], x[34];
    for (int i = 0; i < 34; i++) {
        w[i] = b(1.0f);
        x[i] = b(0.0f);
    }
    x[1] = b(1.0f);
    x[0] = b(0x1p-24f);
    x[33] = b(0x1p-24f);
    x[32] = b(-1.0f);
    CHECKF(cdx_dot_bf16dp_ref(w, x, 34) == 0.0f, "%a", (double)cdx_dot_bf16dp_ref(w, x, 34));
}

static void twin_adds_the_lanes_as_a_tree(void)
{
    /* lanes 0, 4, 8, 12 hold 1, 2^-24, 2^-24, -1 (odd elements 1, 9, 17, 25): l0 + l8 = 1,
     * l4 + l12 = -(1 - 2^-24), their sum 2^-24. Lanes added in order would give 0. */
    uint16_t w[32], x[32];
    for (int i = 0; i < 32; i++) {
        w[i] = b(1.0f);
        x[i] = b(0.0f);
    }
    x[1] = b(1.0f);
    x[9] = b(0x1p-24f);
    x[17] = b(0x1p-24f);
    x[25] = b(-1.0f);
    CHECKF(cdx_dot_bf16dp_ref(w, x, 32) == 0x1p-24f, "%a", (double)cdx_dot_bf16dp_ref(w, x, 32));
}

static void twin_reads_denormals_as_zero(void)
{
    const uint16_t w[3] = { b(0x1p100f), b(2.0f), b(3.0f) }, x[3] = { 0x0001 /* the least bf16 denormal */, b(5.0f), b(7.0f) };
    CHECKF(cdx_dot_bf16dp_ref(w, x, 3) == 31.0f, "%a", (double)cdx_dot_bf16dp_ref(w, x, 3));
    CHECK(cdx_dot_bf16dp_ref(w, x, 1) == 0.0f);
}

static uint32_t g_rng = 12345;
static float rnd(void)
{
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((int32_t)(g_rng >> 8) - (1 << 23)) / (float)(1 << 23);
}

static void kernel_gives_the_twins_bits(void)
{
    const int64_t lens[] = { 1, 2, 31, 32, 33, 63, 64, 65, 64 * 32 + 1, 2048 };
    /* 21 rows: the kernel's 4-row tiles and single rows; 11 activation rows: 4, 2 and 1 at a time */
    for (size_t li = 0; li < 2 * sizeof lens / sizeof lens[0]; li++) {
        const int64_t cols = lens[li / 2], rows = li % 2 ? 21 : 5, n = li % 2 ? 11 : 4, rb = (cols + 1) & ~1;
        uint16_t *wd = malloc((size_t)(rows * cols) * 2), *xb = calloc((size_t)(n * rb), 2);
        float *x = malloc((size_t)(n * cols) * sizeof(float)), *y = malloc((size_t)(n * rows) * sizeof(float));
        float *ref = malloc((size_t)(n * rows) * sizeof(float));
        REQUIRE(wd && xb && x && y && ref);
        for (int64_t i = 0; i < rows * cols; i++)
            wd[i] = b(rnd());
        for (int64_t t = 0; t < n; t++)
            for (int64_t c = 0; c < cols; c++) {
                x[t * cols + c] = cdx_bf16_round(rnd() * 4);
                xb[t * rb + c] = b(x[t * cols + c]);
            }
        cdx_mat w = { .type = CDX_TYPE_BF16, .data = wd, .rows = rows, .cols = cols, .row_bytes = (size_t)cols * 2,
                      .act_bf16 = true };
        cdx_rows_bf16dp_ref(&w, 0, rows, x, xb, (size_t)rb * 2, n, ref, NULL);
        cdx_rows_bf16dp_avx512(&w, 0, rows, x, xb, (size_t)rb * 2, n, y, NULL);
        CHECKF(!memcmp(y, ref, (size_t)(n * rows) * sizeof(float)), "cols %lld: the kernel differs from its twin",
               (long long)cols);
        /* a range that starts past row 0, every batch size: the same bits */
        for (int64_t nn = 1; nn <= n; nn++) {
            memset(y, 0xff, (size_t)(n * rows) * sizeof(float));
            cdx_rows_bf16dp_avx512(&w, 3, rows, x, xb, (size_t)rb * 2, nn, y, NULL);
            for (int64_t t = 0; t < nn; t++)
                CHECKF(!memcmp(y + t * rows + 3, ref + t * rows + 3, (size_t)(rows - 3) * sizeof(float)),
                       "cols %lld, rows 3..%lld, batch %lld, activation row %lld: the kernel differs from its twin",
                       (long long)cols, (long long)rows, (long long)nn, (long long)t);
        }
        /* through cdx_matmul, one batch size at a time: the same bits for every row */
        const cdx_kernels *k = cdx_kernels_by_isa("avx512");
        cdx_pool *pool = NULL;
        cdx_err e = { 0 };
        REQUIRE(cdx_pool_create(2, &pool, &e) == 0);
        void *ws = malloc(cdx_matmul_ws_bytes(&w, n, 2));
        for (int64_t nn = 1; nn <= n; nn++) {
            cdx_matmul(k, pool, &w, x, nn, y, ws);
            for (int64_t t = 0; t < nn; t++)
                CHECKF(!memcmp(y + t * rows, ref + t * rows, (size_t)rows * sizeof(float)),
                       "cols %lld, batch %lld, row %lld: cdx_matmul differs from the twin", (long long)cols,
                       (long long)nn, (long long)t);
        }
        free(ws);
        cdx_pool_destroy(pool);
        free(wd); free(xb); free(x); free(y); free(ref);
    }
}

int main(void)
{
    RUN("the vdpbf16ps twin takes each pair's odd product first, lane by lane", twin_takes_the_odd_product_first_lane_by_lane);
    RUN("the vdpbf16ps twin adds its 16 lanes as a tree", twin_adds_the_lanes_as_a_tree);
    RUN("the vdpbf16ps twin reads denormal inputs as zero", twin_reads_denormals_as_zero);
    if (cdx_kernels_by_isa("avx512") && cdx_cpu_features_get()->avx512bf16)
        RUN("the AVX512_BF16 kernel gives its twin's bits (lengths 1..2049, rows 5 and 21, batches 1..11)", kernel_gives_the_twins_bits);
    else
        t_skip_isa("avx512-bf16"); /* AVX-512 with AVX512_BF16: vdpbf16ps */
    return t_done("bf16dp");
}
