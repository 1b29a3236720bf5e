/* bf16.c — conversions between fp32 and bfloat16, the rounding points of
 * mixed precision (train.precision: bf16). The rounding itself (to nearest,
 * ties to even; NaN kept quiet; overflow to Inf) is bf16.h's, one element at
 * a time. */
#include <stdint.h>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"

void cpu_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = cpu_f32_to_bf16(src[i]);
}

void cpu_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = cpu_bf16_to_f32(src[i]);
}

void cpu_round_bf16(float *p, size_t n)
{
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) p[i] = cpu_bf16_to_f32(cpu_f32_to_bf16(p[i]));
}

void cpu_acc_bf16(uint16_t *acc, const float *add, size_t n)
{
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) acc[i] = cpu_f32_to_bf16(cpu_bf16_to_f32(acc[i]) + add[i]);
}
