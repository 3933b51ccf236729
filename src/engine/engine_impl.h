/* The engine's private types and the functions its files share (src/engine/: engine.c creates and
 * frees, block_pool.c keeps the KV pool and the prefix keys, request.c holds a request's lifetime and
 * events, scheduler.c runs the rounds). Nothing here is part of the contract (include/caldrix/engine.h).
 * The engine, in short: a sequence is its tokens (prompt, then what it generated) and a block table;
 * n_done of its positions have K/V in the blocks. Each round every running sequence with one token
 * left to compute (decoding) adds it, then sequences with more (prompts, or a preempted sequence
 * coming back) add chunks up to the token budget, all in one cdx_forward_seqs. A sequence whose
 * last token was computed samples the next one. The vLLM scheduling rules, in a CPU engine's sizes. */
#ifndef CDX_ENGINE_IMPL_H
#define CDX_ENGINE_IMPL_H

#include "caldrix/engine.h"
#include "caldrix/model.h"
#include "caldrix/tokenizer.h"
#include "engine/engine_grammar.h"
#include "engine/kv_store.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define KEY_LEN 32
#define IMAGE_CACHE 8              /* images whose features the engine keeps */
#define NONE (-1)

typedef struct kv_block {
    void *k, *v;               /* [n_layer][CDX_KV_BLOCK][kv_dim] elements of kv_type each; NULL until first use */
    int32_t ref;               /* sequences holding it */
    bool keyed;                /* in the prefix table (full, with a key) */
    bool stored;               /* its key's file is in the prefix store */
    uint8_t key[KEY_LEN];
    int32_t hnext;             /* prefix table chain */
    int32_t prev, next;        /* LRU list of keyed blocks no sequence holds */
    void *snap;                /* a hybrid model's recurrent state after the block's last position (keyed
                                * blocks only), or NULL: a prefix may resume only after a block with one */
} kv_block;

/* A request's speculative decoding (spec.c): its draft of this round, the adaptive draft length,
 * the acceptance it has seen and whether the turn-off rule has it off. */
typedef struct eng_spec_state {
    bool on;                   /* the request speculates at all (the engine does, and it did not opt out) */
    bool off;                  /* turned off by the rule (lookup probes again now and then) */
    bool turned_off;           /* off was set at least once (the events' spec_off) */
    int k;                     /* the draft length it tries next (draft_min..draft_max) */
    int n_draft;               /* tokens drafted this round (scored after its last token) */
    int32_t *draft;            /* [draft_max] */
    double acc, prop;          /* decayed counts of accepted and proposed draft tokens */
    int64_t proposed, accepted;/* totals (the events') */
    int64_t off_at;            /* n_gen when it was turned off (it probes SPEC_PROBE << n_probes tokens later) */
    int n_probes;              /* probes made since it was last on by the rule */
    bool probing;              /* this round's draft is a probe (made whatever the rule says) */
    cdx_kv *dkv;               /* the draft model's cache of this request (made on its first draft) */
    int32_t *dtoks;            /* [n_ctx] the tokens whose K/V it holds (dkv->n_past of them) */
    int64_t doff;              /* the request's position of the draft cache's first token: > 0 while the
                                * draft sees a window of the latest tokens only (a probe) */
    int64_t restart_at;        /* this round: the draft cache starts over at this position (-1: it goes on) */
} eng_spec_state;

/* A cost model: decayed sums of (tokens, ms) per forward pass, fitted to ms = a + b·tokens. */
typedef struct eng_cost {
    double s0, sx, sxx, sy, sxy;
} eng_cost;

typedef struct seq {
    uint64_t id;
    void *user;
    cdx_event_fn on_event;
    int32_t *toks;             /* prompt, then generated tokens */
    int64_t n_toks, n_prompt;
    size_t cap_toks;
    int64_t n_done;            /* positions with K/V in the blocks */
    int64_t rope_len;          /* the sequence's length when they were computed (cdx_model_rope_restart) */
    int32_t *blk;              /* block table (pool indices) */
    void **ktab, **vtab;       /* the same as pointers, for the forward pass */
    int64_t n_blk, cap_blk;
    uint8_t (*keys)[KEY_LEN];  /* keys[i]: block i's prefix key, for i < n_keys */
    int64_t n_keys, cap_keys;
    int64_t n_registered;      /* blocks offered to the prefix table so far */
    int64_t max_tokens, n_gen, n_cached;
    bool ignore_eos, skip_special, cancelled, admitted_once;
    bool in_flight;            /* its token is in a decoding group in flight (a split model's pipeline,
                                * scheduler.c): nothing else touches it until the group ends */
    bool logprobs;             /* the request wants logprobs (asked, or top_logprobs > 0) */
    int n_top;
    int32_t *top_ids;
    float *top_logits, *top_lp;
    cdx_sampler *smp;
    const cdx_grammar *grammar; /* borrowed from the request, or NULL */
    cdx_lora_use *lora_use;    /* the request's adapters (copied; the adapters are borrowed) */
    cdx_lora_set lora;         /* lora.n == 0: none */
    uint8_t root[KEY_LEN];     /* the parent key of its first block: the engine's, with its adapters */
    cdx_matcher *matcher;      /* its state, made on the first logits */
    char **stop;
    int n_stop;
    size_t max_stop;
    cdx_tok_stream ts;
    char *text;                /* all generated text (stop strings are matched on it) */
    size_t n_text, cap_text, n_emitted;
    char *piece;               /* the last token's piece (cdx_event.piece) */
    size_t n_piece, cap_piece;
    bool piece_first;
    int64_t n_raw;             /* bytes of all pieces so far */
    int64_t n_covered;         /* how many of them the text given so far stands for */
    double t_submit, t_first;
    uint64_t order;            /* admission order: the newest is preempted first */
    void *state;               /* a hybrid model's recurrent state at n_done (NULL for other models) */
    int32_t snap_blk;          /* the block with this sequence's latest decode snapshot, or NONE */
    uint8_t snap_key[KEY_LEN]; /* its key (the block may have gone to another prefix since) */
    struct seq *next;          /* the list it is on (inbox, waiting, running) */
    /* images (vision models): img_row[p] is the feature row of prompt position p, or -1 */
    int32_t *img_row;
    struct seq_image *img;
    int n_img;
    eng_spec_state sp;         /* speculative decoding (spec.c) */
} seq;

typedef struct seq_image {
    float *pixels;             /* [n_tiles][3][side][side]; freed once encoded */
    int64_t n_tiles, row0;     /* its first feature row */
    uint8_t key[KEY_LEN];      /* SHA-256 of the pixel floats */
    float *feat;               /* [n_tiles · tokens_per_tile][n_embd] once encoded, else NULL */
} seq_image;

/* A split model's pipeline across rounds (scheduler.c, docs/models.md "Micro-batches"): rank 0 runs its
 * layers over one group of decoding sequences and sends the rows on (cdx_forward_begin), then takes
 * back and samples the oldest group in flight (cdx_forward_end) while the later ranks compute the
 * others. A group is one decoded token per sequence, in buffers of its own ([cap] each). */
enum { ENG_MAX_GROUPS = 4 };
typedef struct eng_flight {
    int n;                     /* sequences, and tokens: one each */
    bool any_lora;
    int32_t *tok, *seq;
    int64_t *pos;
    bool *want;
    const cdx_lora_set **lora;
    struct seq **seqs;
    cdx_kv_seq *kv;
    float *logits;             /* [cap][n_vocab] */
    double *lse;
    int *lse_rows;
} eng_flight;

struct cdx_engine {
    eng_grammar eg;            /* the vocabulary trie for grammars (engine thread) */
    const cdx_model *m;
    const cdx_tok *tok;
    const cdx_hparams *hp;
    cdx_engine_opts o;
    cdx_forward_ctx *fc;
    int64_t kv_dim;            /* n_head_kv · head_dim */
    size_t block_floats;       /* elements of K (or V) in one block */
    size_t elem_bytes;         /* 4 (f32) or 2 (f16, bf16) */
    size_t state_bytes;        /* a hybrid model's recurrent state per sequence; 0: none */
    int64_t n_snaps, max_snaps; /* state snapshots held by blocks, and the cap */
    uint8_t root_key[KEY_LEN]; /* the parent key of every sequence's first block */
    char *store;               /* the prefix store's directory, or NULL */
    kv_store_shape shape;
    /* the pool */
    kv_block *blocks;
    char **slabs;              /* the blocks' K and V storage, carved from huge-page slabs (block_pool.c) */
    int64_t n_slabs, n_carved; /* slabs allocated, blocks given storage */
    char *slab_next;           /* the next block's storage in the newest slab */
    int64_t slab_left;         /* blocks the newest slab still holds */
    int32_t *free_stack;       /* unkeyed blocks no sequence holds */
    int64_t n_free;
    int32_t lru_head, lru_tail;
    int64_t n_lru;
    int32_t *buckets;
    uint64_t n_buckets;
    /* requests: seen by the engine thread only, except the inbox */
    seq *waiting, *running;
    int64_t n_waiting, n_running;
    uint64_t next_order;
    /* per-round buffers */
    int32_t *b_tok, *b_seq;
    const float **b_embd;      /* [budget]: image features replacing a token's embedding, or NULL */
    const cdx_lora_set **b_lora; /* [budget]: the adapters of a token's request, or NULL */
    cdx_vision_info vis;       /* when the model takes images (has_vision) */
    bool has_vision;
    uint64_t t_img_tiles;
    double t_img_ms;
    /* the features of recently encoded images by key, so an image whose prompt is cached only in
     * part (its last rows in a block not yet full) is not encoded again: least recently used out */
    struct { uint8_t key[KEY_LEN]; float *feat; size_t n; uint64_t used; } icache[IMAGE_CACHE];
    uint64_t icache_clock;
    int64_t *b_pos;
    bool *b_want;
    seq **b_seqs;              /* [max_batch] the sequences in this round, in cdx_kv_seq order */
    cdx_kv_seq *b_kv;
    seq **b_logit_seq;         /* [max_batch] whose logits row i is */
    double *b_lse;             /* [max_batch] log-sum-exp of logits row i (NaN: not wanted) */
    int *b_lse_rows;           /* [max_batch] the rows whose request wants logprobs */
    float *logits;             /* [max_batch][n_vocab] */
    /* shared with other threads (mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    seq *inbox, *inbox_tail;
    int64_t n_inbox;
    uint64_t *cancels;
    size_t n_cancels, cap_cancels;
    uint64_t next_id;
    cdx_engine_stats stats;    /* the snapshot */
    uint64_t t_prompt, t_cached, t_generated, t_preempt, t_rounds, t_store_r, t_store_w;
    /* speculative decoding */
    const struct eng_proposer *proposer; /* NULL: off */
    const cdx_model *draft;    /* the draft model (borrowed), or NULL */
    cdx_forward_ctx *draft_fc; /* its forward pass (the engine's threads) */
    float *draft_logits;       /* [draft n_vocab] */
    int64_t draft_vocab;
    double draft_ratio;        /* the draft's weight bytes a token / the model's (the draft cost's prior) */
    int64_t max_logits;        /* logits rows a round may ask for: max_batch · (1 + draft_max) with a proposer */
    int *b_logit_rows;         /* [max_logits] at a sequence's first row: how many rows are its own */
    eng_cost cost;             /* the model's rounds (tokens, ms) */
    eng_cost dcost;            /* the draft model's passes (tokens, ms) */
    double acc_e, prop_e;      /* decayed counts of kept and proposed draft tokens over every request: a new
                                * request's prior */
    uint64_t t_spec_prop, t_spec_acc, t_spec_verify, t_spec_req, t_spec_off;
    /* a split model's pipeline (n_groups 0: none) */
    int n_groups;              /* groups in flight at most */
    eng_flight fl[ENG_MAX_GROUPS]; /* a ring: fl_head the oldest of n_fl in flight */
    int fl_head, n_fl;
    int64_t fl_cap;            /* sequences a group holds at most */
    uint64_t t_overlap;        /* groups begun while another was in flight */
};

/* ---- spec.c: speculative decoding ---- */

/* A proposer: up to k_max tokens guessed to follow s's tokens, into draft; returns how many. */
typedef struct eng_proposer {
    const char *name;
    int (*propose)(cdx_engine *e, seq *s, int32_t *draft, int k_max);
} eng_proposer;

extern const eng_proposer eng_proposer_lookup, eng_proposer_draft;
/* Frees s's per-request state. */
void eng_spec_free(seq *s);

/* Makes s's per-request state (at submit); CDX_OK or CDX_ENOMEM. */
int eng_spec_init(cdx_engine *e, seq *s, bool opted_out);
/* s decodes this round with `spare` budget tokens and pool blocks beyond its own next one:
 * fills s->sp.draft and returns how many to score (0: none). */
int eng_spec_draft(cdx_engine *e, seq *s, int64_t spare);
/* After s's rows were sampled: n_kept of its n_draft guesses were kept. */
void eng_spec_settle(cdx_engine *e, seq *s, int n_kept);
/* A round of n tokens took ms (the cost model the turn-off rule and the round target read). */
void eng_spec_round(cdx_engine *e, int64_t n, double ms);
/* The cost model: a round of n tokens takes *a + *b·n ms (least squares over the rounds so far,
 * recent ones weighing more; both 0 before the first round). */
void eng_cost_fit(const cdx_engine *e, double *a, double *b);
double eng_round_ms(const cdx_engine *e, int64_t n);

/* ---- scheduler.c ---- */

/* Prompt tokens a round that already holds n_dec tokens may add so that a round costing a + b·n ms
 * lasts at most T = max(target_ms, 2·(a + b·n_dec)) (prompts get at least the decoding tokens'
 * own time): floor((T - a) / b) - n_dec, within lo..hi (hi where b <= 0). */
int64_t eng_prefill_budget(double a, double b, double target_ms, int64_t n_dec, int64_t lo, int64_t hi);

/* The groups of a split model's pipeline still in flight, their answers taken off the line and dropped
 * (the engine's end; their sequences are not touched). */
void eng_pipe_drain(cdx_engine *e);

/* ---- block_pool.c: keys, the pool, block tables, prefix registration, state snapshots ---- */

void eng_seq_block_key(const seq *s, int64_t i, const uint8_t parent[KEY_LEN], uint8_t out[KEY_LEN]);
int eng_seq_make_keys(seq *s);
int32_t eng_table_find(const cdx_engine *e, const uint8_t key[KEY_LEN]);
void eng_table_insert(cdx_engine *e, int32_t b, const uint8_t key[KEY_LEN]);
int64_t eng_pool_available(const cdx_engine *e);
int32_t eng_pool_take(cdx_engine *e);
void eng_pool_hold(cdx_engine *e, int32_t b);
void eng_pool_release(cdx_engine *e, int32_t b);
int eng_seq_push_block(seq *s, cdx_engine *e, int32_t b);
void eng_seq_release_blocks(cdx_engine *e, seq *s);
void eng_seq_register_blocks(cdx_engine *e, seq *s);
int64_t eng_next_snap(const seq *s);
void eng_seq_snapshot(cdx_engine *e, seq *s);

/* ---- request.c: a request's lifetime, tokens, text, events, images ---- */

void eng_seq_free(seq *s);
void eng_seq_finish(cdx_engine *e, seq *s, cdx_finish f, const char *message);
cdx_finish eng_seq_on_logits(cdx_engine *e, seq *s, float *logits, double lse, const char **msg);
int eng_seq_image_row(cdx_engine *e, seq *s, int64_t p, const float **out, cdx_err *err);

#endif
