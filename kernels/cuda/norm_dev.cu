/* norm_dev.cu — the global gradient norm and clipping where the ops keep the
 * numbers (twin of kernels/cpu/norm_dev.c; ops.h, "the step without the
 * host"). Each op is the engine's host arithmetic done on the device with
 * the same IEEE operations: sumsq_add is sumsq's kernels with the host's
 * `sq += total` as the last add (reduce.cu), clip_scale's sqrt and division
 * are correctly rounded in double on both sides, and scale_dev multiplies by
 * the same float, skipping the pass when it is 1 as the host does. So a step
 * replayed as a graph clips exactly as the step issued op by op. */
#include "kernels/cuda/common.cuh"

__global__ void scalar_add_kernel(double *acc, const double *x) { *acc += *x; }

__global__ void clip_scale_kernel(float *s, const double *sumsq, double clip) {
    double norm = sqrt(*sumsq);
    *s = clip > 0 && norm > clip ? (float)(clip / (norm + 1e-6)) : 1.0f;
}

__global__ void scale_dev_kernel(float *p, const float *sp, size_t n) {
    float s = *sp;
    if (s == 1.0f) return;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] *= s;
}

void cuda_sumsq_add(double *acc, const float *p, size_t n) {
    if (n) dtc_sumsq_into(acc, p, n, 1);
}

void cuda_scalar_add(double *acc, const double *x) {
    scalar_add_kernel<<<1, 1, 0, dtc.stream>>>(acc, x);
    DTC_LAUNCHED();
}

void cuda_clip_scale(float *s, const double *sumsq, double clip) {
    clip_scale_kernel<<<1, 1, 0, dtc.stream>>>(s, sumsq, clip);
    DTC_LAUNCHED();
}

void cuda_scale_dev(float *p, const float *s, size_t n) {
    if (!n) return;
    scale_dev_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(p, s, n);
    DTC_LAUNCHED();
}
