/* softmax_row.h — one attention row's softmax, shared by the full kernel
 * (attention.c) and the blockwise one (attention_block.c), so both round the
 * same way. */
#ifndef DTRUN_CPU_SOFTMAX_ROW_H
#define DTRUN_CPU_SOFTMAX_ROW_H

#include <math.h>
#include <string.h>

/* In place: row[0..valid) <- softmax(row[0..valid)), row[valid..n) <- 0.
 * lse (may be NULL) gets the row's log-sum-exp: -inf for a row that sees no
 * key (all zeros then). */
static inline void cpu_softmax_row(float *row, int valid, int n, float *lse)
{
    if (valid <= 0) {
        if (n > 0) memset(row, 0, (size_t)n * sizeof(float));
        if (lse) *lse = -INFINITY;
        return;
    }
    float mx = -INFINITY;
    #pragma omp simd reduction(max:mx)
    for (int j = 0; j < valid; j++) mx = row[j] > mx ? row[j] : mx; /* not fmaxf: a libm call */
    float sum = 0.0f;
    #pragma omp simd reduction(+:sum)
    for (int j = 0; j < valid; j++) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    #pragma omp simd
    for (int j = 0; j < valid; j++) row[j] *= inv;
    if (valid < n) memset(row + valid, 0, (size_t)(n - valid) * sizeof(float));
    if (lse) *lse = mx + logf(sum);
}

#endif
