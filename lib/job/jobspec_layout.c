/* jobspec_layout.c — the layout rules shared by the job checks and the worker
 * (jobspec_layout.h). */
#include "lib/job/jobspec_layout.h"

#include <stdio.h>
#include <string.h>

#include "lib/job/jobspec_check.h"
#include "lib/job/jobspec_fields.h"

int job_layout_check_pipeline(pp_schedule_kind kind, int p, int m, int v, char *msg, size_t n)
{
    if (kind != PP_GPIPE && kind != PP_1F1B && kind != PP_INTERLEAVED && kind != PP_ZB_H1) {
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

int job_layout_check_zero_bubble(const job_parallel *par, recompute_kind rc, int *blame,
                                 char *msg, size_t n)
{
    const char *pre = "parallel.pp_schedule zb-h1 does not work with";
    if (par->sequence_parallel && par->tp > 1) {
        *blame = FID_SEQUENCE_PARALLEL;
        snprintf(msg, n, "%s sequence_parallel (its W pass would have to gather every layer's input rows over tp "
                         "again); turn sequence_parallel off or use pp_schedule: 1f1b", pre);
        return -1;
    }
    if (rc == RECOMPUTE_BLOCK || rc == RECOMPUTE_ELEMENTWISE) {
        *blame = FID_RECOMPUTE;
        snprintf(msg, n, "%s train.recompute: %s (its W pass would need the %s, rebuilt for B, a second time); use "
                         "recompute: selective or none", pre, rc == RECOMPUTE_BLOCK ? "block" : "elementwise",
                 rc == RECOMPUTE_BLOCK ? "each block's activations" : "norms' outputs");
        return -1;
    }
    int sharded = par->mode == SHARD_ZERO2 || par->mode == SHARD_FSDP || par->mode == SHARD_HSDP;
    if (sharded && (par->dp > 1 || par->dp_auto)) {
        *blame = FID_MODE;
        snprintf(msg, n, "%s parallel.mode %s over dp > 1 (it binds a unit's gradient buffer for one backward, and "
                         "other micro-batches run between a B and its W); use mode none or zero1", pre, job_shard_mode_name(par->mode));
        return -1;
    }
    return 0;
}

int job_layout_check_graphs(const job_spec *job, int *blame, char *msg, size_t n)
{
    const job_parallel *par = &job->parallel;
    if (!job->train.cuda_graphs) return 0;
    if (par->pp > 1) {
        *blame = FID_PP;
        snprintf(msg, n, "train.cuda_graphs does not work with parallel.pp %d (the pipeline executor takes each "
                         "micro-batch's inputs from the host and reads its loss back as its schedule goes); set "
                         "parallel.pp: 1 (dp, tp or cp instead) or train.cuda_graphs: false", par->pp);
        return -1;
    }
    if (job->train.offload) {
        *blame = FID_OFFLOAD;
        snprintf(msg, n, "train.cuda_graphs does not work with train.offload (the offloaded update runs on the host "
                         "between copies, which a recorded step cannot hold); turn one of them off");
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
    snprintf(msg, n, "parallel.dp %d x tp %d x pp %d%s = %lld worker%s, but %d %s started (%s); make them equal%s",
             par->dp, par->tp, par->pp, cp, need, need == 1 ? "" : "s", world, world == 1 ? "is" : "are", world_from,
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
