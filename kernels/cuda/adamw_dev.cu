/* adamw_dev.cu — AdamW with lr and the bias corrections read from device
 * memory when the kernel runs (twin of kernels/cpu/adamw_dev.c; ops.h
 * adamw_dev, adamw_multi_dev), so that a step replayed as a graph takes each
 * step's learning rate without being recorded again.
 *
 * The arithmetic per element is adamw.cu's adamw_one, written out again here
 * (that file is adamw.cu's own): the same expression in the same order, so
 * nvcc contracts it the same way and a replayed step updates the parameters
 * bit for bit as the step issued op by op (test/gpu/test_graphs.c checks it).
 * The bias corrections come from dt_adamw_hyper_of, which computes them as
 * adamw.cu does on the host (double, rounded to float).
 *
 * adamw_multi_dev keeps its own device copy of the tensor list, like
 * adamw_multi, sent again only when the list changes; the copy is a
 * synchronous cudaMemcpy, which a graph being recorded cannot hold, so a
 * list that changes while recording stops the process with one line (a step
 * is recorded only after it ran once as issued: its list was sent then). */
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common.cuh"

__device__ __forceinline__ void adamw_dev_one(float *__restrict__ p, const float *__restrict__ g,
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

__global__ void adamw_dev_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                                 float *__restrict__ v, size_t n, const dt_adamw_hyper *__restrict__ h,
                                 float beta1, float beta2, float eps, float wd) {
    float lr = h->lr, corr1 = h->corr1, corr2 = h->corr2;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adamw_dev_one(p, g, m, v, i, lr, beta1, beta2, eps, wd, corr1, corr2);
}

/* first[k]: the flat index of tensor k's element 0; first[count] = total */
__global__ void adamw_multi_dev_kernel(const dt_adamw_tensor *__restrict__ list,
                                       const size_t *__restrict__ first, int count,
                                       const dt_adamw_hyper *__restrict__ h, float beta1, float beta2,
                                       float eps) {
    float lr = h->lr, corr1 = h->corr1, corr2 = h->corr2;
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
        adamw_dev_one(t->p, t->g, t->m, t->v, i - first[lo], lr, beta1, beta2, eps, t->weight_decay, corr1,
                      corr2);
    }
}

/* The list as last sent: host copy to compare with, device copies to read. */
static struct {
    dt_adamw_tensor *host, *dev;
    size_t *first;
    int count, cap;
    size_t total;
} sent;

static void send_list(const dt_adamw_tensor *list, int count) {
    if (count == sent.count && memcmp(list, sent.host, (size_t)count * sizeof *list) == 0) return;
    if (dtc.capturing)
        dtc_fatal(__FILE__, __LINE__, "adamw_multi_dev",
                  "the tensor list changed while a CUDA graph was being recorded (record a step only after it "
                  "ran once as issued)");
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
    sent.total = first[count];
    free(first);
    memcpy(sent.host, list, (size_t)count * sizeof *list);
    sent.count = count;
}

void cuda_adamw_multi_dev(const dt_adamw_tensor *list, int count, const dt_adamw_hyper *h, float beta1,
                          float beta2, float eps) {
    if (count <= 0) return;
    send_list(list, count);
    if (!sent.total) return;
    adamw_multi_dev_kernel<<<dtc_blocks(sent.total, 256), 256, 0, dtc.stream>>>(sent.dev, sent.first, count, h,
                                                                               beta1, beta2, eps);
    DTC_LAUNCHED();
}

void cuda_adamw_dev(float *p, const float *g, float *m, float *v, size_t n, const dt_adamw_hyper *h, float beta1,
                    float beta2, float eps, float weight_decay) {
    if (!n) return;
    adamw_dev_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(p, g, m, v, n, h, beta1, beta2, eps,
                                                                 weight_decay);
    DTC_LAUNCHED();
}
