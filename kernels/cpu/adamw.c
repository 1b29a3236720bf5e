/* adamw.c — AdamW (Loshchilov & Hutter) on one flat tensor, one fused pass:
 *     m = b1 m + (1-b1) g,        v = b2 v + (1-b2) g^2
 *     mhat = m / (1-b1^t),        vhat = v / (1-b2^t)
 *     p -= lr (mhat / (sqrt(vhat) + eps) + wd p)
 * Weight decay is decoupled (applied to p, not folded into g). */
#include <math.h>

#include "kernels/cpu/cpu.h"

void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
               float beta1, float beta2, float eps, float weight_decay, int t) {
    /* bias corrections in double: 1 - b2^t is tiny for small t */
    float corr1 = (float)(1.0 - pow(beta1, t));
    float corr2 = (float)(1.0 - pow(beta2, t));
    #pragma omp parallel for simd if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / corr1, vhat = vi / corr2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p[i]);
    }
}

/* The multi-tensor step: one tensor after the other (ops.h adamw_multi). */
void cpu_adamw_multi(const dt_adamw_tensor *list, int count, float lr, float beta1, float beta2, float eps,
                     int t) {
    for (int k = 0; k < count; k++)
        cpu_adamw(list[k].p, list[k].g, list[k].m, list[k].v, list[k].n, lr, beta1, beta2, eps,
                  list[k].weight_decay, t);
}
