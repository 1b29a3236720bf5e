/* embedding.cu — token embedding, vocab-parallel ready (twin of
 * kernels/cpu/embedding.c). This rank holds rows [v0, v0+vn) of wte; a token
 * whose row lives elsewhere gives a zero row (the tp strategy sums the ranks).
 *
 * Backward is a scatter-add where several tokens may share a row. Atomics
 * would make the sums' order (and so the low bits) change run to run; instead
 * the rows are split into EMB_GROUPS residue classes (row % EMB_GROUPS) and
 * each block owns one class and a slab of columns: it walks all N tokens in
 * order, skips those of other classes (reading one int each, from cache) and
 * adds the rest. Every dwte element is then written by one thread, in token
 * order — the CPU's order, so the result is deterministic and bitwise the
 * CPU's for the same inputs. Cost: EMB_GROUPS * N token reads per column
 * slab, small next to the N*C adds for the model sizes we run. */
#include "kernels/cuda/common.cuh"

#define EMB_GROUPS 64
#define EMB_THREADS 128

__global__ void embedding_forward_kernel(float *out, const int *tok, const float *wte, int v0,
                                         int vn, int N, int C) {
    size_t n = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)C, c = i % (size_t)C;
        int row = tok[r] - v0;
        out[i] = (row >= 0 && row < vn) ? wte[(size_t)row * C + c] : 0.0f;
    }
}

/* grid: (column slabs, EMB_GROUPS) */
__global__ void embedding_backward_kernel(float *dwte, const float *dout, const int *tok, int v0,
                                          int vn, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int group = blockIdx.y;
    if (c >= C) return;
    for (int i = 0; i < N; i++) {
        int row = tok[i] - v0;
        if (row < 0 || row >= vn || row % EMB_GROUPS != group) continue;
        dwte[(size_t)row * C + c] += dout[(size_t)i * C + c];
    }
}

void cuda_embedding_forward(float *out, const int *tok, const float *wte, int v0, int vn, int N,
                            int C) {
    if (N <= 0 || C <= 0) return;
    size_t n = (size_t)N * C;
    embedding_forward_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(out, tok, wte, v0, vn,
                                                                         N, C);
    DTC_LAUNCHED();
}

void cuda_embedding_backward(float *dwte, const float *dout, const int *tok, int v0, int vn,
                             int N, int C) {
    if (N <= 0 || C <= 0 || vn <= 0) return;
    dim3 grid((unsigned)((C + EMB_THREADS - 1) / EMB_THREADS), EMB_GROUPS);
    embedding_backward_kernel<<<grid, EMB_THREADS, 0, dtc.stream>>>(dwte, dout, tok, v0, vn, N, C);
    DTC_LAUNCHED();
}
