/* layernorm.cu — LayerNorm over the last dimension, eps given (twin of
 * kernels/cpu/layernorm.c), fp32 arithmetic; the input and output are
 * activations of either type (act.cuh), the statistics and gradients fp32.
 * The kernels are norm.cuh's (shared with RMSNorm), with the mean and the
 * bias. */
#include "kernels/cuda/norm.cuh"

void cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b,
                            int N, int C, float eps, dt_dtype t) {
    dtc_norm_forward<false>(out, mean, rstd, inp, w, b, N, C, eps, t);
}

void cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const void *inp, const float *w,
                             const float *mean, const float *rstd, int N, int C, dt_dtype t) {
    dtc_norm_backward<false>(dinp, dw, db, dout, inp, w, mean, rstd, N, C, t);
}
