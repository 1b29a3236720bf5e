/* gelu.cu — GELU with GPT-2's tanh approximation (twin of kernels/cpu/gelu.c):
 *     gelu(x) = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
 * fp32, tanhf (no fast-math intrinsics: the twin test expects ~1 ulp, and the
 * kernel is memory-bound anyway). Grid-stride loops, so any n works. */
#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBE 0.044715f

template <typename T> __global__ void gelu_forward_kernel(T *out, const T *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = act_load(inp, i);
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        act_store(out, i, 0.5f * x * (1.0f + tanhf(u)));
    }
}

/* Exact derivative of the approximation (dinp += dout * d/dx):
 *     d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
template <typename T> __global__ void gelu_backward_kernel(float *dinp, const T *inp, const float *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = act_load(inp, i);
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float th = tanhf(u);
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
        dinp[i] += dout[i] * grad;
    }
}

void cuda_gelu_forward(void *out, const void *inp, size_t n, dt_dtype t) {
    if (!n) return;
    ACT_LAUNCH(t, T, gelu_forward_kernel<T><<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>((T *)out, (const T *)inp, n));
    DTC_LAUNCHED();
}

void cuda_gelu_backward(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t) {
    if (!n) return;
    ACT_LAUNCH(t, T, gelu_backward_kernel<T><<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(dinp, (const T *)inp, dout, n));
    DTC_LAUNCHED();
}
