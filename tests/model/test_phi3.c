/* Phi-3 (../shared/fixtures/hf/phi3: PyTorch float32 goldens following modeling_phi3.py line by line):
 * fused qkv_proj and gate_up_proj split at load, partial rotary (12 of 16 dims), LongRoPE with its
 * attention factor, the short factors up to original_max_position_embeddings (32) and the long ones
 * from there for every position. The goldens recompute the whole sequence at every step; caldrix decodes
 * with its KV cache, so case "medium" (20 + 16 tokens) passes only if the cached keys are re-rotated when
 * the sequence passes 32 positions (step 13). Every case's 16 tokens and top-5 logits within 1e-3, from
 * the checkpoint and from caldrix convert's GGUF (llama.cpp's phi3 layout: attn_qkv, a 2·n_ff ffn_up,
 * rope_factors_long / _short), on every kernel set, with an f32 and an f16 KV cache; then each part of
 * LongRoPE switched off in turn must break the goldens. */
#include "caldrix.h"
#include "caldrix/convert.h"
#include "caldrix/model.h"
#include "caldrix/tokenizer.h"
#include "model/arch.h"
#include "test.h"

#include <jansson.h>
#include <unistd.h>

#define DIR SHARED "/fixtures/hf/phi3"

static json_t *g_gold;
static const char *g_path, *g_isa;
static char g_gguf[128];
static uint32_t g_kv = CDX_TYPE_F32;

/* Greedy decoding of every case with the KV cache: the number of cases whose tokens or top-5 logits
 * differ from the goldens; *worst: the largest top-5 logit error. */
static int decode(cdx_model *m, const char *isa, uint32_t kv_type, double *worst, bool quiet, bool restart)
{
    cdx_err e = { 0 };
    const cdx_hparams *hp = cdx_model_hparams(m);
    cdx_forward_ctx *fc = NULL;
    if (cdx_forward_ctx_create(m, 64, 2, cdx_kernels_by_isa(isa), &fc, &e))
        return 99;
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    int bad = 0;
    *worst = 0;
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(g_gold, "cases"), ci, c) {
        json_t *prompt = json_object_get(c, "prompt_ids"), *toks = json_object_get(c, "tokens"),
               *steps = json_object_get(c, "steps");
        cdx_kv kv;
        if (cdx_kv_init(&kv, hp, 256, &e)) {
            bad++;
            break;
        }
        cdx_kv *kvp = &kv;
        int32_t ids[64];
        size_t np = json_array_size(prompt);
        for (size_t i = 0; i < np && i < 64; i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(prompt, i));
        /* the prompt in two chunks, each rotated for the whole prompt's length (as the engine does) */
        const int64_t first = (int64_t)np / 2;
        kv.seq.rope_len = (int64_t)np;
        cdx_batch b1 = { .n = first, .tokens = ids }, b2 = { .n = (int64_t)np - first, .tokens = ids + first };
        bool ok = (first == 0 || cdx_forward(fc, &kvp, 1, &b1, logits, &e) == 0) &&
                  cdx_forward(fc, &kvp, 1, &b2, logits, &e) == 0;
        int64_t n = (int64_t)np, cached = (int64_t)np;
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
            ok = cdx_argmax(logits, hp->n_vocab) == want && cw <= (kv_type == CDX_TYPE_F32 ? 1e-3 : 2e-2);
            if (!ok && !quiet)
                printf("    step %zu: first mismatch (err %.3g)\n", s, cw);
            ids[n++] = want;
            kv.seq.rope_len = n;
            /* LongRoPE past the original length: every position again (transformers drops its cache) */
            if (restart && cdx_model_rope_restart(m, cached, n)) {
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
        if (!quiet)
            printf("  %s [%s] case %s: %s, max |logit - golden| = %.2e\n", g_path, isa,
                   json_string_value(json_object_get(c, "name")), ok ? "tokens match" : "MISMATCH", cw);
        cdx_kv_free(&kv);
    }
    free(logits);
    cdx_forward_ctx_free(fc);
    return bad;
}

static void run_golden(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    int rc = cdx_model_open(g_path, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &m, &e);
    CHECKF(rc == 0, "%s: %s", g_path, e.msg);
    if (rc)
        return;
    double worst;
    CHECKF(decode(m, g_isa, g_kv, &worst, false, true) == 0, "%s [%s]: cases differ from the goldens (worst %.3g)", g_path,
           g_isa, worst);
    cdx_model_close(m);
}

static void run_convert(void)
{
    cdx_err e = { 0 };
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    REQUIRE(cdx_gguf_writer_new(&w, &e) == 0);
    int rc = cdx_convert_hf(DIR, &(cdx_convert_opts){ .type = CDX_TYPE_F32 }, w, &c, &e);
    CHECKF(rc == 0, "%s: %s", DIR, e.msg);
    rc = rc ? rc : cdx_tok_export_gguf_dummy(w, 320, 1, 2, &e);
    snprintf(g_gguf, sizeof g_gguf, "/tmp/cdx_phi3_%d.gguf", (int)getpid());
    rc = rc ? rc : cdx_gguf_writer_write(w, g_gguf, &e);
    CHECKF(rc == 0, "writing %s: %s", g_gguf, e.msg);
    if (rc)
        g_gguf[0] = 0;
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
    if (rc)
        return;
    /* llama.cpp's phi3 layout: fused tensors, the factor tensors, its keys */
    cdx_gguf *g = NULL;
    REQUIRE(cdx_gguf_open(g_gguf, &g, &e) == 0);
    static const char *const want[] = { "blk.0.attn_qkv.weight", "blk.2.ffn_up.weight", "rope_factors_long.weight",
                                        "rope_factors_short.weight" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECKF(cdx_gguf_tensor_find(g, want[i]) != NULL, "%s has no %s", g_gguf, want[i]);
    const cdx_gguf_tensor *up = cdx_gguf_tensor_find(g, "blk.2.ffn_up.weight");
    CHECKF(up && up->ne[1] == 320, "ffn_up is %lld rows; expected 2 x 160", up ? (long long)up->ne[1] : -1LL);
    CHECK(!cdx_gguf_tensor_find(g, "blk.0.attn_q.weight") && !cdx_gguf_tensor_find(g, "blk.0.ffn_gate.weight"));
    uint64_t v = 0;
    double f = 0;
    CHECK(cdx_gguf_get_u64(g, "phi3.rope.dimension_count", &v) && v == 12);
    CHECK(cdx_gguf_get_u64(g, "phi3.rope.scaling.original_context_length", &v) && v == 32);
    CHECK(cdx_gguf_get_f64(g, "phi3.rope.scaling.attn_factor", &f) && fabs(f - 1.2649110640673518) < 1e-6);
    cdx_gguf_close(g);
}

/* The three parts of LongRoPE, each left out in turn, as a port that forgot it would compute. */
static void run_each_part_matters(void)
{
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    g_path = DIR;
    REQUIRE(cdx_model_open(DIR, &(cdx_model_opts){ .dtype = CDX_DTYPE_F32 }, &m, &e) == 0);
    cdx_hparams *hp = (cdx_hparams *)cdx_model_hparams(m);
    const int64_t half = hp->n_rot / 2;
    float keep[64];
    memcpy(keep, m->inv_freq_long, (size_t)half * sizeof(float));
    double worst;
    int bad;
    /* the short factors always (llama.cpp with a context of at most 32) */
    memcpy(m->inv_freq_long, m->inv_freq, (size_t)half * sizeof(float));
    bad = decode(m, "scalar", CDX_TYPE_F32, &worst, true, true);
    CHECKF(bad > 0, "the short factors always: the goldens still pass");
    printf("  the short factors always: %d of 3 cases break (worst top-5 logit error %.3g)\n", bad, worst);
    memcpy(m->inv_freq_long, keep, (size_t)half * sizeof(float));
    /* the long factors always (llama.cpp with a longer context) */
    const int64_t ctx = hp->rope_pass_ctx;
    hp->rope_pass_ctx = 0;
    bad = decode(m, "scalar", CDX_TYPE_F32, &worst, true, true);
    CHECKF(bad > 0, "the long factors always: the goldens still pass");
    printf("  the long factors always: %d of 3 cases break (worst %.3g)\n", bad, worst);
    hp->rope_pass_ctx = ctx;
    /* the attention factor */
    const float att = hp->rope_attn_factor;
    hp->rope_attn_factor = 0;
    bad = decode(m, "scalar", CDX_TYPE_F32, &worst, true, true);
    CHECKF(bad > 0, "no attention factor: the goldens still pass");
    printf("  without the attention factor: %d of 3 cases break (worst %.3g)\n", bad, worst);
    hp->rope_attn_factor = att;
    /* the switch without computing the cached positions again (vLLM's way): "medium" breaks at step 13 */
    bad = decode(m, "scalar", CDX_TYPE_F32, &worst, true, false);
    CHECKF(bad > 0, "no recomputation at the switch: the goldens still pass");
    printf("  the switch without recomputing the cached positions: %d of 3 cases break (worst %.3g)\n", bad, worst);
    CHECKF(decode(m, "scalar", CDX_TYPE_F32, &worst, true, true) == 0, "every part back: the goldens pass");
    cdx_model_close(m);
}

/* Bad config.json: each refused with the field named. */
static void run_refusals(void)
{
    static const struct { const char *json, *needle; } bad[] = {
        { "{\"architectures\":[\"Phi3ForCausalLM\"],\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":1,"
          "\"intermediate_size\":8,\"vocab_size\":32,\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1]}}",
          "long_factor is missing" },
        { "{\"architectures\":[\"Phi3ForCausalLM\"],\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":1,"
          "\"intermediate_size\":8,\"vocab_size\":32,\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1],"
          "\"long_factor\":[1,2,3]}}", "as long" },
        { "{\"architectures\":[\"Phi3ForCausalLM\"],\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":1,"
          "\"intermediate_size\":8,\"vocab_size\":32,\"rope_scaling\":{\"type\":\"mrope\",\"factor\":2}}",
          "rope_scaling.type is \"mrope\"" },
        { "{\"architectures\":[\"Phi3ForCausalLM\"],\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":1,"
          "\"intermediate_size\":8,\"vocab_size\":32,\"partial_rotary_factor\":0.1}", "partial_rotary_factor 0.1" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cdx_hf_config *cfg = malloc(sizeof *cfg);
        cdx_err e = { 0 };
        int rc = cdx_hf_config_parse(bad[i].json, strlen(bad[i].json), "config.json", cfg, &e);
        CHECKF(rc != 0 && strstr(e.msg, bad[i].needle), "case %zu: rc %d, \"%s\" (want \"%s\")", i, rc, e.msg,
               bad[i].needle);
        free(cfg);
    }
}

int main(void)
{
    json_error_t je;
    g_gold = json_load_file(DIR "/golden.json", 0, &je);
    if (!g_gold) {
        printf("%s: %s\nphi3: 0 passed, 1 failed\n", DIR "/golden.json", je.text);
        return 1;
    }
    RUN("phi3 converts to GGUF with llama.cpp's layout and keys", run_convert);
    static char names[16][160];
    const char *isas[] = { "scalar", "avx2", "avx512" };
    int k = 0;
    for (int fmt = 0; fmt < (g_gguf[0] ? 2 : 1); fmt++)
        for (int s = 0; s < 3; s++) {
            if (!cdx_kernels_by_isa(isas[s])) {
                t_skip_isa(isas[s]);
                continue;
            }
            g_path = fmt ? g_gguf : DIR;
            g_isa = isas[s];
            snprintf(names[k], sizeof names[k], "phi3 (%s, %s kernels) reproduces the PyTorch goldens",
                     fmt ? "converted GGUF" : "safetensors", isas[s]);
            RUN(names[k], run_golden);
            k++;
        }
    RUN("phi3: each part of LongRoPE is needed for the goldens", run_each_part_matters);
    RUN("phi3: bad rope_scaling and partial_rotary_factor are refused by name", run_refusals);
    if (g_gguf[0])
        unlink(g_gguf);
    json_decref(g_gold);
    return t_done("phi3");
}
