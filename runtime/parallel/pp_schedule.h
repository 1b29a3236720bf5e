/* pp_schedule.h — the order of pipeline work on every rank.
 *
 * One source of truth: the engine executes these lists and the dry-run simulates the
 * very same lists (pp_sim.h) for the bubble and reads activation memory off them.
 *
 * For each pp rank, an ordered list of actions: compute (FORWARD / BACKWARD of one
 * chunk on one microbatch) and the point-to-point messages around it. Chunks are
 * numbered globally, 0..p*v-1, rank = chunk % p (pp_partition.h). The `chunk` of a
 * message is always the chunk ON THIS RANK the tensor belongs to, so the engine
 * knows the buffer without looking at the peer:
 *   SEND_ACT  (c, mb) -> peer holds c+1   output of c, after FORWARD(c, mb)
 *   RECV_ACT  (c, mb) <- peer holds c-1   input of c, before FORWARD(c, mb)
 *   SEND_GRAD (c, mb) -> peer holds c-1   input gradient of c, after BACKWARD(c, mb)
 *   RECV_GRAD (c, mb) <- peer holds c+1   output gradient of c, before BACKWARD(c, mb)
 * SEND_ACT(c, mb) pairs with RECV_ACT(c+1, mb); SEND_GRAD(c, mb) with RECV_GRAD(c-1, mb).
 * When c and c±1 live on the same rank (p = 1) there is no message: the engine hands
 * the tensor over in memory, and the list orders the two computations.
 *
 * Contract for the executor: run each list in order, sends buffered (never block),
 * receives block. Under that contract every schedule built here completes (the tests
 * simulate all of them; pp_sim reports a deadlock as an error).
 *
 * Schedules (m microbatches, p ranks, v chunks per rank):
 *   GPIPE        all forwards (mb 0..m-1), then all backwards (mb 0..m-1). v = 1.
 *   1F1B         PipeDream-flush / Megatron non-interleaved: min(p-rank-1, m) warmup
 *                forwards, then one forward + one backward alternately, then the
 *                remaining backwards. v = 1.
 *   INTERLEAVED  Megatron's interleaved 1F1B over m*v virtual microbatches: warmup
 *                min(2*(p-rank-1) + (v-1)*p, m*v) forwards, then 1F1B. Virtual
 *                microbatch k runs local chunk (k mod p*v) / p (reversed for
 *                backward) on microbatch (k / p*v) * p + k mod p, i.e. groups of p
 *                microbatches go through one chunk before the next. Needs m % p == 0.
 *   ZB_H1        Zero-bubble H1 (Qi et al. 2023, arXiv 2401.10241): each backward
 *                split into BACKWARD_B (the input gradient, which the previous
 *                rank waits for) and BACKWARD_W (the weight gradients, which no one
 *                waits for). The F and B order is exactly 1F1B's; rank r runs each
 *                W r micro-batches late (W(k - r) right after B(k), the last r at
 *                the end), so the W's fill what would be the warmup and cooldown
 *                bubble. A micro-batch is in flight from its F to its W: at most
 *                min(p, m) on every rank, 1F1B's peak (rank 0's); with F = B = W the
 *                idle time per rank is (p-1) F instead of 1F1B's (p-1)(F+B+W),
 *                a third. v = 1.
 */
#ifndef DTRUN_PP_SCHEDULE_H
#define DTRUN_PP_SCHEDULE_H

#include <stddef.h>
#include <stdio.h>
#include "lib/job/jobspec.h"
#include "lib/job/jobspec_layout.h"
#include "runtime/parallel/pp_partition.h"

typedef enum {
    PP_OP_FORWARD = 0,
    PP_OP_BACKWARD,
    PP_OP_SEND_ACT,
    PP_OP_RECV_ACT,
    PP_OP_SEND_GRAD,
    PP_OP_RECV_GRAD,
    PP_OP_BACKWARD_B, /* ZB_H1: the input-gradient pass (model_backward_input) */
    PP_OP_BACKWARD_W, /* ZB_H1: the weight-gradient pass (model_backward_weight) */
    PP_OP_COUNT
} pp_op;

/* BACKWARD or BACKWARD_B: the pass that makes a chunk's input gradient (what
 * SEND_GRAD ships and RECV_GRAD feeds). */
static inline int pp_op_makes_dinput(pp_op op) { return op == PP_OP_BACKWARD || op == PP_OP_BACKWARD_B; }
/* BACKWARD or BACKWARD_W: the pass after which a micro-batch's activations and
 * the chunk's gradients of it are done. */
static inline int pp_op_ends_backward(pp_op op) { return op == PP_OP_BACKWARD || op == PP_OP_BACKWARD_W; }
/* Any of the three backward passes (compute). */
static inline int pp_op_is_backward(pp_op op)
{
    return op == PP_OP_BACKWARD || op == PP_OP_BACKWARD_B || op == PP_OP_BACKWARD_W;
}

typedef struct {
    pp_op op;
    int chunk; /* global chunk on this rank */
    int mb;    /* microbatch, 0..m-1 */
    int peer;  /* pp rank of the other end of a message; -1 for compute */
} pp_action;

typedef struct {
    pp_schedule_kind kind;
    int p, m, v;
    int *n_actions;      /* [p] */
    pp_action **actions; /* [p]: rank r runs actions[r][0 .. n_actions[r]) in order */
} pp_schedule;

/* Upper bound on p * v * m, to keep every count inside an int. */
#define PP_SCHEDULE_MAX_WORK JOB_PP_MAX_WORK /* lib/job/jobspec_layout.h */

/* Build the lists for every rank. Returns 0, or -1 with one line in err (p, m, v out
 * of range, v != 1 without INTERLEAVED, m not a multiple of p with INTERLEAVED). Free
 * with pp_schedule_free, also after a failure. */
int pp_schedule_build(pp_schedule *s, pp_schedule_kind kind, int p, int m, int v,
                      char *err, size_t errlen);
void pp_schedule_free(pp_schedule *s);

/* Structural check of any schedule (built here or by hand): every FORWARD and
 * BACKWARD (ZB_H1: BACKWARD_B and BACKWARD_W instead) of every (chunk, mb) exactly
 * once on the chunk's rank; each computation preceded on its rank by its inputs
 * (the RECV, or the neighbouring chunk's computation when that is on the same
 * rank; BACKWARD / BACKWARD_B after its FORWARD, BACKWARD_W after its BACKWARD_B);
 * each SEND after the computation producing it; messages exactly where chunks
 * change rank, with the right peer, each send matched by one receive. Returns 0,
 * or -1 with the first problem in err. It does not prove freedom from deadlock:
 * pp_sim does. */
int pp_schedule_validate(const pp_schedule *s, char *err, size_t errlen);

/* Activations a rank holds: the maximum over its list of (forwards done - backwards
 * done), counting one per (chunk, microbatch); under ZB_H1 a backward is done at
 * its BACKWARD_W (the W pass still reads the activations), so this is also the
 * number of micro-batches whose W-pending gradients are kept. With chunk_weight (indexed by global
 * chunk, e.g. bytes of one microbatch's activations of that chunk) each pair counts
 * its chunk's weight instead; NULL counts 1. GPIPE: m. 1F1B: min(p - rank, m).
 * INTERLEAVED: min(warmup + 1, m*v) chunk-microbatches, warmup as above. */
double pp_schedule_peak_in_flight(const pp_schedule *s, int rank, const double *chunk_weight);
/* The same maximum for one chunk alone. */
int pp_schedule_peak_in_flight_chunk(const pp_schedule *s, int chunk);
/* pp_schedule_peak_in_flight_chunk of every chunk (peak[p*v]) of the schedule
 * pp_schedule_build would build, from the same generator but without building the
 * lists: a few ints instead of megabytes, for the planner's thousands of layouts;
 * and (rank_peak[p], may be NULL) pp_schedule_peak_in_flight(s, rank, NULL) of
 * every rank: the most micro-batches of all its chunks together in flight.
 * Returns 0, or -1 with err as pp_schedule_build. */
int pp_schedule_peak_in_flight_chunks(pp_schedule_kind kind, int p, int m, int v, int *peak, int *rank_peak,
                                      char *err, size_t errlen);

/* The executor's stash memory on one rank (pp_exec.h): either each of its v
 * local chunks keeps a pool of slots[l] stashes of stash[l] bytes (its own
 * peak), or (v > 1) the rank keeps one pool of rank_peak buffers, each the
 * size of its largest chunk's stash, that every chunk's micro-batches borrow
 * from (the chunks' peaks come at different times: Megatron's interleaved
 * order holds 2(p - rank - 1) + (v - 1) p + 1 at once, fewer than the sum of
 * the chunks' peaks when m > p). The executor takes whichever is smaller;
 * *shared (may be NULL) says which. Returns the bytes. */
size_t pp_stash_pool_bytes(int v, const int *slots, const size_t *stash, int rank_peak, int *shared);

/* Bubble of the schedule with every chunk costing the same and free messages:
 * idle / makespan = (p-1) / (v*m + p - 1), v = 1 for GPIPE and 1F1B (pp_sim
 * reproduces it exactly; see test_pp_schedule). Megatron states the same bubble
 * relative to the ideal time instead: (p-1) / (v*m). ZB_H1 with a backward of
 * twice the forward split into B = W = F, m >= p: (p-1) / (3m + p - 1), against
 * 1F1B's (p-1) / (m + p - 1) = 3(p-1) / (3m + 3(p-1)) (the idle time a third of
 * 1F1B's; with fewer micro-batches than stages the warmup cannot fill and the
 * simulated bubble is larger). */
double pp_schedule_ideal_bubble(pp_schedule_kind kind, int p, int m, int v);

const char *pp_schedule_kind_name(pp_schedule_kind kind); /* "gpipe", "1f1b", "interleaved", "zb-h1" */
const char *pp_op_name(pp_op op);                          /* "FORWARD", "SEND_ACT", ... */

/* One action per line, rank by rank: for logs and debugging. */
void pp_schedule_print(FILE *f, const pp_schedule *s);

#endif
