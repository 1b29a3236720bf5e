/* comm_reduce.c — the element-wise kernels of the reductions (fp32, and bf16
 * summed in fp32 and rounded once), and bf16 <-> fp32.
 *
 * Work goes in blocks that stay in L1: the block's first source is copied into
 * an accumulator, every other source is folded in (vectorised across elements,
 * never across sources, so each element is summed in source order and every
 * rank gets the same bits), then the block is written out. */
#include <math.h>
#include <string.h>

#include "runtime/comm/comm_internal.h"

enum { BLOCK = 1024 };

void comm_reduce_f32(float *dst, float *dst2, const float *const *src, int nsrc, size_t n,
                     comm_op op, int avg_div)
{
    float acc[BLOCK] __attribute__((aligned(64)));
    for (size_t base = 0; base < n; base += BLOCK) {
        size_t m = n - base < BLOCK ? n - base : BLOCK;
        memcpy(acc, src[0] + base, m * sizeof(float));
        for (int k = 1; k < nsrc; k++) {
            const float *s = src[k] + base;
            if (op == COMM_MAX) {
#pragma omp simd
                for (size_t i = 0; i < m; i++)
                    acc[i] = (s[i] > acc[i] || s[i] != s[i]) ? s[i] : acc[i]; /* NaN wins */
            } else {
#pragma omp simd
                for (size_t i = 0; i < m; i++)
                    acc[i] += s[i];
            }
        }
        if (op == COMM_AVG && avg_div > 1) {
            float d = (float)avg_div;
#pragma omp simd
            for (size_t i = 0; i < m; i++)
                acc[i] /= d;
        }
        memcpy(dst + base, acc, m * sizeof(float));
        if (dst2)
            memcpy(dst2 + base, acc, m * sizeof(float));
    }
}

void comm_reduce_bf16(uint16_t *dst, uint16_t *dst2, const uint16_t *const *src, int nsrc,
                      size_t n, comm_op op, int avg_div)
{
    float acc[BLOCK] __attribute__((aligned(64))), in[BLOCK] __attribute__((aligned(64)));
    for (size_t base = 0; base < n; base += BLOCK) {
        size_t m = n - base < BLOCK ? n - base : BLOCK;
        comm_bf16_to_f32(acc, src[0] + base, m);
        for (int k = 1; k < nsrc; k++) {
            comm_bf16_to_f32(in, src[k] + base, m);
            if (op == COMM_MAX) {
#pragma omp simd
                for (size_t i = 0; i < m; i++)
                    acc[i] = (in[i] > acc[i] || in[i] != in[i]) ? in[i] : acc[i]; /* NaN wins */
            } else {
#pragma omp simd
                for (size_t i = 0; i < m; i++)
                    acc[i] += in[i];
            }
        }
        if (op == COMM_AVG && avg_div > 1) {
            float d = (float)avg_div;
#pragma omp simd
            for (size_t i = 0; i < m; i++)
                acc[i] /= d;
        }
        comm_f32_to_bf16(dst + base, acc, m);
        if (dst2)
            memcpy(dst2 + base, dst + base, m * sizeof(uint16_t));
    }
}

void comm_bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, sizeof u);
    }
}

void comm_f32_to_bf16(uint16_t *dst, const float *src, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u)      /* NaN: keep it a (quiet) NaN */
            dst[i] = (uint16_t)((u >> 16) | 0x40u);
        else                                       /* round to nearest, ties to even */
            dst[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}
