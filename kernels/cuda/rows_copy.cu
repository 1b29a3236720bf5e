/* rows_copy.cu — the twin of kernels/cpu/rows_copy.c: strided row copies
 * (ops.h rows_copy), one thread per element. */
#include "kernels/cuda/common.cuh"

__global__ void rows_copy_kernel(float *dst, int ldd, const float *src, int lds, int N, int W, int accumulate) {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)N * W) return;
    long n = e / W, c = e % W;
    float v = src[n * lds + c];
    if (accumulate) dst[n * ldd + c] += v;
    else dst[n * ldd + c] = v;
}

void cuda_rows_copy(float *dst, int ldd, const float *src, int lds, int N, int W, int accumulate) {
    long n = (long)N * W;
    if (n <= 0) return;
    rows_copy_kernel<<<(unsigned)((n + 255) / 256), 256, 0, dtc.stream>>>(dst, ldd, src, lds, N, W, accumulate);
    DTC_LAUNCHED();
}
