/* Small lookup tables of the non-linear formats. Values from ggml-common.h (llama.cpp v0.4.0):
 * kvalues_iq4nl, kvalues_fp4 (E2M1 doubled, per the OCP microscaling spec) and ksigns_iq2xs. */
#include "quant/quant_ref.h"

const int8_t cdx_kvalues_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                       1, 13, 25, 38, 53, 69, 89, 113 };
const int8_t cdx_kvalues_fp4[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

/* Entry i is the 7 bits of i plus an 8th bit that makes the number of set bits even. */
const uint8_t cdx_ksigns_iq2xs[128] = {
#define S(i) (uint8_t)((i) | ((__builtin_popcount(i) & 1) << 7))
#define S8(i) S(i), S(i + 1), S(i + 2), S(i + 3), S(i + 4), S(i + 5), S(i + 6), S(i + 7)
    S8(0), S8(8), S8(16), S8(24), S8(32), S8(40), S8(48), S8(56),
    S8(64), S8(72), S8(80), S8(88), S8(96), S8(104), S8(112), S8(120),
#undef S8
#undef S
};
