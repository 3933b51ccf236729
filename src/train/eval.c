/* Evaluation: perplexity and KL divergence as llama.cpp's llama-perplexity computes them
 * (tools/perplexity/perplexity.cpp: perplexity(), kl_divergence() and their log_softmax helpers),
 * over the model layer's forward pass. The sums are taken row by row in order (llama.cpp's worker
 * threads add theirs in whatever order they finish; the figures agree to rounding). */
#include "caldrix/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PPL_BATCH 512 /* tokens per forward pass within a window (llama-perplexity's -b default 2048) */
#define PPL_CTX_MAX ((int64_t)1 << 20)

cdx_ppl_opts cdx_ppl_defaults(void)
{
    return (cdx_ppl_opts){ .n_ctx = 512, .bos_id = -1 };
}

/* ---- one window through the forward pass ---- */

typedef struct {
    const cdx_model *m;
    cdx_forward_ctx *fc;
    cdx_kv kv;
    int64_t n_ctx, first, n_vocab, n_batch;
    int32_t *ids;  /* [n_ctx] */
    bool *want;    /* [n_ctx]: positions >= first */
    float *logits; /* [n_ctx - first][n_vocab] */
} ppl_runner;

static void runner_free(ppl_runner *w)
{
    cdx_forward_ctx_free(w->fc);
    cdx_kv_free(&w->kv);
    free(w->ids);
    free(w->want);
    free(w->logits);
}

static int runner_init(ppl_runner *w, const cdx_model *m, int64_t n_ctx, const cdx_ppl_opts *o, cdx_err *err)
{
    memset(w, 0, sizeof *w);
    const cdx_hparams *hp = cdx_model_hparams(m);
    w->m = m;
    w->n_ctx = n_ctx;
    w->first = n_ctx / 2;
    w->n_vocab = hp->n_vocab;
    w->n_batch = n_ctx < PPL_BATCH ? n_ctx : PPL_BATCH;
    size_t n_logits;
    if (!cdx_mul_size((size_t)(n_ctx - w->first), (size_t)hp->n_vocab, &n_logits) ||
        !cdx_mul_size(n_logits, sizeof(float), &n_logits))
        return cdx_err_set(err, CDX_ERANGE, "a window of %lld positions over %lld logits is too large",
                           (long long)n_ctx, (long long)hp->n_vocab);
    w->ids = malloc((size_t)n_ctx * sizeof *w->ids);
    w->want = malloc((size_t)n_ctx * sizeof *w->want);
    w->logits = malloc(n_logits);
    if (!w->ids || !w->want || !w->logits) {
        runner_free(w);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for the logits of a window of %lld (%zu MiB)",
                           (long long)n_ctx, n_logits >> 20);
    }
    for (int64_t k = 0; k < n_ctx; k++)
        w->want[k] = k >= w->first;
    int rc = cdx_kv_init_model(&w->kv, m, n_ctx, err);
    if (!rc)
        rc = cdx_forward_ctx_create(m, w->n_batch, o->n_threads, o->kernels, &w->fc, err);
    if (rc)
        runner_free(w);
    return rc;
}

/* tokens[0..n_ctx) from an empty cache, the first replaced by bos (>= 0); the logits of positions
 * first..n_ctx-1 land in w->logits */
static int runner_window(ppl_runner *w, const int32_t *tokens, int32_t bos, cdx_err *err)
{
    memcpy(w->ids, tokens, (size_t)w->n_ctx * sizeof *w->ids);
    if (bos >= 0)
        w->ids[0] = bos;
    w->kv.n_past = 0;
    if (w->kv.state)
        cdx_model_state_reset(w->m, w->kv.state);
    cdx_kv *kvp = &w->kv;
    int64_t rows = 0;
    for (int64_t off = 0; off < w->n_ctx; off += w->n_batch) {
        int64_t n = w->n_ctx - off < w->n_batch ? w->n_ctx - off : w->n_batch;
        cdx_batch b = { .n = n, .tokens = w->ids + off, .want_logits = w->want + off };
        int rc = cdx_forward(w->fc, &kvp, 1, &b, w->logits + (size_t)rows * w->n_vocab, err);
        if (rc)
            return rc;
        for (int64_t k = off; k < off + n; k++)
            rows += w->want[k];
    }
    return CDX_OK;
}

/* ---- llama.cpp's per-row arithmetic (float where it is float, double where it is double) ---- */

/* log_softmax(n_vocab, logits, tok): -log p(tok) */
static double row_nll(const float *logits, int64_t n_vocab, int32_t tok)
{
    float max_logit = logits[0];
    for (int64_t i = 1; i < n_vocab; i++)
        max_logit = fmaxf(max_logit, logits[i]);
    double sum_exp = 0.0;
    for (int64_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
    return -(logits[tok] - max_logit - log(sum_exp));
}

/* nearest_int of perplexity.cpp: round to nearest through the float mantissa */
static int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* log_softmax(n_vocab, logits, log_prob, tok): the base row (scale, min log-prob, then uint16 steps
 * above the min over at most 16 nats) and -log p(tok) */
static double row_save(const float *logits, int64_t n_vocab, uint16_t *log_prob, int32_t tok)
{
    float max_logit = logits[0], min_logit = logits[0];
    for (int64_t i = 1; i < n_vocab; i++) {
        max_logit = fmaxf(max_logit, logits[i]);
        min_logit = fminf(min_logit, logits[i]);
    }
    min_logit = fmaxf(min_logit, max_logit - 16);
    double sum_exp = 0.0;
    for (int64_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    const float scale = (max_logit - min_logit) / 65535.f;
    memcpy(log_prob, &scale, 4);
    memcpy(log_prob + 2, &min_log_prob, 4);
    log_prob += 4;
    if (scale) {
        const float inv_scale = 1 / scale;
        for (int64_t i = 0; i < n_vocab; i++)
            log_prob[i] = logits[i] > min_logit ? (uint16_t)nearest_int(inv_scale * (logits[i] - min_logit)) : 0;
    } else {
        memset(log_prob, 0, (size_t)n_vocab * sizeof *log_prob);
    }
    return max_logit + log_sum_exp - logits[tok];
}

typedef struct {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base, sum_kld, sum_kld2;
    double sum_p_diff, sum_p_diff2, sum_p_diff4;
    float max_p_diff;
    size_t n_same_top, count;
} kld_sums;

/* log_softmax(n_vocab, logits, base_log_prob, tok, kld): returns this row's KL, *p_diff p - p_base */
static double row_kl(const float *logits, int64_t n_vocab, const uint16_t *base, int32_t tok, kld_sums *s,
                     float *p_diff_out)
{
    float max_logit = logits[0];
    int64_t imax = 0;
    for (int64_t i = 1; i < n_vocab; i++)
        if (logits[i] > max_logit) {
            max_logit = logits[i];
            imax = i;
        }
    double sum_exp = 0.0;
    for (int64_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    float scale, min_log_prob;
    memcpy(&scale, base, 4);
    memcpy(&min_log_prob, base + 2, 4);
    base += 4;
    const float nll = max_logit + log_sum_exp - logits[tok];
    s->sum_nll += nll;
    s->sum_nll2 += nll * nll;
    const float nll_base = -(scale * base[tok] + min_log_prob);
    s->sum_nll_base += nll_base;
    s->sum_nll_base2 += nll_base * nll_base;
    s->sum_nll_nll_base += nll * nll_base;
    max_logit += log_sum_exp;
    double sum = 0;
    int64_t imax_base = -1;
    float p_log_base_max = 0;
    for (int64_t i = 0; i < n_vocab; i++) {
        const float p_log_base = scale * base[i] + min_log_prob;
        if (i == 0 || p_log_base > p_log_base_max) {
            p_log_base_max = p_log_base;
            imax_base = i;
        }
        if (p_log_base > -16.f)
            sum += expf(p_log_base) * (p_log_base - logits[i] + max_logit);
    }
    s->sum_kld += sum;
    s->sum_kld2 += sum * sum;
    s->count++;
    s->n_same_top += imax == imax_base;
    const float p_diff = expf(-nll) - expf(-nll_base);
    s->sum_p_diff += p_diff;
    const double p_diff2 = (double)p_diff * p_diff;
    s->sum_p_diff2 += p_diff2;
    s->sum_p_diff4 += p_diff2 * p_diff2;
    s->max_p_diff = fmaxf(s->max_p_diff, fabsf(p_diff));
    *p_diff_out = p_diff;
    return sum;
}

/* mean_and_uncertainty of kl_divergence() */
static void mean_unc(double sum, double sum2, size_t count, double *f, double *df)
{
    *f = count ? sum / (double)count : 0;
    double v = count ? sum2 / (double)count - *f * *f : 0;
    *df = v > 0 && count > 10 ? sqrt(v / (double)(count - 1)) : 0.;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* percentile of kl_divergence(): linear between the two nearest sorted values */
static double percentile(const float *v, size_t n, float fraction)
{
    if (fraction <= 0)
        return v[0];
    if (fraction >= 1)
        return v[n - 1];
    float p = fraction * (float)(n - 1);
    size_t ip = (size_t)p;
    p -= (float)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

static int check_ctx(const cdx_model *m, int64_t n_ctx, const char *what, cdx_err *err)
{
    const cdx_hparams *hp = cdx_model_hparams(m);
    if (n_ctx < 4 || n_ctx > PPL_CTX_MAX)
        return cdx_err_set(err, CDX_EINVAL, "%s of %lld is out of range (4..%lld)", what, (long long)n_ctx,
                           (long long)PPL_CTX_MAX);
    if (hp->n_ctx_train > 0 && n_ctx > hp->n_ctx_train)
        return cdx_err_set(err, CDX_EINVAL, "%s of %lld is beyond the model's trained context of %lld", what,
                           (long long)n_ctx, (long long)hp->n_ctx_train);
    return CDX_OK;
}

/* ---- perplexity ---- */

int cdx_perplexity(const cdx_model *m, const int32_t *tokens, int64_t n_tokens, const cdx_ppl_opts *o,
                   cdx_ppl_result *r, cdx_err *err)
{
    memset(r, 0, sizeof *r);
    const cdx_hparams *hp = cdx_model_hparams(m);
    const int64_t n_ctx = o->n_ctx, n_vocab = hp->n_vocab;
    int rc = check_ctx(m, n_ctx, "--ctx", err);
    if (rc)
        return rc;
    if (n_tokens < 2 * n_ctx)
        return cdx_err_set(err, CDX_EINVAL,
                           "the text is %lld tokens; a context of %lld needs at least %lld (two windows)",
                           (long long)n_tokens, (long long)n_ctx, (long long)(2 * n_ctx));
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return cdx_err_set(err, CDX_EINVAL, "token %lld is id %d, outside the vocabulary of %lld", (long long)i,
                               tokens[i], (long long)n_vocab);
    int64_t n_chunk = n_tokens / n_ctx;
    if (o->n_chunks_max > 0 && o->n_chunks_max < n_chunk)
        n_chunk = o->n_chunks_max;
    if (n_chunk > INT32_MAX || n_vocab > INT32_MAX)
        return cdx_err_set(err, CDX_ERANGE, "%lld windows of %lld logits do not fit llama.cpp's layout",
                           (long long)n_chunk, (long long)n_vocab);
    ppl_runner w;
    if ((rc = runner_init(&w, m, n_ctx, o, err)))
        return rc;
    const int64_t first = w.first, n_row = n_ctx - 1 - first;
    const size_t nv = 2 * (((size_t)n_vocab + 1) / 2) + 4; /* uint16 per row: scale, min, the log-probs */
    uint16_t *rows = NULL;
    FILE *out = NULL;
    if (o->save_base) {
        if (!(rows = malloc((size_t)n_row * nv * sizeof *rows))) {
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto done;
        }
        if (!(out = fopen(o->save_base, "wb"))) {
            rc = cdx_err_set(err, CDX_EIO, "%s: cannot create the base log-probabilities file", o->save_base);
            goto done;
        }
        uint32_t c32 = (uint32_t)n_ctx;
        int32_t v32 = (int32_t)n_vocab, k32 = (int32_t)n_chunk;
        if (fwrite("_logits_", 1, 8, out) != 8 || fwrite(&c32, 4, 1, out) != 1 || fwrite(&v32, 4, 1, out) != 1 ||
            fwrite(&k32, 4, 1, out) != 1 ||
            fwrite(tokens, sizeof *tokens, (size_t)(n_chunk * n_ctx), out) != (size_t)(n_chunk * n_ctx)) {
            rc = cdx_err_set(err, CDX_EIO, "%s: write failed", o->save_base);
            goto done;
        }
    }
    double nll = 0, nll2 = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < n_chunk; i++) {
        const int32_t *win = tokens + i * n_ctx;
        if ((rc = runner_window(&w, win, o->bos_id, err)))
            goto done;
        for (int64_t j = 0; j < n_row; j++) {
            const float *lg = w.logits + (size_t)j * n_vocab;
            const int32_t next = win[first + j + 1];
            double v = rows ? row_save(lg, n_vocab, rows + (size_t)j * nv, next) : row_nll(lg, n_vocab, next);
            nll += v;
            nll2 += v * v;
        }
        if (out && fwrite(rows, sizeof *rows, (size_t)n_row * nv, out) != (size_t)n_row * nv) {
            rc = cdx_err_set(err, CDX_EIO, "%s: write failed", o->save_base);
            goto done;
        }
        count += n_row;
        if (o->on_chunk) {
            cdx_ppl_progress p = { .chunk = i + 1, .n_chunks = n_chunk, .count = count, .ppl = exp(nll / count) };
            o->on_chunk(o->user, &p);
        }
    }
    r->n_ctx = n_ctx;
    r->n_tokens = n_tokens;
    r->n_chunks = n_chunk;
    r->count = count;
    nll /= count;
    nll2 = nll2 / count - nll * nll;
    r->ppl = exp(nll);
    r->ppl_err = nll2 > 0 ? sqrt(nll2 / (count - 1)) * r->ppl : 0;
done:
    if (out && fclose(out) && !rc)
        rc = cdx_err_set(err, CDX_EIO, "%s: write failed", o->save_base);
    if (rc && out)
        remove(o->save_base);
    free(rows);
    runner_free(&w);
    return rc;
}

/* ---- KL divergence against a saved base ---- */

int cdx_kl_divergence(const cdx_model *m, const char *base_path, const cdx_ppl_opts *o, cdx_ppl_result *r,
                      cdx_err *err)
{
    memset(r, 0, sizeof *r);
    const cdx_hparams *hp = cdx_model_hparams(m);
    const int64_t n_vocab = hp->n_vocab;
    FILE *in = fopen(base_path, "rb");
    if (!in)
        return cdx_err_set(err, CDX_EIO, "%s: cannot open the base log-probabilities file", base_path);
    char magic[8];
    uint32_t c32 = 0;
    int32_t v32 = 0, k32 = 0;
    int rc = CDX_OK;
    int32_t *tokens = NULL;
    uint16_t *rows = NULL;
    float *kld_values = NULL, *p_diff_values = NULL;
    ppl_runner w = { 0 };
    bool have_runner = false;
    if (fread(magic, 1, 8, in) != 8 || memcmp(magic, "_logits_", 8) || fread(&c32, 4, 1, in) != 1 ||
        fread(&v32, 4, 1, in) != 1 || fread(&k32, 4, 1, in) != 1) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: not a base log-probabilities file (no \"_logits_\" header)", base_path);
        goto done;
    }
    const int64_t n_ctx = c32, n_chunk = k32;
    if (v32 != n_vocab) {
        rc = cdx_err_set(err, CDX_EINVAL, "%s: n_vocab is %d; the model's vocabulary is %lld", base_path, v32,
                         (long long)n_vocab);
        goto done;
    }
    if ((rc = check_ctx(m, n_ctx, "the base file's n_ctx", err)))
        goto done;
    if (n_chunk < 1 || n_chunk > PPL_CTX_MAX) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: n_chunk is %lld (1..%lld)", base_path, (long long)n_chunk,
                         (long long)PPL_CTX_MAX);
        goto done;
    }
    const int64_t first = n_ctx / 2, n_row = n_ctx - 1 - first;
    const size_t nv = 2 * (((size_t)n_vocab + 1) / 2) + 4;
    size_t n_tok, row_bytes, need;
    if (!cdx_mul_size((size_t)n_ctx, (size_t)n_chunk, &n_tok) || !cdx_mul_size((size_t)n_row, nv * 2, &row_bytes) ||
        !cdx_mul_size(row_bytes, (size_t)n_chunk, &need) || need + n_tok * 4 < need) {
        rc = cdx_err_set(err, CDX_ERANGE, "%s: %lld windows of %lld are too large", base_path, (long long)n_chunk,
                         (long long)n_ctx);
        goto done;
    }
    need += n_tok * 4;
    if (fseek(in, 0, SEEK_END) || ftell(in) < 0 || (size_t)ftell(in) - 20 < need || fseek(in, 20, SEEK_SET)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: %lld windows of %lld over %lld tokens need %zu bytes after the header; "
                         "the file is shorter", base_path, (long long)n_chunk, (long long)n_ctx, (long long)n_vocab, need);
        goto done;
    }
    tokens = malloc(n_tok * sizeof *tokens);
    rows = malloc(row_bytes);
    kld_values = malloc((size_t)(n_row * n_chunk) * sizeof *kld_values);
    p_diff_values = malloc((size_t)(n_row * n_chunk) * sizeof *p_diff_values);
    if (!tokens || !rows || !kld_values || !p_diff_values) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory for %s", base_path);
        goto done;
    }
    if (fread(tokens, sizeof *tokens, n_tok, in) != n_tok) {
        rc = cdx_err_set(err, CDX_EIO, "%s: read failed", base_path);
        goto done;
    }
    for (size_t i = 0; i < n_tok; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: token %zu is id %d, outside the vocabulary of %lld", base_path, i,
                             tokens[i], (long long)n_vocab);
            goto done;
        }
    if ((rc = runner_init(&w, m, n_ctx, o, err)))
        goto done;
    have_runner = true;
    kld_sums s = { 0 };
    for (int64_t i = 0; i < n_chunk; i++) {
        const int32_t *win = tokens + i * n_ctx;
        if ((rc = runner_window(&w, win, o->bos_id, err)))
            goto done;
        if (fread(rows, 1, row_bytes, in) != row_bytes) {
            rc = cdx_err_set(err, CDX_EIO, "%s: reading the log-probs of window %lld failed", base_path, (long long)i);
            goto done;
        }
        for (int64_t j = 0; j < n_row; j++) {
            size_t at = s.count;
            kld_values[at] = (float)row_kl(w.logits + (size_t)j * n_vocab, n_vocab, rows + (size_t)j * nv,
                                           win[first + j + 1], &s, &p_diff_values[at]);
        }
        if (o->on_chunk) {
            double lp, dlp, lb, dlb, kl, dkl;
            mean_unc(s.sum_nll, s.sum_nll2, s.count, &lp, &dlp);
            mean_unc(s.sum_nll_base, s.sum_nll_base2, s.count, &lb, &dlb);
            mean_unc(s.sum_kld, s.sum_kld2, s.count, &kl, &dkl);
            cdx_ppl_progress p = { .chunk = i + 1, .n_chunks = n_chunk, .count = (int64_t)s.count, .ppl = exp(lp),
                                   .ln_ppl_ratio = lp - lb, .kld = kl,
                                   .same_top = (double)s.n_same_top / (double)s.count };
            o->on_chunk(o->user, &p);
        }
    }
    /* the final statistics, as kl_divergence() prints them */
    const size_t n = s.count;
    double lp, dlp, lb, dlb, pm, dpm;
    mean_unc(s.sum_nll, s.sum_nll2, n, &lp, &dlp);
    mean_unc(s.sum_nll_base, s.sum_nll_base2, n, &lb, &dlb);
    const double cov = n < 10 ? 0.0
                              : (s.sum_nll_nll_base / n - (s.sum_nll / n) * (s.sum_nll_base / n)) / (double)(n - 1);
    r->kl = true;
    r->n_ctx = n_ctx;
    r->n_tokens = (int64_t)n_tok;
    r->n_chunks = n_chunk;
    r->count = (int64_t)n;
    r->ppl = exp(lp);
    r->ppl_err = r->ppl * dlp;
    r->ppl_base = exp(lb);
    r->ppl_base_err = r->ppl_base * dlb;
    r->ln_ppl_ratio = lp - lb;
    r->ln_ppl_ratio_err = sqrt(fmax(0, dlp * dlp + dlb * dlb - 2.0 * cov));
    r->ppl_ratio = exp(r->ln_ppl_ratio);
    r->ppl_ratio_err = r->ppl_ratio * r->ln_ppl_ratio_err;
    mean_unc(s.sum_kld, s.sum_kld2, n, &r->kld, &r->kld_err);
    mean_unc(s.sum_p_diff, s.sum_p_diff2, n, &r->p_diff, &r->p_diff_err);
    mean_unc(s.sum_p_diff2, s.sum_p_diff4, n, &pm, &dpm);
    r->p_diff_rms = sqrt(pm);
    r->p_diff_rms_err = r->p_diff_rms > 0 ? 0.5 / r->p_diff_rms * dpm : 0;
    r->p_diff_max = s.max_p_diff;
    r->same_top = (double)s.n_same_top / (double)n;
    r->same_top_err = n > 1 ? sqrt(r->same_top * (1 - r->same_top) / (double)(n - 1)) : 0;
    qsort(kld_values, n, sizeof *kld_values, cmp_float);
    r->kld_max = kld_values[n - 1];
    r->kld_min = kld_values[0];
    r->kld_median = n % 2 == 0 ? 0.5f * (kld_values[n / 2] + kld_values[n / 2 - 1]) : kld_values[n / 2];
    r->kld_p99 = percentile(kld_values, n, 0.990f);
    r->kld_p90 = percentile(kld_values, n, 0.900f);
    r->kld_p10 = percentile(kld_values, n, 0.100f);
done:
    fclose(in);
    free(tokens);
    free(rows);
    free(kld_values);
    free(p_diff_values);
    if (have_runner)
        runner_free(&w);
    return rc;
}
