/* rmsnorm.c — RMSNorm over the last dimension (Llama's; ops.h
 * rmsnorm_forward / _backward): rstd = 1 / sqrt(mean(x^2) + eps),
 * out = (x rstd) w. The arithmetic is layernorm.c's with no mean and no
 * bias (cpu_norm_forward_f32 / cpu_norm_backward_f32 with mean, b and db
 * NULL), so the two norms share one set of loops. */
#include "kernels/cpu/cpu.h"

/* The activations (inp, out) in the run's type (act.c). */
void cpu_rmsnorm_forward(void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps, dt_dtype t)
{
    size_t n = (size_t)N * (size_t)C;
    float *o = cpu_act_out(0, out, n, t);
    cpu_norm_forward_f32(o, NULL, rstd, cpu_act_in(1, inp, n, t), w, NULL, N, C, eps);
    cpu_act_store(out, o, n, t);
}

void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const void *inp, const float *w,
                          const float *rstd, int N, int C, dt_dtype t)
{
    size_t n = (size_t)N * (size_t)C;
    cpu_norm_backward_f32(dinp, dw, NULL, dout, cpu_act_in(0, inp, n, t), w, NULL, rstd, N, C);
}
