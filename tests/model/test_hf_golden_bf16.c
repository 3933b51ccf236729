/* --dtype bf16 against the PyTorch bf16 goldens (../shared/fixtures/hf/<model>/golden_bf16.json),
 * compared as INDEX.md's "How an engine compares" says, teacher-forced (the golden's tokens are fed
 * back, so every one of the 16 steps is scored): at every step the argmax equals the golden token
 * (at a step marked near_tie: any id tied with the golden's top logit); each of the golden's five
 * top ids has a logit within logit_tolerance (0.25); and in each fixture at least
 * min_steps_bit_identical_per_fixture of the 48 steps, and over all seven at least
 * min_fraction_of_steps_bit_identical of them, reproduce all five top logits bit for bit. Run on
 * every kernel set this CPU has, with the K/V cache in f32 and in bf16 (bf16 values either way:
 * the two must give the same bits). */
#include "caldrix.h"
#include "caldrix/model.h"
#include "test.h"

#include <jansson.h>

#include "bf16_golden.h"

static const char *const k_models[] = { "llama", "llama_bf16", "llama_f16", "llama3_rope", "mistral", "qwen2", "qwen3" };
enum { N_MODELS = sizeof k_models / sizeof k_models[0], N_STEPS = BF16G_STEPS };

static const char *g_model, *g_isa;
static uint32_t g_kv;
/* per kernel set and KV type: bit-identical steps, steps, of all fixtures so far */
static int g_exact_all, g_steps_all;
static double g_min_fraction = 1;
/* the logits of every step of the f32-cache run, to compare the bf16-cache run's bits with */
static float g_ref_logits[N_MODELS][BF16G_CASES][N_STEPS][BF16G_MAX_VOCAB];
static int g_model_idx;

static void run_bf16_golden(void)
{
    char path[256], golden[256];
    snprintf(path, sizeof path, SHARED "/fixtures/hf/%s", g_model);
    snprintf(golden, sizeof golden, SHARED "/fixtures/hf/%s/golden_bf16.json", g_model);
    json_error_t je;
    json_t *gold = json_load_file(golden, 0, &je);
    REQUIRE(gold);
    const double tol = json_number_value(json_object_get(gold, "logit_tolerance"));
    const int min_exact = (int)json_integer_value(json_object_get(gold, "min_steps_bit_identical_per_fixture"));
    g_min_fraction = json_number_value(json_object_get(gold, "min_fraction_of_steps_bit_identical"));
    REQUIRE(tol > 0 && tol < 1 && min_exact > 0 && g_min_fraction > 0);
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    const cdx_model_opts mo = { .dtype = CDX_DTYPE_BF16 };
    int rc = cdx_model_open(path, &mo, &m, &e);
    CHECKF(rc == 0, "%s", e.msg);
    if (rc) {
        json_decref(gold);
        return;
    }
    CHECK(cdx_model_dtype(m) == CDX_DTYPE_BF16);
    const cdx_hparams *hp = cdx_model_hparams(m);
    REQUIRE(hp->n_vocab <= BF16G_MAX_VOCAB);
    cdx_forward_ctx *fc = NULL;
    REQUIRE(cdx_forward_ctx_create(m, 64, 2, cdx_kernels_by_isa(g_isa), &fc, &e) == 0);
    bf16g_run r = { .name = g_model, .isa = g_isa, .kv = g_kv, .tol = tol, .ref = g_ref_logits[g_model_idx] };
    bf16g_decode(fc, hp, gold, &r);
    const int exact = r.exact, steps_seen = r.steps;
    const double worst = r.worst;
    CHECKF(exact >= min_exact, "%s [%s]: %d of %d steps bit-identical; the golden asks for %d", g_model, g_isa, exact,
           steps_seen, min_exact);
    printf("  %s [%s, kv %s]: %d/%d steps bit-identical, max |logit - golden| = %.4g\n", g_model, g_isa,
           cdx_type_name(g_kv), exact, steps_seen, worst);
    g_exact_all += exact;
    g_steps_all += steps_seen;
    cdx_forward_ctx_free(fc);
    cdx_model_close(m);
    json_decref(gold);
}

static void check_overall(void)
{
    CHECKF(g_steps_all == N_MODELS * 3 * N_STEPS, "%d steps scored; expected %d", g_steps_all, N_MODELS * 3 * N_STEPS);
    CHECKF(g_exact_all >= g_min_fraction * g_steps_all, "%d of %d steps bit-identical; the goldens ask for %.0f%%",
           g_exact_all, g_steps_all, 100 * g_min_fraction);
    printf("  [%s, kv %s] all fixtures: %d/%d steps bit-identical\n", g_isa, cdx_type_name(g_kv), g_exact_all,
           g_steps_all);
}

int main(void)
{
    static char names[64][200];
    int k = 0;
    const char *isas[] = { "scalar", "avx2", "avx512" };
    for (int s = 0; s < 3; s++) {
        if (!cdx_kernels_by_isa(isas[s])) {
            t_skip_isa(isas[s]);
            continue;
        }
        g_isa = isas[s];
        for (int kv = 0; kv < 2; kv++) {
            g_kv = kv ? CDX_TYPE_BF16 : CDX_TYPE_F32;
            g_exact_all = g_steps_all = 0;
            for (int i = 0; i < N_MODELS; i++) {
                g_model = k_models[i];
                g_model_idx = i;
                snprintf(names[k], sizeof names[k], "%s --dtype bf16 (%s kernels, %s cache) matches the PyTorch bf16 "
                         "goldens", g_model, g_isa, cdx_type_name(g_kv));
                RUN(names[k], run_bf16_golden);
                k++;
            }
            snprintf(names[k], sizeof names[k], "the bf16 goldens are reproduced bit for bit often enough (%s kernels, "
                     "%s cache)", g_isa, cdx_type_name(g_kv));
            RUN(names[k], check_overall);
            k++;
        }
    }
    return t_done("hf_golden_bf16");
}
