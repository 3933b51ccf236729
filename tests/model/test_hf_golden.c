/* The fixtures of ../shared/fixtures/hf (PyTorch float32 goldens) through caldrix, dense and
 * mixtures of experts, from the safetensors checkpoints and from their GGUF conversions: all 16 greedy tokens of every case,
 * and every golden top-5 logit within 1e-3 (the tolerance of the fixtures' INDEX.md). */
#include "caldrix.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"
#include "test.h"

#include <jansson.h>

static const char *g_path, *g_golden, *g_isa;

static void run_golden(void)
{
    cdx_err e = {0};
    json_error_t je;
    json_t *gold = json_load_file(g_golden, 0, &je);
    REQUIRE(gold);
    cdx_model *m = NULL;
    int rc = cdx_model_open(g_path, NULL, &m, &e);
    CHECKF(rc == 0, "%s", e.msg);
    if (rc) {
        json_decref(gold);
        return;
    }
    const cdx_hparams *hp = cdx_model_hparams(m);
    cdx_forward_ctx *fc = NULL;
    REQUIRE(cdx_forward_ctx_create(m, 64, 2, cdx_kernels_by_isa(g_isa), &fc, &e) == 0);
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    json_t *cases = json_object_get(gold, "cases");
    size_t ci;
    json_t *c;
    json_array_foreach(cases, ci, c) {
        json_t *prompt = json_object_get(c, "prompt_ids"), *toks = json_object_get(c, "tokens"),
               *steps = json_object_get(c, "steps");
        cdx_kv kv;
        REQUIRE(cdx_kv_init(&kv, hp, 256, &e) == 0);
        cdx_kv *kvp = &kv;
        int32_t ids[64];
        size_t np = json_array_size(prompt);
        for (size_t i = 0; i < np; i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(prompt, i));
        cdx_batch b = { .n = (int64_t)np, .tokens = ids };
        CHECKF(cdx_forward(fc, &kvp, 1, &b, logits, &e) == 0, "%s", e.msg);
        double worst = 0;
        for (size_t s = 0; s < json_array_size(toks); s++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(toks, s));
            int32_t got = cdx_argmax(logits, hp->n_vocab);
            CHECKF(got == want, "%s case %s step %zu: token %d, golden %d", g_path,
                   json_string_value(json_object_get(c, "name")), s, got, want);
            json_t *top = json_object_get(json_array_get(steps, s), "top");
            for (size_t k = 0; k < json_array_size(top); k++) {
                json_t *pair = json_array_get(top, k);
                int64_t id = json_integer_value(json_array_get(pair, 0));
                double d = fabs(logits[id] - json_number_value(json_array_get(pair, 1)));
                worst = d > worst ? d : worst;
            }
            if (got != want)
                break;
            cdx_batch nb = { .n = 1, .tokens = &want };
            CHECKF(cdx_forward(fc, &kvp, 1, &nb, logits, &e) == 0, "%s", e.msg);
        }
        CHECKF(worst <= 1e-3, "%s case %s: worst top-5 logit error %.3g", g_path,
               json_string_value(json_object_get(c, "name")), worst);
        printf("  %s [%s] case %s: max |logit - golden| = %.2e\n", g_path, g_isa,
               json_string_value(json_object_get(c, "name")), worst);
        cdx_kv_free(&kv);
    }
    free(logits);
    cdx_forward_ctx_free(fc);
    cdx_model_close(m);
    json_decref(gold);
}

int main(void)
{
    static const char *const dense[] = { "llama", "llama_bf16", "llama_f16", "llama3_rope", "mistral", "qwen2", "qwen3",
                                         "qwen3_moe", "mixtral", "qwen2_moe" };
    static char names[64][160], paths[64][160], goldens[64][160];
    int k = 0;
    const char *isas[] = { "scalar", "avx2", "avx512" };
    for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++) {
        for (int fmt = 0; fmt < 2; fmt++) {
            if (fmt == 1 && !strcmp(dense[i], "mistral"))
                continue; /* no GGUF: llama.cpp's GGUF has no sliding window (see hf-gguf/README.md) */
            if (fmt == 1 && !strcmp(dense[i], "qwen3_moe"))
                continue; /* no GGUF: qwen3moe has no dense (mlp_only_layers) layers in llama.cpp */
            for (int s = 0; s < 3; s++) {
                if (!cdx_kernels_by_isa(isas[s])) {
                    t_skip_isa(isas[s]);
                    continue;
                    }
                snprintf(paths[k], sizeof paths[k], fmt ? SHARED "/fixtures/hf-gguf/%s.gguf" : SHARED "/fixtures/hf/%s", dense[i]);
                snprintf(goldens[k], sizeof goldens[k], SHARED "/fixtures/hf/%s/golden.json", dense[i]);
                snprintf(names[k], sizeof names[k], "%s (%s, %s kernels) reproduces the PyTorch goldens", dense[i],
                         fmt ? "gguf" : "safetensors", isas[s]);
                g_path = paths[k];
                g_golden = goldens[k];
                g_isa = isas[s];
                RUN(names[k], run_golden);
                k++;
            }
        }
    }
    return t_done("hf_golden");
}
