/* The forward pass of a bf16 model (--dtype bf16): what transformers computes for a dense Llama /
 * Mistral / Qwen2 / Qwen3 checkpoint loaded with torch_dtype=torch.bfloat16 on CPU (eager attention).
 * ../shared/fixtures/hf/INDEX.md, "bf16 semantics: every cast point", lists each rounding with the
 * transformers function it mirrors; the numbers below (#n) are its rows. Activations live in the
 * forward context's f32 buffers holding bf16 values (every value is rounded where torch rounds it),
 * so the matmuls run on the kernels' BF16 rows: exact products summed in f32 (#4), rounded here once.
 *   x = embed(tokens)                                     #2  rows of the bf16 table
 *   per layer: h = rmsnorm(x)·w                          #3  f32 statistics, bf16(h), then bf16(w·h)
 *              q,k,v = bf16(h·Wᵀ + b)                     #4  bias added in f32 before the rounding
 *              [qwen3: per-head rmsnorm of q, k]          #5
 *              rope(q, k) with bf16 cos/sin               #6, #7  three rounded bf16 ops
 *              attn (cdx_attn_bf16)                       #8-#11
 *              x = bf16(x + bf16(attn·Woᵀ))               #11, #12
 *              h = rmsnorm(x)·w; g = bf16(silu(bf16(h·Wgᵀ))); u = bf16(h·Wuᵀ)    #13
 *              x = bf16(x + bf16(bf16(g·u)·Wdᵀ))          #12, #13
 *   logits = bf16(rmsnorm(x)·w · Woutᵀ)                   #14  bf16 logits, read as f32
 * The K/V cache holds post-RoPE K and V (#15): bf16 values, exact in a bf16 or an f32 cache. */
#include "ops.h"

#include <math.h>
#include <string.h>

#define bf cdx_bf16_round

/* y[t][r] = bf16(y[t][r] + bias[r]) over n rows of `rows` values (bias NULL: none) */
static void round_rows(float *y, int64_t n, int64_t rows, const float *bias)
{
    for (int64_t t = 0; t < n; t++) {
        float *yt = y + t * rows;
        if (bias)
            for (int64_t r = 0; r < rows; r++)
                yt[r] = bf(yt[r] + bias[r]);
        else
            for (int64_t r = 0; r < rows; r++)
                yt[r] = bf(yt[r]);
    }
}

/* the residual stream: x = bf16(x + d) */
static void add_bf16(float *x, const float *d, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = bf(x[i] + d[i]);
}

int forward_bf16(const cdx_model *m, const fwd_scratch *s, const cdx_stage *st, const cdx_kv_seq *seqs, int n_seq,
                 const cdx_batch *b, float *logits, cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    const int64_t n = b->n, E = hp->n_embd, hd = hp->head_dim, F = hp->n_ff;
    const int64_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    const cdx_kernels *K = s->k;
    cdx_pool *pool = s->pool;
    if (hp->rope_pass || hp->rope_attn_factor || hp->n_rot != hd)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "bf16 forward: this model's RoPE (partial rotary, or dynamic, YaRN "
                           "or LongRoPE scaling) is computed in f32 only; use --dtype f32");
    if (hp->rope_mode != CDX_ROPE_HALVES || hd > 512)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "bf16 forward: rope pairing %d, head_dim %lld; it runs "
                           "transformers' rotate_half with head_dim <= 512", (int)hp->rope_mode, (long long)hd);
    /* #8: a bf16 tensor times the Python float head_dim**-0.5, kept in float */
    cdx_attn_shape ashape = { .n_head = (int)hp->n_head, .n_kv_head = (int)hp->n_head_kv, .head_dim = (int)hd,
                              .kv_stride = kvd, .block = seqs[0].block, .scale = (float)pow((double)hd, -0.5),
                              .kv_type = seqs[0].type };
    if (ashape.kv_type != CDX_TYPE_F32 && ashape.kv_type != CDX_TYPE_BF16)
        return cdx_err_set(err, CDX_EINVAL, "KV cache type %s for a bf16 model; bf16 and f32 are supported",
                           cdx_type_name(ashape.kv_type));
    for (int i = 1; i < n_seq; i++)
        if (seqs[i].block != ashape.block || seqs[i].type != ashape.kv_type)
            return cdx_err_set(err, CDX_EINVAL, "sequences of one batch differ in their KV blocks (%lld and %lld "
                               "positions, types %u and %u)", (long long)ashape.block, (long long)seqs[i].block,
                               ashape.kv_type, seqs[i].type);
    for (int64_t l = 0; l < hp->n_layer; l++)
        if (m->layers[l].moe)
            return cdx_err_set(err, CDX_EUNSUPPORTED, "bf16 forward: layer %lld is a mixture of experts", (long long)l);

    const int64_t l0 = st->layer0, l1 = st->layer1; /* a split model's stage: its layers (cdx_stage) */
    if (b->x_in) /* a later stage: the stage before computed the embedding and its layers */
        memcpy(s->x, b->x_in, (size_t)(n * E) * sizeof(float));
    else
        model_embed(&m->tok_embd, b->tokens, NULL, n, E, s->x);

    for (int64_t l = l0; l < l1; l++) {
        const layer_weights *L = &m->layers[l];
        for (int64_t i = 0; i < n; i++)
            model_rmsnorm_bf16(s->xn + i * E, s->x + i * E, L->attn_norm, E, hp->rms_eps);
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->wq, &L->wk, &L->wv }, 3, s->xn, n,
                         (float *[]){ s->q, s->kk, s->vv }, s->ws);
        round_rows(s->q, n, qd, L->bq);
        round_rows(s->kk, n, kvd, L->bk);
        round_rows(s->vv, n, kvd, L->bv);
        for (int64_t i = 0; i < n; i++) {
            float *q = s->q + i * qd, *k = s->kk + i * kvd, *v = s->vv + i * kvd;
            if (L->q_norm) {
                for (int64_t h = 0; h < hp->n_head; h++)
                    model_rmsnorm_bf16(q + h * hd, q + h * hd, L->q_norm, hd, hp->rms_eps);
                for (int64_t h = 0; h < hp->n_head_kv; h++)
                    model_rmsnorm_bf16(k + h * hd, k + h * hd, L->k_norm, hd, hp->rms_eps);
            }
            if (hp->rope_sections[0] | hp->rope_sections[1] | hp->rope_sections[2] | hp->rope_sections[3]) {
                /* Qwen2-VL: a text token's positions p, p, p, 0, else the batch's (forward.c's rule) */
                const int64_t *ps = b->pos_sections ? b->pos_sections + 4 * i : NULL;
                const int64_t p4[4] = { ps ? ps[0] : s->pos[i], ps ? ps[1] : s->pos[i], ps ? ps[2] : s->pos[i],
                                        ps ? ps[3] : 0 };
                model_rope_bf16_sections(q, hp->n_head, hd, p4, hp->rope_sections, m->inv_freq);
                model_rope_bf16_sections(k, hp->n_head_kv, hd, p4, hp->rope_sections, m->inv_freq);
            } else {
                model_rope_bf16(q, hp->n_head, hd, s->pos[i], m->inv_freq);
                model_rope_bf16(k, hp->n_head_kv, hd, s->pos[i], m->inv_freq);
            }
            model_kv_store(&seqs[s->seq[i]], l - l0, s->pos[i], kvd, k, v);
        }
        model_attn_rows(s, seqs, n, s->q, s->attn, qd, l - l0, hp->sliding_window);
        int rc = cdx_attn_bf16(pool, &ashape, s->arows, n, err);
        if (rc)
            return rc;
        cdx_matmul(K, pool, &L->wo, s->attn, n, s->xn, s->ws);
        round_rows(s->xn, n, E, NULL);
        add_bf16(s->x, s->xn, n * E);
        for (int64_t i = 0; i < n; i++)
            model_rmsnorm_bf16(s->xn + i * E, s->x + i * E, L->ffn_norm, E, hp->rms_eps);
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->gate, &L->up }, 2, s->xn, n,
                         (float *[]){ s->ffn_g, s->ffn_u }, s->ws);
        model_swiglu(pool, K, s->ffn_g, s->ffn_u, n * F, true); /* #13 */
        cdx_matmul(K, pool, &L->down, s->ffn_g, n, s->xn, s->ws);
        round_rows(s->xn, n, E, NULL);
        add_bf16(s->x, s->xn, n * E);
    }

    if (l1 < hp->n_layer) /* the later stages compute the rest */
        return forward_stage_send(st, s, seqs, n_seq, b, err);
    int64_t n_out = 0;
    if (b->x_out) { /* a split model's last stage: the wanted rows go back to the first, which has the head */
        for (int64_t i = 0; i < n; i++)
            if (b->want_logits ? b->want_logits[i] : i == n - 1)
                memcpy(b->x_out + (n_out++) * E, s->x + i * E, (size_t)E * sizeof(float));
        return CDX_OK;
    }
    for (int64_t i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] : i == n - 1)
            model_rmsnorm_bf16(s->xn + (n_out++) * E, s->x + i * E, m->out_norm, E, hp->rms_eps);
    if (n_out) {
        cdx_matmul(K, pool, &m->output, s->xn, n_out, logits, s->ws);
        round_rows(logits, n_out, hp->n_vocab, NULL);
    }
    return CDX_OK;
}
