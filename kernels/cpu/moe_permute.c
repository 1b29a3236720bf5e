/* moe_permute.c — a mixture of experts' token rows to and from the
 * permuted order (ops.h moe_permute, moe_unpermute and their backwards).
 * Every direction gathers (each output row reads its inputs), so nothing is
 * written twice and the sums are in a fixed order: the permute's backward
 * and the unpermute go through each token's choices, the unpermute's
 * backward through each permuted row's one choice. */
#include <string.h>

#include "kernels/cpu/cpu.h"

void cpu_moe_permute(void *out, const void *x, const int *src, int M, int C, dt_dtype t)
{
    size_t row = (size_t)C * dt_dtype_size(t);
    #pragma omp parallel for if ((size_t)M * C > CPU_PAR_MIN)
    for (int i = 0; i < M; i++) memcpy((char *)out + (size_t)i * row, (const char *)x + (size_t)src[i] * row, row);
}

void cpu_moe_permute_backward(float *dx, const float *dout, const int *dst, int N, int k, int C)
{
    #pragma omp parallel for if ((size_t)N * C > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *d = dx + (size_t)n * C;
        for (int j = 0; j < k; j++) {
            int r = dst[(size_t)n * k + j];
            if (r < 0) continue;
            const float *g = dout + (size_t)r * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

/* y's rows as fp32: widened one row at a time where y is bf16 */
static const float *row_f32(float *buf, const void *y, int r, int C, dt_dtype t)
{
    if (t == DT_F32) return (const float *)y + (size_t)r * C;
    const uint16_t *h = (const uint16_t *)y + (size_t)r * C;
    for (int c = 0; c < C; c++) {
        uint32_t u = (uint32_t)h[c] << 16;
        memcpy(&buf[c], &u, sizeof u);
    }
    return buf;
}

void cpu_moe_unpermute(float *out, const void *y, const int *dst, const float *w, int N, int k, int C, dt_dtype t,
                       int accumulate)
{
    #pragma omp parallel if ((size_t)N * C > CPU_PAR_MIN)
    {
        float *buf = t == DT_F32 ? NULL : cpu_alloc((size_t)C * sizeof(float));
        #pragma omp for
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * C;
            if (!accumulate) memset(o, 0, (size_t)C * sizeof(float));
            for (int j = 0; j < k; j++) {
                int r = dst[(size_t)n * k + j];
                if (r < 0 || (t != DT_F32 && !buf)) continue;
                const float *v = row_f32(buf, y, r, C, t);
                float wj = w[(size_t)n * k + j];
                #pragma omp simd
                for (int c = 0; c < C; c++) o[c] += wj * v[c];
            }
        }
        cpu_free(buf);
    }
}

void cpu_moe_unpermute_backward(float *dy, float *dw, const float *dout, const void *y, const int *dst, const float *w,
                                int N, int k, int C, dt_dtype t)
{
    #pragma omp parallel if ((size_t)N * C > CPU_PAR_MIN)
    {
        float *buf = t == DT_F32 ? NULL : cpu_alloc((size_t)C * sizeof(float));
        #pragma omp for
        for (int n = 0; n < N; n++) {
            const float *g = dout + (size_t)n * C;
            for (int j = 0; j < k; j++) {
                int r = dst[(size_t)n * k + j];
                if (r < 0) continue;
                if (dy) {
                    float wj = w[(size_t)n * k + j], *d = dy + (size_t)r * C;
                    #pragma omp simd
                    for (int c = 0; c < C; c++) d[c] += wj * g[c];
                }
                if (dw && (t == DT_F32 || buf)) {
                    const float *v = row_f32(buf, y, r, C, t);
                    float dot = 0.0f;
                    for (int c = 0; c < C; c++) dot += g[c] * v[c];
                    dw[(size_t)n * k + j] += dot;
                }
            }
        }
        cpu_free(buf);
    }
}
