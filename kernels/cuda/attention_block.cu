/* attention_block.cu — the twin of kernels/cpu/attention_block.c: blockwise
 * attention with the online softmax (ops.h attention_block_*), the compute of
 * context parallelism's ring.
 *
 * Simple and correct, not tuned (a flash-attention kernel with tensor cores
 * is the later step): forward, one thread block per (query row, sample x
 * head) walks the visible keys in tiles of ABLK_TILE scores held in shared
 * memory, keeping the running max, sum and the hs output accumulators
 * (shared) of the online softmax; backward, one thread block per query row,
 * each thread a strided share of the keys, recomputes p = exp(s - lse) and
 * adds dK and dV with atomicAdd (dQ collects in shared memory first). The
 * atomics make the backward's summation order vary from run to run. */
#include "kernels/cuda/common.cuh"

#define ABLK_THREADS 128
#define ABLK_TILE 1024
#define ABLK_HS_MAX 256 /* head size the shared accumulators hold */

__device__ __forceinline__ int ablk_keys_seen(int i, int Tk, int causal, int shift) {
    if (!causal) return Tk;
    long v = (long)i + shift + 1;
    return v < 0 ? 0 : v > Tk ? Tk : (int)v;
}

__global__ void attention_block_forward_kernel(float *out, float *lse, const float *q, const float *kv, int NH,
                                               int Ts, int Tk, int C, int hs, int causal, int shift, float scale) {
    __shared__ float sh[32];
    __shared__ float s[ABLK_TILE];
    __shared__ float acc[ABLK_HS_MAX];
    int i = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const float *qi = q + ((size_t)b * Ts + i) * 3 * C + (size_t)h * hs;
    const float *kb = kv + (size_t)b * Ts * 2 * C + (size_t)h * hs;
    float *oi = out + ((size_t)b * Ts + i) * C + (size_t)h * hs;
    float *li = lse + (size_t)bh * Ts + i;
    int valid = ablk_keys_seen(i, Tk, causal, shift);
    for (int c = threadIdx.x; c < hs; c += blockDim.x) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 < valid; k0 += ABLK_TILE) {
        int nk = valid - k0 < ABLK_TILE ? valid - k0 : ABLK_TILE;
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < nk; j += blockDim.x) {
            const float *kj = kb + (size_t)(k0 + j) * 2 * C;
            float dot = 0.0f;
            for (int c = 0; c < hs; c++) dot += qi[c] * kj[c];
            s[j] = dot * scale;
            mx = fmaxf(mx, s[j]);
        }
        mx = dtc_block_max(mx, sh);
        float mnew = fmaxf(m, mx), sum = 0.0f;
        for (int j = threadIdx.x; j < nk; j += blockDim.x) {
            s[j] = expf(s[j] - mnew);
            sum += s[j];
        }
        sum = dtc_block_sum(sum, sh);
        __syncthreads(); /* every score written before any thread reads them all */
        float corr = expf(m - mnew);
        for (int c = threadIdx.x; c < hs; c += blockDim.x) {
            float a = acc[c] * corr;
            for (int j = 0; j < nk; j++) a += s[j] * kb[(size_t)(k0 + j) * 2 * C + C + c];
            acc[c] = a;
        }
        l = l * corr + sum;
        m = mnew;
        __syncthreads(); /* the tile's scores are used up */
    }
    float inv = valid > 0 ? 1.0f / l : 0.0f;
    for (int c = threadIdx.x; c < hs; c += blockDim.x) oi[c] = acc[c] * inv;
    if (threadIdx.x == 0) *li = valid > 0 ? m + logf(l) : -INFINITY;
}

void cuda_attention_block_forward(float *out, float *lse, const float *q, const float *kv, int B, int Ts, int Tq,
                                  int Tk, int C, int NH, int causal, int shift) {
    if (B <= 0 || Tq <= 0 || C <= 0 || NH <= 0) return;
    int hs = C / NH;
    if (hs <= 0 || hs > ABLK_HS_MAX) return;
    dim3 grid((unsigned)Tq, (unsigned)(B * NH));
    attention_block_forward_kernel<<<grid, ABLK_THREADS, 0, dtc.stream>>>(out, lse, q, kv, NH, Ts, Tk, C, hs, causal,
                                                                         shift, 1.0f / sqrtf((float)hs));
    DTC_LAUNCHED();
}

/* One thread per (sample, query row, head): the merge is per row. */
__global__ void attention_block_merge_kernel(float *out, float *lse, const float *pout, const float *plse, int B,
                                             int Ts, int Tq, int C, int NH, int hs) {
    long r = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= (long)B * NH * Tq) return;
    int i = (int)(r % Tq), bh = (int)(r / Tq), b = bh / NH, h = bh % NH;
    float *l = lse + (size_t)bh * Ts + i;
    float a = *l, p = plse[(size_t)bh * Ts + i];
    if (p == -INFINITY) return;
    float *o = out + ((size_t)b * Ts + i) * C + (size_t)h * hs;
    const float *po = pout + ((size_t)b * Ts + i) * C + (size_t)h * hs;
    if (a == -INFINITY) {
        for (int c = 0; c < hs; c++) o[c] = po[c];
        *l = p;
        return;
    }
    float mx = fmaxf(a, p), lnew = mx + logf(expf(a - mx) + expf(p - mx));
    float wa = expf(a - lnew), wp = expf(p - lnew);
    for (int c = 0; c < hs; c++) o[c] = o[c] * wa + po[c] * wp;
    *l = lnew;
}

void cuda_attention_block_merge(float *out, float *lse, const float *pout, const float *plse, int B, int Ts,
                                int Tq, int C, int NH) {
    if (B <= 0 || Tq <= 0 || C <= 0 || NH <= 0) return;
    long rows = (long)B * NH * Tq;
    attention_block_merge_kernel<<<(unsigned)((rows + 255) / 256), 256, 0, dtc.stream>>>(out, lse, pout, plse, B, Ts,
                                                                                          Tq, C, NH, C / NH);
    DTC_LAUNCHED();
}

__global__ void attention_block_backward_kernel(float *dq, float *dkv, const float *dout, const float *out,
                                                const float *lse, const float *q, const float *kv, int NH, int Ts,
                                                int Tk, int C, int hs, int causal, int shift, float scale) {
    __shared__ float sh[32];
    __shared__ float dqa[ABLK_HS_MAX];
    int i = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    size_t qo = ((size_t)b * Ts + i) * 3 * C + (size_t)h * hs, oo = ((size_t)b * Ts + i) * C + (size_t)h * hs;
    const float *qi = q + qo, *gi = dout + oo, *oi = out + oo;
    size_t kbase = (size_t)b * Ts * 2 * C + (size_t)h * hs;
    int valid = ablk_keys_seen(i, Tk, causal, shift);
    float part = 0.0f;
    for (int c = threadIdx.x; c < hs; c += blockDim.x) {
        part += gi[c] * oi[c];
        dqa[c] = 0.0f;
    }
    float D = dtc_block_sum(part, sh);
    float li = lse[(size_t)bh * Ts + i];
    __syncthreads();
    for (int j = threadIdx.x; j < valid; j += blockDim.x) {
        const float *kj = kv + kbase + (size_t)j * 2 * C, *vj = kj + C;
        float s = 0.0f, dp = 0.0f;
        for (int c = 0; c < hs; c++) s += qi[c] * kj[c], dp += gi[c] * vj[c];
        float p = expf(s * scale - li), ds = p * (dp - D) * scale;
        float *dkj = dkv + kbase + (size_t)j * 2 * C, *dvj = dkj + C;
        for (int c = 0; c < hs; c++) {
            atomicAdd(&dqa[c], ds * kj[c]);
            atomicAdd(&dkj[c], ds * qi[c]);
            atomicAdd(&dvj[c], p * gi[c]);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < hs; c += blockDim.x) dq[qo + c] += dqa[c];
}

void cuda_attention_block_backward(float *dq, float *dkv, const float *dout, const float *out, const float *lse,
                                   const float *q, const float *kv, int B, int Ts, int Tq, int Tk, int C, int NH,
                                   int causal, int shift) {
    if (B <= 0 || Tq <= 0 || Tk <= 0 || C <= 0 || NH <= 0) return;
    int hs = C / NH;
    if (hs <= 0 || hs > ABLK_HS_MAX) return;
    dim3 grid((unsigned)Tq, (unsigned)(B * NH));
    attention_block_backward_kernel<<<grid, ABLK_THREADS, 0, dtc.stream>>>(dq, dkv, dout, out, lse, q, kv, NH, Ts, Tk,
                                                                          C, hs, causal, shift,
                                                                          1.0f / sqrtf((float)hs));
    DTC_LAUNCHED();
}
