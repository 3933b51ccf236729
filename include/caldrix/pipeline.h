/* caldrix format layer: the sentence-transformers folder layout (modules.json, 1_Pooling/config.json,
 * sentence_bert_config.json, config_sentence_transformers.json) as plain data. The embedder
 * (caldrix/embed.h) computes what it declares. */
#ifndef CALDRIX_PIPELINE_H
#define CALDRIX_PIPELINE_H

#include "caldrix/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1_Pooling/config.json's modes caldrix computes, one row each (cdx_pooling_name, docs/api.md). */
#define CDX_POOLINGS(X)                                                                               \
    X(CLS, "cls", "pooling_mode_cls_token", "the first token's hidden state")                          \
    X(MEAN, "mean", "pooling_mode_mean_tokens", "the mean of the real tokens' hidden states")          \
    X(MAX, "max", "pooling_mode_max_tokens", "the elementwise maximum over the real tokens")           \
    X(LAST, "lasttoken", "pooling_mode_lasttoken", "the last real token's hidden state")

typedef enum cdx_pooling {
#define CDX_X_(name, s, key, doc) CDX_POOL_##name,
    CDX_POOLINGS(CDX_X_)
#undef CDX_X_
    CDX_POOL_COUNT
} cdx_pooling;

CDX_API const char *cdx_pooling_name(cdx_pooling p); /* "cls", "mean", ...; "?" out of range */

#define CDX_ST_MAX_PROMPTS 8
#define CDX_ST_MAX_MRL_DIMS 16

/* What a sentence-transformers folder declares (modules.json, 1_Pooling/config.json,
 * sentence_bert_config.json, config_sentence_transformers.json). Plain data. */
typedef struct cdx_st_pipeline {
    bool present;                  /* modules.json was found (else: the defaults below, no pipeline) */
    cdx_pooling pooling;           /* CLS when no 1_Pooling */
    bool include_prompt;           /* mean/max pool over the prompt's tokens too (default true) */
    bool normalize;                /* modules.json lists sentence_transformers.models.Normalize */
    int64_t max_seq_length;        /* sentence_bert_config.json; 0: the model's positions */
    bool do_lower_case;            /* lowercase the text before the tokenizer */
    int64_t dim;                   /* 1_Pooling's word_embedding_dimension; 0: absent */
    int n_prompts;                 /* config_sentence_transformers.json's prompts */
    char prompt_name[CDX_ST_MAX_PROMPTS][32];
    char prompt[CDX_ST_MAX_PROMPTS][512];
    /* Matryoshka truncation, as config.json declares it (vLLM's keys): "is_matryoshka": true, or
     * "matryoshka_dimensions": [...] (then only those sizes). The server's "dimensions" needs it. */
    bool matryoshka;
    int n_mrl_dims;                /* 0: any size up to the model's */
    int64_t mrl_dims[CDX_ST_MAX_MRL_DIMS];
} cdx_st_pipeline;

/* Reads dir's sentence-transformers files (and config.json's Matryoshka keys). A folder without
 * modules.json gives present false and 0.
 * A module caldrix does not implement (Dense, WordEmbeddings, ...), a pooling mode it does not compute
 * (mean_sqrt_len, weightedmean) or more than one mode: CDX_EUNSUPPORTED naming the file and the module
 * or key. Malformed JSON or values: CDX_EFORMAT naming the file and the field. */
CDX_API int cdx_st_pipeline_read(const char *dir, cdx_st_pipeline *out, cdx_err *err);
/* The prompt named name ("query"), or NULL. */
CDX_API const char *cdx_st_pipeline_prompt(const cdx_st_pipeline *p, const char *name);

#ifdef __cplusplus
}
#endif
#endif
