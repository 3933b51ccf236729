/* The per-architecture GGUF hyperparameter keys (CDX_GGUF_ARCH_KEYS in caldrix/format.h): names, and
 * the getters and setters by key. */
#include "caldrix/format.h"

#include <stdio.h>

static const char *const k_suffix[CDX_GK_COUNT] = {
#define X(name, suffix) [CDX_GK_##name] = suffix,
    CDX_GGUF_ARCH_KEYS(X)
#undef X
};

const char *cdx_gguf_key_suffix(cdx_gguf_key k) { return (unsigned)k < CDX_GK_COUNT ? k_suffix[k] : NULL; }

const char *cdx_gguf_key_name(cdx_gguf_key k, const char *arch, char *out, size_t cap)
{
    if (cap == 0)
        return out;
    if ((unsigned)k >= CDX_GK_COUNT || !arch)
        out[0] = 0;
    else
        snprintf(out, cap, "%s.%s", arch, k_suffix[k]);
    return out;
}

/* Architecture names are short (general.architecture); keys fit 160 bytes with room to spare. */
#define KEY(k, arch) cdx_gguf_key_name(k, arch, (char[160]){ 0 }, 160)

const cdx_gguf_kv *cdx_gguf_find_arch(const cdx_gguf *g, const char *arch, cdx_gguf_key k)
{
    return cdx_gguf_find(g, KEY(k, arch));
}
bool cdx_gguf_get_arch_u64(const cdx_gguf *g, const char *arch, cdx_gguf_key k, uint64_t *out)
{
    return cdx_gguf_get_u64(g, KEY(k, arch), out);
}
bool cdx_gguf_get_arch_f64(const cdx_gguf *g, const char *arch, cdx_gguf_key k, double *out)
{
    return cdx_gguf_get_f64(g, KEY(k, arch), out);
}
bool cdx_gguf_get_arch_bool(const cdx_gguf *g, const char *arch, cdx_gguf_key k, bool *out)
{
    return cdx_gguf_get_bool(g, KEY(k, arch), out);
}
int cdx_gguf_writer_set_arch_u32(cdx_gguf_writer *w, const char *arch, cdx_gguf_key k, uint32_t v)
{
    return cdx_gguf_writer_set_u32(w, KEY(k, arch), v);
}
int cdx_gguf_writer_set_arch_f32(cdx_gguf_writer *w, const char *arch, cdx_gguf_key k, float v)
{
    return cdx_gguf_writer_set_f32(w, KEY(k, arch), v);
}
int cdx_gguf_writer_set_arch_bool(cdx_gguf_writer *w, const char *arch, cdx_gguf_key k, bool v)
{
    return cdx_gguf_writer_set_bool(w, KEY(k, arch), v);
}
int cdx_gguf_writer_set_arch_arr(cdx_gguf_writer *w, const char *arch, cdx_gguf_key k, uint32_t elem_type,
                                 const void *data, uint64_t n)
{
    return cdx_gguf_writer_set_arr(w, KEY(k, arch), elem_type, data, n);
}
