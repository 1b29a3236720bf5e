/* gelu_erf.cu — GELU, exact (twin of kernels/cpu/gelu_erf.c):
 *     gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))
 * fp32 erff/expf (no fast-math intrinsics: the twin test expects ~1 ulp).
 * Grid-stride loops, so any n works. */
#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

#define GELU_RSQRT2 0.7071067811865476f   /* 1 / sqrt(2) */
#define GELU_RSQRT2PI 0.3989422804014327f /* 1 / sqrt(2 pi) */

template <typename T> __global__ void gelu_erf_forward_kernel(T *out, const T *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = act_load(inp, i);
        act_store(out, i, 0.5f * x * (1.0f + erff(x * GELU_RSQRT2)));
    }
}

/* dinp += dout * (Phi(x) + x phi(x)) */
template <typename T>
__global__ void gelu_erf_backward_kernel(float *dinp, const T *inp, const float *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = act_load(inp, i);
        float cdf = 0.5f * (1.0f + erff(x * GELU_RSQRT2));
        float pdf = GELU_RSQRT2PI * expf(-0.5f * x * x);
        dinp[i] += dout[i] * (cdf + x * pdf);
    }
}

void cuda_gelu_erf_forward(void *out, const void *inp, size_t n, dt_dtype t) {
    if (!n) return;
    ACT_LAUNCH(t, T, gelu_erf_forward_kernel<T><<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>((T *)out, (const T *)inp, n));
    DTC_LAUNCHED();
}

void cuda_gelu_erf_backward(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t) {
    if (!n) return;
    ACT_LAUNCH(t, T, gelu_erf_backward_kernel<T><<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(dinp, (const T *)inp, dout, n));
    DTC_LAUNCHED();
}
