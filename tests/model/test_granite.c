/* Granite (../shared/fixtures/hf/granite, PyTorch float32 goldens of transformers' modeling_granite):
 * every case's 16 greedy tokens and every golden top-5 logit within 1e-3 (INDEX.md's tolerance), from
 * the checkpoint and from its conversion to GGUF "granite" (caldrix convert, llama.cpp's converter
 * layout), on every kernel set; then each of the four scalings outside the layers switched off in
 * turn (embedding, residual, attention and logit multipliers): the goldens must break every time. */
#include "caldrix.h"
#include "caldrix/convert.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"
#include "caldrix/tokenizer.h"
#include "test.h"
#include "model/golden_decode.h"

#include <jansson.h>
#include <unistd.h>

#define FIX SHARED "/fixtures/hf/granite"

static const char *g_path, *g_isa;
static char g_gguf[128];
static json_t *g_gold;

/* Greedy over every case: 0 when the tokens and top-5 logits match; else the number of cases that
 * do not. *worst: the largest top-5 logit error seen. */
static int decode(cdx_model *m, const char *isa, double *worst, bool quiet)
{
    return golden_decode(m, g_gold, isa, 1e-3, g_path, worst, quiet);
}

static void run_golden(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    const cdx_model_opts mo = { .dtype = CDX_DTYPE_F32 };
    REQUIRE(cdx_model_open(g_path, &mo, &m, &e) == 0);
    double worst;
    CHECKF(decode(m, g_isa, &worst, false) == 0, "%s [%s]: cases differ from the goldens (worst %.3g)", g_path, g_isa,
           worst);
    cdx_model_close(m);
}

/* Each scaling off in turn (as a port that left it out would compute): every one must break them. */
static void run_each_scaling_matters(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(FIX, NULL, &m, &e) == 0);
    cdx_hparams *hp = (cdx_hparams *)cdx_model_hparams(m); /* the test's own model: switched in place */
    float *const sc[4] = { &hp->embd_scale, &hp->residual_scale, &hp->attn_scale, &hp->logit_div };
    static const char *const what[4] = { "embedding_multiplier", "residual_multiplier", "attention_multiplier",
                                         "logits_scaling" };
    CHECKF(hp->embd_scale == 12.0f && hp->residual_scale == 0.22f && hp->attn_scale == 0.125f && hp->logit_div == 2.0f,
           "config.json's multipliers are read: %g %g %g %g", hp->embd_scale, hp->residual_scale, hp->attn_scale,
           hp->logit_div);
    for (int k = 0; k < 4; k++) {
        const float keep = *sc[k];
        *sc[k] = 0;
        double worst;
        const int bad = decode(m, "scalar", &worst, true);
        CHECKF(bad > 0, "without %s the goldens still pass (worst %.3g)", what[k], worst);
        printf("  without %s: %d of 3 cases break (worst top-5 logit error %.3g)\n", what[k], bad, worst);
        *sc[k] = keep;
    }
    double worst;
    CHECKF(decode(m, "scalar", &worst, true) == 0, "with all four back the goldens pass");
    cdx_model_close(m);
}

static void run_convert(void)
{
    cdx_err e = { 0 };
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    int rc = cdx_convert_hf(FIX, &(cdx_convert_opts){ .type = CDX_TYPE_F32 }, w, &c, &e);
    CHECKF(rc == 0, "%s", e.msg);
    rc = rc ? rc : cdx_tok_export_gguf_dummy(w, 320, 1, 2, &e);
    snprintf(g_gguf, sizeof g_gguf, "/tmp/cdx_granite_%d.gguf", (int)getpid());
    rc = rc ? rc : cdx_gguf_writer_write(w, g_gguf, &e);
    CHECKF(rc == 0, "writing %s: %s", g_gguf, e.msg);
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
    cdx_gguf *g = NULL;
    REQUIRE(cdx_gguf_open(g_gguf, &g, &e) == 0);
    double v;
    /* llama.cpp's granite keys (GraniteModel.set_gguf_parameters) */
    CHECK(cdx_gguf_get_arch_f64(g, "granite", CDX_GK_EMBEDDING_SCALE, &v) && v == 12.0);
    CHECK(cdx_gguf_get_arch_f64(g, "granite", CDX_GK_RESIDUAL_SCALE, &v) && (float)v == 0.22f);
    CHECK(cdx_gguf_get_arch_f64(g, "granite", CDX_GK_ATTENTION_SCALE, &v) && v == 0.125);
    CHECK(cdx_gguf_get_arch_f64(g, "granite", CDX_GK_LOGIT_SCALE, &v) && v == 2.0);
    cdx_gguf_close(g);
}

int main(void)
{
    json_error_t je;
    g_gold = json_load_file(FIX "/golden.json", 0, &je);
    if (!g_gold) {
        printf("%s/golden.json: %s\ngranite: 0 passed, 1 failed\n", FIX, je.text);
        return 1;
    }
    RUN("granite converts to GGUF \"granite\" with llama.cpp's four scale keys", run_convert);
    static char names[8][160];
    const char *isas[] = { "scalar", "avx2", "avx512" };
    int k = 0;
    for (int fmt = 0; fmt < 2; fmt++)
        for (int s = 0; s < 3; s++) {
            if (!cdx_kernels_by_isa(isas[s])) {
                t_skip_isa(isas[s]);
                continue;
            }
            g_path = fmt ? g_gguf : FIX;
            g_isa = isas[s];
            snprintf(names[k], sizeof names[k], "granite (%s, %s kernels) reproduces the PyTorch goldens",
                     fmt ? "converted GGUF" : "safetensors", isas[s]);
            RUN(names[k], run_golden);
            k++;
        }
    RUN("each of granite's four scalings is needed for the goldens", run_each_scaling_matters);
    unlink(g_gguf);
    json_decref(g_gold);
    return t_done("granite");
}
