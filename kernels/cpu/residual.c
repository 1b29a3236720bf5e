/* residual.c — the residual stream's sum: out = a + b, a a branch's fp32
 * output, b and out the stream in the run's type (out may alias a in fp32).
 * The gradient of a sum passes unchanged to both branches. */
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"

void cpu_residual_forward(void *out, const float *a, const void *b, size_t n, dt_dtype t) {
    if (t == DT_BF16) { /* the sum in fp32, rounded once where it is stored */
        uint16_t *o = out;
        const uint16_t *h = b;
        #pragma omp parallel for simd if (n > CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) o[i] = cpu_f32_to_bf16(a[i] + cpu_bf16_to_f32(h[i]));
        return;
    }
    float *o = out;
    const float *f = b;
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) o[i] = a[i] + f[i];
}

void cpu_residual_backward(float *da, float *db, const float *dout, size_t n) {
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}
