/* norm_dev.c — the global gradient norm and clipping where the ops keep the
 * numbers (ops.h, "the step without the host"): the engine's host arithmetic
 * (runtime/worker/engine.c: the norm summed tensor by tensor, the clipping
 * factor, the gradients scaled when it is not 1), as ops on scalars in
 * memory. Host memory here, so these are that arithmetic itself. */
#include <math.h>

#include "kernels/cpu/cpu.h"

void cpu_sumsq_add(double *acc, const float *p, size_t n) { *acc += cpu_sumsq(p, n); }

void cpu_scalar_add(double *acc, const double *x) { *acc += *x; }

void cpu_clip_scale(float *s, const double *sumsq, double clip) {
    double norm = sqrt(*sumsq);
    *s = clip > 0 && norm > clip ? (float)(clip / (norm + 1e-6)) : 1.0f;
}

void cpu_scale_dev(float *p, const float *s, size_t n) {
    if (*s != 1.0f) cpu_scale(p, *s, n);
}
