/* caldrix format layer: GGUF and safetensors readers/writers, config.json.
 *
 *   cdx_gguf *g = NULL;
 *   if (cdx_gguf_open("model.gguf", &g, &err) < 0) ...;
 *   uint64_t n_layer; cdx_gguf_get_u64(g, "llama.block_count", &n_layer);
 *   const cdx_gguf_tensor *t = cdx_gguf_tensor_find(g, "token_embd.weight");
 *   cdx_gguf_close(g);
 *
 * Every count, offset and size is checked against the file before it is used. Readers never
 * copy tensor data: tensors point into the mapping, which lives as long as the reader.
 */
#ifndef CALDRIX_FORMAT_H
#define CALDRIX_FORMAT_H

#include "caldrix/base.h"
#include "caldrix/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GGUF ---- */

typedef enum cdx_gguf_vtype {
    CDX_GGUF_U8 = 0, CDX_GGUF_I8 = 1, CDX_GGUF_U16 = 2, CDX_GGUF_I16 = 3, CDX_GGUF_U32 = 4,
    CDX_GGUF_I32 = 5, CDX_GGUF_F32 = 6, CDX_GGUF_BOOL = 7, CDX_GGUF_STRING = 8, CDX_GGUF_ARRAY = 9,
    CDX_GGUF_U64 = 10, CDX_GGUF_I64 = 11, CDX_GGUF_F64 = 12, CDX_GGUF_VTYPE_COUNT
} cdx_gguf_vtype;

/* A string inside the mapping: not NUL-terminated. Checked to be valid UTF-8 for keys and
 * tensor names; values are kept as bytes (tokenizer vocabularies hold raw byte pieces). */
typedef struct cdx_gguf_str {
    const char *ptr;
    uint64_t len;
} cdx_gguf_str;

/* One metadata value. Scalars: `num`/`str`. Arrays: elem type `arr_type`, `n` elements; fixed-size
 * elements are read with the cdx_gguf_arr_* accessors; string elements via str_items; nested
 * arrays via `items` (each an array value). */
typedef struct cdx_gguf_value {
    uint32_t type;       /* cdx_gguf_vtype */
    uint32_t arr_type;   /* element type when type == ARRAY */
    uint64_t n;          /* number of elements (arrays); 1 for scalars */
    union {
        uint64_t u;      /* unsigned integers and bool */
        int64_t i;       /* signed integers */
        double f;        /* F32 / F64 */
    } num;
    cdx_gguf_str str;                 /* STRING scalar */
    const uint8_t *raw;               /* fixed-size array elements, little-endian, in the mapping */
    cdx_gguf_str *str_items;          /* [n] for arrays of strings (owned by the reader) */
    struct cdx_gguf_value *items;     /* [n] for arrays of arrays (owned by the reader) */
} cdx_gguf_value;

typedef struct cdx_gguf_kv {
    char *key;            /* owned, NUL-terminated */
    cdx_gguf_value val;
} cdx_gguf_kv;

typedef struct cdx_gguf_tensor {
    char *name;           /* owned, NUL-terminated */
    uint32_t type;        /* cdx_type (ggml type id) */
    uint32_t n_dims;      /* 1..4 */
    uint64_t ne[4];       /* GGUF order: ne[0] is the row length (fastest varying); unused dims are 1 */
    uint64_t offset;      /* from the start of the data section */
    size_t n_bytes;
    const void *data;     /* into the mapping */
} cdx_gguf_tensor;

typedef struct cdx_gguf {
    cdx_file *file;       /* owned (NULL when opened from memory) */
    const uint8_t *base;  /* start of the bytes */
    size_t size;
    uint32_t version;     /* 2 or 3 */
    uint64_t n_kv, n_tensors;
    cdx_gguf_kv *kv;      /* [n_kv] */
    cdx_gguf_tensor *tensors; /* [n_tensors] */
    uint64_t alignment;
    uint64_t data_offset; /* start of the tensor data section */
    const char *path;     /* for messages ("<memory>" when opened from memory) */
} cdx_gguf;

/* The first n bytes of a file (all of it when shorter than 4): 0 when they are GGUF's magic, else
 * CDX_EFORMAT with the one message run and inspect give ("PATH: not a GGUF file: it is empty", "...:
 * it is 3 bytes, less than GGUF's 4-byte magic", "... (magic is 68 65 6c 6c, expected \"GGUF\")"). */
CDX_API int cdx_gguf_check_magic(const void *head, size_t n, const char *path, cdx_err *err);
CDX_API int cdx_gguf_open(const char *path, cdx_gguf **out, cdx_err *err);
/* Reads from caller-owned memory that must outlive the reader (fuzzing, embedded models). */
CDX_API int cdx_gguf_open_mem(const void *data, size_t size, const char *name, cdx_gguf **out, cdx_err *err);
CDX_API void cdx_gguf_close(cdx_gguf *g); /* NULL: no-op */

CDX_API const cdx_gguf_kv *cdx_gguf_find(const cdx_gguf *g, const char *key); /* NULL when absent */
/* Typed getters: return false when the key is absent or has an incompatible type.
 * Integers of any width/sign convert when the value fits; f64 accepts F32/F64 and integers. */
CDX_API bool cdx_gguf_get_u64(const cdx_gguf *g, const char *key, uint64_t *out);
CDX_API bool cdx_gguf_get_i64(const cdx_gguf *g, const char *key, int64_t *out);
CDX_API bool cdx_gguf_get_f64(const cdx_gguf *g, const char *key, double *out);
CDX_API bool cdx_gguf_get_bool(const cdx_gguf *g, const char *key, bool *out);
CDX_API bool cdx_gguf_get_str(const cdx_gguf *g, const char *key, cdx_gguf_str *out);
/* Array element accessors (i < v->n, v->type == ARRAY, element type numeric). */
CDX_API double cdx_gguf_arr_f64(const cdx_gguf_value *v, uint64_t i);
/* Element i as an integer: false (and *out untouched) unless it exists and is an integer that fits
 * int64, or a float holding such an integer exactly (NaN, 2.5, 1e30 and a u64 above INT64_MAX are
 * refused); the caller names the key in its refusal. */
CDX_API bool cdx_gguf_arr_i64(const cdx_gguf_value *v, uint64_t i, int64_t *out);
CDX_API const char *cdx_gguf_vtype_name(uint32_t t);

CDX_API const cdx_gguf_tensor *cdx_gguf_tensor_find(const cdx_gguf *g, const char *name);

/* The per-architecture hyperparameter keys, "<general.architecture>.<suffix>" (llama.cpp's
 * llama-arch.cpp LLM_KV_NAMES): the one table the loader, convert, synth, inspect, quantize and the
 * Ollama probe read and write them by. */
#define CDX_GGUF_ARCH_KEYS(X)                                                   \
    X(CONTEXT_LENGTH, "context_length")                                         \
    X(EMBEDDING_LENGTH, "embedding_length")                                     \
    X(BLOCK_COUNT, "block_count")                                               \
    X(FEED_FORWARD_LENGTH, "feed_forward_length")                               \
    X(VOCAB_SIZE, "vocab_size")                                                 \
    X(HEAD_COUNT, "attention.head_count")                                       \
    X(HEAD_COUNT_KV, "attention.head_count_kv")                                 \
    X(KEY_LENGTH, "attention.key_length")                                       \
    X(VALUE_LENGTH, "attention.value_length")                                   \
    X(RMS_EPS, "attention.layer_norm_rms_epsilon")                              \
    X(LN_EPS, "attention.layer_norm_epsilon")                                   \
    X(PARALLEL_RESIDUAL, "use_parallel_residual")                               \
    X(CLAMP_KQV, "attention.clamp_kqv")                                         \
    X(RECURRENT_LAYERS, "attention.recurrent_layers")                           \
    X(ROPE_FREQ_BASE, "rope.freq_base")                                         \
    X(ROPE_DIM_COUNT, "rope.dimension_count")                                   \
    X(ROPE_DIM_SECTIONS, "rope.dimension_sections")                             \
    X(EXPERT_COUNT, "expert_count")                                             \
    X(EXPERT_USED_COUNT, "expert_used_count")                                   \
    X(EXPERT_FF_LENGTH, "expert_feed_forward_length")                           \
    X(EXPERT_SHARED_FF_LENGTH, "expert_shared_feed_forward_length")             \
    X(EXPERT_GATING_FUNC, "expert_gating_func")                                 \
    X(EXPERT_WEIGHTS_SCALE, "expert_weights_scale")                             \
    X(EXPERT_WEIGHTS_NORM, "expert_weights_norm")                               \
    X(SSM_CONV_KERNEL, "ssm.conv_kernel")                                       \
    X(SSM_STATE_SIZE, "ssm.state_size")                                         \
    X(SSM_GROUP_COUNT, "ssm.group_count")                                       \
    X(SSM_TIME_STEP_RANK, "ssm.time_step_rank")                                 \
    X(SSM_INNER_SIZE, "ssm.inner_size")                                         \
    X(FULL_ATTENTION_INTERVAL, "full_attention_interval")                       \
    X(EMBEDDING_SCALE, "embedding_scale")                                       \
    X(RESIDUAL_SCALE, "residual_scale")                                         \
    X(ATTENTION_SCALE, "attention.scale")                                       \
    X(LOGIT_SCALE, "logit_scale")                                               \
    X(ATTN_LOGIT_SOFTCAPPING, "attn_logit_softcapping")                         \
    X(FINAL_LOGIT_SOFTCAPPING, "final_logit_softcapping")                       \
    X(SLIDING_WINDOW, "attention.sliding_window")                               \
    X(SLIDING_WINDOW_PATTERN, "attention.sliding_window_pattern")               \
    X(ROPE_FREQ_BASE_SWA, "rope.freq_base_swa")                                 \
    X(ROPE_SCALING_ATTN_FACTOR, "rope.scaling.attn_factor")                     \
    X(ROPE_SCALING_ORIG_CTX_LEN, "rope.scaling.original_context_length")        \
    X(ROPE_SCALING_YARN_LOG_MUL, "rope.scaling.yarn_log_multiplier")            \
    X(ROPE_SCALING_YARN_EXT_FACTOR, "rope.scaling.yarn_ext_factor")             \
    X(ROPE_SCALING_YARN_ATTN_FACTOR, "rope.scaling.yarn_attn_factor")           \
    X(ROPE_SCALING_YARN_BETA_FAST, "rope.scaling.yarn_beta_fast")               \
    X(ROPE_SCALING_YARN_BETA_SLOW, "rope.scaling.yarn_beta_slow")               \
    X(ROPE_SCALING_TYPE, "rope.scaling.type")                                   \
    X(ROPE_SCALING_FACTOR, "rope.scaling.factor")                               \
    X(POOLING_TYPE, "pooling_type")                                             \
    X(CAUSAL, "attention.causal")                                               \
    X(CLASSIFIER_OUTPUT_LABELS, "classifier.output_labels")

typedef enum cdx_gguf_key {
#define CDX_X_(name, suffix) CDX_GK_##name,
    CDX_GGUF_ARCH_KEYS(CDX_X_)
#undef CDX_X_
    CDX_GK_COUNT
} cdx_gguf_key;

/* "block_count" for CDX_GK_BLOCK_COUNT; NULL out of range. */
CDX_API const char *cdx_gguf_key_suffix(cdx_gguf_key k);
/* Writes "<arch>.<suffix>" into out (cap bytes) and returns out ("" for k out of range). */
CDX_API const char *cdx_gguf_key_name(cdx_gguf_key k, const char *arch, char *out, size_t cap);
/* The typed getters and setters on arch's key k (as cdx_gguf_get_* / cdx_gguf_writer_set_*). */
CDX_API const cdx_gguf_kv *cdx_gguf_find_arch(const cdx_gguf *g, const char *arch, cdx_gguf_key k);
CDX_API bool cdx_gguf_get_arch_u64(const cdx_gguf *g, const char *arch, cdx_gguf_key k, uint64_t *out);
CDX_API bool cdx_gguf_get_arch_f64(const cdx_gguf *g, const char *arch, cdx_gguf_key k, double *out);
CDX_API bool cdx_gguf_get_arch_bool(const cdx_gguf *g, const char *arch, cdx_gguf_key k, bool *out);

/* GGUF writer: collects metadata and tensors, then writes a v3 file in one go.
 * Setting a key twice keeps the last value (in the first position). A setter that fails (bad key,
 * out of memory) returns CDX_E* and leaves the writer failed: cdx_gguf_writer_write then returns
 * that error. Tensors are written in the order added, aligned to general.alignment (default 32). */
typedef struct cdx_gguf_writer cdx_gguf_writer;
CDX_API int cdx_gguf_writer_new(cdx_gguf_writer **out, cdx_err *err);
CDX_API void cdx_gguf_writer_free(cdx_gguf_writer *w);
CDX_API int cdx_gguf_writer_set_u32(cdx_gguf_writer *w, const char *key, uint32_t v);
CDX_API int cdx_gguf_writer_set_i32(cdx_gguf_writer *w, const char *key, int32_t v);
CDX_API int cdx_gguf_writer_set_u64(cdx_gguf_writer *w, const char *key, uint64_t v);
CDX_API int cdx_gguf_writer_set_i64(cdx_gguf_writer *w, const char *key, int64_t v);
CDX_API int cdx_gguf_writer_set_f32(cdx_gguf_writer *w, const char *key, float v);
CDX_API int cdx_gguf_writer_set_f64(cdx_gguf_writer *w, const char *key, double v);
CDX_API int cdx_gguf_writer_set_bool(cdx_gguf_writer *w, const char *key, bool v);
CDX_API int cdx_gguf_writer_set_str(cdx_gguf_writer *w, const char *key, const char *v);
/* Arrays of fixed-size elements (elem_type not STRING/ARRAY) and of strings. Data are copied. */
CDX_API int cdx_gguf_writer_set_arr(cdx_gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n);
CDX_API int cdx_gguf_writer_set_arr_str(cdx_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* The same on arch's key k (cdx_gguf_key above). */
CDX_API int cdx_gguf_writer_set_arch_u32(cdx_gguf_writer *w, const char *arch, cdx_gguf_key k, uint32_t v);
CDX_API int cdx_gguf_writer_set_arch_f32(cdx_gguf_writer *w, const char *arch, cdx_gguf_key k, float v);
CDX_API int cdx_gguf_writer_set_arch_bool(cdx_gguf_writer *w, const char *arch, cdx_gguf_key k, bool v);
CDX_API int cdx_gguf_writer_set_arch_arr(cdx_gguf_writer *w, const char *arch, cdx_gguf_key k, uint32_t elem_type,
                                         const void *data, uint64_t n);
/* Copies an existing key/value (any type, nested arrays included) from a reader. */
CDX_API int cdx_gguf_writer_copy_kv(cdx_gguf_writer *w, const cdx_gguf_kv *kv);
/* Adds a tensor; data (n_bytes for type/ne) is borrowed until cdx_gguf_writer_write returns. */
CDX_API int cdx_gguf_writer_add_tensor(cdx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                       const uint64_t *ne, const void *data, cdx_err *err);
CDX_API int cdx_gguf_writer_write(cdx_gguf_writer *w, const char *path, cdx_err *err);

/* ---- safetensors ---- */

typedef struct cdx_st_tensor {
    char *name;          /* owned */
    uint32_t type;       /* CDX_TYPE_F32 / F16 / BF16 (CDX_TYPE_COUNT: another dtype, headers only) */
    char dtype[16];      /* the file's dtype name ("BF16", "I8", ...) */
    uint32_t n_dims;     /* 0..8 */
    uint64_t shape[8];   /* safetensors order: shape[n_dims-1] is the row length */
    size_t n_bytes;
    const void *data;    /* into the mapping of its shard (an aligned copy when the file's is not) */
    uint32_t shard;      /* index into files */
} cdx_st_tensor;

typedef struct cdx_safetensors {
    uint32_t n_files;
    cdx_file **files;    /* owned mappings, one per shard */
    uint64_t n_tensors;
    cdx_st_tensor *tensors; /* sorted by name */
    char *dir;           /* the directory (or the file) it was opened from */
} cdx_safetensors;

/* path: a .safetensors file, a model.safetensors.index.json, or a directory (model.safetensors,
 * else the index, else every *.safetensors file, as transformers chooses). */
CDX_API int cdx_st_open(const char *path, cdx_safetensors **out, cdx_err *err);
/* cdx_st_open that also maps U8 tensors, as bytes (type CDX_TYPE_COUNT, dtype "U8"; BitNet's packed ternary
 * weights, which only the bitnet family's loader reads). */
CDX_API int cdx_st_open_u8(const char *path, cdx_safetensors **out, cdx_err *err);
/* One safetensors file in caller-owned memory that must outlive the reader (fuzzing). n_files is 0. */
CDX_API int cdx_st_open_mem(const void *data, size_t size, const char *name, cdx_safetensors **out, cdx_err *err);
/* The same reader for what the headers say (inspect): every other dtype is accepted too (type
 * CDX_TYPE_COUNT, dtype names it; sizes are checked for the dtypes safetensors defines), and no
 * tensor's data is touched. The checks on lengths, offsets, shards and names are the same. */
CDX_API int cdx_st_open_headers(const char *path, cdx_safetensors **out, cdx_err *err);
CDX_API void cdx_st_close(cdx_safetensors *st); /* NULL: no-op */
CDX_API const cdx_st_tensor *cdx_st_find(const cdx_safetensors *st, const char *name);
/* Writer: one file, tensors given in any order (written sorted by name). */
typedef struct cdx_st_writer cdx_st_writer;
CDX_API int cdx_st_writer_new(cdx_st_writer **out, cdx_err *err);
CDX_API void cdx_st_writer_free(cdx_st_writer *w);
CDX_API int cdx_st_writer_add(cdx_st_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const uint64_t *shape, const void *data, cdx_err *err);
CDX_API int cdx_st_writer_write(cdx_st_writer *w, const char *path, cdx_err *err);

#ifdef __cplusplus
}
#endif
#endif
