/* xent.c — softmax cross-entropy over logits[N, Vl], vocab-parallel ready.
 *
 * loss_i = log(sum_j exp(l_ij)) - l_i,target
 *        = log(sumexp_i) + rowmax_i - target_i,   sumexp_i = sum_j exp(l_ij - rowmax_i)
 * The three per-row quantities are computed by separate calls so that, under
 * tensor parallelism where each rank holds columns [v0, v0+Vl) of the vocab,
 * the strategy can all-reduce rowmax (max), then sumexp (sum, computed with the
 * global max) and target (sum) in between. With one rank they just chain.
 * Rows whose target is < 0 are ignored: loss 0, gradient 0. */
#include <math.h>

#include "kernels/cpu/cpu.h"

void cpu_xent_rowmax(float *rowmax, const float *logits, int N, int Vl) {
    #pragma omp parallel for if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * Vl;
        float mx = -INFINITY;
        #pragma omp simd reduction(max:mx)
        for (int j = 0; j < Vl; j++) mx = l[j] > mx ? l[j] : mx; /* not fmaxf: a libm call */
        rowmax[i] = mx;
    }
}

/* Subtracting the (global) row max keeps every exp <= 1: no overflow. */
void cpu_xent_sumexp(float *sumexp, const float *logits, const float *rowmax, int N, int Vl) {
    #pragma omp parallel for if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * Vl;
        float mx = rowmax[i], sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int j = 0; j < Vl; j++) sum += expf(l[j] - mx);
        sumexp[i] = sum;
    }
}

void cpu_xent_target(float *target, const float *logits, const int *targets,
                     int v0, int N, int Vl) {
    for (int i = 0; i < N; i++) {
        int col = targets[i] - v0;
        target[i] = (targets[i] >= 0 && col >= 0 && col < Vl) ? logits[(size_t)i * Vl + col] : 0.0f;
    }
}

void cpu_xent_loss(float *loss, const float *rowmax, const float *sumexp,
                   const float *target, const int *targets, int N) {
    for (int i = 0; i < N; i++)
        loss[i] = targets[i] < 0 ? 0.0f : logf(sumexp[i]) + rowmax[i] - target[i];
}

/* d loss_i / d l_ij = softmax_ij - [j == target_i]; scaled by dloss_i. */
void cpu_xent_backward(float *dlogits, const float *logits, const float *rowmax,
                       const float *sumexp, const int *targets, const float *dloss,
                       int v0, int N, int Vl) {
    #pragma omp parallel for if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * Vl;
        float *dl = dlogits + (size_t)i * Vl;
        if (targets[i] < 0) {
            for (int j = 0; j < Vl; j++) dl[j] = 0.0f;
            continue;
        }
        float mx = rowmax[i], scale = dloss[i] / sumexp[i], d = dloss[i];
        #pragma omp simd
        for (int j = 0; j < Vl; j++) dl[j] = expf(l[j] - mx) * scale;
        int col = targets[i] - v0;
        if (col >= 0 && col < Vl) dl[col] -= d;
    }
}
