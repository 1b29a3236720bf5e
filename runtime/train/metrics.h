/* metrics.h — what a run reports: one JSON object per logged step in the metrics
 * file (JSONL), and on stdout (rank 0) a live progress line when it is read on
 * a terminal (log.progress auto: the worker's stdout, or through the agent
 * DTRUN_STDOUT_TTY; plain lines otherwise), evaluation lines and a final
 * summary; with log.tensorboard, the
 * same scalars as TensorBoard events (tfevents.h): rank 0 writes train/loss,
 * train/lr, train/grad_norm, perf/tokens_per_s (images_per_s for ViT),
 * perf/mfu_percent (when a hardware profile gives the device's peak),
 * val/loss (val/acc), and with model.moe train/aux_loss, moe/imbalance (the
 * worst block's), moe/layer_N/imbalance and moe/layer_N/dropped, into DIR,
 * and every rank its memory/accounted_peak_MiB
 * and memory/rss_peak_MiB, rank 0 into DIR and rank R into DIR/rankR (one
 * TensorBoard run per rank). */
#ifndef DTRUN_METRICS_H
#define DTRUN_METRICS_H

#include <stdio.h>
#include "lib/job/jobspec.h"

/* model.moe: a step's routing over the global batch (engine.h engine_moe).
 * Per MoE block j < layers: its index layer[j], the choices per expert
 * chosen[j * experts + e], the choices dropped[j] (a capacity's); aux_loss
 * the balance loss (mean over the samples of its sum over the blocks). */
typedef struct {
    int layers, experts;
    const int *layer;
    const double *chosen, *dropped;
    double aux_loss;
} metrics_moe;

/* The busiest expert's load over the mean (1: balanced; experts: one expert
 * took every choice) of MoE block j; 0 when nothing was routed. */
double metrics_moe_imbalance(const metrics_moe *m, int j);

typedef struct {
    int step;            /* 1-based: steps done */
    double loss;         /* mean over the global batch */
    double lr;
    double grad_norm;    /* before clipping */
    double samples_per_s;/* tokens/s (GPT) or images/s (ViT) of this step */
    double elapsed;      /* seconds since training started */
    double mfu;          /* model FLOPs utilisation of this step (mfu.h), < 0: unknown */
    const metrics_moe *moe; /* model.moe's routing, NULL without */
} metrics_step;

typedef struct metrics metrics;

/* rank: only rank 0 prints; every rank may write its own metrics file later.
 * append: a resumed run adds to the metrics file instead of replacing it.
 * Step records are written every log.every steps (and the last), as the
 * console prints them. */
metrics *metrics_open(const job_spec *job, int rank, int append, char *err, size_t errlen);
/* Rank 0: the record that opens an attempt in the JSONL, before its steps:
 * {"event":"attempt_start","attempt":A,"restart_count":R,"restart_reason":"...",
 *  "from_step":S,"time":UNIX}. Every step and evaluation record also carries
 * "attempt", so steps an attempt repeats after a restart stay told apart. */
void metrics_log_attempt(metrics *m, long from_step);
void metrics_close(metrics *m);
/* One line of what the run does (resuming, a checkpoint saved, a stop) on
 * stdout, a newline added; a live progress line is erased first. */
void metrics_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void metrics_log_step(metrics *m, const metrics_step *s);
/* This rank's peak memory after a step: accounted bytes (account.h) and the
 * process's peak RSS. Written to the rank's TensorBoard file only. */
void metrics_log_memory(metrics *m, int step, double accounted_peak_bytes, double rss_peak_bytes);
/* acc < 0 when there is none (GPT). */
void metrics_log_eval(metrics *m, int step, double val_loss, double acc);
void metrics_summary(metrics *m, int steps, double loss, double val_loss, double acc,
                     double elapsed, double samples);

#endif
