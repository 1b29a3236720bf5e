/* jobspec_layout.c — the layout rules shared by the job checks and the worker
 * (jobspec_layout.h). */
#include "lib/job/jobspec_layout.h"

#include <stdio.h>
#include <string.h>

#include "lib/job/jobspec_check.h"
#include "lib/job/jobspec_fields.h"

int job_layout_check_pipeline(pp_schedule_kind kind, int p, int m, int v, char *msg, size_t n)
{
    if (kind != PP_GPIPE && kind != PP_1F1B && kind != PP_INTERLEAVED) {
        snprintf(msg, n, "parallel.pp_schedule: unknown kind %d", (int)kind);
        return -1;
    }
    if (p < 1 || m < 1 || v < 1 || (long long)p * m * v > JOB_PP_MAX_WORK) {
        snprintf(msg, n, "parallel.pp %d x microbatches %d x virtual_stages %d is out of range (each >= 1, "
                         "product <= %d)", p, m, v, JOB_PP_MAX_WORK);
        return -1;
    }
    if (kind != PP_INTERLEAVED && v != 1) {
        snprintf(msg, n, "parallel.virtual_stages %d needs pp_schedule: interleaved (the schedule is %s)", v,
                 job_pp_schedule_name(kind));
        return -1;
    }
    if (kind == PP_INTERLEAVED && m % p != 0) {
        int up = (m / p + 1) * p, down = m / p * p;
        if (down > 0)
            snprintf(msg, n, "parallel.microbatches %d must be a multiple of parallel.pp %d with pp_schedule "
                             "interleaved (micro-batches go through each chunk in groups of pp); try %d or %d",
                     m, p, up, down);
        else
            snprintf(msg, n, "parallel.microbatches %d must be a multiple of parallel.pp %d with pp_schedule "
                             "interleaved (micro-batches go through each chunk in groups of pp); try %d",
                     m, p, up);
        return -1;
    }
    return 0;
}

int job_layout_check_world(const job_parallel *par, int world, const char *world_from, char *msg, size_t n)
{
    long long need = (long long)par->dp * par->tp * par->pp * par->cp;
    if (need == world) return 0;
    char cp[32] = "";
    if (par->cp > 1) snprintf(cp, sizeof cp, " x cp %d", par->cp);
    snprintf(msg, n, "parallel.dp %d x tp %d x pp %d%s = %lld workers, but %d %s started (%s); make them equal%s",
             par->dp, par->tp, par->pp, cp, need, world, world == 1 ? "is" : "are", world_from,
             par->dp_auto ? "" : ", or set parallel.dp: auto");
    return -1;
}

int job_check_world(const job_spec *job, int world, const char *world_from, char *err, size_t errlen)
{
    char msg[512];
    if (job_layout_check_world(&job->parallel, world, world_from, msg, sizeof msg) == 0) return 0;
    const int blame[] = {FID_DP, FID_TP, FID_PP, FID_CP, -1};
    return job_fail_blame(job, blame, 5, msg, err, errlen);
}
