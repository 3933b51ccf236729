/* The engine's options, creation and teardown, and what other threads may ask of it (busy, wait,
 * stats). The contract is in include/caldrix/engine.h; the private types in engine_impl.h. */
#include "engine/engine_impl.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

cdx_engine_opts cdx_engine_defaults(void)
{
    return (cdx_engine_opts){ .n_threads = 0, .max_batch = 8, .token_budget = 512, .max_queue = 64 };
}

const char *cdx_spec_name(int spec)
{
    static const char *const names[] = { [CDX_SPEC_OFF] = "off", [CDX_SPEC_LOOKUP] = "lookup", [CDX_SPEC_AUTO] = "auto" };
    return (unsigned)spec < sizeof names / sizeof names[0] ? names[spec] : "";
}

int cdx_spec_parse(const char *name)
{
    for (int i = CDX_SPEC_OFF; i <= CDX_SPEC_AUTO; i++)
        if (name && !strcmp(name, cdx_spec_name(i)))
            return i;
    return -1;
}

cdx_request cdx_request_defaults(void)
{
    return (cdx_request){ .sampling = cdx_sampler_defaults() };
}

const char *cdx_finish_name(cdx_finish f)
{
    static const char *const names[] = { "", "stop", "length", "cancelled", "error" };
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "";
}

/* ---- create / free ---- */

/* What cdx_engine_create accepts (engine.h): the one place these ranges are written. */
static const cdx_engine_range k_ranges[CDX_OPT_COUNT] = {
    [CDX_OPT_THREADS] = { "--threads", "n_threads", 1, CDX_MAX_THREADS }, /* hi: cdx_threads_max() */
    [CDX_OPT_CTX] = { "--ctx", "n_ctx", 1, 1 << 24 },
    [CDX_OPT_KV_BLOCKS] = { "--kv-blocks", "n_blocks", 1, 1 << 24 },
    [CDX_OPT_MAX_BATCH] = { "--max-batch", "max_batch", 1, 1024 },
    [CDX_OPT_TOKEN_BUDGET] = { "", "token_budget", 1, 1 << 20 }, /* no command sets it */
    [CDX_OPT_MAX_QUEUE] = { "--max-queue", "max_queue", 1, 1 << 20 },
    [CDX_OPT_DRAFT_MAX] = { "--draft-max", "draft_max", 1, 64 },
    [CDX_OPT_DRAFT_MIN] = { "--draft-min", "draft_min", 1, 64 },
};

cdx_engine_range cdx_engine_opt_range(cdx_engine_opt_id id)
{
    if ((unsigned)id >= CDX_OPT_COUNT)
        return (cdx_engine_range){ "", "", 0, 0 };
    cdx_engine_range r = k_ranges[id];
    if (id == CDX_OPT_THREADS)
        r.hi = cdx_threads_max();
    return r;
}

/* Every option set (> 0) in its row of k_ranges. */
static int check_ranges(const cdx_engine_opts *o, cdx_err *err)
{
    const int64_t given[CDX_OPT_COUNT] = { [CDX_OPT_THREADS] = o->n_threads, [CDX_OPT_CTX] = o->n_ctx,
                                           [CDX_OPT_KV_BLOCKS] = o->n_blocks, [CDX_OPT_MAX_BATCH] = o->max_batch,
                                           [CDX_OPT_TOKEN_BUDGET] = o->token_budget,
                                           [CDX_OPT_MAX_QUEUE] = o->max_queue, [CDX_OPT_DRAFT_MAX] = o->draft_max,
                                           [CDX_OPT_DRAFT_MIN] = o->draft_min };
    for (int i = 0; i < CDX_OPT_COUNT; i++) {
        const cdx_engine_range r = cdx_engine_opt_range((cdx_engine_opt_id)i);
        if (given[i] > 0 && (given[i] < r.lo || given[i] > r.hi))
            return cdx_err_set(err, CDX_EINVAL, "%s is %lld; it must be in %lld..%lld%s%s%s", r.field,
                               (long long)given[i], (long long)r.lo, (long long)r.hi, *r.flag ? " (" : "", r.flag,
                               *r.flag ? ")" : "");
    }
    return CDX_OK;
}

int cdx_engine_create(const cdx_model *m, const cdx_tok *tok, const cdx_engine_opts *o, cdx_engine **out,
                      cdx_err *err)
{
    *out = NULL;
    const cdx_hparams *hp = cdx_model_hparams(m);
    if (cdx_model_is_encoder(m))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "the model is an encoder (%s): it embeds text and generates none; use "
                           "caldrix embed, or caldrix serve (its /v1/embeddings)", hp->arch_name);
    cdx_engine_opts eo = o ? *o : cdx_engine_defaults();
    if (eo.max_batch <= 0)
        eo.max_batch = 8;
    if (eo.token_budget <= 0)
        eo.token_budget = 512;
    if (eo.max_queue <= 0)
        eo.max_queue = 64;
    int rc = check_ranges(&eo, err);
    if (rc)
        return rc;
    if (!(eo.max_round_ms >= 0 && eo.max_round_ms <= 3600e3)) /* (a nan fails too) */
        return cdx_err_set(err, CDX_EINVAL, "max_round_ms is %g; it must be in 0..3600000 (--max-round-ms)",
                           eo.max_round_ms);
    if (eo.draft_max <= 0)
        eo.draft_max = eo.draft_min > 8 ? eo.draft_min : 8;
    if (eo.draft_min <= 0)
        eo.draft_min = 1;
    if (eo.draft_min > eo.draft_max)
        return cdx_err_set(err, CDX_EINVAL, "draft_min is %d, more than draft_max (%d) (--draft-min, --draft-max)",
                           eo.draft_min, eo.draft_max);
    if (!*cdx_spec_name(eo.spec))
        return cdx_err_set(err, CDX_EINVAL, "spec is %d; expected off, lookup or auto (--spec)", eo.spec);
    if (eo.draft && eo.spec == CDX_SPEC_OFF)
        eo.spec = CDX_SPEC_AUTO; /* a draft given is a draft used */
    if (eo.draft && eo.spec == CDX_SPEC_LOOKUP)
        return cdx_err_set(err, CDX_EINVAL, "--spec lookup with a draft model: lookup uses none (give --spec auto)");
    if (eo.draft) {
        const cdx_hparams *dh = cdx_model_hparams(eo.draft);
        if (cdx_model_state_bytes(eo.draft))
            return cdx_err_set(err, CDX_EINVAL, "the draft model (%s) carries a recurrent state, which cannot be cut "
                               "back to the kept tokens: it cannot draft (--draft)", dh->arch_name ? dh->arch_name : "?");
        const int64_t lo = dh->n_vocab < hp->n_vocab ? dh->n_vocab : hp->n_vocab,
                      hi = dh->n_vocab < hp->n_vocab ? hp->n_vocab : dh->n_vocab;
        if (hi - lo > hi / 8)
            return cdx_err_set(err, CDX_EINVAL, "the draft model has %lld token ids and the model %lld: not one "
                               "vocabulary (--draft)", (long long)dh->n_vocab, (long long)hp->n_vocab);
    }
    if (eo.spec != CDX_SPEC_OFF && cdx_model_state_bytes(m))
        return cdx_err_set(err, CDX_EINVAL, "speculative decoding (--spec %s) needs a model whose cache can be cut "
                           "back to the kept tokens; this model (%s) carries a recurrent state that advances over "
                           "every scored position and is not rolled back (use --spec off)", cdx_spec_name(eo.spec),
                           hp->arch_name ? hp->arch_name : "a hybrid model");
    /* an f16 cache rounds as ggml's does (f32 models); a bf16 cache holds a bf16 model's K and V exactly */
    const bool bf16_model = cdx_model_dtype(m) == CDX_DTYPE_BF16;
    if (eo.kv_type != CDX_TYPE_F32 && eo.kv_type != (bf16_model ? CDX_TYPE_BF16 : CDX_TYPE_F16))
        return cdx_err_set(err, CDX_EINVAL, "KV cache type %s for a model computing in %s; expected f32 or %s",
                           cdx_type_name(eo.kv_type), cdx_dtype_name(cdx_model_dtype(m)), bf16_model ? "bf16" : "f16");
    if (eo.n_ctx <= 0)
        eo.n_ctx = hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    const int64_t per_seq = (eo.n_ctx + CDX_KV_BLOCK - 1) / CDX_KV_BLOCK;
    if (eo.n_blocks <= 0 && (rc = check_ranges(&(cdx_engine_opts){ .n_blocks = per_seq * eo.max_batch }, err)))
        return rc; /* --ctx x --max-batch over the pool's row */
    if (eo.n_blocks <= 0)
        eo.n_blocks = per_seq * eo.max_batch;
    if (eo.stage && eo.kv_store)
        return cdx_err_set(err, CDX_EINVAL, "a prefix store (--kv-store %s) with a model split by layers: the store would "
                           "hold this stage's layers only", eo.kv_store);
    if (eo.stage && (eo.stage->layer0 != 0 || eo.stage->layer1 <= 0 || eo.stage->layer1 > hp->n_layer))
        return cdx_err_set(err, CDX_EINVAL, "the engine runs the first stage of a split model: layers 0..%lld of %lld "
                           "asked, layers 0..k wanted", (long long)eo.stage->layer1 - 1, (long long)hp->n_layer);
    /* the layers whose K/V this engine's blocks hold: the stage's, else the model's */
    const int64_t kv_layers = eo.stage ? eo.stage->layer1 - eo.stage->layer0 : cdx_hparams_kv_layers(hp);
    const uint64_t block_bytes = 2 * (uint64_t)kv_layers * CDX_KV_BLOCK *
                                 (uint64_t)(hp->n_head_kv * hp->head_dim) * (eo.kv_type == CDX_TYPE_F32 ? 4 : 2);
    if (eo.kv_bytes_max && (uint64_t)eo.n_blocks > eo.kv_bytes_max / (block_bytes ? block_bytes : 1))
        return cdx_err_set(err, CDX_EINVAL, "n_blocks is %lld (--kv-blocks; by default --max-batch sequences of --ctx): "
                           "a KV pool of %.1f GiB when full (%llu bytes a block of %d positions), more than the %.1f "
                           "GiB it may take", (long long)eo.n_blocks,
                           (double)eo.n_blocks * (double)block_bytes / (1 << 30), (unsigned long long)block_bytes,
                           CDX_KV_BLOCK, (double)eo.kv_bytes_max / (1 << 30));
    if (eo.token_budget < eo.max_batch)
        eo.token_budget = eo.max_batch; /* every decoding sequence fits in one round */
    cdx_engine *e = calloc(1, sizeof *e);
    if (!e)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    e->m = m;
    e->tok = tok;
    e->hp = hp;
    e->o = eo;
    e->o.kv_store = NULL; /* the caller's string: e->store is ours */
    e->kv_dim = hp->n_head_kv * hp->head_dim;
    e->block_floats = (size_t)kv_layers * CDX_KV_BLOCK * (size_t)e->kv_dim;
    e->state_bytes = cdx_model_state_bytes(m);
    /* snapshots: 1 GiB of them, and never fewer than two per running sequence */
    e->max_snaps = e->state_bytes ? (int64_t)(((size_t)1 << 30) / e->state_bytes) : 0;
    if (e->max_snaps < 2 * (int64_t)eo.max_batch + 8)
        e->max_snaps = 2 * (int64_t)eo.max_batch + 8;
    e->elem_bytes = eo.kv_type == CDX_TYPE_F32 ? 4 : 2;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->next_id = 1;
    /* the root key: the model's fingerprint and the KV storage type */
    uint8_t fp[KEY_LEN + 8];
    cdx_model_fingerprint(m, fp);
    memcpy(fp + KEY_LEN, eo.kv_type == CDX_TYPE_F16 ? "kv:f16\0\0" : eo.kv_type == CDX_TYPE_BF16 ? "kv:bf16\0" : "kv:f32\0\0", 8);
    unsigned int kn = KEY_LEN;
    EVP_Digest(fp, sizeof fp, e->root_key, &kn, EVP_sha256(), NULL);

    e->shape = (kv_store_shape){ .positions = CDX_KV_BLOCK, .n_layer = (uint64_t)kv_layers,
                                 .kv_dim = (uint64_t)e->kv_dim, .n_elems = e->block_floats,
                                 .elem_bytes = (uint32_t)e->elem_bytes, .state_bytes = e->state_bytes };
    memcpy(e->shape.root, e->root_key, KEY_LEN);
    rc = eo.kv_store ? kv_store_open(eo.kv_store, err) : CDX_OK;
    if (!rc && eo.kv_store && !(e->store = strdup(eo.kv_store)))
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (!rc)
        rc = cdx_forward_ctx_create_on(m, eo.token_budget, eo.n_threads, eo.pool, eo.kernels, &e->fc, err);
    if (!rc && eo.stage)
        rc = cdx_forward_ctx_set_stage(e->fc, eo.stage, err);
    if (rc) {
        cdx_engine_free(e);
        return rc;
    }
    const int64_t nb = eo.n_blocks;
    e->blocks = calloc((size_t)nb, sizeof *e->blocks);
    e->free_stack = malloc((size_t)nb * sizeof *e->free_stack);
    e->n_buckets = 16;
    while (e->n_buckets < (uint64_t)nb * 2)
        e->n_buckets *= 2;
    e->buckets = malloc(e->n_buckets * sizeof *e->buckets);
    const size_t B = (size_t)eo.token_budget, S = (size_t)eo.max_batch;
    e->proposer = eo.spec == CDX_SPEC_OFF ? NULL : eo.draft ? &eng_proposer_draft : &eng_proposer_lookup;
    e->draft = eo.draft;
    if (eo.draft) {
        e->draft_vocab = cdx_model_hparams(eo.draft)->n_vocab;
        const size_t wm = cdx_model_weight_bytes(m), wd = cdx_model_weight_bytes(eo.draft);
        e->draft_ratio = wm > 0 ? (double)wd / (double)wm : 1;
        if (!(e->draft_logits = malloc((size_t)e->draft_vocab * sizeof(float)))) {
            cdx_engine_free(e);
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        }
        if ((rc = cdx_forward_ctx_create_on(eo.draft, eo.token_budget, eo.n_threads, cdx_forward_ctx_pool(e->fc),
                                            eo.kernels, &e->draft_fc, err))) {
            cdx_engine_free(e);
            return rc;
        }
    }
    e->max_logits = (int64_t)S * (e->proposer ? 1 + eo.draft_max : 1);
    if (e->max_logits > eo.token_budget && e->max_logits > (int64_t)S)
        e->max_logits = eo.token_budget > (int64_t)S ? eo.token_budget : (int64_t)S; /* rows are tokens */
    const size_t L = (size_t)e->max_logits;
    e->b_tok = malloc(B * sizeof *e->b_tok);
    e->b_seq = malloc(B * sizeof *e->b_seq);
    e->b_pos = malloc(B * sizeof *e->b_pos);
    e->b_want = malloc(B * sizeof *e->b_want);
    e->b_embd = calloc(B, sizeof *e->b_embd);
    e->b_lora = calloc(B, sizeof *e->b_lora);
    e->has_vision = cdx_model_vision(m, &e->vis);
    e->b_seqs = malloc(S * sizeof *e->b_seqs);
    e->b_kv = malloc(S * sizeof *e->b_kv);
    e->b_logit_seq = malloc(L * sizeof *e->b_logit_seq);
    e->b_logit_rows = malloc(L * sizeof *e->b_logit_rows);
    e->b_lse = malloc(L * sizeof *e->b_lse);
    e->b_lse_rows = malloc(L * sizeof *e->b_lse_rows);
    e->logits = malloc(L * (size_t)hp->n_vocab * sizeof(float));
    if (!e->blocks || !e->free_stack || !e->buckets || !e->b_tok || !e->b_seq || !e->b_pos || !e->b_want || !e->b_embd || !e->b_lora ||
        !e->b_seqs || !e->b_kv || !e->b_logit_seq || !e->b_logit_rows || !e->b_lse || !e->b_lse_rows || !e->logits) {
        cdx_engine_free(e);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for an engine of %lld KV blocks", (long long)nb);
    }
    /* a first stage's pipeline: its groups' buffers, about max_batch / groups sequences each */
    const int64_t l1 = eo.stage ? eo.stage->layer1 : hp->n_layer;
    if (eo.split_groups < 0 || eo.split_groups > ENG_MAX_GROUPS) {
        cdx_engine_free(e);
        return cdx_err_set(err, CDX_EINVAL, "split_groups is %d; it must be in 0..%d", eo.split_groups, ENG_MAX_GROUPS);
    }
    int g = eo.split_groups ? eo.split_groups : eo.stage && eo.stage->n_micro > 2 ? eo.stage->n_micro : 2;
    g = g > ENG_MAX_GROUPS ? ENG_MAX_GROUPS : g;
    if (l1 < hp->n_layer && g >= 2 && !e->proposer && eo.max_batch >= 2) {
        e->n_groups = g;
        e->fl_cap = (eo.max_batch + g - 1) / g;
        for (int i = 0; i < g; i++) {
            eng_flight *f = &e->fl[i];
            const size_t c = (size_t)e->fl_cap;
            f->tok = malloc(c * sizeof *f->tok);
            f->seq = malloc(c * sizeof *f->seq);
            f->pos = malloc(c * sizeof *f->pos);
            f->want = malloc(c * sizeof *f->want);
            f->lora = malloc(c * sizeof *f->lora);
            f->seqs = malloc(c * sizeof *f->seqs);
            f->kv = malloc(c * sizeof *f->kv);
            f->logits = malloc(c * (size_t)hp->n_vocab * sizeof *f->logits);
            f->lse = malloc(c * sizeof *f->lse);
            f->lse_rows = malloc(c * sizeof *f->lse_rows);
            if (!f->tok || !f->seq || !f->pos || !f->want || !f->lora || !f->seqs || !f->kv || !f->logits || !f->lse ||
                !f->lse_rows) {
                cdx_engine_free(e);
                return cdx_err_set(err, CDX_ENOMEM, "out of memory for %d decoding groups of %lld sequences", g,
                                   (long long)e->fl_cap);
            }
        }
    }
    for (uint64_t i = 0; i < e->n_buckets; i++)
        e->buckets[i] = NONE;
    for (int64_t i = 0; i < nb; i++) {
        e->blocks[i].hnext = e->blocks[i].prev = e->blocks[i].next = NONE;
        e->free_stack[i] = (int32_t)(nb - 1 - i); /* block 0 first */
    }
    e->n_free = nb;
    e->lru_head = e->lru_tail = NONE;
    e->stats = (cdx_engine_stats){ .n_ctx = eo.n_ctx, .n_blocks = nb, .blocks_free = nb, .max_batch = eo.max_batch,
                                   .max_queue = eo.max_queue, .kv_pool_bytes = (uint64_t)nb * block_bytes,
                                   .token_budget = eo.token_budget, .max_round_ms = eo.max_round_ms,
                                   .spec_proposer = e->proposer ? e->proposer->name : NULL,
                                   .split_groups = e->n_groups };
    *out = e;
    return CDX_OK;
}

void cdx_engine_free(cdx_engine *e)
{
    if (!e)
        return;
    eng_pipe_drain(e); /* answers still on the line are taken off it */
    seq *lists[] = { e->inbox, e->waiting, e->running };
    for (int i = 0; i < 3; i++)
        for (seq *s = lists[i], *n; s; s = n) {
            n = s->next;
            eng_seq_free(s);
        }
    for (int64_t i = 0; e->blocks && e->store && i < e->o.n_blocks; i++)
        if (e->blocks[i].keyed && !e->blocks[i].stored)
            kv_store_write(e->store, &e->shape, e->blocks[i].key, e->blocks[i].k, e->blocks[i].v, e->blocks[i].snap);
    free(e->store);
    for (int64_t i = 0; e->blocks && i < e->o.n_blocks; i++)
        free(e->blocks[i].snap);
    for (int64_t i = 0; i < e->n_slabs; i++) /* the blocks' K and V */
        free(e->slabs[i]);
    free(e->slabs);
    free(e->blocks);
    free(e->free_stack);
    free(e->buckets);
    free(e->b_tok);
    free(e->b_seq);
    free(e->b_pos);
    free(e->b_want);
    free(e->b_embd);
    free(e->b_lora);
    for (int i = 0; i < IMAGE_CACHE; i++)
        free(e->icache[i].feat);
    free(e->b_seqs);
    free(e->b_kv);
    free(e->b_logit_seq);
    free(e->b_logit_rows);
    free(e->b_lse);
    free(e->b_lse_rows);
    free(e->logits);
    free(e->cancels);
    for (int i = 0; i < ENG_MAX_GROUPS; i++) {
        eng_flight *f = &e->fl[i];
        free(f->tok); free(f->seq); free(f->pos); free(f->want); free(f->lora); free(f->seqs); free(f->kv);
        free(f->logits); free(f->lse); free(f->lse_rows);
    }
    eng_grammar_free(&e->eg);
    cdx_forward_ctx_free(e->draft_fc);
    free(e->draft_logits);
    cdx_forward_ctx_free(e->fc);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* ---- asked from any thread ---- */

bool cdx_engine_busy(cdx_engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool busy = e->n_inbox + e->n_waiting + e->n_running > 0 || e->n_cancels > 0;
    pthread_mutex_unlock(&e->mu);
    return busy;
}

void cdx_engine_wait(cdx_engine *e, int ms)
{
    pthread_mutex_lock(&e->mu);
    if (!e->n_inbox && !e->n_cancels && !e->n_waiting && !e->n_running) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
}

void cdx_engine_get_stats(cdx_engine *e, cdx_engine_stats *st)
{
    pthread_mutex_lock(&e->mu);
    *st = e->stats;
    pthread_mutex_unlock(&e->mu);
}
