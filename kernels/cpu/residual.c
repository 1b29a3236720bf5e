/* residual.c — the residual stream's sum: out = a + b (out may alias a).
 * The gradient of a sum passes unchanged to both branches. */
#include "kernels/cpu/cpu.h"

void cpu_residual_forward(float *out, const float *a, const float *b, size_t n) {
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_residual_backward(float *da, float *db, const float *dout, size_t n) {
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}
