/* Inside the kernel layer: the table of function pointers one ISA provides. */
#ifndef CDX_KERNEL_IMPL_H
#define CDX_KERNEL_IMPL_H

#include "caldrix/kernel.h"

/* Computes y[t*w->rows + r] for r in [r0, r1) and t < n. x: f32 activations [n][cols];
 * xq: the same quantized to the type's vec_dot_type (NULL for F32/F16/BF16 weights). */
typedef void (*cdx_row_kernel)(const cdx_mat *w, int64_t r0, int64_t r1, const float *x, const void *xq,
                               size_t xq_row_bytes, int64_t n, float *y);
typedef void (*cdx_quantize_fn)(const float *x, void *out, int64_t n);

struct cdx_kernels {
    const char *isa;
    cdx_row_kernel row[CDX_TYPE_COUNT];       /* NULL: the generic scalar path */
    cdx_quantize_fn quantize[CDX_TYPE_COUNT]; /* activation quantizers; NULL: the scalar from_f32 */
};

#endif
