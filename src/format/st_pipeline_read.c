/* The sentence-transformers folder layout (sentence-transformers @ 85ec645, SentenceTransformer._load_modules,
 * models/Pooling.py, models/Transformer.py): modules.json lists the modules in order, 1_Pooling/config.json
 * says how to pool, sentence_bert_config.json gives max_seq_length and do_lower_case, and
 * config_sentence_transformers.json the prompts. Normalize has no folder of its own on the Hub: it is read
 * from modules.json. */
#include "caldrix/pipeline.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    const char *name, *key;
} k_poolings[CDX_POOL_COUNT] = {
#define CDX_X_(name, s, key, doc) [CDX_POOL_##name] = { s, key },
    CDX_POOLINGS(CDX_X_)
#undef CDX_X_
};

const char *cdx_pooling_name(cdx_pooling p) { return (unsigned)p < CDX_POOL_COUNT ? k_poolings[p].name : "?"; }

const char *cdx_st_pipeline_prompt(const cdx_st_pipeline *p, const char *name)
{
    for (int i = 0; p && name && i < p->n_prompts; i++)
        if (!strcmp(p->prompt_name[i], name))
            return p->prompt[i];
    return NULL;
}

/* dir/rel as JSON; *out NULL (and 0) when the file does not exist. */
static int load(const char *dir, const char *rel, char *path, size_t cap, json_t **out, cdx_err *err)
{
    snprintf(path, cap, "%s/%s", dir, rel);
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return CDX_OK;
    json_error_t je;
    if (!(*out = json_load_file(path, JSON_REJECT_DUPLICATES, &je)))
        return cdx_err_set(err, CDX_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", path, je.text, je.line,
                           je.column);
    return CDX_OK;
}

static int get_bool(const char *path, json_t *o, const char *key, bool *out, cdx_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return CDX_OK;
    if (!json_is_boolean(v))
        return cdx_err_set(err, CDX_EFORMAT, "%s: %s is not true or false", path, key);
    *out = json_is_true(v);
    return CDX_OK;
}

/* modules.json: every module must be one caldrix computes. */
static int read_modules(const char *dir, json_t *mods, const char *path, cdx_st_pipeline *p, bool *pool_dir,
                        char *pool_rel, size_t cap, cdx_err *err)
{
    static const char *const k_known[] = { "sentence_transformers.models.Transformer",
                                           "sentence_transformers.models.Pooling",
                                           "sentence_transformers.models.Normalize" };
    if (!json_is_array(mods) || json_array_size(mods) < 1 || json_array_size(mods) > 16)
        return cdx_err_set(err, CDX_EFORMAT, "%s: not an array of 1..16 modules", path);
    size_t i;
    json_t *m;
    json_array_foreach(mods, i, m) {
        json_t *ty = json_object_get(m, "type"), *pa = json_object_get(m, "path");
        if (!json_is_object(m) || !json_is_string(ty))
            return cdx_err_set(err, CDX_EFORMAT, "%s: module %zu has no \"type\" string", path, i);
        const char *t = json_string_value(ty);
        size_t k = 0;
        while (k < 3 && strcmp(t, k_known[k]))
            k++;
        if (k == 3)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: module %zu is \"%.80s\"; caldrix implements "
                               "sentence_transformers.models Transformer, Pooling and Normalize only", path, i, t);
        if (k == 0 && i != 0)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the Transformer module is module %zu; caldrix runs it first",
                               path, i);
        if (k == 1) {
            *pool_dir = true;
            snprintf(pool_rel, cap, "%s/config.json", json_is_string(pa) ? json_string_value(pa) : "1_Pooling");
        }
        if (k == 2)
            p->normalize = true;
    }
    (void)dir;
    return CDX_OK;
}

static int read_pooling(json_t *o, const char *path, cdx_st_pipeline *p, cdx_err *err)
{
    static const char *const k_other[] = { "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens" };
    int rc, n_on = 0;
    if (!json_is_object(o))
        return cdx_err_set(err, CDX_EFORMAT, "%s: not a JSON object", path);
    for (int k = 0; k < CDX_POOL_COUNT; k++) {
        bool on = false;
        if ((rc = get_bool(path, o, k_poolings[k].key, &on, err)))
            return rc;
        if (on) {
            p->pooling = (cdx_pooling)k;
            n_on++;
        }
    }
    for (int k = 0; k < 2; k++) {
        bool on = false;
        if ((rc = get_bool(path, o, k_other[k], &on, err)))
            return rc;
        if (on)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %s is true; caldrix pools by cls, mean, max or lasttoken",
                               path, k_other[k]);
    }
    json_t *mode = json_object_get(o, "pooling_mode");
    if (json_is_string(mode)) { /* older configs: one string */
        int k = 0;
        while (k < CDX_POOL_COUNT && strcmp(json_string_value(mode), k_poolings[k].name))
            k++;
        if (k == CDX_POOL_COUNT)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: pooling_mode is \"%.40s\"; caldrix pools by cls, mean, max or "
                               "lasttoken", path, json_string_value(mode));
        if (!n_on++)
            p->pooling = (cdx_pooling)k;
    }
    if (n_on > 1)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: %d pooling modes are true; caldrix computes one (their "
                           "concatenation is not implemented)", path, n_on);
    if (n_on == 0)
        return cdx_err_set(err, CDX_EFORMAT, "%s: no pooling_mode_* key is true", path);
    if ((rc = get_bool(path, o, "include_prompt", &p->include_prompt, err)))
        return rc;
    json_t *d = json_object_get(o, "word_embedding_dimension");
    if (d && (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > (1 << 20)))
        return cdx_err_set(err, CDX_EFORMAT, "%s: word_embedding_dimension is not an integer in 1..1048576", path);
    p->dim = d ? (int64_t)json_integer_value(d) : 0;
    return CDX_OK;
}

/* config.json: "is_matryoshka" (bool) or "matryoshka_dimensions" (sizes), as vLLM reads them. */
static int read_matryoshka(const char *dir, cdx_st_pipeline *p, cdx_err *err)
{
    char path[4096];
    json_t *j = NULL;
    int rc = load(dir, "config.json", path, sizeof path, &j, err);
    if (rc || !j)
        return rc;
    rc = get_bool(path, j, "is_matryoshka", &p->matryoshka, err);
    json_t *d = json_object_get(j, "matryoshka_dimensions");
    if (!rc && d && !json_is_null(d)) {
        if (!json_is_array(d) || json_array_size(d) > CDX_ST_MAX_MRL_DIMS)
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: matryoshka_dimensions is not an array of up to %d sizes", path,
                             CDX_ST_MAX_MRL_DIMS);
        size_t i;
        json_t *v;
        json_array_foreach(rc ? NULL : d, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 20)) {
                rc = cdx_err_set(err, CDX_EFORMAT, "%s: matryoshka_dimensions[%zu] is not an integer in 1..1048576",
                                 path, i);
                break;
            }
            p->mrl_dims[p->n_mrl_dims++] = (int64_t)json_integer_value(v);
        }
        if (!rc && p->n_mrl_dims)
            p->matryoshka = true;
    }
    json_decref(j);
    return rc;
}

int cdx_st_pipeline_read(const char *dir, cdx_st_pipeline *p, cdx_err *err)
{
    memset(p, 0, sizeof *p);
    p->pooling = CDX_POOL_CLS;
    p->include_prompt = true;
    char path[4096], pool_rel[512] = "";
    json_t *j = NULL;
    bool pool_dir = false;
    int rc = load(dir, "modules.json", path, sizeof path, &j, err);
    if (rc || !j)
        return rc;
    p->present = true;
    rc = read_modules(dir, j, path, p, &pool_dir, pool_rel, sizeof pool_rel, err);
    json_decref(j);
    if (rc)
        return rc;
    if (pool_dir) {
        if ((rc = load(dir, pool_rel, path, sizeof path, &j, err)))
            return rc;
        if (!j)
            return cdx_err_set(err, CDX_EFORMAT, "%s: missing; modules.json lists a Pooling module there", path);
        rc = read_pooling(j, path, p, err);
        json_decref(j);
        if (rc)
            return rc;
    }
    if ((rc = load(dir, "sentence_bert_config.json", path, sizeof path, &j, err)))
        return rc;
    if (j) {
        json_t *ms = json_object_get(j, "max_seq_length");
        if (!json_is_object(j) || (ms && !json_is_null(ms) && (!json_is_integer(ms) || json_integer_value(ms) < 1 ||
                                                               json_integer_value(ms) > (1 << 24))))
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: max_seq_length is not an integer in 1..16777216", path);
        else {
            p->max_seq_length = ms && json_is_integer(ms) ? (int64_t)json_integer_value(ms) : 0;
            rc = get_bool(path, j, "do_lower_case", &p->do_lower_case, err);
        }
        json_decref(j);
        if (rc)
            return rc;
    }
    if ((rc = load(dir, "config_sentence_transformers.json", path, sizeof path, &j, err)))
        return rc;
    if (j) {
        json_t *pr = json_object_get(j, "prompts");
        const char *k;
        json_t *v;
        if (pr && !json_is_object(pr) && !json_is_null(pr))
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: prompts is not an object", path);
        json_object_foreach(json_is_object(pr) ? pr : NULL, k, v) {
            if (rc)
                break;
            if (!json_is_string(v) || strlen(k) >= sizeof p->prompt_name[0] || json_string_length(v) >= sizeof p->prompt[0])
                rc = cdx_err_set(err, CDX_EFORMAT, "%s: prompts.%.40s is not a string of up to %zu bytes", path, k,
                                 sizeof p->prompt[0] - 1);
            else if (p->n_prompts == CDX_ST_MAX_PROMPTS)
                rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: more than %d prompts", path, CDX_ST_MAX_PROMPTS);
            else {
                snprintf(p->prompt_name[p->n_prompts], sizeof p->prompt_name[0], "%s", k);
                snprintf(p->prompt[p->n_prompts], sizeof p->prompt[0], "%s", json_string_value(v));
                p->n_prompts++;
            }
        }
        json_decref(j);
    }
    return rc ? rc : read_matryoshka(dir, p, err);
}
