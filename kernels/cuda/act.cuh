/* act.cuh — an activation element in either storage type (ops.h dt_dtype),
 * for kernels templated on it: float (fp32) or uint16_t (bf16). A kernel
 * computes in fp32: act_load widens (exact), act_store rounds once, the
 * CPU's rounding (bf16.cuh), so a bf16 kernel gives the bits its CPU twin
 * (kernels/cpu/act.c: the fp32 kernel, then round_bf16 of what it stores)
 * gives, up to the kernel's own fp32 rounding. */
#ifndef DTRUN_KERNELS_CUDA_ACT_CUH
#define DTRUN_KERNELS_CUDA_ACT_CUH

#include <cstdint>

#include "kernels/cuda/bf16.cuh"

__device__ __forceinline__ float act_load(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float act_load(const uint16_t *p, size_t i) { return dtc_bf16_to_f32(p[i]); }
__device__ __forceinline__ void act_store(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void act_store(uint16_t *p, size_t i, float v) { p[i] = dtc_f32_to_bf16(v); }

/* ACT_LAUNCH(t, T, statements): the statements with T the element type the
 * call's dt_dtype t names (uint16_t for bf16, float for fp32), written once:
 *     ACT_LAUNCH(t, T, kernel<T><<<grid, block, 0, dtc.stream>>>((T *)out, n));
 */
#define ACT_LAUNCH(t, T, ...)          \
    do {                               \
        if ((t) == DT_BF16) {          \
            typedef uint16_t T;        \
            __VA_ARGS__;               \
        } else {                       \
            typedef float T;           \
            __VA_ARGS__;               \
        }                              \
    } while (0)

#endif
