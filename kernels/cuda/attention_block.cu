/* attention_block.cu — the twin of kernels/cpu/attention_block.c: blockwise
 * attention with the online softmax (ops.h attention_block_*), the model's
 * attention and the compute of context parallelism's ring.
 *
 * The ops pick a path by head size and arithmetic (attention_block.cuh):
 *   hs <= 128, fp32 arithmetic    flash tiles on CUDA cores (attention_block_fp32.cu)
 *   hs <= 128, bf16 products      flash tiles on tensor cores (attention_block_bf16.cu),
 *                                 when dt_ops_cuda_set_bf16(1) was called
 *   hs > 128                      the simple kernels below, fp32
 * whatever the activations' type (t, out_t): every kernel reads q, kv and
 * out as they are stored (bf16 or fp32) and writes out in out_t, so bf16
 * activations under fp32 arithmetic (a test's case, not a run's: mixed
 * precision switches both) take the CUDA-core tiles, widening as they load.
 * Backward first computes D = rowsum(dO * O) per (sample, head, row) once,
 * into the backend's scratch (B NH Tq floats): both backward kernels read it
 * for every tile instead of recomputing it.
 *
 * The simple kernels: forward, a thread block per (query row, sample x head)
 * walks the visible keys in tiles of SIMPLE_TILE scores in shared memory,
 * keeping the running max, sum and the output accumulators (shared) of the
 * online softmax. Backward, deterministic like the tiled one: a block per
 * query row adds its dq, a block per key row its dk and dv, each from a tile
 * of probabilities its threads computed; every output element is summed by
 * one thread in a fixed order (no atomics). Slow (one row a block), correct
 * for any hs whose accumulators fit the 48 KiB of shared memory a block gets
 * without asking (2 hs floats beside 4 KiB: hs up to about 5,600). */
#include <cstring>

#include "kernels/cuda/attention_block.cuh"

#define SIMPLE_THREADS 128
#define SIMPLE_TILE 1024 /* scores a block holds at a time (4 KiB) */

static abk_args make_args(int NH, int NKV, int Ts, int Tq, int Tk, int C, int causal, int shift, const int *qseg,
                          const int *kseg) {
    abk_args a;
    memset(&a, 0, sizeof a);
    a.NH = NH;
    a.NKV = NKV;
    a.G = NH / NKV;
    a.Ts = Ts;
    a.Tq = Tq;
    a.Tk = Tk;
    a.C = C;
    a.hs = C / NH;
    a.causal = causal;
    a.shift = shift;
    a.ldq = dt_qkv_cols(C, NH, NKV);
    a.Ckv = NKV * a.hs;
    a.ldkv = 2 * a.Ckv;
    a.scale = 1.0f / sqrtf((float)a.hs);
    a.scale_log2 = a.scale * ABK_LOG2E;
    if (qseg && kseg) a.qseg = qseg, a.kseg = kseg;
    return a;
}

/* ---------------------------------------------------------------- simple forward */

template <typename T, typename OT> __global__ void simple_forward_kernel(abk_args a) {
    __shared__ float sh[32];
    __shared__ float s[SIMPLE_TILE];
    extern __shared__ float acc[]; /* hs */
    int i = blockIdx.x, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    size_t C = (size_t)a.C, ldkv = (size_t)a.ldkv;
    const T *qi = static_cast<const T *>(a.q) + ((size_t)b * a.Ts + i) * a.ldq + (size_t)h * a.hs;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)(h / a.G) * a.hs;
    OT *oi = static_cast<OT *>(a.out) + ((size_t)b * a.Ts + i) * C + (size_t)h * a.hs;
    int2 run = abk_keys(b, i, a); /* keys [run.x, run.y) */
    int valid = run.y - run.x;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int k0 = run.x; k0 < run.y; k0 += SIMPLE_TILE) {
        int nk = min(run.y - k0, SIMPLE_TILE);
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < nk; j += blockDim.x) {
            const T *kj = kb + (size_t)(k0 + j) * ldkv;
            float dot = 0.0f;
            for (int c = 0; c < a.hs; c++) dot += act_load(qi, c) * act_load(kj, c);
            s[j] = dot * a.scale;
            mx = fmaxf(mx, s[j]);
        }
        mx = dtc_block_max(mx, sh);
        float mnew = fmaxf(m, mx), sum = 0.0f;
        for (int j = threadIdx.x; j < nk; j += blockDim.x) {
            s[j] = expf(s[j] - mnew);
            sum += s[j];
        }
        sum = dtc_block_sum(sum, sh);
        __syncthreads(); /* every score written before any thread reads them all */
        float corr = expf(m - mnew);
        for (int c = threadIdx.x; c < a.hs; c += blockDim.x) {
            float v = acc[c] * corr;
            for (int j = 0; j < nk; j++) v += s[j] * act_load(kb, (size_t)(k0 + j) * ldkv + a.Ckv + c);
            acc[c] = v;
        }
        l = l * corr + sum;
        m = mnew;
        __syncthreads(); /* the tile's scores are used up */
    }
    float inv = valid > 0 ? 1.0f / l : 0.0f;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) act_store(oi, c, acc[c] * inv);
    if (threadIdx.x == 0) a.lse[(size_t)bh * a.Ts + i] = valid > 0 ? m + logf(l) : -INFINITY;
}

/* ---------------------------------------------------------------- simple backward */

/* dq of one query row: the tile's dS in shared memory, then each thread sums
 * its columns over the tile. */
template <typename T> __global__ void simple_dq_kernel(abk_args a) {
    __shared__ float ds[SIMPLE_TILE];
    extern __shared__ float dqa[]; /* hs */
    int i = blockIdx.x, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    size_t C = (size_t)a.C, ldkv = (size_t)a.ldkv;
    const T *qi = static_cast<const T *>(a.q) + ((size_t)b * a.Ts + i) * a.ldq + (size_t)h * a.hs;
    const float *gi = a.dout + ((size_t)b * a.Ts + i) * C + (size_t)h * a.hs;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)(h / a.G) * a.hs;
    float li = a.lse[(size_t)bh * a.Ts + i], Di = a.D[(size_t)bh * a.Tq + i];
    int2 run = abk_keys(b, i, a);
    if (li == -INFINITY) run.y = run.x;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) dqa[c] = 0.0f;
    for (int k0 = run.x; k0 < run.y; k0 += SIMPLE_TILE) {
        int nk = min(run.y - k0, SIMPLE_TILE);
        __syncthreads(); /* the last tile's dS are used up */
        for (int j = threadIdx.x; j < nk; j += blockDim.x) {
            const T *kj = kb + (size_t)(k0 + j) * ldkv, *vj = kj + a.Ckv;
            float s = 0.0f, dp = 0.0f;
            for (int c = 0; c < a.hs; c++) s += act_load(qi, c) * act_load(kj, c), dp += gi[c] * act_load(vj, c);
            ds[j] = expf(s * a.scale - li) * (dp - Di);
        }
        __syncthreads();
        for (int c = threadIdx.x; c < a.hs; c += blockDim.x) {
            float v = dqa[c];
            for (int j = 0; j < nk; j++) v += ds[j] * act_load(kb, (size_t)(k0 + j) * ldkv + c);
            dqa[c] = v;
        }
    }
    float *dqi = a.dq + ((size_t)b * a.Ts + i) * a.ldq + (size_t)h * a.hs;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) dqi[c] += a.scale * dqa[c];
}

/* dk and dv of one key row of kv head g, over the query rows that see it
 * in each query head of g's group, head after head. */
template <typename T> __global__ void simple_dkv_kernel(abk_args a) {
    __shared__ float ps[SIMPLE_TILE / 2], ds[SIMPLE_TILE / 2];
    extern __shared__ float dka[]; /* 2 hs: dk, then dv */
    float *dva = dka + a.hs;
    int j = blockIdx.x, bg = blockIdx.y, b = bg / a.NKV, g = bg % a.NKV;
    size_t C = (size_t)a.C;
    const T *kj = static_cast<const T *>(a.kv) + ((size_t)b * a.Ts + j) * a.ldkv + (size_t)g * a.hs, *vj = kj + a.Ckv;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) dka[c] = dva[c] = 0.0f;
    int2 qrun = abk_queries(b, j, a); /* the query rows [qrun.x, qrun.y) that see key j */
    for (int h = g * a.G; h < (g + 1) * a.G; h++)
    for (long i0 = qrun.x; i0 < qrun.y; i0 += SIMPLE_TILE / 2) {
        size_t bh = (size_t)b * a.NH + h;
        const T *qb = static_cast<const T *>(a.q) + (size_t)b * a.Ts * a.ldq + (size_t)h * a.hs;
        const float *gb = a.dout + (size_t)b * a.Ts * C + (size_t)h * a.hs;
        const float *lb = a.lse + bh * a.Ts, *db = a.D + bh * a.Tq;
        int ni = (int)min((long)SIMPLE_TILE / 2, (long)qrun.y - i0);
        __syncthreads(); /* the last tile's P and dS are used up */
        for (int x = threadIdx.x; x < ni; x += blockDim.x) {
            long i = i0 + x;
            const T *qi = qb + (size_t)i * a.ldq;
            const float *gi = gb + (size_t)i * C;
            float s = 0.0f, dp = 0.0f;
            for (int c = 0; c < a.hs; c++) s += act_load(qi, c) * act_load(kj, c), dp += gi[c] * act_load(vj, c);
            float li = lb[i], p = li == -INFINITY ? 0.0f : expf(s * a.scale - li);
            ps[x] = p;
            ds[x] = p * (dp - db[i]);
        }
        __syncthreads();
        for (int c = threadIdx.x; c < a.hs; c += blockDim.x) {
            float vk = dka[c], vv = dva[c];
            for (int x = 0; x < ni; x++) {
                vk += ds[x] * act_load(qb, (size_t)(i0 + x) * a.ldq + c);
                vv += ps[x] * gb[(size_t)(i0 + x) * C + c];
            }
            dka[c] = vk;
            dva[c] = vv;
        }
    }
    float *dkj = a.dkv + ((size_t)b * a.Ts + j) * a.ldkv + (size_t)g * a.hs, *dvj = dkj + a.Ckv;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) {
        dkj[c] += a.scale * dka[c];
        dvj[c] += dva[c];
    }
}

/* ---------------------------------------------------------------- D = rowsum(dO * O) */

/* One warp per (sample, head, row), into D[(b NH + h) Tq + i]; out of type T. */
template <typename T> __global__ void rowdot_kernel(float *D, abk_args a, long rows) {
    long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    int i = (int)(r % a.Tq), bh = (int)(r / a.Tq), b = bh / a.NH, h = bh % a.NH;
    size_t off = ((size_t)b * a.Ts + i) * a.C + (size_t)h * a.hs;
    float v = 0.0f;
    const T *o = static_cast<const T *>(a.o);
    for (int c = lane; c < a.hs; c += 32) v += a.dout[off + c] * act_load(o, off + c);
    v = dtc_warp_sum(v);
    if (lane == 0) D[r] = v;
}

/* ---------------------------------------------------------------- the ops */

/* The forward of one call whose a is filled (out, lse, q, kv, ldkv). */
static void block_forward(const abk_args &a, int B, dt_dtype t, dt_dtype out_t) {
    int HS = abk_tiled_hs(a.hs);
    if (HS && dtc.bf16) {
        abk_bf16_forward(a, B, HS, t, out_t);
    } else if (HS) {
        abk_f32_forward(a, B, HS, t, out_t);
    } else {
        dim3 grid((unsigned)a.Tq, (unsigned)(B * a.NH));
        ABK_LAUNCH2(t, T, out_t, OT,
                    simple_forward_kernel<T, OT>
                    <<<grid, SIMPLE_THREADS, (size_t)a.hs * sizeof(float), dtc.stream>>>(a));
        DTC_LAUNCHED();
    }
}

void cuda_attention_block_forward(void *out, float *lse, const void *q, const void *kv, const int *qseg,
                                  const int *kseg, int B, int Ts, int Tq, int Tk, int C, int NH, int NKV, int causal,
                                  int shift, dt_dtype t, dt_dtype out_t) {
    if (B <= 0 || Tq <= 0 || C <= 0 || NH <= 0 || C / NH <= 0 || NKV <= 0 || NH % NKV) return;
    abk_args a = make_args(NH, NKV, Ts, Tq, Tk, C, causal, shift, qseg, kseg);
    a.out = out;
    a.lse = lse;
    a.q = q;
    a.kv = kv;
    block_forward(a, B, t, out_t);
}

/* ---------------------------------------------------------------- attention_forward's probabilities */

/* att row i of (sample, head) blockIdx.y for hs > 128 (the tiled kernel's
 * twin, as the simple kernels are the tiled ones'): the row's q in shared
 * memory, a thread a key. */
template <typename T> __global__ void simple_probs_kernel(abk_args a, T *att) {
    extern __shared__ float qs[]; /* hs */
    int i = blockIdx.x, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    size_t ldkv = (size_t)a.ldkv;
    const T *qi = static_cast<const T *>(a.q) + ((size_t)b * a.Ts + i) * a.ldq + (size_t)h * a.hs;
    const T *kb = static_cast<const T *>(a.kv) + (size_t)b * a.Ts * ldkv + (size_t)(h / a.G) * a.hs;
    T *ai = att + ((size_t)bh * a.Tq + i) * a.Tk;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) qs[c] = act_load(qi, c);
    __syncthreads();
    float li = a.lse[(size_t)bh * a.Ts + i];
    int valid = li == -INFINITY ? 0 : abk_seen(i, a);
    for (int j = threadIdx.x; j < a.Tk; j += blockDim.x) {
        float p = 0.0f;
        if (j < valid) {
            const T *kj = kb + (size_t)j * ldkv;
            float dot = 0.0f;
            for (int c = 0; c < a.hs; c++) dot += qs[c] * act_load(kj, c);
            p = expf(dot * a.scale - li);
        }
        act_store(ai, j, p);
    }
}

void abk_attention_probs_forward(void *out, void *att, const void *qkv, int B, int T, int C, int NH, int NKV,
                                 int causal, dt_dtype t) {
    abk_args a = make_args(NH, NKV, T, T, T, C, causal, 0, NULL, NULL);
    a.out = out;
    a.lse = (float *)dtc_scratch((size_t)B * NH * T * sizeof(float));
    a.q = qkv;
    /* k at column C, v at C + Ckv: kv's layout, within qkv's rows */
    a.kv = (const char *)qkv + (size_t)C * dt_dtype_size(t);
    a.ldkv = a.ldq;
    block_forward(a, B, t, t);
    int HS = abk_tiled_hs(a.hs);
    if (HS) {
        abk_f32_probs(a, att, B, HS, t);
    } else {
        dim3 grid((unsigned)T, (unsigned)(B * NH));
        ACT_LAUNCH(t, E, simple_probs_kernel<E>
                   <<<grid, SIMPLE_THREADS, (size_t)a.hs * sizeof(float), dtc.stream>>>(a, (E *)att));
        DTC_LAUNCHED();
    }
}

/* One warp per (sample, row, head) — the merge is per row; the lanes share
 * the row's hs columns. */
__global__ void attention_block_merge_kernel(float *out, float *lse, const float *pout, const float *plse, int B,
                                             int Ts, int Tq, int C, int NH, int hs) {
    long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (r >= (long)B * NH * Tq) return;
    int i = (int)(r % Tq), bh = (int)(r / Tq), b = bh / NH, h = bh % NH;
    float *l = lse + (size_t)bh * Ts + i;
    float a = *l, p = plse[(size_t)bh * Ts + i];
    if (p == -INFINITY) return;
    float *o = out + ((size_t)b * Ts + i) * C + (size_t)h * hs;
    const float *po = pout + ((size_t)b * Ts + i) * C + (size_t)h * hs;
    if (a == -INFINITY) {
        for (int c = lane; c < hs; c += 32) o[c] = po[c];
    } else {
        float mx = fmaxf(a, p), lnew = mx + logf(expf(a - mx) + expf(p - mx));
        float wa = expf(a - lnew), wp = expf(p - lnew);
        for (int c = lane; c < hs; c += 32) o[c] = o[c] * wa + po[c] * wp;
        p = lnew;
    }
    __syncwarp(); /* every lane has read lse before lane 0 overwrites it */
    if (lane == 0) *l = p;
}

void cuda_attention_block_merge(float *out, float *lse, const float *pout, const float *plse, int B, int Ts,
                                int Tq, int C, int NH) {
    if (B <= 0 || Tq <= 0 || C <= 0 || NH <= 0) return;
    long rows = (long)B * NH * Tq;
    attention_block_merge_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, dtc.stream>>>(out, lse, pout, plse, B, Ts, Tq,
                                                                                      C, NH, C / NH);
    DTC_LAUNCHED();
}

void cuda_attention_block_backward(float *dq, float *dkv, const float *dout, const void *out, const float *lse,
                                   const void *q, const void *kv, const int *qseg, const int *kseg, int B, int Ts,
                                   int Tq, int Tk, int C, int NH, int NKV, int causal, int shift, dt_dtype t) {
    if (B <= 0 || Tq <= 0 || Tk <= 0 || C <= 0 || NH <= 0 || C / NH <= 0 || NKV <= 0 || NH % NKV) return;
    abk_args a = make_args(NH, NKV, Ts, Tq, Tk, C, causal, shift, qseg, kseg);
    a.dq = dq;
    a.dkv = dkv;
    a.dout = dout;
    a.o = out;
    a.lse = (float *)lse; /* read only on this path */
    a.q = q;
    a.kv = kv;
    long rows = (long)B * NH * Tq;
    float *D = (float *)dtc_scratch((size_t)rows * sizeof(float));
    a.D = D;
    ACT_LAUNCH(t, T, rowdot_kernel<T><<<(unsigned)((rows + 7) / 8), 256, 0, dtc.stream>>>(D, a, rows));
    DTC_LAUNCHED();
    int HS = abk_tiled_hs(a.hs);
    if (HS && dtc.bf16) {
        abk_bf16_backward(a, B, HS, t);
    } else if (HS) {
        abk_f32_backward(a, B, HS, t);
    } else {
        dim3 gk((unsigned)Tk, (unsigned)(B * NKV)), gq((unsigned)Tq, (unsigned)(B * NH));
        ACT_LAUNCH(t, T, {
            simple_dkv_kernel<T><<<gk, SIMPLE_THREADS, 2 * (size_t)a.hs * sizeof(float), dtc.stream>>>(a);
            DTC_LAUNCHED();
            simple_dq_kernel<T><<<gq, SIMPLE_THREADS, (size_t)a.hs * sizeof(float), dtc.stream>>>(a);
            DTC_LAUNCHED();
        });
    }
}
