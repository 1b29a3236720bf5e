/* trace.h — one worker's timeline for `dtrun --trace FILE`: a Chrome-trace /
 * Perfetto JSON ({"traceEvents": [...]}, ph "X" complete events, ts and dur in
 * microseconds) of every rank's compute, communication and idle spans.
 *
 * Per process, like a log: a worker is one process and one rank, and the spans
 * come from places that share no object (the engine, the model hooks, every
 * strategy's collectives, the pipeline executor's hooks), so the recorder is
 * process-global. Spans go to memory with CLOCK_MONOTONIC times (clock_now_s, lib/util/clock.h);
 * nothing is written during the run, so a span costs a formatted name and no I/O.
 * Every call is a no-op (one flag test) while no trace is open.
 *
 * Lanes (Chrome's tid) are what the per-rank metrics measure, so each lane's
 * total matches the metrics' time of the same name:
 *   compute  each unit's forward / backward (from its before-hook's return to its
 *            after-hook), with pp > 1 each chunk's F / B of a micro-batch around
 *            them (ZB-H1: "B-input" around the units' backward spans, which end
 *            with it, and "W" apart: the weight-gradient pass), the optimizer step
 *   comm     every call a strategy or tp blocks in: collectives, asynchronous
 *            starts, waits ("comm" in the metrics)
 *   idle     pipeline receives and waits for sends (the bubble), the end-of-step
 *            loss / norm exchange where a rank waits for the slowest ("idle")
 *   step     one span per optimizer step, for orientation
 * pid = world rank, named "rank R (layout)".
 *
 * The end (engine_trace_finish, engine.h): every rank writes its part, FILE's
 * stem + ".rankN.json" (a trace on its own: trace_part_path), and after a
 * barrier rank 0 merges the parts into FILE (trace_merge) and deletes them.
 * Ranks on one host share CLOCK_MONOTONIC, so their times are used as they are;
 * parts from different hosts are aligned on the moment the barrier before the
 * write released (sync_us in each part). */
#ifndef DTRUN_TRACE_H
#define DTRUN_TRACE_H

#include <stddef.h>

#include "lib/job/jobspec.h"

typedef enum { TRACE_COMPUTE = 0, TRACE_COMM, TRACE_IDLE, TRACE_STEP, TRACE_LANES } trace_lane;

/* Most spans kept per rank (~64 B each); later ones are counted as dropped. */
#define TRACE_MAX_SPANS (1 << 20)

/* Where this run's trace goes: DTRUN_TRACE (what `dtrun --trace FILE` sets for
 * its workers) over the job's log.trace; "" = no trace. */
const char *trace_path_for(const job_spec *job);

/* Starts recording for world rank `rank` (label: the layout, for the process
 * name). 0, or -1 with one line in err (out of memory). */
int trace_open(const char *path, int rank, const char *label, char *err, size_t errlen);
int trace_on(void);
/* One span [t0, t1] (seconds, CLOCK_MONOTONIC) on a lane. */
void trace_span(trace_lane lane, double t0, double t1, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The model's unit hooks: a unit's compute span opens when its before-hook has
 * done the strategy's work (FSDP's gather wait is comm, not compute) and closes
 * at the next hook call of any unit, so spans never overlap (GPT's tied head
 * calls its after-hook only after the embedding's backward). */
void trace_unit_open(int unit, int backward);
void trace_unit_close(void);
/* Step spans: from the start of the step's gradients to the end of its update. */
void trace_step_begin(int step);
void trace_step_end(void);

/* FILE's part of rank r: "t.json" -> "t.rank3.json" (the ".json" stem, else
 * FILE + ".rank3.json"). */
void trace_part_path(const char *path, int rank, char *out, size_t n);
/* Writes this rank's part (sync: the CLOCK_MONOTONIC second every rank agreed
 * on, from a barrier). 0, or -1 with one line in err. The recording stays. */
int trace_write_part(double sync, char *err, size_t errlen);
/* Rank 0: the parts of ranks 0..world-1 into `path`, ts shifted so the run
 * starts at 0; parts merged are deleted. A missing or unreadable part (ranks of
 * another node writing to their own disk) is left out and named in *note (may be
 * ""). 0, or -1 with one line in err when nothing could be written. */
int trace_merge(const char *path, int world, char *note, size_t notelen, char *err, size_t errlen);
/* Frees the recording; trace_on() is 0 afterwards. */
void trace_close(void);

#endif
