/* moe_gemm.cu — the experts' grouped GEMM (twin of kernels/cpu/moe_gemm.c;
 * ops.h moe_grouped_forward / _backward): per expert, over its contiguous
 * rows of the permuted tokens, the very GEMMs of matmul.cu (cuBLASLt on the
 * stream, the same rounding points and bf16 products as a dense layer's),
 * launched back to back from the host's counts; an expert without rows
 * launches nothing. The counts are host memory (ops.h): the model reads
 * them back after the route, once per MoE block.
 *
 * One launch per expert is Megatron-Core's SequentialMLP; its GroupedMLP
 * makes them one grouped call (cublasGemmGroupedBatchedEx, CUTLASS grouped
 * GEMM), which saves the launches when experts are many and small. Same
 * products, another schedule: a later optimisation, measured with the
 * GPU benchmarks, not a change of contract. */
#include "kernels/cuda/common.cuh"

void cuda_moe_grouped_forward(void *out, const void *inp, const void *w, const int *counts, int G, int IC, int OC,
                              dt_dtype t, dt_dtype out_t) {
    size_t row = 0;
    for (int g = 0; g < G; g++) {
        int n = counts[g];
        if (n > 0)
            cuda_matmul_forward(dt_at(out, row * (size_t)OC, out_t), dt_at(inp, row * (size_t)IC, t),
                                dt_at(w, (size_t)g * OC * IC, t), nullptr, n, IC, OC, t, out_t);
        row += (size_t)(n > 0 ? n : 0);
    }
}

void cuda_moe_grouped_backward(float *dinp, float *dw, const float *dout, const void *inp, const void *w,
                               const int *counts, int G, int IC, int OC, dt_dtype t) {
    size_t row = 0, wsz = (size_t)OC * IC;
    for (int g = 0; g < G; g++) {
        int n = counts[g];
        if (n > 0)
            cuda_matmul_backward(dinp ? dinp + row * IC : nullptr, dw ? dw + (size_t)g * wsz : nullptr, nullptr,
                                 dout + row * OC, dt_at(inp, row * (size_t)IC, t), dt_at(w, (size_t)g * wsz, t), n,
                                 IC, OC, t);
        row += (size_t)(n > 0 ? n : 0);
    }
}
