/* attention_block.cu — the twin of kernels/cpu/attention_block.c: blockwise
 * attention with the online softmax (ops.h attention_block_*), the model's
 * attention and the compute of context parallelism's ring.
 *
 * The ops pick a path by head size and arithmetic (attention_block.cuh):
 *   hs <= 128, fp32 inputs        flash tiles on CUDA cores (attention_block_fp32.cu)
 *   hs <= 128, bf16 inputs        flash tiles on tensor cores (attention_block_bf16.cu),
 *                                 when dt_ops_cuda_set_bf16(1) was called
 *   hs > 128                      the simple kernels below, fp32
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

static abk_args make_args(int NH, int Ts, int Tq, int Tk, int C, int causal, int shift) {
    abk_args a;
    memset(&a, 0, sizeof a);
    a.NH = NH;
    a.Ts = Ts;
    a.Tq = Tq;
    a.Tk = Tk;
    a.C = C;
    a.hs = C / NH;
    a.causal = causal;
    a.shift = shift;
    a.scale = 1.0f / sqrtf((float)a.hs);
    a.scale_log2 = a.scale * ABK_LOG2E;
    return a;
}

/* ---------------------------------------------------------------- simple forward */

__global__ void simple_forward_kernel(abk_args a) {
    __shared__ float sh[32];
    __shared__ float s[SIMPLE_TILE];
    extern __shared__ float acc[]; /* hs */
    int i = blockIdx.x, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    size_t C = (size_t)a.C;
    const float *qi = a.q + ((size_t)b * a.Ts + i) * 3 * C + (size_t)h * a.hs;
    const float *kb = a.kv + (size_t)b * a.Ts * 2 * C + (size_t)h * a.hs;
    float *oi = a.out + ((size_t)b * a.Ts + i) * C + (size_t)h * a.hs;
    int valid = abk_seen(i, a);
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 < valid; k0 += SIMPLE_TILE) {
        int nk = min(valid - k0, SIMPLE_TILE);
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < nk; j += blockDim.x) {
            const float *kj = kb + (size_t)(k0 + j) * 2 * C;
            float dot = 0.0f;
            for (int c = 0; c < a.hs; c++) dot += qi[c] * kj[c];
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
            for (int j = 0; j < nk; j++) v += s[j] * kb[(size_t)(k0 + j) * 2 * C + C + c];
            acc[c] = v;
        }
        l = l * corr + sum;
        m = mnew;
        __syncthreads(); /* the tile's scores are used up */
    }
    float inv = valid > 0 ? 1.0f / l : 0.0f;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) oi[c] = acc[c] * inv;
    if (threadIdx.x == 0) a.lse[(size_t)bh * a.Ts + i] = valid > 0 ? m + logf(l) : -INFINITY;
}

/* ---------------------------------------------------------------- simple backward */

/* dq of one query row: the tile's dS in shared memory, then each thread sums
 * its columns over the tile. */
__global__ void simple_dq_kernel(abk_args a) {
    __shared__ float ds[SIMPLE_TILE];
    extern __shared__ float dqa[]; /* hs */
    int i = blockIdx.x, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    size_t C = (size_t)a.C;
    const float *qi = a.q + ((size_t)b * a.Ts + i) * 3 * C + (size_t)h * a.hs;
    const float *gi = a.dout + ((size_t)b * a.Ts + i) * C + (size_t)h * a.hs;
    const float *kb = a.kv + (size_t)b * a.Ts * 2 * C + (size_t)h * a.hs;
    float li = a.lse[(size_t)bh * a.Ts + i], Di = a.D[(size_t)bh * a.Tq + i];
    int valid = li == -INFINITY ? 0 : abk_seen(i, a);
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) dqa[c] = 0.0f;
    for (int k0 = 0; k0 < valid; k0 += SIMPLE_TILE) {
        int nk = min(valid - k0, SIMPLE_TILE);
        __syncthreads(); /* the last tile's dS are used up */
        for (int j = threadIdx.x; j < nk; j += blockDim.x) {
            const float *kj = kb + (size_t)(k0 + j) * 2 * C, *vj = kj + C;
            float s = 0.0f, dp = 0.0f;
            for (int c = 0; c < a.hs; c++) s += qi[c] * kj[c], dp += gi[c] * vj[c];
            ds[j] = expf(s * a.scale - li) * (dp - Di);
        }
        __syncthreads();
        for (int c = threadIdx.x; c < a.hs; c += blockDim.x) {
            float v = dqa[c];
            for (int j = 0; j < nk; j++) v += ds[j] * kb[(size_t)(k0 + j) * 2 * C + c];
            dqa[c] = v;
        }
    }
    float *dqi = a.dq + ((size_t)b * a.Ts + i) * 3 * C + (size_t)h * a.hs;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) dqi[c] += a.scale * dqa[c];
}

/* dk and dv of one key row, over the query rows that see it. */
__global__ void simple_dkv_kernel(abk_args a) {
    __shared__ float ps[SIMPLE_TILE / 2], ds[SIMPLE_TILE / 2];
    extern __shared__ float dka[]; /* 2 hs: dk, then dv */
    float *dva = dka + a.hs;
    int j = blockIdx.x, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    size_t C = (size_t)a.C;
    const float *kj = a.kv + ((size_t)b * a.Ts + j) * 2 * C + (size_t)h * a.hs, *vj = kj + C;
    const float *qb = a.q + (size_t)b * a.Ts * 3 * C + (size_t)h * a.hs;
    const float *gb = a.dout + (size_t)b * a.Ts * C + (size_t)h * a.hs;
    const float *lb = a.lse + (size_t)bh * a.Ts, *db = a.D + (size_t)bh * a.Tq;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) dka[c] = dva[c] = 0.0f;
    long first = abk_first_query(j, a);
    for (long i0 = first; i0 < a.Tq; i0 += SIMPLE_TILE / 2) {
        int ni = (int)min((long)SIMPLE_TILE / 2, (long)a.Tq - i0);
        __syncthreads(); /* the last tile's P and dS are used up */
        for (int x = threadIdx.x; x < ni; x += blockDim.x) {
            long i = i0 + x;
            const float *qi = qb + (size_t)i * 3 * C, *gi = gb + (size_t)i * C;
            float s = 0.0f, dp = 0.0f;
            for (int c = 0; c < a.hs; c++) s += qi[c] * kj[c], dp += gi[c] * vj[c];
            float li = lb[i], p = li == -INFINITY ? 0.0f : expf(s * a.scale - li);
            ps[x] = p;
            ds[x] = p * (dp - db[i]);
        }
        __syncthreads();
        for (int c = threadIdx.x; c < a.hs; c += blockDim.x) {
            float vk = dka[c], vv = dva[c];
            for (int x = 0; x < ni; x++) {
                vk += ds[x] * qb[(size_t)(i0 + x) * 3 * C + c];
                vv += ps[x] * gb[(size_t)(i0 + x) * C + c];
            }
            dka[c] = vk;
            dva[c] = vv;
        }
    }
    float *dkj = a.dkv + ((size_t)b * a.Ts + j) * 2 * C + (size_t)h * a.hs, *dvj = dkj + C;
    for (int c = threadIdx.x; c < a.hs; c += blockDim.x) {
        dkj[c] += a.scale * dka[c];
        dvj[c] += dva[c];
    }
}

/* ---------------------------------------------------------------- D = rowsum(dO * O) */

/* One warp per (sample, head, row), into D[(b NH + h) Tq + i]. */
__global__ void rowdot_kernel(float *D, abk_args a, long rows) {
    long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    int i = (int)(r % a.Tq), bh = (int)(r / a.Tq), b = bh / a.NH, h = bh % a.NH;
    size_t off = ((size_t)b * a.Ts + i) * a.C + (size_t)h * a.hs;
    float v = 0.0f;
    for (int c = lane; c < a.hs; c += 32) v += a.dout[off + c] * a.o[off + c];
    v = dtc_warp_sum(v);
    if (lane == 0) D[r] = v;
}

/* ---------------------------------------------------------------- the ops */

void cuda_attention_block_forward(void *out_, float *lse, const void *q_, const void *kv_, int B, int Ts, int Tq,
                                  int Tk, int C, int NH, int causal, int shift, dt_dtype t, dt_dtype out_t) {
    if (B <= 0 || Tq <= 0 || C <= 0 || NH <= 0 || C / NH <= 0) return;
    if (t != DT_F32 || out_t != DT_F32) dtc_fatal(__FILE__, __LINE__, "attention_block_forward", "bf16 activations: not yet on cuda (TODO)");
    float *out = (float *)out_;
    const float *q = (const float *)q_, *kv = (const float *)kv_;
    abk_args a = make_args(NH, Ts, Tq, Tk, C, causal, shift);
    a.out = out;
    a.lse = lse;
    a.q = q;
    a.kv = kv;
    int HS = abk_tiled_hs(a.hs);
    if (HS && dtc.bf16) {
        abk_bf16_forward(a, B, HS);
    } else if (HS) {
        abk_f32_forward(a, B, HS);
    } else {
        dim3 grid((unsigned)Tq, (unsigned)(B * NH));
        simple_forward_kernel<<<grid, SIMPLE_THREADS, (size_t)a.hs * sizeof(float), dtc.stream>>>(a);
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

void cuda_attention_block_backward(float *dq, float *dkv, const float *dout, const void *out_, const float *lse,
                                   const void *q_, const void *kv_, int B, int Ts, int Tq, int Tk, int C, int NH,
                                   int causal, int shift, dt_dtype t) {
    if (B <= 0 || Tq <= 0 || Tk <= 0 || C <= 0 || NH <= 0 || C / NH <= 0) return;
    if (t != DT_F32) dtc_fatal(__FILE__, __LINE__, "attention_block_backward", "bf16 activations: not yet on cuda (TODO)");
    const float *out = (const float *)out_, *q = (const float *)q_, *kv = (const float *)kv_;
    abk_args a = make_args(NH, Ts, Tq, Tk, C, causal, shift);
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
    rowdot_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, dtc.stream>>>(D, a, rows);
    DTC_LAUNCHED();
    int HS = abk_tiled_hs(a.hs);
    if (HS && dtc.bf16) {
        abk_bf16_backward(a, B, HS);
    } else if (HS) {
        abk_f32_backward(a, B, HS);
    } else {
        dim3 gk((unsigned)Tk, (unsigned)(B * NH)), gq((unsigned)Tq, (unsigned)(B * NH));
        simple_dkv_kernel<<<gk, SIMPLE_THREADS, 2 * (size_t)a.hs * sizeof(float), dtc.stream>>>(a);
        DTC_LAUNCHED();
        simple_dq_kernel<<<gq, SIMPLE_THREADS, (size_t)a.hs * sizeof(float), dtc.stream>>>(a);
        DTC_LAUNCHED();
    }
}
