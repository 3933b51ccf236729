/* Kernel sets, best first, and the CPU feature checks that pick one. */
#include "caldrix/kernel.h"
#include "kernel_impl.h"

#include <string.h>

static const cdx_kernels k_scalar = { .isa = "scalar" };

static bool cpu_any(void) { return true; }

static const struct {
    const cdx_kernels *k;
    bool (*ok)(void);
} k_sets[] = {
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
