/* machine.h — which hardware and how many nodes and ranks per node a dry-run or a
 * plan is for: the flags first, then the job's launch section, then the profile
 * (rules in plan.h). */
#ifndef DTRUN_PLAN_MACHINE_H
#define DTRUN_PLAN_MACHINE_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "runtime/plan/hardware.h"
#include "runtime/plan/plan.h"

typedef struct {
    hw_profile hw;
    int hw_defaulted;    /* no --hardware: the default rule chose it */
    int nnodes;
    int ranks_per_node;
} plan_machine;

/* for_plan: nnodes defaults to 1 and ranks per node are not capped by the job's
 * world. 0, or -1 with one line in err. */
int plan_machine_resolve(plan_machine *pm, const job_spec *job, const dryrun_opts *o, int for_plan,
                         char *err, size_t errlen);

#endif
