/* caldrix synth DIR --shape smolvlm-256m: a random-weight Hugging Face checkpoint folder with
 * SmolVLM-256M-Instruct's shapes (Idefics3ForConditionalGeneration: config.json,
 * preprocessor_config.json, processor_config.json, model.safetensors in BF16), for benchmarks
 * of the vision tower and the text model. No tokenizer: prompts are ids. Not a trained model. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* One row per shape. smolvlm-256m is SmolVLM-256M-Instruct (INDEX.md, "idefics3"): vision 768 / 12
 * layers / 12 heads / FFN 3072 / patch 16 / 512 px, scale_factor 4 (64 tokens per tile); text 576 /
 * 30 layers / 9:3 heads / head_dim 64 / FFN 1536 / vocab 49280; images resized to a longest edge of
 * 2048. smolvlm-tiny keeps the real vocabulary and special ids (for tests with SmolLM2's tokenizer)
 * on the fixture's small tower and text model. */
typedef struct {
    const char *name;
    int V_D, V_L, V_H, V_F, V_P, V_S, SCALE, T_E, T_L, T_H, T_KV, T_HD, T_F, T_V, IMAGE_ID, LONGEST;
} vlm_shape;

static const vlm_shape k_vlm[] = {
    { "smolvlm-256m", 768, 12, 12, 3072, 16, 512, 4, 576, 30, 9, 3, 64, 1536, 49280, 49190, 2048 },
    { "smolvlm-tiny", 32, 2, 2, 64, 16, 64, 2, 64, 2, 4, 2, 16, 160, 49280, 49190, 128 },
};

static uint64_t g_state;
static float normal(void)
{
    /* xorshift64* + Box-Muller: a fixed seed gives the same file */
    uint64_t a, b;
    g_state ^= g_state >> 12; g_state ^= g_state << 25; g_state ^= g_state >> 27; a = g_state * 2685821657736338717ull;
    g_state ^= g_state >> 12; g_state ^= g_state << 25; g_state ^= g_state >> 27; b = g_state * 2685821657736338717ull;
    const double u = ((double)(a >> 11) + 0.5) / 9007199254740992.0, v = (double)(b >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(2 * M_PI * v));
}

static uint16_t bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

typedef struct {
    cdx_st_writer *w;
    uint16_t **bufs;
    size_t n_bufs;
    int rc;
    cdx_err err;
} vw;

/* one tensor: N(0, 0.02), or 1.0 (norm weights), or 0 (biases) */
static void add(vw *x, const char *name, int nd, uint64_t d0, uint64_t d1, uint64_t d2, uint64_t d3, int kind)
{
    if (x->rc)
        return;
    const uint64_t shape[4] = { d0, d1, d2, d3 };
    uint64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= shape[i];
    uint16_t *b = malloc(n * sizeof *b);
    uint16_t **g = realloc(x->bufs, (x->n_bufs + 1) * sizeof *g);
    if (!b || !g) {
        free(b);
        x->rc = cdx_err_set(&x->err, CDX_ENOMEM, "out of memory");
        return;
    }
    x->bufs = g;
    x->bufs[x->n_bufs++] = b;
    for (uint64_t i = 0; i < n; i++)
        b[i] = kind == 0 ? bf16(0.02f * normal()) : kind == 1 ? bf16(1.0f) : 0;
    x->rc = cdx_st_writer_add(x->w, name, CDX_TYPE_BF16, (uint32_t)nd, shape, b, &x->err);
}

static int write_text(const char *dir, const char *file, const char *text)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0) {
        if (f)
            fclose(f);
        fprintf(stderr, "caldrix synth: cannot write %s\n", p);
        return 1;
    }
    return fclose(f) ? 1 : 0;
}

int synth_vlm(const char *dir, const char *shape, long seed)
{
    const vlm_shape *sh = NULL;
    for (size_t i = 0; i < sizeof k_vlm / sizeof k_vlm[0]; i++)
        if (!strcmp(k_vlm[i].name, shape))
            sh = &k_vlm[i];
    if (!sh) {
        fprintf(stderr, "caldrix synth: --shape: \"%s\" is not a known shape (caldrix synth --help lists them)\n", shape);
        return 2;
    }
    const int V_D = sh->V_D, V_L = sh->V_L, V_H = sh->V_H, V_F = sh->V_F, V_P = sh->V_P, V_S = sh->V_S,
              SCALE = sh->SCALE, T_E = sh->T_E, T_L = sh->T_L, T_H = sh->T_H, T_KV = sh->T_KV, T_HD = sh->T_HD,
              T_F = sh->T_F, T_V = sh->T_V, IMAGE_ID = sh->IMAGE_ID;
    if (mkdir(dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "caldrix synth: cannot make the folder %s\n", dir);
        return 1;
    }
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Idefics3ForConditionalGeneration\"],\"model_type\":\"idefics3\",\"image_token_id\":%d,"
             "\"scale_factor\":%d,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"vocab_size\":%d,"
             "\"text_config\":{\"architectures\":[\"VLlama3ForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":%d,"
             "\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
             "\"head_dim\":%d,\"max_position_embeddings\":8192,\"rms_norm_eps\":1e-05,\"rope_theta\":100000,"
             "\"vocab_size\":%d,\"torch_dtype\":\"bfloat16\"},"
             "\"vision_config\":{\"hidden_size\":%d,\"intermediate_size\":%d,\"num_hidden_layers\":%d,"
             "\"num_attention_heads\":%d,\"patch_size\":%d,\"image_size\":%d,\"max_image_size\":{\"longest_edge\":%d},"
             "\"model_type\":\"idefics3_vision\"}}\n",
             IMAGE_ID, SCALE, T_V, T_E, T_F, T_L, T_H, T_KV, T_HD, T_V, V_D, V_F, V_L, V_H, V_P, V_S, V_S);
    char pp[1024];
    snprintf(pp, sizeof pp,
             "{\"do_convert_rgb\":true,\"do_image_splitting\":true,\"do_normalize\":true,\"do_pad\":true,\"do_rescale\":true,"
             "\"do_resize\":true,\"image_mean\":[0.5,0.5,0.5],\"image_processor_type\":\"Idefics3ImageProcessor\","
             "\"image_std\":[0.5,0.5,0.5],\"max_image_size\":{\"longest_edge\":%d},\"processor_class\":\"Idefics3Processor\","
             "\"resample\":1,\"rescale_factor\":0.00392156862745098,\"size\":{\"longest_edge\":%d}}\n", V_S, sh->LONGEST);
    char seq[128];
    const int per_side = V_S / V_P / SCALE;
    snprintf(seq, sizeof seq, "{\"image_seq_len\":%d,\"processor_class\":\"Idefics3Processor\"}\n", per_side * per_side);
    if (write_text(dir, "config.json", cfg) || write_text(dir, "preprocessor_config.json", pp) ||
        write_text(dir, "processor_config.json", seq) ||
        write_text(dir, "generation_config.json", "{\"bos_token_id\":1,\"eos_token_id\":49279}\n"))
        return 1;
    vw x = { 0 };
    g_state = 0x9e3779b97f4a7c15ull ^ (uint64_t)seed * 0xd1b54a32d192ed03ull;
    if ((x.rc = cdx_st_writer_new(&x.w, &x.err))) {
        fprintf(stderr, "caldrix synth: %s\n", x.err.msg);
        return 1;
    }
    char n[192];
    const char *v = "model.vision_model.";
    snprintf(n, sizeof n, "%sembeddings.patch_embedding.weight", v); add(&x, n, 4, V_D, 3, V_P, V_P, 0);
    snprintf(n, sizeof n, "%sembeddings.patch_embedding.bias", v); add(&x, n, 1, V_D, 0, 0, 0, 2);
    snprintf(n, sizeof n, "%sembeddings.position_embedding.weight", v);
    add(&x, n, 2, (V_S / V_P) * (V_S / V_P), V_D, 0, 0, 0);
    for (int l = 0; l < V_L; l++) {
        static const char *const lin[] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj" };
        for (int i = 0; i < 4; i++) {
            snprintf(n, sizeof n, "%sencoder.layers.%d.%s.weight", v, l, lin[i]); add(&x, n, 2, V_D, V_D, 0, 0, 0);
            snprintf(n, sizeof n, "%sencoder.layers.%d.%s.bias", v, l, lin[i]); add(&x, n, 1, V_D, 0, 0, 0, 2);
        }
        snprintf(n, sizeof n, "%sencoder.layers.%d.mlp.fc1.weight", v, l); add(&x, n, 2, V_F, V_D, 0, 0, 0);
        snprintf(n, sizeof n, "%sencoder.layers.%d.mlp.fc1.bias", v, l); add(&x, n, 1, V_F, 0, 0, 0, 2);
        snprintf(n, sizeof n, "%sencoder.layers.%d.mlp.fc2.weight", v, l); add(&x, n, 2, V_D, V_F, 0, 0, 0);
        snprintf(n, sizeof n, "%sencoder.layers.%d.mlp.fc2.bias", v, l); add(&x, n, 1, V_D, 0, 0, 0, 2);
        for (int k = 1; k <= 2; k++) {
            snprintf(n, sizeof n, "%sencoder.layers.%d.layer_norm%d.weight", v, l, k); add(&x, n, 1, V_D, 0, 0, 0, 1);
            snprintf(n, sizeof n, "%sencoder.layers.%d.layer_norm%d.bias", v, l, k); add(&x, n, 1, V_D, 0, 0, 0, 2);
        }
    }
    snprintf(n, sizeof n, "%spost_layernorm.weight", v); add(&x, n, 1, V_D, 0, 0, 0, 1);
    snprintf(n, sizeof n, "%spost_layernorm.bias", v); add(&x, n, 1, V_D, 0, 0, 0, 2);
    add(&x, "model.connector.modality_projection.proj.weight", 2, T_E, V_D * SCALE * SCALE, 0, 0, 0);
    const char *t = "model.text_model.";
    snprintf(n, sizeof n, "%sembed_tokens.weight", t); add(&x, n, 2, T_V, T_E, 0, 0, 0);
    snprintf(n, sizeof n, "%snorm.weight", t); add(&x, n, 1, T_E, 0, 0, 0, 1);
    add(&x, "lm_head.weight", 2, T_V, T_E, 0, 0, 0);
    for (int l = 0; l < T_L; l++) {
        struct { const char *s; uint64_t r, c; } k_t[] = {
            { "self_attn.q_proj", T_H * T_HD, T_E }, { "self_attn.k_proj", T_KV * T_HD, T_E },
            { "self_attn.v_proj", T_KV * T_HD, T_E }, { "self_attn.o_proj", T_E, T_H * T_HD },
            { "mlp.gate_proj", T_F, T_E }, { "mlp.up_proj", T_F, T_E }, { "mlp.down_proj", T_E, T_F },
        };
        for (size_t i = 0; i < sizeof k_t / sizeof k_t[0]; i++) {
            snprintf(n, sizeof n, "%slayers.%d.%s.weight", t, l, k_t[i].s);
            add(&x, n, 2, k_t[i].r, k_t[i].c, 0, 0, 0);
        }
        snprintf(n, sizeof n, "%slayers.%d.input_layernorm.weight", t, l); add(&x, n, 1, T_E, 0, 0, 0, 1);
        snprintf(n, sizeof n, "%slayers.%d.post_attention_layernorm.weight", t, l); add(&x, n, 1, T_E, 0, 0, 0, 1);
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (!x.rc)
        x.rc = cdx_st_writer_write(x.w, p, &x.err);
    if (x.rc)
        fprintf(stderr, "caldrix synth: %s\n", x.err.msg);
    else
        fprintf(stderr, "caldrix synth: wrote %s (%s shapes, BF16, random weights)\n", dir, sh->name);
    cdx_st_writer_free(x.w);
    for (size_t i = 0; i < x.n_bufs; i++)
        free(x.bufs[i]);
    free(x.bufs);
    return x.rc ? 1 : 0;
}
