/* dropout.c — dropout from counter-based draws (ops.h dropout_forward /
 * dropout_backward): each element's keep or drop is Philox4x32-10 of (key,
 * its index in the whole tensor), the draw runtime/rng.h's rng_uniform
 * makes, so the mask needs no state and every shard draws its own part. */
#include <Random123/philox.h>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"

/* 1 when element `index` is kept: its uniform draw (24 bits) >= p. */
static int kept(uint64_t key, unsigned long long index, float p)
{
    philox4x32_ctr_t c = {{(uint32_t)index, (uint32_t)(index >> 32), 0, 0}};
    philox4x32_key_t k = {{(uint32_t)key, (uint32_t)(key >> 32)}};
    philox4x32_ctr_t r = philox4x32(c, k);
    return (float)(r.v[0] >> 8) * (1.0f / 16777216.0f) >= p;
}

void cpu_dropout_forward(void *out, const void *x, const long long *rows, int N, int W, long long cols, long long col0,
                         uint64_t key, float p, dt_dtype t)
{
    float s = 1.0f / (1.0f - p);
    #pragma omp parallel for schedule(static) if ((size_t)N * (size_t)W > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        unsigned long long base = (unsigned long long)rows[n] * (unsigned long long)cols + (unsigned long long)col0;
        size_t o = (size_t)n * (size_t)W;
        for (int j = 0; j < W; j++) {
            int keep = kept(key, base + (unsigned long long)j, p);
            if (t == DT_BF16) {
                float v = cpu_bf16_to_f32(((const uint16_t *)x)[o + j]);
                ((uint16_t *)out)[o + j] = cpu_f32_to_bf16(keep ? v * s : 0.0f);
            } else {
                ((float *)out)[o + j] = keep ? ((const float *)x)[o + j] * s : 0.0f;
            }
        }
    }
}

void cpu_dropout_backward(float *dx, const float *dout, const long long *rows, int N, int W, long long cols,
                          long long col0, uint64_t key, float p)
{
    float s = 1.0f / (1.0f - p);
    #pragma omp parallel for schedule(static) if ((size_t)N * (size_t)W > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        unsigned long long base = (unsigned long long)rows[n] * (unsigned long long)cols + (unsigned long long)col0;
        size_t o = (size_t)n * (size_t)W;
        for (int j = 0; j < W; j++)
            if (kept(key, base + (unsigned long long)j, p)) dx[o + j] += dout[o + j] * s;
    }
}
