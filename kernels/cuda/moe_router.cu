/* moe_router.cu — a mixture of experts' router (twin of
 * kernels/cpu/moe_router.c; ops.h moe_router_forward / _backward). One
 * thread per token row does what the CPU does for that row, in the same
 * order: its scores (softmax or sigmoid, sums in index order, expf), its top
 * k by score + bias (a tie to the lower expert), its weights; then one
 * thread per (sample, expert) sums the balance probabilities over the
 * sample's rows in row order. The backward likewise, a row per thread, its
 * score gradient in a scratch row. Rows are few (tokens) and E small next to
 * the GEMMs around them: memory-bound, no shared-memory tricks. fp32, no
 * fast-math intrinsics: the twin test expects a few ulp. */
#include "kernels/cuda/common.cuh"

__device__ static void row_scores(float *s, const float *z, int E, int sigmoid) {
    if (sigmoid) {
        for (int e = 0; e < E; e++) s[e] = 1.0f / (1.0f + expf(-z[e]));
        return;
    }
    float m = z[0];
    for (int e = 1; e < E; e++) m = z[e] > m ? z[e] : m;
    float sum = 0.0f;
    for (int e = 0; e < E; e++) {
        s[e] = expf(z[e] - m);
        sum += s[e];
    }
    float inv = 1.0f / sum;
    for (int e = 0; e < E; e++) s[e] *= inv;
}

__device__ static float chosen_sum(const float *s, const int *idx, int k) {
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += s[idx[j]];
    return sum;
}

__device__ static float row_sum(const float *s, int E) {
    float q = 0.0f;
    for (int e = 0; e < E; e++) q += s[e];
    return q;
}

__global__ static void router_rows_kernel(float *scores, int *idx, float *w, float *rowinv, const float *logits,
                                          const float *bias, int N, int E, int k, int sigmoid, int norm) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float *s = scores + (size_t)n * E;
    int *ix = idx + (size_t)n * k;
    row_scores(s, logits + (size_t)n * E, E, sigmoid);
    for (int j = 0; j < k; j++) { /* the k best of score + bias */
        int best = -1;
        float bv = 0.0f;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++) taken = ix[i] == e;
            if (taken) continue;
            float v = s[e] + (bias ? bias[e] : 0.0f);
            if (best < 0 || v > bv) best = e, bv = v;
        }
        ix[j] = best;
    }
    float inv = norm ? 1.0f / chosen_sum(s, ix, k) : 1.0f;
    for (int j = 0; j < k; j++) w[(size_t)n * k + j] = norm ? s[ix[j]] * inv : s[ix[j]];
    if (rowinv) rowinv[n] = 1.0f / row_sum(s, E);
}

__global__ static void router_psum_kernel(float *psum, const float *scores, const float *rowinv, int N, int E, int T,
                                          int row0, int G) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= G * E) return;
    int g = i / E, e = i % E;
    int lo = g * T - row0, hi = lo + T;
    if (lo < 0) lo = 0;
    if (hi > N) hi = N;
    float p = 0.0f;
    for (int n = lo; n < hi; n++) {
        float s = scores[(size_t)n * E + e];
        p += rowinv ? s * rowinv[n] : s;
    }
    psum[i] = p;
}

void cuda_moe_router_forward(float *scores, int *idx, float *w, float *psum, const float *logits, const float *bias,
                             int N, int E, int k, int sigmoid, int norm, int T, int row0) {
    if (N <= 0) return;
    float *rowinv = psum && sigmoid ? (float *)dtc_scratch((size_t)N * sizeof(float)) : nullptr;
    router_rows_kernel<<<dtc_blocks((size_t)N, 128), 128, 0, dtc.stream>>>(scores, idx, w, rowinv, logits, bias, N, E,
                                                                           k, sigmoid, norm);
    DTC_LAUNCHED();
    if (!psum) return;
    int G = (row0 + N - 1) / T + 1;
    router_psum_kernel<<<dtc_blocks((size_t)G * E, 128), 128, 0, dtc.stream>>>(psum, scores, rowinv, N, E, T, row0,
                                                                               G);
    DTC_LAUNCHED();
}

__global__ static void router_backward_kernel(float *dlogits, float *dsbuf, const float *scores, const int *idx,
                                              const float *w, const float *dw, const float *daux, int N, int E, int k,
                                              int sigmoid, int norm, int T, int row0) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float *ds = dsbuf + (size_t)n * E;
    const float *s = scores + (size_t)n * E;
    const int *ix = idx + (size_t)n * k;
    const float *gw = dw + (size_t)n * k, *wn = w + (size_t)n * k;
    for (int e = 0; e < E; e++) ds[e] = 0.0f;
    if (norm) {
        float S = chosen_sum(s, ix, k), dot = 0.0f;
        for (int j = 0; j < k; j++) dot += gw[j] * wn[j];
        for (int j = 0; j < k; j++) ds[ix[j]] += (gw[j] - dot) / S;
    } else {
        for (int j = 0; j < k; j++) ds[ix[j]] += gw[j];
    }
    if (daux) {
        const float *da = daux + (size_t)((row0 + n) / T) * E;
        if (sigmoid) {
            float Q = row_sum(s, E), dot = 0.0f;
            for (int e = 0; e < E; e++) dot += da[e] * (s[e] / Q);
            for (int e = 0; e < E; e++) ds[e] += (da[e] - dot) / Q;
        } else {
            for (int e = 0; e < E; e++) ds[e] += da[e];
        }
    }
    float *dz = dlogits + (size_t)n * E;
    if (sigmoid) {
        for (int e = 0; e < E; e++) dz[e] += ds[e] * s[e] * (1.0f - s[e]);
    } else {
        float dot = 0.0f;
        for (int e = 0; e < E; e++) dot += s[e] * ds[e];
        for (int e = 0; e < E; e++) dz[e] += s[e] * (ds[e] - dot);
    }
}

void cuda_moe_router_backward(float *dlogits, const float *scores, const int *idx, const float *w, const float *dw,
                              const float *daux, int N, int E, int k, int sigmoid, int norm, int T, int row0) {
    if (N <= 0) return;
    float *ds = (float *)dtc_scratch((size_t)N * E * sizeof(float));
    router_backward_kernel<<<dtc_blocks((size_t)N, 128), 128, 0, dtc.stream>>>(dlogits, ds, scores, idx, w, dw, daux,
                                                                               N, E, k, sigmoid, norm, T, row0);
    DTC_LAUNCHED();
}
