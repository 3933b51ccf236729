/* Qwen3.5 (Gated DeltaNet + gated attention): the two fixtures of ../shared/fixtures/hf (qwen3_5:
 * Qwen3_5ForCausalLM; qwen3_5_vl: Qwen3_5ForConditionalGeneration read as text, model.visual.* and
 * mtp.* skipped) against their PyTorch goldens (tokens exact, top-5 logits and the case's 320
 * last-prompt logits within 1e-3, INDEX.md's tolerance), in the chunked form and in the per-token
 * recurrence; the chunked form's bits do not depend on how the prompt is split into batches; and
 * the delta-rule kernel against a float64 recurrence. */
#include "caldrix.h"
#include "caldrix/model.h"
#include "model/deltanet.h"
#include "test.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_fixture, *g_isa;

typedef struct {
    int32_t ids[128];
    size_t n;
} prompt;

/* Runs a golden case: the prompt in pieces of `piece` tokens (0: one batch), then 16 greedy
 * steps; writes every step's logits to out[16][n_vocab]. Returns the number of token mismatches
 * (after the first, the run stops). */
static int run_case(cdx_forward_ctx *fc, const cdx_model *m, const prompt *p, const int32_t *want, int piece,
                    float *out)
{
    const cdx_hparams *hp = cdx_model_hparams(m);
    cdx_err e = { 0 };
    cdx_kv kv;
    if (cdx_kv_init_model(&kv, m, 256, &e) != 0) {
        CHECKF(0, "cdx_kv_init_model: %s", e.msg);
        return 1 << 20; /* every step counts as a mismatch */
    }
    cdx_kv *kvp = &kv;
    int bad = 0;
    size_t done = 0;
    while (done < p->n) {
        size_t k = piece > 0 && (size_t)piece < p->n - done ? (size_t)piece : p->n - done;
        cdx_batch b = { .n = (int64_t)k, .tokens = p->ids + done };
        int rc = cdx_forward(fc, &kvp, 1, &b, out, &e);
        CHECKF(rc == 0, "%s", e.msg);
        if (rc)
            goto done;
        done += k;
    }
    CHECKF(cdx_model_state_pos(kv.state) == (int64_t)p->n, "state at %lld after %zu prompt tokens",
           (long long)cdx_model_state_pos(kv.state), p->n);
    for (int s = 0; s < 16; s++) {
        const float *l = out + (size_t)s * (size_t)hp->n_vocab;
        int32_t got = cdx_argmax(l, hp->n_vocab);
        if (got != want[s]) {
            bad++;
            break;
        }
        if (s == 15)
            break;
        cdx_batch nb = { .n = 1, .tokens = &want[s] };
        int rc = cdx_forward(fc, &kvp, 1, &nb, out + (size_t)(s + 1) * (size_t)hp->n_vocab, &e);
        CHECKF(rc == 0, "%s", e.msg);
        if (rc)
            break;
    }
done:
    cdx_kv_free(&kv);
    return bad;
}

static void goldens(void)
{
    char path[256], gpath[300];
    snprintf(path, sizeof path, SHARED "/fixtures/hf/%s", g_fixture);
    snprintf(gpath, sizeof gpath, "%s/golden.json", path);
    json_error_t je;
    json_t *gold = json_load_file(gpath, 0, &je);
    REQUIRE(gold);
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    int rc = cdx_model_open(path, NULL, &m, &e);
    CHECKF(rc == 0, "%s", e.msg);
    if (rc) {
        json_decref(gold);
        return;
    }
    const cdx_hparams *hp = cdx_model_hparams(m);
    CHECK(hp->arch == CDX_ARCH_QWEN3_5 && hp->n_layer_kv == 1 && hp->n_rot == 8 && cdx_model_state_bytes(m) > 0);
    cdx_forward_ctx *fc = NULL, *fr = NULL;
    REQUIRE(cdx_forward_ctx_create(m, 128, 2, cdx_kernels_by_isa(g_isa), &fc, &e) == 0);
    REQUIRE(cdx_forward_ctx_create(m, 128, 2, cdx_kernels_by_isa(g_isa), &fr, &e) == 0);
    REQUIRE(cdx_forward_ctx_set_per_token(fr, true) == 0);
    const size_t nv = (size_t)hp->n_vocab;
    float *lc = malloc(16 * nv * sizeof(float)), *lr = malloc(16 * nv * sizeof(float)),
          *lp = malloc(16 * nv * sizeof(float));
    REQUIRE(lc && lr && lp);
    size_t ci;
    json_t *c;
    double worst_c = 0, worst_r = 0, worst_cr = 0;
    json_array_foreach(json_object_get(gold, "cases"), ci, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *jp = json_object_get(c, "prompt_ids"), *jt = json_object_get(c, "tokens"),
               *steps = json_object_get(c, "steps"),
               *last = json_object_get(json_object_get(json_object_get(gold, "golden_f32_logits"), "cases"), name);
        prompt p = { .n = json_array_size(jp) };
        REQUIRE(p.n <= 128 && json_array_size(jt) == 16 && json_array_size(last) == nv);
        int32_t want[16];
        for (size_t i = 0; i < p.n; i++)
            p.ids[i] = (int32_t)json_integer_value(json_array_get(jp, i));
        for (size_t i = 0; i < 16; i++)
            want[i] = (int32_t)json_integer_value(json_array_get(jt, i));
        /* chunked form, the prompt in one batch; the per-token recurrence */
        CHECKF(run_case(fc, m, &p, want, 0, lc) == 0, "%s case %s: a greedy token differs (chunked form)", g_fixture,
               name);
        CHECKF(run_case(fr, m, &p, want, 0, lr) == 0, "%s case %s: a greedy token differs (per-token recurrence)",
               g_fixture, name);
        double wc = 0, wr = 0, cr = 0;
        for (size_t s = 0; s < 16; s++) {
            json_t *top = json_object_get(json_array_get(steps, s), "top");
            for (size_t k = 0; k < json_array_size(top); k++) {
                const int64_t id = json_integer_value(json_array_get(json_array_get(top, k), 0));
                const double g = json_number_value(json_array_get(json_array_get(top, k), 1));
                wc = fmax(wc, fabs(lc[s * nv + (size_t)id] - g));
                wr = fmax(wr, fabs(lr[s * nv + (size_t)id] - g));
            }
            for (size_t i = 0; i < nv; i++)
                cr = fmax(cr, fabs((double)lc[s * nv + i] - (double)lr[s * nv + i]));
        }
        for (size_t i = 0; i < nv; i++) {
            const double g = json_number_value(json_array_get(last, i));
            wc = fmax(wc, fabs(lc[i] - g));
            wr = fmax(wr, fabs(lr[i] - g));
        }
        CHECKF(wc <= 1e-3, "%s case %s: chunked form, worst logit error %.3g", g_fixture, name, wc);
        CHECKF(wr <= 1e-3, "%s case %s: per-token recurrence, worst logit error %.3g", g_fixture, name, wr);
        worst_c = fmax(worst_c, wc);
        worst_r = fmax(worst_r, wr);
        worst_cr = fmax(worst_cr, cr);
        /* the prompt in pieces of 1, 7 and 16 tokens: the same bits as in one batch */
        const int pieces[] = { 1, 7, 16 };
        for (int k = 0; k < 3; k++) {
            CHECKF(run_case(fc, m, &p, want, pieces[k], lp) == 0, "%s case %s: a token differs in pieces of %d",
                   g_fixture, name, pieces[k]);
            CHECKF(!memcmp(lp, lc, 16 * nv * sizeof(float)), "%s case %s: logits in pieces of %d are not the bits "
                   "of the one-batch prompt", g_fixture, name, pieces[k]);
        }
    }
    /* chunked vs per-token: INDEX.md measured 1.8e-4 between the reference's two forms in float32 */
    CHECKF(worst_cr <= 2.5e-4, "%s: chunked and per-token logits differ by %.3g", g_fixture, worst_cr);
    printf("  %s [%s]: max |logit - golden| chunked %.2e, per-token %.2e; max |chunked - per-token| over all "
           "320 logits of every step %.2e\n", g_fixture, g_isa, worst_c, worst_r, worst_cr);
    free(lc);
    free(lr);
    free(lp);
    cdx_forward_ctx_free(fc);
    cdx_forward_ctx_free(fr);
    cdx_model_close(m);
    json_decref(gold);
}

/* ---- the kernel: chunked form vs the recurrence, in float64 ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* The AVX2 chunk step against the scalar one on a dk x dv head for 150 positions (two folds):
 * outputs and states bit for bit. */
static void diff_avx2_scalar(int dk, int dv)
{
    const size_t hf = (size_t)(dk * dv + DN_CHUNK * dk + DN_CHUNK * dv + DN_CHUNK);
    float *h1 = calloc(hf, sizeof(float)), *h2 = calloc(hf, sizeof(float));
    float *q = malloc(sizeof(float) * (size_t)dk), *k = malloc(sizeof(float) * (size_t)dk);
    float *v = malloc(sizeof(float) * (size_t)dv), *o1 = malloc(sizeof(float) * (size_t)dv);
    float *o2 = malloc(sizeof(float) * (size_t)dv), *tmp = malloc(sizeof(float) * DN_TMP_FLOATS((size_t)dv));
    int diff = 0;
    for (int t = 0; t < 150; t++) {
        double sq = 0, sk = 0;
        for (int a = 0; a < dk; a++) {
            q[a] = frand();
            k[a] = frand();
            sq += q[a] * q[a];
            sk += k[a] * k[a];
        }
        for (int a = 0; a < dk; a++) {
            q[a] = (float)(q[a] / sqrt(sq) / sqrt(dk));
            k[a] = (float)(k[a] / sqrt(sk));
        }
        for (int b = 0; b < dv; b++)
            v[b] = frand();
        const float g = -0.3f * (frand() + 1.0f), beta = 0.5f * (frand() + 1.0f);
        dn_chunk_step(h1, dk, dv, t % DN_CHUNK, q, k, v, g, beta, o1, tmp);
        dn_kernels_avx2.chunk(h2, dk, dv, t % DN_CHUNK, q, k, v, g, beta, o2, tmp);
        diff += memcmp(o1, o2, sizeof(float) * (size_t)dv) != 0;
    }
    diff += memcmp(h1, h2, hf * sizeof(float)) != 0;
    CHECKF(diff == 0, "dk %d, dv %d: the AVX2 chunk step differs from the scalar one at %d places", dk, dv, diff);
    free(h1);
    free(h2);
    free(q);
    free(k);
    free(v);
    free(o1);
    free(o2);
    free(tmp);
}

static void delta_rule_kernel(void)
{
    enum { T = 200, DK = 16, DV = 24 };
    static float q[T][DK], k[T][DK], v[T][DV], g[T], beta[T];
    for (int t = 0; t < T; t++) {
        double sq = 0, sk = 0;
        for (int a = 0; a < DK; a++) {
            q[t][a] = frand();
            k[t][a] = frand();
            sq += q[t][a] * q[t][a];
            sk += k[t][a] * k[t][a];
        }
        for (int a = 0; a < DK; a++) {
            q[t][a] = (float)(q[t][a] / sqrt(sq) * 0.25);
            k[t][a] = (float)(k[t][a] / sqrt(sk));
        }
        for (int b = 0; b < DV; b++)
            v[t][b] = frand();
        g[t] = -0.3f * (frand() + 1.0f);  /* decays in (e^-0.6, 1] */
        beta[t] = 0.5f * (frand() + 1.0f);
    }
    const size_t hf = (size_t)(DK * DV + DN_CHUNK * DK + DN_CHUNK * DV + DN_CHUNK);
    float *hc = calloc(hf, sizeof(float)), *hr = calloc(hf, sizeof(float)), tmp[DN_TMP_FLOATS(DV)];
    static float oc[T][DV], orr[T][DV];
    static double S[DK][DV];
    memset(S, 0, sizeof S);
    double worst_c = 0, worst_r = 0;
    for (int t = 0; t < T; t++) {
        dn_chunk_step(hc, DK, DV, t % DN_CHUNK, q[t], k[t], v[t], g[t], beta[t], oc[t], tmp);
        dn_recurrent_step(hr, DK, DV, q[t], k[t], v[t], g[t], beta[t], orr[t], tmp);
        /* float64 recurrence */
        const double eg = exp((double)g[t]);
        double d[DV], o[DV];
        for (int b = 0; b < DV; b++) {
            double ks = 0;
            for (int a = 0; a < DK; a++)
                ks += (S[a][b] *= eg, S[a][b] * k[t][a]);
            d[b] = ((double)v[t][b] - ks) * beta[t];
        }
        for (int b = 0; b < DV; b++) {
            o[b] = 0;
            for (int a = 0; a < DK; a++) {
                S[a][b] += k[t][a] * d[b];
                o[b] += q[t][a] * S[a][b];
            }
            worst_c = fmax(worst_c, fabs(oc[t][b] - o[b]));
            worst_r = fmax(worst_r, fabs(orr[t][b] - o[b]));
        }
    }
    /* measured here: ~1e-6 both (outputs of order 1); a wrong decay, sign or fold gives > 1e-2 */
    CHECKF(worst_c < 2e-5 && worst_r < 2e-5, "chunked %.3g, per-token %.3g from the float64 recurrence", worst_c,
           worst_r);
    printf("  200 positions (3 chunk folds): chunked %.2e, per-token %.2e from float64\n", worst_c, worst_r);
    /* the AVX2 copy: the same bits as the scalar oracle, outputs and states, here and on shapes
     * with and without its 32- and 8-wide blocks (Qwen3.5's 128 x 128 among them) */
    if (__builtin_cpu_supports("avx2")) {
        float *hc2 = calloc(hf, sizeof(float)), *hr2 = calloc(hf, sizeof(float)), o2[DV], o3[DV];
        int diff = 0;
        for (int t = 0; t < T; t++) {
            dn_kernels_avx2.chunk(hc2, DK, DV, t % DN_CHUNK, q[t], k[t], v[t], g[t], beta[t], o2, tmp);
            dn_kernels_avx2.recurrent(hr2, DK, DV, q[t], k[t], v[t], g[t], beta[t], o3, tmp);
            diff += memcmp(o2, oc[t], sizeof o2) != 0 || memcmp(o3, orr[t], sizeof o3) != 0;
        }
        diff += memcmp(hc2, hc, hf * sizeof(float)) != 0 || memcmp(hr2, hr, hf * sizeof(float)) != 0;
        CHECKF(diff == 0, "the AVX2 delta rule differs from the scalar one at %d places", diff);
        free(hc2);
        free(hr2);
        static const int shapes[][2] = { { 128, 128 }, { 40, 72 }, { 13, 37 }, { 8, 8 } };
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            diff_avx2_scalar(shapes[si][0], shapes[si][1]);
    } else
        t_skip_isa("avx2");
    free(hc);
    free(hr);
}

/* A checkpoint whose config.json disagrees with its tensors is refused naming the tensor. */
static void refusals(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    CHECK(cdx_model_open(SHARED "/fixtures/hf/qwen3_5_vl", NULL, &m, &e) == 0);
    CHECKF(m && cdx_model_hparams(m)->tied_embeddings, "%s", e.msg);
    cdx_model_close(m);
    static const struct {
        const char *key, *value, *msg;
    } bad[] = {
        { "linear_key_head_dim", "8", "linear_attn.in_proj_qkv.weight\" has shape [128, 64]; the model's "
          "hyperparameters need [96, 64]" },
        { "linear_conv_kernel_dim", "3", "linear_attn.conv1d.weight\" has shape [128, 4]; the model's "
          "hyperparameters need [128, 3]" },
        { "linear_num_value_heads", "2", "in_proj_qkv.weight\" has shape [128, 64]; the model's hyperparameters need [96, 64]" },
        { "layer_types", "[\"linear_attention\",\"linear_attention\",\"full_attention\",\"full_attention\"]",
          "tensor \"model.layers.2.self_attn.q_proj.weight\" is missing" },
        { "num_attention_heads", "2", "self_attn.q_proj.weight\" has shape [256, 64]; the model's hyperparameters need [128, 64]" },
    };
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/cdx_q35_%d", (int)getpid());
    REQUIRE(mkdir(dir, 0700) == 0);
    char cfg[128], st[128], real_st[PATH_MAX];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    REQUIRE(realpath(SHARED "/fixtures/hf/qwen3_5/model.safetensors", real_st));
    REQUIRE(symlink(real_st, st) == 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_error_t je;
        json_t *root = json_load_file(SHARED "/fixtures/hf/qwen3_5/config.json", 0, &je);
        REQUIRE(root);
        json_object_set_new(root, bad[i].key, json_loads(bad[i].value, JSON_DECODE_ANY, &je));
        json_object_del(root, "full_attention_interval");
        REQUIRE(json_dump_file(root, cfg, 0) == 0);
        json_decref(root);
        m = NULL;
        int rc = cdx_model_open(dir, NULL, &m, &e);
        CHECKF(rc == CDX_EFORMAT && strstr(e.msg, bad[i].msg), "%s = %s: rc %d \"%s\"", bad[i].key, bad[i].value, rc,
               e.msg);
        cdx_model_close(m);
    }
    unlink(cfg);
    unlink(st);
    rmdir(dir);
}

int main(void)
{
    static const char *const fixtures[] = { "qwen3_5", "qwen3_5_vl" };
    static const char *const isas[] = { "scalar", "avx2", "avx512" };
    static char names[8][160];
    int k = 0;
    RUN("the chunked delta rule and the per-token recurrence match a float64 recurrence; AVX2 = scalar bits", delta_rule_kernel);
    for (size_t f = 0; f < 2; f++)
        for (int s = 0; s < 3; s++) {
            if (!cdx_kernels_by_isa(isas[s])) {
                t_skip_isa(isas[s]);
                continue;
            }
            snprintf(names[k], sizeof names[k], "%s (%s kernels): PyTorch goldens in both forms, the same bits in "
                     "pieces of 1, 7 and 16", fixtures[f], isas[s]);
            g_fixture = fixtures[f];
            g_isa = isas[s];
            RUN(names[k], goldens);
            k++;
        }
    RUN("a config.json that disagrees with the tensors is refused naming the tensor", refusals);
    return t_done("qwen35");
}
