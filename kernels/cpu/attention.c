/* attention.c — multi-head scaled dot-product attention (causal for GPT, full
 * for ViT), with the products done by cblas_sgemm.
 *
 * qkv[B,T,W] holds q, k, v side by side (W = C + 2 Ckv, ops.h); head h of q
 * is the column slice h*hs..h*hs+hs, and its k and v those of kv head g =
 * h / (NH / NKV) (grouped-query attention), so a head's Q, K and V are
 * [T,hs] matrices with row stride W that GEMM reads in place (lda = W), no
 * transposes or copies, and k, v are never repeated per query head. For one
 * (b,h):
 *     S   = Q K^T / sqrt(hs)                 [T,T]
 *     A   = softmax_rows(S)  (causal: row t sees keys 0..t)   -> att[b,h]
 *     out = A V                              [T,hs] into out[b,:,h*hs..]
 *
 * Causal rows are processed in blocks of ATT_BLOCK queries: block [r0,r1)
 * only needs keys [0,r1), so the GEMMs skip most of the masked upper triangle
 * (at T=256 they compute 62% of the full square instead of 100%).
 *
 * Threads: OpenMP over (b,h) heads in forward, over (b,g) kv heads in
 * backward (a kv head's dk, dv sum its group's query heads one after the
 * other, in head order: deterministic, no two threads on one dk), each GEMM a
 * single-threaded
 * cblas_sgemm (OpenBLAS is kept at one thread, see gemm.c). Whole heads per
 * thread measured about 2x faster than one head at a time with each small
 * T x T x hs GEMM threaded (B=4 T=256 C=256 NH=4 causal on 2 cores: forward
 * 1.7 vs 3.7 ms, backward 2.3 vs 4.6 ms). */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/softmax_row.h"

/* Query rows per causal block: 64 measured best at T=256 (32: +10%, 128: +15%). */
#define ATT_BLOCK 64

/* Keys that query row t may see. */
static inline int keys_visible(int t, int T, int causal) { return causal ? t + 1 : T; }

/* One head: q, k, v point at the head's first row (stride W); out at its
 * first output row (stride C); att at its [T,T] block. */
static void head_forward(float *out, float *att, const float *q, const float *k,
                         const float *v, int T, int C, int W, int hs, int causal) {
    float scale = 1.0f / sqrtf((float)hs);
    int block = causal ? ATT_BLOCK : T;
    for (int r0 = 0; r0 < T; r0 += block) {
        int r1 = r0 + block < T ? r0 + block : T;
        int nr = r1 - r0, nk = causal ? r1 : T;
        float *a = att + (size_t)r0 * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs,
                    scale, q + (size_t)r0 * W, W, k, W, 0.0f, a, T);
        for (int t = r0; t < r1; t++) cpu_softmax_row(att + (size_t)t * T, keys_visible(t, T, causal), T, NULL);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nk,
                    1.0f, a, T, v, W, 0.0f, out + (size_t)r0 * C, C);
    }
}

static void attention_forward_f32(float *out, float *att, const float *qkv,
                                  int B, int T, int C, int NH, int NKV, int causal) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV) return;
    int hs = C / NH, W = dt_qkv_cols(C, NH, NKV), Ckv = NKV * hs, G = NH / NKV;
    if (hs <= 0) return;
    cpu_blas_single_threaded();
    #pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *row = qkv + (size_t)b * T * W, *k = row + C + (size_t)(h / G) * hs;
            head_forward(out + (size_t)b * T * C + (size_t)h * hs,
                         att + ((size_t)b * NH + h) * T * T,
                         row + (size_t)h * hs, k, k + Ckv, T, C, W, hs, causal);
        }
    }
}

/* Backward for one head, dO = dout of the head. With S the scaled scores:
 *     dA = dO V^T,        dV += A^T dO
 *     dS = A * (dA - rowsum(A * dA))            (softmax backward, elementwise)
 *     dQ += dS K / sqrt(hs),   dK += dS^T Q / sqrt(hs)
 * Masked entries have A = 0, hence dS = 0: the mask needs no extra handling.
 * dA and then dS live in the head's [T,T] block of scratch.
 * Causal: dA, dS and dQ go by query blocks [r0,r1) (keys [0,r1) only); dV and
 * dK go by key blocks [c0,c1), which only queries [c0,T) see, so those GEMMs
 * keep a long inner dimension (T-c0) instead of a 64-row one. */
static void head_backward(float *dq, float *dk, float *dv, float *dsc, const float *dout,
                          const float *q, const float *k, const float *v, const float *att,
                          int T, int C, int W, int hs, int causal) {
    float scale = 1.0f / sqrtf((float)hs);
    int block = causal ? ATT_BLOCK : T;
    for (int r0 = 0; r0 < T; r0 += block) {
        int r1 = r0 + block < T ? r0 + block : T;
        int nr = r1 - r0, nk = causal ? r1 : T;
        float *ds = dsc + (size_t)r0 * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs,
                    1.0f, dout + (size_t)r0 * C, C, v, W, 0.0f, ds, T);
        for (int t = r0; t < r1; t++) {
            const float *arow = att + (size_t)t * T;
            float *drow = dsc + (size_t)t * T;
            int valid = keys_visible(t, T, causal);
            float dot = 0.0f;
            #pragma omp simd reduction(+:dot)
            for (int j = 0; j < valid; j++) dot += arow[j] * drow[j];
            #pragma omp simd
            for (int j = 0; j < valid; j++) drow[j] = arow[j] * (drow[j] - dot);
            /* the GEMMs read this block's rows up to column nk */
            for (int j = valid; j < nk; j++) drow[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nk,
                    scale, ds, T, k, W, 1.0f, dq + (size_t)r0 * W, W);
    }
    for (int c0 = 0; c0 < T; c0 += block) {
        int c1 = c0 + block < T ? c0 + block : T;
        int nc = c1 - c0, q0 = causal ? c0 : 0, nq = T - q0;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nq,
                    1.0f, att + (size_t)q0 * T + c0, T, dout + (size_t)q0 * C, C,
                    1.0f, dv + (size_t)c0 * W, W);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nq,
                    scale, dsc + (size_t)q0 * T + c0, T, q + (size_t)q0 * W, W,
                    1.0f, dk + (size_t)c0 * W, W);
    }
}

static void attention_backward_f32(float *dqkv, float *scratch, const float *dout,
                                   const float *qkv, const float *att,
                                   int B, int T, int C, int NH, int NKV, int causal) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV) return;
    int hs = C / NH, W = dt_qkv_cols(C, NH, NKV), Ckv = NKV * hs, G = NH / NKV;
    if (hs <= 0) return;
    cpu_blas_single_threaded();
    #pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            size_t row = (size_t)b * T * W, ko = row + (size_t)C + (size_t)g * hs;
            for (int h = g * G; h < (g + 1) * G; h++) { /* the group's query heads, in order */
                size_t qo = row + (size_t)h * hs;
                head_backward(dqkv + qo, dqkv + ko, dqkv + ko + Ckv, scratch + ((size_t)b * NH + h) * T * T,
                              dout + (size_t)b * T * C + (size_t)h * hs,
                              qkv + qo, qkv + ko, qkv + ko + Ckv, att + ((size_t)b * NH + h) * T * T,
                              T, C, W, hs, causal);
            }
        }
    }
}

/* The activations (qkv, out, att) in the run's type (act.c). */
void cpu_attention_forward(void *out, void *att, const void *qkv, int B, int T, int C, int NH, int NKV, int causal,
                           dt_dtype t)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV) return;
    size_t N = (size_t)B * (size_t)T, na = N * (size_t)NH * (size_t)T;
    float *o = cpu_act_out(0, out, N * (size_t)C, t), *a = cpu_act_out(1, att, na, t);
    attention_forward_f32(o, a, cpu_act_in(2, qkv, N * (size_t)dt_qkv_cols(C, NH, NKV), t), B, T, C, NH, NKV, causal);
    cpu_act_store(out, o, N * (size_t)C, t);
    cpu_act_store(att, a, na, t);
}

void cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const void *qkv, const void *att, int B,
                            int T, int C, int NH, int NKV, int causal, dt_dtype t)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV) return;
    size_t N = (size_t)B * (size_t)T;
    attention_backward_f32(dqkv, scratch, dout, cpu_act_in(0, qkv, N * (size_t)dt_qkv_cols(C, NH, NKV), t),
                           cpu_act_in(1, att, N * (size_t)NH * (size_t)T, t), B, T, C, NH, NKV, causal);
}
