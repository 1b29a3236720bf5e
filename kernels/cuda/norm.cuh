/* norm.cuh — the arithmetic both norms share, LayerNorm (layernorm.cu) and
 * RMSNorm (rmsnorm.cu), and the fused residual + norm (residual_layernorm.cu),
 * twins of kernels/cpu/layernorm.c's loops: RMSNorm is LayerNorm with mean 0
 * and no bias (RMS = true below), so one set of kernels serves both and
 * LayerNorm's code is what it was (RMS = false compiles the same statements).
 *
 * Forward: one warp per row (dtc_norm_row). Two passes over x for the
 * statistics (the mean, then the squared deviations: no cancellation when the
 * mean is large), as the CPU twin's; RMSNorm skips the first. Each lane reads
 * the columns c = lane mod 32, the ones it wrote when x is a sum it stored.
 *
 * Backward, with n = (x - mean) rstd and g = dout w:
 *     dx += rstd (g - mean(g) - n mean(g n))      (one warp per row; RMSNorm: no mean(g))
 *     dw += sum_rows dout n,   db += sum_rows dout (RMSNorm: no db)
 * The column sums are deterministic (no atomics): blocks of 32 columns x 8
 * row-lanes each sum a chunk of NORM_CHUNK rows into a partial in the backend
 * scratch, and a last kernel adds the chunks' partials in order into dw, db. */
#ifndef DTRUN_KERNELS_CUDA_NORM_CUH
#define DTRUN_KERNELS_CUDA_NORM_CUH

#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

#define NORM_ROWS_PER_BLOCK 8 /* warps per block in the row kernels */
#define NORM_CHUNK 256        /* rows per partial sum of dw, db (at least) */
#define NORM_COLS 32
#define NORM_LANES 8

/* One row x [C] -> o [C] (type T), its statistics written by lane 0 (mean
 * only for LayerNorm). RMS: mean 0, no bias (b unused). */
template <bool RMS, typename T>
__device__ __forceinline__ void dtc_norm_row(T *o, float *mean, float *rstd, const T *x, const float *w,
                                             const float *b, int C, float eps, int lane) {
    float m = 0.0f;
    if constexpr (!RMS) {
        float sum = 0.0f;
        for (int c = lane; c < C; c += 32) sum += act_load(x, c);
        m = dtc_warp_sum(sum) / C;
    }
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = act_load(x, c) - m;
        sq += d * d;
    }
    float s = 1.0f / sqrtf(dtc_warp_sum(sq) / C + eps);
    if constexpr (RMS) {
        for (int c = lane; c < C; c += 32) act_store(o, c, act_load(x, c) * s * w[c]);
    } else {
        for (int c = lane; c < C; c += 32) act_store(o, c, (act_load(x, c) - m) * s * w[c] + b[c]);
    }
    if (lane == 0) {
        if constexpr (!RMS) *mean = m;
        *rstd = s;
    }
}

template <bool RMS, typename T>
__global__ void dtc_norm_forward_kernel(T *out, float *mean, float *rstd, const T *inp, const float *w,
                                        const float *b, int N, int C, float eps) {
    int row = blockIdx.x * NORM_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= N) return;
    size_t off = (size_t)row * C;
    dtc_norm_row<RMS>(out + off, RMS ? nullptr : mean + row, rstd + row, inp + off, w, b, C, eps,
                      (int)(threadIdx.x & 31));
}

template <bool RMS, typename T>
__global__ void dtc_norm_backward_dx_kernel(float *dinp, const float *dout, const T *inp, const float *w,
                                            const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * NORM_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (size_t)row * C;
    const float *d = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = RMS ? 0.0f : mean[row], s = rstd[row];
    float g_sum = 0.0f, gn_sum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float n = (act_load(x, c) - m) * s;
        float g = w[c] * d[c];
        g_sum += g;
        gn_sum += g * n;
    }
    float g_mean = RMS ? 0.0f : dtc_warp_sum(g_sum) / C, gn_mean = dtc_warp_sum(gn_sum) / C;
    for (int c = lane; c < C; c += 32) {
        float n = (act_load(x, c) - m) * s;
        float g = w[c] * d[c];
        dx[c] += s * (g - g_mean - n * gn_mean);
    }
}

/* grid (column slabs, row chunks); partial[chunk][0..C) = dw part,
 * partial[chunk][C..2C) = db part (LayerNorm only) */
template <bool RMS, typename T>
__global__ void dtc_norm_backward_dwdb_kernel(float *partial, const float *dout, const T *inp, const float *mean,
                                              const float *rstd, int N, int C, int chunk) {
    __shared__ float sw[NORM_LANES][NORM_COLS], sb[NORM_LANES][NORM_COLS];
    int col = blockIdx.x * NORM_COLS + threadIdx.x;
    int r0 = blockIdx.y * chunk, r1 = min(r0 + chunk, N);
    float aw = 0.0f, ab = 0.0f;
    if (col < C) {
        for (int i = r0 + threadIdx.y; i < r1; i += NORM_LANES) {
            float d = dout[(size_t)i * C + col];
            float n = (act_load(inp, (size_t)i * C + col) - (RMS ? 0.0f : mean[i])) * rstd[i];
            aw += d * n;
            ab += d;
        }
    }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && col < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < NORM_LANES; y++) {
            tw += sw[y][threadIdx.x];
            tb += sb[y][threadIdx.x];
        }
        float *p = partial + (size_t)blockIdx.y * 2 * C;
        p[col] = tw;
        p[C + col] = tb;
    }
}

/* the chunks' partials in order into dw (and db: LayerNorm's) */
template <bool RMS>
__global__ void dtc_norm_backward_finish_kernel(float *dw, float *db, const float *partial, int chunks, int C) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= C) return;
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < chunks; k++) {
        tw += partial[(size_t)k * 2 * C + col];
        if constexpr (!RMS) tb += partial[(size_t)k * 2 * C + C + col];
    }
    dw[col] += tw;
    if constexpr (!RMS) db[col] += tb;
}

/* The two ops of a norm (the C-ABI entries call these). */
template <bool RMS>
static void dtc_norm_forward(void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b,
                             int N, int C, float eps, dt_dtype t) {
    if (N <= 0 || C <= 0) return;
    unsigned grid = (unsigned)((N + NORM_ROWS_PER_BLOCK - 1) / NORM_ROWS_PER_BLOCK);
    ACT_LAUNCH(t, T,
               dtc_norm_forward_kernel<RMS, T><<<grid, 32 * NORM_ROWS_PER_BLOCK, 0, dtc.stream>>>(
                   (T *)out, mean, rstd, (const T *)inp, w, b, N, C, eps));
    DTC_LAUNCHED();
}

template <bool RMS>
static void dtc_norm_backward(float *dinp, float *dw, float *db, const float *dout, const void *inp, const float *w,
                              const float *mean, const float *rstd, int N, int C, dt_dtype t) {
    if (N <= 0 || C <= 0) return;
    unsigned grid = (unsigned)((N + NORM_ROWS_PER_BLOCK - 1) / NORM_ROWS_PER_BLOCK);
    ACT_LAUNCH(t, T,
               dtc_norm_backward_dx_kernel<RMS, T><<<grid, 32 * NORM_ROWS_PER_BLOCK, 0, dtc.stream>>>(
                   dinp, dout, (const T *)inp, w, mean, rstd, N, C));
    DTC_LAUNCHED();
    /* gridDim.y stops at 65535: longer inputs get longer chunks */
    int chunk = NORM_CHUNK;
    if ((N + chunk - 1) / chunk > 65535) chunk = (N + 65534) / 65535;
    int chunks = (N + chunk - 1) / chunk;
    float *partial = (float *)dtc_scratch((size_t)chunks * 2 * C * sizeof(float));
    dim3 g2((unsigned)((C + NORM_COLS - 1) / NORM_COLS), (unsigned)chunks);
    ACT_LAUNCH(t, T,
               dtc_norm_backward_dwdb_kernel<RMS, T><<<g2, dim3(NORM_COLS, NORM_LANES), 0, dtc.stream>>>(
                   partial, dout, (const T *)inp, mean, rstd, N, C, chunk));
    DTC_LAUNCHED();
    dtc_norm_backward_finish_kernel<RMS><<<(unsigned)((C + 255) / 256), 256, 0, dtc.stream>>>(dw, db, partial,
                                                                                               chunks, C);
    DTC_LAUNCHED();
}

#endif
