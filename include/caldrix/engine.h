/* caldrix engine layer: requests over one model, a paged KV cache with prefix sharing, continuous
 * batching, sampling. One loop serves `run`, `bench` and `serve`.
 *
 *   cdx_engine_opts eo = cdx_engine_defaults();   eo.n_ctx = 4096;
 *   cdx_engine *e;  cdx_engine_create(model, tok, &eo, &e, &err);     // tok may be NULL (ids only)
 *   cdx_request r = cdx_request_defaults();
 *   r.prompt = ids; r.n_prompt = n; r.max_tokens = 64; r.on_event = on_event; r.user = me;
 *   uint64_t id;  cdx_engine_submit(e, &r, &id, &err);                 // any thread
 *   while (cdx_engine_busy(e)) cdx_engine_step(e, &err);               // events fire inside step
 *   cdx_engine_free(e);
 *
 * The contract:
 * - Threads. submit, cancel, wait and stats may be called from any thread; step (and so every
 *   event callback) from one thread at a time, the engine thread. Callbacks must not call step.
 * - A round (cdx_engine_step): cancelled requests end; waiting requests are admitted in arrival
 *   order while there is a batch slot and KV memory; every decoding request contributes its next
 *   token, then prompts are cut into the rest of the token budget (decode first, then prefill);
 *   all of it runs as one batched forward pass with explicit positions; then each request that
 *   got logits samples, detokenizes and is told (events). Finished requests free their blocks.
 * - KV memory: a pool of blocks of CDX_KV_BLOCK positions; a sequence holds a block table and
 *   takes blocks as it grows (memory is allocated on first use). A full block is keyed by a
 *   SHA-256 of its tokens and the key of the block before it (the first block's parent key is
 *   the model's fingerprint), so every sequence with the same prefix shares it; blocks no
 *   sequence holds stay findable (least recently used first out) until the pool needs them.
 * - Batch invariance: a request's tokens, logits and logprobs are bit-identical whether it runs
 *   alone or beside others, whatever chunks its prompt was cut into, and whether its prefix came
 *   from the cache (the kernels sum every row in the same order for any batch size).
 * - The prefix store (opts.kv_store): a block pushed out of the pool, and at cdx_engine_free every
 *   keyed block, is written to a file named by its key; a request whose prefix misses the pool
 *   reads such files back (also in a new process). A file is trusted only when its header (model
 *   fingerprint, KV type, shape, key) and its payload's SHA-256 match; else it is deleted.
 * - Admission: a request that can never fit (prompt + max_tokens over n_ctx, or more blocks
 *   than the whole pool) is refused at submit with CDX_ERESOURCE_LIMIT; past max_queue waiting
 *   requests, CDX_ERESOURCE_BUSY. Both messages give what is needed and what there is. When the
 *   pool runs dry mid-generation the newest running request is preempted (blocks freed, its
 *   tokens recomputed when it is admitted again); its output is unchanged.
 * - Events: one per generated token (finish == CDX_FINISH_NONE), then exactly one final event
 *   (finish != CDX_FINISH_NONE). An end-of-generation token ends the request (CDX_FINISH_STOP)
 *   without an event of its own unless ignore_eos. Text is whole UTF-8; text that could be the
 *   start of a stop string is held back, and a stop string is never emitted.
 */
#ifndef CALDRIX_ENGINE_H
#define CALDRIX_ENGINE_H

#include "caldrix/base.h"
#include "caldrix/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sampling ---- */

/* One entry of OpenAI's logit_bias: added to the token's logit before anything else. */
typedef struct cdx_logit_bias {
    int32_t id;
    float bias;
} cdx_logit_bias;

typedef struct cdx_sampler_params {
    float temp;            /* <= 0: greedy (highest logit, lowest id on a tie) */
    int32_t top_k;         /* <= 0: off */
    float top_p;           /* >= 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off; llama.cpp's rule: logit > 0 ? logit / r : logit * r */
    int32_t repeat_last_n; /* how many recent tokens the penalty looks at */
    float presence_penalty;  /* OpenAI's: logit -= presence if the token occurred (0: off) */
    float frequency_penalty; /* OpenAI's: logit -= frequency · count (0: off) */
    uint64_t seed;
    const cdx_logit_bias *bias; /* n_bias entries (ids in the vocabulary, finite biases), copied by
                                 * cdx_sampler_create; applied before the penalties, greedy too */
    int32_t n_bias;
} cdx_sampler_params;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, no repetition penalty. */
CDX_API cdx_sampler_params cdx_sampler_defaults(void);

typedef struct cdx_sampler cdx_sampler; /* one per sequence; not thread-safe */
CDX_API int cdx_sampler_create(const cdx_sampler_params *p, int64_t n_vocab, cdx_sampler **out, cdx_err *err);
CDX_API void cdx_sampler_free(cdx_sampler *s);
/* Chooses the next token from raw logits[n_vocab]; history: the tokens so far (prompt included),
 * for the penalties. Order: logit bias, penalties, top-k, top-p, min-p, temperature, draw. */
CDX_API int32_t cdx_sampler_sample(cdx_sampler *s, const float *logits, const int32_t *history, int64_t n_history);

/* The k highest logits, highest first (lowest id first on a tie). Writes min(k, n) pairs. */
CDX_API void cdx_top_logits(const float *logits, int64_t n, int k, int32_t *ids, float *vals);
/* argmax with the lowest id on a tie */
CDX_API int32_t cdx_argmax(const float *logits, int64_t n);

/* ---- the engine ---- */

#define CDX_KV_BLOCK 16     /* positions per KV block (seed 002's blockTokens) */
#define CDX_MAX_TOP 20      /* OpenAI's limit on top_logprobs (the engine itself takes up to n_vocab) */

typedef struct cdx_model cdx_model;
typedef struct cdx_tok cdx_tok;
typedef struct cdx_engine cdx_engine;

typedef struct cdx_engine_opts {
    int n_threads;              /* 0: every core */
    const cdx_kernels *kernels; /* NULL: cdx_kernels_best() */
    int64_t n_ctx;              /* positions per sequence (0: min(4096, the model's)) */
    int64_t n_blocks;           /* KV pool in blocks (0: max_batch sequences of n_ctx) */
    int max_batch;              /* sequences running at once (default 8) */
    int64_t token_budget;       /* tokens per round (default 512) */
    int max_queue;              /* waiting requests before CDX_ERESOURCE_BUSY (default 64) */
    double max_round_ms;        /* a round with decoding streams aims to last at most this long: the
                                   prompt tokens it adds are cut to what the measured rates fit in the
                                   rest (at least one KV block a round, so prompts always move); a round
                                   with none decoding takes the whole token_budget. 0 (the default): no
                                   target, every round takes the whole token_budget. docs/engine.md */
    const char *kv_store;       /* a directory for the prefix store (made if missing), or NULL */
    uint32_t kv_type;           /* CDX_TYPE_F32 (0, the default) or CDX_TYPE_F16 (llama.cpp's default:
                                   half the memory, and its rounding; see cdx_attn_shape); for a model
                                   computing in bf16, CDX_TYPE_BF16 instead of F16 (half the memory,
                                   exact: cdx_model_kv_type_default gives it) */
    uint64_t kv_bytes_max;      /* the most the KV pool may hold when full, K and V (0: no limit): a
                                   pool larger than that is refused at create (CDX_EINVAL naming
                                   n_blocks, its size and this limit), not found out mid-generation */
    struct cdx_pool *pool;      /* NULL: the engine makes its own pool of n_threads. Else the caller's
                                   (borrowed, outlives the engine): engines sharing it must be stepped
                                   (and created) one at a time, never at once (the server's one thread) */
    /* Speculative decoding (docs/engine.md, "Speculative decoding"): a proposer guesses up to
     * draft_max tokens after a decoding request's last one, the round's forward pass scores them
     * with it, and the request keeps the guesses its own sampler would have drawn, then the token
     * drawn after them: its tokens, logprobs and top logits are bit for bit those of plain decoding.
     * Each request adapts its draft length in draft_min..draft_max and turns speculation off while
     * it does not pay. A hybrid model (recurrent state) cannot roll back and is refused (CDX_EINVAL). */
    int spec;                   /* cdx_spec: CDX_SPEC_OFF (0, the default), _LOOKUP, _AUTO */
    int draft_max, draft_min;   /* 0: the defaults (8 and 1) */
    const struct cdx_model *draft; /* a draft model (borrowed, outlives the engine), or NULL: with spec
                                   auto (or a draft given with spec off: auto) the proposer is this
                                   model's greedy continuation. It must share the target's token ids
                                   (the caller checks the texts; the engine refuses a recurrent state
                                   and a vocabulary more than 1/8 apart in size) */
    bool spec_keep_on;          /* the turn-off rule never turns it off, nor cuts a draft for its cost
                                   (measurements and tests: then what is proposed depends on nothing
                                   but the tokens) */
    /* A model split by layers (docs/models.md, "One model over several machines"): this engine
     * computes the stage's layers (the first: layer0 0) and its KV blocks hold only those; the stage's
     * next hands the hidden rows on, with each sequence's block ids, so that a later stage keeps the
     * same blocks in a pool of its own (n_blocks of them). Copied at create; NULL: the whole model.
     * Not with kv_store (refused: the store would hold a slice of the layers). */
    const struct cdx_stage *stage;
    /* With a first stage (stage, layer1 < n_layer): rounds where two or more sequences decode and
     * nothing else runs are pipelined across rounds: the decoding sequences go in up to this many
     * groups, and rank 0 computes one group's layers while the later ranks compute another's
     * (0: as many groups as stage->n_micro, 2..4; 1: none, each round whole as before; at most 4,
     * refused above). Off with speculative decoding, images and RoPE scaling by length. */
    int split_groups;
} cdx_engine_opts;

/* The proposers: prompt lookup continues the latest earlier occurrence of the text's last n-gram
 * (n = 4 down to 2) in the prompt and the generated tokens; auto picks the best one the engine
 * has: the draft model when opts.draft is set, else lookup. */
typedef enum cdx_spec {
    CDX_SPEC_OFF = 0,
    CDX_SPEC_LOOKUP,
    CDX_SPEC_AUTO,
} cdx_spec;

/* "off", "lookup", "auto" ("" for another value); cdx_spec_parse: -1 for an unknown name. */
CDX_API const char *cdx_spec_name(int spec);
CDX_API int cdx_spec_parse(const char *name);

CDX_API cdx_engine_opts cdx_engine_defaults(void);

/* The ranges of the options above that a user sets: one row each, which cdx_engine_create checks
 * (a value outside its row is CDX_EINVAL naming the option and the value; 0 means the default and
 * is not checked) and front ends parse and print --help from, so that what a command accepts is
 * what the engine takes. */
typedef enum cdx_engine_opt_id {
    CDX_OPT_THREADS,      /* n_threads: 1..cdx_threads_max() (4 x the cores this process may use) */
    CDX_OPT_CTX,          /* n_ctx */
    CDX_OPT_KV_BLOCKS,    /* n_blocks */
    CDX_OPT_MAX_BATCH,    /* max_batch */
    CDX_OPT_TOKEN_BUDGET, /* token_budget */
    CDX_OPT_MAX_QUEUE,    /* max_queue */
    CDX_OPT_DRAFT_MAX,    /* draft_max */
    CDX_OPT_DRAFT_MIN,    /* draft_min (<= draft_max) */
    CDX_OPT_COUNT
} cdx_engine_opt_id;

typedef struct cdx_engine_range {
    const char *flag;     /* the command-line option that sets it: "--max-batch" ("": none) */
    const char *field;    /* the cdx_engine_opts field: "max_batch" */
    int64_t lo, hi;
} cdx_engine_range;

/* The row of one option (id < CDX_OPT_COUNT). */
CDX_API cdx_engine_range cdx_engine_opt_range(cdx_engine_opt_id id);

typedef enum cdx_finish {
    CDX_FINISH_NONE = 0,   /* a token event: more to come */
    CDX_FINISH_STOP,       /* an end-of-generation token or a stop string */
    CDX_FINISH_LENGTH,     /* max_tokens, or the context is full */
    CDX_FINISH_CANCELLED,  /* cdx_engine_cancel */
    CDX_FINISH_ERROR,      /* see message */
} cdx_finish;

CDX_API const char *cdx_finish_name(cdx_finish f); /* "stop", "length", "cancelled", "error", "" */

typedef struct cdx_event {
    uint64_t id;
    void *user;
    cdx_finish finish;
    /* token events (finish == CDX_FINISH_NONE); on the final event token is -1 */
    int32_t token;
    int64_t index;              /* 0-based among this request's generated tokens */
    float logprob;              /* log softmax of the raw logits at the token; NaN unless the
                                 * request asked for logprobs (or top_logprobs) */
    int n_top;                  /* the request's top_logprobs (0 when not asked) */
    const int32_t *top_ids;     /* [n_top], highest first (lowest id first on a tie) */
    const float *top_logits;    /* raw logits of top_ids */
    const float *top_logprobs;  /* their log softmax */
    /* the text ready after this token (whole UTF-8; on the final event, whatever was held) */
    const char *text;
    size_t text_len;
    /* usage so far (valid on every event) */
    int64_t n_prompt, n_cached, n_generated;
    double ms_first;            /* submit to first token, ms (0 before it) */
    const char *message;        /* CDX_FINISH_ERROR: what went wrong; else NULL */
    /* Token events: the bytes this token adds to the text, as the detokenizer makes them in
     * context (cdx_tok_piece: a leading space the decoder drops only at the start of the text,
     * a special token's text unless skip_special, a byte token's one raw byte, so a piece may
     * split a UTF-8 sequence); piece_first: it was made as the text's start. Every token event's
     * piece, concatenated, is the text's raw bytes (before U+FFFD replaces invalid UTF-8). */
    const char *piece;
    size_t piece_len;
    bool piece_first;
    /* Every event: how many bytes of those concatenated pieces the text given so far (this
     * event's included) stands for; a token is wholly in the given text once its piece ends at or
     * before this. It stops short of pieces whose text is held back; on the final event after a
     * stop string it is where the returned text ends (the stop string's pieces lie beyond). */
    int64_t n_covered;
    /* Speculative decoding, so far (every event): the proposer's name (NULL: the request does not
     * speculate), the draft tokens it proposed and how many of them were kept, and whether the
     * turn-off rule turned speculation off for this request (lookup probes again later). */
    const char *spec_proposer;
    int64_t spec_proposed, spec_accepted;
    bool spec_off;
} cdx_event;

typedef void (*cdx_event_fn)(const cdx_event *ev);

typedef struct cdx_request {
    const int32_t *prompt;       /* copied at submit; at least one token */
    int64_t n_prompt;
    cdx_sampler_params sampling; /* each request has its own seed */
    int64_t max_tokens;          /* <= 0: until end of generation or a full context */
    bool ignore_eos;
    const char *const *stop;     /* stop strings (copied); never emitted */
    int n_stop;
    bool logprobs;               /* each token event's logprob (a whole-vocabulary log-sum-exp a
                                  * token; top_logprobs > 0 implies it); else it is NaN */
    int top_logprobs;            /* 0..n_vocab */
    bool skip_special;           /* leave special tokens' text out of the text */
    bool keep_marks;             /* ... but keep the tool-call and channel marks' (cdx_tok_is_mark):
                                  * a request whose reply is parsed for calls, or whose grammar may
                                  * match a mark by its text */
    cdx_event_fn on_event;       /* called on the engine thread, inside cdx_engine_step */
    void *user;
    /* Images (vision models): the processor's pixel_values of each image, in prompt order. The
     * k-th image token of the prompt takes feature row k (the images' tiles in order, each
     * cdx_vision_info.tokens_per_tile rows); the counts must agree. Pixels are copied at submit;
     * the engine encodes an image on its own thread when a position it fills is computed, so an
     * image whose positions all come from the prefix cache is not encoded again. Each image's
     * SHA-256 (of its pixel floats) enters the keys of the blocks that hold its tokens. */
    const struct cdx_request_image *images;
    int n_images;
    /* Constrained decoding (docs/grammar.md): only tokens the grammar allows are sampled (their
     * logits are masked after the forward pass; greedy takes the best allowed), the end of
     * generation only where the grammar is complete, and the request stops when nothing but the
     * end may follow. A dead end of an incomplete grammar ends it with CDX_FINISH_ERROR. logprobs
     * are those of the masked distribution. Borrowed: must outlive the request (its final event).
     * Needs the engine's tokenizer. NULL: unconstrained. */
    const struct cdx_grammar *grammar;
    bool no_speculation;         /* this request never speculates (serve's "speculative": false) */
    /* LoRA adapters for this request only (caldrix/model.h: opened on the engine's model), applied to
     * its rows of each batch; other requests in the same batch are unaffected. The set is copied at
     * submit, the adapters borrowed (they must outlive the request). Its K/V blocks are keyed by the
     * adapters' fingerprints and scales: prefixes are shared only between requests with the same set.
     * NULL or n == 0: none. */
    const struct cdx_lora_set *lora;
} cdx_request;

typedef struct cdx_request_image {
    const float *pixels;         /* [n_tiles][3][image_size][image_size] */
    int64_t n_tiles;
} cdx_request_image;

CDX_API cdx_request cdx_request_defaults(void);

/* tok (NULL: no text, ids only) must outlive the engine, as must m. */
CDX_API int cdx_engine_create(const cdx_model *m, const cdx_tok *tok, const cdx_engine_opts *o, cdx_engine **out,
                              cdx_err *err);
CDX_API void cdx_engine_free(cdx_engine *e);

/* Queues a request (*id gets its id, never 0). CDX_ERESOURCE_LIMIT / CDX_ERESOURCE_BUSY as above,
 * CDX_EINVAL for a bad request (no prompt, an id outside the vocabulary, top_logprobs too big). */
CDX_API int cdx_engine_submit(cdx_engine *e, const cdx_request *r, uint64_t *id, cdx_err *err);
/* Ends a request at the next round with CDX_FINISH_CANCELLED (a request already finished, or an
 * unknown id: nothing). */
CDX_API void cdx_engine_cancel(cdx_engine *e, uint64_t id);
/* One scheduling round. An error of the forward pass ends the requests of that round with
 * CDX_FINISH_ERROR and is returned; the engine stays usable. */
CDX_API int cdx_engine_step(cdx_engine *e, cdx_err *err);
/* Whether any request is waiting or running (or submitted and not yet seen by step). */
CDX_API bool cdx_engine_busy(cdx_engine *e);
/* Blocks until a request is submitted or cancelled, or ms pass (for an engine thread that is idle). */
CDX_API void cdx_engine_wait(cdx_engine *e, int ms);

typedef struct cdx_engine_stats {
    int64_t n_ctx, n_blocks;                 /* configuration */
    uint64_t kv_pool_bytes;                  /* K and V of n_blocks blocks: what the pool holds when full */
    int64_t blocks_used;                     /* held by at least one sequence */
    int64_t blocks_cached;                   /* held by none, still findable by prefix */
    int64_t blocks_free;                     /* n_blocks - used - cached */
    int64_t running, waiting;
    int max_batch, max_queue;
    uint64_t prompt_tokens, cached_tokens, generated_tokens; /* totals since creation */
    uint64_t preemptions, rounds;
    uint64_t store_reads, store_writes;      /* blocks read from / written to the prefix store */
    uint64_t image_tiles_encoded;            /* tiles run through the vision tower */
    double image_encode_ms;                  /* time spent in it */
    uint64_t spec_proposed, spec_accepted;   /* draft tokens proposed, and kept (totals) */
    uint64_t spec_verifies;                  /* request-rounds that scored a draft */
    uint64_t spec_requests, spec_turned_off; /* requests ended that speculated, and of them those the rule
                                                turned off at least once */
    int64_t token_budget;                    /* tokens a round's pass takes at most (configuration) */
    double max_round_ms;                     /* the round target (configuration; 0: none) */
    double round_fixed_ms, round_token_ms;   /* the fitted cost of a round, fixed + per token (0: not
                                                measured yet) */
    const char *spec_proposer;               /* "lookup", "draft" (static), or NULL: no speculation */
    int split_groups;                        /* a split model's decoding groups in flight at most (0: none) */
    uint64_t split_overlapped;               /* rounds begun while another was still in flight (its
                                                later ranks computing): the split's pipeline at work */
} cdx_engine_stats;
/* A snapshot taken at the end of the last round (consistent; any thread). */
CDX_API void cdx_engine_get_stats(cdx_engine *e, cdx_engine_stats *st);

#ifdef __cplusplus
}
#endif
#endif
