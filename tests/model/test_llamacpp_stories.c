/* stories260K against llama.cpp's own greedy run (../shared/fixtures/llamacpp): 32 tokens exact
 * for every case, and the top-5 probabilities (softmax of all logits) within 2e-3. */
#include "caldrix.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"
#include "test.h"

#include <jansson.h>

static const char *g_isa;

static void stories_match_llamacpp(void)
{
    cdx_err e = {0};
    json_error_t je;
    json_t *gold = json_load_file(SHARED "/fixtures/llamacpp/stories260K.json", 0, &je);
    REQUIRE(gold);
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(SHARED "/models/stories260K/stories260K.gguf", NULL, &m, &e) == 0);
    const cdx_hparams *hp = cdx_model_hparams(m);
    CHECK(hp->n_vocab == 512 && hp->n_layer == 5 && hp->n_head == 8 && hp->n_head_kv == 4);
    cdx_forward_ctx *fc;
    REQUIRE(cdx_forward_ctx_create(m, 16, 2, cdx_kernels_by_isa(g_isa), &fc, &e) == 0);
    float logits[512];
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(gold, "cases"), ci, c) {
        cdx_kv kv;
        REQUIRE(cdx_kv_init(&kv, hp, 256, &e) == 0);
        cdx_kv *kvp = &kv;
        json_t *prompt = json_object_get(c, "prompt_ids"), *toks = json_object_get(c, "tokens"), *top = json_object_get(c, "top");
        int32_t ids[16];
        size_t np = json_array_size(prompt);
        for (size_t i = 0; i < np; i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(prompt, i));
        cdx_batch b = { .n = (int64_t)np, .tokens = ids };
        REQUIRE(cdx_forward(fc, &kvp, 1, &b, logits, &e) == 0);
        double worst = 0;
        for (size_t s = 0; s < json_array_size(toks); s++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(toks, s));
            int32_t got = cdx_argmax(logits, 512);
            CHECKF(got == want, "case %zu step %zu: token %d, llama.cpp %d", ci, s, got, want);
            double mx = logits[got], sum = 0;
            for (int i = 0; i < 512; i++)
                sum += exp(logits[i] - mx);
            json_t *st = json_array_get(top, s);
            for (size_t k = 0; k < 5; k++) {
                int64_t id = json_integer_value(json_array_get(json_object_get(st, "ids"), k));
                double p = exp(logits[id] - mx) / sum;
                double d = fabs(p - json_number_value(json_array_get(json_object_get(st, "probs"), k)));
                worst = d > worst ? d : worst;
            }
            if (got != want)
                break;
            cdx_batch nb = { .n = 1, .tokens = &want };
            REQUIRE(cdx_forward(fc, &kvp, 1, &nb, logits, &e) == 0);
        }
        CHECKF(worst <= 2e-3, "case %zu: worst probability error %.3g", ci, worst);
        printf("  case %zu [%s]: max |p - llama.cpp| = %.2e\n", ci, g_isa, worst);
        cdx_kv_free(&kv);
    }
    cdx_forward_ctx_free(fc);
    cdx_model_close(m);
    json_decref(gold);
}

int main(void)
{
    const char *isas[] = { "scalar", "avx2", "avx512" };
    static char names[3][128];
    for (int i = 0; i < 3; i++) {
        if (!cdx_kernels_by_isa(isas[i])) {
            t_skip_isa(isas[i]);
            continue;
            }
        g_isa = isas[i];
        snprintf(names[i], sizeof names[i], "stories260K gives llama.cpp's 32 greedy tokens (%s kernels)", isas[i]);
        RUN(names[i], stories_match_llamacpp);
    }
    return t_done("llamacpp_stories");
}
