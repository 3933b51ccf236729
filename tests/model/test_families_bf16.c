/* --dtype bf16 of the families beyond Llama / Qwen against PyTorch's bf16 goldens (tests/golden/bf16-<family>.json,
 * made by scripts/goldens/torch-bf16-families.py from transformers' modeling code on ../shared/fixtures/hf/<family>),
 * compared as tests/model/test_hf_golden_bf16.c compares the shared fixtures' golden_bf16.json (INDEX.md, "How an
 * engine compares"), teacher-forced: at every step the argmax is the golden token (at a step marked near_tie: any id
 * tied with the golden's top logit); each of the golden's five top ids within logit_tolerance (0.25); at least
 * min_fraction_of_steps_bit_identical of the 48 steps reproduce all five top logits bit for bit. On every kernel set
 * this CPU has (scalar, avx2, avx512, amx), with the K/V cache in f32 and in bf16 (bf16 values either way: the two must give the same bits);
 * and the three prompts as one batch of three sequences give each prompt's logits bit for bit. */
#include "caldrix.h"
#include "caldrix/model.h"
#include "test.h"

#include <jansson.h>
#include <unistd.h>

#include "bf16_golden.h"

/* the families whose rows say .bf16 besides llama, mistral, qwen2, qwen3 (test_hf_golden_bf16) and qwen2_vl
 * (test_qwen2vl), the mixtures of experts among them (forward_bf16.c with ops.c's model_moe); olmo's and gpt_oss's
 * checkpoints are written at test time by scripts/goldens/tiny_fixtures.py (as test_families_c writes them), the
 * others are ../shared/fixtures/hf's */
static const char *const k_families[] = { "granite", "olmo2", "smollm3", "gemma", "gemma2", "gemma3", "starcoder2",
                                          "stablelm", "cohere", "olmo", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe",
                                          "granitemoe", "phi3", "gpt_oss" };
enum { N_FAM = sizeof k_families / sizeof k_families[0], MAX_VOCAB = BF16G_MAX_VOCAB, N_STEPS = BF16G_STEPS };

static const char *g_fam, *g_isa;
static uint32_t g_kv;
static int g_fam_idx;
/* the logits of every step of the f32-cache run, to compare the bf16-cache run's bits with */
static float g_ref[N_FAM][3][N_STEPS][MAX_VOCAB];

static void run_family(void)
{
    char path[256], golden[256], cmd[512];
    const bool tiny = !strcmp(g_fam, "olmo") || !strcmp(g_fam, "gpt_oss");
    if (tiny) {
        snprintf(path, sizeof path, "/tmp/cdx_bf16_%s_%d", g_fam, (int)getpid());
        snprintf(cmd, sizeof cmd, "python3 scripts/goldens/tiny_fixtures.py %s %s '{}'", g_fam, path);
        REQUIRE(system(cmd) == 0);
    } else
        snprintf(path, sizeof path, SHARED "/fixtures/hf/%s", g_fam);
    snprintf(golden, sizeof golden, "tests/golden/bf16-%s.json", g_fam);
    json_error_t je;
    json_t *gold = json_load_file(golden, 0, &je);
    CHECKF(gold, "%s: %s", golden, je.text);
    if (!gold)
        return;
    const double tol = json_number_value(json_object_get(gold, "logit_tolerance"));
    const double min_fraction = json_number_value(json_object_get(gold, "min_fraction_of_steps_bit_identical"));
    REQUIRE(tol > 0 && tol < 1 && min_fraction > 0);
    cdx_err e = { 0 };
    cdx_model *m = NULL;
    int rc = cdx_model_open(path, &(cdx_model_opts){ .dtype = CDX_DTYPE_BF16 }, &m, &e);
    CHECKF(rc == 0, "%s --dtype bf16: %s", g_fam, e.msg);
    if (rc) {
        json_decref(gold);
        return;
    }
    CHECK(cdx_model_dtype(m) == CDX_DTYPE_BF16);
    const cdx_hparams *hp = cdx_model_hparams(m);
    REQUIRE(hp->n_vocab <= MAX_VOCAB);
    cdx_forward_ctx *fc = NULL;
    REQUIRE(cdx_forward_ctx_create(m, 64, 2, cdx_kernels_by_isa(g_isa), &fc, &e) == 0);
    bf16g_run r = { .name = g_fam, .isa = g_isa, .m = m, .kv = g_kv, .tol = tol, .ref = g_ref[g_fam_idx] };
    bf16g_decode(fc, hp, gold, &r);
    const int exact = r.exact, steps_seen = r.steps;
    const double worst = r.worst;
    size_t ci;
    json_t *c;
    /* batch invariance: the three prompts as one batch of three sequences give each prompt's step-0 logits bit for
     * bit (a row's result does not depend on the rows beside it) */
    if (g_kv == CDX_TYPE_F32) {
        cdx_forward_ctx *fb = NULL;
        REQUIRE(cdx_forward_ctx_create(m, 128, 2, cdx_kernels_by_isa(g_isa), &fb, &e) == 0);
        test_kv kvs[3] = { 0 };
        cdx_kv_seq seqs[3];
        int32_t ids[128], seq[128];
        int64_t pos[128];
        bool want[128];
        int64_t n = 0;
        json_array_foreach(json_object_get(gold, "cases"), ci, c) {
            json_t *prompt = json_object_get(c, "prompt_ids");
            REQUIRE(ci < 3 && kv_make(&kvs[ci], hp, g_kv));
            seqs[ci] = kvs[ci].seq;
            for (size_t i = 0; i < json_array_size(prompt) && n < 128; i++, n++) {
                ids[n] = (int32_t)json_integer_value(json_array_get(prompt, i));
                seq[n] = (int32_t)ci;
                pos[n] = (int64_t)i;
                want[n] = i + 1 == json_array_size(prompt);
            }
        }
        static float rows[3][MAX_VOCAB];
        cdx_batch b = { .n = n, .tokens = ids, .pos = pos, .seq = seq, .want_logits = want };
        CHECKF(cdx_forward_seqs(fb, seqs, 3, &b, &rows[0][0], &e) == 0, "%s", e.msg);
        for (int k = 0; k < 3; k++) {
            CHECKF(!memcmp(rows[k], g_ref[g_fam_idx][k][0], sizeof(float) * (size_t)hp->n_vocab),
                   "%s [%s]: case %d's logits in a batch of three differ from its own", g_fam, g_isa, k);
            free(kvs[k].k);
            free(kvs[k].v);
        }
        cdx_forward_ctx_free(fb);
    }
    CHECKF(exact >= min_fraction * steps_seen, "%s [%s]: %d of %d steps bit-identical; the golden asks for %.0f%%",
           g_fam, g_isa, exact, steps_seen, 100 * min_fraction);
    printf("  %s [%s, kv %s]: %d/%d steps bit-identical, max |logit - golden| = %.4g\n", g_fam, g_isa,
           cdx_type_name(g_kv), exact, steps_seen, worst);
    cdx_forward_ctx_free(fc);
    cdx_model_close(m);
    json_decref(gold);
    if (tiny) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", path);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", path);
    }
}

int main(void)
{
    static char names[N_FAM * 8][200];
    int k = 0;
    const char *isas[] = { "scalar", "avx2", "avx512", "amx" };
    for (int s = 0; s < 4; s++) {
        if (!cdx_kernels_by_isa(isas[s])) {
            t_skip_isa(isas[s]);
            continue;
        }
        g_isa = isas[s];
        for (int kv = 0; kv < 2; kv++) {
            g_kv = kv ? CDX_TYPE_BF16 : CDX_TYPE_F32;
            for (int i = 0; i < N_FAM; i++) {
                g_fam = k_families[i];
                g_fam_idx = i;
                snprintf(names[k], sizeof names[k], "%s --dtype bf16 (%s kernels, %s cache) matches PyTorch's bf16 "
                         "goldens", g_fam, g_isa, cdx_type_name(g_kv));
                RUN(names[k], run_family);
                k++;
            }
        }
    }
    return t_done("families_bf16");
}
