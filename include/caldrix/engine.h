/* caldrix engine layer: sampling (and, later, sessions, the paged KV cache and the scheduler).
 *
 *   cdx_sampler_params sp = cdx_sampler_defaults();  sp.temp = 0;   // greedy
 *   cdx_sampler *s;  cdx_sampler_create(&sp, n_vocab, &s, &err);
 *   int32_t tok = cdx_sampler_sample(s, logits, history, n_history);
 *   cdx_sampler_free(s);
 */
#ifndef CALDRIX_ENGINE_H
#define CALDRIX_ENGINE_H

#include "caldrix/base.h"

typedef struct cdx_sampler_params {
    float temp;            /* <= 0: greedy (highest logit, lowest id on a tie) */
    int32_t top_k;         /* <= 0: off */
    float top_p;           /* >= 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off; llama.cpp's rule: logit > 0 ? logit / r : logit * r */
    int32_t repeat_last_n; /* how many recent tokens the penalty looks at */
    uint64_t seed;
} cdx_sampler_params;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, no repetition penalty. */
CDX_API cdx_sampler_params cdx_sampler_defaults(void);

typedef struct cdx_sampler cdx_sampler; /* one per sequence; not thread-safe */
CDX_API int cdx_sampler_create(const cdx_sampler_params *p, int64_t n_vocab, cdx_sampler **out, cdx_err *err);
CDX_API void cdx_sampler_free(cdx_sampler *s);
/* Chooses the next token from raw logits[n_vocab]; history: the tokens so far (prompt included),
 * for the repetition penalty. Order: penalty, top-k, top-p, min-p, temperature, draw. */
CDX_API int32_t cdx_sampler_sample(cdx_sampler *s, const float *logits, const int32_t *history, int64_t n_history);

/* The k highest logits, highest first (lowest id first on a tie). Writes min(k, n) pairs. */
CDX_API void cdx_top_logits(const float *logits, int64_t n, int k, int32_t *ids, float *vals);
/* argmax with the lowest id on a tie */
CDX_API int32_t cdx_argmax(const float *logits, int64_t n);

#endif
