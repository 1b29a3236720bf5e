/* moe_gemm.c — the experts' grouped GEMM on the CPU (ops.h
 * moe_grouped_forward / _backward): one matmul per expert over its
 * contiguous rows of the permuted tokens, each through the very matmul ops
 * (cpu_matmul_*: OpenBLAS split across the threads), so an expert's rows
 * get the rounding a dense layer's would. Experts with no rows are skipped
 * (their weight gradient gets nothing). */
#include "kernels/cpu/cpu.h"

void cpu_moe_grouped_forward(void *out, const void *inp, const void *w, const int *counts, int G, int IC, int OC,
                             dt_dtype t, dt_dtype out_t)
{
    size_t row = 0;
    for (int g = 0; g < G; g++) {
        int n = counts[g];
        if (n > 0)
            cpu_matmul_forward(dt_at(out, row * (size_t)OC, out_t), dt_at(inp, row * (size_t)IC, t),
                               dt_at(w, (size_t)g * (size_t)OC * (size_t)IC, t), NULL, n, IC, OC, t, out_t);
        row += (size_t)(n > 0 ? n : 0);
    }
}

void cpu_moe_grouped_backward(float *dinp, float *dw, const float *dout, const void *inp, const void *w,
                              const int *counts, int G, int IC, int OC, dt_dtype t)
{
    size_t row = 0, wsz = (size_t)OC * (size_t)IC;
    for (int g = 0; g < G; g++) {
        int n = counts[g];
        if (n > 0)
            cpu_matmul_backward(dinp ? dinp + row * (size_t)IC : NULL, dw ? dw + (size_t)g * wsz : NULL, NULL,
                                dout + row * (size_t)OC, dt_at(inp, row * (size_t)IC, t),
                                dt_at(w, (size_t)g * wsz, t), n, IC, OC, t);
        row += (size_t)(n > 0 ? n : 0);
    }
}
