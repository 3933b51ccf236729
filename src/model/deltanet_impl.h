/* The delta-rule steps, included once per instruction set (deltanet.c: baseline x86-64;
 * deltanet_avx2.c: -mavx2 -O3). Only the loops over independent lanes (the value dim b, the
 * state's rows) vectorize; every sum over a or j stays a scalar chain in index order and, in
 * ISO C mode, nothing is contracted into FMAs: both copies give the same bits (the test compares
 * them), so the choice of kernel set never changes a token. DN_NAME(x) names this copy's x. */
static void DN_NAME(chunk_step)(float *head, int64_t dk, int64_t dv, int64_t row, const float *q, const float *k,
                   const float *v, float g, float beta, float *out, float *tmp)
{
    float *S = head;                               /* [dk][dv]: the state before this chunk */
    float *K = S + dk * dv;                        /* [DN_CHUNK][dk] */
    float *U = K + DN_CHUNK * dk;                  /* [DN_CHUNK][dv] */
    float *G = U + DN_CHUNK * dv;                  /* [DN_CHUNK]: cumulative log-decay in the chunk */
    float *u = tmp;
    const float Gi = row ? G[row - 1] + g : g;
    const float e = expf(Gi);
    /* u = β (v − e^{G_i} S0ᵀk) − Σ_{j<i} β (k·k_j) e^{G_i−G_j} u_j */
    memset(u, 0, (size_t)dv * sizeof(float));
    for (int64_t a = 0; a < dk; a++) {
        const float ka = k[a];
        const float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            u[b] += ka * Sa[b];
    }
    for (int64_t b = 0; b < dv; b++)
        u[b] = beta * (v[b] - e * u[b]);
    for (int64_t j = 0; j < row; j++) {
        const float *Kj = K + j * dk, *Uj = U + j * dv;
        float kk = 0;
        for (int64_t a = 0; a < dk; a++)
            kk += k[a] * Kj[a];
        const float c = beta * kk * expf(Gi - G[j]);
        for (int64_t b = 0; b < dv; b++)
            u[b] -= c * Uj[b];
    }
    memcpy(K + row * dk, k, (size_t)dk * sizeof(float));
    memcpy(U + row * dv, u, (size_t)dv * sizeof(float));
    G[row] = Gi;
    /* o = e^{G_i} S0ᵀq + Σ_{j≤i} (q·k_j) e^{G_i−G_j} u_j */
    memset(out, 0, (size_t)dv * sizeof(float));
    for (int64_t a = 0; a < dk; a++) {
        const float qa = q[a];
        const float *Sa = S + a * dv;
        for (int64_t b = 0; b < dv; b++)
            out[b] += qa * Sa[b];
    }
    for (int64_t b = 0; b < dv; b++)
        out[b] *= e;
    for (int64_t j = 0; j <= row; j++) {
        const float *Kj = K + j * dk, *Uj = U + j * dv;
        float qk = 0;
        for (int64_t a = 0; a < dk; a++)
            qk += q[a] * Kj[a];
        const float c = qk * expf(Gi - G[j]);
        for (int64_t b = 0; b < dv; b++)
            out[b] += c * Uj[b];
    }
    if (row != DN_CHUNK - 1)
        return;
    /* the chunk is whole: S0 ← e^{G_last} S0 + Σ_j e^{G_last−G_j} k_j ⊗ u_j */
    const float GL = G[DN_CHUNK - 1], eL = expf(GL);
    for (int64_t i = 0; i < dk * dv; i++)
        S[i] *= eL;
    for (int64_t j = 0; j < DN_CHUNK; j++) {
        const float w = expf(GL - G[j]);
        const float *Kj = K + j * dk, *Uj = U + j * dv;
        for (int64_t a = 0; a < dk; a++) {
            const float c = w * Kj[a];
            float *Sa = S + a * dv;
            for (int64_t b = 0; b < dv; b++)
                Sa[b] += c * Uj[b];
        }
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
