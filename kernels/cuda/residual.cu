/* residual.cu — the residual stream's sum (twin of kernels/cpu/residual.c):
 * out = a + b, out may alias a (each element is read before it is written by
 * the same thread, so aliasing is safe); backward passes dout to both
 * branches, accumulating. */
#include "kernels/cuda/common.cuh"

__global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float *__restrict__ da, float *__restrict__ db,
                                         const float *__restrict__ dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float d = dout[i];
        da[i] += d;
        db[i] += d;
    }
}

void cuda_residual_forward(float *out, const float *a, const float *b, size_t n) {
    if (!n) return;
    residual_forward_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(out, a, b, n);
    DTC_LAUNCHED();
}

void cuda_residual_backward(float *da, float *db, const float *dout, size_t n) {
    if (!n) return;
    residual_backward_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(da, db, dout, n);
    DTC_LAUNCHED();
}
