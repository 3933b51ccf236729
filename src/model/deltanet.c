/* The Gated DeltaNet recurrence in its chunked form and per token (see deltanet.h). Plain C
 * loops: every sum runs in index order, the same whatever the batch, so these are their own
 * scalar reference; the cost is O(dk·dv) per position and head plus O(row·(dk + dv)) for the
 * chunk's rows, and O(DN_CHUNK·dk·dv) once per chunk for the fold. */
#include "deltanet.h"

#include "caldrix/kernel.h"

#include <math.h>
#include <string.h>

#define DN_NAME(x) dn_##x##_ref
#include "deltanet_impl.h"
#undef DN_NAME

void dn_shape_init(dn_shape *s, int64_t n_linear, int64_t nk, int64_t nv, int64_t dk, int64_t dv, int64_t conv_k)
{
    s->n_linear = n_linear;
    s->nk = nk;
    s->nv = nv;
    s->dk = dk;
    s->dv = dv;
    s->conv_k = conv_k;
    s->channels = 2 * nk * dk + nv * dv;
    s->head_floats = (size_t)(dk * dv + DN_CHUNK * dk + DN_CHUNK * dv + DN_CHUNK);
    s->layer_floats = (size_t)((conv_k - 1) * s->channels) + (size_t)nv * s->head_floats;
}

size_t dn_state_bytes(const dn_shape *s)
{
    return sizeof(dn_state_hdr) + (size_t)s->n_linear * s->layer_floats * sizeof(float);
}

float *dn_layer_state(const dn_shape *s, void *state, int64_t li)
{
    return (float *)((char *)state + sizeof(dn_state_hdr)) + (size_t)li * s->layer_floats;
}

float *dn_head_state(const dn_shape *s, void *state, int64_t li, int64_t h)
{
    return dn_layer_state(s, state, li) + (size_t)((s->conv_k - 1) * s->channels) + (size_t)h * s->head_floats;
}

void dn_chunk_step(float *head, int64_t dk, int64_t dv, int64_t row, const float *q, const float *k,
                   const float *v, float g, float beta, float *out, float *tmp)
{
    dn_chunk_step_ref(head, dk, dv, row, q, k, v, g, beta, out, tmp);
}

void dn_recurrent_step(float *head, int64_t dk, int64_t dv, const float *q, const float *k, const float *v, float g,
                       float beta, float *out, float *tmp)
{
    dn_recurrent_step_ref(head, dk, dv, q, k, v, g, beta, out, tmp);
}

static const dn_kernels k_dn_ref = { "scalar", dn_chunk_step_ref, dn_recurrent_step_ref };

const dn_kernels *dn_kernels_for(const cdx_kernels *k)
{
    const char *isa = k ? cdx_kernels_isa(k) : "scalar";
    if (isa && strcmp(isa, "scalar") && __builtin_cpu_supports("avx2"))
        return &dn_kernels_avx2;
    return &k_dn_ref;
}
