/* lr.h — learning-rate schedule: linear warmup, then cosine / linear decay to
 * min_lr, or constant. Pure function of the step (0-based). */
#ifndef DTRUN_LR_H
#define DTRUN_LR_H

#include "lib/job/jobspec.h"

double lr_at(const job_train *t, int step);

#endif
