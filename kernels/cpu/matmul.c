/* matmul.c — the linear layer: out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias[OC].
 *
 * Nearly all of a transformer's FLOPs are here, so the products go to OpenBLAS
 * sgemm (split across threads by gemm.c); only the bias broadcast and the
 * bias gradient's column sums are our own loops. */
#include <string.h>

#include "kernels/cpu/cpu.h"

static void matmul_forward_f32(float *out, const float *inp, const float *w, const float *bias,
                              int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    /* Seed out with the bias and let the GEMM add onto it (beta = 1): one
     * pass over out instead of a GEMM pass plus a bias pass. Without a bias,
     * beta = 0 overwrites out. */
    float beta = 0.0f;
    if (bias) {
        #pragma omp parallel for if ((size_t)N * OC > CPU_PAR_MIN)
        for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    cpu_sgemm(0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, beta, out, OC);
}

/* Column sums in blocks of 16 columns: each thread owns whole columns (no
 * write conflicts, deterministic order) and reads one cache line per row. */
void cpu_colsum_accumulate(float *dbias, const float *dout, int N, int OC) {
    enum { BLOCK = 16 };
    int nblocks = (OC + BLOCK - 1) / BLOCK;
    #pragma omp parallel for if ((size_t)N * OC > CPU_PAR_MIN)
    for (int blk = 0; blk < nblocks; blk++) {
        int o0 = blk * BLOCK;
        int on = OC - o0 < BLOCK ? OC - o0 : BLOCK;
        float acc[BLOCK] = {0};
        for (int i = 0; i < N; i++) {
            const float *d = dout + (size_t)i * OC + o0;
            #pragma omp simd
            for (int o = 0; o < on; o++) acc[o] += d[o];
        }
        for (int o = 0; o < on; o++) dbias[o0 + o] += acc[o];
    }
}

/* With out = inp w^T + b:
 *   dinp = dout @ w          [N,OC] x [OC,IC]
 *   dw   = dout^T @ inp      [OC,N] x [N,IC]
 *   db   = colsum(dout)
 * beta = 1 makes the GEMMs accumulate, as the ops contract requires. Each
 * product is its own GEMM, so asking for some of them (a zero-bubble pipeline's
 * B without dw, its W without dinp) gives the same bits as asking for all. */
static void matmul_backward_f32(float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (dinp) cpu_sgemm(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dinp, IC);
    if (dw) cpu_sgemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    if (dbias) cpu_colsum_accumulate(dbias, dout, N, OC);
}

/* The activations in the run's type (act.c): inp of type t, out of out_t. */
/* The weight matrix w [OC, IC] of type t, widened in slot 3. */
static const float *weight_in(const void *w, int IC, int OC, dt_dtype t)
{
    return cpu_act_in(3, w, (size_t)OC * (size_t)IC, t);
}

void cpu_matmul_forward(void *out, const void *inp, const void *w, const float *bias, int N, int IC, int OC,
                        dt_dtype t, dt_dtype out_t)
{
    size_t no = (size_t)N * (size_t)OC;
    float *o = cpu_act_out(0, out, no, out_t);
    matmul_forward_f32(o, cpu_act_in(1, inp, (size_t)N * (size_t)IC, t), weight_in(w, IC, OC, t), bias, N, IC, OC);
    cpu_act_store(out, o, no, out_t);
}

/* inp (read for dw only) and w (for dinp only) of type t */
void cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const void *inp, const void *w,
                         int N, int IC, int OC, dt_dtype t)
{
    const float *x = dw ? cpu_act_in(0, inp, (size_t)N * (size_t)IC, t) : NULL;
    matmul_backward_f32(dinp, dw, dbias, dout, x, dinp ? weight_in(w, IC, OC, t) : NULL, N, IC, OC);
}

/* The fused layer's twin (ops.h matmul_gelu_forward): the two ops in turn
 * on fp32, so the model's results are the same bits whichever way it calls
 * them in fp32; in bf16 the GELU reads the unrounded pre-activation and both
 * are rounded when stored, as a GEMM epilogue does. */
void cpu_matmul_gelu_forward(void *out, void *pre, const void *inp, const void *w, const float *bias, int N,
                             int IC, int OC, dt_dtype t)
{
    size_t no = (size_t)N * (size_t)OC;
    float *o = cpu_act_out(0, out, no, t), *p = cpu_act_out(1, pre, no, t);
    matmul_forward_f32(p, cpu_act_in(2, inp, (size_t)N * (size_t)IC, t), weight_in(w, IC, OC, t), bias, N, IC, OC);
    cpu_gelu_forward(o, p, no, DT_F32);
    cpu_act_store(out, o, no, t);
    cpu_act_store(pre, p, no, t);
}

/* The backward mirror (ops.h matmul_dgelu_backward): the GEMM into the
 * zeroed scratch, then the GELU's backward into the zeroed dpre — the
 * sequence the model ran before the op existed, so the same bits. */
void cpu_matmul_dgelu_backward(float *dpre, float *scratch, const float *dout, const void *w, const void *pre,
                               int N, int IC, int OC, dt_dtype t)
{
    size_t n = (size_t)N * (size_t)IC;
    cpu_zero(scratch, n * sizeof(float));
    matmul_backward_f32(scratch, NULL, NULL, dout, NULL, weight_in(w, IC, OC, t), N, IC, OC);
    cpu_zero(dpre, n * sizeof(float));
    cpu_gelu_backward(dpre, pre, scratch, n, t);
}
