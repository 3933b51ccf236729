/* The AVX-512 set with the unpacked-panel integer GEMM for prompts (kern_wide512.h's g_gemm): faster
 * prefill for the types without a load-time layout, but a row's sums then depend on the batch
 * size, so it is not batch invariant and is never picked by default (--isa avx512-gemm). */
#define KT(name) name##_avx512g
#define KT_ISA_NAME "avx512-gemm"
#define KT_FAST_PREFILL 1
#include "kernels_avx512.c"
