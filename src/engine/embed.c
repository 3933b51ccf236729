/* The sentence-transformers pipeline over a model (caldrix/embed.h): Transformer.tokenize, the
 * model's last hidden state, Pooling.forward, Normalize.forward, as sentence-transformers @ 85ec645
 * computes them (../shared/fixtures/embed/README.md restates the rules the goldens follow). */
#include "caldrix/embed.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

struct cdx_embedder {
    const cdx_model *m;
    const cdx_tok *tok;
    cdx_st_pipeline p;
    cdx_forward_ctx *fc;
    int64_t dim, max_tokens;
    pthread_mutex_t mu;
};

int cdx_embedder_open(const cdx_model *m, const cdx_tok *tok, const cdx_st_pipeline *p, const cdx_embedder_opts *opts,
                      cdx_embedder **out, cdx_err *err)
{
    *out = NULL;
    const cdx_hparams *hp = cdx_model_hparams(m);
    if (!cdx_model_is_encoder(m))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s is not an encoder; caldrix embeds with BERT and XLM-RoBERTa "
                           "encoders", hp->arch_name);
    cdx_embedder *e = calloc(1, sizeof *e);
    if (!e)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    e->m = m;
    e->tok = tok;
    if (p)
        e->p = *p;
    else {
        e->p.pooling = CDX_POOL_CLS;
        e->p.include_prompt = true;
    }
    e->dim = hp->n_embd;
    const int64_t positions = hp->n_ctx_train - hp->pos_offset;
    e->max_tokens = e->p.max_seq_length > 0 && e->p.max_seq_length < positions ? e->p.max_seq_length : positions;
    pthread_mutex_init(&e->mu, NULL);
    if (e->p.dim && e->p.dim != hp->n_embd) {
        cdx_embedder_close(e);
        return cdx_err_set(err, CDX_EFORMAT, "1_Pooling/config.json: word_embedding_dimension is %lld; the model's "
                           "hidden_size is %lld", (long long)e->p.dim, (long long)hp->n_embd);
    }
    int rc = cdx_forward_ctx_create(m, 1, opts && opts->n_threads > 0 ? opts->n_threads : 1, opts ? opts->kernels : NULL,
                                    &e->fc, err);
    if (rc) {
        cdx_embedder_close(e);
        return rc;
    }
    *out = e;
    return CDX_OK;
}

void cdx_embedder_close(cdx_embedder *e)
{
    if (!e)
        return;
    cdx_forward_ctx_free(e->fc);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

int64_t cdx_embedder_dim(const cdx_embedder *e) { return e->dim; }
int64_t cdx_embedder_max_tokens(const cdx_embedder *e) { return e->max_tokens; }
const cdx_st_pipeline *cdx_embedder_pipeline(const cdx_embedder *e) { return &e->p; }

/* ---- Transformer.tokenize ---- */

/* Python's str.isspace for one code point. */
static bool py_space(utf8proc_int32_t c)
{
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85)
        return true;
    const utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

/* text.strip(), then text.lower() when lower: a new NUL-terminated string. */
static int prepare(const char *text, size_t len, bool lower, char **out, size_t *out_len, cdx_err *err)
{
    utf8proc_int32_t *cps = malloc((len + 1) * sizeof *cps);
    char *s = malloc(len * 4 + 1);
    if (!cps || !s) {
        free(cps);
        free(s);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &c);
        if (k < 1) {
            free(cps);
            free(s);
            return cdx_err_set(err, CDX_EINVAL, "the text is not valid UTF-8 at byte %zu", i);
        }
        cps[n++] = c;
        i += (size_t)k;
    }
    size_t a = 0, b = n;
    while (a < b && py_space(cps[a]))
        a++;
    while (b > a && py_space(cps[b - 1]))
        b--;
    size_t o = 0;
    for (size_t i = a; i < b; i++)
        o += (size_t)utf8proc_encode_char(lower ? utf8proc_tolower(cps[i]) : cps[i], (utf8proc_uint8_t *)s + o);
    s[o] = 0;
    free(cps);
    *out = s;
    *out_len = o;
    return CDX_OK;
}

static int encode(const cdx_tok *tok, const char *s, size_t n, bool special, int32_t **ids, size_t *n_ids, cdx_err *err)
{
    size_t cap = n + 8, need = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int rc = cdx_tok_encode(tok, s, n, special, true, *ids, cap, &need, err);
    if (!rc && need > cap) {
        int32_t *p = realloc(*ids, need * sizeof **ids);
        if (!p)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        *ids = p;
        rc = cdx_tok_encode(tok, s, n, special, true, *ids, need, &need, err);
    }
    *n_ids = need;
    return rc;
}

int cdx_embed_tokenize(const cdx_embedder *e, const char *text, size_t len, int32_t *ids, size_t cap, size_t *n,
                       size_t *n_full, cdx_err *err)
{
    *n = 0;
    if (!e->tok)
        return cdx_err_set(err, CDX_EINVAL, "the model has no tokenizer: give token ids");
    char *s = NULL;
    size_t sl = 0;
    int32_t *full = NULL, *content = NULL;
    size_t nf = 0, nc = 0;
    int rc = prepare(text, len, e->p.do_lower_case, &s, &sl, err);
    if (!rc)
        rc = encode(e->tok, s, sl, true, &full, &nf, err);
    if (!rc)
        rc = encode(e->tok, s, sl, false, &content, &nc, err);
    if (rc)
        goto out;
    if (n_full)
        *n_full = nf;
    /* the special tokens around the content (BERT: [CLS] … [SEP]; XLM-R: <s> … </s>) stay; the content is
     * cut from the right (truncation="longest_first" of one sequence) */
    size_t pre = 0;
    const size_t max = (size_t)e->max_tokens;
    bool framed = false;
    for (pre = 0; nc <= nf && pre + nc <= nf; pre++)
        if (!memcmp(full + pre, content, nc * sizeof *content)) {
            framed = true;
            break;
        }
    size_t keep = nf;
    if (nf > max) {
        if (framed && nf - nc < max) {
            const size_t suf = nf - nc - pre, kc = max - pre - suf;
            memmove(full + pre + kc, full + pre + nc, suf * sizeof *full);
        }
        keep = max;
    }
    for (size_t i = 0; i < keep && i < cap; i++)
        ids[i] = full[i];
    *n = keep;
out:
    free(s);
    free(full);
    free(content);
    return rc;
}

/* ---- Pooling and Normalize ---- */

/* One input's vector from its hidden rows h[len][E]. */
static void pool(const cdx_st_pipeline *p, const float *h, int64_t len, int64_t E, float *out)
{
    switch (p->pooling) {
    case CDX_POOL_CLS:
        memcpy(out, h, (size_t)E * sizeof *out);
        break;
    case CDX_POOL_LAST:
        memcpy(out, h + (len - 1) * E, (size_t)E * sizeof *out);
        break;
    case CDX_POOL_MAX:
        for (int64_t c = 0; c < E; c++) {
            float m = h[c];
            for (int64_t t = 1; t < len; t++)
                m = h[t * E + c] > m ? h[t * E + c] : m;
            out[c] = m;
        }
        break;
    default: /* MEAN: sum over the tokens / their count (the special tokens included) */
        for (int64_t c = 0; c < E; c++) {
            double s = 0;
            for (int64_t t = 0; t < len; t++)
                s += h[t * E + c];
            out[c] = (float)((float)s / (float)len);
        }
        break;
    }
    if (p->normalize) { /* F.normalize: x / max(‖x‖₂, 1e-12) */
        double ss = 0;
        for (int64_t c = 0; c < E; c++)
            ss += (double)out[c] * out[c];
        float nrm = (float)sqrt(ss);
        nrm = nrm > 1e-12f ? nrm : 1e-12f;
        for (int64_t c = 0; c < E; c++)
            out[c] /= nrm;
    }
}

int cdx_embed_ids(cdx_embedder *e, const int32_t *const *ids, const int64_t *lens, int n, float *out, cdx_err *err)
{
    if (n < 1)
        return cdx_err_set(err, CDX_EINVAL, "no inputs to embed");
    const int64_t E = e->dim;
    int64_t N = 0;
    for (int i = 0; i < n; i++) {
        if (lens[i] < 1)
            return cdx_err_set(err, CDX_EINVAL, "input %d is empty", i);
        if (lens[i] > e->max_tokens)
            return cdx_err_set(err, CDX_EINVAL, "input %d has %lld tokens; the model takes at most %lld", i,
                               (long long)lens[i], (long long)e->max_tokens);
        N += lens[i];
    }
    int32_t *toks = malloc((size_t)N * sizeof *toks);
    float *h = malloc((size_t)(N * E) * sizeof *h);
    if (!toks || !h) {
        free(toks);
        free(h);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory to embed %lld tokens", (long long)N);
    }
    for (int i = 0, o = 0; i < n; o += (int)lens[i], i++)
        memcpy(toks + o, ids[i], (size_t)lens[i] * sizeof *toks);
    pthread_mutex_lock(&e->mu);
    int rc = cdx_encode(e->fc, toks, lens, n, h, err);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0, o = 0; !rc && i < n; o += (int)lens[i], i++)
        pool(&e->p, h + (size_t)o * (size_t)E, lens[i], E, out + (size_t)i * (size_t)E);
    free(toks);
    free(h);
    return rc;
}

int cdx_embed_texts(cdx_embedder *e, const char *const *texts, int n, float *out, int64_t *n_tokens, cdx_err *err)
{
    if (n < 1)
        return cdx_err_set(err, CDX_EINVAL, "no inputs to embed");
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int64_t *lens = calloc((size_t)n, sizeof *lens);
    int rc = ids && lens ? CDX_OK : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    const size_t cap = (size_t)e->max_tokens;
    for (int i = 0; !rc && i < n; i++) {
        size_t k = 0;
        if (!(ids[i] = malloc(cap * sizeof **ids)))
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        else if ((rc = cdx_embed_tokenize(e, texts[i], strlen(texts[i]), ids[i], cap, &k, NULL, err)))
            cdx_err_prefix(err, "input %d", i);
        lens[i] = (int64_t)k;
        if (n_tokens)
            n_tokens[i] = lens[i];
    }
    if (!rc)
        rc = cdx_embed_ids(e, (const int32_t *const *)ids, lens, n, out, err);
    for (int i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
    free(lens);
    return rc;
}
