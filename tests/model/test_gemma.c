/* Gemma's families (../shared/fixtures/hf/{gemma,gemma2,gemma3}: PyTorch float32 goldens of
 * transformers' modeling_gemma / gemma2 / gemma3): every case's 16 greedy tokens and every golden
 * top-5 logit within 1e-3 (INDEX.md's tolerance), on every kernel set. Then each thing Gemma does
 * outside the common decoder switched off in turn, as a port that left it out would compute: the
 * (1 + w) norms, the embeddings × sqrt(hidden), GeGLU, and for Gemma2/3 the post norms, the softcaps,
 * the per-layer windows, the sliding layers' own RoPE base, the q/k norms' offset. The goldens must
 * break each time. query_pre_attn_scalar equals head_dim in the fixtures, so it is shown on a copy
 * whose config.json sets it otherwise (the logits move by the scale's effect). */
#include "caldrix.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"
#include "model/arch.h"
#include "test.h"
#include "model/golden_decode.h"

#include <jansson.h>
#include <unistd.h>

static const char *g_fam, *g_isa;
static char g_dir[160];
static json_t *g_gold;

/* Greedy over every case: the number of cases whose tokens or top-5 logits differ from the goldens.
 * *worst: the largest top-5 logit error seen (before the first wrong token of each case). */
static int decode(cdx_model *m, const char *isa, double *worst, bool quiet)
{
    return golden_decode(m, g_gold, isa, 1e-3, g_fam, worst, quiet);
}

static void run_golden(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    const cdx_model_opts mo = { .dtype = CDX_DTYPE_F32 };
    REQUIRE(cdx_model_open(g_dir, &mo, &m, &e) == 0);
    double worst;
    CHECKF(decode(m, g_isa, &worst, false) == 0, "%s [%s]: cases differ from the goldens (worst %.3g)", g_fam, g_isa,
           worst);
    cdx_model_close(m);
}

/* ---- the switches: each undoes one thing in a loaded model (the test's own copy) ---- */

static void add_to(float *w, int64_t n, float d)
{
    for (int64_t i = 0; w && i < n; i++)
        w[i] += d;
}
/* the norms as w, not (1 + w): the offset the loader added taken back (q/k norms apart) */
static void no_norm_offset(cdx_model *m)
{
    const int64_t E = m->hp.n_embd;
    add_to(m->out_norm, E, -1);
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        layer_weights *L = &m->layers[l];
        add_to(L->attn_norm, E, -1), add_to(L->ffn_norm, E, -1);
        add_to(L->attn_post_norm, E, -1), add_to(L->ffn_post_norm, E, -1);
    }
}
static void no_qk_norm_offset(cdx_model *m)
{
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        add_to(m->layers[l].q_norm, m->hp.head_dim, -1), add_to(m->layers[l].k_norm, m->hp.head_dim, -1);
}
static void no_embd_scale(cdx_model *m) { m->hp.embd_scale = 0; }
static void silu_not_gelu(cdx_model *m) { m->hp.act = CDX_HF_ACT_SILU; }
static void no_post_norms(cdx_model *m)
{
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        m->layers[l].attn_post_norm = m->layers[l].ffn_post_norm = NULL; /* freed at close through saved */
}
static void no_attn_softcap(cdx_model *m) { m->hp.attn_softcap = 0; }
static void no_final_softcap(cdx_model *m) { m->hp.final_softcap = 0; }
static void no_window(cdx_model *m) { m->hp.sliding_window = 0; }
static void window_everywhere(cdx_model *m) { m->hp.swa_layers = NULL; }
static void no_local_rope(cdx_model *m) { m->inv_freq_swa = NULL; }

typedef struct {
    const char *what;
    void (*off)(cdx_model *m);
} flip;

static const flip k_gemma[] = {
    { "(1 + w) norms", no_norm_offset },
    { "embeddings × sqrt(hidden)", no_embd_scale },
    { "GeGLU (gelu_pytorch_tanh)", silu_not_gelu },
};
static const flip k_gemma2[] = {
    { "(1 + w) norms", no_norm_offset },
    { "embeddings × sqrt(hidden)", no_embd_scale },
    { "GeGLU (gelu_pytorch_tanh)", silu_not_gelu },
    { "post-attention and post-feed-forward norms", no_post_norms },
    { "attention softcap", no_attn_softcap },
    { "final logit softcap", no_final_softcap },
    { "sliding window", no_window },
    { "window on the even layers only", window_everywhere },
};
static const flip k_gemma3[] = {
    { "(1 + w) norms", no_norm_offset },
    { "(1 + w) q/k norms", no_qk_norm_offset },
    { "embeddings × sqrt(hidden)", no_embd_scale },
    { "GeGLU (gelu_pytorch_tanh)", silu_not_gelu },
    { "post-attention and post-feed-forward norms", no_post_norms },
    { "sliding window", no_window },
    { "window on the layer_types' sliding layers only", window_everywhere },
    { "rope_local_base_freq on the sliding layers", no_local_rope },
};

static const flip *g_flips;
static size_t g_n_flips;

static void run_each_difference_matters(void)
{
    cdx_err e = { 0 };
    for (size_t k = 0; k < g_n_flips; k++) {
        cdx_model *m = NULL;
        REQUIRE(cdx_model_open(g_dir, NULL, &m, &e) == 0);
        /* what the switch drops, restored before close so every owned buffer is freed */
        float *inv_swa = m->inv_freq_swa;
        float **post = calloc((size_t)m->hp.n_layer * 2, sizeof *post);
        for (int64_t l = 0; l < m->hp.n_layer; l++)
            post[2 * l] = m->layers[l].attn_post_norm, post[2 * l + 1] = m->layers[l].ffn_post_norm;
        double worst;
        REQUIRE(decode(m, "scalar", &worst, true) == 0);
        g_flips[k].off(m);
        const int bad = decode(m, "scalar", &worst, true);
        CHECKF(bad > 0, "%s: without the %s the goldens still pass (worst %.3g)", g_fam, g_flips[k].what, worst);
        printf("  without the %s: %d of 3 cases break (worst top-5 logit error before a token differs %.3g)\n",
               g_flips[k].what, bad, worst);
        m->inv_freq_swa = inv_swa;
        for (int64_t l = 0; l < m->hp.n_layer; l++)
            m->layers[l].attn_post_norm = post[2 * l], m->layers[l].ffn_post_norm = post[2 * l + 1];
        free(post);
        cdx_model_close(m);
    }
}

/* A copy of fixture fam whose config.json is the fixture's with sed expression expr applied, opened. */
static cdx_model *variant(const char *fam, const char *expr, cdx_err *e)
{
    char tmp[96], cmd[1024], src[160];
    snprintf(src, sizeof src, SHARED "/fixtures/hf/%s", fam);
    char *abs = realpath(src, NULL);
    snprintf(tmp, sizeof tmp, "/tmp/cdx_%s_var_%d", fam, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && ln -s %s/model.safetensors %s/ && sed '%s' %s/config.json > "
             "%s/config.json", tmp, tmp, abs, tmp, expr, src, tmp);
    free(abs);
    cdx_model *m = NULL;
    if (system(cmd) != 0 || cdx_model_open(tmp, NULL, &m, e) != 0)
        m = NULL;
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return m;
}

/* Gemma2/3: the softmax scale is query_pre_attn_scalar^-½, not head_dim^-½ (equal in the fixtures):
 * a copy of the checkpoint whose config.json says 64 reads scale 1/8 and no longer gives the goldens. */
static void run_query_pre_attn_scalar(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(g_dir, NULL, &m, &e) == 0);
    CHECKF(m->hp.attn_scale == 0.25f && m->hp.head_dim == 16, "fixture: scale %g, head_dim %lld", m->hp.attn_scale,
           (long long)m->hp.head_dim);
    cdx_model_close(m);
    m = variant(g_fam, "s/\"query_pre_attn_scalar\": 16/\"query_pre_attn_scalar\": 64/", &e);
    REQUIRE(m);
    CHECKF(m->hp.attn_scale == 0.125f, "query_pre_attn_scalar 64: scale %g (expected 1/8)", m->hp.attn_scale);
    double worst;
    const int bad = decode(m, "scalar", &worst, true);
    CHECKF(bad > 0, "the scale of query_pre_attn_scalar 64 still gives the goldens");
    printf("  query_pre_attn_scalar 64 (scale 1/8, head_dim 16): %d of 3 cases break\n", bad);
    cdx_model_close(m);
}

/* The logits after the 40 prompt tokens 3, 10, 17, ... (scalar kernels); NULL on an error. */
static float *last_logits(cdx_model *m)
{
    cdx_err e = { 0 };
    cdx_forward_ctx *fc = NULL;
    float *l = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    cdx_kv kv;
    if (!l || cdx_forward_ctx_create(m, 64, 1, cdx_kernels_by_isa("scalar"), &fc, &e) || cdx_kv_init(&kv, &m->hp, 64, &e)) {
        free(l);
        cdx_forward_ctx_free(fc);
        return NULL;
    }
    int32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = 3 + (7 * i) % 300;
    cdx_kv *kvp = &kv;
    cdx_batch b = { .n = 40, .tokens = ids };
    if (cdx_forward(fc, &kvp, 1, &b, l, &e)) {
        free(l);
        l = NULL;
    }
    cdx_kv_free(&kv);
    cdx_forward_ctx_free(fc);
    return l;
}

/* Shapes the fixtures do not have, read as the transformers config classes say (the frequencies
 * against modeling_rope_utils' formulas computed here in double). */
static void run_config_variants(void)
{
    cdx_err e = { 0 };
    /* Gemma3 with rope_scaling linear 8: the full-attention layers' inv_freq / 8, the sliding layers'
     * 1/rope_local_base_freq^(2i/d) unscaled (_compute_linear_scaling_rope_parameters; rotary_emb_local) */
    cdx_model *m = variant("gemma3", "s/\"rope_scaling\": null/\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}/",
                           &e);
    CHECKF(m != NULL, "gemma3 with linear rope scaling: %s", e.msg);
    if (m) {
        double worst = 0;
        for (int i = 0; i < 8; i++) {
            const double g = 1.0 / pow(1e6, 2.0 * i / 16) / 8, l = 1.0 / pow(1e4, 2.0 * i / 16);
            worst = fmax(worst, fabs(m->inv_freq[i] - g) / g);
            worst = fmax(worst, fabs(m->inv_freq_swa[i] - l) / l);
        }
        CHECKF(worst < 1e-6, "inv_freq relative error %g", worst);
        /* and the pass uses them: the last logits of a 40-token prompt move (the tokens need not) */
        cdx_model *plain = NULL;
        REQUIRE(cdx_model_open(SHARED "/fixtures/hf/gemma3", NULL, &plain, &e) == 0);
        float *la = last_logits(m), *lb = last_logits(plain);
        double d = 0;
        for (int64_t i = 0; la && lb && i < m->hp.n_vocab; i++)
            d = fmax(d, fabs(la[i] - lb[i]));
        CHECKF(d > 1e-5, "linear scaling moves the logits by %g", d);
        printf("  linear rope scaling 8 moves gemma3's logits by up to %.3g\n", d);
        free(la), free(lb);
        cdx_model_close(plain);
        cdx_model_close(m);
    }
    /* Gemma3 with sliding_window_pattern 3 and no layer_types: layers 2 and 5 full, the rest slide */
    m = variant("gemma3", "/\"layer_types\"/,/],/d; s/\"sliding_window_pattern\": 6/\"sliding_window_pattern\": 3/", &e);
    CHECKF(m != NULL, "gemma3 with sliding_window_pattern 3: %s", e.msg);
    if (m) {
        const uint8_t want[6] = { 1, 1, 0, 1, 1, 0 };
        CHECK(m->hp.swa_layers && !memcmp(m->hp.swa_layers, want, 6) && m->hp.sliding_window == 8);
        cdx_model_close(m);
    }
    /* Gemma2 with layer_types: they decide, not the even-layer rule */
    m = variant("gemma2", "s/\"head_dim\": 16,/\"head_dim\": 16, \"layer_types\": [\"full_attention\", "
                "\"sliding_attention\", \"sliding_attention\", \"full_attention\"],/", &e);
    CHECKF(m != NULL, "gemma2 with layer_types: %s", e.msg);
    if (m) {
        const uint8_t want[4] = { 0, 1, 1, 0 };
        CHECK(m->hp.swa_layers && !memcmp(m->hp.swa_layers, want, 4));
        cdx_model_close(m);
    }
    /* Gemma2 without its softcap keys: Gemma2Config's defaults 50 and 30; null: none */
    m = variant("gemma2", "/logit_softcapping/d", &e);
    CHECKF(m && m->hp.attn_softcap == 50.0f && m->hp.final_softcap == 30.0f, "gemma2 softcap defaults: %s",
           m ? "wrong values" : e.msg);
    cdx_model_close(m);
    m = variant("gemma2", "s/\"attn_logit_softcapping\": 20.0/\"attn_logit_softcapping\": null/", &e);
    CHECKF(m && m->hp.attn_softcap == 0 && m->hp.final_softcap == 15.0f, "gemma2 attn softcap null: %s",
           m ? "wrong values" : e.msg);
    cdx_model_close(m);
    /* Gemma: hidden_activation other than the tanh form is refused by name; hidden_act is ignored */
    m = variant("gemma", "s/\"hidden_act\": \"gelu\",/\"hidden_act\": \"gelu\", \"hidden_activation\": \"gelu\",/", &e);
    CHECKF(!m && strstr(e.msg, "hidden_activation is \"gelu\""), "exact GELU refused: %s", e.msg);
    cdx_model_close(m);
    m = variant("gemma", "s/\"hidden_act\": \"gelu\"/\"hidden_act\": \"silu\"/", &e);
    CHECKF(m && m->hp.act == CDX_HF_ACT_GELU_TANH, "hidden_act silu is ignored: %s", m ? "act changed" : e.msg);
    cdx_model_close(m);
}

int main(void)
{
    static const struct {
        const char *fam;
        const flip *flips;
        size_t n;
    } fams[] = {
        { "gemma", k_gemma, sizeof k_gemma / sizeof k_gemma[0] },
        { "gemma2", k_gemma2, sizeof k_gemma2 / sizeof k_gemma2[0] },
        { "gemma3", k_gemma3, sizeof k_gemma3 / sizeof k_gemma3[0] },
    };
    static char names[32][160];
    const char *isas[] = { "scalar", "avx2", "avx512" };
    int k = 0;
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        g_fam = fams[f].fam;
        snprintf(g_dir, sizeof g_dir, SHARED "/fixtures/hf/%s", g_fam);
        char gp[200];
        snprintf(gp, sizeof gp, "%s/golden.json", g_dir);
        json_error_t je;
        g_gold = json_load_file(gp, 0, &je);
        if (!g_gold) {
            printf("%s: %s\ngemma: 0 passed, 1 failed\n", gp, je.text);
            return 1;
        }
        for (int s = 0; s < 3; s++) {
            if (!cdx_kernels_by_isa(isas[s])) {
                t_skip_isa(isas[s]);
                continue;
            }
            g_isa = isas[s];
            snprintf(names[k], sizeof names[k], "%s (safetensors, %s kernels) reproduces the PyTorch goldens", g_fam,
                     isas[s]);
            RUN(names[k++], run_golden);
        }
        g_flips = fams[f].flips;
        g_n_flips = fams[f].n;
        snprintf(names[k], sizeof names[k], "%s: each difference from the common decoder is needed for the goldens",
                 g_fam);
        RUN(names[k++], run_each_difference_matters);
        if (strcmp(g_fam, "gemma")) {
            snprintf(names[k], sizeof names[k], "%s: the softmax scale is query_pre_attn_scalar^-1/2", g_fam);
            RUN(names[k++], run_query_pre_attn_scalar);
        }
        json_decref(g_gold);
    }
    RUN("config variants: linear rope on full layers only, sliding_window_pattern, layer_types, softcap defaults, "
        "activation keys", run_config_variants);
    return t_done("gemma");
}
