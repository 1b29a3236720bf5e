/* preflight.h — what the launcher checks of a training job before it spawns a
 * single worker, so that what a worker would only find after the launch is one
 * line at once, with a documented exit status (dtrun(1)):
 *   paths       data files readable (3), the resume checkpoint present, the
 *               checkpoint directory and log files writable (6, 2);
 *   data        each data file's header (3; data_check_files: headers only);
 *   resume      the checkpoint's model is the job's and the job changes nothing
 *               that makes another run (6), from its index only; a checkpoint
 *               at the last step means the run is finished;
 *   memory      the dry-run's verdict on this machine: a job it says does not
 *               fit is refused (2) unless check_fit is 0 (--no-fit-check);
 *   locks       one run per checkpoint.dir and per log.metrics (2), held until
 *               preflight_release (run_lock.h).
 * (The layout against the launch is lib/launch/launch_check.h's.) */
#ifndef DTRUN_PREFLIGHT_H
#define DTRUN_PREFLIGHT_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "lib/launch/run_lock.h"

typedef struct {
    int nproc_per_node, nnodes; /* what this launch starts (nnodes: the largest) */
    int take_locks;             /* this agent speaks for the run: one node, or node rank 0 */
    int check_fit;              /* 0: --no-fit-check */
    const char *hardware;       /* --hardware NAME|PATH, or NULL: the cpu profile (this host's
                                   memory) when the workers compute on the CPU; on GPUs
                                   without --hardware there is no memory check */
    int on_gpu;                 /* the workers compute on GPUs */
    const char *allow_changes;  /* --allow-changes' list, or NULL (resume_diff.h) */
} preflight_opts;

typedef struct {
    run_lock *ckpt_dir, *metrics;
} preflight_locks;

/* DT_EXIT_OK with the locks held, or an exit status with one line in err
 * ("FILE:LINE:COL: what" where a key is to blame). DT_EXIT_OK with a line in
 * `finished` (else "") when the resume checkpoint holds the run's last step:
 * nothing to start, no lock taken. */
int preflight_job(const job_spec *job, const preflight_opts *o, preflight_locks *locks, char *finished, size_t flen,
                  char *err, size_t errlen);

void preflight_release(preflight_locks *locks);

#endif
