/* engine_trace.c — the engine's side of `--trace FILE` (trace.h): when to
 * record, the pipeline's actions on the trace's lanes, and the end of the run,
 * where every rank writes its part and rank 0 merges them. */
#include <stdio.h>

#include "runtime/worker/engine_internal.h"
#include "runtime/parallel/trace.h"
#include "lib/util/clock.h"
#include "lib/util/exit_codes.h"

void engine_trace_begin(engine *e)
{
    const char *path = trace_path_for(&e->job);
    if (!path[0] || trace_on()) return;
    char why[256];
    /* a trace is an extra: a rank that cannot keep one still trains */
    if (trace_open(path, e->rank, e->layout, why, sizeof why) != 0)
        fprintf(stderr, "dtrun: rank %d: %s (no trace)\n", e->rank, why);
}

/* Lanes as the metrics count time: F / B (ZB-H1: B-input and W) are compute, a receive's wait is idle
 * (the bubble). A send's posting is neither (the metrics count it as compute, it
 * takes microseconds): left out. */
void engine_trace_pp_span(void *ctx, pp_op op, int chunk, int mb, double t0, double t1)
{
    (void)ctx;
    switch (op) {
    case PP_OP_FORWARD: trace_span(TRACE_COMPUTE, t0, t1, "F chunk %d mb %d", chunk, mb); break;
    case PP_OP_BACKWARD: trace_span(TRACE_COMPUTE, t0, t1, "B chunk %d mb %d", chunk, mb); break;
    /* ZB-H1's two halves of a backward, each its own span (the W's fill the bubble) */
    case PP_OP_BACKWARD_B:
        /* its units' after-hooks come in the W: the last unit's span closes here,
         * inside this one (which therefore ends now, a few microseconds past t1) */
        trace_unit_close();
        trace_span(TRACE_COMPUTE, t0, clock_now_s(), "B-input chunk %d mb %d", chunk, mb);
        break;
    case PP_OP_BACKWARD_W: trace_span(TRACE_COMPUTE, t0, t1, "W chunk %d mb %d", chunk, mb); break;
    case PP_OP_RECV_ACT: trace_span(TRACE_IDLE, t0, t1, "wait: RECV_ACT chunk %d mb %d", chunk, mb); break;
    case PP_OP_RECV_GRAD: trace_span(TRACE_IDLE, t0, t1, "wait: RECV_GRAD chunk %d mb %d", chunk, mb); break;
    default: break;
    }
}

void engine_trace_send_wait(void *ctx, double t0, double t1)
{
    (void)ctx;
    trace_span(TRACE_IDLE, t0, t1, "wait: sends");
}

/* A failed barrier: the world is broken, the trace is lost. */
static int barrier_failed(engine *e, char *err, size_t errlen)
{
    snprintf(err, errlen, "rank %d: trace: barrier before writing the trace: %s", e->rank,
             comm_last_error(e->world));
    trace_close();
    return DT_EXIT_COMM;
}

int engine_trace_finish(engine *e, char *err, size_t errlen)
{
    if (!trace_on()) return DT_EXIT_OK;
    trace_unit_close();
    trace_step_end();
    /* Every rank is done recording once the barrier releases, and its release is
     * the one instant every rank sees: what aligns the clocks of several hosts. */
    if (e->world_size > 1 && comm_barrier(e->world) != COMM_OK) return barrier_failed(e, err, errlen);
    char why[512] = "";
    int wrote = trace_write_part(clock_now_s(), why, sizeof why);
    /* every part is on disk before rank 0 reads them; a rank that failed to
     * write still takes part, so no one waits for it */
    if (e->world_size > 1 && comm_barrier(e->world) != COMM_OK) return barrier_failed(e, err, errlen);
    int rc = DT_EXIT_OK;
    if (wrote != 0) {
        snprintf(err, errlen, "rank %d: %s", e->rank, why);
        rc = DT_EXIT_FAIL;
    }
    if (e->rank == 0) {
        const char *path = trace_path_for(&e->job);
        char note[256], merr[512];
        if (trace_merge(path, e->world_size, note, sizeof note, merr, sizeof merr) != 0) {
            if (rc == DT_EXIT_OK) snprintf(err, errlen, "rank 0: %s", merr);
            rc = DT_EXIT_FAIL;
        } else if (note[0]) {
            fprintf(stderr, "dtrun: trace: %s: no readable part from rank(s) %s (written on another "
                            "node's disk?); merged the others\n", path, note);
        }
    }
    trace_close();
    return rc;
}
