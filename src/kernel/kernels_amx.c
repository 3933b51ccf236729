/* The AVX-512 set with AMX tiles (AMX-TILE, AMX-INT8) for the x16 layouts' batches of 16 tokens
 * and more (kern_amx.h): the same layouts, decode kernels and bits as the avx512 set, the block
 * dots of a batch made by tdpbsud instead of vpdpbusd. */
#define KT(name) name##_amx
#define KT_ISA_NAME "amx"
#define KT_AMX 1
#include "kernels_avx512.c"
