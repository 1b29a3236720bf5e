/* attention_block.c — blockwise attention with the online softmax (ops.h:
 * attention_block_forward / _merge / _backward), the compute of context
 * parallelism's ring: a block of queries against one block of keys and
 * values, flash-attention-2's recurrence in fp32.
 *
 * For one (sample, head) and a tile of query rows [r0, r1):
 *     S = Q K^T / sqrt(hs)            [nr, nk]  (keys [0, nk): those the tile may see)
 *     m = rowmax(S), l = rowsum(e^(S-m)), lse = m + log l
 *     P = e^(S - lse) (masked: 0),  out = P V
 * backward, with the final lse and D = rowsum(dO * O):
 *     P = e^(S - lse), dP = dO V^T, dS = P * (dP - D)
 *     dQ += dS K / sqrt(hs), dK += dS^T Q / sqrt(hs), dV += P^T dO
 * Only a tile of ATT_TILE rows of S lives at a time (a thread's own buffer),
 * so memory grows with the block's keys, never with T^2.
 *
 * Grouped-query attention (ops.h): query head h reads kv head h / (NH /
 * NKV) where it lies in the kv block, never a copy; backward goes by kv head
 * and sums its group's query heads one after the other, in head order, into
 * the kv head's dk and dv (deterministic).
 *
 * Document masking (packed samples, ops.h): with segment ids, query row i
 * sees the keys of its own segment only, a run [lo_i, hi_i) of the block's
 * keys (ids never decrease along a sample's rows), cut by the causal mask. A
 * tile of rows computes S over the union of its rows' runs and nothing
 * else: the key tiles no row of it reaches are never multiplied (varlen
 * attention without a mask in memory). Without ids every run starts at key
 * 0, so the GEMMs are the ones the ops made before segments existed.
 *
 * Threads: OpenMP over (b, h) in forward, (b, kv head) in backward; each
 * head's GEMMs single-threaded cblas_sgemm, as attention.c. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/softmax_row.h"

#define ATT_TILE 64

/* Keys query row i sees (of Tk). */
static inline int keys_seen(int i, int Tk, int causal, int shift)
{
    if (!causal) return Tk;
    long v = (long)i + shift + 1;
    return v < 0 ? 0 : v > Tk ? Tk : (int)v;
}

/* The first of seg[0..n) that is >= v (seg non-decreasing). */
static inline int seg_lower(const int *seg, int n, int v)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (seg[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The keys [lo, hi) query row i sees (of Tk): the causal prefix, cut to the
 * run of its own segment when there are segment ids (qs, ks: this sample's).
 * lo == hi: none. */
typedef struct {
    int lo, hi;
} key_run;

static inline key_run keys_run(int i, const int *qs, const int *ks, int Tk, int causal, int shift)
{
    key_run r = {0, keys_seen(i, Tk, causal, shift)};
    if (qs) {
        int lo = seg_lower(ks, Tk, qs[i]), end = seg_lower(ks, Tk, qs[i] + 1);
        r.lo = lo;
        if (end < r.hi) r.hi = end;
        if (r.hi < r.lo) r.hi = r.lo;
    }
    return r;
}

/* The runs of rows [r0, r1) into run[], and their union's bounds: keys
 * [*klo, *khi) hold every key a row of the tile sees. */
static void tile_runs(key_run *run, int r0, int r1, const int *qs, const int *ks, int Tk, int causal, int shift,
                      int *klo, int *khi)
{
    int lo = Tk, hi = 0;
    for (int i = r0; i < r1; i++) {
        key_run r = run[i - r0] = keys_run(i, qs, ks, Tk, causal, shift);
        if (r.hi > r.lo) {
            if (r.lo < lo) lo = r.lo;
            if (r.hi > hi) hi = r.hi;
        }
    }
    if (hi <= lo) lo = hi = 0;
    if (!qs) lo = 0; /* without segments: the GEMMs from key 0, as before segments */
    *klo = lo, *khi = hi;
}

/* q: row stride W (a qkv buffer's), k and v: row stride C2 (the kv block's);
 * qs, ks: this sample's segment ids or NULL */
static void head_forward(float *out, float *lse, float *s, const float *q, const float *k, const float *v,
                         const int *qs, const int *ks, int Tq, int Tk, int C, int W, int C2, int hs, int causal,
                         int shift)
{
    float scale = 1.0f / sqrtf((float)hs);
    key_run run[ATT_TILE];
    for (int r0 = 0; r0 < Tq; r0 += ATT_TILE) {
        int r1 = r0 + ATT_TILE < Tq ? r0 + ATT_TILE : Tq, nr = r1 - r0, k0, k1;
        tile_runs(run, r0, r1, qs, ks, Tk, causal, shift, &k0, &k1);
        int nk = k1 - k0;
        if (nk > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs, scale, q + (size_t)r0 * W, W,
                        k + (size_t)k0 * C2, C2, 0.0f, s, nk);
        for (int i = r0; i < r1; i++) {
            float *row = s + (size_t)(i - r0) * (nk > 0 ? nk : 1);
            key_run r = run[i - r0];
            int a = r.hi > r.lo ? r.lo - k0 : 0;
            if (a > 0) memset(row, 0, (size_t)a * sizeof(float));
            cpu_softmax_row(row + a, r.hi - r.lo, nk - a, &lse[i]);
        }
        if (nk > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nk, 1.0f, s, nk, v + (size_t)k0 * C2,
                        C2, 0.0f, out + (size_t)r0 * C, C);
        else
            for (int i = r0; i < r1; i++) memset(out + (size_t)i * C, 0, (size_t)hs * sizeof(float));
    }
}

static void block_forward_f32(float *out, float *lse, const float *q, const float *kv, const int *qseg,
                              const int *kseg, int B, int Ts, int Tq, int Tk, int C, int NH, int NKV, int causal,
                              int shift)
{
    int hs = C / NH, W = dt_qkv_cols(C, NH, NKV), C2 = dt_kv_cols(C, NH, NKV), G = NH / NKV;
    if (hs <= 0) return;
    cpu_blas_single_threaded();
    #pragma omp parallel
    {
        float *s = malloc((size_t)ATT_TILE * (size_t)(Tk > 0 ? Tk : 1) * sizeof(float));
        #pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                if (!s) continue; /* out of memory: nothing sane to do in a kernel */
                const float *kb = kv + (size_t)b * Ts * C2 + (size_t)(h / G) * hs;
                head_forward(out + (size_t)b * Ts * C + (size_t)h * hs, lse + ((size_t)b * NH + h) * Ts, s,
                             q + (size_t)b * Ts * W + (size_t)h * hs, kb, kb + C2 / 2,
                             qseg ? qseg + (size_t)b * Ts : NULL, kseg ? kseg + (size_t)b * Ts : NULL, Tq, Tk, C, W,
                             C2, hs, causal, shift);
            }
        free(s);
    }
}

void cpu_attention_block_merge(float *out, float *lse, const float *pout, const float *plse, int B, int Ts, int Tq,
                               int C, int NH)
{
    if (B <= 0 || Tq <= 0 || C <= 0 || NH <= 0) return;
    int hs = C / NH;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *l = lse + ((size_t)b * NH + h) * Ts;
            const float *pl = plse + ((size_t)b * NH + h) * Ts;
            for (int i = 0; i < Tq; i++) {
                float a = l[i], p = pl[i];
                if (p == -INFINITY) continue;
                float *o = out + ((size_t)b * Ts + i) * C + (size_t)h * hs;
                const float *po = pout + ((size_t)b * Ts + i) * C + (size_t)h * hs;
                if (a == -INFINITY) {
                    memcpy(o, po, (size_t)hs * sizeof(float));
                    l[i] = p;
                    continue;
                }
                float mx = a > p ? a : p;
                float lnew = mx + logf(expf(a - mx) + expf(p - mx));
                float wa = expf(a - lnew), wp = expf(p - lnew);
                for (int c = 0; c < hs; c++) o[c] = o[c] * wa + po[c] * wp;
                l[i] = lnew;
            }
        }
}

/* One head's backward; s and dp: a tile's [ATT_TILE, Tk] each. */
static void head_backward(float *dq, float *dk, float *dv, float *s, float *dp, const float *dout, const float *out,
                          const float *lse, const float *q, const float *k, const float *v, const int *qs,
                          const int *ks, int Tq, int Tk, int C, int W, int C2, int hs, int causal, int shift)
{
    float scale = 1.0f / sqrtf((float)hs);
    key_run run[ATT_TILE];
    for (int r0 = 0; r0 < Tq; r0 += ATT_TILE) {
        int r1 = r0 + ATT_TILE < Tq ? r0 + ATT_TILE : Tq, nr = r1 - r0, k0, k1;
        tile_runs(run, r0, r1, qs, ks, Tk, causal, shift, &k0, &k1);
        int nk = k1 - k0;
        if (nk <= 0) continue; /* no row of the tile sees a key of this block */
        const float *kt = k + (size_t)k0 * C2, *vt = v + (size_t)k0 * C2;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs, scale, q + (size_t)r0 * W, W, kt, C2,
                    0.0f, s, nk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs, 1.0f, dout + (size_t)r0 * C, C, vt, C2,
                    0.0f, dp, nk);
        for (int i = r0; i < r1; i++) {
            float *srow = s + (size_t)(i - r0) * nk, *drow = dp + (size_t)(i - r0) * nk;
            key_run r = run[i - r0];
            int a = r.hi > r.lo ? r.lo - k0 : 0, e = r.hi > r.lo ? r.hi - k0 : 0;
            const float *o = out + (size_t)i * C, *g = dout + (size_t)i * C;
            float D = 0.0f;
            for (int c = 0; c < hs; c++) D += g[c] * o[c];
            float l = lse[i];
            for (int j = 0; j < a; j++) srow[j] = 0.0f, drow[j] = 0.0f;
            #pragma omp simd
            for (int j = a; j < e; j++) {
                float p = expf(srow[j] - l);
                srow[j] = p;
                drow[j] = p * (drow[j] - D);
            }
            for (int j = e; j < nk; j++) srow[j] = 0.0f, drow[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nk, scale, dp, nk, kt, C2, 1.0f,
                    dq + (size_t)r0 * W, W);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nr, scale, dp, nk, q + (size_t)r0 * W, W,
                    1.0f, dk + (size_t)k0 * C2, C2);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nr, 1.0f, s, nk, dout + (size_t)r0 * C, C,
                    1.0f, dv + (size_t)k0 * C2, C2);
    }
}

static void block_backward_f32(float *dq, float *dkv, const float *dout, const float *out, const float *lse,
                              const float *q, const float *kv, const int *qseg, const int *kseg, int B, int Ts, int Tq,
                              int Tk, int C, int NH, int NKV, int causal, int shift)
{
    int hs = C / NH, W = dt_qkv_cols(C, NH, NKV), C2 = dt_kv_cols(C, NH, NKV), Ckv = C2 / 2, G = NH / NKV;
    if (hs <= 0) return;
    cpu_blas_single_threaded();
    #pragma omp parallel
    {
        float *s = malloc(2 * (size_t)ATT_TILE * (size_t)Tk * sizeof(float));
        #pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++)
            for (int g = 0; g < NKV; g++) {
                if (!s) continue;
                size_t ko = (size_t)b * Ts * C2 + (size_t)g * hs;
                for (int h = g * G; h < (g + 1) * G; h++) { /* the group's query heads, in order */
                    size_t qo = (size_t)b * Ts * W + (size_t)h * hs, oo = (size_t)b * Ts * C + (size_t)h * hs;
                    head_backward(dq + qo, dkv + ko, dkv + ko + Ckv, s, s + (size_t)ATT_TILE * Tk, dout + oo,
                                  out + oo, lse + ((size_t)b * NH + h) * Ts, q + qo, kv + ko, kv + ko + Ckv,
                                  qseg ? qseg + (size_t)b * Ts : NULL, kseg ? kseg + (size_t)b * Ts : NULL, Tq, Tk,
                                  C, W, C2, hs, causal, shift);
                }
            }
        free(s);
    }
}

/* Elements from a strided operand's pointer to the last one the op reads:
 * rows [0, rows) of each of B samples of Ts rows, `width` of each row of
 * `stride` (ops.h's layouts). */
static size_t span(int B, int Ts, int rows, int stride, int width)
{
    if (B <= 0 || rows <= 0) return 0;
    return ((size_t)(B - 1) * (size_t)Ts + (size_t)(rows - 1)) * (size_t)stride + (size_t)width;
}

/* The activations (q, kv, out) in the run's type (act.c): q and kv of t,
 * out of out_t. out's rows past Tq keep their values (widened and rounded
 * back unchanged). */
void cpu_attention_block_forward(void *out, float *lse, const void *q, const void *kv, const int *qseg,
                                 const int *kseg, int B, int Ts, int Tq, int Tk, int C, int NH, int NKV, int causal,
                                 int shift, dt_dtype t, dt_dtype out_t)
{
    if (B <= 0 || Tq <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV) return;
    int W = dt_qkv_cols(C, NH, NKV), C2 = dt_kv_cols(C, NH, NKV);
    size_t no = span(B, Ts, Tq, C, C);
    float *o = cpu_act_inout(0, out, no, out_t);
    if (!qseg || !kseg) qseg = kseg = NULL;
    block_forward_f32(o, lse, cpu_act_in(1, q, span(B, Ts, Tq, W, C), t), cpu_act_in(2, kv, span(B, Ts, Tk, C2, C2), t),
                      qseg, kseg, B, Ts, Tq, Tk, C, NH, NKV, causal, shift);
    cpu_act_store(out, o, no, out_t);
}

void cpu_attention_block_backward(float *dq, float *dkv, const float *dout, const void *out, const float *lse,
                                  const void *q, const void *kv, const int *qseg, const int *kseg, int B, int Ts,
                                  int Tq, int Tk, int C, int NH, int NKV, int causal, int shift, dt_dtype t)
{
    if (B <= 0 || Tq <= 0 || Tk <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV) return;
    int W = dt_qkv_cols(C, NH, NKV), C2 = dt_kv_cols(C, NH, NKV);
    if (!qseg || !kseg) qseg = kseg = NULL;
    block_backward_f32(dq, dkv, dout, cpu_act_in(0, out, span(B, Ts, Tq, C, C), t), lse,
                       cpu_act_in(1, q, span(B, Ts, Tq, W, C), t), cpu_act_in(2, kv, span(B, Ts, Tk, C2, C2), t),
                       qseg, kseg, B, Ts, Tq, Tk, C, NH, NKV, causal, shift);
}
