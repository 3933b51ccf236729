/* Qwen2-VL and Qwen2.5-VL, their text path. scripts/goldens/tiny_fixtures.py writes the tiny random-weight
 * checkpoints at test time (qwen2_vl: the releases' layout, text keys at the top level, rope_scaling type "mrope",
 * model.layers.* beside visual.*; qwen2_5_vl: transformers >= 4.52's, text_config, model.language_model.* beside
 * model.visual.*), and tests/golden/qwen2vl.json holds PyTorch's float32 goldens (scripts/goldens/torch-qwen2vl.py,
 * modeling_qwen2_vl.py transcribed line by line). For every variant: the 16 greedy tokens of every case and every
 * golden top-5 logit within 1e-3, from the checkpoint on every kernel set alone, with the three cases as one
 * batch of three sequences, and through the engine alone and batched; its conversion to GGUF (caldrix convert:
 * qwen2vl, rope.dimension_sections) gives them too. A text prompt has its temporal, height and width positions
 * equal, where the sections change nothing, so two checks see them: the rotation alone on vectors at unequal
 * positions against apply_multimodal_rotary_pos_emb, and one forward pass whose tokens have unequal positions
 * (cdx_batch.pos_sections) against PyTorch's logits at every position; both must break when the sections are
 * replaced by one position. */
#include "caldrix.h"
#include "caldrix/convert.h"
#include "caldrix/engine.h"
#include "caldrix/format.h"
#include "caldrix/model.h"
#include "caldrix/tokenizer.h"
#include "model/arch.h"
#include "model/ops.h"
#include "test.h"
#include "model/golden_decode.h"

#include <jansson.h>
#include <unistd.h>

static json_t *g_all, *g_var;
static char g_dir[128], g_gguf[160];
static const char *g_fam;

static int32_t jint(json_t *a, size_t i) { return (int32_t)json_integer_value(json_array_get(a, i)); }

/* ---- the rotation alone ---- */

static void rope_sections_match_transformers(void)
{
    size_t i;
    json_t *c;
    int n = 0, unequal = 0;
    json_array_foreach(json_object_get(g_all, "rope"), i, c) {
        const int64_t hd = json_integer_value(json_object_get(c, "head_dim")),
                      nh = json_integer_value(json_object_get(c, "n_heads"));
        json_t *pos = json_object_get(c, "positions"), *sec = json_object_get(c, "mrope_section"),
               *fr = json_object_get(c, "inv_freq");
        REQUIRE(hd <= 128 && nh <= 2 && (int64_t)json_array_size(fr) == hd / 2);
        const int64_t p4[4] = { jint(pos, 0), jint(pos, 1), jint(pos, 2), 0 };
        const int32_t s4[4] = { jint(sec, 0), jint(sec, 1), jint(sec, 2), 0 };
        float inv[64];
        for (int64_t k = 0; k < hd / 2; k++) /* transformers' inv_freq, so that only the rotation is compared */
            inv[k] = (float)json_number_value(json_array_get(fr, (size_t)k));
        const char *const vin[2] = { "q", "k" }, *const vout[2] = { "q_rotated", "k_rotated" };
        const int64_t heads[2] = { nh, 1 };
        for (int w = 0; w < 2; w++) {
            float v[256], one[256];
            json_t *x = json_object_get(c, vin[w]), *y = json_object_get(c, vout[w]);
            const int64_t len = heads[w] * hd;
            REQUIRE((int64_t)json_array_size(x) == len && (int64_t)json_array_size(y) == len);
            for (int64_t k = 0; k < len; k++)
                v[k] = one[k] = (float)json_number_value(json_array_get(x, (size_t)k));
            model_rope_sections(v, heads[w], hd, hd, p4, s4, inv, CDX_ROPE_HALVES, 0);
            model_rope_att(one, heads[w], hd, hd, p4[0], inv, CDX_ROPE_HALVES, 0); /* one position: the temporal */
            double err = 0, off = 0;
            for (int64_t k = 0; k < len; k++) {
                const double g = json_number_value(json_array_get(y, (size_t)k));
                err = fabs(v[k] - g) > err ? fabs(v[k] - g) : err;
                off = fabs(one[k] - g) > off ? fabs(one[k] - g) : off;
            }
            const bool equal = p4[0] == p4[1] && p4[1] == p4[2];
            CHECKF(err <= 1e-5, "rope case %zu (%s, positions %lld/%lld/%lld): max error %.3g", i, vin[w],
                   (long long)p4[0], (long long)p4[1], (long long)p4[2], err);
            if (equal) /* text positions: the sections give 1D RoPE's bits */
                CHECKF(!memcmp(v, one, (size_t)len * sizeof *v), "rope case %zu: equal positions differ from 1D RoPE", i);
            else
                CHECKF(off > 1e-3, "rope case %zu: 1D RoPE at the temporal position is within %.3g of the golden: "
                       "the case cannot tell the sections apart", i, off);
            printf("  rope case %zu %s: head_dim %lld, sections [%d, %d, %d], positions %lld/%lld/%lld: max error "
                   "%.2e (1D RoPE: %.2e)\n", i, vin[w], (long long)hd, s4[0], s4[1], s4[2], (long long)p4[0],
                   (long long)p4[1], (long long)p4[2], err, off);
            unequal += !equal;
        }
        n++;
    }
    CHECKF(n >= 4 && unequal >= 4, "%d rope cases, %d with unequal positions", n, unequal);
}

/* ---- the model ---- */

/* Greedy over every case, one sequence at a time: the cases that differ; *worst the largest top-5 error. */
static int decode(cdx_model *m, const char *isa, double *worst, bool quiet, const char *what)
{
    char label[128];
    snprintf(label, sizeof label, "%s %s", g_fam, what);
    return golden_decode(m, g_var, isa, 1e-3, label, worst, quiet);
}

/* The cases as one batch: the prompts together, then one token of each sequence per step. */
static int decode_batched(cdx_model *m, const char *isa, double *worst)
{
    enum { NS = 3 };
    cdx_err e = { 0 };
    const cdx_hparams *hp = cdx_model_hparams(m);
    json_t *cases = json_object_get(g_var, "cases");
    if (json_array_size(cases) != NS)
        return 99;
    cdx_forward_ctx *fc = NULL;
    if (cdx_forward_ctx_create(m, 128, 2, cdx_kernels_by_isa(isa), &fc, &e))
        return 99;
    cdx_kv kv[NS];
    cdx_kv *kvp[NS];
    int32_t ids[128], seq[128];
    bool want[128];
    int64_t n = 0;
    for (int s = 0; s < NS; s++) {
        cdx_kv_init(&kv[s], hp, 256, &e);
        kvp[s] = &kv[s];
        json_t *p = json_object_get(json_array_get(cases, s), "prompt_ids");
        for (size_t i = 0; i < json_array_size(p); i++, n++) {
            ids[n] = jint(p, i);
            seq[n] = s;
            want[n] = i + 1 == json_array_size(p);
        }
    }
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab * NS);
    int bad = 0;
    *worst = 0;
    cdx_batch b = { .n = n, .tokens = ids, .seq = seq, .want_logits = want };
    bool ok = cdx_forward(fc, kvp, NS, &b, logits, &e) == 0;
    for (size_t st = 0; ok && st < 16; st++) {
        for (int s = 0; s < NS; s++) {
            json_t *c = json_array_get(cases, s);
            int32_t tok = jint(json_object_get(c, "tokens"), st);
            json_t *top = json_object_get(json_array_get(json_object_get(c, "steps"), st), "top");
            for (size_t k = 0; k < json_array_size(top); k++) {
                json_t *pair = json_array_get(top, k);
                double d = fabs(logits[s * hp->n_vocab + jint(pair, 0)] - json_number_value(json_array_get(pair, 1)));
                *worst = d > *worst ? d : *worst;
            }
            bad += cdx_argmax(logits + s * hp->n_vocab, hp->n_vocab) != tok;
            ids[s] = tok;
            seq[s] = s;
            want[s] = true;
        }
        cdx_batch nb = { .n = NS, .tokens = ids, .seq = seq, .want_logits = want };
        ok = cdx_forward(fc, kvp, NS, &nb, logits, &e) == 0;
    }
    for (int s = 0; s < NS; s++)
        cdx_kv_free(&kv[s]);
    free(logits);
    cdx_forward_ctx_free(fc);
    return ok ? bad + (*worst > 1e-3) : 99;
}

/* One pass over the sections case's prompt with its unequal temporal/height/width positions: the largest error
 * of PyTorch's top-5 logits at every position (1e9: the pass failed). */
static double sections_pass(cdx_model *m, const char *isa)
{
    cdx_err e = { 0 };
    const cdx_hparams *hp = cdx_model_hparams(m);
    json_t *sc = json_object_get(g_var, "sections"), *prompt = json_object_get(sc, "prompt_ids"),
           *rows = json_object_get(sc, "positions"), *top = json_object_get(sc, "top");
    const int64_t n = (int64_t)json_array_size(prompt);
    if (n < 1 || n > 64)
        return 1e9;
    int32_t ids[64];
    int64_t pos[64], p4[64 * 4];
    bool want[64];
    for (int64_t i = 0; i < n; i++) {
        ids[i] = jint(prompt, (size_t)i);
        pos[i] = i;
        want[i] = true;
        for (int r = 0; r < 3; r++)
            p4[4 * i + r] = jint(json_array_get(rows, (size_t)r), (size_t)i);
        p4[4 * i + 3] = 0;
    }
    cdx_forward_ctx *fc = NULL;
    cdx_kv kv;
    cdx_kv *kvp = &kv;
    if (cdx_forward_ctx_create(m, 64, 2, cdx_kernels_by_isa(isa), &fc, &e) || cdx_kv_init(&kv, hp, 256, &e))
        return 1e9;
    float *logits = malloc(sizeof(float) * (size_t)(hp->n_vocab * n));
    double worst = 1e9;
    cdx_batch b = { .n = n, .tokens = ids, .pos = pos, .want_logits = want, .pos_sections = p4 };
    if (cdx_forward(fc, &kvp, 1, &b, logits, &e) == 0) {
        worst = 0;
        for (int64_t i = 0; i < n; i++) {
            json_t *t = json_array_get(top, (size_t)i);
            for (size_t k = 0; k < json_array_size(t); k++) {
                json_t *pair = json_array_get(t, k);
                double d = fabs(logits[i * hp->n_vocab + jint(pair, 0)] - json_number_value(json_array_get(pair, 1)));
                worst = d > worst ? d : worst;
            }
        }
    } else
        printf("  sections pass: %s\n", e.msg);
    free(logits);
    cdx_kv_free(&kv);
    cdx_forward_ctx_free(fc);
    return worst;
}

static void run_checkpoint(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    int rc = cdx_model_open(g_dir, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &m, &e);
    CHECKF(rc == 0, "%s: %s", g_dir, e.msg);
    if (rc)
        return;
    const char *isas[] = { "scalar", "avx2", "avx512" };
    for (int s = 0; s < 3; s++) {
        if (!cdx_kernels_by_isa(isas[s]))
            continue;
        double worst = 0;
        int bad = decode(m, isas[s], &worst, false, "checkpoint");
        CHECKF(bad == 0, "%s [%s]: %d cases differ from PyTorch's (worst %.3g)", g_dir, isas[s], bad, worst);
        bad = decode_batched(m, isas[s], &worst);
        CHECKF(bad == 0, "%s [%s] as one batch of three sequences: %d differences (worst %.3g)", g_dir, isas[s], bad,
               worst);
        printf("  %s checkpoint [%s], the three cases as one batch: %s (worst top-5 logit error %.2e)\n", g_fam,
               isas[s], bad ? "MISMATCH" : "tokens match", worst);
        const double sw = sections_pass(m, isas[s]);
        CHECKF(sw <= 1e-3, "%s [%s]: unequal temporal/height/width positions: worst top-5 logit error %.3g", g_dir,
               isas[s], sw);
        printf("  %s checkpoint [%s], a pass with unequal temporal/height/width positions: worst top-5 logit error "
               "%.2e\n", g_fam, isas[s], sw);
    }
    cdx_model_close(m);
}

/* ---- through the engine ---- */

typedef struct {
    int n, fin;
    int32_t tok[16];
    float top[16][5];
    int32_t top_id[16][5];
} result;

static void on_event(const cdx_event *ev)
{
    result *r = ev->user;
    if (ev->finish != CDX_FINISH_NONE) {
        r->fin = ev->finish;
        return;
    }
    if (r->n >= 16)
        return;
    r->tok[r->n] = ev->token;
    for (int k = 0; k < 5 && k < ev->n_top; k++) {
        r->top[r->n][k] = ev->top_logits[k];
        r->top_id[r->n][k] = ev->top_ids[k];
    }
    r->n++;
}

static int submit(cdx_engine *en, json_t *c, result *r, int32_t *ids, cdx_err *e)
{
    memset(r, 0, sizeof *r);
    json_t *p = json_object_get(c, "prompt_ids");
    for (size_t i = 0; i < json_array_size(p); i++)
        ids[i] = jint(p, i);
    cdx_request rq = cdx_request_defaults();
    rq.prompt = ids;
    rq.n_prompt = (int64_t)json_array_size(p);
    rq.max_tokens = 16;
    rq.ignore_eos = true;
    rq.sampling.temp = 0;
    rq.top_logprobs = 5;
    rq.on_event = on_event;
    rq.user = r;
    uint64_t id;
    return cdx_engine_submit(en, &rq, &id, e);
}

/* tokens exact, every golden top-5 logit within 1e-3: the worst error (1e9: a token differs) */
static double golden_err(json_t *c, const result *r)
{
    json_t *toks = json_object_get(c, "tokens"), *steps = json_object_get(c, "steps");
    if (r->n != 16 || r->fin != CDX_FINISH_LENGTH)
        return 1e9;
    double worst = 0;
    for (int s = 0; s < 16; s++) {
        if (r->tok[s] != jint(toks, (size_t)s))
            return 1e9;
        json_t *top = json_object_get(json_array_get(steps, (size_t)s), "top");
        for (size_t k = 0; k < json_array_size(top); k++) {
            json_t *pair = json_array_get(top, k);
            double d = 1e9;
            for (int j = 0; j < 5; j++)
                if (r->top_id[s][j] == jint(pair, 0))
                    d = fabs(r->top[s][j] - json_number_value(json_array_get(pair, 1)));
            worst = d > worst ? d : worst;
        }
    }
    return worst;
}

static void run_engine_isa(cdx_model *m, const char *path, const char *isa)
{
    cdx_err e = { 0 };
    cdx_engine_opts o = cdx_engine_defaults();
    o.n_threads = 2;
    o.n_ctx = 256;
    o.kernels = cdx_kernels_by_isa(isa);
    cdx_engine *en = NULL;
    REQUIRE(cdx_engine_create(m, NULL, &o, &en, &e) == 0);
    json_t *cases = json_object_get(g_var, "cases");
    const size_t nc = json_array_size(cases);
    REQUIRE(nc == 3);
    result r[3];
    int32_t ids[3][64];
    double worst = 0;
    for (size_t i = 0; i < nc; i++) { /* alone */
        CHECKF(submit(en, json_array_get(cases, i), &r[i], ids[i], &e) == 0, "submit: %s", e.msg);
        while (cdx_engine_busy(en))
            REQUIRE(cdx_engine_step(en, &e) == 0);
        const double w = golden_err(json_array_get(cases, i), &r[i]);
        CHECKF(w <= 1e-3, "%s through the engine alone, case %zu: worst %.3g", path, i, w);
        worst = w > worst ? w : worst;
    }
    printf("  %s %s [%s] through the engine, each case alone: worst top-5 logit error %.2e\n", g_fam, path, isa, worst);
    worst = 0;
    for (size_t i = 0; i < nc; i++) /* batched: the three at once */
        CHECKF(submit(en, json_array_get(cases, i), &r[i], ids[i], &e) == 0, "submit: %s", e.msg);
    while (cdx_engine_busy(en))
        REQUIRE(cdx_engine_step(en, &e) == 0);
    for (size_t i = 0; i < nc; i++) {
        const double w = golden_err(json_array_get(cases, i), &r[i]);
        CHECKF(w <= 1e-3, "%s through the engine batched, case %zu: worst %.3g", path, i, w);
        worst = w > worst ? w : worst;
    }
    printf("  %s %s [%s] through the engine, the three cases batched: worst top-5 logit error %.2e\n", g_fam, path, isa,
           worst);
    /* an image: refused, naming why */
    static const float px[3 * 4 * 4];
    const cdx_request_image im = { px, 1 };
    cdx_request rq = cdx_request_defaults();
    rq.prompt = ids[0];
    rq.n_prompt = 3;
    rq.images = &im;
    rq.n_images = 1;
    uint64_t id;
    const int rc = cdx_engine_submit(en, &rq, &id, &e);
    CHECKF(rc == CDX_EINVAL && strstr(e.msg, "takes no images") && strstr(e.msg, "vision tower is not computed"),
           "a request with an image: rc %d, %s", rc, e.msg);
    printf("  a request with an image: %s\n", e.msg);
    cdx_engine_free(en);
}

static void run_engine(const char *path)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(path, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &m, &e) == 0);
    const char *isas[] = { "scalar", "avx2", "avx512" };
    for (int s = 0; s < 3; s++)
        if (cdx_kernels_by_isa(isas[s]))
            run_engine_isa(m, path, isas[s]);
    cdx_model_close(m);
}

static void run_engine_checkpoint(void) { run_engine(g_dir); }
static void run_engine_gguf(void) { run_engine(g_gguf); }

/* ---- GGUF ---- */

static void run_gguf(void)
{
    cdx_err e = { 0 };
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    int rc = cdx_convert_hf(g_dir, &(cdx_convert_opts){ .type = CDX_TYPE_F32 }, w, &c, &e);
    CHECKF(rc == 0, "convert %s: %s", g_dir, e.msg);
    rc = rc ? rc : cdx_tok_export_gguf_dummy(w, 320, 1, 2, &e);
    rc = rc ? rc : cdx_gguf_writer_write(w, g_gguf, &e);
    CHECKF(rc == 0, "writing %s: %s", g_gguf, e.msg);
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
    cdx_model *m = NULL;
    rc = rc ? rc : cdx_model_open(g_gguf, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &m, &e);
    CHECKF(rc == 0, "%s: %s", g_gguf, e.msg);
    if (rc)
        return;
    /* what llama.cpp's qwen2vl reads: the architecture and the four sections, no vision tensor */
    const cdx_hparams *hp = cdx_model_hparams(m);
    cdx_model *st = NULL;
    REQUIRE(cdx_model_open(g_dir, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &st, &e) == 0);
    const cdx_hparams *hs = cdx_model_hparams(st);
    CHECKF(!strcmp(hp->arch_name, "qwen2vl") && !memcmp(hp->rope_sections, hs->rope_sections, sizeof hp->rope_sections)
           && hp->rope_sections[3] == 0 && hp->rope_sections[0] + hp->rope_sections[1] + hp->rope_sections[2] == 8,
           "%s: architecture %s, sections [%d, %d, %d, %d] (the checkpoint's [%d, %d, %d, %d])", g_gguf, hp->arch_name,
           hp->rope_sections[0], hp->rope_sections[1], hp->rope_sections[2], hp->rope_sections[3], hs->rope_sections[0],
           hs->rope_sections[1], hs->rope_sections[2], hs->rope_sections[3]);
    cdx_model_close(st);
    cdx_gguf *g = NULL;
    REQUIRE(cdx_gguf_open(g_gguf, &g, &e) == 0);
    bool vis = false;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        vis |= strstr(g->tensors[i].name, "visual") != NULL || strstr(g->tensors[i].name, "language_model") != NULL;
    CHECKF(!vis && cdx_gguf_find_arch(g, "qwen2vl", CDX_GK_ROPE_DIM_SECTIONS), "%s: a vision tensor, or no sections",
           g_gguf);
    cdx_gguf_close(g);
    double worst = 0;
    const int bad = decode(m, "scalar", &worst, false, "converted GGUF");
    CHECKF(bad == 0, "%s: %d cases differ from PyTorch's (worst %.3g)", g_gguf, bad, worst);
    const double sw = sections_pass(m, "scalar");
    CHECKF(sw <= 1e-3, "%s: unequal temporal/height/width positions: worst %.3g", g_gguf, sw);
    printf("  %s converted GGUF, a pass with unequal positions: worst top-5 logit error %.2e\n", g_fam, sw);
    cdx_model_close(m);
}

/* ---- what each part is needed for ---- */

static void run_each_rule_matters(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(g_dir, NULL, &m, &e) == 0);
    /* one position (the temporal) for every pair: the unequal-position pass breaks, the text goldens do not */
    int32_t keep[4];
    memcpy(keep, m->hp.rope_sections, sizeof keep);
    m->hp.rope_sections[0] = (int32_t)(m->hp.n_rot / 2);
    m->hp.rope_sections[1] = m->hp.rope_sections[2] = 0;
    const double sw = sections_pass(m, "scalar");
    double worst = 0;
    const int bad = decode(m, "scalar", &worst, true, "");
    CHECKF(sw > 1e-3 && sw < 1e9, "%s with one position for every pair: the unequal-position pass still passes (%.3g)",
           g_fam, sw);
    CHECKF(bad == 0, "%s with one position for every pair: the text goldens break (%d cases)", g_fam, bad);
    printf("  %s with every pair on the temporal position: the unequal-position pass is off by %.3g; text "
           "prompts keep their tokens (equal positions)\n", g_fam, sw);
    memcpy(m->hp.rope_sections, keep, sizeof keep);
    /* the q/k/v biases */
    float *b[CDX_HF_MAX_LAYERS][3];
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        b[l][0] = m->layers[l].bq, b[l][1] = m->layers[l].bk, b[l][2] = m->layers[l].bv;
        m->layers[l].bq = m->layers[l].bk = m->layers[l].bv = NULL;
    }
    const int nb = decode(m, "scalar", &worst, true, "");
    CHECKF(nb > 0, "%s without the q/k/v biases: the goldens still pass", g_fam);
    printf("  %s without the q/k/v biases: %d of 3 cases break\n", g_fam, nb);
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        m->layers[l].bq = b[l][0], m->layers[l].bk = b[l][1], m->layers[l].bv = b[l][2];
    CHECKF(decode(m, "scalar", &worst, true, "") == 0 && sections_pass(m, "scalar") <= 1e-3,
           "%s with everything back: the goldens pass", g_fam);
    cdx_model_close(m);
}

/* ---- bf16 compute ---- */

/* --dtype bf16 against the bf16 goldens (the first variant's "bf16": from_pretrained(torch_dtype=bfloat16)'s cast
 * points): the golden tokens fed at every step, each golden top-5 logit within logit_tolerance, the token equal
 * except at a marked near-tie (top two closer than near_tie_threshold); *exact counts the steps whose five logits
 * are the golden's bits. Then the pass at unequal positions within the same tolerance. */
static int decode_bf16(cdx_model *m, const char *isa, json_t *g, double *worst, int *exact, int *steps)
{
    cdx_err e = { 0 };
    const cdx_hparams *hp = cdx_model_hparams(m);
    const double tol = json_number_value(json_object_get(g, "logit_tolerance"));
    cdx_forward_ctx *fc = NULL;
    if (!(tol > 0 && tol < 1) || cdx_forward_ctx_create(m, 64, 2, cdx_kernels_by_isa(isa), &fc, &e))
        return 99;
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab * 64);
    int bad = 0;
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(g, "cases"), ci, c) {
        json_t *prompt = json_object_get(c, "prompt_ids"), *st = json_object_get(c, "steps");
        cdx_kv kv;
        if (cdx_kv_init(&kv, hp, 256, &e)) {
            bad = 99;
            break;
        }
        cdx_kv *kvp = &kv;
        int32_t ids[64];
        const size_t np = json_array_size(prompt);
        for (size_t i = 0; i < np && i < 64; i++)
            ids[i] = jint(prompt, i);
        cdx_batch b = { .n = (int64_t)np, .tokens = ids };
        bool ok = cdx_forward(fc, &kvp, 1, &b, logits, &e) == 0;
        for (size_t k = 0; ok && k < json_array_size(st); k++) {
            json_t *step = json_array_get(st, k), *top = json_object_get(step, "top");
            int32_t want = (int32_t)json_integer_value(json_object_get(step, "token"));
            bool all = true;
            for (size_t j = 0; j < json_array_size(top); j++) {
                json_t *pair = json_array_get(top, j);
                const double gv = json_number_value(json_array_get(pair, 1)), d = fabs(logits[jint(pair, 0)] - gv);
                *worst = d > *worst ? d : *worst;
                all &= (double)logits[jint(pair, 0)] == gv;
                ok &= d <= tol;
            }
            ok &= cdx_argmax(logits, hp->n_vocab) == want || json_is_true(json_object_get(step, "near_tie"));
            *exact += all;
            (*steps)++;
            cdx_batch nb = { .n = 1, .tokens = &want };
            ok = ok && cdx_forward(fc, &kvp, 1, &nb, logits, &e) == 0;
        }
        bad += !ok;
        cdx_kv_free(&kv);
    }
    /* the pass at unequal positions */
    json_t *sc = json_object_get(g, "sections"), *prompt = json_object_get(sc, "prompt_ids"),
           *rows = json_object_get(sc, "positions"), *top = json_object_get(sc, "top");
    const int64_t n = (int64_t)json_array_size(prompt);
    int32_t ids[64];
    int64_t pos[64], p4[64 * 4];
    bool want[64];
    for (int64_t i = 0; i < n && n <= 64; i++) {
        ids[i] = jint(prompt, (size_t)i);
        pos[i] = i;
        want[i] = true;
        for (int r = 0; r < 3; r++)
            p4[4 * i + r] = jint(json_array_get(rows, (size_t)r), (size_t)i);
        p4[4 * i + 3] = 0;
    }
    cdx_kv kv;
    cdx_kv *kvp = &kv;
    double sw = 1e9;
    if (n >= 1 && n <= 64 && cdx_kv_init(&kv, hp, 256, &e) == 0) {
        cdx_batch b = { .n = n, .tokens = ids, .pos = pos, .want_logits = want, .pos_sections = p4 };
        if (cdx_forward(fc, &kvp, 1, &b, logits, &e) == 0) {
            sw = 0;
            for (int64_t i = 0; i < n; i++)
                for (size_t j = 0; j < json_array_size(json_array_get(top, (size_t)i)); j++) {
                    json_t *pair = json_array_get(json_array_get(top, (size_t)i), j);
                    const double d = fabs(logits[i * hp->n_vocab + jint(pair, 0)] - json_number_value(json_array_get(pair, 1)));
                    sw = d > sw ? d : sw;
                }
        }
        cdx_kv_free(&kv);
    }
    bad += !(sw <= tol);
    printf("  %s bf16 [%s]: %d of %d steps bit-identical, max |logit - golden| = %.4g; unequal positions: %.4g\n",
           g_fam, isa, *exact, *steps, *worst, sw);
    free(logits);
    cdx_forward_ctx_free(fc);
    return bad;
}

static void run_bf16(void)
{
    cdx_err e = { 0 };
    json_t *g = json_object_get(g_var, "bf16");
    REQUIRE(g);
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(g_dir, &(cdx_model_opts){ .dtype = CDX_DTYPE_BF16 }, &m, &e) == 0);
    CHECK(cdx_model_dtype(m) == CDX_DTYPE_BF16);
    const char *isas[] = { "scalar", "avx2", "avx512" };
    int exact = 0, steps = 0;
    for (int s = 0; s < 3; s++) {
        if (!cdx_kernels_by_isa(isas[s]))
            continue;
        double worst = 0;
        int ex = 0, n = 0;
        const int bad = decode_bf16(m, isas[s], g, &worst, &ex, &n);
        exact += ex;
        steps += n;
        CHECKF(bad == 0, "%s bf16 [%s]: %d cases off the bf16 goldens (worst %.3g)", g_dir, isas[s], bad, worst);
    }
    /* as tests/model/test_hf_golden_bf16.c asks of the shared fixtures: half the steps bit-identical */
    CHECKF(exact * 2 >= steps, "%s bf16: %d of %d steps bit-identical", g_dir, exact, steps);
    cdx_model_close(m);
}

/* ---- the config reader's refusals ---- */

static void config_refusals(void)
{
    static const struct { const char *json, *msg; } k[] = {
        { "{\"architectures\":[\"Qwen2VLForConditionalGeneration\"],\"hidden_size\":64,\"intermediate_size\":96,"
          "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":320}",
          "rope_scaling.mrope_section is missing" },
        { "{\"architectures\":[\"Qwen2VLForConditionalGeneration\"],\"hidden_size\":64,\"intermediate_size\":96,"
          "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":320,"
          "\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[2,3,4]}}",
          "expected three counts summing to 8 (half of head_dim 16)" },
        { "{\"architectures\":[\"Qwen2_5_VLForConditionalGeneration\"],\"text_config\":3}", "text_config is 3" },
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        cdx_hf_config cfg;
        cdx_err e = { 0 };
        const int rc = cdx_hf_config_parse(k[i].json, strlen(k[i].json), "config.json", &cfg, &e);
        CHECKF(rc < 0 && strstr(e.msg, k[i].msg), "config %zu: rc %d, \"%s\" (expected \"%s\")", i, rc, e.msg, k[i].msg);
        printf("  refused: %s\n", e.msg);
    }
    /* the accepted one: text_config read, mrope read as the default rotation */
    const char *ok = "{\"architectures\":[\"Qwen2_5_VLForConditionalGeneration\"],\"model_type\":\"qwen2_5_vl\","
                     "\"text_config\":{\"hidden_size\":128,\"intermediate_size\":96,\"num_hidden_layers\":2,"
                     "\"num_attention_heads\":8,\"vocab_size\":320,\"rope_scaling\":{\"type\":\"mrope\","
                     "\"mrope_section\":[4,2,2]}}}";
    cdx_hf_config cfg;
    cdx_err e = { 0 };
    const int rc = cdx_hf_config_parse(ok, strlen(ok), "config.json", &cfg, &e);
    /* Qwen2-VL-7B-Instruct's config.json as released (transformers 4.41, the text keys at the top) */
    const char *rel = "{\"architectures\":[\"Qwen2VLForConditionalGeneration\"],\"attention_dropout\":0.0,"
        "\"bos_token_id\":151643,\"eos_token_id\":151645,\"vision_start_token_id\":151652,\"vision_end_token_id\":151653,"
        "\"vision_token_id\":151654,\"image_token_id\":151655,\"video_token_id\":151656,\"hidden_act\":\"silu\","
        "\"hidden_size\":3584,\"initializer_range\":0.02,\"intermediate_size\":18944,\"max_position_embeddings\":32768,"
        "\"max_window_layers\":28,\"model_type\":\"qwen2_vl\",\"num_attention_heads\":28,\"num_hidden_layers\":28,"
        "\"num_key_value_heads\":4,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"sliding_window\":32768,"
        "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.41.2\",\"use_cache\":true,"
        "\"use_sliding_window\":false,\"vision_config\":{\"depth\":32,\"embed_dim\":1280,\"mlp_ratio\":4,\"num_heads\":16,"
        "\"in_chans\":3,\"hidden_size\":3584,\"patch_size\":14,\"spatial_merge_size\":2,\"spatial_patch_size\":14,"
        "\"temporal_patch_size\":2},\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[16,24,24]},\"vocab_size\":152064}";
    cdx_hf_config rc7;
    const int r7 = cdx_hf_config_parse(rel, strlen(rel), "config.json", &rc7, &e);
    CHECKF(r7 == 0 && !rc7.text_config && rc7.head_dim == 128 && rc7.n_kv_heads == 4 && rc7.sliding_window == 0 &&
           rc7.mrope_section[0] == 16 && rc7.mrope_section[1] == 24 && rc7.mrope_section[2] == 24 &&
           rc7.rope_type == CDX_HF_ROPE_DEFAULT && !strcmp(rc7.torch_dtype, "bfloat16"),
           "Qwen2-VL-7B-Instruct's config.json: rc %d (%s), head_dim %lld, window %lld", r7, e.msg,
           (long long)rc7.head_dim, (long long)rc7.sliding_window);
    CHECKF(rc == 0 && cfg.text_config && cfg.n_kv_heads == 8 && cfg.rope_theta == 1000000.0 &&
           cfg.rope_type == CDX_HF_ROPE_DEFAULT && cfg.mrope_section[0] == 4 && cfg.rms_norm_eps == 1e-5,
           "text_config with the class defaults: rc %d (%s), kv heads %lld, theta %g", rc, e.msg,
           (long long)cfg.n_kv_heads, cfg.rope_theta);
}

static int write_fixture(const char *fam, json_t *over, const char *dir)
{
    char *o = json_dumps(over, JSON_COMPACT);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 scripts/goldens/tiny_fixtures.py %s %s '%s'", fam, dir, o ? o : "{}");
    free(o);
    return system(cmd);
}

int main(void)
{
    json_error_t je;
    g_all = json_load_file("tests/golden/qwen2vl.json", 0, &je);
    if (!g_all) {
        printf("tests/golden/qwen2vl.json: %s\nqwen2vl: 0 passed, 1 failed\n", je.text);
        return 1;
    }
    RUN("the multimodal RoPE on unequal temporal/height/width positions is apply_multimodal_rotary_pos_emb's",
        rope_sections_match_transformers);
    RUN("config.json: mrope_section missing or not covering head_dim / 2 is refused; text_config is read",
        config_refusals);
    static char names[64][300];
    int k = 0;
    size_t vi;
    json_t *v;
    json_array_foreach(json_object_get(g_all, "variants"), vi, v) {
        g_fam = json_string_value(json_object_get(v, "family"));
        g_var = v;
        snprintf(g_dir, sizeof g_dir, "/tmp/cdx_q2vl_%s_%d_%zu", g_fam, (int)getpid(), vi);
        snprintf(g_gguf, sizeof g_gguf, "%s.gguf", g_dir);
        const char *vname = json_string_value(json_object_get(v, "variant"));
        if (write_fixture(g_fam, json_object_get(v, "config"), g_dir) != 0) {
            printf("  could not write the %s fixture\n", g_fam);
            t_failed++;
            continue;
        }
        snprintf(names[k], sizeof names[k], "%s (%s): the checkpoint gives PyTorch's goldens on every kernel set, "
                 "alone and batched, and at unequal positions", g_fam, vname);
        RUN(names[k], run_checkpoint);
        k++;
        snprintf(names[k], sizeof names[k], "%s (%s): through the engine alone and batched on every kernel set; an image is refused",
                 g_fam, vname);
        RUN(names[k], run_engine_checkpoint);
        k++;
        snprintf(names[k], sizeof names[k], "%s (%s): its conversion to GGUF (qwen2vl, rope.dimension_sections) "
                 "gives them too", g_fam, vname);
        RUN(names[k], run_gguf);
        k++;
        snprintf(names[k], sizeof names[k], "%s (%s): the GGUF through the engine", g_fam, vname);
        RUN(names[k], run_engine_gguf);
        k++;
        if (vi == 0) {
            RUN("qwen2_vl: the sections and the q/k/v biases are each needed", run_each_rule_matters);
            RUN("qwen2_vl --dtype bf16: PyTorch's bf16 goldens on every kernel set, and at unequal positions", run_bf16);
        }
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s %s", g_dir, g_gguf);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", g_dir);
    }
    json_decref(g_all);
    return t_done("qwen2vl");
}
