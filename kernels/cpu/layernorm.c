/* layernorm.c — LayerNorm over the last dimension, as in llm.c (eps: the
 * model's model.norm_eps, 1e-5 for GPT-2, 1e-12 for Hugging Face's ViT),
 * and the arithmetic RMSNorm shares with it (rmsnorm.c).
 *
 * Forward, per row x of C values:
 *     mean = sum(x)/C,  var = sum((x-mean)^2)/C,  rstd = 1/sqrt(var + eps)
 *     n = (x - mean) * rstd,   out = n * w + b
 * mean and rstd are saved so backward need not recompute them.
 * RMSNorm is the same with mean 0 and no bias (mean == NULL, b == NULL
 * below): var becomes mean(x^2), n = x * rstd (x - 0 is x exactly, so the
 * shared loops compute RMSNorm's own formula). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

void cpu_norm_forward_f32(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          int N, int C, float eps) {
    if (C <= 0) return;
    #pragma omp parallel for if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float *o = out + (size_t)i * C;
        /* Two passes (mean, then squared deviations): no cancellation when
         * the mean is large compared with the spread. */
        float m = 0.0f; /* RMSNorm: no mean */
        if (mean) {
            float sum = 0.0f;
            #pragma omp simd reduction(+:sum)
            for (int c = 0; c < C; c++) sum += x[c];
            m = sum / C;
        }
        float sq = 0.0f;
        #pragma omp simd reduction(+:sq)
        for (int c = 0; c < C; c++) { float d = x[c] - m; sq += d * d; }
        float s = 1.0f / sqrtf(sq / C + eps);
        if (b) {
            #pragma omp simd
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        } else {
            #pragma omp simd
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c];
        }
        if (mean) mean[i] = m;
        rstd[i] = s;
    }
}

/* Backward. With g = dout * w (the gradient reaching n):
 *     db += dout,   dw += dout * n
 *     dx += rstd * (g - mean(g) - n * mean(g * n))
 * (the two means are the gradients through mean and through rstd).
 * RMSNorm (mean == NULL, db == NULL): no gradient through a mean, so
 *     dx += rstd * (g - n * mean(g * n)),   dw += dout * n.
 * dx rows are independent; dw and db sum over rows, so each thread sums its
 * rows into a private buffer and the buffers are added in thread order, which
 * keeps the result deterministic for a given thread count. */
void cpu_norm_backward_f32(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int nthreads = (size_t)N * C > CPU_PAR_MIN ? omp_get_max_threads() : 1;
    float *partial = calloc((size_t)nthreads * 2 * C, sizeof(float));
    if (!partial) return;
    #pragma omp parallel num_threads(nthreads)
    {
        int tid = omp_get_thread_num(), nt = omp_get_num_threads();
        float *pdw = partial + (size_t)tid * 2 * C;
        float *pdb = pdw + C;
        int i0 = (int)((long long)N * tid / nt), i1 = (int)((long long)N * (tid + 1) / nt);
        for (int i = i0; i < i1; i++) {
            const float *x = inp + (size_t)i * C;
            const float *d = dout + (size_t)i * C;
            float *dx = dinp + (size_t)i * C;
            float m = mean ? mean[i] : 0.0f, s = rstd[i];
            float g_mean = 0.0f, gn_mean = 0.0f;
            #pragma omp simd reduction(+:g_mean, gn_mean)
            for (int c = 0; c < C; c++) {
                float n = (x[c] - m) * s;
                float g = w[c] * d[c];
                g_mean += g;
                gn_mean += g * n;
            }
            g_mean = mean ? g_mean / C : 0.0f; /* RMSNorm: g - 0 is g exactly */
            gn_mean /= C;
            #pragma omp simd
            for (int c = 0; c < C; c++) {
                float n = (x[c] - m) * s;
                float g = w[c] * d[c];
                pdb[c] += d[c];
                pdw[c] += n * d[c];
                dx[c] += s * (g - g_mean - n * gn_mean);
            }
        }
    }
    for (int t = 0; t < nthreads; t++) {
        const float *pdw = partial + (size_t)t * 2 * C;
        const float *pdb = pdw + C;
        #pragma omp simd
        for (int c = 0; c < C; c++) dw[c] += pdw[c];
        if (db) {
            #pragma omp simd
            for (int c = 0; c < C; c++) db[c] += pdb[c];
        }
    }
    free(partial);
}

/* The activations (inp, out) in the run's type (act.c). */
void cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b,
                           int N, int C, float eps, dt_dtype t)
{
    size_t n = (size_t)N * (size_t)C;
    float *o = cpu_act_out(0, out, n, t);
    cpu_norm_forward_f32(o, mean, rstd, cpu_act_in(1, inp, n, t), w, b, N, C, eps);
    cpu_act_store(out, o, n, t);
}

void cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const void *inp, const float *w,
                            const float *mean, const float *rstd, int N, int C, dt_dtype t)
{
    size_t n = (size_t)N * (size_t)C;
    cpu_norm_backward_f32(dinp, dw, db, dout, cpu_act_in(0, inp, n, t), w, mean, rstd, N, C);
}
