/* layernorm.cu — LayerNorm over the last dimension, eps given (twin of
 * kernels/cpu/layernorm.c), fp32 arithmetic; the input and output are
 * activations of either type (act.cuh), the statistics and gradients fp32.
 *
 * Forward: one warp per row, two passes over the row as on the CPU (mean,
 * then squared deviations: no cancellation when the mean is large), saving
 * mean and rstd for backward.
 *
 * Backward, with n = (x - mean) rstd and g = dout w:
 *     dx += rstd (g - mean(g) - n mean(g n))      (one warp per row)
 *     dw += sum_rows dout n,   db += sum_rows dout
 * The column sums are deterministic (no atomics): blocks of 32 columns x 8
 * row-lanes each sum a chunk of LN_CHUNK rows into a partial in the backend
 * scratch, and a last kernel adds the chunks' partials in order into dw, db. */
#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/layernorm_row.cuh"

#define LN_ROWS_PER_BLOCK 8 /* warps per block in the row kernels */
#define LN_CHUNK 256        /* rows per partial sum of dw, db (at least) */
#define LN_COLS 32
#define LN_LANES 8

template <typename T>
__global__ void layernorm_forward_kernel(T *out, float *mean, float *rstd, const T *inp, const float *w,
                                         const float *b, int N, int C, float eps) {
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= N) return;
    size_t off = (size_t)row * C;
    dtc_layernorm_row(out + off, mean + row, rstd + row, inp + off, w, b, C, eps, (int)(threadIdx.x & 31));
}

template <typename T>
__global__ void layernorm_backward_dx_kernel(float *dinp, const float *dout, const T *inp, const float *w,
                                             const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (size_t)row * C;
    const float *d = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gn_sum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float n = (act_load(x, c) - m) * s;
        float g = w[c] * d[c];
        g_sum += g;
        gn_sum += g * n;
    }
    float g_mean = dtc_warp_sum(g_sum) / C, gn_mean = dtc_warp_sum(gn_sum) / C;
    for (int c = lane; c < C; c += 32) {
        float n = (act_load(x, c) - m) * s;
        float g = w[c] * d[c];
        dx[c] += s * (g - g_mean - n * gn_mean);
    }
}

/* grid (column slabs, row chunks); partial[chunk][0..C) = dw part,
 * partial[chunk][C..2C) = db part */
template <typename T>
__global__ void layernorm_backward_dwdb_kernel(float *partial, const float *dout, const T *inp, const float *mean,
                                               const float *rstd, int N, int C, int chunk) {
    __shared__ float sw[LN_LANES][LN_COLS], sb[LN_LANES][LN_COLS];
    int col = blockIdx.x * LN_COLS + threadIdx.x;
    int r0 = blockIdx.y * chunk, r1 = min(r0 + chunk, N);
    float aw = 0.0f, ab = 0.0f;
    if (col < C) {
        for (int i = r0 + threadIdx.y; i < r1; i += LN_LANES) {
            float d = dout[(size_t)i * C + col];
            float n = (act_load(inp, (size_t)i * C + col) - mean[i]) * rstd[i];
            aw += d * n;
            ab += d;
        }
    }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && col < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < LN_LANES; y++) {
            tw += sw[y][threadIdx.x];
            tb += sb[y][threadIdx.x];
        }
        float *p = partial + (size_t)blockIdx.y * 2 * C;
        p[col] = tw;
        p[C + col] = tb;
    }
}

__global__ void layernorm_backward_finish_kernel(float *dw, float *db, const float *partial,
                                                 int chunks, int C) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= C) return;
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < chunks; k++) {
        tw += partial[(size_t)k * 2 * C + col];
        tb += partial[(size_t)k * 2 * C + C + col];
    }
    dw[col] += tw;
    db[col] += tb;
}

void cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b,
                            int N, int C, float eps, dt_dtype t) {
    if (N <= 0 || C <= 0) return;
    unsigned grid = (unsigned)((N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    ACT_LAUNCH(t, T,
               layernorm_forward_kernel<T><<<grid, 32 * LN_ROWS_PER_BLOCK, 0, dtc.stream>>>(
                   (T *)out, mean, rstd, (const T *)inp, w, b, N, C, eps));
    DTC_LAUNCHED();
}

void cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const void *inp, const float *w,
                             const float *mean, const float *rstd, int N, int C, dt_dtype t) {
    if (N <= 0 || C <= 0) return;
    unsigned grid = (unsigned)((N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    ACT_LAUNCH(t, T,
               layernorm_backward_dx_kernel<T><<<grid, 32 * LN_ROWS_PER_BLOCK, 0, dtc.stream>>>(
                   dinp, dout, (const T *)inp, w, mean, rstd, N, C));
    DTC_LAUNCHED();
    /* gridDim.y stops at 65535: longer inputs get longer chunks */
    int chunk = LN_CHUNK;
    if ((N + chunk - 1) / chunk > 65535) chunk = (N + 65534) / 65535;
    int chunks = (N + chunk - 1) / chunk;
    float *partial = (float *)dtc_scratch((size_t)chunks * 2 * C * sizeof(float));
    dim3 g2((unsigned)((C + LN_COLS - 1) / LN_COLS), (unsigned)chunks);
    ACT_LAUNCH(t, T,
               layernorm_backward_dwdb_kernel<T><<<g2, dim3(LN_COLS, LN_LANES), 0, dtc.stream>>>(
                   partial, dout, (const T *)inp, mean, rstd, N, C, chunk));
    DTC_LAUNCHED();
    layernorm_backward_finish_kernel<<<(unsigned)((C + 255) / 256), 256, 0, dtc.stream>>>(
        dw, db, partial, chunks, C);
    DTC_LAUNCHED();
}
