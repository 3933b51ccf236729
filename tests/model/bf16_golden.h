/* The teacher-forced comparison with PyTorch's bf16 goldens that test_hf_golden_bf16.c (the shared
 * fixtures' golden_bf16.json) and test_families_bf16.c (tests/golden/bf16-<family>.json) share, as
 * ../shared/fixtures/hf/INDEX.md's "How an engine compares" says: the golden's tokens are fed back,
 * so every one of the 16 steps of a case is scored; at every step the argmax is the golden token (at
 * a step marked near_tie: any id tied with the golden's top logit) and each of the golden's top ids
 * has a logit within the tolerance; a step whose top logits all equal the golden's bit for bit
 * counts as exact. The f32-cache run keeps every step's logits, and the bf16-cache run (bf16 values
 * either way) must give the same bits. Include after test.h and jansson.h. */
#ifndef CDX_TEST_BF16_GOLDEN_H
#define CDX_TEST_BF16_GOLDEN_H

enum { BF16G_MAX_VOCAB = 320, BF16G_STEPS = 16, BF16G_CASES = 3 };

/* A cache of 256 positions in blocks of 16, elements of type kv. */
typedef struct {
    void *k, *v;
    void *tab[64];
    cdx_kv_seq seq;
} test_kv;

static bool kv_make(test_kv *c, const cdx_hparams *hp, uint32_t kv)
{
    const int64_t bs = 16, nb = 256 / bs, per_pos = hp->n_head_kv * hp->head_dim;
    const size_t el = kv == CDX_TYPE_BF16 ? 2 : 4, n = (size_t)(nb * bs * per_pos * hp->n_layer) * el;
    c->k = calloc(1, n);
    c->v = calloc(1, n);
    if (!c->k || !c->v)
        return false;
    for (int64_t i = 0; i < nb; i++) {
        c->tab[i] = (uint8_t *)c->k + (size_t)(i * bs * per_pos) * el;
        c->tab[nb + i] = (uint8_t *)c->v + (size_t)(i * bs * per_pos) * el;
    }
    c->seq = (cdx_kv_seq){ .k = c->tab, .v = c->tab + nb, .n_blocks = nb, .block = bs,
                           .layer_stride = (size_t)(nb * bs * per_pos), .type = kv };
    return true;
}

static void kv_free(test_kv *c)
{
    free(c->k);
    free(c->v);
}

/* One model's run over a golden's cases. In: name (messages), isa, kv, tol, ref (the f32-cache run's
 * logits per case and step: written when kv is F32, compared when BF16). Out: exact steps, steps
 * scored, the largest |logit - golden|. */
typedef struct {
    const char *name, *isa;
    const cdx_model *m;        /* LongRoPE: the sequence's length set (rope_len) and the cache recomputed where
                                  cdx_model_rope_restart says (the goldens recompute every step); NULL: neither */
    uint32_t kv;
    double tol;
    float (*ref)[BF16G_STEPS][BF16G_MAX_VOCAB];
    int exact, steps;
    double worst;
} bf16g_run;

static void bf16g_decode(cdx_forward_ctx *fc, const cdx_hparams *hp, json_t *gold, bf16g_run *r)
{
    cdx_err e = { 0 };
    float logits[BF16G_MAX_VOCAB];
    size_t ci;
    json_t *c;
    REQUIRE(hp->n_vocab <= BF16G_MAX_VOCAB);
    json_array_foreach(json_object_get(gold, "cases"), ci, c) {
        const char *cname = json_string_value(json_object_get(c, "name"));
        json_t *prompt = json_object_get(c, "prompt_ids"), *steps = json_object_get(c, "steps");
        const size_t np = json_array_size(prompt);
        REQUIRE(ci < BF16G_CASES && np + BF16G_STEPS <= 96 && json_array_size(steps) == BF16G_STEPS);
        test_kv kv = { 0 };
        REQUIRE(kv_make(&kv, hp, r->kv));
        int32_t ids[96];
        int64_t pos[96];
        for (size_t i = 0; i < np; i++) {
            ids[i] = (int32_t)json_integer_value(json_array_get(prompt, i));
            pos[i] = (int64_t)i;
        }
        cdx_batch b = { .n = (int64_t)np, .tokens = ids, .pos = pos };
        kv.seq.rope_len = r->m ? (int64_t)np : 0;
        CHECKF(cdx_forward_seqs(fc, &kv.seq, 1, &b, logits, &e) == 0, "%s", e.msg);
        for (size_t s = 0; s < BF16G_STEPS; s++) {
            json_t *st = json_array_get(steps, s), *top = json_object_get(st, "top");
            const int32_t want = (int32_t)json_integer_value(json_object_get(st, "token"));
            const bool tie = json_is_true(json_object_get(st, "near_tie"));
            const int32_t got = cdx_argmax(logits, hp->n_vocab);
            const double top_val = json_number_value(json_array_get(json_array_get(top, 0), 1));
            bool tied_pick = false, all_exact = true;
            for (size_t k = 0; k < json_array_size(top); k++) {
                json_t *pair = json_array_get(top, k);
                const int64_t id = json_integer_value(json_array_get(pair, 0));
                const double g = json_number_value(json_array_get(pair, 1)), d = fabs((double)logits[id] - g);
                r->worst = d > r->worst ? d : r->worst;
                all_exact &= (double)logits[id] == g;
                tied_pick |= id == got && g == top_val;
                CHECKF(d <= r->tol, "%s [%s] case %s step %zu: logit of %lld is %.6g, golden %.6g (tolerance %g)",
                       r->name, r->isa, cname, s, (long long)id, (double)logits[id], g, r->tol);
            }
            CHECKF(got == want || (tie && tied_pick), "%s [%s] case %s step %zu: token %d, golden %d%s", r->name,
                   r->isa, cname, s, got, want, tie ? " (a marked near-tie, but not one of the tied ids)" : "");
            r->exact += all_exact;
            r->steps++;
            if (r->kv == CDX_TYPE_F32)
                memcpy(r->ref[ci][s], logits, sizeof(float) * (size_t)hp->n_vocab);
            else
                CHECKF(!memcmp(r->ref[ci][s], logits, sizeof(float) * (size_t)hp->n_vocab),
                       "%s [%s] case %s step %zu: a bf16 cache changed the logits' bits", r->name, r->isa, cname, s);
            if (s + 1 < BF16G_STEPS) {
                int64_t p = (int64_t)(np + s);
                cdx_batch nb = { .n = 1, .tokens = &want, .pos = &p };
                ids[p] = want;
                pos[p] = p;
                if (r->m)
                    kv.seq.rope_len = p + 1;
                if (r->m && cdx_model_rope_restart(r->m, p, p + 1)) /* LongRoPE past its original length */
                    nb = (cdx_batch){ .n = p + 1, .tokens = ids, .pos = pos };
                CHECKF(cdx_forward_seqs(fc, &kv.seq, 1, &nb, logits, &e) == 0, "%s", e.msg);
            }
        }
        kv_free(&kv);
    }
}

#endif
