/* The model layer's LoRA hook (lora.c): the forward passes call model_lora_add after each target
 * matrix; it does nothing for a batch without adapters. */
#ifndef CDX_MODEL_LORA_H
#define CDX_MODEL_LORA_H

#include "caldrix/model.h"

/* The linear modules an adapter may target (the order of k_targets in lora.c). */
enum { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_N };

/* y[t][0..out) += Σ over the adapters of row t (b->lora[t]) that hold (layer, target) of
 * scale · B (A x[t]) for t < n; rows are split over the pool. */
void model_lora_add(cdx_pool *pool, const cdx_batch *b, int64_t layer, int target, const float *x, int64_t n,
                    int64_t in, float *y, int64_t out);
/* CDX_EINVAL when a row names an adapter opened for another model. */
int model_lora_check(const cdx_model *m, const cdx_batch *b, cdx_err *err);

#endif
