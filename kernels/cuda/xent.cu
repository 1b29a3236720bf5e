/* xent.cu — softmax cross-entropy over logits[N, Vl], vocab-parallel ready
 * (twin of kernels/cpu/xent.c), fp32:
 *     loss_i = log(sumexp_i) + rowmax_i - target_i,
 *     sumexp_i = sum_j exp(l_ij - rowmax_i)
 * in separate calls so a tensor-parallel strategy can all-reduce rowmax (max),
 * sumexp and target (sum) in between. Rows with target < 0 are ignored.
 *
 * One block per row for the row reductions (a GPT-2 row is 50257 wide); the
 * full logits stay in memory here. Fusing the LM head GEMM with the
 * cross-entropy in chunks (so the [N,V] logits never exist) is a later step
 * that needs a contract change. */
#include "kernels/cuda/common.cuh"

#define XENT_THREADS 256 /* one block per row; gridDim.x allows 2^31-1 rows */

__global__ void xent_rowmax_kernel(float *rowmax, const float *logits, int Vl) {
    __shared__ float sh[32];
    const float *l = logits + (size_t)blockIdx.x * Vl;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) mx = fmaxf(mx, l[j]);
    mx = dtc_block_max(mx, sh);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = mx;
}

__global__ void xent_sumexp_kernel(float *sumexp, const float *logits, const float *rowmax,
                                   int Vl) {
    __shared__ float sh[32];
    const float *l = logits + (size_t)blockIdx.x * Vl;
    float mx = rowmax[blockIdx.x], sum = 0.0f;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) sum += expf(l[j] - mx);
    sum = dtc_block_sum(sum, sh);
    if (threadIdx.x == 0) sumexp[blockIdx.x] = sum;
}

__global__ void xent_target_kernel(float *target, const float *logits, const int *targets, int v0,
                                   int N, int Vl) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int t = targets[i], col = t - v0;
    target[i] = (t >= 0 && col >= 0 && col < Vl) ? logits[(size_t)i * Vl + col] : 0.0f;
}

__global__ void xent_loss_kernel(float *loss, const float *rowmax, const float *sumexp,
                                 const float *target, const int *targets, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    loss[i] = targets[i] < 0 ? 0.0f : logf(sumexp[i]) + rowmax[i] - target[i];
}

/* dlogits = (softmax - onehot) * dloss, one block per row (overwrites). */
__global__ void xent_backward_kernel(float *dlogits, const float *logits, const float *rowmax,
                                     const float *sumexp, const int *targets, const float *dloss,
                                     int v0, int Vl) {
    size_t i = blockIdx.x;
    const float *l = logits + i * Vl;
    float *dl = dlogits + i * Vl;
    int t = targets[i];
    if (t < 0) {
        for (int j = threadIdx.x; j < Vl; j += blockDim.x) dl[j] = 0.0f;
        return;
    }
    float mx = rowmax[i], d = dloss[i], scale = d / sumexp[i];
    int col = t - v0;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
        float g = expf(l[j] - mx) * scale;
        dl[j] = j == col ? g - d : g;
    }
}

void cuda_xent_rowmax(float *rowmax, const float *logits, int N, int Vl) {
    if (N <= 0) return;
    /* Vl = 0 gives -inf, as the CPU loop does: the kernel's loop is empty */
    xent_rowmax_kernel<<<(unsigned)N, XENT_THREADS, 0, dtc.stream>>>(rowmax, logits, Vl);
    DTC_LAUNCHED();
}

void cuda_xent_sumexp(float *sumexp, const float *logits, const float *rowmax, int N, int Vl) {
    if (N <= 0) return;
    xent_sumexp_kernel<<<(unsigned)N, XENT_THREADS, 0, dtc.stream>>>(sumexp, logits, rowmax, Vl);
    DTC_LAUNCHED();
}

void cuda_xent_target(float *target, const float *logits, const int *targets, int v0, int N,
                      int Vl) {
    if (N <= 0) return;
    xent_target_kernel<<<(unsigned)((N + 255) / 256), 256, 0, dtc.stream>>>(target, logits,
                                                                            targets, v0, N, Vl);
    DTC_LAUNCHED();
}

void cuda_xent_loss(float *loss, const float *rowmax, const float *sumexp, const float *target,
                    const int *targets, int N) {
    if (N <= 0) return;
    xent_loss_kernel<<<(unsigned)((N + 255) / 256), 256, 0, dtc.stream>>>(loss, rowmax, sumexp,
                                                                          target, targets, N);
    DTC_LAUNCHED();
}

void cuda_xent_backward(float *dlogits, const float *logits, const float *rowmax,
                        const float *sumexp, const int *targets, const float *dloss, int v0, int N,
                        int Vl) {
    if (N <= 0 || Vl <= 0) return;
    xent_backward_kernel<<<(unsigned)N, XENT_THREADS, 0, dtc.stream>>>(dlogits, logits, rowmax,
                                                                       sumexp, targets, dloss, v0,
                                                                       Vl);
    DTC_LAUNCHED();
}
