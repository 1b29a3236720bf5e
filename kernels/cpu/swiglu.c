/* swiglu.c — Llama's MLP activation (ops.h swiglu_forward / _backward):
 * inp[N, 2F] packs one GEMM's gate (columns [0, F)) and up ([F, 2F))
 * projections; out[N, F] = SiLU(gate) * up in one pass over both halves,
 *     s = 1 / (1 + e^-g),   SiLU(g) = g s,
 * and backward, with d/dg SiLU(g) = s (1 + g (1 - s)):
 *     dgate += dout up s (1 + g (1 - s)),   dup += dout g s. */
#include <math.h>

#include "kernels/cpu/cpu.h"

static void swiglu_forward_f32(float *out, const float *inp, int N, int F)
{
    #pragma omp parallel for if ((size_t)N * F > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *o = out + (size_t)n * F;
        #pragma omp simd
        for (int f = 0; f < F; f++) {
            float s = 1.0f / (1.0f + expf(-g[f]));
            o[f] = g[f] * s * u[f];
        }
    }
}

static void swiglu_backward_f32(float *dinp, const float *inp, const float *dout, int N, int F)
{
    #pragma omp parallel for if ((size_t)N * F > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F, *d = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
        #pragma omp simd
        for (int f = 0; f < F; f++) {
            float s = 1.0f / (1.0f + expf(-g[f]));
            dg[f] += d[f] * u[f] * (s * (1.0f + g[f] * (1.0f - s)));
            du[f] += d[f] * (g[f] * s);
        }
    }
}

/* The activations (inp, out) in the run's type (act.c). */
void cpu_swiglu_forward(void *out, const void *inp, int N, int F, dt_dtype t)
{
    if (N <= 0 || F <= 0) return;
    size_t n = (size_t)N * (size_t)F;
    float *o = cpu_act_out(0, out, n, t);
    swiglu_forward_f32(o, cpu_act_in(1, inp, 2 * n, t), N, F);
    cpu_act_store(out, o, n, t);
}

void cpu_swiglu_backward(float *dinp, const void *inp, const float *dout, int N, int F, dt_dtype t)
{
    if (N <= 0 || F <= 0) return;
    swiglu_backward_f32(dinp, cpu_act_in(0, inp, 2 * (size_t)N * (size_t)F, t), dout, N, F);
}
