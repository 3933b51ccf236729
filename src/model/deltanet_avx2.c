/* The delta-rule steps compiled for AVX2 (the Makefile gives *_avx2.c -mavx2 -mfma -O3); the same
 * source as the scalar twin in deltanet.c, see deltanet_impl.h for why their bits agree. */
#include "deltanet.h"

#include <math.h>
#include <string.h>

#define DN_NAME(x) dn_##x##_avx2
#include "deltanet_impl.h"
#undef DN_NAME

const dn_kernels dn_kernels_avx2 = { "avx2", dn_chunk_step_avx2, dn_recurrent_step_avx2 };
