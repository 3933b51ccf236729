/* The forward pass of the dense Llama family over a batch of tokens from one or more sequences.
 * Follows transformers' modeling_llama / qwen2 / qwen3 step by step, in f32:
 *   x = embed(tokens)
 *   per layer: h = rmsnorm(x)·w; q,k,v = h·Wqᵀ(+b) ...; [qwen3: per-head rmsnorm of q,k];
 *              rope(q,k); attn = softmax(q·kᵀ/√d)·v over the sequence's cache; x += attn·Woᵀ
 *              h = rmsnorm(x)·w; x += (silu(h·Wgᵀ) ⊙ h·Wuᵀ)·Wdᵀ
 *              [sparse layers (modeling_qwen3_moe / mixtral / qwen2_moe): p = softmax(h·Wrᵀ) in f32,
 *               the top k of p (renormalised when norm_topk_prob), x += Σ_e p_e·expert_e(h) summed in
 *               expert order as transformers' index_add_ loop does, Qwen2-MoE adding
 *               sigmoid(h·w_sg)·shared(h)]
 *   logits = rmsnorm(x)·w · Woutᵀ
 * In a batch, a sparse layer groups the tokens by expert, so each expert's weights are read once
 * per forward over the gathered rows; a row's result does not depend on which rows are beside it. */
#include "lora.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cdx_forward_ctx {
    const cdx_model *m;
    int64_t max_tokens;
    fwd_scratch s;         /* what the passes compute in (ops.h) */
    hybrid_ctx *hy;        /* a hybrid model's (Qwen3.5) own buffers, qwen35.c; NULL otherwise */
    bool pool_borrowed;    /* s.pool is the caller's (cdx_forward_ctx_create_on) */
    cdx_stage st;          /* the layers it computes (a split model's stage); whole: 0..n_layer, no send */
    /* a split model's first stage: what cutting a batch into micro-batches needs ([max_tokens] each) */
    int64_t *mb_last;      /* per sequence: its last token in the batch */
    int32_t *mb_local;     /* per sequence: its index in the micro-batch, or -1 */
    int32_t *mb_seq;       /* per token of a micro-batch: its sequence there */
    cdx_kv_seq *mb_seqs;   /* a micro-batch's sequences */
    int64_t *hd_pos;       /* the head pass over the rows that came back: their positions, */
    int32_t *hd_seq;       /* sequences */
    bool *hd_want;         /* and all true */
    int n_flight;          /* batches begun (cdx_forward_begin) and not yet ended */
    void *pass_buf;        /* forward_ctx_scratch's buffer, */
    size_t pass_bytes;     /* its size */
};

void cdx_forward_ctx_free(cdx_forward_ctx *fc)
{
    if (!fc)
        return;
    free(fc->s.x); free(fc->s.xn); free(fc->s.xp); free(fc->s.q); free(fc->s.kk); free(fc->s.vv); free(fc->s.attn);
    free(fc->s.ffn_g); free(fc->s.ffn_u); free(fc->s.pos); free(fc->s.seq); free(fc->s.ws);
    free(fc->s.arows);
    free(fc->s.rope_f); free(fc->s.rope_buf);
    free(fc->s.router); free(fc->s.xg); free(fc->s.yg); free(fc->s.moe); free(fc->s.sel_w); free(fc->s.grp_w);
    free(fc->s.sel_e); free(fc->s.grp_tok);
    free(fc->s.xq); free(fc->s.xqs);
    free(fc->mb_last); free(fc->mb_local); free(fc->mb_seq); free(fc->mb_seqs); free(fc->hd_pos); free(fc->hd_seq);
    free(fc->hd_want);
    free(fc->pass_buf);
    hybrid_ctx_free(fc->hy);
    if (!fc->pool_borrowed)
        cdx_pool_destroy(fc->s.pool);
    free(fc);
}

cdx_pool *cdx_forward_ctx_pool(cdx_forward_ctx *fc) { return fc->s.pool; }

int cdx_forward_ctx_set_per_token(cdx_forward_ctx *fc, bool per_token)
{
    if (!fc->hy)
        return CDX_EINVAL;
    hybrid_set_per_token(fc->hy, per_token);
    return CDX_OK;
}
const cdx_kernels *cdx_forward_ctx_kernels(const cdx_forward_ctx *fc) { return fc->s.k; }
const cdx_model *forward_ctx_model(const cdx_forward_ctx *fc) { return fc->m; }

void *forward_ctx_scratch(cdx_forward_ctx *fc, size_t bytes)
{
    if (bytes <= fc->pass_bytes)
        return fc->pass_buf;
    free(fc->pass_buf);
    fc->pass_bytes = 0;
    fc->pass_buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (fc->pass_buf)
        fc->pass_bytes = bytes;
    return fc->pass_buf;
}

int cdx_forward_ctx_create(const cdx_model *m, int64_t max_tokens, int n_threads, const cdx_kernels *k,
                           cdx_forward_ctx **out, cdx_err *err)
{
    return cdx_forward_ctx_create_on(m, max_tokens, n_threads, NULL, k, out, err);
}

int cdx_forward_ctx_create_on(const cdx_model *m, int64_t max_tokens, int n_threads, cdx_pool *pool,
                              const cdx_kernels *k, cdx_forward_ctx **out, cdx_err *err)
{
    *out = NULL;
    const cdx_hparams *hp = &m->hp;
    if (max_tokens <= 0 || max_tokens > (1 << 20))
        return cdx_err_set(err, CDX_EINVAL, "batch size %lld is out of range (1..1048576)", (long long)max_tokens);
    cdx_forward_ctx *fc = calloc(1, sizeof *fc);
    if (!fc)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    fc->m = m;
    fc->st = (cdx_stage){ .layer0 = 0, .layer1 = hp->n_layer };
    fc->s.k = k ? k : cdx_kernels_best();
    fc->max_tokens = max_tokens;
    fc->pool_borrowed = pool != NULL;
    fc->s.pool = pool;
    int rc = pool ? CDX_OK : cdx_pool_create(n_threads, &fc->s.pool, err);
    if (rc) {
        free(fc);
        return rc;
    }
    if ((rc = model_pack(m, fc->s.k, fc->s.pool, err)) ||
        (hp->linear_layer && (rc = hybrid_ctx_create(m, max_tokens, cdx_pool_size(fc->s.pool), fc->s.k, &fc->hy, err)))) {
        cdx_forward_ctx_free(fc);
        return rc;
    }
    size_t n = (size_t)max_tokens, q = (size_t)(hp->n_head * hp->head_dim), kvd = (size_t)(hp->n_head_kv * hp->head_dim);
    fc->s.x = malloc(n * (size_t)hp->n_embd * sizeof(float));
    fc->s.xn = malloc(n * (size_t)hp->n_embd * sizeof(float));
    fc->s.xp = hp->parallel_residual ? malloc(n * (size_t)hp->n_embd * sizeof(float)) : NULL;
    fc->s.q = malloc(n * q * sizeof(float));
    fc->s.kk = malloc(n * kvd * sizeof(float));
    fc->s.vv = malloc(n * kvd * sizeof(float));
    fc->s.attn = malloc(n * q * sizeof(float));
    int64_t ff = hp->n_ff;
    ff = hp->n_ff_expert > ff ? hp->n_ff_expert : ff;
    ff = hp->n_ff_shared > ff ? hp->n_ff_shared : ff;
    fc->s.ffn_g = malloc(n * (size_t)ff * sizeof(float));
    fc->s.ffn_u = malloc(n * (size_t)ff * sizeof(float));
    bool moe_ok = true;
    if (hp->n_expert > 0) {
        const size_t nk = n * (size_t)hp->n_expert_used, ne = (size_t)hp->n_expert;
        fc->s.router = malloc(n * ne * sizeof(float));
        fc->s.xg = malloc(n * (size_t)hp->n_embd * sizeof(float));
        fc->s.yg = malloc(n * (size_t)hp->n_embd * sizeof(float));
        fc->s.moe = malloc(n * (size_t)hp->n_embd * sizeof(float));
        fc->s.sel_w = malloc(nk * sizeof(float));
        fc->s.grp_w = malloc(nk * sizeof(float));
        fc->s.sel_e = malloc(nk * sizeof(int32_t));
        fc->s.grp_tok = malloc(nk * sizeof(int64_t));
        moe_ok = fc->s.router && fc->s.xg && fc->s.yg && fc->s.moe && fc->s.sel_w && fc->s.grp_w && fc->s.sel_e && fc->s.grp_tok;
    }
    fc->s.pos = malloc(n * sizeof(int64_t));
    fc->s.seq = malloc(n * sizeof(int32_t));
    fc->s.arows = malloc(n * sizeof *fc->s.arows);
    bool rope_ok = true;
    if (hp->rope_pass) { /* per-pass RoPE frequencies (dynamic NTK, LongRoPE) */
        fc->s.rope_f = malloc(n * sizeof *fc->s.rope_f);
        fc->s.rope_buf = malloc(n * (size_t)(hp->n_rot / 2 > 0 ? hp->n_rot / 2 : 1) * sizeof(float));
        rope_ok = fc->s.rope_f && fc->s.rope_buf;
    }
    size_t ws = 0;
    for (size_t i = 0; i < m->n_mats; i++) {
        size_t b = cdx_matmul_ws_bytes(m->mats[i], max_tokens, cdx_pool_size(fc->s.pool));
        ws = b > ws ? b : ws;
    }
    fc->s.ws = malloc(ws ? ws : 1);
    bool bit_ok = true;
    if (hp->bitlinear) { /* BitLinear's int8 activations: the widest input is n_embd (= heads·head_dim) or n_ff */
        fc->s.xq = malloc(n * (size_t)(hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd));
        fc->s.xqs = malloc(n * sizeof(float));
        bit_ok = fc->s.xq && fc->s.xqs;
    }
    if (!bit_ok || !moe_ok || !rope_ok || !fc->s.x || !fc->s.xn || (hp->parallel_residual && !fc->s.xp) || !fc->s.q || !fc->s.kk || !fc->s.vv || !fc->s.attn || !fc->s.ffn_g || !fc->s.ffn_u || !fc->s.pos ||
        !fc->s.seq || !fc->s.ws || !fc->s.arows) {
        cdx_forward_ctx_free(fc);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for a batch of %lld tokens", (long long)max_tokens);
    }
    *out = fc;
    return CDX_OK;
}

int cdx_forward_ctx_set_stage(cdx_forward_ctx *fc, const cdx_stage *st, cdx_err *err)
{
    const cdx_hparams *hp = &fc->m->hp;
    if (!st) {
        fc->st = (cdx_stage){ .layer0 = 0, .layer1 = hp->n_layer };
        return CDX_OK;
    }
    if (st->layer0 < 0 || st->layer0 >= st->layer1 || st->layer1 > hp->n_layer)
        return cdx_err_set(err, CDX_EINVAL, "layers %lld..%lld are not a slice of the model's %lld layers (0..%lld)",
                           (long long)st->layer0, (long long)st->layer1 - 1, (long long)hp->n_layer,
                           (long long)hp->n_layer - 1);
    if (st->layer1 < hp->n_layer && (!st->send || (st->layer0 == 0 && !st->recv)))
        return cdx_err_set(err, CDX_EINVAL, "a stage ending before the last layer (%lld of %lld) needs a next stage "
                           "(send%s)", (long long)st->layer1, (long long)hp->n_layer, st->layer0 == 0 ? " and recv" : "");
    if (fc->m->enc)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s is an encoder: it is not split by layers", hp->arch_name);
    if (fc->hy)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s carries a recurrent state (Gated DeltaNet layers): splitting it by "
                           "layers is not done yet", hp->arch_name);
    if (st->layer0 == 0 && st->layer1 < hp->n_layer && !fc->mb_last) {
        const size_t n = (size_t)fc->max_tokens;
        fc->mb_last = malloc(n * sizeof *fc->mb_last);
        fc->mb_local = malloc(n * sizeof *fc->mb_local);
        fc->mb_seq = malloc(n * sizeof *fc->mb_seq);
        fc->mb_seqs = malloc(n * sizeof *fc->mb_seqs);
        fc->hd_pos = malloc(n * sizeof *fc->hd_pos);
        fc->hd_seq = malloc(n * sizeof *fc->hd_seq);
        fc->hd_want = malloc(n * sizeof *fc->hd_want);
        if (!fc->mb_last || !fc->mb_local || !fc->mb_seq || !fc->mb_seqs || !fc->hd_pos || !fc->hd_seq || !fc->hd_want)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for a first stage's micro-batches");
        for (size_t i = 0; i < n; i++)
            fc->hd_want[i] = true;
    }
    fc->st = *st;
    return CDX_OK;
}

/* ---- the dense pass ---- */

/* q, k, v of each token after the projections: biases, the per-head q/k norms, rope, and the store
 * into the token's own KV slot (distinct positions: no two tokens write the same bytes). */
typedef struct {
    const cdx_forward_ctx *fc;
    const layer_weights *L;
    const cdx_kv_seq *seqs;
    int64_t l, slot, n;     /* the layer, and its slot in the KV blocks (l - the stage's first layer) */
    const int64_t *pos_sections; /* cdx_batch.pos_sections ([n][4]) or NULL (text: pos, pos, pos, 0) */
} qkv_job;

static void qkv_part(void *arg, int ith, int nth)
{
    const qkv_job *j = arg;
    const cdx_forward_ctx *fc = j->fc;
    const layer_weights *L = j->L;
    const cdx_model *m = fc->m;
    const cdx_hparams *hp = &m->hp;
    const int64_t hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    for (int64_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++) {
        float *q = fc->s.q + i * qd, *k = fc->s.kk + i * kvd, *v = fc->s.vv + i * kvd;
        if (L->bq) {
            for (int64_t d = 0; d < qd; d++) q[d] += L->bq[d];
            for (int64_t d = 0; d < kvd; d++) k[d] += L->bk[d];
            for (int64_t d = 0; d < kvd; d++) v[d] += L->bv[d];
        }
        if (L->q_norm && hp->qk_norm_full) { /* OLMo 2 / OLMoE: over the whole projection */
            model_rmsnorm(q, q, L->q_norm, qd, hp->rms_eps);
            model_rmsnorm(k, k, L->k_norm, kvd, hp->rms_eps);
        } else if (L->q_norm) {
            for (int64_t h = 0; h < hp->n_head; h++)
                model_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, hp->rms_eps);
            for (int64_t h = 0; h < hp->n_head_kv; h++)
                model_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, hp->rms_eps);
        }
        if (hp->clip_qkv) { /* OLMoE's clip_qkv, after the norms */
            model_clamp(q, qd, hp->clip_qkv);
            model_clamp(k, kvd, hp->clip_qkv);
            model_clamp(v, kvd, hp->clip_qkv);
        }
        if (!hp->nope_layer || !hp->nope_layer[j->l]) { /* SmolLM3's NoPE layers rotate nothing */
            /* Gemma3: the sliding layers rotate with their own base */
            const bool swa = m->inv_freq_swa && cdx_hparams_window(hp, j->l);
            const float *f = swa ? m->inv_freq_swa : fc->s.rope_f ? fc->s.rope_f[i] : m->inv_freq;
            const float att = swa ? 0 : hp->rope_attn_factor; /* YaRN's / LongRoPE's attention factor */
            if (hp->rope_sections[0] | hp->rope_sections[1] | hp->rope_sections[2] | hp->rope_sections[3]) {
                /* Qwen2-VL's multimodal RoPE: a text token's three positions are its position, the extra 0
                   (transformers' get_rope_index, llama.cpp's llm_graph_input_pos) */
                const int64_t *ps = j->pos_sections ? j->pos_sections + 4 * i : NULL;
                const int64_t p4[4] = { ps ? ps[0] : fc->s.pos[i], ps ? ps[1] : fc->s.pos[i],
                                        ps ? ps[2] : fc->s.pos[i], ps ? ps[3] : 0 };
                model_rope_sections(q, hp->n_head, hd, hp->n_rot, p4, hp->rope_sections, f, hp->rope_mode, att);
                model_rope_sections(k, hp->n_head_kv, hd, hp->n_rot, p4, hp->rope_sections, f, hp->rope_mode, att);
            } else {
                model_rope_att(q, hp->n_head, hd, hp->n_rot, fc->s.pos[i], f, hp->rope_mode, att);
                model_rope_att(k, hp->n_head_kv, hd, hp->n_rot, fc->s.pos[i], f, hp->rope_mode, att);
            }
        }
        model_kv_store(fc->s.k, &j->seqs[fc->s.seq[i]], j->slot, fc->s.pos[i], kvd, k, v);
    }
}

/* The layer's linears which[0..nw) (BIT_*: wq ... down) over the n rows of in (cols values) into outs: BitNet's
 * BitLinears where the layer has them (the input quantized once), else the matrices w (one matmul pass over
 * several with the same input); then a GGUF bitnet file's per-tensor scales (llama.cpp's build_lora_mm w_s). */
static void layer_linears(const cdx_forward_ctx *fc, const layer_weights *L, const int *which, const cdx_mat *const *w,
                          int nw, const float *in, int64_t n, int64_t cols, float *const *outs)
{
    if (L->bit[which[0]].t) {
        model_act_quant(in, n, cols, fc->s.xq, fc->s.xqs);
        for (int i = 0; i < nw; i++)
            model_bitlinear(fc->s.pool, &L->bit[which[i]], fc->s.xq, fc->s.xqs, n, outs[i]);
    } else if (nw == 1)
        cdx_matmul(fc->s.k, fc->s.pool, w[0], in, n, outs[0], fc->s.ws);
    else
        cdx_matmul_multi(fc->s.k, fc->s.pool, w, nw, in, n, outs, fc->s.ws);
    for (int i = 0; i < nw; i++) {
        const float s = L->lin_scale[which[i]];
        const int64_t rows = L->bit[which[i]].t ? L->bit[which[i]].rows : w[i]->rows;
        for (int64_t v = 0; s && v < n * rows; v++)
            outs[i][v] *= s;
    }
}

/* One pass over the layers of st: from the tokens (layer0 0) or b->x_in, to the next stage (layer1 <
 * n_layer), to b->x_out, or through the output norm and head into logits. A pass over no layers
 * (layer0 = layer1 = n_layer, rows in x_in) is the head alone. */
static int forward_seqs_run(cdx_forward_ctx *fc, const cdx_stage *st, const cdx_kv_seq *seqs, int n_seq,
                            const cdx_batch *b, float *logits, cdx_err *err)
{
    const cdx_model *m = fc->m;
    const cdx_hparams *hp = &m->hp;
    int64_t n = b->n, E = hp->n_embd, hd = hp->head_dim;
    int64_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    if (n <= 0 || n > fc->max_tokens)
        return cdx_err_set(err, CDX_EINVAL, "batch of %lld tokens; this context takes 1..%lld", (long long)n,
                           (long long)fc->max_tokens);
    if (!b->pos)
        return cdx_err_set(err, CDX_EINVAL, "batch without positions");
    if (b->pos_sections && !(hp->rope_sections[0] | hp->rope_sections[1] | hp->rope_sections[2] | hp->rope_sections[3]))
        return cdx_err_set(err, CDX_EINVAL, "batch with per-section positions; the %s architecture's RoPE takes one "
                           "position per token", hp->arch_name ? hp->arch_name : "model's");
    if (!cdx_type_get(m->tok_embd.type)->to_f32)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "token embedding type %s cannot be read", cdx_type_name(m->tok_embd.type));
    if (n_seq <= 0)
        return cdx_err_set(err, CDX_EINVAL, "%d sequences in one batch", n_seq);
    /* positions, checked before anything changes */
    for (int64_t i = 0; i < n; i++) {
        int32_t s = b->seq ? b->seq[i] : 0;
        if (s < 0 || s >= n_seq)
            return cdx_err_set(err, CDX_EINVAL, "batch token %lld names sequence %d of %d", (long long)i, s, n_seq);
        int32_t tok = b->x_in ? 0 : b->tokens[i];
        if (tok < 0 || tok >= hp->n_vocab)
            return cdx_err_set(err, CDX_EINVAL, "token id %d is outside the vocabulary (0..%lld)", tok,
                               (long long)hp->n_vocab - 1);
        const cdx_kv_seq *c = &seqs[s];
        if (b->pos[i] < 0 || c->block <= 0 || b->pos[i] >= c->n_blocks * c->block)
            return cdx_err_set(err, CDX_ERANGE, "the context is full: position %lld does not fit in %lld positions",
                               (long long)b->pos[i], (long long)(c->n_blocks * c->block));
        fc->s.seq[i] = s;
        fc->s.pos[i] = b->pos[i];
    }
    if (b->hidden && (m->dtype == CDX_DTYPE_BF16 || fc->hy))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "hidden states (embeddings) come from the f32 pass of a dense model; "
                           "this one computes in %s%s", m->dtype == CDX_DTYPE_BF16 ? "bf16" : "f32",
                           fc->hy ? " with Gated DeltaNet layers" : "");
    const int64_t l0 = st->layer0, l1 = st->layer1;
    if ((l0 > 0) != (b->x_in != NULL))
        return cdx_err_set(err, CDX_EINVAL, "a pass from layer %lld takes %s", (long long)l0,
                           l0 > 0 ? "the hidden rows of the stage before (x_in)" : "tokens, not hidden rows");
    if (b->hidden && l1 < hp->n_layer)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "hidden states (embeddings) of a model split by layers");
    int lrc = model_lora_check(m, b, err);
    if (lrc)
        return lrc;
    if (b->lora && (m->dtype == CDX_DTYPE_BF16 || fc->hy))
        return cdx_err_set(err, CDX_EUNSUPPORTED, "LoRA adapters run on the f32 dense pass only");
    if (m->dtype == CDX_DTYPE_BF16) /* forward_bf16.c: transformers' bf16 forward */
        return forward_bf16(m, &fc->s, st, seqs, n_seq, b, logits, err);
    const cdx_kernels *K = fc->s.k;
    cdx_pool *pool = fc->s.pool;
    if (b->x_in) /* a later stage: the stage before computed the embedding and its layers */
        memcpy(fc->s.x, b->x_in, (size_t)(n * E) * sizeof(float));
    else {
        model_embed(&m->tok_embd, b->tokens, b->embd, n, E, fc->s.x);
        if (hp->embd_scale) /* Granite's embedding_multiplier, Gemma's sqrt(hidden) */
            for (int64_t i = 0; i < n * E; i++)
                fc->s.x[i] *= hp->embd_scale;
    }
    cdx_attn_shape ashape = { .n_head = (int)hp->n_head, .n_kv_head = (int)hp->n_head_kv, .head_dim = (int)hd,
                              .kv_stride = kvd, .block = seqs[0].block, .scale = hp->attn_scale ? hp->attn_scale : 1.0f / sqrtf((float)hd),
                              .softcap = hp->attn_softcap, .kv_type = seqs[0].type };
    if (ashape.kv_type != CDX_TYPE_F32 && ashape.kv_type != CDX_TYPE_F16)
        return cdx_err_set(err, CDX_EINVAL, "KV cache type %u; f32 and f16 are supported", ashape.kv_type);
    for (int s = 1; s < n_seq; s++)
        if (seqs[s].block != ashape.block || seqs[s].type != ashape.kv_type)
            return cdx_err_set(err, CDX_EINVAL, "sequences of one batch differ in their KV blocks (%lld and %lld "
                               "positions, types %u and %u)", (long long)ashape.block, (long long)seqs[s].block,
                               ashape.kv_type, seqs[s].type);
    if (fc->hy)
        return hybrid_forward(fc->hy, m, &fc->s, seqs, n_seq, b, logits, err);
    if (hp->rope_pass) /* each sequence's frequencies for this pass; LongRoPE's re-rotation */
        model_rope_pass(m, &fc->s, seqs, n);

    for (int64_t l = l0; l < l1; l++) {
        const layer_weights *L = &m->layers[l];
        /* a branch reads the normed stream, or the stream itself where the family has no pre-norms */
        const float *in = L->attn_norm ? fc->s.xn : fc->s.x;
        if (L->attn_norm)
            model_norm_rows_of(pool, hp->layer_norm, fc->s.xn, fc->s.x, L->attn_norm, L->attn_norm_b, n, E, hp->rms_eps);
        layer_linears(fc, L, (const int[]){ BIT_Q, BIT_K, BIT_V }, (const cdx_mat *[]){ &L->wq, &L->wk, &L->wv }, 3, in,
                      n, E, (float *[]){ fc->s.q, fc->s.kk, fc->s.vv });
        model_lora_add(pool, b, l, LORA_Q, in, n, E, fc->s.q, qd);
        model_lora_add(pool, b, l, LORA_K, in, n, E, fc->s.kk, kvd);
        model_lora_add(pool, b, l, LORA_V, in, n, E, fc->s.vv, kvd);
        qkv_job qj = { fc, L, seqs, l, l - l0, n, b->pos_sections };
        if (n >= 4)
            cdx_pool_run(pool, qkv_part, &qj);
        else
            qkv_part(&qj, 0, 1);
        model_attn_rows(&fc->s, seqs, n, fc->s.q, fc->s.attn, qd, l - l0, cdx_hparams_window(hp, l));
        ashape.sinks = L->sinks; /* GPT-OSS */
        int rc = cdx_attn(K, pool, &ashape, fc->s.arows, n, err);
        if (rc)
            return rc;
        /* a parallel block (Cohere, StableLM): the MLP reads the attention's input norm, so the attention's
         * output waits in xp and x += attn, then x += mlp (transformers' residual + attn + mlp) */
        float *attn_out = hp->parallel_residual ? fc->s.xp : fc->s.xn;
        if (L->attn_sub_norm) /* BitNet: the heads' output normed before o_proj */
            model_norm_rows(pool, fc->s.attn, fc->s.attn, L->attn_sub_norm, n, qd, hp->rms_eps);
        layer_linears(fc, L, (const int[]){ BIT_O }, (const cdx_mat *[]){ &L->wo }, 1, fc->s.attn, n, qd,
                      (float *[]){ attn_out });
        model_lora_add(pool, b, l, LORA_O, fc->s.attn, n, qd, attn_out, E);
        model_add_bias(attn_out, L->bo, n, E); /* Starcoder2's o_proj bias */
        if (L->attn_post_norm) /* OLMo 2: x += rms(attn(x))·w */
            model_norm_rows(pool, fc->s.xn, fc->s.xn, L->attn_post_norm, n, E, hp->rms_eps);
        if (!hp->parallel_residual)
            model_residual(fc->s.x, fc->s.xn, n * E, hp->residual_scale);
        if (L->ffn_norm)
            model_norm_rows_of(pool, hp->layer_norm, fc->s.xn, fc->s.x, L->ffn_norm, L->ffn_norm_b, n, E, hp->rms_eps);
        in = L->ffn_norm || hp->parallel_residual ? fc->s.xn : fc->s.x;
        float *out = fc->s.xn;
        if (L->moe) {
            if ((rc = model_moe(m, &fc->s, l, L, in, n, fc->s.moe, err)))
                return rc;
            out = fc->s.moe;
        } else if (hp->mlp_plain) { /* Starcoder2: c_proj(act(c_fc(x))), with their biases */
            cdx_matmul(K, pool, &L->up, in, n, fc->s.ffn_g, fc->s.ws);
            model_lora_add(pool, b, l, LORA_UP, in, n, E, fc->s.ffn_g, hp->n_ff);
            model_add_bias(fc->s.ffn_g, L->b_up, n, hp->n_ff);
            model_act(pool, hp->act, m->gelu_f16, fc->s.ffn_g, n * hp->n_ff);
            cdx_matmul(K, pool, &L->down, fc->s.ffn_g, n, fc->s.xn, fc->s.ws);
            model_lora_add(pool, b, l, LORA_DOWN, fc->s.ffn_g, n, hp->n_ff, fc->s.xn, E);
            model_add_bias(fc->s.xn, L->b_down, n, E);
        } else {
            layer_linears(fc, L, (const int[]){ BIT_GATE, BIT_UP }, (const cdx_mat *[]){ &L->gate, &L->up }, 2, in, n,
                          E, (float *[]){ fc->s.ffn_g, fc->s.ffn_u });
            model_lora_add(pool, b, l, LORA_GATE, in, n, E, fc->s.ffn_g, hp->n_ff);
            model_lora_add(pool, b, l, LORA_UP, in, n, E, fc->s.ffn_u, hp->n_ff);
            model_add_bias(fc->s.ffn_u, L->b_up, n, hp->n_ff);
            model_glu(pool, K, hp->act, m->gelu_f16, fc->s.ffn_g, fc->s.ffn_u, n * hp->n_ff);
            if (L->ffn_sub_norm) /* BitNet: act(gate)·up normed before down_proj */
                model_norm_rows(pool, fc->s.ffn_g, fc->s.ffn_g, L->ffn_sub_norm, n, hp->n_ff, hp->rms_eps);
            layer_linears(fc, L, (const int[]){ BIT_DOWN }, (const cdx_mat *[]){ &L->down }, 1, fc->s.ffn_g, n, hp->n_ff,
                          (float *[]){ fc->s.xn });
            model_lora_add(pool, b, l, LORA_DOWN, fc->s.ffn_g, n, hp->n_ff, fc->s.xn, E);
            model_add_bias(fc->s.xn, L->b_down, n, E);
        }
        if (L->ffn_post_norm)
            model_norm_rows(pool, out, out, L->ffn_post_norm, n, E, hp->rms_eps);
        if (hp->parallel_residual)
            model_residual(fc->s.x, attn_out, n * E, hp->residual_scale);
        model_residual(fc->s.x, out, n * E, hp->residual_scale);
    }

    if (l1 < hp->n_layer) /* the later stages compute the rest */
        return forward_stage_send(st, &fc->s, seqs, n_seq, b, err);
    int64_t n_out = 0;
    if (b->x_out) { /* a split model's last stage: the wanted rows go back to the first, which has the head */
        for (int64_t i = 0; i < n; i++)
            if (b->want_logits ? b->want_logits[i] : i == n - 1)
                memcpy(b->x_out + (n_out++) * E, fc->s.x + i * E, (size_t)E * sizeof(float));
        return CDX_OK;
    }
    for (int64_t i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] : i == n - 1)
            model_norm_rows_of(NULL, hp->layer_norm, (b->hidden ? b->hidden : fc->s.xn) + (n_out++) * E, fc->s.x + i * E,
                               m->out_norm, m->out_norm_b, 1, E, hp->rms_eps);
    if (b->hidden) /* the embeddings' last hidden states: no head */
        return CDX_OK;
    if (n_out)
        cdx_matmul(K, pool, &m->output, fc->s.xn, n_out, logits, fc->s.ws);
    for (int64_t i = 0; hp->logit_div && i < n_out * hp->n_vocab; i++) /* Granite's logits_scaling */
        logits[i] /= hp->logit_div;
    for (int64_t i = 0; hp->logit_scale && i < n_out * hp->n_vocab; i++) /* Cohere's logit_scale */
        logits[i] *= hp->logit_scale;
    model_softcap(logits, n_out * hp->n_vocab, hp->final_softcap); /* Gemma2's final_logit_softcapping */
    return CDX_OK;
}

/* ---- a split model's first stage: micro-batches in flight ---- */

/* A micro-batch has at least MICRO_MIN_ROWS tokens: below that a matrix multiply costs about the
 * reading of its weights whatever its rows, so cutting a batch of decoded tokens (one row a sequence)
 * reads each stage's weights once per micro-batch for little overlap. Measured on Llama-3.2-1B Q4_0,
 * 8 streams over 2 ranks: 0.56x whole in 2 micro-batches of 4 rows, 0.83x in one (bench/README.md). */
enum { MAX_MICRO = 64, MICRO_MIN_ROWS = 16 };

/* Where to cut b into at most m_max micro-batches of about n/m_max tokens, at least MICRO_MIN_ROWS:
 * cut[0] = 0 < cut[1] < ... < cut[m] = n, each cut between two tokens with every sequence's tokens on
 * one side of it, at the first such place past each k·n/m_max. Returns m (1: the batch whole: one
 * sequence, too few tokens, no want_logits, or no place to cut). */
static int micro_cuts(cdx_forward_ctx *fc, int n_seq, const cdx_batch *b, int m_max, int64_t *cut)
{
    const int64_t n = b->n;
    int m = 0;
    cut[0] = 0;
    if (m_max > n / MICRO_MIN_ROWS)
        m_max = (int)(n / MICRO_MIN_ROWS);
    bool ok = m_max > 1 && n_seq > 1 && n_seq <= fc->max_tokens && b->seq && b->want_logits && n <= fc->max_tokens;
    for (int64_t i = 0; ok && i < n; i++)
        ok = b->seq[i] >= 0 && b->seq[i] < n_seq; /* else one pass, which says what is wrong */
    if (ok) {
        for (int s = 0; s < n_seq; s++)
            fc->mb_last[s] = -1;
        for (int64_t i = 0; i < n; i++)
            fc->mb_last[b->seq[i]] = i;
        int64_t reach = 0; /* the last token of every sequence met so far */
        for (int64_t i = 0; i + 1 < n && m + 1 < m_max; i++) {
            if (fc->mb_last[b->seq[i]] > reach)
                reach = fc->mb_last[b->seq[i]];
            if (reach == i && (i + 1) * m_max >= n * (m + 1))
                cut[++m] = i + 1;
        }
    }
    cut[++m] = n;
    return m;
}

/* The answer to the oldest batch (or micro-batch: tokens a..c-1 of b) the first stage sent: its n_out
 * wanted rows after the last layer, taken back with recv and, when head, through the output norm and
 * head into logits (a pass over no layers), as a whole model's pass ends. */
static int first_stage_take(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b, int64_t a,
                            int64_t c, int64_t n_out, bool head, float *logits, cdx_err *err)
{
    const cdx_hparams *hp = &fc->m->hp;
    const cdx_stage *st = &fc->st;
    int r = st->recv(st->user, n_out, fc->s.xn, err);
    if (r || !head || n_out <= 0)
        return r;
    int64_t j = 0;
    for (int64_t i = a; i < c; i++)
        if (b->want_logits ? b->want_logits[i] : i == b->n - 1) {
            fc->hd_pos[j] = b->pos[i];
            fc->hd_seq[j++] = b->seq ? b->seq[i] : 0;
        }
    const cdx_stage hs = { .layer0 = hp->n_layer, .layer1 = hp->n_layer };
    const cdx_batch hb = { .n = n_out, .seq = fc->hd_seq, .pos = fc->hd_pos, .want_logits = fc->hd_want,
                           .x_in = fc->s.xn };
    return forward_seqs_run(fc, &hs, seqs, n_seq, &hb, logits, err);
}

/* The first stage of a split model: its layers over each micro-batch in turn, each sent on as it is
 * done (the next stage computes one while this one computes the next); then each micro-batch's
 * wanted rows taken back in order, through the head as they come (a pass over no layers). A failure
 * still takes back every answer sent for, so the next batch's answers are its own. */
static int forward_first_stage(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b,
                               float *logits, cdx_err *err)
{
    const cdx_hparams *hp = &fc->m->hp;
    const cdx_stage *st = &fc->st;
    int64_t cut[MAX_MICRO + 1], n_out[MAX_MICRO];
    const int m = micro_cuts(fc, n_seq, b, st->n_micro < MAX_MICRO ? st->n_micro : MAX_MICRO, cut);
    int sent = 0, rc = CDX_OK;
    for (int k = 0; k < m && !rc; k++) {
        const int64_t a = cut[k], c = cut[k + 1];
        n_out[k] = 0;
        for (int64_t i = a; i < c; i++)
            n_out[k] += b->want_logits ? b->want_logits[i] : i == b->n - 1;
        if (m == 1) {
            rc = forward_seqs_run(fc, st, seqs, n_seq, b, NULL, err);
        } else { /* tokens a..c-1, their sequences renumbered from 0 */
            cdx_batch mb = *b;
            mb.n = c - a;
            mb.tokens = b->tokens ? b->tokens + a : NULL;
            mb.pos = b->pos ? b->pos + a : NULL;
            mb.want_logits = b->want_logits + a;
            mb.embd = b->embd ? b->embd + a : NULL;
            mb.lora = b->lora ? b->lora + a : NULL;
            mb.seq = fc->mb_seq;
            int mb_n_seq = 0;
            for (int64_t i = a; i < c; i++)
                fc->mb_local[b->seq[i]] = -1;
            for (int64_t i = a; i < c; i++) {
                int32_t *l = &fc->mb_local[b->seq[i]];
                if (*l < 0) {
                    *l = mb_n_seq;
                    fc->mb_seqs[mb_n_seq++] = seqs[b->seq[i]];
                }
                fc->mb_seq[i - a] = *l;
            }
            rc = forward_seqs_run(fc, st, fc->mb_seqs, mb_n_seq, &mb, NULL, err);
        }
        sent += !rc;
    }
    int64_t row = 0; /* logits rows written */
    for (int k = 0; k < sent; k++) {
        cdx_err drained = { 0 };
        cdx_err *ek = rc ? &drained : err; /* after a failure the answers are only taken off the line */
        const int r = first_stage_take(fc, seqs, n_seq, b, cut[k], cut[k + 1], n_out[k], !rc,
                                       logits + row * hp->n_vocab, ek);
        row += n_out[k];
        if (!rc)
            rc = r;
    }
    return rc;
}

int cdx_forward_seqs(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b, float *logits,
                     cdx_err *err)
{
    if (fc->m->enc)
        return cdx_err_set(err, CDX_EINVAL, "%s is an encoder (embeddings): it has no decoder pass and no KV cache; "
                           "cdx_encode runs it", fc->m->hp.arch_name);
    const bool first = fc->st.layer0 == 0 && fc->st.layer1 < fc->m->hp.n_layer;
    if (first && fc->n_flight > 0) /* their answers come first: they must be taken back before */
        return cdx_err_set(err, CDX_EINVAL, "%d batches begun (cdx_forward_begin) are not ended yet", fc->n_flight);
    model_use_begin(fc->m); /* installs background packs between passes (model_load.c) */
    const int rc = first ? forward_first_stage(fc, seqs, n_seq, b, logits, err)
                         : forward_seqs_run(fc, &fc->st, seqs, n_seq, b, logits, err);
    model_use_end(fc->m);
    return rc;
}

/* ---- a split model's first stage: batches in flight across calls ---- */

static int first_stage_check(const cdx_forward_ctx *fc, const char *what, cdx_err *err)
{
    if (fc->m->enc || fc->st.layer0 != 0 || fc->st.layer1 >= fc->m->hp.n_layer || !fc->st.recv)
        return cdx_err_set(err, CDX_EINVAL, "%s: only the first stage of a split model (layers 0..k of more, with a "
                           "next stage) runs a batch in two halves", what);
    return CDX_OK;
}

int cdx_forward_begin(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b, cdx_err *err)
{
    int rc = first_stage_check(fc, "cdx_forward_begin", err);
    if (rc)
        return rc;
    if (fc->n_flight >= CDX_FORWARD_MAX_FLIGHT)
        return cdx_err_set(err, CDX_EINVAL, "%d batches are in flight already; end one first (cdx_forward_end)",
                           fc->n_flight);
    model_use_begin(fc->m);
    rc = forward_seqs_run(fc, &fc->st, seqs, n_seq, b, NULL, err); /* its last act is the send: nothing sent on failure */
    model_use_end(fc->m);
    fc->n_flight += !rc;
    return rc;
}

int cdx_forward_end(cdx_forward_ctx *fc, const cdx_kv_seq *seqs, int n_seq, const cdx_batch *b, float *logits,
                    cdx_err *err)
{
    int rc = first_stage_check(fc, "cdx_forward_end", err);
    if (rc)
        return rc;
    if (fc->n_flight <= 0)
        return cdx_err_set(err, CDX_EINVAL, "cdx_forward_end with no batch in flight");
    fc->n_flight--; /* its answer is taken off the line whatever follows */
    int64_t n_out = 0;
    for (int64_t i = 0; i < b->n; i++)
        n_out += b->want_logits ? b->want_logits[i] : i == b->n - 1;
    model_use_begin(fc->m);
    rc = first_stage_take(fc, seqs, n_seq, b, 0, b->n, n_out, logits != NULL, logits, err);
    model_use_end(fc->m);
    return rc;
}

int cdx_forward_in_flight(const cdx_forward_ctx *fc) { return fc->n_flight; }

int cdx_forward(cdx_forward_ctx *fc, cdx_kv *const *kv, int n_seq, const cdx_batch *b, float *logits, cdx_err *err)
{
    enum { MAX_SEQ = 64 };
    if (n_seq <= 0 || n_seq > MAX_SEQ)
        return cdx_err_set(err, CDX_EINVAL, "%d sequences in one batch; 1..%d are supported", n_seq, MAX_SEQ);
    if (b->n <= 0 || b->n > fc->max_tokens)
        return cdx_err_set(err, CDX_EINVAL, "batch of %lld tokens; this context takes 1..%lld", (long long)b->n,
                           (long long)fc->max_tokens);
    cdx_kv_seq seqs[MAX_SEQ];
    int64_t added[MAX_SEQ] = { 0 };
    int64_t *pos = malloc((size_t)b->n * sizeof *pos);
    if (!pos)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int s = 0; s < n_seq; s++)
        seqs[s] = kv[s]->seq;
    int rc = CDX_OK;
    for (int64_t i = 0; i < b->n; i++) {
        int32_t s = b->seq ? b->seq[i] : 0;
        if (s < 0 || s >= n_seq) {
            rc = cdx_err_set(err, CDX_EINVAL, "batch token %lld names sequence %d of %d", (long long)i, s, n_seq);
            break;
        }
        pos[i] = kv[s]->n_past + added[s]++;
        if (pos[i] >= kv[s]->n_ctx) {
            rc = cdx_err_set(err, CDX_ERANGE, "the context is full: position %lld does not fit in --ctx %lld",
                             (long long)pos[i], (long long)kv[s]->n_ctx);
            break;
        }
    }
    if (!rc) { /* positions were checked against n_ctx (the table may round it up to whole blocks) */
        cdx_batch bb = *b;
        bb.pos = pos;
        rc = cdx_forward_seqs(fc, seqs, n_seq, &bb, logits, err);
    }
    free(pos);
    if (rc)
        return rc;
    for (int s = 0; s < n_seq; s++)
        kv[s]->n_past += added[s];
    return CDX_OK;
}

int cdx_model_cls_logits(const cdx_model *m, const float *h, int64_t n, float *out, cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    if (!m->cls_out || hp->n_cls_out < 1)
        return cdx_err_set(err, CDX_EINVAL, "the model has no classifier head (cls.output.weight)");
    const int64_t E = hp->n_embd, K = hp->n_cls_out;
    for (int64_t k = 0; k < K; k++) {
        const float *row = m->cls_out + k * E;
        for (int64_t i = 0; i < n; i++) {
            double s = 0;
            for (int64_t c = 0; c < E; c++)
                s += (double)(row[c] * h[i * E + c]);
            out[i * K + k] = m->cls_out_b ? (float)s + m->cls_out_b[k] : (float)s;
        }
    }
    return CDX_OK;
}

int cdx_model_head_logits(const cdx_model *m, const float *h, int64_t n, const int32_t *ids, int n_ids, float *out,
                          cdx_err *err)
{
    const cdx_hparams *hp = &m->hp;
    const cdx_mat *w = &m->output;
    const cdx_type_traits *t = w->data ? cdx_type_get(w->type) : NULL;
    if (m->enc || !t || !t->to_f32)
        return cdx_err_set(err, CDX_EINVAL, "the model has no output head of a readable type");
    const int64_t E = hp->n_embd;
    float *row = malloc((size_t)E * sizeof *row);
    if (!row)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    for (int k = 0; k < n_ids; k++) {
        if (ids[k] < 0 || ids[k] >= hp->n_vocab) {
            free(row);
            return cdx_err_set(err, CDX_EINVAL, "id %d is outside the vocabulary (0..%lld)", ids[k],
                               (long long)hp->n_vocab - 1);
        }
        t->to_f32((const uint8_t *)w->data + (size_t)ids[k] * w->row_bytes, row, E);
        for (int64_t i = 0; i < n; i++) {
            double s = 0;
            for (int64_t c = 0; c < E; c++)
                s += (double)(row[c] * h[i * E + c]);
            float v = (float)s;
            if (hp->logit_div)
                v /= hp->logit_div;
            model_softcap(&v, 1, hp->final_softcap);
            out[i * n_ids + k] = v;
        }
    }
    free(row);
    return CDX_OK;
}
