/* preflight.c — the launcher's checks of a job before any worker starts
 * (preflight.h). Each check is its owner's function: the paths lib/job's, the
 * resume the checkpoint policy's, the memory the dry-run's, the locks the
 * launcher's; this file only orders them and maps them to exit statuses. */
#include "runtime/train/preflight.h"

#include <stdio.h>
#include <string.h>

#include "runtime/ckpt/ckpt.h"
#include "runtime/data/data.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include "runtime/train/checkpoint.h"

static int check_memory(const job_spec *job, const preflight_opts *o, char *err, size_t errlen)
{
    if (!o->check_fit || (o->on_gpu && !o->hardware)) return DT_EXIT_OK;
    dryrun_opts d = {.nnodes = o->nnodes, .nproc_per_node = o->nproc_per_node,
                     .hardware = o->hardware ? o->hardware : "cpu"};
    char verdict[1024];
    int fits = plan_fit_check(job, &d, verdict, sizeof verdict);
    if (fits == 1) return DT_EXIT_OK;
    if (fits < 0) {
        snprintf(err, errlen, "%s: memory check: %s (--no-fit-check skips it)", job->path, verdict);
        return DT_EXIT_USAGE;
    }
    snprintf(err, errlen, "%s: %s; refused before starting (dtrun --dry-run shows the estimate; --no-fit-check "
                          "starts it anyway)", job->path, verdict);
    return DT_EXIT_USAGE;
}

static int take_locks(const job_spec *job, preflight_locks *locks, char *err, size_t errlen)
{
    char why[1024];
    int busy;
    if (job->checkpoint.dir[0] &&
        !(locks->ckpt_dir = run_lock_take("checkpoint.dir", job->checkpoint.dir, 1, &busy, why, sizeof why))) {
        snprintf(err, errlen, "%s: %s", job->path, why);
        return busy ? DT_EXIT_USAGE : DT_EXIT_CKPT;
    }
    if (job->log.metrics[0] &&
        !(locks->metrics = run_lock_take("log.metrics", job->log.metrics, 0, &busy, why, sizeof why))) {
        snprintf(err, errlen, "%s: %s", job->path, why);
        preflight_release(locks);
        return DT_EXIT_USAGE;
    }
    return DT_EXIT_OK;
}

int preflight_job(const job_spec *job, const preflight_opts *o, preflight_locks *locks, char *finished, size_t flen,
                  char *err, size_t errlen)
{
    memset(locks, 0, sizeof *locks);
    int code = DT_EXIT_OK;
    /* what only --dry-run prices (model.mla) */
    const char *unsupported = model_unsupported(&job->model);
    if (unsupported) {
        snprintf(err, errlen, "%s: %s", job->path, unsupported);
        return DT_EXIT_USAGE;
    }
    if (job_check_paths(job, &code, err, errlen) != 0) return code;
    if (data_check_files(job, err, errlen) != 0) return DT_EXIT_DATA;
    if ((code = checkpoint_check_resume(job, o->allow_changes ? o->allow_changes : "", finished, flen, err,
                                        errlen)) != DT_EXIT_OK)
        return code;
    if (finished[0]) return DT_EXIT_OK; /* nothing to start: no lock, no memory check */
    if ((code = check_memory(job, o, err, errlen)) != DT_EXIT_OK) return code;
    if (o->take_locks && (code = take_locks(job, locks, err, errlen)) != DT_EXIT_OK) return code;
    /* with the lock held no other run writes there: a step directory without
     * its index is a save cut short (a full disk, a crash) and never loads */
    char removed[512];
    int n = locks->ckpt_dir ? ckpt_remove_incomplete(job->checkpoint.dir, removed, sizeof removed) : 0;
    if (n > 0)
        fprintf(stderr, "dtrun: %s: removed %d half-written step director%s left by an earlier run: %s\n",
                job->checkpoint.dir, n, n == 1 ? "y" : "ies", removed);
    return DT_EXIT_OK;
}

void preflight_release(preflight_locks *locks)
{
    run_lock_release(locks->ckpt_dir);
    run_lock_release(locks->metrics);
    locks->ckpt_dir = locks->metrics = NULL;
}
