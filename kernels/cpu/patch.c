/* patch.c — ViT patch embedding: a strided convolution done as im2col + GEMM.
 *
 * img[B, ch, S, S] is cut into NP = (S/P)^2 non-overlapping P x P patches in
 * row-major patch order (patch (gy, gx) is number gy*(S/P)+gx). Each patch is
 * flattened with the inner index (c, py, px), the layout of w[C, ch*P*P], so
 *     out[B*NP, C] = patches[B*NP, K] @ w^T + b,   K = ch*P*P
 * is exactly matmul_forward, and the weight gradient is matmul's dw. */
#include <stdlib.h>

#include "kernels/cpu/cpu.h"

/* patches[(b*NP + gy*G + gx), (c*P + py)*P + px] = img[b, c, gy*P+py, gx*P+px] */
static void im2col(float *patches, const float *img, int B, int ch, int S, int P) {
    int G = S / P, NP = G * G, K = ch * P * P;
    #pragma omp parallel for collapse(2) if ((size_t)B * NP * K > CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int p = 0; p < NP; p++) {
            int gy = p / G, gx = p % G;
            float *row = patches + ((size_t)b * NP + p) * K;
            for (int c = 0; c < ch; c++) {
                const float *plane = img + ((size_t)b * ch + c) * S * S;
                for (int py = 0; py < P; py++) {
                    const float *src = plane + (size_t)(gy * P + py) * S + (size_t)gx * P;
                    float *dst = row + (size_t)(c * P + py) * P;
                    for (int px = 0; px < P; px++) dst[px] = src[px];
                }
            }
        }
    }
}

/* The im2col buffer is a temporary the size of the image batch; returns NULL
 * when there is nothing to do or no memory (the caller then does nothing: a
 * kernel has no way to report errors, and the runtime checks its big buffers). */
static float *patches_of(const float *img, int B, int ch, int S, int P) {
    int G = S / P;
    size_t rows = (size_t)B * G * G, K = (size_t)ch * P * P;
    if (rows == 0 || K == 0) return NULL;
    float *patches = malloc(rows * K * sizeof(float));
    if (patches) im2col(patches, img, B, ch, S, P);
    return patches;
}

void cpu_patch_forward(float *out, const float *img, const float *w, const float *b,
                       int B, int ch, int S, int P, int C) {
    int G = S / P;
    float *patches = patches_of(img, B, ch, S, P);
    if (!patches) return;
    cpu_matmul_forward(out, patches, w, b, B * G * G, ch * P * P, C, DT_F32, DT_F32);
    free(patches);
}

/* dw += dout^T @ patches, db += colsum(dout); the image gets no gradient. */
void cpu_patch_backward(float *dw, float *db, const float *dout, const float *img,
                        int B, int ch, int S, int P, int C) {
    int G = S / P;
    float *patches = patches_of(img, B, ch, S, P);
    if (!patches) return;
    cpu_matmul_backward(NULL, dw, db, dout, patches, NULL, B * G * G, ch * P * P, C, DT_F32);
    free(patches);
}
