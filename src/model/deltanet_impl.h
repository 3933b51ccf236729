/* The delta-rule steps, included once per instruction set (deltanet.c: baseline x86-64;
 * deltanet_avx2.c: -mavx2 -O3, with its own inner loops). Every sum over a or j is a chain in index
 * order, a product rounded and then added (in ISO C mode nothing is contracted into FMAs); only
 * independent chains run side by side (lanes over the value dim b, over the chunk's rows j). Both
 * copies give the same bits (the test compares them), so the choice of kernel set never changes a
 * token. DN_NAME(x) names this copy's x.
 *
 * The inner loops, here as plain loops (the oracle); a copy that defines DN_OWN_LOOPS brings its own:
 *   rows_acc: y[b] ← y[b] + c[j]·X[j][b] (− with sub), j = 0..nj−1 in order, for b < nb
 *   rows_acc2: the same into y and y2 with c and c2 over the same rows X, adding */
#ifndef DN_OWN_LOOPS
static void DN_NAME(rows_acc)(float *y, const float *c, const float *X, int64_t ldx, int64_t nj, int64_t nb, int sub)
{
    for (int64_t b = 0; b < nb; b++) {
        float t = y[b];
        for (int64_t j = 0; j < nj; j++)
            t = sub ? t - c[j] * X[j * ldx + b] : t + c[j] * X[j * ldx + b];
        y[b] = t;
    }
}

static void DN_NAME(rows_acc2)(float *y, float *y2, const float *c, const float *c2, const float *X, int64_t ldx,
                               int64_t nj, int64_t nb)
{
    DN_NAME(rows_acc)(y, c, X, ldx, nj, nb, 0);
    DN_NAME(rows_acc)(y2, c2, X, ldx, nj, nb, 0);
}
#endif

static void DN_NAME(chunk_step)(float *head, int64_t dk, int64_t dv, int64_t row, const float *q, const float *k,
                   const float *v, float g, float beta, float *out, float *tmp)
{
    float *S = head;                               /* [dk][dv]: the state before this chunk */
    float *K = S + dk * dv;                        /* [dk][DN_CHUNK]: k_j in column j */
    float *U = K + DN_CHUNK * dk;                  /* [DN_CHUNK][dv] */
    float *G = U + DN_CHUNK * dv;                  /* [DN_CHUNK]: cumulative log-decay in the chunk */
    float *u = tmp, *kk = u + dv, *qk = kk + DN_CHUNK, *ex = qk + DN_CHUNK;
    const int64_t n = row + 1;                     /* rows j ≤ i, this one included */
    const float Gi = row ? G[row - 1] + g : g;
    const float e = expf(Gi);
    for (int64_t a = 0; a < dk; a++)
        K[a * DN_CHUNK + row] = k[a];
    G[row] = Gi;
    /* kk_j = k·k_j, qk_j = q·k_j: K's rows a hold every k_j's a-th value, so these are y ← y + c_a·K_a,
     * over whole 8-column blocks (K and kk, qk hold DN_CHUNK; the columns past n are not read after) */
    const int64_t n8 = (n + 7) / 8 * 8;
    memset(kk, 0, (size_t)n8 * sizeof(float));
    memset(qk, 0, (size_t)n8 * sizeof(float));
    DN_NAME(rows_acc2)(kk, qk, k, q, K, DN_CHUNK, dk, n8);
    for (int64_t j = 0; j < n; j++)
        ex[j] = expf(Gi - G[j]);
    /* u = β (v − e^{G_i} S0ᵀk) − Σ_{j<i} β (k·k_j) e^{G_i−G_j} u_j, and S0ᵀq in the same pass over S0 */
    memset(u, 0, (size_t)dv * sizeof(float));
    memset(out, 0, (size_t)dv * sizeof(float));
    DN_NAME(rows_acc2)(u, out, k, q, S, dv, dk, dv);
    for (int64_t b = 0; b < dv; b++)
        u[b] = beta * (v[b] - e * u[b]);
    for (int64_t j = 0; j < row; j++)
        kk[j] = beta * kk[j] * ex[j];
    DN_NAME(rows_acc)(u, kk, U, dv, row, dv, 1);
    memcpy(U + row * dv, u, (size_t)dv * sizeof(float));
    /* o = e^{G_i} S0ᵀq + Σ_{j≤i} (q·k_j) e^{G_i−G_j} u_j */
    for (int64_t b = 0; b < dv; b++)
        out[b] *= e;
    for (int64_t j = 0; j < n; j++)
        qk[j] *= ex[j];
    DN_NAME(rows_acc)(out, qk, U, dv, n, dv, 0);
    if (row != DN_CHUNK - 1)
        return;
    /* the chunk is whole: S0 ← e^{G_last} S0 + Σ_j e^{G_last−G_j} k_j ⊗ u_j, row a of S0 at a time
     * (each element still scaled first, then its terms added in j order) */
    const float GL = G[DN_CHUNK - 1], eL = expf(GL);
    float *w = ex, *c = kk;
    for (int64_t j = 0; j < DN_CHUNK; j++)
        w[j] = expf(GL - G[j]);
    for (int64_t a = 0; a < dk; a++) {
        float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            Sa[b] *= eL;
        for (int64_t j = 0; j < DN_CHUNK; j++)
            c[j] = w[j] * K[a * DN_CHUNK + j];
        DN_NAME(rows_acc)(Sa, c, U, dv, DN_CHUNK, dv, 0);
    }
}

static void DN_NAME(recurrent_step)(float *head, int64_t dk, int64_t dv, const float *q, const float *k, const float *v, float g,
                       float beta, float *out, float *tmp)
{
    float *S = head, *d = tmp;
    const float eg = expf(g);
    for (int64_t i = 0; i < dk * dv; i++)
        S[i] *= eg;
    memset(d, 0, (size_t)dv * sizeof(float));
    for (int64_t a = 0; a < dk; a++) {
        const float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            d[b] += k[a] * Sa[b];
    }
    for (int64_t b = 0; b < dv; b++)
        d[b] = (v[b] - d[b]) * beta;
    for (int64_t a = 0; a < dk; a++) {
        float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            Sa[b] += k[a] * d[b];
    }
    memset(out, 0, (size_t)dv * sizeof(float));
    for (int64_t a = 0; a < dk; a++) {
        const float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            out[b] += q[a] * Sa[b];
    }
}
