/* matmul.cu — the linear layer (twin of kernels/cpu/matmul.c) and the
 * backend's one GEMM entry point, dtc_gemm, through cuBLASLt.
 *
 *     out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias[OC]
 *
 * Row-major to column-major: cuBLAS is column-major, and a row-major [R,K]
 * matrix is the column-major [K,R] matrix with the same memory. So the forward
 * is the column-major product out^T[OC,N] = w^T-as-stored(T) [OC,IC] x
 * inp^T [IC,N]: A = w with op T (lda IC), B = inp with op N (ldb IC), C = out
 * (ldc OC). The bias runs along C's rows (OC), which is exactly cuBLASLt's
 * BIAS epilogue (a vector of m = OC broadcast over the n = N columns).
 *
 * Precision: fp32 inputs, fp32 outputs, CUBLAS_COMPUTE_32F (no TF32) unless
 * dt_ops_cuda_set_tf32(1); accumulation order differs from OpenBLAS, hence
 * the twin test's GEMM tolerance (relative 1e-4 of the terms' size).
 * Under bf16 mixed precision (dtc.bf16, ops.h set_bf16_products) both
 * operands are first narrowed to bf16 into one packed buffer (exact for the
 * weights and activations mixed precision rounds where it stores them; the
 * gradients flowing back are rounded here, as autocast rounds them), and
 * cuBLASLt multiplies them on the tensor cores with fp32 accumulation and
 * an fp32 result: A/B CUDA_R_16BF, C/D CUDA_R_32F, CUBLAS_COMPUTE_32F, one
 * of the combinations cublasLtMatmul supports. The narrowing is a pass over
 * both operands per call (the model's tensors are fp32 arrays of bf16
 * values); keeping them in bf16 end to end is the step after this one.
 *
 * Bias gradient: cuBLASLt's BGRAD epilogues overwrite the bias gradient, but
 * the contract accumulates, so the column sums are a kernel of our own
 * (deterministic: each thread owns a column and adds the rows in order). */
#include <cstdint>
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"

/* Largest power of two (<= 256) dividing the address: cuBLASLt kernels that
 * need 16-byte aligned operands must not be picked for an offset pointer
 * (the model passes row slices such as logits + r*V). */
static uint32_t alignment_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 1;
    while (al < 256 && (a & (2 * al - 1)) == 0) al *= 2;
    return al;
}

/* Seeds C[:, j] = bias (column-major, C is m x n, ldc): used when the bias
 * pointer is too poorly aligned for the epilogue (it wants 16 bytes), then
 * the GEMM adds on with beta = 1 — what the CPU twin does every time. */
__global__ void bias_seed_kernel(float *C, const float *bias, int m, int n, int ldc) {
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t col = i / (size_t)m, row = i % (size_t)m;
        C[col * (size_t)ldc + row] = bias[row];
    }
}

/* C = beta C over an m x n column-major block (k = 0: the product is empty;
 * as in BLAS, beta = 0 overwrites whatever C held). */
__global__ void scale_block_kernel(float *C, float beta, int m, int n, int ldc) {
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t col = i / (size_t)m, row = i % (size_t)m;
        float *c = C + col * (size_t)ldc + row;
        *c = beta == 0.0f ? 0.0f : beta * *c;
    }
}

/* dst = src narrowed to bf16 (round to nearest even; NaN stays NaN), a
 * column-major rows x cols block of leading dimension ld packed into
 * leading dimension rows. */
__global__ void narrow_bf16_kernel(__nv_bfloat16 *dst, const float *src, int rows, int cols, int ld) {
    size_t total = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t col = i / (size_t)rows, row = i % (size_t)rows;
        dst[i] = __float2bfloat16_rn(src[col * (size_t)ld + row]);
    }
}

/* The operands' bf16 buffer, at least `bytes`: owned by the GEMM being
 * issued (ops run one after another on the one stream). Grows as
 * dtc_scratch does: cudaFree waits for the device, so no queued GEMM still
 * reads the old one; sizes repeat after the first step. */
static void *operands16(size_t bytes) {
    if (bytes <= dtc.operands16_bytes) return dtc.operands16;
    if (dtc.capturing) /* cudaFree and cudaMalloc cannot be recorded (graph.cu) */
        dtc_fatal(__FILE__, __LINE__, "operands16",
                  "a GEMM recorded into a CUDA graph wants a larger bf16 operand buffer than it had (record ops "
                  "only after they ran once as issued)");
    if (dtc.operands16) DTC_CHECK(cudaFree(dtc.operands16));
    dtc.operands16 = nullptr;
    dtc.operands16_bytes = 0;
    DTC_CHECK(cudaMalloc(&dtc.operands16, bytes));
    dtc.operands16_bytes = bytes;
    return dtc.operands16;
}

/* A stored rows x cols block (leading dimension ld) narrowed into dst,
 * packed: its leading dimension becomes rows. */
static void narrow(__nv_bfloat16 *dst, const float *src, int rows, int cols, int ld) {
    size_t total = (size_t)rows * cols;
    narrow_bf16_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(dst, src, rows, cols, ld);
    DTC_LAUNCHED();
}

/* Plain cuBLAS, for the rare shape where cuBLASLt's heuristic offers nothing.
 * ab: the operands' type (CUDA_R_32F, or CUDA_R_16BF when narrowed); C is fp32. */
static void gemm_fallback(bool ta, bool tb, int m, int n, int k, float alpha, const void *A,
                          int lda, const void *B, int ldb, float beta, float *C, int ldc,
                          cudaDataType ab) {
    cublasComputeType_t ct = ab == CUDA_R_16BF ? CUBLAS_COMPUTE_32F : dtc_compute_type();
    DTC_BLAS(dtc_blas.gemm_ex(dtc.blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                              tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, ab, lda,
                              B, ab, ldb, &beta, C, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
}

/* A GEMM's operands as cuBLAS gets them: the caller's fp32 arrays, or under
 * bf16 products both narrowed into one packed buffer (B at a 256-byte
 * boundary; leading dimensions become the stored row counts). */
struct gemm_operands {
    const void *A, *B;
    int lda, ldb;
    int a_rows, a_cols, b_rows, b_cols; /* as stored: op(A) is m x k */
    cudaDataType type;
    cublasComputeType_t compute;
};

static gemm_operands operands_for(bool trans_a, bool trans_b, int m, int n, int k, const float *A,
                                  int lda, const float *B, int ldb) {
    gemm_operands o = {A, B, lda, ldb, trans_a ? k : m, trans_a ? m : k, trans_b ? n : k,
                       trans_b ? k : n, CUDA_R_32F, dtc_compute_type()};
    if (!dtc.bf16) return o;
    size_t a_bytes = ((size_t)o.a_rows * o.a_cols * sizeof(__nv_bfloat16) + 255) & ~(size_t)255;
    size_t b_bytes = (size_t)o.b_rows * o.b_cols * sizeof(__nv_bfloat16);
    char *buf = (char *)operands16(a_bytes + b_bytes);
    narrow((__nv_bfloat16 *)buf, A, o.a_rows, o.a_cols, lda);
    narrow((__nv_bfloat16 *)(buf + a_bytes), B, o.b_rows, o.b_cols, ldb);
    o.A = buf;
    o.B = buf + a_bytes;
    o.lda = o.a_rows;
    o.ldb = o.b_rows;
    o.type = CUDA_R_16BF;
    o.compute = CUBLAS_COMPUTE_32F;
    return o;
}

/* The GELU epilogues (cuBLASLt's GELU is the tanh approximation, GPT-2's):
 * GELU_AUX writes C = gelu(product [+ bias]) and the pre-activation into aux;
 * DGELU reads the pre-activation from aux and writes C = product x gelu'(aux),
 * the input gradient of the GELU behind a layer's input gradient. */
enum gelu_epi { GELU_NONE, GELU_AUX_OUT, GELU_GRAD };

/* One cuBLASLt matmul, C[m,n] = alpha op(A) op(B) + beta C, with the
 * epilogue BIAS when bias != NULL (and no GELU), or a GELU one (gelu_epi,
 * aux of leading dimension ldc). False when the heuristic offers no
 * algorithm for this case: then nothing was queued. */
static bool lt_matmul(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                      const gemm_operands *o, float beta, float *C, int ldc, const float *bias,
                      gelu_epi gelu, const float *aux) {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    DTC_BLAS(dtc_blas.lt_desc_create(&desc, o->compute, CUDA_R_32F));
    cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    DTC_BLAS(dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    DTC_BLAS(dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasLtEpilogue_t epi = gelu == GELU_GRAD      ? CUBLASLT_EPILOGUE_DGELU
                             : gelu == GELU_AUX_OUT ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                            : CUBLASLT_EPILOGUE_GELU_AUX)
                             : bias                 ? CUBLASLT_EPILOGUE_BIAS
                                                    : CUBLASLT_EPILOGUE_DEFAULT;
    DTC_BLAS(dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias)
        DTC_BLAS(dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (gelu != GELU_NONE) {
        int64_t ld = ldc;
        DTC_BLAS(dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        DTC_BLAS(dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    DTC_BLAS(dtc_blas.lt_layout_create(&la, o->type, o->a_rows, o->a_cols, o->lda));
    DTC_BLAS(dtc_blas.lt_layout_create(&lb, o->type, o->b_rows, o->b_cols, o->ldb));
    DTC_BLAS(dtc_blas.lt_layout_create(&lc, CUDA_R_32F, m, n, ldc));
    DTC_BLAS(dtc_blas.lt_pref_create(&pref));
    uint64_t ws = dtc.lt_workspace_bytes;
    uint32_t al[4] = {alignment_of(o->A), alignment_of(o->B), alignment_of(C), alignment_of(C)};
    const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    DTC_BLAS(dtc_blas.lt_pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    for (int i = 0; i < 4; i++)
        DTC_BLAS(dtc_blas.lt_pref_set(pref, al_attr[i], &al[i], sizeof al[i]));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t st = dtc_blas.lt_heuristic(dtc.lt, desc, la, lb, lc, lc, pref, 1, &heur, &found);
    bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (ok)
        DTC_BLAS(dtc_blas.lt_matmul(dtc.lt, desc, &alpha, o->A, la, o->B, lb, &beta, C, lc, C, lc,
                                    &heur.algo, dtc.lt_workspace, dtc.lt_workspace_bytes,
                                    dtc.stream));
    dtc_blas.lt_pref_destroy(pref);
    dtc_blas.lt_layout_destroy(lc);
    dtc_blas.lt_layout_destroy(lb);
    dtc_blas.lt_layout_destroy(la);
    dtc_blas.lt_desc_destroy(desc);
    return ok;
}

void dtc_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc,
              const float *bias) {
    if (m <= 0 || n <= 0) return;
    if (bias && (alignment_of(bias) < 16 || k <= 0)) {
        /* the epilogue wants a 16-byte aligned bias: seed instead */
        size_t total = (size_t)m * n;
        bias_seed_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(C, bias, m, n, ldc);
        DTC_LAUNCHED();
        bias = nullptr;
        beta = 1.0f;
    }
    if (k <= 0) {
        if (beta != 1.0f) {
            size_t total = (size_t)m * n;
            scale_block_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(C, beta, m, n, ldc);
            DTC_LAUNCHED();
        }
        return;
    }
    gemm_operands o = operands_for(trans_a, trans_b, m, n, k, A, lda, B, ldb);
    if (lt_matmul(trans_a, trans_b, m, n, k, alpha, &o, beta, C, ldc, bias, GELU_NONE, nullptr)) return;
    if (bias) {
        /* no fused-bias algorithm for this shape: seed the bias, then plain */
        size_t total = (size_t)m * n;
        bias_seed_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(C, bias, m, n, ldc);
        DTC_LAUNCHED();
        beta = 1.0f;
    }
    gemm_fallback(trans_a, trans_b, m, n, k, alpha, o.A, o.lda, o.B, o.ldb, beta, C, ldc, o.type);
}

/* dbias[o] += sum_i dout[i,o]. Block = 32 columns x 8 row-lanes: lane y sums
 * rows y, y+8, ... of its column (coalesced 128-byte reads per warp), then the
 * 8 partial sums are added in lane order. Deterministic for a given shape. */
#define COLSUM_COLS 32
#define COLSUM_LANES 8

__global__ void colsum_kernel(float *dbias, const float *dout, int N, int OC) {
    __shared__ float part[COLSUM_LANES][COLSUM_COLS];
    int col = blockIdx.x * COLSUM_COLS + threadIdx.x;
    float acc = 0.0f;
    if (col < OC)
        for (int i = threadIdx.y; i < N; i += COLSUM_LANES) acc += dout[(size_t)i * OC + col];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < OC) {
        float s = 0.0f;
        for (int y = 0; y < COLSUM_LANES; y++) s += part[y][threadIdx.x];
        dbias[col] += s;
    }
}

void cuda_colsum_accumulate(float *dbias, const float *dout, int N, int OC) {
    if (N <= 0 || OC <= 0) return;
    dim3 block(COLSUM_COLS, COLSUM_LANES);
    unsigned grid = (unsigned)((OC + COLSUM_COLS - 1) / COLSUM_COLS);
    colsum_kernel<<<grid, block, 0, dtc.stream>>>(dbias, dout, N, OC);
    DTC_LAUNCHED();
}

void cuda_matmul_forward(void *out_, const void *inp_, const float *w, const float *bias, int N, int IC, int OC,
                         dt_dtype t, dt_dtype out_t) {
    if (N <= 0 || OC <= 0) return;
    if (t != DT_F32 || out_t != DT_F32) dtc_fatal(__FILE__, __LINE__, "matmul_forward", "bf16 activations: not yet on cuda (TODO)");
    float *out = (float *)out_;
    const float *inp = (const float *)inp_;
    dtc_gemm(true, false, OC, N, IC, 1.0f, w, IC, inp, IC, 0.0f, out, OC, bias);
}

/* With out = inp w^T + b (row-major), in column-major terms:
 *   dinp^T[IC,N] += w-as-stored [IC,OC] x dout^T [OC,N]         (no transposes)
 *   dw^T  [IC,OC] += inp^T [IC,N] x (dout^T [OC,N])^T           (B transposed)
 *   db += colsum(dout)
 * beta = 1: the contract accumulates. */
void cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const void *inp_, const float *w,
                          int N, int IC, int OC, dt_dtype t) {
    if (N <= 0 || OC <= 0) return;
    if (t != DT_F32 && dw) dtc_fatal(__FILE__, __LINE__, "matmul_backward", "bf16 activations: not yet on cuda (TODO)");
    const float *inp = (const float *)inp_;
    if (dinp) dtc_gemm(false, false, IC, N, OC, 1.0f, w, IC, dout, OC, 1.0f, dinp, IC, nullptr);
    if (dw) dtc_gemm(false, true, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dw, IC, nullptr);
    if (dbias) cuda_colsum_accumulate(dbias, dout, N, OC);
}

/* The MLP's first layer and its GELU in one cuBLASLt call (ops.h
 * matmul_gelu_forward): GELU_AUX_BIAS writes out = gelu_tanh(pre) and the
 * pre-activation pre, which backward needs, in the GEMM's epilogue, sparing
 * the separate GELU's read and write of [N, OC] (as big as the GEMM's own
 * traffic at GPT-2's sizes). cuBLASLt's GELU is the tanh approximation,
 * GPT-2's; the twin test holds it to the CPU's gelu_forward. The epilogue's
 * auxiliary output wants a leading dimension that is a multiple of 8 and
 * 16-byte aligned pointers: otherwise, or when the heuristic offers no
 * algorithm, the two ops run one after the other. */
void cuda_matmul_gelu_forward(void *out_, void *pre_, const void *inp_, const float *w, const float *bias, int N,
                              int IC, int OC, dt_dtype t) {
    if (N <= 0 || OC <= 0) return;
    if (t != DT_F32) dtc_fatal(__FILE__, __LINE__, "matmul_gelu_forward", "bf16 activations: not yet on cuda (TODO)");
    float *out = (float *)out_, *pre = (float *)pre_;
    const float *inp = (const float *)inp_;
    bool fusable = IC > 0 && OC % 8 == 0 && alignment_of(out) >= 16 && alignment_of(pre) >= 16 &&
                   (!bias || alignment_of(bias) >= 16);
    if (fusable) {
        gemm_operands o = operands_for(true, false, OC, N, IC, w, IC, inp, IC);
        if (lt_matmul(true, false, OC, N, IC, 1.0f, &o, 0.0f, out, OC, bias, GELU_AUX_OUT, pre)) return;
    }
    cuda_matmul_forward(pre, inp, w, bias, N, IC, OC, DT_F32, DT_F32);
    cuda_gelu_forward(out, pre, (size_t)N * OC, DT_F32);
}

/* The input gradient of a layer whose input is a GELU's output, through the
 * GELU (ops.h matmul_dgelu_backward): dpre = (dout @ w) x gelu'(pre) in one
 * cuBLASLt call whose DGELU epilogue reads pre, sparing the [N, IC] input
 * gradient's write and read and the zeroing. The epilogue's rules are the
 * forward's (aux ld a multiple of 8, 16-byte aligned pointers); otherwise,
 * or without an algorithm, the GEMM into the caller's scratch, then the
 * GELU's backward from it. */
void cuda_matmul_dgelu_backward(float *dpre, float *scratch, const float *dout, const float *w, const void *pre_,
                                int N, int IC, int OC, dt_dtype t) {
    if (N <= 0 || IC <= 0) return;
    if (t != DT_F32) dtc_fatal(__FILE__, __LINE__, "matmul_dgelu_backward", "bf16 activations: not yet on cuda (TODO)");
    const float *pre = (const float *)pre_;
    bool fusable = OC > 0 && IC % 8 == 0 && alignment_of(dpre) >= 16 && alignment_of(pre) >= 16;
    if (fusable) {
        gemm_operands o = operands_for(false, false, IC, N, OC, w, IC, dout, OC);
        if (lt_matmul(false, false, IC, N, OC, 1.0f, &o, 0.0f, dpre, IC, nullptr, GELU_GRAD, pre)) return;
    }
    size_t n = (size_t)N * IC;
    dtc_gemm(false, false, IC, N, OC, 1.0f, w, IC, dout, OC, 0.0f, scratch, IC, nullptr);
    DTC_CHECK(cudaMemsetAsync(dpre, 0, n * sizeof(float), dtc.stream));
    cuda_gelu_backward(dpre, pre, scratch, n, DT_F32);
}
