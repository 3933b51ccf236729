/* Greedy decoding of a family's PyTorch goldens, shared by the family tests (test_gemma, test_granite,
 * test_families_b, test_families_c, test_qwen2vl). gold: {"cases": [{"name", "prompt_ids", "tokens",
 * "steps": [{"top": [[id, logit], ...]}]}]}. Each case: the prompt in one pass, then one token a step;
 * a case matches when every step's argmax is the golden token and every top-5 logit is within tol of
 * PyTorch's. Returns the number of cases that differ (99: no forward context); *worst: the largest
 * top-5 error of any case (up to its first wrong step). quiet: no line per case. */
#ifndef CDX_TESTS_GOLDEN_DECODE_H
#define CDX_TESTS_GOLDEN_DECODE_H

#include "caldrix.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { GOLDEN_MAX_PROMPT = 64 };

static int golden_decode(cdx_model *m, json_t *gold, const char *isa, double tol, const char *label,
                         double *worst, bool quiet)
{
    cdx_err e = { 0 };
    const cdx_hparams *hp = cdx_model_hparams(m);
    cdx_forward_ctx *fc = NULL;
    *worst = 0;
    if (cdx_forward_ctx_create(m, GOLDEN_MAX_PROMPT, 2, cdx_kernels_by_isa(isa), &fc, &e))
        return 99;
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    int bad = 0;
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(gold, "cases"), ci, c) {
        json_t *prompt = json_object_get(c, "prompt_ids"), *toks = json_object_get(c, "tokens"),
               *steps = json_object_get(c, "steps");
        const size_t np = json_array_size(prompt);
        cdx_kv kv;
        if (!logits || np < 1 || np > GOLDEN_MAX_PROMPT || cdx_kv_init(&kv, hp, 256, &e)) {
            printf("  %s [%s] case %zu: a prompt of %zu ids (1..%d) or no KV cache\n", label, isa, ci, np,
                   GOLDEN_MAX_PROMPT);
            bad++;
            continue;
        }
        cdx_kv *kvp = &kv;
        int32_t ids[GOLDEN_MAX_PROMPT];
        for (size_t i = 0; i < np; i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(prompt, i));
        cdx_batch b = { .n = (int64_t)np, .tokens = ids };
        bool ok = cdx_forward(fc, &kvp, 1, &b, logits, &e) == 0;
        double cw = 0;
        for (size_t s = 0; ok && s < json_array_size(toks); s++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(toks, s));
            json_t *top = json_object_get(json_array_get(steps, s), "top");
            for (size_t k = 0; k < json_array_size(top); k++) {
                json_t *pair = json_array_get(top, k);
                double d = fabs(logits[json_integer_value(json_array_get(pair, 0))] -
                                json_number_value(json_array_get(pair, 1)));
                cw = d > cw ? d : cw;
            }
            ok = cdx_argmax(logits, hp->n_vocab) == want && cw <= tol;
            cdx_batch nb = { .n = 1, .tokens = &want };
            ok = ok && cdx_forward(fc, &kvp, 1, &nb, logits, &e) == 0;
        }
        *worst = cw > *worst ? cw : *worst;
        bad += !ok;
        if (!quiet)
            printf("  %s [%s] case %s: %s, max |logit - golden| = %.2e\n", label, isa,
                   json_string_value(json_object_get(c, "name")), ok ? "tokens match" : "MISMATCH", cw);
        cdx_kv_free(&kv);
    }
    free(logits);
    cdx_forward_ctx_free(fc);
    return bad;
}

#endif
