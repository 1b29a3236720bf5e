/* pp_exec.h — the pipeline executor: runs one rank's pp_schedule action list.
 *
 * One step of pipeline work for one pp rank: the executor walks this rank's list
 * (pp_schedule.h) in order and, for each action,
 *   FORWARD(c, mb)    model_forward of local chunk c / p on the activations of mb
 *   BACKWARD(c, mb)   model_backward (loss_scale on the chunk with the head)
 *   SEND_ACT(c, mb)   async send of model_acts_output         -> pp rank of c+1
 *   RECV_ACT(c, mb)   blocking recv into model_acts_input     <- pp rank of c-1
 *   SEND_GRAD(c, mb)  async send of model_acts_dinput         -> pp rank of c-1
 *   RECV_GRAD(c, mb)  blocking recv into model_acts_doutput   <- pp rank of c+1
 *   BACKWARD_B(c, mb) ZB-H1: model_backward_input (activations: model_acts_create_split)
 *   BACKWARD_W(c, mb) ZB-H1: model_backward_weight; the slot is given back after it
 * Neighbouring chunks on the same rank (p = 1 with v > 1) hand tensors over in
 * memory (the schedule has no message for them). Sends never block the list (the
 * schedule's contract); they are waited for before their buffer is reused and
 * before the step returns.
 *
 * Activations: each local chunk owns a pool of model_acts slots, as many as the
 * most microbatches of that chunk ever alive at once on the list
 * (pp_schedule_peak_in_flight_chunk = sizes_acts_slots): a slot is taken by the
 * microbatch's RECV_ACT / FORWARD and given back after its BACKWARD (ZB-H1: its
 * BACKWARD_W, the slot then also holding the W-pending gradients). With several
 * chunks per rank (interleaved) the slots' stashes may instead come from one
 * pool of the rank, as many buffers as the most micro-batches of all its
 * chunks alive at once (pp_schedule_peak_in_flight), each the size of its
 * largest chunk's stash: a slot borrows one while it holds a micro-batch
 * (model_acts_bind_stash). The rank takes whichever of the two needs less
 * memory (pp_stash_pool_bytes). So the memory held is exactly what the
 * dry-run predicts.
 *
 * What the executor does NOT do (the engine's part): zero gradients, data-parallel
 * or tensor-parallel sync (model_set_hooks on the chunks stays the engine's; the
 * executor never touches hooks), the tied-wte gradient sum between the first and
 * last stage, clipping, the optimizer. The model never calls the comm layer; only
 * this file does, on the pp communicator.
 *
 * Errors are answers: a failed send / receive ends the step with one line
 * "pp rank R: step S: RECV_ACT chunk C mb M from pp rank Q: <comm's line>"; a dead
 * peer becomes such an error within the communicator's timeout, never a hang.
 * After an error the pp communicator is broken (comm.h); the executor can still be
 * destroyed. */
#ifndef DTRUN_PP_EXEC_H
#define DTRUN_PP_EXEC_H

#include <stddef.h>

#include "kernels/ops.h"
#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/parallel/pp_schedule.h"

typedef struct pp_exec pp_exec;

typedef struct {
    const pp_schedule *sched; /* borrowed; must outlive the executor */
    int rank;                 /* this rank's pp rank, 0..sched->p-1 */
    comm *pp;                 /* the pp group (pp rank i = comm rank i); NULL only when p = 1 */
    model **chunks;           /* [sched->v]: chunks[l] holds global chunk l * p + rank */
    int micro_batch;          /* capacity B of every model_acts slot */
    const dt_ops *ops;        /* device copies between same-rank chunks */
} pp_exec_config;

/* Fills *out with micro-batch mb's host data (inputs for chunk 0, targets / labels
 * for the last chunk); out->B must equal the step's B. Pointers stay valid until
 * the step returns. Called only on ranks holding chunk 0 or the last chunk, possibly
 * more than once per mb (forward and backward). Returns 0, or -1 with a line in err. */
typedef int (*pp_batch_fn)(void *ctx, int mb, model_batch *out, char *err, size_t errlen);

/* Engine hooks around the work; any may be NULL.
 *  before_backward / after_backward: around every backward pass (BACKWARD, and
 *    ZB-H1's BACKWARD_B and BACKWARD_W); last_of_chunk = this is the step's last
 *    pass completing `chunk`'s gradients of a micro-batch, BACKWARD or BACKWARD_W
 *    (DDP / ZeRO sync that chunk's grads only then; always 0 for a BACKWARD_B);
 *    last_of_rank = the last such pass of the whole list.
 *  span: every action as it ran, [t0, t1] seconds on CLOCK_MONOTONIC, for traces
 *    (a receive's span is its wait; a send's only its posting).
 *  send_wait: a wait for earlier asynchronous sends to arrive before their buffer
 *    is reused or the step ends, [t0, t1] (idle_s counts it, like receives). */
typedef struct {
    void *ctx;
    void (*before_backward)(void *ctx, int chunk, int mb, int last_of_chunk, int last_of_rank);
    void (*after_backward)(void *ctx, int chunk, int mb, int last_of_chunk, int last_of_rank);
    void (*span)(void *ctx, pp_op op, int chunk, int mb, double t0, double t1);
    void (*send_wait)(void *ctx, double t0, double t1);
} pp_exec_hooks;

typedef struct {
    int step;            /* 1-based, for error lines */
    int B;               /* samples per micro-batch this step, 1..micro_batch */
    float loss_scale;    /* gradient of the loss per token / image (1 / global count) */
    int forward_only;    /* evaluation: only the list's FORWARDs and RECV/SEND_ACTs (still
                            the schedule's m micro-batches; another m needs another
                            schedule and executor), gradients untouched */
    pp_batch_fn batch;
    void *batch_ctx;
    long sample0;        /* training: where this rank's micro-batch 0 starts in the global batch;
                            micro-batch mb gets model_batch.step = step and sample0 + mb x B
                            on every chunk (train.lora's dropout draws) */
} pp_exec_step_args;

typedef struct {
    double loss;        /* sum of the micro-batches' losses on the head's rank, else 0 */
    long correct;       /* ViT right predictions, likewise */
    double step_s;      /* wall time of the step */
    double busy_s;      /* in FORWARD / the backward passes (and same-rank copies) */
    double idle_s;      /* blocked in receives and in waits for sends */
    double bubble;      /* measured: idle_s / step_s; compare with pp_schedule_ideal_bubble */
    int forwards, backwards; /* backwards: BACKWARD or BACKWARD_B passes */
} pp_exec_result;

/* Allocates the slots (the engine accounts them under ACCT_ACTS as pp_exec_slots(l)
 * stashes of the chunk, or pp_exec_pool_bytes, with each chunk's working set:
 * the dry-run's own numbers). NULL with one line in err (schedule / rank / chunk mismatch,
 * out of memory). */
pp_exec *pp_exec_create(const pp_exec_config *cfg, char *err, size_t errlen);
/* Waits for any send still in flight, frees the slots. */
void pp_exec_destroy(pp_exec *ex);
void pp_exec_set_hooks(pp_exec *ex, const pp_exec_hooks *hooks);

/* Runs this rank's list once. Gradients accumulate into the chunks' grad buffers.
 * 0, or -1 with one line in err; *out is filled either way (partial on error). */
int pp_exec_step(pp_exec *ex, const pp_exec_step_args *args, pp_exec_result *out, char *err,
                 size_t errlen);

/* The tied GPT wte (model.h): the first stage's copy holds the embedding's part of
 * its gradient, the last stage's copy the LM head's. This sums the two so that both
 * hold the whole gradient, bit-identical (a + b on one rank, b + a on the other):
 * Megatron's embedding group, once per step after pp_exec_step, before clipping.
 *   first    the wte gradient on the rank holding chunk 0 (pp rank 0), else NULL
 *   last     the copy on the rank holding the last chunk (pp rank p-1), else NULL
 *   scratch  n floats of device memory where a rank holds only one of the two (the
 *            caller owns and accounts it); unused otherwise
 * Both on one rank (p = 1, v > 1): summed in memory. A single chunk holding both
 * (p = v = 1) sums them itself: nothing to do. Ranks holding neither return at once.
 * 0, or -1 with one line in err ("pp rank R: step S: tied wte ...: <comm's line>"). */
int pp_exec_sum_tied(pp_exec *ex, float *first, float *last, float *scratch, size_t n, int step,
                     char *err, size_t errlen);

/* Slots of local chunk l (for reports; equals pp_schedule_peak_in_flight_chunk). */
int pp_exec_slots(const pp_exec *ex, int local);
/* Bytes of the rank's shared stash pool; 0 when each slot owns its stash (then
 * the slots' stashes are pp_exec_slots(l) x model_acts_stash_bytes each). */
size_t pp_exec_pool_bytes(const pp_exec *ex);

#endif
