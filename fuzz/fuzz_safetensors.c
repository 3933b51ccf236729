/* libFuzzer target: the safetensors reader (one file, from memory) on arbitrary bytes.
 * Build: make fuzz; run: build-fuzz/fuzz_safetensors -max_total_time=60 fuzz/corpus/safetensors (fuzz/README.md) */
#include "caldrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cdx_err err = {0};
    cdx_safetensors *st = NULL;
    if (cdx_st_open_mem(data, size, "fuzz.safetensors", &st, &err) == 0) {
        volatile unsigned sink = 0;
        for (uint64_t i = 0; i < st->n_tensors; i++) {
            const cdx_st_tensor *t = &st->tensors[i];
            if (t->n_bytes)
                sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->n_bytes - 1];
            if (cdx_st_find(st, t->name) != t)
                __builtin_trap();
        }
        (void)sink;
        cdx_st_close(st);
    } else if (st != NULL || err.msg[0] == 0) {
        __builtin_trap();
    }
    return 0;
}
