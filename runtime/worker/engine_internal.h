/* engine_internal.h — the engine object, shared by engine.c (setup, step,
 * evaluation) and engine_dump.c (parameters to a file). Private to
 * runtime/parallel. */
#ifndef DTRUN_ENGINE_INTERNAL_H
#define DTRUN_ENGINE_INTERNAL_H

#include "runtime/ckpt/ckpt.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/store.h"
#include "runtime/data/data.h"
#include "runtime/parallel/mesh.h"
#include "runtime/worker/engine.h"
#include "runtime/parallel/pp_exec.h"
#include "runtime/parallel/sizes.h"
#include "runtime/parallel/strategy.h"
#include "runtime/optim/optim.h"

/* Host buffers for the inputs of `cap` samples: one micro-batch (pp = 1), or
 * every micro-batch of the step (pp > 1: the executor may ask for any of them
 * at any time during the step). */
typedef struct {
    int cap;
    int *tokens, *targets, *labels;
    int *positions, *segments; /* packed samples (job_model.packed), else NULL */
    float *images;
    size_t bytes;
} batch_buf;

typedef struct engine_graph engine_graph; /* engine_graph.c */

struct engine {
    job_spec job;
    const dt_ops *ops;
    int rank, world_size;
    comm_store *store;
    comm *world;
    mesh mesh;
    mesh_comms mc;
    int have_mc;
    comm *shard_own, *replica_own; /* HSDP's groups, when not simply dp */
    comm *emb_group;               /* GPT with pp > 1, first / last stage: the tied wte's two ranks */
    sizes *sz;
    int n_chunks;                  /* virtual stages with pp > 1, else 1 */
    model **chunk;                 /* [n_chunks]: local chunk l = global chunk l * pp + pp rank */
    optim **opt;                   /* [n_chunks] */
    model_acts *acts;              /* pp = 1: the one micro-batch's activations */
    pp_exec *ex;                   /* pp > 1 */
    int micro_per_step;            /* pp > 1: the schedule's micro-batches */
    model **unit_model;            /* [n_units] */
    strat_ctx x;
    const strat_ops *so;
    dp_strategy *ds;
    account *acct;
    data_loader *train, *val;
    batch_buf buf;
    int batch_B;                   /* pp > 1: samples per micro-batch of the running step */
    int per_sample;                /* tokens (GPT) or 1 (ViT) per sample */
    int counts_loss;               /* this rank's losses enter the global sum */
    double grad_sumsq;             /* global, from engine_grads */
    double local_loss;             /* this rank's share of the last step's loss sum */
    double idle_s, mark;
    pp_exec_result last_pp;        /* the last pipeline step's numbers */
    char layout[96];
    /* decoding (engine_decode.c): the KV cache of chunk 0, this rank's
     * logits and their gather over tp (device memory) */
    model_kv *kv;
    float *dec_logits, *dec_gather;
    int dec_vmax;
    engine_graph *graph;           /* train.cuda_graphs: the step's device scalars and graphs, else NULL */
    engine_moe moe;                /* model.moe: the last step's routing (engine_moe.c) */
};

/* engine.c: `B` samples from sample `at` of the host batch buffer; samples
 * [begin, begin + count) of the global batch of `step` into it from sample
 * `at` on. */
model_batch engine_batch_at(const engine *e, int at, int B);
void engine_batch_fill(engine *e, data_loader *d, long step, long begin, int count, int at);
/* engine.c: this rank's share of the squared global gradient norm; with acc,
 * added into *acc where the ops keep it (tmp: one more double there) and 0
 * returned. */
double engine_local_grad_sumsq(engine *e, double *acc, double *tmp);
/* engine.c: n doubles summed over the world, the same bits on every rank
 * (float pairs through one all-gather, added in rank order; host memory;
 * counted as idle). COMM_OK, or the error recorded in e->x (strat_fail). */
int engine_world_sum(engine *e, const double *v, int n, double *out);
/* engine.c: the parameter and gradient buffers of local chunk l's slices,
 * unit by unit (the strategy's; valid until its next hook). */
void engine_chunk_slices(engine *e, int l, void **params, void **grads);

/* engine_graph.c: the step of train.cuda_graphs. create: its device buffers
 * (accounted as activations, as sizes_graph_bytes says): DT_EXIT_OK, or
 * DT_EXIT_USAGE (a job or a run it cannot record: engine_graph_check) /
 * DT_EXIT_FAIL (out of memory) with one line in err; destroy: frees them and
 * the graphs (none: nothing). grads and update stand in for engine_grads and
 * engine_update. outside: the engine ran ops outside the step (evaluation,
 * checkpoints, dumps, decoding); with several processes the next step records
 * its graphs again on every rank (a no-op without train.cuda_graphs). */
int engine_graph_create(engine *e, char *err, size_t errlen);
void engine_graph_destroy(engine *e);
int engine_graph_grads(engine *e, int step, double *loss, char *err, size_t errlen);
int engine_graph_update(engine *e, int step, double lr, double *grad_norm, char *err, size_t errlen);
void engine_graph_outside(engine *e);

/* What engine_graph_create checks beyond the job (jobspec_layout.h), as
 * found at set-up. */
typedef struct {
    int world_size;
    int records;             /* the backend records graphs: its memory is the device's (cuda) */
    const char *transport;   /* the world's communication (comm_transport) */
    int hsdp_replicas;       /* HSDP: ranks holding the same shard, across nodes (1: none) */
    int hsdp_converts;       /* their all-reduce runs in another type than the gradients' */
} engine_graph_facts;

/* 0 when those runs can be recorded, else -1 with one line in why (what, why,
 * what to set instead): several processes on a backend that records need
 * NCCL (the CPU transports run collectives on the host, between the recorded
 * kernels), and HSDP's cross-node all-reduce in another type than the
 * gradients' allocates its copies at every step. Nothing is refused where
 * nothing is recorded (the cpu backend). */
int engine_graph_check(const engine_graph_facts *f, char *why, size_t n);

/* engine_moe.c (model.moe; nothing happens without MoE blocks). init / free:
 * the step's numbers. values: how many doubles a step adds to the world's sum
 * (0 without MoE): mine fills them with this rank's routing since reset, take
 * reads the sum back (samples: the global batch's). update_bias: DeepSeek-V3's
 * bias step from those loads (model.moe.bias_update_rate > 0), after an
 * update. ckpt: the routing biases as checkpoint pieces (count of them on
 * this rank; bufs receive their host buffers, for the caller to free), and
 * back (a checkpoint without them leaves them at 0); -1 with why. */
int engine_moe_init(engine *e);
void engine_moe_free(engine *e);
int engine_moe_values(const engine *e);
void engine_moe_reset(engine *e);
void engine_moe_mine(const engine *e, double *v);
void engine_moe_take(engine *e, const double *sum, double samples);
void engine_moe_update_bias(engine *e);
int engine_moe_ckpt_count(const engine *e);
int engine_moe_ckpt_pieces(engine *e, ckpt_piece *out, float **bufs);
int engine_moe_ckpt_load(engine *e, const ckpt *ck, char *why, size_t n);

/* engine_decode.c: frees what engine_decode_begin allocated (no-op without). */
void engine_decode_end(engine *e);

/* The step failed on communication: err gets the recorded line; returns
 * DT_EXIT_COMM. */
int engine_comm_failed(engine *e, char *err, size_t errlen);

/* engine_trace.c: start recording when a trace is asked for; the pipeline
 * executor's hooks that put its actions on the trace's lanes. */
void engine_trace_begin(engine *e);
void engine_trace_pp_span(void *ctx, pp_op op, int chunk, int mb, double t0, double t1);
void engine_trace_send_wait(void *ctx, double t0, double t1);

#endif
