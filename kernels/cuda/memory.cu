/* memory.cu — device memory for the CUDA backend (twin of kernels/cpu/memory.c).
 *
 * alloc returns zeroed device memory, as the contract says (the model relies
 * on it: fresh gradients start at zero). A zero-byte request still gets a
 * valid pointer (cudaMalloc(0) would give NULL, which the contract reserves
 * for failure). zero and copy are queued on the backend stream like every op;
 * to_host and from_host return only when the host buffer may be read or
 * reused, because the model reads its loss and refills its host staging
 * buffers right after these calls. */
#include "kernels/cuda/common.cuh"

/* cudaMalloc's own granularity; also keeps every buffer 256-byte aligned. */
#define DTC_MIN_ALLOC 256

void *cuda_alloc(size_t bytes) {
    void *p = nullptr;
    if (bytes < DTC_MIN_ALLOC) bytes = DTC_MIN_ALLOC;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError(); /* out of memory is an answer, not a sticky error */
        return nullptr;
    }
    /* on the backend stream: a later op on it then sees zeros without a
     * device-wide synchronisation */
    DTC_CHECK(cudaMemsetAsync(p, 0, bytes, dtc.stream));
    return p;
}

/* Page-locked host memory: copies to and from it run at the link's full
 * speed and may be asynchronous (pageable memory is staged by the driver). */
void *cuda_host_alloc(size_t bytes) {
    void *p = nullptr;
    if (!bytes) bytes = 1;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    memset(p, 0, bytes);
    return p;
}

void cuda_host_free(void *p) {
    if (p) DTC_CHECK(cudaFreeHost(p));
}

void cuda_free(void *p) {
    /* cudaFree synchronises with the device first, so no queued op still
     * uses p when it goes back */
    if (p) DTC_CHECK(cudaFree(p));
}

/* Stream-ordered memory from the device's default pool, which is told once
 * to keep what it got (its release threshold: the most it may hold unused;
 * 0 by default, which hands memory back at every synchronisation): a buffer
 * freed by one MoE block is the next one's without a trip to the driver. */
void *cuda_alloc_ordered(size_t bytes) {
    static int pool_kept;
    if (!pool_kept) {
        int dev = 0;
        cudaMemPool_t pool;
        DTC_CHECK(cudaGetDevice(&dev));
        DTC_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
        unsigned long long keep = ~0ULL;
        DTC_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
        pool_kept = 1;
    }
    void *p = nullptr;
    if (bytes < DTC_MIN_ALLOC) bytes = DTC_MIN_ALLOC;
    if (cudaMallocAsync(&p, bytes, dtc.stream) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return p;
}

void cuda_free_ordered(void *p) {
    if (p) DTC_CHECK(cudaFreeAsync(p, dtc.stream));
}

void cuda_zero(void *p, size_t bytes) {
    if (bytes) DTC_CHECK(cudaMemsetAsync(p, 0, bytes, dtc.stream));
}

void cuda_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        DTC_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dtc.stream));
}

void cuda_to_host(void *dst_host, const void *src, size_t bytes) {
    if (!bytes) return;
    DTC_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, dtc.stream));
    DTC_CHECK(cudaStreamSynchronize(dtc.stream));
}

/* On the copy stream, after everything queued on the compute stream so far
 * (an event between them); the handle is the event that marks its end. The
 * direction comes from the pointers (unified addressing). */
void *cuda_copy_start(void *dst, const void *src, size_t bytes) {
    if (!bytes) return nullptr;
    cudaEvent_t after, done;
    DTC_CHECK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
    DTC_CHECK(cudaEventRecord(after, dtc.stream));
    DTC_CHECK(cudaStreamWaitEvent(dtc.copy_stream, after, 0));
    DTC_CHECK(cudaEventDestroy(after)); /* released once the wait is done */
    DTC_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, dtc.copy_stream));
    DTC_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    DTC_CHECK(cudaEventRecord(done, dtc.copy_stream));
    return (void *)done;
}

void cuda_copy_finish(void *handle) {
    if (!handle) return;
    cudaEvent_t done = (cudaEvent_t)handle;
    DTC_CHECK(cudaStreamWaitEvent(dtc.stream, done, 0));
    DTC_CHECK(cudaEventSynchronize(done));
    DTC_CHECK(cudaEventDestroy(done));
}

void cuda_from_host(void *dst, const void *src_host, size_t bytes) {
    if (!bytes) return;
    DTC_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, dtc.stream));
    /* the caller may overwrite src_host as soon as we return */
    DTC_CHECK(cudaStreamSynchronize(dtc.stream));
}
