/* adamw_dev.c — the multi-tensor AdamW steps with their per-step scalars
 * read from memory when the op runs (ops.h adamw_multi_dev,
 * adamw_mixed_multi_dev). On the CPU that memory is the host's and the op
 * runs when it is called, so these are adamw_multi and adamw_mixed_multi
 * with lr, t and the gradient scale taken from it: the same bits. (The bias
 * corrections in *h are cuda's; adamw computes them from t as before.) */
#include "kernels/cpu/cpu.h"

void cpu_adamw_multi_dev(const dt_adamw_tensor *list, int count, const dt_adamw_hyper *h, float beta1, float beta2,
                         float eps) {
    cpu_adamw_multi(list, count, h->lr, beta1, beta2, eps, h->t);
}

void cpu_adamw_mixed_multi_dev(const dt_adamw_mixed_tensor *list, int count, int grad_bf16, const float *grad_scale,
                               const dt_adamw_hyper *h, float beta1, float beta2, float eps) {
    cpu_adamw_mixed_multi(list, count, grad_bf16, grad_scale ? *grad_scale : 1.0f, h->lr, beta1, beta2, eps, h->t);
}
