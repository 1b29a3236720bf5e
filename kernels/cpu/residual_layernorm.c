/* residual_layernorm.c — the residual add and the norm that reads its sum
 * (ops.h residual_layernorm_forward, residual_rmsnorm_forward), the CUDA
 * backend's one fused pass; here the two ops in turn, so the model's results
 * are the same bits whichever way it calls them. */
#include "kernels/cpu/cpu.h"

void cpu_residual_layernorm_forward(void *res, void *out, float *mean, float *rstd, const float *a, const void *b,
                                    const float *w, const float *bias, int N, int C, float eps, dt_dtype t)
{
    cpu_residual_forward(res, a, b, (size_t)N * (size_t)C, t);
    cpu_layernorm_forward(out, mean, rstd, res, w, bias, N, C, eps, t);
}

void cpu_residual_rmsnorm_forward(void *res, void *out, float *rstd, const float *a, const void *b, const float *w,
                                  int N, int C, float eps, dt_dtype t)
{
    cpu_residual_forward(res, a, b, (size_t)N * (size_t)C, t);
    cpu_rmsnorm_forward(out, rstd, res, w, N, C, eps, t);
}
