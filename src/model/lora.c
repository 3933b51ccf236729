/* LoRA adapters at inference: PEFT directories (adapter_config.json + adapter_model.safetensors) and
 * llama.cpp GGUF adapters (general.type "adapter"), bound to a model's layers and added per row
 * after the base matmul, never merged into the shared weights (so requests of one batch may each
 * use other adapters): y[t] += scale · B (A x[t]), A [r × in], B [out × r] in f32.
 * PEFT v0.20.0 semantics (tuners/lora/layer.py Linear.forward): scaling = lora_alpha / r; the
 * options it cannot honour are refused by name. llama.cpp (src/llama-adapter.cpp): scale = alpha / r
 * of each tensor pair (alpha 0: 1), times the user's scale. */
#include "arch.h"
#include "lora.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LORA_RANK_MAX 1024 /* the per-row scratch of the hook (4 KiB on the stack) */

/* The modules an adapter may target: transformers' name under model.layers.N., llama.cpp's under blk.N. */
static const struct {
    const char *hf;   /* "self_attn.q_proj" */
    const char *gguf; /* "attn_q" */
} k_targets[LORA_N] = {
    [LORA_Q] = { "self_attn.q_proj", "attn_q" },  [LORA_K] = { "self_attn.k_proj", "attn_k" },
    [LORA_V] = { "self_attn.v_proj", "attn_v" },  [LORA_O] = { "self_attn.o_proj", "attn_output" },
    [LORA_GATE] = { "mlp.gate_proj", "ffn_gate" }, [LORA_UP] = { "mlp.up_proj", "ffn_up" },
    [LORA_DOWN] = { "mlp.down_proj", "ffn_down" },
};

typedef struct {
    float *a, *b; /* [r][in], [out][r] */
    int64_t r, in, out;
    float scale;  /* alpha / r */
} lora_pair;

struct cdx_lora {
    const cdx_model *m;
    char *path;
    const char *format;  /* "peft" or "gguf" */
    int64_t rank;        /* the largest r */
    double alpha;
    char targets[160];   /* "q_proj,v_proj" */
    int64_t n_pairs, n_layer;
    lora_pair *pairs;    /* [n_layer][LORA_N] */
    uint8_t fp[32];      /* cdx_lora_fingerprint */
};

/* PEFT's config fields that change the math, with the value that caldrix honours; anything else is
 * refused naming the field. */
static int peft_check_config(const char *path, json_t *cfg, double *alpha, int64_t *r, cdx_err *err)
{
    static const char *const must_false[] = { "use_rslora", "use_dora", "fan_in_fan_out", "lora_bias", "use_qalora" };
    static const char *const must_null[] = { "modules_to_save", "layer_replication", "trainable_token_indices",
                                             "alora_invocation_tokens", "target_parameters", "use_bdlora" };
    static const char *const must_empty[] = { "rank_pattern", "alpha_pattern" };
    const char *pt = json_string_value(json_object_get(cfg, "peft_type"));
    if (!pt || strcmp(pt, "LORA"))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: peft_type is \"%s\"; only \"LORA\" adapters are supported", path,
                           pt ? pt : "(missing)");
    for (size_t i = 0; i < sizeof must_false / sizeof *must_false; i++) {
        json_t *v = json_object_get(cfg, must_false[i]);
        if (v && !json_is_false(v) && !json_is_null(v))
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is set; caldrix does not support it (only plain LoRA: "
                               "y = x W^T + scaling · x A^T B^T with scaling = lora_alpha / r)", path, must_false[i]);
    }
    for (size_t i = 0; i < sizeof must_null / sizeof *must_null; i++) {
        json_t *v = json_object_get(cfg, must_null[i]);
        if (v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is set; caldrix does not support it", path, must_null[i]);
    }
    for (size_t i = 0; i < sizeof must_empty / sizeof *must_empty; i++) {
        json_t *v = json_object_get(cfg, must_empty[i]);
        if (v && !(json_is_object(v) && !json_object_size(v)) && !json_is_null(v))
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is not empty; per-module ranks and alphas are not "
                               "supported", path, must_empty[i]);
    }
    const char *bias = json_string_value(json_object_get(cfg, "bias"));
    if (bias && strcmp(bias, "none"))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: bias is \"%s\"; only \"none\" is supported", path, bias);
    json_t *jr = json_object_get(cfg, "r"), *ja = json_object_get(cfg, "lora_alpha");
    if (!json_is_integer(jr) || json_integer_value(jr) < 1 || json_integer_value(jr) > LORA_RANK_MAX)
        return cdx_err_set(err, CDX_EFORMAT, "%s: r must be an integer in 1..%d", path, LORA_RANK_MAX);
    if (!json_is_number(ja) || !isfinite(json_number_value(ja)))
        return cdx_err_set(err, CDX_EFORMAT, "%s: lora_alpha must be a number", path);
    *r = json_integer_value(jr);
    *alpha = json_number_value(ja);
    return CDX_OK;
}

/* The model's matrix of (layer, target), or NULL where the layer has none (a mixture of experts'
 * MLP, a Gated DeltaNet layer's attention). */
static const cdx_mat *target_mat(const cdx_model *m, int64_t l, int t)
{
    const layer_weights *L = &m->layers[l];
    if (L->linear && t <= LORA_O)
        return NULL;
    if (L->moe && t >= LORA_GATE)
        return NULL;
    const cdx_mat *k[LORA_N] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down };
    return k[t]->data || k[t]->packed ? k[t] : NULL;
}

/* The converter's q/k row permutation (convert_hf_to_gguf.py permute: per head, rows (k·hd/2 + j)
 * go to (2j + k)); inverse undoes it. Rows of B are rows of W. */
static int permute_rows(float *b, int64_t out, int64_t r, int64_t n_head, bool inverse, cdx_err *err)
{
    if (n_head <= 0 || out % n_head || (out / n_head) % 2)
        return cdx_err_set(err, CDX_EFORMAT, "%lld rows do not split into %lld heads of even size", (long long)out,
                           (long long)n_head);
    const int64_t hd = out / n_head, half = hd / 2;
    float *tmp = malloc((size_t)(out * r) * sizeof *tmp);
    if (!tmp)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    memcpy(tmp, b, (size_t)(out * r) * sizeof *tmp);
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t j = 0; j < half; j++)
            for (int64_t k = 0; k < 2; k++) {
                int64_t hf = h * hd + k * half + j, gg = h * hd + 2 * j + k;
                memcpy(b + (inverse ? hf : gg) * r, tmp + (inverse ? gg : hf) * r, (size_t)r * sizeof *b);
            }
    free(tmp);
    return CDX_OK;
}

/* A tensor as f32 [rows × cols] (a copy), from any type the traits read. */
static int tensor_f32(const void *data, uint32_t type, int64_t rows, int64_t cols, float **out, cdx_err *err)
{
    const cdx_type_traits *tr = cdx_type_get(type);
    if (!tr || !tr->to_f32)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "type %s cannot be read", cdx_type_name(type));
    size_t rb;
    int rc = cdx_type_row_bytes(type, (uint64_t)cols, &rb, err);
    if (rc)
        return rc;
    if (!(*out = malloc((size_t)(rows * cols) * sizeof **out)))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int64_t i = 0; i < rows; i++)
        tr->to_f32((const uint8_t *)data + (size_t)i * rb, *out + i * cols, cols);
    return CDX_OK;
}

/* Binds one pair: shapes against the model's matrix, the permutation between layouts. */
static int bind_pair(cdx_lora *a, const char *file, const char *key, int64_t l, int t, float *A, int64_t ar,
                     int64_t ac, float *B, int64_t br, int64_t bc, bool gguf_layout, cdx_err *err)
{
    const cdx_model *m = a->m;
    const cdx_hparams *hp = &m->hp;
    int rc = CDX_OK;
    const cdx_mat *w = l < hp->n_layer ? target_mat(m, l, t) : NULL;
    if (l >= hp->n_layer)
        rc = cdx_err_set(err, CDX_EINVAL, "%s: %s is for layer %lld; the model has %lld layers", file, key,
                         (long long)l, (long long)hp->n_layer);
    else if (!w)
        rc = cdx_err_set(err, CDX_EINVAL, "%s: %s targets %s, which layer %lld of this %s model does not have", file,
                         key, k_targets[t].hf, (long long)l, hp->arch_name);
    else if (ar != bc || ar < 1 || ar > LORA_RANK_MAX)
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s: lora_A has rank %lld, lora_B %lld (1..%d)", file, key,
                         (long long)ar, (long long)bc, LORA_RANK_MAX);
    else if (ac != w->cols || br != w->rows)
        rc = cdx_err_set(err, CDX_EINVAL, "%s: %s maps %lld inputs to %lld outputs (lora_A [%lld × %lld], lora_B "
                         "[%lld × %lld]); the model's %s of layer %lld maps %lld inputs to %lld outputs", file, key,
                         (long long)ac, (long long)br, (long long)ar, (long long)ac, (long long)br, (long long)bc,
                         k_targets[t].hf, (long long)l, (long long)w->cols, (long long)w->rows);
    else if (a->pairs[l * LORA_N + t].a)
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s appears twice", file, key);
    /* q/k rows: the GGUF layout of an adjacent-RoPE family is permuted */
    bool model_gguf = m->gguf != NULL, permuted = m->desc->gguf_rope == CDX_ROPE_ADJACENT;
    if (!rc && permuted && (t == LORA_Q || t == LORA_K) && model_gguf != gguf_layout)
        rc = permute_rows(B, br, bc, t == LORA_Q ? hp->n_head : hp->n_head_kv, !model_gguf, err);
    if (rc) {
        free(A);
        free(B);
        return rc;
    }
    a->pairs[l * LORA_N + t] = (lora_pair){ .a = A, .b = B, .r = ar, .in = ac, .out = br };
    a->n_pairs++;
    if (ar > a->rank)
        a->rank = ar;
    return CDX_OK;
}

static void add_target(cdx_lora *a, const char *name)
{
    if (strstr(a->targets, name))
        return;
    size_t n = strlen(a->targets);
    snprintf(a->targets + n, sizeof a->targets - n, "%s%s", n ? "," : "", name);
}

/* ---- PEFT ---- */

static int open_peft(cdx_lora *a, const char *dir, cdx_err *err)
{
    char cfg_path[4096], st_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/adapter_config.json", dir);
    snprintf(st_path, sizeof st_path, "%s/adapter_model.safetensors", dir);
    json_error_t je;
    json_t *cfg = json_load_file(cfg_path, 0, &je);
    if (!cfg)
        return cdx_err_set(err, CDX_EFORMAT, "%s: %s", cfg_path, je.text);
    int64_t r = 0;
    int rc = peft_check_config(cfg_path, cfg, &a->alpha, &r, err);
    /* target_modules: each must be a module caldrix binds */
    json_t *tm = json_object_get(cfg, "target_modules");
    size_t i;
    json_t *v;
    if (!rc && json_is_string(tm))
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: target_modules is the pattern \"%s\"; give the module names as a "
                         "list", cfg_path, json_string_value(tm));
    if (!rc && !json_is_array(tm))
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: target_modules is missing", cfg_path);
    json_array_foreach(rc ? NULL : tm, i, v) {
        const char *s = json_string_value(v);
        int t = 0;
        while (t < LORA_N && (!s || strcmp(strchr(k_targets[t].hf, '.') + 1, s)))
            t++;
        if (t == LORA_N) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: target_modules has \"%s\"; caldrix applies LoRA to "
                             "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and down_proj", cfg_path,
                             s ? s : "(not a string)");
            break;
        }
    }
    json_decref(cfg);
    if (rc)
        return rc;
    cdx_safetensors *st = NULL;
    if ((rc = cdx_st_open(st_path, &st, err)))
        return rc;
    const char *pre = "base_model.model.model.layers.";
    for (uint64_t k = 0; k < st->n_tensors && !rc; k++) {
        const cdx_st_tensor *ta = &st->tensors[k];
        const char *name = ta->name, *ab = strstr(name, ".lora_A.weight");
        if (!ab || ab[14])
            continue; /* lora_B is read with its A; anything else is refused below */
        char *end;
        long l = strncmp(name, pre, strlen(pre)) ? -1 : strtol(name + strlen(pre), &end, 10);
        int t = 0;
        if (l >= 0 && *end == '.')
            while (t < LORA_N && !(ab - (end + 1) == (long)strlen(k_targets[t].hf) &&
                                   !strncmp(end + 1, k_targets[t].hf, strlen(k_targets[t].hf))))
                t++;
        if (l < 0 || *end != '.' || t == LORA_N) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is not a LoRA weight of a module caldrix binds "
                             "(base_model.model.model.layers.N.{self_attn,mlp}.*_proj.lora_A.weight)", st_path, name);
            break;
        }
        char bname[512];
        snprintf(bname, sizeof bname, "%.*s.lora_B.weight", (int)(ab - name), name);
        const cdx_st_tensor *tb = cdx_st_find(st, bname);
        if (!tb) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s has no %s", st_path, name, bname);
            break;
        }
        if (ta->n_dims != 2 || tb->n_dims != 2) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s and its lora_B must be matrices", st_path, name);
            break;
        }
        if ((int64_t)ta->shape[0] != r) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s has rank %llu; adapter_config.json says r = %lld", st_path,
                             name, (unsigned long long)ta->shape[0], (long long)r);
            break;
        }
        float *A = NULL, *B = NULL;
        if ((rc = tensor_f32(ta->data, ta->type, (int64_t)ta->shape[0], (int64_t)ta->shape[1], &A, err)) ||
            (rc = tensor_f32(tb->data, tb->type, (int64_t)tb->shape[0], (int64_t)tb->shape[1], &B, err))) {
            free(A);
            cdx_err_prefix(err, "%s: %s: ", st_path, name);
            break;
        }
        char key[512];
        snprintf(key, sizeof key, "%.*s", (int)(ab - name), name);
        rc = bind_pair(a, st_path, key, l, t, A, (int64_t)ta->shape[0], (int64_t)ta->shape[1], B,
                       (int64_t)tb->shape[0], (int64_t)tb->shape[1], false, err);
        if (!rc) {
            a->pairs[l * LORA_N + t].scale = (float)(a->alpha / (double)r);
            add_target(a, strchr(k_targets[t].hf, '.') + 1);
        }
    }
    /* every lora_B has its A */
    for (uint64_t k = 0; k < st->n_tensors && !rc; k++) {
        const char *name = st->tensors[k].name, *bb = strstr(name, ".lora_B.weight");
        if (!strstr(name, ".lora_A.weight") && !(bb && !bb[14]))
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is not a LoRA weight (only lora_A/lora_B are read)",
                             st_path, name);
        else if (bb) {
            char an[512];
            snprintf(an, sizeof an, "%.*s.lora_A.weight", (int)(bb - name), name);
            if (!cdx_st_find(st, an))
                rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s has no %s", st_path, name, an);
        }
    }
    cdx_st_close(st);
    if (!rc && !a->n_pairs)
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: no LoRA weights", st_path);
    a->format = "peft";
    return rc;
}

/* ---- llama.cpp GGUF adapters ---- */

static int open_gguf(cdx_lora *a, const char *path, cdx_err *err)
{
    cdx_gguf *g = NULL;
    int rc = cdx_gguf_open(path, &g, err);
    if (rc)
        return rc;
    cdx_gguf_str s;
    const char *want = a->m->desc->gguf_name;
    char arch[64] = "";
    if (cdx_gguf_get_str(g, "general.architecture", &s))
        snprintf(arch, sizeof arch, "%.*s", (int)s.len, s.ptr);
    if (!cdx_gguf_get_str(g, "general.type", &s) || s.len != 7 || memcmp(s.ptr, "adapter", 7))
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: general.type is not \"adapter\": not a LoRA adapter", path);
    else if (!cdx_gguf_get_str(g, "adapter.type", &s) || s.len != 4 || memcmp(s.ptr, "lora", 4))
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: adapter.type is \"%.*s\"; only \"lora\" is supported", path,
                         (int)s.len, s.ptr);
    else if (!want || strcmp(arch, want))
        rc = cdx_err_set(err, CDX_EINVAL, "%s: general.architecture is \"%s\"; the model is \"%s\"", path, arch,
                         want ? want : a->m->hp.arch_name);
    double alpha = 0;
    if (!rc)
        cdx_gguf_get_f64(g, "adapter.lora.alpha", &alpha);
    a->alpha = alpha;
    for (uint64_t k = 0; !rc && k < g->n_tensors; k++) {
        const cdx_gguf_tensor *ta = &g->tensors[k];
        size_t nl = strlen(ta->name);
        if (nl < 7 || strcmp(ta->name + nl - 7, ".lora_a")) {
            if (nl < 7 || strcmp(ta->name + nl - 7, ".lora_b"))
                rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is not a LoRA tensor (<tensor>.lora_a/.lora_b)",
                                 path, ta->name);
            continue;
        }
        char base[256], bname[264];
        snprintf(base, sizeof base, "%.*s", (int)(nl - 7), ta->name);
        snprintf(bname, sizeof bname, "%s.lora_b", base);
        const cdx_gguf_tensor *tb = cdx_gguf_tensor_find(g, bname);
        char *end;
        long l = strncmp(base, "blk.", 4) ? -1 : strtol(base + 4, &end, 10);
        int t = 0;
        if (l >= 0 && *end == '.')
            while (t < LORA_N && !(strlen(end + 1) == strlen(k_targets[t].gguf) + 7 &&
                                   !strncmp(end + 1, k_targets[t].gguf, strlen(k_targets[t].gguf)) &&
                                   !strcmp(end + 1 + strlen(k_targets[t].gguf), ".weight")))
                t++;
        if (l < 0 || *end != '.' || t == LORA_N) {
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is not a LoRA tensor of a module caldrix binds "
                             "(blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight)", path,
                             ta->name);
            break;
        }
        if (!tb || ta->n_dims != 2 || tb->n_dims != 2) {
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: %s needs a 2-D %s beside it", path, ta->name, bname);
            break;
        }
        /* GGUF lists ne[0] (the row length) first: lora_a ne [in, r], lora_b ne [r, out] */
        float *A = NULL, *B = NULL;
        if ((rc = tensor_f32(ta->data, ta->type, (int64_t)ta->ne[1], (int64_t)ta->ne[0], &A, err)) ||
            (rc = tensor_f32(tb->data, tb->type, (int64_t)tb->ne[1], (int64_t)tb->ne[0], &B, err))) {
            free(A);
            cdx_err_prefix(err, "%s: %s: ", path, ta->name);
            break;
        }
        rc = bind_pair(a, path, base, l, t, A, (int64_t)ta->ne[1], (int64_t)ta->ne[0], B, (int64_t)tb->ne[1],
                       (int64_t)tb->ne[0], true, err);
        if (!rc) {
            lora_pair *p = &a->pairs[l * LORA_N + t];
            p->scale = alpha != 0 ? (float)(alpha / (double)p->r) : 1.0f;
            add_target(a, k_targets[t].gguf);
        }
    }
    if (!rc && !a->n_pairs)
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: no LoRA tensors", path);
    cdx_gguf_close(g);
    a->format = "gguf";
    return rc;
}

/* ---- public ---- */

int cdx_lora_open(const cdx_model *m, const char *path, cdx_lora **out, cdx_err *err)
{
    *out = NULL;
    if (m->dtype == CDX_DTYPE_BF16 || m->hp.linear_layer)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: LoRA adapters run on f32 dense passes; this model %s", path,
                           m->hp.linear_layer ? "is a hybrid (Gated DeltaNet) model" : "computes in bf16 (--dtype f32)");
    cdx_lora *a = calloc(1, sizeof *a);
    if (!a || !(a->path = strdup(path)) ||
        !(a->pairs = calloc((size_t)m->hp.n_layer * LORA_N, sizeof *a->pairs))) {
        cdx_lora_close(a);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    a->m = m;
    a->n_layer = m->hp.n_layer;
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", path);
    FILE *f = fopen(cfg, "rb");
    int rc;
    if (f) {
        fclose(f);
        rc = open_peft(a, path, err);
    } else {
        f = fopen(path, "rb");
        char magic[4] = { 0 };
        bool gguf = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
        if (f)
            fclose(f);
        rc = gguf ? open_gguf(a, path, err)
                  : cdx_err_set(err, CDX_ENOTFOUND, "%s: not a LoRA adapter (a PEFT folder with adapter_config.json, "
                                "or a llama.cpp GGUF adapter)", path);
    }
    if (rc) {
        cdx_lora_close(a);
        return rc;
    }
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int kn = sizeof a->fp;
    if (!c) {
        cdx_lora_close(a);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    for (int64_t i = 0; i < m->hp.n_layer * LORA_N; i++) {
        const lora_pair *p = &a->pairs[i];
        if (!p->a)
            continue;
        int64_t head[4] = { i, p->r, p->in, p->out };
        EVP_DigestUpdate(c, head, sizeof head);
        EVP_DigestUpdate(c, &p->scale, sizeof p->scale);
        EVP_DigestUpdate(c, p->a, (size_t)(p->r * p->in) * sizeof *p->a);
        EVP_DigestUpdate(c, p->b, (size_t)(p->out * p->r) * sizeof *p->b);
    }
    EVP_DigestFinal_ex(c, a->fp, &kn);
    EVP_MD_CTX_free(c);
    *out = a;
    return CDX_OK;
}

void cdx_lora_fingerprint(const cdx_lora *a, uint8_t out[32])
{
    memcpy(out, a->fp, 32);
}

void cdx_lora_close(cdx_lora *a)
{
    if (!a)
        return;
    for (int64_t i = 0; a->pairs && i < a->n_layer * LORA_N; i++) { /* m may be closed already */
        free(a->pairs[i].a);
        free(a->pairs[i].b);
    }
    free(a->pairs);
    free(a->path);
    free(a);
}

void cdx_lora_get_info(const cdx_lora *a, cdx_lora_info *info)
{
    *info = (cdx_lora_info){ .path = a->path, .format = a->format, .rank = a->rank, .alpha = a->alpha,
                             .targets = a->targets, .n_pairs = a->n_pairs };
}

const cdx_model *cdx_lora_model(const cdx_lora *a)
{
    return a->m;
}

int cdx_lora_merge_into(const cdx_lora *a, float scale, int64_t layer, int target, float *w, int64_t rows,
                        int64_t cols)
{
    if (layer < 0 || layer >= a->m->hp.n_layer || target < 0 || target >= LORA_N)
        return 0;
    const lora_pair *p = &a->pairs[layer * LORA_N + target];
    if (!p->a || p->out != rows || p->in != cols)
        return 0;
    /* PEFT's get_delta_weight: W += (B @ A) · scaling */
    const float s = p->scale * scale;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float d = 0;
            for (int64_t k = 0; k < p->r; k++)
                d += p->b[i * p->r + k] * p->a[k * p->in + j];
            w[i * cols + j] += d * s;
        }
    return 1;
}

/* ---- the forward-pass hook ---- */

typedef struct {
    const cdx_batch *b;
    int64_t layer, n;
    int target;
    const float *x;
    float *y;
    int64_t in, out;
} lora_job;

/* Σ a[c]·x[c] in one fixed order (8 partial sums by c mod 8, then a fixed tree, then the tail): the
 * same bits for a row whatever else is in the batch, on every kernel set (plain C, no FMA); eight
 * chains instead of one keep the adds from waiting on each other. */
static float lora_dot(const float *a, const float *x, int64_t n)
{
    float p[8] = { 0 };
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int u = 0; u < 8; u++)
            p[u] += a[c + u] * x[c + u];
    float s = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
    for (; c < n; c++)
        s += a[c] * x[c];
    return s;
}

static void lora_rows(void *ctx, int ith, int nth)
{
    const lora_job *j = ctx;
    float t[LORA_RANK_MAX];
    for (int64_t i = ith; i < j->n; i += nth) {
        const cdx_lora_set *set = j->b->lora[i];
        for (int u = 0; set && u < set->n; u++) {
            const lora_pair *p = &set->use[u].lora->pairs[j->layer * LORA_N + j->target];
            if (!p->a)
                continue;
            const float *x = j->x + i * j->in;
            float *y = j->y + i * j->out;
            for (int64_t k = 0; k < p->r; k++)
                t[k] = lora_dot(p->a + k * p->in, x, p->in);
            const float sc = p->scale * set->use[u].scale;
            for (int64_t o = 0; o < p->out; o++)
                y[o] += lora_dot(p->b + o * p->r, t, p->r) * sc;
        }
    }
}

void model_lora_add(cdx_pool *pool, const cdx_batch *b, int64_t layer, int target, const float *x, int64_t n,
                    int64_t in, float *y, int64_t out)
{
    if (!b->lora)
        return;
    bool any = false; /* no row's adapters touch this matrix: no dispatch (the threads' meeting costs) */
    for (int64_t i = 0; i < n && !any; i++)
        for (int u = 0; b->lora[i] && u < b->lora[i]->n && !any; u++)
            any = b->lora[i]->use[u].lora->pairs[layer * LORA_N + target].a != NULL;
    if (!any)
        return;
    lora_job j = { b, layer, n, target, x, y, in, out };
    if (n >= 4)
        cdx_pool_run(pool, lora_rows, &j);
    else
        lora_rows(&j, 0, 1);
}

int model_lora_check(const cdx_model *m, const cdx_batch *b, cdx_err *err)
{
    for (int64_t i = 0; b->lora && i < b->n; i++) {
        const cdx_lora_set *set = b->lora[i];
        for (int u = 0; set && u < set->n; u++)
            if (!set->use[u].lora || set->use[u].lora->m != m)
                return cdx_err_set(err, CDX_EINVAL, "token %lld: adapter %d was opened for another model", (long long)i,
                                   u);
    }
    return CDX_OK;
}
