/* llama.cpp's own quantizer (llama_model_quantize of the shipped libllama), for the goldens:
 *   llama-quantize IN.gguf OUT.gguf FTYPE_ID     (FTYPE_ID: llama_ftype, e.g. 3 for Q4_1)
 * Built and run by scripts/goldens/llamacpp-quant-qwen3.mjs. Exit status 0 when the file was written. */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s IN.gguf OUT.gguf FTYPE_ID\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = (enum llama_ftype)atoi(argv[3]);
    p.nthread = 2;
    uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
    llama_backend_free();
    return rc ? 1 : 0;
}
