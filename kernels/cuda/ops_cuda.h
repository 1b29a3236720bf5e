/* ops_cuda.h — the CUDA backend's entry points beyond the ops table, for C
 * callers (kernels/backend.c, the runtime's device set-up, test/gpu).
 *
 * The table itself comes from dt_ops_cuda() (kernels/ops.h), which answers
 * NULL when the backend is not built or no device is usable. Everything below
 * exists only in a build with DTRUN_CUDA defined. */
#ifndef DTRUN_KERNELS_CUDA_OPS_H
#define DTRUN_KERNELS_CUDA_OPS_H

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table, set up on first call on the selected device (default: the
 * process's current device, 0 unless someone chose another); NULL when
 * cudaGetDeviceCount fails or finds none, or the set-up fails. */
const dt_ops *dt_ops_cuda_probe(void);

/* Choose the device (a worker passes LOCAL_RANK % device count). Call before
 * the first dt_ops_cuda(); returns 0, or -1 when the device does not exist
 * or the backend is already set up on another one. */
int dt_ops_cuda_use_device(int device);

/* TF32 tensor cores for the GEMMs: off by default, so that the fp32 twin
 * matches the CPU within fp32 tolerance (TF32 keeps 10 mantissa bits: ~1e-3
 * relative error per product). A caller may switch it on for speed. */
void dt_ops_cuda_set_tf32(int on);

/* bf16 tensor cores (the table's set_bf16_products; see kernels/ops.h): on
 * says that the tensors a bf16 model rounds where it stores them (qkv, the
 * matmul inputs) hold bf16 values. The GEMMs then narrow their fp32
 * operands to bf16 (exact for those; the gradients flowing back are
 * rounded; an activation stored in bf16 goes in as stored, and makes its
 * GEMM a bf16 one with the switch off too) with fp32 accumulation and fp32
 * results (bf16 where an op stores a bf16 activation, rounded once),
 * taking precedence over TF32 (kernels/cuda/matmul.cu); the blockwise
 * attention rounds P, dO and dS to bf16 for their products, as flash
 * attention does (kernels/cuda/attention_block_bf16.cu). Off by default
 * (fp32 arithmetic, the CPU twin's). */
void dt_ops_cuda_set_bf16(int on);

/* The stream every op is queued on (a cudaStream_t), for communication code
 * that must order itself after compute (events) — NULL before set-up. */
void *dt_ops_cuda_stream(void);

/* Waits until every queued op has finished (for timing). */
void dt_ops_cuda_synchronize(void);

/* Name of the device in use ("" before set-up), for logs and reports. */
const char *dt_ops_cuda_device_name(void);

#ifdef __cplusplus
}
#endif

#endif
