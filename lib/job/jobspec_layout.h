/* jobspec_layout.h — layout rules that both the job-spec checks and the worker
 * apply: one source of truth, so that every rule a worker would trip over is
 * answered with FILE:LINE:COL before anything starts (dtrun --print-config,
 * --dry-run and the launcher), and the worker, which sees the same job, can
 * never disagree.
 *
 * Each returns 0, or -1 with one line in msg (what and why, no file, no
 * position: the job checks add those). */
#ifndef DTRUN_JOBSPEC_LAYOUT_H
#define DTRUN_JOBSPEC_LAYOUT_H

#include <stddef.h>

#include "lib/job/jobspec.h"

/* Most actions a pipeline schedule may hold: pp x microbatches x virtual_stages. */
#define JOB_PP_MAX_WORK (1 << 24)

/* The pipeline schedule's shape: a known kind; pp, microbatches (m) and
 * virtual_stages (v) each >= 1 with p x m x v <= JOB_PP_MAX_WORK; v = 1 unless
 * interleaved; interleaved needs m a multiple of pp (micro-batches go through
 * each chunk in groups of pp). */
int job_layout_check_pipeline(pp_schedule_kind kind, int pp, int m, int v, char *msg, size_t n);

/* What pp_schedule zb-h1 can run with (its B / W split of the backward, model.h):
 * no sequence parallelism, no block recompute, and no sharding
 * strategy that binds a unit's gradient buffer from one backward's before() to its
 * after() (ZeRO-2, FSDP, HSDP over dp > 1). 0, or -1 with one line in msg naming
 * the key that stands in the way (*blame: a FID_* of jobspec_fields.h) and why. */
int job_layout_check_zero_bubble(const job_parallel *par, recompute_kind rc, int *blame,
                                 char *msg, size_t n);

/* What train.cuda_graphs can replay, whatever the backend: a step without a
 * pipeline (parallel.pp 1: the executor takes its micro-batches' inputs from
 * the host and reads their losses back as it goes) and without train.offload
 * (the offloaded update runs on the host between copies). dp, tp and cp may
 * be anything: their collectives are recorded with the step where the
 * communication can be (NCCL); what the worker finds at set-up (the CPU
 * transport under the cuda backend, HSDP's per-step copies) it refuses
 * itself (runtime/worker/engine_graph.c). 0, or -1 with one line in msg and
 * *blame the key (a FID_* of jobspec_fields.h) that stands in the way. */
int job_layout_check_graphs(const job_spec *job, int *blame, char *msg, size_t n);

/* The mesh against the processes started: dp x tp x pp must equal `world`.
 * `world_from` says what set world ("--nproc-per-node 2 x --nnodes 1",
 * "WORLD_SIZE"); the message names it and the parallel keys. */
int job_layout_check_world(const job_parallel *par, int world, const char *world_from, char *msg, size_t n);

/* Both, pinned: "FILE:LINE:COL: what" at the key to blame (the first of
 * parallel.dp, tp, pp the file gave). For the launcher, before it spawns. */
int job_check_world(const job_spec *job, int world, const char *world_from, char *err, size_t errlen);

#endif
