/* Makes tests/golden/q8-act/: how llama.cpp's CPU backend quantizes activations to q8_0 and q8_1 at
 * run time (ggml_get_type_traits_cpu(type)->from_float), which is not quantize_row_q8_0_ref / q8_1_ref
 * (the file quantizers) on x86 with AVX: the multiplier is 127/amax and values round half to even.
 *
 *   cc -O2 -std=c11 -I$SRC/ggml/include scripts/goldens/ggml-act-quant.c -o /tmp/ggml-act-quant -ldl
 *   /tmp/ggml-act-quant $BINS tests/golden/q8-act
 *
 * BINS is node-llama-cpp 3.21.1's bins/linux-x64 folder (libggml-cpu-<variant>.so), SRC the llama.cpp
 * source of the same release (git clone of node-llama-cpp/llama/gitRelease.bundle). Writes in.f32
 * (the inputs), q8_0.bin and q8_1.bin from the haswell (AVX2) variant, and checks that every other
 * variant with AVX gives the same bytes (printed; the sse42/x64 variants use the _ref quantizers). */
#include "ggml.h"
#include "ggml-cpu.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 4096

static uint64_t s = 0x243F6A8885A308D3ull;
static double uni(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (double)(s >> 11) / 9007199254740992.0; }
static float gauss(void) { double u = uni() + 1e-12, v = uni(); return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v)); }

static void fill(float *x)
{
    for (int i = 0; i < N; i++) {
        int b = i / 32, p = b % 4;
        if (p == 0) x[i] = gauss();                                  /* plain: 127/amax vs 1/d flips */
        else if (p == 1) x[i] = i % 32 == 0 ? 127.0f : (float)((int)(uni() * 254) - 127) + 0.5f; /* d = 1: exact ties */
        else if (p == 2) x[i] = gauss() * 1e-3f;
        else x[i] = i % 32 == 5 ? -63.5f : (float)((int)(uni() * 126) - 63) * 0.5f; /* amax 63.5: ties at id = 2 */
    }
    for (int i = 64 * 32; i < 65 * 32; i++) x[i] = 0.0f;             /* one zero block */
}

typedef const struct ggml_type_traits_cpu *(*traits_fn)(enum ggml_type);

static int run(const char *bins, const char *variant, float *x, uint8_t *q0, uint8_t *q1)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/libggml-cpu-%s.so", bins, variant);
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s: %s\n", p, dlerror()); return -1; }
    int (*score)(void) = (int (*)(void))dlsym(h, "ggml_backend_score");
    if (score && !score()) return 1; /* the variant needs instructions this CPU lacks */
    void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    traits_fn tr = (traits_fn)dlsym(h, "ggml_get_type_traits_cpu");
    if (!init || !tr) return -1;
    init();
    tr(GGML_TYPE_Q8_0)->from_float(x, q0, N);
    tr(GGML_TYPE_Q8_1)->from_float(x, q1, N);
    return 0; /* the handle stays open: ggml's globals may be referenced */
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: %s BINS OUTDIR\n", argv[0]); return 2; }
    static float x[N];
    static uint8_t a0[N / 32 * 34], a1[N / 32 * 36], b0[sizeof a0], b1[sizeof a1];
    fill(x);
    if (run(argv[1], "haswell", x, a0, a1)) return 1;
    const char *others[] = { "sandybridge", "skylakex", "icelake", "alderlake", "zen4", "sse42", "x64" };
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        memset(b0, 0, sizeof b0); memset(b1, 0, sizeof b1);
        if (run(argv[1], others[i], x, b0, b1)) { printf("%s: not runnable here\n", others[i]); continue; }
        printf("%s: q8_0 %s haswell, q8_1 %s haswell\n", others[i], memcmp(a0, b0, sizeof a0) ? "differs from" : "equals",
               memcmp(a1, b1, sizeof a1) ? "differs from" : "equals");
    }
    const struct { const char *name; const void *p; size_t n; } out[] = {
        { "in.f32", x, sizeof x }, { "q8_0.bin", a0, sizeof a0 }, { "q8_1.bin", a1, sizeof a1 } };
    for (int i = 0; i < 3; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", argv[2], out[i].name);
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(out[i].p, 1, out[i].n, f) != out[i].n || fclose(f)) { perror(p); return 1; }
    }
    return 0;
}
