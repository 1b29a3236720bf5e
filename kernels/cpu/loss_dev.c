/* loss_dev.c — the loss where the ops keep it (ops.h, "the step without the
 * host"): the micro-batch's summed loss added into a scalar the ops hold,
 * and the backward's seed made from the targets the ops hold. On the CPU
 * both are the host loops the model runs without train.cuda_graphs
 * (runtime/model/gpt.c, vit.c), written once more here: the same bits. */
#include "kernels/cpu/cpu.h"

/* The host loop's order: one double, from 0, index by index. */
void cpu_loss_sum_add(double *acc, const float *loss, int N) {
    double sum = 0;
    for (int i = 0; i < N; i++) sum += loss[i];
    *acc += sum;
}

void cpu_loss_seed(float *dloss, const int *targets, float scale, int N) {
    for (int i = 0; i < N; i++) dloss[i] = targets[i] >= 0 ? scale : 0.0f;
}
