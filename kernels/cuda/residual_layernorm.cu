/* residual_layernorm.cu — the residual add and the layernorm that reads its
 * sum in one pass over the rows (twin of kernels/cpu/residual_layernorm.c,
 * which runs residual_forward then layernorm_forward; llm.c's fused residual
 * forward): one warp per row writes res = a + b, rounded to the stream's
 * type where it is stored, and normalises the stored values (as the CPU's
 * layernorm reads them) with layernorm.cu's row (layernorm_row.cuh), reading
 * back what each lane wrote (the row is still in L1). Saves the separate layernorm's read of res from memory and a
 * launch. a fp32 (a branch's output), b, res and out of type t; res may
 * alias a in fp32 (each element is read before the same thread writes it). */
#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/layernorm_row.cuh"

#define RLN_ROWS_PER_BLOCK 8 /* warps per block */

template <typename T>
__global__ void residual_layernorm_kernel(T *res, T *out, float *mean, float *rstd, const float *a, const T *b,
                                          const float *w, const float *bias, int N, int C, float eps) {
    int row = blockIdx.x * RLN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    T *r = res + off;
    const float *ar = a + off;
    const T *br = b + off;
    for (int c = lane; c < C; c += 32) act_store(r, c, ar[c] + act_load(br, c));
    /* the stored values (rounded in bf16), as the CPU's layernorm reads them */
    dtc_layernorm_row(out + off, mean + row, rstd + row, (const T *)r, w, bias, C, eps, lane);
}

void cuda_residual_layernorm_forward(void *res, void *out, float *mean, float *rstd, const float *a, const void *b,
                                     const float *w, const float *bias, int N, int C, float eps, dt_dtype t) {
    if (N <= 0 || C <= 0) return;
    unsigned grid = (unsigned)((N + RLN_ROWS_PER_BLOCK - 1) / RLN_ROWS_PER_BLOCK);
    ACT_LAUNCH(t, T,
               residual_layernorm_kernel<T><<<grid, 32 * RLN_ROWS_PER_BLOCK, 0, dtc.stream>>>(
                   (T *)res, (T *)out, mean, rstd, a, (const T *)b, w, bias, N, C, eps));
    DTC_LAUNCHED();
}
