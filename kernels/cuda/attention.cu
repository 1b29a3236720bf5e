/* attention.cu — multi-head scaled dot-product attention, causal (GPT) or
 * full (ViT) (twin of kernels/cpu/attention.c), fp32.
 *
 * The straightforward version: for one sample b, the NH heads' products are
 * cuBLAS strided-batched GEMMs (head h of q is the column slice h*hs.. of
 * qkv[b], row stride W = C + 2 Ckv, so consecutive heads sit hs floats apart
 * and the batch stride is hs). Grouped-query attention (ops.h: G = NH / NKV
 * query heads a kv head, query head h = g G + j reading kv head g): the
 * heads go as G batches of NKV, batch j holding query heads j, G + j, 2G +
 * j, ... (q stride G hs) against kv heads 0, 1, ... (stride hs); with NKV =
 * NH that is the one batch of every head, as before. A kv head's dK and dV
 * add its G query heads' terms one batch after another (beta 1, in order on
 * the stream: deterministic). The softmax is a kernel of its own over all
 * B*NH*T rows of att. Samples are a host loop (the offset of head h of sample
 * b is b*T*W + h*hs, not one stride). It stores the full att[B,NH,T,T] the
 * contract asks for, computing the masked upper triangle and then zeroing
 * it: simple and correct, not fast. A fused flash-style kernel (no T x T
 * matrix, O(T) memory) is the next step and needs a contract change
 * (att would hold only the row statistics).
 *
 * Row-major to column-major (cuBLAS): a row-major [R,K] matrix with row
 * stride ld is the column-major [K,R] matrix with leading dimension ld, so
 * each row-major product X = Y Z is computed as X^T = Z^T Y^T:
 *     S   = scale Q K^T   ->  S^T   = K Q^T        (A = k op T, B = q op N)
 *     out = A V           ->  out^T = V^T A^T      (A = v op N, B = att op N)
 * and in backward, with dO the head's output gradient:
 *     dA  = dO V^T        ->  dA^T  = V dO^T       (A = v op T, B = dO op N)
 *     dS  = A * (dA - rowsum(A * dA))              (softmax backward kernel)
 *     dQ += scale dS K    ->  dQ^T += K^T dS^T     (A = k op N, B = dS op N)
 *     dK += scale dS^T Q  ->  dK^T += Q^T dS       (A = q op N, B = dS op T)
 *     dV += A^T dO        ->  dV^T += dO^T A       (A = dO op N, B = att op T)
 * Masked entries have A = 0, hence dS = 0: the mask needs no other handling.
 *
 * bf16 activations (t = DT_BF16: qkv, out and att stored as bf16). The
 * scores S cannot be kept in fp32 where att is (half its bytes) and the op
 * has no scratch, so forward goes through the blockwise kernels
 * (attention_block.cuh abk_attention_probs_forward): out from the online
 * softmax over the k and v columns of qkv in place, each row's log-sum-exp
 * (the backend's scratch, B NH T floats: what the dry-run counts for the
 * blockwise backward's D), then att = e^(S - lse) from a second pass of
 * Q K^T, rounded once as it is stored. Backward keeps the GEMMs above, on
 * bf16 operands read where they are stored (cuBLAS bf16 x bf16 with fp32
 * accumulation): q, k, v and att as they are, and dO and dS, which are
 * fp32, rounded to bf16 for their products (bf16 activations come with bf16
 * products, ops.h; the blockwise bf16 kernels round the same two). dA stays
 * fp32, so D = rowsum(A dA) and dS are formed in fp32. The work goes by
 * sample and by chunk of query rows, as many as the caller's scratch holds
 * (its B NH T^2 floats: per row NH T floats of dA, NH T bf16 of dS, C bf16
 * of dO); a [T, T] scratch too small for one row (T of a few rows) borrows
 * the backend's scratch instead. */
#include "kernels/cuda/act.cuh"
#include "kernels/cuda/attention_block.cuh"
#include "kernels/cuda/common.cuh"

#define ATT_ROWS_PER_BLOCK 8 /* one warp per row */

/* Strided-batched column-major GEMM over the NH heads of one sample. */
static void head_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda,
                      long long sa, const float *B, int ldb, long long sb, float beta, float *C,
                      int ldc, long long sc, int batch) {
    DTC_BLAS(dtc_blas.gemm_strided_batched_ex(
        dtc.blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
        A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, &beta, C, CUDA_R_32F, ldc, sc, batch,
        dtc_compute_type(), CUBLAS_GEMM_DEFAULT));
}

/* The same over bf16 operands A and B (as stored; C fp32), fp32 accumulation. */
static void head_gemm16(bool ta, bool tb, int m, int n, int k, float alpha, const uint16_t *A, int lda,
                        long long sa, const uint16_t *B, int ldb, long long sb, float beta, float *C, int ldc,
                        long long sc, int batch) {
    DTC_BLAS(dtc_blas.gemm_strided_batched_ex(
        dtc.blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, CUDA_R_16BF,
        lda, sa, B, CUDA_R_16BF, ldb, sb, &beta, C, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
}

/* In place over rows of att (row r is query t = r % T of some (b,h)):
 * row[0..valid) <- softmax(row[0..valid)), row[valid..T) <- 0. */
__global__ void softmax_rows_kernel(float *att, size_t rows, int T, int causal) {
    size_t r = (size_t)blockIdx.x * ATT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float *row = att + r * (size_t)T;
    int valid = causal ? (int)(r % (size_t)T) + 1 : T;
    float mx = -INFINITY;
    for (int j = lane; j < valid; j += 32) mx = fmaxf(mx, row[j]);
    mx = dtc_warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < valid; j += 32) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / dtc_warp_sum(sum);
    for (int j = lane; j < T; j += 32) row[j] = j < valid ? row[j] * inv : 0.0f;
}

/* In place over rows of ds, which holds dA: ds <- A * (dA - sum_j A dA). */
__global__ void softmax_backward_rows_kernel(float *ds, const float *att, size_t rows, int T,
                                             int causal) {
    size_t r = (size_t)blockIdx.x * ATT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float *d = ds + r * (size_t)T;
    const float *a = att + r * (size_t)T;
    int valid = causal ? (int)(r % (size_t)T) + 1 : T;
    float dot = 0.0f;
    for (int j = lane; j < valid; j += 32) dot += a[j] * d[j];
    dot = dtc_warp_sum(dot);
    for (int j = lane; j < T; j += 32) d[j] = j < valid ? a[j] * (d[j] - dot) : 0.0f;
}

/* bf16 backward's softmax step over one chunk of R query rows [r0, r0 + R)
 * of a sample, all NH heads (row x = h R + i): ds[x][j] = bf16(A (dA -
 * sum_j A dA)) for the keys j < nk the chunk's GEMMs read, 0 where masked.
 * att: the sample's [NH, T, T] probabilities (bf16); da, ds: [NH R][T]. */
__global__ void softmax_backward_chunk_kernel(uint16_t *ds, const float *da, const uint16_t *att, int NH, int R,
                                              int T, int r0, int nk, int causal) {
    size_t x = (size_t)blockIdx.x * ATT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (x >= (size_t)NH * R) return;
    int h = (int)(x / R), i = r0 + (int)(x % R);
    const uint16_t *a = att + ((size_t)h * T + i) * T;
    const float *d = da + x * T;
    uint16_t *s = ds + x * T;
    int valid = causal ? i + 1 : T;
    float dot = 0.0f;
    for (int j = lane; j < valid; j += 32) dot += act_load(a, j) * d[j];
    dot = dtc_warp_sum(dot);
    for (int j = lane; j < nk; j += 32) act_store(s, j, j < valid ? act_load(a, j) * (d[j] - dot) : 0.0f);
}

/* Bytes rounded up to 256 (cuBLAS's preferred operand alignment). */
static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Bytes one chunk of R rows takes: dA, dS, dO (see the file's comment). */
static size_t chunk_bytes(int R, int T, int C, int NH) {
    size_t rt = (size_t)R * NH * T;
    return align256(rt * sizeof(float)) + align256(rt * sizeof(uint16_t)) + (size_t)R * C * sizeof(uint16_t);
}

static void attention_backward_bf16(float *dqkv, float *scratch, const float *dout, const uint16_t *qkv,
                                    const uint16_t *att, int B, int T, int C, int NH, int NKV, int causal) {
    int hs = C / NH, W = dt_qkv_cols(C, NH, NKV), Ckv = NKV * hs, G = NH / NKV;
    long long Ghs = (long long)G * hs;
    float scale = 1.0f / sqrtf((float)hs);
    long long TT = (long long)T * T;
    size_t have = (size_t)B * NH * TT * sizeof(float);
    char *buf = (char *)scratch;
    int R = T;
    while (R > 1 && chunk_bytes(R, T, C, NH) > have) R = R / 2;
    if (chunk_bytes(R, T, C, NH) > have) buf = (char *)dtc_scratch(chunk_bytes(R, T, C, NH));
    for (int b = 0; b < B; b++) {
        const uint16_t *q = qkv + (size_t)b * T * W, *k = q + C, *v = k + Ckv;
        const uint16_t *ab = att + (size_t)b * NH * TT;
        float *dq = dqkv + (size_t)b * T * W, *dk = dq + C, *dv = dk + Ckv;
        for (int r0 = 0; r0 < T; r0 += R) {
            int n = T - r0 < R ? T - r0 : R, nk = causal ? r0 + n : T; /* rows; keys they see */
            size_t rt = (size_t)n * NH * T;
            long long nT = (long long)n * T;
            float *da = (float *)buf;
            uint16_t *ds = (uint16_t *)(buf + align256(rt * sizeof(float)));
            uint16_t *dO = (uint16_t *)((char *)ds + align256(rt * sizeof(uint16_t)));
            cuda_to_bf16(dO, dout + ((size_t)b * T + r0) * C, (size_t)n * C);
            /* dA^T = V dO^T: head h's [n][T] (keys < nk) at da + h n T */
            for (int j = 0; j < G; j++)
                head_gemm16(true, false, nk, n, hs, 1.0f, v, W, hs, dO + (size_t)j * hs, C, Ghs, 0.0f,
                            da + (size_t)j * nT, T, G * nT, NKV);
            size_t rows = (size_t)NH * n;
            unsigned grid = (unsigned)((rows + ATT_ROWS_PER_BLOCK - 1) / ATT_ROWS_PER_BLOCK);
            softmax_backward_chunk_kernel<<<grid, 32 * ATT_ROWS_PER_BLOCK, 0, dtc.stream>>>(ds, da, ab, NH, n, T, r0,
                                                                                            nk, causal);
            DTC_LAUNCHED();
            /* dQ rows [r0, r0 + n) += scale dS K; dK, dV keys < nk += scale dS^T Q, A^T dO (a kv head's
             * group one batch after another) */
            for (int j = 0; j < G; j++) {
                head_gemm16(false, false, hs, n, nk, scale, k, W, hs, ds + (size_t)j * nT, T, G * nT, 1.0f,
                            dq + (size_t)r0 * W + (size_t)j * hs, W, Ghs, NKV);
                head_gemm16(false, true, hs, nk, n, scale, q + (size_t)r0 * W + (size_t)j * hs, W, Ghs,
                            ds + (size_t)j * nT, T, G * nT, 1.0f, dk, W, hs, NKV);
                head_gemm16(false, true, hs, nk, n, 1.0f, dO + (size_t)j * hs, C, Ghs, ab + (size_t)r0 * T + j * TT,
                            T, G * TT, 1.0f, dv, W, hs, NKV);
            }
        }
    }
}

void cuda_attention_forward(void *out_, void *att_, const void *qkv_, int B, int T, int C, int NH, int NKV, int causal,
                            dt_dtype t) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV) return;
    if (t == DT_BF16) {
        if (C / NH > 0) abk_attention_probs_forward(out_, att_, qkv_, B, T, C, NH, NKV, causal, t);
        return;
    }
    float *out = (float *)out_, *att = (float *)att_;
    const float *qkv = (const float *)qkv_;
    int hs = C / NH, W = dt_qkv_cols(C, NH, NKV), Ckv = NKV * hs, G = NH / NKV;
    if (hs <= 0) return;
    long long Ghs = (long long)G * hs;
    float scale = 1.0f / sqrtf((float)hs);
    long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * W, *k = q + C;
        for (int j = 0; j < G; j++)
            head_gemm(true, false, T, T, hs, scale, k, W, hs, q + (size_t)j * hs, W, Ghs, 0.0f,
                      att + ((size_t)b * NH + j) * TT, T, G * TT, NKV);
    }
    size_t rows = (size_t)B * NH * T;
    unsigned grid = (unsigned)((rows + ATT_ROWS_PER_BLOCK - 1) / ATT_ROWS_PER_BLOCK);
    softmax_rows_kernel<<<grid, 32 * ATT_ROWS_PER_BLOCK, 0, dtc.stream>>>(att, rows, T, causal);
    DTC_LAUNCHED();
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * W + C + Ckv;
        for (int j = 0; j < G; j++)
            head_gemm(false, false, hs, T, T, 1.0f, v, W, hs, att + ((size_t)b * NH + j) * TT, T, G * TT, 0.0f,
                      out + (size_t)b * T * C + (size_t)j * hs, C, Ghs, NKV);
    }
}

void cuda_attention_backward(float *dqkv, float *scratch, const float *dout, const void *qkv_, const void *att_, int B,
                             int T, int C, int NH, int NKV, int causal, dt_dtype t) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV) return;
    if (t == DT_BF16) {
        if (C / NH > 0)
            attention_backward_bf16(dqkv, scratch, dout, (const uint16_t *)qkv_, (const uint16_t *)att_, B, T, C, NH,
                                    NKV, causal);
        return;
    }
    const float *qkv = (const float *)qkv_, *att = (const float *)att_;
    int hs = C / NH, W = dt_qkv_cols(C, NH, NKV), Ckv = NKV * hs, G = NH / NKV;
    if (hs <= 0) return;
    long long Ghs = (long long)G * hs;
    float scale = 1.0f / sqrtf((float)hs);
    long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) { /* dA into scratch */
        const float *v = qkv + (size_t)b * T * W + C + Ckv;
        for (int j = 0; j < G; j++)
            head_gemm(true, false, T, T, hs, 1.0f, v, W, hs, dout + (size_t)b * T * C + (size_t)j * hs, C, Ghs, 0.0f,
                      scratch + ((size_t)b * NH + j) * TT, T, G * TT, NKV);
    }
    size_t rows = (size_t)B * NH * T;
    unsigned grid = (unsigned)((rows + ATT_ROWS_PER_BLOCK - 1) / ATT_ROWS_PER_BLOCK);
    softmax_backward_rows_kernel<<<grid, 32 * ATT_ROWS_PER_BLOCK, 0, dtc.stream>>>(scratch, att,
                                                                                   rows, T, causal);
    DTC_LAUNCHED();
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * W, *k = q + C;
        float *dq = dqkv + (size_t)b * T * W, *dk = dq + C, *dv = dk + Ckv;
        const float *dO = dout + (size_t)b * T * C;
        /* a kv head's dK, dV: its group's query heads one batch after another */
        for (int j = 0; j < G; j++) {
            const float *ds = scratch + ((size_t)b * NH + j) * TT, *a = att + ((size_t)b * NH + j) * TT;
            head_gemm(false, false, hs, T, T, scale, k, W, hs, ds, T, G * TT, 1.0f, dq + (size_t)j * hs, W, Ghs, NKV);
            head_gemm(false, true, hs, T, T, scale, q + (size_t)j * hs, W, Ghs, ds, T, G * TT, 1.0f, dk, W, hs, NKV);
            head_gemm(false, true, hs, T, T, 1.0f, dO + (size_t)j * hs, C, Ghs, a, T, G * TT, 1.0f, dv, W, hs, NKV);
        }
    }
}
