/* zero.c — ZeRO stages 1 and 2 (DeepSpeed's): data parallel with the optimizer
 * state, and at stage 2 the gradients too, sharded over the data-parallel group.
 *
 * Each rank owns comm_chunk's share [lo, lo + len) of every unit (sizes_shard:
 * the same slice that reduce_scatter hands it and all_gather collects from it):
 * AdamW's m and v exist for that slice only (optim_create with lo / hi), the rank
 * updates only that slice, then every unit's parameters are all-gathered in place
 * so that each rank again holds the whole (tp-local) model for the next forward.
 *
 * Stage 1 synchronizes the gradients exactly like DDP (the same buckets,
 * all-reduced during the last micro-batch's backward; ddp.c): every rank ends up
 * with the whole reduced gradient and reads its slice of it.
 *
 * Stage 2 never keeps a whole model's gradient: the model's gradient buffers are
 * released, each unit's backward writes into a buffer of the grad pool, which is
 * reduce-scattered as soon as the unit's backward is done, on EVERY micro-batch,
 * into this rank's shard accumulator (grad_pool.c). The parameters stay whole: the
 * strategy holds them in its own buffers (model_unit_release frees a unit's
 * parameters and gradients together, so the parameters are copied out first).
 *
 * Expert parallelism (strategy.h): an expert unit is sharded over the
 * experts' data-parallel group (sizes_shard), its slice updated by every
 * rank of the ep group alike (stage 1: the same all-reduced gradients;
 * stage 2: the dense part of the shards summed over ep, strat_ep_dense_sum)
 * and all-gathered over that group. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/parallel/strategy.h"

struct dp_strategy {
    strat_ctx *x;
    int stage;
    size_t *lo, *len;   /* [n_units]: the slice this rank updates */
    ddp_buckets *b;     /* stage 1 */
    void **param;       /* stage 2: [n_units] whole parameters, the model bound to them */
    void **gshard;      /* stage 2: [n_units] gradient shards, len[u] elements */
    grad_pool *pool;    /* stage 2 */
};

static void zero_destroy(dp_strategy *s)
{
    if (!s) return;
    strat_ctx *x = s->x;
    ddp_buckets_destroy(s->b);
    grad_pool_destroy(s->pool);
    for (int u = 0; u < x->n_units; u++) {
        if (s->param && s->param[u]) {
            x->ops->free(s->param[u]);
            acct_add(x->acct, ACCT_PARAMS, -(long long)(model_unit_local_numel(x->unit_model[u], u) * x->pe));
        }
        if (s->gshard && s->gshard[u]) {
            x->ops->free(s->gshard[u]);
            acct_add(x->acct, ACCT_GRADS, -(long long)(s->len[u] * x->ge));
        }
    }
    free(s->param);
    free(s->gshard);
    free(s->lo);
    free(s->len);
    free(s);
}

/* Stage 2: whole parameters in the strategy's buffers, gradient shards, the pool. */
static int take_over_units(dp_strategy *s, char *err, size_t errlen)
{
    strat_ctx *x = s->x;
    for (int u = 0; u < x->n_units; u++) {
        model *m = x->unit_model[u];
        if (!m) continue;
        size_t n = model_unit_local_numel(m, u);
        s->param[u] = x->ops->alloc(n * x->pe);
        s->gshard[u] = x->ops->alloc((s->len[u] ? s->len[u] : 1) * x->ge);
        if (!s->param[u] || !s->gshard[u]) {
            snprintf(err, errlen, "zero2: out of memory for unit %d", u);
            return -1;
        }
        acct_add(x->acct, ACCT_PARAMS, (long long)(n * x->pe));
        acct_add(x->acct, ACCT_GRADS, (long long)(s->len[u] * x->ge));
        x->ops->copy(s->param[u], model_unit_params(m, u), n * x->pe);
        model_unit_release(m, u);
        acct_add(x->acct, ACCT_PARAMS, -(long long)(n * x->pe));
        acct_add(x->acct, ACCT_GRADS, -(long long)(n * x->ge));
        model_unit_bind(m, u, s->param[u], NULL);
    }
    s->pool = grad_pool_create(x, x->dp, sizes_reduce_numel(x->sz, x->at), sizes_reduce_buffers(x->sz),
                               s->gshard, s->lo, s->len, err, errlen);
    return s->pool ? 0 : -1;
}

static dp_strategy *zero_create(strat_ctx *x, int stage, char *err, size_t errlen)
{
    dp_strategy *s = calloc(1, sizeof *s);
    if (s) {
        s->lo = calloc((size_t)x->n_units, sizeof(size_t));
        s->len = calloc((size_t)x->n_units, sizeof(size_t));
        s->param = calloc((size_t)x->n_units, sizeof(void *));
        s->gshard = calloc((size_t)x->n_units, sizeof(void *));
    }
    if (!s || !s->lo || !s->len || !s->param || !s->gshard) {
        zero_destroy(s);
        snprintf(err, errlen, "zero: out of memory");
        return NULL;
    }
    s->x = x;
    s->stage = stage;
    for (int u = 0; u < x->n_units; u++) {
        if (!x->unit_model[u]) continue;
        s->len[u] = sizes_shard(x->sz, SHARD_OF_OPTIM, u, x->at, &s->lo[u]);
        size_t glo, glen = sizes_shard(x->sz, SHARD_OF_GRAD, u, x->at, &glo);
        if (stage == 2 && (glo != s->lo[u] || glen != s->len[u])) {
            snprintf(err, errlen, "zero2: unit %d: gradient and optimizer shards differ", u);
            zero_destroy(s);
            return NULL;
        }
    }
    int ok = stage == 1 ? (s->b = ddp_buckets_create(x, err, errlen)) != NULL
                        : take_over_units(s, err, errlen) == 0;
    if (!ok) {
        zero_destroy(s);
        return NULL;
    }
    return s;
}

static dp_strategy *zero1_create(strat_ctx *x, char *err, size_t errlen) { return zero_create(x, 1, err, errlen); }
static dp_strategy *zero2_create(strat_ctx *x, char *err, size_t errlen) { return zero_create(x, 2, err, errlen); }

static void zero_begin_step(dp_strategy *s)
{
    strat_ctx *x = s->x;
    if (s->stage == 1) {
        strat_zero_unit_grads(x);
        ddp_buckets_reset(s->b);
        return;
    }
    for (int u = 0; u < x->n_units; u++)
        if (s->gshard[u]) x->ops->zero(s->gshard[u], s->len[u] * x->ge);
}

static void zero_before(dp_strategy *s, int unit, model_phase phase)
{
    strat_ctx *x = s->x;
    if (s->stage != 2 || phase != PHASE_BACKWARD || !x->training) return;
    model_unit_bind(x->unit_model[unit], unit, NULL, grad_pool_acquire(s->pool, unit));
}

static void zero_after(dp_strategy *s, int unit, model_phase phase)
{
    strat_ctx *x = s->x;
    if (phase != PHASE_BACKWARD || !x->training) return;
    if (s->stage == 2) grad_pool_release(s->pool, unit);
    else if (x->last_micro) ddp_buckets_unit_ready(s->b, unit);
}

static void zero_finish_grads(dp_strategy *s)
{
    if (s->stage == 1) {
        ddp_buckets_finish(s->b);
        return;
    }
    grad_pool_drain(s->pool);
    strat_ep_dense_sum(s->x, s->gshard, s->lo, s->len); /* expert units: sharded over edp */
}

static void zero_slice(dp_strategy *s, int unit, strat_slice *out)
{
    model *m = s->x->unit_model[unit];
    size_t lo = s->lo[unit];
    out->lo = lo;
    out->len = s->len[unit];
    out->param = strat_at(model_unit_params(m, unit), lo, s->x->pe);
    out->grad = s->stage == 1 ? strat_at(model_unit_grads(m, unit), lo, s->x->ge) : s->gshard[unit];
}

/* Slices are disjoint across the group: every rank counts its own (an
 * expert unit's dense part on one rank of the ep group). */
static int zero_counts(dp_strategy *s, int unit, int expert) { return strat_counts_rank(s->x, 1, unit, expert); }

static void zero_after_update(dp_strategy *s)
{
    strat_ctx *x = s->x;
    comm_req **req = calloc((size_t)x->n_units, sizeof *req);
    if (!req) {
        if (!x->failed) {
            x->failed = 1;
            snprintf(x->err, sizeof x->err, "rank %d: step %d: zero: out of memory", x->rank, x->step);
        }
        return;
    }
    /* every unit's all-gather queued at once, waited in order */
    for (int u = 0; u < x->n_units && !x->failed; u++) {
        model *m = x->unit_model[u];
        if (!m || !model_unit_local_numel(m, u)) continue; /* (train.lora: nothing to train there) */
        void *p = model_unit_params(m, u);
        comm *g = strat_unit_group(x, u, x->dp);
        double t0 = clock_now_s();
        /* bf16 parameters travel as bf16: half the bytes */
        int rc = comm_all_gather_async(g, strat_at(p, s->lo[u], x->pe), p, model_unit_local_numel(m, u),
                                       strat_dtype(x->pe), &req[u]);
        strat_comm_done(x, t0, "zero all_gather of parameters (start)");
        strat_fail(x, g, rc, "zero all_gather of parameters");
    }
    for (int u = 0; u < x->n_units; u++)
        if (req[u]) strat_wait(x, strat_unit_group(x, u, x->dp), req[u], "zero all_gather of parameters");
    free(req);
}

/* Nothing remembered between steps: the parameters are whole after every
 * update, the buckets and the grad pool start each step empty. */
static void zero_forget(dp_strategy *s) { (void)s; }

/* Stage 1 all-reduced whole gradients; stage 2 gathers its shards. */
static void *zero_full_grad(dp_strategy *s, int unit, void *tmp)
{
    strat_ctx *x = s->x;
    model *m = x->unit_model[unit];
    if (s->stage == 1) return model_unit_grads(m, unit);
    if (x->failed || !model_unit_local_numel(m, unit)) return tmp;
    comm *g = strat_unit_group(x, unit, x->dp);
    double t0 = clock_now_s();
    int rc = comm_all_gather(g, s->gshard[unit], tmp, model_unit_local_numel(m, unit), strat_dtype(x->ge));
    strat_comm_done(x, t0, "zero2 all_gather of gradients");
    strat_fail(x, g, rc, "zero2 all_gather of gradients");
    return tmp;
}

static void zero_gather_unit(dp_strategy *s, int unit, float *out)
{
    strat_ctx *x = s->x;
    model *m = x->unit_model[unit];
    strat_convert(x, out, sizeof(float), model_unit_params(m, unit), x->pe, model_unit_local_numel(m, unit));
}

static void zero_frozen_slice(dp_strategy *s, int unit, strat_slice *out) { strat_frozen_whole_slice(s->x, unit, out); }
static void zero_gather_frozen(dp_strategy *s, int unit, float *out) { strat_frozen_whole_gather(s->x, unit, out); }

const strat_ops strat_zero1 = {
    .name = "zero1",
    .create = zero1_create,
    .destroy = zero_destroy,
    .begin_step = zero_begin_step,
    .before = zero_before,
    .after = zero_after,
    .finish_grads = zero_finish_grads,
    .slice = zero_slice,
    .counts = zero_counts,
    .after_update = zero_after_update,
    .forget = zero_forget,
    .full_grad = zero_full_grad,
    .gather_unit = zero_gather_unit,
    .frozen_slice = zero_frozen_slice,
    .gather_frozen = zero_gather_frozen,
};

const strat_ops strat_zero2 = {
    .name = "zero2",
    .create = zero2_create,
    .destroy = zero_destroy,
    .begin_step = zero_begin_step,
    .before = zero_before,
    .after = zero_after,
    .finish_grads = zero_finish_grads,
    .slice = zero_slice,
    .counts = zero_counts,
    .after_update = zero_after_update,
    .forget = zero_forget,
    .full_grad = zero_full_grad,
    .gather_unit = zero_gather_unit,
    .frozen_slice = zero_frozen_slice,
    .gather_frozen = zero_gather_frozen,
};
