/* train.c — the worker's training loop.
 *
 * The engine (runtime/worker/engine.h) does one optimizer step under the job's
 * layout; this loop owns the policy around it: the learning-rate schedule, what a
 * non-finite loss means, when to evaluate, what to log.
 *
 * Logs. Rank 0 writes the job's metrics file (metrics.h). With log.metrics set,
 * EVERY rank also writes its own `STEM.rankN.jsonl` next to it (STEM = the
 * metrics path without ".jsonl"), one line per step:
 *   {"step":S,"rank":R,"layout":"dp=2 tp=1 pp=1 fsdp",
 *    "time":{"wall":s,"compute":s,"comm":s,"idle":s},
 *    "bubble":f,"bubble_ideal":f,            (pipelines only)
 *    "mem_peak":{"params":B,"grads":B,"optimizer":B,"activations":B,"buffers":B,"total":B},
 *    "moe_rows":{"min":R,"max":R,"staged":R} (model.moe: the fewest and most rows that
 *    arrived at one MoE block's experts in a micro-batch, the ep staging's rows),
 *    "acts_kept":{"attn_in":B,"mlp_in":B},"rss_peak":B}
 * time: where the step's wall time went (engine_times); bubble: the pipeline's
 * measured idle fraction of the step, next to the schedule's ideal
 * (p-1)/(v*m+p-1); mem_peak: the largest
 * bytes held per category since training started (account.h), total = the largest
 * sum at one moment; acts_kept: of the activations, the bytes one micro-batch's
 * blocks keep as inputs of attention and of the MLP (model_acts_kept; 0 in a
 * pipeline); rss_peak: the process's peak resident set (getrusage).
 *
 * Checkpoints, resume and stop signals: checkpoint.h. A resumed run appends to
 * the metrics files. Non-finite loss: the run stops (exit 5) with a line naming
 * the step and the ranks whose own loss went non-finite, or skips the step
 * (no update) with train.skip_nonfinite.
 *
 * DTRUN_DUMP_PARAMS=PATH: after training, rank 0 writes the whole model's final
 * parameters to PATH (engine_dump_params: raw float32 in parameter-spec order),
 * the same file under every layout, for the equivalence tests.
 * model.init_from (a fresh run): the loaded weights are evaluated first and
 * logged as step 0's validation loss.
 * DTRUN_DUMP_VAL=PATH: rank 0 writes the validation samples the final
 * evaluation ran over (engine_dump_val), for scripts/export_check.py. */
#include "runtime/train/train.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "lib/util/clock.h"
#include "runtime/data/data.h"
#include "runtime/env.h"
#include "runtime/worker/engine.h"
#include "runtime/worker/engine_ckpt.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/lr.h"
#include "runtime/train/metrics.h"
#include "runtime/train/mfu.h"

/* This rank's own JSONL file, or NULL when the job logs no metrics. */
static FILE *rank_log_open(const job_spec *job, int rank, int append)
{
    if (!job->log.metrics[0]) return NULL;
    char path[JOB_PATH_MAX + 32];
    size_t n = strlen(job->log.metrics);
    int stem = n > 6 && strcmp(job->log.metrics + n - 6, ".jsonl") == 0 ? (int)(n - 6) : (int)n;
    snprintf(path, sizeof path, "%.*s.rank%d.jsonl", stem, job->log.metrics, rank);
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f) fprintf(stderr, "dtrun: rank %d: %s: cannot write the rank's metrics\n", rank, path);
    return f;
}

static void rank_log_step(FILE *f, metrics *met, engine *e, int step)
{
    engine_times t;
    engine_take_times(e, &t);
    const account *a = engine_account(e);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* every rank's memory goes to its TensorBoard file (log.tensorboard) */
    metrics_log_memory(met, step, (double)acct_peak_total(a), (double)ru.ru_maxrss * 1024.0);
    if (!f) return;
    fprintf(f, "{\"step\":%d,\"rank\":%d,\"layout\":\"%s\",\"time\":{\"wall\":%.6f,\"compute\":%.6f,"
               "\"comm\":%.6f,\"idle\":%.6f},",
            step, engine_rank(e), engine_layout(e), t.wall_s, t.compute_s, t.comm_s, t.idle_s);
    if (t.bubble_ideal > 0) fprintf(f, "\"bubble\":%.4f,\"bubble_ideal\":%.4f,", t.bubble, t.bubble_ideal);
    fprintf(f, "\"mem_peak\":{");
    for (int c = 0; c < ACCT_COUNT; c++)
        fprintf(f, "\"%s\":%zu,", acct_category_name((acct_category)c), acct_peak(a, (acct_category)c));
    engine_comm_bytes sent = engine_bytes_sent(e);
    size_t attn_in, mlp_in;
    engine_acts_kept(e, &attn_in, &mlp_in);
    fprintf(f, "\"total\":%zu},", acct_peak_total(a));
    int moe_lo, moe_hi;
    size_t moe_staged;
    engine_moe_rows(e, &moe_lo, &moe_hi, &moe_staged);
    if (moe_hi > 0) fprintf(f, "\"moe_rows\":{\"min\":%d,\"max\":%d,\"staged\":%zu},", moe_lo, moe_hi, moe_staged);
    fprintf(f, "\"acts_kept\":{\"attn_in\":%zu,\"mlp_in\":%zu},\"rss_peak\":%ld,"
               "\"bytes_sent\":{\"tp\":%llu,\"dp\":%llu,\"pp\":%llu,\"cp\":%llu,\"ep\":%llu,\"edp\":%llu}}\n",
            attn_in, mlp_in, (long)ru.ru_maxrss * 1024L, sent.tp, sent.dp, sent.pp, sent.cp,
            sent.ep, sent.edp);
    fflush(f);
}

/* A step's loss is not finite: say on which ranks it went wrong (every rank
 * calls this: the loss is the same everywhere). */
static int report_nonfinite(engine *e, int world, int step, double loss, int skip, char *err, size_t errlen)
{
    int *bad = calloc((size_t)world, sizeof(int));
    if (!bad) {
        snprintf(err, errlen, "rank %d: out of memory", engine_rank(e));
        return DT_EXIT_FAIL;
    }
    int rc = engine_gather_flags(e, !isfinite(engine_local_loss(e)), bad, err, errlen);
    if (rc == DT_EXIT_OK && engine_rank(e) == 0) {
        char ranks[256] = "";
        size_t used = 0;
        for (int r = 0; r < world && used < sizeof ranks - 16; r++)
            if (bad[r]) used += (size_t)snprintf(ranks + used, sizeof ranks - used, "%s%d", used ? ", " : "", r);
        fprintf(stderr, "dtrun: rank 0: step %d: the loss is %s (%s%s): %s\n", step,
                isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf",
                used ? "non-finite on rank " : "the sum over ranks is not finite", ranks,
                skip ? "skipping the step (train.skip_nonfinite)"
                     : "stopping (exit 5; train.skip_nonfinite: true skips such steps)");
    }
    /* Stopping: the other ranks exit only once rank 0's line is written, or the
     * agent, seeing their exit first, could stop rank 0 before it says why. */
    if (rc == DT_EXIT_OK && !skip) rc = engine_gather_flags(e, 0, bad, err, errlen);
    free(bad);
    return rc;
}

/* What stopped the run, as the stop line names it (sig < 0: the test hook). */
static const char *stop_signal_name(int sig)
{
    switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case 0: return "a stop signal on another rank";
    default: return sig < 0 ? "DTRUN_TEST_STOP_STEP" : "a stop signal";
    }
}

/* A stop signal at a step boundary: every rank agrees whether one came (they
 * may see it a few instructions apart); then, with checkpoint.dir, all save and
 * stop. Returns 1 when the loop should end with *rc. */
static int stop_requested(engine *e, const job_spec *job, const train_progress *pg, int *rc, char *err,
                          size_t errlen)
{
    int sig = checkpoint_signal_pending(), any = 0;
    if (!job->checkpoint.dir[0]) {
        /* only SIGUSR1 is caught then: nothing to save, training goes on */
        static int told;
        if (sig && !told && engine_rank(e) == 0)
            fprintf(stderr, "dtrun: SIGUSR1: no checkpoint.dir to save to; training goes on\n");
        told |= sig != 0;
        return 0;
    }
    if (!sig && pg->step == checkpoint_test_stop_step()) sig = -1;
    if ((*rc = engine_any(e, sig != 0, &any, err, errlen)) != DT_EXIT_OK) return 1;
    if (!any) return 0;
    if ((*rc = checkpoint_save(e, job, pg, err, errlen)) != DT_EXIT_OK) return 1;
    if (engine_rank(e) == 0) /* what the run did, as asked: stdout */
        metrics_say("dtrun: %s: stopped at step %ld with a checkpoint in %s; the same command resumes",
                    stop_signal_name(sig), pg->step, job->checkpoint.dir);
    return 1;
}

/* After a step's batches were read, before its update (and after an evaluation
 * that found one): a data file that changed under the run (data_fault: a lost
 * page, a token id out of the vocabulary, a file modified in place) stops every
 * rank at the step before, with a checkpoint of that state when there is a
 * place for one, and exit status 3. One tiny collective per step, for
 * file-backed data only. */
static int data_changed(engine *e, const job_spec *job, const train_progress *pg, int *rc, char *err,
                        size_t errlen)
{
    if (job->data.kind == DATA_SYNTHETIC) return 0;
    char why[1200] = "";
    int mine = data_fault(why, sizeof why), any = 0;
    if ((*rc = engine_any(e, mine, &any, err, errlen)) != DT_EXIT_OK) return 1;
    if (!any) return 0;
    char saved[900] = "no checkpoint.dir to save to";
    if (job->checkpoint.dir[0]) {
        char cerr[1024];
        if (checkpoint_save(e, job, pg, cerr, sizeof cerr) == DT_EXIT_OK)
            snprintf(saved, sizeof saved, "step %ld saved to %.600s; the same command resumes once the data is whole",
                     pg->step, job->checkpoint.dir);
        else
            snprintf(saved, sizeof saved, "the checkpoint failed: %.700s", cerr);
    }
    if (mine) snprintf(err, errlen, "rank %d: %.900s; %.900s", engine_rank(e), why, saved);
    else snprintf(err, errlen, "rank %d: a data file changed on another rank (see its message); %.900s", engine_rank(e),
                  saved);
    *rc = DT_EXIT_DATA;
    return 1;
}

/* The job as this world runs it: `dp: auto` resolved from WORLD_SIZE. */
static job_spec *job_for_world(const job_spec *job, char *err, size_t errlen)
{
    job_spec *w = malloc(sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *w = *job;
    if (job_resolve_world(w, dt_env_get()->world_size, err, errlen) != 0) {
        free(w);
        return NULL;
    }
    return w;
}

static int train_job(const job_spec *job);

/* Every variable the worker reads, checked before anything else happens: one
 * line per bad one, then exit 2. */
static int env_check(void)
{
    dt_env env;
    char err[4096];
    if (dt_env_load(&env, err, sizeof err) == 0) return 0;
    for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n")) fprintf(stderr, "dtrun: %s\n", line);
    return -1;
}

int train_run(const job_spec *file_job)
{
    char err[2048];
    /* stdout carries the run's lines (steps, evaluations, saves, the summary),
     * stderr warnings and errors; through the agent's pipe each line goes as
     * it is written */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (env_check() != 0) return DT_EXIT_USAGE;
    job_spec *job = job_for_world(file_job, err, sizeof err);
    if (!job) {
        fprintf(stderr, "dtrun: %s\n", err);
        return DT_EXIT_USAGE;
    }
    int rc = train_job(job);
    free(job);
    return rc;
}

static int train_job(const job_spec *job)
{
    char err[2048];
    int rc;
    checkpoint_signals_install(job);
    engine *e = engine_create(job, &rc, err, sizeof err);
    if (!e) {
        fprintf(stderr, "dtrun: %s\n", err);
        return rc;
    }
    int rank = engine_rank(e);
    train_progress pg;
    int resumed = 0;
    rc = checkpoint_resume(e, job, &pg, &resumed, err, sizeof err);
    if (rc != DT_EXIT_OK || pg.finished) { /* finished: not a byte written anywhere */
        if (rc != DT_EXIT_OK) fprintf(stderr, "dtrun: %s\n", err);
        engine_destroy(e);
        return rc;
    }
    metrics *met = metrics_open(job, rank, resumed, err, sizeof err);
    if (!met) {
        fprintf(stderr, "dtrun: %s\n", err);
        engine_destroy(e);
        return DT_EXIT_FAIL;
    }
    metrics_log_attempt(met, pg.step);
    int world = job->parallel.dp * job->parallel.tp * job->parallel.pp;
    if (rank == 0 && world > 1) printf("dtrun: layout %s (world %d)\n", engine_layout(e), world);
    FILE *rlog = rank_log_open(job, rank, resumed);

    const job_model *spec = &job->model;
    const job_checkpoint *ck = &job->checkpoint;
    double samples_per_step = (double)job->train.global_batch * (job_model_is_lm(spec) ? spec->seq_len : 1);
    /* MFU needs a peak: without a profile for the device the records carry none */
    mfu_basis mfu;
    char mfu_why[1024];
    int have_mfu = mfu_basis_for(&mfu, job, engine_device_name(e), engine_world_size(e),
                                 dt_env_get()->local_world_size, mfu_why, sizeof mfu_why) == 0;
    if (!have_mfu && rank == 0 && (job->log.metrics[0] || job->log.tensorboard[0]))
        printf("dtrun: note: the logs carry no MFU: %s\n", mfu_why);
    double loss = pg.n_tail ? pg.tail[pg.n_tail - 1] : NAN, val_loss = NAN, acc = -1;
    int done = (int)pg.step, first = done;
    /* DTRUN_TEST_NAN_STEP=S (tests): the loss of step S reads as NaN on every rank */
    long nan_step = dt_env_get()->test_nan_step;
    /* a fine-tune starts from weights worth measuring: their validation loss
     * is step 0's (nanoGPT's eval at iter 0), before any update */
    if ((job->model.init_from[0] || (job_lora_on(&job->model) && job->model.lora.init_from[0])) && !resumed) {
        rc = engine_evaluate(e, &val_loss, &acc, err, sizeof err);
        if (rc != DT_EXIT_OK) goto out;
        metrics_log_eval(met, 0, val_loss, acc);
    }
    engine_begin_training(e);
    engine_times setup;
    engine_take_times(e, &setup); /* the rank log's first step starts here */
    double t0 = clock_now_s();
    for (int step = (int)pg.step; step < job->train.steps; step++) {
        double ts = clock_now_s();
        rc = engine_grads(e, step, &loss, err, sizeof err);
        if (rc != DT_EXIT_OK) goto out;
        if (data_changed(e, job, &pg, &rc, err, sizeof err)) goto out;
        if (step + 1 == nan_step) loss = NAN;
        int updated = isfinite(loss);
        if (!updated) {
            rc = report_nonfinite(e, world, step + 1, loss, job->train.skip_nonfinite, err, sizeof err);
            if (rc != DT_EXIT_OK) goto out;
            if (!job->train.skip_nonfinite) {
                rc = DT_EXIT_NONFINITE;
                goto out;
            }
        } else {
            double lr = lr_at(&job->train, step), norm;
            rc = engine_update(e, step, lr, &norm, err, sizeof err);
            if (rc != DT_EXIT_OK) goto out;
            done = step + 1;
            pg.updates++;
            train_progress_add_loss(&pg, loss);
            double te = clock_now_s();
            rank_log_step(rlog, met, e, done);
            const engine_moe *em = engine_moe_last(e);
            metrics_moe mm = em ? (metrics_moe){em->layers, em->experts, em->layer, em->chosen, em->dropped,
                                                em->aux_loss}
                                : (metrics_moe){0};
            metrics_step ms = {.step = done, .loss = loss, .lr = lr, .grad_norm = norm,
                               .samples_per_s = samples_per_step / (te - ts), .elapsed = te - t0,
                               .mfu = have_mfu ? mfu_of(&mfu, te - ts) : -1, .moe = em ? &mm : NULL};
            metrics_log_step(met, &ms);
        }
        pg.step = step + 1;
        checkpoint_test_step_delay();
        if (ck->dir[0] && ck->every > 0 && pg.step % ck->every == 0 && pg.step < job->train.steps &&
            (rc = checkpoint_save(e, job, &pg, err, sizeof err)) != DT_EXIT_OK)
            goto out;
        if (stop_requested(e, job, &pg, &rc, err, sizeof err)) goto out;
        if (updated && job->train.eval_every > 0 && done % job->train.eval_every == 0 && done < job->train.steps) {
            rc = engine_evaluate(e, &val_loss, &acc, err, sizeof err);
            if (rc == DT_EXIT_DATA) data_changed(e, job, &pg, &rc, err, sizeof err); /* saves the step */
            if (rc != DT_EXIT_OK) goto out;
            metrics_log_eval(met, done, val_loss, acc);
            engine_take_times(e, &setup); /* evaluation is not the next step's time */
        }
    }
    /* the final checkpoint before anything else can fail */
    if (ck->dir[0] && (rc = checkpoint_save(e, job, &pg, err, sizeof err)) != DT_EXIT_OK) goto out;
    rc = engine_evaluate(e, &val_loss, &acc, err, sizeof err);
    if (rc == DT_EXIT_DATA) data_changed(e, job, &pg, &rc, err, sizeof err);
    if (rc != DT_EXIT_OK) goto out;
    metrics_log_eval(met, done, val_loss, acc);
    metrics_summary(met, done, loss, val_loss, acc, clock_now_s() - t0, samples_per_step * (done - first));
    const dt_env *env = dt_env_get();
    if (env->dump_params[0]) rc = engine_dump_params(e, env->dump_params, err, sizeof err);
    if (rc == DT_EXIT_OK && env->dump_val[0] && rank == 0) rc = engine_dump_val(e, env->dump_val, err, sizeof err);
out:
    /* --trace: every rank's part, merged by rank 0 (also after a stop that saved a checkpoint) */
    if (rc == DT_EXIT_OK) rc = engine_trace_finish(e, err, sizeof err);
    if (rc != DT_EXIT_OK && rc != DT_EXIT_NONFINITE) fprintf(stderr, "dtrun: %s\n", err);
    if (rlog) fclose(rlog);
    metrics_close(met);
    engine_destroy(e);
    return rc;
}
