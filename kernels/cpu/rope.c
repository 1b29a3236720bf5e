/* rope.c — rotary position embedding of q and k, Hugging Face's
 * rotate-half layout (ops.h rope_table / rope_forward / rope_backward):
 * column i of a head pairs with column i + hs/2 and the pair turns by the
 * angle of the row's own position,
 *     x[i] <- x[i] c - x[i + hs/2] s,   x[i + hs/2] <- x[i + hs/2] c + x[i] s,
 * c and s read from the table (rope_table.c). Each output is two fp32
 * products, each rounded, then their rounded sum: the build's C11 mode keeps
 * the compiler from fusing them (-ffp-contract=off), and the CUDA twin spells
 * the same roundings out (__fmul_rn, __fadd_rn), so both give the same bits.
 * A bf16 x is widened as read and rounded once as stored. */
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"
#include "kernels/rope_table.h"

void cpu_rope_table(float *cs, int max_pos, int hs, float theta) { dt_rope_table_host(cs, max_pos, hs, theta); }

/* One head's hs/2 pairs at (a[i], b[i]) = (x[i], x[i + half]); dir +1
 * rotates forward, -1 back (the transpose: backward's). */
static inline void rot_f32(float *x, const float *c, const float *s, int half, int dir)
{
    float *y = x + half;
    if (dir > 0)
        for (int i = 0; i < half; i++) {
            float a = x[i], b = y[i];
            x[i] = a * c[i] - b * s[i];
            y[i] = b * c[i] + a * s[i];
        }
    else
        for (int i = 0; i < half; i++) {
            float a = x[i], b = y[i];
            x[i] = a * c[i] + b * s[i];
            y[i] = b * c[i] - a * s[i];
        }
}

static inline void rot_bf16(uint16_t *x, const float *c, const float *s, int half)
{
    uint16_t *y = x + half;
    for (int i = 0; i < half; i++) {
        float a = cpu_bf16_to_f32(x[i]), b = cpu_bf16_to_f32(y[i]);
        x[i] = cpu_f32_to_bf16(a * c[i] - b * s[i]);
        y[i] = cpu_f32_to_bf16(b * c[i] + a * s[i]);
    }
}

static void rope_rows(void *x, int ld, int nheads, int hs, const int *pos, const float *cs, int N, dt_dtype t,
                      int dir)
{
    int half = hs / 2;
    if (N <= 0 || nheads <= 0 || half <= 0) return;
    #pragma omp parallel for if ((size_t)N * nheads * hs > CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *c = cs + (size_t)pos[n] * hs, *s = c + half;
        for (int j = 0; j < nheads; j++) {
            size_t o = (size_t)n * ld + (size_t)j * hs;
            if (t == DT_BF16) rot_bf16((uint16_t *)x + o, c, s, half);
            else rot_f32((float *)x + o, c, s, half, dir);
        }
    }
}

void cpu_rope_forward(void *x, int ld, int nheads, int hs, const int *pos, const float *cs, int N, dt_dtype t)
{
    rope_rows(x, ld, nheads, hs, pos, cs, N, t, 1);
}

void cpu_rope_backward(float *dx, int ld, int nheads, int hs, const int *pos, const float *cs, int N)
{
    rope_rows(dx, ld, nheads, hs, pos, cs, N, DT_F32, -1);
}
