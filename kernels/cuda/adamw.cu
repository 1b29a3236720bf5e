/* adamw.cu — AdamW on one flat tensor, one fused pass (twin of
 * kernels/cpu/adamw.c), fp32 parameters and state:
 *     m = b1 m + (1-b1) g,        v = b2 v + (1-b2) g^2
 *     mhat = m / (1-b1^t),        vhat = v / (1-b2^t)
 *     p -= lr (mhat / (sqrt(vhat) + eps) + wd p)
 * The bias corrections are computed on the host in double exactly as the CPU
 * does (1 - b2^t is tiny for small t) and passed in as floats.
 *
 * adamw_multi: every tensor of a step in one launch (a GPT-2 step has ~150
 * parameter tensors, each a launch otherwise). The list (pointers, sizes,
 * weight decay) is the same every step, so its device copy, with the
 * tensors' first flat indices, is kept and sent again only when the list
 * differs from the one sent; a grid-stride loop runs over the concatenated
 * elements, each finding its tensor by binary search over those indices
 * (a warp's elements nearly always share one). The per-element arithmetic
 * is adamw_kernel's, in the same order. */
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common.cuh"

__device__ __forceinline__ void adamw_one(float *__restrict__ p, const float *__restrict__ g,
                                          float *__restrict__ m, float *__restrict__ v, size_t i,
                                          float lr, float beta1, float beta2, float eps, float wd,
                                          float corr1, float corr2) {
    float gi = g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / corr1, vhat = vi / corr2;
    float pi = p[i];
    p[i] = pi - lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
}

__global__ void adamw_kernel(float *__restrict__ p, const float *__restrict__ g,
                             float *__restrict__ m, float *__restrict__ v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, float corr1,
                             float corr2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adamw_one(p, g, m, v, i, lr, beta1, beta2, eps, wd, corr1, corr2);
}

/* first[k]: the flat index of tensor k's element 0; first[count] = total */
__global__ void adamw_multi_kernel(const dt_adamw_tensor *__restrict__ list,
                                   const size_t *__restrict__ first, int count, float lr,
                                   float beta1, float beta2, float eps, float corr1, float corr2) {
    size_t total = first[count];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int lo = 0, hi = count - 1; /* the last k with first[k] <= i */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (first[mid] <= i) lo = mid;
            else hi = mid - 1;
        }
        const dt_adamw_tensor *t = &list[lo];
        adamw_one(t->p, t->g, t->m, t->v, i - first[lo], lr, beta1, beta2, eps, t->weight_decay,
                  corr1, corr2);
    }
}

/* The list as last sent: host copy to compare with, device copies to read. */
static struct {
    dt_adamw_tensor *host, *dev;
    size_t *first;
    int count, cap;
} sent;

static void send_list(const dt_adamw_tensor *list, int count, size_t *total) {
    size_t sum = 0;
    for (int k = 0; k < count; k++) sum += list[k].n;
    *total = sum;
    if (count == sent.count && memcmp(list, sent.host, (size_t)count * sizeof *list) == 0) return;
    if (count > sent.cap) {
        /* cudaFree waits for the device: no queued step still reads them */
        if (sent.dev) DTC_CHECK(cudaFree(sent.dev));
        if (sent.first) DTC_CHECK(cudaFree(sent.first));
        free(sent.host);
        sent.dev = nullptr;
        sent.first = nullptr;
        sent.host = (dt_adamw_tensor *)malloc((size_t)count * sizeof *list);
        if (!sent.host) dtc_fatal(__FILE__, __LINE__, "malloc", "out of host memory");
        DTC_CHECK(cudaMalloc(&sent.dev, (size_t)count * sizeof *list));
        DTC_CHECK(cudaMalloc(&sent.first, (size_t)(count + 1) * sizeof(size_t)));
        sent.cap = count;
    }
    size_t *first = (size_t *)malloc((size_t)(count + 1) * sizeof(size_t));
    if (!first) dtc_fatal(__FILE__, __LINE__, "malloc", "out of host memory");
    first[0] = 0;
    for (int k = 0; k < count; k++) first[k + 1] = first[k] + list[k].n;
    /* synchronous copies, ordered after the stream's queued work (a blocking
     * stream, common.cuh): once per list, not per step */
    DTC_CHECK(cudaMemcpy(sent.dev, list, (size_t)count * sizeof *list, cudaMemcpyHostToDevice));
    DTC_CHECK(cudaMemcpy(sent.first, first, (size_t)(count + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    free(first);
    memcpy(sent.host, list, (size_t)count * sizeof *list);
    sent.count = count;
}

void cuda_adamw_multi(const dt_adamw_tensor *list, int count, float lr, float beta1, float beta2,
                      float eps, int t) {
    if (count <= 0) return;
    size_t total;
    send_list(list, count, &total);
    if (!total) return;
    float corr1 = (float)(1.0 - pow((double)beta1, t));
    float corr2 = (float)(1.0 - pow((double)beta2, t));
    adamw_multi_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(sent.dev, sent.first, count, lr,
                                                                      beta1, beta2, eps, corr1, corr2);
    DTC_LAUNCHED();
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
