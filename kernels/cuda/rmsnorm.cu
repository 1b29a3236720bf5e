/* rmsnorm.cu — RMSNorm over the last dimension (Llama's; twin of
 * kernels/cpu/rmsnorm.c): rstd = 1 / sqrt(mean(x^2) + eps), out = (x rstd) w.
 * norm.cuh's kernels with no mean and no bias: one warp a row forward, the
 * same deterministic column sums for dw as LayerNorm's. */
#include "kernels/cuda/norm.cuh"

void cuda_rmsnorm_forward(void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps,
                          dt_dtype t) {
    dtc_norm_forward<true>(out, nullptr, rstd, inp, w, nullptr, N, C, eps, t);
}

void cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const void *inp, const float *w,
                           const float *rstd, int N, int C, dt_dtype t) {
    dtc_norm_backward<true>(dinp, dw, nullptr, dout, inp, w, nullptr, rstd, N, C, t);
}
