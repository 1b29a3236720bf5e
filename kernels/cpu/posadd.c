/* posadd.c — learned position embedding, added in place to the token
 * embeddings: x[b,t,:] += wpe[t,:]. */
#include "kernels/cpu/cpu.h"

void cpu_posadd_forward(float *x, const float *wpe, int B, int T, int C) {
    #pragma omp parallel for collapse(2) if ((size_t)B * T * C > CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *xr = x + ((size_t)b * T + t) * C;
            const float *pr = wpe + (size_t)t * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) xr[c] += pr[c];
        }
    }
}

/* wpe[t] feeds every sample at position t: dwpe[t,:] += sum_b dx[b,t,:].
 * Parallel over positions, so no two threads write the same row. */
void cpu_posadd_backward(float *dwpe, const float *dx, int B, int T, int C) {
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
