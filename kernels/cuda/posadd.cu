/* posadd.cu — learned position embedding (twin of kernels/cpu/posadd.c):
 * x[b,t,:] += wpe[t,:] in place, or x[n,:] += wpe[pos[n],:] with per-row
 * positions; backward dwpe[t,:] += sum_b dx[b,t,:], or dwpe[pos[n],:] +=
 * dx[n,:]. The backward gives each element of dwpe to one thread, which adds
 * its rows in order: no atomics, the same summation order as the CPU, and
 * the same result run to run. With positions that is the token embedding's
 * scatter-add (embedding.cu: each block one residue class of rows, walking
 * the rows in order), with the table's rows all "local" (v0 0, every
 * position below INT_MAX). */
#include <climits>

#include "kernels/cuda/common.cuh"

__global__ void posadd_forward_kernel(float *x, const float *wpe, const int *pos, int C, size_t TC, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] += pos ? wpe[(size_t)pos[i / (size_t)C] * (size_t)C + i % (size_t)C] : wpe[i % TC];
}

__global__ void posadd_backward_kernel(float *dwpe, const float *dx, int B, size_t TC) {
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < TC;
         j += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[j]; /* added into, sample by sample, as the CPU does */
        for (int b = 0; b < B; b++) acc += dx[(size_t)b * TC + j];
        dwpe[j] = acc;
    }
}

void cuda_posadd_forward(float *x, const float *wpe, const int *pos, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    size_t TC = (size_t)T * C, n = (size_t)B * TC;
    posadd_forward_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(x, wpe, pos, C, TC, n);
    DTC_LAUNCHED();
}

void cuda_posadd_backward(float *dwpe, const float *dx, const int *pos, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    if (pos) {
        cuda_embedding_backward(dwpe, dx, pos, 0, INT_MAX, B * T, C);
        return;
    }
    size_t TC = (size_t)T * C;
    posadd_backward_kernel<<<dtc_blocks(TC, 256), 256, 0, dtc.stream>>>(dwpe, dx, B, TC);
    DTC_LAUNCHED();
}
