/* reduce.c — whole-tensor helpers for the optimizer: scaling (gradient
 * clipping, averaging) and the sum of squares (global gradient norm). */
#include <omp.h>

#include "kernels/cpu/cpu.h"

void cpu_scale(float *p, float s, size_t n) {
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) p[i] *= s;
}

/* Sum of squares in double. Each thread sums a fixed contiguous chunk and the
 * partial sums are added in thread order, so the result is reproducible run to
 * run (an OpenMP reduction clause combines in an unspecified order). */
double cpu_sumsq(const float *p, size_t n) {
    enum { MAX_PARTS = 256 };
    double part[MAX_PARTS] = {0};
    int nthreads = n > CPU_PAR_MIN ? omp_get_max_threads() : 1;
    if (nthreads > MAX_PARTS) nthreads = MAX_PARTS;
    #pragma omp parallel num_threads(nthreads)
    {
        int tid = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t i0 = n / nt * tid + (n % nt < (size_t)tid ? n % nt : (size_t)tid);
        size_t i1 = i0 + n / nt + ((size_t)tid < n % nt);
        double acc = 0.0;
        #pragma omp simd reduction(+:acc)
        for (size_t i = i0; i < i1; i++) acc += (double)p[i] * p[i];
        part[tid] = acc;
    }
    double total = 0.0;
    for (int t = 0; t < nthreads; t++) total += part[t];
    return total;
}
