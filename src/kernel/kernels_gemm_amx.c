/* The amx set with BF16 tiles for F16/BF16 weights (kern_amx.h's amxf_rows) and the unpacked-panel
 * integer GEMM of avx512-gemm: faster prefill whose float sums depend on the batch, so it is not
 * batch invariant and is never picked by default (--isa amx-gemm). */
#define KT(name) name##_amxg
#define KT_ISA_NAME "amx-gemm"
#define KT_AMX 1
#define KT_AMX_BF16 1
#define KT_FAST_PREFILL 1
#include "kernels_avx512.c"
