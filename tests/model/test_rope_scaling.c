/* RoPE scaling from config.json and from GGUF keys, one computation for every family (src/model/rope.c):
 * tests/golden/rope-scaling.json (scripts/goldens/torch-rope-scaling.py: the fixtures' PyTorch reference
 * of the llama fixture's weights with transformers' modeling_rope_utils cos/sin) under "yarn" (three
 * settings), "linear", "dynamic" and "longrope". For each: the scaled inv_freq and attention factor against
 * transformers' formula, then every case's greedy tokens and top-5 logits within 1e-3 decoding with the
 * KV cache (the prompt in two chunks rotated for its whole length, as the engine does; LongRoPE computed
 * again when it passes the original length), from the checkpoint and from caldrix convert's GGUF
 * (llama.cpp's rope.scaling.* keys), or the conversion refused by name where llama.cpp's keys cannot
 * say the scaling. */
#include "caldrix.h"
#include "caldrix/convert.h"
#include "caldrix/model.h"
#include "caldrix/tokenizer.h"
#include "model/arch.h"
#include "test.h"

#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLAMA SHARED "/fixtures/hf/llama"

static json_t *g_v; /* the variant under test */

static int decode(cdx_model *m, double *worst)
{
    cdx_err e = { 0 };
    const cdx_hparams *hp = cdx_model_hparams(m);
    cdx_forward_ctx *fc = NULL;
    if (cdx_forward_ctx_create(m, 64, 2, cdx_kernels_by_isa("scalar"), &fc, &e))
        return 99;
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    int bad = 0;
    *worst = 0;
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(g_v, "cases"), ci, c) {
        json_t *prompt = json_object_get(c, "prompt_ids"), *toks = json_object_get(c, "tokens"),
               *steps = json_object_get(c, "steps");
        cdx_kv kv;
        if (cdx_kv_init(&kv, hp, 128, &e)) {
            bad++;
            break;
        }
        cdx_kv *kvp = &kv;
        int32_t ids[64];
        const int64_t np = (int64_t)json_array_size(prompt);
        for (int64_t i = 0; i < np && i < 48; i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(prompt, (size_t)i));
        kv.seq.rope_len = np;
        cdx_batch b1 = { .n = np / 2, .tokens = ids }, b2 = { .n = np - np / 2, .tokens = ids + np / 2 };
        bool ok = cdx_forward(fc, &kvp, 1, &b1, logits, &e) == 0 && cdx_forward(fc, &kvp, 1, &b2, logits, &e) == 0;
        int64_t n = np, cached = np;
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
            ok = cdx_argmax(logits, hp->n_vocab) == want && cw <= 1e-3;
            ids[n++] = want;
            kv.seq.rope_len = n;
            if (cdx_model_rope_restart(m, cached, n)) {
                kv.n_past = 0;
                cdx_batch all = { .n = n, .tokens = ids };
                ok = ok && cdx_forward(fc, &kvp, 1, &all, logits, &e) == 0;
            } else {
                cdx_batch nb = { .n = 1, .tokens = &ids[n - 1] };
                ok = ok && cdx_forward(fc, &kvp, 1, &nb, logits, &e) == 0;
            }
            cached = n;
        }
        *worst = cw > *worst ? cw : *worst;
        bad += !ok;
        cdx_kv_free(&kv);
    }
    free(logits);
    cdx_forward_ctx_free(fc);
    return bad;
}

/* inv_freq (and the long set, the attention factor) against transformers' formula */
static void check_freqs(const cdx_model *m, const char *name)
{
    const cdx_hparams *hp = cdx_model_hparams(m);
    static const char *const keys[2] = { "inv_freq", "inv_freq_long" };
    const float *have[2] = { m->inv_freq, m->inv_freq_long };
    for (int k = 0; k < 2; k++) {
        json_t *want = json_object_get(g_v, keys[k]);
        if (!want)
            continue;
        CHECKF(have[k] && (int64_t)json_array_size(want) == hp->n_rot / 2, "%s: %s missing", name, keys[k]);
        double worst = 0;
        for (size_t i = 0; have[k] && i < json_array_size(want); i++) {
            const double w = json_number_value(json_array_get(want, i));
            worst = fmax(worst, fabs(have[k][i] - w) / w);
        }
        CHECKF(worst < 1e-6, "%s: %s differs from transformers' by %.3g (relative)", name, keys[k], worst);
    }
    json_t *att = json_object_get(g_v, "attention_factor");
    const double have_att = hp->rope_attn_factor ? hp->rope_attn_factor : 1.0; /* 0: cos and sin unscaled */
    if (att)
        CHECKF(fabs(have_att - json_number_value(att)) < 1e-6, "%s: attention factor %g, transformers %g", name,
               have_att, json_number_value(att));
}

static void run_variant(void)
{
    const char *name = json_string_value(json_object_get(g_v, "variant"));
    char dir[128], src[256], dst[256], cwd[160];
    snprintf(dir, sizeof dir, "/tmp/cdx_rope_%d", (int)getpid());
    REQUIRE(mkdir(dir, 0700) == 0);
    json_error_t je;
    json_t *cfg = json_load_file(LLAMA "/config.json", 0, &je);
    REQUIRE(cfg);
    json_object_update(cfg, json_object_get(g_v, "config"));
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    REQUIRE(json_dump_file(cfg, dst, 0) == 0);
    json_decref(cfg);
    REQUIRE(getcwd(cwd, sizeof cwd));
    snprintf(src, sizeof src, "%s/" LLAMA "/model.safetensors", cwd);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    REQUIRE(symlink(src, dst) == 0);
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    int rc = cdx_model_open(dir, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &m, &e);
    CHECKF(rc == 0, "%s: %s", name, e.msg);
    double worst = 0;
    if (!rc) {
        check_freqs(m, name);
        const int bad = decode(m, &worst);
        CHECKF(bad == 0, "%s: %d cases differ from PyTorch's (worst %.3g)", name, bad, worst);
        printf("  %s, checkpoint: %zu cases match PyTorch's (worst top-5 logit error %.2e)\n", name,
               json_array_size(json_object_get(g_v, "cases")) - (size_t)bad, worst);
        cdx_model_close(m);
        m = NULL;
    }
    /* its GGUF: the same answer, or the conversion refused by name */
    char gg[160];
    snprintf(gg, sizeof gg, "%s.gguf", dir);
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    rc = cdx_convert_hf(dir, &(cdx_convert_opts){ .type = CDX_TYPE_F32 }, w, &c, &e);
    const char *kind = json_string_value(json_object_get(json_object_get(json_object_get(g_v, "config"),
                                                                         "rope_scaling"), "rope_type"));
    const bool refused = strstr(name, "dynamic") || strstr(name, "mscale");
    if (refused) {
        CHECKF(rc == CDX_EUNSUPPORTED && (strstr(e.msg, "dynamic") || strstr(e.msg, "mscale")),
               "%s: convert %s", name, rc ? e.msg : "wrote a GGUF llama.cpp would compute otherwise");
        printf("  %s, convert: refused (%s)\n", name, e.msg);
    } else {
        CHECKF(rc == 0, "%s: convert: %s", name, e.msg);
        rc = rc ? rc : cdx_tok_export_gguf_dummy(w, 320, 1, 2, &e);
        rc = rc ? rc : cdx_gguf_writer_write(w, gg, &e);
        rc = rc ? rc : cdx_model_open(gg, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &m, &e);
        CHECKF(rc == 0, "%s: %s", gg, e.msg);
        if (!rc) {
            /* GGUF "llama" permutes q/k to adjacent pairs: the frequencies are the same */
            check_freqs(m, name);
            const int bad = decode(m, &worst);
            CHECKF(bad == 0, "%s, converted GGUF: %d cases differ from PyTorch's (worst %.3g)", name, bad, worst);
            printf("  %s, converted GGUF: %s (worst %.2e)\n", name, bad ? "DIFFERS" : "matches", worst);
            cdx_model_close(m);
        }
        unlink(gg);
    }
    (void)kind;
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
    unlink(dst);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    unlink(dst);
    rmdir(dir);
}

int main(void)
{
    json_error_t je;
    json_t *all = json_load_file("tests/golden/rope-scaling.json", 0, &je);
    if (!all) {
        printf("tests/golden/rope-scaling.json: %s\nrope_scaling: 0 passed, 1 failed\n", je.text);
        return 1;
    }
    static char names[16][160];
    size_t vi;
    json_array_foreach(json_object_get(all, "variants"), vi, g_v) {
        if (vi >= 16)
            break;
        snprintf(names[vi], sizeof names[vi], "rope_scaling %s: transformers' frequencies and PyTorch's goldens",
                 json_string_value(json_object_get(g_v, "variant")));
        RUN(names[vi], run_variant);
    }
    json_decref(all);
    return t_done("rope_scaling");
}
