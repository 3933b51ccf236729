/* caldrix synth: writes a random-weight GGUF with a real model's shapes, for benchmarks.
 *
 *   caldrix synth bench/out/llama1b-q4km.gguf --shape llama-3.2-1b --type Q4_K_M
 *
 * Weights are N(0, 0.02) (norms 1.0), drawn from a seeded generator so a seed always gives the
 * same file whatever the thread count. The vocabulary is a minimal SentencePiece-style one
 * (<unk>, <s>, </s>, the 256 byte tokens, then filler pieces) so llama.cpp loads the file too.
 * --type is a llama.cpp file type: each tensor's type is chosen by the quant layer's copy of
 * llama.cpp's rules (cdx_quant_mix), and quantized with its reference quantizers.
 * --safetensors OUT writes a Hugging Face checkpoint folder instead (config.json + model.safetensors
 * with transformers' names, tied embeddings, no tokenizer) for the float types F32, F16 and BF16:
 * every tensor in that type, norms too, as a checkpoint saved in that torch_dtype is.
 */
#include "cli.h"
#include "caldrix/pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <sys/stat.h>

/* ---- shapes: one row per model ---- */

typedef struct {
    const char *name;
    const char *arch;        /* GGUF general.architecture */
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    double rope_theta;
    float rms_eps;
    const char *about;
    /* a mixture of experts (llama.cpp's layout: every layer sparse, experts stacked per layer) */
    int64_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp; /* n_ff_shexp: qwen2moe's shared expert */
    bool untied;             /* an output head of its own (output.weight), as Qwen3-30B-A3B has */
    float head_sd;           /* the head's weights' deviation (0: 0.02 as the rest): wider logit gaps for tests */
    /* hybrid (GGUF qwen35): every full_every-th layer full attention (gated), the others Gated
     * DeltaNet; 0 for the dense shapes */
    int64_t full_every, ssm_nk, ssm_nv, ssm_dk, ssm_dv, ssm_conv, n_rot;
} synth_shape;

static const synth_shape k_shapes[] = {
    { "llama-3.2-1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0, 1e-5f,
      "Llama-3.2-1B: 1.24 B parameters, tied embeddings", 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1000000.0, 1e-6f,
      "Qwen3-0.6B: 0.6 B parameters, QK-norm, tied embeddings", 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "tiny", "llama", 256, 2, 4, 2, 64, 512, 512, 2048, 10000.0, 1e-5f,
      "a 2-layer llama for tests (rows are multiples of 256, so every type fits)", 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "tiny-qwen3", "qwen3", 256, 2, 4, 2, 32, 512, 512, 2048, 1000000.0, 1e-6f,
      "a 2-layer qwen3 for tests (head_dim differs from n_embd / n_head)", 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "tiny-qwen3-vocab", "qwen3", 256, 2, 4, 2, 32, 512, 151936, 2048, 1000000.0, 1e-6f,
      "tiny-qwen3 with Qwen3's vocabulary size (151936): put Qwen3's tokenizer beside it", 0, 0, 0, 0, false, 0, 0, 0, 0,
      0, 0, 0, 0 },
    { "tiny-llama3-vocab", "llama", 256, 2, 4, 2, 64, 512, 128256, 2048, 500000.0, 1e-5f,
      "tiny with Llama 3's vocabulary size (128256): put Llama 3's tokenizer beside it", 0, 0, 0, 0, false, 0, 0, 0, 0,
      0, 0, 0, 0 },
    { "tiny-qwen3-64", "qwen3", 256, 2, 4, 2, 64, 512, 512, 2048, 1000000.0, 1e-6f,
      "a 2-layer qwen3 for tests, head_dim 64 (the llama.cpp quant goldens)", 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "tiny-qwen3moe", "qwen3moe", 256, 2, 4, 2, 64, 512, 512, 2048, 1000000.0, 1e-6f,
      "a 2-layer qwen3moe for tests: 8 experts, top-2, expert FFN 256, untied head", 8, 2, 256, 0, true, 0.2f,
      0, 0, 0, 0, 0, 0, 0 },
    { "tiny-qwen2moe", "qwen2moe", 256, 2, 4, 2, 64, 512, 512, 2048, 1000000.0, 1e-6f,
      "a 2-layer qwen2moe for tests: 8 experts, top-2, expert FFN 256, shared expert 512, untied head", 8, 2, 256, 512,
      true, 0.2f, 0, 0, 0, 0, 0, 0, 0 },
    { "qwen3-30b-a3b-4l", "qwen3moe", 2048, 4, 32, 4, 128, 6144, 151936, 40960, 1000000.0, 1e-6f,
      "Qwen3-30B-A3B's layers (128 experts, top-8, expert FFN 768), 4 of its 48", 128, 8, 768, 0, true, 0,
      0, 0, 0, 0, 0, 0, 0 },
    { "qwen3.5-0.8b", "qwen35", 1024, 24, 8, 2, 256, 3584, 248320, 262144, 10000000.0, 1e-6f,
      "Qwen3.5-0.8B: 18 Gated DeltaNet + 6 gated attention layers, tied embeddings", 0, 0, 0, 0, false, 0,
      4, 16, 16, 128, 128, 4, 64 },
    { "tiny-qwen3.5", "qwen35", 256, 4, 4, 2, 64, 512, 512, 2048, 10000000.0, 1e-6f,
      "a 4-layer Qwen3.5 for tests (3 DeltaNet + 1 attention, 2 key / 4 value heads)", 0, 0, 0, 0, false, 0,
      4, 2, 4, 64, 64, 4, 16 },
};

static bool is_float_type(int t) { return t == CDX_TYPE_F32 || t == CDX_TYPE_F16 || t == CDX_TYPE_BF16; }

/* ---- random numbers: splitmix64 seeds a xoshiro256+ per chunk of rows ---- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct { uint64_t s[4]; } rng;

static void rng_seed(rng *r, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ull) ^ (c * 0xd1b54a32d192ed03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s, res = s[0] + s[3], t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return res;
}

/* n normal values with standard deviation sd (Box-Muller, two values per draw). */
static void fill_normal(rng *r, float *out, int64_t n, float sd)
{
    for (int64_t i = 0; i < n; i += 2) {
        uint64_t b = rng_next(r);
        float u1 = ((float)(uint32_t)(b >> 40) + 1.0f) * (1.0f / 16777217.0f); /* (0, 1] */
        float u2 = (float)(uint32_t)(b & 0xffffff) * (1.0f / 16777216.0f);
        float rad = sd * sqrtf(-2.0f * logf(u1)), s, c;
        sincosf(6.2831853f * u2, &s, &c);
        out[i] = rad * c;
        if (i + 1 < n)
            out[i + 1] = rad * s;
    }
}

/* ---- one tensor, filled by the pool in chunks of rows ---- */

#define CHUNK_ROWS 32

typedef struct {
    char name[64];
    char hf[96];            /* the transformers name ("": none) */
    cdx_tensor_kind kind;
    int n_dims;             /* as the file writes it: 1 (a vector), 2, or 3 (stacked experts) */
    int type;
    int64_t rows, cols;     /* rows == 1 for vectors; a stack of n_mat experts: n_mat × its rows */
    int64_t n_mat;          /* 1, or the experts of a stacked tensor (GGUF ne[2]) */
    size_t row_bytes;
    void *data;
} synth_tensor;

typedef struct {
    synth_tensor *t;
    uint64_t seed, index;
    float sd;
    int64_t n_chunks;
    int64_t next;           /* atomic chunk counter */
    float **scratch;        /* [nth][CHUNK_ROWS * cols] */
} fill_job;

static void fill_work(void *arg, int ith, int nth)
{
    fill_job *j = arg;
    synth_tensor *t = j->t;
    float *buf = j->scratch[ith];
    const cdx_type_traits *tr = cdx_type_get((uint32_t)t->type);
    for (;;) {
        int64_t c = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (c >= j->n_chunks)
            break;
        int64_t r0 = c * CHUNK_ROWS, nr = t->rows - r0 < CHUNK_ROWS ? t->rows - r0 : CHUNK_ROWS;
        int64_t n = nr * t->cols;
        uint8_t *dst = (uint8_t *)t->data + (size_t)r0 * t->row_bytes;
        if (t->kind != CDX_TENSOR_WEIGHT) { /* norms 1; ssm_a = -exp(A_log) with A_log 0 */
            for (int64_t i = 0; i < n; i++)
                buf[i] = t->kind == CDX_TENSOR_NORM ? 1.0f : -1.0f;
        } else {
            rng r;
            rng_seed(&r, j->seed, j->index, (uint64_t)c);
            fill_normal(&r, buf, n, j->sd);
        }
        switch (t->type) {
        case CDX_TYPE_F32:
            memcpy(dst, buf, (size_t)n * sizeof(float));
            break;
        case CDX_TYPE_F16:
            for (int64_t i = 0; i < n; i++)
                ((uint16_t *)dst)[i] = cdx_f32_to_f16(buf[i]);
            break;
        case CDX_TYPE_BF16:
            for (int64_t i = 0; i < n; i++)
                ((uint16_t *)dst)[i] = cdx_f32_to_bf16(buf[i]);
            break;
        default:
            for (int64_t i = 0; i < nr; i++)
                tr->from_f32(buf + i * t->cols, dst + (size_t)i * t->row_bytes, t->cols);
            break;
        }
    }
}

/* ---- the tensors: the loader's role table (cdx_model_tensor_specs) for a shape ---- */

typedef struct {
    synth_tensor *ts;
    size_t n, cap;
    bool oom;
} synth_list;

static void add_spec(void *c, const cdx_tensor_spec *t)
{
    synth_list *l = c;
    if (!t->required || l->oom) /* synth writes what the model needs: no rope_freqs, no head when tied */
        return;
    synth_tensor *v = cdx_array_grow(l->ts, &l->cap, l->n, sizeof *v);
    if (!v) {
        l->oom = true;
        return;
    }
    l->ts = v;
    synth_tensor *x = &l->ts[l->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", t->name);
    snprintf(x->hf, sizeof x->hf, "%s", t->hf_name ? t->hf_name : "");
    x->kind = t->kind;
    x->n_dims = t->n_dims;
    x->rows = t->rows * t->n_mat;
    x->cols = t->cols;
    x->n_mat = t->n_mat;
}

/* The tensors of shape sh as architecture arch binds them, or NULL (out of memory). */
static synth_tensor *plan_tensors(const synth_shape *sh, cdx_arch arch, size_t *n)
{
    const size_t L = (size_t)sh->n_layer;
    cdx_hparams hp = { .arch = arch, .n_vocab = sh->n_vocab, .n_embd = sh->n_embd, .n_layer = sh->n_layer,
                       .n_head = sh->n_head, .n_head_kv = sh->n_head_kv, .head_dim = sh->head_dim, .n_ff = sh->n_ff,
                       .n_rot = sh->full_every ? sh->n_rot : sh->head_dim, .n_expert = sh->n_expert,
                       .n_expert_used = sh->n_expert_used, .n_ff_expert = sh->n_ff_exp, .n_ff_shared = sh->n_ff_shexp,
                       .ssm_n_k_head = sh->ssm_nk, .ssm_n_v_head = sh->ssm_nv, .ssm_d_k = sh->ssm_dk,
                       .ssm_d_v = sh->ssm_dv, .ssm_conv_k = sh->ssm_conv, .attn_gate = sh->full_every > 0 };
    /* llama.cpp's layout of a mixture: every layer sparse; a hybrid: every full_every-th layer attention */
    uint8_t *sparse = calloc(L, 1), *linear = calloc(L, 1);
    synth_list l = { 0 };
    if (sparse && linear) {
        for (size_t i = 0; i < L; i++) {
            sparse[i] = sh->n_expert > 0;
            linear[i] = sh->full_every && (i + 1) % (size_t)sh->full_every;
        }
        cdx_tensor_plan plan = { .arch = arch, .gguf = true, .n_layer = sh->n_layer, .n_expert = sh->n_expert,
                                 .sparse = sparse, .linear = linear, .qkv_bias = -1, .untied = sh->untied };
        cdx_model_tensor_specs(&plan, &hp, add_spec, &l);
    }
    free(sparse);
    free(linear);
    if (!sparse || !linear || l.oom || !l.n) {
        free(l.ts);
        return NULL;
    }
    *n = l.n;
    return l.ts;
}

/* ---- the vocabulary: SentencePiece-style, as llama.cpp's "llama" tokenizer model reads it ---- */

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 }; /* llama_token_type (llama.h) */

static int set_vocab(cdx_gguf_writer *w, int64_t n_vocab, char **store)
{
    size_t n = (size_t)n_vocab;
    const char **toks = calloc(n, sizeof *toks);
    float *scores = calloc(n, sizeof *scores);
    int32_t *types = calloc(n, sizeof *types);
    char *text = malloc(n * 16); /* every piece is < 16 bytes */
    int rc = CDX_ENOMEM;
    if (!toks || !scores || !types || !text)
        goto out;
    for (size_t i = 0; i < n; i++) {
        char *p = text + i * 16;
        if (i == 0)
            strcpy(p, "<unk>"), types[i] = TT_UNKNOWN;
        else if (i == 1)
            strcpy(p, "<s>"), types[i] = TT_CONTROL;
        else if (i == 2)
            strcpy(p, "</s>"), types[i] = TT_CONTROL;
        else if (i < 3 + 256)
            snprintf(p, 16, "<0x%02X>", (unsigned)(i - 3)), types[i] = TT_BYTE;
        else {
            /* "▁" then the piece's rank in base 26: unique, printable, never a byte or special */
            size_t k = i - 259;
            char digits[12];
            int nd = 0;
            do {
                digits[nd++] = (char)('a' + k % 26);
                k /= 26;
            } while (k && nd < 11);
            memcpy(p, "\xe2\x96\x81", 3);
            for (int d = 0; d < nd; d++)
                p[3 + d] = digits[nd - 1 - d];
            p[3 + nd] = 0;
            types[i] = TT_NORMAL;
            scores[i] = -(float)(i - 259);
        }
        toks[i] = p;
    }
    rc = cdx_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (!rc)
        rc = cdx_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, n);
    if (!rc)
        rc = cdx_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CDX_GGUF_F32, scores, n);
    if (!rc)
        rc = cdx_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CDX_GGUF_I32, types, n);
    if (!rc)
        rc = cdx_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (!rc)
        rc = cdx_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!rc)
        rc = cdx_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!rc)
        rc = cdx_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (!rc)
        rc = cdx_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
out:
    free(toks);
    free(scores);
    free(types);
    *store = text; /* the writer copies strings, but keep them until it is done */
    return rc;
}

/* ---- a Hugging Face checkpoint (--safetensors) ---- */

static int write_checkpoint(const char *dir, const synth_shape *sh, const synth_tensor *ts, size_t n_t, int type,
                            cdx_err *err)
{
    char path[4096];
    if (mkdir(dir, 0755) && errno != EEXIST)
        return cdx_err_set(err, CDX_EIO, "%s: cannot make the folder (%s)", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return cdx_err_set(err, CDX_EIO, "%s: cannot write it", path);
    const bool q3 = !strcmp(sh->arch, "qwen3");
    fprintf(f, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %lld, "
               "\"intermediate_size\": %lld, \"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, "
               "\"num_key_value_heads\": %lld, \"head_dim\": %lld, \"vocab_size\": %lld, "
               "\"max_position_embeddings\": %lld, \"rms_norm_eps\": %g, \"rope_theta\": %.1f, "
               "\"hidden_act\": \"silu\", \"tie_word_embeddings\": true, \"attention_bias\": false, "
               "\"bos_token_id\": 1, \"eos_token_id\": 2, \"torch_dtype\": \"%s\"}\n",
            q3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM", q3 ? "qwen3" : "llama", (long long)sh->n_embd,
            (long long)sh->n_ff, (long long)sh->n_layer, (long long)sh->n_head, (long long)sh->n_head_kv,
            (long long)sh->head_dim, (long long)sh->n_vocab, (long long)sh->n_ctx, (double)sh->rms_eps, sh->rope_theta,
            type == CDX_TYPE_BF16 ? "bfloat16" : type == CDX_TYPE_F16 ? "float16" : "float32");
    if (fclose(f))
        return cdx_err_set(err, CDX_EIO, "%s: cannot write it", path);
    cdx_st_writer *w = NULL;
    int rc = cdx_st_writer_new(&w, err);
    for (size_t i = 0; i < n_t && !rc; i++) {
        if (!ts[i].hf[0]) {
            rc = cdx_err_set(err, CDX_EINVAL, "tensor \"%s\" has no transformers name", ts[i].name);
            break;
        }
        const uint64_t shape[2] = { (uint64_t)ts[i].rows, (uint64_t)ts[i].cols };
        rc = ts[i].n_dims == 1 ? cdx_st_writer_add(w, ts[i].hf, (uint32_t)ts[i].type, 1, shape + 1, ts[i].data, err)
                               : cdx_st_writer_add(w, ts[i].hf, (uint32_t)ts[i].type, 2, shape, ts[i].data, err);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!rc)
        rc = cdx_st_writer_write(w, path, err);
    cdx_st_writer_free(w);
    return rc;
}

/* ---- the command ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: caldrix synth OUT.gguf --shape SHAPE --type TYPE [--seed S] [--threads N] [--layers N]\n"
               "       caldrix synth --safetensors DIR --shape SHAPE --type F32|F16|BF16   (a checkpoint folder)\n"
               "       caldrix synth --list --shape SHAPE --type TYPE   (the tensors it would write)\n\n"
               "Writes a random-weight model (weights N(0, 0.02), norms 1.0) with a real model's shapes\n"
               "and a minimal SentencePiece-style vocabulary, for benchmarks. Not a trained model.\n"
               "--layers N: the shape with N layers instead of its own (quick benchmarks).\n\nshapes:\n");
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        fprintf(f, "  %-13s %s\n", k_shapes[i].name, k_shapes[i].about);
    fprintf(f, "  %-13s %s\n", "smolvlm-256m", "SmolVLM-256M-Instruct (Idefics3): OUT is a checkpoint folder, BF16, no --type");
    fprintf(f, "  %-13s %s\n", "smolvlm-tiny", "SmolVLM's vocabulary on a tiny tower and text model (tests), a folder");
    fprintf(f, "\ntypes (llama.cpp's file types; each tensor's type is chosen as llama-quantize does):\n ");
    for (int id = 0; id < 64; id++) {
        const cdx_ftype_info *fi = cdx_ftype_by_id(id);
        const cdx_type_traits *tr = fi ? cdx_type_get(fi->default_type) : NULL;
        if (tr && (is_float_type((int)fi->default_type) || tr->from_f32))
            fprintf(f, " %s", fi->name);
    }
    fprintf(f, "\n  (norms stay F32; a tied embedding is also the output head and gets the head's type)\n");
    cli_print_engine_ranges(f, (const cdx_engine_opt_id[]){ CDX_OPT_THREADS }, 1);
}

int cmd_synth(int argc, char **argv)
{
    const char *out = NULL, *shape_name = NULL, *type_name = NULL, *st_dir = NULL;
    long seed = 1, threads = 0, layers = 0;
    bool list = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        bool has = i + 1 < argc;
        if (!strcmp(a, "--list"))
            list = true;
        else if (!strcmp(a, "--safetensors") && has)
            out = st_dir = argv[++i];
        else if (!strcmp(a, "--shape") && has)
            shape_name = argv[++i];
        else if (!strcmp(a, "--type") && has)
            type_name = argv[++i];
        else if (!strcmp(a, "--layers") && has) {
            if (cli_parse_int("--layers", argv[++i], 1, 4096, &layers))
                return 2;
        }
        else if (!strcmp(a, "--seed") && has) {
            if (cli_parse_int("--seed", argv[++i], 0, 0x7fffffffL, &seed))
                return 2;
        } else if ((!strcmp(a, "--threads") || !strcmp(a, "-t")) && has) {
            if (cli_parse_int(a, argv[++i], 1, cdx_threads_max(), &threads))
                return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "caldrix synth: unknown option or missing value: %s\n", a);
            usage(stderr);
            return 2;
        } else if (!out)
            out = a;
        else {
            fprintf(stderr, "caldrix synth: unexpected argument \"%s\"\n", a);
            return 2;
        }
    }
    if (out && shape_name && !strncmp(shape_name, "smolvlm-", 8)) /* a checkpoint folder (cmd_synth_vlm.c) */
        return synth_vlm(out, shape_name, seed);
    if ((!out && !list) || !shape_name || !type_name) {
        fprintf(stderr, "caldrix synth: OUT.gguf, --shape and --type are required\n");
        usage(stderr);
        return 2;
    }
    const synth_shape *sh = NULL;
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        if (!strcmp(k_shapes[i].name, shape_name))
            sh = &k_shapes[i];
    if (!sh) {
        fprintf(stderr, "caldrix synth: --shape: \"%s\" is not a known shape (caldrix synth --help lists them)\n",
                shape_name);
        return 2;
    }
    synth_shape sh_layers;
    if (layers) { /* the same shape with fewer (or more) layers: quick benchmarks */
        if (sh->full_every && layers % sh->full_every) {
            fprintf(stderr, "caldrix synth: --layers %ld: %s needs a multiple of %lld\n", layers, sh->name,
                    (long long)sh->full_every);
            return 2;
        }
        sh_layers = *sh;
        sh_layers.n_layer = layers;
        sh = &sh_layers;
    }
    const cdx_ftype_info *fi = cdx_ftype_find(type_name);
    if (!fi) {
        fprintf(stderr, "caldrix synth: --type: \"%s\" is not a llama.cpp file type (caldrix synth --help lists them)\n",
                type_name);
        return 2;
    }
    /* the tensor list: the loader's role table for this architecture and these shapes, in the order
     * llama.cpp's converter writes them (cdx_model_tensor_specs) */
    cdx_arch arch;
    if (!cdx_model_arch_of(sh->arch, true, sh->n_expert > 0, &arch)) {
        fprintf(stderr, "caldrix synth: internal error: shape %s names architecture %s, which caldrix does not map\n",
                sh->name, sh->arch);
        return 1;
    }
    if (st_dir && (sh->n_expert || sh->full_every)) {
        fprintf(stderr, "caldrix synth: --safetensors writes the dense Llama and Qwen3 shapes, not %s\n", sh->name);
        return 2;
    }
    size_t n_t = 0;
    synth_tensor *ts = plan_tensors(sh, arch, &n_t);
    if (!ts) {
        fprintf(stderr, "caldrix synth: out of memory\n");
        return 1;
    }

    /* each tensor's type, by llama.cpp's rules, visited in llama.cpp's order */
    cdx_err err = {0};
    const char **names = calloc(n_t, sizeof *names);
    size_t *order = calloc(n_t, sizeof *order);
    cdx_quant_mix mix;
    cdx_quant_model_info info = { .n_layer = (int)sh->n_layer, .n_gqa = (int)(sh->n_head / sh->n_head_kv),
                                  .n_expert = (int)sh->n_expert };
    if (!names || !order) {
        fprintf(stderr, "caldrix synth: out of memory\n");
        free(names), free(order), free(ts);
        return 1;
    }
    for (size_t i = 0; i < n_t; i++)
        names[i] = ts[i].name, order[i] = i;
    for (size_t i = 1; i < n_t; i++) /* insertion sort: a few hundred names */
        for (size_t j = i; j > 0 && cdx_quant_tensor_cmp(names[order[j - 1]], names[order[j]]) > 0; j--) {
            size_t x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
    int mrc = cdx_quant_mix_init(&mix, fi->name, &info, names, n_t, &err);
    if (st_dir && !is_float_type((int)fi->default_type)) {
        fprintf(stderr, "caldrix synth: --safetensors writes F32, F16 or BF16 checkpoints, not %s\n", type_name);
        free(names), free(order), free(ts);
        return 2;
    }
    for (size_t i = 0; i < n_t && !mrc; i++) {
        synth_tensor *t = &ts[order[i]];
        int64_t ne[4] = { t->cols, t->rows / t->n_mat, t->n_mat, 1 };
        t->type = st_dir ? (int)fi->default_type
                  : t->n_dims == 1 || t->kind == CDX_TENSOR_NORM ? CDX_TYPE_F32
                  : (int)cdx_quant_mix_choose(&mix, t->name, ne, CDX_TYPE_F32);
        if (!st_dir && (t->rows == 1 || strstr(t->name, "ssm_conv1d"))) /* vectors and the conv kernel stay F32, as llama.cpp keeps them */
            t->type = CDX_TYPE_F32;
        const cdx_type_traits *tr = cdx_type_get((uint32_t)t->type);
        if (!tr || (!is_float_type(t->type) && !tr->from_f32)) {
            fprintf(stderr, "caldrix synth: --type %s: tensor \"%s\" would be %s, which needs an importance matrix\n",
                    type_name, t->name, cdx_type_name((uint32_t)t->type));
            free(names), free(order), free(ts);
            return 2;
        }
    }
    free(names);
    free(order);
    if (mrc) {
        fprintf(stderr, "caldrix synth: %s\n", err.msg);
        free(ts);
        return 1;
    }

    if (list) {
        /* the plan only: one line per tensor, "name type cols rows bytes" (GGUF order of dims) */
        size_t sum = 0;
        for (size_t i = 0; i < n_t; i++) {
            size_t rb = 0;
            if (cdx_type_row_bytes((uint32_t)ts[i].type, (uint64_t)ts[i].cols, &rb, &err) < 0) {
                fprintf(stderr, "caldrix synth: tensor \"%s\": %s\n", ts[i].name, err.msg);
                free(ts);
                return 1;
            }
            printf("%s %s %lld %lld %zu\n", ts[i].name, cdx_type_name((uint32_t)ts[i].type), (long long)ts[i].cols,
                   (long long)ts[i].rows, rb * (size_t)ts[i].rows);
            sum += rb * (size_t)ts[i].rows;
        }
        printf("total %zu\n", sum);
        free(ts);
        return 0;
    }
    cdx_gguf_writer *w = NULL;
    cdx_pool *pool = NULL;
    float **scratch = NULL;
    char *vocab_text = NULL;
    int rc = 1, nth = 0;
    size_t total = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    for (size_t i = 0; i < n_t; i++) {
        synth_tensor *t = &ts[i];
        size_t bytes;
        if (cdx_type_row_bytes((uint32_t)t->type, (uint64_t)t->cols, &t->row_bytes, &err) < 0) {
            fprintf(stderr, "caldrix synth: %s: tensor \"%s\": %s\n", out, t->name, err.msg);
            goto done;
        }
        if (!cdx_mul_size(t->row_bytes, (size_t)t->rows, &bytes) || !cdx_add_size(total, bytes, &total) ||
            !(t->data = malloc(bytes))) {
            fprintf(stderr, "caldrix synth: %s: out of memory for tensor \"%s\" (%zu bytes)\n", out, t->name, bytes);
            goto done;
        }
    }
    if (cdx_pool_create((int)threads, &pool, &err) < 0) {
        fprintf(stderr, "caldrix synth: %s\n", err.msg);
        goto done;
    }
    nth = cdx_pool_size(pool);
    int64_t max_cols = 1;
    for (size_t i = 0; i < n_t; i++)
        max_cols = ts[i].cols > max_cols ? ts[i].cols : max_cols;
    scratch = calloc((size_t)nth, sizeof *scratch);
    for (int i = 0; scratch && i < nth; i++)
        scratch[i] = malloc((size_t)CHUNK_ROWS * (size_t)max_cols * sizeof(float));
    for (int i = 0; i < nth; i++)
        if (!scratch || !scratch[i]) {
            fprintf(stderr, "caldrix synth: out of memory\n");
            goto done;
        }
    for (size_t i = 0; i < n_t; i++) {
        fill_job j = { .t = &ts[i], .seed = (uint64_t)seed, .index = i, .sd = !strcmp(ts[i].name, "output.weight") && sh->head_sd > 0 ? sh->head_sd : 0.02f,
                       .n_chunks = (ts[i].rows + CHUNK_ROWS - 1) / CHUNK_ROWS, .scratch = scratch };
        cdx_pool_run(pool, fill_work, &j);
    }

    if (st_dir) {
        if (write_checkpoint(st_dir, sh, ts, n_t, (int)fi->default_type, &err) < 0) {
            fprintf(stderr, "caldrix synth: %s: %s\n", st_dir, err.msg);
            goto done;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        char tb[32];
        cdx_fmt_bytes((uint64_t)total, tb, sizeof tb);
        fprintf(stderr, "caldrix synth: wrote %s/: %s %s checkpoint, %zu tensors, %s of weights in %.1f s\n",
                st_dir, sh->name, type_name, n_t, tb,
                (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
        rc = 0;
        goto done;
    }
    if (cdx_gguf_writer_new(&w, &err) < 0) {
        fprintf(stderr, "caldrix synth: %s\n", err.msg);
        goto done;
    }
    char gname[160];
    const char *a = sh->arch;
    snprintf(gname, sizeof gname, "caldrix synth %s %s (random weights)", sh->name, type_name);
    int wrc = cdx_gguf_writer_set_str(w, "general.architecture", a);
    wrc = wrc ? wrc : cdx_gguf_writer_set_str(w, "general.name", gname);
    wrc = wrc ? wrc : cdx_gguf_writer_set_u32(w, "general.file_type", (uint32_t)fi->llama_ftype);
    wrc = wrc ? wrc : cdx_gguf_writer_set_u32(w, "general.quantization_version", 2);
    /* the GGUF keys by the one key table (caldrix/format.h) */
    static const struct { cdx_gguf_key key; size_t off; } u32keys[] = {
        { CDX_GK_CONTEXT_LENGTH, offsetof(synth_shape, n_ctx) },
        { CDX_GK_EMBEDDING_LENGTH, offsetof(synth_shape, n_embd) },
        { CDX_GK_BLOCK_COUNT, offsetof(synth_shape, n_layer) },
        { CDX_GK_FEED_FORWARD_LENGTH, offsetof(synth_shape, n_ff) },
        { CDX_GK_HEAD_COUNT, offsetof(synth_shape, n_head) },
        { CDX_GK_HEAD_COUNT_KV, offsetof(synth_shape, n_head_kv) },
        { CDX_GK_KEY_LENGTH, offsetof(synth_shape, head_dim) },
        { CDX_GK_VALUE_LENGTH, offsetof(synth_shape, head_dim) },
        { CDX_GK_ROPE_DIM_COUNT, offsetof(synth_shape, head_dim) },
        { CDX_GK_VOCAB_SIZE, offsetof(synth_shape, n_vocab) },
    };
    static const struct { cdx_gguf_key key; size_t off; } hykeys[] = {
        { CDX_GK_SSM_CONV_KERNEL, offsetof(synth_shape, ssm_conv) }, { CDX_GK_SSM_STATE_SIZE, offsetof(synth_shape, ssm_dk) },
        { CDX_GK_SSM_GROUP_COUNT, offsetof(synth_shape, ssm_nk) }, { CDX_GK_SSM_TIME_STEP_RANK, offsetof(synth_shape, ssm_nv) },
        { CDX_GK_FULL_ATTENTION_INTERVAL, offsetof(synth_shape, full_every) },
        { CDX_GK_ROPE_DIM_COUNT, offsetof(synth_shape, n_rot) },
    };
    for (size_t i = 0; i < sizeof u32keys / sizeof u32keys[0] && !wrc; i++) {
        if (sh->full_every && u32keys[i].key == CDX_GK_ROPE_DIM_COUNT)
            continue;
        wrc = cdx_gguf_writer_set_arch_u32(w, a, u32keys[i].key,
                                           (uint32_t)*(const int64_t *)((const char *)sh + u32keys[i].off));
    }
    for (size_t i = 0; sh->full_every && i < sizeof hykeys / sizeof hykeys[0] && !wrc; i++) {
        wrc = cdx_gguf_writer_set_arch_u32(w, a, hykeys[i].key,
                                           (uint32_t)*(const int64_t *)((const char *)sh + hykeys[i].off));
    }
    if (sh->full_every && !wrc) {
        const int32_t sec[4] = { (int32_t)(sh->n_rot / 2 - 2 * (sh->n_rot / 6)), (int32_t)(sh->n_rot / 6),
                                 (int32_t)(sh->n_rot / 6), 0 };
        wrc = cdx_gguf_writer_set_arch_u32(w, a, CDX_GK_SSM_INNER_SIZE, (uint32_t)(sh->ssm_nv * sh->ssm_dv));
        wrc = wrc ? wrc : cdx_gguf_writer_set_arch_arr(w, a, CDX_GK_ROPE_DIM_SECTIONS, CDX_GGUF_I32, sec, 4);
    }
    wrc = wrc ? wrc : cdx_gguf_writer_set_arch_f32(w, a, CDX_GK_ROPE_FREQ_BASE, (float)sh->rope_theta);
    wrc = wrc ? wrc : cdx_gguf_writer_set_arch_f32(w, a, CDX_GK_RMS_EPS, sh->rms_eps);
    if (sh->n_expert) {
        const struct { cdx_gguf_key key; int64_t v; } mk[] = {
            { CDX_GK_EXPERT_COUNT, sh->n_expert }, { CDX_GK_EXPERT_USED_COUNT, sh->n_expert_used },
            { CDX_GK_EXPERT_FF_LENGTH, sh->n_ff_exp }, { CDX_GK_EXPERT_SHARED_FF_LENGTH, sh->n_ff_shexp },
        };
        for (size_t i = 0; i < 4 && !wrc; i++)
            if (mk[i].v)
                wrc = cdx_gguf_writer_set_arch_u32(w, a, mk[i].key, (uint32_t)mk[i].v);
    }
    wrc = wrc ? wrc : set_vocab(w, sh->n_vocab, &vocab_text);
    if (wrc) {
        fprintf(stderr, "caldrix synth: %s: cannot build the metadata (%s)\n", out, cdx_err_name(wrc));
        goto done;
    }
    for (size_t i = 0; i < n_t; i++) {
        uint64_t ne[3] = { (uint64_t)ts[i].cols, (uint64_t)(ts[i].rows / ts[i].n_mat), (uint64_t)ts[i].n_mat };
        const uint32_t nd = (uint32_t)ts[i].n_dims;
        if (cdx_gguf_writer_add_tensor(w, ts[i].name, (uint32_t)ts[i].type, nd, ne,
                                       ts[i].data, &err) < 0) {
            fprintf(stderr, "caldrix synth: %s: %s\n", out, err.msg);
            goto done;
        }
    }
    if (cdx_gguf_writer_write(w, out, &err) < 0) {
        fprintf(stderr, "caldrix synth: %s\n", err.msg);
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    char tb[32];
    cdx_fmt_bytes((uint64_t)total, tb, sizeof tb);
    fprintf(stderr, "caldrix synth: wrote %s: %s %s, %zu tensors, %s of weights in %.1f s\n", out, sh->name,
            type_name, n_t, tb, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    rc = 0;
done:
    cdx_gguf_writer_free(w);
    free(vocab_text);
    for (int i = 0; scratch && i < nth; i++)
        free(scratch[i]);
    free(scratch);
    cdx_pool_destroy(pool);
    for (size_t i = 0; i < n_t; i++)
        free(ts[i].data);
    free(ts);
    return rc;
}
