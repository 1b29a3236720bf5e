/* rows_copy.c — strided row copies (ops.h: rows_copy): k and v packed out of
 * a qkv buffer for context parallelism's ring, their gradient added back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

void cpu_rows_copy(void *dst_, int ldd, const void *src_, int lds, int N, int W, int accumulate, dt_dtype t)
{
    if (t == DT_BF16) { /* a copy of the stored bits */
        if (accumulate) {
            fprintf(stderr, "dtrun: cpu kernels: rows_copy accumulates fp32 only\n");
            abort();
        }
        #pragma omp parallel for schedule(static) if ((size_t)N * (size_t)W > CPU_PAR_MIN)
        for (int n = 0; n < N; n++)
            memcpy((uint16_t *)dst_ + (size_t)n * ldd, (const uint16_t *)src_ + (size_t)n * lds, (size_t)W * 2);
        return;
    }
    float *dst = dst_;
    const float *src = src_;
    #pragma omp parallel for schedule(static) if ((size_t)N * (size_t)W > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *d = dst + (size_t)n * ldd;
        const float *s = src + (size_t)n * lds;
        if (!accumulate) {
            memcpy(d, s, (size_t)W * sizeof(float));
            continue;
        }
        #pragma omp simd
        for (int c = 0; c < W; c++) d[c] += s[c];
    }
}
