/* rmsnorm, softmax and blocked attention on every ISA against double-precision loops. */
#include "caldrix.h"
#include "kernel/kernel_impl.h"
#include "test.h"

/* every kernel set; the first K_FUSED have fused attention rows (scalar runs the primitives) */
static const char *const k_isas[] = { "amx", "avx512", "avx2", "scalar" };
enum { K_ALL = 4, K_FUSED = 3 };

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2 - 1;
}

static void rmsnorm_and_softmax_match_double(void)
{
    const int64_t lens[] = { 1, 7, 16, 33, 100, 4096 };
    float *x = malloc(sizeof(float) * 4096), *w = malloc(sizeof(float) * 4096), *y = malloc(sizeof(float) * 4096);
    int tested = 0;
    for (int ii = 0; ii < K_ALL; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        for (int li = 0; li < 6; li++) {
            int64_t n = lens[li];
            for (int64_t i = 0; i < n; i++) {
                x[i] = frand() * 3;
                w[i] = frand();
            }
            double ss = 0;
            for (int64_t i = 0; i < n; i++)
                ss += (double)x[i] * x[i];
            double sc = 1 / sqrt(ss / n + 1e-5);
            cdx_rmsnorm(k, x, w, n, 1e-5f, y);
            for (int64_t i = 0; i < n; i++)
                CHECK_NEAR(y[i], x[i] * sc * w[i], 2e-6 * (1 + fabs(x[i] * sc * w[i])));
            double mx = -1e30, sum = 0;
            for (int64_t i = 0; i < n; i++)
                mx = x[i] > mx ? x[i] : mx;
            for (int64_t i = 0; i < n; i++)
                sum += exp(x[i] - mx);
            memcpy(y, x, sizeof(float) * n);
            cdx_softmax(k, y, n);
            for (int64_t i = 0; i < n; i++)
                CHECK_NEAR(y[i], exp(x[i] - mx) / sum, 1e-6 * (1 + exp(x[i] - mx) / sum));
            tested++;
        }
    }
    CHECK(tested >= 6);
    free(x); free(w); free(y);
}

/* Naive attention in double for one row and head. */
/* kc, vc: the contiguous cache the row's block tables were made from */
static const float *g_kc, *g_vc;
static void ref_attn(const cdx_attn_shape *s, const cdx_attn_row *r, int h, double *out)
{
    int g = h / (s->n_head / s->n_kv_head), hd = s->head_dim;
    int64_t n = r->hi - r->lo + 1;
    double *p = malloc(sizeof(double) * n), mx = -1e300, sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = 0;
        for (int j = 0; j < hd; j++)
            d += (double)r->q[h * hd + j] * g_kc[(r->lo + i) * s->kv_stride + g * hd + j];
        p[i] = d * s->scale;
        mx = p[i] > mx ? p[i] : mx;
    }
    for (int64_t i = 0; i < n; i++)
        sum += p[i] = exp(p[i] - mx);
    for (int j = 0; j < hd; j++) {
        double o = 0;
        for (int64_t i = 0; i < n; i++)
            o += p[i] * g_vc[(r->lo + i) * s->kv_stride + g * hd + j];
        out[j] = o / sum;
    }
    free(p);
}

static void attention_matches_naive_softmax(void)
{
    const struct { int nh, nkv, hd; } shapes[] = { { 4, 1, 64 }, { 8, 2, 80 }, { 6, 6, 32 }, { 40, 1, 16 }, { 2, 1, 7 } };
    const int64_t n_ctx = 300;
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    int tested = 0;
    for (int si = 0; si < 5; si++) {
        cdx_attn_shape s = { .n_head = shapes[si].nh, .n_kv_head = shapes[si].nkv, .head_dim = shapes[si].hd, .block = n_ctx };
        s.kv_stride = (int64_t)s.n_kv_head * s.head_dim + 3; /* padded rows */
        s.scale = 1.0f / sqrtf((float)s.head_dim);
        float *kc = malloc(sizeof(float) * n_ctx * s.kv_stride), *vc = malloc(sizeof(float) * n_ctx * s.kv_stride);
        for (int64_t i = 0; i < n_ctx * s.kv_stride; i++) {
            kc[i] = frand() * 2;
            vc[i] = frand();
        }
        g_kc = kc;
        g_vc = vc;
        /* the same cache paged: blocks of 16 positions copied to scattered places, in reverse */
        enum { BS = 16, NB = (300 + BS - 1) / BS };
        float *pk = malloc(sizeof(float) * NB * BS * s.kv_stride * 2), *pv = pk + NB * BS * s.kv_stride;
        const void *ktab[NB], *vtab[NB];
        for (int b = 0; b < NB; b++) {
            const int slot = NB - 1 - b;
            for (int64_t i = 0; i < BS * s.kv_stride; i++) {
                const int64_t src = b * BS * s.kv_stride + i;
                pk[slot * BS * s.kv_stride + i] = src < n_ctx * s.kv_stride ? kc[src] : NAN;
                pv[slot * BS * s.kv_stride + i] = src < n_ctx * s.kv_stride ? vc[src] : NAN;
            }
            ktab[b] = pk + slot * BS * s.kv_stride;
            vtab[b] = pv + slot * BS * s.kv_stride;
        }
        const void *kone[1] = { kc }, *vone[1] = { vc };
        enum { NR = 6 };
        const int64_t lo[NR] = { 0, 0, 0, 100, 250, 299 }, hi[NR] = { 0, 63, 64, 229, 299, 299 };
        float *q = malloc(sizeof(float) * NR * s.n_head * s.head_dim), *out = malloc(sizeof(float) * NR * s.n_head * s.head_dim);
        double *ref = malloc(sizeof(double) * s.head_dim);
        cdx_attn_row rows[NR];
        for (int i = 0; i < NR * s.n_head * s.head_dim; i++)
            q[i] = frand() * 2;
        for (int i = 0; i < NR; i++)
            rows[i] = (cdx_attn_row){ q + (size_t)i * s.n_head * s.head_dim, kone, vone, lo[i], hi[i],
                                      out + (size_t)i * s.n_head * s.head_dim, 0 };
        float *out_paged = malloc(sizeof(float) * NR * s.n_head * s.head_dim);
        cdx_attn_row prow[NR];
        for (int i = 0; i < NR; i++)
            prow[i] = (cdx_attn_row){ rows[i].q, ktab, vtab, lo[i], hi[i], out_paged + (size_t)i * s.n_head * s.head_dim, 0 };
        for (int ii = 0; ii < K_ALL; ii++) {
            const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
            if (!k) {
                t_skip_isa(k_isas[ii]);
                continue;
            }
            for (int i = 0; i < NR * s.n_head * s.head_dim; i++)
                out[i] = NAN;
            REQUIRE(cdx_attn(k, pool, &s, rows, NR, &e) == CDX_OK);
            int bad = 0;
            for (int i = 0; i < NR; i++)
                for (int h = 0; h < s.n_head; h++) {
                    ref_attn(&s, &rows[i], h, ref);
                    for (int j = 0; j < s.head_dim; j++)
                        if (!(fabs(rows[i].out[h * s.head_dim + j] - ref[j]) <= 2e-6))
                            bad++;
                }
            CHECKF(bad == 0, "%s heads %d/%d dim %d: %d values off", k_isas[ii], s.n_head, s.n_kv_head, s.head_dim, bad);
            /* paged: the same float bits whatever the block placement */
            cdx_attn_shape ps = s;
            ps.block = BS;
            REQUIRE(cdx_attn(k, pool, &ps, prow, NR, &e) == CDX_OK);
            CHECKF(!memcmp(out, out_paged, sizeof(float) * NR * s.n_head * s.head_dim),
                   "%s heads %d/%d dim %d: paged attention differs from contiguous", k_isas[ii], s.n_head,
                   s.n_kv_head, s.head_dim);
            tested++;
        }
        free(kc); free(vc); free(q); free(out); free(ref); free(pk); free(out_paged);
    }
    CHECK(tested >= 5);
    cdx_pool_destroy(pool);
}

static void attention_refuses_bad_shapes_and_rows(void)
{
    cdx_err e = {0};
    float buf[64] = {0};
    const void *tab[1] = { buf };
    cdx_attn_row r = { buf, tab, tab, 0, 0, buf, 0 };
    cdx_attn_shape s = { .n_head = 6, .n_kv_head = 4, .head_dim = 8, .kv_stride = 32, .block = 64, .scale = 1 };
    CHECK(cdx_attn(cdx_kernels_best(), NULL, &s, &r, 1, &e) == CDX_EINVAL);
    CHECK(strstr(e.msg, "6 heads, 4 KV heads") != NULL);
    s = (cdx_attn_shape){ .n_head = 2, .n_kv_head = 1, .head_dim = 1024, .kv_stride = 2048, .block = 64, .scale = 1 };
    CHECK(cdx_attn(cdx_kernels_best(), NULL, &s, &r, 1, &e) == CDX_EINVAL);
    s = (cdx_attn_shape){ .n_head = 2, .n_kv_head = 1, .head_dim = 8, .kv_stride = 8, .block = 64, .scale = 1 };
    r.lo = 3; r.hi = 2;
    CHECK(cdx_attn(cdx_kernels_best(), NULL, &s, &r, 1, &e) == CDX_EINVAL);
    CHECK(strstr(e.msg, "3..2") != NULL);
}

/* The fused f32 attention rows of a kernel set (cdx_kernels.attn_f32) give the bits attn.c's
 * attn_heads gives with that set's primitives (the same set with attn_f32 removed): head sizes
 * the kernel takes (one to eight vectors; AVX2 also ten, twelve and sixteen) and does not, GQA groups, windows, lengths across the
 * 64-key blocks, and a paged cache of 16-position blocks lying in reverse order. Without windows
 * (cache blocks of 256) consecutive rows share their keys and go through the kernel in tiles of 64
 * rows (of 10 rows a pass for 12 heads); with them every third row starts its own tile. */
static void fused_attention_rows_match_primitives_bit_for_bit(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const int hds[] = { 8, 16, 24, 48, 64, 80, 96, 128, 40, 72 }, groups[] = { 1, 2, 3, 12 }; /* 3: whole and partial head chunks; 12: tiles of fewer rows */
    const int64_t lens[] = { 1, 7, 63, 64, 65, 200 };
    int checked = 0, fused = 0;
    for (int ii = 0; ii < K_FUSED; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        REQUIRE(k->attn_f32);
        cdx_kernels plain = *k;
        plain.attn_f32 = NULL;
        const bool wide = strcmp(k_isas[ii], "avx2") != 0; /* 16-lane vectors: amx, avx512 */
        int bad = 0;
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
            for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                    for (int bsz = 16; bsz <= 256; bsz *= 16) {
                        const int hd = hds[hi], nkv = 2, nh = nkv * groups[gi];
                        const int64_t n = lens[li], nblk = (n + bsz - 1) / bsz;
                        const int64_t stride = (int64_t)nkv * hd + 3; /* positions apart, with a gap */
                        float *kc = malloc(sizeof(float) * (size_t)(nblk * bsz * stride));
                        float *vc = malloc(sizeof(float) * (size_t)(nblk * bsz * stride));
                        float *q = malloc(sizeof(float) * (size_t)(n * nh * hd));
                        float *o1 = malloc(sizeof(float) * (size_t)(n * nh * hd)), *o2 = malloc(sizeof(float) * (size_t)(n * nh * hd));
                        for (int64_t i = 0; i < nblk * bsz * stride; i++) {
                            kc[i] = frand() * 2;
                            vc[i] = frand();
                        }
                        for (int64_t i = 0; i < n * nh * hd; i++)
                            q[i] = frand();
                        const void **kt = malloc(sizeof(void *) * (size_t)nblk), **vt = malloc(sizeof(void *) * (size_t)nblk);
                        for (int64_t b = 0; b < nblk; b++) { /* blocks in reverse order in memory */
                            kt[b] = kc + (nblk - 1 - b) * bsz * stride;
                            vt[b] = vc + (nblk - 1 - b) * bsz * stride;
                        }
                        cdx_attn_shape s = { .n_head = nh, .n_kv_head = nkv, .head_dim = hd, .kv_stride = stride,
                                             .block = bsz, .scale = 0.125f, .kv_type = 0 };
                        cdx_attn_row *rows = malloc(sizeof *rows * (size_t)n);
                        for (int64_t i = 0; i < n; i++)
                            rows[i] = (cdx_attn_row){ .q = q + i * nh * hd, .k = kt, .v = vt,
                                                      .lo = bsz == 16 && i % 3 == 2 ? i / 2 : 0, .hi = i,
                                                      .out = o1 + i * nh * hd };
                        REQUIRE(cdx_attn(k, pool, &s, rows, n, &e) == CDX_OK);
                        for (int64_t i = 0; i < n; i++)
                            rows[i].out = o2 + i * nh * hd;
                        REQUIRE(cdx_attn(&plain, pool, &s, rows, n, &e) == CDX_OK);
                        bad += memcmp(o1, o2, sizeof(float) * (size_t)(n * nh * hd)) != 0;
                        checked++;
                        /* the shapes the fused rows take: every head size of 1..8 vectors, and on AVX2 the
                         * 10-, 12- and 16-vector ones (80, 96, 128) as well */
                        const bool takes = hd % (wide ? 16 : 8) == 0 &&
                                           (wide ? hd <= 128 : hd <= 64 || hd == 80 || hd == 96 || hd == 128);
                        const bool took = k->attn_f32(&s, &rows[n - 1], 1, 0, 0, groups[gi]);
                        bad += took != takes;
                        fused += took;
                        free(kc); free(vc); free(q); free(o1); free(o2); free(kt); free(vt); free(rows);
                    }
        CHECKF(bad == 0, "%s: %d of %d cases differ from the primitives' attention", k_isas[ii], bad, checked);
    }
    CHECK(checked == 0 || fused > 0);
    cdx_pool_destroy(pool);
}

/* The fused f16 attention rows of a kernel set (cdx_kernels.attn_f16) give the bits attn.c's
 * attn_head_f16 gives with that set's primitives (the same set with attn_f16 removed), over an F16
 * cache: head sizes taken and not, GQA groups (12: fewer rows a pass; 3: an odd group), lengths across the 64-key
 * blocks and the 8-lane sum's tail (1, 7, 65, 200), windows, sinks, a paged cache
 * in reverse order; and the result against double precision on the f16 values (the weights' f16
 * rounding bounds it: 2e-3 relative to the largest |v|). */
static void fused_f16_attention_rows_match_primitives_bit_for_bit(void)
{
    cdx_err e = {0};
    cdx_pool *pool;
    REQUIRE(cdx_pool_create(2, &pool, &e) == CDX_OK);
    const int hds[] = { 16, 64, 80, 40, 128 }, groups[] = { 1, 3, 4, 12 };
    const int64_t lens[] = { 1, 7, 65, 200 };
    int checked = 0, fused = 0, bad_ref = 0;
    for (int ii = 0; ii < K_FUSED; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        REQUIRE(k->attn_f16);
        cdx_kernels plain = *k;
        plain.attn_f16 = NULL;
        const bool wide = strcmp(k_isas[ii], "avx2") != 0; /* 16-lane vectors: amx, avx512 */
        int bad = 0;
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
            for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                    for (int bsz = 16; bsz <= 256; bsz *= 16)
                        for (int sink = 0; sink < 2; sink++) {
                            const int hd = hds[hi], nkv = 2, nh = nkv * groups[gi];
                            const int64_t n = lens[li], nblk = (n + bsz - 1) / bsz;
                            const int64_t stride = (int64_t)nkv * hd + 3;
                            uint16_t *kc = malloc(sizeof(uint16_t) * (size_t)(nblk * bsz * stride));
                            uint16_t *vc = malloc(sizeof(uint16_t) * (size_t)(nblk * bsz * stride));
                            float *q = malloc(sizeof(float) * (size_t)(n * nh * hd)), sinks[64];
                            float *o1 = malloc(sizeof(float) * (size_t)(n * nh * hd)), *o2 = malloc(sizeof(float) * (size_t)(n * nh * hd));
                            for (int64_t i = 0; i < nblk * bsz * stride; i++) {
                                kc[i] = cdx_f32_to_f16(frand() * 2);
                                vc[i] = cdx_f32_to_f16(frand());
                            }
                            for (int64_t i = 0; i < n * nh * hd; i++)
                                q[i] = frand();
                            for (int h = 0; h < nh; h++)
                                sinks[h] = frand() * 3;
                            const void **kt = malloc(sizeof(void *) * (size_t)nblk), **vt = malloc(sizeof(void *) * (size_t)nblk);
                            for (int64_t b = 0; b < nblk; b++) {
                                kt[b] = kc + (nblk - 1 - b) * bsz * stride;
                                vt[b] = vc + (nblk - 1 - b) * bsz * stride;
                            }
                            cdx_attn_shape s = { .n_head = nh, .n_kv_head = nkv, .head_dim = hd, .kv_stride = stride,
                                                 .block = bsz, .scale = 0.125f, .kv_type = CDX_TYPE_F16,
                                                 .sinks = sink ? sinks : NULL };
                            cdx_attn_row *rows = malloc(sizeof *rows * (size_t)n);
                            for (int64_t i = 0; i < n; i++)
                                rows[i] = (cdx_attn_row){ .q = q + i * nh * hd, .k = kt, .v = vt,
                                                          .lo = bsz == 16 && i % 3 == 2 ? i / 2 : 0, .hi = i,
                                                          .out = o1 + i * nh * hd };
                            REQUIRE(cdx_attn(k, pool, &s, rows, n, &e) == CDX_OK);
                            for (int64_t i = 0; i < n; i++)
                                rows[i].out = o2 + i * nh * hd;
                            REQUIRE(cdx_attn(&plain, pool, &s, rows, n, &e) == CDX_OK);
                            bad += memcmp(o1, o2, sizeof(float) * (size_t)(n * nh * hd)) != 0;
                            checked++;
                            /* the last row against double precision on the cache's f16 values */
                            const cdx_attn_row *r = &rows[n - 1];
                            for (int h = 0; h < nh; h++) {
                                const int g = h / groups[gi];
                                double mx = sink ? sinks[h] : -1e300, sum = 0;
                                double *p = malloc(sizeof(double) * (size_t)(r->hi - r->lo + 1));
                                for (int64_t t = r->lo; t <= r->hi; t++) {
                                    const uint16_t *kp = (const uint16_t *)kt[t / bsz] + (t % bsz) * stride + g * hd;
                                    double d = 0;
                                    for (int j = 0; j < hd; j++)
                                        d += (double)q[(n - 1) * nh * hd + h * hd + j] * cdx_f16_to_f32(kp[j]);
                                    p[t - r->lo] = d * 0.125;
                                    mx = p[t - r->lo] > mx ? p[t - r->lo] : mx;
                                }
                                for (int64_t t = r->lo; t <= r->hi; t++)
                                    sum += p[t - r->lo] = exp(p[t - r->lo] - mx);
                                if (sink)
                                    sum += exp(sinks[h] - mx);
                                for (int j = 0; j < hd; j++) {
                                    double o = 0;
                                    for (int64_t t = r->lo; t <= r->hi; t++)
                                        o += p[t - r->lo] / sum *
                                             cdx_f16_to_f32(((const uint16_t *)vt[t / bsz] + (t % bsz) * stride + g * hd)[j]);
                                    bad_ref += !(fabs(o2[(n - 1) * nh * hd + h * hd + j] - o) <= 2e-3);
                                }
                                free(p);
                            }
                            const bool takes = hd % (wide ? 16 : 8) == 0 &&
                                               (wide ? hd <= 128 : hd <= 64 || hd == 80 || hd == 96 || hd == 128);
                            const bool took = k->attn_f16(&s, &rows[n - 1], 1, 0, 0, groups[gi]);
                            bad += took != takes;
                            fused += took;
                            free(kc); free(vc); free(q); free(o1); free(o2); free(kt); free(vt); free(rows);
                        }
        CHECKF(bad == 0, "%s: %d of %d f16 cases differ from the primitives' attention", k_isas[ii], bad, checked);
    }
    CHECKF(bad_ref == 0, "%d values more than 2e-3 from double precision", bad_ref);
    CHECK(checked == 0 || fused > 0);
    cdx_pool_destroy(pool);
}

/* A row's output bits do not depend on the pool's thread count, nor on the rows beside it in the
 * call (alone, in a tile of a longer prompt, after another sequence's rows), F32 and F16 caches,
 * on every kernel set: 1, 2, 3 and 5 threads; a decode row of 600 positions among them. */
static void attention_bits_do_not_depend_on_threads_or_batch(void)
{
    cdx_err e = {0};
    const int nh = 8, nkv = 2, hd = 64;
    const int64_t n = 600, stride = nkv * hd;
    float *kf = malloc(sizeof(float) * (size_t)(n * stride)), *vf = malloc(sizeof(float) * (size_t)(n * stride));
    uint16_t *kh = malloc(sizeof(uint16_t) * (size_t)(n * stride)), *vh = malloc(sizeof(uint16_t) * (size_t)(n * stride));
    for (int64_t i = 0; i < n * stride; i++) {
        kf[i] = frand() * 2;
        vf[i] = frand();
        kh[i] = cdx_f32_to_f16(kf[i]);
        vh[i] = cdx_f32_to_f16(vf[i]);
    }
    enum { NR = 81 }; /* 80 rows of A: a whole tile of attn.c's 64 (passes of 32 states inside), and more */
    float *q = malloc(sizeof(float) * NR * nh * hd), *out = malloc(sizeof(float) * NR * nh * hd),
          *one = malloc(sizeof(float) * NR * nh * hd);
    for (int i = 0; i < NR * nh * hd; i++)
        q[i] = frand();
    const int nthr[] = { 1, 2, 3, 5 };
    int bad = 0, runs = 0;
    for (int ii = 0; ii < K_ALL; ii++) {
        const cdx_kernels *k = cdx_kernels_by_isa(k_isas[ii]);
        if (!k) {
            t_skip_isa(k_isas[ii]);
            continue;
        }
        for (int f16 = 0; f16 < 2; f16++) {
            const void *kt[1] = { f16 ? (const void *)kh : kf }, *vt[1] = { f16 ? (const void *)vh : vf };
            const void *kt2[1] = { f16 ? (const void *)vh : vf }, *vt2[1] = { f16 ? (const void *)kh : kf }; /* another sequence */
            cdx_attn_shape s = { .n_head = nh, .n_kv_head = nkv, .head_dim = hd, .kv_stride = stride, .block = n,
                                 .scale = 0.125f, .kv_type = f16 ? CDX_TYPE_F16 : CDX_TYPE_F32 };
            /* rows 0..NR-2: a prompt's positions 519..598 of sequence A; row NR-1: sequence B's 599 */
            cdx_attn_row rows[NR];
            for (int i = 0; i < NR; i++)
                rows[i] = (cdx_attn_row){ .q = q + i * nh * hd, .k = i < NR - 1 ? kt : kt2,
                                          .v = i < NR - 1 ? vt : vt2, .lo = 0, .hi = i < NR - 1 ? 519 + i : n - 1,
                                          .out = one + i * nh * hd };
            /* each row alone, one thread */
            cdx_pool *p1;
            REQUIRE(cdx_pool_create(1, &p1, &e) == CDX_OK);
            for (int i = 0; i < NR; i++)
                REQUIRE(cdx_attn(k, p1, &s, &rows[i], 1, &e) == CDX_OK);
            cdx_pool_destroy(p1);
            for (int ti = 0; ti < 4; ti++) {
                cdx_pool *pool;
                REQUIRE(cdx_pool_create(nthr[ti], &pool, &e) == CDX_OK);
                cdx_attn_row r2[NR];
                /* B's row first, then A's prompt cut at 3 rows (tiles not aligned with the prompt) */
                r2[0] = rows[NR - 1];
                for (int i = 0; i < NR - 1; i++)
                    r2[1 + i] = rows[i];
                for (int i = 0; i < NR; i++)
                    r2[i].out = out + (i == 0 ? NR - 1 : i - 1) * nh * hd;
                for (int i = 0; i < NR * nh * hd; i++)
                    out[i] = NAN;
                REQUIRE(cdx_attn(k, pool, &s, r2, 4, &e) == CDX_OK);
                REQUIRE(cdx_attn(k, pool, &s, r2 + 4, NR - 4, &e) == CDX_OK);
                bad += memcmp(out, one, sizeof(float) * NR * nh * hd) != 0;
                runs++;
                cdx_pool_destroy(pool);
            }
        }
    }
    CHECKF(bad == 0, "%d of %d runs gave other bits than each row alone on one thread", bad, runs);
    CHECK(runs >= 8);
    free(kf); free(vf); free(kh); free(vh); free(q); free(out); free(one);
}

int main(void)
{
    RUN("rmsnorm and softmax match double precision on every ISA", rmsnorm_and_softmax_match_double);
    RUN("blocked attention matches a naive softmax (GQA, windows, block edges)", attention_matches_naive_softmax);
    RUN("attention refuses bad shapes and rows", attention_refuses_bad_shapes_and_rows);
    RUN("fused f32 attention rows give the primitives' bits", fused_attention_rows_match_primitives_bit_for_bit);
    RUN("fused f16 attention rows give the primitives' bits", fused_f16_attention_rows_match_primitives_bit_for_bit);
    RUN("attention bits do not depend on the thread count or the rows beside", attention_bits_do_not_depend_on_threads_or_batch);
    return t_done("attn");
}
