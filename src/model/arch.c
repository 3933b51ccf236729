/* The architecture table: one row per family. Loading, --help and docs read it. */
#include "arch.h"

#include <stdio.h>
#include <string.h>

static const arch_desc k_archs[CDX_ARCH_COUNT] = {
    /*                                  GGUF name   GGUF RoPE          qkv_b  qk_n   moe    shared topk_norm family */
    [CDX_ARCH_LLAMA]     = { CDX_ARCH_LLAMA,     "llama",    CDX_ROPE_ADJACENT, false, false, false, false, false, "llama" },
    [CDX_ARCH_QWEN2]     = { CDX_ARCH_QWEN2,     "qwen2",    CDX_ROPE_HALVES,   true,  false, false, false, false, "qwen2" },
    [CDX_ARCH_QWEN3]     = { CDX_ARCH_QWEN3,     "qwen3",    CDX_ROPE_HALVES,   false, true,  false, false, false, "qwen3" },
    [CDX_ARCH_QWEN3_MOE] = { CDX_ARCH_QWEN3_MOE, "qwen3moe", CDX_ROPE_HALVES,   false, true,  true,  false, true , "qwen3_moe" },
    [CDX_ARCH_QWEN2_MOE] = { CDX_ARCH_QWEN2_MOE, "qwen2moe", CDX_ROPE_HALVES,   true,  false, true,  true,  false, "qwen2_moe" },
    /* GGUF files of Mixtral say "llama" and carry llama.expert_count (load_gguf switches to this row) */
    [CDX_ARCH_MIXTRAL]   = { CDX_ARCH_MIXTRAL,   NULL,       CDX_ROPE_ADJACENT, false, false, true,  false, true , "mixtral" },
    /* a Llama text model under model.text_model.*, plus the vision tower and connector (vision.c) */
    [CDX_ARCH_IDEFICS3]  = { CDX_ARCH_IDEFICS3,  NULL,       CDX_ROPE_HALVES,   false, false, false, false, false, "idefics3",
                             .hf_text_prefix = "model.text_model.", .vision = true },
    /* Gated DeltaNet layers beside gated attention (qwen35.c) */
    [CDX_ARCH_QWEN3_5]   = { CDX_ARCH_QWEN3_5,   "qwen35",   CDX_ROPE_HALVES,   false, true,  false, false, false, "qwen3_5",
                             .hybrid = true },
};

/* config.json architectures (the config reader's cdx_hf_arch) → families, and what the import says of
 * each beyond its family (Mistral checkpoints are Llama-shaped; GGUF files of them say "llama"). */
static const struct { cdx_arch arch; const char *note; } k_from_hf[CDX_HF_ARCH_COUNT] = {
    [CDX_HF_LLAMA]      = { CDX_ARCH_LLAMA,     "" },
    [CDX_HF_MISTRAL]    = { CDX_ARCH_LLAMA,     "accepted, not verified on hardware" },
    [CDX_HF_QWEN2]      = { CDX_ARCH_QWEN2,     "" },
    [CDX_HF_QWEN3]      = { CDX_ARCH_QWEN3,     "" },
    [CDX_HF_QWEN3_MOE]  = { CDX_ARCH_QWEN3_MOE, "mixture of experts" },
    [CDX_HF_MIXTRAL]    = { CDX_ARCH_MIXTRAL,   "mixture of experts" },
    [CDX_HF_QWEN2_MOE]  = { CDX_ARCH_QWEN2_MOE, "mixture of experts with a shared expert" },
    [CDX_HF_IDEFICS3]   = { CDX_ARCH_IDEFICS3,  "vision-language; CPU lane only" },
    [CDX_HF_QWEN3_5]    = { CDX_ARCH_QWEN3_5,   "CPU lane only" },
    [CDX_HF_QWEN3_5_VL] = { CDX_ARCH_QWEN3_5,   "text only (the vision tower is skipped); CPU lane only" },
};

const char *cdx_model_hf_arch_note(cdx_hf_arch a) { return (unsigned)a < CDX_HF_ARCH_COUNT ? k_from_hf[a].note : NULL; }

void arch_hf_name(const arch_desc *d, const char *fmt, int layer, int expert, char *out, size_t cap)
{
    char tmp[256];
    if (d && d->hf_text_prefix && !strncmp(fmt, "model.", 6))
        snprintf(tmp, sizeof tmp, "%s%s", d->hf_text_prefix, fmt + 6);
    else
        snprintf(tmp, sizeof tmp, "%s", fmt);
    snprintf(out, cap, tmp, layer, expert);
}

const arch_desc *arch_get(cdx_arch a) { return (unsigned)a < CDX_ARCH_COUNT ? &k_archs[a] : NULL; }

const arch_desc *arch_by_gguf(const char *name, size_t len)
{
    for (int i = 0; i < CDX_ARCH_COUNT; i++)
        if (k_archs[i].gguf_name && strlen(k_archs[i].gguf_name) == len && !memcmp(k_archs[i].gguf_name, name, len))
            return &k_archs[i];
    return NULL;
}

void cdx_model_gguf_archs(char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < CDX_ARCH_COUNT; i++) {
        const char *g = k_archs[i].gguf_name;
        if (g && n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", g);
        if (k_archs[i].arch == CDX_ARCH_MIXTRAL && n < cap) /* no name of its own */
            n += (size_t)snprintf(out + n, cap - n, "%sllama with experts (Mixtral)", n ? ", " : "");
    }
}

const arch_desc *arch_by_hf(cdx_hf_arch a)
{
    return (unsigned)a < CDX_HF_ARCH_COUNT ? &k_archs[k_from_hf[a].arch] : NULL;
}

bool cdx_model_arch_of(const char *name, bool gguf, bool experts, cdx_arch *out)
{
    const arch_desc *d = NULL;
    if (!name)
        return false;
    if (gguf) {
        d = arch_by_gguf(name, strlen(name));
        if (d && d->arch == CDX_ARCH_LLAMA && experts)
            d = arch_get(CDX_ARCH_MIXTRAL);
    } else {
        for (int a = 0; a < CDX_HF_ARCH_COUNT && !d; a++)
            if (!strcmp(cdx_hf_arch_name((cdx_hf_arch)a), name))
                d = arch_by_hf((cdx_hf_arch)a);
    }
    if (d && out)
        *out = d->arch;
    return d != NULL;
}

const char *cdx_model_arch_family(cdx_arch a) { return (unsigned)a < CDX_ARCH_COUNT ? k_archs[a].family : NULL; }
