/* fit.c — the dry-run's memory verdict for a launch (plan.h: plan_fit_check):
 * the same estimate `dtrun --dry-run` prints, so the refusal and the dry-run
 * can never disagree. */
#include <stdio.h>
#include <string.h>

#include "runtime/plan/estimate.h"
#include "runtime/plan/machine.h"
#include "runtime/plan/plan.h"

int plan_fit_check(const job_spec *job, const dryrun_opts *o, char *verdict, size_t n)
{
    plan_machine pm;
    if (plan_machine_resolve(&pm, job, o, 0, verdict, n)) return -1;
    plan_estimate e;
    if (plan_estimate_memory(&e, job, &pm.hw, pm.nnodes, pm.ranks_per_node, verdict, n)) return -1;
    int fits = e.fits;
    if (!fits) {
        /* the OOM line the dry-run prints among its warnings */
        const char *line = "OOM";
        for (int i = 0; i < e.n_warnings; i++)
            if (!strncmp(e.warnings[i], "OOM", 3)) {
                line = e.warnings[i];
                break;
            }
        snprintf(verdict, n, "does not fit on %s: %s", pm.hw.name, line);
    }
    plan_estimate_free(&e);
    return fits;
}
