/* caldrix server: /v1/embeddings (OpenAI's shape; llama-server's /embedding) and /v1/rerank (the
 * Jina/Cohere shape llama-server and vLLM accept) over an embed or rerank model (docs/api.md,
 * "Embeddings and reranking"). The connection's thread parses, validates and tokenizes; the engine
 * thread packs the inputs of every queued request into its passes (sv_reg_emb_run); the answer is
 * built here. */
#include "server/sv_int.h"

#include <openssl/evp.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(code, param, ...) sv_fail(e, 400, "invalid_request_error", code, param, __VA_ARGS__)

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* The inputs of one request: token ids, owned. */
typedef struct {
    int n;
    int32_t **ids;
    int64_t *lens;
    const char **text;             /* rerank: the documents as sent (in root), NULL for id documents */
    int64_t n_tokens;
} inputs;

static void inputs_free(inputs *in)
{
    for (int i = 0; in->ids && i < in->n; i++)
        free(in->ids[i]);
    free(in->ids);
    free(in->lens);
    free(in->text);
    memset(in, 0, sizeof *in);
}

static int inputs_alloc(inputs *in, int n, sv_error *e)
{
    in->n = n;
    in->ids = calloc((size_t)n, sizeof *in->ids);
    in->lens = calloc((size_t)n, sizeof *in->lens);
    in->text = calloc((size_t)n, sizeof *in->text);
    if (!in->ids || !in->lens || !in->text)
        return sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory for %d inputs", n);
    return 0;
}

/* ids[i] from a JSON array of integers, used as given: every id inside the vocabulary, 1..max tokens
 * (ids are never cut: they are used exactly as sent). */
static int ids_input(const sv_model *m, const json_t *a, const char *param, int32_t **out, int64_t *n, sv_error *e)
{
    const int64_t V = m->m.n_vocab, max = m->n_room;
    const size_t len = json_array_size(a);
    if (len == 0)
        return BAD("invalid_value", param, "%s is an empty array of token ids", param);
    if ((int64_t)len > max)
        return BAD("invalid_value", param, "%s has %zu token ids; the model takes at most %lld (token ids are used as "
                   "given, never truncated)", param, len, (long long)max);
    if (!(*out = malloc(len * sizeof **out)))
        return sv_fail(e, 500, "server_error", "out_of_memory", param, "out of memory");
    for (size_t t = 0; t < len; t++) {
        const json_t *v = json_array_get(a, t);
        if (!json_is_integer(v))
            return BAD("invalid_type", param, "%s[%zu] must be a token id (an integer), not %s", param, t, type_name(v));
        const json_int_t id = json_integer_value(v);
        if (id < 0 || id >= V)
            return BAD("invalid_value", param, "%s[%zu]: token id %lld is outside the vocabulary (0..%lld)", param, t,
                       (long long)id, (long long)V - 1);
        (*out)[t] = (int32_t)id;
    }
    *n = (int64_t)len;
    return 0;
}

static int get_bool(const json_t *root, const char *key, bool *out, sv_error *e)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return BAD("invalid_type", key, "%s must be true or false, not %s", key, type_name(v));
    *out = json_is_true(v);
    return 0;
}

static json_t *parse_body(const char *body, size_t len, sv_error *e)
{
    const size_t bad = cdx_utf8_check(body, len);
    if (bad != len)
        return BAD("invalid_encoding", NULL, "the body is not valid UTF-8 at byte %zu", bad), NULL;
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return BAD("invalid_json", NULL, "the body is not valid JSON: %s (line %d, column %d)",
                   json_error_code(&je) == json_error_duplicate_key ? "an object has a duplicate key" : je.text, je.line,
                   je.column), NULL;
    if (!json_is_object(root)) {
        BAD("invalid_json", NULL, "the body must be a JSON object, not %s", type_name(root));
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- /v1/embeddings ---- */

/* One text input: the prompt (prompt_name) before it, then sentence-transformers' tokenize (strip,
 * lowercase, special tokens, cut to max_seq_length unless truncate is false). */
static int text_input(const sv_model *m, const char *prompt, const json_t *s, const char *param, bool truncate,
                      int32_t **out, int64_t *n, sv_error *e)
{
    const size_t sl = json_string_length(s), pl = prompt ? strlen(prompt) : 0;
    if (sl == 0)
        return BAD("invalid_value", param, "%s is an empty string", param);
    char *t = malloc(pl + sl + 1);
    const size_t cap = (size_t)m->n_room;
    if (!t || !(*out = malloc(cap * sizeof **out))) {
        free(t);
        return sv_fail(e, 500, "server_error", "out_of_memory", param, "out of memory");
    }
    memcpy(t, prompt ? prompt : "", pl);
    memcpy(t + pl, json_string_value(s), sl);
    t[pl + sl] = 0;
    size_t k = 0, full = 0;
    cdx_err err = { 0 };
    const int rc = cdx_embed_tokenize(m->m.embedder, t, pl + sl, *out, cap, &k, &full, &err);
    free(t);
    if (rc)
        return BAD("invalid_value", param, "%s: %s", param, err.msg);
    if (k == 0)
        return BAD("invalid_value", param, "%s has no tokens (only white space?)", param);
    if (!truncate && full > k)
        return BAD("invalid_value", param, "%s has %zu tokens; the model takes at most %lld (max_seq_length); without "
                   "\"truncate\": false it is cut as sentence-transformers does", param, full, (long long)m->n_room);
    *n = (int64_t)k;
    return 0;
}

static int embed_inputs(const sv_model *m, const json_t *root, inputs *in, sv_error *e)
{
    const char *field = "input";
    const json_t *x = json_object_get(root, "input");
    if ((!x || json_is_null(x)) && (x = json_object_get(root, "content")) && !json_is_null(x))
        field = "content"; /* llama-server's /embedding field */
    if (!x || json_is_null(x))
        return BAD("missing_required_parameter", "input", "input is required: a string, an array of strings, an array "
                   "of token ids or an array of token-id arrays");
    bool truncate = true;
    if (get_bool(root, "truncate", &truncate, e))
        return -1;
    const char *prompt = NULL;
    const json_t *pn = json_object_get(root, "prompt_name");
    if (pn && !json_is_null(pn)) {
        if (!json_is_string(pn))
            return BAD("invalid_type", "prompt_name", "prompt_name must be a string, not %s", type_name(pn));
        if (!(prompt = cdx_st_pipeline_prompt(m->m.pipe, json_string_value(pn))))
            return BAD("invalid_value", "prompt_name", "prompt_name \"%.60s\": the model's "
                       "config_sentence_transformers.json has no such prompt", json_string_value(pn));
    }
    char param[64];
    /* a string; an array of ids (one input); an array of strings or of id arrays (several) */
    const bool one = json_is_string(x) || (json_is_array(x) && json_array_size(x) && json_is_integer(json_array_get(x, 0)));
    if (!one && !json_is_array(x))
        return BAD("invalid_type", field, "%s must be a string, an array of strings, an array of token ids or an array "
                   "of token-id arrays, not %s", field, type_name(x));
    const size_t n = one ? 1 : json_array_size(x);
    if (n == 0)
        return BAD("invalid_value", field, "%s is an empty array: give at least one input", field);
    if (n > CDX_EMBED_MAX_INPUTS)
        return BAD("invalid_value", field, "%s has %zu inputs; at most %d in one request", field, n, CDX_EMBED_MAX_INPUTS);
    if (inputs_alloc(in, (int)n, e))
        return -1;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = one ? x : json_array_get(x, i);
        if (one)
            snprintf(param, sizeof param, "%s", field);
        else
            snprintf(param, sizeof param, "%s[%zu]", field, i);
        int rc;
        if (json_is_string(v)) {
            if (!m->m.tok)
                return BAD("invalid_value", param, "%s is text, but the model has no tokenizer: give token ids", param);
            rc = text_input(m, prompt, v, param, truncate, &in->ids[i], &in->lens[i], e);
        } else if (json_is_array(v) && (one || !json_array_size(v) || json_is_integer(json_array_get(v, 0))))
            rc = ids_input(m, v, param, &in->ids[i], &in->lens[i], e);
        else
            rc = BAD("invalid_type", param, "%s must be a string or an array of token ids, not %s", param, type_name(v));
        if (rc)
            return rc;
        in->n_tokens += in->lens[i];
    }
    return 0;
}

/* 9 significant digits give back a float32's bits. */
static void put_floats(FILE *f, const float *v, int64_t n)
{
    fputc('[', f);
    for (int64_t i = 0; i < n; i++)
        fprintf(f, "%s%.9g", i ? "," : "", (double)v[i]);
    fputc(']', f);
}

/* base64 of the little-endian float32 bytes, as OpenAI's encoding_format "base64" */
static int put_base64(FILE *f, const float *v, int64_t n)
{
    const size_t nb = (size_t)n * 4;
    unsigned char *raw = malloc(nb), *b64 = malloc(4 * ((nb + 2) / 3) + 1);
    if (!raw || !b64) {
        free(raw);
        free(b64);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++)
            raw[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    EVP_EncodeBlock(b64, raw, (int)nb);
    fprintf(f, "\"%s\"", (const char *)b64);
    free(raw);
    free(b64);
    return 0;
}

static int run(sv_registry *r, sv_model *m, inputs *in, float *out, float *logits, sv_error *e)
{
    sv_emb_job j = { .n = in->n, .ids = in->ids, .lens = in->lens, .out = out, .logits = logits };
    sv_reg_emb_run(r, m, &j);
    if (j.rc)
        return sv_fail(e, j.rc == CDX_ENOMEM ? 500 : j.rc == CDX_EINVAL ? 400 : 500,
                       j.rc == CDX_EINVAL ? "invalid_request_error" : "server_error",
                       j.rc == CDX_EINVAL ? "invalid_value" : "internal_error", NULL, "%s", j.msg);
    return 0;
}

static int embeddings(sv_registry *r, sv_model *m, json_t *root, char **body, int64_t *n_tokens, sv_error *e)
{
    inputs in = { 0 };
    float *vec = NULL;
    const int64_t D = cdx_embedder_dim(m->m.embedder);
    int64_t dims = D;
    bool b64 = false;
    const json_t *ef = json_object_get(root, "encoding_format"), *dm = json_object_get(root, "dimensions");
    if (ef && !json_is_null(ef)) {
        if (!json_is_string(ef) || (strcmp(json_string_value(ef), "float") && strcmp(json_string_value(ef), "base64")))
            return BAD("invalid_value", "encoding_format", "encoding_format must be \"float\" or \"base64\"");
        b64 = !strcmp(json_string_value(ef), "base64");
    }
    if (dm && !json_is_null(dm)) {
        const cdx_st_pipeline *p = m->m.pipe;
        if (!json_is_integer(dm))
            return BAD("invalid_type", "dimensions", "dimensions must be an integer, not %s", type_name(dm));
        dims = (int64_t)json_integer_value(dm);
        if (!p || !p->matryoshka)
            return BAD("invalid_value", "dimensions", "model \"%s\" does not declare Matryoshka truncation "
                       "(config.json is_matryoshka or matryoshka_dimensions): its vectors have %lld dimensions, "
                       "cut shorter they would lose meaning", m->name, (long long)D);
        if (dims < 1 || dims > D)
            return BAD("invalid_value", "dimensions", "dimensions is %lld; model \"%s\" gives 1..%lld", (long long)dims,
                       m->name, (long long)D);
        bool listed = p->n_mrl_dims == 0;
        for (int i = 0; i < p->n_mrl_dims; i++)
            listed |= p->mrl_dims[i] == dims;
        if (!listed) {
            char list[256] = "";
            for (int i = 0, w = 0; i < p->n_mrl_dims && w < 200; i++)
                w += snprintf(list + w, sizeof list - (size_t)w, "%s%lld", i ? ", " : "", (long long)p->mrl_dims[i]);
            return BAD("invalid_value", "dimensions", "dimensions is %lld; model \"%s\" declares %s (config.json "
                       "matryoshka_dimensions)", (long long)dims, m->name, list);
        }
    }
    int rc = embed_inputs(m, root, &in, e);
    if (!rc && !(vec = malloc((size_t)in.n * (size_t)D * sizeof *vec)))
        rc = sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory for %d vectors", in.n);
    if (!rc)
        rc = run(r, m, &in, vec, NULL, e);
    size_t len = 0;
    FILE *f = rc ? NULL : open_memstream(body, &len);
    if (!rc && !f)
        rc = sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    if (f) {
        fputs("{\"object\":\"list\",\"data\":[", f);
        for (int i = 0; i < in.n; i++) {
            float *v = vec + (size_t)i * (size_t)D;
            if (dims < D) /* Matryoshka: truncate, then renormalize */
                cdx_embed_truncate(v, dims, v);
            fprintf(f, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
            if (b64)
                rc = rc ? rc : put_base64(f, v, dims);
            else
                put_floats(f, v, dims);
            fputc('}', f);
        }
        json_t *name = json_string(m->name);
        char *nm = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
        fprintf(f, "],\"model\":%s,\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}}\n", nm ? nm : "null",
                (long long)in.n_tokens, (long long)in.n_tokens);
        free(nm);
        json_decref(name);
        *n_tokens = in.n_tokens;
        if (fclose(f) || rc) {
            free(*body);
            *body = NULL;
            rc = sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
        }
    }
    free(vec);
    inputs_free(&in);
    return rc;
}

/* ---- /v1/rerank ---- */

typedef struct {
    int index;
    float score;
} ranked;

static int by_score(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    return x->score < y->score ? 1 : x->score > y->score ? -1 : x->index - y->index;
}

static int rerank(sv_registry *r, sv_model *m, json_t *root, char **body, int64_t *n_tokens, sv_error *e)
{
    const json_t *q = json_object_get(root, "query"), *docs = json_object_get(root, "documents");
    const char *dfield = "documents";
    if ((!docs || json_is_null(docs)) && (docs = json_object_get(root, "texts")) && !json_is_null(docs))
        dfield = "texts"; /* llama-server's other name */
    if (!docs || json_is_null(docs))
        return BAD("missing_required_parameter", "documents", "documents is required: an array of strings (with "
                   "query), or of token-id arrays, each a whole formatted pair");
    if (!json_is_array(docs))
        return BAD("invalid_type", dfield, "%s must be an array, not %s", dfield, type_name(docs));
    const size_t n = json_array_size(docs);
    if (n == 0)
        return BAD("invalid_value", dfield, "%s is an empty array: give at least one document", dfield);
    if (n > CDX_EMBED_MAX_INPUTS)
        return BAD("invalid_value", dfield, "%s has %zu documents; at most %d in one request", dfield, n,
                   CDX_EMBED_MAX_INPUTS);
    if (q && !json_is_null(q) && !json_is_string(q))
        return BAD("invalid_type", "query", "query must be a string, not %s", type_name(q));
    const json_t *ins = json_object_get(root, "instruction"), *tn = json_object_get(root, "top_n");
    if (ins && !json_is_null(ins) && !json_is_string(ins))
        return BAD("invalid_type", "instruction", "instruction must be a string, not %s", type_name(ins));
    int64_t top_n = (int64_t)n;
    if (tn && !json_is_null(tn)) {
        if (!json_is_integer(tn))
            return BAD("invalid_type", "top_n", "top_n must be an integer, not %s", type_name(tn));
        if (json_integer_value(tn) < 1)
            return BAD("invalid_value", "top_n", "top_n is %lld; it must be at least 1", (long long)json_integer_value(tn));
        if (json_integer_value(tn) < top_n)
            top_n = (int64_t)json_integer_value(tn);
    }
    bool truncate = true, ret_docs = true;
    if (get_bool(root, "truncate", &truncate, e) || get_bool(root, "return_documents", &ret_docs, e))
        return -1;
    inputs in = { 0 };
    if (inputs_alloc(&in, (int)n, e))
        return -1;
    int rc = 0;
    char param[64];
    for (size_t i = 0; i < n && !rc; i++) {
        const json_t *d = json_array_get(docs, i);
        snprintf(param, sizeof param, "%s[%zu]", dfield, i);
        if (json_is_array(d)) {
            rc = ids_input(m, d, param, &in.ids[i], &in.lens[i], e);
        } else if (json_is_string(d)) {
            if (!m->m.tok)
                rc = BAD("invalid_value", param, "%s is text, but the model has no tokenizer: give each document as "
                         "the token ids of a whole formatted pair (and no query)", param);
            else if (!q || json_is_null(q))
                rc = BAD("missing_required_parameter", "query", "query is required with text documents");
            else if (!json_string_length(d))
                rc = BAD("invalid_value", param, "%s is an empty string", param);
            else {
                cdx_err err = { 0 };
                int64_t full = 0;
                if (cdx_rerank_format(m->m.embedder, json_string_value(q), json_string_value(d),
                                      ins && !json_is_null(ins) ? json_string_value(ins) : NULL, &in.ids[i],
                                      &in.lens[i], &full, &err))
                    rc = BAD("invalid_value", param, "%s: %s", param, err.msg);
                else if (!truncate && full > in.lens[i])
                    rc = BAD("invalid_value", param, "%s: the formatted pair has %lld tokens; the model takes at most "
                             "%lld; without \"truncate\": false the document is cut as the model card does", param,
                             (long long)full, (long long)m->n_room);
                in.text[i] = json_string_value(d);
            }
        } else
            rc = BAD("invalid_type", param, "%s must be a string or an array of token ids, not %s", param, type_name(d));
        in.n_tokens += in.lens[i];
    }
    float *sc = rc ? NULL : malloc(n * sizeof *sc), *lg = rc ? NULL : malloc(n * 2 * sizeof *lg);
    ranked *rk = rc ? NULL : malloc(n * sizeof *rk);
    if (!rc && (!sc || !lg || !rk))
        rc = sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    if (!rc)
        rc = run(r, m, &in, sc, lg, e);
    if (!rc) {
        for (size_t i = 0; i < n; i++)
            rk[i] = (ranked){ (int)i, sc[i] };
        qsort(rk, n, sizeof *rk, by_score);
        json_t *res = json_array();
        for (int64_t i = 0; i < top_n; i++) {
            json_t *o = json_pack("{s:i,s:f}", "index", rk[i].index, "relevance_score", (double)rk[i].score);
            if (o && ret_docs) {
                const int k = rk[i].index;
                json_object_set_new(o, "document", in.text[k] ? json_pack("{s:s}", "text", in.text[k])
                                                              : json_pack("{s:O}", "tokens", json_array_get(docs, (size_t)k)));
            }
            json_array_append_new(res, o);
        }
        json_t *out = json_pack("{s:s,s:s,s:o,s:{s:I,s:I}}", "object", "list", "model", m->name, "results", res, "usage",
                                "prompt_tokens", (json_int_t)in.n_tokens, "total_tokens", (json_int_t)in.n_tokens);
        *n_tokens = in.n_tokens;
        *body = out ? json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
        json_decref(out);
        if (!*body)
            rc = sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    }
    free(sc);
    free(lg);
    free(rk);
    inputs_free(&in);
    return rc;
}

int sv_embed_answer(sv_registry *r, sv_model *m, bool is_rerank, const char *body, size_t len, char **out,
                    int64_t *n_tokens, sv_error *e)
{
    *out = NULL;
    json_t *root = parse_body(body ? body : "", len, e);
    if (!root)
        return -1;
    const cdx_task want = is_rerank ? CDX_TASK_RERANK : CDX_TASK_EMBED;
    int rc;
    if (m->task != want || !m->m.embedder)
        rc = BAD("invalid_model_task", "model", "model \"%s\" is served for %s, not %s%s", m->name,
                 cdx_task_name(m->task), cdx_task_name(want),
                 m->task == CDX_TASK_GENERATE ? " (serve an embedding or rerank model, or name one with --task)" : "");
    else
        rc = is_rerank ? rerank(r, m, root, out, n_tokens, e) : embeddings(r, m, root, out, n_tokens, e);
    json_decref(root);
    return rc;
}

/* ---- /chunk ---- */

/* Whether a chunk may start at token i: a word starts there (its piece begins with white space, or the
 * one before ends with it); *sentence: a sentence or a line ended just before. */
static bool boundary(char *const *pc, const int *pl, int64_t i, bool *sentence)
{
    *sentence = false;
    if (i == 0)
        return *sentence = true;
    const char *a = pc[i - 1], *b = pc[i];
    const int na = pl[i - 1], nb = pl[i];
    const bool ws_a = na && (a[na - 1] == ' ' || a[na - 1] == '\n' || a[na - 1] == '\t' || a[na - 1] == '\r');
    const bool ws_b = nb && (b[0] == ' ' || b[0] == '\n' || b[0] == '\t' || b[0] == '\r');
    int k = na - 1;
    while (k >= 0 && (a[k] == ' ' || a[k] == '\t'))
        k--;
    *sentence = (k >= 0 && (a[k] == '.' || a[k] == '!' || a[k] == '?' || a[k] == '\n')) || (nb && b[0] == '\n');
    *sentence = *sentence && (ws_a || ws_b);
    return ws_a || ws_b;
}

int sv_chunk_answer(sv_model *m, const char *body, size_t len, char **out, sv_error *e)
{
    *out = NULL;
    json_t *root = parse_body(body ? body : "", len, e);
    if (!root)
        return -1;
    const json_t *tx = json_object_get(root, "text"), *tt = json_object_get(root, "target_tokens"),
                 *ot = json_object_get(root, "overlap_tokens");
    int rc = 0;
    int64_t target = 0, overlap = 0;
    if (!tx || json_is_null(tx))
        rc = BAD("missing_required_parameter", "text", "text is required");
    else if (!json_is_string(tx))
        rc = BAD("invalid_type", "text", "text must be a string, not %s", type_name(tx));
    else if (!json_string_length(tx))
        rc = BAD("invalid_value", "text", "text is an empty string");
    else if (!m->m.tok)
        rc = BAD("invalid_value", "model", "model \"%s\" has no tokenizer to chunk with", m->name);
    else if (!tt || json_is_null(tt))
        rc = BAD("missing_required_parameter", "target_tokens", "target_tokens is required");
    else if (!json_is_integer(tt) || json_integer_value(tt) < 1 || json_integer_value(tt) > (1 << 20))
        rc = BAD("invalid_value", "target_tokens", "target_tokens must be an integer in 1..1048576");
    else if (ot && !json_is_null(ot) && (!json_is_integer(ot) || json_integer_value(ot) < 0))
        rc = BAD("invalid_value", "overlap_tokens", "overlap_tokens must be an integer of at least 0");
    if (!rc) {
        target = (int64_t)json_integer_value(tt);
        overlap = ot && json_is_integer(ot) ? (int64_t)json_integer_value(ot) : 0;
        if (overlap >= target)
            rc = sv_fail(e, 400, "invalid_request_error", "InvalidChunkOverlap", "overlap_tokens",
                         "overlap_tokens (%lld) must be smaller than target_tokens (%lld): each chunk must move on",
                         (long long)overlap, (long long)target);
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    char **pc = NULL;
    int *pl = NULL;
    if (!rc) {
        cdx_err err = { 0 };
        size_t need = 0;
        const char *t = json_string_value(tx);
        const size_t tl = json_string_length(tx);
        if (cdx_tok_encode(m->m.tok, t, tl, false, false, NULL, 0, &need, &err) ||
            !(ids = malloc((need + 1) * sizeof *ids)) ||
            cdx_tok_encode(m->m.tok, t, tl, false, false, ids, need, &need, &err))
            rc = ids || err.msg[0] ? BAD("invalid_value", "text", "text: %s", err.msg)
                                   : sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
        n = (int64_t)need;
    }
    if (!rc && n == 0)
        rc = BAD("invalid_value", "text", "text has no tokens");
    if (!rc && (!(pc = calloc((size_t)n, sizeof *pc)) || !(pl = calloc((size_t)n, sizeof *pl))))
        rc = sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    for (int64_t i = 0; !rc && i < n; i++) { /* each token's bytes in the text, for the boundaries */
        char buf[256];
        const int k = cdx_tok_piece(m->m.tok, ids[i], i == 0, false, buf, sizeof buf);
        pl[i] = k < 0 ? 0 : k > (int)sizeof buf ? (int)sizeof buf : k;
        if (!(pc[i] = malloc((size_t)pl[i] + 1)))
            rc = sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
        else
            memcpy(pc[i], buf, (size_t)pl[i]);
    }
    json_t *chunks = rc ? NULL : json_array();
    for (int64_t a = 0; !rc && a < n;) {
        int64_t b = a + target < n ? a + target : n;
        bool s;
        if (b < n) { /* the last sentence end past half the target, else the last word start, else the cut */
            int64_t word = -1, sent = -1;
            for (int64_t i = b; i > a + overlap; i--)
                if (boundary(pc, pl, i, &s)) {
                    if (word < 0)
                        word = i;
                    if (s && i - a >= (target + 1) / 2) {
                        sent = i;
                        break;
                    }
                }
            b = sent > 0 ? sent : word > 0 ? word : b;
        }
        size_t need = 0;
        cdx_err err = { 0 };
        char *text = NULL;
        if (cdx_tok_decode(m->m.tok, ids + a, (size_t)(b - a), false, NULL, 0, &need, &err) ||
            !(text = malloc(need + 1)) ||
            cdx_tok_decode(m->m.tok, ids + a, (size_t)(b - a), false, text, need + 1, &need, &err)) {
            free(text);
            rc = sv_fail(e, 500, "server_error", "internal_error", NULL, "cannot decode chunk tokens %lld..%lld",
                         (long long)a, (long long)b);
            break;
        }
        json_array_append_new(chunks, json_pack("{s:I,s:s%,s:I,s:I,s:I}", "index", (json_int_t)json_array_size(chunks),
                                                "text", text, need, "start_token", (json_int_t)a, "end_token",
                                                (json_int_t)b, "n_tokens", (json_int_t)(b - a)));
        free(text);
        if (b >= n)
            break;
        /* the next chunk takes back at most overlap tokens, from a word start where there is one */
        int64_t next = b - overlap;
        for (int64_t i = next; overlap && i < b; i++)
            if (boundary(pc, pl, i, &s)) {
                next = i;
                break;
            }
        a = next > a ? next : b;
    }
    if (!rc) {
        json_t *o = json_pack("{s:s,s:s,s:o,s:{s:I}}", "object", "list", "model", m->name, "chunks", chunks, "usage",
                              "prompt_tokens", (json_int_t)n);
        chunks = NULL;
        *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!*out)
            rc = sv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    }
    json_decref(chunks);
    for (int64_t i = 0; pc && i < n; i++)
        free(pc[i]);
    free(pc);
    free(pl);
    free(ids);
    json_decref(root);
    return rc;
}
