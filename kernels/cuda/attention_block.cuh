/* attention_block.cuh — what the three files of the blockwise attention share
 * (private to attention_block*.cu, and to attention.cu, whose bf16 path
 * computes through them): the arguments of every kernel, the mask, and the
 * launchers of the tiled kernels.
 *
 *   attention_block.cu       the ops (forward, merge, backward): picks a path,
 *                            D = rowsum(dO * O), the merge, and the simple
 *                            kernels for head sizes the tiled ones do not take
 *   attention_block_fp32.cu  flash-attention-2 tiles on CUDA cores, fp32
 *                            throughout: the twin of the CPU within fp32
 *                            rounding
 *   attention_block_bf16.cu  the same tiles on tensor cores (mma.sync
 *                            m16n8k16, bf16 inputs, fp32 accumulation), when
 *                            dt_ops_cuda_set_bf16(1) says the inputs are bf16
 *
 * The tiled kernels take any head size up to 128: a head of hs columns is
 * computed as one of HS = 32, 64 or 128 columns, the missing ones read as zero
 * (GPT-2, ViT-B and GPT-2 350M have hs = 64; Llama's 64 and 128). Both
 * backward paths are deterministic: every element of dq and dkv is added by
 * one thread, in a fixed order (no float atomics), so a step repeats bit for
 * bit.
 *
 * Grouped-query attention (ops.h): NH query heads, NKV kv heads, G = NH /
 * NKV query heads a kv head. Forward and dQ go by query head (grid y = B NH),
 * each reading its kv head h / G where it lies (no copy); dK dV go by kv
 * head (grid y = B NKV), a block walking its group's G query heads one after
 * the other, so a kv head's gradient is one thread's sum per element over
 * the group, in head order.
 *
 * Storage (ops.h dt_dtype) and arithmetic are independent: every kernel is
 * a template on the element type T of q, kv (and, backward, of the final
 * out) and, forward, OT of out — float, or uint16_t for bf16 (act.cuh). The
 * path (CUDA cores or tensor cores) follows set_bf16_products alone; either
 * reads bf16 operands as they are stored (the tensor-core path loads them
 * into its bf16 tiles without a conversion, the CUDA-core path widens them,
 * exactly) and rounds a bf16 out once, where it stores it (act_store, the
 * CPU's to_bf16). dout, lse, D, dq and dkv are fp32 in every case. */
#ifndef DTRUN_KERNELS_CUDA_ATTENTION_BLOCK_CUH
#define DTRUN_KERNELS_CUDA_ATTENTION_BLOCK_CUH

#include <climits>

#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

/* One call's operands and shape; the layout is ops.h's (attention_block_*).
 * The activations are untyped here: a kernel casts them to its T (q, kv, o)
 * and OT (out). */
struct abk_args {
    void *out;                     /* forward's result, OT */
    float *lse;                    /* forward's result; backward reads it */
    const void *q, *kv;            /* T. q: row stride ldq; kv: k then v (Ckv on), row stride ldkv */
    const int *qseg, *kseg;        /* document masking (ops.h): each q / kv row's segment id, sample
                                      stride Ts; both NULL: none */
    const float *dout;             /* backward: dO (layout of out) */
    const void *o;                 /* backward: the final out (layout of out), T */
    const float *D;                /* backward: rowsum(dO * O) per (b, h, row), [B*NH][Tq] */
    float *dq, *dkv;               /* backward: accumulated into (dq: row stride ldq, dkv: ldkv) */
    int NH, NKV, G, Ts, Tq, Tk, C, hs, causal, shift;
    int ldq;                       /* q's (and dq's) row stride: C + 2 Ckv (dt_qkv_cols) */
    int Ckv;                       /* NKV hs: where v starts after k */
    int ldkv;                      /* kv's row stride: 2 Ckv (ops.h, packed); forward also
                                      takes ldq, kv being a qkv buffer's k columns (attention.cu) */
    float scale;                   /* 1 / sqrt(hs) */
    float scale_log2;              /* scale * log2(e): softmax in base 2 (exp2f is one instruction) */
};

#define ABK_LOG2E 1.4426950408889634f
#define ABK_LN2 0.6931471805599453f

/* Keys query row i sees (of Tk): the mask of ops.h, a prefix of the block's
 * keys. Monotone in i, so a tile's first row sees the fewest keys and its last
 * row the most. */
__device__ __forceinline__ int abk_seen(int i, const abk_args &a) {
    if (!a.causal) return a.Tk;
    long v = (long)i + a.shift + 1;
    return v < 0 ? 0 : v > a.Tk ? a.Tk : (int)v;
}

/* The first query row that sees key k (causal); rows before it see none of
 * keys >= k. */
__device__ __forceinline__ long abk_first_query(int k, const abk_args &a) {
    if (!a.causal) return 0;
    long v = (long)k - a.shift;
    return v < 0 ? 0 : v;
}

/* Document masking (ops.h): segment ids never decrease along a sample's
 * rows, so the keys of a query's segment are one run, found by binary
 * search. The first of seg[0..n) that is >= v. */
__device__ __forceinline__ int abk_lower(const int *seg, int n, int v) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (seg[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The keys [x, y) query row i of sample b sees: abk_seen's prefix, cut to
 * the run of its segment when the call has segment ids (then a row past Tq
 * sees none). Both ends never decrease with i, so a tile's first row has
 * the lowest x and its last row the highest y. Without ids (0, abk_seen):
 * the tiles and masks of the ops before segments. */
__device__ __forceinline__ int2 abk_keys(int b, int i, const abk_args &a) {
    int2 r = make_int2(0, abk_seen(i, a));
    if (!a.qseg) return r;
    if (i >= a.Tq) return make_int2(0, 0);
    const int *ks = a.kseg + (size_t)b * a.Ts;
    int s = a.qseg[(size_t)b * a.Ts + i];
    r.x = abk_lower(ks, a.Tk, s);
    r.y = min(r.y, abk_lower(ks, a.Tk, s + 1));
    if (r.y < r.x) r.y = r.x;
    return r;
}

/* The query rows [x, y) that see key j of sample b (the mirror of
 * abk_keys, for the backward's key tiles); without ids (abk_first_query,
 * Tq), x capped at Tq. */
__device__ __forceinline__ int2 abk_queries(int b, int j, const abk_args &a) {
    long first = abk_first_query(j, a);
    int2 r = make_int2(first < a.Tq ? (int)first : a.Tq, a.Tq);
    if (!a.qseg) return r;
    if (j >= a.Tk) return make_int2(a.Tq, a.Tq);
    const int *qs = a.qseg + (size_t)b * a.Ts;
    int s = a.kseg[(size_t)b * a.Ts + j];
    r.x = max(r.x, abk_lower(qs, a.Tq, s));
    r.y = abk_lower(qs, a.Tq, s + 1);
    if (r.y < r.x) r.y = r.x;
    return r;
}

/* A row's segment id for the element masks of the backward's key tiles
 * (their per-element test is qseg == kseg besides the causal one): rows
 * past the block get ids no other row has. */
__device__ __forceinline__ int abk_qseg(int b, int i, const abk_args &a) {
    return i < a.Tq ? a.qseg[(size_t)b * a.Ts + i] : INT_MIN;
}
__device__ __forceinline__ int abk_kseg(int b, int j, const abk_args &a) {
    return j < a.Tk ? a.kseg[(size_t)b * a.Ts + j] : INT_MAX;
}

/* The tiled kernels' head size for hs, or 0 when hs needs the simple kernels. */
static inline int abk_tiled_hs(int hs) { return hs <= 32 ? 32 : hs <= 64 ? 64 : hs <= 128 ? 128 : 0; }

/* Launchers (B samples; a.D set for backward). HS: abk_tiled_hs(a.hs); t:
 * the type of q, kv (and o), out_t: of out. */
void abk_f32_forward(const abk_args &a, int B, int HS, dt_dtype t, dt_dtype out_t);
void abk_f32_backward(const abk_args &a, int B, int HS, dt_dtype t);
void abk_bf16_forward(const abk_args &a, int B, int HS, dt_dtype t, dt_dtype out_t);
void abk_bf16_backward(const abk_args &a, int B, int HS, dt_dtype t);

/* The probabilities P = e^(q k^T / sqrt(hs) - lse) of a forward's call (its
 * final a.lse, Tq = Tk: one block of every query against every key) into
 * att[B, NH, Tq, Tk] of type t, masked entries 0, rounded once if bf16. On
 * CUDA cores in fp32, tiled for HS = abk_tiled_hs(a.hs) (attention_block_fp32.cu). */
void abk_f32_probs(const abk_args &a, void *att, int B, int HS, dt_dtype t);

/* attention_forward (ops.h) for bf16 activations (attention.cu): out from
 * the blockwise forward over the k and v columns of qkv itself (a.ldkv =
 * a.ldq), the row log-sum-exps in the backend's scratch (B NH T floats, what
 * the backward's D takes), then att from them (abk_f32_probs, or a simple
 * kernel for hs > 128). attention_block.cu. */
void abk_attention_probs_forward(void *out, void *att, const void *qkv, int B, int T, int C, int NH, int NKV,
                                 int causal, dt_dtype t);

/* ACT_LAUNCH twice: T the type t names, OT the type out_t names. */
#define ABK_LAUNCH2(t, T, out_t, OT, ...) ACT_LAUNCH(t, T, ACT_LAUNCH(out_t, OT, __VA_ARGS__))

/* Raises a kernel's dynamic shared memory limit above the default 48 KiB once
 * (H100: up to 227 KiB a block). */
template <typename Kernel> static inline void abk_smem_limit(Kernel k, size_t bytes, int *done) {
    if (*done) return;
    DTC_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = 1;
}

#endif
