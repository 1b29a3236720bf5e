/* adamw_dev.c — AdamW with its per-step scalars read from memory when the
 * op runs (ops.h adamw_dev, adamw_multi_dev). On the CPU that memory is the
 * host's and the op runs when it is called, so these are adamw and
 * adamw_multi with lr and t taken from *h: the same bits. (The bias
 * corrections in *h are cuda's; adamw computes them from t as before.) */
#include "kernels/cpu/cpu.h"

void cpu_adamw_dev(float *p, const float *g, float *m, float *v, size_t n, const dt_adamw_hyper *h, float beta1,
                   float beta2, float eps, float weight_decay) {
    cpu_adamw(p, g, m, v, n, h->lr, beta1, beta2, eps, weight_decay, h->t);
}

void cpu_adamw_multi_dev(const dt_adamw_tensor *list, int count, const dt_adamw_hyper *h, float beta1, float beta2,
                         float eps) {
    cpu_adamw_multi(list, count, h->lr, beta1, beta2, eps, h->t);
}
