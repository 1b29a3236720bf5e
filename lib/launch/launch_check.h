/* launch_check.h — what the launcher checks of a job against its own options
 * before it spawns anything. */
#ifndef DTRUN_LAUNCH_CHECK_H
#define DTRUN_LAUNCH_CHECK_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "lib/launch/launch_opts.h"

/* The job's dp x tp x pp against the workers this launch starts: nproc (after
 * launch_opts_finish) x nnodes. `cli_set` is o->set before the job's launch
 * section was merged, so the message names the flag or the key that set each
 * number. Elastic MIN:MAX: some node count in range must fit (dp: auto: the
 * largest, as the dry-run plans it). 0, or -1 with "FILE:LINE:COL: what". */
int launch_check_world(const launch_opts *o, unsigned cli_set, const job_spec *job, char *err, size_t errlen);

#endif
