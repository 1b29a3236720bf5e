/* engine_graph.c — the step of train.cuda_graphs: a training step that reads
 * nothing back to the host in its middle, so that the CUDA backend can record
 * it once and replay it (ops.h, graph_begin).
 *
 * The same arithmetic in the same order as engine.c's step; what moves:
 *  - Inputs. Before the step, outside anything recorded, every micro-batch's
 *    tokens and targets (ViT: images and labels) of this rank's slice of the
 *    global batch are copied from the host into fixed device buffers;
 *    micro-batch j reads its own part of them (model_batch.on_device), and
 *    the backward's seed is made on the device from the targets there
 *    (ops->loss_seed).
 *  - The loss and this rank's share of the squared gradient norm are summed
 *    into device scalars (model_batch.loss_sum, optim_grad_sumsq_dev) and
 *    read back once, after the gradients: the host's own sums, done where
 *    the data is. The world then sums them on the host as engine_grads does
 *    (engine_world_sum, the same bits), and the global squared norm goes
 *    back to the device with the update's learning rate.
 *  - Clipping: ops->clip_scale computes the factor from that norm and the
 *    optimizer scales the gradients by it (ops->scale_dev).
 *  - AdamW reads its learning rate and step from a device scalar the host
 *    writes before the update (optim_step_dev).
 *
 * Two graphs a step, not one: the gradients (zeroing, forward and backward of
 * every micro-batch with the strategies' and tp's collectives in the hooks,
 * the strategy's finish, the norm) and the update (clipping, AdamW, the
 * strategy's after: ZeRO's parameter all-gathers). Between them the host
 * reads the loss and the norm and sums them over the world, because train.c
 * decides there whether the step updates at all (a non-finite loss stops the
 * run or skips the update: train.skip_nonfinite; a data file that changed
 * stops it) and logs the norm. One graph for the whole step would need that
 * decision, and the world's sum, on the device: not written. Per step the
 * host then waits for the device 2 A + 2 times (A micro-batches: each one's
 * two input arrays go up, from_host; the loss and norm come down; the norm
 * and the learning rate go up), each on an idle stream, instead of at every
 * micro-batch's loss and seed and every gradient tensor's sum of squares,
 * with the kernels of the step in between.
 *
 * Several processes (dp, tp, cp; ZeRO-1/2, FSDP, HSDP). The collectives of
 * the strategies (ddp.c's buckets, grad_pool.c's reduce-scatters, fsdp.c's
 * gathers, zero.c's all-gathers) and of tp and cp run in the hooks and the
 * model's layers, inside the phases: recorded with them. Only NCCL can be
 * recorded (comm.h): its collectives are queued on CUDA streams, and while
 * the compute stream is captured comm_wait becomes a stream-ordered wait.
 * So on the cuda backend several processes need the world on NCCL
 * (engine_graph_check refuses the CPU transports at set-up), and the rules
 * NCCL sets for recorded collectives are kept: every rank records the same
 * collectives at the same step and launches the graph of that recording.
 * Every rank records at its second step; after the engine ran ops outside
 * the step (engine_graph_outside: an evaluation, a checkpoint, which may have
 * grown one rank's scratch), every rank records both phases again at the
 * next step, instead of each rank discovering alone at launch that its
 * scratch moved (which would have one rank record while the others
 * replay); a launch refused all the same stops the run with one line. A
 * replayed step runs no hook on the host, so a strategy must not carry
 * host-side beliefs about its device buffers from one step into the next:
 * each step starts from so->forget (FSDP forgets which unit each gather
 * buffer holds, which an evaluation between steps may have changed). A
 * launched graph's collectives cannot be waited for one by one: after each
 * phase the host waits for the device through comm_wait_device, bounded by
 * the world's timeout (DTRUN_COMM_TIMEOUT, counted from the launch) and
 * watched for NCCL's errors, so a dead or silent peer stops the run with
 * one line (exit 4) instead of hanging it. A failure while recording stops
 * the run before anything recorded is launched.
 *
 * Warm-up. A phase is recorded only after it ran once as issued in this
 * process (the first step: the scratch grows to its size, cuBLASLt picks its
 * algorithms, AdamW's tensor list goes to the device, NCCL's lanes are made,
 * every kernel loads); the second step records each phase and launches it,
 * later steps launch the graphs. On the CPU backend nothing is recorded
 * (graph_end gives NULL): every step issues these same ops, which is what
 * the CPU tests compare with the step without train.cuda_graphs, one process
 * and several. Evaluation, checkpoints and logging run between steps,
 * outside the graphs, on the ops as before; in one process, should one of
 * them grow the backend's scratch, the next launch says so and the phase is
 * recorded again. With a trace (log.trace) a replayed step shows no unit or
 * communication spans: its hooks do not run on the host.
 *
 * Scope: no pipeline and no offload (job_layout_check_graphs), NCCL for
 * several processes on cuda and no HSDP all-reduce with converted copies
 * (engine_graph_check); refused at set-up otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "lib/job/jobspec_layout.h"
#include "lib/util/clock.h"
#include "lib/util/exit_codes.h"
#include "runtime/parallel/trace.h"
#include "runtime/worker/engine_internal.h"

/* What the host writes before the update, in one copy: the global squared
 * norm (clip_scale's input) and AdamW's lr and t. */
typedef struct {
    double sumsq;
    dt_adamw_hyper hyper;
} graph_update_in;

/* The scalars a step keeps where the ops are: one allocation of
 * SIZES_GRAPH_SCALARS_BYTES, loss and sumsq first (read back together). */
typedef struct {
    double loss;          /* the step's summed loss (this rank's share) */
    double sumsq;         /* this rank's share of the squared gradient norm */
    double tmp;           /* optim_grad_sumsq_dev's, for bf16 gradients */
    graph_update_in up;   /* the update's inputs */
    float clip;           /* the clipping factor (ops->clip_scale) */
} graph_scalars;
_Static_assert(sizeof(graph_scalars) <= SIZES_GRAPH_SCALARS_BYTES, "graph_scalars outgrew its sizes.h budget");

struct engine_graph {
    graph_scalars *dev;     /* ops memory */
    char *in;               /* every micro-batch's inputs, ops memory (sizes_graph_input_bytes) */
    size_t in_bytes;
    void *grads, *update;   /* the recorded phases (NULL: not yet, or nothing recorded: cpu) */
    int grads_issued, update_issued; /* each phase ran (as issued or recorded) before: warm */
    int outside;            /* the engine ran ops outside the step since the last one */
    void **params, **slices; /* engine_chunk_slices' arrays, [n_units] each */
};

/* Micro-batch j's inputs in the device buffers: GPT tokens [A mb T] then
 * targets [A mb T]; ViT images [A mb ch S S] then labels [A mb]. */
static model_batch graph_batch(const engine *e, int j)
{
    const job_model *m = &e->job.model;
    const engine_graph *g = e->graph;
    int mb = e->job.train.micro_batch, A = e->job.train.grad_accum;
    model_batch in = {.B = mb, .on_device = 1, .loss_sum = &g->dev->loss};
    if (job_model_is_lm(m)) {
        size_t per = (size_t)mb * (size_t)m->seq_len, all = per * (size_t)A;
        in.tokens = (const int *)g->in + (size_t)j * per;
        in.targets = (const int *)g->in + all + (size_t)j * per;
    } else {
        size_t per = (size_t)mb * (size_t)m->channels * (size_t)m->image_size * (size_t)m->image_size;
        in.images = (const float *)g->in + (size_t)j * per;
        in.labels = (const int *)((const float *)g->in + per * (size_t)A) + (size_t)j * mb;
    }
    return in;
}

int engine_graph_check(const engine_graph_facts *f, char *why, size_t n)
{
    if (!f->records) return 0;
    if (f->world_size > 1 && strcmp(f->transport, "nccl") != 0) {
        snprintf(why, n, "train.cuda_graphs records the step's collectives into the CUDA graph, which only NCCL can "
                         "(its collectives run on CUDA streams), but these %d ranks talk over %s, the CPU transport, "
                         "whose collectives run on the host between the recorded kernels; give every rank a GPU of "
                         "its own so the world takes NCCL (DTRUN_COMM_BACKEND auto or nccl), or set "
                         "train.cuda_graphs: false", f->world_size, f->transport);
        return -1;
    }
    if (f->hsdp_replicas > 1 && f->hsdp_converts) {
        snprintf(why, n, "train.cuda_graphs cannot record HSDP's all-reduce across nodes when parallel.reduce_dtype "
                         "differs from the gradients' type (train.grad_dtype): it allocates converted copies of the "
                         "gradient shards at every step, which a recorded step cannot; set parallel.reduce_dtype to "
                         "the gradients' type, use parallel.mode: fsdp, or set train.cuda_graphs: false");
        return -1;
    }
    return 0;
}

int engine_graph_create(engine *e, char *err, size_t errlen)
{
    char why[512];
    int blame;
    engine_graph_facts f = {.world_size = e->world_size, .records = !e->ops->host_memory,
                            .transport = e->world ? comm_transport(e->world) : "self",
                            .hsdp_replicas = e->replica_own ? comm_size(e->replica_own) : 1,
                            .hsdp_converts = e->x.re != e->x.ge};
    /* the job checks said the first already (jobspec_layout.h): a job built by hand */
    if (job_layout_check_graphs(&e->job, &blame, why, sizeof why) != 0 || engine_graph_check(&f, why, sizeof why)) {
        snprintf(err, errlen, "rank %d: %s: %s", e->rank, e->job.path, why);
        return DT_EXIT_USAGE;
    }
    engine_graph *g = calloc(1, sizeof *g);
    e->graph = g;
    size_t scalars = SIZES_GRAPH_SCALARS_BYTES;
    if (g) {
        g->in_bytes = sizes_graph_input_bytes(e->sz);
        g->dev = e->ops->alloc(scalars);
        g->in = e->ops->alloc(g->in_bytes);
        g->params = calloc((size_t)e->x.n_units, sizeof(void *));
        g->slices = calloc((size_t)e->x.n_units, sizeof(void *));
    }
    if (!g || !g->dev || !g->in || !g->params || !g->slices) {
        snprintf(err, errlen, "rank %d: out of memory for train.cuda_graphs' step buffers", e->rank);
        return DT_EXIT_FAIL;
    }
    /* device memory on either backend: sizes_graph_bytes, a workspace of the activations' */
    acct_add(e->acct, ACCT_ACTS, (long long)(g->in_bytes + scalars));
    return DT_EXIT_OK;
}

void engine_graph_destroy(engine *e)
{
    engine_graph *g = e->graph;
    if (!g) return;
    e->ops->graph_destroy(g->grads);
    e->ops->graph_destroy(g->update);
    if (g->dev) e->ops->free(g->dev);
    if (g->in) e->ops->free(g->in);
    free(g->params), free(g->slices);
    free(g);
    e->graph = NULL;
}

void engine_graph_outside(engine *e)
{
    if (e->graph) e->graph->outside = 1;
}

/* A recorded phase cannot be launched (ops.h graph_launch: a buffer it
 * borrows moved) on a rank of several: recording it again here alone would
 * leave this rank's collectives recorded apart from the others' (NCCL's rule,
 * comm.h), so the run stops. */
static int cannot_launch(engine *e, const char *phase, char *err, size_t errlen)
{
    snprintf(err, errlen, "rank %d: step %d: train.cuda_graphs: the recorded %s cannot be launched (a buffer of the "
             "backend it uses moved since it was recorded) and recording it again on this rank alone would record "
             "its collectives apart from the other ranks'; set train.cuda_graphs: false",
             e->rank, e->x.step, phase);
    return DT_EXIT_FAIL;
}

/* One phase of the step: its graph launched, or its ops issued — recorded
 * into a graph and launched when the phase ran as issued before (warm-up;
 * on the CPU nothing is recorded and the ops have run). In one process a
 * graph whose borrowed buffers moved (ops.h graph_launch) is recorded again;
 * with several, every rank dropped its graphs together before (outside).
 * A phase whose communication failed while it was recorded is not launched
 * (e->x.failed says so to the caller). */
static int run_phase(engine *e, void **graph, int *issued, void (*issue)(engine *, const void *), const void *arg,
                     const char *phase, char *err, size_t errlen)
{
    const dt_ops *ops = e->ops;
    int alone = e->world_size == 1;
    if (*graph && ops->graph_launch(*graph) == 0) return DT_EXIT_OK;
    if (*graph && !alone) return cannot_launch(e, phase, err, errlen);
    ops->graph_destroy(*graph);
    *graph = NULL;
    int record = *issued > 0;
    if (record) ops->graph_begin();
    issue(e, arg);
    void *rec = record ? ops->graph_end() : NULL;
    if (*issued < 2) (*issued)++; /* once is what counts */
    if (e->x.failed) {
        ops->graph_destroy(rec);
        return DT_EXIT_OK;
    }
    if (rec && ops->graph_launch(rec) != 0) {
        /* cannot be: nothing ran between recording and launching */
        ops->graph_destroy(rec);
        if (!alone) return cannot_launch(e, phase, err, errlen);
        issue(e, arg); /* one process: the ops as issued */
        return DT_EXIT_OK;
    }
    *graph = rec;
    return DT_EXIT_OK;
}

/* The gradients: zeroed, every micro-batch's forward and backward, the
 * strategy's finish, this rank's share of the squared norm — engine_grads'
 * ops, on device scalars. */
static void issue_grads(engine *e, const void *arg)
{
    const float loss_scale = *(const float *)arg;
    engine_graph *g = e->graph;
    int A = e->job.train.grad_accum;
    e->ops->zero(g->dev, 2 * sizeof(double)); /* loss, sumsq */
    e->so->begin_step(e->ds);
    for (int j = 0; j < A && !e->x.failed; j++) {
        e->x.last_micro = j == A - 1;
        model_batch in = graph_batch(e, j);
        model_forward(e->chunk[0], e->acts, &in, NULL);
        if (e->x.failed) break;
        model_backward(e->chunk[0], e->acts, &in, loss_scale);
    }
    /* also after a failure: it then starts nothing more and waits for what
     * is in flight, as a recording must before it ends (comm.h) */
    e->so->finish_grads(e->ds);
    if (e->x.failed) e->so->forget(e->ds); /* FSDP: a prefetch in flight */
    engine_local_grad_sumsq(e, &g->dev->sumsq, &g->dev->tmp);
}

/* The update: the clipping factor from the global norm the host wrote, AdamW
 * on every chunk's slices with lr and t from the device, the strategy's
 * after. */
static void issue_update(engine *e, const void *arg)
{
    (void)arg;
    engine_graph *g = e->graph;
    e->ops->clip_scale(&g->dev->clip, &g->dev->up.sumsq, e->job.train.grad_clip);
    for (int l = 0; l < e->n_chunks; l++) {
        engine_chunk_slices(e, l, g->params, g->slices);
        optim_step_dev(e->opt[l], &g->dev->up.hyper, g->params, g->slices, &g->dev->clip);
    }
    e->so->after_update(e->ds);
}

/* This rank's micro-batches of `step` (its dp slice of the global batch, as
 * engine_grads takes it) up to the device buffers, through the host batch
 * buffer (one micro-batch at a time). */
static void inputs_up(engine *e, int step)
{
    const job_model *m = &e->job.model;
    int mb = e->job.train.micro_batch, A = e->job.train.grad_accum;
    long first = (long)e->mc.me.dp * mb * A;
    for (int j = 0; j < A; j++) {
        engine_batch_fill(e, e->train, step, first + (long)j * mb, mb, 0);
        model_batch host = engine_batch_at(e, 0, mb), dev = graph_batch(e, j);
        if (job_model_is_lm(m)) {
            size_t bytes = (size_t)mb * (size_t)m->seq_len * sizeof(int);
            e->ops->from_host((void *)dev.tokens, host.tokens, bytes);
            e->ops->from_host((void *)dev.targets, host.targets, bytes);
        } else {
            size_t bytes = (size_t)mb * (size_t)m->channels * (size_t)m->image_size * (size_t)m->image_size *
                           sizeof(float);
            e->ops->from_host((void *)dev.images, host.images, bytes);
            e->ops->from_host((void *)dev.labels, host.labels, (size_t)mb * sizeof(int));
        }
    }
}

/* After a phase: a communication failure while it was issued or recorded,
 * else (several processes) the device's wait for what it launched, bounded
 * and watched (comm_wait_device). */
static int phase_done(engine *e, const char *phase, char *err, size_t errlen)
{
    if (e->x.failed) return engine_comm_failed(e, err, errlen);
    if (e->world_size == 1) return DT_EXIT_OK;
    char what[128];
    snprintf(what, sizeof what, "the %s on the device (within DTRUN_COMM_TIMEOUT of its launch)", phase);
    double t0 = clock_now_s();
    int rc = comm_wait_device(e->world, what);
    double t1 = clock_now_s();
    e->idle_s += t1 - t0;
    trace_span(TRACE_IDLE, t0, t1, "wait: %s", phase);
    if (strat_fail(&e->x, e->world, rc, "train.cuda_graphs") != COMM_OK) return engine_comm_failed(e, err, errlen);
    return DT_EXIT_OK;
}

int engine_graph_grads(engine *e, int step, double *loss, char *err, size_t errlen)
{
    engine_graph *g = e->graph;
    const job_train *t = &e->job.train;
    double per_step = (double)t->global_batch * e->per_sample;
    float loss_scale = (float)(1.0 / per_step);
    e->x.step = step + 1;
    e->x.training = 1;
    trace_step_begin(step + 1);
    inputs_up(e, step);
    if (g->outside && e->world_size > 1) { /* every rank records both phases again, together */
        e->ops->graph_destroy(g->grads);
        e->ops->graph_destroy(g->update);
        g->grads = g->update = NULL;
    }
    g->outside = 0;
    e->so->forget(e->ds); /* the state the recorded step starts from */
    int rc = run_phase(e, &g->grads, &g->grads_issued, issue_grads, &loss_scale, "gradients phase", err, errlen);
    if (rc == DT_EXIT_OK) rc = phase_done(e, "gradients phase", err, errlen);
    if (rc != DT_EXIT_OK) return rc;
    double back[2]; /* the step's one read: loss and squared norm, this rank's shares */
    e->ops->to_host(back, &g->dev->loss, sizeof back);
    double mine[2] = {e->counts_loss ? back[0] : 0.0, back[1]}, sum[2];
    e->local_loss = mine[0]; /* engine_local_loss: who went non-finite */
    if (engine_world_sum(e, mine, 2, sum) != COMM_OK) return engine_comm_failed(e, err, errlen);
    *loss = sum[0] / per_step;
    e->grad_sumsq = sum[1];
    return DT_EXIT_OK;
}

int engine_graph_update(engine *e, int step, double lr, double *grad_norm, char *err, size_t errlen)
{
    engine_graph *g = e->graph;
    *grad_norm = sqrt(e->grad_sumsq); /* the norm the device computes its factor from, bit for bit */
    graph_update_in in = {.sumsq = e->grad_sumsq, .hyper = optim_hyper(e->opt[0], lr, step + 1)};
    e->ops->from_host(&g->dev->up, &in, sizeof in);
    double t_opt = clock_now_s();
    int rc = run_phase(e, &g->update, &g->update_issued, issue_update, NULL, "update phase", err, errlen);
    trace_span(TRACE_COMPUTE, t_opt, clock_now_s(), "optimizer");
    if (rc == DT_EXIT_OK) rc = phase_done(e, "update phase", err, errlen);
    trace_step_end();
    return rc;
}
