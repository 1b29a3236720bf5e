/* attention_decode.c — attention of one new query over a KV cache (the
 * decoding step of `dtrun generate`):
 *     cache[T, 3C]: rows 0..T-1 hold q, k, v of positions 0..T-1 as
 *                   attention_forward's qkv does (the last row is the new token)
 *     out[C]      = for each head h: softmax(q_{T-1,h} K_h^T / sqrt(hs)) V_h
 * The same numbers as attention_forward's last row with causal = 1, in O(T C)
 * instead of O(T^2 C): the query sees every cached key. Scores need T floats
 * per head; the caller gives scratch of NH * T. */
#include <math.h>

#include "kernels/cpu/cpu.h"

void cpu_attention_decode(float *out, float *scratch, const float *cache, int T, int C, int NH)
{
    if (T <= 0 || C <= 0 || NH <= 0) return;
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    const float *q = cache + (size_t)(T - 1) * C3;
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < NH; h++) {
        float *s = scratch + (size_t)h * T;
        const float *qh = q + h * hs;
        float mx = -INFINITY;
        for (int t = 0; t < T; t++) {
            const float *k = cache + (size_t)t * C3 + C + h * hs;
            float dot = 0.0f;
            for (int i = 0; i < hs; i++) dot += qh[i] * k[i];
            s[t] = dot * scale;
            mx = s[t] > mx ? s[t] : mx;
        }
        float sum = 0.0f;
        for (int t = 0; t < T; t++) {
            s[t] = expf(s[t] - mx);
            sum += s[t];
        }
        float inv = 1.0f / sum;
        float *o = out + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0f;
        for (int t = 0; t < T; t++) {
            const float *v = cache + (size_t)t * C3 + 2 * C + h * hs;
            float a = s[t] * inv;
            for (int i = 0; i < hs; i++) o[i] += a * v[i];
        }
    }
}
