/* loss_dev.cu — the loss where the ops keep it (twin of kernels/cpu/
 * loss_dev.c; ops.h, "the step without the host").
 *
 * loss_sum_add sums in the host loop's order — one double, from 0, element
 * by element — on one thread, so a step replayed as a graph reports the very
 * loss the model's host sum (runtime/model/gpt.c) gives the step issued op
 * by op: IEEE double adds of the same floats in the same order. The price is
 * a chain of N dependent adds (a few cycles each: tens of microseconds for a
 * micro-batch of 16k tokens, against a GPT-2 step of tens of milliseconds;
 * estimated, not measured). A tree would be faster and differ from the host
 * sum in the last bits. */
#include "kernels/cuda/common.cuh"

__global__ void loss_sum_add_kernel(double *acc, const float *__restrict__ loss, int N) {
    double sum = 0;
#pragma unroll 8
    for (int i = 0; i < N; i++) sum += loss[i];
    *acc += sum;
}

__global__ void loss_seed_kernel(float *dloss, const int *__restrict__ targets, float scale, int N) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x)
        dloss[i] = targets[i] >= 0 ? scale : 0.0f;
}

void cuda_loss_sum_add(double *acc, const float *loss, int N) {
    if (N <= 0) return;
    loss_sum_add_kernel<<<1, 1, 0, dtc.stream>>>(acc, loss, N);
    DTC_LAUNCHED();
}

void cuda_loss_seed(float *dloss, const int *targets, float scale, int N) {
    if (N <= 0) return;
    loss_seed_kernel<<<dtc_blocks((size_t)N, 256), 256, 0, dtc.stream>>>(dloss, targets, scale, N);
    DTC_LAUNCHED();
}
