/* caldrix server: the model registry (name -> handle, engine, state, pins, last use), the
 * compatibility verdicts, and the one memory ledger.
 *
 * Locks: r->mu guards every slot's state, counts and the ledger; r->run_mu is the shared thread
 * pool's: the engine thread holds it for one round, a loader for cdx_load, an unloader for
 * cdx_load_close, so engines are created, stepped and freed on the pool one at a time. No thread
 * holds both: a slot in LOADING or UNLOADING belongs to the thread that set it, which releases mu
 * before it takes run_mu. */
#include "server/sv_int.h"
#include "caldrix/format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const k_state_names[] = { [SV_UNLOADED] = "unloaded", [SV_LOADING] = "loading",
                                             [SV_LOADED] = "loaded", [SV_UNLOADING] = "unloading",
                                             [SV_FAILED] = "failed" };
static const char *const k_compat_names[] = { [SV_COMPATIBLE] = "compatible", [SV_INCOMPATIBLE] = "incompatible",
                                              [SV_UNKNOWN] = "unknown" };

const char *sv_state_name(sv_state s) { return k_state_names[s]; }

/* ---- compatibility: inspect's verdict (cdx_hub_inspect_path, whose refusal is cdx_model_check's),
 * no weight read ---- */

/* What a model is served for before it loads: the option, else an encoder's architecture or a folder
 * with modules.json (cdx_task_declared's rule, read from the headers). */
static cdx_task task_before_load(const sv_registry *r, const sv_model *m, const cdx_hub_report *rep)
{
    if (m->task_set)
        return m->task_want;
    if (r->lo.task_set)
        return r->lo.task;
    cdx_st_pipeline p;
    cdx_err err = { 0 };
    if (m->path && cdx_st_pipeline_read(m->path, &p, &err) == 0 && p.present)
        return CDX_TASK_EMBED;
    cdx_arch a;
    if (rep && cdx_model_arch_of(rep->architecture, !strcmp(rep->format, "gguf"), false, &a) && a == CDX_ARCH_BERT)
        return CDX_TASK_EMBED;
    if (rep && m->path && !strcmp(rep->format, "gguf")) {
        /* a decoder GGUF declares its task in <arch>.pooling_type (llama.cpp's): 4 rank, 1..3 a pooled vector
         * (cdx_task_declared on the loaded model, read here from the header) */
        cdx_gguf *g = NULL;
        uint64_t v = 0;
        bool has = false;
        if (cdx_gguf_open(m->path, &g, &err) == 0)
            has = cdx_gguf_get_arch_u64(g, rep->architecture, CDX_GK_POOLING_TYPE, &v);
        cdx_gguf_close(g);
        if (has && v == 4)
            return CDX_TASK_RERANK;
        if (has && v >= 1 && v <= 3)
            return CDX_TASK_EMBED;
    }
    return CDX_TASK_GENERATE;
}

static void judge(const sv_registry *r, sv_model *m)
{
    if (!m->path) {
        m->compat = SV_COMPATIBLE; /* the bundled model */
        return;
    }
    cdx_hub_report *rep = calloc(1, sizeof *rep);
    cdx_err err = { 0 };
    if (!rep) {
        m->compat = SV_UNKNOWN;
        snprintf(m->reason, sizeof m->reason, "out of memory while inspecting %s", m->path);
        return;
    }
    if (cdx_hub_inspect_path(m->path, rep, &err) < 0) {
        m->compat = SV_INCOMPATIBLE;
        snprintf(m->reason, sizeof m->reason, "%s", err.msg);
    } else if (rep->refusal[0]) {
        m->compat = SV_INCOMPATIBLE;
        snprintf(m->reason, sizeof m->reason, "%s", rep->refusal);
    } else if (rep->n_unknown_keys > 0) {
        /* the architecture is known, but metadata no table describes: the build cannot say what it does */
        m->compat = SV_UNKNOWN;
        snprintf(m->reason, sizeof m->reason, "%s: %llu metadata key%s the %s key table does not describe: %s",
                 m->path, (unsigned long long)rep->n_unknown_keys, rep->n_unknown_keys == 1 ? "" : "s",
                 rep->architecture, rep->unknown_keys);
    } else {
        m->compat = SV_COMPATIBLE;
    }
    m->task = task_before_load(r, m, rep);
    m->ctx_hint = rep->kv_ctx;
    m->est_bytes = rep->weight_bytes + rep->kv_bytes; /* one sequence of KV; scaled at load by the pool */
    m->est_kv_seq = rep->kv_bytes;
    free(rep);
}

/* ---- setup ---- */

static int reg_alloc(sv_registry *r, int n, cdx_err *err)
{
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_cond_init(&r->emb_cv, NULL);
    pthread_mutex_init(&r->run_mu, NULL);
    r->inited = true;
    r->models = calloc((size_t)n, sizeof *r->models);
    if (!r->models)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    r->n = n;
    return CDX_OK;
}

/* The view routes read, from a loaded handle (or the caller's model). */
static int set_view(sv_model *m, const cdx_server_model *v, cdx_err *err)
{
    m->m = *v;
    m->m.name = m->name;
    m->task = v->task;
    m->form = SV_FORM_NONE;
    if (v->embedder) { /* an embed or rerank model: no engine, no KV, no chat */
        m->n_room = m->m.n_ctx = cdx_embedder_max_tokens(v->embedder);
        return CDX_OK;
    }
    cdx_engine_stats st;
    cdx_engine_get_stats(v->engine, &st);
    m->n_room = st.n_blocks * CDX_KV_BLOCK < st.n_ctx ? st.n_blocks * CDX_KV_BLOCK : st.n_ctx;
    m->m.n_ctx = st.n_ctx;
    if (!v->tmpl) { /* the same rule as cdx_chat_setup_open with neither a model nor a file: ChatML */
        int rc = cdx_chat_setup_open(NULL, NULL, v->tok, &m->chatml, err);
        if (rc)
            return rc;
        m->m.tmpl = m->chatml.tmpl;
        m->m.tmpl_chatml = true;
        if (!m->m.tmpl_tokens)
            m->m.tmpl_tokens = m->chatml.tokens;
    }
    m->form = sv_tool_form_of(m->m.tmpl, m->m.tmpl_tokens); /* one render of the template, at load */
    return CDX_OK;
}

/* m's adapters from a list (names unique, at most SV_MAX_LORA). */
static int lora_list(sv_model *m, const cdx_server_lora *l, int n, cdx_err *err)
{
    if (n > SV_MAX_LORA)
        return cdx_err_set(err, CDX_EINVAL, "%d LoRA adapters; at most %d", n, SV_MAX_LORA);
    if (n && !(m->lora = calloc((size_t)n, sizeof *m->lora)))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        if (!l[i].name || !*l[i].name || !l[i].path || !isfinite(l[i].scale))
            return cdx_err_set(err, CDX_EINVAL, "LoRA adapter %d: a name, a path and a finite scale are needed", i);
        for (int k = 0; k < i; k++)
            if (!strcmp(l[k].name, l[i].name))
                return cdx_err_set(err, CDX_EINVAL, "two LoRA adapters are named \"%s\" (%s and %s)", l[i].name,
                                   l[k].path, l[i].path);
        m->lora[i] = (sv_lora){ .name = strdup(l[i].name), .path = strdup(l[i].path), .lora = l[i].lora,
                                .owned = !l[i].lora, .scale = l[i].scale };
        m->n_lora = i + 1;
        if (!m->lora[i].name || !m->lora[i].path)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    return CDX_OK;
}

/* Opens m's adapters on its model, just loaded (the registry's own; the caller's are open). */
static int lora_open_all(sv_model *m, cdx_err *err)
{
    for (int i = 0; i < m->n_lora; i++) {
        sv_lora *a = &m->lora[i];
        if (!a->owned)
            continue;
        cdx_lora *x = NULL;
        int rc = cdx_lora_open(m->ld->model, a->path, &x, err);
        if (rc) {
            cdx_err_prefix(err, "--lora %s=%s: ", a->name, a->path);
            return rc;
        }
        a->lora = x;
    }
    return CDX_OK;
}

int sv_reg_init_one(sv_registry *r, const cdx_server_model *v, cdx_err *err)
{
    int rc = reg_alloc(r, 1, err);
    if (rc)
        return rc;
    sv_model *m = &r->models[0];
    if ((rc = lora_list(m, v->lora, v->n_lora, err)))
        return rc;
    for (int i = 0; i < m->n_lora; i++)
        if (!m->lora[i].lora)
            return cdx_err_set(err, CDX_EINVAL, "LoRA adapter \"%s\" is not open", m->lora[i].name);
    m->name = strdup(v->name && *v->name ? v->name : "model");
    if (!m->name)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    m->external = m->pinned = true;
    m->compat = SV_COMPATIBLE;
    m->state = SV_LOADED;
    r->n_loaded = 1;
    r->autoload = true;
    return set_view(m, v, err);
}

/* Bytes a model holds once loaded: its weights as resident (a budget caps a mixture of experts'
 * experts) and its KV pool when full. */
static uint64_t resident_bytes(const cdx_loaded *l)
{
    size_t dense = 0, one = 0, experts = 0;
    cdx_model_weight_split(l->model, &dense, &one, &experts);
    uint64_t w = (uint64_t)dense + (uint64_t)experts;
    if (l->weight_budget && l->weight_budget < w)
        w = l->weight_budget;
    if (!l->engine)
        return w;
    cdx_engine_stats st;
    cdx_engine_get_stats(l->engine, &st);
    return w + st.kv_pool_bytes;
}

/* What a load is expected to take before it happens: the weights inspect counts plus a pool of
 * max_batch sequences (or n_blocks) of the engine's context. */
static uint64_t estimate(const sv_registry *r, const sv_model *m)
{
    if (m->resident_bytes)
        return m->resident_bytes; /* loaded before: the figure it really took */
    const uint64_t w = m->est_bytes - m->est_kv_seq;
    const int64_t ctx_est = m->ctx_hint > 0 ? m->ctx_hint : CDX_HUB_DEFAULT_CTX;
    const int64_t ctx = r->eo.n_ctx > 0 ? r->eo.n_ctx : ctx_est;
    const int64_t positions = r->eo.n_blocks > 0 ? r->eo.n_blocks * CDX_KV_BLOCK
                                                 : ctx * (r->eo.max_batch > 0 ? r->eo.max_batch : 8);
    const double per_pos = ctx_est > 0 ? (double)m->est_kv_seq / (double)ctx_est : 0;
    return w + (uint64_t)(per_pos * (double)positions);
}

int sv_reg_init(sv_registry *r, const cdx_server_models *o, cdx_err *err)
{
    if (!o || o->n_entries < 1)
        return cdx_err_set(err, CDX_EINVAL, "cdx_server_ready_models: no models");
    int rc = reg_alloc(r, o->n_entries, err);
    if (rc)
        return rc;
    r->multi = o->n_entries > 1;
    r->lo = o->load ? *o->load : cdx_load_defaults();
    r->eo = o->load && o->load->engine ? *o->load->engine : cdx_engine_defaults();
    r->tmpl_kwargs = o->tmpl_kwargs;
    r->autoload = o->autoload;
    r->allow_unknown = o->allow_unknown;
    r->max_loaded = o->max_loaded;
    r->idle_unload_s = o->idle_unload_s;
    r->budget = o->memory_bytes;
    if ((rc = cdx_pool_create(r->eo.n_threads, &r->pool, err)))
        return rc;
    r->eo.pool = r->pool; /* every engine on the one pool: rounds never overlap (the engine thread) */
    r->lo.engine = &r->eo;
    r->lo.hub = NULL;
    r->lo.paths_only = true; /* the front end resolved every reference */
    for (int i = 0; i < o->n_entries; i++) {
        const cdx_server_entry *x = &o->entries[i];
        sv_model *m = &r->models[i];
        if (!x->name || !*x->name)
            return cdx_err_set(err, CDX_EINVAL, "model %d has no name", i + 1);
        for (const char *c = x->name; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == '"' || *c == '\\' || *c == 0x7f)
                return cdx_err_set(err, CDX_EINVAL, "model name \"%s\": a quote, a backslash or a control character "
                                                    "cannot go in a name (it labels /metrics series)", x->name);
        for (int k = 0; k < i; k++)
            if (!strcmp(r->models[k].name, x->name))
                return cdx_err_set(err, CDX_EINVAL, "two models are named \"%s\" (%s and %s): give one another name "
                                                    "with --model REF=NAME", x->name,
                                   r->models[k].path ? r->models[k].path : "bundled", x->path ? x->path : "bundled");
        m->name = strdup(x->name);
        m->path = x->path ? strdup(x->path) : NULL;
        if (!m->name || (x->path && !m->path))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        m->pinned = x->pinned;
        m->preload = x->preload;
        m->task_set = x->task_set;
        m->task_want = x->task;
        judge(r, m);
    }
    if (o->n_lora) { /* the first model's: pinned, so they are open from the start to the end */
        for (int i = 0; i < o->n_lora; i++)
            if (o->lora[i].lora)
                return cdx_err_set(err, CDX_EINVAL, "LoRA adapter \"%s\": the registry opens the adapters itself "
                                   "(lora NULL)", o->lora[i].name ? o->lora[i].name : "");
        r->models[0].pinned = true;
        if ((rc = lora_list(&r->models[0], o->lora, o->n_lora, err)))
            return rc;
    }
    return CDX_OK;
}

static void close_slot(sv_model *m)
{
    for (int i = 0; i < m->n_lora; i++)
        if (m->lora[i].owned) {
            cdx_lora_close((cdx_lora *)m->lora[i].lora);
            m->lora[i].lora = NULL;
        }
    cdx_chat_setup_close(&m->chatml);
    memset(&m->chatml, 0, sizeof m->chatml);
    cdx_load_close(m->ld);
    m->ld = NULL;
    memset(&m->m, 0, sizeof m->m);
}

void sv_reg_free(sv_registry *r)
{
    if (!r->inited)
        return;
    for (int i = 0; i < r->n; i++) {
        close_slot(&r->models[i]);
        for (int k = 0; k < r->models[i].n_lora; k++) {
            free(r->models[i].lora[k].name);
            free(r->models[i].lora[k].path);
        }
        free(r->models[i].lora);
        free(r->models[i].name);
        free(r->models[i].path);
    }
    free(r->models);
    cdx_pool_destroy(r->pool);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->emb_cv);
    pthread_mutex_destroy(&r->run_mu);
    memset(r, 0, sizeof *r);
}

/* ---- lookup ---- */

sv_model *sv_reg_find(sv_registry *r, const char *name)
{
    if (!r->multi)
        return &r->models[0]; /* one model: any name selects it, as OpenAI clients expect of a local server */
    if (!name)
        return &r->models[0]; /* no "model": the first one named */
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->models[i].name, name))
            return &r->models[i];
    return NULL;
}

int sv_reg_not_found(sv_registry *r, const char *name, sv_error *e)
{
    char names[700] = "";
    size_t w = 0;
    for (int i = 0; i < r->n && w < sizeof names - 80; i++)
        w += (size_t)snprintf(names + w, sizeof names - w, "%s%s", i ? ", " : "", r->models[i].name);
    char shown[128];
    snprintf(shown, sizeof shown, "%.120s", name ? name : "");
    sv_printable(shown);
    return sv_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                   "model \"%s\" does not exist; this server has: %s", shown, names);
}

/* ---- the ledger and eviction (mu held) ---- */

/* The engine thread has something to do for m (mu held). */
static bool has_work(const sv_model *m)
{
    return m->state == SV_LOADED && (m->emb_head || (m->m.engine && cdx_engine_busy(m->m.engine)));
}

static bool evictable(const sv_model *m)
{
    return m->state == SV_LOADED && !m->pinned && !m->external && m->inflight == 0 && !m->stepping && !has_work(m);
}

/* Unloads m (mu held on entry and exit; released meanwhile). */
static void unload_locked(sv_registry *r, sv_model *m)
{
    m->state = SV_UNLOADING;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&r->run_mu);
    close_slot(m);
    pthread_mutex_unlock(&r->run_mu);
    pthread_mutex_lock(&r->mu);
    r->used -= m->held_bytes;
    m->held_bytes = 0;
    r->n_loaded--;
    m->unloads++;
    m->state = SV_UNLOADED;
    pthread_cond_broadcast(&r->cv);
}

static sv_model *lru_victim(sv_registry *r, const sv_model *except)
{
    sv_model *v = NULL;
    for (int i = 0; i < r->n; i++) {
        sv_model *m = &r->models[i];
        if (m != except && evictable(m) && (!v || m->last_use_ms < v->last_use_ms))
            v = m;
    }
    return v;
}

/* Room for m (need bytes, one more resident model): evicts least recently used idle models until
 * it fits. 0, or -1 with e: MODEL_RESOURCE_LIMIT (it can never fit: the budget minus what pinned
 * models hold, or --models-max pinned models) or MODEL_RESOURCE_BUSY (it fits once requests in
 * flight end). */
static int make_room(sv_registry *r, sv_model *m, uint64_t need, sv_error *e)
{
    /* A request that just ended has sent its last byte before its model is idle (the release runs
     * when the connection's response is done, the engine's last round after that): a client's next
     * request may come in between. It waits this long for a model to become idle before it is BUSY. */
    const double grace_ms = 500;
    const double t0 = cdx_time_ms();
    for (;;) {
        const bool count_ok = !r->max_loaded || r->n_loaded < r->max_loaded;
        const bool bytes_ok = !r->budget || (r->used <= r->budget && need <= r->budget - r->used);
        if (count_ok && bytes_ok)
            return 0;
        sv_model *v = lru_victim(r, m);
        if (v) {
            unload_locked(r, v);
            continue;
        }
        bool may_idle = false; /* a model that holds room and is not pinned: its requests may end */
        for (int i = 0; i < r->n; i++)
            may_idle |= &r->models[i] != m && r->models[i].state == SV_LOADED && !r->models[i].pinned &&
                        !r->models[i].external;
        if (!may_idle || cdx_time_ms() - t0 >= grace_ms)
            break;
        struct timespec ts; /* the engines do not signal going idle: look again every 10 ms */
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    uint64_t fixed = 0;
    int n_fixed = 0;
    for (int i = 0; i < r->n; i++)
        if ((r->models[i].pinned || r->models[i].external) && r->models[i].held_bytes) {
            fixed += r->models[i].held_bytes;
            n_fixed++;
        }
    if (r->budget && need > r->budget - (fixed < r->budget ? fixed : r->budget))
        return sv_fail(e, 400, "invalid_request_error", "MODEL_RESOURCE_LIMIT", "model",
                       "model \"%s\" needs %llu bytes (weights and KV pool); the memory budget is %llu bytes "
                       "(--memory), %llu of them held by pinned models", m->name, (unsigned long long)need,
                       (unsigned long long)r->budget, (unsigned long long)fixed);
    if (r->max_loaded && n_fixed >= r->max_loaded)
        return sv_fail(e, 400, "invalid_request_error", "MODEL_RESOURCE_LIMIT", "model",
                       "model \"%s\" cannot load: --models-max is %d and %d pinned models are loaded", m->name,
                       r->max_loaded, n_fixed);
    return sv_fail(e, 429, "rate_limit_error", "MODEL_RESOURCE_BUSY", "model",
                   "model \"%s\" needs %llu bytes; %llu of the %llu-byte budget are held by models with requests "
                   "in flight (%d of at most %d loaded): retry when they finish", m->name, (unsigned long long)need,
                   (unsigned long long)r->used, (unsigned long long)r->budget, r->n_loaded, r->max_loaded);
}

/* Loads m (mu held on entry and exit; released meanwhile). */
static int load_locked(sv_registry *r, sv_model *m, sv_error *e)
{
    const uint64_t need = estimate(r, m);
    const sv_state was = m->state;
    m->state = SV_LOADING; /* others wait for this load, also while room is made */
    if (make_room(r, m, need, e)) {
        m->state = was;
        pthread_cond_broadcast(&r->cv);
        return -1;
    }
    m->held_bytes = need; /* reserved while it loads; the real figure replaces it */
    r->used += need;
    r->n_loaded++;
    pthread_mutex_unlock(&r->mu);
    cdx_err err = { 0 };
    cdx_loaded *ld = NULL;
    cdx_load_stage at;
    pthread_mutex_lock(&r->run_mu);
    cdx_load_opts lo = r->lo;
    if (m->task_set) {
        lo.task_set = true;
        lo.task = m->task_want;
    }
    int rc = cdx_load(m->path, &lo, &ld, &at, &err);
    if (!rc) {
        const cdx_hparams *hp = cdx_model_hparams(ld->model);
        const cdx_server_model v = { .engine = ld->engine, .tok = ld->tok, .tmpl = ld->chat.tmpl,
                                     .tmpl_tokens = ld->chat.tokens, .tmpl_chatml = ld->chat.chatml,
                                     .tmpl_kwargs = r->tmpl_kwargs, .name = m->name, .n_vocab = hp->n_vocab,
                                     .bos_id = hp->bos_id, .image_proc = ld->has_image_proc ? &ld->image_proc : NULL,
                                     .task = ld->task, .embedder = ld->embedder, .pipe = &ld->pipe,
                                     .spec_off_reason = ld->spec_note[0] ? ld->spec_note : NULL,
                                     .no_images_why = cdx_model_images_refused(ld->model) };
        m->ld = ld;
        rc = set_view(m, &v, &err);
        m->lora_failed = false;
        if (!rc && (rc = lora_open_all(m, &err)))
            m->lora_failed = true;
        if (rc)
            close_slot(m);
    }
    pthread_mutex_unlock(&r->run_mu);
    pthread_mutex_lock(&r->mu);
    r->used -= need;
    if (rc) {
        r->n_loaded--;
        m->held_bytes = 0;
        m->state = SV_FAILED;
        snprintf(m->error, sizeof m->error, "%s", err.msg);
        pthread_cond_broadcast(&r->cv);
        const bool input = rc == CDX_ENOTFOUND || rc == CDX_EFORMAT || rc == CDX_EUNSUPPORTED;
        if (m->lora_failed) /* an adapter that does not fit the model: bad input (serve exits 2) */
            return sv_fail(e, 400, "invalid_request_error", "lora_load_failed", "model", "model \"%s\": %s", m->name,
                           err.msg);
        return sv_fail(e, input ? 400 : 500, input ? "invalid_request_error" : "server_error", "model_load_failed",
                       "model", "model \"%s\" failed to load: %s", m->name, err.msg);
    }
    m->resident_bytes = m->held_bytes = resident_bytes(ld);
    r->used += m->held_bytes;
    m->error[0] = 0;
    m->loads++;
    m->state = SV_LOADED;
    pthread_cond_broadcast(&r->cv);
    return 0;
}

/* Whether requests may name m: its verdict. */
static int check_compat(const sv_registry *r, const sv_model *m, sv_error *e)
{
    if (m->compat == SV_INCOMPATIBLE)
        return sv_fail(e, 400, "invalid_request_error", "INCOMPATIBLE_MODEL", "model", "model \"%s\" is incompatible: %s",
                       m->name, m->reason);
    if (m->compat == SV_UNKNOWN && !r->allow_unknown)
        return sv_fail(e, 400, "invalid_request_error", "UNKNOWN_MODEL_COMPATIBILITY", "model",
                       "model \"%s\": its compatibility cannot be determined (%s); the server runs it only when "
                       "started with --allow-unknown-models", m->name, m->reason);
    return 0;
}

int sv_reg_acquire(sv_registry *r, sv_model *m, bool load, sv_error *e)
{
    if (check_compat(r, m, e))
        return -1;
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    for (;;) {
        if (m->state == SV_LOADED)
            break;
        if (m->state == SV_LOADING || m->state == SV_UNLOADING) {
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        if (!load && !r->autoload) {
            rc = sv_fail(e, 400, "invalid_request_error", "model_not_loaded", "model",
                         "model \"%s\" is not loaded and this server loads models only on POST /models/load "
                         "(--models-autoload off)", m->name);
            break;
        }
        rc = load_locked(r, m, e);
        if (rc)
            break;
    }
    if (!rc) {
        m->inflight++;
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        m->last_use_ms = (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void sv_reg_release(sv_registry *r, sv_model *m)
{
    pthread_mutex_lock(&r->mu);
    m->inflight--;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    m->last_use_ms = (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

int sv_reg_unload(sv_registry *r, sv_model *m, sv_error *e)
{
    pthread_mutex_lock(&r->mu);
    while (m->state == SV_LOADING || m->state == SV_UNLOADING)
        pthread_cond_wait(&r->cv, &r->mu);
    int rc = 0;
    if (m->pinned || m->external)
        rc = sv_fail(e, 409, "invalid_request_error", "model_pinned", "model",
                     "model \"%s\" is pinned (--pin): it is never unloaded", m->name);
    else if (m->state == SV_LOADED && !evictable(m))
        rc = sv_fail(e, 409, "invalid_request_error", "model_busy", "model",
                     "model \"%s\" has %d request%s in flight; unload it when they finish", m->name, m->inflight,
                     m->inflight == 1 ? "" : "s");
    else if (m->state == SV_LOADED)
        unload_locked(r, m);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int sv_reg_preload(sv_registry *r, cdx_err *err)
{
    for (int i = 0; i < r->n; i++) {
        sv_model *m = &r->models[i];
        if (!m->preload && !m->pinned)
            continue;
        sv_error e;
        if (sv_reg_acquire(r, m, true, &e))
            return cdx_err_set(err, CDX_EINVAL, "%s", e.message);
        sv_reg_release(r, m);
    }
    return CDX_OK;
}

/* ---- the engine thread's side: fair round-robin between engines with work ---- */

sv_model *sv_reg_next(sv_registry *r)
{
    pthread_mutex_lock(&r->mu);
    sv_model *pick = NULL;
    for (int i = 0; i < r->n && !pick; i++) {
        sv_model *m = &r->models[(r->rr + (size_t)i) % (size_t)r->n];
        if (has_work(m)) {
            pick = m;
            r->rr = (r->rr + (size_t)i + 1) % (size_t)r->n; /* next time the search starts after it */
        }
    }
    if (pick)
        pick->stepping = true;
    pthread_mutex_unlock(&r->mu);
    return pick;
}

/* One pass of an embed or rerank model: the inputs of the queued requests, in order, up to SV_EMB_BUDGET
 * tokens (at least one input), as one call. */
static void emb_step(sv_registry *r, sv_model *m)
{
    enum { MAXIN = CDX_EMBED_MAX_INPUTS };
    static __thread const int32_t *ids[MAXIN];
    static __thread int64_t lens[MAXIN];
    static __thread sv_emb_job *who[MAXIN];
    static __thread int at[MAXIN];
    int n = 0;
    int64_t toks = 0;
    pthread_mutex_lock(&r->mu);
    for (sv_emb_job *j = m->emb_head; j && n < MAXIN; j = j->next)
        while (j->taken < j->n && n < MAXIN && (n == 0 || toks + j->lens[j->taken] <= SV_EMB_BUDGET)) {
            ids[n] = j->ids[j->taken];
            lens[n] = j->lens[j->taken];
            who[n] = j;
            at[n++] = j->taken++;
            toks += j->lens[j->taken - 1];
        }
    pthread_mutex_unlock(&r->mu);
    if (!n)
        return;
    const bool rerank = m->m.task == CDX_TASK_RERANK;
    const int64_t D = rerank ? 1 : cdx_embedder_dim(m->m.embedder);
    float *out = malloc((size_t)n * (size_t)D * sizeof *out), *lg = malloc((size_t)n * 2 * sizeof *lg);
    cdx_err err = { 0 };
    int rc = out && lg ? CDX_OK : cdx_err_set(&err, CDX_ENOMEM, "out of memory for %d inputs", n);
    if (!rc) {
        pthread_mutex_lock(&r->run_mu);
        rc = rerank ? cdx_rerank_ids(m->m.embedder, ids, lens, n, out, lg, &err)
                    : cdx_embed_ids(m->m.embedder, ids, lens, n, out, &err);
        pthread_mutex_unlock(&r->run_mu);
    }
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < n; i++) {
        sv_emb_job *j = who[i];
        if (rc && !j->rc) {
            j->rc = rc;
            snprintf(j->msg, sizeof j->msg, "%.500s", err.msg);
        }
        if (!rc) {
            memcpy(j->out + (size_t)at[i] * (size_t)D, out + (size_t)i * (size_t)D, (size_t)D * sizeof *out);
            if (rerank && j->logits)
                memcpy(j->logits + (size_t)at[i] * 2, lg + (size_t)i * 2, 2 * sizeof *lg);
        }
        j->finished++;
    }
    r->emb_passes++;
    r->emb_inputs += (uint64_t)n;
    while (m->emb_head && m->emb_head->finished == m->emb_head->n) { /* requests leave the queue in order */
        m->emb_head->done = true;
        m->emb_head = m->emb_head->next;
    }
    if (!m->emb_head)
        m->emb_tail = NULL;
    pthread_cond_broadcast(&r->emb_cv);
    pthread_mutex_unlock(&r->mu);
    free(out);
    free(lg);
}

void sv_reg_emb_run(sv_registry *r, sv_model *m, sv_emb_job *j)
{
    pthread_mutex_lock(&r->mu);
    j->next = NULL;
    if (m->emb_tail)
        m->emb_tail->next = j;
    else
        m->emb_head = j;
    m->emb_tail = j;
    r->emb_requests++;
    r->kick++;
    pthread_cond_broadcast(&r->cv);
    while (!j->done)
        pthread_cond_wait(&r->emb_cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

void sv_reg_step(sv_registry *r, sv_model *m)
{
    if (m->m.embedder) {
        emb_step(r, m);
        pthread_mutex_lock(&r->mu);
        m->stepping = false;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    cdx_err err = { 0 };
    pthread_mutex_lock(&r->run_mu);
    cdx_engine_step(m->m.engine, &err); /* a failed round ended its requests with an error event */
    pthread_mutex_unlock(&r->run_mu);
    pthread_mutex_lock(&r->mu);
    m->stepping = false;
    pthread_mutex_unlock(&r->mu);
}

void sv_reg_kick(sv_registry *r)
{
    pthread_mutex_lock(&r->mu);
    r->kick++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void sv_reg_idle(sv_registry *r, int ms)
{
    if (!r->multi) { /* one model: its engine's own wait, as before the registry */
        pthread_mutex_lock(&r->mu);
        cdx_engine *e = r->models[0].state == SV_LOADED && !r->models[0].m.embedder ? r->models[0].m.engine : NULL;
        pthread_mutex_unlock(&r->mu);
        if (e) {
            cdx_engine_wait(e, ms);
            return;
        }
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    const uint64_t k = r->kick;
    bool any_busy = false;
    for (int i = 0; i < r->n && !any_busy; i++)
        any_busy = has_work(&r->models[i]);
    if (!any_busy && k == r->kick)
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    /* --idle-unload: a model nobody used for that long goes (never a pinned or busy one) */
    if (r->idle_unload_s > 0) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        const double now = (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
        for (int i = 0; i < r->n; i++) {
            sv_model *m = &r->models[i];
            if (evictable(m) && now - m->last_use_ms >= r->idle_unload_s * 1e3)
                unload_locked(r, m);
        }
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- LoRA adapters ---- */

sv_model *sv_reg_lora_model(sv_registry *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->models[i].n_lora)
            return &r->models[i];
    return NULL;
}

int sv_reg_lora_use(sv_registry *r, sv_model *m, const sv_params *p, cdx_lora_use *use)
{
    int n = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < m->n_lora && i < SV_MAX_LORA; i++) {
        const float s = p->lora_given ? p->lora_scale[i] : m->lora[i].scale;
        if (s != 0.0f && m->lora[i].lora) /* scale 0: not applied (llama.cpp leaves it out too) */
            use[n++] = (cdx_lora_use){ m->lora[i].lora, s };
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* ---- /v1/models ---- */

json_t *sv_reg_model_json(sv_registry *r, sv_model *m, long long created)
{
    pthread_mutex_lock(&r->mu);
    const bool loaded = m->state == SV_LOADED;
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:[s]}", "id", m->name, "object", "model", "created",
                          (json_int_t)created, "owned_by", "caldrix", "compatibility", k_compat_names[m->compat],
                          "state", k_state_names[m->state], "tasks", cdx_task_name(m->task));
    if (o && m->compat != SV_COMPATIBLE)
        json_object_set_new(o, "compatibility_reason", json_string(m->reason));
    if (o && loaded) {
        json_object_set_new(o, "chat_template", json_boolean(m->m.tmpl && !m->m.tmpl_chatml));
        json_object_set_new(o, "context_length", json_integer((json_int_t)m->m.n_ctx));
        json_object_set_new(o, "n_vocab", json_integer((json_int_t)m->m.n_vocab));
        if (!m->external)
            json_object_set_new(o, "resident_bytes", json_integer((json_int_t)m->held_bytes));
        if (m->m.spec_off_reason) /* --spec that this model cannot take: served without it */
            json_object_set_new(o, "speculation_off_reason", json_string(m->m.spec_off_reason));
    } else if (o) {
        json_object_set_new(o, "chat_template", json_null()); /* known once loaded */
        json_object_set_new(o, "context_length",
                            r->eo.n_ctx > 0 ? json_integer((json_int_t)r->eo.n_ctx)
                                            : m->ctx_hint > 0 ? json_integer((json_int_t)m->ctx_hint) : json_null());
    }
    if (o && m->state == SV_FAILED)
        json_object_set_new(o, "error", json_string(m->error));
    if (o && r->multi)
        json_object_set_new(o, "pinned", json_boolean(m->pinned));
    if (o && m->n_lora) { /* its adapters (GET /lora-adapters gives their default scales) */
        json_t *l = json_array();
        for (int i = 0; i < m->n_lora; i++)
            json_array_append_new(l, json_pack("{s:i,s:s}", "id", i, "name", m->lora[i].name));
        json_object_set_new(o, "lora_adapters", l);
    }
    pthread_mutex_unlock(&r->mu);
    return o;
}

void sv_reg_ledger(sv_registry *r, uint64_t *used, uint64_t *budget, int *n_loaded)
{
    pthread_mutex_lock(&r->mu);
    *used = r->used;
    *budget = r->budget;
    *n_loaded = r->n_loaded;
    pthread_mutex_unlock(&r->mu);
}
