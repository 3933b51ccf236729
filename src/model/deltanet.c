/* The Gated DeltaNet recurrence in its chunked form and per token (see deltanet.h). Plain C
 * loops: every sum runs in index order, the same whatever the batch, so these are their own
 * scalar reference; the cost is O(dk·dv) per position and head plus O(row·(dk + dv)) for the
 * chunk's rows, and O(DN_CHUNK·dk·dv) once per chunk for the fold. */
#include "deltanet.h"

#include <math.h>
#include <string.h>

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
    float *S = head;                               /* [dk][dv]: the state before this chunk */
    float *K = S + dk * dv;                        /* [DN_CHUNK][dk] */
    float *U = K + DN_CHUNK * dk;                  /* [DN_CHUNK][dv] */
    float *G = U + DN_CHUNK * dv;                  /* [DN_CHUNK]: cumulative log-decay in the chunk */
    float *u = tmp;
    const float Gi = row ? G[row - 1] + g : g;
    const float e = expf(Gi);
    /* u = β (v − e^{G_i} S0ᵀk) − Σ_{j<i} β (k·k_j) e^{G_i−G_j} u_j */
    memset(u, 0, (size_t)dv * sizeof(float));
    for (int64_t a = 0; a < dk; a++) {
        const float ka = k[a];
        const float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            u[b] += ka * Sa[b];
    }
    for (int64_t b = 0; b < dv; b++)
        u[b] = beta * (v[b] - e * u[b]);
    for (int64_t j = 0; j < row; j++) {
        const float *Kj = K + j * dk, *Uj = U + j * dv;
        float kk = 0;
        for (int64_t a = 0; a < dk; a++)
            kk += k[a] * Kj[a];
        const float c = beta * kk * expf(Gi - G[j]);
        for (int64_t b = 0; b < dv; b++)
            u[b] -= c * Uj[b];
    }
    memcpy(K + row * dk, k, (size_t)dk * sizeof(float));
    memcpy(U + row * dv, u, (size_t)dv * sizeof(float));
    G[row] = Gi;
    /* o = e^{G_i} S0ᵀq + Σ_{j≤i} (q·k_j) e^{G_i−G_j} u_j */
    memset(out, 0, (size_t)dv * sizeof(float));
    for (int64_t a = 0; a < dk; a++) {
        const float qa = q[a];
        const float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            out[b] += qa * Sa[b];
    }
    for (int64_t b = 0; b < dv; b++)
        out[b] *= e;
    for (int64_t j = 0; j <= row; j++) {
        const float *Kj = K + j * dk, *Uj = U + j * dv;
        float qk = 0;
        for (int64_t a = 0; a < dk; a++)
            qk += q[a] * Kj[a];
        const float c = qk * expf(Gi - G[j]);
        for (int64_t b = 0; b < dv; b++)
            out[b] += c * Uj[b];
    }
    if (row != DN_CHUNK - 1)
        return;
    /* the chunk is whole: S0 ← e^{G_last} S0 + Σ_j e^{G_last−G_j} k_j ⊗ u_j */
    const float GL = G[DN_CHUNK - 1], eL = expf(GL);
    for (int64_t i = 0; i < dk * dv; i++)
        S[i] *= eL;
    for (int64_t j = 0; j < DN_CHUNK; j++) {
        const float w = expf(GL - G[j]);
        const float *Kj = K + j * dk, *Uj = U + j * dv;
        for (int64_t a = 0; a < dk; a++) {
            const float c = w * Kj[a];
            float *Sa = S + a * dv;
            for (int64_t b = 0; b < dv; b++)
                Sa[b] += c * Uj[b];
        }
    }
}

void dn_recurrent_step(float *head, int64_t dk, int64_t dv, const float *q, const float *k, const float *v, float g,
                       float beta, float *out, float *tmp)
{
    float *S = head, *d = tmp;
    const float eg = expf(g);
    for (int64_t i = 0; i < dk * dv; i++)
        S[i] *= eg;
    memset(d, 0, (size_t)dv * sizeof(float));
    for (int64_t a = 0; a < dk; a++) {
        const float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            d[b] += k[a] * Sa[b];
    }
    for (int64_t b = 0; b < dv; b++)
        d[b] = (v[b] - d[b]) * beta;
    for (int64_t a = 0; a < dk; a++) {
        float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            Sa[b] += k[a] * d[b];
    }
    memset(out, 0, (size_t)dv * sizeof(float));
    for (int64_t a = 0; a < dk; a++) {
        const float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            out[b] += q[a] * Sa[b];
    }
}
