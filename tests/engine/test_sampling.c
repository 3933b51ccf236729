/* The sampler's candidate order against a plain comparison sort: the order (logit highest first,
 * equal logits by id) decides the top-k, top-p and min-p cuts and the draw, so cdx_sampler_sample
 * must give what a sampler over that qsort order gives, token for token, over vocabularies of
 * 5 to 150k with many equal logits, -0 beside +0, -inf (a grammar's mask) and every cut. The
 * reference below is the textbook algorithm (llama.cpp's chain order: top-k, then top-p and
 * min-p on the untempered probabilities, then temperature), written independently of src/. */
#include "caldrix.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t ref_next(uint64_t *x) /* splitmix64, as the sampler's contract (seeded draws) */
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const float *g_vals;
static int by_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float vx = g_vals[x], vy = g_vals[y];
    if (vx != vy)
        return vx > vy ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int32_t ref_sample(const cdx_sampler_params *p, uint64_t *rng, const float *w, int64_t n, int32_t *ids,
                          float *probs)
{
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)i;
    g_vals = w;
    qsort(ids, (size_t)n, sizeof *ids, by_desc);
    int64_t m = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    const float mx = w[ids[0]];
    double sum = 0;
    for (int64_t i = 0; i < m; i++)
        sum += probs[i] = expf(w[ids[i]] - mx);
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int64_t i = 0; i < m; i++)
            if ((cum += probs[i] / sum) >= p->top_p) {
                m = i + 1;
                break;
            }
    }
    if (p->min_p > 0) {
        int64_t keep = 1;
        while (keep < m && probs[keep] >= p->min_p * probs[0])
            keep++;
        m = keep;
    }
    sum = 0;
    for (int64_t i = 0; i < m; i++)
        sum += probs[i] = expf((w[ids[i]] - mx) / p->temp);
    const double r = (double)(ref_next(rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
    double acc = 0;
    for (int64_t i = 0; i < m; i++)
        if (r < (acc += probs[i]))
            return ids[i];
    return ids[m - 1];
}

static uint64_t lcg(uint64_t *x) { return (*x = *x * 6364136223846793005ull + 1442695040888963407ull) >> 33; }

/* Logits with ties: values on a coarse grid (few distinct), some -0 and +0, some -inf. */
static void make_logits(float *w, int64_t n, int grid, uint64_t *x)
{
    for (int64_t i = 0; i < n; i++) {
        const uint64_t r = lcg(x);
        w[i] = (float)((int)(r % (unsigned)grid) - grid / 2) * 0.25f;
        if (r % 97 == 0)
            w[i] = -INFINITY;
        if (w[i] == 0 && (r & 1))
            w[i] = -0.0f;
    }
}

static void sampler_equals_the_sorted_reference(void)
{
    const int64_t sizes[] = { 5, 300, 4099, 151669 };
    const int32_t top_ks[] = { 0, 1, 2, 40, 64, 65, 256, 257, 1000, 200000 };
    const float top_ps[] = { 1.0f, 0.95f, 0.5f };
    const float min_ps[] = { 0.0f, 0.05f };
    const int grids[] = { 3, 40, 4000 };
    int cases = 0, draws = 0, bad = 0;
    for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++) {
        const int64_t n = sizes[a];
        float *w = malloc((size_t)n * sizeof *w), *probs = malloc((size_t)n * sizeof *probs);
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        REQUIRE(w && probs && ids);
        uint64_t x = 12345 + (uint64_t)n;
        for (size_t b = 0; b < sizeof top_ks / sizeof *top_ks; b++)
            for (size_t c = 0; c < sizeof top_ps / sizeof *top_ps; c++)
                for (size_t d = 0; d < sizeof min_ps / sizeof *min_ps; d++)
                    for (size_t g = 0; g < sizeof grids / sizeof *grids; g++) {
                        cdx_sampler_params p = cdx_sampler_defaults();
                        p.temp = g == 1 ? 0.7f : 1.3f;
                        p.top_k = top_ks[b];
                        p.top_p = top_ps[c];
                        p.min_p = min_ps[d];
                        p.seed = 1000 + (uint64_t)cases;
                        cdx_sampler *s = NULL;
                        cdx_err err = {0};
                        REQUIRE(cdx_sampler_create(&p, n, &s, &err) == CDX_OK);
                        uint64_t rng = p.seed ^ 0x9E3779B97F4A7C15ull;
                        const int n_draws = n > 5000 ? 2 : 6;
                        for (int k = 0; k < n_draws; k++) {
                            make_logits(w, n, grids[g], &x);
                            const int32_t got = cdx_sampler_sample(s, w, NULL, 0);
                            const int32_t want = ref_sample(&p, &rng, w, n, ids, probs);
                            if (got != want && bad++ < 5)
                                CHECKF(0, "n %lld top-k %d top-p %g min-p %g grid %d draw %d: %d, the sorted "
                                       "reference %d", (long long)n, (int)p.top_k, (double)p.top_p, (double)p.min_p,
                                       grids[g], k, (int)got, (int)want);
                            draws++;
                        }
                        cdx_sampler_free(s);
                        cases++;
                    }
        free(w);
        free(probs);
        free(ids);
    }
    CHECKF(bad == 0, "%d of %d draws over %d settings differ from the sorted reference", bad, draws, cases);
}

/* The draws must reach past the first few candidates, or the order below them goes untested: with
 * top-k none, top-p 1 and a flat distribution over many equal logits, ids deep in the order win. */
static void draws_reach_deep_into_ties(void)
{
    const int64_t n = 151669;
    float *w = malloc((size_t)n * sizeof *w);
    REQUIRE(w);
    for (int64_t i = 0; i < n; i++)
        w[i] = (i % 3) ? 1.0f : 0.0f;
    cdx_sampler_params p = cdx_sampler_defaults();
    p.temp = 1;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.seed = 7;
    cdx_sampler *s = NULL;
    cdx_err err = {0};
    REQUIRE(cdx_sampler_create(&p, n, &s, &err) == CDX_OK);
    int deep = 0;
    for (int k = 0; k < 20; k++)
        deep += cdx_sampler_sample(s, w, NULL, 0) > 1000;
    cdx_sampler_free(s);
    free(w);
    CHECKF(deep >= 15, "%d of 20 draws past id 1000", deep);
}

int main(void)
{
    RUN("the sampler draws what a sampler over the qsort order draws (ties, -0, -inf, every cut)",
        sampler_equals_the_sorted_reference);
    RUN("draws over a flat distribution reach deep into the order", draws_reach_deep_into_ties);
    return t_done("sampling");
}
