/* attention_block_bf16.cu — blockwise attention as flash-attention-2 tiles on
 * tensor cores: bf16 operands, fp32 accumulation, fp32 softmax statistics.
 * Used when dt_ops_cuda_set_bf16(1) says q, k and v hold bf16 values (the
 * model rounds qkv where it stores it): stored as bf16 (T = uint16_t, the
 * model's activations under mixed precision) they go into the shared tiles
 * as they are, two to a word, with no conversion; stored as fp32 values of
 * bf16 numbers they are narrowed on the way, exactly. The products Q K^T are
 * exact in fp32 either way (bf16 x bf16). A bf16 out (OT) is rounded once,
 * as it is stored. What is rounded is what FA2 rounds: P before P V, dO before
 * dO V^T and P^T dO, dS before dS K and dS^T Q (relative 2^-9 each); the
 * running max, the sums, lse, D and every accumulator stay fp32.
 *
 * Same structure as attention_block_fp32.cu (see there: tiles, online
 * softmax, deterministic backward in two kernels), with the products as warp
 * MMAs: mma.sync.m16n8k16 (A 16 x 16 row-major, B 16 x 8 column-major, C
 * 16 x 8 fp32). Four warps a block, each owning 16 rows of the block's tile,
 * so a row's statistics live in the 4 lanes of a quad (lane = 4 g + t holds
 * rows g and g + 8, columns 2t and 2t + 1 of every 8-column piece). The
 * accumulator layout of S (two 16 x 8 pieces) is the A-operand layout of the
 * next product: P, P^T, dS and dS^T go from registers straight into the
 * second MMA, never through shared memory.
 *
 * Shared memory holds bf16 pairs as 32-bit words. Rows are padded by 8 bf16
 * (row stride 4 mod 32 words, or 20 for 32-wide tiles): a fragment load reads
 * word (row0 + g) * ld + t for the 32 lanes, which then hits 32 distinct
 * banks. Operands that the MMA wants with the other index contiguous (V for
 * P V, dO and Q for the backward's right-hand sides, K for dQ) are stored
 * transposed as they are loaded.
 *
 * Tiles: 64 query rows x 64 keys (forward, dQ; 28 and 46 KiB of shared memory
 * at hs 64, 53 and 88 at hs 128), 64 keys x 64 query rows (dK dV; 56 KiB at
 * hs 64; hs 128 takes 32 query rows a step so that the dK and dV accumulators,
 * 2 x 64 registers, still fit beside S and dP). */
#include <cstdint>
#include <cstring>
#include <cuda_bf16.h>

#include "kernels/cuda/attention_block.cuh"

#define BF_THREADS 128 /* 4 warps */
#define BF_TILE 64     /* query rows or keys of a block and of a step */

__device__ __forceinline__ uint32_t bf_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (lo) in the low half: the lower index */
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* c += a b: a 16 x 16 bf16 (4 words), b 16 x 8 bf16 (2 words), c 16 x 8 fp32 */
__device__ __forceinline__ void bf_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* A fragment: rows r0..r0+15, columns c0..c0+15 of a row-major bf16 tile X
 * (ldw words a row). Lane 4g + t: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..),
 * (g+8, 2t+8..). */
__device__ __forceinline__ void bf_frag_a(uint32_t (&f)[4], const uint32_t *X, int ldw, int r0, int c0, int g,
                                          int t) {
    const uint32_t *p = X + (r0 + g) * ldw + c0 / 2 + t;
    f[0] = p[0];
    f[1] = p[8 * ldw];
    f[2] = p[4];
    f[3] = p[8 * ldw + 4];
}

/* B fragment (16 k x 8 n) from a tile Y stored [n][k] (k contiguous):
 * lane 4g + t: (k 2t..2t+1, n g), (k 2t+8.., n g). */
__device__ __forceinline__ void bf_frag_b(uint32_t &b0, uint32_t &b1, const uint32_t *Y, int ldw, int n0, int k0,
                                          int g, int t) {
    const uint32_t *p = Y + (n0 + g) * ldw + k0 / 2 + t;
    b0 = p[0];
    b1 = p[4];
}

/* The A operand of the next product from two 16 x 8 accumulators (columns
 * 16 kc .. 16 kc + 15 of a 16-row result), rounded to bf16. */
__device__ __forceinline__ void bf_acc_to_a(uint32_t (&f)[4], const float (&lo)[4], const float (&hi)[4]) {
    f[0] = bf_pack(lo[0], lo[1]);
    f[1] = bf_pack(lo[2], lo[3]);
    f[2] = bf_pack(hi[0], hi[1]);
    f[3] = bf_pack(hi[2], hi[3]);
}

/* Two elements as one word of bf16 pairs, the first in the low half:
 * fp32 ones narrowed (bf_pack), bf16 ones as they are. */
__device__ __forceinline__ uint32_t bf_word(float lo, float hi) { return bf_pack(lo, hi); }
__device__ __forceinline__ uint32_t bf_word(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

/* 16-byte loads of 8 bf16 straight into the tile: only for bf16 storage
 * whose rows allow them (the tile side: rows of ldw words, a multiple of 4
 * for every tile here, at 16-byte multiples of column). */
template <typename T> __device__ __forceinline__ bool bf_vec8(const T *src, size_t lds, int hs) {
    return sizeof(T) == 2 && (reinterpret_cast<uintptr_t>(src) & 15) == 0 && lds % 8 == 0 && hs % 8 == 0;
}

/* X[r][c] = bf16(src[r * lds + c]) as pairs, R x HS (row stride ldw words);
 * rows >= nrows and columns >= hs read as 0. */
template <int HS, int R, typename T>
__device__ __forceinline__ void bf_load_rows(uint32_t *X, int ldw, const T *src, size_t lds, int nrows, int hs) {
    if (bf_vec8(src, lds, hs)) {
        for (int x = threadIdx.x; x < R * HS / 8; x += BF_THREADS) {
            int r = x / (HS / 8), c = (x % (HS / 8)) * 8;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r < nrows && c < hs) v = *reinterpret_cast<const uint4 *>(src + (size_t)r * lds + c);
            *reinterpret_cast<uint4 *>(X + r * ldw + c / 2) = v;
        }
        return;
    }
    for (int x = threadIdx.x; x < R * HS / 2; x += BF_THREADS) {
        int r = x / (HS / 2), c = (x % (HS / 2)) * 2;
        T v0 = T(0), v1 = T(0);
        if (r < nrows) {
            const T *s = src + (size_t)r * lds + c;
            if (c < hs) v0 = s[0];
            if (c + 1 < hs) v1 = s[1];
        }
        X[r * ldw + c / 2] = bf_word(v0, v1);
    }
}

/* Xt[c][r] = bf16(src[r * lds + c]): the R x HS tile transposed (HS rows of
 * R bf16, row stride ldw words), same zero fill. A warp covers 8 columns x 4
 * row pairs: its 32 stores hit 32 banks, its loads 8 elements of 8 rows. */
template <int HS, int R, typename T>
__device__ __forceinline__ void bf_load_cols(uint32_t *Xt, int ldw, const T *src, size_t lds, int nrows, int hs) {
    for (int x = threadIdx.x; x < HS * R / 2; x += BF_THREADS) {
        int hi = x >> 5, lane = x & 31;
        int c = (hi % (HS / 8)) * 8 + (lane >> 2), rp = (hi / (HS / 8)) * 4 + (lane & 3), r = 2 * rp;
        T v0 = T(0), v1 = T(0);
        if (c < hs) {
            if (r < nrows) v0 = src[(size_t)r * lds + c];
            if (r + 1 < nrows) v1 = src[(size_t)(r + 1) * lds + c];
        }
        Xt[c * ldw + rp] = bf_word(v0, v1);
    }
}

/* ---------------------------------------------------------------- forward */

template <int HS> struct bf_fwd {
    static constexpr int LDW = (HS + 8) / 2, LDT = (BF_TILE + 8) / 2;
    static constexpr size_t smem = ((size_t)2 * BF_TILE * LDW + (size_t)HS * LDT) * sizeof(uint32_t);
};

template <int HS, typename T, typename OT>
__global__ void __launch_bounds__(BF_THREADS) abk_bf16_forward_kernel(abk_args a) {
    constexpr int BM = BF_TILE, BN = BF_TILE, LDW = bf_fwd<HS>::LDW, LDT = bf_fwd<HS>::LDT;
    constexpr int KC = HS / 16, NT = BN / 8, DT = HS / 8;
    extern __shared__ __align__(16) uint32_t abk_bf_smem[];
    uint32_t *Qs = abk_bf_smem;   /* [BM][LDW] */
    uint32_t *Ks = Qs + BM * LDW; /* [BN][LDW] */
    uint32_t *Vt = Ks + BN * LDW; /* [HS][LDT]  V transposed */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int r0 = (gridDim.x - 1 - blockIdx.x) * BM, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    int rows = min(BM, a.Tq - r0);
    size_t C = (size_t)a.C, ldkv = (size_t)a.ldkv;
    const T *qb = static_cast<const T *>(a.q) + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)(h / a.G) * a.hs, *vb = kb + a.Ckv;
    /* keys [kr0.x, kr1.y) hold every run of the tile's rows (abk_keys) */
    int2 kr0 = abk_keys(b, r0, a), kr1 = abk_keys(b, r0 + rows - 1, a);
    int nk = kr1.y, seen0 = kr0.y, lo_last = kr1.x;
    int ra = r0 + 16 * warp + g, rb = ra + 8; /* this lane's two rows */
    int2 sa = abk_keys(b, ra, a), sb = abk_keys(b, rb, a);
    bf_load_rows<HS, BM>(Qs, LDW, qb + (size_t)r0 * a.ldq, a.ldq, rows, a.hs);
    __syncthreads();
    uint32_t qf[KC][4]; /* the warp's 16 rows of Q, kept in registers */
#pragma unroll
    for (int kc = 0; kc < KC; kc++) bf_frag_a(qf[kc], Qs, LDW, 16 * warp, 16 * kc, g, t);

    float o[DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    for (int k0 = kr0.x / BN * BN; k0 < nk; k0 += BN) {
        __syncthreads(); /* the last tile's K and V are used up */
        int kn = min(BN, nk - k0);
        bf_load_rows<HS, BN>(Ks, LDW, kb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
        bf_load_cols<HS, BN>(Vt, LDT, vb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
        __syncthreads();
        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC; kc++)
#pragma unroll
            for (int n = 0; n < NT; n++) {
                uint32_t b0, b1;
                bf_frag_b(b0, b1, Ks, LDW, 8 * n, 16 * kc, g, t);
                bf_mma(s[n], qf[kc], b0, b1);
            }
        bool full = k0 >= lo_last && k0 + BN <= seen0;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[n][e] * a.scale_log2;
                int key = k0 + 8 * n + 2 * t + (e & 1);
                int2 run = e < 2 ? sa : sb;
                if (!full && (key >= run.y || key < run.x)) v = -INFINITY;
                s[n][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float mref[2], corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) { /* a row's 4 lanes: a quad */
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float mnew = fmaxf(m[r], mx[r]);
            mref[r] = mnew == -INFINITY ? 0.0f : mnew; /* no key yet: p = e^-inf = 0, no NaN */
            corr[r] = exp2f(m[r] - mref[r]);
            m[r] = mnew;
        }
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2f(s[n][e] - mref[e >> 1]);
                s[n][e] = p;
                sum[e >> 1] += p;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + sum[r]; /* the lane's share of the row sum */
#pragma unroll
        for (int d = 0; d < DT; d++) {
            o[d][0] *= corr[0];
            o[d][1] *= corr[0];
            o[d][2] *= corr[1];
            o[d][3] *= corr[1];
        }
#pragma unroll
        for (int kc = 0; kc < BN / 16; kc++) {
            uint32_t pf[4];
            bf_acc_to_a(pf, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
            for (int d = 0; d < DT; d++) {
                uint32_t b0, b1;
                bf_frag_b(b0, b1, Vt, LDT, 8 * d, 16 * kc, g, t);
                bf_mma(o[d], pf, b0, b1);
            }
        }
    }
    OT *ob = static_cast<OT *>(a.out) + (size_t)b * a.Ts * C + (size_t)h * a.hs;
    float *lb = a.lse + (size_t)bh * a.Ts;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        int row = r ? rb : ra;
        if (row >= a.Tq) continue;
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f; /* 0: the row sees no key */
#pragma unroll
        for (int d = 0; d < DT; d++) {
            int c = 8 * d + 2 * t;
            if (c < a.hs) act_store(ob, (size_t)row * C + c, o[d][2 * r] * inv);
            if (c + 1 < a.hs) act_store(ob, (size_t)row * C + c + 1, o[d][2 * r + 1] * inv);
        }
        if (t == 0) lb[row] = l[r] > 0.0f ? m[r] * ABK_LN2 + logf(l[r]) : -INFINITY;
    }
}

template <typename T, typename OT> static void bf16_forward(const abk_args &a, int B, int HS) {
    dim3 grid((unsigned)((a.Tq + BF_TILE - 1) / BF_TILE), (unsigned)(B * a.NH));
    if (HS == 32) {
        abk_bf16_forward_kernel<32, T, OT><<<grid, BF_THREADS, bf_fwd<32>::smem, dtc.stream>>>(a);
    } else if (HS == 64) {
        abk_bf16_forward_kernel<64, T, OT><<<grid, BF_THREADS, bf_fwd<64>::smem, dtc.stream>>>(a);
    } else {
        static int limit_set;
        abk_smem_limit(abk_bf16_forward_kernel<128, T, OT>, bf_fwd<128>::smem, &limit_set);
        abk_bf16_forward_kernel<128, T, OT><<<grid, BF_THREADS, bf_fwd<128>::smem, dtc.stream>>>(a);
    }
    DTC_LAUNCHED();
}

void abk_bf16_forward(const abk_args &a, int B, int HS, dt_dtype t, dt_dtype out_t) {
    ABK_LAUNCH2(t, T, out_t, OT, bf16_forward<T, OT>(a, B, HS));
}

/* ---------------------------------------------------------------- backward: dK, dV */

/* A block per (64 keys, sample x head); warp w owns keys 16w..16w+15 and
 * walks the query tiles that see them: S^T = K Q^T, dP^T = V dO^T (keys as
 * rows), then dV += P^T dO and dK += dS^T Q from those registers. */
template <int HS> struct bf_dkv {
    static constexpr int BN = HS >= 128 ? 32 : 64; /* query rows a step */
    static constexpr int LDW = (HS + 8) / 2, LDT = (BN + 8) / 2;
    static constexpr size_t smem =
        ((size_t)(2 * BF_TILE + 2 * BN) * LDW + (size_t)2 * HS * LDT + (size_t)2 * BN) * sizeof(uint32_t);
};

template <int HS, typename T> __global__ void __launch_bounds__(BF_THREADS) abk_bf16_dkv_kernel(abk_args a) {
    constexpr int BM = BF_TILE, BN = bf_dkv<HS>::BN, LDW = bf_dkv<HS>::LDW, LDT = bf_dkv<HS>::LDT;
    constexpr int KC = HS / 16, NT = BN / 8, DT = HS / 8;
    extern __shared__ __align__(16) uint32_t abk_bf_smem[];
    uint32_t *Ks = abk_bf_smem;   /* [BM][LDW] */
    uint32_t *Vs = Ks + BM * LDW; /* [BM][LDW] */
    uint32_t *Qs = Vs + BM * LDW; /* [BN][LDW] */
    uint32_t *Gs = Qs + BN * LDW; /* [BN][LDW]  dO */
    uint32_t *Qt = Gs + BN * LDW; /* [HS][LDT]  Q transposed */
    uint32_t *Gt = Qt + HS * LDT; /* [HS][LDT]  dO transposed */
    float *Ls = reinterpret_cast<float *>(Gt + HS * LDT); /* [BN] lse * log2(e) */
    float *Dl = Ls + BN;                                   /* [BN] D */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int k0 = blockIdx.x * BM, bg = blockIdx.y, b = bg / a.NKV, kvh = bg % a.NKV; /* kv head kvh */
    int kn = min(BM, a.Tk - k0);
    /* the query rows [first, q_end) hold every query that sees a key of the tile */
    int first = abk_queries(b, k0, a).x, q_end = abk_queries(b, k0 + kn - 1, a).y;
    if (first >= q_end) return; /* no query sees these keys */
    int q_begin = first / BN * BN;
    size_t C = (size_t)a.C, ldkv = (size_t)a.ldkv;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)kvh * a.hs, *vb = kb + a.Ckv;
    int key_a = k0 + 16 * warp + g, key_b = key_a + 8; /* this lane's two keys */
    /* document masking: their segments */
    int ks_a = a.qseg ? abk_kseg(b, key_a, a) : 0, ks_b = a.qseg ? abk_kseg(b, key_b, a) : 0;
    bf_load_rows<HS, BM>(Ks, LDW, kb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
    bf_load_rows<HS, BM>(Vs, LDW, vb + (size_t)k0 * ldkv, ldkv, kn, a.hs);

    float dk[DT][4], dv[DT][4];
#pragma unroll
    for (int d = 0; d < DT; d++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[d][e] = dv[d][e] = 0.0f;
    for (int h = kvh * a.G; h < (kvh + 1) * a.G; h++) /* the group's query heads, in order */
    for (int q0 = q_begin; q0 < q_end; q0 += BN) {
        size_t bh = (size_t)b * a.NH + h;
        const T *qb = static_cast<const T *>(a.q) + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
        const float *gb = a.dout + (size_t)b * a.Ts * C + (size_t)h * a.hs;
        const float *lb = a.lse + bh * a.Ts, *db = a.D + bh * a.Tq;
        __syncthreads(); /* the last step's Q and dO are used up */
        int qn = min(BN, a.Tq - q0);
        bf_load_rows<HS, BN>(Qs, LDW, qb + (size_t)q0 * a.ldq, a.ldq, qn, a.hs);
        bf_load_rows<HS, BN>(Gs, LDW, gb + (size_t)q0 * C, C, qn, a.hs);
        bf_load_cols<HS, BN>(Qt, LDT, qb + (size_t)q0 * a.ldq, a.ldq, qn, a.hs);
        bf_load_cols<HS, BN>(Gt, LDT, gb + (size_t)q0 * C, C, qn, a.hs);
        for (int x = threadIdx.x; x < BN; x += BF_THREADS) {
            Ls[x] = x < qn ? lb[q0 + x] * ABK_LOG2E : -INFINITY;
            Dl[x] = x < qn ? db[q0 + x] : 0.0f;
        }
        __syncthreads();
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            uint32_t kf[4], vf[4];
            bf_frag_a(kf, Ks, LDW, 16 * warp, 16 * kc, g, t);
            bf_frag_a(vf, Vs, LDW, 16 * warp, 16 * kc, g, t);
#pragma unroll
            for (int n = 0; n < NT; n++) {
                uint32_t b0, b1;
                bf_frag_b(b0, b1, Qs, LDW, 8 * n, 16 * kc, g, t);
                bf_mma(s[n], kf, b0, b1);
                bf_frag_b(b0, b1, Gs, LDW, 8 * n, 16 * kc, g, t);
                bf_mma(dp[n], vf, b0, b1);
            }
        }
        /* every query row sees every key (with segments: the element test) */
        bool full = !a.qseg && k0 + BM <= abk_seen(q0, a);
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int ql = 8 * n + 2 * t + (e & 1), key = e < 2 ? key_a : key_b;
                float l2 = Ls[ql];
                bool same = !a.qseg || abk_qseg(b, q0 + ql, a) == (e < 2 ? ks_a : ks_b);
                bool vis = (full || (key < abk_seen(q0 + ql, a) && same)) && l2 != -INFINITY;
                float p = vis ? exp2f(s[n][e] * a.scale_log2 - l2) : 0.0f;
                s[n][e] = p;                     /* P^T */
                dp[n][e] = p * (dp[n][e] - Dl[ql]); /* dS^T */
            }
#pragma unroll
        for (int qc = 0; qc < BN / 16; qc++) {
            uint32_t pf[4], sf[4];
            bf_acc_to_a(pf, s[2 * qc], s[2 * qc + 1]);
            bf_acc_to_a(sf, dp[2 * qc], dp[2 * qc + 1]);
#pragma unroll
            for (int d = 0; d < DT; d++) {
                uint32_t b0, b1;
                bf_frag_b(b0, b1, Gt, LDT, 8 * d, 16 * qc, g, t);
                bf_mma(dv[d], pf, b0, b1);
                bf_frag_b(b0, b1, Qt, LDT, 8 * d, 16 * qc, g, t);
                bf_mma(dk[d], sf, b0, b1);
            }
        }
    }
    float *dkb = a.dkv + (size_t)b * a.Ts * ldkv + (size_t)kvh * a.hs, *dvb = dkb + a.Ckv;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int key = r ? key_b : key_a;
        if (key >= a.Tk) continue;
#pragma unroll
        for (int d = 0; d < DT; d++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = 8 * d + 2 * t + e;
                if (c >= a.hs) continue;
                dkb[(size_t)key * ldkv + c] += a.scale * dk[d][2 * r + e];
                dvb[(size_t)key * ldkv + c] += dv[d][2 * r + e];
            }
    }
}

/* ---------------------------------------------------------------- backward: dQ */

template <int HS> struct bf_dq {
    static constexpr int LDW = (HS + 8) / 2, LDT = (BF_TILE + 8) / 2;
    static constexpr size_t smem = ((size_t)4 * BF_TILE * LDW + (size_t)HS * LDT) * sizeof(uint32_t);
};

template <int HS, typename T> __global__ void __launch_bounds__(BF_THREADS) abk_bf16_dq_kernel(abk_args a) {
    constexpr int BM = BF_TILE, BN = BF_TILE, LDW = bf_dq<HS>::LDW, LDT = bf_dq<HS>::LDT;
    constexpr int KC = HS / 16, NT = BN / 8, DT = HS / 8;
    extern __shared__ __align__(16) uint32_t abk_bf_smem[];
    uint32_t *Qs = abk_bf_smem;   /* [BM][LDW] */
    uint32_t *Gs = Qs + BM * LDW; /* [BM][LDW]  dO */
    uint32_t *Ks = Gs + BM * LDW; /* [BN][LDW] */
    uint32_t *Vs = Ks + BN * LDW; /* [BN][LDW] */
    uint32_t *Kt = Vs + BN * LDW; /* [HS][LDT]  K transposed */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int r0 = (gridDim.x - 1 - blockIdx.x) * BM, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    int rows = min(BM, a.Tq - r0);
    int2 kr0 = abk_keys(b, r0, a), kr1 = abk_keys(b, r0 + rows - 1, a);
    int nk = kr1.y, seen0 = kr0.y, lo_last = kr1.x;
    if (nk <= 0 || nk <= kr0.x) return; /* no row of the tile sees a key: dq += 0 */
    size_t C = (size_t)a.C, ldkv = (size_t)a.ldkv;
    const T *qb = static_cast<const T *>(a.q) + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)(h / a.G) * a.hs, *vb = kb + a.Ckv;
    const float *gb = a.dout + (size_t)b * a.Ts * C + (size_t)h * a.hs;
    int ra = r0 + 16 * warp + g, rb = ra + 8;
    int2 sr[2] = {abk_keys(b, ra, a), abk_keys(b, rb, a)};
    float l2[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = r ? rb : ra;
        l2[r] = row < a.Tq ? a.lse[(size_t)bh * a.Ts + row] * ABK_LOG2E : -INFINITY;
        Dr[r] = row < a.Tq ? a.D[(size_t)bh * a.Tq + row] : 0.0f;
    }
    bf_load_rows<HS, BM>(Qs, LDW, qb + (size_t)r0 * a.ldq, a.ldq, rows, a.hs);
    bf_load_rows<HS, BM>(Gs, LDW, gb + (size_t)r0 * C, C, rows, a.hs);

    float dq[DT][4];
#pragma unroll
    for (int d = 0; d < DT; d++) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;
    for (int k0 = kr0.x / BN * BN; k0 < nk; k0 += BN) {
        __syncthreads(); /* the last tile's K, V are used up */
        int kn = min(BN, nk - k0);
        bf_load_rows<HS, BN>(Ks, LDW, kb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
        bf_load_rows<HS, BN>(Vs, LDW, vb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
        bf_load_cols<HS, BN>(Kt, LDT, kb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
        __syncthreads();
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            uint32_t qf[4], gf[4];
            bf_frag_a(qf, Qs, LDW, 16 * warp, 16 * kc, g, t);
            bf_frag_a(gf, Gs, LDW, 16 * warp, 16 * kc, g, t);
#pragma unroll
            for (int n = 0; n < NT; n++) {
                uint32_t b0, b1;
                bf_frag_b(b0, b1, Ks, LDW, 8 * n, 16 * kc, g, t);
                bf_mma(s[n], qf, b0, b1);
                bf_frag_b(b0, b1, Vs, LDW, 8 * n, 16 * kc, g, t);
                bf_mma(dp[n], gf, b0, b1);
            }
        }
        bool full = k0 >= lo_last && k0 + BN <= seen0;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = e >> 1, key = k0 + 8 * n + 2 * t + (e & 1);
                bool vis = (full || (key < sr[r].y && key >= sr[r].x)) && l2[r] != -INFINITY;
                float p = vis ? exp2f(s[n][e] * a.scale_log2 - l2[r]) : 0.0f;
                s[n][e] = p * (dp[n][e] - Dr[r]); /* dS */
            }
#pragma unroll
        for (int kc = 0; kc < BN / 16; kc++) {
            uint32_t sf[4];
            bf_acc_to_a(sf, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
            for (int d = 0; d < DT; d++) {
                uint32_t b0, b1;
                bf_frag_b(b0, b1, Kt, LDT, 8 * d, 16 * kc, g, t);
                bf_mma(dq[d], sf, b0, b1);
            }
        }
    }
    float *dqb = a.dq + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = r ? rb : ra;
        if (row >= a.Tq) continue;
#pragma unroll
        for (int d = 0; d < DT; d++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = 8 * d + 2 * t + e;
                if (c < a.hs) dqb[(size_t)row * a.ldq + c] += a.scale * dq[d][2 * r + e];
            }
    }
}

template <int HS, typename T> static void bf16_backward(const abk_args &a, int B) {
    static int dkv_set, dq_set;
    abk_smem_limit(abk_bf16_dkv_kernel<HS, T>, bf_dkv<HS>::smem, &dkv_set);
    abk_smem_limit(abk_bf16_dq_kernel<HS, T>, bf_dq<HS>::smem, &dq_set);
    dim3 g1((unsigned)((a.Tk + BF_TILE - 1) / BF_TILE), (unsigned)(B * a.NKV)); /* by kv head */
    abk_bf16_dkv_kernel<HS, T><<<g1, BF_THREADS, bf_dkv<HS>::smem, dtc.stream>>>(a);
    DTC_LAUNCHED();
    dim3 g2((unsigned)((a.Tq + BF_TILE - 1) / BF_TILE), (unsigned)(B * a.NH));
    abk_bf16_dq_kernel<HS, T><<<g2, BF_THREADS, bf_dq<HS>::smem, dtc.stream>>>(a);
    DTC_LAUNCHED();
}

void abk_bf16_backward(const abk_args &a, int B, int HS, dt_dtype t) {
    ACT_LAUNCH(t, T, {
        if (HS == 32) bf16_backward<32, T>(a, B);
        else if (HS == 64) bf16_backward<64, T>(a, B);
        else bf16_backward<128, T>(a, B);
    });
}
