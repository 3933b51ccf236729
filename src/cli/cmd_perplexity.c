/* caldrix perplexity MODEL -f TEXT: llama.cpp's llama-perplexity (windows of --ctx, the second half
 * of each scored) and its KL divergence against a base model's saved log-probabilities. The
 * arithmetic is the library's (cdx_perplexity, cdx_kl_divergence); this parses, tokenizes, prints. */
#include "cli.h"
#include "cli_hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ppl_usage(FILE *f)
{
    fprintf(f,
            "usage: caldrix perplexity [MODEL] -f TEXT [--ctx N] [--chunks N] [-t N] [--json]\n"
            "       caldrix perplexity [MODEL] -f TEXT --kl-divergence-base FILE     (save the base)\n"
            "       caldrix perplexity [MODEL] --kl-divergence-base FILE --kl-divergence\n\n"
            "The perplexity of TEXT under MODEL (a file, folder, alias, owner/name[@rev] or ollama:name[:tag];\n"
            "none: the bundled stories260K) as llama.cpp's llama-perplexity computes it: the text's tokens\n"
            "cut into windows of --ctx, each run from an empty cache with its first token replaced by BOS\n"
            "(when the vocabulary adds one), only the second half of each window scored. Prints the running\n"
            "estimate per window and the final PPL with its ± error.\n\n"
            "options:\n"
            "  -f, --file TEXT            the text to score (UTF-8)\n"
            "  -c, --ctx N                window in tokens (default 512; the text needs at least 2·N)\n"
            "  --chunks N                 score at most N windows (default: all)\n"
            "  --kl-divergence-base FILE  alone: write the scored positions' log-probabilities to FILE\n"
            "                             (llama-perplexity's file layout); with --kl-divergence: read FILE\n"
            "  --kl-divergence            KL divergence of MODEL against FILE's base model on FILE's own\n"
            "                             tokens and windows (no -f): mean KL, top-1 agreement, PPL of both,\n"
            "                             ln(PPL(Q)/PPL(base)), Δp, each with llama.cpp's ± error\n"
            "  -t, --threads N            threads (default: the cores this process may use)\n"
            "  --json                     the final figures as one JSON object on stdout\n");
}

typedef struct {
    bool quiet, kl;
} ppl_ui;

static void on_chunk(void *user, const cdx_ppl_progress *p)
{
    const ppl_ui *ui = user;
    if (ui->quiet)
        return;
    if (ui->kl)
        fprintf(stderr, "[%lld/%lld] PPL %.4f  ln(PPL(Q)/PPL(base)) %.5f  KLD %.5f  same top %.3f%%\n",
                (long long)p->chunk, (long long)p->n_chunks, p->ppl, p->ln_ppl_ratio, p->kld, 100.0 * p->same_top);
    else
        fprintf(stderr, "[%lld]%.4f,%s", (long long)p->chunk, p->ppl, p->chunk == p->n_chunks ? "\n" : "");
}

/* The text's tokens as llama-perplexity takes them: the tokenizer with its special tokens (BOS). */
static int tokenize_file(const cdx_tok *tok, const char *path, int32_t **ids, size_t *n, cdx_err *err)
{
    char *text = NULL;
    size_t len = 0, need = 0;
    int rc = cdx_file_read_all(path, (size_t)1 << 30, &text, &len, err);
    if (rc)
        return rc;
    *ids = NULL;
    if (!(rc = cdx_tok_encode(tok, text, len, true, false, NULL, 0, &need, err))) {
        if (!(*ids = malloc((need + 1) * sizeof **ids)))
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        else
            rc = cdx_tok_encode(tok, text, len, true, false, *ids, need, n, err);
    }
    free(text);
    return rc;
}

int cmd_perplexity(int argc, char **argv)
{
    const char *ref = NULL, *file = NULL, *base = NULL;
    long n_ctx = 512, chunks = 0, threads = 0;
    bool kl = false, json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            ppl_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && more) {
            file = argv[++i];
        } else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx")) && more) {
            if (cli_parse_int(a, argv[++i], 4, 1 << 20, &n_ctx))
                return 2;
        } else if (!strcmp(a, "--chunks") && more) {
            if (cli_parse_int(a, argv[++i], 1, 1 << 30, &chunks))
                return 2;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && more) {
            if (cli_parse_engine_opt(a, argv[++i], CDX_OPT_THREADS, &threads))
                return 2;
        } else if (!strcmp(a, "--kl-divergence-base") && more) {
            base = argv[++i];
        } else if (!strcmp(a, "--kl-divergence")) {
            kl = true;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (a[0] == '-' && a[1]) {
            static const char *const valued[] = { "-f", "--file", "-c", "--ctx", "--chunks", "-t", "--threads",
                                                  "--kl-divergence-base" };
            bool needs = false;
            for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
                needs |= !strcmp(a, valued[k]);
            fprintf(stderr, "caldrix perplexity: %s: %s (caldrix perplexity --help)\n", a,
                    needs ? "needs a value" : "unknown option");
            return 2;
        } else if (!ref) {
            ref = a;
        } else {
            fprintf(stderr, "caldrix perplexity: one model at a time (\"%s\" and \"%s\")\n", ref, a);
            return 2;
        }
    }
    if (kl && !base) {
        fprintf(stderr, "caldrix perplexity: --kl-divergence needs --kl-divergence-base FILE (the base model's "
                        "log-probabilities, saved by a run without --kl-divergence)\n");
        return 2;
    }
    if (kl && file) {
        fprintf(stderr, "caldrix perplexity: --kl-divergence scores the tokens saved in %s; -f is not used with it\n",
                base);
        return 2;
    }
    if (!kl && !file) {
        ppl_usage(stderr);
        return 2;
    }

    cdx_err err = { 0 };
    cli_hub_ui hui;
    cdx_hub_opts ho;
    cli_hub_opts_init(&ho, &hui, json);
    cdx_load_opts lo = cli_load_opts(&ho, CDX_DTYPE_AUTO, 0);
    cdx_loaded *ld = NULL;
    if (cdx_load(ref, &lo, &ld, NULL, &err)) {
        fprintf(stderr, "caldrix perplexity: %s\n", err.msg);
        return 1;
    }
    const char *name = ld->path ? ld->path : ref ? ref : lo.default_name;
    int status = 1;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    ppl_ui ui = { .quiet = json, .kl = kl };
    cdx_ppl_opts po = cdx_ppl_defaults();
    po.n_ctx = n_ctx;
    po.n_chunks_max = chunks;
    po.n_threads = (int)threads;
    po.on_chunk = on_chunk;
    po.user = &ui;
    po.save_base = kl ? NULL : base;
    if (!ld->tok) {
        fprintf(stderr, "caldrix perplexity: %s has no tokenizer\n", name);
        goto done;
    }
    if (cdx_tok_add_bos(ld->tok))
        po.bos_id = cdx_tok_bos(ld->tok);
    cdx_ppl_result r;
    if (kl) {
        if (cdx_kl_divergence(ld->model, base, &po, &r, &err)) {
            fprintf(stderr, "caldrix perplexity: %s\n", err.msg);
            goto done;
        }
    } else {
        if (tokenize_file(ld->tok, file, &ids, &n_ids, &err)) {
            fprintf(stderr, "caldrix perplexity: %s: %s\n", file, err.msg);
            goto done;
        }
        if (cdx_perplexity(ld->model, ids, (int64_t)n_ids, &po, &r, &err)) {
            fprintf(stderr, "caldrix perplexity: %s: %s\n", file, err.msg);
            goto done;
        }
    }
    if (json) {
        json_t *o = json_pack("{s:s,s:I,s:I,s:I,s:I,s:f,s:f}", "model", name, "ctx", (json_int_t)r.n_ctx, "tokens",
                              (json_int_t)r.n_tokens, "chunks", (json_int_t)r.n_chunks, "scored", (json_int_t)r.count,
                              "ppl", r.ppl, "ppl_err", r.ppl_err);
        if (o && r.kl) {
            json_t *k = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}",
                                  "ppl_base", r.ppl_base, "ppl_base_err", r.ppl_base_err, "ln_ppl_ratio",
                                  r.ln_ppl_ratio, "ln_ppl_ratio_err", r.ln_ppl_ratio_err, "kld", r.kld, "kld_err",
                                  r.kld_err, "kld_max", r.kld_max, "kld_p99", r.kld_p99, "kld_p90", r.kld_p90,
                                  "kld_median", r.kld_median, "kld_p10", r.kld_p10, "kld_min", r.kld_min, "p_diff",
                                  r.p_diff, "p_diff_err", r.p_diff_err, "p_diff_rms", r.p_diff_rms, "p_diff_max",
                                  r.p_diff_max, "same_top", r.same_top, "same_top_err", r.same_top_err, "ppl_ratio",
                                  r.ppl_ratio);
            if (!k || json_object_update(o, k))
                json_decref(o), o = NULL;
            json_decref(k);
        }
        char *s = o ? json_dumps(o, JSON_REAL_PRECISION(10)) : NULL;
        json_decref(o);
        if (!s) {
            fprintf(stderr, "caldrix perplexity: out of memory\n");
            goto done;
        }
        printf("%s\n", s);
        free(s);
    } else if (r.kl) {
        printf("%s against %s: %lld windows of %lld, %lld tokens scored\n", name, base, (long long)r.n_chunks,
               (long long)r.n_ctx, (long long)r.count);
        printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", r.ppl, r.ppl_err);
        printf("Mean PPL(base)                : %10.6f ± %10.6f\n", r.ppl_base, r.ppl_base_err);
        printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r.ln_ppl_ratio, r.ln_ppl_ratio_err);
        printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", r.ppl_ratio, r.ppl_ratio_err);
        printf("Mean    KLD: %10.6f ± %10.6f\n", r.kld, r.kld_err);
        printf("Maximum KLD: %10.6f\n99.0%%   KLD: %10.6f\n90.0%%   KLD: %10.6f\nMedian  KLD: %10.6f\n"
               "10.0%%   KLD: %10.6f\nMinimum KLD: %10.6f\n",
               r.kld_max, r.kld_p99, r.kld_p90, r.kld_median, r.kld_p10, r.kld_min);
        printf("Mean    Δp: %6.3f ± %5.3f %%\nMaximum Δp: %6.3f%%\nRMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * r.p_diff,
               100.0 * r.p_diff_err, 100.0 * r.p_diff_max, 100.0 * r.p_diff_rms, 100.0 * r.p_diff_rms_err);
        printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * r.same_top, 100.0 * r.same_top_err);
    } else {
        printf("%s: %lld tokens, %lld windows of %lld, %lld scored\nFinal estimate: PPL = %.4f +/- %.5f\n", name,
               (long long)r.n_tokens, (long long)r.n_chunks, (long long)r.n_ctx, (long long)r.count, r.ppl, r.ppl_err);
        if (base)
            printf("base log-probabilities written to %s\n", base);
    }
    status = 0;
done:
    free(ids);
    cdx_load_close(ld);
    return status;
}
