/* checkpoint.h — the training loop's checkpoint policy: where a run resumes
 * from, when it saves, what a stop signal means. The format is runtime/ckpt;
 * what each rank writes and reads is runtime/worker/engine_ckpt.h.
 *
 * Resume (checkpoint.resume): "auto" loads DIR/latest when there is one (a fresh
 * start otherwise), "never" starts fresh, anything else is a checkpoint path (a
 * DIR with `latest`, or a step directory) that must load: a pin, where a new
 * launch starts from. A restart of the same run (the agent's, DTRUN_ATTEMPT >
 * 0) goes on from checkpoint.dir's latest instead when that is past the pin
 * and its own: saved by this run (its provenance's run id is this
 * TORCHELASTIC_RUN_ID) from the same pin. So a crash loses at most
 * checkpoint.every steps, pinned or not. The checkpoint may
 * come from any layout: each rank reads its slices under the current one. The
 * run continues at the saved step with the data of that step (batches are a
 * pure function of (seed, step)), so a resumed run is the uninterrupted one.
 * Rank 0 says in one line (stdout) where it resumes and what the job changed
 * since the checkpoint; a change that makes another run is refused
 * (resume_diff.h). A checkpoint at the run's last step means the run is
 * finished: a new launch trains nothing and writes nothing (train.c).
 *
 * Saves (checkpoint.dir set): after every `every` steps, at the end of training,
 * and at the step boundary after SIGTERM, SIGINT, SIGHUP or SIGUSR1 (Slurm's
 * --signal=USR1@90 before preemption; Ctrl-C; a closed terminal): then the
 * worker exits 0 without evaluating. Without checkpoint.dir, SIGTERM, SIGINT
 * and SIGHUP keep their default action and SIGUSR1 is reported and ignored
 * (nothing to save).
 *
 * Errors: DT_EXIT_CKPT (6) with one line: a corrupt or unreadable checkpoint
 * to resume from (the file and why: "checksum mismatch (corrupted shard)"), a
 * checkpoint of another model, a save that failed (e.g. a full disk; the line
 * says that the previous checkpoint is intact).
 *
 * Test hooks (environment):
 *   DTRUN_TEST_CKPT_DELAY_MS=N    every rank sleeps N ms after writing its file,
 *                                 before the commit (a window to crash in)
 *   DTRUN_TEST_CKPT_DELAY_STEP=S  ... only when saving step S
 *   DTRUN_TEST_STEP_DELAY_MS=N    every rank sleeps N ms after each step (so a
 *                                 test can kill a worker at a step of its choice)
 *   DTRUN_TEST_STOP_STEP=S        after step S, act as if SIGUSR1 came: save, exit 0
 *                                 (the first half of an interrupted run) */
#ifndef DTRUN_TRAIN_CHECKPOINT_H
#define DTRUN_TRAIN_CHECKPOINT_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "runtime/worker/engine.h"

#define CKPT_LOSS_TAIL 16

/* Where training stands: what a checkpoint records beyond the tensors. */
typedef struct {
    long step;          /* loop iterations done (updates + skipped steps) */
    long updates;       /* AdamW updates applied */
    double tail[CKPT_LOSS_TAIL];
    int n_tail;         /* the last losses, oldest first */
    char pinned[JOB_PATH_MAX]; /* the step directory checkpoint.resume: PATH names (""
                                  under auto): retention never deletes it (a new launch
                                  starts there again), the provenance records it */
    int finished;       /* a new launch found the run finished (the checkpoint holds
                           its last step): nothing loaded, nothing to train or write */
} train_progress;

void train_progress_add_loss(train_progress *p, double loss);

/* Collective. Applies checkpoint.resume: on a load, the engine holds the
 * checkpoint's parameters and optimizer state and *p its progress; *resumed =
 * 1. p->finished when the run is finished (rank 0 said so on stdout; nothing
 * was loaded). Otherwise *p is zero. */
int checkpoint_resume(engine *e, const job_spec *job, train_progress *p, int *resumed, char *err,
                      size_t errlen);

/* Collective, for generate / eval / classify: the weights that
 * checkpoint.resume names (or model.init_from's on a fresh start), without the
 * training's resume line, hint or data provenance check. */
int checkpoint_load_weights(engine *e, const job_spec *job, char *err, size_t errlen);

/* Before any worker starts (the launcher): the checkpoint that
 * checkpoint.resume names (or `latest` under auto) has a readable index whose
 * model is the job's, and the job changes nothing that makes another run
 * (resume_diff.h; allow: --allow-changes' list, or ""). DT_EXIT_OK, or
 * DT_EXIT_CKPT with one line naming the checkpoint and what differs. When the
 * checkpoint holds the run's last step (train.steps), the run is finished:
 * DT_EXIT_OK with a line saying so in `finished` ("" otherwise), and nothing
 * is to be started. Reads index.json only. */
int checkpoint_check_resume(const job_spec *job, const char *allow, char *finished, size_t flen, char *err,
                            size_t errlen);

/* Collective: saves step p->step to checkpoint.dir (which must be set). A step
 * that is already the latest checkpoint is not written again. */
int checkpoint_save(engine *e, const job_spec *job, const train_progress *p, char *err, size_t errlen);

/* Installs the SIGTERM / SIGINT / SIGHUP / SIGUSR1 handlers (see above). */
void checkpoint_signals_install(const job_spec *job);
/* The stop signal received (one of those four), or 0. */
int checkpoint_signal_pending(void);

/* Test hooks DTRUN_TEST_STEP_DELAY_MS and DTRUN_TEST_STOP_STEP (-1 when unset). */
void checkpoint_test_step_delay(void);
long checkpoint_test_stop_step(void);

#endif
