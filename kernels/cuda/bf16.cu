/* bf16.cu — fp32 <-> bfloat16 conversions (twin of kernels/cpu/bf16.c):
 * round to nearest, ties to even; NaN stays a quiet NaN, overflow gives Inf,
 * one element at a time as bf16.cuh rounds (the CPU's bit arithmetic).
 * Grid-stride loops, so any n works. */
#include <cstdint>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/common.cuh"

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = dtc_f32_to_bf16(src[i]);
}

__global__ void from_bf16_kernel(float *dst, const uint16_t *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = dtc_bf16_to_f32(src[i]);
}

__global__ void round_bf16_kernel(float *p, size_t n) {
    GRID_STRIDE(i, n) p[i] = dtc_bf16_to_f32(dtc_f32_to_bf16(p[i]));
}

__global__ void acc_bf16_kernel(uint16_t *acc, const float *add, size_t n) {
    GRID_STRIDE(i, n) acc[i] = dtc_f32_to_bf16(dtc_bf16_to_f32(acc[i]) + add[i]);
}

void cuda_to_bf16(uint16_t *dst, const float *src, size_t n) {
    if (!n) return;
    to_bf16_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(dst, src, n);
    DTC_LAUNCHED();
}

void cuda_from_bf16(float *dst, const uint16_t *src, size_t n) {
    if (!n) return;
    from_bf16_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(dst, src, n);
    DTC_LAUNCHED();
}

void cuda_round_bf16(float *p, size_t n) {
    if (!n) return;
    round_bf16_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(p, n);
    DTC_LAUNCHED();
}

void cuda_acc_bf16(uint16_t *acc, const float *add, size_t n) {
    if (!n) return;
    acc_bf16_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(acc, add, n);
    DTC_LAUNCHED();
}
