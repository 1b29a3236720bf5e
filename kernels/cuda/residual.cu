/* residual.cu — the residual stream's sum (twin of kernels/cpu/residual.c):
 * out = a + b, a fp32, b and out of the activations' type; out may alias a
 * in fp32 (each element is read before it is written by the same thread, so
 * aliasing is safe); backward passes dout to both branches, accumulating. */
#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

template <typename T> __global__ void residual_forward_kernel(T *out, const float *a, const T *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        act_store(out, i, a[i] + act_load(b, i));
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

void cuda_residual_forward(void *out, const float *a, const void *b, size_t n, dt_dtype t) {
    if (!n) return;
    ACT_LAUNCH(t, T, residual_forward_kernel<T><<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>((T *)out, a, (const T *)b, n));
    DTC_LAUNCHED();
}

void cuda_residual_backward(float *da, float *db, const float *dout, size_t n) {
    if (!n) return;
    residual_backward_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(da, db, dout, n);
    DTC_LAUNCHED();
}
