/* layernorm_row.cuh — one row of a layernorm, computed by one warp: shared by
 * layernorm.cu's forward and residual_layernorm.cu (which normalises the sum
 * it has just stored). x [C] in, o [C] out, both of type T (act.cuh); the
 * row's mean and rstd written by lane 0. Two passes over x for the
 * statistics (the mean, then the squared deviations: no cancellation when
 * the mean is large), as the CPU twin's; each lane reads the columns c =
 * lane mod 32, the ones it wrote when x is a sum it stored. */
#ifndef DTRUN_KERNELS_CUDA_LAYERNORM_ROW_CUH
#define DTRUN_KERNELS_CUDA_LAYERNORM_ROW_CUH

#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

template <typename T>
__device__ __forceinline__ void dtc_layernorm_row(T *o, float *mean, float *rstd, const T *x, const float *w,
                                                  const float *b, int C, float eps, int lane) {
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += act_load(x, c);
    float m = dtc_warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = act_load(x, c) - m;
        sq += d * d;
    }
    float s = 1.0f / sqrtf(dtc_warp_sum(sq) / C + eps);
    for (int c = lane; c < C; c += 32) act_store(o, c, (act_load(x, c) - m) * s * w[c] + b[c]);
    if (lane == 0) {
        *mean = m;
        *rstd = s;
    }
}

#endif
