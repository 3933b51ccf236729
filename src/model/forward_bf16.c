/* The forward pass of a bf16 model (--dtype bf16): what transformers computes for a dense checkpoint loaded
 * with torch_dtype=torch.bfloat16 on CPU (eager attention). ../shared/fixtures/hf/INDEX.md, "bf16 semantics:
 * every cast point", lists each rounding of Llama / Mistral / Qwen2 / Qwen3 with the transformers function it
 * mirrors; the numbers below (#n) are its rows. Activations live in the forward context's f32 buffers holding
 * bf16 values (every value is rounded where torch rounds it), so the matmuls run on the kernels' BF16 rows:
 * exact products summed in f32 (#4), rounded here once.
 *   x = embed(tokens)                                     #2  rows of the bf16 table
 *   per layer: h = rmsnorm(x)·w                          #3  f32 statistics, bf16(h), then bf16(w·h)
 *              q,k,v = bf16(h·Wᵀ + b)                     #4  bias added in f32 before the rounding
 *              [qwen3: per-head rmsnorm of q, k]          #5
 *              rope(q, k) with bf16 cos/sin               #6, #7  three rounded bf16 ops; inv_freq, where unscaled,
 *                                                              in torch's f32 arithmetic (rope.c's torch_freqs)
 *              attn (cdx_attn_bf16)                       #8-#11
 *              x = bf16(x + bf16(attn·Woᵀ))               #11, #12
 *              h = rmsnorm(x)·w; g = bf16(silu(bf16(h·Wgᵀ))); u = bf16(h·Wuᵀ)    #13
 *              x = bf16(x + bf16(bf16(g·u)·Wdᵀ))          #12, #13
 *   logits = bf16(rmsnorm(x)·w · Woutᵀ)                   #14  bf16 logits, read as f32
 * The K/V cache holds post-RoPE K and V (#15): bf16 values, exact in a bf16 or an f32 cache.
 *
 * The other families with a bf16 pass (their rows say .bf16; goldens tests/golden/bf16-<family>.json, made by
 * scripts/goldens/torch-bf16-families.py from their transformers modeling code) differ where noted. Where
 * transformers multiplies or divides a bf16 tensor by a Python float, PyTorch 2.x's CPU kernels keep the
 * scalar in f32 (opmath) and round once: bf16(x · float(s)).
 *   granite  x = bf16(embed · embedding_multiplier); each branch bf16(bf16(branch) · residual_multiplier)
 *            before its bf16 residual add; the softmax scale attention_multiplier in place of head_dim^-½
 *            (#8's rule); logits = bf16(bf16 logits / logits_scaling). Norms, RoPE, MLP as Llama's.
 *   olmo2    no input norms; Olmo2RMSNorm = bf16(w · h) in f32, one rounding (row bf16_norm_once), for the
 *            post-attention and post-feedforward norms, the final norm and q_norm / k_norm over the whole
 *            projection (before RoPE); Olmo2RotaryEmbedding keeps cos/sin in f32, so q·cos + rotate_half(q)·sin
 *            is f32 and rounded once (row bf16_rope_f32).
 *   smollm3  Llama's cast points; a NoPE layer (no_rope_layers 0) rotates nothing.
 *   gemma    x = bf16(embed · bf16(√hidden)) (torch.tensor(hidden**0.5, dtype=bf16): the normalizer itself
 *            rounded); GemmaRMSNorm = bf16(h · (1 + w)) with 1 + w in f32 from the bf16 weight (the offset is
 *            added after the cast, cdx_model_open), one rounding; GeGLU: bf16(bf16(gelu_tanh(g)) · u), the GELU
 *            in f32; the softmax scale head_dim^-½ (#8).
 *   gemma2   gemma's, plus post-attention / post-feedforward norms (the same (1 + w) norm), the softmax scale
 *            query_pre_attn_scalar^-½, the scores softcapped before the mask as three bf16 ops (bf16(s / c),
 *            bf16(tanh), bf16(· c): cdx_attn_bf16), a window on the sliding layers, and the bf16 logits
 *            softcapped the same three-op way.
 *   gemma3   gemma2's layer without softcaps (where config.json has none), per-head q_norm / k_norm ((1 + w),
 *            one rounding) before RoPE, the sliding layers rotated with rope_local_base_freq (inv_freq_swa).
 *   starcoder2  nn.LayerNorm on bf16: float moments, (x·rstd + (-rstd·mean))·w + b in float, one rounding
 *            (model_layernorm_bf16); o_proj's and c_fc's / c_proj's biases added before their one rounding (#4);
 *            c_proj(gelu_tanh(c_fc(x))) with the GELU in f32 rounded once; the window on every layer.
 *   stablelm  starcoder2's LayerNorm, q/k/v biases, SwiGLU; partial rotary: Llama's three bf16 ops on the first
 *            n_rot dims, the rest passed through (its scores / math.sqrt(head_dim), a Python float, is this pass's
 *            · head_dim^-½: the same bits where head_dim is a power of 4, as the fixture's 16).
 *   olmo     OlmoLayerNorm: F.layer_norm of the f32 copy, no weight nor bias (the loader's weights of 1), one
 *            rounding, as starcoder2's; clip_qkv clamps the bf16 q, k, v; OLMo 2's f32 rotation (bf16_rope_f32).
 *   cohere   CohereLayerNorm = bf16(w · ((x − mean)·rsqrt(var + eps))) in f32 (row bf16_ln_centered); cos/sin cast
 *            to bf16 (CohereRotaryEmbedding) but apply_rotary_pos_emb computes in float on interleaved pairs and
 *            rounds once (bf16_rope_f32 + bf16_trig); the parallel block x = bf16(bf16(x + attn) + mlp) (StableLM's
 *            use_parallel_residual too); logits = bf16(bf16 logits · logit_scale).
 *   the mixtures of experts (mixtral, qwen2_moe, qwen3_moe, olmoe, granitemoe): their dense family's layer (Llama's;
 *            Qwen2's biases; Qwen3's per-head q/k norms and its mlp_only_layers dense; OLMoE's whole-projection q/k norms,
 *            LlamaRMSNorm's two roundings; Granite's scalings) with the sparse block for the MLP, in ops.c's model_moe:
 *            router logits bf16 (#4); softmax of their f32 upcast (torch's kernel: exp, summed in order, · 1/sum); the
 *            k chosen as torch.topk chooses (libstdc++'s nth_element / partial_sort: which of equal values win);
 *            renormalised in f32 where the family does; the weights rounded to bf16 (.to(hidden_states.dtype);
 *            GraniteMoe: the softmax over the k largest logits, .type_as); each expert's gate/up/SwiGLU/down as #4, #13;
 *            term = bf16(bf16(expert) · weight); the token's sum = bf16(sum + term) in ascending expert id (index_add_
 *            into bf16 zeros); Qwen2-MoE then adds bf16(bf16(sigmoid(bf16 gate logit)) · shared expert) as one more
 *            bf16 add.
 *   gpt_oss  the norms' weights f32 (_keep_in_fp32_modules: row bf16_norm_f32), GptOssRMSNorm = bf16(w · h), one
 *            rounding; q/k/v/o biases (#4); YaRN: torch's f32 frequencies (rope.c), cos/sin × the attention factor
 *            in f32 before .to(bf16), then _apply_rotary_emb's three bf16 ops (model_rope_bf16's); attention with
 *            sinks (cdx_attn_bf16): the bf16 sink as a last column, combined − max a bf16 subtraction, softmax(dtype=
 *            bf16) = exp and Σ in f32, x / Σ rounded; the sparse block in model_moe: bf16 router logits with their
 *            bias, torch.topk on them, the k softmaxed as the attention's, bf16; each expert's bmm rounded, + bias
 *            rounded, the clamped SwiGLU one bf16 op at a time, down likewise, term = bf16(y · weight), the terms
 *            summed in f32 (ascending expert id) and rounded once (.sum(dim=0) of a bf16 tensor).
 *   phi3     Llama's cast points on the split qkv_proj / gate_up_proj rows (up · silu(gate): the same bf16 product);
 *            partial rotary as StableLM's; LongRoPE: the short or long factors by the sequence's length
 *            (model_rope_pass, as the f32 pass picks them) in torch's f32 frequencies (rope.c's longrope_torch), and
 *            cos = bf16(cos_f32 · attention_factor), sin alike (Phi3RotaryEmbedding: the factor before .to(bf16)). */
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

/* the residual stream: x = bf16(x + d), or x = bf16(x + bf16(d · scale)) (scale != 0: Granite's
 * residual_multiplier, a bf16 tensor times a Python float) */
static void add_bf16(float *x, const float *d, int64_t n, float scale)
{
    if (scale)
        for (int64_t i = 0; i < n; i++)
            x[i] = bf(x[i] + bf(d[i] * scale));
    else
        for (int64_t i = 0; i < n; i++)
            x[i] = bf(x[i] + d[i]);
}

/* the family's norm over n rows of E values (x to out; in place is fine): Llama's RMSNorm, two roundings, or one
 * (the (1 + w) norms, Olmo2RMSNorm: arch_desc.bf16_norm_once); or a LayerNorm with bias b (may be NULL) */
static void norm_rows(const cdx_model *m, float *out, const float *x, const float *w, const float *b, int64_t n,
                      int64_t E)
{
    const bool once = m->desc->bf16_norm_once || m->desc->hf_norm_offset != 0;
    for (int64_t i = 0; i < n; i++)
        if (m->hp.layer_norm && m->desc->bf16_ln_centered) /* Cohere */
            model_layernorm_bf16_centered(out + i * E, x + i * E, w, E, m->hp.rms_eps);
        else if (m->hp.layer_norm)
            model_layernorm_bf16(out + i * E, x + i * E, w, b, E, m->hp.rms_eps);
        else if (once)
            model_rmsnorm_bf16_once(out + i * E, x + i * E, w, E, m->hp.rms_eps);
        else
            model_rmsnorm_bf16(out + i * E, x + i * E, w, E, m->hp.rms_eps);
}

/* Gemma2's softcap on bf16 values: x / cap, tanh, · cap, each in f32 and rounded */
static void softcap_bf16(float *x, int64_t n, float cap)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = bf(bf(tanhf(bf(x[i] / cap))) * cap);
}

const char *bf16_unsupported(const cdx_model *m)
{
    const cdx_hparams *hp = &m->hp;
    const int64_t hd = hp->head_dim;
    const bool sections = hp->rope_sections[0] || hp->rope_sections[1];
    if (hp->rope_pass == CDX_ROPE_PASS_DYNAMIC || ((hp->rope_attn_factor || hp->rope_pass) && sections) ||
        (hp->rope_attn_factor && !m->bf16_freq) || (hp->n_rot != hd && (m->desc->bf16_rope_f32 || sections)))
        return "this model's RoPE (dynamic scaling, YaRN or LongRoPE with sections, or partial rotary with f32 cos/sin "
               "or sections) is computed in f32 only";
    if ((hp->rope_mode != CDX_ROPE_HALVES && !m->desc->bf16_rope_f32) || hd > 512)
        return "its rope pairing or a head_dim over 512 (the pass runs transformers' rotate_half with head_dim <= "
               "512) is computed in f32 only";
    if ((hp->layer_norm && m->layers[0].q_norm) || hp->bitlinear ||
        (hp->act != CDX_HF_ACT_SILU && hp->act != CDX_HF_ACT_GELU_TANH) ||
        (hp->mlp_plain && hp->act != CDX_HF_ACT_GELU_TANH))
        return "its per-head LayerNorms of q/k, BitLinears or activation are computed in f32 only";
    return NULL;
}

int forward_bf16(const cdx_model *m, const fwd_scratch *s, const cdx_stage *st, const cdx_kv_seq *seqs, int n_seq,
                 const cdx_batch *b, float *logits, cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    const int64_t n = b->n, E = hp->n_embd, hd = hp->head_dim, F = hp->n_ff;
    const int64_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    const cdx_kernels *K = s->k;
    cdx_pool *pool = s->pool;
    const char *no = bf16_unsupported(m);
    if (no)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "bf16 forward: %s; use --dtype f32", no);
    /* YaRN's and LongRoPE's attention factor on cos and sin (0: none); Gemma3's sliding layers: none, as forward.c */
    const float att_full = hp->rope_attn_factor;
    /* #8: a bf16 tensor times a Python float (head_dim**-0.5, or the family's own scale), kept in float */
    cdx_attn_shape ashape = { .n_head = (int)hp->n_head, .n_kv_head = (int)hp->n_head_kv, .head_dim = (int)hd,
                              .kv_stride = kvd, .block = seqs[0].block,
                              .scale = hp->attn_scale ? hp->attn_scale : (float)pow((double)hd, -0.5),
                              .softcap = hp->attn_softcap, .kv_type = seqs[0].type };
    if (ashape.kv_type != CDX_TYPE_F32 && ashape.kv_type != CDX_TYPE_BF16)
        return cdx_err_set(err, CDX_EINVAL, "KV cache type %s for a bf16 model; bf16 and f32 are supported",
                           cdx_type_name(ashape.kv_type));
    for (int i = 1; i < n_seq; i++)
        if (seqs[i].block != ashape.block || seqs[i].type != ashape.kv_type)
            return cdx_err_set(err, CDX_EINVAL, "sequences of one batch differ in their KV blocks (%lld and %lld "
                               "positions, types %u and %u)", (long long)ashape.block, (long long)seqs[i].block,
                               ashape.kv_type, seqs[i].type);

    if (hp->rope_pass) /* LongRoPE: each token's factor set by its sequence's length (s->rope_f) */
        model_rope_pass(m, s, seqs, n);
    const int64_t l0 = st->layer0, l1 = st->layer1; /* a split model's stage: its layers (cdx_stage) */
    if (b->x_in) /* a later stage: the stage before computed the embedding and its layers */
        memcpy(s->x, b->x_in, (size_t)(n * E) * sizeof(float));
    else {
        model_embed(&m->tok_embd, b->tokens, NULL, n, E, s->x);
        if (hp->embd_scale) { /* Granite's embedding_multiplier (a float); Gemma's normalizer, a bf16 number */
            const float sc = m->desc->embd_sqrt ? bf(hp->embd_scale) : hp->embd_scale;
            for (int64_t i = 0; i < n * E; i++)
                s->x[i] = bf(s->x[i] * sc);
        }
    }

    for (int64_t l = l0; l < l1; l++) {
        const layer_weights *L = &m->layers[l];
        const float *in = L->attn_norm ? s->xn : s->x; /* OLMo 2: no input norms */
        if (L->attn_norm)
            norm_rows(m, s->xn, s->x, L->attn_norm, L->attn_norm_b, n, E);
        cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->wq, &L->wk, &L->wv }, 3, in, n,
                         (float *[]){ s->q, s->kk, s->vv }, s->ws);
        round_rows(s->q, n, qd, L->bq);
        round_rows(s->kk, n, kvd, L->bk);
        round_rows(s->vv, n, kvd, L->bv);
        const bool rot = !hp->nope_layer || !hp->nope_layer[l];              /* SmolLM3's NoPE layers */
        /* torch's own f32 frequencies where unscaled (rope.c's torch_freqs); Gemma3's sliding layers their own */
        const bool swa = m->inv_freq_swa && cdx_hparams_window(hp, l);
        const float *f = swa ? (m->bf16_freq_swa ? m->bf16_freq_swa : m->inv_freq_swa)
                             : (m->bf16_freq ? m->bf16_freq : m->inv_freq);
        const float att = swa ? 0 : att_full;
        for (int64_t i = 0; i < n; i++) {
            float *q = s->q + i * qd, *k = s->kk + i * kvd, *v = s->vv + i * kvd;
            /* LongRoPE: the short or the long factors by the sequence's length (model_rope_pass), in torch's f32 */
            const float *ft = !hp->rope_pass ? f : s->rope_f[i] == m->inv_freq_long ? m->bf16_freq_long : m->bf16_freq;
            if (L->q_norm && hp->qk_norm_full) { /* OLMo 2: over the whole projection */
                norm_rows(m, q, q, L->q_norm, NULL, 1, qd);
                norm_rows(m, k, k, L->k_norm, NULL, 1, kvd);
            } else if (L->q_norm) {
                norm_rows(m, q, q, L->q_norm, NULL, hp->n_head, hd);
                norm_rows(m, k, k, L->k_norm, NULL, hp->n_head_kv, hd);
            }
            if (hp->clip_qkv) { /* OLMo's clamp_ on the bf16 q, k, v (after any q/k norms): bounds as bf16 values */
                model_clamp(q, qd, bf(hp->clip_qkv));
                model_clamp(k, kvd, bf(hp->clip_qkv));
                model_clamp(v, kvd, bf(hp->clip_qkv));
            }
            const bool sections =
                hp->rope_sections[0] | hp->rope_sections[1] | hp->rope_sections[2] | hp->rope_sections[3];
            if (rot && sections) {
                /* Qwen2-VL: a text token's positions p, p, p, 0, else the batch's (forward.c's rule) */
                const int64_t *ps = b->pos_sections ? b->pos_sections + 4 * i : NULL;
                const int64_t p4[4] = { ps ? ps[0] : s->pos[i], ps ? ps[1] : s->pos[i], ps ? ps[2] : s->pos[i],
                                        ps ? ps[3] : 0 };
                model_rope_bf16_sections(q, hp->n_head, hd, p4, hp->rope_sections, f);
                model_rope_bf16_sections(k, hp->n_head_kv, hd, p4, hp->rope_sections, f);
            } else if (rot && m->desc->bf16_rope_f32) {
                model_rope_bf16_f32(q, hp->n_head, hd, s->pos[i], ft, hp->rope_mode, m->desc->bf16_trig, att);
                model_rope_bf16_f32(k, hp->n_head_kv, hd, s->pos[i], ft, hp->rope_mode, m->desc->bf16_trig, att);
            } else if (rot) {
                model_rope_bf16(q, hp->n_head, hd, hp->n_rot, s->pos[i], ft, att); /* StableLM, Phi-3: partial */
                model_rope_bf16(k, hp->n_head_kv, hd, hp->n_rot, s->pos[i], ft, att);
            }
            model_kv_store(K, &seqs[s->seq[i]], l - l0, s->pos[i], kvd, k, v);
        }
        model_attn_rows(s, seqs, n, s->q, s->attn, qd, l - l0, cdx_hparams_window(hp, l));
        ashape.sinks = L->sinks; /* GPT-OSS */
        int rc = cdx_attn_bf16(pool, &ashape, s->arows, n, err);
        if (rc)
            return rc;
        /* a parallel block (Cohere, StableLM's use_parallel_residual): the MLP reads the attention's input norm,
         * so the attention's output waits in xp; then x = bf16(bf16(x + attn) + mlp), Python's left-to-right adds */
        float *attn_out = hp->parallel_residual ? s->xp : s->xn;
        cdx_matmul(K, pool, &L->wo, s->attn, n, attn_out, s->ws);
        round_rows(attn_out, n, E, L->bo); /* Starcoder2's o_proj bias */
        if (L->attn_post_norm) /* OLMo 2, Gemma 2/3: the branch normed before its residual add */
            norm_rows(m, attn_out, attn_out, L->attn_post_norm, NULL, n, E);
        if (!hp->parallel_residual)
            add_bf16(s->x, attn_out, n * E, hp->residual_scale);
        in = L->ffn_norm || hp->parallel_residual ? s->xn : s->x;
        if (L->ffn_norm)
            norm_rows(m, s->xn, s->x, L->ffn_norm, L->ffn_norm_b, n, E);
        float *ffn_out = s->xn;
        if (L->moe) { /* the sparse block at transformers' bf16 cast points (ops.c's model_moe) */
            if ((rc = model_moe(m, s, l, L, in, n, s->moe, err)))
                return rc;
            ffn_out = s->moe;
        } else if (hp->mlp_plain) { /* Starcoder2: c_proj(gelu_tanh(c_fc(x))), c_fc's bias before the one rounding */
            cdx_matmul(K, pool, &L->up, in, n, s->ffn_g, s->ws);
            round_rows(s->ffn_g, n, F, L->b_up);
            model_geglu_bf16(pool, s->ffn_g, NULL, n * F);
        } else {
            cdx_matmul_multi(K, pool, (const cdx_mat *[]){ &L->gate, &L->up }, 2, in, n,
                             (float *[]){ s->ffn_g, s->ffn_u }, s->ws);
            if (L->b_up)
                round_rows(s->ffn_u, n, F, L->b_up);
            if (hp->act == CDX_HF_ACT_GELU_TANH) /* Gemma's GeGLU */
                model_geglu_bf16(pool, s->ffn_g, s->ffn_u, n * F);
            else
                model_swiglu(pool, K, s->ffn_g, s->ffn_u, n * F, true); /* #13 */
        }
        if (!L->moe) {
            cdx_matmul(K, pool, &L->down, s->ffn_g, n, s->xn, s->ws);
            round_rows(s->xn, n, E, L->b_down);
        }
        if (L->ffn_post_norm)
            norm_rows(m, ffn_out, ffn_out, L->ffn_post_norm, NULL, n, E);
        if (hp->parallel_residual)
            add_bf16(s->x, attn_out, n * E, hp->residual_scale);
        add_bf16(s->x, ffn_out, n * E, hp->residual_scale);
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
            norm_rows(m, s->xn + (n_out++) * E, s->x + i * E, m->out_norm, m->out_norm_b, 1, E);
    if (n_out) {
        const int64_t nl = n_out * hp->n_vocab;
        cdx_matmul(K, pool, &m->output, s->xn, n_out, logits, s->ws);
        round_rows(logits, n_out, hp->n_vocab, NULL);
        for (int64_t i = 0; hp->logit_div && i < nl; i++) /* Granite's logits_scaling: bf16 / a Python float */
            logits[i] = bf(logits[i] / hp->logit_div);
        for (int64_t i = 0; hp->logit_scale && i < nl; i++) /* Cohere's logit_scale: bf16 · a Python float */
            logits[i] = bf(logits[i] * hp->logit_scale);
        if (hp->final_softcap) /* Gemma2's final_logit_softcapping on the bf16 logits */
            softcap_bf16(logits, nl, hp->final_softcap);
    }
    return CDX_OK;
}
