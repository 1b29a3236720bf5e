/* plan.h — `dtrun --dry-run` and `dtrun --plan`: what the command layer calls.
 *
 *   dtrun --dry-run job.yaml [--nnodes N] [--nproc-per-node G] [--hardware NAME|PATH]
 *                            [--format text|json]
 *   dtrun --plan    job.yaml --nnodes N --nproc-per-node G --hardware NAME [--top K]
 *                            [--headroom 5%|4GiB] [--format text|json]
 *
 * Nothing is started: both are pure computations over the job, the hardware
 * profile (configs/hardware/NAME.yaml) and the same sizing functions and pipeline
 * schedules the workers use (runtime/parallel/sizes.h, pp_schedule.h).
 *
 * Which machine, when a flag is missing:
 *   hardware        cpu when train.device is cpu; h100-sxm when it is cuda; with
 *                   device auto, cpu when launch.nproc_per_node is "cpu" or
 *                   train.precision is fp32 (the CPU backend's precision), else
 *                   h100-sxm
 *   nproc_per_node  launch.nproc_per_node when it is a number, else the profile's
 *                   gpus_per_node (dry-run: never more than the job's world)
 *   nnodes          launch.nnodes when it is a number (N:M takes M), else
 *                   dry-run: enough nodes for dp x tp x pp; plan: 1
 * man/dtrun-dryrun.txt describes the output. */
#ifndef DTRUN_PLAN_H
#define DTRUN_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "lib/job/jobspec.h"
#include "lib/util/headroom.h"

typedef enum { DRYRUN_TEXT = 0, DRYRUN_JSON } dryrun_format;

typedef struct {
    int nnodes;            /* 0: see above */
    int nproc_per_node;    /* 0: see above */
    const char *hardware;  /* profile name or path; NULL: see above */
    dryrun_format format;
    int top;               /* --plan: how many layouts to print; 0: 10 */
    int exhaustive;        /* --plan: simulate every layout that fits, not only those
                              whose lower bound could reach the top, and estimate every
                              offload retry (plan_offload_floor unused) (tests compare) */
    dt_headroom headroom;  /* memory kept free on each rank; unset: the profile's
                              headroom_percent (--plan proposes only layouts that
                              leave it; the dry-run warns when a stage eats into it) */
} dryrun_opts;

/* Exit statuses (documented in dtrun(1)): 0 printed (an OOM or other warning is
 * printed, not an error), DT_EXIT_USAGE (2) for a bad profile, flag or a job the
 * estimate cannot lay out (err holds one line), 1 for an internal failure. */
int dryrun_run(const job_spec *job, const dryrun_opts *o, FILE *out, char *err, size_t errlen);

/* Searches dp x tp x pp (tp within a node), mode, micro_batch, schedule and
 * recompute for nnodes x nproc_per_node ranks, drops what does not fit and prints
 * the `top` best by estimated throughput, each with why it wins or loses. A
 * layout fits when every rank keeps the headroom free besides what it needs.
 * The job's model, global batch and precision are kept. Same exit statuses; 2 also
 * when nothing fits. */
int plan_run(const job_spec *job, const dryrun_opts *o, FILE *out, char *err, size_t errlen);

/* The dry-run's memory verdict, for the launcher before it spawns: 1 when every
 * pipeline stage fits the memory a rank has (o picks the machine as for the
 * dry-run), 0 when not, with the dry-run's OOM line in verdict ("does not fit on
 * cpu: OOM on pipeline stage 0: 30.30 GB needed, 25.30 GB on the device (...)"),
 * -1 when it cannot be estimated (why in verdict). */
int plan_fit_check(const job_spec *job, const dryrun_opts *o, char *verdict, size_t n);

#endif
