/* Training's f32 GEMM (src/train/tgemm.h): the AVX-512 and AVX2 micro-kernels (where this CPU has
 * them) equal the scalar twin bit for bit on odd shapes (rows not a multiple of 8, columns not of 32,
 * depths across the 256-deep panels), in the three layouts a linear layer uses (y = x·Wᵀ, dX = dY·W,
 * dW = dYᵀ·X), with alpha and accumulation; 1 and 3 threads give the same bits; and the scalar twin
 * is within f32 rounding of a double-precision sum computed here. The attention's AVX2 dot and axpy
 * equal their scalar twins bit for bit on lengths around the 8 lanes. (The AVX2 transposing pack, used
 * by both SIMD kernel sets in layout 0, is checked by the same comparisons.) */
#include "caldrix.h"
#include "test.h"
#include "train/tgemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x12345678;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

typedef struct { int64_t M, N, K; } shape;
static const shape k_shapes[] = { { 1, 1, 1 }, { 7, 33, 5 }, { 9, 31, 257 }, { 17, 65, 300 }, { 8, 32, 256 },
                                  { 3, 100, 513 }, { 127, 47, 64 }, { 13, 16, 1 }, { 5, 129, 31 } };

/* layout 0: A[M][K] · B(k,j) = W[j][k] (x·Wᵀ); 1: A[M][K] · B[K][N] (dY·W); 2: A(i,k) = D[k][i] · B[K][N] */
static tg_args make(int layout, shape s, const float *a, const float *b, float *c, float alpha, bool acc)
{
    tg_args g = { .M = s.M, .N = s.N, .K = s.K, .a = a, .b = b, .c = c, .ldc = s.N + 3, .alpha = alpha, .acc = acc };
    if (layout == 2)
        g.a_rs = 1, g.a_cs = s.M;
    else
        g.a_rs = s.K, g.a_cs = 1;
    if (layout == 0)
        g.b_rs = 1, g.b_cs = s.K;
    else
        g.b_rs = s.N, g.b_cs = 1;
    return g;
}

static void t_kernels(void)
{
    cdx_err err = {0};
    cdx_pool *pool = NULL;
    REQUIRE(cdx_pool_create(3, &pool, &err) == 0);
    const bool has512 = cdx_kernels_by_isa("avx512") != NULL, has2 = cdx_kernels_by_isa("avx2") != NULL;
    for (size_t si = 0; si < sizeof k_shapes / sizeof *k_shapes; si++) {
        const shape s = k_shapes[si];
        const size_t na = (size_t)(s.M * s.K), nb = (size_t)(s.K * s.N), nc = (size_t)(s.M * (s.N + 3));
        float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c0 = malloc(nc * sizeof *c0);
        float *c1 = malloc(nc * sizeof *c1), *init = malloc(nc * sizeof *init);
        for (size_t i = 0; i < na; i++) a[i] = frand();
        for (size_t i = 0; i < nb; i++) b[i] = frand();
        for (size_t i = 0; i < nc; i++) init[i] = frand();
        for (int layout = 0; layout < 3; layout++)
            for (int v = 0; v < 2; v++) {
                const float alpha = v ? 0.37f : 1.0f;
                const bool acc = v == 1;
                memcpy(c0, init, nc * sizeof *c0);
                tg_args g = make(layout, s, a, b, c0, alpha, acc);
                tg_gemm(NULL, TG_SCALAR, &g);
                /* against a double sum */
                double worst = 0;
                for (int64_t i = 0; i < s.M; i++)
                    for (int64_t j = 0; j < s.N; j++) {
                        double r = acc ? init[i * g.ldc + j] : 0, mag = fabs(r);
                        for (int64_t k = 0; k < s.K; k++) {
                            const double t = (double)(alpha * g.a[i * g.a_rs + k * g.a_cs]) * g.b[k * g.b_rs + j * g.b_cs];
                            r += t;
                            mag += fabs(t);
                        }
                        const double e = fabs(r - c0[i * g.ldc + j]) / (mag + 1e-30);
                        worst = e > worst ? e : worst;
                    }
                CHECKF(worst <= 1e-6 * (double)(s.K + 1), "shape %lldx%lldx%lld layout %d: relative error %g",
                       (long long)s.M, (long long)s.N, (long long)s.K, layout, worst);
                bool pad = true; /* the 3 floats past each row untouched */
                for (int64_t i = 0; i < s.M; i++)
                    for (int j = 0; j < 3; j++)
                        pad &= c0[i * g.ldc + s.N + j] == init[i * g.ldc + s.N + j];
                CHECKF(pad, "shape %lldx%lldx%lld layout %d wrote past its columns", (long long)s.M, (long long)s.N,
                       (long long)s.K, layout);
                const tg_isa isas[] = { TG_AVX512, TG_AVX2, TG_SCALAR };
                const bool have[] = { has512, has2, true };
                for (int ii = 0; ii < 3; ii++) {
                    if (!have[ii])
                        continue;
                    for (int th = 0; th < 2; th++) {
                        memcpy(c1, init, nc * sizeof *c1);
                        tg_args h = make(layout, s, a, b, c1, alpha, acc);
                        tg_gemm(th ? pool : NULL, isas[ii], &h);
                        CHECKF(!memcmp(c0, c1, nc * sizeof *c0), "shape %lldx%lldx%lld layout %d isa %d threads %d: "
                               "differs from the scalar twin", (long long)s.M, (long long)s.N, (long long)s.K, layout,
                               ii, th ? 3 : 1);
                    }
                }
            }
        free(a); free(b); free(c0); free(c1); free(init);
    }
    /* a product big enough to be split over the threads both ways (columns, and rows when N is narrow) */
    const shape big[] = { { 128, 1000, 300 }, { 200, 16, 700 } };
    for (int bi = 0; bi < 2; bi++) {
        const shape s = big[bi];
        const size_t na = (size_t)(s.M * s.K), nb = (size_t)(s.K * s.N), nc = (size_t)(s.M * (s.N + 3));
        float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c0 = calloc(nc, sizeof *c0),
              *c1 = calloc(nc, sizeof *c1);
        for (size_t i = 0; i < na; i++) a[i] = frand();
        for (size_t i = 0; i < nb; i++) b[i] = frand();
        tg_args g = make(0, s, a, b, c0, 1.0f, false), h = make(0, s, a, b, c1, 1.0f, false);
        tg_gemm(NULL, TG_SCALAR, &g);
        tg_gemm(pool, tg_isa_best(), &h);
        CHECKF(!memcmp(c0, c1, nc * sizeof *c0), "%lldx%lldx%lld on 3 threads (best kernels) differs from the scalar "
               "twin on one", (long long)s.M, (long long)s.N, (long long)s.K);
        free(a); free(b); free(c0); free(c1);
    }
    cdx_pool_destroy(pool);
}

static void t_vec(void)
{
    if (!cdx_kernels_by_isa("avx2")) {
        printf("  (no AVX2: skipped)\n");
        return;
    }
    static const int64_t lens[] = { 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 257 };
    float a[300], b[300], y0[300], y1[300];
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const int64_t n = lens[li];
        for (int64_t i = 0; i < n; i++)
            a[i] = frand() * 3.0f, b[i] = frand(), y0[i] = y1[i] = frand();
        const float d0 = tg_dot_scalar(a, b, n), d1 = tg_dot_avx2(a, b, n);
        CHECKF(!memcmp(&d0, &d1, sizeof d0), "dot of %lld: AVX2 %.9g, scalar %.9g", (long long)n, d1, d0);
        tg_axpy_scalar(y0, 0.731f, a, n);
        tg_axpy_avx2(y1, 0.731f, a, n);
        CHECKF(!memcmp(y0, y1, (size_t)n * sizeof *y0), "axpy of %lld: AVX2 differs from scalar", (long long)n);
    }
}

int main(void)
{
    RUN("tgemm kernels against the scalar twin", t_kernels);
    RUN("the attention's AVX2 dot and axpy equal the scalar twins bit for bit", t_vec);
    printf("%d passed, %d failed\n", t_passed, t_failed);
    return t_failed != 0;
}
