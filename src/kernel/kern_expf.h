/* expf with the C library's bits, for vector kernels: Debian 12's glibc 2.36 computes expf (the
 * algorithm of ARM's optimized-routines, MIT/BSD) in double as
 *     k = round(x·32/ln2), r = x·32/ln2 - k, s = 2^(k/32) from a 32-entry table and k's exponent bits,
 *     y = (C0·r + C1)·r² + (C2·r + 1), expf(x) = (float)(y·s)
 * and its x86-64 FMA build (the one every CPU with FMA runs) fuses k's shift, r, and the three
 * multiply-adds (read from its disassembly). The kernels repeat those steps lane by lane, so their
 * results equal expf's bit for bit for every float whose top 12 bits are below 0x42b (|x| < 88 and
 * not nan); other lanes are left to expf itself. tests/kernel/test_kernels.c holds them to expf. */
#ifndef CDX_KERN_EXPF_H
#define CDX_KERN_EXPF_H

#define CDX_EXPF_INVLN2N 0x1.71547652b82fep+5 /* 32 / ln 2 */
#define CDX_EXPF_SHIFT 0x1.8p+52              /* adding it rounds to an integer in the low bits */
#define CDX_EXPF_C0 0x1.c6af84b912394p-20     /* the polynomial for 2^(r/32), scaled */
#define CDX_EXPF_C1 0x1.ebfce50fac4f3p-13
#define CDX_EXPF_C2 0x1.62e42ff0c52d6p-6
#define CDX_EXPF_SPECIAL_TOP 0x42b            /* top 12 bits (sign off) from which expf takes its slow path */

/* 2^(j/32), j = 0..31, correctly rounded (expf's table holds their bits less j << 47 and adds k << 47;
 * adding (k >> 5) << 52 to the bits of 2^(j/32), j = k mod 32, is the same sum modulo 2^64) */
static const double cdx_expf_pow2[32] = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0,
};

#endif
