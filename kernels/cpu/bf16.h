/* bf16.h — the fp32 <-> bfloat16 conversions of one element, shared by the
 * CPU kernels that round where they store (bf16.c's conversions, adamw.c's
 * mixed-precision step), so every rounding point rounds the same way.
 *
 * bf16 is the top half of an fp32 (1 sign, 8 exponent, 7 mantissa bits), so
 * widening is a shift and narrowing is a rounding of the low 16 bits: to
 * nearest, ties to even, as tensor cores and PyTorch do. NaN stays a (quiet)
 * NaN with its sign; infinities and values that round past the largest finite
 * bf16 become infinities, as IEEE rounding says. */
#ifndef DTRUN_KERNELS_CPU_BF16_H
#define DTRUN_KERNELS_CPU_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t cpu_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even */
    return (uint16_t)(u >> 16);
}

static inline float cpu_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
