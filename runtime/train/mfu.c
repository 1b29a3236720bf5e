/* mfu.c — see mfu.h. */
#include "runtime/train/mfu.h"

#include <stdio.h>
#include <string.h>

#include "runtime/env.h"
#include "runtime/model/model.h"
#include "runtime/plan/hardware.h"

int mfu_basis_for(mfu_basis *b, const job_spec *job, const char *device_name, int world,
                  int ranks_per_node, char *why, size_t whylen)
{
    memset(b, 0, sizeof *b);
    const char *named = dt_env_get()->hardware;
    const char *what = named[0] ? named : hw_profile_for_device(device_name);
    if (!what) {
        snprintf(why, whylen, "no hardware profile describes '%s' (--hardware NAME gives one)", device_name);
        return -1;
    }
    hw_profile hw;
    char err[1024];
    if (hw_load(&hw, what, err, sizeof err) != 0) {
        snprintf(why, whylen, "%s", err);
        return -1;
    }
    int per_node = ranks_per_node > 0 ? ranks_per_node : world;
    b->devices = hw.gpu ? world : (world + per_node - 1) / per_node;
    b->peak = hw_peak(&hw, job->train.precision == PREC_BF16) * b->devices;
    if (!(b->peak > 0)) {
        snprintf(why, whylen, "hardware profile %s gives no %s peak", hw.name, job_precision_name(job->train.precision));
        return -1;
    }
    snprintf(b->profile, sizeof b->profile, "%s", hw.name);
    b->step_flops = model_flops_per_sample(&job->model, RECOMPUTE_NONE) * (double)job->train.global_batch;
    return 0;
}

double mfu_of(const mfu_basis *b, double step_seconds)
{
    return b->peak > 0 && step_seconds > 0 ? b->step_flops / step_seconds / b->peak : -1;
}
