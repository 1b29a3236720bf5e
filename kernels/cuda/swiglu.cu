/* swiglu.cu — Llama's MLP activation (twin of kernels/cpu/swiglu.c; ops.h
 * swiglu_forward / _backward): inp[N, 2F] packs the gate (columns [0, F))
 * and up ([F, 2F)) projections of one GEMM; out[N, F] = SiLU(gate) * up,
 *     s = 1 / (1 + e^-g),  SiLU(g) = g s,   d/dg SiLU = s (1 + g (1 - s)).
 * One pass: a thread reads its gate and up elements and writes its out (or
 * both gradients), V = 2 neighbours at a time (two-element loads) when F is
 * even and the pointers allow, else one; consecutive threads take
 * consecutive columns (coalesced). fp32 arithmetic with expf (no fast-math
 * intrinsics: the twin test expects ~1 ulp, the kernel is memory-bound). */
#include <cstdint>

#include "kernels/cuda/act.cuh"
#include "kernels/cuda/common.cuh"

__device__ __forceinline__ float swiglu_sig(float g) { return 1.0f / (1.0f + expf(-g)); }

template <int V, typename T> __global__ void swiglu_forward_kernel(T *out, const T *inp, int F, size_t units) {
    int per_row = F / V;
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < units; u += (size_t)gridDim.x * blockDim.x) {
        size_t n = u / per_row;
        int f = (int)(u % per_row) * V;
        const T *g = inp + n * 2 * F + f, *up = g + F;
        T *o = out + n * F + f;
#pragma unroll
        for (int v = 0; v < V; v++) {
            float x = act_load(g, v), s = swiglu_sig(x);
            act_store(o, v, x * s * act_load(up, v));
        }
    }
}

template <int V, typename T>
__global__ void swiglu_backward_kernel(float *dinp, const T *inp, const float *dout, int F, size_t units) {
    int per_row = F / V;
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < units; u += (size_t)gridDim.x * blockDim.x) {
        size_t n = u / per_row;
        int f = (int)(u % per_row) * V;
        const T *g = inp + n * 2 * F + f, *up = g + F;
        const float *d = dout + n * F + f;
        float *dg = dinp + n * 2 * F + f, *du = dg + F;
#pragma unroll
        for (int v = 0; v < V; v++) {
            float x = act_load(g, v), u_ = act_load(up, v), s = swiglu_sig(x);
            dg[v] += d[v] * u_ * (s * (1.0f + x * (1.0f - s)));
            du[v] += d[v] * (x * s);
        }
    }
}

/* Two-element steps when every row starts on a two-element boundary. */
static bool swiglu_v2(int F, const void *a, size_t ea, const void *b, size_t eb) {
    return F % 2 == 0 && reinterpret_cast<uintptr_t>(a) % (2 * ea) == 0 && reinterpret_cast<uintptr_t>(b) % (2 * eb) == 0;
}

void cuda_swiglu_forward(void *out, const void *inp, int N, int F, dt_dtype t) {
    if (N <= 0 || F <= 0) return;
    size_t es = dt_dtype_size(t);
    bool v2 = swiglu_v2(F, out, es, inp, es);
    size_t units = (size_t)N * F / (v2 ? 2 : 1);
    unsigned grid = dtc_blocks(units, 256);
    if (v2)
        ACT_LAUNCH(t, T, swiglu_forward_kernel<2, T><<<grid, 256, 0, dtc.stream>>>((T *)out, (const T *)inp, F, units));
    else
        ACT_LAUNCH(t, T, swiglu_forward_kernel<1, T><<<grid, 256, 0, dtc.stream>>>((T *)out, (const T *)inp, F, units));
    DTC_LAUNCHED();
}

void cuda_swiglu_backward(float *dinp, const void *inp, const float *dout, int N, int F, dt_dtype t) {
    if (N <= 0 || F <= 0) return;
    bool v2 = swiglu_v2(F, inp, dt_dtype_size(t), dinp, sizeof(float)) && reinterpret_cast<uintptr_t>(dout) % 8 == 0;
    size_t units = (size_t)N * F / (v2 ? 2 : 1);
    unsigned grid = dtc_blocks(units, 256);
    if (v2)
        ACT_LAUNCH(t, T, swiglu_backward_kernel<2, T><<<grid, 256, 0, dtc.stream>>>(dinp, (const T *)inp, dout, F, units));
    else
        ACT_LAUNCH(t, T, swiglu_backward_kernel<1, T><<<grid, 256, 0, dtc.stream>>>(dinp, (const T *)inp, dout, F, units));
    DTC_LAUNCHED();
}
