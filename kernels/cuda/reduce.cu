/* reduce.cu — whole-tensor helpers for the optimizer (twin of
 * kernels/cpu/reduce.c): p *= s, and the sum of squares in double for the
 * global gradient norm (dtc_sumsq_into also serves norm_dev.cu's sumsq_add,
 * which keeps the total on the device).
 *
 * sumsq is deterministic: a fixed grid (independent of timing) where each
 * block sums a grid-stride share in double and reduces it in a fixed tree,
 * then one block adds the partials in order. The result is copied to the
 * host, so the call waits for the stream (the caller needs the number). */
#include "kernels/cuda/common.cuh"

#define SUMSQ_THREADS 512
#define SUMSQ_MAX_BLOCKS 1024

__global__ void scale_kernel(float *p, float s, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] *= s;
}

__global__ void sumsq_partial_kernel(double *partial, const float *p, size_t n) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double x = p[i];
        acc += x * x;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    acc = dtc_warp_sum_d(acc);
    if (lane == 0) sh[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < nw ? sh[lane] : 0.0;
        acc = dtc_warp_sum_d(acc);
        if (lane == 0) partial[blockIdx.x] = acc;
    }
}

/* *out = the total, or (accumulate) *out += the total: the host's `sq +=`
 * done on the device (norm_dev.cu's sumsq_add), one add of the same value. */
__global__ void sumsq_finish_kernel(double *out, const double *partial, int nparts, int accumulate) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += partial[i];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    acc = dtc_warp_sum_d(acc);
    if (lane == 0) sh[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < nw ? sh[lane] : 0.0;
        acc = dtc_warp_sum_d(acc);
        if (lane == 0) *out = accumulate ? *out + acc : acc;
    }
}

void cuda_scale(float *p, float s, size_t n) {
    if (!n) return;
    scale_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(p, s, n);
    DTC_LAUNCHED();
}

void dtc_sumsq_into(double *out, const float *p, size_t n, int accumulate) {
    size_t want = (n + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    int blocks = want < SUMSQ_MAX_BLOCKS ? (int)want : SUMSQ_MAX_BLOCKS;
    /* the partials in the scratch (at most SUMSQ_MAX_BLOCKS doubles: the
     * scratch's first growth, 1 MiB, always holds them) */
    double *partial = (double *)dtc_scratch((size_t)blocks * sizeof(double));
    sumsq_partial_kernel<<<blocks, SUMSQ_THREADS, 0, dtc.stream>>>(partial, p, n);
    DTC_LAUNCHED();
    sumsq_finish_kernel<<<1, SUMSQ_THREADS, 0, dtc.stream>>>(out, partial, blocks, accumulate);
    DTC_LAUNCHED();
}

double cuda_sumsq(const float *p, size_t n) {
    if (!n) return 0.0;
    size_t want = (n + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    int blocks = want < SUMSQ_MAX_BLOCKS ? (int)want : SUMSQ_MAX_BLOCKS;
    /* partials, then the total, in the scratch */
    double *total = (double *)dtc_scratch((size_t)(blocks + 1) * sizeof(double)) + blocks;
    dtc_sumsq_into(total, p, n, 0);
    double result = 0.0;
    DTC_CHECK(cudaMemcpyAsync(&result, total, sizeof result, cudaMemcpyDeviceToHost, dtc.stream));
    DTC_CHECK(cudaStreamSynchronize(dtc.stream));
    return result;
}
