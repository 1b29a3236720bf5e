/* bf16.c — conversions between fp32 and bfloat16, the rounding points of
 * mixed precision (train.precision: bf16).
 *
 * bf16 is the top half of an fp32 (1 sign, 8 exponent, 7 mantissa bits), so
 * widening is a shift and narrowing is a rounding of the low 16 bits: to
 * nearest, ties to even, as tensor cores and PyTorch do. NaN stays a (quiet)
 * NaN with its sign; infinities and values that round past the largest finite
 * bf16 become infinities, as IEEE rounding says. */
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even */
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void cpu_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

void cpu_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

void cpu_round_bf16(float *p, size_t n)
{
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
}

void cpu_acc_bf16(uint16_t *acc, const float *add, size_t n)
{
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) acc[i] = f32_to_bf16(bf16_to_f32(acc[i]) + add[i]);
}
