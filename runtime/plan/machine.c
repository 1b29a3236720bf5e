/* machine.c — resolve the machine a dry-run or plan is for (rules in plan.h). */
#include "runtime/plan/machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A whole positive number, or 0. */
static int positive(const char *s)
{
    if (!s || !*s) return 0;
    char *end;
    long x = strtol(s, &end, 10);
    return *end == 0 && x > 0 && x < (1 << 20) ? (int)x : 0;
}

/* "N" -> N, "MIN:MAX" -> MAX (the size a full allocation runs at), else 0. */
static int nnodes_of(const char *s)
{
    const char *colon = strchr(s, ':');
    return positive(colon ? colon + 1 : s);
}

int plan_machine_resolve(plan_machine *pm, const job_spec *job, const dryrun_opts *o, int for_plan,
                         char *err, size_t errlen)
{
    memset(pm, 0, sizeof *pm);
    const char *hw = o->hardware;
    if (!hw || !*hw) {
        pm->hw_defaulted = 1;
        /* train.device says where the run computes; auto (no device named)
         * guesses from what the job asks: fp32 is the CPU backend's */
        int cpu = job->train.device == DEVICE_CPU ||
                  (job->train.device == DEVICE_AUTO && (strcmp(job->launch.nproc_per_node, "cpu") == 0 ||
                                                        job->train.precision == PREC_FP32));
        hw = cpu ? "cpu" : "h100-sxm";
    }
    if (hw_load(&pm->hw, hw, err, errlen)) return -1;
    if (o->headroom.set) {
        pm->hw.headroom_fraction = o->headroom.fraction;
        pm->hw.headroom_bytes = o->headroom.bytes;
        pm->hw.headroom_origin = HW_HEADROOM_FLAG;
    }
    const job_parallel *par = &job->parallel;
    int world = par->dp * par->tp * par->pp * par->cp;
    pm->ranks_per_node = o->nproc_per_node > 0 ? o->nproc_per_node : positive(job->launch.nproc_per_node);
    if (pm->ranks_per_node == 0) {
        pm->ranks_per_node = pm->hw.gpus_per_node > 0 ? pm->hw.gpus_per_node : 1;
        if (!for_plan && pm->ranks_per_node > world) pm->ranks_per_node = world;
    }
    pm->nnodes = o->nnodes > 0 ? o->nnodes : nnodes_of(job->launch.nnodes);
    if (pm->nnodes == 0)
        pm->nnodes = for_plan ? 1 : (world + pm->ranks_per_node - 1) / pm->ranks_per_node;
    if (pm->hw.gpu && pm->ranks_per_node > pm->hw.gpus_per_node) {
        snprintf(err, errlen, "nproc_per_node %d is more than the %d GPUs per node of %s", pm->ranks_per_node,
                 pm->hw.gpus_per_node, pm->hw.name);
        return -1;
    }
    return 0;
}
