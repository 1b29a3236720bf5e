/* gelu.c — GELU with GPT-2's tanh approximation:
 *     gelu(x) = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3) */
#include <math.h>

#include "kernels/cpu/cpu.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBE 0.044715f

static void gelu_forward_f32(float *out, const float *inp, size_t n) {
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

/* Exact derivative of the approximation:
 *     d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
 *     du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)          (dinp += dout * d/dx) */
static void gelu_backward_f32(float *dinp, const float *inp, const float *dout, size_t n) {
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float th = tanhf(u);
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
        dinp[i] += dout[i] * grad;
    }
}

/* The activations (inp, out) in the run's type (act.c). */
void cpu_gelu_forward(void *out, const void *inp, size_t n, dt_dtype t)
{
    cpu_act_map(gelu_forward_f32, out, inp, n, t);
}

void cpu_gelu_backward(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t)
{
    cpu_act_map_backward(gelu_backward_f32, dinp, inp, dout, n, t);
}
