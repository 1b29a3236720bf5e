/* rope.cu — rotary position embedding of q and k, Hugging Face's rotate-half
 * layout (twin of kernels/cpu/rope.c; ops.h rope_table / rope_forward /
 * rope_backward). The table is the CPU's, computed on the host
 * (kernels/rope_table.c) and copied up, so both backends read the same cos
 * and sin bits; each output is spelled as the CPU computes it, two products
 * each rounded then their rounded sum (__fmul_rn, __fadd_rn: nvcc would
 * otherwise fuse them into an FMA), so the two backends give the same bits.
 *
 * A thread turns two neighbouring pairs (i, i + 1 with their partners i +
 * hs/2, i + 1 + hs/2) when the layout allows two-element loads (hs/2 even, ld
 * even, x aligned to two elements), else one; consecutive threads take
 * consecutive pairs of a head, so a warp's loads of x, cos and sin are
 * contiguous. Memory-bound: one read and one write of the q and k columns. */
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"
extern "C" {
#include "kernels/rope_table.h"
}

/* (a, b) turned by (c, s): forward a c - b s, b c + a s; backward (the
 * transpose) a c + b s, b c - a s. */
template <int DIR> __device__ __forceinline__ void rope_turn(float &a, float &b, float c, float s) {
    float x = a, y = b;
    if (DIR > 0) {
        a = __fsub_rn(__fmul_rn(x, c), __fmul_rn(y, s));
        b = __fadd_rn(__fmul_rn(y, c), __fmul_rn(x, s));
    } else {
        a = __fadd_rn(__fmul_rn(x, c), __fmul_rn(y, s));
        b = __fsub_rn(__fmul_rn(y, c), __fmul_rn(x, s));
    }
}

/* V elements (1 or 2) of a head's first half per thread: units = N nheads
 * half / V. */
template <int DIR, int V, typename T>
__global__ void rope_kernel(T *x, int ld, int nheads, int hs, const int *pos, const float *cs, size_t units) {
    int half = hs / 2, per_head = half / V;
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < units; u += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(u % per_head) * V;
        size_t nh = u / per_head;
        int j = (int)(nh % nheads);
        size_t n = nh / nheads;
        const float *c = cs + (size_t)pos[n] * hs + i, *s = c + half;
        T *p = x + n * ld + (size_t)j * hs + i, *q = p + half;
        if constexpr (V == 2) {
            float2 cc = *reinterpret_cast<const float2 *>(c), ss = *reinterpret_cast<const float2 *>(s);
            float a0 = act_load(p, 0), a1 = act_load(p, 1), b0 = act_load(q, 0), b1 = act_load(q, 1);
            rope_turn<DIR>(a0, b0, cc.x, ss.x);
            rope_turn<DIR>(a1, b1, cc.y, ss.y);
            act_store(p, 0, a0), act_store(p, 1, a1), act_store(q, 0, b0), act_store(q, 1, b1);
        } else {
            float a = act_load(p, 0), b = act_load(q, 0);
            rope_turn<DIR>(a, b, c[0], s[0]);
            act_store(p, 0, a), act_store(q, 0, b);
        }
    }
}

void cuda_rope_table(float *cs, int max_pos, int hs, float theta) {
    if (max_pos <= 0 || hs < 2) return;
    size_t n = (size_t)max_pos * hs;
    float *h = (float *)malloc(n * sizeof(float));
    if (!h) dtc_fatal(__FILE__, __LINE__, "malloc", "out of host memory for the RoPE table");
    dt_rope_table_host(h, max_pos, hs, theta);
    cuda_from_host(cs, h, n * sizeof(float)); /* synchronous: h may go */
    free(h);
}

template <int DIR>
static void rope_launch(void *x, int ld, int nheads, int hs, const int *pos, const float *cs, int N, dt_dtype t) {
    int half = hs / 2;
    if (N <= 0 || nheads <= 0 || half <= 0) return;
    size_t es = dt_dtype_size(t);
    bool v2 = half % 2 == 0 && ld % 2 == 0 && hs % 2 == 0 && reinterpret_cast<uintptr_t>(x) % (2 * es) == 0 &&
              reinterpret_cast<uintptr_t>(cs) % 8 == 0;
    size_t units = (size_t)N * nheads * half / (v2 ? 2 : 1);
    unsigned grid = dtc_blocks(units, 256);
    if (v2)
        ACT_LAUNCH(t, T, rope_kernel<DIR, 2, T><<<grid, 256, 0, dtc.stream>>>((T *)x, ld, nheads, hs, pos, cs, units));
    else
        ACT_LAUNCH(t, T, rope_kernel<DIR, 1, T><<<grid, 256, 0, dtc.stream>>>((T *)x, ld, nheads, hs, pos, cs, units));
    DTC_LAUNCHED();
}

void cuda_rope_forward(void *x, int ld, int nheads, int hs, const int *pos, const float *cs, int N, dt_dtype t) {
    rope_launch<1>(x, ld, nheads, hs, pos, cs, N, t);
}

void cuda_rope_backward(float *dx, int ld, int nheads, int hs, const int *pos, const float *cs, int N) {
    rope_launch<-1>(dx, ld, nheads, hs, pos, cs, N, DT_F32);
}
