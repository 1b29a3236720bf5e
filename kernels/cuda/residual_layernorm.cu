/* residual_layernorm.cu — the residual add and the norm that reads its sum
 * in one pass over the rows (twin of kernels/cpu/residual_layernorm.c, which
 * runs residual_forward then the norm; llm.c's fused residual forward): one
 * warp per row writes res = a + b, rounded to the stream's type where it is
 * stored, and normalises the stored values (as the CPU's norm reads them)
 * with norm.cuh's row, reading back what each lane wrote (the row is still in
 * L1). Saves the separate norm's read of res from memory and a launch.
 * LayerNorm (GPT) and RMSNorm (Llama) alike. a fp32 (a branch's output), b,
 * res and out of type t; res may alias a in fp32 (each element is read
 * before the same thread writes it). */
#include "kernels/cuda/norm.cuh"

template <bool RMS, typename T>
__global__ void residual_norm_kernel(T *res, T *out, float *mean, float *rstd, const float *a, const T *b,
                                     const float *w, const float *bias, int N, int C, float eps) {
    int row = blockIdx.x * NORM_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    T *r = res + off;
    const float *ar = a + off;
    const T *br = b + off;
    for (int c = lane; c < C; c += 32) act_store(r, c, ar[c] + act_load(br, c));
    /* the stored values (rounded in bf16), as the CPU's norm reads them */
    dtc_norm_row<RMS>(out + off, RMS ? nullptr : mean + row, rstd + row, (const T *)r, w, bias, C, eps, lane);
}

template <bool RMS>
static void residual_norm(void *res, void *out, float *mean, float *rstd, const float *a, const void *b,
                          const float *w, const float *bias, int N, int C, float eps, dt_dtype t) {
    if (N <= 0 || C <= 0) return;
    unsigned grid = (unsigned)((N + NORM_ROWS_PER_BLOCK - 1) / NORM_ROWS_PER_BLOCK);
    ACT_LAUNCH(t, T,
               residual_norm_kernel<RMS, T><<<grid, 32 * NORM_ROWS_PER_BLOCK, 0, dtc.stream>>>(
                   (T *)res, (T *)out, mean, rstd, a, (const T *)b, w, bias, N, C, eps));
    DTC_LAUNCHED();
}

void cuda_residual_layernorm_forward(void *res, void *out, float *mean, float *rstd, const float *a, const void *b,
                                     const float *w, const float *bias, int N, int C, float eps, dt_dtype t) {
    residual_norm<false>(res, out, mean, rstd, a, b, w, bias, N, C, eps, t);
}

void cuda_residual_rmsnorm_forward(void *res, void *out, float *rstd, const float *a, const void *b, const float *w,
                                   int N, int C, float eps, dt_dtype t) {
    residual_norm<true>(res, out, nullptr, rstd, a, b, w, nullptr, N, C, eps, t);
}
