/* gelu_erf.c — GELU, exact (the Gaussian CDF through erf), as PyTorch's
 * nn.GELU() and Hugging Face's hidden_act "gelu" (BERT, ViT):
 *     gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))
 * fp32 with erff: the same function torch computes in fp32. */
#include <math.h>

#include "kernels/cpu/cpu.h"

#define GELU_RSQRT2 0.7071067811865476f     /* 1 / sqrt(2) */
#define GELU_RSQRT2PI 0.3989422804014327f   /* 1 / sqrt(2 pi) */

static void gelu_erf_forward_f32(float *out, const float *inp, size_t n) {
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + erff(x * GELU_RSQRT2));
    }
}

/* d/dx = Phi(x) + x phi(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)
 * (dinp += dout * d/dx) */
static void gelu_erf_backward_f32(float *dinp, const float *inp, const float *dout, size_t n) {
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cdf = 0.5f * (1.0f + erff(x * GELU_RSQRT2));
        float pdf = GELU_RSQRT2PI * expf(-0.5f * x * x);
        dinp[i] += dout[i] * (cdf + x * pdf);
    }
}

/* The activations (inp, out) in the run's type (act.c). */
void cpu_gelu_erf_forward(void *out, const void *inp, size_t n, dt_dtype t)
{
    cpu_act_map(gelu_erf_forward_f32, out, inp, n, t);
}

void cpu_gelu_erf_backward(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t)
{
    cpu_act_map_backward(gelu_erf_backward_f32, dinp, inp, dout, n, t);
}
