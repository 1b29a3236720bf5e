/* train.h — the worker: trains the job's model under its layout.
 * Reads RANK / WORLD_SIZE / LOCAL_RANK ... from the environment the agent set
 * (a lone process is rank 0 of 1). Returns a process exit status:
 * 0 done (or stopped by SIGTERM / SIGINT / SIGHUP / SIGUSR1 after saving a checkpoint), 2 invalid
 * job, 3 data error, 4 communication error, 5 non-finite loss, 6 checkpoint error
 * (a save failed, e.g. a full disk, or the checkpoint to resume from is corrupt),
 * 1 anything else. Documented in man/dtrun.1. */
#ifndef DTRUN_TRAIN_H
#define DTRUN_TRAIN_H

#include "lib/job/jobspec.h"

#include "lib/util/exit_codes.h"

int train_run(const job_spec *job);

#endif
