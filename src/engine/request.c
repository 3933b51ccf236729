/* A request's lifetime: submit and cancel (any thread), its tokens and text, the events it gets,
 * its images, and what it does with the logits of its last token. */
#include "engine/engine_impl.h"

#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

/* ---- sequences ---- */

void eng_seq_free(seq *s)
{
    if (!s)
        return;
    free(s->toks);
    free(s->state);
    free(s->blk);
    free(s->ktab);
    free(s->vtab);
    free(s->keys);
    free(s->top_ids);
    free(s->top_logits);
    free(s->top_lp);
    cdx_sampler_free(s->smp);
    cdx_matcher_free(s->matcher);
    for (int i = 0; i < s->n_stop; i++)
        free(s->stop[i]);
    free(s->stop);
    free(s->lora_use);
    free(s->text);
    free(s->piece);
    for (int i = 0; i < s->n_img; i++) {
        free(s->img[i].pixels);
        free(s->img[i].feat);
    }
    free(s->img);
    free(s->img_row);
    eng_spec_free(s);
    free(s);
}

static int seq_push_token(seq *s, int32_t t)
{
    int32_t *g = cdx_array_grow(s->toks, &s->cap_toks, (size_t)s->n_toks, sizeof *g);
    if (!g)
        return CDX_ENOMEM;
    s->toks = g;
    s->toks[s->n_toks++] = t;
    return CDX_OK;
}

static void text_push(seq *s, const char *p, size_t n)
{
    if (!cdx_bytes_reserve(&s->text, &s->cap_text, s->n_text + n + 1))
        return; /* text is lost, tokens are not */
    memcpy(s->text + s->n_text, p, n);
    s->n_text += n;
    s->text[s->n_text] = 0;
}

/* ---- events ---- */

static void emit(cdx_engine *e, seq *s, cdx_finish f, int32_t token, float lp, const char *text, size_t text_len,
                 const char *message)
{
    cdx_event ev = { .id = s->id, .user = s->user, .finish = f, .token = token, .index = s->n_gen - 1,
                     .logprob = lp, .n_top = f == CDX_FINISH_NONE ? s->n_top : 0, .top_ids = s->top_ids,
                     .top_logits = s->top_logits, .top_logprobs = s->top_lp, .text = text ? text : "",
                     .text_len = text_len, .n_prompt = s->n_prompt, .n_cached = s->n_cached,
                     .n_generated = s->n_gen, .ms_first = s->t_first > 0 ? s->t_first - s->t_submit : 0,
                     .message = message, .n_covered = s->n_covered,
                     .spec_proposer = s->sp.on ? e->proposer->name : NULL, .spec_proposed = s->sp.proposed,
                     .spec_accepted = s->sp.accepted, .spec_off = s->sp.turned_off };
    if (f != CDX_FINISH_NONE) {
        ev.token = -1;
        ev.index = s->n_gen;
    } else {
        ev.piece = s->piece ? s->piece : "";
        ev.piece_len = s->n_piece;
        ev.piece_first = s->piece_first;
    }
    if (s->on_event)
        s->on_event(&ev);
}

/* The request ends: the text still held is given with the final event (not after a stop string,
 * nor when cancelled), the blocks go back to the pool. */
void eng_seq_finish(cdx_engine *e, seq *s, cdx_finish f, const char *message)
{
    if (s->sp.on) {
        e->t_spec_req++;
        e->t_spec_off += s->sp.turned_off;
    }
    size_t from = s->n_emitted, len = 0;
    if (f == CDX_FINISH_LENGTH || (f == CDX_FINISH_STOP && s->n_emitted <= s->n_text)) {
        if (e->tok) {
            char buf[64];
            int n = cdx_tok_stream_flush(&s->ts, buf, sizeof buf);
            if (n > 0)
                text_push(s, buf, (size_t)n);
        }
        len = s->n_text - from;
        s->n_emitted = s->n_text;
        s->n_covered = s->n_raw; /* a dangling partial sequence went out as U+FFFD */
    }
    emit(e, s, f, -1, 0, s->text ? s->text + from : "", len, message);
    eng_seq_release_blocks(e, s);
    eng_seq_free(s);
}

/* The bytes token t adds to the text (cdx_event.piece), as the detokenizer is about to make them. */
static void seq_piece(const cdx_engine *e, seq *s, int32_t t)
{
    s->piece_first = s->ts.first;
    s->n_piece = 0;
    for (;;) {
        int n = cdx_tok_piece(e->tok, t, s->ts.first, cdx_tok_stream_skips(&s->ts, t), s->piece, s->cap_piece);
        if (n <= 0)
            return;
        if ((size_t)n <= s->cap_piece) {
            s->n_piece = (size_t)n;
            s->n_raw += n;
            return;
        }
        char *g = realloc(s->piece, (size_t)n);
        if (!g)
            return; /* the piece is lost, the text is not */
        s->piece = g;
        s->cap_piece = (size_t)n;
    }
}

/* After a new piece of text: what can be given now. Returns true when a stop string was found
 * (then everything before it has been given with *out and the request must stop). */
static bool text_ready(seq *s, size_t *out_from, size_t *out_len)
{
    *out_from = s->n_emitted;
    if (!s->n_stop) {
        *out_len = s->n_text - s->n_emitted;
        s->n_emitted = s->n_text;
        return false;
    }
    const size_t start = s->n_emitted >= s->max_stop ? s->n_emitted - s->max_stop + 1 : 0;
    size_t best = (size_t)-1;
    for (int i = 0; i < s->n_stop; i++) {
        const char *hit = memmem(s->text + start, s->n_text - start, s->stop[i], strlen(s->stop[i]));
        if (hit && (size_t)(hit - s->text) < best)
            best = (size_t)(hit - s->text);
    }
    if (best != (size_t)-1) {
        *out_len = best > s->n_emitted ? best - s->n_emitted : 0;
        s->n_emitted = s->n_text + 1; /* nothing more is ever given */
        return true;
    }
    /* hold the longest tail that a stop string starts with */
    size_t hold = 0;
    for (int i = 0; i < s->n_stop; i++) {
        const size_t L = strlen(s->stop[i]);
        for (size_t k = L - 1 < s->n_text - s->n_emitted ? L - 1 : s->n_text - s->n_emitted; k > hold; k--)
            if (!memcmp(s->text + s->n_text - k, s->stop[i], k)) {
                hold = k;
                break;
            }
    }
    *out_len = s->n_text - hold - s->n_emitted;
    s->n_emitted += *out_len;
    return false;
}

static bool is_eog(const cdx_engine *e, int32_t t)
{
    if (e->tok)
        return cdx_tok_is_eog(e->tok, t);
    for (int i = 0; i < e->hp->n_eos; i++)
        if (e->hp->eos_ids[i] == t)
            return true;
    return false;
}

/* s's last token was computed and `logits` follow it: choose and tell. Returns why s must end
 * now (CDX_FINISH_NONE: it goes on); *msg gets an error's text. */
cdx_finish eng_seq_on_logits(cdx_engine *e, seq *s, float *logits, double lse, const char **msg)
{
    const int64_t nv = e->hp->n_vocab;
    if (s->grammar) {
        /* the row is masked in place (it is this request's own); logprobs are then those of the
         * masked distribution */
        const cdx_finish f = eng_grammar_mask(&e->eg, e->tok, nv, s->grammar, &s->matcher, s->n_gen, logits, msg);
        if (f != CDX_FINISH_NONE)
            return f;
        if (s->logprobs)
            lse = cdx_logsumexp(cdx_forward_ctx_kernels(e->fc), logits, nv);
    }
    const int32_t t = cdx_sampler_sample(s->smp, logits, s->toks, s->n_toks);
    if ((!s->ignore_eos || s->grammar) && is_eog(e, t))
        return CDX_FINISH_STOP;
    if (s->grammar && eng_grammar_accept(&e->eg, s->matcher, t, msg))
        return CDX_FINISH_ERROR;
    if (seq_push_token(s, t)) {
        *msg = "out of memory for the generated tokens";
        return CDX_FINISH_ERROR;
    }
    s->n_gen++;
    e->t_generated++;
    if (s->n_gen == 1)
        s->t_first = cdx_time_ms();
    if (s->n_top) {
        cdx_top_logits(logits, nv, s->n_top, s->top_ids, s->top_logits);
        for (int i = 0; i < s->n_top; i++)
            s->top_lp[i] = (float)((double)s->top_logits[i] - lse);
    }
    const float lp = s->logprobs ? (float)((double)logits[t] - lse) : NAN;
    bool stopped = false;
    size_t from = s->n_emitted, len = 0;
    if (e->tok) {
        seq_piece(e, s, t);
        char piece[512];
        int n = cdx_tok_stream_put(&s->ts, t, piece, sizeof piece);
        if (n > 0)
            text_push(s, piece, (size_t)n);
        stopped = text_ready(s, &from, &len);
        /* the pieces' bytes the given text stands for: all that the decoder let out, less the
         * text still held (or, after a stop string, the text from the stop string on). Text
         * bytes and piece bytes match one for one except where invalid UTF-8 became U+FFFD. */
        const int64_t out = s->n_raw - (int64_t)s->ts.n_pend - (int64_t)(s->n_text - (from + len));
        s->n_covered = out < s->n_covered ? s->n_covered : out > s->n_raw ? s->n_raw : out;
    }
    emit(e, s, CDX_FINISH_NONE, t, lp, s->text ? s->text + from : "", len, NULL);
    if (stopped)
        return CDX_FINISH_STOP;
    if ((s->max_tokens > 0 && s->n_gen >= s->max_tokens) || s->n_toks >= e->o.n_ctx)
        return CDX_FINISH_LENGTH;
    return CDX_FINISH_NONE;
}

/* ---- images ---- */

/* Copies the request's pixels, keys each image by the SHA-256 of its floats, maps prompt
 * positions to feature rows (counts checked by the caller). */
static int seq_take_images(cdx_engine *e, seq *s, const cdx_request *r, cdx_err *err)
{
    const size_t tile = (size_t)(3 * e->vis.image_size * e->vis.image_size);
    s->img = calloc((size_t)r->n_images, sizeof *s->img);
    s->img_row = malloc((size_t)s->n_prompt * sizeof *s->img_row);
    if (!s->img || !s->img_row)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int64_t row = 0;
    for (int i = 0; i < r->n_images; i++) {
        seq_image *im = &s->img[i];
        const size_t bytes = (size_t)r->images[i].n_tiles * tile * sizeof(float);
        s->n_img = i + 1;
        if (!(im->pixels = malloc(bytes)))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for image %d (%zu MiB of pixels)", i, bytes >> 20);
        memcpy(im->pixels, r->images[i].pixels, bytes);
        im->n_tiles = r->images[i].n_tiles;
        im->row0 = row;
        row += im->n_tiles * e->vis.tokens_per_tile;
        unsigned int n = KEY_LEN;
        EVP_Digest(im->pixels, bytes, im->key, &n, EVP_sha256(), NULL);
    }
    int32_t k = 0;
    for (int64_t p = 0; p < s->n_prompt; p++)
        s->img_row[p] = s->toks[p] == e->vis.image_token_id ? k++ : -1;
    return CDX_OK;
}

/* The features of position p (an image token of the prompt), encoding its image first if needed. */
int eng_seq_image_row(cdx_engine *e, seq *s, int64_t p, const float **out, cdx_err *err)
{
    *out = NULL;
    const int32_t r = s->img_row && p < s->n_prompt ? s->img_row[p] : -1;
    if (r < 0)
        return CDX_OK;
    int k = 0;
    while (k + 1 < s->n_img && s->img[k + 1].row0 <= r)
        k++;
    seq_image *im = &s->img[k];
    if (!im->feat) {
        const size_t rows = (size_t)(im->n_tiles * e->vis.tokens_per_tile), nf = rows * (size_t)e->vis.n_embd;
        if (!(im->feat = malloc(nf * sizeof(float))))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for image features");
        int slot = 0;
        for (int i = 0; i < IMAGE_CACHE; i++) {
            if (e->icache[i].feat && e->icache[i].n == nf && !memcmp(e->icache[i].key, im->key, KEY_LEN)) {
                memcpy(im->feat, e->icache[i].feat, nf * sizeof(float));
                e->icache[i].used = ++e->icache_clock;
                free(im->pixels);
                im->pixels = NULL;
                *out = im->feat + (size_t)(r - im->row0) * (size_t)e->vis.n_embd;
                return CDX_OK;
            }
            if (e->icache[i].used < e->icache[slot].used)
                slot = i;
        }
        const double t0 = cdx_time_ms();
        int rc = cdx_vision_encode(e->fc, im->pixels, im->n_tiles, im->feat, err);
        if (rc) {
            free(im->feat);
            im->feat = NULL;
            return rc;
        }
        e->t_img_ms += cdx_time_ms() - t0;
        e->t_img_tiles += (uint64_t)im->n_tiles;
        float *keep = malloc(nf * sizeof(float)); /* no memory for the copy: just not kept */
        if (keep) {
            memcpy(keep, im->feat, nf * sizeof(float));
            free(e->icache[slot].feat);
            memcpy(e->icache[slot].key, im->key, KEY_LEN);
            e->icache[slot].feat = keep;
            e->icache[slot].n = nf;
            e->icache[slot].used = ++e->icache_clock;
        }
        free(im->pixels);
        im->pixels = NULL;
    }
    *out = im->feat + (size_t)(r - im->row0) * (size_t)e->vis.n_embd;
    return CDX_OK;
}

/* ---- submit / cancel (any thread) ---- */

int cdx_engine_submit(cdx_engine *e, const cdx_request *r, uint64_t *id, cdx_err *err)
{
    const cdx_hparams *hp = e->hp;
    if (id)
        *id = 0;
    if (!r->prompt || r->n_prompt <= 0)
        return cdx_err_set(err, CDX_EINVAL, "the request has no prompt tokens");
    for (int i = 0; r->lora && i < r->lora->n; i++)
        if (!r->lora->use[i].lora || cdx_lora_model(r->lora->use[i].lora) != e->m || !isfinite(r->lora->use[i].scale))
            return cdx_err_set(err, CDX_EINVAL, "adapter %d of the request %s", i,
                               !r->lora->use[i].lora ? "is NULL" : !isfinite(r->lora->use[i].scale)
                                                                         ? "has a scale that is not finite"
                                                                         : "was opened for another model");
    if (r->grammar && !e->tok)
        return cdx_err_set(err, CDX_EINVAL, "a grammar needs the model's tokenizer (the engine has none)");
    for (int64_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= hp->n_vocab)
            return cdx_err_set(err, CDX_EINVAL, "prompt token %lld is %d, outside the vocabulary (0..%lld)",
                               (long long)i, r->prompt[i], (long long)hp->n_vocab - 1);
    if (r->top_logprobs < 0 || r->top_logprobs > hp->n_vocab)
        return cdx_err_set(err, CDX_EINVAL, "top_logprobs is %d; expected 0..%lld", r->top_logprobs,
                           (long long)hp->n_vocab);
    if (r->n_stop < 0 || r->n_stop > 64 || (r->n_stop && !e->tok))
        return cdx_err_set(err, CDX_EINVAL, r->n_stop && !e->tok ? "stop strings need a tokenizer (this model has none)"
                                                                 : "%d stop strings; expected 0..64", r->n_stop);
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !*r->stop[i] || strlen(r->stop[i]) > 4096)
            return cdx_err_set(err, CDX_EINVAL, "stop string %d is empty or longer than 4096 bytes", i);
    /* images: the model takes them, and the prompt has one image token per feature row */
    int64_t n_img_tok = 0, n_img_rows = 0;
    if (r->n_images < 0 || r->n_images > 256 || (r->n_images && !r->images))
        return cdx_err_set(err, CDX_EINVAL, "%d images; expected 0..256", r->n_images);
    if (r->n_images && !e->has_vision) {
        const char *why = cdx_model_images_refused(e->m);
        return cdx_err_set(err, CDX_EINVAL, "the request has %d images; this model takes no images%s%s%s", r->n_images,
                           why ? " (" : "", why ? why : "", why ? ")" : "");
    }
    for (int i = 0; i < r->n_images; i++) {
        if (!r->images[i].pixels || r->images[i].n_tiles < 1 || r->images[i].n_tiles > 4096)
            return cdx_err_set(err, CDX_EINVAL, "image %d has %lld tiles; expected 1..4096", i,
                               (long long)r->images[i].n_tiles);
        n_img_rows += r->images[i].n_tiles * e->vis.tokens_per_tile;
    }
    for (int64_t i = 0; e->has_vision && i < r->n_prompt; i++)
        n_img_tok += r->prompt[i] == e->vis.image_token_id;
    if (n_img_tok != n_img_rows)
        return cdx_err_set(err, CDX_EINVAL, "the prompt has %lld image tokens (id %d); the %d images give %lld feature "
                           "rows (%lld per tile)", (long long)n_img_tok, e->vis.image_token_id, r->n_images,
                           (long long)n_img_rows, (long long)e->vis.tokens_per_tile);
    /* can it ever fit? */
    const int64_t n_ctx = e->o.n_ctx;
    if (r->n_prompt >= n_ctx || (r->max_tokens > 0 && r->n_prompt + r->max_tokens > n_ctx))
        return cdx_err_set(err, CDX_ERESOURCE_LIMIT, "the request needs %lld positions (%lld prompt + %lld to generate); "
                           "the context holds %lld", (long long)(r->n_prompt + (r->max_tokens > 0 ? r->max_tokens : 1)),
                           (long long)r->n_prompt, (long long)(r->max_tokens > 0 ? r->max_tokens : 1), (long long)n_ctx);
    const int64_t span = r->max_tokens > 0 ? r->n_prompt + r->max_tokens : n_ctx;
    const int64_t need = (span + CDX_KV_BLOCK - 1) / CDX_KV_BLOCK;
    if (need > e->o.n_blocks)
        return cdx_err_set(err, CDX_ERESOURCE_LIMIT, "the request needs up to %lld KV blocks of %d positions; the pool "
                           "has %lld", (long long)need, CDX_KV_BLOCK, (long long)e->o.n_blocks);

    seq *s = calloc(1, sizeof *s);
    if (!s)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    s->cap_toks = (size_t)r->n_prompt + 16;
    s->toks = malloc(s->cap_toks * sizeof *s->toks);
    s->n_top = r->top_logprobs;
    s->logprobs = r->logprobs || r->top_logprobs > 0;
    if (s->n_top) {
        s->top_ids = malloc((size_t)s->n_top * sizeof *s->top_ids);
        s->top_logits = malloc((size_t)s->n_top * sizeof *s->top_logits);
        s->top_lp = malloc((size_t)s->n_top * sizeof *s->top_lp);
    }
    s->stop = r->n_stop ? calloc((size_t)r->n_stop, sizeof *s->stop) : NULL;
    s->snap_blk = NONE; /* a hybrid model's state is allocated on admission (a queued request holds none) */
    int rc = !s->toks || (s->n_top && (!s->top_ids || !s->top_logits || !s->top_lp)) || (r->n_stop && !s->stop)
           ? cdx_err_set(err, CDX_ENOMEM, "out of memory") : CDX_OK;
    if (!rc)
        rc = cdx_sampler_create(&r->sampling, hp->n_vocab, &s->smp, err);
    if (!rc && eng_spec_init(e, s, r->no_speculation))
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < r->n_stop; i++) {
        if (!(s->stop[i] = strdup(r->stop[i])))
            rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
        s->n_stop = i + 1;
        size_t L = strlen(r->stop[i]);
        s->max_stop = L > s->max_stop ? L : s->max_stop;
    }
    if (rc) {
        eng_seq_free(s);
        return rc;
    }
    memcpy(s->toks, r->prompt, (size_t)r->n_prompt * sizeof *s->toks);
    s->n_toks = s->n_prompt = r->n_prompt;
    if (r->n_images && (rc = seq_take_images(e, s, r, err))) {
        eng_seq_free(s);
        return rc;
    }
    s->max_tokens = r->max_tokens;
    s->ignore_eos = r->ignore_eos;
    s->grammar = r->grammar;
    memcpy(s->root, e->root_key, KEY_LEN);
    if (r->lora && r->lora->n > 0) {
        /* K/V computed under adapters are keyed apart: the root mixes in each adapter's fingerprint
         * and scale, so a prefix is shared only between requests with the same adapters */
        if (!(s->lora_use = malloc((size_t)r->lora->n * sizeof *s->lora_use))) {
            eng_seq_free(s);
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        }
        memcpy(s->lora_use, r->lora->use, (size_t)r->lora->n * sizeof *s->lora_use);
        s->lora = (cdx_lora_set){ s->lora_use, r->lora->n };
        EVP_MD_CTX *c = EVP_MD_CTX_new();
        unsigned int kn = KEY_LEN;
        EVP_DigestInit_ex(c, EVP_sha256(), NULL);
        EVP_DigestUpdate(c, e->root_key, KEY_LEN);
        for (int i = 0; i < r->lora->n; i++) {
            uint8_t fp[32];
            cdx_lora_fingerprint(r->lora->use[i].lora, fp);
            EVP_DigestUpdate(c, fp, sizeof fp);
            EVP_DigestUpdate(c, &r->lora->use[i].scale, sizeof(float));
        }
        EVP_DigestFinal_ex(c, s->root, &kn);
        EVP_MD_CTX_free(c);
    }
    s->skip_special = r->skip_special;
    s->on_event = r->on_event;
    s->user = r->user;
    s->t_submit = cdx_time_ms();
    if (e->tok) {
        cdx_tok_stream_init(&s->ts, e->tok, r->skip_special);
        s->ts.keep_marks = r->keep_marks;
        /* the first piece follows the prompt's text: it keeps its leading space unless the prompt
         * is nothing but special tokens */
        for (int64_t i = 0; i < s->n_prompt; i++)
            if (!(cdx_tok_attr(e->tok, s->toks[i]) & CDX_TOK_CONTROL)) {
                s->ts.first = false;
                break;
            }
    }
    pthread_mutex_lock(&e->mu);
    if (e->n_inbox + e->n_waiting >= e->o.max_queue) {
        const int64_t q = e->n_inbox + e->n_waiting;
        pthread_mutex_unlock(&e->mu);
        eng_seq_free(s);
        return cdx_err_set(err, CDX_ERESOURCE_BUSY, "%lld requests are waiting; the queue holds %d (try again later)",
                           (long long)q, e->o.max_queue);
    }
    const uint64_t sid = s->id = e->next_id++;
    if (e->inbox_tail) e->inbox_tail->next = s; else e->inbox = s;
    e->inbox_tail = s;
    e->n_inbox++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    /* s belongs to the engine thread now (it may already have run and freed it) */
    if (id)
        *id = sid;
    return CDX_OK;
}

void cdx_engine_cancel(cdx_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    uint64_t *g = cdx_array_grow(e->cancels, &e->cap_cancels, e->n_cancels, sizeof *g);
    if (!g) {
        pthread_mutex_unlock(&e->mu);
        return; /* out of memory: the request runs to its end */
    }
    e->cancels = g;
    e->cancels[e->n_cancels++] = id;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}
