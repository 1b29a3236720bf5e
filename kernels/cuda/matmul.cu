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
 * Precision: fp32 operands, fp32 results, CUBLAS_COMPUTE_32F (no TF32)
 * unless dt_ops_cuda_set_tf32(1); accumulation order differs from OpenBLAS,
 * hence the twin test's GEMM tolerance (relative 1e-4 of the terms' size).
 *
 * bf16 products: a GEMM multiplies bf16 operands on the tensor cores with
 * fp32 accumulation (A/B CUDA_R_16BF, CUBLAS_COMPUTE_32F, fp32 scale) when
 * the run is bf16 mixed precision (dtc.bf16, ops.h set_bf16_products) or
 * when one of its operands is an activation stored in bf16 (ops.h
 * dt_dtype). An operand stored in bf16 goes to cuBLAS as it is, with no
 * pass over it; an fp32 one (the fp32 working copy of a weight, a gradient
 * flowing back) is narrowed into the backend's operand buffer (operands16),
 * rounded once: exact for the weights mixed precision keeps bf16-valued, a
 * rounding for the gradients, as autocast rounds them. The result is fp32
 * (C/D CUDA_R_32F: gradients, a row-parallel layer's partial sums, logits)
 * or, where the op stores an activation in bf16, bf16 (C/D CUDA_R_16BF)
 * rounded once from the fp32 accumulator plus the fp32 bias: the CPU twin's
 * rounding point (kernels/cpu/act.c: the fp32 kernel, one rounding when
 * stored).
 *
 * What this file takes from cuBLAS's documentation: A/B and C/D all
 * CUDA_R_16BF, or A/B CUDA_R_16BF with C/D CUDA_R_32F, under
 * CUBLAS_COMPUTE_32F and an fp32 scale, are rows of the data-type tables of
 * cublasLtMatmul and cublasGemmEx (the cuBLAS guide; llm.c's bf16 GEMMs run
 * on the first). From the comments of cublasLt.h (CUDA 13.0), the
 * cublasLtMatmulDescAttributes_t entries:
 * - the bias vector's elements are of D's type unless
 *   CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE says otherwise, and the listed
 *   exceptions are IMMA and fp8 kernels: an fp32 bias beside a bf16 D is
 *   not promised. It is asked for (BIAS_DATA_TYPE = CUDA_R_32F); where
 *   cuBLASLt refuses it, the product is formed in fp32 and rounded by a
 *   kernel of ours (forward_rows_bf16), the same rounding point.
 * - the GELU epilogues' auxiliary matrix (the pre-activation) is of D's
 *   type unless CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE says otherwise,
 *   and cublasLtMatmul returns CUBLAS_STATUS_INVALID_VALUE for a type it
 *   does not support there; NVIDIA's nvmath-python guide
 *   (MatmulEpilogPreferences.aux_type) says non-default aux types are for
 *   narrow-precision (fp8) products. So GELU_AUX(_BIAS) with a bf16 D writes
 *   a bf16 pre-activation by default (documented), while DGELU reading a
 *   bf16 pre-activation beside its fp32 D (AUX_DATA_TYPE = CUDA_R_16BF) is
 *   asked for and, refused, done as the GEMM then the GELU's backward.
 * - the aux leading dimension is in elements and must be a multiple of 8,
 *   whatever the type (so OC % 8, or IC % 8, as in fp32), and the pointers
 *   16-byte aligned.
 * A refusal of those two unpromised combinations by cublasLtMatmul itself
 * (CUBLAS_STATUS_INVALID_VALUE or NOT_SUPPORTED: nothing was queued), or
 * the heuristic's INVALID_VALUE, is remembered for the process, so each
 * costs one refused call at most; the heuristic saying NOT_SUPPORTED or
 * offering no algorithm may be about the shape, and is asked again next
 * time (a host call; the fallback then runs). Which way a given GPU and
 * cuBLAS go is not known here (no GPU where this was written):
 * test/gpu/test_ops_twin.c holds either way to the CPU twin.
 *
 * Bias gradient: cuBLASLt's BGRAD epilogues overwrite the bias gradient, but
 * the contract accumulates, so the column sums are a kernel of our own
 * (deterministic: each thread owns a column and adds the rows in order). */
#include <cstdint>
#include <cuda_bf16.h>

#include "kernels/cuda/act.cuh"
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

/* gelu.cu's expression for GPT-2's tanh GELU, written the same way, so the
 * rounded fallback below computes what the unfused ops compute. */
#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBE 0.044715f

__device__ __forceinline__ float gelu_tanh(float x) {
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

/* Rows of a product stored as bf16 activations: v = src[i] (fp32, row-major
 * with OC columns), or with src NULL the bias (bias[i % OC], 0 without one:
 * an empty product); out[i] = bf16(v) and, when act != NULL, act[i] =
 * bf16(gelu(v)), the GELU of the unrounded value. One rounding each, the
 * CPU's (act_store), as the GELU_AUX epilogue writes D and its aux. */
__global__ void store_rows_bf16_kernel(uint16_t *out, uint16_t *act, const float *src, const float *bias, int OC,
                                       size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = src ? src[i] : bias ? bias[i % (size_t)OC] : 0.0f;
        act_store(out, i, v);
        if (act) act_store(act, i, gelu_tanh(v));
    }
}

static void store_rows_bf16(uint16_t *out, uint16_t *act, const float *src, const float *bias, int OC, size_t n) {
    if (!n) return;
    store_rows_bf16_kernel<<<dtc_blocks(n, 256), 256, 0, dtc.stream>>>(out, act, src, bias, OC, n);
    DTC_LAUNCHED();
}

static void seed_bias(float *C, const float *bias, int m, int n, int ldc) {
    size_t total = (size_t)m * n;
    bias_seed_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(C, bias, m, n, ldc);
    DTC_LAUNCHED();
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
    if (!total) return;
    narrow_bf16_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(dst, src, rows, cols, ld);
    DTC_LAUNCHED();
}

/* Plain cuBLAS, for the rare shape where cuBLASLt's heuristic offers nothing.
 * ab: the operands' type (CUDA_R_32F, or CUDA_R_16BF for a bf16 product);
 * ct: C's (CUDA_R_32F; CUDA_R_16BF only beside bf16 operands and without a
 * bias: cublasGemmEx has no epilogue, and a bias seeded into a bf16 C would
 * be rounded before the sum). */
static void gemm_fallback(bool ta, bool tb, int m, int n, int k, float alpha, const void *A,
                          int lda, const void *B, int ldb, float beta, void *C, int ldc,
                          cudaDataType ab, cudaDataType ct) {
    cublasComputeType_t compute = ab == CUDA_R_16BF ? CUBLAS_COMPUTE_32F : dtc_compute_type();
    DTC_BLAS(dtc_blas.gemm_ex(dtc.blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                              tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, ab, lda,
                              B, ab, ldb, &beta, C, ct, ldc, compute, CUBLAS_GEMM_DEFAULT));
}

/* A GEMM's operands as cuBLAS gets them (both of one type, as cuBLAS wants
 * them outside fp8): the caller's arrays for an fp32 product; for a bf16
 * product (dtc.bf16, or an operand stored in bf16) a bf16 operand as stored
 * and an fp32 one narrowed into the packed operand buffer (each at a
 * 256-byte boundary; its leading dimension becomes its stored row count).
 * extra: bytes the caller wants after them in the same buffer (o.extra,
 * 256-byte aligned; NULL when 0). */
struct gemm_operands {
    const void *A, *B;
    int lda, ldb;
    int a_rows, a_cols, b_rows, b_cols; /* as stored: op(A) is m x k */
    cudaDataType type;
    cublasComputeType_t compute;
    void *extra;
};

static size_t pad256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

static gemm_operands operands_for(bool trans_a, bool trans_b, int m, int n, int k, const void *A, dt_dtype at,
                                  int lda, const void *B, dt_dtype bt, int ldb, size_t extra) {
    gemm_operands o = {A, B, lda, ldb, trans_a ? k : m, trans_a ? m : k, trans_b ? n : k, trans_b ? k : n,
                       CUDA_R_32F, dtc_compute_type(), nullptr};
    bool b16 = dtc.bf16 || at == DT_BF16 || bt == DT_BF16;
    if (b16) {
        o.type = CUDA_R_16BF;
        o.compute = CUBLAS_COMPUTE_32F;
    }
    size_t a_bytes = b16 && at == DT_F32 ? (size_t)o.a_rows * o.a_cols * sizeof(__nv_bfloat16) : 0;
    size_t b_bytes = b16 && bt == DT_F32 ? (size_t)o.b_rows * o.b_cols * sizeof(__nv_bfloat16) : 0;
    /* B (and the extra bytes) at a 256-byte boundary; B unpadded when last,
     * as the dry-run counts the pair (runtime/plan/memory.c) */
    a_bytes = pad256(a_bytes);
    if (extra) b_bytes = pad256(b_bytes);
    if (a_bytes + b_bytes + extra == 0) return o;
    char *buf = (char *)operands16(a_bytes + b_bytes + extra);
    if (a_bytes) {
        narrow((__nv_bfloat16 *)buf, (const float *)A, o.a_rows, o.a_cols, lda);
        o.A = buf;
        o.lda = o.a_rows;
    }
    if (b_bytes) {
        narrow((__nv_bfloat16 *)(buf + a_bytes), (const float *)B, o.b_rows, o.b_cols, ldb);
        o.B = buf + a_bytes;
        o.ldb = o.b_rows;
    }
    if (extra) o.extra = buf + a_bytes + b_bytes;
    return o;
}

/* The GELU epilogues (cuBLASLt's GELU is the tanh approximation, GPT-2's):
 * GELU_AUX writes C = gelu(product [+ bias]) and the pre-activation into aux;
 * DGELU reads the pre-activation from aux and writes C = product x gelu'(aux),
 * the input gradient of the GELU behind a layer's input gradient. */
enum gelu_epi { GELU_NONE, GELU_AUX_OUT, GELU_GRAD, GELU_EPIS };

/* The unpromised type combinations (header comment) that cublasLtMatmul
 * refused in this process, by epilogue and by which of the two they asked
 * for: 1 an fp32 bias beside a 16-bit D, 2 an aux of another type than D's.
 * The backend runs on one host thread (common.cuh). */
static bool lt_refused[GELU_EPIS][4];

/* Whether lt_matmul would refuse at once (a bias beside a 16-bit D, for this
 * epilogue, refused before), so that a caller can skip narrowing operands
 * for it. */
static bool lt_refuses(gelu_epi gelu, bool bias_beside_16bit_d) {
    return bias_beside_16bit_d && lt_refused[gelu][1];
}

/* One cuBLASLt matmul, C[m,n] = alpha op(A) op(B) + beta C, C (and D) of
 * type ct with leading dimension ldc, with the epilogue BIAS when bias !=
 * NULL (fp32; and no GELU), or a GELU one (gelu_epi, aux of type aux_t with
 * leading dimension ldc, the bias added first by GELU_AUX_BIAS). False when
 * cuBLASLt offers no algorithm for this case or refuses an unpromised type
 * combination: then nothing was queued. */
static bool lt_matmul(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const gemm_operands *o,
                      float beta, void *C, cudaDataType ct, int ldc, const float *bias, gelu_epi gelu,
                      const void *aux, cudaDataType aux_t) {
    int unpromised = (bias && ct != CUDA_R_32F ? 1 : 0) | (gelu != GELU_NONE && aux_t != ct ? 2 : 0);
    if (unpromised && lt_refused[gelu][unpromised]) return false;
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
    /* the unpromised attributes: a refusal to set one is a refusal too */
    bool set = true;
    if (bias) {
        DTC_BLAS(dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        int32_t bias_t = CUDA_R_32F; /* "int32_t based on cudaDataType" */
        if (ct != CUDA_R_32F)
            set = dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof bias_t) ==
                  CUBLAS_STATUS_SUCCESS;
    }
    if (gelu != GELU_NONE) {
        int64_t ld = ldc;
        DTC_BLAS(dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        DTC_BLAS(dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        int32_t at = aux_t;
        if (set && aux_t != ct)
            set = dtc_blas.lt_desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at) ==
                  CUBLAS_STATUS_SUCCESS;
    }
    DTC_BLAS(dtc_blas.lt_layout_create(&la, o->type, o->a_rows, o->a_cols, o->lda));
    DTC_BLAS(dtc_blas.lt_layout_create(&lb, o->type, o->b_rows, o->b_cols, o->ldb));
    DTC_BLAS(dtc_blas.lt_layout_create(&lc, ct, m, n, ldc));
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
    bool refused = !set, ok = false;
    if (set) {
        cublasStatus_t st = dtc_blas.lt_heuristic(dtc.lt, desc, la, lb, lc, lc, pref, 1, &heur, &found);
        ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
        /* NOT_SUPPORTED or no algorithm may be about the shape; an invalid
         * value is about the types asked for */
        if (unpromised && st == CUBLAS_STATUS_INVALID_VALUE) refused = true;
    }
    if (ok) {
        cublasStatus_t st = dtc_blas.lt_matmul(dtc.lt, desc, &alpha, o->A, la, o->B, lb, &beta, C, lc, C, lc,
                                               &heur.algo, dtc.lt_workspace, dtc.lt_workspace_bytes, dtc.stream);
        if (st != CUBLAS_STATUS_SUCCESS) {
            /* refused before anything was queued: about the types asked for */
            if (!unpromised || (st != CUBLAS_STATUS_INVALID_VALUE && st != CUBLAS_STATUS_NOT_SUPPORTED))
                dtc_fatal(__FILE__, __LINE__, "cublasLtMatmul", dtc_blas_status(st));
            refused = true;
            ok = false;
        }
    }
    if (refused) lt_refused[gelu][unpromised] = true;
    dtc_blas.lt_pref_destroy(pref);
    dtc_blas.lt_layout_destroy(lc);
    dtc_blas.lt_layout_destroy(lb);
    dtc_blas.lt_layout_destroy(la);
    dtc_blas.lt_desc_destroy(desc);
    return ok;
}

/* C (fp32) = alpha op(A) op(B) + beta C [+ bias[m] along C's columns; the
 * callers with a bias pass beta 0], k > 0: cuBLASLt with the bias in its
 * epilogue when the bias is 16-byte aligned (else seeded into C first, then
 * beta = 1, what the CPU twin does every time); plain cuBLAS when cuBLASLt
 * offers no algorithm. */
static void gemm_run(bool ta, bool tb, int m, int n, int k, float alpha, const gemm_operands *o, float beta,
                     float *C, int ldc, const float *bias) {
    if (bias && alignment_of(bias) < 16) {
        seed_bias(C, bias, m, n, ldc);
        bias = nullptr;
        beta = 1.0f;
    }
    if (lt_matmul(ta, tb, m, n, k, alpha, o, beta, C, CUDA_R_32F, ldc, bias, GELU_NONE, nullptr, CUDA_R_32F)) return;
    if (bias) {
        /* no fused-bias algorithm for this shape: seed the bias, then plain */
        seed_bias(C, bias, m, n, ldc);
        beta = 1.0f;
    }
    gemm_fallback(ta, tb, m, n, k, alpha, o->A, o->lda, o->B, o->ldb, beta, C, ldc, o->type, CUDA_R_32F);
}

/* k <= 0, an empty product: C = the bias along its columns, or beta C (as in
 * BLAS, beta = 0 overwrites whatever C held). */
static void gemm_empty(int m, int n, float beta, float *C, int ldc, const float *bias) {
    if (bias) {
        seed_bias(C, bias, m, n, ldc);
    } else if (beta != 1.0f) {
        size_t total = (size_t)m * n;
        scale_block_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(C, beta, m, n, ldc);
        DTC_LAUNCHED();
    }
}

/* dtc_gemm with each operand of its own type (at, bt) and an fp32 C. */
static void gemm_f32(bool ta, bool tb, int m, int n, int k, float alpha, const void *A, dt_dtype at, int lda,
                     const void *B, dt_dtype bt, int ldb, float beta, float *C, int ldc, const float *bias) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        gemm_empty(m, n, beta, C, ldc, bias);
        return;
    }
    gemm_operands o = operands_for(ta, tb, m, n, k, A, at, lda, B, bt, ldb, 0);
    gemm_run(ta, tb, m, n, k, alpha, &o, beta, C, ldc, bias);
}

void dtc_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc,
              const float *bias) {
    gemm_f32(trans_a, trans_b, m, n, k, alpha, A, DT_F32, lda, B, DT_F32, ldb, beta, C, ldc, bias);
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

/* out[N,OC] = bf16(inp @ w^T + bias) and, when act != NULL, act =
 * bf16(gelu(the same fp32 value)), inp bf16: what the BIAS and GELU_AUX
 * epilogues write into a bf16 D, for the cases they do not take (an fp32
 * bias refused beside a bf16 D, a bias not 16-byte aligned, OC not a
 * multiple of 8 for the GELU's aux, no algorithm). The fp32 rows go through
 * the operand buffer, after the narrowed w, a chunk of rows at a time: at
 * most N x IC bf16 values' bytes (at least one row), the room narrowing inp
 * took before activations were stored in bf16, so the buffer stays within
 * the dry-run's count of it (runtime/plan/memory.c bf16_operands_bytes, the
 * largest pair of operands narrowed); only a product with fewer than two
 * rows' worth of input (N x IC < 2 OC: decoding's one row) asks for one row
 * beyond, OC floats. The chunks depend on the shape alone (not on how large
 * the buffer happens to be), so a product's bits do not depend on what ran
 * before it (a resumed run computes what the uninterrupted one did). */
static void forward_rows_bf16(uint16_t *out, uint16_t *act, const uint16_t *inp, const uint16_t *w,
                              const float *bias, int N, int IC, int OC) {
    if (IC <= 0) { /* an empty product: the bias, or 0 */
        store_rows_bf16(out, act, nullptr, bias, OC, (size_t)N * OC);
        return;
    }
    size_t row_bytes = (size_t)OC * sizeof(float);
    size_t rows = (size_t)N * IC * sizeof(uint16_t) / row_bytes;
    if (rows < 1) rows = 1;
    if (rows > (size_t)N) rows = (size_t)N;
    gemm_operands all = operands_for(true, false, OC, N, IC, w, DT_BF16, IC, inp, DT_BF16, IC, rows * row_bytes);
    float *part = (float *)all.extra;
    for (size_t r0 = 0; r0 < (size_t)N; r0 += rows) {
        int nr = (int)((size_t)N - r0 < rows ? (size_t)N - r0 : rows);
        gemm_operands o = all;
        o.B = inp + r0 * (size_t)IC;
        o.b_cols = nr;
        gemm_run(true, false, OC, nr, IC, 1.0f, &o, 0.0f, part, OC, bias);
        store_rows_bf16(out + r0 * (size_t)OC, act ? act + r0 * (size_t)OC : nullptr, part, nullptr, OC,
                        (size_t)nr * OC);
    }
}

/* inp of type t, out of type out_t (ops.h). An fp32 result: one GEMM (bf16
 * when inp is, inp as stored). bf16 from bf16: one GEMM whose D is the bf16
 * out, the fp32 bias added in the epilogue before the rounding, when
 * cuBLASLt takes it; else forward_rows_bf16, or without a bias plain cuBLAS
 * into the bf16 out (compute 32F, one rounding). bf16 from fp32 (no model
 * layer does it, so the dry-run does not count its buffer): the fp32
 * product into the backend's scratch, then rounded. */
void cuda_matmul_forward(void *out, const void *inp, const void *w, const float *bias, int N, int IC, int OC,
                         dt_dtype t, dt_dtype out_t) {
    if (N <= 0 || OC <= 0) return;
    if (out_t == DT_F32) {
        gemm_f32(true, false, OC, N, IC, 1.0f, w, t, IC, inp, t, IC, 0.0f, (float *)out, OC, bias);
        return;
    }
    if (t == DT_F32) {
        float *prod = (float *)dtc_scratch((size_t)N * OC * sizeof(float));
        gemm_f32(true, false, OC, N, IC, 1.0f, w, DT_F32, IC, inp, DT_F32, IC, 0.0f, prod, OC, bias);
        store_rows_bf16((uint16_t *)out, nullptr, prod, nullptr, OC, (size_t)N * OC);
        return;
    }
    if (IC > 0 && (!bias || alignment_of(bias) >= 16) && !lt_refuses(GELU_NONE, bias != nullptr)) {
        gemm_operands o = operands_for(true, false, OC, N, IC, w, DT_BF16, IC, inp, DT_BF16, IC, 0);
        if (lt_matmul(true, false, OC, N, IC, 1.0f, &o, 0.0f, out, CUDA_R_16BF, OC, bias, GELU_NONE, nullptr,
                      CUDA_R_16BF))
            return;
        if (!bias) {
            gemm_fallback(true, false, OC, N, IC, 1.0f, o.A, o.lda, o.B, o.ldb, 0.0f, out, OC, o.type, CUDA_R_16BF);
            return;
        }
    }
    forward_rows_bf16((uint16_t *)out, nullptr, (const uint16_t *)inp, (const uint16_t *)w, bias, N, IC, OC);
}

/* With out = inp w^T + b (row-major), in column-major terms:
 *   dinp^T[IC,N] += w-as-stored [IC,OC] x dout^T [OC,N]         (no transposes)
 *   dw^T  [IC,OC] += inp^T [IC,N] x (dout^T [OC,N])^T           (B transposed)
 *   db += colsum(dout)
 * beta = 1: the contract accumulates. inp of type t: in bf16 the dw GEMM is
 * a bf16 product, inp as stored and dout narrowed. */
void cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const void *inp, const void *w,
                          int N, int IC, int OC, dt_dtype t) {
    if (N <= 0 || OC <= 0) return;
    if (dinp && dw && IC > 0 && t == DT_BF16 && dtc.bf16) {
        /* Both products read dout: narrowed once, for both (the input
         * gradient's pair w, dout; the weight gradient's B is the same bf16
         * dout beside inp as stored), instead of a pass per GEMM. */
        gemm_operands o = operands_for(false, false, IC, N, OC, w, t, IC, dout, DT_F32, OC, 0);
        gemm_run(false, false, IC, N, OC, 1.0f, &o, 1.0f, dinp, IC, nullptr);
        gemm_operands o2 = {inp, o.B, IC, o.ldb, IC, N, OC, N, CUDA_R_16BF, CUBLAS_COMPUTE_32F, nullptr};
        gemm_run(false, true, IC, OC, N, 1.0f, &o2, 1.0f, dw, IC, nullptr);
        if (dbias) cuda_colsum_accumulate(dbias, dout, N, OC);
        return;
    }
    if (dinp) gemm_f32(false, false, IC, N, OC, 1.0f, w, t, IC, dout, DT_F32, OC, 1.0f, dinp, IC, nullptr);
    if (dw) gemm_f32(false, true, IC, OC, N, 1.0f, inp, t, IC, dout, DT_F32, OC, 1.0f, dw, IC, nullptr);
    if (dbias) cuda_colsum_accumulate(dbias, dout, N, OC);
}

/* The MLP's first layer and its GELU in one cuBLASLt call (ops.h
 * matmul_gelu_forward): GELU_AUX_BIAS writes out = gelu_tanh(pre) and the
 * pre-activation pre, which backward needs, in the GEMM's epilogue, sparing
 * the separate GELU's read and write of [N, OC] (as big as the GEMM's own
 * traffic at GPT-2's sizes). cuBLASLt's GELU is the tanh approximation,
 * GPT-2's; the twin test holds it to the CPU's gelu_forward. out, pre and
 * inp of type t: in bf16, D and the aux are bf16 (the aux takes D's type),
 * both rounded once from the fp32 value, the GELU taken before the
 * rounding, as the CPU twin does. The epilogue's auxiliary output wants a
 * leading dimension that is a multiple of 8 and 16-byte aligned pointers:
 * otherwise, or when the heuristic offers no algorithm (or, bf16 with a
 * bias, cuBLASLt refuses the fp32 bias beside a bf16 D), fp32 runs the two
 * ops one after the other, and bf16 forms the fp32 product and writes both
 * roundings in one pass (forward_rows_bf16), the same rounding points. */
void cuda_matmul_gelu_forward(void *out, void *pre, const void *inp, const void *w, const float *bias, int N,
                              int IC, int OC, dt_dtype t) {
    if (N <= 0 || OC <= 0) return;
    cudaDataType ct = t == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    bool fusable = IC > 0 && OC % 8 == 0 && alignment_of(out) >= 16 && alignment_of(pre) >= 16 &&
                   (!bias || alignment_of(bias) >= 16) && !lt_refuses(GELU_AUX_OUT, bias && t == DT_BF16);
    if (fusable) {
        gemm_operands o = operands_for(true, false, OC, N, IC, w, t, IC, inp, t, IC, 0);
        if (lt_matmul(true, false, OC, N, IC, 1.0f, &o, 0.0f, out, ct, OC, bias, GELU_AUX_OUT, pre, ct)) return;
    }
    if (t == DT_BF16) {
        forward_rows_bf16((uint16_t *)pre, (uint16_t *)out, (const uint16_t *)inp, (const uint16_t *)w, bias, N, IC,
                          OC);
        return;
    }
    cuda_matmul_forward(pre, inp, w, bias, N, IC, OC, DT_F32, DT_F32);
    cuda_gelu_forward(out, pre, (size_t)N * OC, DT_F32);
}

/* The input gradient of a layer whose input is a GELU's output, through the
 * GELU (ops.h matmul_dgelu_backward): dpre = (dout @ w) x gelu'(pre) in one
 * cuBLASLt call whose DGELU epilogue reads pre, sparing the [N, IC] input
 * gradient's write and read and the zeroing. The epilogue's rules are the
 * forward's (aux ld a multiple of 8, 16-byte aligned pointers). pre of type
 * t, dpre fp32: in bf16 the aux is asked for as bf16 beside the fp32 D,
 * which cuBLASLt does not promise (header comment). Otherwise, or without
 * an algorithm, the GEMM into the caller's scratch (the operands narrowed
 * once for both tries), then the GELU's backward from it, which reads pre
 * in its type. */
void cuda_matmul_dgelu_backward(float *dpre, float *scratch, const float *dout, const void *w, const void *pre,
                                int N, int IC, int OC, dt_dtype t) {
    if (N <= 0 || IC <= 0) return;
    size_t n = (size_t)N * IC;
    if (OC > 0) {
        bool fusable = IC % 8 == 0 && alignment_of(dpre) >= 16 && alignment_of(pre) >= 16;
        gemm_operands o = operands_for(false, false, IC, N, OC, w, t, IC, dout, DT_F32, OC, 0);
        if (fusable && lt_matmul(false, false, IC, N, OC, 1.0f, &o, 0.0f, dpre, CUDA_R_32F, IC, nullptr, GELU_GRAD,
                                 pre, t == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F))
            return;
        gemm_run(false, false, IC, N, OC, 1.0f, &o, 0.0f, scratch, IC, nullptr);
    } else {
        gemm_empty(IC, N, 0.0f, scratch, IC, nullptr);
    }
    DTC_CHECK(cudaMemsetAsync(dpre, 0, n * sizeof(float), dtc.stream));
    cuda_gelu_backward(dpre, pre, scratch, n, t);
}
