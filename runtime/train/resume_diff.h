/* resume_diff.h — what a resume changes: the job a checkpoint was trained with
 * (its index's "job": the resolved YAML the run saved) against the job now,
 * key by key, so that a resume says what it does and refuses what would make
 * it another run.
 *
 * Every key of the job file is of one kind (by its section, with the
 * exceptions named):
 *   run      what is trained: model.* (the shape: another shape cannot load at
 *            all), data.*, and the optimizer's recipe: train.global_batch, lr,
 *            min_lr, warmup, schedule, weight_decay, beta1, beta2, eps,
 *            grad_clip, seed. A change is refused unless the job's
 *            checkpoint.allow_changes or the command line's --allow-changes
 *            names it (or says all): Megatron refuses a scheduler that differs
 *            from the checkpoint's unless --override-opt_param-scheduler.
 *   steps    train.steps: the run grows (or ends sooner); allowed.
 *   layout   parallel.* and train.micro_batch: the same run under another
 *            layout (each rank reads its slices: resharding); allowed.
 *   compute  how the same run computes: train.precision, grad_dtype, device,
 *            threads, recompute, offload, cuda_graphs, eval_every,
 *            eval_batches, skip_nonfinite, model.attention,
 *            model.head_chunk_rows; allowed (the checkpoint holds fp32
 *            masters, which continue under either precision).
 *   ignored  checkpoint.*, log.*, launch.* (where things go), model.preset
 *            (its shape is compared), model.init_from (a resume loads the
 *            checkpoint's weights, not those).
 * Every change but the ignored ones is named in the line, "KEY old -> new". */
#ifndef DTRUN_RESUME_DIFF_H
#define DTRUN_RESUME_DIFF_H

#include <stddef.h>

#include "lib/job/jobspec.h"

typedef struct {
    char changed[2048];  /* every change: "train.steps 20 -> 40, train.lr 0.01 -> 0.02 (allowed)"; "" = none */
    char refused[1536];  /* the run changes not allowed: "train.lr 0.01 -> 0.02"; "" = none */
    char refused_keys[512]; /* their keys, "train.lr,train.seed": the override to name */
    int n_changed, n_refused;
} resume_diff;

/* Compares the checkpoint's job (saved_yaml; "" when the checkpoint records
 * none, from a dtrun before it did: nothing to compare) with `now`; `allow`
 * is --allow-changes' list ("" = none), added to now's
 * checkpoint.allow_changes. 0, or -1 with why when the saved job does not
 * load (a checkpoint of another dtrun version). */
int resume_diff_jobs(const char *saved_yaml, const job_spec *now, const char *allow, resume_diff *out, char *err,
                     size_t errlen);

/* The refusal, one line without "dtrun: ": "cannot resume from CKPT: train.lr
 * 0.01 -> 0.02 makes another run than the checkpoint's (--allow-changes=...
 * or checkpoint.allow_changes: [...] resumes with it; ...)". */
void resume_diff_refusal(const resume_diff *d, const char *ckpt_path, char *out, size_t n);

#endif
