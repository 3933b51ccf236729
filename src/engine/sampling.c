/* Token sampling: repetition / presence / frequency penalties, top-k, top-p, min-p, temperature, then a seeded draw.
 * The order and the penalty rule follow llama.cpp's default sampler chain. */
#include "caldrix/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SELECT_MAX 256 /* top-k up to this selects in one pass; above it (or none) sorts all */

struct cdx_sampler {
    cdx_sampler_params p;
    int64_t n_vocab;
    uint64_t rng;
    float *work;        /* [n_vocab] penalised logits */
    int32_t *ids;       /* [n_vocab] candidate ids */
    float *probs;       /* [n_vocab] */
    cdx_logit_bias *bias; /* [p.n_bias], owned (p.bias points here) */
    uint64_t *radix;    /* [2 n_vocab] a whole-vocabulary sort's keys (top-k none or over SELECT_MAX) */
};

cdx_sampler_params cdx_sampler_defaults(void)
{
    return (cdx_sampler_params){ .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                 .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0 };
}

int cdx_sampler_create(const cdx_sampler_params *p, int64_t n_vocab, cdx_sampler **out, cdx_err *err)
{
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > (1 << 24))
        return cdx_err_set(err, CDX_EINVAL, "vocabulary of %lld tokens is out of range", (long long)n_vocab);
    if (!(p->repeat_penalty > 0) || isnan(p->temp) || isnan(p->top_p) || isnan(p->min_p))
        return cdx_err_set(err, CDX_EINVAL, "sampler settings out of range (repeat penalty %g must be > 0)",
                           (double)p->repeat_penalty);
    if (p->n_bias < 0 || (p->n_bias > 0 && !p->bias))
        return cdx_err_set(err, CDX_EINVAL, "logit bias: %d entries", (int)p->n_bias);
    for (int32_t i = 0; i < p->n_bias; i++)
        if (p->bias[i].id < 0 || p->bias[i].id >= n_vocab || !isfinite(p->bias[i].bias))
            return cdx_err_set(err, CDX_EINVAL, "logit bias %g for token %d: the token must be in [0, %lld) and the "
                               "bias finite", (double)p->bias[i].bias, (int)p->bias[i].id, (long long)n_vocab);
    cdx_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->rng = p->seed ^ 0x9E3779B97F4A7C15ull;
    s->work = malloc((size_t)n_vocab * sizeof(float));
    s->ids = malloc((size_t)n_vocab * sizeof(int32_t));
    s->probs = malloc((size_t)n_vocab * sizeof(float));
    if (p->n_bias) {
        s->bias = malloc((size_t)p->n_bias * sizeof *s->bias);
        if (s->bias)
            memcpy(s->bias, p->bias, (size_t)p->n_bias * sizeof *s->bias);
    }
    s->p.bias = s->bias;
    const bool sorts_all = p->temp > 0 && !(p->top_k > 0 && p->top_k < n_vocab && p->top_k <= SELECT_MAX);
    if (sorts_all)
        s->radix = malloc(2 * (size_t)n_vocab * sizeof *s->radix);
    if (!s->work || !s->ids || !s->probs || (p->n_bias && !s->bias) || (sorts_all && !s->radix)) {
        cdx_sampler_free(s);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    *out = s;
    return CDX_OK;
}

void cdx_sampler_free(cdx_sampler *s)
{
    if (!s)
        return;
    free(s->work);
    free(s->ids);
    free(s->probs);
    free(s->bias);
    free(s->radix);
    free(s);
}

/* splitmix64: small, seedable, good enough for sampling */
static uint64_t next_u64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int32_t cdx_argmax(const float *logits, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return (int32_t)best;
}

/* A logit as an unsigned key that orders highest first: -0 is taken as +0, as the comparison
 * `a > b` sees them (NaN logits are not expected). */
static inline uint32_t desc_key(float v)
{
    if (v == 0)
        v = 0;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u = (u & 0x80000000u) ? ~u : u | 0x80000000u; /* ascending with v */
    return ~u;
}

/* ids = 0..n-1 ordered by value, highest first, equal values by id: a stable radix sort of
 * (key << 32 | id) on the key's four bytes, ids ascending to start with, so ties stay in id order.
 * Linear in n (a comparison sort of 150k logits cost ~10 ms a token). */
static void radix_desc(const float *vals, int32_t *ids, uint64_t *a, uint64_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        a[i] = (uint64_t)desc_key(vals[i]) << 32 | (uint32_t)i;
    for (int shift = 32; shift < 64; shift += 8) {
        int64_t count[257] = { 0 };
        for (int64_t i = 0; i < n; i++)
            count[(a[i] >> shift & 0xFF) + 1]++;
        if (count[(a[0] >> shift & 0xFF) + 1] == n)
            continue; /* every key has this digit */
        for (int d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (int64_t i = 0; i < n; i++)
            b[count[a[i] >> shift & 0xFF]++] = a[i];
        uint64_t *t = a; a = b; b = t;
    }
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)(uint32_t)a[i];
}

/* ids[0..k) (k 0: all n) = the ids by value, highest first, equal values by id. */
static void sort_desc(cdx_sampler *s, const float *vals, int64_t n, int64_t k)
{
    if (k > 0 && k <= SELECT_MAX) /* one pass keeping the best k sorted: most fall below the k-th */
        cdx_top_logits(vals, n, (int)k, s->ids, s->probs);
    else
        radix_desc(vals, s->ids, s->radix, s->radix + n, n);
}

void cdx_top_logits(const float *logits, int64_t n, int k, int32_t *ids, float *vals)
{
    if (k <= 0)
        return;
    if (k > n)
        k = (int)n;
    /* keep a sorted list of the best k seen so far */
    int m = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = logits[i];
        if (m == k && !(v > vals[m - 1]))
            continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && v > vals[j - 1]) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = (int32_t)i;
    }
}

int32_t cdx_sampler_sample(cdx_sampler *s, const float *logits, const int32_t *history, int64_t n_history)
{
    const cdx_sampler_params *p = &s->p;
    int64_t n = s->n_vocab;
    float *w = s->work;
    memcpy(w, logits, (size_t)n * sizeof(float));
    for (int32_t i = 0; i < p->n_bias; i++)
        w[p->bias[i].id] += p->bias[i].bias;
    const bool pen = p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0;
    if (pen && history && n_history > 0) {
        int64_t from = p->repeat_last_n > 0 && n_history > p->repeat_last_n ? n_history - p->repeat_last_n : 0;
        /* each distinct recent token is penalised once by the repeat and presence penalties
         * (llama.cpp's rule), and by the frequency penalty once per occurrence */
        for (int64_t i = from; i < n_history; i++) {
            int32_t t = history[i];
            if (t < 0 || t >= n)
                continue;
            bool seen = false;
            for (int64_t j = from; j < i && !seen; j++)
                seen = history[j] == t;
            if (seen)
                continue;
            int64_t count = 0;
            for (int64_t j = i; j < n_history; j++)
                count += history[j] == t;
            if (p->repeat_penalty != 1.0f)
                w[t] = w[t] > 0 ? w[t] / p->repeat_penalty : w[t] * p->repeat_penalty;
            w[t] -= (float)count * p->frequency_penalty + p->presence_penalty;
        }
    }
    if (p->temp <= 0)
        return cdx_argmax(w, n);

    int64_t m = n;
    int64_t k = p->top_k > 0 && p->top_k < n ? p->top_k : 0;
    sort_desc(s, w, n, k);
    if (k)
        m = k;
    /* probabilities of the survivors (before temperature, as llama.cpp's top-p/min-p see them) */
    float mx = w[s->ids[0]];
    double sum = 0;
    for (int64_t i = 0; i < m; i++) {
        s->probs[i] = expf(w[s->ids[i]] - mx);
        sum += s->probs[i];
    }
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int64_t i = 0; i < m; i++) {
            cum += s->probs[i] / sum;
            if (cum >= p->top_p) {
                m = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0) {
        float thresh = p->min_p * s->probs[0];
        int64_t keep = 1;
        while (keep < m && s->probs[keep] >= thresh)
            keep++;
        m = keep;
    }
    sum = 0;
    for (int64_t i = 0; i < m; i++) {
        s->probs[i] = expf((w[s->ids[i]] - mx) / p->temp);
        sum += s->probs[i];
    }
    double r = (double)(next_u64(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
    double acc = 0;
    for (int64_t i = 0; i < m; i++) {
        acc += s->probs[i];
        if (r < acc)
            return s->ids[i];
    }
    return s->ids[m - 1];
}
