/* embedding.c — token embedding, vocab-parallel ready.
 *
 * This rank holds rows [v0, v0+vn) of the global table wte[V, C]. A token whose
 * row lives elsewhere gives a zero row here; the tensor-parallel strategy sums
 * the ranks' outputs, so every token ends up with exactly its one row. */
#include <string.h>

#include "kernels/cpu/cpu.h"

/* out[i,:] = wte[tok[i]-v0, :] if the row lives here, else 0. */
void cpu_embedding_forward(float *out, const int *tok, const float *wte,
                           int v0, int vn, int N, int C) {
    #pragma omp parallel for if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * C;
        int row = tok[i] - v0;
        if (row >= 0 && row < vn)
            memcpy(o, wte + (size_t)row * C, (size_t)C * sizeof(float));
        else
            memset(o, 0, (size_t)C * sizeof(float));
    }
}

/* d out[i,:] / d wte[tok[i]-v0,:] = identity, so dwte[row] += dout[i].
 * Serial over tokens: two tokens may share a row (a scatter-add), and the
 * loop is a tiny fraction of a step (N*C adds). */
void cpu_embedding_backward(float *dwte, const float *dout, const int *tok,
                            int v0, int vn, int N, int C) {
    for (int i = 0; i < N; i++) {
        int row = tok[i] - v0;
        if (row < 0 || row >= vn) continue;
        float *dw = dwte + (size_t)row * C;
        const float *d = dout + (size_t)i * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) dw[c] += d[c];
    }
}
