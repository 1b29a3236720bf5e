/* attention_decode.c — attention of one new query over a KV cache (the
 * decoding step of `dtrun generate`; ops.h attention_decode):
 *     q[C]         the new token's query, NH heads of hs = C / NH
 *     kv[T, 2 Ckv] the cache: row t = k then v of position t (NKV kv heads,
 *                  Ckv = NKV hs; the last row the new token's own)
 *     out[C]       = for each head h, with g = h / (NH / NKV) its kv head:
 *                    softmax(q_h K_g^T / sqrt(hs)) V_g
 * The same numbers as attention_forward's last row with causal = 1, in O(T C)
 * instead of O(T^2 C): the query sees every cached key. The cache holds kv
 * heads only (grouped-query attention reads each once per query head of its
 * group, never a copy). Scores need T floats per head; the caller gives
 * scratch of NH * T. q, kv and out of type t: widened before (and rounded
 * after) the fp32 arithmetic. */
#include <math.h>

#include "kernels/cpu/cpu.h"

static void decode_f32(float *out, float *scratch, const float *q, const float *cache, int T, int C, int NH,
                       int NKV)
{
    int hs = C / NH, C2 = dt_kv_cols(C, NH, NKV), Ckv = C2 / 2, G = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < NH; h++) {
        float *s = scratch + (size_t)h * T;
        const float *qh = q + h * hs, *kh = cache + (size_t)(h / G) * hs;
        float mx = -INFINITY;
        for (int t = 0; t < T; t++) {
            const float *k = kh + (size_t)t * C2;
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
            const float *v = kh + (size_t)t * C2 + Ckv;
            float a = s[t] * inv;
            for (int i = 0; i < hs; i++) o[i] += a * v[i];
        }
    }
}

void cpu_attention_decode(void *out, float *scratch, const void *q, const void *kv, int T, int C, int NH, int NKV,
                          dt_dtype t)
{
    if (T <= 0 || C <= 0 || NH <= 0 || NKV <= 0 || NH % NKV || C / NH <= 0) return;
    float *o = cpu_act_out(0, out, (size_t)C, t);
    decode_f32(o, scratch, cpu_act_in(1, q, (size_t)C, t),
               cpu_act_in(2, kv, (size_t)T * (size_t)dt_kv_cols(C, NH, NKV), t), T, C, NH, NKV);
    cpu_act_store(out, o, (size_t)C, t);
}
