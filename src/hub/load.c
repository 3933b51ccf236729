/* cdx_load: the one load sequence of run, bench and serve (caldrix/load.h). */
#include "caldrix/load.h"
#include "caldrix/pool.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

cdx_load_opts cdx_load_defaults(void)
{
    return (cdx_load_opts){ .tokenizer = true };
}

int cdx_load_tokenizer(const char *path, const cdx_model *m, cdx_tok **tok, cdx_err *err)
{
    *tok = NULL;
    const cdx_gguf *g = cdx_model_gguf(m);
    if (g)
        return cdx_gguf_find(g, "tokenizer.ggml.model") ? cdx_tok_open_gguf(g, tok, err) : CDX_OK;
    if (!path)
        return CDX_OK;
    static const char *const files[] = { "tokenizer.json", "tokenizer.model", "vocab.json" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", path, files[i]);
        if (stat(p, &st) == 0)
            return cdx_tok_open_dir(path, tok, err);
    }
    return CDX_OK;
}

int cdx_load_image_proc(const char *dir, const cdx_model *m, const char *const *opts, int n_opts, cdx_image_proc *pp,
                        cdx_err *err)
{
    cdx_vision_info vi;
    const char *why = cdx_model_images_refused(m); /* Qwen2-VL: a tower caldrix does not compute */
    if (!cdx_model_vision(m, &vi))
        return why ? cdx_err_set(err, CDX_EINVAL, "%s takes no images (%s)", dir, why)
                   : cdx_err_set(err, CDX_EINVAL, "%s takes no images (it has no vision tower)", dir);
    int rc = cdx_image_proc_read(dir, pp, err);
    for (int i = 0; !rc && i < n_opts; i++) {
        const char *eq = strchr(opts[i], '=');
        if (!eq || eq == opts[i])
            return cdx_err_set(err, CDX_EINVAL, "--image-opt \"%s\": expected KEY=JSON (e.g. do_image_splitting=false)",
                               opts[i]);
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - opts[i]), opts[i]);
        rc = cdx_image_proc_set(pp, key, eq + 1, err);
    }
    if (!rc && pp->max_image_size != vi.image_size)
        rc = cdx_err_set(err, CDX_EINVAL, "max_image_size is %lld; the vision tower takes tiles of %lld pixels",
                         (long long)pp->max_image_size, (long long)vi.image_size);
    if (!rc && pp->image_seq_len != vi.tokens_per_tile)
        rc = cdx_err_set(err, CDX_EINVAL, "image_seq_len is %lld; the vision tower gives %lld tokens per tile",
                         (long long)pp->image_seq_len, (long long)vi.tokens_per_tile);
    return rc;
}

void cdx_load_close(cdx_loaded *l)
{
    if (!l)
        return;
    cdx_embedder_close(l->embedder);
    cdx_engine_free(l->engine);
    cdx_load_close(l->draft); /* after the engine that borrowed it */
    cdx_chat_setup_close(&l->chat);
    cdx_tok_close(l->tok);
    cdx_model_close(l->model);
    free(l->resolved);
    free(l->path);
    free(l);
}

/* The reference to a path: one that exists opens as it is (no admission, as before this call
 * existed); anything else is resolved, and admission may pick a weight budget. */
static int resolve(const char *ref, const cdx_load_opts *o, cdx_loaded *l, cdx_err *err)
{
    struct stat st;
    if (o->paths_only || stat(ref, &st) == 0)
        return (l->path = strdup(ref)) ? CDX_OK : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    cdx_hub_opts ho = o->hub ? *o->hub : (cdx_hub_opts){ 0 };
    uint64_t admitted = 0;
    ho.weight_budget = o->weight_budget;
    ho.budget_out = &admitted;
    ho.dtype = (int)o->dtype;
    int rc = cdx_hub_resolve(ref, &ho, &l->resolved, err);
    if (rc < 0)
        return rc;
    if (admitted && !l->weight_budget)
        l->weight_budget = admitted; /* admission chose a budget for a mixture of experts too big for memory */
    return (l->path = strdup(l->resolved)) ? CDX_OK : cdx_err_set(err, CDX_ENOMEM, "out of memory");
}

/* ---- a draft model (opts.draft) ---- */

/* What refuses a draft by itself, before the model loads: a mixture of experts, a vision model, a
 * recurrent state (which cannot be cut back to the kept tokens). */
static int draft_refused_alone(const char *dname, const cdx_model *d, cdx_err *err)
{
    const cdx_hparams *dh = cdx_model_hparams(d);
    const char *arch = dh->arch_name ? dh->arch_name : "?";
    cdx_vision_info vi;
    if (dh->n_expert > 0 || cdx_model_vision(d, &vi))
        return cdx_err_set(err, CDX_EINVAL, "--draft %s is %s (%s): a draft is a small dense text model", dname,
                           dh->n_expert > 0 ? "a mixture of experts" : "a vision model", arch);
    if (cdx_model_state_bytes(d))
        return cdx_err_set(err, CDX_EINVAL, "--draft %s (%s) carries a recurrent state, which cannot be cut back to "
                           "the kept tokens: it cannot draft", dname, arch);
    return CDX_OK;
}

/* Whether draft d may draft for model t: one vocabulary (sizes within 1/8: padding may differ, as
 * Qwen's do; the same text and special-token kind at every id both have; the same BOS and EOS), no
 * more multiply-adds a token, a model that can speculate. */
static int draft_refused_for(const char *dname, const cdx_loaded *d, const char *tname, const cdx_loaded *t,
                             cdx_err *err)
{
    const cdx_hparams *th = cdx_model_hparams(t->model), *dh = cdx_model_hparams(d->model);
    if (cdx_model_state_bytes(t->model))
        return cdx_err_set(err, CDX_EINVAL, "--draft %s for %s: the model (%s) carries a recurrent state, which cannot "
                           "be cut back to the kept tokens: it cannot speculate", dname, tname,
                           th->arch_name ? th->arch_name : "?");
    const int64_t nt = th->n_vocab, nd = dh->n_vocab, gap = nt > nd ? nt - nd : nd - nt;
    if (gap * 8 > nt)
        return cdx_err_set(err, CDX_EINVAL, "--draft %s for %s: the draft model has %lld token ids and the model %lld: "
                           "not one vocabulary", dname, tname, (long long)nd, (long long)nt);
    if (!t->tok || !d->tok)
        return cdx_err_set(err, CDX_EINVAL, "--draft %s for %s: %s has no tokenizer to compare vocabularies with", dname,
                           tname, t->tok ? dname : tname);
    const uint32_t vt = cdx_tok_n_vocab(t->tok), vd = cdx_tok_n_vocab(d->tok), n = vt < vd ? vt : vd;
    for (uint32_t id = 0; id < n; id++) {
        size_t lt = 0, ld = 0;
        const char *a = cdx_tok_text(t->tok, (int32_t)id, &lt), *b = cdx_tok_text(d->tok, (int32_t)id, &ld);
        const bool ca = cdx_tok_attr(t->tok, (int32_t)id) & CDX_TOK_CONTROL;
        const bool cb = cdx_tok_attr(d->tok, (int32_t)id) & CDX_TOK_CONTROL;
        if (lt != ld || (lt && memcmp(a, b, lt)) || ca != cb)
            return cdx_err_set(err, CDX_EINVAL, "--draft %s does not share %s's vocabulary: token %u is \"%.*s\"%s in the "
                               "draft and \"%.*s\"%s in the model", dname, tname, id, (int)(ld > 64 ? 64 : ld),
                               b ? b : "", cb ? " (special)" : "", (int)(lt > 64 ? 64 : lt), a ? a : "",
                               ca ? " (special)" : "");
    }
    if (cdx_tok_bos(t->tok) != cdx_tok_bos(d->tok) || cdx_tok_eos(t->tok) != cdx_tok_eos(d->tok))
        return cdx_err_set(err, CDX_EINVAL, "--draft %s: its BOS/EOS ids are %d/%d, the model's (%s) %d/%d", dname,
                           cdx_tok_bos(d->tok), cdx_tok_eos(d->tok), tname, cdx_tok_bos(t->tok), cdx_tok_eos(t->tok));
    double hd = 0, ht = 0;
    const double md = cdx_model_matmul_macs(d->model, &hd), mt = cdx_model_matmul_macs(t->model, &ht);
    if (md > mt)
        return cdx_err_set(err, CDX_EINVAL, "--draft %s is bigger than the model %s (%.3g against %.3g multiply-adds a "
                           "token): it cannot save time", dname, tname, md, mt);
    return CDX_OK;
}

/* ---- --draft auto ---- */

typedef struct draft_cand {
    const char *path;
    uint64_t bytes;   /* inspect's weight bytes */
} draft_cand;

static int cand_cmp(const void *a, const void *b)
{
    const draft_cand *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : strcmp(x->path, y->path);
}

static void note_add(char *note, size_t cap, const char *fmt, ...) CDX_PRINTF(3, 4);
static void note_add(char *note, size_t cap, const char *fmt, ...)
{
    const size_t n = strlen(note);
    if (n + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note + n, cap - n, fmt, ap);
    va_end(ap);
}

/* The candidates' verdicts for t (named tname): inspect's refusals, the model itself and mixtures of
 * experts passed over without loading; the rest loaded (paths_only) most weight bytes a token first
 * and checked. first_only: stops at the first that passes, kept loaded in *kept (the caller owns it).
 * *out: one verdict a candidate, the passing ones first (in the order tried), then the others (those
 * checked, then those passed over without loading); its paths borrowed from paths. Only running out
 * of memory fails. */
static int judge_drafts(cdx_dtype dtype, const char *tname, const cdx_loaded *t, const char *const *paths, int n,
                        bool first_only, cdx_draft_verdict **out, int *n_out, cdx_loaded **kept, cdx_err *err)
{
    *out = NULL;
    *n_out = 0;
    if (kept)
        *kept = NULL;
    draft_cand *c = calloc((size_t)n + 1, sizeof *c);
    cdx_draft_verdict *v = calloc((size_t)n + 1, sizeof *v), *pre = calloc((size_t)n + 1, sizeof *pre);
    cdx_hub_report *r = malloc(sizeof *r);
    if (!c || !v || !pre || !r) {
        free(c);
        free(v);
        free(pre);
        free(r);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    char self[4096] = "";
    if (t->path && !realpath(t->path, self))
        self[0] = 0;
    int m = 0, n_pre = 0;
    for (int i = 0; i < n; i++) {
        const char *p = paths[i];
        char rp[4096];
        cdx_err e = { 0 };
        if (self[0] && realpath(p, rp) && !strcmp(rp, self))
            continue; /* the model itself */
        memset(r, 0, sizeof *r);
        cdx_draft_verdict *w = &pre[n_pre];
        w->path = p;
        if (cdx_hub_inspect_path(p, r, &e) < 0)
            snprintf(w->why, sizeof w->why, "%.500s", e.msg);
        else if (r->refusal[0])
            snprintf(w->why, sizeof w->why, "%.500s", r->refusal);
        else if (strcmp(r->missing_required_tensors, "none"))
            snprintf(w->why, sizeof w->why, "missing tensors: %.480s", r->missing_required_tensors);
        else if (r->n_expert > 0)
            snprintf(w->why, sizeof w->why, "a mixture of experts (%s)", r->architecture);
        if (w->why[0]) {
            w->weight_bytes = r->weight_bytes;
            n_pre++;
            continue;
        }
        c[m++] = (draft_cand){ p, r->weight_bytes };
    }
    free(r);
    qsort(c, (size_t)m, sizeof *c, cand_cmp);
    const uint64_t tb = cdx_model_weight_bytes(t->model);
    int rc = CDX_OK, n_ok = 0, n_bad = 0;
    cdx_draft_verdict *checked = calloc((size_t)m + 1, sizeof *checked);
    if (!checked) {
        free(c);
        free(v);
        free(pre);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    for (int i = 0; i < m; i++) {
        cdx_load_opts dl = cdx_load_defaults();
        dl.dtype = dtype;
        dl.paths_only = true;
        cdx_loaded *d = NULL;
        cdx_err e = { 0 };
        cdx_draft_verdict w = { .path = c[i].path, .weight_bytes = c[i].bytes };
        if ((rc = cdx_load(c[i].path, &dl, &d, NULL, &e)) == CDX_ENOMEM)
            break;
        rc = CDX_OK;
        if (!d)
            snprintf(w.why, sizeof w.why, "%.500s", e.msg);
        else if (cdx_model_weight_bytes(d->model) * 2 > tb)
            snprintf(w.why, sizeof w.why, "reads %zu weight bytes a token, more than half the model's %llu",
                     cdx_model_weight_bytes(d->model), (unsigned long long)tb);
        else if (draft_refused_alone(c[i].path, d->model, &e) || draft_refused_for(c[i].path, d, tname, t, &e))
            snprintf(w.why, sizeof w.why, "%.500s", e.msg);
        else
            w.ok = true;
        if (d)
            w.weight_bytes = cdx_model_weight_bytes(d->model);
        if (w.ok) {
            v[n_ok++] = w;
            if (first_only) {
                if (kept)
                    *kept = d;
                else
                    cdx_load_close(d);
                break;
            }
        } else {
            checked[n_bad++] = w;
        }
        cdx_load_close(d);
    }
    free(c);
    memcpy(v + n_ok, checked, (size_t)n_bad * sizeof *v);
    memcpy(v + n_ok + n_bad, pre, (size_t)n_pre * sizeof *v);
    free(checked);
    free(pre);
    if (rc == CDX_ENOMEM) {
        if (kept && *kept) {
            cdx_load_close(*kept);
            *kept = NULL;
        }
        free(v);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    *out = v;
    *n_out = n_ok + n_bad + n_pre;
    return CDX_OK;
}

int cdx_load_judge_drafts(const cdx_loaded *t, const char *tname, const char *const *paths, int n,
                          cdx_draft_verdict **out, int *n_out, cdx_err *err)
{
    return judge_drafts(CDX_DTYPE_AUTO, tname, t, paths, n, false, out, n_out, NULL, err);
}

/* The first candidate that passes draft's checks for t (t->draft set), or none (t->draft NULL);
 * t->draft_note says which, or why each was passed over. Only running out of memory fails. */
static int draft_auto(const cdx_load_opts *o, const char *tname, cdx_loaded *t, cdx_err *err)
{
    const int n = o->n_draft_candidates;
    char *note = t->draft_note;
    const size_t cap = sizeof t->draft_note;
    cdx_draft_verdict *v = NULL;
    int nv = 0;
    int rc = judge_drafts(o->dtype, tname, t, o->draft_candidates, n, true, &v, &nv, &t->draft, err);
    if (rc)
        return rc;
    note[0] = 0;
    for (int i = 0, passed = 0; i < nv; i++)
        if (!v[i].ok)
            note_add(note, cap, "%s%s: %.300s", passed++ ? "; " : "", v[i].path, v[i].why);
    if (t->draft) {
        char rest[sizeof t->draft_note];
        snprintf(rest, sizeof rest, "%s", note);
        snprintf(note, cap, "--draft auto chose %.1000s (%zu weight bytes a token against the model's %zu) among %d "
                 "candidate%s", v[0].path, cdx_model_weight_bytes(t->draft->model), cdx_model_weight_bytes(t->model),
                 n, n == 1 ? "" : "s");
        if (rest[0])
            note_add(note, cap, "; passed over: %.1700s", rest);
    } else {
        char rest[sizeof t->draft_note];
        snprintf(rest, sizeof rest, "%s", note);
        snprintf(note, cap, "--draft auto found no draft for %.200s among %d candidate%s%s%.1700s", tname, n, n == 1 ? "" : "s",
                 rest[0] ? ": " : " (no cached model other than it)", rest);
    }
    free(v);
    return CDX_OK;
}

int cdx_load(const char *ref, const cdx_load_opts *opts, cdx_loaded **out, cdx_load_stage *stage, cdx_err *err)
{
    *out = NULL;
    cdx_load_stage at_ = CDX_LOAD_RESOLVE, *at = stage ? stage : &at_;
    *at = CDX_LOAD_RESOLVE;
    const cdx_load_opts d = cdx_load_defaults(), *o = opts ? opts : &d;
    cdx_loaded *l = calloc(1, sizeof *l);
    if (!l)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    l->weight_budget = o->weight_budget;
    int rc;
    const char *tname = ref ? ref : o->default_name ? o->default_name : "the bundled model";
    if (o->draft) {
        /* the draft first: refused by what it is before the model's weights are read */
        *at = CDX_LOAD_DRAFT;
        if (o->tasks && o->task_set && o->task != CDX_TASK_GENERATE) {
            rc = cdx_err_set(err, CDX_EINVAL, "--draft %s: the model is served for %s; a draft model speeds up "
                             "generation only", o->draft, cdx_task_name(o->task));
            goto fail;
        }
        if (!o->engine) {
            rc = cdx_err_set(err, CDX_EINVAL, "--draft %s: a draft model needs an engine to draft for", o->draft);
            goto fail;
        }
        cdx_load_opts dl = cdx_load_defaults();
        dl.dtype = o->dtype;
        dl.paths_only = o->paths_only;
        dl.hub = o->hub;
        if ((rc = cdx_load(o->draft, &dl, &l->draft, NULL, err))) {
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%s", err->msg);
            cdx_err_set(err, rc, "--draft %s: %s", o->draft, m);
            goto fail;
        }
        if ((rc = draft_refused_alone(o->draft, l->draft->model, err))) {
            *at = CDX_LOAD_DRAFT_REFUSED;
            goto fail;
        }
        *at = CDX_LOAD_RESOLVE;
    }
    if (ref) {
        if ((rc = resolve(ref, o, l, err)))
            goto fail;
        *at = CDX_LOAD_MODEL;
        struct stat st;
        if (o->tasks && stat(l->path, &st) == 0 && S_ISDIR(st.st_mode) && (rc = cdx_st_pipeline_read(l->path, &l->pipe, err)))
            goto fail; /* a module caldrix does not implement is refused by name */
        l->task = !o->tasks ? CDX_TASK_GENERATE : o->task_set ? o->task : l->pipe.present ? CDX_TASK_EMBED
                                                                                           : CDX_TASK_GENERATE;
        /* sentence-transformers and the rerankers' cards run in float32, whatever the stored type */
        const cdx_model_opts mo = { .weight_budget = l->weight_budget, .layer0 = o->layer0, .layer1 = o->layer1,
                                    .weights_io = o->weights_io, .expert_pread = o->expert_pread,
                                    .dtype = l->task != CDX_TASK_GENERATE && o->dtype == CDX_DTYPE_AUTO ? CDX_DTYPE_F32
                                                                                                 : o->dtype };
        rc = cdx_model_open(l->path, &mo, &l->model, err);
    } else {
        *at = CDX_LOAD_MODEL;
        l->task = o->tasks && o->task_set ? o->task : CDX_TASK_GENERATE;
        if (!o->default_gguf)
            rc = cdx_err_set(err, CDX_EINVAL, "no model was named and none is bundled");
        else if (o->dtype == CDX_DTYPE_BF16)
            rc = cdx_err_set(err, CDX_EINVAL, "the bundled model is a GGUF file: it computes as llama.cpp does; "
                                              "--dtype bf16 applies to safetensors checkpoints");
        else
            rc = cdx_model_open_gguf_mem(o->default_gguf, o->default_gguf_size,
                                         o->default_name ? o->default_name : "bundled model", &l->model, err);
    }
    if (rc)
        goto fail;
    if (o->tasks && !o->task_set && l->task == CDX_TASK_GENERATE)
        l->task = cdx_task_declared(l->model, &l->pipe);
    if (l->draft && (l->task != CDX_TASK_GENERATE || cdx_model_is_encoder(l->model))) {
        *at = CDX_LOAD_DRAFT_REFUSED;
        rc = cdx_err_set(err, CDX_EINVAL, "--draft %s: %s %s; a draft model speeds up generation only", o->draft,
                         tname, cdx_model_is_encoder(l->model) ? "is an encoder (embeddings)"
                                : l->task == CDX_TASK_RERANK ? "is served for rerank" : "is served for embed");
        goto fail;
    }
    *at = CDX_LOAD_TOKENIZER;
    const bool draft_auto_ = !o->draft && o->n_draft_candidates > 0 && o->engine;
    if ((o->tokenizer || l->draft || draft_auto_) && (rc = cdx_load_tokenizer(l->path, l->model, &l->tok, err)))
        goto fail;
    if (draft_auto_) {
        *at = CDX_LOAD_DRAFT;
        if ((rc = draft_auto(o, tname, l, err)))
            goto fail;
    }
    if (l->draft && (rc = draft_refused_for(o->draft, l->draft, tname, l, err))) {
        *at = CDX_LOAD_DRAFT_REFUSED;
        goto fail;
    }
    *at = CDX_LOAD_CHAT;
    if (o->chat && l->tok && l->task == CDX_TASK_GENERATE && (rc = cdx_chat_setup_open(l->path, o->chat_template, l->tok, &l->chat, err)))
        goto fail;
    *at = CDX_LOAD_IMAGES;
    if (o->images == CDX_LOAD_IMAGES_REQUIRED || (o->images == CDX_LOAD_IMAGES_IF_VISION && cdx_model_vision(l->model, NULL))) {
        if ((rc = cdx_load_image_proc(l->path ? l->path : o->default_name, l->model, o->image_opts, o->n_image_opts,
                                      &l->image_proc, err)))
            goto fail;
        l->has_image_proc = true;
    }
    *at = CDX_LOAD_ENGINE;
    l->kv_type = o->engine && o->kv_type_set ? o->engine->kv_type : cdx_model_kv_type_default(l->model);
    if (o->engine && l->task != CDX_TASK_GENERATE) {
        const cdx_embedder_opts eo = { .n_threads = o->engine->n_threads > 0 ? o->engine->n_threads : cdx_cpu_count(), .kernels = o->engine->kernels,
                                       .task = l->task, .yes_id = o->yes_id, .no_id = o->no_id,
                                       .pool = o->engine->pool };
        if ((rc = cdx_embedder_open(l->model, l->tok, l->pipe.present ? &l->pipe : NULL, &eo, &l->embedder, err)))
            goto fail;
    } else if (o->engine) {
        cdx_engine_opts eo = *o->engine;
        eo.kv_type = l->kv_type;
        if (l->draft)
            eo.draft = l->draft->model;
        if (o->spec_if_able && eo.spec != CDX_SPEC_OFF && !l->draft && cdx_model_state_bytes(l->model)) {
            const cdx_hparams *h = cdx_model_hparams(l->model);
            snprintf(l->spec_note, sizeof l->spec_note, "no speculative decoding (--spec %s) for %s: its recurrent "
                     "state (%s) is updated at every scored position and cannot be cut back to the kept tokens",
                     cdx_spec_name(eo.spec), tname, h->arch_name ? h->arch_name : "?");
            eo.spec = CDX_SPEC_OFF;
        }
        if ((rc = cdx_engine_create(l->model, l->tok, &eo, &l->engine, err)))
            goto fail;
    }
    *at = CDX_LOAD_DONE;
    *out = l;
    return CDX_OK;
fail:
    cdx_load_close(l);
    return rc < 0 ? rc : CDX_EINVAL;
}
