/* resume_hint.h — how to start otherwise when a checkpoint cannot be resumed.
 *
 * The end of a "cannot resume" line. It names another checkpoint only when one
 * would load: the newest committed step directory of checkpoint.dir, other than
 * the one that failed, that `usable` accepts (its index opens and its model is
 * the job's). A model mismatch is usually the same in every step of a
 * directory, so then it suggests "never" alone, instead of an older step that
 * fails the same way. */
#ifndef DTRUN_TRAIN_RESUME_HINT_H
#define DTRUN_TRAIN_RESUME_HINT_H

#include <stddef.h>

#include "lib/job/jobspec.h"

/* tried: what resume tried (checkpoint.dir, following `latest`, or a step
 * directory). Writes "to start otherwise, set checkpoint.resume to never" or
 * "..., or to DIR/step_000010 (the newest other checkpoint of this model)". */
void resume_hint(const job_spec *job, const char *tried, int (*usable)(const char *step_dir, void *ctx),
                 void *ctx, char *out, size_t n);

#endif
