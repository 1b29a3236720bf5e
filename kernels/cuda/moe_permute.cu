/* moe_permute.cu — a mixture of experts' token rows to and from the
 * permuted order (twin of kernels/cpu/moe_permute.c; ops.h moe_permute,
 * moe_unpermute and their backwards). Every direction gathers: a thread
 * owns one output element and reads its inputs, each token's choices in
 * order, so the sums are the CPU's, in its order, with no atomics. The
 * products and sums are written as separate roundings (__fmul_rn,
 * __fadd_rn), so no fused multiply-add makes them differ from the CPU's. */
#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

template <typename T> __global__ static void permute_kernel(T *out, const T *x, const int *src, int C, size_t n) {
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < n; u += (size_t)gridDim.x * blockDim.x) {
        size_t i = u / C, c = u % C;
        out[u] = x[(size_t)src[i] * C + c];
    }
}

void cuda_moe_permute(void *out, const void *x, const int *src, int M, int C, dt_dtype t) {
    size_t n = (size_t)M * C;
    if (n == 0) return;
    ACT_LAUNCH(t, T, permute_kernel<T><<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>((T *)out, (const T *)x, src, C, n));
    DTC_LAUNCHED();
}

__global__ static void permute_backward_kernel(float *dx, const float *dout, const int *dst, int k, int C, size_t n) {
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < n; u += (size_t)gridDim.x * blockDim.x) {
        size_t row = u / C, c = u % C;
        float d = dx[u];
        for (int j = 0; j < k; j++) {
            int r = dst[row * k + j];
            if (r >= 0) d = __fadd_rn(d, dout[(size_t)r * C + c]);
        }
        dx[u] = d;
    }
}

void cuda_moe_permute_backward(float *dx, const float *dout, const int *dst, int N, int k, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    permute_backward_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(dx, dout, dst, k, C, n);
    DTC_LAUNCHED();
}

template <typename T>
__global__ static void unpermute_kernel(float *out, const T *y, const int *dst, const float *w, int k, int C,
                                        int accumulate, size_t n) {
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < n; u += (size_t)gridDim.x * blockDim.x) {
        size_t row = u / C, c = u % C;
        float o = accumulate ? out[u] : 0.0f;
        for (int j = 0; j < k; j++) {
            int r = dst[row * k + j];
            if (r >= 0) o = __fadd_rn(o, __fmul_rn(w[row * k + j], act_load(y, (size_t)r * C + c)));
        }
        out[u] = o;
    }
}

void cuda_moe_unpermute(float *out, const void *y, const int *dst, const float *w, int N, int k, int C, dt_dtype t,
                        int accumulate) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    ACT_LAUNCH(t, T, unpermute_kernel<T><<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(out, (const T *)y, dst, w, k, C,
                                                                                     accumulate, n));
    DTC_LAUNCHED();
}

/* dy: one thread per (choice, column). A kept choice owns its permuted
 * row alone (dst is one to one), so each element gets its one product added
 * with no race and no atomics: the CPU's single addition. */
__global__ static void unpermute_dy_kernel(float *dy, const float *dout, const int *dst, const float *w, int k, int C,
                                           size_t n) {
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < n; u += (size_t)gridDim.x * blockDim.x) {
        size_t i = u / C, c = u % C;
        int r = dst[i];
        if (r < 0) continue;
        float *d = dy + (size_t)r * C + c;
        *d = __fadd_rn(*d, __fmul_rn(w[i], dout[(i / k) * C + c]));
    }
}

/* dw: one thread per choice, the dot product in column order as the CPU's
 * (a tree reduction would change the order). */
template <typename T>
__global__ static void unpermute_dw_kernel(float *dw, const float *dout, const T *y, const int *dst, int k, int C,
                                           size_t NK) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= NK) return;
    int r = dst[i];
    if (r < 0) return;
    const float *g = dout + (i / k) * C;
    float dot = 0.0f;
    for (int c = 0; c < C; c++) dot = __fadd_rn(dot, __fmul_rn(g[c], act_load(y, (size_t)r * C + c)));
    dw[i] = __fadd_rn(dw[i], dot);
}

void cuda_moe_unpermute_backward(float *dy, float *dw, const float *dout, const void *y, const int *dst, const float *w,
                                 int N, int k, int C, dt_dtype t) {
    size_t NK = (size_t)N * k;
    if (NK == 0) return;
    if (dw) {
        ACT_LAUNCH(t, T, unpermute_dw_kernel<T><<<dtc_blocks(NK, 128), 128, 0, dtc.stream>>>(dw, dout, (const T *)y,
                                                                                             dst, k, C, NK));
        DTC_LAUNCHED();
    }
    if (!dy) return;
    size_t n = NK * (size_t)C;
    unpermute_dy_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(dy, dout, dst, w, k, C, n);
    DTC_LAUNCHED();
}
