/* moe_route.cu — a mixture of experts' dispatch plan (twin of
 * kernels/cpu/moe_route.c; ops.h moe_route). One block; thread e (strided
 * over the experts) scans every choice in row order and handles those of
 * expert e exactly as the CPU's two passes do: its per-sample counts and
 * capacity, its rank among the kept rows, then (after every expert's count
 * is known) its first row in the permuted order and the places. The same
 * integers as the CPU, whatever the thread count. O(N k) work per thread: a
 * micro-batch's choices are a few thousand to a few hundred thousand, a
 * fraction of a millisecond beside the GEMMs. */
#include "kernels/cuda/common.cuh"

__global__ static void route_kernel(int *dst, int *src, int *counts, int *chosen, const int *idx, const int *before,
                                    int N, int E, int k, int cap, int T, int row0) {
    size_t NK = (size_t)N * k;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int kept = 0, g_cur = -1, c = 0;
        for (size_t i = 0; i < NK; i++) {
            if (idx[i] != e) continue;
            int g = (row0 + (int)(i / k)) / T;
            if (g != g_cur) { /* a new group: its count starts from what came before it */
                if (g_cur >= 0) chosen[(size_t)g_cur * E + e] = c;
                g_cur = g;
                c = 0;
            }
            int earlier = c + (before ? before[(size_t)g * E + e] : 0);
            c++;
            dst[i] = cap == 0 || earlier < cap ? kept++ : -1;
        }
        if (g_cur >= 0) chosen[(size_t)g_cur * E + e] = c;
        counts[e] = kept;
    }
    __syncthreads(); /* every expert's count is in global memory */
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int first = 0;
        for (int x = 0; x < e; x++) first += counts[x];
        for (size_t i = 0; i < NK; i++) {
            if (idx[i] != e || dst[i] < 0) continue;
            dst[i] += first;
            src[dst[i]] = (int)(i / k);
        }
    }
}

void cuda_moe_route(int *dst, int *src, int *counts, int *chosen, const int *idx, const int *before, int N, int E,
                    int k, int cap, int T, int row0) {
    int G = N > 0 ? (row0 + N - 1) / T + 1 : 0;
    DTC_CHECK(cudaMemsetAsync(chosen, 0, (size_t)G * E * sizeof(int), dtc.stream));
    DTC_CHECK(cudaMemsetAsync(counts, 0, (size_t)E * sizeof(int), dtc.stream));
    if (N <= 0) return;
    int threads = E < 1024 ? E : 1024;
    route_kernel<<<1, threads, 0, dtc.stream>>>(dst, src, counts, chosen, idx, before, N, E, k, cap, T, row0);
    DTC_LAUNCHED();
}
