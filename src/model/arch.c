/* The table of families: one row per family, each in its own file (src/model/arch/<family>.c), listed
 * once by CDX_FAMILIES (caldrix/model.h). Loading, convert, inspect, synth, --help and docs read it. */
#include "arch.h"

#include <stdio.h>
#include <string.h>

#define X(name, file) extern const arch_desc family_##file;
CDX_FAMILIES(X)
#undef X

static const arch_desc *const k_archs[CDX_ARCH_COUNT] = {
#define X(name, file) [CDX_ARCH_##name] = &family_##file,
    CDX_FAMILIES(X)
#undef X
};

const arch_desc *arch_get(cdx_arch a) { return (unsigned)a < CDX_ARCH_COUNT ? k_archs[a] : NULL; }

/* The family and its entry that read config.json architecture a. */
static const arch_desc *hf_row(cdx_hf_arch a, const arch_hf **entry)
{
    for (int i = 0; i < CDX_ARCH_COUNT; i++)
        for (const arch_hf *h = k_archs[i]->hf; h < k_archs[i]->hf + 4 && h->note; h++)
            if (h->hf == a) {
                if (entry)
                    *entry = h;
                return k_archs[i];
            }
    return NULL;
}

const cdx_hf_arch_row *cdx_hf_arch_row_get(cdx_hf_arch a)
{
    const arch_hf *h = NULL;
    return (unsigned)a < CDX_HF_ARCH_COUNT && hf_row(a, &h) ? &h->cfg : NULL;
}

/* The architectures refused by name (issue 36: a family not finished is refused with its reason). */
static const cdx_refused_arch k_refused[] = {
    { "BitnetForCausalLM", NULL, "bitnet",
      "1bitLLM's remote-code BitNet b1.58 (trust_remote_code, not transformers' class) is not run: its float master "
      "weights are ternarised at every forward (utils_quant.py's weight_quant, 1/mean|W|) under other sub-norm names "
      "(self_attn.inner_attn_ln, mlp.ffn_layernorm); transformers' BitNetForCausalLM (packed weights) and GGUF "
      "\"bitnet\" files of it are" },
    { "Gemma3ForConditionalGeneration", NULL, "gemma3",
      "vision-language Gemma 3 (the vision tower, the text model under language_model) is not run; its text "
      "model alone, Gemma3ForCausalLM, is" },
};

const cdx_refused_arch *cdx_refused_archs(size_t *n)
{
    *n = sizeof k_refused / sizeof k_refused[0];
    return k_refused;
}

const cdx_refused_arch *cdx_refused_arch_find(const char *name, size_t len, bool gguf)
{
    for (size_t i = 0; name && i < sizeof k_refused / sizeof k_refused[0]; i++) {
        const char *k = gguf ? k_refused[i].gguf : k_refused[i].hf;
        if (k && strlen(k) == len && !memcmp(k, name, len))
            return &k_refused[i];
    }
    return NULL;
}

const arch_desc *arch_by_hf(cdx_hf_arch a) { return (unsigned)a < CDX_HF_ARCH_COUNT ? hf_row(a, NULL) : NULL; }

const char *cdx_model_hf_arch_note(cdx_hf_arch a)
{
    const arch_hf *h = NULL;
    return (unsigned)a < CDX_HF_ARCH_COUNT && hf_row(a, &h) ? h->note : NULL;
}

void arch_hf_name(const arch_desc *d, const char *fmt, int layer, int expert, char *out, size_t cap)
{
    char tmp[256];
    if (d && d->hf_text_prefix && !strncmp(fmt, "model.", 6))
        snprintf(tmp, sizeof tmp, "%s%s", d->hf_text_prefix, fmt + 6);
    else
        snprintf(tmp, sizeof tmp, "%s", fmt);
    snprintf(out, cap, tmp, layer, expert);
}

static bool name_is(const char *a, const char *name, size_t len)
{
    return a && strlen(a) == len && !memcmp(a, name, len);
}

const arch_desc *arch_by_gguf(const char *name, size_t len, bool experts)
{
    const arch_desc *d = NULL;
    for (int i = 0; i < CDX_ARCH_COUNT && !d; i++)
        if (name_is(k_archs[i]->gguf_name, name, len))
            d = k_archs[i];
    for (int i = 0; i < CDX_ARCH_COUNT && experts && d && !d->moe; i++)
        if (name_is(k_archs[i]->gguf_experts_of, name, len))
            return k_archs[i];
    return d;
}

void cdx_model_gguf_archs(char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < CDX_ARCH_COUNT; i++) {
        const arch_desc *d = k_archs[i];
        if (d->gguf_name && n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", d->gguf_name);
        if (d->gguf_experts_of && n < cap) /* no name of its own */
            n += (size_t)snprintf(out + n, cap - n, "%s%s with experts (%s)", n ? ", " : "", d->gguf_experts_of,
                                  d->hf[0].title);
    }
}

/* "A, B and C": the titles of the config.json architectures of the families `pick` accepts. */
void arch_titles(bool (*pick)(const arch_desc *d), char *out, size_t cap)
{
    const char *t[64];
    int n = 0;
    for (int a = 0; a < CDX_HF_ARCH_COUNT && n < 64; a++) {
        const arch_hf *h = NULL;
        const arch_desc *d = hf_row((cdx_hf_arch)a, &h);
        bool dup = false;
        for (int j = 0; d && j < n; j++)
            dup |= !strcmp(t[j], h->title);
        if (d && pick(d) && !dup)
            t[n++] = h->title;
    }
    size_t k = 0;
    out[0] = 0;
    for (int j = 0; j < n && k < cap; j++)
        k += (size_t)snprintf(out + k, cap - k, "%s%s", j == 0 ? "" : j + 1 == n ? " and " : ", ", t[j]);
}

bool cdx_model_arch_of(const char *name, bool gguf, bool experts, cdx_arch *out)
{
    const arch_desc *d = NULL;
    if (!name)
        return false;
    if (gguf)
        d = arch_by_gguf(name, strlen(name), experts);
    else
        for (int a = 0; a < CDX_HF_ARCH_COUNT && !d; a++)
            if (!strcmp(cdx_hf_arch_name((cdx_hf_arch)a), name))
                d = arch_by_hf((cdx_hf_arch)a);
    if (d && out)
        *out = d->arch;
    return d != NULL;
}

const char *cdx_model_images_refused(const cdx_model *m) { return m && m->desc ? m->desc->vl_text_only : NULL; }

const char *cdx_model_arch_images_refused(cdx_arch a)
{
    return (unsigned)a < CDX_ARCH_COUNT ? k_archs[a]->vl_text_only : NULL;
}

const char *cdx_model_arch_family(cdx_arch a) { return (unsigned)a < CDX_ARCH_COUNT ? k_archs[a]->family : NULL; }
