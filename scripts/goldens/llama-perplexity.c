/* llama.cpp's llama-perplexity, for the goldens: tools/perplexity/perplexity.cpp's perplexity() and
 * kl_divergence() at the release node-llama-cpp 3.21.1 ships, ported line for line onto the shipped
 * libllama's C API (as bench/llamacpp/llama_bench.c calls it), with one sequence per decode
 * (n_seq 1, n_batch = n_ctx: the same windows and the same sums as the tool's parallel sequences)
 * and the worker threads' sums taken in order.
 *
 *   llama-perplexity LIBDIR MODEL.gguf TEXT CTX              the perplexity of TEXT
 *   llama-perplexity LIBDIR MODEL.gguf TEXT CTX --save BASE  the same, writing the base log-probs
 *                                                            (--kl-divergence-base BASE)
 *   llama-perplexity LIBDIR MODEL.gguf - 0 --kl BASE         KL of MODEL against BASE (--kl-divergence)
 * LIBDIR: node-llama-cpp's bins folder (ggml loads its CPU backend from there).
 *
 * Prints one JSON object. Settings: flash attention off, F32 KV cache, 2 threads, CPU only.
 * Built and run by scripts/goldens/llamacpp-perplexity.sh. */
#include "ggml-backend.h"
#include "llama.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(enum ggml_log_level level, const char *text, void *user) { (void)level; (void)text; (void)user; }

static int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* perplexity.cpp: log_softmax(n_vocab, logits, tok) -> -log p (the plain perplexity) */
static double nll_plain(int n_vocab, const float *logits, int tok)
{
    float max_logit = logits[0];
    for (int i = 1; i < n_vocab; ++i)
        max_logit = fmaxf(max_logit, logits[i]);
    double sum_exp = 0.0;
    for (int i = 0; i < n_vocab; ++i)
        sum_exp += expf(logits[i] - max_logit);
    return -(logits[tok] - max_logit - log(sum_exp));
}

/* perplexity.cpp: log_softmax(n_vocab, logits, log_prob, tok) (the base file's uint16 row) */
static double nll_save(int n_vocab, const float *logits, uint16_t *log_prob, int tok)
{
    float max_logit = logits[0], min_logit = logits[0];
    for (int i = 1; i < n_vocab; ++i) {
        max_logit = fmaxf(max_logit, logits[i]);
        min_logit = fminf(min_logit, logits[i]);
    }
    min_logit = fmaxf(min_logit, max_logit - 16);
    double sum_exp = 0.0;
    for (int i = 0; i < n_vocab; ++i)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = log(sum_exp);
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    const float scale = (max_logit - min_logit) / 65535.f;
    float *d = (float *)log_prob;
    d[0] = scale;
    d[1] = min_log_prob;
    log_prob += 4;
    if (scale) {
        const float inv_scale = 1 / scale;
        for (int i = 0; i < n_vocab; ++i)
            log_prob[i] = logits[i] > min_logit ? nearest_int(inv_scale * (logits[i] - min_logit)) : 0;
    } else {
        memset(log_prob, 0, n_vocab * sizeof(uint16_t));
    }
    return max_logit + log_sum_exp - logits[tok];
}

typedef struct {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base, sum_kld, sum_kld2;
    double sum_p_diff, sum_p_diff2, sum_p_diff4;
    float max_p_diff;
    size_t n_same_top, count;
} kld_result;

/* perplexity.cpp: log_softmax(n_vocab, logits, base_log_prob, tok, kld) */
static double kl_row(int n_vocab, const float *logits, const uint16_t *base_log_prob, int tok, kld_result *kld)
{
    float max_logit = logits[0];
    int imax = 0;
    for (int i = 1; i < n_vocab; ++i)
        if (logits[i] > max_logit) {
            max_logit = logits[i];
            imax = i;
        }
    double sum_exp = 0.0;
    for (int i = 0; i < n_vocab; ++i)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = log(sum_exp);
    const float *d = (const float *)base_log_prob;
    const float scale = d[0];
    const float min_log_prob = d[1];
    base_log_prob += 4;
    const float nll = max_logit + log_sum_exp - logits[tok];
    kld->sum_nll += nll;
    kld->sum_nll2 += nll * nll;
    const float nll_base = -(scale * base_log_prob[tok] + min_log_prob);
    kld->sum_nll_base += nll_base;
    kld->sum_nll_base2 += nll_base * nll_base;
    kld->sum_nll_nll_base += nll * nll_base;
    max_logit += log_sum_exp;
    double sum = 0;
    int imax_base = -1;
    float p_log_base_max = 0;
    for (int i = 0; i < n_vocab; ++i) {
        const float p_log_base = scale * base_log_prob[i] + min_log_prob;
        if (i == 0 || p_log_base > p_log_base_max) {
            p_log_base_max = p_log_base;
            imax_base = i;
        }
        if (p_log_base > -16.f) {
            const float p_base = expf(p_log_base);
            sum += p_base * (p_log_base - logits[i] + max_logit);
        }
    }
    kld->sum_kld += sum;
    kld->sum_kld2 += sum * sum;
    ++kld->count;
    if (imax == imax_base)
        ++kld->n_same_top;
    const float p_base = expf(-nll_base);
    const float p = expf(-nll);
    const float p_diff = p - p_base;
    kld->sum_p_diff += p_diff;
    const double p_diff2 = p_diff * p_diff;
    kld->sum_p_diff2 += p_diff2;
    kld->sum_p_diff4 += p_diff2 * p_diff2;
    kld->max_p_diff = fmaxf(kld->max_p_diff, fabsf(p_diff));
    return sum;
}

static void mean_unc(double sum, double sum2, size_t count, double *f, double *df)
{
    *f = count ? sum / count : 0;
    double v = count ? sum2 / count - *f * *f : 0;
    *df = v > 0 && count > 10 ? sqrt(v / (count - 1)) : 0.;
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n)
        n = 0;
    s[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return s;
}

/* one window: positions [0, n_ctx) of tokens (the first replaced by BOS when add_bos), logits of
 * positions >= first into out[(n_ctx - first)][n_vocab] */
static int decode_window(struct llama_context *ctx, const llama_token *tokens, int n_ctx, int first, bool add_bos,
                         llama_token bos, int n_vocab, float *out)
{
    llama_memory_clear(llama_get_memory(ctx), true);
    struct llama_batch batch = llama_batch_init(n_ctx, 0, 1);
    for (int k = 0; k < n_ctx; ++k) {
        batch.token[k] = k == 0 && add_bos ? bos : tokens[k];
        batch.pos[k] = k;
        batch.n_seq_id[k] = 1;
        batch.seq_id[k][0] = 0;
        batch.logits[k] = k >= first;
    }
    batch.n_tokens = n_ctx;
    int rc = llama_decode(ctx, batch);
    if (!rc)
        memcpy(out, llama_get_logits_ith(ctx, first), sizeof(float) * (size_t)(n_ctx - first) * n_vocab);
    llama_batch_free(batch);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 7) {
        fprintf(stderr, "usage: %s LIBDIR MODEL.gguf TEXT CTX [--save BASE | --kl BASE]\n", argv[0]);
        return 2;
    }
    const char *libdir = argv[1];
    argc--, argv++;
    const char *save = argc == 6 && !strcmp(argv[4], "--save") ? argv[5] : NULL;
    const char *klf = argc == 6 && !strcmp(argv[4], "--kl") ? argv[5] : NULL;
    int n_ctx = atoi(argv[3]);
    llama_log_set(quiet_log, NULL);
    ggml_backend_load_all_from_path(libdir);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "%s: cannot load\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const bool add_bos = llama_vocab_get_add_bos(vocab);
    llama_token *tokens = NULL;
    int n_tokens = 0, n_chunk = 0;
    FILE *in = NULL;
    if (klf) {
        in = fopen(klf, "rb");
        char check[8];
        uint32_t c32;
        int nv;
        if (!in || fread(check, 1, 8, in) != 8 || memcmp(check, "_logits_", 8) || fread(&c32, 4, 1, in) != 1 ||
            fread(&nv, 4, 1, in) != 1 || fread(&n_chunk, 4, 1, in) != 1 || nv != n_vocab) {
            fprintf(stderr, "%s: not a base log-prob file of this vocabulary\n", klf);
            return 1;
        }
        n_ctx = (int)c32;
        n_tokens = n_ctx * n_chunk;
        tokens = malloc(sizeof *tokens * (size_t)n_tokens);
        if (fread(tokens, sizeof *tokens, (size_t)n_tokens, in) != (size_t)n_tokens)
            return 1;
    } else {
        size_t len;
        char *text = read_text(argv[2], &len);
        if (!text)
            return 1;
        tokens = malloc(sizeof *tokens * (len + 2));
        n_tokens = llama_tokenize(vocab, text, (int32_t)len, tokens, (int32_t)len + 2, true, false);
        free(text);
        if (n_tokens < 2 * n_ctx) {
            fprintf(stderr, "need at least %d tokens, have %d\n", 2 * n_ctx, n_tokens);
            return 1;
        }
        n_chunk = n_tokens / n_ctx;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx)
        return 1;
    const int first = n_ctx / 2;
    const int nv = 2 * ((n_vocab + 1) / 2) + 4;
    float *logits = malloc(sizeof(float) * (size_t)(n_ctx - first) * n_vocab);
    uint16_t *log_probs = malloc(sizeof(uint16_t) * (size_t)n_ctx * nv);
    FILE *out = NULL;
    if (save) {
        out = fopen(save, "wb");
        uint32_t c32 = (uint32_t)n_ctx;
        fwrite("_logits_", 1, 8, out);
        fwrite(&c32, 4, 1, out);
        fwrite(&n_vocab, 4, 1, out);
        fwrite(&n_chunk, 4, 1, out);
        fwrite(tokens, sizeof *tokens, (size_t)n_chunk * n_ctx, out);
    }
    double nll = 0, nll2 = 0;
    int count = 0;
    kld_result kld = { 0 };
    double *kld_values = malloc(sizeof(double) * (size_t)(n_ctx - 1 - first) * n_chunk);
    printf("{\"n_ctx\": %d, \"n_vocab\": %d, \"n_tokens\": %d, \"n_chunks\": %d, \"add_bos\": %s, \"chunks\": [", n_ctx,
           n_vocab, n_tokens, n_chunk, add_bos ? "true" : "false");
    for (int i = 0; i < n_chunk; ++i) {
        const int start = i * n_ctx;
        if (decode_window(ctx, tokens + start, n_ctx, first, add_bos, llama_vocab_bos(vocab), n_vocab, logits)) {
            fprintf(stderr, "decode failed\n");
            return 1;
        }
        const llama_token *td = tokens + start + first;
        const int n_tok = n_ctx - 1 - first;
        if (klf) {
            if (fread(log_probs, sizeof(uint16_t), (size_t)n_tok * nv, in) != (size_t)n_tok * nv)
                return 1;
            for (int r = 0; r < n_tok; ++r)
                kld_values[kld.count] = kl_row(n_vocab, logits + (size_t)r * n_vocab, log_probs + (size_t)r * nv,
                                               td[r + 1], &kld);
            double f, df;
            mean_unc(kld.sum_nll, kld.sum_nll2, kld.count, &f, &df);
            printf("%s%.9g", i ? ", " : "", exp(f));
            continue;
        }
        for (int r = 0; r < n_tok; ++r) {
            double v = save ? nll_save(n_vocab, logits + (size_t)r * n_vocab, log_probs + (size_t)r * nv, td[r + 1])
                            : nll_plain(n_vocab, logits + (size_t)r * n_vocab, td[r + 1]);
            nll += v;
            nll2 += v * v;
        }
        if (save)
            fwrite(log_probs, sizeof(uint16_t), (size_t)n_tok * nv, out);
        count += n_tok;
        printf("%s%.9g", i ? ", " : "", exp(nll / count));
    }
    printf("]");
    if (klf) {
        double lp, dlp, lb, dlb, kl, dkl, pm, dpm;
        mean_unc(kld.sum_nll, kld.sum_nll2, kld.count, &lp, &dlp);
        mean_unc(kld.sum_nll_base, kld.sum_nll_base2, kld.count, &lb, &dlb);
        double cov = kld.count < 10 ? 0.0
                                    : (kld.sum_nll_nll_base / kld.count - (kld.sum_nll / kld.count) * (kld.sum_nll_base / kld.count)) /
                                          (kld.count - 1);
        mean_unc(kld.sum_kld, kld.sum_kld2, kld.count, &kl, &dkl);
        mean_unc(kld.sum_p_diff2, kld.sum_p_diff4, kld.count, &pm, &dpm);
        double top = 1. * kld.n_same_top / kld.count;
        double kmax = 0;
        for (size_t r = 0; r < kld.count; r++)
            kmax = kld_values[r] > kmax ? kld_values[r] : kmax;
        printf(", \"count\": %zu, \"ppl\": %.9g, \"ppl_err\": %.9g, \"ppl_base\": %.9g, \"ppl_base_err\": %.9g, "
               "\"ln_ppl_ratio\": %.9g, \"ln_ppl_ratio_err\": %.9g, \"kld\": %.9g, \"kld_err\": %.9g, \"kld_max\": %.9g, "
               "\"p_diff_rms\": %.9g, \"same_top\": %.9g, \"same_top_err\": %.9g}\n",
               kld.count, exp(lp), exp(lp) * dlp, exp(lb), exp(lb) * dlb, lp - lb, sqrt(dlp * dlp + dlb * dlb - 2.0 * cov),
               kl, dkl, kmax, sqrt(pm), top, sqrt(top * (1 - top) / (kld.count - 1)));
    } else {
        nll2 /= count;
        nll /= count;
        const double ppl = exp(nll);
        nll2 -= nll * nll;
        nll2 = nll2 > 0 ? sqrt(nll2 / (count - 1)) : 0;
        printf(", \"count\": %d, \"ppl\": %.9g, \"ppl_err\": %.9g}\n", count, ppl, nll2 * ppl);
    }
    if (out)
        fclose(out);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
