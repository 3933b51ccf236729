/* Tokenizer -> GGUF tokenizer.* keys, as llama.cpp's convert_hf_to_gguf.py writes them
 * (conversion/base.py get_vocab_base / _set_vocab_gpt2 / _create_vocab_sentencepiece /
 * _set_vocab_llama_hf, gguf-py vocab.py SpecialVocab):
 *   - tokenizer.model present: "llama" (SentencePiece) with its pieces, scores and types;
 *   - tokenizer.json BPE with byte fallback (Metaspace, SentencePiece-converted): "llama" too;
 *   - otherwise byte-level BPE: "gpt2" with tokens, token types, merges and tokenizer.ggml.pre.
 * Missing ids up to the model's vocab size become "[PAD<i>]" (UNUSED). */
#include "text/tok_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GT_NORMAL = 1, GT_UNKNOWN = 2, GT_CONTROL = 3, GT_USER_DEFINED = 4, GT_UNUSED = 5, GT_BYTE = 6 };

/* The text llama.cpp's convert_hf_to_gguf_update.py encodes to fingerprint a BPE pre-tokenizer
 * (get_vocab_base_pre's chktxt): sha256 of str(tokenizer.encode(chktxt)) names it. */
static const char k_check_text[] =
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\xf0\x9f\x9a\x80 (normal) \xf0\x9f\x98\xb6\xe2\x80\x8d"
    "\xf0\x9f\x8c\xab\xef\xb8\x8f (multiple emojis concatenated) \xe2\x9c\x85 \xf0\x9f\xa6\x99\xf0\x9f\xa6"
    "\x99 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 \xe1\x9e\x80\xe1\x9e\xb6\xe1\x9e\x93\xe1"
    "\x9f\x8b\xe1\x9e\x8f\xe1\x9f\x82\xe1\x9e\x96\xe1\x9e\xb7\xe1\x9e\x9f\xe1\x9f\x81\xe1\x9e\x9f\xe1\x9e\xa2"
    "\xe1\x9e\xb6\xe1\x9e\x85\xf0\x9f\x98\x81 ?\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8" "apple\xe5\xb7\xa5\xe4"
    "\xbd\x9c" "1314151\xe5\xa4\xa9\xef\xbd\x9e ------======= \xd0\xbd\xd0\xb5\xd1\x89\xd0\xbe \xd0\xbd\xd0"
    "\xb0 \xd0\x91\xd1\x8a\xd0\xbb\xd0\xb3\xd0\xb0\xd1\x80\xd1\x81\xd0\xba\xd0\xb8 ''''''```````\"\"\"\".."
    "....!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some"
    " tea? We'Ve a'lL";

const char *cdx_tok_pre_check_text(size_t *len)
{
    if (len)
        *len = sizeof k_check_text - 1;
    return k_check_text;
}

/* One row per fingerprint, copied from llama.cpp's get_vocab_base_pre (the byte-level BPE
 * tokenizers of the Llama / Mistral / Qwen families and their common relatives). */
static const struct { const char *hash, *name; } k_pre_hash[] = {
    { "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5", "llama-bpe" },      /* Meta-Llama-3-8B */
    { "c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d", "smaug-bpe" },
    { "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "qwen2" },          /* Qwen1.5-7B */
    { "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c", "qwen2" },          /* Qwen3-Embedding-0.6B */
    { "b3f499bb4255f8ca19fccd664443283318f2fd2414d5e0b040fbdd0cc195d6c5", "deepseek-r1-qwen" },
    { "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249", "smollm" },         /* SmolLM-135M */
    { "63b97e4253352e6f357cc59ea5b583e3a680eaeaf2632188c2b952de2588485e", "tekken" },         /* Mistral-Nemo */
    { "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454", "gpt-2" },
    { "049ecf7629871e3041641907f3de7c733e4dbfdc736f57d882ba0b0845599754", "deepseek-llm" },
    { "347715f544604f9118bb75ed199f68779f423cabb20db6de6f31b908d04d7821", "deepseek-coder" },
    { "9d032fcbd5501f4a38150912590928bfb36091efb5df11b8e2124b0390e3fb1e", "falcon3" },
    { "35d91631860c815f952d711435f48d356ebac988362536bed955d43bfa436e34", "starcoder" },
    { "32d85c31273f8019248f2559fed492d929ea28b17e51d81d3bb36fff23ca72b3", "stablelm2" },
    { "d4c8f286ea6b520b3d495c4455483cfa2302c0cfcd4be05d781b6a8a0a7cdaf1", "megrez" },
    { "a8594e3edff7c29c003940395316294b2c623e09894deebbc65f33f1515df79e", "dbrx" },
    { "0e9433cbbb161f89e264eb32e8e64bfe69e834973ffca5d41d3948a604a3e2a3", "pixtral" },
};

const char *cdx_tok_pre_by_hash(const char *hex)
{
    for (size_t i = 0; hex && i < sizeof k_pre_hash / sizeof *k_pre_hash; i++)
        if (!strcmp(k_pre_hash[i].hash, hex))
            return k_pre_hash[i].name;
    return NULL;
}

/* Fallback when the fingerprint is unknown (e.g. a vocabulary cut down for a test): the
 * pre-tokenizer of tokenizer.json, recognised by the pieces of its regex. */
static const struct { const char *needle, *needle2; bool digits_first; const char *name; } k_pre_regex[] = {
    { "\\p{N}{1,3}", "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+", false, "llama-bpe" },
    { "|\\p{N}|", "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+", false, "qwen2" },
    { NULL, NULL, true, "smollm" },   /* Digits(individual) then ByteLevel */
    { NULL, NULL, false, "gpt-2" },   /* ByteLevel with its own regex */
};

static void collect_pre(json_t *p, char *re, size_t cap, int *n_bytelevel, int *digits_first, int *n_steps)
{
    if (!json_is_object(p))
        return;
    const char *ty = json_string_value(json_object_get(p, "type"));
    if (!ty)
        return;
    if (!strcmp(ty, "Sequence")) {
        size_t i; json_t *e;
        json_array_foreach(json_object_get(p, "pretokenizers"), i, e) collect_pre(e, re, cap, n_bytelevel, digits_first, n_steps);
        return;
    }
    (*n_steps)++;
    if (!strcmp(ty, "Split")) {
        const char *r = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        if (r && !*re)
            snprintf(re, cap, "%s", r);
    } else if (!strcmp(ty, "ByteLevel")) {
        json_t *u = json_object_get(p, "use_regex");
        if (!u || json_is_true(u))
            (*n_bytelevel)++;
    } else if (!strcmp(ty, "Digits") && json_is_true(json_object_get(p, "individual_digits")) && *n_steps == 1) {
        *digits_first = 1;
    }
}

static const char *pre_from_json(const char *dir)
{
    if (!dir)
        return NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL);
    if (!j)
        return NULL;
    char re[1024] = "";
    int n_bl = 0, dig = 0, steps = 0;
    collect_pre(json_object_get(j, "pre_tokenizer"), re, sizeof re, &n_bl, &dig, &steps);
    json_decref(j);
    for (size_t i = 0; i < sizeof k_pre_regex / sizeof *k_pre_regex; i++) {
        if (k_pre_regex[i].needle) {
            if (*re && strstr(re, k_pre_regex[i].needle) && strstr(re, k_pre_regex[i].needle2))
                return k_pre_regex[i].name;
        } else if (!*re && n_bl == 1 && dig == k_pre_regex[i].digits_first && steps == (dig ? 2 : 1)) {
            return k_pre_regex[i].name;
        }
    }
    return NULL;
}

/* ---- shared pieces ---- */

/* convert_hf_to_gguf.py does_token_look_special */
static bool looks_special(const char *s, size_t n)
{
#define IS(lit) (n == sizeof lit - 1 && !memcmp(s, lit, n))
#define STARTS(lit) (n >= sizeof lit - 1 && !memcmp(s, lit, sizeof lit - 1))
#define ENDS(lit) (n >= sizeof lit - 1 && !memcmp(s + n - (sizeof lit - 1), lit, sizeof lit - 1))
    if (IS("<pad>") || IS("<mask>") || IS("<2mass>") || IS("[@BOS@]"))
        return true;
    if (STARTS("<|") && ENDS("|>") && n >= 4)
        return true;
    if (STARTS("<\xef\xbd\x9c") && ENDS("\xef\xbd\x9c>") && n >= 8)
        return true;
    return STARTS("<unused") && ENDS(">");
#undef IS
#undef STARTS
#undef ENDS
}

typedef struct {
    char **tok;       /* [n] */
    int32_t *type;    /* [n] */
    float *score;     /* [n] */
    uint32_t n;
} vocab_out;

static void vocab_free(vocab_out *v)
{
    if (v->tok)
        for (uint32_t i = 0; i < v->n; i++)
            free(v->tok[i]);
    free(v->tok);
    free(v->type);
    free(v->score);
}

static int vocab_alloc(vocab_out *v, uint32_t n, cdx_err *err)
{
    v->n = n;
    v->tok = calloc(n ? n : 1, sizeof *v->tok);
    v->type = calloc(n ? n : 1, sizeof *v->type);
    v->score = calloc(n ? n : 1, sizeof *v->score);
    if (!v->tok || !v->type || !v->score)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    return 0;
}

static char *pad_name(uint32_t i)
{
    char b[32];
    snprintf(b, sizeof b, "[PAD%u]", i);
    return tk_strndup(b, strlen(b));
}

/* "▁" in a user-defined token becomes a space (the converter's pre-normalisation) */
static char *user_defined_text(const char *s, size_t n)
{
    char *o = malloc(n + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
            o[k++] = ' ';
            i += 3;
        } else {
            o[k++] = s[i++];
        }
    }
    o[k] = 0;
    return o;
}

static uint8_t *added_flags(const cdx_tok *t)
{
    uint8_t *f = calloc(t->n_vocab ? t->n_vocab : 1, 1);
    if (f)
        for (size_t i = 0; i < t->n_added; i++)
            if (t->added[i].id >= 0 && (uint32_t)t->added[i].id < t->n_vocab)
                f[t->added[i].id] = 1;
    return f;
}

static int gt_of_attr(uint8_t a)
{
    return a & CDX_TOK_CONTROL ? GT_CONTROL : a & CDX_TOK_USER_DEFINED ? GT_USER_DEFINED : a & CDX_TOK_BYTE ? GT_BYTE
         : a & CDX_TOK_UNKNOWN ? GT_UNKNOWN : a & CDX_TOK_UNUSED ? GT_UNUSED : GT_NORMAL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* merges in rank order, as "left right" ("Ġ"-style U+0120 for a literal space, as gguf-py does) */
static int write_merges(const cdx_tok *t, cdx_gguf_writer *w, cdx_err *err)
{
    size_t n = t->merges.n, k = 0;
    uint64_t *ord = malloc((n ? n : 1) * sizeof *ord);
    uint64_t *lr = malloc((n ? n : 1) * sizeof *lr);
    char **s = calloc(n ? n : 1, sizeof *s);
    int rc = 0;
    if (!ord || !lr || !s) { rc = cdx_err_set(err, CDX_ENOMEM, "out of memory"); goto out; }
    for (uint32_t i = 0; t->merges.key && i <= t->merges.mask; i++)
        if (t->merges.key[i] && k < n) {
            ord[k] = (t->merges.val[i] >> 32) << 32 | k;
            lr[k] = t->merges.key[i] - 1;
            k++;
        }
    qsort(ord, k, sizeof *ord, cmp_u64);
    for (size_t i = 0; i < k; i++) {
        uint64_t p = lr[ord[i] & 0xffffffffu];
        int32_t l = (int32_t)(p >> 32), r = (int32_t)(p & 0xffffffffu);
        tk_str b = {0};
        for (int side = 0; side < 2; side++) {
            int32_t id = side ? r : l;
            const char *txt = t->pool.s + t->off[id];
            for (uint32_t j = 0; j < t->len[id]; j++)
                if (txt[j] == ' ' ? tk_str_put(&b, "\xc4\xa0", 2) : tk_str_putc(&b, txt[j])) { rc = CDX_ENOMEM; break; }
            if (!side && tk_str_putc(&b, ' ')) rc = CDX_ENOMEM;
        }
        if (rc || tk_str_putc(&b, 0)) { free(b.s); rc = cdx_err_set(err, CDX_ENOMEM, "out of memory"); goto out; }
        s[i] = b.s;
    }
    if (k && cdx_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)s, k))
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
out:
    if (s)
        for (size_t i = 0; i < k; i++) free(s[i]);
    free(s); free(ord); free(lr);
    return rc;
}


/* ---- the export ---- */

static json_t *load_json(const char *dir, const char *file)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL);
}

static bool file_exists(const char *dir, const char *file)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

static int open_spm(const char *dir, cdx_tok **out, cdx_err *err)
{
    char path[4200], *data = NULL, *cfg = NULL;
    size_t n = 0, cl = 0;
    *out = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    int rc = cdx_file_read_all(path, 256u << 20, &data, &n, err);
    if (rc)
        return rc;
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    if (file_exists(dir, "tokenizer_config.json") && (rc = cdx_file_read_all(cpath, 64u << 20, &cfg, &cl, err))) {
        free(data);
        return rc;
    }
    cdx_tok *t = tk_new();
    if (!t) {
        free(data); free(cfg);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    t->name = tk_strndup(path, strlen(path));
    rc = tk_load_spm_model(t, (const uint8_t *)data, n, cfg, cl, err);
    free(data);
    free(cfg);
    if (rc < 0) {
        cdx_tok_close(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* score of each token for llama.cpp's SentencePiece merge loop, from the BPE merge ranks: the
 * pair with the lowest rank merges first in both (a token made by several merges keeps the best) */
static void scores_from_merges(const cdx_tok *t, float *score)
{
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        size_t adv = 0;
        tk_utf8_dec(t->pool.s + t->off[i], t->len[i], &adv);
        score[i] = t->len[i] && adv == t->len[i] ? 0.0f : -1e9f;
    }
    for (uint32_t i = 0; t->merges.key && i <= t->merges.mask; i++)
        if (t->merges.key[i]) {
            uint32_t rank = (uint32_t)(t->merges.val[i] >> 32), id = (uint32_t)t->merges.val[i];
            if (id < t->n_vocab && -(float)rank > score[id])
                score[id] = -(float)rank;
        }
}

static int fill_vocab(const cdx_tok *t, bool spm_model, json_t *tcfg, vocab_out *v, cdx_err *err)
{
    uint8_t *added = added_flags(t);
    if (!added)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    bool spm = spm_model || !t->byte_level;
    if (spm && !spm_model)
        scores_from_merges(t, v->score);
    int rc = 0;
    for (uint32_t i = 0; i < v->n && !rc; i++) {
        bool have = i < t->n_vocab && !(t->len[i] == 0 && (t->attr[i] & CDX_TOK_UNUSED));
        if (!have) {
            v->tok[i] = pad_name(i);
            v->type[i] = GT_UNUSED;
            v->score[i] = spm_model ? -10000.0f : spm ? -1000.0f : 0.0f;
        } else {
            const char *s = t->pool.s + t->off[i];
            size_t n = t->len[i];
            int ty = gt_of_attr(t->attr[i]);
            if (spm_model) {
                v->score[i] = t->score[i];
            } else if (added[i]) {
                /* get_vocab_base: added tokens are CONTROL when special or special-looking */
                ty = (t->attr[i] & CDX_TOK_CONTROL) || looks_special(s, n) ? GT_CONTROL : GT_USER_DEFINED;
                if (spm) v->score[i] = -1000.0f;
            } else if (ty != GT_BYTE) {
                ty = GT_NORMAL;
            }
            v->tok[i] = ty == GT_USER_DEFINED && !spm_model ? user_defined_text(s, n) : tk_strndup(s, n);
            v->type[i] = ty;
        }
        if (!v->tok[i])
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    /* _create_vocab_sentencepiece: tokenizer_config.json's added_tokens_decoder overrides */
    json_t *atd = spm_model ? json_object_get(tcfg, "added_tokens_decoder") : NULL;
    const char *k; json_t *e;
    json_object_foreach(atd, k, e) {
        char *end;
        long id = strtol(k, &end, 10);
        const char *c = json_string_value(json_object_get(e, "content"));
        if (rc || *end || id < 0 || (uint64_t)id >= v->n || !c)
            continue;
        size_t n = strlen(c);
        bool ctl = json_is_true(json_object_get(e, "special")) || looks_special(c, n);
        free(v->tok[id]);
        v->tok[id] = ctl ? tk_strndup(c, n) : user_defined_text(c, n);
        v->type[id] = ctl ? GT_CONTROL : GT_USER_DEFINED;
        v->score[id] = -1000.0f;
        if (!v->tok[id])
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    free(added);
    return rc;
}

/* BertModel.set_vocab (convert_hf_to_gguf.py): a WordPiece vocabulary as llama.cpp's "bert" model, with
 * its phantom space: "##piece" loses its "##", a special token stays as it is, every other token gains
 * "▁"; the special ids (CLS, SEP, UNK, PAD, MASK) from the tokenizer. */
static int export_wordpiece(const cdx_tok *t, cdx_gguf_writer *w, uint32_t n_out, cdx_err *err)
{
    vocab_out v = {0};
    uint8_t *added = added_flags(t);
    int rc = added ? vocab_alloc(&v, n_out, err) : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (uint32_t i = 0; !rc && i < v.n; i++) {
        if (i >= t->n_vocab) {
            v.tok[i] = pad_name(i);
            v.type[i] = GT_UNUSED;
        } else {
            const char *s = t->pool.s + t->off[i];
            const size_t n = t->len[i];
            const bool special = added[i] && ((t->attr[i] & CDX_TOK_CONTROL) || looks_special(s, n));
            char *o = malloc(n + 4);
            if (o) {
                if (special || (n >= 2 && s[0] == '#' && s[1] == '#'))
                    memcpy(o, special ? s : s + 2, special ? n : n - 2), o[special ? n : n - 2] = 0;
                else
                    memcpy(o, "\xe2\x96\x81", 3), memcpy(o + 3, s, n), o[n + 3] = 0;
            }
            v.tok[i] = o;
            v.type[i] = special ? GT_CONTROL : GT_NORMAL;
        }
        if (!v.tok[i])
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    if (!rc) {
        cdx_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
        cdx_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, v.n);
        cdx_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CDX_GGUF_I32, v.type, v.n);
        static const char *const names[] = { "[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]" };
        static const char *const keys[] = { "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
                                            "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
                                            "tokenizer.ggml.mask_token_id" };
        for (int k = 0; k < 5; k++) {
            int32_t id = cdx_tok_find(t, names[k], strlen(names[k]));
            if (id >= 0 && (uint32_t)id < v.n)
                cdx_gguf_writer_set_u32(w, keys[k], (uint32_t)id);
        }
        if (cdx_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)(t->bos >= 0 ? t->bos : 101)) < 0)
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory writing the vocabulary");
    }
    free(added);
    vocab_free(&v);
    return rc;
}

int cdx_tok_export_gguf(const char *dir, const cdx_tok *tok, const cdx_tok_export_opts *opts, cdx_gguf_writer *w,
                        cdx_tok_export_info *info, cdx_err *err)
{
    cdx_tok_export_opts o = opts ? *opts : (cdx_tok_export_opts){ .bos_id = -1, .eos_id = -1, .pad_id = -1 };
    cdx_tok_export_info inf = {0};
    cdx_tok *owned = NULL;
    json_t *tcfg = NULL;
    vocab_out v = {0};
    int rc = 0;
    bool spm_model = dir && file_exists(dir, "tokenizer.model");
    if (spm_model) {
        if ((rc = open_spm(dir, &owned, err)))
            return rc;
        tok = owned;
    } else if (!tok) {
        if (!dir)
            return cdx_err_set(err, CDX_EINVAL, "tokenizer export: no tokenizer and no directory");
        if ((rc = cdx_tok_open_dir(dir, &owned, err)))
            return rc;
        tok = owned;
    }
    const cdx_tok *t = tok;
    if (!spm_model && t->model == MODEL_WORDPIECE) {
        const uint32_t nw = o.n_vocab ? o.n_vocab : t->n_vocab;
        if (t->n_vocab > nw)
            rc = cdx_err_set(err, CDX_EFORMAT, "%s: the tokenizer has %u ids but the model's vocab_size is %u", t->name,
                             t->n_vocab, nw);
        else
            rc = export_wordpiece(t, w, nw, err);
        inf.model = "bert";
        inf.pre = "default";
        inf.pre_source = "WordPiece";
        goto out;
    }
    if (!spm_model && (t->model != MODEL_BPE || (!t->byte_level && !t->byte_fallback))) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: a %s tokenizer; caldrix convert writes byte-level BPE (gpt2) and "
                         "SentencePiece (llama) vocabularies", t->name, cdx_tok_model_name(t));
        goto out;
    }
    bool spm = spm_model || !t->byte_level;
    uint32_t n_out = o.n_vocab ? o.n_vocab : t->n_vocab;
    if (t->n_vocab > n_out) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: the tokenizer has %u ids but the model's vocab_size is %u", t->name,
                         t->n_vocab, n_out);
        goto out;
    }
    if (dir)
        tcfg = load_json(dir, "tokenizer_config.json");
    if ((rc = vocab_alloc(&v, n_out, err)) || (rc = fill_vocab(t, spm_model, tcfg, &v, err)))
        goto out;
    inf.model = spm ? "llama" : "gpt2";
    if (spm) {
        inf.pre = "default";
        inf.pre_source = "SentencePiece";
    } else if ((inf.pre = cdx_tok_pre_by_hash(o.pre_hash))) {
        inf.pre_source = "llama.cpp's fingerprint of the tokenizer";
    } else if ((inf.pre = pre_from_json(dir))) {
        inf.pre_source = "the pre-tokenizer regex of tokenizer.json (fingerprint unknown)";
    } else {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the BPE pre-tokenizer is not one caldrix can name for llama.cpp "
                         "(fingerprint %s)", t->name, o.pre_hash ? o.pre_hash : "not computed");
        goto out;
    }
    /* LlamaModel.set_vocab writes add_space_prefix first, from tokenizer_config.json */
    json_t *asp = json_object_get(tcfg, "add_prefix_space");
    if (spm && json_is_boolean(asp))
        cdx_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", json_is_true(asp));
    cdx_gguf_writer_set_str(w, "tokenizer.ggml.model", inf.model);
    cdx_gguf_writer_set_str(w, "tokenizer.ggml.pre", inf.pre);
    cdx_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, v.n);
    if (spm)
        cdx_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CDX_GGUF_F32, v.score, v.n);
    cdx_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CDX_GGUF_I32, v.type, v.n);
    if (!spm && (rc = write_merges(t, w, err)))
        goto out;
    /* SpecialVocab: tokenizer_config.json's tokens, else config.json's ids */
    int64_t bos = t->bos >= 0 ? t->bos : o.bos_id, eos = t->eos >= 0 ? t->eos : o.eos_id;
    int64_t unk = t->unk >= 0 ? t->unk : -1, pad = t->pad >= 0 ? t->pad : o.pad_id;
    const struct { const char *key; int64_t id; } ids[] = {
        { "tokenizer.ggml.bos_token_id", bos }, { "tokenizer.ggml.eos_token_id", eos },
        { "tokenizer.ggml.unknown_token_id", unk }, { "tokenizer.ggml.padding_token_id", pad },
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        if (ids[i].id >= 0 && ids[i].id < (int64_t)n_out)
            cdx_gguf_writer_set_u32(w, ids[i].key, (uint32_t)ids[i].id);
    cdx_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
    cdx_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", t->add_eos);
    const char *tpl = cdx_tok_chat_template(t);
    char *jinja = NULL;
    if (!tpl && dir && file_exists(dir, "chat_template.jinja")) {
        char path[4200];
        size_t n;
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        if ((rc = cdx_file_read_all(path, 16u << 20, &jinja, &n, err)))
            goto out;
        tpl = jinja;
    }
    if (tpl && *tpl)
        cdx_gguf_writer_set_str(w, "tokenizer.chat_template", tpl);
    free(jinja);
    rc = 0; /* a failed setter leaves the writer failed: cdx_gguf_writer_write reports it */
out:
    if (info)
        *info = inf;
    vocab_free(&v);
    json_decref(tcfg);
    cdx_tok_close(owned);
    return rc;
}

/* The placeholder vocabulary the shared fixture converter writes (shared/tools/fixtures/hf/to_gguf.py):
 * <unk>, <s>, </s>, the 256 byte tokens, then "<t{i}>" up to n_vocab; scores 0; no BOS/EOS added. */
int cdx_tok_export_gguf_dummy(cdx_gguf_writer *w, uint32_t n_vocab, int64_t bos, int64_t eos, cdx_err *err)
{
    vocab_out v = {0};
    int rc = vocab_alloc(&v, n_vocab, err);
    for (uint32_t i = 0; !rc && i < n_vocab; i++) {
        char b[32];
        if (i < 3)
            snprintf(b, sizeof b, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 3 + 256)
            snprintf(b, sizeof b, "<0x%02X>", i - 3);
        else
            snprintf(b, sizeof b, "<t%u>", i);
        v.tok[i] = tk_strndup(b, strlen(b));
        v.type[i] = i == 0 ? GT_UNKNOWN : i < 3 ? GT_CONTROL : i < 3 + 256 ? GT_BYTE : GT_NORMAL;
        if (!v.tok[i])
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    if (!rc) {
        cdx_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
        cdx_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, v.n);
        cdx_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CDX_GGUF_F32, v.score, v.n);
        cdx_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CDX_GGUF_I32, v.type, v.n);
        if (bos >= 0) cdx_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
        if (eos >= 0) cdx_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
        cdx_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        cdx_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
        if (cdx_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false))
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory writing the vocabulary");
    }
    vocab_free(&v);
    return rc;
}
