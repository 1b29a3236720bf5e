/* rows_copy.cu — the twin of kernels/cpu/rows_copy.c: strided row copies
 * (ops.h rows_copy), one thread per element. */
#include "kernels/cuda/common.cuh"

/* T: the elements' type (a copy of the stored bits; accumulate: fp32 only) */
template <typename T>
__global__ void rows_copy_kernel(T *dst, int ldd, const T *src, int lds, int N, int W, int accumulate) {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)N * W) return;
    long n = e / W, c = e % W;
    T v = src[n * lds + c];
    if (accumulate) dst[n * ldd + c] += v;
    else dst[n * ldd + c] = v;
}

void cuda_rows_copy(void *dst, int ldd, const void *src, int lds, int N, int W, int accumulate, dt_dtype t) {
    long n = (long)N * W;
    if (n <= 0) return;
    if (t == DT_BF16 && accumulate) dtc_fatal(__FILE__, __LINE__, "rows_copy", "accumulates fp32 only");
    unsigned grid = (unsigned)((n + 255) / 256);
    if (t == DT_BF16)
        rows_copy_kernel<uint16_t><<<grid, 256, 0, dtc.stream>>>((uint16_t *)dst, ldd, (const uint16_t *)src, lds, N,
                                                                 W, 0);
    else
        rows_copy_kernel<float><<<grid, 256, 0, dtc.stream>>>((float *)dst, ldd, (const float *)src, lds, N, W,
                                                             accumulate);
    DTC_LAUNCHED();
}
