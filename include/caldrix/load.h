/* caldrix load: one call from a model reference to everything that runs it.
 *
 *   cdx_load_opts lo = cdx_load_defaults();
 *   cdx_engine_opts eo = cdx_engine_defaults();  lo.engine = &eo;  lo.chat = true;
 *   cdx_loaded *l = NULL;  cdx_load_stage at;
 *   if (cdx_load("Qwen/Qwen3-0.6B", &lo, &l, &at, &err) < 0) fprintf(stderr, "%s\n", err.msg);
 *   ... l->engine, l->tok, l->chat.tmpl ...
 *   cdx_load_close(l);
 *
 * The sequence `run`, `bench` and `serve` share: resolve the reference (a path that exists opens as
 * it is; anything else goes through cdx_hub_resolve with its memory admission), open the model,
 * its tokenizer, its chat template, its image processor, pick the KV type, make the engine. Nothing
 * here prints or reads the environment: the hub's progress goes to opts.hub->on_event, the model's
 * notes stay in cdx_model_notes, the chat template's in chat.note.
 */
#ifndef CALDRIX_LOAD_H
#define CALDRIX_LOAD_H

#include "caldrix/base.h"
#include "caldrix/embed.h"
#include "caldrix/engine.h"
#include "caldrix/hub.h"
#include "caldrix/image.h"
#include "caldrix/model.h"
#include "caldrix/template.h"
#include "caldrix/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a load stopped (front ends word their messages by it: "--chat-template: ..."). */
typedef enum cdx_load_stage {
    CDX_LOAD_RESOLVE = 0,   /* the reference (and admission) */
    CDX_LOAD_MODEL = 1,     /* the weights */
    CDX_LOAD_TOKENIZER = 2,
    CDX_LOAD_CHAT = 3,      /* the chat template */
    CDX_LOAD_IMAGES = 4,    /* the image processor */
    CDX_LOAD_ENGINE = 5,
    CDX_LOAD_DONE = 6,
    CDX_LOAD_DRAFT = 7,     /* the draft model (opts.draft): its reference, weights or tokenizer */
    CDX_LOAD_DRAFT_REFUSED = 8, /* the draft cannot draft for this model (bad input, as a bad option is) */
} cdx_load_stage;

typedef enum cdx_load_images {
    CDX_LOAD_IMAGES_NO = 0,        /* no image processor */
    CDX_LOAD_IMAGES_IF_VISION = 1, /* a vision model's (serve: image_url parts) */
    CDX_LOAD_IMAGES_REQUIRED = 2,  /* the model must take images (run --image): refused otherwise */
} cdx_load_images;

typedef struct cdx_load_opts {
    cdx_dtype dtype;             /* the compute type (AUTO: the format's default) */
    uint64_t weight_budget;      /* --weight-budget (0: none; admission may pick one for a mixture of
                                    experts too large for memory) */
    bool paths_only;             /* ref must be a file or folder on disk (bench): no reference lookup */
    const cdx_hub_opts *hub;     /* how a reference resolves: events, the estimate's context; NULL:
                                    silent defaults. Its weight_budget, budget_out and dtype are set here */
    /* ref NULL: this GGUF image in memory that outlives the handle (the bundled model) */
    const void *default_gguf;
    size_t default_gguf_size;
    const char *default_name;    /* for messages: "stories260K.gguf (bundled)" */
    bool tokenizer;              /* open the tokenizer (the GGUF's vocabulary or the checkpoint's files) */
    bool chat;                   /* open the chat template: chat_template, else the model's, else ChatML
                                    (with a tokenizer only) */
    const char *chat_template;   /* a Jinja file standing in for the model's (NULL: none) */
    cdx_load_images images;
    const char *const *image_opts; /* KEY=JSON overrides of the processor settings (--image-opt) */
    int n_image_opts;
    const cdx_engine_opts *engine; /* NULL: no engine. Its kv_type is used when kv_type_set, else the
                                      model's default (cdx_model_kv_type_default) */
    bool kv_type_set;
    /* tasks: the caller serves embed and rerank models too (serve). Then the task is task when task_set,
     * else what the folder declares (cdx_task_declared: an encoder or a folder with modules.json embeds,
     * anything else generates); an embed or rerank model computes in f32 when dtype is AUTO, gets no chat
     * template, and with engine set gets an embedder (on engine->pool and n_threads) instead of an engine.
     * tasks false: always generate (an encoder is then refused by the engine). */
    bool tasks;
    bool task_set;
    cdx_task task;
    int32_t yes_id, no_id;       /* a reranker's answer tokens (cdx_embedder_opts; 0, 0: the tokenizer's) */
    int64_t layer0, layer1;      /* a split model's stage: cdx_model_opts.layer0/layer1 (0, 0: every layer) */
    cdx_weights_io weights_io;   /* cdx_model_opts.weights_io */
    bool expert_pread;           /* cdx_model_opts.expert_pread */
    /* Speculative decoding with a draft model (docs/engine.md): a reference resolved as ref is (same
     * hub options, dtype, paths_only), opened first with its tokenizer, and given to the engine as
     * engine->draft (which turns spec off into auto). Refused (CDX_EINVAL at CDX_LOAD_DRAFT_REFUSED,
     * naming both models) before the model loads: a mixture of experts, a vision model or a recurrent
     * state as draft; after it: a vocabulary size more than 1/8 apart, a token text or special-token
     * kind that differs at an id both have (the first such id and both texts; padding may differ, as
     * Qwen's sizes do), other BOS/EOS ids, a draft with more multiply-adds a token than the model, a
     * model that cannot speculate. Needs engine; the model's tokenizer is opened for the check. */
    const char *draft;
    /* --draft auto (draft NULL): candidates on disk (files or folders: the caches' models, which the
     * caller lists), tried after the model loads, those reading the most weight bytes a token first
     * (inspect's estimate, no weights read), passing over the model itself, a candidate inspect
     * refuses and one reading more than half the model's weight bytes a token (decode reads every
     * weight once: a draft reading more cannot pay); the first that passes draft's checks is the
     * draft. draft_note says which, or that none did and why each was passed over (then no draft). */
    const char *const *draft_candidates;
    int n_draft_candidates;
    /* Speculation where the model can (serve: one --spec for several models): a model whose cache
     * cannot be cut back (a recurrent state) gets its engine without speculation, and spec_note says
     * why, instead of the engine's refusal. A draft given is still refused for it. */
    bool spec_if_able;
} cdx_load_opts;

CDX_API cdx_load_opts cdx_load_defaults(void); /* tokenizer on, everything else off */

/* Everything a loaded model is; owned by the handle and freed by cdx_load_close. */
typedef struct cdx_loaded {
    char *path;                  /* the file or folder opened (NULL: the bundled image) */
    char *resolved;              /* the path cdx_hub_resolve gave (NULL when ref was a path) */
    cdx_model *model;
    cdx_tok *tok;                /* NULL: the model has no tokenizer (or opts.tokenizer was off) */
    cdx_chat_setup chat;         /* chat.tmpl NULL unless opts.chat and a tokenizer */
    cdx_image_proc image_proc;   /* valid when has_image_proc */
    bool has_image_proc;
    uint64_t weight_budget;      /* the budget the weights opened under (0: none) */
    uint32_t kv_type;            /* the KV cache's storage type */
    cdx_engine *engine;          /* NULL unless opts.engine and the task is generate */
    cdx_task task;               /* what it is served for */
    cdx_st_pipeline pipe;        /* the folder's sentence-transformers files (present false: none) */
    cdx_embedder *embedder;      /* an embed or rerank task with opts.engine; else NULL */
    struct cdx_loaded *draft;    /* opts.draft's model and tokenizer (no engine), freed after the engine */
    char spec_note[256];         /* opts.spec_if_able turned speculation off for this model: why ("": not) */
    char draft_note[2048];       /* opts.draft_candidates: the draft chosen, or why none was */
} cdx_loaded;

/* Loads ref (a path, an alias, owner/name[@rev], ollama:name[:tag]; NULL: opts.default_gguf).
 * On success *out owns everything; free it with cdx_load_close. On failure returns CDX_E* (< 0),
 * *out is NULL, *stage (may be NULL) says which step failed and err->msg why, naming the file,
 * field and value as the step's own error does. Not thread-safe with respect to one opts. */
CDX_API int cdx_load(const char *ref, const cdx_load_opts *opts, cdx_loaded **out, cdx_load_stage *stage,
                     cdx_err *err);
CDX_API void cdx_load_close(cdx_loaded *l); /* NULL: no-op; the engine first, the model last */

/* One draft candidate's verdict (cdx_load_judge_drafts). */
typedef struct cdx_draft_verdict {
    const char *path;            /* the candidate (borrowed from the paths given) */
    uint64_t weight_bytes;       /* weight bytes a token (inspect's estimate, or the loaded draft's) */
    bool ok;                     /* it passes --draft's checks for the model */
    char why[512];               /* why not ("" when ok) */
} cdx_draft_verdict;

/* --draft auto's judgment of every candidate (files or folders) for the loaded model t (t->tok
 * needed; tname names it in messages): *out (free() it) has one verdict a candidate, best first —
 * those passing, most weight bytes a token first (the first is the one --draft auto takes), then the
 * others with why. The model itself is left out. Only running out of memory fails. */
CDX_API int cdx_load_judge_drafts(const cdx_loaded *t, const char *tname, const char *const *paths, int n,
                                  cdx_draft_verdict **out, int *n_out, cdx_err *err);

/* A model's tokenizer: its GGUF vocabulary, or the checkpoint folder's tokenizer files (path NULL:
 * the bundled model). *tok NULL and 0 when it has none. */
CDX_API int cdx_load_tokenizer(const char *path, const cdx_model *m, cdx_tok **tok, cdx_err *err);
/* A vision model's processor settings from its checkpoint folder dir, with KEY=JSON overrides,
 * checked against the model's tower (tile side, tokens per tile). CDX_EINVAL when it takes no images. */
CDX_API int cdx_load_image_proc(const char *dir, const cdx_model *m, const char *const *opts, int n_opts,
                                cdx_image_proc *pp, cdx_err *err);

#ifdef __cplusplus
}
#endif
#endif
