/* Prints the coefficient table of src/kernel/kern_erf.h: erf on [0, 4) in 8 intervals of 1/2,
 * Chebyshev interpolation of degree CDX_ERF_DEG in quad precision (libquadmath's erfq), turned into
 * monomials and rounded to double; then the largest error of the double Horner evaluation (with
 * fma, as the kernels run it) on a dense sweep, in ulps of the float result.
 *   cc -O2 -o /tmp/erf-fit scripts/erf-fit.c -lquadmath -lm && /tmp/erf-fit
 * Interval 0 is x·Q(x²) (Q fitted to erf(√u)/√u on u in [0, 1/4]), so tiny x keep their relative
 * accuracy; interval k >= 1 is P_k(x - (k/2 + 1/4)). */
#include <math.h>
#include <quadmath.h>
#include <stdio.h>

typedef __float128 Q;
#define DEG 8
#define NINT 8

static Q g(int k, Q v)
{
    if (k)
        return erfq(v);
    if (v == 0)
        return 2 / sqrtq(M_PIq);
    return erfq(sqrtq(v)) / sqrtq(v);
}

/* the degree-DEG interpolant of g(k, .) at Chebyshev nodes of [a, b], as monomials in (v - c) */
static void fit(int k, Q a, Q b, Q c, double *out)
{
    enum { N = DEG + 1 };
    Q f[N], cc[N], ps[N] = { 0 }, T[N][N] = { { 0 } }, pw[N] = { 0 };
    for (int j = 0; j < N; j++)
        f[j] = g(k, (a + b) / 2 + (b - a) / 2 * cosq(M_PIq * (j + 0.5Q) / N));
    for (int i = 0; i < N; i++) {
        Q s = 0;
        for (int j = 0; j < N; j++)
            s += f[j] * cosq(M_PIq * i * (j + 0.5Q) / N);
        cc[i] = s * 2 / N;
    }
    cc[0] /= 2;
    T[0][0] = 1, T[1][1] = 1;
    for (int i = 2; i < N; i++)
        for (int d = 0; d < N; d++)
            T[i][d] = -T[i - 2][d] + (d ? 2 * T[i - 1][d - 1] : 0);
    for (int i = 0; i < N; i++)
        for (int d = 0; d < N; d++)
            ps[d] += cc[i] * T[i][d];
    /* s = (v - m)/h = (w + e)/h with w = v - c, e = c - m */
    const Q m = (a + b) / 2, h = (b - a) / 2, e = c - m;
    for (int d = 0; d < N; d++) {
        Q binom = 1;
        for (int j = 0; j <= d; j++) {
            pw[j] += ps[d] * powq(h, -d) * binom * powq(e, d - j);
            binom = binom * (d - j) / (j + 1);
        }
    }
    for (int d = 0; d < N; d++)
        out[d] = (double)pw[d];
}

int main(void)
{
    double c[NINT][DEG + 1], worst = 0;
    for (int k = 0; k < NINT; k++) {
        if (k == 0)
            fit(0, 0, 0.25Q, 0, c[0]);
        else
            fit(k, k * 0.5Q, k * 0.5Q + 0.5Q, k * 0.5Q + 0.25Q, c[k]);
        for (long i = 0; i <= 1000000; i++) {
            double x = k * 0.5 + 0.5 * (double)i / 1e6;
            if (x >= k * 0.5 + 0.5)
                x = nextafter(k * 0.5 + 0.5, 0);
            const double w = k ? x - (k * 0.5 + 0.25) : x * x;
            double p = c[k][DEG];
            for (int d = DEG - 1; d >= 0; d--)
                p = fma(p, w, c[k][d]);
            p *= k ? 1.0 : x;
            const Q t = erfq(x);
            const float tf = (float)t;
            const double err = fabs((double)(p - t)) / (nextafterf(tf, INFINITY) - tf);
            worst = err > worst ? err : worst;
        }
    }
    printf("static const double cdx_erf_poly[CDX_ERF_DEG + 1][8] = {\n");
    for (int d = 0; d <= DEG; d++) {
        printf("    {");
        for (int k = 0; k < NINT; k++)
            printf(" %a,", c[k][d]);
        printf(" },\n");
    }
    printf("};\n/* largest error on the sweep: %.3g ulp of the float result */\n", worst);
    return 0;
}
