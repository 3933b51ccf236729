/* The architecture table: one row per family. Loading, --help and docs read it. */
#include "arch.h"

#include <string.h>

static const arch_desc k_archs[CDX_ARCH_COUNT] = {
    [CDX_ARCH_LLAMA]     = { CDX_ARCH_LLAMA,     "llama",    "LlamaForCausalLM",    CDX_ROPE_ADJACENT, false, false, false },
    [CDX_ARCH_QWEN2]     = { CDX_ARCH_QWEN2,     "qwen2",    "Qwen2ForCausalLM",    CDX_ROPE_HALVES,   true,  false, false },
    [CDX_ARCH_QWEN3]     = { CDX_ARCH_QWEN3,     "qwen3",    "Qwen3ForCausalLM",    CDX_ROPE_HALVES,   false, true,  false },
    [CDX_ARCH_QWEN3_MOE] = { CDX_ARCH_QWEN3_MOE, "qwen3moe", "Qwen3MoeForCausalLM", CDX_ROPE_HALVES,   false, true,  true  },
    [CDX_ARCH_QWEN2_MOE] = { CDX_ARCH_QWEN2_MOE, "qwen2moe", "Qwen2MoeForCausalLM", CDX_ROPE_HALVES,   true,  false, true  },
    [CDX_ARCH_MIXTRAL]   = { CDX_ARCH_MIXTRAL,   NULL,       "MixtralForCausalLM",  CDX_ROPE_ADJACENT, false, false, true  },
};

/* Mistral checkpoints are Llama-shaped; GGUF files of them say "llama". */
static const struct { const char *hf; cdx_arch arch; } k_hf_aliases[] = {
    { "MistralForCausalLM", CDX_ARCH_LLAMA },
};

const arch_desc *arch_get(cdx_arch a) { return (unsigned)a < CDX_ARCH_COUNT ? &k_archs[a] : NULL; }

const arch_desc *arch_by_gguf(const char *name, size_t len)
{
    for (int i = 0; i < CDX_ARCH_COUNT; i++)
        if (k_archs[i].gguf_name && strlen(k_archs[i].gguf_name) == len && !memcmp(k_archs[i].gguf_name, name, len))
            return &k_archs[i];
    return NULL;
}

const arch_desc *arch_by_hf(const char *name)
{
    for (int i = 0; i < CDX_ARCH_COUNT; i++)
        if (!strcmp(k_archs[i].hf_name, name))
            return &k_archs[i];
    for (size_t i = 0; i < sizeof k_hf_aliases / sizeof k_hf_aliases[0]; i++)
        if (!strcmp(k_hf_aliases[i].hf, name))
            return &k_archs[k_hf_aliases[i].arch];
    return NULL;
}
