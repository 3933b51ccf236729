/* Training's f32 GEMM: the driver (packing, blocking, threads) and the scalar micro-kernel, the twin
 * the SIMD ones are held to (tests/train/test_tgemm.c). See tgemm.h. */
#include "train/tgemm.h"
#include "caldrix/kernel.h"

#include <math.h>
#include <string.h>

void tg_ukr_scalar(int mr, int nr, int64_t kc, const float *a, int64_t a_rs, int64_t a_cs, float alpha,
                   const float *bp, float *c, int64_t ldc, bool load)
{
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) {
            float s = load ? c[r * ldc + j] : 0.0f;
            for (int64_t k = 0; k < kc; k++)
                s = fmaf(alpha * a[r * a_rs + k * a_cs], bp[k * TG_NR + j], s);
            c[r * ldc + j] = s;
        }
}

float tg_dot_scalar(const float *a, const float *b, int64_t n)
{
    float s[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            s[l] += a[i + l] * b[i + l];
    for (; i < n; i++)
        s[0] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

void tg_axpy_scalar(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

tg_isa tg_isa_best(void)
{
    const char *isa = cdx_kernels_isa(cdx_kernels_best());
    if (!strncmp(isa, "avx512", 6) || !strcmp(isa, "amx")) /* amx: AVX-512 plus tiles the trainer does not use */
        return TG_AVX512;
    if (!strcmp(isa, "avx2"))
        return TG_AVX2;
    return TG_SCALAR;
}

/* B(k0..k0+kc, j0..j0+nr) into bp[kc][TG_NR], the columns past nr zero */
static void pack(const tg_args *g, bool simd, int64_t k0, int64_t kc, int64_t j0, int nr, float *bp)
{
    const float *b = g->b + k0 * g->b_rs + j0 * g->b_cs;
    if (simd && g->b_rs == 1 && nr == TG_NR) {
        tg_pack_t_avx2(b, g->b_cs, kc, bp);
        return;
    }
    if (g->b_cs == 1) {
        for (int64_t k = 0; k < kc; k++) {
            memcpy(bp + k * TG_NR, b + k * g->b_rs, (size_t)nr * sizeof(float));
            memset(bp + k * TG_NR + nr, 0, (size_t)(TG_NR - nr) * sizeof(float));
        }
        return;
    }
    for (int j = 0; j < TG_NR; j++) {
        if (j < nr) {
            const float *col = b + j * g->b_cs;
            for (int64_t k = 0; k < kc; k++)
                bp[k * TG_NR + j] = col[k * g->b_rs];
        } else
            for (int64_t k = 0; k < kc; k++)
                bp[k * TG_NR + j] = 0.0f;
    }
}

/* rows m0..m1 of C, column panels u0..u1 */
static void block(const tg_args *g, tg_ukr ukr, bool simd, int64_t m0, int64_t m1, int64_t u0, int64_t u1)
{
    _Alignas(64) float bp[TG_KC * TG_NR];
    for (int64_t u = u0; u < u1; u++) {
        const int64_t j0 = u * TG_NR;
        const int nr = (int)(g->N - j0 < TG_NR ? g->N - j0 : TG_NR);
        for (int64_t k0 = 0; k0 < g->K; k0 += TG_KC) {
            const int64_t kc = g->K - k0 < TG_KC ? g->K - k0 : TG_KC;
            pack(g, simd, k0, kc, j0, nr, bp);
            for (int64_t i0 = m0; i0 < m1; i0 += TG_MR) {
                const int mr = (int)(m1 - i0 < TG_MR ? m1 - i0 : TG_MR);
                ukr(mr, nr, kc, g->a + i0 * g->a_rs + k0 * g->a_cs, g->a_rs, g->a_cs, g->alpha, bp,
                    g->c + i0 * g->ldc + j0, g->ldc, g->acc || k0 > 0);
            }
        }
    }
}

typedef struct {
    const tg_args *g;
    tg_ukr ukr;
    bool simd; /* the AVX2 pack (AVX2 and AVX-512 kernel sets) */
    bool split_m;
} tg_job;

static void task(void *ctx, int ith, int nth)
{
    const tg_job *j = ctx;
    const tg_args *g = j->g;
    const int64_t units_n = (g->N + TG_NR - 1) / TG_NR;
    if (j->split_m) {
        const int64_t units = (g->M + TG_MR - 1) / TG_MR;
        const int64_t a = units * ith / nth * TG_MR, b = units * (ith + 1) / nth * TG_MR;
        if (a < b)
            block(g, j->ukr, j->simd, a, b < g->M ? b : g->M, 0, units_n);
    } else {
        const int64_t a = units_n * ith / nth, b = units_n * (ith + 1) / nth;
        if (a < b)
            block(g, j->ukr, j->simd, 0, g->M, a, b);
    }
}

void tg_gemm(cdx_pool *pool, tg_isa isa, const tg_args *g)
{
    if (g->M <= 0 || g->N <= 0)
        return;
    if (g->K <= 0) {
        if (!g->acc)
            for (int64_t i = 0; i < g->M; i++)
                memset(g->c + i * g->ldc, 0, (size_t)g->N * sizeof(float));
        return;
    }
    tg_job j = { .g = g, .ukr = isa == TG_AVX512 ? tg_ukr_avx512 : isa == TG_AVX2 ? tg_ukr_avx2 : tg_ukr_scalar,
                 .simd = isa != TG_SCALAR };
    const int nth = pool ? cdx_pool_size(pool) : 1;
    const double work = (double)g->M * (double)g->N * (double)g->K;
    if (nth <= 1 || work < 131072.0) {
        block(g, j.ukr, j.simd, 0, g->M, 0, (g->N + TG_NR - 1) / TG_NR);
        return;
    }
    const int64_t units_n = (g->N + TG_NR - 1) / TG_NR, units_m = (g->M + TG_MR - 1) / TG_MR;
    j.split_m = units_n < 2 * nth && units_m > units_n;
    cdx_pool_run(pool, task, &j);
}
