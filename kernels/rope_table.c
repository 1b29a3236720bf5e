/* rope_table.c — the RoPE table (rope_table.h): the angles, their cosines
 * and sines in double, each rounded to fp32 once. Double keeps the angle
 * p f_i exact to far below fp32's resolution at the positions of long
 * contexts (p up to 2^17: an fp32 product would be off by up to p 2^-24
 * radians), so the table is the function's correctly rounded values up to
 * libm's double error, on every backend alike. */
#include "kernels/rope_table.h"

#include <math.h>
#include <stdlib.h>

void dt_rope_table_host(float *cs, int max_pos, int hs, float theta)
{
    int half = hs / 2;
    if (max_pos <= 0 || half <= 0) return;
    double *f = malloc((size_t)half * sizeof(double));
    if (!f) return;
    for (int i = 0; i < half; i++) f[i] = pow((double)theta, -2.0 * i / hs);
    #pragma omp parallel for if ((size_t)max_pos * half > 16384)
    for (int p = 0; p < max_pos; p++) {
        float *c = cs + (size_t)p * hs, *s = c + half;
        for (int i = 0; i < half; i++) {
            double a = (double)p * f[i];
            c[i] = (float)cos(a);
            s[i] = (float)sin(a);
        }
    }
    free(f);
}
