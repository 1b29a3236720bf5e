/* attention_block_fp32.cu — blockwise attention as flash-attention-2 tiles on
 * CUDA cores, fp32 throughout (the twin of kernels/cpu/attention_block.c
 * within fp32 rounding: the same products, summed in another order).
 *
 * Forward: a thread block per (tile of BM query rows, sample x head). Its Q
 * tile stays in shared memory; K and V tiles of BN keys pass through it; the
 * scores S = Q K^T of a tile live in registers, where the online softmax keeps
 * each row's running max m and sum l and rescales the output accumulators
 * (registers too) by e^(m_old - m_new). Tiles wholly past the causal diagonal
 * are never loaded; only tiles the diagonal (or the block's end) crosses are
 * masked element by element. The [Tq, Tk] matrix never exists.
 * Backward (deterministic, FA2's split without its atomics): a thread block
 * per key tile adds dK and dV over every query tile that sees it; a second
 * kernel, a block per query tile, adds dQ over the key tiles. Both recompute
 * P = e^(S - lse) from the final lse, with D = rowsum(dO * O) computed once
 * beforehand (attention_block.cu). Every output element is one thread's own
 * sum, in a fixed order: the result repeats bit for bit.
 *
 * The products are register-tiled: 128 threads as 16 x 8; thread (ty, tx)
 * holds rows ty + 16 i of a tile's result and 4 or 8 columns, and each step
 * reads float4's from shared memory, 32 multiply-adds for 3 loads (for a
 * 64 x 64 tile), so that the FMA units rather than shared memory should bound
 * the loop (by that count; not yet measured). Every
 * operand is used in its natural row-major layout (no transposes):
 *   mt_nk: C[m][n] += sum_k A[m][k] B[n][k]   (S = Q K^T, dP = dO V^T)
 *   mt_kn: C[m][n] += sum_k A[m][k] B[k][n]   (O = P V, dV = P^T dO, ...)
 * Shared rows are padded to HS + 4 floats (a row stride of 4 mod 32 words):
 * the 4 rows a warp reads at once then fall in disjoint bank groups.
 *
 * Operands stored as bf16 (T = uint16_t) are widened as a tile is loaded
 * into shared memory (exact), so the tiles, the products and every sum are
 * the fp32 path's; a bf16 out (OT) is rounded once, as it is stored.
 *
 * Tile sizes and the shared-memory budget (H100: 227 KiB a block, 228 a
 * SM): BM = BN = 64 for HS <= 64: forward 70 KiB, backward 105 (dK dV) and 87
 * (dQ) KiB, two or three blocks a SM; HS = 128 halves the key (or query)
 * tile, which keeps two blocks a SM and the accumulators in registers
 * (forward 77 KiB, dK dV 77, dQ 111). */
#include <cstdint>

#include "kernels/cuda/attention_block.cuh"

#define F32_THREADS 128

__device__ __forceinline__ float f4_at(const float4 &v, int c) { return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w; }

/* acc[i][j] += sum_k A[ty + 16 i][k] * B[tx + 8 j][k]  (K a multiple of 4) */
template <int TM, int TN, int K>
__device__ __forceinline__ void mt_nk(float (&acc)[TM][TN], const float *A, int lda, const float *B, int ldb, int ty,
                                      int tx) {
#pragma unroll 4
    for (int k = 0; k < K; k += 4) {
        float4 av[TM];
#pragma unroll
        for (int i = 0; i < TM; i++) av[i] = *reinterpret_cast<const float4 *>(A + (ty + 16 * i) * lda + k);
#pragma unroll
        for (int j = 0; j < TN; j++) {
            float4 bv = *reinterpret_cast<const float4 *>(B + (tx + 8 * j) * ldb + k);
#pragma unroll
            for (int i = 0; i < TM; i++) {
                float s = acc[i][j];
                s = fmaf(av[i].x, bv.x, s);
                s = fmaf(av[i].y, bv.y, s);
                s = fmaf(av[i].z, bv.z, s);
                s = fmaf(av[i].w, bv.w, s);
                acc[i][j] = s;
            }
        }
    }
}

/* acc[i][j] += sum_k A[ty + 16 i][k] * B[k][col(j)], col(j) = 32 (j / 4) +
 * 4 tx + j % 4 (TN a multiple of 4: each float4 of B is 8 threads' 128
 * contiguous bytes) */
__device__ __forceinline__ int kn_col(int j, int tx) { return (j >> 2) * 32 + tx * 4 + (j & 3); }

template <int TM, int TN, int K>
__device__ __forceinline__ void mt_kn(float (&acc)[TM][TN], const float *A, int lda, const float *B, int ldb, int ty,
                                      int tx) {
#pragma unroll 2
    for (int k = 0; k < K; k += 4) {
        float4 av[TM];
#pragma unroll
        for (int i = 0; i < TM; i++) av[i] = *reinterpret_cast<const float4 *>(A + (ty + 16 * i) * lda + k);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
#pragma unroll
            for (int jg = 0; jg < TN / 4; jg++) {
                float4 bv = *reinterpret_cast<const float4 *>(B + (k + kk) * ldb + jg * 32 + tx * 4);
#pragma unroll
                for (int i = 0; i < TM; i++) {
                    float x = f4_at(av[i], kk);
                    acc[i][jg * 4 + 0] = fmaf(x, bv.x, acc[i][jg * 4 + 0]);
                    acc[i][jg * 4 + 1] = fmaf(x, bv.y, acc[i][jg * 4 + 1]);
                    acc[i][jg * 4 + 2] = fmaf(x, bv.z, acc[i][jg * 4 + 2]);
                    acc[i][jg * 4 + 3] = fmaf(x, bv.w, acc[i][jg * 4 + 3]);
                }
            }
        }
    }
}

/* Four consecutive elements, widened: one 16-byte (fp32) or 8-byte (bf16)
 * load from an address aligned to that size. */
__device__ __forceinline__ float4 load4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 load4(const uint16_t *p) {
    uint2 u = *reinterpret_cast<const uint2 *>(p); /* element 0 in the low half of .x (little-endian) */
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}

/* dst[r][c] = src[r * lds + c] (widened to fp32) for r < nrows, c < hs; 0
 * elsewhere in the R x HS tile (padding columns and missing rows read as
 * zero, so they add nothing and never turn into NaN). Four elements a load
 * when the rows allow. */
template <int HS, int R, typename T>
__device__ __forceinline__ void load_tile(float *dst, int ld, const T *src, size_t lds, int nrows, int hs) {
    bool vec = ((reinterpret_cast<uintptr_t>(src) % (4 * sizeof(T))) == 0) && (lds % 4 == 0) && (hs % 4 == 0);
    if (vec) {
        for (int x = threadIdx.x; x < R * HS / 4; x += F32_THREADS) {
            int r = x / (HS / 4), c = (x % (HS / 4)) * 4;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r < nrows && c < hs) v = load4(src + (size_t)r * lds + c);
            *reinterpret_cast<float4 *>(dst + r * ld + c) = v;
        }
    } else {
        for (int x = threadIdx.x; x < R * HS; x += F32_THREADS) {
            int r = x / HS, c = x % HS;
            dst[r * ld + c] = (r < nrows && c < hs) ? act_load(src, (size_t)r * lds + c) : 0.0f;
        }
    }
}

/* ---------------------------------------------------------------- forward */

template <int HS, int BM, int BN> struct f32_fwd {
    static constexpr int LDH = HS + 4, LDP = BN + 4;
    static constexpr size_t smem = ((size_t)(BM + 2 * BN) * LDH + (size_t)BM * LDP) * sizeof(float);
};

template <int HS, int BM, int BN, typename T, typename OT>
__global__ void __launch_bounds__(F32_THREADS) abk_f32_forward_kernel(abk_args a) {
    constexpr int LDH = HS + 4, LDP = BN + 4, TM = BM / 16, TS = BN / 8, TO = HS / 8;
    extern __shared__ float4 abk_f32_smem[];
    float *Qs = reinterpret_cast<float *>(abk_f32_smem); /* [BM][LDH] */
    float *Ks = Qs + BM * LDH;                            /* [BN][LDH] */
    float *Vs = Ks + BN * LDH;                            /* [BN][LDH] */
    float *Ps = Vs + BN * LDH;                            /* [BM][LDP] */
    int ty = threadIdx.x >> 3, tx = threadIdx.x & 7;
    /* causal: the last query tiles see the most keys; start them first */
    int r0 = (gridDim.x - 1 - blockIdx.x) * BM, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    int rows = min(BM, a.Tq - r0);
    size_t C = (size_t)a.C, ldkv = (size_t)a.ldkv;
    const T *qb = static_cast<const T *>(a.q) + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)(h / a.G) * a.hs, *vb = kb + a.Ckv;
    /* keys [kr0.x, kr1.y) hold every run of the tile's rows (abk_keys) */
    int2 kr0 = abk_keys(b, r0, a), kr1 = abk_keys(b, r0 + rows - 1, a);
    int nk = kr1.y, seen0 = kr0.y, lo_last = kr1.x;
    load_tile<HS, BM>(Qs, LDH, qb + (size_t)r0 * a.ldq, a.ldq, rows, a.hs);

    float o[TM][TO], m[TM], l[TM];
    int2 seen[TM];
#pragma unroll
    for (int i = 0; i < TM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        seen[i] = abk_keys(b, r0 + ty + 16 * i, a);
#pragma unroll
        for (int j = 0; j < TO; j++) o[i][j] = 0.0f;
    }
    for (int k0 = kr0.x / BN * BN; k0 < nk; k0 += BN) {
        __syncthreads(); /* the last tile's K, V and P are used up (first pass: nothing) */
        int kn = min(BN, nk - k0);
        load_tile<HS, BN>(Ks, LDH, kb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
        load_tile<HS, BN>(Vs, LDH, vb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
        __syncthreads();
        float s[TM][TS];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TS; j++) s[i][j] = 0.0f;
        mt_nk<TM, TS, HS>(s, Qs, LDH, Ks, LDH, ty, tx);
        bool full = k0 >= lo_last && k0 + BN <= seen0; /* every row sees every key of the tile */
#pragma unroll
        for (int i = 0; i < TM; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < TS; j++) {
                float v = s[i][j] * a.scale_log2;
                int key = k0 + tx + 8 * j;
                if (!full && (key >= seen[i].y || key < seen[i].x)) v = -INFINITY;
                s[i][j] = v;
                mx = fmaxf(mx, v);
            }
            /* the row's 8 threads are lanes differing in their low 3 bits */
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            float mnew = fmaxf(m[i], mx);
            float mref = mnew == -INFINITY ? 0.0f : mnew; /* a row with no key yet: e^(-inf - 0) = 0, no NaN */
            float corr = exp2f(m[i] - mref);
            m[i] = mnew;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < TS; j++) {
                float p = exp2f(s[i][j] - mref);
                sum += p;
                Ps[(ty + 16 * i) * LDP + tx + 8 * j] = p;
            }
            l[i] = l[i] * corr + sum; /* this thread's share of the row sum */
#pragma unroll
            for (int j = 0; j < TO; j++) o[i][j] *= corr;
        }
        __syncthreads();
        mt_kn<TM, TO, BN>(o, Ps, LDP, Vs, LDH, ty, tx);
    }
    OT *ob = static_cast<OT *>(a.out) + (size_t)b * a.Ts * C + (size_t)h * a.hs;
    float *lb = a.lse + (size_t)bh * a.Ts;
#pragma unroll
    for (int i = 0; i < TM; i++) {
        float li = l[i];
        li += __shfl_xor_sync(0xffffffffu, li, 1);
        li += __shfl_xor_sync(0xffffffffu, li, 2);
        li += __shfl_xor_sync(0xffffffffu, li, 4);
        int r = r0 + ty + 16 * i;
        if (r >= a.Tq) continue;
        /* l >= 1 once a row saw a key (its max contributes e^0); 0: none */
        float inv = li > 0.0f ? 1.0f / li : 0.0f;
#pragma unroll
        for (int j = 0; j < TO; j++) {
            int c = kn_col(j, tx);
            if (c < a.hs) act_store(ob, (size_t)r * C + c, o[i][j] * inv);
        }
        if (tx == 0) lb[r] = li > 0.0f ? m[i] * ABK_LN2 + logf(li) : -INFINITY;
    }
}

template <int HS, int BM, int BN, typename T, typename OT> static void f32_forward(const abk_args &a, int B) {
    static int limit_set;
    size_t smem = f32_fwd<HS, BM, BN>::smem;
    abk_smem_limit(abk_f32_forward_kernel<HS, BM, BN, T, OT>, smem, &limit_set);
    dim3 grid((unsigned)((a.Tq + BM - 1) / BM), (unsigned)(B * a.NH));
    abk_f32_forward_kernel<HS, BM, BN, T, OT><<<grid, F32_THREADS, smem, dtc.stream>>>(a);
    DTC_LAUNCHED();
}

void abk_f32_forward(const abk_args &a, int B, int HS, dt_dtype t, dt_dtype out_t) {
    ABK_LAUNCH2(t, T, out_t, OT, {
        if (HS == 32) f32_forward<32, 64, 64, T, OT>(a, B);
        else if (HS == 64) f32_forward<64, 64, 64, T, OT>(a, B);
        else f32_forward<128, 64, 32, T, OT>(a, B);
    });
}

/* ---------------------------------------------------------------- backward: dK, dV */

/* A block per (tile of BM keys, sample x head), over query tiles of BN rows:
 * S^T = K Q^T and dP^T = V dO^T with the keys as rows, so P^T and dS^T come
 * out as the left operands of dV += P^T dO and dK += dS^T Q. */
template <int HS, int BM, int BN> struct f32_dkv {
    static constexpr int LDH = HS + 4, LDP = BN + 4;
    static constexpr size_t smem =
        ((size_t)(2 * BM + 2 * BN) * LDH + 2 * (size_t)BM * LDP + 2 * (size_t)BN) * sizeof(float);
};

template <int HS, int BM, int BN, typename T>
__global__ void __launch_bounds__(F32_THREADS) abk_f32_dkv_kernel(abk_args a) {
    constexpr int LDH = HS + 4, LDP = BN + 4, TM = BM / 16, TS = BN / 8, TO = HS / 8;
    extern __shared__ float4 abk_f32_smem[];
    float *Ks = reinterpret_cast<float *>(abk_f32_smem); /* [BM][LDH] */
    float *Vs = Ks + BM * LDH;                            /* [BM][LDH] */
    float *Qs = Vs + BM * LDH;                            /* [BN][LDH] */
    float *Gs = Qs + BN * LDH;                            /* [BN][LDH]  dO */
    float *Ps = Gs + BN * LDH;                            /* [BM][LDP]  P^T */
    float *Ss = Ps + BM * LDP;                            /* [BM][LDP]  dS^T */
    float *Ls = Ss + BM * LDP;                            /* [BN]  lse * log2(e) */
    float *Dl = Ls + BN;                                  /* [BN]  D */
    int ty = threadIdx.x >> 3, tx = threadIdx.x & 7;
    int k0 = blockIdx.x * BM, bg = blockIdx.y, b = bg / a.NKV, g = bg % a.NKV; /* kv head g */
    int kn = min(BM, a.Tk - k0);
    /* the query rows [first, q_end) hold every query that sees a key of the tile */
    int first = abk_queries(b, k0, a).x, q_end = abk_queries(b, k0 + kn - 1, a).y;
    if (first >= q_end) return; /* no query of this block sees these keys */
    int q_begin = first / BN * BN;
    size_t C = (size_t)a.C, ldkv = (size_t)a.ldkv;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)g * a.hs, *vb = kb + a.Ckv;
    load_tile<HS, BM>(Ks, LDH, kb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
    load_tile<HS, BM>(Vs, LDH, vb + (size_t)k0 * ldkv, ldkv, kn, a.hs);

    float dk[TM][TO], dv[TM][TO];
    int kseg[TM]; /* document masking: the segments of this thread's keys */
#pragma unroll
    for (int i = 0; i < TM; i++) {
        kseg[i] = a.qseg ? abk_kseg(b, k0 + ty + 16 * i, a) : 0;
#pragma unroll
        for (int j = 0; j < TO; j++) dk[i][j] = dv[i][j] = 0.0f;
    }
    for (int h = g * a.G; h < (g + 1) * a.G; h++) /* the group's query heads, in order */
    for (int q0 = q_begin; q0 < q_end; q0 += BN) {
        size_t bh = (size_t)b * a.NH + h;
        const T *qb = static_cast<const T *>(a.q) + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
        const float *gb = a.dout + (size_t)b * a.Ts * C + (size_t)h * a.hs;
        const float *lb = a.lse + bh * a.Ts, *db = a.D + bh * a.Tq;
        __syncthreads(); /* the last tile's Q, dO, P^T and dS^T are used up */
        int qn = min(BN, a.Tq - q0);
        load_tile<HS, BN>(Qs, LDH, qb + (size_t)q0 * a.ldq, a.ldq, qn, a.hs);
        load_tile<HS, BN>(Gs, LDH, gb + (size_t)q0 * C, C, qn, a.hs);
        for (int x = threadIdx.x; x < BN; x += F32_THREADS) {
            Ls[x] = x < qn ? lb[q0 + x] * ABK_LOG2E : -INFINITY;
            Dl[x] = x < qn ? db[q0 + x] : 0.0f;
        }
        __syncthreads();
        float p[TM][TS], dp[TM][TS];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TS; j++) p[i][j] = dp[i][j] = 0.0f;
        mt_nk<TM, TS, HS>(p, Ks, LDH, Qs, LDH, ty, tx);
        mt_nk<TM, TS, HS>(dp, Vs, LDH, Gs, LDH, ty, tx);
        /* every query row sees every key (with segments: the element test) */
        bool full = !a.qseg && k0 + BM <= abk_seen(q0, a);
        int qseg[TS];
#pragma unroll
        for (int j = 0; j < TS; j++) qseg[j] = a.qseg ? abk_qseg(b, q0 + tx + 8 * j, a) : 0;
#pragma unroll
        for (int i = 0; i < TM; i++) {
            int key = k0 + ty + 16 * i;
#pragma unroll
            for (int j = 0; j < TS; j++) {
                int ql = tx + 8 * j;
                float l2 = Ls[ql];
                /* a row past Tq (or one that saw no key at all) has lse -inf */
                bool vis = (full || (key < abk_seen(q0 + ql, a) && qseg[j] == kseg[i])) && l2 != -INFINITY;
                float pv = vis ? exp2f(p[i][j] * a.scale_log2 - l2) : 0.0f;
                Ps[(ty + 16 * i) * LDP + ql] = pv;
                Ss[(ty + 16 * i) * LDP + ql] = pv * (dp[i][j] - Dl[ql]);
            }
        }
        __syncthreads();
        mt_kn<TM, TO, BN>(dv, Ps, LDP, Gs, LDH, ty, tx);
        mt_kn<TM, TO, BN>(dk, Ss, LDP, Qs, LDH, ty, tx);
    }
    float *dkb = a.dkv + (size_t)b * a.Ts * ldkv + (size_t)g * a.hs, *dvb = dkb + a.Ckv;
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int key = k0 + ty + 16 * i;
        if (key >= a.Tk) continue;
#pragma unroll
        for (int j = 0; j < TO; j++) {
            int c = kn_col(j, tx);
            if (c >= a.hs) continue;
            dkb[(size_t)key * ldkv + c] += a.scale * dk[i][j];
            dvb[(size_t)key * ldkv + c] += dv[i][j];
        }
    }
}

/* ---------------------------------------------------------------- backward: dQ */

template <int HS, int BM, int BN> struct f32_dq {
    static constexpr int LDH = HS + 4, LDP = BN + 4;
    static constexpr size_t smem = ((size_t)(2 * BM + 2 * BN) * LDH + (size_t)BM * LDP) * sizeof(float);
};

template <int HS, int BM, int BN, typename T>
__global__ void __launch_bounds__(F32_THREADS) abk_f32_dq_kernel(abk_args a) {
    constexpr int LDH = HS + 4, LDP = BN + 4, TM = BM / 16, TS = BN / 8, TO = HS / 8;
    extern __shared__ float4 abk_f32_smem[];
    float *Qs = reinterpret_cast<float *>(abk_f32_smem); /* [BM][LDH] */
    float *Gs = Qs + BM * LDH;                            /* [BM][LDH]  dO */
    float *Ks = Gs + BM * LDH;                            /* [BN][LDH] */
    float *Vs = Ks + BN * LDH;                            /* [BN][LDH] */
    float *Ss = Vs + BN * LDH;                            /* [BM][LDP]  dS */
    int ty = threadIdx.x >> 3, tx = threadIdx.x & 7;
    int r0 = (gridDim.x - 1 - blockIdx.x) * BM, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    int rows = min(BM, a.Tq - r0);
    int2 kr0 = abk_keys(b, r0, a), kr1 = abk_keys(b, r0 + rows - 1, a);
    int nk = kr1.y, seen0 = kr0.y, lo_last = kr1.x;
    if (nk <= 0 || nk <= kr0.x) return; /* no row of the tile sees a key: dq += 0 */
    size_t C = (size_t)a.C, ldkv = (size_t)a.ldkv;
    const T *qb = static_cast<const T *>(a.q) + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)(h / a.G) * a.hs, *vb = kb + a.Ckv;
    const float *gb = a.dout + (size_t)b * a.Ts * C + (size_t)h * a.hs;
    load_tile<HS, BM>(Qs, LDH, qb + (size_t)r0 * a.ldq, a.ldq, rows, a.hs);
    load_tile<HS, BM>(Gs, LDH, gb + (size_t)r0 * C, C, rows, a.hs);
    float l2[TM], Dr[TM], dq[TM][TO];
    int2 seen[TM];
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int r = r0 + ty + 16 * i;
        l2[i] = r < a.Tq ? a.lse[(size_t)bh * a.Ts + r] * ABK_LOG2E : -INFINITY;
        Dr[i] = r < a.Tq ? a.D[(size_t)bh * a.Tq + r] : 0.0f;
        seen[i] = abk_keys(b, r, a);
#pragma unroll
        for (int j = 0; j < TO; j++) dq[i][j] = 0.0f;
    }
    for (int k0 = kr0.x / BN * BN; k0 < nk; k0 += BN) {
        __syncthreads(); /* the last tile's K and dS are used up */
        int kn = min(BN, nk - k0);
        load_tile<HS, BN>(Ks, LDH, kb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
        load_tile<HS, BN>(Vs, LDH, vb + (size_t)k0 * ldkv, ldkv, kn, a.hs);
        __syncthreads();
        float s[TM][TS], dp[TM][TS];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TS; j++) s[i][j] = dp[i][j] = 0.0f;
        mt_nk<TM, TS, HS>(s, Qs, LDH, Ks, LDH, ty, tx);
        mt_nk<TM, TS, HS>(dp, Gs, LDH, Vs, LDH, ty, tx);
        bool full = k0 >= lo_last && k0 + BN <= seen0;
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TS; j++) {
                int key = k0 + tx + 8 * j;
                bool vis = (full || (key < seen[i].y && key >= seen[i].x)) && l2[i] != -INFINITY;
                float pv = vis ? exp2f(s[i][j] * a.scale_log2 - l2[i]) : 0.0f;
                Ss[(ty + 16 * i) * LDP + tx + 8 * j] = pv * (dp[i][j] - Dr[i]);
            }
        __syncthreads();
        mt_kn<TM, TO, BN>(dq, Ss, LDP, Ks, LDH, ty, tx);
    }
    float *dqb = a.dq + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int r = r0 + ty + 16 * i;
        if (r >= a.Tq) continue;
#pragma unroll
        for (int j = 0; j < TO; j++) {
            int c = kn_col(j, tx);
            if (c < a.hs) dqb[(size_t)r * a.ldq + c] += a.scale * dq[i][j];
        }
    }
}

template <int HS, int KM, int KN, int QM, int QN, typename T> static void f32_backward(const abk_args &a, int B) {
    static int dkv_set, dq_set;
    size_t s1 = f32_dkv<HS, KM, KN>::smem, s2 = f32_dq<HS, QM, QN>::smem;
    abk_smem_limit(abk_f32_dkv_kernel<HS, KM, KN, T>, s1, &dkv_set);
    abk_smem_limit(abk_f32_dq_kernel<HS, QM, QN, T>, s2, &dq_set);
    dim3 g1((unsigned)((a.Tk + KM - 1) / KM), (unsigned)(B * a.NKV)); /* by kv head */
    abk_f32_dkv_kernel<HS, KM, KN, T><<<g1, F32_THREADS, s1, dtc.stream>>>(a);
    DTC_LAUNCHED();
    dim3 g2((unsigned)((a.Tq + QM - 1) / QM), (unsigned)(B * a.NH));
    abk_f32_dq_kernel<HS, QM, QN, T><<<g2, F32_THREADS, s2, dtc.stream>>>(a);
    DTC_LAUNCHED();
}

void abk_f32_backward(const abk_args &a, int B, int HS, dt_dtype t) {
    /* <HS, dK dV: keys a block, queries a step; dQ: queries a block, keys a step> */
    ACT_LAUNCH(t, T, {
        if (HS == 32) f32_backward<32, 64, 64, 64, 64, T>(a, B);
        else if (HS == 64) f32_backward<64, 64, 64, 64, 64, T>(a, B);
        else f32_backward<128, 32, 32, 64, 32, T>(a, B);
    });
}

/* ---------------------------------------------------------------- the probabilities (naive attention) */

/* att[bh][r][k] = e^(S - lse) for every key k of [0, Tk), 0 where masked: a
 * block per (tile of BM query rows, sample x head) walks all key tiles; S
 * as the forward computes it (the same products, summed in the same order:
 * mt_nk), P staged in shared memory so that rows of att are written
 * contiguously (BN elements a row a tile). Tiles past the last key the
 * block's rows see are zeros, written without a product. */
template <int HS, int BM, int BN> struct f32_probs {
    static constexpr int LDH = HS + 4, LDP = BN + 4;
    static constexpr size_t smem = ((size_t)(BM + BN) * LDH + (size_t)BM * LDP) * sizeof(float);
};

template <int HS, int BM, int BN, typename T>
__global__ void __launch_bounds__(F32_THREADS) abk_f32_probs_kernel(abk_args a, T *att) {
    constexpr int LDH = HS + 4, LDP = BN + 4, TM = BM / 16, TS = BN / 8;
    extern __shared__ float4 abk_f32_smem[];
    float *Qs = reinterpret_cast<float *>(abk_f32_smem); /* [BM][LDH] */
    float *Ks = Qs + BM * LDH;                            /* [BN][LDH] */
    float *Ps = Ks + BN * LDH;                            /* [BM][LDP] */
    int ty = threadIdx.x >> 3, tx = threadIdx.x & 7;
    int r0 = blockIdx.x * BM, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    int rows = min(BM, a.Tq - r0);
    size_t ldkv = (size_t)a.ldkv;
    const T *qb = static_cast<const T *>(a.q) + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)(h / a.G) * a.hs;
    T *ab = att + (size_t)bh * a.Tq * a.Tk;
    int nk = abk_seen(r0 + rows - 1, a);
    load_tile<HS, BM>(Qs, LDH, qb + (size_t)r0 * a.ldq, a.ldq, rows, a.hs);
    float l2[TM];
    int seen[TM];
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int r = r0 + ty + 16 * i;
        l2[i] = r < a.Tq ? a.lse[(size_t)bh * a.Ts + r] * ABK_LOG2E : -INFINITY;
        seen[i] = abk_seen(r, a);
    }
    for (int k0 = 0; k0 < a.Tk; k0 += BN) {
        __syncthreads(); /* the last tile's K and P are used up */
        bool any = k0 < nk; /* the same for the whole block */
        if (any) {
            load_tile<HS, BN>(Ks, LDH, kb + (size_t)k0 * ldkv, ldkv, min(BN, nk - k0), a.hs);
            __syncthreads();
            float s[TM][TS];
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TS; j++) s[i][j] = 0.0f;
            mt_nk<TM, TS, HS>(s, Qs, LDH, Ks, LDH, ty, tx);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TS; j++) {
                    bool vis = k0 + tx + 8 * j < seen[i] && l2[i] != -INFINITY;
                    Ps[(ty + 16 * i) * LDP + tx + 8 * j] = vis ? exp2f(s[i][j] * a.scale_log2 - l2[i]) : 0.0f;
                }
            __syncthreads();
        }
        int kn = min(BN, a.Tk - k0);
        for (int x = threadIdx.x; x < rows * BN; x += F32_THREADS) {
            int r = x / BN, c = x % BN;
            if (c < kn) act_store(ab, (size_t)(r0 + r) * a.Tk + k0 + c, any ? Ps[r * LDP + c] : 0.0f);
        }
    }
}

template <int HS, int BM, int BN, typename T> static void f32_probs_launch(const abk_args &a, T *att, int B) {
    static int limit_set;
    size_t smem = f32_probs<HS, BM, BN>::smem;
    abk_smem_limit(abk_f32_probs_kernel<HS, BM, BN, T>, smem, &limit_set);
    dim3 grid((unsigned)((a.Tq + BM - 1) / BM), (unsigned)(B * a.NH));
    abk_f32_probs_kernel<HS, BM, BN, T><<<grid, F32_THREADS, smem, dtc.stream>>>(a, att);
    DTC_LAUNCHED();
}

void abk_f32_probs(const abk_args &a, void *att, int B, int HS, dt_dtype t) {
    ACT_LAUNCH(t, T, {
        if (HS == 32) f32_probs_launch<32, 64, 64, T>(a, (T *)att, B);
        else if (HS == 64) f32_probs_launch<64, 64, 64, T>(a, (T *)att, B);
        else f32_probs_launch<128, 64, 32, T>(a, (T *)att, B);
    });
}
