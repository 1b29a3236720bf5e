/* backend.c — picking a backend's ops table, and the CPU thread count.
 *
 * The CUDA table lives in kernels/cuda/ and is compiled only when the Makefile
 * finds nvcc and NCCL (it then defines DTRUN_CUDA); without it there is no CUDA
 * backend and dt_ops_cuda() answers NULL, so callers need no #ifdef. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>

#include "kernels/ops.h"

#ifdef DTRUN_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/ops_cuda.h"

/* The CUDA table, or NULL when no device is usable. */
const dt_ops *dt_ops_cuda(void) { return dt_ops_cuda_probe(); }

/* One worker per GPU: LOCAL_RANK picks it (torchrun's convention); more
 * workers than GPUs share them round-robin. Without a driver (the CPU build
 * machines) cudaGetDeviceCount fails at once and auto means cpu. */
const dt_ops *dt_ops_select(dt_device want, int local_rank, char *err, size_t errlen)
{
    if (want == DT_DEVICE_CPU) return &dt_ops_cpu;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    if (n > 0) {
        int dev = (local_rank > 0 ? local_rank : 0) % n;
        const dt_ops *t = dt_ops_cuda_use_device(dev) == 0 ? dt_ops_cuda() : NULL;
        if (t) return t;
        if (want == DT_DEVICE_CUDA) {
            snprintf(err, errlen, "train.device is cuda but CUDA device %d (of %d) cannot be set up", dev, n);
            return NULL;
        }
        return &dt_ops_cpu;
    }
    if (want == DT_DEVICE_CUDA) {
        snprintf(err, errlen, "train.device is cuda but no CUDA device is usable (cudaGetDeviceCount: %s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        return NULL;
    }
    return &dt_ops_cpu;
}
#else
const dt_ops *dt_ops_cuda(void) { return NULL; }

const dt_ops *dt_ops_select(dt_device want, int local_rank, char *err, size_t errlen)
{
    if (want != DT_DEVICE_CUDA) return &dt_ops_cpu;
    snprintf(err, errlen, "train.device is cuda but this dtrun was built without the CUDA backend "
             "(needs nvcc and NCCL at build time, and not CUDA=0)");
    return NULL;
}
#endif

/* One pool: OpenMP runs every loop and splits every GEMM; OpenBLAS itself
 * stays single-threaded (two spinning pools on the same cores measured 2-5x
 * slower; see kernels/cpu/gemm.c). */
void dt_ops_set_threads(int n) {
    openblas_set_num_threads(1);
    if (n > 0) omp_set_num_threads(n);
}
