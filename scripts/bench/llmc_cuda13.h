/* llmc_cuda13.h — forced into llm.c's train_gpt2.cu by scripts/bench/gpu.sh
 * (nvcc -include), so that the llm.c snapshot builds with CUDA 13 unchanged.
 *
 * CUDA 13 changed cudaMemAdvise's last parameter from a device ordinal to a
 * cudaMemLocation; llm.c (llmc/cuda_utils.cuh, its managed-memory fallback)
 * still passes the ordinal. This overload takes the ordinal and forwards it
 * (cudaCpuDeviceId, -1, is the host). Nothing else in llm.c needed a change
 * at the commit device-check.sh --prepare records in llm.c/COMMIT. */
#include <cuda_runtime.h>

#if defined(__cplusplus) && CUDART_VERSION >= 13000
static inline cudaError_t cudaMemAdvise(const void *p, size_t bytes, cudaMemoryAdvise advice, int device)
{
    cudaMemLocation where;
    where.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    where.id = device == cudaCpuDeviceId ? 0 : device;
    return cudaMemAdvise(p, bytes, advice, where);
}
#endif
