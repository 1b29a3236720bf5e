/* train.c — the worker's training loop.
 *
 * The engine (runtime/parallel/engine.h) does one optimizer step under the job's
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
 *    "rss_peak":B}
 * time: where the step's wall time went (engine_times); bubble: the pipeline's
 * measured idle fraction of the step, next to the schedule's ideal
 * (p-1)/(v*m+p-1); mem_peak: the largest
 * bytes held per category since training started (account.h), total = the largest
 * sum at one moment; rss_peak: the process's peak resident set (getrusage).
 *
 * DTRUN_DUMP_PARAMS=PATH: after training, rank 0 writes the whole model's final
 * parameters to PATH (engine_dump_params: raw float32 in parameter-spec order),
 * the same file under every layout, for the equivalence tests. */
#include "runtime/train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "runtime/parallel/engine.h"
#include "runtime/train/lr.h"
#include "runtime/train/metrics.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* This rank's own JSONL file, or NULL when the job logs no metrics. */
static FILE *rank_log_open(const job_spec *job, int rank)
{
    if (!job->log.metrics[0]) return NULL;
    char path[JOB_PATH_MAX + 32];
    size_t n = strlen(job->log.metrics);
    int stem = n > 6 && strcmp(job->log.metrics + n - 6, ".jsonl") == 0 ? (int)(n - 6) : (int)n;
    snprintf(path, sizeof path, "%.*s.rank%d.jsonl", stem, job->log.metrics, rank);
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "dtrun: rank %d: %s: cannot write the rank's metrics\n", rank, path);
    return f;
}

static void rank_log_step(FILE *f, engine *e, int step)
{
    engine_times t;
    engine_take_times(e, &t);
    if (!f) return;
    const account *a = engine_account(e);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(f, "{\"step\":%d,\"rank\":%d,\"layout\":\"%s\",\"time\":{\"wall\":%.6f,\"compute\":%.6f,"
               "\"comm\":%.6f,\"idle\":%.6f},",
            step, engine_rank(e), engine_layout(e), t.wall_s, t.compute_s, t.comm_s, t.idle_s);
    if (t.bubble_ideal > 0) fprintf(f, "\"bubble\":%.4f,\"bubble_ideal\":%.4f,", t.bubble, t.bubble_ideal);
    fprintf(f, "\"mem_peak\":{");
    for (int c = 0; c < ACCT_COUNT; c++)
        fprintf(f, "\"%s\":%zu,", acct_category_name((acct_category)c), acct_peak(a, (acct_category)c));
    fprintf(f, "\"total\":%zu},\"rss_peak\":%ld}\n", acct_peak_total(a), (long)ru.ru_maxrss * 1024L);
    fflush(f);
}

int train_run(const job_spec *job)
{
    char err[1024];
    int rc;
    engine *e = engine_create(job, &rc, err, sizeof err);
    if (!e) {
        fprintf(stderr, "dtrun: %s\n", err);
        return rc;
    }
    int rank = engine_rank(e);
    metrics *met = metrics_open(job, rank, err, sizeof err);
    if (!met) {
        fprintf(stderr, "dtrun: %s\n", err);
        engine_destroy(e);
        return TRAIN_EXIT_FAIL;
    }
    int world = job->parallel.dp * job->parallel.tp * job->parallel.pp;
    if (rank == 0 && world > 1) fprintf(stderr, "dtrun: layout %s (world %d)\n", engine_layout(e), world);
    FILE *rlog = rank_log_open(job, rank);

    const job_model *spec = &job->model;
    double samples_per_step = (double)job->train.global_batch * (spec->kind == MODEL_GPT ? spec->seq_len : 1);
    double loss = NAN, val_loss = NAN, acc = -1;
    int done = 0;
    engine_begin_training(e);
    engine_times setup;
    engine_take_times(e, &setup); /* the rank log's first step starts here */
    double t0 = now_s();
    for (int step = 0; step < job->train.steps; step++) {
        double ts = now_s();
        rc = engine_grads(e, step, &loss, err, sizeof err);
        if (rc != TRAIN_EXIT_OK) goto out;
        if (!isfinite(loss)) {
            if (rank == 0) fprintf(stderr, "dtrun: rank %d: step %d: loss is %f\n", rank, step + 1, loss);
            if (job->train.skip_nonfinite) continue;
            rc = TRAIN_EXIT_NONFINITE;
            goto out;
        }
        double lr = lr_at(&job->train, step), norm;
        rc = engine_update(e, step, lr, &norm, err, sizeof err);
        if (rc != TRAIN_EXIT_OK) goto out;
        done = step + 1;
        double te = now_s();
        rank_log_step(rlog, e, done);
        metrics_step ms = {.step = done, .loss = loss, .lr = lr, .grad_norm = norm,
                           .samples_per_s = samples_per_step / (te - ts), .elapsed = te - t0};
        metrics_log_step(met, &ms);
        if (job->train.eval_every > 0 && done % job->train.eval_every == 0 && done < job->train.steps) {
            rc = engine_evaluate(e, &val_loss, &acc, err, sizeof err);
            if (rc != TRAIN_EXIT_OK) goto out;
            metrics_log_eval(met, done, val_loss, acc);
            engine_take_times(e, &setup); /* evaluation is not the next step's time */
        }
    }
    rc = engine_evaluate(e, &val_loss, &acc, err, sizeof err);
    if (rc != TRAIN_EXIT_OK) goto out;
    metrics_log_eval(met, done, val_loss, acc);
    metrics_summary(met, done, loss, val_loss, acc, now_s() - t0, samples_per_step * done);
    const char *dump = getenv("DTRUN_DUMP_PARAMS");
    if (dump && *dump) rc = engine_dump_params(e, dump, err, sizeof err);
out:
    if (rc != TRAIN_EXIT_OK && rc != TRAIN_EXIT_NONFINITE) fprintf(stderr, "dtrun: %s\n", err);
    if (rlog) fclose(rlog);
    metrics_close(met);
    engine_destroy(e);
    return rc;
}
