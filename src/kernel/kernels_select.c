/* Kernel sets, best first (as redis's ae.c lists its backends), and the CPU feature checks that
 * pick one. */
#include "caldrix/kernel.h"
#include "kernel_impl.h"

#include <stdlib.h>
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

static bool cpu_amx(void)
{
    const cdx_cpu_features *f = cdx_cpu_features_get();
    return cpu_avx512() && f->amx_tile && f->amx_int8;
}

static bool cpu_amx_bf16(void)
{
    const cdx_cpu_features *f = cdx_cpu_features_get();
    return cpu_amx() && f->amx_bf16 && f->avx512bf16;
}

static const struct {
    const cdx_kernels *k;
    bool (*ok)(void);
} k_sets[] = {
    { &cdx_kernels_amx, cpu_amx },
    { &cdx_kernels_avx512, cpu_avx512 },
    { &cdx_kernels_avx2, cpu_avx2 },
    { &cdx_kernels_avx512g, cpu_avx512 }, /* after avx2: never the best, only by name */
    { &cdx_kernels_amxg, cpu_amx_bf16 },  /* the same */
    { &k_scalar, cpu_any }, /* always last, always usable */
};

static const cdx_kernels *best_available(void)
{
    for (size_t i = 0; i < sizeof k_sets / sizeof k_sets[0]; i++)
        if (k_sets[i].ok())
            return k_sets[i].k;
    return &k_scalar;
}

/* CALDRIX_ISA names a lesser set to run instead (tests/run --isa runs whole suites on each set a
 * machine has); a name that is unknown or that this CPU lacks is ignored here and refused by the
 * front ends (cdx_kernels_env_check). */
const cdx_kernels *cdx_kernels_best(void)
{
    const char *env = getenv("CALDRIX_ISA");
    const cdx_kernels *k = env && *env ? cdx_kernels_by_isa(env) : NULL;
    return k ? k : best_available();
}

int cdx_kernels_env_check(cdx_err *err)
{
    const char *env = getenv("CALDRIX_ISA");
    if (!env || !*env || cdx_kernels_by_isa(env))
        return CDX_OK;
    return cdx_err_set(err, CDX_EINVAL, "CALDRIX_ISA=%s: expected a kernel set this CPU has (best here: %s; "
                       "scalar always)", env, best_available()->isa);
}

const char *cdx_kernels_name_at(size_t i)
{
    return i < sizeof k_sets / sizeof k_sets[0] ? k_sets[i].k->isa : NULL;
}

const cdx_kernels *cdx_kernels_by_isa(const char *isa)
{
    for (size_t i = 0; i < sizeof k_sets / sizeof k_sets[0]; i++)
        if (!strcmp(k_sets[i].k->isa, isa))
            return k_sets[i].ok() ? k_sets[i].k : NULL;
    return NULL;
}
