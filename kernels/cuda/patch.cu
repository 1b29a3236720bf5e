/* patch.cu — ViT patch embedding as im2col + GEMM (twin of
 * kernels/cpu/patch.c), fp32.
 *
 * img[B, ch, S, S] is cut into NP = (S/P)^2 P x P patches in row-major patch
 * order; each patch flattened with the inner index (c, py, px), the layout of
 * w[C, ch*P*P]. Then out[B*NP, C] = patches @ w^T + b is matmul_forward, and
 * dw, db come from matmul_backward (no gradient to the image). The patches
 * matrix (as large as the image batch) lives in the backend scratch for the
 * duration of the op. A fused implicit-GEMM kernel would skip that copy; the
 * patch embedding is a tiny share of a ViT step, so it is not worth it yet. */
#include "kernels/cuda/common.cuh"

/* patches[(b*NP + gy*G + gx), (c*P + py)*P + px] = img[b, c, gy*P+py, gx*P+px] */
__global__ void im2col_kernel(float *patches, const float *img, int B, int ch, int S, int P) {
    int G = S / P, NP = G * G, K = ch * P * P;
    size_t total = (size_t)B * NP * K;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t rowi = i / (size_t)K;
        int kk = (int)(i % (size_t)K);
        int b = (int)(rowi / (size_t)NP), p = (int)(rowi % (size_t)NP);
        int gy = p / G, gx = p % G;
        int c = kk / (P * P), py = (kk / P) % P, px = kk % P;
        size_t plane = ((size_t)b * ch + c) * S;
        patches[i] = img[(plane + (size_t)gy * P + py) * S + (size_t)gx * P + px];
    }
}

/* The patches matrix in scratch, or NULL when there is nothing to do. */
static float *patches_of(const float *img, int B, int ch, int S, int P) {
    if (B <= 0 || ch <= 0 || P <= 0 || S < P) return nullptr;
    int G = S / P;
    size_t total = (size_t)B * G * G * (size_t)ch * P * P;
    float *patches = (float *)dtc_scratch(total * sizeof(float));
    im2col_kernel<<<dtc_blocks(total, 256), 256, 0, dtc.stream>>>(patches, img, B, ch, S, P);
    DTC_LAUNCHED();
    return patches;
}

void cuda_patch_forward(float *out, const float *img, const float *w, const float *b, int B,
                        int ch, int S, int P, int C) {
    float *patches = patches_of(img, B, ch, S, P);
    if (!patches) return;
    int G = S / P;
    cuda_matmul_forward(out, patches, w, b, B * G * G, ch * P * P, C, DT_F32, DT_F32);
}

void cuda_patch_backward(float *dw, float *db, const float *dout, const float *img, int B, int ch,
                         int S, int P, int C) {
    float *patches = patches_of(img, B, ch, S, P);
    if (!patches) return;
    int G = S / P;
    cuda_matmul_backward(nullptr, dw, db, dout, patches, nullptr, B * G * G, ch * P * P, C, DT_F32);
}
