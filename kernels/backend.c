/* backend.c — picking a backend's ops table, and the CPU thread count.
 *
 * The CUDA table lives in kernels/cuda/ and is compiled only when the Makefile
 * finds nvcc and NCCL (it then defines DTRUN_CUDA); without it there is no CUDA
 * backend and dt_ops_cuda() answers NULL, so callers need no #ifdef. */
#include <cblas.h>
#include <omp.h>

#include "kernels/ops.h"

#ifdef DTRUN_CUDA
#include "kernels/cuda/ops_cuda.h"

/* The CUDA table, or NULL when no device is usable. */
const dt_ops *dt_ops_cuda(void) { return dt_ops_cuda_probe(); }
#else
const dt_ops *dt_ops_cuda(void) { return NULL; }
#endif

/* One pool: OpenMP runs every loop and splits every GEMM; OpenBLAS itself
 * stays single-threaded (two spinning pools on the same cores measured 2-5x
 * slower; see kernels/cpu/gemm.c). */
void dt_ops_set_threads(int n) {
    openblas_set_num_threads(1);
    if (n > 0) omp_set_num_threads(n);
}
