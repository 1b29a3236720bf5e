/* grad_pool.c — full-unit gradient buffers that are reduce-scattered into
 * shards (ZeRO-2 and FSDP; see strategy.h).
 *
 * Why a pool: a sharded strategy must not keep every unit's full gradient, only
 * its shard. Backward writes one unit's full gradient into a pool buffer; when
 * the unit's after(BACKWARD) fires, that buffer is reduce-scattered in place
 * (asynchronously) while backward goes on into the next buffer; once it lands,
 * this rank's chunk is added into its shard accumulator and the buffer is free
 * again. Two buffers (sizes_reduce_buffers / sizes_gather_buffers) let one unit
 * compute while the previous one communicates. Every micro-batch is reduced, so
 * the shard accumulates the global gradient across micro-batches.
 *
 * Element types (mixed precision): buffers and shards hold the gradient type
 * (x->ge); the reduce-scatter runs in the reduce type (x->re), through a twin
 * of each buffer in that type when the two differ; a bf16 chunk is widened
 * (in pieces, through a small fp32 scratch) to be added into its shard. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/optim/optim.h"
#include "runtime/parallel/strategy.h"

typedef struct {
    void *buf;       /* gradient type */
    void *twin;      /* reduce type, when it differs (else NULL: buf is reduced) */
    int unit;        /* unit whose gradient the buffer holds, -1 when free */
    int bound;       /* acquired and not yet released: backward writes into it */
    comm_req *req;   /* its reduce-scatter, in flight */
    long seq;        /* release order: the oldest completes first */
} pool_slot;

struct grad_pool {
    strat_ctx *x;
    comm *group;
    size_t numel;
    int nbuf;
    pool_slot *slot;
    void *const *shard;
    const size_t *lo, *len;
    long seq;
    float *wide;     /* bf16 reductions: wide_numel floats */
    size_t wide_numel;
};

size_t grad_pool_wide_numel(size_t numel, size_t re)
{
    if (re != 2) return 0;
    return numel < OPTIM_SCRATCH_NUMEL ? (numel ? numel : 1) : OPTIM_SCRATCH_NUMEL;
}

static size_t slot_bytes(const strat_ctx *x, size_t numel)
{
    return numel * (x->ge + (x->re != x->ge ? x->re : 0));
}

grad_pool *grad_pool_create(strat_ctx *x, comm *group, size_t numel, int nbuf, void *const *shard,
                            const size_t *lo, const size_t *len, char *err, size_t errlen)
{
    grad_pool *p = calloc(1, sizeof *p);
    if (p) p->slot = calloc((size_t)nbuf, sizeof *p->slot);
    if (!p || !p->slot) {
        free(p);
        snprintf(err, errlen, "grad pool: out of memory");
        return NULL;
    }
    *p = (grad_pool){x, group, numel, nbuf, p->slot, shard, lo, len, 0, NULL, 0};
    for (int i = 0; i < nbuf; i++) {
        pool_slot *sl = &p->slot[i];
        sl->unit = -1;
        sl->buf = x->ops->alloc((numel ? numel : 1) * x->ge);
        sl->twin = x->re != x->ge ? x->ops->alloc((numel ? numel : 1) * x->re) : NULL;
        if (!sl->buf || (x->re != x->ge && !sl->twin)) {
            grad_pool_destroy(p);
            snprintf(err, errlen, "grad pool: out of memory for %d buffers of %zu elements", nbuf, numel);
            return NULL;
        }
        acct_add(x->acct, ACCT_BUFFERS, (long long)slot_bytes(x, numel));
    }
    p->wide_numel = grad_pool_wide_numel(numel, x->re);
    if (p->wide_numel) {
        if (!(p->wide = x->ops->alloc(p->wide_numel * sizeof(float)))) {
            grad_pool_destroy(p);
            snprintf(err, errlen, "grad pool: out of memory");
            return NULL;
        }
        acct_add(x->acct, ACCT_BUFFERS, (long long)(p->wide_numel * sizeof(float)));
    }
    return p;
}

void grad_pool_destroy(grad_pool *p)
{
    if (!p) return;
    for (int i = 0; i < p->nbuf; i++) {
        comm_wait(p->slot[i].req);
        if (p->slot[i].twin) p->x->ops->free(p->slot[i].twin);
        if (p->slot[i].buf) {
            p->x->ops->free(p->slot[i].buf);
            acct_add(p->x->acct, ACCT_BUFFERS, -(long long)slot_bytes(p->x, p->numel));
        }
    }
    if (p->wide) {
        p->x->ops->free(p->wide);
        acct_add(p->x->acct, ACCT_BUFFERS, -(long long)(p->wide_numel * sizeof(float)));
    }
    free(p->slot);
    free(p);
}

static size_t unit_numel(const grad_pool *p, int unit)
{
    return model_unit_local_numel(p->x->unit_model[unit], unit);
}

/* Waits for the slot's reduce-scatter and adds this rank's chunk to the shard. */
static void complete(grad_pool *p, pool_slot *s)
{
    strat_ctx *x = p->x;
    int u = s->unit;
    void *red = s->twin ? s->twin : s->buf;
    if (strat_wait(x, strat_unit_group(x, u, p->group), s->req, "reduce_scatter of gradients") == COMM_OK &&
        !x->failed)
        strat_accumulate(x, p->shard[u], x->ge, strat_at(red, p->lo[u], x->re), x->re, p->len[u], p->wide,
                         p->wide_numel);
    s->req = NULL;
    s->unit = -1;
}

static pool_slot *oldest_in_flight(grad_pool *p)
{
    pool_slot *best = NULL;
    for (int i = 0; i < p->nbuf; i++) {
        pool_slot *s = &p->slot[i];
        if (s->unit >= 0 && !s->bound && (!best || s->seq < best->seq)) best = s;
    }
    return best;
}

void *grad_pool_acquire(grad_pool *p, int unit)
{
    pool_slot *free_slot = NULL;
    for (int i = 0; i < p->nbuf && !free_slot; i++)
        if (p->slot[i].unit < 0) free_slot = &p->slot[i];
    if (!free_slot) {
        free_slot = oldest_in_flight(p);
        if (!free_slot) {
            /* every buffer is bound to a unit whose backward has not finished: the
             * hooks' nesting promises this never happens with two buffers */
            fprintf(stderr, "dtrun: grad pool: no buffer for unit %d (all %d bound)\n", unit, p->nbuf);
            abort();
        }
        complete(p, free_slot);
    }
    size_t n = unit_numel(p, unit);
    if (n > p->numel) {
        fprintf(stderr, "dtrun: grad pool: unit %d has %zu elements, buffers hold %zu\n", unit, n, p->numel);
        abort();
    }
    p->x->ops->zero(free_slot->buf, n * p->x->ge);
    free_slot->unit = unit;
    free_slot->bound = 1;
    return free_slot->buf;
}

void grad_pool_release(grad_pool *p, int unit)
{
    strat_ctx *x = p->x;
    pool_slot *s = NULL;
    for (int i = 0; i < p->nbuf && !s; i++)
        if (p->slot[i].unit == unit && p->slot[i].bound) s = &p->slot[i];
    if (!s) return;
    s->bound = 0;
    s->seq = p->seq++;
    size_t n = unit_numel(p, unit);
    if (x->failed || n == 0) { s->unit = -1; return; } /* (train.lora: a unit with nothing to train) */
    double t0 = clock_now_s();
    /* in place: this rank's chunk lands at buf + lo, where comm_chunk puts it
     * (in the twin, converted first, when the reduction's type differs) */
    void *red = s->buf;
    if (s->twin) {
        strat_convert(x, s->twin, x->re, s->buf, x->ge, n);
        red = s->twin;
    }
    comm *g = strat_unit_group(x, unit, p->group); /* an expert unit's: the experts' data-parallel group */
    int rc = comm_reduce_scatter_async(g, red, strat_at(red, p->lo[unit], x->re), n, strat_dtype(x->re), COMM_SUM,
                                       &s->req);
    strat_comm_done(x, t0, "reduce_scatter of gradients (start)");
    if (strat_fail(x, g, rc, "reduce_scatter of gradients") != COMM_OK) s->unit = -1;
}

void grad_pool_drain(grad_pool *p)
{
    pool_slot *s;
    while ((s = oldest_in_flight(p))) complete(p, s);
}
