/* moe_router.c — a mixture of experts' router on the CPU (ops.h
 * moe_router_forward / _backward): scores from the logits (softmax over a
 * row, or the sigmoid of each), the top-k experts of each row by score +
 * bias, their weights (normalised over the k or not), the per-sample sums of
 * the balance probabilities the load-balancing loss reads, and the gradient
 * of all that back to the logits. fp32 throughout; each row's sums run in
 * index order, which the CUDA twin follows. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu.h"

/* The score row of one logit row. */
static void row_scores(float *s, const float *z, int E, int sigmoid)
{
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

/* The k best of score + bias, descending, a tie to the lower expert. */
static void row_top_k(int *idx, const float *s, const float *bias, int E, int k)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0.0f;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++) taken = idx[i] == e;
            if (taken) continue;
            float v = s[e] + (bias ? bias[e] : 0.0f);
            if (best < 0 || v > bv) best = e, bv = v;
        }
        idx[j] = best;
    }
}

/* Sum of the k chosen scores, in choice order (the forward's normaliser). */
static float chosen_sum(const float *s, const int *idx, int k)
{
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += s[idx[j]];
    return sum;
}

static float row_sum(const float *s, int E)
{
    float q = 0.0f;
    for (int e = 0; e < E; e++) q += s[e];
    return q;
}

void cpu_moe_router_forward(float *scores, int *idx, float *w, float *psum, const float *logits, const float *bias,
                            int N, int E, int k, int sigmoid, int norm, int T, int row0)
{
    if (N <= 0) return;
    #pragma omp parallel for if ((size_t)N * E > CPU_PAR_MIN / 4)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * E;
        float *s = scores + (size_t)n * E;
        int *ix = idx + (size_t)n * k;
        row_scores(s, z, E, sigmoid);
        row_top_k(ix, s, bias, E, k);
        float inv = norm ? 1.0f / chosen_sum(s, ix, k) : 1.0f;
        for (int j = 0; j < k; j++) w[(size_t)n * k + j] = norm ? s[ix[j]] * inv : s[ix[j]];
    }
    if (!psum) return;
    int G = (row0 + N - 1) / T + 1;
    #pragma omp parallel for if (G > 1)
    for (int g = 0; g < G; g++) {
        float *p = psum + (size_t)g * E;
        for (int e = 0; e < E; e++) p[e] = 0.0f;
        int lo = g * T - row0, hi = lo + T;
        if (lo < 0) lo = 0;
        if (hi > N) hi = N;
        for (int n = lo; n < hi; n++) {
            const float *s = scores + (size_t)n * E;
            float inv = sigmoid ? 1.0f / row_sum(s, E) : 1.0f;
            for (int e = 0; e < E; e++) p[e] += sigmoid ? s[e] * inv : s[e];
        }
    }
}

void cpu_moe_router_backward(float *dlogits, const float *scores, const int *idx, const float *w, const float *dw,
                             const float *daux, int N, int E, int k, int sigmoid, int norm, int T, int row0)
{
    if (N <= 0) return;
    #pragma omp parallel if ((size_t)N * E > CPU_PAR_MIN / 4)
    {
        float *ds = malloc((size_t)E * sizeof(float));
        #pragma omp for
        for (int n = 0; n < N; n++) {
            if (!ds) continue;
            const float *s = scores + (size_t)n * E;
            const int *ix = idx + (size_t)n * k;
            const float *gw = dw + (size_t)n * k, *wn = w + (size_t)n * k;
            for (int e = 0; e < E; e++) ds[e] = 0.0f;
            /* the weights: w_j = s_j / S (norm) or s_j */
            if (norm) {
                float S = chosen_sum(s, ix, k), dot = 0.0f;
                for (int j = 0; j < k; j++) dot += gw[j] * wn[j];
                for (int j = 0; j < k; j++) ds[ix[j]] += (gw[j] - dot) / S;
            } else {
                for (int j = 0; j < k; j++) ds[ix[j]] += gw[j];
            }
            /* the balance probabilities q: the scores (softmax), s / sum(s) (sigmoid) */
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
        free(ds);
    }
}
