/* libFuzzer target: the GGUF reader on arbitrary bytes, then the tokenizer from its tokenizer.* keys
 * (as a model load does) on a short text. Must not crash, leak or print.
 * Build: make fuzz; run: build-fuzz/fuzz_gguf -max_total_time=60 fuzz/corpus/gguf (fuzz/README.md) */
#include "caldrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cdx_err err = {0};
    cdx_gguf *g = NULL;
    if (cdx_gguf_open_mem(data, size, "fuzz.gguf", &g, &err) == 0) {
        /* Touch what a loader would: every value accessor and every tensor's bytes. */
        volatile double sink = 0;
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const cdx_gguf_value *v = &g->kv[i].val;
            if (v->type == CDX_GGUF_ARRAY && v->arr_type != CDX_GGUF_STRING && v->arr_type != CDX_GGUF_ARRAY && v->n)
                for (uint64_t k = 0; k < 2; k++) { /* the first and the last element */
                    uint64_t at = k ? v->n - 1 : 0;
                    int64_t x;
                    sink += cdx_gguf_arr_f64(v, at) + (cdx_gguf_arr_i64(v, at, &x) ? (double)x : 0);
                }
            uint64_t u;
            double f;
            (void)cdx_gguf_get_u64(g, g->kv[i].key, &u);
            (void)cdx_gguf_get_f64(g, g->kv[i].key, &f);
        }
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const cdx_gguf_tensor *t = &g->tensors[i];
            if (t->n_bytes)
                sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->n_bytes - 1];
            if (cdx_gguf_tensor_find(g, t->name) == NULL)
                __builtin_trap();
        }
        (void)sink;
        cdx_tok *t = NULL;
        if (cdx_tok_open_gguf(g, &t, &err) == 0) {
            static const char text[] = "Hello world\n\n  <s>\xc3\xa9 12345";
            int32_t ids[64];
            size_t need = 0, len = 0;
            char out[512];
            if (cdx_tok_encode(t, text, sizeof text - 1, true, true, ids, 64, &need, &err) == 0)
                cdx_tok_decode(t, ids, need < 64 ? need : 64, false, out, sizeof out, &len, &err);
            cdx_tok_close(t);
        } else if (t != NULL || err.msg[0] == 0) {
            __builtin_trap();
        }
        cdx_gguf_close(g);
    } else if (g != NULL || err.msg[0] == 0) {
        __builtin_trap(); /* a failure must leave *out NULL and say why */
    }
    return 0;
}
