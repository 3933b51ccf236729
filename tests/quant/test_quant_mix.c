/* Quantization mixtures: the per-tensor type choice of llama.cpp's llama_model_quantize
 * (src/llama-quant.cpp, release v0.4.0, llama_tensor_get_type_impl / tensor_type_fallback).
 * Each case names the rule it checks. */
#include "caldrix.h"
#include "test.h"

#define MAXT 1024

typedef struct {
    char names[MAXT][64];
    int64_t ne[MAXT][4];
    int n;
} model;

static void add(model *m, const char *name, int64_t ne0, int64_t ne1)
{
    snprintf(m->names[m->n], 64, "%s", name);
    m->ne[m->n][0] = ne0;
    m->ne[m->n][1] = ne1;
    m->ne[m->n][2] = m->ne[m->n][3] = 1;
    m->n++;
}

/* A Llama-shaped model: n_layer blocks, width d, ffn f, kv width kv; output head unless tied. */
static void llama_model(model *m, int n_layer, int64_t d, int64_t f, int64_t kv, bool tied)
{
    m->n = 0;
    add(m, "token_embd.weight", d, 1000);
    if (!tied)
        add(m, "output.weight", d, 1000);
    add(m, "output_norm.weight", d, 1);
    char b[64];
    for (int l = n_layer - 1; l >= 0; l--) { /* reverse: the mix must sort them itself */
        static const char *const parts[] = { "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                             "ffn_norm", "ffn_gate", "ffn_up", "ffn_down" };
        for (int p = 0; p < 9; p++) {
            snprintf(b, sizeof b, "blk.%d.%s.weight", l, parts[p]);
            int64_t ne0 = p == 8 ? f : d, ne1 = p == 2 || p == 3 ? kv : p == 6 || p == 7 ? f : p == 8 ? d : d;
            add(m, b, ne0, strstr(parts[p], "norm") ? 1 : ne1);
        }
    }
}

static const model *g_sort_model;
static int cmp_idx(const void *a, const void *b)
{
    return cdx_quant_tensor_cmp(g_sort_model->names[*(const int *)a], g_sort_model->names[*(const int *)b]);
}

/* Runs the mix over m in llama.cpp's order; out[i] is the type of m->names[i]. */
static int run_mix(const model *m, const char *ftype, cdx_quant_model_info info, cdx_type *out)
{
    const char *names[MAXT];
    int order[MAXT];
    for (int i = 0; i < m->n; i++) {
        names[i] = m->names[i];
        order[i] = i;
    }
    cdx_quant_mix mix;
    cdx_err e = {0};
    if (cdx_quant_mix_init(&mix, ftype, &info, names, (size_t)m->n, &e) < 0)
        return -1;
    g_sort_model = m;
    qsort(order, (size_t)m->n, sizeof order[0], cmp_idx);
    for (int k = 0; k < m->n; k++)
        out[order[k]] = cdx_quant_mix_choose(&mix, m->names[order[k]], m->ne[order[k]], CDX_TYPE_F32);
    return 0;
}

static cdx_type type_of(const model *m, const cdx_type *t, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->names[i], name))
            return t[i];
    return (cdx_type)-1;
}

#define EXPECT(name, want)                                                                             \
    do {                                                                                               \
        cdx_type got_ = type_of(&m, types, name);                                                      \
        CHECKF(got_ == (want), "%s: %s, expected %s", name, cdx_type_name(got_), cdx_type_name(want)); \
    } while (0)

static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static model m;
static cdx_type types[MAXT];

static void q4_k_m_on_a_32_layer_gqa4_llama(void)
{
    /* Llama-3-8B shapes (scaled down in rows only; row length decides the block fit) */
    llama_model(&m, 32, 4096, 14336, 1024, false);
    REQUIRE(run_mix(&m, "Q4_K_M", (cdx_quant_model_info){ .n_layer = 32, .n_gqa = 4 }, types) == 0);
    EXPECT("output.weight", CDX_TYPE_Q6_K);       /* output head: Q6_K */
    EXPECT("token_embd.weight", CDX_TYPE_Q4_K);   /* untied embedding keeps the default */
    EXPECT("output_norm.weight", CDX_TYPE_F32);   /* 1D: never quantized */
    char b[64];
    for (int l = 0; l < 32; l++) {
        /* use_more_bits(i, n): i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 -> Q6_K for attn_v, ffn_down */
        cdx_type more = more_bits(l, 32) ? CDX_TYPE_Q6_K : CDX_TYPE_Q4_K;
        snprintf(b, sizeof b, "blk.%d.attn_v.weight", l);
        EXPECT(b, more);
        snprintf(b, sizeof b, "blk.%d.ffn_down.weight", l);
        EXPECT(b, more);
        snprintf(b, sizeof b, "blk.%d.attn_q.weight", l);
        EXPECT(b, CDX_TYPE_Q4_K);
        snprintf(b, sizeof b, "blk.%d.attn_output.weight", l);
        EXPECT(b, CDX_TYPE_Q4_K);
        snprintf(b, sizeof b, "blk.%d.ffn_up.weight", l);
        EXPECT(b, CDX_TYPE_Q4_K);
        snprintf(b, sizeof b, "blk.%d.attn_norm.weight", l);
        EXPECT(b, CDX_TYPE_F32);
    }
    EXPECT("blk.0.attn_v.weight", CDX_TYPE_Q6_K);  /* layer 0 < 32/8 */
    EXPECT("blk.5.attn_v.weight", CDX_TYPE_Q4_K);  /* (5-4)%3 = 1 */
    EXPECT("blk.6.attn_v.weight", CDX_TYPE_Q6_K);  /* (6-4)%3 = 2 */
    EXPECT("blk.28.ffn_down.weight", CDX_TYPE_Q6_K); /* 28 >= 7*32/8 */
}

static void tied_embeddings_get_the_output_type(void)
{
    /* no output.weight (Llama-3.2-1B): token_embd is quantized like the output head */
    llama_model(&m, 16, 2048, 8192, 512, true);
    REQUIRE(run_mix(&m, "Q4_K_M", (cdx_quant_model_info){ .n_layer = 16, .n_gqa = 4 }, types) == 0);
    EXPECT("token_embd.weight", CDX_TYPE_Q6_K);
    REQUIRE(run_mix(&m, "Q8_0", (cdx_quant_model_info){ .n_layer = 16, .n_gqa = 4 }, types) == 0);
    EXPECT("token_embd.weight", CDX_TYPE_Q8_0); /* "new_type != Q8_0 -> Q6_K": Q8_0 stays */
    EXPECT("blk.3.ffn_down.weight", CDX_TYPE_Q8_0);
}

static void legacy_types_quantize_everything_but_the_head(void)
{
    static const struct { const char *ft; cdx_type t; } cases[] = {
        { "Q4_0", CDX_TYPE_Q4_0 }, { "Q4_1", CDX_TYPE_Q4_1 }, { "Q5_0", CDX_TYPE_Q5_0 },
        { "Q5_1", CDX_TYPE_Q5_1 }, { "Q6_K", CDX_TYPE_Q6_K },
    };
    llama_model(&m, 8, 512, 1024, 512, false);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        REQUIRE(run_mix(&m, cases[i].ft, (cdx_quant_model_info){ .n_layer = 8, .n_gqa = 1 }, types) == 0);
        EXPECT("output.weight", CDX_TYPE_Q6_K); /* head is Q6_K for every non-Q8_0 type */
        EXPECT("token_embd.weight", cases[i].t);
        EXPECT("blk.0.attn_v.weight", cases[i].t);
        EXPECT("blk.0.ffn_down.weight", cases[i].t); /* Q4_0 -> Q4_1 only with an imatrix */
        EXPECT("blk.7.ffn_norm.weight", CDX_TYPE_F32);
    }
}

static void q3_k_m_q5_k_m_q2_k_rules(void)
{
    llama_model(&m, 32, 4096, 11008, 4096, false);
    cdx_quant_model_info info = { .n_layer = 32, .n_gqa = 1 };
    REQUIRE(run_mix(&m, "Q3_K_M", info, types) == 0);
    EXPECT("blk.0.attn_v.weight", CDX_TYPE_Q5_K);   /* i_attention_wv < 2 -> Q5_K */
    EXPECT("blk.1.attn_v.weight", CDX_TYPE_Q5_K);
    EXPECT("blk.2.attn_v.weight", CDX_TYPE_Q4_K);   /* else Q4_K */
    EXPECT("blk.1.ffn_down.weight", CDX_TYPE_Q5_K); /* i < n/16 -> Q5_K */
    EXPECT("blk.2.ffn_down.weight", CDX_TYPE_Q4_K); /* non-Falcon: Q4_K */
    EXPECT("blk.9.attn_output.weight", CDX_TYPE_Q4_K);
    EXPECT("blk.9.attn_q.weight", CDX_TYPE_Q3_K);
    EXPECT("blk.9.ffn_gate.weight", CDX_TYPE_Q3_K);
    REQUIRE(run_mix(&m, "Q5_K_M", info, types) == 0);
    EXPECT("blk.6.attn_v.weight", CDX_TYPE_Q6_K);
    EXPECT("blk.7.attn_v.weight", CDX_TYPE_Q5_K);
    EXPECT("blk.31.ffn_down.weight", CDX_TYPE_Q6_K);
    EXPECT("blk.10.ffn_down.weight", CDX_TYPE_Q5_K);
    EXPECT("output.weight", CDX_TYPE_Q6_K);
    REQUIRE(run_mix(&m, "Q2_K", info, types) == 0);
    EXPECT("blk.4.attn_v.weight", CDX_TYPE_Q3_K);      /* n_gqa < 4 -> Q3_K */
    EXPECT("blk.4.ffn_down.weight", CDX_TYPE_Q3_K);
    EXPECT("blk.4.attn_output.weight", CDX_TYPE_Q3_K);
    EXPECT("blk.4.ffn_up.weight", CDX_TYPE_Q2_K);
    info.n_gqa = 8;
    REQUIRE(run_mix(&m, "Q2_K", info, types) == 0);
    EXPECT("blk.4.attn_v.weight", CDX_TYPE_Q4_K);      /* n_gqa >= 4 -> Q4_K */
}

static void iq4_nl_and_ternary_rules(void)
{
    llama_model(&m, 16, 2048, 8192, 512, false);
    REQUIRE(run_mix(&m, "IQ4_NL", (cdx_quant_model_info){ .n_layer = 16, .n_gqa = 4 }, types) == 0);
    EXPECT("blk.3.attn_v.weight", CDX_TYPE_Q5_K);   /* IQ4_NL/XS with n_gqa >= 4 */
    EXPECT("blk.1.ffn_down.weight", CDX_TYPE_Q5_K); /* i < n/8 without an imatrix */
    EXPECT("blk.2.ffn_down.weight", CDX_TYPE_IQ4_NL);
    EXPECT("output.weight", CDX_TYPE_Q6_K);
    REQUIRE(run_mix(&m, "TQ2_0", (cdx_quant_model_info){ .n_layer = 16, .n_gqa = 4 }, types) == 0);
    EXPECT("token_embd.weight", CDX_TYPE_Q4_K);     /* TQ*: token_embd Q4_K */
    EXPECT("output.weight", CDX_TYPE_Q6_K);
    EXPECT("blk.3.attn_v.weight", CDX_TYPE_TQ2_0);
}

static void rows_that_do_not_fit_fall_back(void)
{
    /* stories260K-like widths: 64 is not a multiple of 256 */
    llama_model(&m, 5, 64, 172, 32, true);
    REQUIRE(run_mix(&m, "Q4_K_M", (cdx_quant_model_info){ .n_layer = 5, .n_gqa = 2 }, types) == 0);
    EXPECT("token_embd.weight", CDX_TYPE_Q8_0);      /* head rule: nx % qk_k != 0 -> Q8_0 */
    EXPECT("blk.1.attn_q.weight", CDX_TYPE_Q5_0);    /* Q4_K -> Q5_0 */
    EXPECT("blk.4.attn_v.weight", CDX_TYPE_Q8_0);    /* use_more_bits(4, 5): Q6_K -> Q8_0 */
    EXPECT("blk.1.attn_v.weight", CDX_TYPE_Q5_0);    /* Q4_K -> Q5_0 */
    EXPECT("blk.0.ffn_down.weight", CDX_TYPE_F16);   /* 172 % 32 != 0 -> F16 */
    REQUIRE(run_mix(&m, "Q2_K", (cdx_quant_model_info){ .n_layer = 5, .n_gqa = 2 }, types) == 0);
    EXPECT("blk.1.ffn_up.weight", CDX_TYPE_Q4_0);    /* Q2_K -> Q4_0 */
    REQUIRE(run_mix(&m, "Q4_0", (cdx_quant_model_info){ .n_layer = 5, .n_gqa = 2 }, types) == 0);
    EXPECT("blk.1.ffn_up.weight", CDX_TYPE_Q4_0);
    EXPECT("blk.1.ffn_down.weight", CDX_TYPE_F16);   /* a 32-block type that does not fit: F16 */
    REQUIRE(run_mix(&m, "F16", (cdx_quant_model_info){ .n_layer = 5, .n_gqa = 2 }, types) == 0);
    EXPECT("blk.1.ffn_down.weight", CDX_TYPE_F16);
    EXPECT("blk.1.ffn_norm.weight", CDX_TYPE_F32);
}

static void names_and_order(void)
{
    CHECK(cdx_ftype_find("q4_k_m") && cdx_ftype_find("q4_k_m")->llama_ftype == 15);
    CHECK(cdx_ftype_find("Q8_0")->default_type == CDX_TYPE_Q8_0);
    CHECK(cdx_ftype_by_id(37) && !strcmp(cdx_ftype_by_id(37)->name, "TQ2_0"));
    CHECK(cdx_ftype_find("Q4_2") == NULL);
    cdx_quant_mix mix;
    cdx_err e = {0};
    cdx_quant_model_info info = { .n_layer = 4 };
    CHECK(cdx_quant_mix_init(&mix, "Q9_K", &info, NULL, 0, &e) == CDX_EINVAL && strstr(e.msg, "Q9_K"));
    /* layer order is numeric, non-layer tensors first */
    CHECK(cdx_quant_tensor_cmp("blk.2.attn_q.weight", "blk.10.attn_q.weight") < 0);
    CHECK(cdx_quant_tensor_cmp("output.weight", "blk.0.attn_q.weight") < 0);
    CHECK(cdx_quant_tensor_cmp("blk.3.attn_k.weight", "blk.3.attn_q.weight") < 0);
}

/* tests/quant/data/quant_mix_golden.txt: the types llama.cpp's own llama_quant_compute_types
 * picks for mock models (see tools/quant_mix_golden.cpp, which wrote it). */
static void matches_llama_cpp_on_mock_models(void)
{
    FILE *f = fopen("tests/quant/data/quant_mix_golden.txt", "r");
    REQUIRE(f);
    static char line[1 << 16];
    static model gm;
    static char *names[MAXT];
    cdx_quant_model_info info = { 0 };
    char mname[64] = "";
    int n_models = 0, n_lines = 0, n_checked = 0, n_bad = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] == 'M') {
            unsigned nl, nh, nkv, ne;
            char arch[32];
            REQUIRE(sscanf(line, "M %63s %u %u %u %u %31s", mname, &nl, &nh, &nkv, &ne, arch) == 6);
            info = (cdx_quant_model_info){ .n_layer = (int)nl, .n_gqa = (int)(nh / nkv), .n_expert = (int)ne,
                                           .arch_falcon = !strcmp(arch, "falcon"),
                                           .is_70b = !strcmp(arch, "llama") && nl == 80 && nh != nkv };
            gm.n = 0;
            n_models++;
        } else if (line[0] == 'T') {
            REQUIRE(gm.n < MAXT);
            long long a, b, c;
            REQUIRE(sscanf(line, "T %63s %lld %lld %lld", gm.names[gm.n], &a, &b, &c) == 4);
            gm.ne[gm.n][0] = a, gm.ne[gm.n][1] = b, gm.ne[gm.n][2] = c, gm.ne[gm.n][3] = 1;
            names[gm.n] = gm.names[gm.n];
            gm.n++;
        } else if (line[0] == 'F') {
            char *save = NULL, *tok = strtok_r(line + 2, " ", &save);
            const cdx_ftype_info *ft = cdx_ftype_by_id(atoi(tok));
            CHECKF(ft != NULL, "ftype %s unknown", tok);
            if (!ft)
                continue;
            cdx_quant_mix mix;
            cdx_err e = {0};
            REQUIRE(cdx_quant_mix_init(&mix, ft->name, &info, (const char *const *)names, (size_t)gm.n, &e) == 0);
            /* the file lists tensors in llama.cpp's order already; check ours agrees */
            for (int i = 0; i + 1 < gm.n; i++)
                CHECK(cdx_quant_tensor_cmp(gm.names[i], gm.names[i + 1]) < 0);
            for (int i = 0; i < gm.n; i++) {
                tok = strtok_r(NULL, " ", &save);
                REQUIRE(tok);
                cdx_type got = cdx_quant_mix_choose(&mix, gm.names[i], gm.ne[i], CDX_TYPE_F32);
                bool ok = !strcmp(tok, "-") ? got == CDX_TYPE_F32 : !strcmp(tok, cdx_type_name(got));
                if (!ok && n_bad++ < 10)
                    CHECKF(ok, "%s %s %s: %s, llama.cpp %s", mname, ft->name, gm.names[i], cdx_type_name(got), tok);
                n_checked++;
            }
            n_lines++;
        }
    }
    fclose(f);
    printf("  %d models, %d file types, %d tensor choices compared, %d differ\n", n_models, n_lines, n_checked, n_bad);
    CHECK(n_models >= 8 && n_lines >= 200 && n_bad == 0);
}

int main(void)
{
    RUN("Q4_K_M on a 32-layer GQA Llama: Q6_K attn_v/ffn_down on use_more_bits layers", q4_k_m_on_a_32_layer_gqa4_llama);
    RUN("tied embeddings take the output head's type", tied_embeddings_get_the_output_type);
    RUN("Q4_0/Q4_1/Q5_0/Q5_1/Q6_K: default type everywhere, Q6_K head", legacy_types_quantize_everything_but_the_head);
    RUN("Q3_K_M, Q5_K_M and Q2_K per-tensor rules", q3_k_m_q5_k_m_q2_k_rules);
    RUN("IQ4_NL and TQ2_0 rules", iq4_nl_and_ternary_rules);
    RUN("rows a block does not divide fall back as tensor_type_fallback", rows_that_do_not_fit_fall_back);
    RUN("file type names and llama.cpp's tensor order", names_and_order);
    RUN("every choice matches llama.cpp's llama_quant_compute_types on 8 mock models", matches_llama_cpp_on_mock_models);
    return t_done("quant_mix");
}
