/* caldrix model layer: Hugging Face checkpoint -> GGUF, laid out as llama.cpp's convert_hf_to_gguf.py
 * lays it out (tensor names, the Llama q/k row permutation, rope_freqs for Llama-3 scaling, the
 * metadata keys and their types, which tensors stay F32).
 *
 *   cdx_gguf_writer *w;  cdx_gguf_writer_new(&w, &err);
 *   cdx_convert *c;      cdx_convert_hf("ckpt/", &(cdx_convert_opts){ .type = CDX_TYPE_F16 }, w, &c, &err);
 *   ... cdx_tok_export_gguf(...) adds the tokenizer.* keys after the model's ...
 *   cdx_gguf_writer_write(w, "out.gguf", &err);
 *   cdx_convert_free(c);  cdx_gguf_writer_free(w);
 */
#ifndef CALDRIX_CONVERT_H
#define CALDRIX_CONVERT_H

#include "caldrix/base.h"
#include "caldrix/config.h"
#include "caldrix/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cdx_convert_opts {
    uint32_t type;       /* CDX_TYPE_F32, F16, BF16 or Q8_0: the type of the weight matrices
                            (norms and vectors stay F32; Q8_0 falls back to F16 for rows that are not
                            a multiple of 32, as llama.cpp's converter does) */
    const char *name;    /* general.name; NULL: the checkpoint directory's base name */
    /* a Qwen3 reranker (Qwen3-Reranker), written as llama.cpp's converter writes one (conversion/qwen.py
     * Qwen3Model with is_rerank): <arch>.pooling_type 4 (rank), <arch>.classifier.output_labels
     * ["yes", "no"], the rerank chat template (tokenizer.chat_template.rerank), and cls.output.weight made
     * of the head's rows of yes_id and no_id (lm_head's, or embed_tokens' when tied; an untied lm_head
     * itself is not written). yes_id/no_id: the vocabulary ids of "yes" and "no". */
    bool rerank;
    int32_t yes_id, no_id;
} cdx_convert_opts;

typedef struct cdx_convert cdx_convert;

/* Reads dir/config.json (+ generation_config.json) and its safetensors, and adds to w, in
 * llama.cpp's order: general.architecture, general.type, general.* (name, size label, sampling
 * defaults), the {arch}.* hyperparameters, general.file_type, general.quantization_version, then
 * every tensor (rope_freqs first, then the checkpoint's, shard by shard, by name). The tokenizer.*
 * keys are left to the caller (cdx_tok_export_gguf / cdx_tok_export_gguf_dummy), to be added next.
 * *out owns the converted tensor data, which w borrows: free it after cdx_gguf_writer_write.
 * The architectures cdx_convert_archs lists; anything else is refused by name. */
CDX_API int cdx_convert_hf(const char *dir, const cdx_convert_opts *opts, cdx_gguf_writer *w, cdx_convert **out,
                           cdx_err *err);
CDX_API void cdx_convert_free(cdx_convert *c); /* NULL: no-op */
/* The checkpoint's config (borrowed from c). */
CDX_API const cdx_hf_config *cdx_convert_config(const cdx_convert *c);
/* Things the conversion could not carry over (e.g. a sliding window GGUF "llama" has no key for),
 * newline-separated; "" when none. */
CDX_API const char *cdx_convert_notes(const cdx_convert *c);
/* "Llama, Mistral, ... and Qwen3.5": the config.json architectures cdx_convert_hf converts, from the
 * model layer's family rows (for --help and messages). */
CDX_API void cdx_convert_archs(char *out, size_t cap);
/* Totals: tensors written and their bytes in the output. */
CDX_API void cdx_convert_totals(const cdx_convert *c, size_t *n_tensors, size_t *n_bytes);

#ifdef __cplusplus
}
#endif
#endif
