/* fsdp.c — fully sharded data parallel (ZeRO-3) and its hybrid, HSDP.
 *
 * Every unit's parameters, gradients and optimizer state are sharded over the
 * shard group: this rank keeps only comm_chunk's share [lo, lo + len) of each
 * unit (sizes_shard) and the model's own full buffers are freed
 * (model_unit_release), so memory really falls with the group's size.
 *
 *   before(u, FORWARD or BACKWARD)  all-gather u's shards into a gather buffer and
 *                                   bind the model to it; start gathering the unit
 *                                   that comes next into the other buffer
 *                                   (prefetch, asynchronous)
 *   after(u, FORWARD)               the buffer is free again (its contents stay
 *                                   valid: the last units of forward are the first
 *                                   of backward and are not gathered twice)
 *   before(u, BACKWARD)             + a zeroed full-unit gradient buffer (grad_pool)
 *   after(u, BACKWARD)              reduce-scatter that gradient (asynchronously)
 *                                   into this rank's gradient shard
 *
 * Offload (train.offload: params, ZeRO-Infinity's offload_param, FSDP's
 * CPUOffload): the parameter shards live in host memory (ops->host_alloc,
 * accounted as host) and the optimizer, stepped on the host too, updates them
 * there. A gather copies this rank's shard into its place in the gather buffer
 * (host to device) and all-gathers in place, so the device holds no shard at
 * all; with a shard group of one the copy is the whole unit. Gradients stay on
 * the device (the optimizer's step takes them to the host chunk by chunk).
 *
 * Two gather buffers and two gradient buffers of the largest unit
 * (sizes_gather_numel x sizes_gather_buffers). With GPT's tied head in the same
 * chunk the head stays bound through the whole backward (the embedding adds its
 * part of the wte gradient to the head's copy), so the other units go through
 * the remaining buffer one at a time: their gathers are not prefetched then.
 *
 * HSDP: the shard group is the data-parallel ranks of one node (sizes.h:
 * gcd(dp, ranks per node / tp) consecutive dp ranks); the groups of different
 * nodes hold the same shards (the replica group). Gradient shards are reduce-
 * scattered inside the node on every micro-batch, then all-reduced across the
 * replicas once per step; every replica applies the same update to the same
 * shard, so the replicas stay equal without sending parameters.
 *
 * Expert parallelism (strategy.h): an expert unit is sharded over the
 * experts' data-parallel group instead (gathers, reduce-scatters), the dense
 * part of its gradient shard summed over the ep group once per step. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/parallel/strategy.h"

typedef struct {
    void *buf;      /* parameter type (x->pe bytes each) */
    void *fbuf;     /* train.lora: the unit's frozen base (NULL without) */
    int unit;       /* unit whose parameters it holds or is receiving, -1 none */
    int valid;      /* the gather has landed */
    int bound;      /* the model uses it: between before and after */
    comm_req *req;  /* the gather, in flight */
    comm_req *freq; /* the frozen base's */
    long used;      /* last use, to evict the least recently used */
} gather_slot;

struct dp_strategy {
    strat_ctx *x;
    comm *shard, *replica;
    size_t *lo, *len;       /* [n_units]: this rank's shard of each unit */
    void **pshard;          /* [n_units] parameter shards (bf16 under mixed precision) */
    void **gshard;          /* [n_units] gradient shards (the gradient type) */
    gather_slot *slot;
    int nslot;
    size_t gather_numel;
    grad_pool *pool;
    long clock;
    int on_host;            /* train.offload: params: pshard[] is host memory */
    /* train.lora: the frozen base, a group of its own (PyTorch FSDP's frozen
     * flat parameters): sharded and gathered like the parameters, never
     * reduced, no optimizer state */
    size_t *flo, *flen;     /* [n_units]: this rank's shard of each unit's frozen buffer */
    void **fshard;          /* [n_units] */
    size_t fgather_numel;
};

static size_t unit_numel(const dp_strategy *s, int u)
{
    return model_unit_local_numel(s->x->unit_model[u], u);
}

static size_t frozen_numel(const dp_strategy *s, int u)
{
    return model_unit_frozen_local_numel(s->x->unit_model[u], u);
}

static void fsdp_destroy(dp_strategy *s)
{
    if (!s) return;
    strat_ctx *x = s->x;
    grad_pool_destroy(s->pool);
    for (int i = 0; i < s->nslot; i++) {
        comm_wait(s->slot[i].req);
        comm_wait(s->slot[i].freq);
        if (s->slot[i].buf) {
            x->ops->free(s->slot[i].buf);
            acct_add(x->acct, ACCT_BUFFERS, -(long long)(s->gather_numel * x->pe));
        }
        if (s->slot[i].fbuf) {
            x->ops->free(s->slot[i].fbuf);
            acct_add(x->acct, ACCT_BUFFERS, -(long long)(s->fgather_numel * x->pe));
        }
    }
    for (int u = 0; s->fshard && u < x->n_units; u++)
        if (s->fshard[u]) {
            x->ops->free(s->fshard[u]);
            acct_add(x->acct, ACCT_PARAMS, -(long long)(s->flen[u] * x->pe));
        }
    free(s->fshard);
    free(s->flo);
    free(s->flen);
    for (int u = 0; u < x->n_units; u++) {
        if (s->pshard && s->pshard[u]) {
            if (s->on_host) x->ops->host_free(s->pshard[u]);
            else x->ops->free(s->pshard[u]);
            acct_add(x->acct, s->on_host ? ACCT_HOST : ACCT_PARAMS, -(long long)(s->len[u] * x->pe));
        }
        if (s->gshard && s->gshard[u]) {
            x->ops->free(s->gshard[u]);
            acct_add(x->acct, ACCT_GRADS, -(long long)(s->len[u] * x->ge));
        }
    }
    free(s->slot);
    free(s->pshard);
    free(s->gshard);
    free(s->lo);
    free(s->len);
    free(s);
}

/* train.lora: this rank's shard of unit u's frozen base, the model's whole one freed. */
static int shard_frozen(dp_strategy *s, int u, char *err, size_t errlen)
{
    strat_ctx *x = s->x;
    model *m = x->unit_model[u];
    size_t n = frozen_numel(s, u);
    if (!n) return 0;
    s->flen[u] = sizes_frozen_shard(x->sz, u, x->at, &s->flo[u]);
    if (!(s->fshard[u] = x->ops->alloc((s->flen[u] ? s->flen[u] : 1) * x->pe))) {
        snprintf(err, errlen, "fsdp: out of device memory for the frozen shard of unit %d", u);
        return -1;
    }
    acct_add(x->acct, ACCT_PARAMS, (long long)(s->flen[u] * x->pe));
    x->ops->copy(s->fshard[u], strat_at(model_unit_frozen(m, u), s->flo[u], x->pe), s->flen[u] * x->pe);
    model_unit_release_frozen(m, u);
    acct_add(x->acct, ACCT_PARAMS, -(long long)(n * x->pe));
    return 0;
}

/* Keeps this rank's shard of every unit and frees the model's full buffers. */
static int shard_units(dp_strategy *s, char *err, size_t errlen)
{
    strat_ctx *x = s->x;
    for (int u = 0; u < x->n_units; u++) {
        model *m = x->unit_model[u];
        if (!m) continue;
        size_t glo, olo;
        s->len[u] = sizes_shard(x->sz, SHARD_OF_PARAM, u, x->at, &s->lo[u]);
        if (sizes_shard(x->sz, SHARD_OF_GRAD, u, x->at, &glo) != s->len[u] || glo != s->lo[u] ||
            sizes_shard(x->sz, SHARD_OF_OPTIM, u, x->at, &olo) != s->len[u] || olo != s->lo[u]) {
            snprintf(err, errlen, "fsdp: unit %d: parameter, gradient and optimizer shards differ", u);
            return -1;
        }
        size_t n = unit_numel(s, u), len = s->len[u] ? s->len[u] : 1;
        s->pshard[u] = s->on_host ? x->ops->host_alloc(len * x->pe) : x->ops->alloc(len * x->pe);
        s->gshard[u] = x->ops->alloc(len * x->ge);
        if (!s->pshard[u] || !s->gshard[u]) {
            snprintf(err, errlen, "fsdp: out of %s memory for the shards of unit %d",
                     s->on_host && !s->pshard[u] ? "host" : "device", u);
            return -1;
        }
        acct_add(x->acct, s->on_host ? ACCT_HOST : ACCT_PARAMS, (long long)(s->len[u] * x->pe));
        acct_add(x->acct, ACCT_GRADS, (long long)(s->len[u] * x->ge));
        const void *mine = strat_at(model_unit_params(m, u), s->lo[u], x->pe);
        if (s->on_host) x->ops->to_host(s->pshard[u], mine, s->len[u] * x->pe);
        else x->ops->copy(s->pshard[u], mine, s->len[u] * x->pe);
        model_unit_release(m, u);
        acct_add(x->acct, ACCT_PARAMS, -(long long)(n * x->pe));
        acct_add(x->acct, ACCT_GRADS, -(long long)(n * x->ge));
        if (shard_frozen(s, u, err, errlen)) return -1;
    }
    return 0;
}

static dp_strategy *fsdp_create(strat_ctx *x, char *err, size_t errlen)
{
    int S = sizes_shard_group(x->sz, SHARD_OF_PARAM);
    if (!x->shard || comm_size(x->shard) != S ||
        comm_rank(x->shard) != sizes_shard_rank(x->sz, SHARD_OF_PARAM, x->at.dp)) {
        snprintf(err, errlen, "fsdp: the shard group does not match the sizing (%d ranks)", S);
        return NULL;
    }
    dp_strategy *s = calloc(1, sizeof *s);
    int n = x->n_units;
    if (s) {
        s->lo = calloc((size_t)n, sizeof(size_t));
        s->len = calloc((size_t)n, sizeof(size_t));
        s->pshard = calloc((size_t)n, sizeof(void *));
        s->gshard = calloc((size_t)n, sizeof(void *));
        s->nslot = sizes_gather_buffers(x->sz);
        s->slot = calloc((size_t)s->nslot, sizeof *s->slot);
        s->flo = calloc((size_t)n, sizeof(size_t));
        s->flen = calloc((size_t)n, sizeof(size_t));
        s->fshard = calloc((size_t)n, sizeof(void *));
    }
    if (!s || !s->lo || !s->len || !s->pshard || !s->gshard || !s->slot || !s->flo || !s->flen || !s->fshard) {
        fsdp_destroy(s);
        snprintf(err, errlen, "fsdp: out of memory");
        return NULL;
    }
    s->x = x;
    s->shard = x->shard;
    s->replica = x->replica;
    s->on_host = (x->job->train.offload & OFFLOAD_PARAMS) != 0;
    s->gather_numel = sizes_gather_numel(x->sz, x->at);
    s->fgather_numel = sizes_frozen_gather_numel(x->sz, x->at);
    if (shard_units(s, err, errlen) != 0) {
        fsdp_destroy(s);
        return NULL;
    }
    for (int i = 0; i < s->nslot; i++) {
        s->slot[i].unit = -1;
        if (!(s->slot[i].buf = x->ops->alloc((s->gather_numel ? s->gather_numel : 1) * x->pe)) ||
            (s->fgather_numel && !(s->slot[i].fbuf = x->ops->alloc(s->fgather_numel * x->pe)))) {
            fsdp_destroy(s);
            snprintf(err, errlen, "fsdp: out of memory for the gather buffers");
            return NULL;
        }
        acct_add(x->acct, ACCT_BUFFERS, (long long)(s->gather_numel * x->pe));
        if (s->slot[i].fbuf) acct_add(x->acct, ACCT_BUFFERS, (long long)(s->fgather_numel * x->pe));
    }
    s->pool = grad_pool_create(x, s->shard, s->gather_numel, sizes_gather_buffers(x->sz), s->gshard, s->lo,
                               s->len, err, errlen);
    if (!s->pool) {
        fsdp_destroy(s);
        return NULL;
    }
    return s;
}

/* ---- gather buffers ---- */

static gather_slot *find_slot(dp_strategy *s, int unit)
{
    for (int i = 0; i < s->nslot; i++)
        if (s->slot[i].unit == unit) return &s->slot[i];
    return NULL;
}

static void finish_gather(dp_strategy *s, gather_slot *g)
{
    if (!g->req && !g->freq) return;
    comm *group = strat_unit_group(s->x, g->unit, s->shard);
    strat_wait(s->x, group, g->req, "fsdp all_gather of parameters");
    strat_wait(s->x, group, g->freq, "fsdp all_gather of the frozen base");
    g->req = g->freq = NULL;
    g->valid = !s->x->failed;
}

/* A buffer not in use: an empty one, else the least recently used. A prefetch
 * in flight is waited for first (its unit is then simply evicted). */
static gather_slot *take_slot(dp_strategy *s)
{
    gather_slot *best = NULL;
    for (int i = 0; i < s->nslot; i++) {
        gather_slot *g = &s->slot[i];
        if (g->bound) continue;
        if (g->unit < 0) return g;
        int busy = g->req || g->freq, best_busy = best && (best->req || best->freq);
        if (!best || (best_busy && !busy) || (best_busy == busy && g->used < best->used)) best = g;
    }
    if (best) finish_gather(s, best);
    return best;
}

/* What a gather of `unit` into buf sends: the shard itself, or (offload) its
 * copy brought from the host into its own place in buf (an in-place gather). */
static const void *gather_input(dp_strategy *s, int unit, void *buf)
{
    strat_ctx *x = s->x;
    if (!s->on_host) return s->pshard[unit];
    void *mine = strat_at(buf, s->lo[unit], x->pe);
    /* on the copy queue: the compute already queued (the unit before) goes on
     * beside it; the gather, ordered after the compute stream, sees it */
    x->ops->copy_finish(x->ops->copy_start(mine, s->pshard[unit], s->len[unit] * x->pe));
    return mine;
}

static void start_gather(dp_strategy *s, gather_slot *g, int unit)
{
    strat_ctx *x = s->x;
    g->unit = unit;
    g->valid = 0;
    g->used = ++s->clock;
    if (x->failed) return;
    comm *group = strat_unit_group(x, unit, s->shard);
    double t0 = clock_now_s();
    int rc = COMM_OK;
    if (unit_numel(s, unit)) /* (train.lora: the embedding and head train nothing) */
        rc = comm_all_gather_async(group, gather_input(s, unit, g->buf), g->buf, unit_numel(s, unit),
                                   strat_dtype(x->pe), &g->req);
    strat_comm_done(x, t0, "fsdp all_gather of parameters (start)");
    /* a failed start leaves the slot holding `unit`, never valid: the unit's
     * after() must still find it to unbind it (a slot bound to no unit would
     * stay bound, and a later unit, the tied head's embedding in backward,
     * would find every buffer taken) */
    if (strat_fail(x, group, rc, "fsdp all_gather of parameters") != COMM_OK || !frozen_numel(s, unit)) return;
    t0 = clock_now_s();
    rc = comm_all_gather_async(group, s->fshard[unit], g->fbuf, frozen_numel(s, unit), strat_dtype(x->pe), &g->freq);
    strat_comm_done(x, t0, "fsdp all_gather of the frozen base (start)");
    strat_fail(x, group, rc, "fsdp all_gather of the frozen base");
}

/* The unit whose hooks come next in this phase on the same chunk, or -1. */
static int next_unit(const dp_strategy *s, int unit, model_phase phase)
{
    int nu = phase == PHASE_FORWARD ? unit + 1 : unit - 1;
    if (nu < 0 || nu >= s->x->n_units || s->x->unit_model[nu] != s->x->unit_model[unit]) return -1;
    return nu;
}

static void fsdp_before(dp_strategy *s, int unit, model_phase phase)
{
    strat_ctx *x = s->x;
    if (phase == PHASE_BACKWARD && !x->training) return;
    model *m = x->unit_model[unit];
    gather_slot *g = find_slot(s, unit);
    if (!g) {
        if (!(g = take_slot(s))) {
            fprintf(stderr, "dtrun: fsdp: no gather buffer free for unit %d\n", unit);
            abort();
        }
        start_gather(s, g, unit);
    }
    finish_gather(s, g);
    g->bound = 1;
    g->used = ++s->clock;
    model_unit_bind(m, unit, g->buf, NULL);
    if (g->fbuf && frozen_numel(s, unit)) model_unit_bind_frozen(m, unit, g->fbuf);
    if (phase == PHASE_BACKWARD) model_unit_bind(m, unit, NULL, grad_pool_acquire(s->pool, unit));
    int nu = next_unit(s, unit, phase);
    if (nu >= 0 && !find_slot(s, nu)) {
        gather_slot *free_slot = NULL;
        for (int i = 0; i < s->nslot && !free_slot; i++)
            if (!s->slot[i].bound && !s->slot[i].req && !s->slot[i].freq) free_slot = &s->slot[i];
        if (free_slot) start_gather(s, free_slot, nu);
    }
}

static void fsdp_after(dp_strategy *s, int unit, model_phase phase)
{
    strat_ctx *x = s->x;
    if (phase == PHASE_BACKWARD && !x->training) return;
    gather_slot *g = find_slot(s, unit);
    if (g) g->bound = 0;
    if (phase == PHASE_BACKWARD) grad_pool_release(s->pool, unit);
}

static void fsdp_begin_step(dp_strategy *s)
{
    strat_ctx *x = s->x;
    for (int u = 0; u < x->n_units; u++)
        if (s->gshard[u]) x->ops->zero(s->gshard[u], s->len[u] * x->ge);
}

static void fsdp_finish_grads(dp_strategy *s)
{
    strat_ctx *x = s->x;
    grad_pool_drain(s->pool);
    strat_ep_dense_sum(x, s->gshard, s->lo, s->len); /* expert units: sharded over edp */
    if (!s->replica || comm_size(s->replica) == 1) return;
    /* HSDP: the node-local sums of each shard, summed across nodes */
    comm_req **req = calloc((size_t)x->n_units, sizeof *req);
    if (!req) {
        strat_fail(x, NULL, COMM_ESYS, "hsdp: out of memory");
        return;
    }
    /* in the reduce type: through a twin of each shard when the gradients' differs */
    void **twin = calloc((size_t)x->n_units, sizeof *twin);
    if (!twin) {
        free(req);
        strat_fail(x, NULL, COMM_ESYS, "hsdp: out of memory");
        return;
    }
    for (int u = 0; u < x->n_units && !x->failed; u++) {
        /* an expert unit's shard is over the experts' whole data-parallel
         * group already: complete, no replica */
        if (!s->gshard[u] || strat_expert_unit(x, u)) continue;
        void *red = s->gshard[u];
        if (x->re != x->ge) {
            if (!(red = twin[u] = x->ops->alloc((s->len[u] ? s->len[u] : 1) * x->re))) {
                strat_fail(x, NULL, COMM_ESYS, "hsdp: out of memory");
                break;
            }
            strat_convert(x, red, x->re, s->gshard[u], x->ge, s->len[u]);
        }
        double t0 = clock_now_s();
        int rc = comm_all_reduce_async(s->replica, red, red, s->len[u], strat_dtype(x->re), COMM_SUM, &req[u]);
        strat_comm_done(x, t0, "hsdp all_reduce across nodes (start)");
        strat_fail(x, s->replica, rc, "hsdp all_reduce across nodes");
    }
    for (int u = 0; u < x->n_units; u++) {
        strat_wait(x, s->replica, req[u], "hsdp all_reduce across nodes");
        if (!twin[u]) continue;
        if (!x->failed) strat_convert(x, s->gshard[u], x->ge, twin[u], x->re, s->len[u]);
        x->ops->free(twin[u]);
    }
    free(twin);
    free(req);
}

static void fsdp_slice(dp_strategy *s, int unit, strat_slice *out)
{
    *out = (strat_slice){s->lo[unit], s->len[unit], s->pshard[unit], s->gshard[unit]};
}

/* HSDP's replicas hold equal shards: the first replica counts them (an
 * expert unit, sharded over the experts' data-parallel group, has none; its
 * dense shard one rank of the ep group counts). */
static int fsdp_counts(dp_strategy *s, int unit, int expert)
{
    int first = !s->replica || comm_rank(s->replica) == 0 || strat_expert_unit(s->x, unit);
    return first && strat_counts_rank(s->x, 1, unit, expert);
}

/* The shards changed: gathered copies are stale. */
static void fsdp_after_update(dp_strategy *s)
{
    for (int i = 0; i < s->nslot; i++) {
        finish_gather(s, &s->slot[i]);
        s->slot[i].unit = -1;
        s->slot[i].valid = 0;
        s->slot[i].bound = 0; /* between steps no unit computes */
    }
}

/* The same: no gather buffer is believed to hold a unit any more. */
static void fsdp_forget(dp_strategy *s) { fsdp_after_update(s); }

static void *fsdp_full_grad(dp_strategy *s, int unit, void *tmp)
{
    strat_ctx *x = s->x;
    if (x->failed || !unit_numel(s, unit)) return tmp;
    comm *g = strat_unit_group(x, unit, s->shard);
    double t0 = clock_now_s();
    int rc = comm_all_gather(g, s->gshard[unit], tmp, unit_numel(s, unit), strat_dtype(x->ge));
    strat_comm_done(x, t0, "fsdp all_gather of gradients");
    strat_fail(x, g, rc, "fsdp all_gather of gradients");
    return tmp;
}

static void fsdp_gather_unit(dp_strategy *s, int unit, float *out)
{
    strat_ctx *x = s->x;
    size_t n = unit_numel(s, unit);
    if (x->failed || !n) return;
    /* bf16 shards gather into a bf16 buffer, widened into out */
    void *dst = x->pe == sizeof(float) ? (void *)out : x->ops->alloc((n ? n : 1) * x->pe);
    if (!dst) {
        strat_fail(x, NULL, COMM_ESYS, "fsdp: out of memory gathering parameters");
        return;
    }
    comm *g = strat_unit_group(x, unit, s->shard);
    double t0 = clock_now_s();
    int rc = comm_all_gather(g, gather_input(s, unit, dst), dst, n, strat_dtype(x->pe));
    strat_comm_done(x, t0, "fsdp all_gather of parameters");
    strat_fail(x, g, rc, "fsdp all_gather of parameters");
    if (dst != out) {
        if (!x->failed) strat_convert(x, out, sizeof(float), dst, x->pe, n);
        x->ops->free(dst);
    }
}

static void fsdp_frozen_slice(dp_strategy *s, int unit, strat_slice *out)
{
    *out = (strat_slice){s->flo[unit], s->flen[unit], s->fshard[unit], NULL};
}

static void fsdp_gather_frozen(dp_strategy *s, int unit, float *out)
{
    strat_ctx *x = s->x;
    size_t n = frozen_numel(s, unit);
    if (x->failed || !n) return;
    void *dst = x->pe == sizeof(float) ? (void *)out : x->ops->alloc(n * x->pe);
    if (!dst) {
        strat_fail(x, NULL, COMM_ESYS, "fsdp: out of memory gathering the frozen base");
        return;
    }
    double t0 = clock_now_s();
    int rc = comm_all_gather(s->shard, s->fshard[unit], dst, n, strat_dtype(x->pe));
    strat_comm_done(x, t0, "fsdp all_gather of the frozen base");
    strat_fail(x, s->shard, rc, "fsdp all_gather of the frozen base");
    if (dst != out) {
        if (!x->failed) strat_convert(x, out, sizeof(float), dst, x->pe, n);
        x->ops->free(dst);
    }
}

const strat_ops strat_fsdp = {
    .name = "fsdp",
    .create = fsdp_create,
    .destroy = fsdp_destroy,
    .begin_step = fsdp_begin_step,
    .before = fsdp_before,
    .after = fsdp_after,
    .finish_grads = fsdp_finish_grads,
    .slice = fsdp_slice,
    .counts = fsdp_counts,
    .after_update = fsdp_after_update,
    .forget = fsdp_forget,
    .full_grad = fsdp_full_grad,
    .gather_unit = fsdp_gather_unit,
    .frozen_slice = fsdp_frozen_slice,
    .gather_frozen = fsdp_gather_frozen,
};
