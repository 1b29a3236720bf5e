/* lr.c — see lr.h. Warmup ramps (step+1)/warmup so step 0 already moves. */
#include "runtime/train/lr.h"

#include <math.h>

double lr_at(const job_train *t, int step)
{
    if (t->warmup > 0 && step < t->warmup) return t->lr * (step + 1) / t->warmup;
    if (t->schedule == LR_CONSTANT) return t->lr;
    int decay_steps = t->steps - t->warmup;
    if (decay_steps <= 1) return t->lr;
    double frac = (double)(step - t->warmup) / (decay_steps - 1);
    if (frac > 1.0) frac = 1.0;
    double coeff = t->schedule == LR_COSINE ? 0.5 * (1.0 + cos(M_PI * frac)) : 1.0 - frac;
    return t->min_lr + coeff * (t->lr - t->min_lr);
}
