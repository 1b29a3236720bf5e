/* adamw.cu — AdamW on one flat tensor, one fused pass (twin of
 * kernels/cpu/adamw.c), fp32 parameters and state:
 *     m = b1 m + (1-b1) g,        v = b2 v + (1-b2) g^2
 *     mhat = m / (1-b1^t),        vhat = v / (1-b2^t)
 *     p -= lr (mhat / (sqrt(vhat) + eps) + wd p)
 * The bias corrections are computed on the host in double exactly as the CPU
 * does (1 - b2^t is tiny for small t: dt_adamw_hyper_of) and passed in as
 * floats. The multi-tensor steps take them, with lr, by value or (the _dev
 * entries, for a step replayed as a CUDA graph) read them from device memory
 * when the kernel runs: one kernel either way, so the same bits.
 *
 * adamw_multi: every tensor of a step in one launch (a GPT-2 step has ~150
 * parameter tensors, each a launch otherwise). The list (pointers, sizes,
 * weight decay) is the same every step, so its device copy, with the
 * tensors' first flat indices, is kept (a few lists: one per pipeline
 * chunk) and sent only for a list not kept; a grid-stride loop runs over the concatenated
 * elements, each finding its tensor by binary search over those indices
 * (a warp's elements nearly always share one). The per-element arithmetic
 * is adamw_kernel's, in the same order (adamw_elem).
 *
 * adamw_mixed_multi: bf16 mixed precision's step the same way, one launch
 * and its own kept list: each element's gradient is widened (bf16) or read
 * (fp32) and scaled in a register, adamw_elem updates the fp32 master, and
 * the bf16 parameter is written as bf16.cuh rounds it — one pass over memory
 * where from_bf16, scale, adamw and to_bf16 made four, with the same
 * arithmetic (the scaled gradient is a rounded product either way, and only
 * multiplies after, so no FMA can take it in). */
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/common.cuh"

/* One element: updates *m and *v from gradient gi, returns the new parameter. */
__device__ __forceinline__ float adamw_elem(float pi, float gi, float *__restrict__ m, float *__restrict__ v,
                                            float lr, float beta1, float beta2, float eps, float wd,
                                            float corr1, float corr2) {
    float mi = beta1 * *m + (1.0f - beta1) * gi;
    float vi = beta2 * *v + (1.0f - beta2) * gi * gi;
    *m = mi;
    *v = vi;
    float mhat = mi / corr1, vhat = vi / corr2;
    return pi - lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
}

__global__ void adamw_kernel(float *__restrict__ p, const float *__restrict__ g,
                             float *__restrict__ m, float *__restrict__ v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, float corr1,
                             float corr2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = adamw_elem(p[i], g[i], &m[i], &v[i], lr, beta1, beta2, eps, wd, corr1, corr2);
}

/* The tensor holding flat element i: the last k with first[k] <= i. */
__device__ __forceinline__ int tensor_of(const size_t *__restrict__ first, int count, size_t i) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (first[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* A step's scalars: given at issue (hv), or read where the kernel runs (hp,
 * when not NULL: a graph replays the step with each step's values; ops.h
 * adamw_multi_dev). Both ways the same arithmetic on the same values. */
__device__ __forceinline__ dt_adamw_hyper hyper_of(const dt_adamw_hyper &hv, const dt_adamw_hyper *hp) {
    return hp ? *hp : hv;
}

/* first[k]: the flat index of tensor k's element 0; first[count] = total */
__global__ void adamw_multi_kernel(const dt_adamw_tensor *__restrict__ list,
                                   const size_t *__restrict__ first, int count, dt_adamw_hyper hv,
                                   const dt_adamw_hyper *hp, float beta1, float beta2, float eps) {
    dt_adamw_hyper h = hyper_of(hv, hp);
    size_t total = first[count];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int k = tensor_of(first, count, i);
        const dt_adamw_tensor *t = &list[k];
        size_t j = i - first[k];
        t->p[j] = adamw_elem(t->p[j], t->g[j], &t->m[j], &t->v[j], h.lr, beta1, beta2, eps, t->weight_decay,
                             h.corr1, h.corr2);
    }
}

/* GRAD_BF16: the list's gradients are bf16 (uint16_t), else fp32. The
 * gradient scale: gs, or *gsp when gsp is not NULL. */
template <bool GRAD_BF16>
__global__ void adamw_mixed_multi_kernel(const dt_adamw_mixed_tensor *__restrict__ list,
                                         const size_t *__restrict__ first, int count, float gs,
                                         const float *gsp, dt_adamw_hyper hv, const dt_adamw_hyper *hp,
                                         float beta1, float beta2, float eps) {
    dt_adamw_hyper h = hyper_of(hv, hp);
    float grad_scale = gsp ? *gsp : gs;
    size_t total = first[count];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int k = tensor_of(first, count, i);
        const dt_adamw_mixed_tensor *t = &list[k];
        size_t j = i - first[k];
        float gi = GRAD_BF16 ? dtc_bf16_to_f32(((const uint16_t *)t->g)[j]) : ((const float *)t->g)[j];
        if (grad_scale != 1.0f) gi *= grad_scale; /* as scale: only when it scales */
        float w = adamw_elem(t->master[j], gi, &t->m[j], &t->v[j], h.lr, beta1, beta2, eps, t->weight_decay,
                             h.corr1, h.corr2);
        t->master[j] = w;
        t->p[j] = dtc_f32_to_bf16(w);
    }
}

/* A list as sent: host copy to compare with, device copies to read. */
template <typename T>
struct sent_list {
    T *host, *dev;
    size_t *first;
    int count, cap;
};
/* The lists sent, a few per type: a rank with several pipeline chunks
 * (virtual stages) has one optimizer, so one list, per chunk, and steps
 * them in turn; each keeps its slot, and nothing is sent again in a step.
 * More lists than slots take the slots round robin (sent again: correct,
 * only slower). */
#define SENT_SLOTS 8
template <typename T>
struct sent_cache {
    sent_list<T> slot[SENT_SLOTS];
    int next;
};
static sent_cache<dt_adamw_tensor> sent_fp32;
static sent_cache<dt_adamw_mixed_tensor> sent_mixed;

/* The slot that holds `list` on the device, sending it when none does;
 * *total: the list's element count. */
template <typename T>
static const sent_list<T> *send_list(sent_cache<T> &cache, const T *list, int count, size_t *total) {
    *total = 0;
    for (int k = 0; k < count; k++) *total += list[k].n;
    for (int i = 0; i < SENT_SLOTS; i++) {
        const sent_list<T> &s = cache.slot[i];
        if (s.count == count && memcmp(list, s.host, (size_t)count * sizeof *list) == 0) return &s;
    }
    if (dtc.capturing)
        dtc_fatal(__FILE__, __LINE__, "adamw (multi-tensor)",
                  "the tensor list changed while a CUDA graph was being recorded (record a step only after it "
                  "ran once as issued)");
    sent_list<T> &sent = cache.slot[cache.next];
    cache.next = (cache.next + 1) % SENT_SLOTS;
    if (count > sent.cap) {
        /* cudaFree waits for the device: no queued step still reads them */
        if (sent.dev) DTC_CHECK(cudaFree(sent.dev));
        if (sent.first) DTC_CHECK(cudaFree(sent.first));
        free(sent.host);
        sent.dev = nullptr;
        sent.first = nullptr;
        sent.host = (T *)malloc((size_t)count * sizeof *list);
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
     * stream, common.cuh), so a queued step still reading this slot's old
     * list has finished: once per list, not per step */
    DTC_CHECK(cudaMemcpy(sent.dev, list, (size_t)count * sizeof *list, cudaMemcpyHostToDevice));
    DTC_CHECK(cudaMemcpy(sent.first, first, (size_t)(count + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    free(first);
    memcpy(sent.host, list, (size_t)count * sizeof *list);
    sent.count = count;
    return &sent;
}

/* The host-side entries: scalars by value (hp NULL) or read on the device. */
static void multi(const dt_adamw_tensor *list, int count, dt_adamw_hyper hv, const dt_adamw_hyper *hp,
                  float beta1, float beta2, float eps) {
    if (count <= 0) return;
    size_t total;
    const sent_list<dt_adamw_tensor> *sent = send_list(sent_fp32, list, count, &total);
    if (!total) return;
    adamw_multi_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(sent->dev, sent->first, count, hv, hp,
                                                                      beta1, beta2, eps);
    DTC_LAUNCHED();
}

static void mixed_multi(const dt_adamw_mixed_tensor *list, int count, int grad_bf16, float gs, const float *gsp,
                        dt_adamw_hyper hv, const dt_adamw_hyper *hp, float beta1, float beta2, float eps) {
    if (count <= 0) return;
    size_t total;
    const sent_list<dt_adamw_mixed_tensor> *sent = send_list(sent_mixed, list, count, &total);
    if (!total) return;
    unsigned blocks = dtc_blocks(total, 256);
    if (grad_bf16)
        adamw_mixed_multi_kernel<true><<<blocks, 256, 0, dtc.stream>>>(sent->dev, sent->first, count, gs, gsp, hv,
                                                                       hp, beta1, beta2, eps);
    else
        adamw_mixed_multi_kernel<false><<<blocks, 256, 0, dtc.stream>>>(sent->dev, sent->first, count, gs, gsp, hv,
                                                                        hp, beta1, beta2, eps);
    DTC_LAUNCHED();
}

void cuda_adamw_multi(const dt_adamw_tensor *list, int count, float lr, float beta1, float beta2,
                      float eps, int t) {
    multi(list, count, dt_adamw_hyper_of(lr, beta1, beta2, t), nullptr, beta1, beta2, eps);
}

void cuda_adamw_multi_dev(const dt_adamw_tensor *list, int count, const dt_adamw_hyper *h, float beta1,
                          float beta2, float eps) {
    multi(list, count, dt_adamw_hyper{}, h, beta1, beta2, eps);
}

void cuda_adamw_mixed_multi(const dt_adamw_mixed_tensor *list, int count, int grad_bf16, float grad_scale,
                            float lr, float beta1, float beta2, float eps, int t) {
    mixed_multi(list, count, grad_bf16, grad_scale, nullptr, dt_adamw_hyper_of(lr, beta1, beta2, t), nullptr, beta1,
                beta2, eps);
}

void cuda_adamw_mixed_multi_dev(const dt_adamw_mixed_tensor *list, int count, int grad_bf16,
                                const float *grad_scale, const dt_adamw_hyper *h, float beta1, float beta2,
                                float eps) {
    mixed_multi(list, count, grad_bf16, 1.0f, grad_scale, dt_adamw_hyper{}, h, beta1, beta2, eps);
}

void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, int t) {
    if (!n) return;
    dt_adamw_hyper h = dt_adamw_hyper_of(lr, beta1, beta2, t);
    adamw_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(p, g, m, v, n, lr, beta1, beta2,
                                                             eps, weight_decay, h.corr1, h.corr2);
    DTC_LAUNCHED();
}
