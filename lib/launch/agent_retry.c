/* agent_retry.c — which failures a restart can fix.
 *
 * --max-restarts exists for what a new attempt can change: a crashed or killed
 * worker, a lost peer or node, a communication error. Some exits say the same
 * thing every time: the built-in trainer's invalid job (2), data (3),
 * non-finite loss (5: a restart resumes from the last checkpoint and replays
 * the same batches, a pure function of (seed, step), so it diverges again) and
 * checkpoint errors (6); and for any program, one that cannot be executed (126)
 * or found (127). Restarting those only delays the message (man/dtrun.1, EXIT
 * STATUS, marks them). A program's other codes are its own: they are retried. */
#include "lib/launch/agent_impl.h"

#include <stddef.h>

const char *agent_exit_deterministic(const agent *ag, int exit_status)
{
    int builtin = ag->o->job_path != NULL;
    switch (exit_status) {
    case DT_EXIT_USAGE: return builtin ? "an invalid job or environment" : NULL;
    case DT_EXIT_DATA: return builtin ? "a data error" : NULL;
    case DT_EXIT_NONFINITE: return builtin ? "a non-finite loss, which a restart from the last checkpoint replays" : NULL;
    case DT_EXIT_CKPT: return builtin ? "a checkpoint error" : NULL;
    case DT_EXIT_NOEXEC: return "a program that cannot be executed";
    case DT_EXIT_NOTFOUND: return "a program that was not found";
    default: return NULL;
    }
}
