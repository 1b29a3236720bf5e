/* adamw.c — AdamW (Loshchilov & Hutter) on one flat tensor, one fused pass:
 *     m = b1 m + (1-b1) g,        v = b2 v + (1-b2) g^2
 *     mhat = m / (1-b1^t),        vhat = v / (1-b2^t)
 *     p -= lr (mhat / (sqrt(vhat) + eps) + wd p)
 * Weight decay is decoupled (applied to p, not folded into g).
 *
 * The multi-tensor steps (fp32, and bf16 mixed precision's) run each tensor
 * through the same per-element function, adamw_elem, as adamw does: the same
 * expressions, so the same bits (the build is ISO C, -std=c11, where GCC
 * contracts no a*b+c into an FMA, so a loop's vectorization cannot change a
 * result either). */
#include <math.h>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"

/* One element: updates *m and *v from gradient gi, returns the new parameter. */
static inline float adamw_elem(float pi, float gi, float *m, float *v, float lr, float beta1, float beta2,
                               float eps, float weight_decay, float corr1, float corr2)
{
    float mi = beta1 * *m + (1.0f - beta1) * gi;
    float vi = beta2 * *v + (1.0f - beta2) * gi * gi;
    *m = mi;
    *v = vi;
    float mhat = mi / corr1, vhat = vi / corr2;
    return pi - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * pi);
}

void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
               float beta1, float beta2, float eps, float weight_decay, int t) {
    /* bias corrections in double (1 - b2^t is tiny for small t), as cuda's */
    dt_adamw_hyper h = dt_adamw_hyper_of(lr, beta1, beta2, t);
    const float corr1 = h.corr1, corr2 = h.corr2;
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        p[i] = adamw_elem(p[i], g[i], &m[i], &v[i], lr, beta1, beta2, eps, weight_decay, corr1, corr2);
}

/* The multi-tensor step: one tensor after the other (ops.h adamw_multi). */
void cpu_adamw_multi(const dt_adamw_tensor *list, int count, float lr, float beta1, float beta2, float eps,
                     int t) {
    for (int k = 0; k < count; k++)
        cpu_adamw(list[k].p, list[k].g, list[k].m, list[k].v, list[k].n, lr, beta1, beta2, eps,
                  list[k].weight_decay, t);
}

/* The mixed-precision step (ops.h adamw_mixed_multi), one tensor after the
 * other, one pass over each: the gradient widened (from_bf16's exact shift, or
 * read as fp32), scaled as scale does (g * s, only when s != 1), adamw_elem on
 * the master, the master rounded as to_bf16 into the parameters. */
void cpu_adamw_mixed_multi(const dt_adamw_mixed_tensor *list, int count, int grad_bf16, float grad_scale,
                           float lr, float beta1, float beta2, float eps, int t) {
    dt_adamw_hyper h = dt_adamw_hyper_of(lr, beta1, beta2, t);
    const float corr1 = h.corr1, corr2 = h.corr2;
    const int scaled = grad_scale != 1.0f;
    for (int k = 0; k < count; k++) {
        float *w = list[k].master, *m = list[k].m, *v = list[k].v, wd = list[k].weight_decay;
        uint16_t *p = list[k].p;
        const uint16_t *gh = list[k].g;
        const float *gf = list[k].g;
        size_t n = list[k].n;
        #pragma omp parallel for simd if (n > CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            float gi = grad_bf16 ? cpu_bf16_to_f32(gh[i]) : gf[i];
            if (scaled) gi *= grad_scale;
            float wi = adamw_elem(w[i], gi, &m[i], &v[i], lr, beta1, beta2, eps, wd, corr1, corr2);
            w[i] = wi;
            p[i] = cpu_f32_to_bf16(wi);
        }
    }
}
