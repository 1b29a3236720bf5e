/* attention_block.cuh — what the three files of the blockwise attention share
 * (private to attention_block*.cu): the arguments of every kernel, the mask,
 * and the launchers of the tiled kernels.
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
 * (GPT-2, ViT-B and GPT-2 350M have hs = 64). Both backward paths are
 * deterministic: every element of dq and dkv is added by one thread, in a
 * fixed order (no float atomics), so a step repeats bit for bit. */
#ifndef DTRUN_KERNELS_CUDA_ATTENTION_BLOCK_CUH
#define DTRUN_KERNELS_CUDA_ATTENTION_BLOCK_CUH

#include "kernels/cuda/common.cuh"

/* One call's operands and shape; the layout is ops.h's (attention_block_*). */
struct abk_args {
    float *out, *lse;              /* forward's results */
    const float *q, *kv;           /* q: row stride 3C; kv: k then v, row stride 2C */
    const float *dout, *o;         /* backward: dO and the final out (layout of out) */
    const float *D;                /* backward: rowsum(dO * O) per (b, h, row), [B*NH][Tq] */
    float *dq, *dkv;               /* backward: accumulated into */
    int NH, Ts, Tq, Tk, C, hs, causal, shift;
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

/* The tiled kernels' head size for hs, or 0 when hs needs the simple kernels. */
static inline int abk_tiled_hs(int hs) { return hs <= 32 ? 32 : hs <= 64 ? 64 : hs <= 128 ? 128 : 0; }

/* Launchers (B samples; a.D set for backward). HS: abk_tiled_hs(a.hs). */
void abk_f32_forward(const abk_args &a, int B, int HS);
void abk_f32_backward(const abk_args &a, int B, int HS);
void abk_bf16_forward(const abk_args &a, int B, int HS);
void abk_bf16_backward(const abk_args &a, int B, int HS);

/* Raises a kernel's dynamic shared memory limit above the default 48 KiB once
 * (H100: up to 227 KiB a block). */
template <typename Kernel> static inline void abk_smem_limit(Kernel k, size_t bytes, int *done) {
    if (*done) return;
    DTC_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = 1;
}

#endif
