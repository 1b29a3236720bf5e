/* common.cuh — what every CUDA kernel file of the backend shares (private to
 * kernels/cuda/): the backend's one stream and handles, a growable scratch
 * buffer, launch helpers, warp/block reductions, and the C-ABI declarations of
 * each op (one op per .cu file, as in llm.c; ops_cuda.cu puts them in the
 * dt_ops table).
 *
 * Libraries: cuBLAS and cuBLASLt are dlopen'ed at set-up (blas.cu), so call
 * them through dtc_blas.*, never by name (the link would pull them in).
 *
 * Precision: every kernel here is the fp32 twin of kernels/cpu — fp32 in,
 * fp32 out, fp32 arithmetic (double where the CPU uses double), and GEMMs in
 * true fp32 (CUBLAS_COMPUTE_32F, no TF32) unless TF32 is switched on with
 * dt_ops_cuda_set_tf32(), or on bf16 tensor cores with fp32 accumulation when
 * the run is bf16 mixed precision (dt_ops_cuda_set_bf16, the table's
 * set_bf16_products): the tensors the model rounds to bf16 (matmul and
 * attention inputs) hold bf16 values then; the GEMMs narrow their operands
 * (matmul.cu), the blockwise attention computes on mma tiles
 * (attention_block_bf16.cu).
 *
 * Streams: every op is queued on dtc.stream, in call order, so ops need no
 * synchronisation among themselves; only to_host (and sumsq, which returns
 * a host value) wait for the stream. The stream is a blocking one (created
 * with default flags): work anyone queues on the legacy default stream stays
 * ordered with ours, which keeps foreign code (NCCL set-up, plain cudaMemcpy)
 * safe while it does not use dt_ops_cuda_stream().
 *
 * Threads: the backend is meant for one host thread per process (one worker
 * per GPU); the scratch buffer and the handles are not locked.
 *
 * Errors: the ops table has no error channel (the CPU kernels cannot fail
 * except for memory, and report that by doing nothing). A failed launch or
 * cuBLAS call on a GPU means the device state is unknown and any further
 * training step would compute garbage, so the backend stops the process with
 * one line on stderr naming the call, as llm.c's cudaCheck does. alloc keeps
 * the contract instead: NULL on failure. */
#ifndef DTRUN_KERNELS_CUDA_COMMON_CUH
#define DTRUN_KERNELS_CUDA_COMMON_CUH

#include <cmath>
#include <cstddef>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "kernels/ops.h"
}

/* ---- backend state (ops_cuda.cu) ---- */
struct dtc_state {
    int ready;                 /* 1 once the probe set everything up */
    int device;
    int tf32;                  /* 1: GEMMs may use TF32 tensor cores */
    int bf16;                  /* 1: products on bf16 tensor cores (ops.h set_bf16_products) */
    int num_sms;
    cudaStream_t stream;
    cudaStream_t copy_stream;  /* copy_start's: host transfers beside compute */
    cublasHandle_t blas;       /* strided-batched GEMMs of attention */
    cublasLtHandle_t lt;       /* every other GEMM */
    void *lt_workspace;
    size_t lt_workspace_bytes;
    void *scratch;             /* see dtc_scratch */
    size_t scratch_bytes;
    void *operands16;          /* a GEMM's operands narrowed to bf16 (matmul.cu) */
    size_t operands16_bytes;
    int capturing;             /* 1 between graph_begin and graph_end (graph.cu) */
};
extern dtc_state dtc;

/* cuBLAS and cuBLASLt entry points, resolved by dtc_blas_load() (blas.cu:
 * the libraries are dlopen'ed, not linked, see there for why). */
struct dtc_blas_api {
    int loaded;
    decltype(&::cublasCreate_v2) create;
    decltype(&::cublasDestroy_v2) destroy;
    decltype(&::cublasSetStream_v2) set_stream;
    decltype(&::cublasSetMathMode) set_math_mode;
    decltype(&::cublasSetWorkspace_v2) set_workspace;
    /* C++ overloads these two (a cudaDataType compute-type shim): spell the
     * exported C signatures out */
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                              int, int, int, const void *, const void *,
                                              cudaDataType, int, long long, const void *,
                                              cudaDataType, int, long long, const void *, void *,
                                              cudaDataType, int, long long, int,
                                              cublasComputeType_t, cublasGemmAlgo_t);
    decltype(&::cublasGetStatusString) status_string;
    decltype(&::cublasLtCreate) lt_create;
    decltype(&::cublasLtDestroy) lt_destroy;
    decltype(&::cublasLtMatmulDescCreate) lt_desc_create;
    decltype(&::cublasLtMatmulDescDestroy) lt_desc_destroy;
    decltype(&::cublasLtMatmulDescSetAttribute) lt_desc_set;
    decltype(&::cublasLtMatrixLayoutCreate) lt_layout_create;
    decltype(&::cublasLtMatrixLayoutDestroy) lt_layout_destroy;
    decltype(&::cublasLtMatmulPreferenceCreate) lt_pref_create;
    decltype(&::cublasLtMatmulPreferenceDestroy) lt_pref_destroy;
    decltype(&::cublasLtMatmulPreferenceSetAttribute) lt_pref_set;
    decltype(&::cublasLtMatmulAlgoGetHeuristic) lt_heuristic;
    decltype(&::cublasLtMatmul) lt_matmul;
};
extern dtc_blas_api dtc_blas;
/* 0 when every entry point resolved; -1 (backend unusable) otherwise. */
int dtc_blas_load(void);
const char *dtc_blas_status(cublasStatus_t st);

/* Stops the process: "dtrun: cuda: FILE:LINE: CALL: reason" (see above). */
[[noreturn]] void dtc_fatal(const char *file, int line, const char *call, const char *why);

#define DTC_CHECK(call)                                                            \
    do {                                                                           \
        cudaError_t dtc_err_ = (call);                                             \
        if (dtc_err_ != cudaSuccess)                                               \
            dtc_fatal(__FILE__, __LINE__, #call, cudaGetErrorString(dtc_err_));    \
    } while (0)

#define DTC_BLAS(call)                                                             \
    do {                                                                           \
        cublasStatus_t dtc_st_ = (call);                                           \
        if (dtc_st_ != CUBLAS_STATUS_SUCCESS)                                      \
            dtc_fatal(__FILE__, __LINE__, #call, dtc_blas_status(dtc_st_));  \
    } while (0)

/* After a kernel launch: catches bad launch configurations at the call site. */
#define DTC_LAUNCHED() DTC_CHECK(cudaGetLastError())

/* A device buffer of at least `bytes` for the duration of ONE op (the op
 * that asks owns it until it returns; ops run one after another on the one
 * stream). Grows by freeing and reallocating: cudaFree waits for the device,
 * so no queued kernel still reads the old buffer. Growth happens in the first
 * steps only; sizes then repeat. While a graph is being recorded it cannot
 * grow (graph.cu): a request larger than it is then stops the process with
 * one line. */
void *dtc_scratch(size_t bytes);

/* ---- launch helpers ---- */
static inline unsigned dtc_blocks(size_t n, unsigned threads) {
    /* grid-stride kernels: enough blocks to fill the GPU, never more than the
     * work needs (a tiny tensor gets one block) */
    size_t want = (n + threads - 1) / threads;
    size_t cap = (size_t)(dtc.num_sms > 0 ? dtc.num_sms : 132) * 8;
    if (want > cap) want = cap;
    return want ? (unsigned)want : 1u;
}

/* ---- reductions ---- */
__device__ __forceinline__ float dtc_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double dtc_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float dtc_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Whole-block sum / max (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. `sh` is 32 floats of shared memory; the function
 * syncs before reuse so it can be called twice in a row. */
__device__ __forceinline__ float dtc_block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = dtc_warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return dtc_warp_sum(v);
}
__device__ __forceinline__ float dtc_block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = dtc_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return dtc_warp_max(v);
}

/* ---- GEMM helper (matmul.cu) ----
 * Column-major C[m,n] = alpha op(A) op(B) + beta C (+ bias[m] broadcast over
 * columns when bias != NULL), through cuBLASLt in fp32 (TF32 when dtc.tf32).
 * Row-major callers swap operands (see matmul.cu). */
void dtc_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta,
              float *C, int ldc, const float *bias);
/* Compute type for the cuBLAS (not Lt) calls of attention. */
cublasComputeType_t dtc_compute_type(void);

/* ---- the ops, one file each (C ABI: ops_cuda.cu fills the table) ---- */
extern "C" {
/* memory.cu */
void *cuda_alloc(size_t bytes);
void cuda_free(void *p);
void *cuda_alloc_ordered(size_t bytes);
void cuda_free_ordered(void *p);
void cuda_zero(void *p, size_t bytes);
void cuda_copy(void *dst, const void *src, size_t bytes);
void cuda_to_host(void *dst_host, const void *src, size_t bytes);
void cuda_from_host(void *dst, const void *src_host, size_t bytes);
void *cuda_host_alloc(size_t bytes);
void cuda_host_free(void *p);
void *cuda_copy_start(void *dst, const void *src, size_t bytes);
void cuda_copy_finish(void *handle);
/* embedding.cu */
void cuda_embedding_forward(float *out, const int *tok, const float *wte, int v0, int vn,
                            int N, int C);
void cuda_embedding_backward(float *dwte, const float *dout, const int *tok, int v0, int vn,
                             int N, int C);
/* posadd.cu */
void cuda_posadd_forward(float *x, const float *wpe, const int *pos, int B, int T, int C);
void cuda_posadd_backward(float *dwpe, const float *dx, const int *pos, int B, int T, int C);
/* patch.cu */
void cuda_patch_forward(float *out, const float *img, const float *w, const float *b,
                        int B, int ch, int S, int P, int C);
void cuda_patch_backward(float *dw, float *db, const float *dout, const float *img,
                         int B, int ch, int S, int P, int C);
/* layernorm.cu */
void cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b,
                            int N, int C, float eps, dt_dtype t);
void cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const void *inp, const float *w,
                             const float *mean, const float *rstd, int N, int C, dt_dtype t);
/* rmsnorm.cu */
void cuda_rmsnorm_forward(void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps,
                          dt_dtype t);
void cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const void *inp, const float *w,
                           const float *rstd, int N, int C, dt_dtype t);
/* matmul.cu */
void cuda_matmul_forward(void *out, const void *inp, const void *w, const float *bias, int N, int IC, int OC,
                         dt_dtype t, dt_dtype out_t);
void cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const void *inp, const void *w,
                          int N, int IC, int OC, dt_dtype t);
void cuda_matmul_gelu_forward(void *out, void *pre, const void *inp, const void *w, const float *bias, int N,
                              int IC, int OC, dt_dtype t);
void cuda_matmul_dgelu_backward(float *dpre, float *scratch, const float *dout, const void *w, const void *pre,
                                int N, int IC, int OC, dt_dtype t);
/* attention.cu */
void cuda_attention_forward(void *out, void *att, const void *qkv, int B, int T, int C, int NH, int NKV, int causal,
                            dt_dtype t);
void cuda_attention_backward(float *dqkv, float *scratch, const float *dout, const void *qkv, const void *att, int B,
                             int T, int C, int NH, int NKV, int causal, dt_dtype t);
/* attention_decode.cu */
void cuda_attention_decode(void *out, float *scratch, const void *q, const void *kv, int T, int C, int NH, int NKV,
                           dt_dtype t);
/* attention_block.cu */
void cuda_attention_block_forward(void *out, float *lse, const void *q, const void *kv, const int *qseg,
                                  const int *kseg, int B, int Ts, int Tq, int Tk, int C, int NH, int NKV, int causal,
                                  int shift, dt_dtype t, dt_dtype out_t);
void cuda_attention_block_merge(float *out, float *lse, const float *pout, const float *plse, int B, int Ts,
                                int Tq, int C, int NH);
void cuda_attention_block_backward(float *dq, float *dkv, const float *dout, const void *out, const float *lse,
                                   const void *q, const void *kv, const int *qseg, const int *kseg, int B, int Ts,
                                   int Tq, int Tk, int C, int NH, int NKV, int causal, int shift, dt_dtype t);
/* rows_copy.cu */
void cuda_rows_copy(void *dst, int ldd, const void *src, int lds, int N, int W, int accumulate, dt_dtype t);
/* dropout.cu */
void cuda_dropout_forward(void *out, const void *x, const long long *rows, int N, int W, long long cols,
                          long long col0, uint64_t key, float p, dt_dtype t);
void cuda_dropout_backward(float *dx, const float *dout, const long long *rows, int N, int W, long long cols,
                           long long col0, uint64_t key, float p);
/* rope.cu */
void cuda_rope_table(float *cs, int max_pos, int hs, float theta);
void cuda_rope_forward(void *x, int ld, int nheads, int hs, const int *pos, const float *cs, int N, dt_dtype t);
void cuda_rope_backward(float *dx, int ld, int nheads, int hs, const int *pos, const float *cs, int N);
/* swiglu.cu */
void cuda_swiglu_forward(void *out, const void *inp, int N, int F, dt_dtype t);
void cuda_swiglu_backward(float *dinp, const void *inp, const float *dout, int N, int F, dt_dtype t);
/* moe_router.cu, moe_route.cu, moe_permute.cu, moe_gemm.cu */
void cuda_moe_router_forward(float *scores, int *idx, float *w, float *psum, const float *logits, const float *bias,
                             int N, int E, int k, int sigmoid, int norm, int T, int row0);
void cuda_moe_router_backward(float *dlogits, const float *scores, const int *idx, const float *w, const float *dw,
                              const float *daux, int N, int E, int k, int sigmoid, int norm, int T, int row0);
void cuda_moe_route(int *dst, int *src, int *counts, int *chosen, const int *idx, const int *before, int N, int E,
                    int k, int cap, int T, int row0);
void cuda_moe_permute(void *out, const void *x, const int *src, int M, int C, dt_dtype t);
void cuda_moe_permute_backward(float *dx, const float *dout, const int *dst, int N, int k, int C);
void cuda_moe_unpermute(float *out, const void *y, const int *dst, const float *w, int N, int k, int C, dt_dtype t,
                        int accumulate);
void cuda_moe_unpermute_backward(float *dy, float *dw, const float *dout, const void *y, const int *dst, const float *w,
                                 int N, int k, int C, dt_dtype t);
void cuda_moe_grouped_forward(void *out, const void *inp, const void *w, const int *counts, int G, int IC, int OC,
                              dt_dtype t, dt_dtype out_t);
void cuda_moe_grouped_backward(float *dinp, float *dw, const float *dout, const void *inp, const void *w,
                               const int *counts, int G, int IC, int OC, dt_dtype t);
/* gelu.cu */
void cuda_gelu_forward(void *out, const void *inp, size_t n, dt_dtype t);
void cuda_gelu_backward(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t);
/* gelu_erf.cu */
void cuda_gelu_erf_forward(void *out, const void *inp, size_t n, dt_dtype t);
void cuda_gelu_erf_backward(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t);
/* residual.cu */
void cuda_residual_forward(void *out, const float *a, const void *b, size_t n, dt_dtype t);
/* residual_layernorm.cu */
void cuda_residual_layernorm_forward(void *res, void *out, float *mean, float *rstd, const float *a, const void *b,
                                     const float *w, const float *bias, int N, int C, float eps, dt_dtype t);
void cuda_residual_rmsnorm_forward(void *res, void *out, float *rstd, const float *a, const void *b, const float *w,
                                   int N, int C, float eps, dt_dtype t);
void cuda_residual_backward(float *da, float *db, const float *dout, size_t n);
/* xent.cu */
void cuda_xent_stats(float *rowmax, float *sumexp, float *target, const float *logits,
                     const int *targets, int v0, int N, int Vl);
void cuda_xent_rescale(float *sumexp, const float *from_max, const float *to_max, int N);
void cuda_xent_loss(float *loss, const float *rowmax, const float *sumexp, const float *target,
                    const int *targets, int N);
void cuda_xent_backward(float *dlogits, const float *logits, const float *rowmax,
                        const float *sumexp, const int *targets, const float *dloss, int v0,
                        int N, int Vl);
/* adamw.cu */
void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, int t);
void cuda_adamw_multi(const dt_adamw_tensor *list, int count, float lr, float beta1, float beta2,
                      float eps, int t);
void cuda_adamw_mixed_multi(const dt_adamw_mixed_tensor *list, int count, int grad_bf16, float grad_scale,
                            float lr, float beta1, float beta2, float eps, int t);
void cuda_adamw_multi_dev(const dt_adamw_tensor *list, int count, const dt_adamw_hyper *h, float beta1,
                          float beta2, float eps);
void cuda_adamw_mixed_multi_dev(const dt_adamw_mixed_tensor *list, int count, int grad_bf16,
                                const float *grad_scale, const dt_adamw_hyper *h, float beta1, float beta2,
                                float eps);
/* loss_dev.cu */
void cuda_loss_sum_add(double *acc, const float *loss, int N);
void cuda_loss_seed(float *dloss, const int *targets, float scale, int N);
/* norm_dev.cu */
void cuda_sumsq_add(double *acc, const float *p, size_t n);
void cuda_scalar_add(double *acc, const double *x);
void cuda_clip_scale(float *s, const double *sumsq, double clip);
void cuda_scale_dev(float *p, const float *s, size_t n);
/* graph.cu */
void cuda_graph_begin(void);
void *cuda_graph_end(void);
int cuda_graph_launch(void *graph);
void cuda_graph_destroy(void *graph);
/* reduce.cu */
void cuda_scale(float *p, float s, size_t n);
/* bf16.cu */
void cuda_to_bf16(uint16_t *dst, const float *src, size_t n);
void cuda_from_bf16(float *dst, const uint16_t *src, size_t n);
void cuda_round_bf16(float *p, size_t n);
void cuda_acc_bf16(uint16_t *acc, const float *add, size_t n);
double cuda_sumsq(const float *p, size_t n);
/* matmul.cu: dbias[o] += sum_i dout[i,o] (shared by matmul and patch) */
void cuda_colsum_accumulate(float *dbias, const float *dout, int N, int OC);
}

/* reduce.cu: the sum of squares of p[0..n) (n > 0) in double into *out on
 * the device (*out += it when accumulate), by sumsq's kernels: sumsq and
 * sumsq_add share them, so both give the same total. */
void dtc_sumsq_into(double *out, const float *p, size_t n, int accumulate);

#endif
