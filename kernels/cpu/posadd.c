/* posadd.c — learned position embedding, added in place to the token
 * embeddings: x[b,t,:] += wpe[t,:], or with per-row positions (packed
 * samples, context parallelism's chunks) x[n,:] += wpe[pos[n],:]. */
#include "kernels/cpu/cpu.h"

void cpu_posadd_forward(float *x, const float *wpe, const int *pos, int B, int T, int C) {
    #pragma omp parallel for collapse(2) if ((size_t)B * T * C > CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)b * T + t;
            float *xr = x + n * C;
            const float *pr = wpe + (size_t)(pos ? pos[n] : t) * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) xr[c] += pr[c];
        }
    }
}

/* wpe[t] feeds every sample at position t: dwpe[t,:] += sum_b dx[b,t,:].
 * Parallel over positions, so no two threads write the same row. With
 * per-row positions a scatter-add, serial over rows in order (several rows
 * share a position: each row of dwpe sums them in increasing n, the order
 * the first form adds its samples in). */
void cpu_posadd_backward(float *dwpe, const float *dx, const int *pos, int B, int T, int C) {
    if (pos) {
        for (size_t n = 0; n < (size_t)B * T; n++) {
            float *dp = dwpe + (size_t)pos[n] * C;
            const float *d = dx + n * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) dp[c] += d[c];
        }
        return;
    }
    #pragma omp parallel for if ((size_t)B * T * C > CPU_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float *dp = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float *d = dx + ((size_t)b * T + t) * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) dp[c] += d[c];
        }
    }
}
