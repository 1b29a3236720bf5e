/* adamw.cu — AdamW on one flat tensor, one fused pass (twin of
 * kernels/cpu/adamw.c), fp32 parameters and state:
 *     m = b1 m + (1-b1) g,        v = b2 v + (1-b2) g^2
 *     mhat = m / (1-b1^t),        vhat = v / (1-b2^t)
 *     p -= lr (mhat / (sqrt(vhat) + eps) + wd p)
 * The bias corrections are computed on the host in double exactly as the CPU
 * does (1 - b2^t is tiny for small t) and passed in as floats. One call per
 * parameter tensor, as the optimizer walks them (a multi-tensor launch over
 * all parameters is a later speed step). */
#include <cmath>

#include "kernels/cuda/common.cuh"

__global__ void adamw_kernel(float *__restrict__ p, const float *__restrict__ g,
                             float *__restrict__ m, float *__restrict__ v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, float corr1,
                             float corr2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / corr1, vhat = vi / corr2;
        float pi = p[i];
        p[i] = pi - lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
    }
}

void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, int t) {
    if (!n) return;
    float corr1 = (float)(1.0 - pow((double)beta1, t));
    float corr2 = (float)(1.0 - pow((double)beta2, t));
    adamw_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(p, g, m, v, n, lr, beta1, beta2,
                                                             eps, weight_decay, corr1, corr2);
    DTC_LAUNCHED();
}
