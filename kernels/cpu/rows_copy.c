/* rows_copy.c — strided row copies (ops.h: rows_copy): k and v packed out of
 * a qkv buffer for context parallelism's ring, their gradient added back. */
#include <string.h>

#include "kernels/cpu/cpu.h"

void cpu_rows_copy(float *dst, int ldd, const float *src, int lds, int N, int W, int accumulate)
{
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
