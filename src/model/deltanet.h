/* Inside the model layer: the Gated DeltaNet recurrence (Qwen3.5's linear attention), one value
 * head at a time, and the layout of a sequence's recurrent state.
 *
 * The recurrence (transformers' torch_recurrent_gated_delta_rule), per value head, state S [dk×dv]:
 *   S ← e^g S;  S ← S + k ⊗ β(v − Sᵀk);  o = Sᵀq
 * The chunked form (torch_chunk_gated_delta_rule's algebra) groups positions into chunks of
 * DN_CHUNK at fixed positions (chunk c holds positions [c·DN_CHUNK, (c+1)·DN_CHUNK)). With S0 the
 * state before the chunk, G_i the cumulative log-decay inside it and rows i = p mod DN_CHUNK:
 *   u_i = β_i (v_i − e^{G_i} S0ᵀk_i) − Σ_{j<i} β_i (k_i·k_j) e^{G_i−G_j} u_j        (the UT solve)
 *   o_i = e^{G_i} S0ᵀq_i + Σ_{j≤i} (q_i·k_j) e^{G_i−G_j} u_j
 *   at the chunk's end: S0 ← e^{G_last} S0 + Σ_j e^{G_last−G_j} k_j ⊗ u_j
 * which equals the recurrence in exact arithmetic. Row i reads only rows j < i of its own chunk
 * and S0, with every sum in index order, so a position's bits do not depend on how the positions
 * were split into batches (a prompt in one piece, in pieces of 7, or token by token as in decode):
 * the state keeps S0 and the chunk's rows so far (k_j, u_j, G_j). That is the design rule of
 * batch invariance; the per-token recurrence is the oracle it is tested against (within float
 * rounding, not bit for bit). */
#ifndef CDX_MODEL_DELTANET_H
#define CDX_MODEL_DELTANET_H

#include <stddef.h>
#include <stdint.h>

#define DN_CHUNK 64
#define DN_TMP_FLOATS(dv) ((dv) + 3 * DN_CHUNK) /* a step's scratch: u, and k·k_j, q·k_j, e^{G_i−G_j} */

/* Where things are in one sequence's state blob: a header, then per DeltaNet layer the conv
 * window ((conv_k − 1) × channels floats, oldest first) and per value head S0 [dk][dv], the
 * chunk's rows K [dk][DN_CHUNK] (k_j in column j, so that the dot products with every k_j run side
 * by side), U [DN_CHUNK][dv] and G [DN_CHUNK]. */
typedef struct dn_shape {
    int64_t n_linear;          /* DeltaNet layers */
    int64_t nk, nv, dk, dv;    /* key heads, value heads, their dims */
    int64_t conv_k, channels;  /* conv kernel, channels (2·nk·dk + nv·dv) */
    size_t head_floats;        /* one value head's state */
    size_t layer_floats;       /* one layer's: window + nv heads */
} dn_shape;

typedef struct dn_state_hdr {
    int64_t pos;               /* positions absorbed: the next one it takes */
    int64_t per_token;         /* 1: the S0 slots hold the recurrence's running state (no rows) */
    int64_t n_linear, magic;   /* checked before use */
} dn_state_hdr;

#define DN_STATE_MAGIC 0x3674656e61746c64LL /* "dltanet6" (6: K by columns) */

void dn_shape_init(dn_shape *s, int64_t n_linear, int64_t nk, int64_t nv, int64_t dk, int64_t dv, int64_t conv_k);
size_t dn_state_bytes(const dn_shape *s);
float *dn_layer_state(const dn_shape *s, void *state, int64_t li); /* the layer's window; heads follow */
float *dn_head_state(const dn_shape *s, void *state, int64_t li, int64_t h);

/* One position of one value head in the chunked form. q, k: [dk] (l2-normed, q scaled); v: [dv];
 * g: the log-decay; beta; head: the head's state (S0, rows); row = pos mod DN_CHUNK; out: [dv];
 * tmp: [DN_TMP_FLOATS(dv)] scratch. Folds the chunk into S0 after its last row. */
void dn_chunk_step(float *head, int64_t dk, int64_t dv, int64_t row, const float *q, const float *k,
                   const float *v, float g, float beta, float *out, float *tmp);

/* One position of the per-token recurrence (the oracle): S in head's S0 slot. tmp: [dv]. */
void dn_recurrent_step(float *head, int64_t dk, int64_t dv, const float *q, const float *k, const float *v, float g,
                       float beta, float *out, float *tmp);

/* The steps per kernel set: "scalar" (the oracle) and "avx2", bit for bit the same. */
typedef struct cdx_kernels cdx_kernels;
typedef struct dn_kernels {
    const char *isa;
    void (*chunk)(float *head, int64_t dk, int64_t dv, int64_t row, const float *q, const float *k, const float *v,
                  float g, float beta, float *out, float *tmp);
    void (*recurrent)(float *head, int64_t dk, int64_t dv, const float *q, const float *k, const float *v, float g,
                      float beta, float *out, float *tmp);
} dn_kernels;
extern const dn_kernels dn_kernels_avx2;
/* The set for a forward context's kernels: scalar for the scalar set, else AVX2 where the CPU has it. */
const dn_kernels *dn_kernels_for(const cdx_kernels *k);

#endif
