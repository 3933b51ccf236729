/* The sentence-transformers pipeline over a model (caldrix/embed.h): Transformer.tokenize, the
 * model's last hidden state, Pooling.forward, Normalize.forward, as sentence-transformers @ 85ec645
 * computes them (../shared/fixtures/embed/README.md restates the rules the goldens follow). */
#include "caldrix/embed.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
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
    cdx_task task;
    bool decoder;                  /* a causal LM: last-token hidden states through cdx_forward */
    int64_t budget;                /* a decoder's tokens per forward */
    int32_t yes_id, no_id, eos_id; /* a reranker's answers; the EOS a decoder embedding appends (-1: none) */
};

static const char *const k_tasks[CDX_TASK_COUNT] = {
#define CDX_X_(name, s) [CDX_TASK_##name] = s,
    CDX_TASKS(CDX_X_)
#undef CDX_X_
};

const char *cdx_task_name(cdx_task t) { return (unsigned)t < CDX_TASK_COUNT ? k_tasks[t] : "?"; }

int cdx_task_from_name(const char *s, cdx_task *out)
{
    for (int t = 0; s && t < CDX_TASK_COUNT; t++)
        if (!strcmp(s, k_tasks[t])) {
            *out = (cdx_task)t;
            return CDX_OK;
        }
    return CDX_EINVAL;
}

cdx_task cdx_task_declared(const cdx_model *m, const cdx_st_pipeline *p)
{
    const cdx_hparams *hp = cdx_model_hparams(m);
    if (hp->gguf_rank) /* a GGUF decoder with pooling_type rank and cls.output (llama.cpp's reranker) */
        return CDX_TASK_RERANK;
    return cdx_model_is_encoder(m) || (p && p->present) || hp->gguf_pooling ? CDX_TASK_EMBED : CDX_TASK_GENERATE;
}

cdx_task cdx_embedder_task(const cdx_embedder *e) { return e->task; }

/* A decoder's setup: f32 compute of a dense model, last-token pooling, the reranker's answer ids. */
static int open_decoder(cdx_embedder *e, const cdx_embedder_opts *opts, cdx_err *err)
{
    const cdx_hparams *hp = cdx_model_hparams(e->m);
    if (hp->linear_layer || cdx_model_vision(e->m, NULL))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: caldrix embeds and reranks with dense text decoders (Qwen3) "
                           "and encoders", hp->arch_name);
    if (cdx_model_dtype(e->m) != CDX_DTYPE_F32)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "the model computes in %s; embeddings and scores are computed in f32 "
                           "(open it with --dtype f32)", cdx_dtype_name(cdx_model_dtype(e->m)));
    if (!e->p.present && !(cdx_model_gguf(e->m) && hp->gguf_pooling))
        e->p.pooling = CDX_POOL_LAST;
    if (e->task == CDX_TASK_EMBED && e->p.pooling != CDX_POOL_LAST)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "1_Pooling/config.json: pooling %s over a causal decoder; caldrix "
                           "pools a decoder by its last token (lasttoken)", cdx_pooling_name(e->p.pooling));
    e->eos_id = hp->n_eos ? hp->eos_ids[0] : -1;
    e->budget = opts && opts->token_budget > 0 ? opts->token_budget : 512;
    if (e->task == CDX_TASK_EMBED && hp->gguf_rank)
        return cdx_err_set(err, CDX_EINVAL, "%s.pooling_type is 4 (rank): the file is a reranker, not an embedder",
                           hp->arch_name);
    if (e->task == CDX_TASK_RERANK && hp->gguf_rank) {
        /* the answers are cls.output's rows (the labels "yes" and "no"), not vocabulary ids */
        if (opts && (opts->yes_id > 0 || opts->no_id > 0))
            return cdx_err_set(err, CDX_EINVAL, "--yes-id/--no-id: the GGUF file's cls.output.weight holds the "
                               "reranker's yes/no rows (classifier.output_labels)");
        e->yes_id = e->no_id = -1;
    } else if (e->task == CDX_TASK_RERANK) {
        e->yes_id = opts && (opts->yes_id > 0 || opts->no_id > 0) ? opts->yes_id : -1;
        e->no_id = opts && (opts->yes_id > 0 || opts->no_id > 0) ? opts->no_id : -1;
        if (e->yes_id < 0 && e->tok)
            e->yes_id = cdx_tok_find(e->tok, "yes", 3);
        if (e->no_id < 0 && e->tok)
            e->no_id = cdx_tok_find(e->tok, "no", 2);
        if (e->yes_id < 0 || e->no_id < 0 || e->yes_id >= hp->n_vocab || e->no_id >= hp->n_vocab || e->yes_id == e->no_id)
            return cdx_err_set(err, CDX_EINVAL, "a reranker needs its \"yes\" and \"no\" token ids (the tokenizer's, or "
                               "--yes-id/--no-id): got %d and %d", e->yes_id, e->no_id);
    }
    return CDX_OK;
}

int cdx_embedder_open(const cdx_model *m, const cdx_tok *tok, const cdx_st_pipeline *p, const cdx_embedder_opts *opts,
                      cdx_embedder **out, cdx_err *err)
{
    *out = NULL;
    const cdx_hparams *hp = cdx_model_hparams(m);
    const cdx_task task = opts && opts->task != CDX_TASK_GENERATE ? opts->task : CDX_TASK_EMBED;
    if (cdx_model_is_encoder(m) && task == CDX_TASK_RERANK)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s is an encoder; caldrix reranks with causal LMs that answer yes or "
                           "no (Qwen3-Reranker), not with cross-encoders yet", hp->arch_name);
    cdx_embedder *e = calloc(1, sizeof *e);
    if (!e)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    e->m = m;
    e->tok = tok;
    e->task = task;
    e->decoder = !cdx_model_is_encoder(m);
    e->eos_id = -1;
    if (p)
        e->p = *p;
    else {
        e->p.pooling = CDX_POOL_CLS;
        e->p.include_prompt = true;
    }
    if (e->decoder && !(p && p->present) && cdx_model_gguf(m) && hp->gguf_pooling) {
        /* a GGUF decoder embedder (Qwen3-Embedding as llama.cpp converts it: pooling_type 3, last) */
        e->p.pooling = (cdx_pooling)(hp->gguf_pooling - 1);
        e->p.normalize = hp->gguf_normalize;
    }
    if (!e->decoder && !(p && p->present) && cdx_model_gguf(m)) {
        /* a GGUF encoder declares its pooling in <arch>.pooling_type (llama.cpp's key), and caldrix convert
         * writes caldrix.embedding.normalize where modules.json listed Normalize */
        if (!hp->gguf_pooling) {
            free(e);
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s.pooling_type is missing from the GGUF file; caldrix does not "
                               "guess how to pool an encoder (llama.cpp would give a vector per token)", hp->arch_name);
        }
        e->p.pooling = (cdx_pooling)(hp->gguf_pooling - 1);
        e->p.normalize = hp->gguf_normalize;
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
    int rc = e->decoder ? open_decoder(e, opts, err) : CDX_OK;
    if (rc) {
        cdx_embedder_close(e);
        return rc;
    }
    rc = cdx_forward_ctx_create_on(m, e->decoder ? e->budget : 1, opts && opts->n_threads > 0 ? opts->n_threads : 1,
                                   opts ? opts->pool : NULL, opts ? opts->kernels : NULL, &e->fc, err);
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
    if (e->decoder && e->eos_id >= 0 && (nf == 0 || full[nf - 1] != e->eos_id)) {
        /* Qwen3-Embedding: <|endoftext|> appended to the whole string (README: EOS appended) */
        int32_t *p2 = realloc(full, (nf + 1) * sizeof *full);
        if (!p2) {
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
            goto out;
        }
        full = p2;
        full[nf++] = e->eos_id;
    }
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

static void normalize(float *out, int64_t E);

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
    if (p->normalize)
        normalize(out, E);
}

/* F.normalize: x / max(‖x‖₂, 1e-12) */
static void normalize(float *out, int64_t E)
{
    {
        double ss = 0;
        for (int64_t c = 0; c < E; c++)
            ss += (double)out[c] * out[c];
        float nrm = (float)sqrt(ss);
        nrm = nrm > 1e-12f ? nrm : 1e-12f;
        for (int64_t c = 0; c < E; c++)
            out[c] /= nrm;
    }
}

/* ---- a decoder's last hidden states ---- */

/* out[n][E] = the final-normed hidden state at each input's last token. Inputs go 64 at a time, each with
 * a KV cache of its own, in forwards of up to budget tokens (a long input in chunks): the same bits
 * whatever the grouping (the decoder's pass is batch invariant). Called under e->mu. */
static int dec_last_hidden(cdx_embedder *e, const int32_t *const *ids, const int64_t *lens, int n, float *out,
                           cdx_err *err)
{
    enum { MAXS = 64 };
    const cdx_hparams *hp = cdx_model_hparams(e->m);
    const int64_t E = hp->n_embd, B = e->budget;
    int32_t *tok = malloc((size_t)B * sizeof *tok), *seq = malloc((size_t)B * sizeof *seq);
    bool *want = malloc((size_t)B * sizeof *want);
    float *hid = malloc((size_t)MAXS * (size_t)E * sizeof *hid);
    int rc = tok && seq && want && hid ? CDX_OK : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int g0 = 0; !rc && g0 < n; g0 += MAXS) {
        const int gn = n - g0 < MAXS ? n - g0 : MAXS;
        cdx_kv kv[MAXS];
        int64_t done[MAXS] = { 0 };
        int ok = 0;
        for (; ok < gn && !rc; ok++)
            rc = cdx_kv_init_model(&kv[ok], e->m, lens[g0 + ok], err);
        while (!rc) {
            cdx_kv *kp[MAXS];
            int who[MAXS], na = 0, rows[MAXS], nr = 0;
            int64_t nb = 0;
            for (int s = 0; s < gn && nb < B; s++) {
                const int64_t left = lens[g0 + s] - done[s];
                if (left <= 0)
                    continue;
                const int64_t take = left < B - nb ? left : B - nb;
                for (int64_t t = 0; t < take; t++) {
                    tok[nb + t] = ids[g0 + s][done[s] + t];
                    seq[nb + t] = na;
                    want[nb + t] = done[s] + t == lens[g0 + s] - 1;
                }
                if (take == left)
                    rows[nr++] = s;
                done[s] += take;
                nb += take;
                kp[na] = &kv[s];
                who[na++] = s;
            }
            if (!nb)
                break;
            (void)who;
            cdx_batch b = { .n = nb, .tokens = tok, .seq = seq, .want_logits = want, .hidden = hid };
            if ((rc = cdx_forward(e->fc, kp, na, &b, NULL, err)))
                break;
            for (int r = 0; r < nr; r++)
                memcpy(out + (size_t)(g0 + rows[r]) * (size_t)E, hid + (size_t)r * (size_t)E, (size_t)E * sizeof *hid);
        }
        for (int s = 0; s < ok; s++)
            cdx_kv_free(&kv[s]);
    }
    free(tok);
    free(seq);
    free(want);
    free(hid);
    return rc;
}

static int check_inputs(const cdx_embedder *e, const int32_t *const *ids, const int64_t *lens, int n, cdx_err *err)
{
    const int64_t V = cdx_model_hparams(e->m)->n_vocab;
    if (n < 1)
        return cdx_err_set(err, CDX_EINVAL, "no inputs");
    if (n > CDX_EMBED_MAX_INPUTS)
        return cdx_err_set(err, CDX_EINVAL, "%d inputs; at most %d in one call", n, CDX_EMBED_MAX_INPUTS);
    for (int i = 0; i < n; i++) {
        if (lens[i] < 1)
            return cdx_err_set(err, CDX_EINVAL, "input %d is empty", i);
        if (lens[i] > e->max_tokens)
            return cdx_err_set(err, CDX_EINVAL, "input %d has %lld tokens; the model takes at most %lld", i,
                               (long long)lens[i], (long long)e->max_tokens);
        for (int64_t t = 0; t < lens[i]; t++)
            if (ids[i][t] < 0 || ids[i][t] >= V)
                return cdx_err_set(err, CDX_EINVAL, "input %d, token %lld: id %d is outside the vocabulary (0..%lld)", i,
                                   (long long)t, ids[i][t], (long long)V - 1);
    }
    return CDX_OK;
}

int cdx_rerank_ids(cdx_embedder *e, const int32_t *const *ids, const int64_t *lens, int n, float *scores,
                   float *logits, cdx_err *err)
{
    if (e->task != CDX_TASK_RERANK)
        return cdx_err_set(err, CDX_EINVAL, "the model is served for %s, not rerank", cdx_task_name(e->task));
    int rc = check_inputs(e, ids, lens, n, err);
    if (rc)
        return rc;
    const int64_t E = e->dim;
    float *h = malloc((size_t)n * (size_t)E * sizeof *h), *yn = malloc((size_t)n * 2 * sizeof *yn);
    if (!h || !yn)
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (!rc) {
        pthread_mutex_lock(&e->mu);
        rc = dec_last_hidden(e, ids, lens, n, h, err);
        pthread_mutex_unlock(&e->mu);
    }
    const int32_t ans[2] = { e->yes_id, e->no_id };
    const cdx_hparams *hp = cdx_model_hparams(e->m);
    if (!rc && hp->gguf_rank) {
        /* cls.output's rows: the same dot products as the tied head's yes/no rows */
        float *cl = malloc((size_t)n * (size_t)hp->n_cls_out * sizeof *cl);
        rc = cl ? cdx_model_cls_logits(e->m, h, n, cl, err) : cdx_err_set(err, CDX_ENOMEM, "out of memory");
        for (int i = 0; !rc && i < n; i++) {
            yn[2 * i] = cl[(size_t)i * (size_t)hp->n_cls_out + (size_t)hp->cls_yes];
            yn[2 * i + 1] = cl[(size_t)i * (size_t)hp->n_cls_out + (size_t)hp->cls_no];
        }
        free(cl);
    } else if (!rc)
        rc = cdx_model_head_logits(e->m, h, n, ans, 2, yn, err);
    for (int i = 0; !rc && i < n; i++) {
        /* softmax([no, yes])[1] = exp(log_softmax) of yes: 1 / (1 + exp(no - yes)) */
        scores[i] = (float)(1.0 / (1.0 + exp((double)yn[2 * i + 1] - (double)yn[2 * i])));
        if (logits) {
            logits[2 * i] = yn[2 * i];
            logits[2 * i + 1] = yn[2 * i + 1];
        }
    }
    free(h);
    free(yn);
    return rc;
}

static const char k_rr_prefix[] = "<|im_start|>system\nJudge whether the Document meets the requirements based on the "
                                  "Query and the Instruct provided. Note that the answer can only be \"yes\" or "
                                  "\"no\".<|im_end|>\n<|im_start|>user\n";
static const char k_rr_suffix[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
static const char k_rr_instruction[] = "Given a web search query, retrieve relevant passages that answer the query";

int cdx_rerank_format(const cdx_embedder *e, const char *query, const char *doc, const char *instruction,
                      int32_t **ids, int64_t *n, int64_t *n_full, cdx_err *err)
{
    *ids = NULL;
    *n = 0;
    if (!e->tok)
        return cdx_err_set(err, CDX_EINVAL, "the model has no tokenizer: give each pair as token ids");
    int32_t *pre = NULL, *suf = NULL, *m = NULL;
    size_t np = 0, ns = 0, nm = 0;
    char *mid = NULL;
    int rc = encode(e->tok, k_rr_prefix, sizeof k_rr_prefix - 1, false, &pre, &np, err);
    if (!rc)
        rc = encode(e->tok, k_rr_suffix, sizeof k_rr_suffix - 1, false, &suf, &ns, err);
    if (!rc && (int64_t)(np + ns) >= e->max_tokens)
        rc = cdx_err_set(err, CDX_EINVAL, "the reranker's template takes %zu of its %lld tokens", np + ns,
                         (long long)e->max_tokens);
    const char *ins = instruction ? instruction : k_rr_instruction;
    const size_t len = strlen(ins) + strlen(query) + strlen(doc) + 64;
    if (!rc && !(mid = malloc(len)))
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (!rc && mid) {
        snprintf(mid, len, "<Instruct>: %s\n<Query>: %s\n<Document>: %s", ins, query, doc);
        rc = encode(e->tok, mid, strlen(mid), false, &m, &nm, err);
    }
    if (!rc) {
        const size_t room = (size_t)e->max_tokens - np - ns, keep = nm < room ? nm : room;
        if (!(*ids = malloc((np + keep + ns) * sizeof **ids)))
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        else {
            memcpy(*ids, pre, np * sizeof *pre);
            memcpy(*ids + np, m, keep * sizeof *m);
            memcpy(*ids + np + keep, suf, ns * sizeof *suf);
            *n = (int64_t)(np + keep + ns);
            if (n_full)
                *n_full = (int64_t)(np + nm + ns);
        }
    }
    free(mid);
    free(m);
    free(pre);
    free(suf);
    return rc;
}

int cdx_rerank_texts(cdx_embedder *e, const char *query, const char *const *docs, int n, const char *instruction,
                     float *scores, cdx_err *err)
{
    if (!e->tok)
        return cdx_err_set(err, CDX_EINVAL, "the model has no tokenizer: give each pair as token ids");
    if (n < 1 || n > CDX_EMBED_MAX_INPUTS)
        return cdx_err_set(err, CDX_EINVAL, "%d documents; 1..%d in one call", n, CDX_EMBED_MAX_INPUTS);
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int64_t *lens = calloc((size_t)n, sizeof *lens);
    int rc = ids && lens ? CDX_OK : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < n; i++)
        rc = cdx_rerank_format(e, query, docs[i], instruction, &ids[i], &lens[i], NULL, err);
    if (!rc)
        rc = cdx_rerank_ids(e, (const int32_t *const *)ids, lens, n, scores, NULL, err);
    for (int i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
    free(lens);
    return rc;
}

void cdx_embed_truncate(const float *v, int64_t k, float *out)
{
    if (out != v)
        memmove(out, v, (size_t)k * sizeof *out);
    normalize(out, k);
}

int cdx_embed_ids(cdx_embedder *e, const int32_t *const *ids, const int64_t *lens, int n, float *out, cdx_err *err)
{
    if (e->task != CDX_TASK_EMBED)
        return cdx_err_set(err, CDX_EINVAL, "the model is served for %s, not embed", cdx_task_name(e->task));
    if (e->decoder) {
        int rc = check_inputs(e, ids, lens, n, err);
        if (rc)
            return rc;
        pthread_mutex_lock(&e->mu);
        rc = dec_last_hidden(e, ids, lens, n, out, err);
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; !rc && e->p.normalize && i < n; i++)
            normalize(out + (size_t)i * (size_t)e->dim, e->dim);
        return rc;
    }
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
