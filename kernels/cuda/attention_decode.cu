/* attention_decode.cu — the twin of kernels/cpu/attention_decode.c: one new
 * query q[C] over a KV cache kv[T, 2 Ckv] of kv heads only (ops.h
 * attention_decode; query head h reads kv head h / (NH / NKV)). One thread
 * block per query head: the scores of the T keys (each thread a strided share
 * of them) into scratch, a block max and sum for the softmax, then each
 * thread one or more of the head's hs output columns. Simple and correct for
 * decoding's one row; not tuned. q, kv and out of type T (act.cuh). */
#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

#define DEC_THREADS 128

template <typename T>
__global__ void attention_decode_kernel(T *out, float *scratch, const T *q, const T *kv, int T_, int hs, int G,
                                        int C2, float scale) {
    __shared__ float sh[32];
    int h = blockIdx.x, Ckv = C2 / 2;
    float *s = scratch + (size_t)h * T_;
    const T *qh = q + (size_t)h * hs, *kh = kv + (size_t)(h / G) * hs;
    float mx = -INFINITY;
    for (int t = threadIdx.x; t < T_; t += blockDim.x) {
        const T *k = kh + (size_t)t * C2;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += act_load(qh, i) * act_load(k, i);
        s[t] = dot * scale;
        mx = fmaxf(mx, s[t]);
    }
    mx = dtc_block_max(mx, sh);
    float sum = 0.0f;
    for (int t = threadIdx.x; t < T_; t += blockDim.x) {
        s[t] = expf(s[t] - mx);
        sum += s[t];
    }
    sum = dtc_block_sum(sum, sh);
    __syncthreads(); /* every score written before any thread reads them all */
    float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < T_; t++) acc += s[t] * act_load(kh, (size_t)t * C2 + Ckv + i);
        act_store(out, (size_t)h * hs + i, acc * inv);
    }
}

void cuda_attention_decode(void *out, float *scratch, const void *q, const void *kv, int T, int C, int NH, int NKV,
                           dt_dtype t) {
    if (T <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV) return;
    int hs = C / NH;
    if (hs <= 0) return;
    ACT_LAUNCH(t, E,
               attention_decode_kernel<E><<<NH, DEC_THREADS, 0, dtc.stream>>>(
                   (E *)out, scratch, (const E *)q, (const E *)kv, T, hs, NH / NKV, dt_kv_cols(C, NH, NKV),
                   1.0f / sqrtf((float)hs)));
    DTC_LAUNCHED();
}
