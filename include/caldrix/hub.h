/* caldrix hub layer: model references, the Hugging Face Hub and its cache, Ollama tags, aliases,
 * the import rules (what is refused and why) and memory admission.
 *
 *   cdx_err err = {0};
 *   char *path = NULL;
 *   if (cdx_hub_resolve("Qwen/Qwen3-0.6B@main", NULL, &path, &err) < 0) fprintf(stderr, "%s\n", err.msg);
 *   ... open path (a .gguf file or a snapshot directory) with the model layer ...
 *   free(path);
 *
 * Library code never prints: progress and notes reach the caller through opts->on_event.
 * Network: libcurl; every request goes to HF_ENDPOINT or the Ollama registry, never elsewhere
 * except where those servers redirect a download.
 */
#ifndef CALDRIX_HUB_H
#define CALDRIX_HUB_H

#include "caldrix/base.h"
#include "caldrix/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- references ---- */

typedef enum cdx_ref_kind {
    CDX_REF_PATH = 0,   /* a file or a directory on disk */
    CDX_REF_ALIAS = 1,  /* a name from the alias table: a Hub repo at a pinned revision */
    CDX_REF_HF = 2,     /* owner/name[@revision] on the Hugging Face Hub */
    CDX_REF_OLLAMA = 3, /* ollama:[namespace/]name[:tag] */
} cdx_ref_kind;

typedef struct cdx_hub_ref {
    cdx_ref_kind kind;
    char path[4096];     /* PATH */
    char alias[64];      /* ALIAS: the alias as given */
    char repo[200];      /* ALIAS, HF: owner/name */
    char revision[256];  /* ALIAS, HF: the pinned commit or the @revision ("main" when absent) */
    char ns[128];        /* OLLAMA: namespace ("library" when absent) */
    char name[128];      /* OLLAMA: model name */
    char tag[128];       /* OLLAMA: tag ("latest" when absent) */
} cdx_hub_ref;

/* Parses a reference. An existing file or directory is a PATH; a string starting with '/', "./",
 * "../" or "~/" or ending in ".gguf" is a PATH that must exist; then aliases; then "ollama:";
 * then owner/name[@revision] (Hub repo-id rules). Anything else is CDX_EINVAL naming the forms. */
CDX_API int cdx_hub_parse_ref(const char *ref, cdx_hub_ref *out, cdx_err *err);

/* The alias table: one row per alias, compiled in. `caldrix models supported` prints it. */
typedef struct cdx_hub_alias {
    const char *alias;
    const char *repo;
    const char *revision;   /* a full 40-hex commit */
    const char *note;       /* what has been verified, in one line */
} cdx_hub_alias;
CDX_API const cdx_hub_alias *cdx_hub_aliases(size_t *n);
CDX_API const cdx_hub_alias *cdx_hub_alias_find(const char *alias); /* NULL when unknown */

/* ---- environment and cache ---- */

/* Where things are, from the environment (see docs/models.md). Strings are owned by the struct;
 * free with cdx_hub_env_free. */
typedef struct cdx_hub_env {
    char *hf_cache;        /* HF_HUB_CACHE, else HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub */
    char *hf_home;         /* HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface */
    char *endpoint;        /* HF_ENDPOINT without a trailing '/', else https://huggingface.co */
    char *token;           /* HF_TOKEN, else the first line of $HF_HOME/token (HF_TOKEN_PATH); NULL when none */
    const char *token_source; /* "HF_TOKEN", "HF_TOKEN_PATH", "$HF_HOME/token" or NULL */
    char *caldrix_cache;   /* CALDRIX_CACHE, else $XDG_CACHE_HOME/caldrix, else ~/.cache/caldrix */
    char *ollama_registry; /* CALDRIX_OLLAMA_REGISTRY without a trailing '/', else https://registry.ollama.ai */
    bool hf_offline;       /* HF_HUB_OFFLINE or CALDRIX_OFFLINE is 1/on/yes/true */
    bool offline;          /* CALDRIX_OFFLINE is 1/on/yes/true (every network edge) */
    const char *offline_var; /* the variable that made it offline, for messages */
} cdx_hub_env;
CDX_API int cdx_hub_env_load(cdx_hub_env *env, cdx_err *err);
CDX_API void cdx_hub_env_free(cdx_hub_env *env);
/* "1", "on", "yes", "true" (any case) */
CDX_API bool cdx_hub_env_truthy(const char *v);

/* The cache folder of a repo: "<cache>/models--owner--name" (caller frees). */
CDX_API char *cdx_hub_repo_dir(const char *cache, const char *repo);
/* Resolves a revision through the cache alone, as huggingface_hub does offline: a 40-hex commit
 * as given, else the commit in refs/<revision>. Fills commit[41]. CDX_ENOTFOUND when unknown. */
CDX_API int cdx_hub_cache_commit(const char *cache, const char *repo, const char *revision,
                                 char commit[41], cdx_err *err);

/* ---- import rules over config.json ---- */

/* What the import reads from config.json (0 where the key is absent and has no default). */
typedef struct cdx_hub_config {
    char arch[64];          /* architectures[0] */
    char model_type[64];
    char dtype[16];         /* torch_dtype / dtype: "float32", "bfloat16", "float16" or "" */
    int64_t n_layer, n_head, n_kv_head, hidden, head_dim, ffn, vocab, ctx_max;
    int64_t n_expert, n_expert_used, moe_ffn;
    int64_t sliding_window; /* active window, 0 when none */
    bool tied;              /* tie_word_embeddings */
    bool vision;            /* a vision-language architecture (processor files required) */
    bool llama3_rope;       /* rope_scaling is Llama 3's */
    bool rope_f32_only;     /* rope_scaling is one the bf16 pass does not compute (cdx_dtype_rope_f32_only) */
    uint32_t kv_value_bytes; /* bytes per cached K or V value for the estimate (0: CDX_HUB_KV_BYTES);
                                2 where the model computes in bf16 (its cache is bf16) */
} cdx_hub_config;

/* One row per refusal: the config reader's table (cdx_hf_config_rules), which its checks,
 * `caldrix models rules` and docs/models.md read. */
typedef struct cdx_hf_rule cdx_hub_rule;
CDX_API const cdx_hub_rule *cdx_hub_rules(size_t *n);

/* The accepted architectures: config.json's names (the config reader's), the family each runs as and
 * a note (the architecture table's, cdx_model_hf_arch_note). */
typedef struct cdx_hub_arch {
    const char *name;     /* config.json architectures[0] */
    const char *family;   /* model_type family */
    const char *note;     /* "", or e.g. "accepted, not verified on hardware" */
} cdx_hub_arch;
CDX_API const cdx_hub_arch *cdx_hub_archs(size_t *n);

/* Checks config.json text against every rule. name prefixes messages ("owner/name: config.json").
 * On refusal returns CDX_EUNSUPPORTED (or CDX_EFORMAT for malformed JSON / values) with a message
 * naming the field and the value and what to do; out (may be NULL) is filled on success. */
CDX_API int cdx_hub_check_config(const char *json, size_t len, const char *name, cdx_hub_config *out,
                                 cdx_err *err);

/* ---- memory admission (seed 004) ---- */

#define CDX_HUB_DEFAULT_CTX 4096u  /* the context the estimate assumes when none is given */
#define CDX_HUB_KV_BYTES 4u        /* bytes per cached K or V value (f32) */

/* KV cache bytes for ctx tokens: 2 (K and V) * layers * kv_heads * head_dim * ctx * the bytes of a
 * value (kv_value_bytes, else 4), with ctx capped at the model's context and at an active sliding
 * window. */
CDX_API uint64_t cdx_hub_kv_bytes(const cdx_hub_config *c, uint32_t ctx);
/* The context the estimate uses: ctx (0: CDX_HUB_DEFAULT_CTX) capped as above. */
CDX_API uint32_t cdx_hub_ctx_for(const cdx_hub_config *c, uint32_t ctx);
/* A mixture of experts' weights split the way --weight-budget sees them, estimated from config.json
 * alone (parameter counts scaled to weight_bytes, the download's size): the dense bytes and the
 * bytes of one expert. False for a dense model. */
CDX_API bool cdx_hub_expert_split(const cdx_hub_config *c, uint64_t weight_bytes, uint64_t *dense, uint64_t *one_expert);

/* *out: MemAvailable from /proc/meminfo in bytes (0 when unknown), or CALDRIX_MEM_AVAILABLE
 * (bytes, or with a K/M/G suffix) when set. A malformed CALDRIX_MEM_AVAILABLE is CDX_EINVAL,
 * naming the value; it is never ignored. */
CDX_API int cdx_hub_mem_available(uint64_t *out, cdx_err *err);

/* ---- resolving and downloading ---- */

typedef enum cdx_hub_event_kind {
    CDX_HUB_EV_NOTE = 0,     /* text: a line for the user ("reads model.safetensors ...; not read: ...") */
    CDX_HUB_EV_PLAN = 1,     /* n_files, total: what is about to be fetched (before any of it) */
    CDX_HUB_EV_FILE = 2,     /* file, total: one planned file (after PLAN, in order) */
    CDX_HUB_EV_START = 3,    /* file, done (resume offset), total: a download begins */
    CDX_HUB_EV_PROGRESS = 4, /* file, done, total */
    CDX_HUB_EV_END = 5,      /* file, total: a file is complete in the cache */
    CDX_HUB_EV_KEPT = 6,     /* file: already in the cache, kept */
    CDX_HUB_EV_CACHED = 7,   /* file: the reference; n_files, total: every file it needs was already complete
                              * in the cache and nothing was downloaded. The files then get KEPT events and no
                              * PLAN/FILE list (that list announces a download). */
} cdx_hub_event_kind;

typedef struct cdx_hub_event {
    cdx_hub_event_kind kind;
    const char *text;
    const char *file;
    uint64_t done, total;
    uint32_t n_files;
} cdx_hub_event;
typedef void (*cdx_hub_event_fn)(const cdx_hub_event *ev, void *user);

typedef struct cdx_hub_opts {
    cdx_hub_event_fn on_event;  /* NULL: silent */
    void *user;
    uint32_t ctx;               /* context for the memory estimate (0: CDX_HUB_DEFAULT_CTX) */
    bool skip_memory_check;     /* fetch anyway; the loader decides against the real files */
    bool check_local;           /* apply the config.json rules to local directories too */
    uint64_t mem_available;     /* 0: cdx_hub_mem_available() */
    bool cache_only;            /* no network: resolve through the caches alone (caldrix inspect) */
    uint64_t weight_budget;     /* --weight-budget (0: none): admission counts the weights at it */
    uint64_t *budget_out;       /* NULL, or receives the budget admission chose: a mixture of experts too
                                   big for memory whose least budget fits is admitted with the largest
                                   budget that fits (0 when none was needed or one was given) */
    int dtype;                  /* the compute type asked (a cdx_dtype; 0: the model's default): it sizes
                                   the KV cache of the estimate */
    bool verify;                /* files already in the cache are hashed too and checked against the
                                   listing's LFS sha256 (a download always is) */
} cdx_hub_opts;
/* Bytes per cached K or V value of a checkpoint with this config.json computing in dtype (a
 * cdx_dtype; 0: its default, from the model layer's table): 2 for bf16, else 4. */
CDX_API uint32_t cdx_hub_kv_value_bytes(const cdx_hub_config *c, int dtype);

/* Resolves ref to a local path the model layer opens: a file (.gguf, an Ollama model) or a
 * directory (a local checkpoint or a Hub snapshot), downloading what is missing in the order
 * seed 000 gives. opts may be NULL. *local_path_out is heap-allocated (caller frees). */
CDX_API int cdx_hub_resolve(const char *ref, const cdx_hub_opts *opts, char **local_path_out, cdx_err *err);
CDX_API int cdx_hub_resolve_ref(const cdx_hub_ref *ref, const cdx_hub_opts *opts, char **local_path_out,
                                cdx_err *err);

/* Checks a local checkpoint directory the way the import does (config.json, a supported tokenizer,
 * weights chosen as transformers chooses them) without opening any weight. When notes is non-NULL
 * it receives a heap string (or NULL) naming the .safetensors files the rule leaves out. */
CDX_API int cdx_hub_check_dir(const char *dir, bool check_config, char **notes, cdx_err *err);

/* ---- inspect (seed 003): a report that never loads weights ---- */

typedef struct cdx_hub_report {
    char format[16];        /* "gguf" or "safetensors" */
    char path[4096];
    char architecture[64];  /* GGUF general.architecture, or config.json architectures[0] */
    char family[64];
    uint64_t n_tensors, n_metadata;
    int64_t n_layer, n_head, n_kv_head, hidden, head_dim, ctx;
    int64_t n_expert, n_expert_used;
    char tensor_types[512];            /* "f32=12,q4_K=30" */
    char unsupported_tensor_types[512];/* "none" or the list */
    char missing_required_tensors[1024];/* "none" or the list (a count and the first names) */
    uint64_t n_missing;
    uint64_t n_unused;
    char unused_tensors[512];          /* "none" or a count and the first names (tensors no role reads) */
    uint64_t n_unknown_keys;           /* GGUF: "<architecture>.*" metadata keys the key table does not describe */
    char unknown_keys[512];            /* "" or the first of them */
    /* a mixture of experts under --weight-budget (0 for a dense model): the expert tensors' bytes,
     * the largest layer's bytes per expert, and the least budget one token needs (the dense weights
     * + top-k experts of one layer; the loader adds the 64-byte alignment of its expert slots) */
    uint64_t expert_bytes, expert_one_bytes, min_budget_bytes;
    uint64_t weight_bytes, kv_bytes;   /* estimated memory = weights + KV at kv_ctx, as the default compute
                                          type holds them */
    char compute_dtype[8];             /* the default compute type: "f32" or "bf16" ("" when unknown) */
    char compute_why[160];             /* why (the model layer's table) */
    bool compute_bf16_ok;              /* --dtype bf16 may be asked for (a checkpoint of a family with a bf16 pass) */
    uint32_t kv_ctx;
    char refusal[1024];                /* "" or what the import rules refuse, with the field and value */
    char note[1024];                   /* "" or notes (files not read, a shipped head beside a tied one) */
} cdx_hub_report;

/* path: a .gguf file or a checkpoint directory. Reads headers only. */
CDX_API int cdx_hub_inspect_path(const char *path, cdx_hub_report *out, cdx_err *err);

/* ---- SHA-256 (FIPS 180-4), over OpenSSL's EVP digests: Ollama's blob digests ---- */

/* One digest in progress; not shared between threads. init allocates the EVP context and final
 * frees it, so every init is followed by one final. init and final return 0, or CDX_ENOMEM when
 * OpenSSL could not allocate or digest (final then writes 32 zero bytes); update after a failure
 * does nothing. */
typedef struct cdx_sha256 {
    struct evp_md_ctx_st *ctx; /* OpenSSL's EVP_MD_CTX */
    bool failed;
} cdx_sha256;
CDX_API int cdx_sha256_init(cdx_sha256 *s);
CDX_API void cdx_sha256_update(cdx_sha256 *s, const void *data, size_t n);
CDX_API int cdx_sha256_final(cdx_sha256 *s, uint8_t out[32]);
/* Hex digest (65 bytes with the NUL) of a whole file. */
CDX_API int cdx_sha256_file(const char *path, char hex[65], cdx_err *err);

/* ---- the model index (SQLite, in caldrix's cache): what the Hub offers that caldrix can judge ----
 *
 *   cdx_index *ix;
 *   if (cdx_index_open(path, true, &ix, &err) == 0 && cdx_index_update(ix, &uo, &stats, &err) == 0) ...
 *   char *json; cdx_index_query q = { .words = w, .n_words = 1 }; cdx_index_search(ix, &q, &json, &err);
 *
 * Queries never touch the network; cdx_index_update and cdx_index_fetch_one are the only calls that
 * do, and only to uo.endpoint (never following a redirect; the listing's Link rel="next" only on
 * the same scheme, host and port). Not thread-safe: one cdx_index per thread. */
typedef struct cdx_index cdx_index;

/* <caldrix cache>/models-index.sqlite (caller frees; NULL when out of memory). */
CDX_API char *cdx_index_default_path(const cdx_hub_env *env);
/* write false: read-only, CDX_ENOTFOUND when the file is absent; write true: made when absent.
 * A file that is not a caldrix index or is corrupt: CDX_EFORMAT naming the path and SQLite's words. */
CDX_API int cdx_index_open(const char *path, bool write, cdx_index **out, cdx_err *err);
CDX_API void cdx_index_close(cdx_index *ix); /* NULL: no-op */

typedef void (*cdx_index_progress_fn)(const char *line, void *user);
typedef struct cdx_index_update_opts {
    const char *endpoint;       /* the Hub's base URL, without a trailing '/' */
    const char *token;          /* NULL: none */
    const char *search;         /* /api/models?search= (NULL: none) */
    const char *filter;         /* /api/models?filter= (a tag; NULL: none) */
    uint32_t page_size;         /* limit= (0: 1000) */
    uint32_t max_pages;         /* a listing longer than this fails (0: 100000) */
    bool full;                  /* list everything, not only what changed since the last update */
    cdx_index_progress_fn progress; /* NULL: silent; a line per page and per phase */
    void *user;
} cdx_index_update_opts;

typedef struct cdx_index_stats {
    uint64_t pages, listed, candidates, fetched, unchanged, bad_ids, published, relatives;
    uint64_t removed;           /* repos a whole listing (full, no search or filter) no longer named */
    bool resumed;               /* went on from an interrupted update's staged work */
} cdx_index_stats;

/* GET /api/models pages (sort=lastModified, direction=-1) until an entry older than the newest one
 * the index holds (or the end), each repo caldrix can judge (config.architectures or the GGUF
 * architecture in the loader's tables) and their base_model relatives detailed from
 * /api/models/{repo}?expand[]=..., its file listing and config.json, staged page by page, then
 * published in one transaction: an update cut anywhere leaves the previous index as it was, and the
 * next update goes on from the staged pages. */
CDX_API int cdx_index_update(cdx_index *ix, const cdx_index_update_opts *o, cdx_index_stats *st, cdx_err *err);
/* One repo from the Hub into the index (a repo the index lacks), in one transaction. */
CDX_API int cdx_index_fetch_one(cdx_index *ix, const cdx_index_update_opts *o, const char *repo, cdx_err *err);

typedef enum cdx_index_rel {
    CDX_INDEX_REL_ALL = 0, CDX_INDEX_REL_FINETUNES = 1, CDX_INDEX_REL_QUANTIZATIONS = 2, CDX_INDEX_REL_TWINS = 3,
} cdx_index_rel;

typedef struct cdx_index_query {
    const char *const *words;   /* search: every word must match (FTS5 prefix terms over id, tags, card) */
    size_t n_words;
    const char *arch;           /* NULL, or a config.json architecture / GGUF architecture / family */
    const char *format;         /* NULL, "gguf" or "safetensors" */
    uint64_t max_params;        /* 0: no limit */
    bool runnable;              /* only verdict "runs" and fitting mem_available */
    uint64_t mem_available;     /* bytes for "fits this machine" (0: unknown: fits) */
    uint32_t limit;             /* 0: 20 */
} cdx_index_query;

/* Each returns heap JSON text (caller frees): search, related and drafts an array of entries, info
 * one entry (with its files); CDX_ENOTFOUND when repo is not in the index. An entry's real numbers
 * are 32-bit floats held as the double of their shortest decimal, so a printer with 9 significant
 * digits (jansson's JSON_REAL_PRECISION(9)) prints that shortest decimal. */
CDX_API int cdx_index_search(cdx_index *ix, const cdx_index_query *q, char **json, cdx_err *err);
CDX_API int cdx_index_info(cdx_index *ix, const char *repo, uint64_t mem_available, char **json, cdx_err *err);
CDX_API int cdx_index_related(cdx_index *ix, const char *repo, cdx_index_rel kind, uint64_t mem_available,
                              char **json, cdx_err *err);
/* Draft candidates for repo: the same tokenizer fingerprint, safetensors, dense, verdict "runs",
 * fitting mem_available, at most a quarter of repo's parameters; the same owner first, then by
 * downloads. */
CDX_API int cdx_index_drafts(cdx_index *ix, const char *repo, uint64_t mem_available, char **json, cdx_err *err);
/* {"repos": N, "last_update": "...", "newest_modified": "...", "staged": N} */
CDX_API int cdx_index_status(cdx_index *ix, char **json, cdx_err *err);
/* The shortest decimal (at most 9 significant digits) that reads back to f as a float; buf >= 32. */
CDX_API const char *cdx_f32_shortest(float f, char *buf, size_t cap);

/* ---- the machine (caldrix doctor) ---- */

/* The CPU's features: cdx_cpu_features_get (caldrix/kernel.h), the one detector. */
/* MemTotal and MemAvailable in bytes (0 when unknown). */
CDX_API void cdx_hub_meminfo(uint64_t *total, uint64_t *available);
/* Free bytes on the filesystem holding path (or its nearest existing parent). */
CDX_API int cdx_hub_disk_free(const char *path, uint64_t *free_bytes, cdx_err *err);

#ifdef __cplusplus
}
#endif
#endif
