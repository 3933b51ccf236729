/* The "families B" of ../shared/fixtures/hf, and Cohere (PyTorch float32 goldens following transformers'
 * modeling code line by line; INDEX.md "Families B", "Gemma, Gemma2, Gemma3, Cohere, Granite, Phi3"): every case's 16 greedy tokens and every golden top-5
 * logit within 1e-3 (INDEX.md's tolerance), from the checkpoint and from its conversion to GGUF
 * (caldrix convert, llama.cpp's names and keys), on every kernel set. Then each rule the family adds
 * to the common decoder is switched off in turn, as a port that left it out would compute, and the
 * goldens must break every time (the fixtures' `sensitivity` records the same mistakes in PyTorch). */
#include "caldrix.h"
#include "caldrix/convert.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"
#include "caldrix/tokenizer.h"
#include "model/arch.h"
#include "test.h"
#include "model/golden_decode.h"

#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

/* One deliberate mistake: flip(m, on) switches the rule off (on false) or back. */
typedef struct {
    const char *what;
    void (*flip)(cdx_model *m, bool on);
} rule;

typedef struct {
    const char *name;       /* the fixture folder */
    bool gguf;              /* caldrix convert writes a GGUF of it */
    bool variants;          /* tests/golden/families-b-variants.json has settings of it */
    bool gelu_f16;          /* GGUF files compute llama.cpp's GELU (ggml's f16 table, ops.h): top-5 logits
                               within 1e-2 there (INDEX.md: llama.cpp's own GELU moves them by up to 6.7e-3) */
    rule rules[6];
} family;

static cdx_hparams *hp_of(cdx_model *m) { return (cdx_hparams *)cdx_model_hparams(m); } /* the test's own model */

/* SmolLM3: the NoPE layers rotate nothing; RoPE everywhere is the mistake */
static void flip_nope(cdx_model *m, bool on)
{
    static const uint8_t *keep;
    if (!on)
        keep = hp_of(m)->nope_layer;
    hp_of(m)->nope_layer = on ? keep : NULL;
}

/* OLMo 2: the branch outputs' norms dropped; q/k norms per head (each head with the first head's weights) */
static void flip_post_norms(cdx_model *m, bool on)
{
    static float *keep[CDX_HF_MAX_LAYERS][2];
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        layer_weights *L = &m->layers[l];
        if (!on) {
            keep[l][0] = L->attn_post_norm;
            keep[l][1] = L->ffn_post_norm;
        }
        L->attn_post_norm = on ? keep[l][0] : NULL;
        L->ffn_post_norm = on ? keep[l][1] : NULL;
    }
}

static void flip_qk_norm_full(cdx_model *m, bool on) { m->hp.qk_norm_full = on; }

/* OLMoE: the top-k weights renormalised (norm_topk_prob flipped) */
static void flip_norm_topk(cdx_model *m, bool on) { m->hp.norm_topk_prob = !m->hp.norm_topk_prob; (void)on; }

/* Granite MoE: softmax over all logits, top-k not renormalised; the default attention scale; no residual multiplier */
static void flip_topk_softmax(cdx_model *m, bool on) { m->hp.moe_topk_softmax = on; m->hp.norm_topk_prob = on; }
static void flip_attn_scale(cdx_model *m, bool on)
{
    static float keep;
    if (!on)
        keep = m->hp.attn_scale;
    m->hp.attn_scale = on ? keep : 0;
}
static void flip_residual(cdx_model *m, bool on)
{
    static float keep;
    if (!on)
        keep = m->hp.residual_scale;
    m->hp.residual_scale = on ? keep : 0;
}

/* Granite MoE: no embedding_multiplier; no logits_scaling (greedy tokens unchanged: the logits fail) */
static void flip_embd_scale(cdx_model *m, bool on)
{
    static float keep;
    if (!on)
        keep = m->hp.embd_scale;
    m->hp.embd_scale = on ? keep : 0;
}
static void flip_logit_div(cdx_model *m, bool on)
{
    static float keep;
    if (!on)
        keep = m->hp.logit_div;
    m->hp.logit_div = on ? keep : 0;
}

/* StableLM: RoPE over all of head_dim instead of its partial_rotary_factor share */
static void flip_partial_rotary(cdx_model *m, bool on)
{
    static float *keep;
    static int64_t keep_rot;
    if (!on) {
        keep = m->inv_freq;
        keep_rot = m->hp.n_rot;
        const int64_t hd = m->hp.head_dim;
        m->inv_freq = malloc((size_t)(hd / 2) * sizeof(float));
        for (int64_t i = 0; i < hd / 2; i++)
            m->inv_freq[i] = (float)(1.0 / pow(m->hp.rope_theta, (double)((float)(2 * i) / (float)hd)));
        m->hp.n_rot = hd;
    } else {
        free(m->inv_freq);
        m->inv_freq = keep;
        m->hp.n_rot = keep_rot;
    }
}

/* LayerNorm families: RMSNorm in place of LayerNorm (the biases unused) */
static void flip_layer_norm(cdx_model *m, bool on) { m->hp.layer_norm = on; }

/* Starcoder2: no window; o_proj's and the MLP's biases dropped */
static void flip_window(cdx_model *m, bool on)
{
    static int64_t keep;
    if (!on)
        keep = m->hp.sliding_window;
    m->hp.sliding_window = on ? keep : 0;
}
static void flip_linear_bias(cdx_model *m, bool on)
{
    static float *keep[CDX_HF_MAX_LAYERS][3];
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        layer_weights *L = &m->layers[l];
        float **v[3] = { &L->bo, &L->b_up, &L->b_down };
        for (int i = 0; i < 3; i++) {
            if (!on)
                keep[l][i] = *v[i];
            *v[i] = on ? keep[l][i] : NULL;
        }
    }
}

/* Cohere: no logit_scale; a sequential block (the MLP reads the residual stream unnormed); rotate_half */
static void flip_logit_scale(cdx_model *m, bool on)
{
    static float keep;
    if (!on)
        keep = m->hp.logit_scale;
    m->hp.logit_scale = on ? keep : 0;
}
static void flip_parallel(cdx_model *m, bool on) { m->hp.parallel_residual = on; }
static void flip_rope_pairs(cdx_model *m, bool on) { m->hp.rope_mode = on ? CDX_ROPE_ADJACENT : CDX_ROPE_HALVES; }

static const family k_families[] = {
    { "smollm3", true, true, false, { { "NoPE layers (RoPE on every layer)", flip_nope } } },
    { "olmo2", true, false, false, { { "the post-norms of the attention and MLP outputs", flip_post_norms },
                              { "q/k norms over the whole projection (per head instead)", flip_qk_norm_full } } },
    { "olmoe", true, true, false, { { "its un-renormalised top-k (norm_topk_prob flipped)", flip_norm_topk },
                             { "q/k norms over the whole projection (per head instead)", flip_qk_norm_full } } },
    { "granitemoe", false, true, false, { { "its top-k-then-softmax router (softmax over all, not renormalised)", flip_topk_softmax },
                                   { "attention_multiplier (head_dim^-0.5 instead)", flip_attn_scale },
                                   { "residual_multiplier", flip_residual },
                                   { "embedding_multiplier", flip_embd_scale },
                                   { "logits_scaling", flip_logit_div } } },
    { "stablelm", true, true, false, { { "partial rotary (RoPE over all of head_dim)", flip_partial_rotary },
                                { "LayerNorm (RMSNorm instead)", flip_layer_norm } } },
    { "starcoder2", true, true, true, { { "the sliding window", flip_window },
                                  { "the o_proj and MLP biases", flip_linear_bias },
                                  { "LayerNorm (RMSNorm instead)", flip_layer_norm } } },
    { "cohere", true, false, false, { { "logit_scale", flip_logit_scale },
                                      { "the parallel block (attention, then the MLP on the stream)", flip_parallel },
                                      { "interleaved RoPE pairs (rotate_half's halves instead)", flip_rope_pairs },
                                      { "LayerNorm (RMSNorm instead)", flip_layer_norm } } },
};
enum { N_FAMILIES = sizeof k_families / sizeof k_families[0] };

static const family *g_fam;
static const char *g_path, *g_isa;
static char g_gguf[N_FAMILIES][128];
static json_t *g_gold;
static double g_tol = 1e-3; /* the top-5 logits' tolerance of the run */

/* Greedy over every case: 0 when the tokens and top-5 logits match; else the number of cases that
 * do not. *worst: the largest top-5 logit error seen. */
static int decode(cdx_model *m, const char *isa, double *worst, bool quiet)
{
    return golden_decode(m, g_gold, isa, g_tol, g_path, worst, quiet);
}

static void run_golden(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    const cdx_model_opts mo = { .dtype = CDX_DTYPE_F32 };
    int rc = cdx_model_open(g_path, &mo, &m, &e);
    CHECKF(rc == 0, "%s: %s", g_path, e.msg);
    if (rc)
        return;
    double worst;
    const size_t pl = strlen(g_path);
    g_tol = g_fam->gelu_f16 && pl > 5 && !strcmp(g_path + pl - 5, ".gguf") ? 1e-2 : 1e-3;
    CHECKF(decode(m, g_isa, &worst, false) == 0, "%s [%s]: cases differ from the goldens (worst %.3g)", g_path, g_isa,
           worst);
    cdx_model_close(m);
}

/* Each rule off in turn: every one must break the goldens; all back, they pass. */
static void run_each_rule_matters(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    char dir[160];
    snprintf(dir, sizeof dir, SHARED "/fixtures/hf/%s", g_fam->name);
    g_path = dir;
    REQUIRE(cdx_model_open(dir, NULL, &m, &e) == 0);
    for (const rule *r = g_fam->rules; r->what; r++) {
        r->flip(m, false);
        double worst;
        const int bad = decode(m, "scalar", &worst, true);
        CHECKF(bad > 0, "%s without %s: the goldens still pass (worst %.3g)", g_fam->name, r->what, worst);
        printf("  %s without %s: %d of 3 cases break (worst top-5 logit error %.3g)\n", g_fam->name, r->what, bad,
               worst);
        r->flip(m, true);
    }
    double worst;
    CHECKF(decode(m, "scalar", &worst, true) == 0, "%s with every rule back: the goldens pass", g_fam->name);
    cdx_model_close(m);
}

/* tests/golden/families-b-variants.json (scripts/goldens/torch-families-b-variants.py: the fixtures'
 * reference in PyTorch under config.json settings the fixtures do not use): the fixture's weights with
 * each variant's config.json keys, every case's tokens and top-5 logits. */
static void run_variants(void)
{
    json_error_t je;
    json_t *all = json_load_file("tests/golden/families-b-variants.json", 0, &je);
    REQUIRE(all);
    json_t *const keep = g_gold;
    int seen = 0;
    size_t vi;
    json_t *v;
    json_array_foreach(json_object_get(all, "variants"), vi, v) {
        if (strcmp(json_string_value(json_object_get(v, "family")), g_fam->name))
            continue;
        char dir[128], src[256], dst[256];
        snprintf(dir, sizeof dir, "/tmp/cdx_fb_%s_%d_%zu", g_fam->name, (int)getpid(), vi);
        REQUIRE(mkdir(dir, 0700) == 0);
        snprintf(src, sizeof src, SHARED "/fixtures/hf/%s/config.json", g_fam->name);
        json_t *cfg = json_load_file(src, 0, &je);
        REQUIRE(cfg);
        json_object_update(cfg, json_object_get(v, "config"));
        snprintf(dst, sizeof dst, "%s/config.json", dir);
        REQUIRE(json_dump_file(cfg, dst, 0) == 0);
        json_decref(cfg);
        char cwd[160];
        REQUIRE(getcwd(cwd, sizeof cwd));
        snprintf(src, sizeof src, "%s/" SHARED "/fixtures/hf/%s/model.safetensors", cwd, g_fam->name);
        snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
        REQUIRE(symlink(src, dst) == 0);
        cdx_err e = { 0 };
        cdx_model *m = NULL;
        g_path = dir;
        int rc = cdx_model_open(dir, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &m, &e);
        CHECKF(rc == 0, "%s (%s): %s", g_fam->name, json_string_value(json_object_get(v, "variant")), e.msg);
        g_gold = v;
        double worst = 0;
        const int bad = rc ? 3 : decode(m, "scalar", &worst, true);
        CHECKF(bad == 0, "%s with %s: %d cases differ from PyTorch's (worst %.3g)", g_fam->name,
               json_string_value(json_object_get(v, "variant")), bad, worst);
        printf("  %s with %s: %d of 3 cases match PyTorch's (worst top-5 logit error %.2e)\n", g_fam->name,
               json_string_value(json_object_get(v, "variant")), 3 - bad, worst);
        cdx_model_close(m);
        m = NULL;
        if (g_fam->gguf) { /* its GGUF: the same answer, or a refusal where llama.cpp's keys cannot say it */
            char gg[160];
            snprintf(gg, sizeof gg, "%s.gguf", dir);
            cdx_gguf_writer *w = NULL;
            cdx_convert *c = NULL;
            REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
            rc = cdx_convert_hf(dir, &(cdx_convert_opts){ .type = CDX_TYPE_F32 }, w, &c, &e);
            if (!strcmp(g_fam->name, "smollm3"))
                CHECKF(rc == CDX_EUNSUPPORTED && strstr(e.msg, "no key for the NoPE layers"), "smollm3 convert: %s",
                       rc ? e.msg : "converted");
            else {
                CHECKF(rc == 0, "%s", e.msg);
                rc = rc ? rc : cdx_tok_export_gguf_dummy(w, 320, 1, 2, &e);
                rc = rc ? rc : cdx_gguf_writer_write(w, gg, &e);
                rc = rc ? rc : cdx_model_open(gg, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &m, &e);
                CHECKF(rc == 0, "%s: %s", gg, e.msg);
                g_tol = g_fam->gelu_f16 ? 1e-2 : 1e-3;
                const int gbad = rc ? 3 : decode(m, "scalar", &worst, true);
                g_tol = 1e-3;
                CHECKF(gbad == 0, "%s with %s, converted GGUF: %d cases differ from PyTorch's (worst %.3g)",
                       g_fam->name, json_string_value(json_object_get(v, "variant")), gbad, worst);
                cdx_model_close(m);
                unlink(gg);
            }
            cdx_convert_free(c);
            cdx_gguf_writer_free(w);
        }
        unlink(dst);
        snprintf(dst, sizeof dst, "%s/config.json", dir);
        unlink(dst);
        rmdir(dir);
        seen++;
    }
    g_gold = keep;
    CHECKF(seen > 0, "no variant of %s in tests/golden/families-b-variants.json", g_fam->name);
    json_decref(all);
}

static char g_conv_name[N_FAMILIES][160];
static int g_conv_i;

static void run_convert(void)
{
    cdx_err e = { 0 };
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    char dir[160];
    snprintf(dir, sizeof dir, SHARED "/fixtures/hf/%s", g_fam->name);
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    int rc = cdx_convert_hf(dir, &(cdx_convert_opts){ .type = CDX_TYPE_F32 }, w, &c, &e);
    CHECKF(rc == 0, "%s: %s", dir, e.msg);
    rc = rc ? rc : cdx_tok_export_gguf_dummy(w, 320, 1, 2, &e);
    char *out = g_gguf[g_conv_i];
    snprintf(out, sizeof g_gguf[0], "/tmp/cdx_%s_%d.gguf", g_fam->name, (int)getpid());
    rc = rc ? rc : cdx_gguf_writer_write(w, out, &e);
    CHECKF(rc == 0, "writing %s: %s", out, e.msg);
    if (rc)
        out[0] = 0;
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
}

int main(void)
{
    static char names[64][200];
    const char *isas[] = { "scalar", "avx2", "avx512" };
    int k = 0;
    for (int f = 0; f < N_FAMILIES; f++) {
        g_fam = &k_families[f];
        char gold[160];
        snprintf(gold, sizeof gold, SHARED "/fixtures/hf/%s/golden.json", g_fam->name);
        json_error_t je;
        g_gold = json_load_file(gold, 0, &je);
        if (!g_gold) {
            printf("%s: %s\nfamilies_b: 0 passed, 1 failed\n", gold, je.text);
            return 1;
        }
        if (g_fam->gguf) {
            g_conv_i = f;
            snprintf(g_conv_name[f], sizeof g_conv_name[f], "%s converts to GGUF", g_fam->name);
            RUN(g_conv_name[f], run_convert);
        }
        char dir[160];
        snprintf(dir, sizeof dir, SHARED "/fixtures/hf/%s", g_fam->name);
        for (int fmt = 0; fmt < (g_fam->gguf && g_gguf[f][0] ? 2 : 1); fmt++)
            for (int s = 0; s < 3; s++) {
                if (!cdx_kernels_by_isa(isas[s])) {
                    t_skip_isa(isas[s]);
                    continue;
                }
                g_path = fmt ? g_gguf[f] : dir;
                g_isa = isas[s];
                snprintf(names[k], sizeof names[k], "%s (%s, %s kernels) reproduces the PyTorch goldens", g_fam->name,
                         fmt ? "converted GGUF" : "safetensors", isas[s]);
                RUN(names[k], run_golden);
                k++;
            }
        if (g_fam->variants) {
            snprintf(names[k], sizeof names[k], "%s follows config.json settings the fixture does not use "
                     "(PyTorch goldens of the same weights)", g_fam->name);
            RUN(names[k], run_variants);
            k++;
        }
        snprintf(names[k], sizeof names[k], "%s: each of its rules is needed for the goldens", g_fam->name);
        RUN(names[k], run_each_rule_matters);
        k++;
        if (g_gguf[f][0])
            unlink(g_gguf[f]);
        json_decref(g_gold);
    }
    return t_done("families_b");
}
