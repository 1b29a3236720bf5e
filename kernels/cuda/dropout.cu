/* dropout.cu — the twin of kernels/cpu/dropout.c (ops.h dropout_forward /
 * dropout_backward): the same Philox4x32-10 draw per element (Random123's,
 * which runs on the device as on the host), one thread per element. */
#include <Random123/philox.h>

#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

__device__ __forceinline__ int dropout_kept(uint64_t key, unsigned long long index, float p) {
    philox4x32_ctr_t c = {{(uint32_t)index, (uint32_t)(index >> 32), 0, 0}};
    philox4x32_key_t k = {{(uint32_t)key, (uint32_t)(key >> 32)}};
    philox4x32_ctr_t r = philox4x32(c, k);
    return (float)(r.v[0] >> 8) * (1.0f / 16777216.0f) >= p;
}

template <typename T>
__global__ void dropout_forward_kernel(T *out, const T *x, const long long *rows, int N, int W, long long cols,
                                       long long col0, uint64_t key, float p, float s) {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)N * W) return;
    long n = e / W, j = e % W;
    unsigned long long index = (unsigned long long)rows[n] * (unsigned long long)cols + (unsigned long long)(col0 + j);
    act_store(out, (size_t)e, dropout_kept(key, index, p) ? act_load(x, (size_t)e) * s : 0.0f);
}

__global__ void dropout_backward_kernel(float *dx, const float *dout, const long long *rows, int N, int W,
                                        long long cols, long long col0, uint64_t key, float p, float s) {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)N * W) return;
    long n = e / W, j = e % W;
    unsigned long long index = (unsigned long long)rows[n] * (unsigned long long)cols + (unsigned long long)(col0 + j);
    if (dropout_kept(key, index, p)) dx[e] += dout[e] * s;
}

void cuda_dropout_forward(void *out, const void *x, const long long *rows, int N, int W, long long cols,
                          long long col0, uint64_t key, float p, dt_dtype t) {
    long n = (long)N * W;
    if (n <= 0) return;
    float s = 1.0f / (1.0f - p);
    unsigned grid = (unsigned)((n + 255) / 256);
    ACT_LAUNCH(t, T, dropout_forward_kernel<T><<<grid, 256, 0, dtc.stream>>>((T *)out, (const T *)x, rows, N, W, cols,
                                                                             col0, key, p, s));
    DTC_LAUNCHED();
}

void cuda_dropout_backward(float *dx, const float *dout, const long long *rows, int N, int W, long long cols,
                           long long col0, uint64_t key, float p) {
    long n = (long)N * W;
    if (n <= 0) return;
    float s = 1.0f / (1.0f - p);
    unsigned grid = (unsigned)((n + 255) / 256);
    dropout_backward_kernel<<<grid, 256, 0, dtc.stream>>>(dx, dout, rows, N, W, cols, col0, key, p, s);
    DTC_LAUNCHED();
}
