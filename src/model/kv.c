/* A contiguous KV cache of one sequence (cdx_kv) and, for a hybrid model, its recurrent state: for
 * callers that run one sequence without the engine's paged pool. */
#include "arch.h"

#include <stdlib.h>
#include <string.h>

int cdx_kv_init(cdx_kv *kv, const cdx_hparams *hp, int64_t n_ctx, cdx_err *err)
{
    memset(kv, 0, sizeof *kv);
    const int64_t bs = 16;
    size_t per_pos = (size_t)(hp->n_head_kv * hp->head_dim), n;
    const int64_t n_layer = cdx_hparams_kv_layers(hp); /* a hybrid model: its attention layers */
    if (n_ctx <= 0 || n_ctx > ((int64_t)1 << 40))
        return cdx_err_set(err, CDX_ERANGE, "context of %lld positions is out of range", (long long)n_ctx);
    const int64_t nb = (n_ctx + bs - 1) / bs, cap = nb * bs; /* whole blocks */
    if (!cdx_mul_size(per_pos, (size_t)cap, &n) || !cdx_mul_size(n, (size_t)n_layer, &n) ||
        !cdx_mul_size(n, sizeof(float), &n))
        return cdx_err_set(err, CDX_ERANGE, "context of %lld positions is out of range", (long long)n_ctx);
    kv->k = malloc(n);
    kv->v = malloc(n);
    kv->tab = malloc(2 * (size_t)nb * sizeof *kv->tab);
    if (!kv->k || !kv->v || !kv->tab) {
        cdx_kv_free(kv);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for a KV cache of %lld positions (%zu MiB)",
                           (long long)n_ctx, 2 * n >> 20);
    }
    /* [layer][position] contiguous: block i starts i·bs positions into layer 0 */
    for (int64_t i = 0; i < nb; i++) {
        kv->tab[i] = kv->k + (size_t)i * bs * per_pos;
        kv->tab[nb + i] = kv->v + (size_t)i * bs * per_pos;
        /* type CDX_TYPE_F32 (0) */
    }
    kv->seq = (cdx_kv_seq){ .k = kv->tab, .v = kv->tab + nb, .n_blocks = nb, .block = bs,
                            .layer_stride = (size_t)cap * per_pos };
    kv->n_ctx = n_ctx;
    return CDX_OK;
}

void cdx_kv_free(cdx_kv *kv)
{
    free(kv->k);
    free(kv->v);
    free(kv->tab);
    free(kv->state);
    memset(kv, 0, sizeof *kv);
}

int cdx_kv_init_model(cdx_kv *kv, const cdx_model *m, int64_t n_ctx, cdx_err *err)
{
    int rc = cdx_kv_init(kv, &m->hp, n_ctx, err);
    const size_t n = cdx_model_state_bytes(m);
    if (rc || !n)
        return rc;
    if (!(kv->state = malloc(n))) {
        cdx_kv_free(kv);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for a recurrent state of %zu MiB", n >> 20);
    }
    cdx_model_state_reset(m, kv->state);
    kv->seq.state = kv->state;
    return CDX_OK;
}

