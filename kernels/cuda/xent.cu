/* xent.cu — softmax cross-entropy over logits[N, Vl], vocab-parallel ready
 * (twin of kernels/cpu/xent.c), fp32:
 *     loss_i = log(sumexp_i) + rowmax_i - target_i,
 *     sumexp_i = sum_j exp(l_ij - rowmax_i)
 * xent_stats reads each row once (the chunked LM head's chunk, [rows, V_l]):
 * one block per row, each thread keeps an online pair (m, s) over its
 * strided columns (s relative to m, rescaled by exp(old - new) when m grows),
 * and the pairs combine by the same rule, m = max(m1, m2), s = s1 exp(m1 - m)
 * + s2 exp(m2 - m): through warp shuffles, then the warps' pairs through
 * shared memory. The tree is fixed by the block size, so a row's result is the
 * same bits run after run (deterministic for a given shape); it is not the
 * CPU's (blocks of columns there), which it matches within fp32 rounding.
 * Tensor parallelism combines the ranks' pairs by the same rule
 * (xent_rescale after a MAX all-reduce). Rows with target < 0 are ignored. */
#include "kernels/cuda/common.cuh"

#define XENT_THREADS 256 /* one block per row; gridDim.x allows 2^31-1 rows */

/* s relative to max m, made relative to `to` >= m: exactly s when they are
 * equal (-inf == -inf too, whose difference would be NaN). */
__device__ __forceinline__ float xent_rescale_sum(float s, float m, float to) {
    return m == to ? s : s * expf(m - to);
}

/* (m, s) combined with (m2, s2); the same bits in either order (fmaxf and +
 * commute), so every lane of a butterfly ends with the same pair. */
__device__ __forceinline__ void xent_pair_add(float &m, float &s, float m2, float s2) {
    float to = fmaxf(m, m2);
    s = xent_rescale_sum(s, m, to) + xent_rescale_sum(s2, m2, to);
    m = to;
}

__device__ __forceinline__ void xent_warp_pair(float &m, float &s) {
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        xent_pair_add(m, s, m2, s2);
    }
}

__global__ void xent_stats_kernel(float *rowmax, float *sumexp, float *target, const float *logits,
                                  const int *targets, int v0, int Vl) {
    __shared__ float sh_m[32], sh_s[32];
    const float *l = logits + (size_t)blockIdx.x * Vl;
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
        float x = l[j];
        if (x > m) { /* rare after the first few columns: one exp either way */
            s = xent_rescale_sum(s, m, x) + 1.0f;
            m = x;
        } else {
            /* m = -inf: every value so far -inf or NaN; shift by 0 so exp(-inf)
             * adds 0 and a NaN reaches the sum, as on the CPU */
            s += expf(x - (m > -INFINITY ? m : 0.0f));
        }
    }
    xent_warp_pair(m, s);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        sh_m[warp] = m;
        sh_s[warp] = s;
    }
    __syncthreads();
    if (warp != 0) return;
    m = lane < nw ? sh_m[lane] : -INFINITY;
    s = lane < nw ? sh_s[lane] : 0.0f;
    xent_warp_pair(m, s);
    if (lane == 0) {
        size_t i = blockIdx.x;
        int t = targets[i], col = t - v0;
        rowmax[i] = m;
        sumexp[i] = s;
        target[i] = (t >= 0 && col >= 0 && col < Vl) ? l[col] : 0.0f;
    }
}

__global__ void xent_rescale_kernel(float *sumexp, const float *from_max, const float *to_max, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) sumexp[i] = xent_rescale_sum(sumexp[i], from_max[i], to_max[i]);
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

void cuda_xent_stats(float *rowmax, float *sumexp, float *target, const float *logits,
                     const int *targets, int v0, int N, int Vl) {
    if (N <= 0) return;
    /* Vl = 0 gives (-inf, 0, 0), as the CPU loop does: the column loop is empty */
    xent_stats_kernel<<<(unsigned)N, XENT_THREADS, 0, dtc.stream>>>(rowmax, sumexp, target, logits,
                                                                   targets, v0, Vl);
    DTC_LAUNCHED();
}

void cuda_xent_rescale(float *sumexp, const float *from_max, const float *to_max, int N) {
    if (N <= 0) return;
    xent_rescale_kernel<<<(unsigned)((N + 255) / 256), 256, 0, dtc.stream>>>(sumexp, from_max,
                                                                            to_max, N);
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
