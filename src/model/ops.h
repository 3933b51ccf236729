/* The shared steps of the forward passes (ops.c): norms, RoPE, the embedding, the attention rows over
 * the paged KV cache, the K/V write, SwiGLU and the mixture-of-experts block. The dense, bf16 and
 * hybrid passes (forward.c, forward_bf16.c, qwen35.c) call these and nothing of each other's.
 *
 *   model_norm_rows(pool, xn, x, L->attn_norm, n, E, eps);     // x → xn, row by row
 *   model_rope(q, n_head, hd, n_rot, pos, m->inv_freq, mode);   // in place, one token
 *   model_kv_store(K, &seqs[s], slot, pos, kvd, k, v);          // into the token's own KV slot
 *
 * Every op computes a row's values by the same code whatever thread or batch it falls in (batch
 * invariance), and none allocates. */
#ifndef CDX_MODEL_OPS_H
#define CDX_MODEL_OPS_H

#include "arch.h"

#include <math.h>

/* What a forward context lends a pass: its kernels, threads and scratch ([max_tokens][...] each). */
typedef struct fwd_scratch {
    const cdx_kernels *k;
    cdx_pool *pool;
    float *x, *xn, *q, *kk, *vv, *attn, *ffn_g, *ffn_u;
    float *xp;                 /* [n][n_embd]: a parallel block's attention output (hp.parallel_residual), or NULL */
    /* sparse layers (NULL for dense models) */
    float *router;             /* [n][n_expert] */
    float *xg, *yg, *moe;      /* [n][n_embd]: gathered rows, an expert's outputs, the layer's sum */
    float *sel_w, *grp_w;      /* [n][n_expert_used]: chosen weights by token, by expert group */
    int32_t *sel_e;            /* [n][n_expert_used]: chosen experts */
    int64_t *grp_tok;          /* [n]: the tokens of one expert's group, ascending */
    int64_t *pos;              /* [n] */
    int32_t *seq;              /* [n] */
    cdx_attn_row *arows;       /* [n] */
    const float **rope_f;      /* [n]: each token's RoPE frequencies this pass (hp.rope_pass), or NULL */
    float *rope_buf;           /* [n][n_rot/2]: dynamic NTK's per-sequence frequencies (hp.rope_pass) */
    void *ws;                  /* matmul workspace */
    int8_t *xq;                /* [n][max(n_embd, n_ff)]: BitLinear's int8 activations (hp.bitlinear), or NULL */
    float *xqs;                /* [n]: their scales, 127 / absmax */
} fwd_scratch;

static inline float model_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float model_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ---- norms ---- */

/* ggml's rms_norm to the bit: out = w · x / sqrt(mean(x²) + eps), squares summed in double, the
 * mean rounded to float. */
void model_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
/* model_rmsnorm of n rows of E values (x to out, E apart), on the pool from 4 rows up. */
void model_norm_rows(cdx_pool *pool, float *out, const float *x, const float *w, int64_t n, int64_t E, float eps);
/* torch's layer_norm over n values: mean and biased variance, then (x - mean) · rsqrt(var + eps) · w + b.
 * Sums in double (one rounding of the mean and variance to float) keep it within a few ulp of torch.
 * The vision tower's, the encoders' and the LayerNorm families' norm; b NULL: no bias. */
void model_layernorm(float *out, const float *x, const float *w, const float *b, int64_t n, float eps);
/* model_norm_rows with the norm kind: a LayerNorm with bias b (may be NULL) when layer, else RMSNorm (b unused). */
void model_norm_rows_of(cdx_pool *pool, bool layer, float *out, const float *x, const float *w, const float *b,
                        int64_t n, int64_t E, float eps);
/* LlamaRMSNorm.forward on a bf16 input (bf16 compute, forward_bf16.c's #3, #5). */
void model_rmsnorm_bf16(float *out, const float *x, const float *w, int64_t n, float eps);
/* nn.LayerNorm on a bf16 input (bf16 compute): PyTorch 2.x's CPU kernel takes the moments in float and computes
 * (x · rstd + (-rstd · mean)) · w + b in float, rounded once; the moments here are summed in double and rounded
 * to float (torch's RowwiseMoments gives the correctly rounded values but for an ulp now and then). b NULL: none. */
void model_layernorm_bf16(float *out, const float *x, const float *w, const float *b, int64_t n, float eps);
/* CohereLayerNorm on a bf16 input: d = x − mean, then bf16(w · (d · rsqrt(mean(d²) + eps))), all in f32 (the mean
 * and the variance summed in double, rounded to float). */
void model_layernorm_bf16_centered(float *out, const float *x, const float *w, int64_t n, float eps);
/* The same statistics with the weight applied in f32 and one rounding, bf16(w · h) (Olmo2RMSNorm's
 * (w·h).to(dtype); GemmaRMSNorm's h·(1 + w) with w here already 1 + the bf16 weight). */
void model_rmsnorm_bf16_once(float *out, const float *x, const float *w, int64_t n, float eps);

/* ---- RoPE ---- */

/* Rotates the first n_rot dims of each of n_heads heads (hd apart) of one token at position pos:
 * pairs (2i, 2i+1) for CDX_ROPE_ADJACENT, (i, i + n_rot/2) for CDX_ROPE_HALVES (rotate_half). */
void model_rope(float *v, int64_t n_heads, int64_t hd, int64_t n_rot, int64_t pos, const float *inv_freq,
                cdx_rope_mode mode);
/* model_rope with cos and sin × att (YaRN's and LongRoPE's attention factor, as transformers scales
 * them in f32); att 0: model_rope. */
void model_rope_att(float *v, int64_t n_heads, int64_t hd, int64_t n_rot, int64_t pos, const float *inv_freq,
                    cdx_rope_mode mode, float att);
/* The multimodal RoPE (Qwen2-VL, hp.rope_sections): as model_rope_att, but pair i turns by pos[k] of the section
 * k it falls in (sections sec[0] | sec[1] | sec[2] | the rest: temporal, height, width, extra). With the four
 * positions equal it gives model_rope_att's bits. */
void model_rope_sections(float *v, int64_t n_heads, int64_t hd, int64_t n_rot, const int64_t pos[4],
                         const int32_t sec[4], const float *inv_freq, cdx_rope_mode mode, float att);
/* hp.rope_pass: s->rope_f[i] for each of the n tokens, by its sequence's length T in this pass (its
 * rope_len, or its last position here + 1): dynamic NTK's frequencies for T (s->rope_buf), or
 * LongRoPE's short or long factors. The caller recomputes a sequence whose factor set changed
 * (cdx_model_rope_restart). */
void model_rope_pass(const cdx_model *m, const fwd_scratch *s, const cdx_kv_seq *seqs, int64_t n);
/* transformers' rotate_half with bf16 cos/sin and bf16-rounded products (forward_bf16.c's #6, #7) over the first
 * n_rot dims of each head (StableLM's, Phi-3's partial rotary: the rest pass through); hd <= 512; att: cos and sin
 * times this in f32 before their rounding (LongRoPE's attention factor), 0: none. */
void model_rope_bf16(float *v, int64_t n_heads, int64_t hd, int64_t n_rot, int64_t pos, const float *inv_freq,
                     float att);
/* The same with the multimodal sections (model_rope_sections' positions and sections). */
void model_rope_bf16_sections(float *v, int64_t n_heads, int64_t hd, const int64_t pos[4], const int32_t sec[4],
                              const float *inv_freq);
/* OLMo's rotation of a bf16 vector: cos and sin stay f32, q·cos + rotate_half(q)·sin in f32, one rounding
 * (OlmoRotaryEmbedding returns f32 cos/sin; apply_rotary_pos_emb casts q_embed back to q's dtype); trig_bf16: cos
 * and sin rounded to bf16 first (Cohere); att as model_rope_bf16's; pairs (i, i + hd/2), or (2i, 2i + 1) for CDX_ROPE_ADJACENT (Cohere). */
void model_rope_bf16_f32(float *v, int64_t n_heads, int64_t hd, int64_t pos, const float *inv_freq,
                         cdx_rope_mode mode, bool trig_bf16, float att);

/* ---- the embedding ---- */

/* x[i] = row tokens[i] of e as floats, or embd[i] where embd and embd[i] are given (image features). */
void model_embed(const cdx_mat *e, const int32_t *tokens, const float *const *embd, int64_t n, int64_t E, float *x);

/* ---- attention over the paged KV cache ---- */

/* Writes one position's K and V (kvd values each) into layer slot `slot` of c's block table, in its
 * storage type: f32 as is, f16 and bf16 rounded to nearest even (ggml's copy into an F16 cache). */
void model_kv_store(const cdx_kernels *K, const cdx_kv_seq *c, int64_t slot, int64_t p, int64_t kvd, const float *k,
                    const float *v);
/* The attention rows of n tokens: token i's query at q + i·qd, its output at out + i·qd, its keys
 * the positions of its sequence up to its own in KV slot `slot` (window > 0: the last window). */
void model_attn_rows(const fwd_scratch *s, const cdx_kv_seq *seqs, int64_t n, const float *q, float *out, int64_t qd,
                     int64_t slot, int64_t window);

/* v[i] clamped to [-c, c] (OLMoE's clip_qkv), over n values. */
static inline void model_clamp(float *v, int64_t n, float c)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = v[i] > c ? c : v[i] < -c ? -c : v[i];
}

/* ---- the residual stream ---- */

/* x += d, or x += d · scale (scale != 0: Granite's residual_multiplier), over n values. */
static inline void model_residual(float *x, const float *d, int64_t n, float scale)
{
    if (scale)
        for (int64_t i = 0; i < n; i++)
            x[i] += d[i] * scale;
    else
        for (int64_t i = 0; i < n; i++)
            x[i] += d[i];
}

/* ---- MLPs ---- */

/* g = silu(g) ⊙ u elementwise, on the pool when there is enough of it (each value the same whichever
 * thread computes it); bf16: as bf16 compute rounds it, g = bf16(bf16(silu(bf16(g))) · bf16(u)). */
void model_swiglu(cdx_pool *pool, const cdx_kernels *k, float *g, const float *u, int64_t n, bool bf16);
/* g = gelu_pytorch_tanh(g) ⊙ u (GeGLU: Gemma's MLP), f32, as PyTorch's CPU kernel writes it:
 * 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); the same bits on every kernel set and split.
 * f16: as ggml's CPU GeGLU computes it for a GGUF file (GGML_GELU_FP16): x ≤ -10 gives 0, x ≥ 10
 * gives x·u, else its f16 table, the tanh form at x rounded to f16, rounded to f16, times u. */
void model_geglu(cdx_pool *pool, float *g, const float *u, int64_t n, bool f16);
/* GeGLU in bf16 compute: g = bf16(bf16(gelu_pytorch_tanh(g)) · u), the GELU of the bf16 gate in f32 (PyTorch
 * 2.x's GeluKernel for reduced floats: the formula of model_geglu, one rounding), on g and u holding bf16 values;
 * u NULL: the GELU alone (Starcoder2's plain MLP). */
void model_geglu_bf16(cdx_pool *pool, float *g, const float *u, int64_t n);
/* The gated MLP's activation of hp (act(g) ⊙ u into g), f32; gelu_f16: ggml's GELU (a GGUF file). */
static inline void model_glu(cdx_pool *pool, const cdx_kernels *k, cdx_hf_act act, bool gelu_f16, float *g,
                             const float *u, int64_t n)
{
    if (act == CDX_HF_ACT_GELU_TANH)
        model_geglu(pool, g, u, n, gelu_f16);
    else if (act == CDX_HF_ACT_RELU2) /* ReLUSquaredActivation: square(relu(g)), then · u */
        for (int64_t i = 0; i < n; i++) {
            const float r = g[i] > 0 ? g[i] : 0.0f;
            g[i] = r * r * u[i];
        }
    else
        model_swiglu(pool, k, g, u, n, false);
}
/* BitNet's BitLinear (transformers' integrations/bitnet.py, offline), in two steps. activation_quant: each of
 * the n rows of x (cols values) to int8, xs[i] = 127 / max(absmax(row), 1e-5), xq = clamp(round-half-even(x ·
 * xs[i]), -128, 127). Then out[i][r] = (Σ_c xq[i][c]·t[r][c]) / (ws · xs[i]): the sum exact in integers (F.linear
 * over integer-valued floats is exact below 2^24), the division as post_quant_process's, so every kernel set
 * and batch gives the same bits. Rows of the output on the pool. */
void model_act_quant(const float *x, int64_t n, int64_t cols, int8_t *xq, float *xs);
void model_bitlinear(cdx_pool *pool, const bit_mat *w, const int8_t *xq, const float *xs, int64_t n, float *out);
/* The plain MLP's activation in place (Starcoder2's c_fc output): gelu_pytorch_tanh (gelu_f16: ggml's
 * f16 table, a GGUF file) or SiLU, over n values. */
void model_act(cdx_pool *pool, cdx_hf_act act, bool gelu_f16, float *g, int64_t n);
/* x[i][j] += b[j] over n rows of d values; b NULL: nothing. */
static inline void model_add_bias(float *x, const float *b, int64_t n, int64_t d)
{
    for (int64_t i = 0; b && i < n; i++)
        for (int64_t j = 0; j < d; j++)
            x[i * d + j] += b[j];
}
/* GPT-OSS's clamped SwiGLU in place over n values (GptOssExperts): g = min(g, limit), u = clamp(u, ±limit),
 * g = (u + 1)·g·sigmoid(alpha·g). */
static inline void model_swiglu_oai(float *g, const float *u, int64_t n, float limit, float alpha)
{
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i] > limit ? limit : g[i];
        const float y = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
        const float glu = x * (1.0f / (1.0f + expf(-(x * alpha))));
        g[i] = (y + 1.0f) * glu;
    }
}
/* logits = cap·tanh(logits/cap) over n values (Gemma2's final_logit_softcapping); cap 0: unchanged. */
static inline void model_softcap(float *x, int64_t n, float cap)
{
    for (int64_t i = 0; cap && i < n; i++)
        x[i] = tanhf(x[i] / cap) * cap;
}
/* sel[0..k) = the indices torch.topk(v, k) returns on CPU for the n values v (1 <= k <= n <= CDX_MAX_EXPERTS),
 * largest first, w[r] = v[sel[r]]: which of equal values it takes is libstdc++'s std::nth_element (or
 * std::partial_sort when k·64 <= n), as PyTorch's topk_impl_loop calls them (ops.c writes them out). The bf16
 * pass's routing (bf16 router logits tie); tests/golden/torch-topk.json holds torch's own picks. */
void model_topk_torch(const float *v, int64_t n, int64_t k, int32_t *sel, float *w);
/* out[n][n_embd] = the sparse block of layer l over the normalised rows xn (s's MoE scratch):
 * softmax routing in f32, the top n_expert_used (renormalised when hp->norm_topk_prob), each expert
 * run once over the rows that chose it, summed per token in ascending expert order; plus the shared
 * expert scaled by sigmoid(its gate) where L has one (Qwen2-MoE). A bf16 model (m->dtype) computes it as
 * transformers' bf16 MoE blocks do (forward_bf16.c's MoE lines): bf16 router logits, the routing in f32 and
 * its weights rounded to bf16, every expert's projections and SwiGLU at the dense MLP's cast points, each
 * term bf16(output · weight) added to the token's bf16 sum in ascending expert order (index_add_), the shared
 * expert's bf16(bf16(sigmoid(gate)) · shared) added last; GPT-OSS (moe_oai) at GptOssTopKRouter's and
 * GptOssExperts' cast points (forward_bf16.c's gpt_oss lines): its terms summed in f32 and rounded once. */
int model_moe(const cdx_model *m, const fwd_scratch *s, int64_t l, const layer_weights *L, const float *xn, int64_t n,
              float *out, cdx_err *err);

#endif
