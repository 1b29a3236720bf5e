/* bf16.cuh — the fp32 <-> bfloat16 conversions of one element on the device
 * (twin of kernels/cpu/bf16.h), shared by the kernels that round where they
 * store (bf16.cu's conversions, adamw.cu's mixed-precision step): round to
 * nearest, ties to even; NaN stays a quiet NaN, overflow gives Inf. The bit
 * arithmetic is the CPU's, written out rather than __float2bfloat16_rn (which
 * rounds the same for every number), so the two backends agree bit for bit on
 * every input, NaN payloads included. */
#ifndef DTRUN_KERNELS_CUDA_BF16_CUH
#define DTRUN_KERNELS_CUDA_BF16_CUH

#include <cstdint>

__device__ __forceinline__ uint16_t dtc_f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float dtc_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

#endif
