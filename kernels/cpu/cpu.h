/* cpu.h — the CPU backend's kernels, one op per file (private to kernels/).
 *
 * Each function has exactly the contract of the matching dt_ops entry in
 * kernels/ops.h (row-major, backward accumulates with +=; activations of
 * either type through act.c, the kernels in fp32); ops_cpu.c puts
 * them in the table. Parallelism: OpenMP only (thread count set by
 * dt_ops_set_threads); matrix products are single-threaded OpenBLAS
 * cblas_sgemm calls, split across the OpenMP threads by gemm.c. */
#ifndef DTRUN_KERNELS_CPU_H
#define DTRUN_KERNELS_CPU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"

/* Vector math from glibc's libmvec. GCC vectorizes expf/tanhf inside
 * `omp simd` loops only when it knows SIMD variants exist; math.h says so only
 * under -ffast-math, which we do not want elsewhere. Declaring them here lets
 * the softmax, cross-entropy and GELU loops call libmvec's 8/16-wide versions
 * (measured 10x faster than the scalar calls; their accuracy is checked by
 * test_kernels against double-precision references).
 * Needs -fopenmp (the Makefile always passes it); libm.so pulls in libmvec. */
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float tanhf(float);

/* Below this many elements an elementwise loop is not worth waking threads. */
#define CPU_PAR_MIN 16384

/* gemm.c: row-major C[M,N] = alpha op(A) op(B) + beta C, split across the
 * OpenMP threads, each slab a single-threaded cblas_sgemm. Call it outside
 * parallel regions; inside one, call cblas_sgemm directly (after
 * cpu_blas_single_threaded()). */
void cpu_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc);
/* Keeps OpenBLAS at one thread (see gemm.c for why). */
void cpu_blas_single_threaded(void);

/* act.c: an op's activation operand of type t as fp32 (ops.h, dt_dtype).
 * k: the operand's slot (0..3, one per operand of one op call; 3: a
 * matmul's weight matrix). in: p itself
 * (fp32) or its n elements widened into slot k's buffer. out: p itself, or
 * slot k's buffer to compute into; inout: out, holding p's values (for a
 * strided result whose gaps must come back unchanged); store: slot k's
 * buffer f rounded into p (nothing for fp32). The buffer stays valid until
 * the slot's next use. */
const float *cpu_act_in(int k, const void *p, size_t n, dt_dtype t);
float *cpu_act_out(int k, void *p, size_t n, dt_dtype t);
float *cpu_act_inout(int k, void *p, size_t n, dt_dtype t);
void cpu_act_store(void *p, const float *f, size_t n, dt_dtype t);
/* An elementwise op f (fp32) on activations of type t: out = f(inp), and its
 * backward dinp += f'(inp) dout (fp32 gradients). */
void cpu_act_map(void (*f)(float *, const float *, size_t), void *out, const void *inp, size_t n, dt_dtype t);
void cpu_act_map_backward(void (*f)(float *, const float *, const float *, size_t), float *dinp, const void *inp,
                          const float *dout, size_t n, dt_dtype t);

/* memory.c */
void *cpu_alloc(size_t bytes);
void cpu_free(void *p);
void cpu_zero(void *p, size_t bytes);
void cpu_copy(void *dst, const void *src, size_t bytes);
void *cpu_copy_start(void *dst, const void *src, size_t bytes);
void cpu_copy_finish(void *handle);

/* embedding.c */
void cpu_embedding_forward(float *out, const int *tok, const float *wte,
                           int v0, int vn, int N, int C);
void cpu_embedding_backward(float *dwte, const float *dout, const int *tok,
                            int v0, int vn, int N, int C);

/* posadd.c */
void cpu_posadd_forward(float *x, const float *wpe, const int *pos, int B, int T, int C);
void cpu_posadd_backward(float *dwpe, const float *dx, const int *pos, int B, int T, int C);

/* patch.c */
void cpu_patch_forward(float *out, const float *img, const float *w, const float *b,
                       int B, int ch, int S, int P, int C);
void cpu_patch_backward(float *dw, float *db, const float *dout, const float *img,
                        int B, int ch, int S, int P, int C);

/* layernorm.c */
void cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b,
                           int N, int C, float eps, dt_dtype t);
void cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const void *inp, const float *w,
                            const float *mean, const float *rstd, int N, int C, dt_dtype t);

/* layernorm.c: the arithmetic of both norms on fp32 rows (ops.h). mean,
 * b (forward) and mean, db (backward) NULL: RMSNorm (no mean, no bias). */
void cpu_norm_forward_f32(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          int N, int C, float eps);
void cpu_norm_backward_f32(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int N, int C);

/* rmsnorm.c */
void cpu_rmsnorm_forward(void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps, dt_dtype t);
void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const void *inp, const float *w,
                          const float *rstd, int N, int C, dt_dtype t);

/* matmul.c */
void cpu_matmul_forward(void *out, const void *inp, const void *w, const float *bias, int N, int IC, int OC,
                        dt_dtype t, dt_dtype out_t);
void cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const void *inp, const void *w,
                         int N, int IC, int OC, dt_dtype t);
void cpu_matmul_gelu_forward(void *out, void *pre, const void *inp, const void *w, const float *bias, int N,
                             int IC, int OC, dt_dtype t);
void cpu_matmul_dgelu_backward(float *dpre, float *scratch, const float *dout, const void *w, const void *pre,
                               int N, int IC, int OC, dt_dtype t);
/* dbias[o] += sum_i dout[i,o] (shared by matmul and patch). */
void cpu_colsum_accumulate(float *dbias, const float *dout, int N, int OC);

/* moe_router.c, moe_route.c, moe_permute.c, moe_gemm.c (mixture of experts) */
void cpu_moe_router_forward(float *scores, int *idx, float *w, float *psum, const float *logits, const float *bias,
                            int N, int E, int k, int sigmoid, int norm, int T, int row0);
void cpu_moe_router_backward(float *dlogits, const float *scores, const int *idx, const float *w, const float *dw,
                             const float *daux, int N, int E, int k, int sigmoid, int norm, int T, int row0);
void cpu_moe_route(int *dst, int *src, int *counts, int *chosen, const int *idx, const int *before, int N, int E,
                   int k, int cap, int T, int row0);
void cpu_moe_permute(void *out, const void *x, const int *src, int M, int C, dt_dtype t);
void cpu_moe_permute_backward(float *dx, const float *dout, const int *dst, int N, int k, int C);
void cpu_moe_unpermute(float *out, const void *y, const int *dst, const float *w, int N, int k, int C, dt_dtype t,
                       int accumulate);
void cpu_moe_unpermute_backward(float *dy, float *dw, const float *dout, const void *y, const int *dst, const float *w,
                                int N, int k, int C, dt_dtype t);
void cpu_moe_grouped_forward(void *out, const void *inp, const void *w, const int *counts, int G, int IC, int OC,
                             dt_dtype t, dt_dtype out_t);
void cpu_moe_grouped_backward(float *dinp, float *dw, const float *dout, const void *inp, const void *w,
                              const int *counts, int G, int IC, int OC, dt_dtype t);

/* attention.c */
void cpu_attention_forward(void *out, void *att, const void *qkv, int B, int T, int C, int NH, int NKV, int causal,
                           dt_dtype t);
void cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const void *qkv, const void *att, int B,
                            int T, int C, int NH, int NKV, int causal, dt_dtype t);

/* attention_decode.c */
void cpu_attention_decode(void *out, float *scratch, const void *q, const void *kv, int T, int C, int NH, int NKV,
                          dt_dtype t);

/* attention_block.c */
void cpu_attention_block_forward(void *out, float *lse, const void *q, const void *kv, const int *qseg,
                                 const int *kseg, int B, int Ts, int Tq, int Tk, int C, int NH, int NKV, int causal,
                                 int shift, dt_dtype t, dt_dtype out_t);
void cpu_attention_block_merge(float *out, float *lse, const float *pout, const float *plse, int B, int Ts, int Tq,
                               int C, int NH);
void cpu_attention_block_backward(float *dq, float *dkv, const float *dout, const void *out, const float *lse,
                                  const void *q, const void *kv, const int *qseg, const int *kseg, int B, int Ts,
                                  int Tq, int Tk, int C, int NH, int NKV, int causal, int shift, dt_dtype t);
/* rows_copy.c */
void cpu_rows_copy(void *dst, int ldd, const void *src, int lds, int N, int W, int accumulate, dt_dtype t);
/* dropout.c */
void cpu_dropout_forward(void *out, const void *x, const long long *rows, int N, int W, long long cols, long long col0,
                         uint64_t key, float p, dt_dtype t);
void cpu_dropout_backward(float *dx, const float *dout, const long long *rows, int N, int W, long long cols,
                          long long col0, uint64_t key, float p);

/* rope.c */
void cpu_rope_table(float *cs, int max_pos, int hs, float theta);
void cpu_rope_forward(void *x, int ld, int nheads, int hs, const int *pos, const float *cs, int N, dt_dtype t);
void cpu_rope_backward(float *dx, int ld, int nheads, int hs, const int *pos, const float *cs, int N);

/* swiglu.c */
void cpu_swiglu_forward(void *out, const void *inp, int N, int F, dt_dtype t);
void cpu_swiglu_backward(float *dinp, const void *inp, const float *dout, int N, int F, dt_dtype t);

/* gelu.c */
void cpu_gelu_forward(void *out, const void *inp, size_t n, dt_dtype t);
void cpu_gelu_backward(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t);

/* gelu_erf.c */
void cpu_gelu_erf_forward(void *out, const void *inp, size_t n, dt_dtype t);
void cpu_gelu_erf_backward(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t);

/* residual.c */
void cpu_residual_forward(void *out, const float *a, const void *b, size_t n, dt_dtype t);
void cpu_residual_layernorm_forward(void *res, void *out, float *mean, float *rstd, const float *a, const void *b,
                                    const float *w, const float *bias, int N, int C, float eps, dt_dtype t);
void cpu_residual_rmsnorm_forward(void *res, void *out, float *rstd, const float *a, const void *b, const float *w,
                                  int N, int C, float eps, dt_dtype t);
void cpu_residual_backward(float *da, float *db, const float *dout, size_t n);

/* xent.c */
void cpu_xent_stats(float *rowmax, float *sumexp, float *target, const float *logits,
                    const int *targets, int v0, int N, int Vl);
void cpu_xent_rescale(float *sumexp, const float *from_max, const float *to_max, int N);
void cpu_xent_loss(float *loss, const float *rowmax, const float *sumexp,
                   const float *target, const int *targets, int N);
void cpu_xent_backward(float *dlogits, const float *logits, const float *rowmax,
                       const float *sumexp, const int *targets, const float *dloss,
                       int v0, int N, int Vl);

/* adamw.c */
void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
               float beta1, float beta2, float eps, float weight_decay, int t);
void cpu_adamw_multi(const dt_adamw_tensor *list, int count, float lr, float beta1, float beta2, float eps,
                     int t);
void cpu_adamw_mixed_multi(const dt_adamw_mixed_tensor *list, int count, int grad_bf16, float grad_scale,
                           float lr, float beta1, float beta2, float eps, int t);

/* adamw_dev.c */
void cpu_adamw_multi_dev(const dt_adamw_tensor *list, int count, const dt_adamw_hyper *h, float beta1, float beta2,
                         float eps);
void cpu_adamw_mixed_multi_dev(const dt_adamw_mixed_tensor *list, int count, int grad_bf16, const float *grad_scale,
                               const dt_adamw_hyper *h, float beta1, float beta2, float eps);

/* reduce.c */
void cpu_scale(float *p, float s, size_t n);

/* loss_dev.c */
void cpu_loss_sum_add(double *acc, const float *loss, int N);
void cpu_loss_seed(float *dloss, const int *targets, float scale, int N);

/* norm_dev.c */
void cpu_sumsq_add(double *acc, const float *p, size_t n);
void cpu_scalar_add(double *acc, const double *x);
void cpu_clip_scale(float *s, const double *sumsq, double clip);
void cpu_scale_dev(float *p, const float *s, size_t n);

/* bf16.c */
void cpu_to_bf16(uint16_t *dst, const float *src, size_t n);
void cpu_from_bf16(float *dst, const uint16_t *src, size_t n);
void cpu_round_bf16(float *p, size_t n);
void cpu_acc_bf16(uint16_t *acc, const float *add, size_t n);
double cpu_sumsq(const float *p, size_t n);

#endif
