/* attention_decode.cu — the twin of kernels/cpu/attention_decode.c: one new
 * query over a KV cache. One thread block per head: the scores of the T keys
 * (each thread a strided share of them) into scratch, a block max and sum for
 * the softmax, then each thread one or more of the head's hs output columns.
 * Simple and correct for decoding's one row; not tuned. */
#include "kernels/cuda/common.cuh"

#define DEC_THREADS 128

__global__ void attention_decode_kernel(float *out, float *scratch, const float *cache, int T, int C, int hs,
                                        float scale) {
    __shared__ float sh[32];
    int h = blockIdx.x, C3 = 3 * C;
    float *s = scratch + (size_t)h * T;
    const float *q = cache + (size_t)(T - 1) * C3 + h * hs;
    float mx = -INFINITY;
    for (int t = threadIdx.x; t < T; t += blockDim.x) {
        const float *k = cache + (size_t)t * C3 + C + h * hs;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += q[i] * k[i];
        s[t] = dot * scale;
        mx = fmaxf(mx, s[t]);
    }
    mx = dtc_block_max(mx, sh);
    float sum = 0.0f;
    for (int t = threadIdx.x; t < T; t += blockDim.x) {
        s[t] = expf(s[t] - mx);
        sum += s[t];
    }
    sum = dtc_block_sum(sum, sh);
    __syncthreads(); /* every score written before any thread reads them all */
    float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < T; t++) acc += s[t] * cache[(size_t)t * C3 + 2 * C + h * hs + i];
        out[h * hs + i] = acc * inv;
    }
}

void cuda_attention_decode(float *out, float *scratch, const float *cache, int T, int C, int NH) {
    if (T <= 0 || C <= 0 || NH <= 0) return;
    int hs = C / NH;
    if (hs <= 0) return;
    attention_decode_kernel<<<NH, DEC_THREADS, 0, dtc.stream>>>(out, scratch, cache, T, C, hs,
                                                                1.0f / sqrtf((float)hs));
    DTC_LAUNCHED();
}
