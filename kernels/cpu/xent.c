/* xent.c — softmax cross-entropy over logits[N, Vl], vocab-parallel ready.
 *
 * loss_i = log(sum_j exp(l_ij)) - l_i,target
 *        = log(sumexp_i) + rowmax_i - target_i,   sumexp_i = sum_j exp(l_ij - rowmax_i)
 * xent_stats reads each row once for all three (the chunked LM head's rows
 * are 50257 wide: three passes were three trips through memory). The sum is
 * online at the grain of a block of columns: the block's max first, the
 * running sum rescaled by exp(old max - new) when that max is larger, then
 * the block's exps added against the running max; the block (4 KiB) is still
 * in L1 for its second look. A row narrower than one block is exactly the
 * two-pass sum; on a wider one the blocks also shorten the fp32 chain of
 * additions (a 50257-wide row of logits spread over 10: 3e-7 off the double
 * sum, where one sequential sum of 50257 exps was 5e-5 off). The time is
 * the exps' (scalar libm expf) more than the memory's: on one core the one
 * read is ~5 % faster than the three passes were. Under tensor parallelism each rank's (max, sum) pair is
 * combined by the same rescaling (xent_rescale, after a MAX all-reduce).
 * Rows whose target is < 0 are ignored: loss 0, gradient 0. */
#include <math.h>

#include "kernels/cpu/cpu.h"

#define XENT_BLOCK 1024 /* columns per online step */

/* s, a sum of exps relative to max m, made relative to `to` >= m: exactly s
 * when they are equal (no exp(0) call; -inf == -inf too, where the
 * difference would be NaN). */
static inline float rescale_sum(float s, float m, float to)
{
    return m == to ? s : s * expf(m - to);
}

void cpu_xent_stats(float *rowmax, float *sumexp, float *target, const float *logits,
                    const int *targets, int v0, int N, int Vl) {
    #pragma omp parallel for if ((size_t)N * Vl > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * Vl;
        float mx = -INFINITY, sum = 0.0f;
        for (int j0 = 0; j0 < Vl; j0 += XENT_BLOCK) {
            const float *b = l + j0;
            int n = Vl - j0 < XENT_BLOCK ? Vl - j0 : XENT_BLOCK;
            float bmx = -INFINITY;
            #pragma omp simd reduction(max:bmx)
            for (int j = 0; j < n; j++) bmx = b[j] > bmx ? b[j] : bmx; /* not fmaxf: a libm call */
            if (bmx > mx) {
                sum = rescale_sum(sum, mx, bmx);
                mx = bmx;
            }
            /* while every value so far is -inf (or NaN) shift by 0: exp(-inf)
             * adds 0 and a NaN still reaches the sum (-inf - -inf would be NaN) */
            float shift = mx > -INFINITY ? mx : 0.0f, bsum = 0.0f;
            #pragma omp simd reduction(+:bsum)
            for (int j = 0; j < n; j++) bsum += expf(b[j] - shift);
            sum += bsum;
        }
        rowmax[i] = mx;
        sumexp[i] = sum;
        int col = targets[i] - v0;
        target[i] = (targets[i] >= 0 && col >= 0 && col < Vl) ? l[col] : 0.0f;
    }
}

void cpu_xent_rescale(float *sumexp, const float *from_max, const float *to_max, int N) {
    for (int i = 0; i < N; i++) sumexp[i] = rescale_sum(sumexp[i], from_max[i], to_max[i]);
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
