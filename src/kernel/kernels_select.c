/* Kernel sets, best first (as redis's ae.c lists its backends), and the CPU feature checks that
 * pick one. */
#include "caldrix/kernel.h"
#include "kernel_impl.h"

#include <string.h>

static const cdx_kernels k_scalar = { .isa = "scalar" };

static bool cpu_any(void) { return true; }
static bool cpu_avx2(void)
{
    const cdx_cpu_features *f = cdx_cpu_features_get();
    return f->avx2 && f->fma && f->f16c;
}
static bool cpu_avx512(void)
{
    const cdx_cpu_features *f = cdx_cpu_features_get();
    return cpu_avx2() && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni && f->avx512vbmi;
}

static const struct {
    const cdx_kernels *k;
    bool (*ok)(void);
} k_sets[] = {
    { &cdx_kernels_avx512, cpu_avx512 },
    { &cdx_kernels_avx2, cpu_avx2 },
    { &k_scalar, cpu_any }, /* always last, always usable */
};

const cdx_kernels *cdx_kernels_best(void)
{
    for (size_t i = 0; i < sizeof k_sets / sizeof k_sets[0]; i++)
        if (k_sets[i].ok())
            return k_sets[i].k;
    return &k_scalar;
}

const cdx_kernels *cdx_kernels_by_isa(const char *isa)
{
    for (size_t i = 0; i < sizeof k_sets / sizeof k_sets[0]; i++)
        if (!strcmp(k_sets[i].k->isa, isa))
            return k_sets[i].ok() ? k_sets[i].k : NULL;
    return NULL;
}
