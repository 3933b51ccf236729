/* The families without a fixture in ../shared (OLMo v1, GPT-OSS, BitNet b1.58): their tiny random-weight checkpoints are
 * written at test time by scripts/goldens/tiny_fixtures.py (Python's standard library only), and
 * tests/golden/families-c.json holds PyTorch's float32 goldens of them (scripts/goldens/torch-families-c.py,
 * transformers' modeling code transcribed line by line) under each config.json variant. For every variant:
 * every case's 16 greedy tokens and every golden top-5 logit within 1e-3, from the checkpoint on every
 * kernel set, with the three cases as one batch of three sequences, and from its conversion to GGUF
 * (caldrix convert, llama.cpp's names and keys). GPT-OSS's GGUF cannot say YaRN's truncate false (its
 * config's; llama.cpp always floors/ceils the correction range): its conversion must give PyTorch's tokens and,
 * at every step, the logits of the checkpoint with truncate true (every vocabulary entry within 1e-6), and
 * they must differ from the truncate-false checkpoint's by more than 1e-3 (the comparison sees the rounding);
 * a variant the file cannot say (swiglu_limit 0.5, a full-attention layer 0) must be refused by convert.
 * BitNet's checkpoint (packed U8 BitLinear weights) has no GGUF twin that computes it: llama.cpp's "bitnet" graph
 * gates with SiLU and quantizes no activation (tests/cli/test_families_c_gguf.sh checks the file against
 * llama.cpp's tokens); convert refuses its relu2 by name.
 * Then each rule the family adds to the common decoder is switched off in turn, and the goldens must break
 * every time. */
#include "caldrix.h"
#include "caldrix/convert.h"
#include "caldrix/engine.h"
#include "caldrix/model.h"
#include "caldrix/tokenizer.h"
#include "model/arch.h"
#include "test.h"
#include "model/golden_decode.h"

#include <jansson.h>
#include <unistd.h>

typedef struct {
    const char *what;
    void (*flip)(cdx_model *m, bool on);
} rule;

typedef enum { GGUF_NONE, GGUF_GOLDENS, GGUF_YARN_TRUNCATED, GGUF_BITNET } gguf_check;

typedef struct {
    const char *name;
    gguf_check gguf; /* caldrix convert writes a GGUF of it: checked against the goldens, or (GPT-OSS) against the
                        checkpoint with YaRN truncated as the file computes it */
    rule rules[6];
} family;

/* OLMo: q, k, v not clamped; RMSNorm in place of the LayerNorm; rotate_half's halves read as adjacent pairs */
static void flip_clip(cdx_model *m, bool on)
{
    static float keep;
    if (!on)
        keep = m->hp.clip_qkv;
    m->hp.clip_qkv = on ? keep : 0;
}
static void flip_layer_norm(cdx_model *m, bool on) { m->hp.layer_norm = on; }
static void flip_rope_pairs(cdx_model *m, bool on) { m->hp.rope_mode = on ? CDX_ROPE_HALVES : CDX_ROPE_ADJACENT; }

/* GPT-OSS: no sinks; SwiGLU unclamped; no router bias; no window */
static void flip_sinks(cdx_model *m, bool on)
{
    static float *keep[CDX_HF_MAX_LAYERS];
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        if (!on)
            keep[l] = m->layers[l].sinks;
        m->layers[l].sinks = on ? keep[l] : NULL;
    }
}
static void flip_clamp(cdx_model *m, bool on)
{
    static float keep;
    if (!on)
        keep = m->hp.swiglu_limit;
    m->hp.swiglu_limit = on ? keep : 0;
}
static void flip_router_bias(cdx_model *m, bool on)
{
    static float *keep[CDX_HF_MAX_LAYERS];
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        if (!on)
            keep[l] = m->layers[l].router_b;
        m->layers[l].router_b = on ? keep[l] : NULL;
    }
}
static void flip_window(cdx_model *m, bool on)
{
    static int64_t keep;
    if (!on)
        keep = m->hp.sliding_window;
    m->hp.sliding_window = on ? keep : 0;
}

/* BitNet: no attention sub-norm; no FFN sub-norm; the activations unquantized (each BitLinear as the float
 * matrix t / weight_scale, the same ternary weights); SiLU in place of relu2 */
static void flip_attn_sub_norm(cdx_model *m, bool on)
{
    static float *keep[CDX_HF_MAX_LAYERS];
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        if (!on)
            keep[l] = m->layers[l].attn_sub_norm;
        m->layers[l].attn_sub_norm = on ? keep[l] : NULL;
    }
}
static void flip_ffn_sub_norm(cdx_model *m, bool on)
{
    static float *keep[CDX_HF_MAX_LAYERS];
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        if (!on)
            keep[l] = m->layers[l].ffn_sub_norm;
        m->layers[l].ffn_sub_norm = on ? keep[l] : NULL;
    }
}
static void flip_act_quant(cdx_model *m, bool on)
{
    static int8_t *keep[CDX_HF_MAX_LAYERS][BIT_COUNT];
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        layer_weights *L = &m->layers[l];
        cdx_mat *const mats[BIT_COUNT] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down };
        for (int k = 0; k < BIT_COUNT; k++) {
            bit_mat *b = &L->bit[k];
            if (on) {
                free((void *)mats[k]->data);
                *mats[k] = (cdx_mat){ 0 };
                b->t = keep[l][k];
                continue;
            }
            float *w = malloc(sizeof(float) * (size_t)(b->rows * b->cols));
            for (int64_t i = 0; i < b->rows * b->cols; i++)
                w[i] = (float)b->t[i] / b->ws;
            *mats[k] = (cdx_mat){ .type = CDX_TYPE_F32, .data = w, .rows = b->rows, .cols = b->cols,
                                  .row_bytes = sizeof(float) * (size_t)b->cols };
            keep[l][k] = b->t;
            b->t = NULL;
        }
    }
}
static void flip_relu2(cdx_model *m, bool on) { m->hp.act = on ? CDX_HF_ACT_RELU2 : CDX_HF_ACT_SILU; }

static const family k_families[] = {
    { "gpt_oss", GGUF_YARN_TRUNCATED, { { "the attention sinks", flip_sinks },
                          { "the clamped SwiGLU (plain SwiGLU instead)", flip_clamp },
                          { "the router bias", flip_router_bias },
                          { "the sliding window", flip_window } } },
    { "bitnet", GGUF_BITNET, { { "the attention sub-norm (attn_sub_norm)", flip_attn_sub_norm },
                  { "the FFN sub-norm (ffn_sub_norm)", flip_ffn_sub_norm },
                  { "the per-token int8 activations (x unquantized, the same ternary weights)", flip_act_quant },
                  { "relu2 (SiLU instead)", flip_relu2 } } },
    { "olmo", GGUF_GOLDENS, { { "clip_qkv", flip_clip },
                { "the LayerNorm (RMSNorm instead)", flip_layer_norm },
                { "rotate_half's pairs (adjacent pairs instead)", flip_rope_pairs } } },
};

static const family *g_fam;
static json_t *g_var; /* the variant: config, cases */
static char g_dir[128], g_gguf[160];

/* Greedy over every case, one sequence at a time: the number of cases that differ; *worst the largest
 * top-5 logit error. */
static int decode(cdx_model *m, const char *isa, double *worst, bool quiet, const char *what)
{
    char label[128];
    snprintf(label, sizeof label, "%s %s", g_fam->name, what);
    return golden_decode(m, g_var, isa, 1e-3, label, worst, quiet);
}

/* The cases as one batch: the prompts together, then one token of each sequence per step. */
static int decode_batched(cdx_model *m, double *worst)
{
    enum { NS = 3 };
    cdx_err e = { 0 };
    const cdx_hparams *hp = cdx_model_hparams(m);
    json_t *cases = json_object_get(g_var, "cases");
    if (json_array_size(cases) != NS)
        return 99;
    cdx_forward_ctx *fc = NULL;
    if (cdx_forward_ctx_create(m, 128, 2, cdx_kernels_by_isa("scalar"), &fc, &e))
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
            ids[n] = (int32_t)json_integer_value(json_array_get(p, i));
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
            int32_t tok = (int32_t)json_integer_value(json_array_get(json_object_get(c, "tokens"), st));
            json_t *top = json_object_get(json_array_get(json_object_get(c, "steps"), st), "top");
            for (size_t k = 0; k < json_array_size(top); k++) {
                json_t *pair = json_array_get(top, k);
                double d = fabs(logits[s * hp->n_vocab + json_integer_value(json_array_get(pair, 0))] -
                                json_number_value(json_array_get(pair, 1)));
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
        const int bad = decode(m, isas[s], &worst, false, "checkpoint");
        CHECKF(bad == 0, "%s [%s]: %d cases differ from PyTorch's (worst %.3g)", g_dir, isas[s], bad, worst);
    }
    double worst = 0;
    const int bad = decode_batched(m, &worst);
    CHECKF(bad == 0, "%s as one batch of three sequences: %d differences (worst %.3g)", g_dir, bad, worst);
    printf("  %s checkpoint, the three cases as one batch: %s (worst top-5 logit error %.2e)\n", g_fam->name,
           bad ? "MISMATCH" : "tokens match", worst);
    cdx_model_close(m);
}

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
    if (!rc) {
        double worst = 0;
        const int bad = decode(m, "scalar", &worst, false, "converted GGUF");
        CHECKF(bad == 0, "%s: %d cases differ from PyTorch's (worst %.3g)", g_gguf, bad, worst);
        cdx_model_close(m);
    }
    unlink(g_gguf);
}

static int write_fixture(const char *fam, json_t *over, const char *dir);

/* Greedy over every case on a and b at once: the cases whose tokens differ from the goldens' on a; *same the
 * largest |logit_a - logit_b| over the whole vocabulary at every step (a's tokens fed to both). */
static int decode_pair(cdx_model *a, cdx_model *b, double *same)
{
    cdx_err e = { 0 };
    const cdx_hparams *hp = cdx_model_hparams(a);
    cdx_forward_ctx *fa = NULL, *fb = NULL;
    if (cdx_forward_ctx_create(a, 64, 2, cdx_kernels_by_isa("scalar"), &fa, &e) ||
        cdx_forward_ctx_create(b, 64, 2, cdx_kernels_by_isa("scalar"), &fb, &e))
        return 99;
    float *la = malloc(sizeof(float) * (size_t)hp->n_vocab), *lb = malloc(sizeof(float) * (size_t)hp->n_vocab);
    int bad = 0;
    *same = 0;
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(g_var, "cases"), ci, c) {
        json_t *prompt = json_object_get(c, "prompt_ids"), *toks = json_object_get(c, "tokens");
        cdx_kv kv[2];
        if (cdx_kv_init(&kv[0], hp, 256, &e) || cdx_kv_init(&kv[1], cdx_model_hparams(b), 256, &e)) {
            bad = 99;
            break;
        }
        cdx_kv *ka = &kv[0], *kb = &kv[1];
        int32_t ids[64];
        size_t np = json_array_size(prompt);
        for (size_t i = 0; i < np && i < 64; i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(prompt, i));
        cdx_batch bt = { .n = (int64_t)np, .tokens = ids };
        bool ok = cdx_forward(fa, &ka, 1, &bt, la, &e) == 0 && cdx_forward(fb, &kb, 1, &bt, lb, &e) == 0;
        for (size_t s = 0; ok && s < json_array_size(toks); s++) {
            for (int64_t v = 0; v < hp->n_vocab; v++)
                *same = fabs((double)la[v] - lb[v]) > *same ? fabs((double)la[v] - lb[v]) : *same;
            int32_t t = cdx_argmax(la, hp->n_vocab);
            ok = t == (int32_t)json_integer_value(json_array_get(toks, s));
            cdx_batch nb = { .n = 1, .tokens = &t };
            ok = ok && cdx_forward(fa, &ka, 1, &nb, la, &e) == 0 && cdx_forward(fb, &kb, 1, &nb, lb, &e) == 0;
        }
        bad += !ok;
        cdx_kv_free(&kv[0]);
        cdx_kv_free(&kv[1]);
    }
    free(la);
    free(lb);
    cdx_forward_ctx_free(fa);
    cdx_forward_ctx_free(fb);
    return bad;
}

/* GPT-OSS: the conversion is the checkpoint with YaRN truncated (or refused where the file cannot say it). */
static void run_gguf_yarn(void)
{
    cdx_err e = { 0 };
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    json_t *cfg = json_object_get(g_var, "config");
    const bool cannot = json_object_get(cfg, "swiglu_limit") || json_object_get(cfg, "layer_types");
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    int rc = cdx_convert_hf(g_dir, &(cdx_convert_opts){ .type = CDX_TYPE_F32 }, w, &c, &e);
    if (cannot) {
        CHECKF(rc != 0 && (strstr(e.msg, "swiglu_limit") || strstr(e.msg, "do not repeat with a period")),
               "convert %s: refused naming what the file cannot say (rc %d: %s)", g_dir, rc, e.msg);
        printf("  %s: convert refuses it: %s\n", g_fam->name, e.msg);
        cdx_convert_free(c);
        cdx_gguf_writer_free(w);
        return;
    }
    CHECKF(rc == 0, "convert %s: %s", g_dir, e.msg);
    rc = rc ? rc : cdx_tok_export_gguf_dummy(w, 320, 1, 2, &e);
    rc = rc ? rc : cdx_gguf_writer_write(w, g_gguf, &e);
    CHECKF(rc == 0, "writing %s: %s", g_gguf, e.msg);
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
    /* the same checkpoint with truncate true */
    char tdir[160];
    snprintf(tdir, sizeof tdir, "%s_trunc", g_dir);
    char path[200];
    snprintf(path, sizeof path, "%s/config.json", g_dir);
    json_t *written = json_load_file(path, 0, NULL), *over = json_deep_copy(cfg);
    json_t *rs = json_deep_copy(json_object_get(written, "rope_scaling"));
    json_object_set_new(rs, "truncate", json_true());
    json_object_set_new(over, "rope_scaling", rs);
    rc = rc ? rc : write_fixture(g_fam->name, over, tdir);
    json_decref(written);
    json_decref(over);
    cdx_model *mg = NULL, *mt = NULL, *mf = NULL;
    const cdx_model_opts o = { .dtype = CDX_DTYPE_F32 };
    rc = rc ? rc : cdx_model_open(g_gguf, &o, &mg, &e);
    rc = rc ? rc : cdx_model_open(tdir, &o, &mt, &e);
    rc = rc ? rc : cdx_model_open(g_dir, &o, &mf, &e);
    CHECKF(rc == 0, "opening the GGUF and the checkpoints: %s", e.msg);
    if (!rc) {
        double d_trunc = 0, d_false = 0;
        const int bad = decode_pair(mg, mt, &d_trunc), bad2 = decode_pair(mg, mf, &d_false);
        CHECKF(bad == 0 && bad2 == 0, "%s: %d cases differ from PyTorch's tokens", g_gguf, bad);
        CHECKF(d_trunc <= 1e-6, "%s: logits differ from the truncate-true checkpoint's by %.3g", g_gguf, d_trunc);
        CHECKF(d_false > 1e-3, "%s: logits within %.3g of the truncate-false checkpoint's: the check cannot see the "
               "rounding", g_gguf, d_false);
        printf("  %s converted GGUF: PyTorch's tokens; every logit within %.2e of the checkpoint with truncate true, "
               "%.2e from it with truncate false (PyTorch's)\n", g_fam->name, d_trunc, d_false);
    }
    cdx_model_close(mg);
    cdx_model_close(mt);
    cdx_model_close(mf);
    unlink(g_gguf);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tdir);
}

/* BitNet: convert refuses relu2 (llama.cpp's bitnet gates with SiLU); a SiLU checkpoint's GGUF is the checkpoint
 * as llama.cpp's graph computes it, the activations unquantized: every logit at every step within 1e-4 of the
 * checkpoint with flip_act_quant (the float matrices t / weight_scale), and more than 1e-3 from the checkpoint
 * itself (the comparison sees the int8 activations). */
static void run_gguf_bitnet(void)
{
    cdx_err e = { 0 };
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    const char *act = json_string_value(json_object_get(json_object_get(g_var, "config"), "hidden_act"));
    const bool relu2 = !act || !strcmp(act, "relu2");
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    int rc = cdx_convert_hf(g_dir, &(cdx_convert_opts){ .type = CDX_TYPE_F32 }, w, &c, &e);
    if (relu2) {
        CHECKF(rc == CDX_EUNSUPPORTED && strstr(e.msg, "hidden_act is not \"silu\"") && strstr(e.msg, "gates with SiLU"),
               "convert %s: relu2 refused by name (rc %d: %s)", g_dir, rc, e.msg);
        printf("  %s: convert refuses it: %s\n", g_fam->name, e.msg);
        cdx_convert_free(c);
        cdx_gguf_writer_free(w);
        return;
    }
    CHECKF(rc == 0, "convert %s: %s", g_dir, e.msg);
    rc = rc ? rc : cdx_tok_export_gguf_dummy(w, 320, 1, 2, &e);
    rc = rc ? rc : cdx_gguf_writer_write(w, g_gguf, &e);
    CHECKF(rc == 0, "writing %s: %s", g_gguf, e.msg);
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
    cdx_model *mg = NULL, *mf = NULL, *mq = NULL;
    const cdx_model_opts o = { .dtype = CDX_DTYPE_F32 };
    rc = rc ? rc : cdx_model_open(g_gguf, &o, &mg, &e);
    rc = rc ? rc : cdx_model_open(g_dir, &o, &mf, &e);
    rc = rc ? rc : cdx_model_open(g_dir, &o, &mq, &e);
    CHECKF(rc == 0, "opening the GGUF and the checkpoint: %s", e.msg);
    if (!rc) {
        flip_act_quant(mf, false);
        double d_float = 0, d_int8 = 0;
        const int bad = decode_pair(mg, mf, &d_float);
        decode_pair(mg, mq, &d_int8);
        CHECKF(d_float <= 1e-4, "%s: logits differ from the checkpoint's with unquantized activations by %.3g", g_gguf,
               d_float);
        CHECKF(d_int8 > 1e-3, "%s: logits within %.3g of the checkpoint's int8 activations: the check cannot see them",
               g_gguf, d_int8);
        printf("  %s converted GGUF: every logit within %.2e of the checkpoint with unquantized activations (llama.cpp's "
               "graph), %.2e from it with int8 activations (PyTorch's); %d of 3 cases keep PyTorch's 16 tokens\n",
               g_fam->name, d_float, d_int8, 3 - bad);
        flip_act_quant(mf, true);
    }
    cdx_model_close(mg);
    cdx_model_close(mf);
    cdx_model_close(mq);
    unlink(g_gguf);
}

static void run_each_rule_matters(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    REQUIRE(cdx_model_open(g_dir, NULL, &m, &e) == 0);
    for (const rule *r = g_fam->rules; r->what; r++) {
        r->flip(m, false);
        double worst = 0;
        const int bad = decode(m, "scalar", &worst, true, "");
        CHECKF(bad > 0, "%s without %s: the goldens still pass (worst %.3g)", g_fam->name, r->what, worst);
        printf("  %s without %s: %d of 3 cases break (worst top-5 logit error %.3g)\n", g_fam->name, r->what, bad,
               worst);
        r->flip(m, true);
    }
    double worst = 0;
    CHECKF(decode(m, "scalar", &worst, true, "") == 0, "%s with every rule back: the goldens pass", g_fam->name);
    cdx_model_close(m);
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
    json_t *all = json_load_file("tests/golden/families-c.json", 0, &je);
    if (!all) {
        printf("tests/golden/families-c.json: %s\nfamilies_c: 0 passed, 1 failed\n", je.text);
        return 1;
    }
    static char names[64][256];
    int k = 0;
    size_t vi;
    json_t *v;
    json_array_foreach(json_object_get(all, "variants"), vi, v) {
        const char *fam = json_string_value(json_object_get(v, "family"));
        g_fam = NULL;
        for (size_t f = 0; f < sizeof k_families / sizeof k_families[0]; f++)
            if (!strcmp(k_families[f].name, fam))
                g_fam = &k_families[f];
        if (!g_fam)
            continue;
        g_var = v;
        snprintf(g_dir, sizeof g_dir, "/tmp/cdx_fc_%s_%d_%zu", fam, (int)getpid(), vi);
        snprintf(g_gguf, sizeof g_gguf, "%s.gguf", g_dir);
        const char *vname = json_string_value(json_object_get(v, "variant"));
        if (write_fixture(fam, json_object_get(v, "config"), g_dir) != 0) {
            printf("  could not write the %s fixture\n", fam);
            t_failed++;
            continue;
        }
        snprintf(names[k], sizeof names[k], "%s (%s): the checkpoint gives PyTorch's goldens on every kernel set, "
                 "alone and batched", fam, vname);
        RUN(names[k], run_checkpoint);
        k++;
        if (g_fam->gguf == GGUF_GOLDENS) {
            snprintf(names[k], sizeof names[k], "%s (%s): its conversion to GGUF gives them too", fam, vname);
            RUN(names[k], run_gguf);
            k++;
        } else if (g_fam->gguf == GGUF_YARN_TRUNCATED) {
            snprintf(names[k], sizeof names[k], "%s (%s): its conversion to GGUF (YaRN truncated, as llama.cpp) gives "
                     "PyTorch's tokens, or convert refuses what the file cannot say", fam, vname);
            RUN(names[k], run_gguf_yarn);
            k++;
        } else if (g_fam->gguf == GGUF_BITNET) {
            snprintf(names[k], sizeof names[k], "%s (%s): its conversion to GGUF computes llama.cpp's graph (SiLU, "
                     "activations unquantized), or convert refuses relu2", fam, vname);
            RUN(names[k], run_gguf_bitnet);
            k++;
        }
        if (vi == 0 || strcmp(fam, json_string_value(json_object_get(json_array_get(json_object_get(all, "variants"),
                                                                                       vi - 1), "family")))) {
            snprintf(names[k], sizeof names[k], "%s: each of its rules is needed for the goldens", fam);
            RUN(names[k], run_each_rule_matters);
            k++;
        }
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", g_dir);
    }
    json_decref(all);
    return t_done("families_c");
}
