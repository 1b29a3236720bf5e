/* ddp.c — data parallel: every rank holds the whole (tp-local) model and its
 * gradients are all-reduced (SUM) over the data-parallel group.
 *
 * SUM, not AVG: the engine seeds each micro-batch's backward with 1 / (tokens or
 * images of the GLOBAL batch), so the sum over ranks is already the mean gradient
 * of the global batch, exactly what one process computes.
 *
 * Buckets (PyTorch DDP's idea): the gradients, in the order backward finishes
 * them, are cut into a first bucket of 1 MiB (sizes_first_bucket_numel), then
 * buckets of up to parallel.bucket_mb (sizes_bucket_numel). A
 * bucket is all-reduced asynchronously as soon as its last unit's after(BACKWARD)
 * hook fires on the step's LAST micro-batch, so the communication of the late
 * units overlaps the backward of the early ones; earlier micro-batches only
 * accumulate locally (no sync during accumulation). A bucket that is one piece of
 * one unit is reduced in place; a bucket gathering several pieces is copied
 * through the one bucket buffer (a second such bucket first waits for the
 * previous one to land and be copied back). The optimizer waits for all of them
 * (ddp_buckets_finish). Buckets launch in plan order on every rank, so the
 * collectives match. Expert parallelism: an expert unit's experts
 * (strat_expert_range) reduce over the experts' data-parallel group x->edp,
 * its other tensors over x->dp; a bucket holds pieces of one group only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/parallel/strategy.h"

typedef struct {
    int unit;
    size_t off, len; /* elements of the unit's gradient */
} ddp_seg;

typedef struct {
    int first_seg, n_segs;
    size_t numel;
    int launched;
    comm *group;        /* x->dp, or x->edp for experts */
    comm_req *req;
    int through_buffer; /* more than one piece: copied into the bucket buffer */
} ddp_bucket;

struct ddp_buckets {
    strat_ctx *x;
    int active;           /* dp > 1 */
    ddp_seg *seg;
    int n_seg;
    ddp_bucket *bk;
    int n_bk;
    int next;             /* first bucket of the plan not launched yet */
    char *ready;          /* [n_units] */
    void *buf;            /* the bucket buffer (NULL when every bucket is one piece and
                             the gradients are of the reduce type), x->re bytes each */
    size_t cap;
    int buf_owner;        /* bucket whose data is in buf, -1 */
};

static void *seg_grad(ddp_buckets *b, const ddp_seg *s)
{
    model *m = b->x->unit_model[s->unit];
    return strat_at(model_unit_grads(m, s->unit), s->off, b->x->ge);
}

/* Cuts the units, in backward order, into a first bucket of at most `first`
 * elements, then buckets of at most cap (cap 0: one bucket per unit). Returns 0 or
 * -1 (out of memory). */
static int plan(ddp_buckets *b, size_t first, size_t cap)
{
    strat_ctx *x = b->x;
    int *order = malloc((size_t)x->n_units * sizeof(int));
    if (!order) return -1;
    int n = strat_backward_order(x, order);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += model_unit_local_numel(x->unit_model[order[i]], order[i]);
    /* enough room for every piece: each unit's three parts (dense, experts,
     * dense) add at most total / cap + 2 each */
    size_t max_seg = (size_t)n * 6 + (cap ? total / cap : 0) + 3; /* + the first bucket's cut */
    b->seg = calloc(max_seg, sizeof *b->seg);
    b->bk = calloc(max_seg, sizeof *b->bk);
    if (!b->seg || !b->bk) { free(order); return -1; }
    size_t fill = 0;
    for (int i = 0; i < n; i++) {
        int u = order[i];
        size_t numel = model_unit_local_numel(x->unit_model[u], u), ea, eb;
        strat_expert_range(x, u, &ea, &eb);
        size_t cut[4] = {0, ea, eb, numel};
        for (int part = 0; part < 3; part++) {
            size_t off = cut[part], end = cut[part + 1];
            comm *group = part == 1 ? x->edp : x->dp;
            while (off < end) {
                size_t limit = b->n_bk == 1 ? first : cap; /* of the bucket being filled */
                if (b->n_bk == 0 || (cap && fill == limit) || !cap || b->bk[b->n_bk - 1].group != group) {
                    b->bk[b->n_bk++] = (ddp_bucket){.first_seg = b->n_seg, .group = group};
                    fill = 0;
                    limit = b->n_bk == 1 ? first : cap;
                }
                ddp_bucket *bk = &b->bk[b->n_bk - 1];
                size_t len = cap ? limit - fill : end - off;
                if (len > end - off) len = end - off;
                b->seg[b->n_seg++] = (ddp_seg){u, off, len};
                bk->n_segs++;
                bk->numel += len;
                fill += len;
                off += len;
            }
        }
    }
    free(order);
    int need_buf = 0;
    for (int k = 0; k < b->n_bk; k++) {
        /* gradients of another type than the reduction's are converted there */
        b->bk[k].through_buffer = b->bk[k].n_segs > 1 || x->ge != x->re;
        need_buf |= b->bk[k].through_buffer;
    }
    if (need_buf) {
        /* cap 0 (one bucket per unit: HSDP or FSDP over one-rank shard groups)
         * needs the buffer only to convert: the largest bucket's size */
        size_t numel = cap;
        for (int k = 0; !cap && k < b->n_bk; k++)
            if (b->bk[k].numel > numel) numel = b->bk[k].numel;
        b->buf = x->ops->alloc((numel ? numel : 1) * x->re);
        if (!b->buf) return -1;
        b->cap = numel;
        acct_add(x->acct, ACCT_BUFFERS, (long long)(numel * x->re));
    }
    return 0;
}

ddp_buckets *ddp_buckets_create(strat_ctx *x, char *err, size_t errlen)
{
    ddp_buckets *b = calloc(1, sizeof *b);
    if (!b) { snprintf(err, errlen, "ddp: out of memory"); return NULL; }
    b->x = x;
    b->buf_owner = -1;
    b->active = comm_size(x->dp) > 1;
    b->ready = calloc((size_t)x->n_units, 1);
    if (!b->ready ||
        (b->active && plan(b, sizes_first_bucket_numel(x->sz, x->at), sizes_bucket_numel(x->sz, x->at)) != 0)) {
        ddp_buckets_destroy(b);
        snprintf(err, errlen, "ddp: out of memory for the gradient buckets");
        return NULL;
    }
    return b;
}

void ddp_buckets_destroy(ddp_buckets *b)
{
    if (!b) return;
    for (int k = 0; k < b->n_bk; k++) comm_wait(b->bk[k].req);
    if (b->buf) {
        b->x->ops->free(b->buf);
        acct_add(b->x->acct, ACCT_BUFFERS, -(long long)(b->cap * b->x->re));
    }
    free(b->seg);
    free(b->bk);
    free(b->ready);
    free(b);
}

void ddp_buckets_reset(ddp_buckets *b)
{
    for (int u = 0; u < b->x->n_units; u++) b->ready[u] = 0;
    for (int k = 0; k < b->n_bk; k++) b->bk[k].launched = 0;
    b->next = 0;
}

/* Waits for bucket k and, when it went through the buffer, copies it back. */
static void complete(ddp_buckets *b, int k)
{
    ddp_bucket *bk = &b->bk[k];
    strat_wait(b->x, bk->group, bk->req, "ddp all_reduce");
    bk->req = NULL;
    if (!bk->through_buffer || b->buf_owner != k) return;
    strat_ctx *x = b->x;
    size_t at = 0;
    for (int i = 0; i < bk->n_segs; i++) {
        const ddp_seg *s = &b->seg[bk->first_seg + i];
        strat_convert(x, seg_grad(b, s), x->ge, strat_at(b->buf, at, x->re), x->re, s->len);
        at += s->len;
    }
    b->buf_owner = -1;
}

static void launch(ddp_buckets *b, int k)
{
    strat_ctx *x = b->x;
    ddp_bucket *bk = &b->bk[k];
    bk->launched = 1;
    if (x->failed) return; /* the step is lost: do not queue more on a broken group */
    void *data;
    if (bk->through_buffer) {
        if (b->buf_owner >= 0) complete(b, b->buf_owner);
        size_t at = 0;
        for (int i = 0; i < bk->n_segs; i++) {
            const ddp_seg *s = &b->seg[bk->first_seg + i];
            strat_convert(x, strat_at(b->buf, at, x->re), x->re, seg_grad(b, s), x->ge, s->len);
            at += s->len;
        }
        b->buf_owner = k;
        data = b->buf;
    } else {
        data = seg_grad(b, &b->seg[bk->first_seg]);
    }
    double t0 = clock_now_s();
    int rc = comm_all_reduce_async(bk->group, data, data, bk->numel, strat_dtype(x->re), COMM_SUM, &bk->req);
    strat_comm_done(x, t0, "ddp all_reduce (start)");
    strat_fail(x, bk->group, rc, "ddp all_reduce");
}

static int bucket_complete(const ddp_buckets *b, int k)
{
    const ddp_bucket *bk = &b->bk[k];
    for (int i = 0; i < bk->n_segs; i++)
        if (!b->ready[b->seg[bk->first_seg + i].unit]) return 0;
    return 1;
}

void ddp_buckets_unit_ready(ddp_buckets *b, int unit)
{
    if (!b->active) return;
    b->ready[unit] = 1;
    while (b->next < b->n_bk && bucket_complete(b, b->next)) launch(b, b->next++);
}

void ddp_buckets_finish(ddp_buckets *b)
{
    if (!b->active) return;
    while (b->next < b->n_bk) launch(b, b->next++);
    for (int k = 0; k < b->n_bk; k++) complete(b, k);
}

/* ---- the DDP strategy ---- */

struct dp_strategy {
    strat_ctx *x;
    ddp_buckets *b;
};

static dp_strategy *ddp_create(strat_ctx *x, char *err, size_t errlen)
{
    dp_strategy *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "ddp: out of memory"); return NULL; }
    s->x = x;
    if (!(s->b = ddp_buckets_create(x, err, errlen))) { free(s); return NULL; }
    return s;
}

static void ddp_destroy(dp_strategy *s)
{
    if (!s) return;
    ddp_buckets_destroy(s->b);
    free(s);
}

static void ddp_begin_step(dp_strategy *s)
{
    strat_zero_unit_grads(s->x);
    ddp_buckets_reset(s->b);
}

static void ddp_before(dp_strategy *s, int unit, model_phase phase) { (void)s, (void)unit, (void)phase; }

static void ddp_after(dp_strategy *s, int unit, model_phase phase)
{
    if (phase == PHASE_BACKWARD && s->x->training && s->x->last_micro) ddp_buckets_unit_ready(s->b, unit);
}

static void ddp_finish_grads(dp_strategy *s) { ddp_buckets_finish(s->b); }

static void ddp_slice(dp_strategy *s, int unit, strat_slice *out)
{
    model *m = s->x->unit_model[unit];
    *out = (strat_slice){0, model_unit_local_numel(m, unit), model_unit_params(m, unit),
                         model_unit_grads(m, unit)};
}

static int ddp_counts(dp_strategy *s, int unit, int expert) { return strat_counts_rank(s->x, 0, unit, expert); }

static void ddp_after_update(dp_strategy *s) { (void)s; }

/* Nothing remembered between steps (begin_step resets the buckets). */
static void ddp_forget(dp_strategy *s) { (void)s; }

static void *ddp_full_grad(dp_strategy *s, int unit, void *tmp)
{
    (void)tmp;
    return model_unit_grads(s->x->unit_model[unit], unit);
}

static void ddp_gather_unit(dp_strategy *s, int unit, float *out)
{
    strat_ctx *x = s->x;
    model *m = x->unit_model[unit];
    strat_convert(x, out, sizeof(float), model_unit_params(m, unit), x->pe, model_unit_local_numel(m, unit));
}

static void ddp_frozen_slice(dp_strategy *s, int unit, strat_slice *out) { strat_frozen_whole_slice(s->x, unit, out); }
static void ddp_gather_frozen(dp_strategy *s, int unit, float *out) { strat_frozen_whole_gather(s->x, unit, out); }

const strat_ops strat_ddp = {
    .name = "ddp",
    .create = ddp_create,
    .destroy = ddp_destroy,
    .begin_step = ddp_begin_step,
    .before = ddp_before,
    .after = ddp_after,
    .finish_grads = ddp_finish_grads,
    .slice = ddp_slice,
    .counts = ddp_counts,
    .after_update = ddp_after_update,
    .forget = ddp_forget,
    .full_grad = ddp_full_grad,
    .gather_unit = ddp_gather_unit,
    .frozen_slice = ddp_frozen_slice,
    .gather_frozen = ddp_gather_frozen,
};
