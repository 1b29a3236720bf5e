/* engine.c — one worker's training engine (see engine.h).
 *
 * Setup: communicators (store, world, mesh groups, HSDP's two levels, the tied
 * embedding's pair of stages), this rank's model chunks with their tp shard, the
 * strategy, the optimizer over the strategy's slices, the data. A step: this dp
 * rank's slice of the global batch through forward / backward — micro-batch by
 * micro-batch with pp = 1, through the pipeline executor (pp_exec.h) otherwise —
 * while tp and the strategy act in the model's hooks; the strategy finishes the
 * gradient sync; pipelines sum the tied wte gradient; one exchange of (loss,
 * squared gradient norm) over the world; clip, AdamW on the slices; the
 * strategy makes the parameters current. */
#include "runtime/worker/engine.h"
#include "runtime/worker/engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "lib/job/jobspec_layout.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/store.h"
#include "runtime/data/data.h"
#include "runtime/env.h"
#include "runtime/parallel/mesh.h"
#include "runtime/model/model.h"
#include "runtime/parallel/pp_exec.h"
#include "runtime/parallel/sizes.h"
#include "runtime/parallel/strategy.h"
#include "runtime/parallel/trace.h"
#include "runtime/optim/optim.h"
#include "lib/util/exit_codes.h"

static int batch_alloc(batch_buf *b, const job_model *spec, int cap)
{
    memset(b, 0, sizeof *b);
    b->cap = cap;
    if (job_model_is_lm(spec)) {
        size_t n = (size_t)cap * spec->seq_len;
        b->tokens = malloc(n * sizeof(int));
        b->targets = malloc(n * sizeof(int));
        b->bytes = 2 * n * sizeof(int);
        if (spec->packed) { /* the document mask's positions and segments */
            b->positions = malloc(n * sizeof(int));
            b->segments = malloc(n * sizeof(int));
            b->bytes += 2 * n * sizeof(int);
            if (!b->positions || !b->segments) return -1;
        }
        return b->tokens && b->targets ? 0 : -1;
    }
    size_t n = (size_t)cap * spec->channels * spec->image_size * spec->image_size;
    b->images = malloc(n * sizeof(float));
    b->labels = malloc((size_t)cap * sizeof(int));
    b->bytes = n * sizeof(float) + (size_t)cap * sizeof(int);
    return b->images && b->labels ? 0 : -1;
}

static void batch_free(batch_buf *b)
{
    free(b->tokens), free(b->targets), free(b->images), free(b->labels), free(b->positions), free(b->segments);
}

/* `B` samples from sample `at` of the buffer. */
model_batch engine_batch_at(const engine *e, int at, int B)
{
    const job_model *spec = &e->job.model;
    const batch_buf *b = &e->buf;
    model_batch mb = {.B = B};
    if (job_model_is_lm(spec)) {
        size_t o = (size_t)at * spec->seq_len;
        mb.tokens = b->tokens + o;
        mb.targets = b->targets + o;
        if (b->positions) mb.positions = b->positions + o, mb.segments = b->segments + o;
    } else {
        mb.images = b->images + (size_t)at * spec->channels * spec->image_size * spec->image_size;
        mb.labels = b->labels + at;
    }
    return mb;
}

/* Samples [begin, begin + count) of the global batch of `step` into the buffer
 * from sample `at` on. */
void engine_batch_fill(engine *e, data_loader *d, long step, long begin, int count, int at)
{
    if (count <= 0) return;
    model_batch mb = engine_batch_at(e, at, count);
    data_batch(d, step, (int)begin, count, (int *)mb.tokens, (int *)mb.targets, (float *)mb.images,
               (int *)mb.labels);
    if (mb.positions) data_batch_docs(d, step, (int)begin, count, (int *)mb.positions, (int *)mb.segments);
}

/* Samples that only keep a pipeline's micro-batches the same size: target / label
 * -1, which the loss ignores (ops.h: targets < 0 count 0, no gradient). */
static void batch_pad(engine *e, int at, int count)
{
    const job_model *spec = &e->job.model;
    if (count <= 0) return;
    model_batch mb = engine_batch_at(e, at, count);
    if (job_model_is_lm(spec)) {
        size_t n = (size_t)count * spec->seq_len;
        memset((int *)mb.tokens, 0, n * sizeof(int));
        for (size_t i = 0; i < n; i++) ((int *)mb.targets)[i] = -1;
        for (size_t i = 0; mb.positions && i < n; i++) /* one segment a padding sample */
            ((int *)mb.positions)[i] = (int)(i % (size_t)spec->seq_len), ((int *)mb.segments)[i] = 0;
    } else {
        memset((float *)mb.images, 0,
               (size_t)count * spec->channels * spec->image_size * spec->image_size * sizeof(float));
        for (int i = 0; i < count; i++) ((int *)mb.labels)[i] = -1;
    }
}

/* ---- the model's hooks: the data-parallel strategy ---- */

/* The trace's unit spans (trace.h) leave out the strategy's work in the hooks. */
static void hook_before(void *ctx, int unit, model_phase phase)
{
    engine *e = ctx;
    trace_unit_close();
    e->so->before(e->ds, unit, phase);
    trace_unit_open(unit, phase == PHASE_BACKWARD);
}

static void hook_after(void *ctx, int unit, model_phase phase)
{
    engine *e = ctx;
    trace_unit_close();
    e->so->after(e->ds, unit, phase);
}

/* ---- the pipeline executor's hooks ---- */

/* DDP and ZeRO-1 reduce a chunk's gradients during its last backward of the step. */
static void pp_before_backward(void *ctx, int chunk, int mb, int last_of_chunk, int last_of_rank)
{
    engine *e = ctx;
    (void)chunk, (void)mb, (void)last_of_rank;
    e->x.last_micro = last_of_chunk;
}

/* Micro-batch mb of the step, loaded before the step began (the executor
 * sets its step and first sample, model_batch.step). */
static int pp_batch(void *ctx, int mb, model_batch *out, char *err, size_t errlen)
{
    engine *e = ctx;
    (void)err, (void)errlen;
    *out = engine_batch_at(e, mb * e->batch_B, e->batch_B);
    return 0;
}

/* ---- setup ---- */

/* Which strategy runs the data-parallel dimension. A group of one shards
 * nothing: DDP (which then does nothing with dp = 1, or replicates HSDP's
 * one-rank nodes) is the same run without the machinery. */
static const strat_ops *pick_strategy(const job_spec *job, const sizes *sz)
{
    int dp = sizes_grad_dp(sz); /* context parallelism folds into the gradient reduction */
    switch (job->parallel.mode) {
    case SHARD_ZERO1: return dp > 1 ? &strat_zero1 : &strat_ddp;
    case SHARD_ZERO2: return dp > 1 ? &strat_zero2 : &strat_ddp;
    case SHARD_FSDP:
    case SHARD_HSDP: /* one shard per rank is DDP, unless it lives on the host */
        return sizes_shard_group(sz, SHARD_OF_PARAM) > 1 || (job->train.offload & OFFLOAD_PARAMS) ? &strat_fsdp
                                                                                                  : &strat_ddp;
    default: return &strat_ddp;
    }
}

/* The group gradients are reduced over: dp, or dp x cp (Megatron's
 * data-parallel-with-context-parallel group). */
static comm *grad_group(const engine *e) { return e->mc.dp_cp ? e->mc.dp_cp : e->mc.dp; }

/* FSDP: the shard group is the gradient group (dp, or dp x cp). HSDP: runs of S
 * consecutive ranks of it (one node's) shard, ranks with the same position in
 * their run replicate. */
static int make_shard_groups(engine *e, comm **shard, comm **replica, char *err, size_t errlen)
{
    int S = sizes_shard_group(e->sz, SHARD_OF_PARAM), dp = sizes_grad_dp(e->sz);
    *shard = grad_group(e);
    *replica = NULL;
    if (S == dp) return COMM_OK;
    comm *g = grad_group(e);
    int d = comm_rank(g), *members = malloc((size_t)dp * sizeof(int)), n = 0;
    if (!members) {
        snprintf(err, errlen, "out of memory");
        return COMM_ESYS;
    }
    for (int i = d / S * S; i < d / S * S + S; i++) members[n++] = i;
    int rc = comm_group(g, members, n, &e->shard_own, err, errlen);
    n = 0;
    for (int i = d % S; i < dp; i += S) members[n++] = i;
    if (rc == COMM_OK) rc = comm_group(g, members, n, &e->replica_own, err, errlen);
    free(members);
    *shard = e->shard_own;
    *replica = e->replica_own;
    return rc;
}

/* GPT split over pipeline stages: the first stage's wte and the last stage's
 * tied copy are summed between the two ranks with the same (dp, tp) —
 * Megatron's embedding group. Only those two call comm_group. */
static int make_emb_group(engine *e, char *err, size_t errlen)
{
    int pp = e->job.parallel.pp;
    mesh_coord me = e->mc.me;
    if (!job_model_tied_head(&e->job.model) || pp == 1 || (me.pp != 0 && me.pp != pp - 1)) return COMM_OK;
    int members[2] = {mesh_rank(&e->mesh, (mesh_coord){.dp = me.dp, .cp = me.cp, .pp = 0, .tp = me.tp}),
                      mesh_rank(&e->mesh, (mesh_coord){.dp = me.dp, .cp = me.cp, .pp = pp - 1, .tp = me.tp})};
    return comm_group(e->world, members, 2, &e->emb_group, err, errlen);
}

static int setup_comms(engine *e, char *err, size_t errlen)
{
    char why[512];
    if (e->world_size > 1 && !(e->store = store_open_env(why, sizeof why))) {
        snprintf(err, errlen, "rank %d: cannot open the store: %s", e->rank, why);
        return -1;
    }
    comm_set_ops(e->ops);  /* where buffers live, which stream to follow */
    if (comm_world_init(&e->world, e->store, why, sizeof why) != COMM_OK) {
        snprintf(err, errlen, "rank %d: cannot join the world: %s", e->rank, why);
        return -1;
    }
    if (mesh_from_parallel(&e->mesh, &e->job.parallel, why, sizeof why) != 0 ||
        mesh_comms_create(&e->mesh, e->world, &e->mc, why, sizeof why) != COMM_OK) {
        snprintf(err, errlen, "rank %d: cannot build the mesh: %s", e->rank, why);
        return -1;
    }
    e->have_mc = 1;
    if (make_emb_group(e, why, sizeof why) != COMM_OK) {
        snprintf(err, errlen, "rank %d: cannot pair the tied embedding's stages: %s", e->rank, why);
        return -1;
    }
    return 0;
}

/* model_set_mem_observer's: the bytes an MoE block allocated (> 0) or freed */
static void acts_observed(void *ctx, long long bytes) { acct_add(ctx, ACCT_ACTS, bytes); }

/* This rank's chunks (pp = 1: one chunk of every unit), initialized, counted. */
static int setup_chunks(engine *e, char *err, size_t errlen)
{
    const job_spec *job = &e->job;
    int pp = job->parallel.pp, n_units = e->x.n_units;
    const int *first = sizes_first_unit(e->sz);
    e->n_chunks = pp > 1 ? job->parallel.virtual_stages : 1;
    e->chunk = calloc((size_t)e->n_chunks, sizeof(model *));
    e->opt = calloc((size_t)e->n_chunks, sizeof(optim *));
    if (!e->chunk || !e->opt) {
        snprintf(err, errlen, "rank %d: out of memory", e->rank);
        return -1;
    }
    /* mixed precision: bf16 weights, gradients of train.grad_dtype (model.h) */
    model_precision prec = {.bf16 = job->train.precision == PREC_BF16,
                            .grad_bf16 = job->train.precision == PREC_BF16 && job->train.grad_dtype == DTYPE_BF16,
                            .acts_on_host = (job->train.offload & OFFLOAD_ACTIVATIONS) != 0};
    for (int l = 0; l < e->n_chunks; l++) {
        int c = pp_chunk_id(e->mc.me.pp, l, pp);
        model_shard sh = {.tp_rank = e->mc.me.tp, .tp_size = job->parallel.tp,
                          .unit_begin = pp > 1 ? first[c] : 0, .unit_end = pp > 1 ? first[c + 1] : n_units,
                          .sp = job->parallel.sequence_parallel && job->parallel.tp > 1,
                          .cp_rank = e->mc.me.cp, .cp_size = job->parallel.cp,
                          .ep_rank = e->mc.me.ep, .ep_size = job->parallel.ep};
        if (!(e->chunk[l] = model_create_prec(&job->model, &sh, e->ops, job->train.recompute, &prec))) {
            snprintf(err, errlen, "rank %d: cannot create the model chunk of units [%d, %d)", e->rank,
                     sh.unit_begin, sh.unit_end);
            return -1;
        }
        model_init_params(e->chunk[l], job->train.seed);
        for (int u = sh.unit_begin; u < sh.unit_end; u++) {
            e->unit_model[u] = e->chunk[l];
            long long n = (long long)model_unit_local_numel(e->chunk[l], u);
            long long f = (long long)model_unit_frozen_local_numel(e->chunk[l], u); /* train.lora's base */
            acct_add(e->acct, ACCT_PARAMS, (n + f) * (long long)model_param_elem_bytes(e->chunk[l]));
            acct_add(e->acct, ACCT_GRADS, n * (long long)model_grad_elem_bytes(e->chunk[l]));
        }
    }
    /* the fp32 working copies of mixed precision, one set for all the rank's
     * chunks (they compute one unit at a time): workspace, counted once
     * (sizes_mixed_work_bytes) */
    if (model_share_mixed_work(e->chunk, e->n_chunks)) {
        snprintf(err, errlen, "rank %d: the model chunks cannot share their fp32 working copies", e->rank);
        return -1;
    }
    acct_add(e->acct, ACCT_ACTS, (long long)model_mixed_work_bytes(e->chunk[0]));
    /* what the model sizes as it computes (an MoE block's experts' rows, as
     * many as arrive) is activations too, counted as it comes and goes */
    for (int l = 0; l < e->n_chunks; l++) model_set_mem_observer(e->chunk[l], acts_observed, e->acct);
    return 0;
}

/* What one micro-batch of a chunk stashes, as model_acts_create allocates it. */
static model_acts_size chunk_acts(const engine *e, model *m, int mb)
{
    model_acts_size z = model_acts_sizes(model_get_spec(m), model_get_shard(m), mb, e->job.train.recompute,
                                         model_get_precision(m));
    /* ZB-H1's W-pending gradients, kept with the stash (model_acts_create_split) */
    if (e->ex && e->job.parallel.pp_schedule == PP_ZB_H1)
        z.stash += model_acts_wkeep_bytes(model_get_spec(m), model_get_shard(m), mb, model_get_precision(m));
    return z;
}

/* Activations: one micro-batch's with pp = 1; the executor's slots with pp > 1
 * (each slot one stash of its chunk, or the rank's one pool of stashes), each
 * chunk's own working set and the one scratch they share, as allocated; the
 * dry-run (sizes_rank_memory) must say the same. */
static int setup_acts(engine *e, char *err, size_t errlen)
{
    const job_spec *job = &e->job;
    int mb = job->train.micro_batch, pp = job->parallel.pp, cap;
    /* host buffers count where they are device memory: on the CPU backend (sizes.h) */
    int host_is_device = e->ops->host_memory;
    size_t host = host_is_device ? sizes_acts_host_bytes(e->sz) : 0;
    if (pp == 1) {
        if (!(e->acts = model_acts_create(e->chunk[0], mb))) {
            snprintf(err, errlen, "rank %d: out of memory for the activations", e->rank);
            return -1;
        }
        model_acts_size z = chunk_acts(e, e->chunk[0], mb);
        acct_add(e->acct, ACCT_ACTS, (long long)(z.stash + model_acts_work_bytes(e->chunk[0]) +
                                                 model_acts_scratch_bytes(e->chunk[0]) + host));
        acct_add(e->acct, ACCT_HOST, (long long)z.host); /* train.offload: activations */
    } else {
        char why[512];
        pp_exec_config cfg = {.sched = sizes_schedule(e->sz), .rank = e->mc.me.pp, .pp = e->mc.pp,
                              .chunks = e->chunk, .micro_batch = mb, .ops = e->ops};
        if (!(e->ex = pp_exec_create(&cfg, why, sizeof why))) {
            snprintf(err, errlen, "rank %d: %s", e->rank, why);
            return -1;
        }
        pp_exec_hooks h = {.ctx = e, .before_backward = pp_before_backward, .span = engine_trace_pp_span,
                           .send_wait = engine_trace_send_wait};
        pp_exec_set_hooks(e->ex, &h);
        /* the chunks compute one at a time: one scratch serves them all */
        if (model_share_scratch(e->chunk, e->n_chunks)) {
            snprintf(err, errlen, "rank %d: the model chunks cannot share their activation scratch", e->rank);
            return -1;
        }
        /* the stashes: each slot's own, or the rank's one pool (pp_exec.h) */
        size_t pool = pp_exec_pool_bytes(e->ex), scratch = 0;
        acct_add(e->acct, ACCT_ACTS, (long long)pool);
        for (int l = 0; l < e->n_chunks; l++) {
            model_acts_size z = chunk_acts(e, e->chunk[l], mb);
            acct_add(e->acct, ACCT_ACTS,
                     (long long)pp_exec_slots(e->ex, l) * (long long)((pool ? 0 : z.stash) + host) +
                         (long long)model_acts_work_bytes(e->chunk[l]));
            acct_add(e->acct, ACCT_HOST, (long long)pp_exec_slots(e->ex, l) * (long long)z.host);
            if (model_acts_scratch_bytes(e->chunk[l]) > scratch) scratch = model_acts_scratch_bytes(e->chunk[l]);
        }
        acct_add(e->acct, ACCT_ACTS, (long long)scratch);
        e->micro_per_step = job->parallel.microbatches;
    }
    cap = sizes_batch_samples(e->sz);
    if (batch_alloc(&e->buf, &job->model, cap) != 0) {
        snprintf(err, errlen, "rank %d: out of memory for the batch", e->rank);
        return -1;
    }
    if (host_is_device) acct_add(e->acct, ACCT_ACTS, (long long)e->buf.bytes);
    return 0;
}

/* AdamW over the slices the strategy says this rank updates, one per chunk;
 * with train.offload: optimizer its state in host memory, stepped by the CPU
 * ops (accounted as host, not device, memory). */
static int setup_optim(engine *e)
{
    char why[8];
    const dt_ops *host = e->job.train.offload & OFFLOAD_OPTIMIZER ? dt_ops_select(DT_DEVICE_CPU, 0, why, sizeof why) : NULL;
    for (int l = 0; l < e->n_chunks; l++) {
        const model_shard *sh = model_get_shard(e->chunk[l]);
        int n = sh->unit_end - sh->unit_begin;
        size_t *lo = malloc((size_t)n * sizeof(size_t)), *hi = malloc((size_t)n * sizeof(size_t));
        if (!lo || !hi) {
            free(lo), free(hi);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            strat_slice sl;
            e->so->slice(e->ds, sh->unit_begin + i, &sl);
            lo[i] = sl.lo;
            hi[i] = sl.lo + sl.len;
        }
        e->opt[l] = optim_create_offload(e->chunk[l], e->ops, host, &e->job.train, lo, hi);
        free(lo), free(hi);
        if (!e->opt[l]) return -1;
        long long state = (long long)optim_state_bytes(e->opt[l]), master = (long long)optim_master_bytes(e->opt[l]);
        if (host) {
            acct_add(e->acct, ACCT_HOST, state + master + (long long)optim_host_scratch_bytes(e->opt[l]));
        } else {
            acct_add(e->acct, ACCT_OPTIM, state);
            acct_add(e->acct, ACCT_MASTER, master);
        }
        acct_add(e->acct, ACCT_ACTS, (long long)optim_scratch_bytes(e->opt[l]));
    }
    return 0;
}

engine *engine_create(const job_spec *job, int *exit_code, char *err, size_t errlen)
{
    *exit_code = DT_EXIT_FAIL;
    const dt_env *env = dt_env_get();
    int rank = env->rank, world = env->world_size;
    const job_parallel *par = &job->parallel;
    char layout_why[512]; /* the launcher checked the same rule before spawning */
    if (job_layout_check_world(par, world, "WORLD_SIZE", layout_why, sizeof layout_why)) {
        snprintf(err, errlen, "rank %d: %s: %s", rank, job->path, layout_why);
        return NULL;
    }
    /* the launcher refused it before spawning (preflight_job) */
    const char *unsupported = model_unsupported(&job->model);
    if (unsupported) {
        snprintf(err, errlen, "rank %d: %s: %s", rank, job->path, unsupported);
        *exit_code = DT_EXIT_USAGE;
        return NULL;
    }
    /* job_validate says the same; a micro-batch of any size (evaluation's last may
     * hold one sample) splits into tp equal row parts when a sample does */
    int sp = par->sequence_parallel && par->tp > 1;
    if (sp && model_seq_len(&job->model) % par->tp != 0) {
        snprintf(err, errlen, "rank %d: %s: parallel.sequence_parallel splits each sample's %d tokens over tp %d, "
                 "which does not divide them", rank, job->path, model_seq_len(&job->model), par->tp);
        return NULL;
    }
    engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "rank %d: out of memory", rank);
        return NULL;
    }
    e->job = *job;
    e->rank = rank;
    e->world_size = world;
    if (job->train.threads > 0) dt_ops_set_threads(job->train.threads);
    e->acct = acct_create();
    int n_units = model_n_units(&job->model);
    e->unit_model = calloc((size_t)n_units, sizeof(model *));
    if (!e->acct || !e->unit_model) {
        snprintf(err, errlen, "rank %d: out of memory", rank);
        goto fail;
    }
    /* train.device, before the communicators: the world takes NCCL when every
     * rank computes on a GPU of its own (runtime/comm/comm_nccl.h) */
    _Static_assert((int)DEVICE_CPU == (int)DT_DEVICE_CPU && (int)DEVICE_CUDA == (int)DT_DEVICE_CUDA,
                   "device_kind and dt_device number alike");
    char dev_why[256];
    const dt_ops *ops = dt_ops_select((dt_device)job->train.device, env->local_rank, dev_why,
                                      sizeof dev_why);
    if (!ops) {
        snprintf(err, errlen, "rank %d: %s: %s", rank, job->path, dev_why);
        goto fail;
    }
    e->ops = ops;
    /* bf16 mixed precision: the products may run on bf16 tensor cores (ops.h) */
    ops->set_bf16_products(job->train.precision == PREC_BF16);

    *exit_code = DT_EXIT_COMM;
    if (setup_comms(e, err, errlen) != 0) goto fail;
    *exit_code = DT_EXIT_FAIL;
    mesh_coord me = e->mc.me;
    sizes_env senv = {.gpu = !e->ops->host_memory, .ranks_per_node = env->hsdp_ranks_per_node};
    char why[512];
    if (!(e->sz = sizes_create(job, &senv, why, sizeof why))) {
        snprintf(err, errlen, "rank %d: %s", rank, why);
        goto fail;
    }
    e->so = pick_strategy(job, e->sz);
    comm *shard = grad_group(e), *replica = NULL;
    if (e->so == &strat_fsdp && make_shard_groups(e, &shard, &replica, why, sizeof why) != COMM_OK) {
        snprintf(err, errlen, "rank %d: cannot build the HSDP groups: %s", rank, why);
        *exit_code = DT_EXIT_COMM;
        goto fail;
    }
    /* under context parallelism the strategy's "dp" is dp x cp: at.dp its place there */
    int grad_rank = comm_rank(grad_group(e));
    e->x = (strat_ctx){.job = &e->job, .ops = e->ops, .sz = e->sz, .at = {grad_rank, me.pp, me.tp},
                       .rank = rank, .n_units = n_units, .unit_model = e->unit_model, .dp = grad_group(e),
                       .shard = shard, .replica = replica, .tp = e->mc.tp, .cp = e->mc.cp, .ep = e->mc.ep,
                       .edp = e->mc.edp, .acct = e->acct,
                       .pe = sizes_param_elem_bytes(e->sz), .ge = sizes_grad_elem_bytes(e->sz),
                       .re = sizes_reduce_elem_bytes(e->sz)};
    if (setup_chunks(e, err, errlen) != 0 || setup_acts(e, err, errlen) != 0) goto fail;
    if (!(e->ds = e->so->create(&e->x, why, sizeof why))) {
        snprintf(err, errlen, "rank %d: %s", rank, why);
        goto fail;
    }
    model_hooks hooks = {.ctx = e, .before = hook_before, .after = hook_after};
    for (int l = 0; l < e->n_chunks; l++) model_set_hooks(e->chunk[l], &hooks);
    if (par->tp > 1 && tp_apply(&e->x, sp, e->chunk, e->n_chunks) != 0) {
        snprintf(err, errlen, "rank %d: out of memory for the tensor-parallel bf16 staging", rank);
        goto fail;
    }
    if (par->cp > 1 && cp_apply(&e->x, e->chunk, e->n_chunks) != 0) {
        snprintf(err, errlen, "rank %d: out of memory for the context-parallel ring's buffers", rank);
        goto fail;
    }
    if (ep_apply(&e->x, e->chunk, e->n_chunks) != 0) {
        snprintf(err, errlen, "rank %d: out of memory for the MoE dispatcher's staging", rank);
        goto fail;
    }
    if (setup_optim(e) != 0) {
        snprintf(err, errlen, "rank %d: out of memory for the optimizer state", rank);
        goto fail;
    }
    /* train.cuda_graphs: the step on device scalars, replayed as graphs on CUDA */
    if (job->train.cuda_graphs && (*exit_code = engine_graph_create(e, err, errlen)) != DT_EXIT_OK) goto fail;
    *exit_code = DT_EXIT_FAIL;

    *exit_code = DT_EXIT_DATA;
    if (!(e->train = data_open(job, DATA_TRAIN, why, sizeof why)) ||
        !(e->val = data_open(job, DATA_VAL, why, sizeof why))) {
        snprintf(err, errlen, "%s", why);
        goto fail;
    }
    e->per_sample = job_model_is_lm(&job->model) ? job->model.seq_len : 1;
    if (engine_moe_init(e) != 0) {
        *exit_code = DT_EXIT_FAIL;
        snprintf(err, errlen, "rank %d: out of memory", rank);
        goto fail;
    }
    /* the head's rank computes the loss; every tp rank of it the same one */
    e->counts_loss = me.tp == 0 && e->unit_model[n_units - 1];
    char cp_part[48] = "";
    if (par->cp > 1) snprintf(cp_part, sizeof cp_part, " cp=%d", par->cp);
    if (par->ep > 1) snprintf(cp_part + strlen(cp_part), sizeof cp_part - strlen(cp_part), " ep=%d", par->ep);
    snprintf(e->layout, sizeof e->layout, "dp=%d%s tp=%d%s pp=%d %s%s%s", par->dp, cp_part, par->tp, sp ? "+sp" : "", par->pp,
             par->mode == SHARD_HSDP && e->so == &strat_fsdp ? "hsdp" : e->so->name, par->pp > 1 ? " " : "",
             par->pp > 1 ? pp_schedule_kind_name(par->pp_schedule) : "");
    if (!e->ops->host_memory) { /* say where it runs and how it talks (CPU runs: as before) */
        size_t l = strlen(e->layout);
        snprintf(e->layout + l, sizeof e->layout - l, " on %s, comm %s", e->ops->name, comm_transport(e->world));
    }
    e->mark = clock_now_s();
    *exit_code = DT_EXIT_OK;
    return e;
fail:
    engine_destroy(e);
    return NULL;
}

void engine_destroy(engine *e)
{
    if (!e) return;
    engine_decode_end(e);
    engine_graph_destroy(e);
    /* the strategy's buffers are bound into the chunks: strategy first */
    if (e->ds) e->so->destroy(e->ds);
    tp_release(&e->x);
    cp_release(&e->x);
    ep_release(&e->x);
    pp_exec_destroy(e->ex);
    model_acts_destroy(e->acts);
    for (int l = 0; l < e->n_chunks; l++) {
        if (e->opt) optim_destroy(e->opt[l]);
        if (e->chunk) model_destroy(e->chunk[l]);
    }
    free(e->opt);
    free(e->chunk);
    batch_free(&e->buf);
    data_close(e->val);
    data_close(e->train);
    sizes_destroy(e->sz);
    if (e->emb_group) comm_destroy(e->emb_group);
    if (e->replica_own) comm_destroy(e->replica_own);
    if (e->shard_own) comm_destroy(e->shard_own);
    if (e->have_mc) mesh_comms_destroy(&e->mc);
    if (e->world) comm_destroy(e->world);
    if (e->store) store_close(e->store);
    acct_destroy(e->acct);
    engine_moe_free(e);
    free(e->unit_model);
    free(e);
}

int engine_rank(const engine *e) { return e->rank; }
int engine_world_size(const engine *e) { return e->world_size; }
const char *engine_backend_name(const engine *e) { return e->ops->name; }
const char *engine_device_name(const engine *e) { return e->ops->device_name(); }
const char *engine_layout(const engine *e) { return e->layout; }
const account *engine_account(const engine *e) { return e->acct; }

void engine_acts_kept(const engine *e, size_t *attn_in, size_t *mlp_in)
{
    *attn_in = *mlp_in = 0;
    if (e->acts) model_acts_kept(e->acts, attn_in, mlp_in);
}

static unsigned long long sent_on(const comm *c) { return c ? (unsigned long long)comm_bytes_sent(c) : 0; }

engine_comm_bytes engine_bytes_sent(const engine *e)
{
    if (!e->have_mc) return (engine_comm_bytes){0, 0, 0, 0, 0, 0};
    return (engine_comm_bytes){sent_on(e->mc.tp), sent_on(grad_group(e)), sent_on(e->mc.pp), sent_on(e->mc.cp),
                               sent_on(e->mc.ep), sent_on(e->mc.edp)};
}
void engine_begin_training(engine *e)
{
    acct_reset_peaks(e->acct);
    engine_trace_begin(e);
}

void engine_take_times(engine *e, engine_times *t)
{
    double now = clock_now_s();
    t->wall_s = now - e->mark;
    t->comm_s = e->x.comm_s;
    t->idle_s = e->idle_s;
    t->compute_s = t->wall_s - t->comm_s - t->idle_s;
    if (t->compute_s < 0) t->compute_s = 0;
    const job_parallel *par = &e->job.parallel;
    t->bubble = e->ex ? e->last_pp.bubble : 0;
    t->bubble_ideal = e->ex ? pp_schedule_ideal_bubble(par->pp_schedule, par->pp, e->micro_per_step,
                                                       par->virtual_stages)
                            : 0;
    e->mark = now;
    e->x.comm_s = 0;
    e->idle_s = 0;
}

/* ---- the step ---- */

int engine_comm_failed(engine *e, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", e->x.err);
    return DT_EXIT_COMM;
}

/* A failed pipeline step: the strategy's error if it came first, else the
 * executor's line, with this rank's world rank in front. */
static int pp_failed(engine *e, const char *why, char *err, size_t errlen)
{
    if (e->x.failed) return engine_comm_failed(e, err, errlen);
    snprintf(err, errlen, "rank %d: %s", e->rank, why);
    e->x.failed = 1;
    snprintf(e->x.err, sizeof e->x.err, "%s", err);
    return DT_EXIT_COMM;
}

/* Sums n doubles over the world, the same bits on every rank: each rank's values
 * travel as float pairs (hi + lo keeps ~48 bits) through one all-gather, and every
 * rank adds them up in rank order in double. Counted as idle: this is where a
 * rank waits for the slowest one. */
int engine_world_sum(engine *e, const double *v, int n, double *out)
{
    if (e->world_size == 1) {
        memcpy(out, v, (size_t)n * sizeof(double));
        return COMM_OK;
    }
    int W = e->world_size;
    float *all = malloc((size_t)W * 2 * (size_t)n * sizeof(float));
    float *mine = malloc(2 * (size_t)n * sizeof(float));
    if (!all || !mine) {
        free(all), free(mine);
        return strat_fail(&e->x, NULL, COMM_ESYS, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        mine[2 * i] = (float)v[i];
        mine[2 * i + 1] = (float)(v[i] - (double)mine[2 * i]);
    }
    double t0 = clock_now_s();
    int rc = comm_all_gather(e->world, mine, all, (size_t)W * 2 * (size_t)n, COMM_F32);
    double t1 = clock_now_s();
    e->idle_s += t1 - t0;
    trace_span(TRACE_IDLE, t0, t1, "wait: loss and grad norm all_gather");
    if (strat_fail(&e->x, e->world, rc, "all_gather of loss and gradient norm") == COMM_OK) {
        for (int i = 0; i < n; i++) out[i] = 0;
        for (int r = 0; r < W; r++)
            for (int i = 0; i < n; i++)
                out[i] += (double)all[(size_t)r * 2 * n + 2 * i] + (double)all[(size_t)r * 2 * n + 2 * i + 1];
    }
    free(all), free(mine);
    return rc;
}

/* This rank's share of the squared global gradient norm: every element of the
 * model once. Within its slices a rank counts a tensor's elements unless the
 * tensor is the head's tied copy of wte (unit 0 counts it), or is replicated
 * across tp and this is not tp rank 0; replicated slices (DDP, HSDP replicas,
 * an expert unit's dense part over ep) count on one rank only (the strategy's
 * counts). With acc (train.cuda_graphs) the same sums go into *acc where the
 * ops keep it (optim_grad_sumsq_dev; tmp: one more double there) and 0 is
 * returned. */
double engine_local_grad_sumsq(engine *e, double *acc, double *tmp)
{
    double sq = 0;
    int tp_rank = e->mc.me.tp;
    for (int l = 0; l < e->n_chunks; l++) {
        model *m = e->chunk[l];
        for (int i = 0; i < model_param_count(m); i++) {
            const param_spec *p = model_param(m, i);
            if (p->frozen || p->tied || param_tp_duplicate(p, tp_rank) || !e->so->counts(e->ds, p->unit, param_is_expert(p)))
                continue;
            strat_slice sl;
            e->so->slice(e->ds, p->unit, &sl);
            size_t a = p->offset, b = p->offset + p->local_numel;
            if (a < sl.lo) a = sl.lo;
            if (b > sl.lo + sl.len) b = sl.lo + sl.len;
            if (a >= b) continue;
            const void *g = strat_at(sl.grad, a - sl.lo, e->x.ge);
            if (acc) optim_grad_sumsq_dev(e->opt[l], g, b - a, acc, tmp);
            else sq += optim_grad_sumsq(e->opt[l], g, b - a);
        }
    }
    return sq;
}

/* Pipeline with GPT: the first stage's wte gradient holds the embedding's part,
 * the last stage's tied copy the head's; both need the sum (model.h). The
 * strategies may hold them as differently cut shards, so each side takes its
 * unit's whole gradient (gathered when sharded), the two all-reduce the wte
 * rows, and each writes its slice back. */
static void tied_wte_sum(engine *e)
{
    strat_ctx *x = &e->x;
    if (!e->emb_group || x->failed || job_lora_on(&e->job.model)) return; /* train.lora: a frozen wte */
    int u = e->mc.me.pp == 0 ? 0 : x->n_units - 1;
    model *m = e->unit_model[u];
    const param_spec *w = NULL;
    for (int i = 0; i < model_param_count(m) && !w; i++) {
        const param_spec *p = model_param(m, i);
        if (p->unit == u && !strcmp(p->name, "wte")) w = p;
    }
    size_t n = sizes_tied_scratch_numel(e->sz, x->at), ge = x->ge; /* = model_unit_local_numel(m, u) */
    void *tmp = e->ops->alloc(n * ge);
    if (!w || !tmp) {
        if (tmp) e->ops->free(tmp);
        strat_fail(x, NULL, COMM_ESYS, w ? "out of memory for the tied wte gradient" : "no wte to tie");
        return;
    }
    acct_add(e->acct, ACCT_BUFFERS, (long long)(n * ge));
    void *full = e->so->full_grad(e->ds, u, tmp);
    if (!x->failed) {
        /* in the gradients' own type: a sum of two, rounded once for bf16 */
        double t0 = clock_now_s();
        void *wg = strat_at(full, w->offset, ge);
        int rc = comm_all_reduce(e->emb_group, wg, wg, w->local_numel, strat_dtype(ge), COMM_SUM);
        strat_comm_done(x, t0, "tied wte all_reduce");
        strat_fail(x, e->emb_group, rc, "all_reduce of the tied wte gradient");
    }
    if (!x->failed && full == tmp) {
        strat_slice sl;
        e->so->slice(e->ds, u, &sl);
        size_t a = w->offset, b = w->offset + w->local_numel;
        if (a < sl.lo) a = sl.lo;
        if (b > sl.lo + sl.len) b = sl.lo + sl.len;
        if (a < b) e->ops->copy(strat_at(sl.grad, a - sl.lo, ge), strat_at(tmp, a, ge), (b - a) * ge);
    }
    e->ops->free(tmp);
    acct_add(e->acct, ACCT_BUFFERS, -(long long)(n * ge));
}

/* The pipeline's step over this dp rank's micro-batches. */
static int pp_grads(engine *e, int step, long first, float loss_scale, double *loss_sum, char *err,
                    size_t errlen)
{
    int mb = e->job.train.micro_batch, m = e->micro_per_step, n_units = e->x.n_units;
    /* the first stage embeds, the last takes the targets; packed samples'
     * document mask reaches every stage's blocks */
    if (e->unit_model[0] || e->unit_model[n_units - 1] || e->job.model.packed)
        engine_batch_fill(e, e->train, step, first, m * mb, 0);
    e->batch_B = mb;
    e->x.last_micro = 0;
    pp_exec_step_args args = {.step = step + 1, .B = mb, .loss_scale = loss_scale, .batch = pp_batch,
                              .batch_ctx = e, .sample0 = first};
    char why[512];
    int rc = pp_exec_step(e->ex, &args, &e->last_pp, why, sizeof why);
    e->idle_s += e->last_pp.idle_s;
    if (rc != 0 || e->x.failed) return pp_failed(e, why, err, errlen);
    *loss_sum = e->last_pp.loss;
    return DT_EXIT_OK;
}

int engine_grads(engine *e, int step, double *loss, char *err, size_t errlen)
{
    if (e->graph) return engine_graph_grads(e, step, loss, err, errlen); /* train.cuda_graphs */
    strat_ctx *x = &e->x;
    const job_train *t = &e->job.train;
    int mb = t->micro_batch, A = e->ex ? e->micro_per_step : t->grad_accum;
    /* the loss's count over the global batch: every token (image), or with
     * packed instruction data its masked-in targets, which every rank counts
     * itself (the global batch is a function of the step: data.h) */
    double per_step = e->job.model.packed ? (double)data_batch_targets(e->train, step, 0, t->global_batch)
                                          : (double)t->global_batch * e->per_sample;
    float loss_scale = per_step > 0 ? (float)(1.0 / per_step) : 0.0f;
    long first = (long)e->mc.me.dp * mb * A;
    x->step = step + 1;
    x->training = 1;
    trace_step_begin(step + 1);
    e->so->begin_step(e->ds);
    engine_moe_reset(e); /* evaluations since the last step routed too */
    double loss_sum = 0;
    if (e->ex) {
        int rc = pp_grads(e, step, first, loss_scale, &loss_sum, err, errlen);
        if (rc != DT_EXIT_OK) return rc;
    } else {
        for (int j = 0; j < A && !x->failed; j++) {
            x->last_micro = j == A - 1;
            engine_batch_fill(e, e->train, step, first + (long)j * mb, mb, 0);
            model_batch in = engine_batch_at(e, 0, mb);
            in.step = step + 1, in.sample0 = first + (long)j * mb;
            loss_sum += model_forward(e->chunk[0], e->acts, &in, NULL);
            if (x->failed) break;
            model_backward(e->chunk[0], e->acts, &in, loss_scale);
        }
    }
    if (!x->failed) e->so->finish_grads(e->ds);
    tied_wte_sum(e);
    if (x->failed) return engine_comm_failed(e, err, errlen);
    e->local_loss = e->counts_loss ? loss_sum : 0.0; /* engine_local_loss: who went non-finite */
    /* loss, gradient norm and the MoE blocks' routing: one exchange */
    int n = 2 + engine_moe_values(e);
    double *mine = calloc(2 * (size_t)n, sizeof(double)), *sum = mine + n;
    if (!mine) {
        snprintf(err, errlen, "rank %d: step %d: out of memory", e->rank, step + 1);
        return DT_EXIT_FAIL;
    }
    mine[0] = e->counts_loss ? loss_sum : 0.0;
    mine[1] = engine_local_grad_sumsq(e, NULL, NULL);
    engine_moe_mine(e, mine + 2);
    if (engine_world_sum(e, mine, n, sum) != COMM_OK) {
        free(mine);
        return engine_comm_failed(e, err, errlen);
    }
    *loss = per_step > 0 ? sum[0] / per_step : 0.0;
    e->grad_sumsq = sum[1];
    engine_moe_take(e, sum + 2, (double)t->global_batch);
    free(mine);
    return DT_EXIT_OK;
}

void engine_chunk_slices(engine *e, int l, void **params, void **grads)
{
    const model_shard *sh = model_get_shard(e->chunk[l]);
    for (int i = 0; i < sh->unit_end - sh->unit_begin; i++) {
        strat_slice sl;
        e->so->slice(e->ds, sh->unit_begin + i, &sl);
        params[i] = sl.param;
        grads[i] = sl.grad;
    }
}

int engine_update(engine *e, int step, double lr, double *grad_norm, char *err, size_t errlen)
{
    if (e->graph) return engine_graph_update(e, step, lr, grad_norm, err, errlen); /* train.cuda_graphs */
    strat_ctx *x = &e->x;
    double norm = sqrt(e->grad_sumsq), clip = e->job.train.grad_clip;
    *grad_norm = norm;
    float s = clip > 0 && norm > clip ? (float)(clip / (norm + 1e-6)) : 1.0f;
    double t_opt = clock_now_s();
    for (int l = 0; l < e->n_chunks; l++) {
        const model_shard *sh = model_get_shard(e->chunk[l]);
        int n = sh->unit_end - sh->unit_begin;
        void **params = malloc((size_t)n * sizeof(void *)), **grads = malloc((size_t)n * sizeof(void *));
        if (!params || !grads) {
            free(params), free(grads);
            snprintf(err, errlen, "rank %d: step %d: out of memory", e->rank, step + 1);
            return DT_EXIT_FAIL;
        }
        engine_chunk_slices(e, l, params, grads);
        optim_step(e->opt[l], lr, step + 1, params, grads, s); /* clipping: the gradients times s */
        free(params), free(grads);
    }
    trace_span(TRACE_COMPUTE, t_opt, clock_now_s(), "optimizer");
    e->so->after_update(e->ds);
    engine_moe_update_bias(e); /* DeepSeek-V3's, from the step's global loads */
    trace_step_end();
    return x->failed ? engine_comm_failed(e, err, errlen) : DT_EXIT_OK;
}

/* Validation over a pipeline: the rank's slice [lo, hi) of validation batch
 * vstep in pipeline steps of m micro-batches of micro_batch samples, the last
 * padded with ignored samples; `steps` is the same on every rank. */
static int pp_evaluate_slice(engine *e, long vstep, long lo, long hi, long steps, double *loss, long *correct,
                             char *err, size_t errlen)
{
    int mb = e->job.train.micro_batch, m = e->micro_per_step, per = m * mb;
    int ends = e->unit_model[0] || e->unit_model[e->x.n_units - 1] || e->job.model.packed;
    for (long s = 0; s < steps; s++) {
        long start = lo + s * per;
        int count = (int)(hi - start < per ? (hi - start > 0 ? hi - start : 0) : per);
        if (ends) {
            engine_batch_fill(e, e->val, vstep, start, count, 0);
            batch_pad(e, count, per - count);
        }
        e->batch_B = mb;
        pp_exec_step_args args = {.step = e->x.step, .B = mb, .loss_scale = 0, .forward_only = 1,
                                  .batch = pp_batch, .batch_ctx = e};
        char why[512];
        pp_exec_result res;
        int rc = pp_exec_step(e->ex, &args, &res, why, sizeof why);
        if (rc != 0 || e->x.failed) return pp_failed(e, why, err, errlen);
        *loss += res.loss;
        *correct += res.correct;
    }
    return DT_EXIT_OK;
}

/* eval_batches global batches, or the whole validation split (GPT: at most 64
 * global batches of it). */
long engine_val_samples(const engine *e)
{
    const job_train *t = &e->job.train;
    long gb = t->global_batch, total = t->eval_batches > 0 ? t->eval_batches * gb : data_count(e->val);
    if (e->job.model.kind != MODEL_VIT && t->eval_batches <= 0 && total > 64L * gb) total = 64L * gb;
    return total;
}

/* Validation: each global validation batch (the last may be short) is split over
 * the dp ranks like a training batch. Every rank runs the same number of
 * micro-batches, so FSDP's gathers and tp's reductions stay in step: a rank whose
 * slice ran out runs one sample and ignores it (pp = 1) or pads with samples the
 * loss ignores (pp > 1). */
long engine_val_windows(const engine *e) { return data_count(e->val); }

double engine_val_targets(const engine *e, long total)
{
    long gb = e->job.train.global_batch;
    double n = 0;
    for (long vstep = 0, seen = 0; seen < total; vstep++, seen += gb) {
        long nb = total - seen < gb ? total - seen : gb;
        n += e->job.model.packed ? (double)data_batch_targets(e->val, vstep, 0, (int)nb) : (double)nb * e->per_sample;
    }
    return n;
}
long engine_val_span(const engine *e) { return data_span(e->val); }

int engine_evaluate(engine *e, double *val_loss, double *acc, char *err, size_t errlen)
{
    return engine_evaluate_n(e, engine_val_samples(e), val_loss, acc, err, errlen);
}

int engine_evaluate_n(engine *e, long total, double *val_loss, double *acc, char *err, size_t errlen)
{
    engine_graph_outside(e); /* ops outside the step (train.cuda_graphs) */
    strat_ctx *x = &e->x;
    const job_train *t = &e->job.train;
    int vit = e->job.model.kind == MODEL_VIT, mb = t->micro_batch, gb = t->global_batch;
    int dp = e->job.parallel.dp, d = e->mc.me.dp;
    x->training = 0;
    double loss = 0;
    long correct = 0, seen = 0;
    int rc = DT_EXIT_OK;
    for (long vstep = 0; seen < total && !x->failed && rc == DT_EXIT_OK; vstep++) {
        long nb = total - seen < gb ? total - seen : gb;
        long lo = nb * d / dp, hi = nb * (d + 1) / dp, widest = (nb + dp - 1) / dp;
        if (e->ex) {
            long per = (long)e->micro_per_step * mb;
            rc = pp_evaluate_slice(e, vstep, lo, hi, (widest + per - 1) / per, &loss, &correct, err, errlen);
        } else {
            long K = (widest + mb - 1) / mb;
            for (long k = 0; k < K && !x->failed; k++) {
                long b0 = lo + k * mb;
                int B = (int)(hi - b0 < mb ? hi - b0 : mb), pad = B <= 0;
                if (pad) b0 = 0, B = 1;
                engine_batch_fill(e, e->val, vstep, b0, B, 0);
                model_batch in = engine_batch_at(e, 0, B);
                int c = 0;
                double l = model_forward(e->chunk[0], e->acts, &in, vit ? &c : NULL);
                if (!pad) loss += l, correct += c;
            }
        }
        seen += nb;
    }
    x->training = 1;
    if (rc != DT_EXIT_OK) return rc;
    if (x->failed) return engine_comm_failed(e, err, errlen);
    /* a data file that changed under the evaluation (data_fault) voids it, on every rank */
    char why[1200];
    int faulted = data_fault(why, sizeof why);
    double mine[3] = {e->counts_loss ? loss : 0.0, e->counts_loss ? (double)correct : 0.0, faulted}, sum[3];
    if (engine_world_sum(e, mine, 3, sum) != COMM_OK) return engine_comm_failed(e, err, errlen);
    if (sum[2] > 0) {
        if (faulted) snprintf(err, errlen, "rank %d: %s", engine_rank(e), why);
        else snprintf(err, errlen, "rank %d: a data file changed on another rank (see its message)", engine_rank(e));
        return DT_EXIT_DATA;
    }
    double count = engine_val_targets(e, total);
    *val_loss = count > 0 ? sum[0] / count : 0.0;
    *acc = vit ? sum[1] / (double)total : -1.0;
    return DT_EXIT_OK;
}
