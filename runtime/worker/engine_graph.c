/* engine_graph.c — the step of train.cuda_graphs: a training step that reads
 * nothing back to the host in its middle, so that the CUDA backend can record
 * it once and replay it (ops.h, graph_begin).
 *
 * The same arithmetic in the same order as engine.c's step; what moves:
 *  - Inputs. Before the step, outside anything recorded, every micro-batch's
 *    tokens and targets (ViT: images and labels) are copied from the host
 *    into fixed device buffers; micro-batch j reads its own part of them
 *    (model_batch.on_device), and the backward's seed is made on the device
 *    from the targets there (ops->loss_seed).
 *  - The loss and the squared gradient norm are summed into device scalars
 *    (model_batch.loss_sum, optim_grad_sumsq_dev) and read back once, after
 *    the gradients: the host's own sums, done where the data is.
 *  - Clipping: ops->clip_scale computes the factor from the device norm and
 *    the optimizer scales the gradients by it (ops->scale_dev).
 *  - AdamW reads its learning rate and step from a device scalar the host
 *    writes before the update (optim_step_dev).
 *
 * Two graphs a step, not one: the gradients (zeroing, forward and backward of
 * every micro-batch, the norm) and the update (clipping, AdamW). Between them
 * the host reads the loss and the norm, because train.c decides there whether
 * the step updates at all (a non-finite loss stops the run or skips the
 * update: train.skip_nonfinite; a data file that changed stops it) and logs
 * the norm. One graph for the whole step would need that decision on the
 * device (an update that skips itself when the loss is not finite): not
 * written. Per step the host then waits for the device 2 A + 2 times (A
 * micro-batches: each one's two input arrays go up, from_host; the loss and
 * norm come down; the learning rate goes up), each on an idle stream,
 * instead of at every micro-batch's loss and seed and every gradient
 * tensor's sum of squares, with the kernels of the step in between.
 *
 * Warm-up. A phase is recorded only after it ran once as issued in this
 * process (the first step: the scratch grows to its size, cuBLASLt picks its
 * algorithms, AdamW's tensor list goes to the device, every kernel loads);
 * the second step records each phase and launches it, later steps launch
 * the graphs. On the CPU backend nothing is recorded (graph_end gives NULL):
 * every step issues these same ops, which is what the CPU tests compare with
 * the step without train.cuda_graphs. Evaluation, checkpoints and logging run
 * between steps, outside the graphs, on the ops as before; should one of
 * them grow the backend's scratch, the next launch says so and the phase is
 * recorded again. With a trace (log.trace) a replayed step shows no unit
 * spans: its hooks do not run on the host.
 *
 * Scope: one process (job_layout_check_graphs: no communication, pp 1, no
 * offload), which the job checks refuse otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/ops.h"
#include "lib/job/jobspec_layout.h"
#include "lib/util/clock.h"
#include "lib/util/exit_codes.h"
#include "runtime/parallel/trace.h"
#include "runtime/worker/engine_internal.h"

/* The scalars a step keeps where the ops are: one allocation of
 * SIZES_GRAPH_SCALARS_BYTES, loss and sumsq first (read back together). */
typedef struct {
    double loss;          /* the step's summed loss (this rank's share) */
    double sumsq;         /* the squared global gradient norm */
    double tmp;           /* optim_grad_sumsq_dev's, for bf16 gradients */
    float clip;           /* the clipping factor (ops->clip_scale) */
    dt_adamw_hyper hyper; /* the update's lr and t */
} graph_scalars;
_Static_assert(sizeof(graph_scalars) <= SIZES_GRAPH_SCALARS_BYTES, "graph_scalars outgrew its sizes.h budget");

struct engine_graph {
    graph_scalars *dev;     /* ops memory */
    char *in;               /* every micro-batch's inputs, ops memory (sizes_graph_input_bytes) */
    size_t in_bytes;
    void *grads, *update;   /* the recorded phases (NULL: not yet, or nothing recorded: cpu) */
    int grads_issued, update_issued; /* each phase ran (as issued or recorded) before: warm */
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
    if (m->kind == MODEL_GPT) {
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

int engine_graph_create(engine *e, char *err, size_t errlen)
{
    char why[512];
    int blame;
    if (job_layout_check_graphs(&e->job, &blame, why, sizeof why) != 0 || e->ex || e->world_size != 1) {
        /* the job checks said so already (jobspec_layout.h): a job built by hand */
        snprintf(err, errlen, "rank %d: %s: %s", e->rank, e->job.path,
                 e->ex || e->world_size != 1 ? "train.cuda_graphs replays the step of one process" : why);
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

/* One phase of the step: its graph launched, or its ops issued — recorded
 * into a graph and launched when the phase ran as issued before (warm-up;
 * on the CPU nothing is recorded and the ops have run). A graph whose
 * borrowed buffers moved (ops.h graph_launch) is recorded again. */
static void run_phase(engine *e, void **graph, int *issued, void (*issue)(engine *, const void *), const void *arg)
{
    const dt_ops *ops = e->ops;
    if (*graph && ops->graph_launch(*graph) == 0) return;
    ops->graph_destroy(*graph);
    *graph = NULL;
    int record = *issued > 0;
    if (record) ops->graph_begin();
    issue(e, arg);
    if (record && (*graph = ops->graph_end()) && ops->graph_launch(*graph) != 0) {
        /* cannot be: nothing ran between recording and launching; run the ops as issued */
        ops->graph_destroy(*graph);
        *graph = NULL;
        issue(e, arg);
    }
    if (*issued < 2) (*issued)++; /* once is what counts */
}

/* The gradients: zeroed, every micro-batch's forward and backward, the
 * strategy's finish, the squared norm — engine_grads' ops, on device scalars. */
static void issue_grads(engine *e, const void *arg)
{
    const float loss_scale = *(const float *)arg;
    engine_graph *g = e->graph;
    int A = e->job.train.grad_accum;
    e->ops->zero(g->dev, 2 * sizeof(double)); /* loss, sumsq */
    e->so->begin_step(e->ds);
    for (int j = 0; j < A; j++) {
        e->x.last_micro = j == A - 1;
        model_batch in = graph_batch(e, j);
        model_forward(e->chunk[0], e->acts, &in, NULL);
        model_backward(e->chunk[0], e->acts, &in, loss_scale);
    }
    e->so->finish_grads(e->ds);
    engine_local_grad_sumsq(e, &g->dev->sumsq, &g->dev->tmp);
}

/* The update: the clipping factor from the device norm, AdamW on every
 * chunk's slices with lr and t from the device, the strategy's after. */
static void issue_update(engine *e, const void *arg)
{
    (void)arg;
    engine_graph *g = e->graph;
    e->ops->clip_scale(&g->dev->clip, &g->dev->sumsq, e->job.train.grad_clip);
    for (int l = 0; l < e->n_chunks; l++) {
        engine_chunk_slices(e, l, g->params, g->slices);
        optim_step_dev(e->opt[l], &g->dev->hyper, g->params, g->slices, &g->dev->clip);
    }
    e->so->after_update(e->ds);
}

/* Every micro-batch's inputs of `step` up to the device buffers, through the
 * host batch buffer (one micro-batch at a time). */
static void inputs_up(engine *e, int step)
{
    const job_model *m = &e->job.model;
    int mb = e->job.train.micro_batch, A = e->job.train.grad_accum;
    for (int j = 0; j < A; j++) {
        engine_batch_fill(e, e->train, step, (long)j * mb, mb, 0);
        model_batch host = engine_batch_at(e, 0, mb), dev = graph_batch(e, j);
        if (m->kind == MODEL_GPT) {
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

int engine_graph_grads(engine *e, int step, double *loss, char *err, size_t errlen)
{
    (void)err, (void)errlen; /* one process: nothing to fail on but the device, which stops the process */
    engine_graph *g = e->graph;
    const job_train *t = &e->job.train;
    double per_step = (double)t->global_batch * e->per_sample;
    float loss_scale = (float)(1.0 / per_step);
    e->x.step = step + 1;
    e->x.training = 1;
    trace_step_begin(step + 1);
    inputs_up(e, step);
    run_phase(e, &g->grads, &g->grads_issued, issue_grads, &loss_scale);
    double back[2]; /* the step's one read: loss and squared norm */
    e->ops->to_host(back, &g->dev->loss, sizeof back);
    e->local_loss = back[0]; /* one process: its loss is the whole loss (counts_loss) */
    *loss = back[0] / per_step;
    e->grad_sumsq = back[1];
    return DT_EXIT_OK;
}

int engine_graph_update(engine *e, int step, double lr, double *grad_norm, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    engine_graph *g = e->graph;
    *grad_norm = sqrt(e->grad_sumsq); /* the norm the device computes its factor from, bit for bit */
    dt_adamw_hyper h = optim_hyper(e->opt[0], lr, step + 1);
    e->ops->from_host(&g->dev->hyper, &h, sizeof h);
    double t_opt = clock_now_s();
    run_phase(e, &g->update, &g->update_issued, issue_update, NULL);
    trace_span(TRACE_COMPUTE, t_opt, clock_now_s(), "optimizer");
    trace_step_end();
    return DT_EXIT_OK;
}
