/* strategy.c — the helpers every data-parallel strategy shares (strategy.h). */
#include "runtime/parallel/strategy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/parallel/trace.h"

int strat_fail(strat_ctx *x, comm *c, int rc, const char *what)
{
    if (rc != COMM_OK && !x->failed) {
        x->failed = 1;
        snprintf(x->err, sizeof x->err, "rank %d: step %d: %s: %s", x->rank, x->step, what,
                 c ? comm_last_error(c) : "failed");
    }
    return rc;
}

void strat_comm_done(strat_ctx *x, double t0, const char *what)
{
    double t1 = clock_now_s();
    x->comm_s += t1 - t0;
    trace_span(TRACE_COMM, t0, t1, "%s", what);
}

int strat_wait(strat_ctx *x, comm *c, comm_req *req, const char *what)
{
    if (!req) return COMM_OK;
    double t0 = clock_now_s();
    int rc = comm_wait(req);
    strat_comm_done(x, t0, what);
    return strat_fail(x, c, rc, what);
}

int strat_backward_order(const strat_ctx *x, int *order)
{
    int n = 0, head = x->n_units - 1;
    /* (train.lora: a frozen wte, no gradient to wait for) */
    int tied_here = job_model_tied_head(&x->job->model) && !job_lora_on(&x->job->model) && x->unit_model[0] &&
                    x->unit_model[0] == x->unit_model[head];
    for (int u = x->n_units - 1; u >= 0; u--) {
        if (!x->unit_model[u] || (tied_here && u == head)) continue;
        order[n++] = u;
    }
    /* the embedding adds its part of the tied wte gradient to the head's copy,
     * so the head's gradient is final only after unit 0's backward */
    if (tied_here) order[n++] = head;
    return n;
}

void strat_zero_unit_grads(strat_ctx *x)
{
    for (int u = 0; u < x->n_units; u++) {
        model *m = x->unit_model[u];
        void *g = m ? model_unit_grads(m, u) : NULL;
        if (g) x->ops->zero(g, model_unit_local_numel(m, u) * x->ge);
    }
}

void strat_frozen_whole_slice(strat_ctx *x, int unit, strat_slice *out)
{
    model *m = x->unit_model[unit];
    *out = (strat_slice){0, model_unit_frozen_local_numel(m, unit), model_unit_frozen(m, unit), NULL};
}

void strat_frozen_whole_gather(strat_ctx *x, int unit, float *out)
{
    model *m = x->unit_model[unit];
    size_t n = model_unit_frozen_local_numel(m, unit);
    if (n) strat_convert(x, out, sizeof(float), model_unit_frozen(m, unit), x->pe, n);
}

comm_dtype strat_dtype(size_t elem_bytes) { return elem_bytes == 2 ? COMM_BF16 : COMM_F32; }

void strat_convert(strat_ctx *x, void *dst, size_t de, const void *src, size_t se, size_t n)
{
    if (de == se) x->ops->copy(dst, src, n * de);
    else if (de == 2) x->ops->to_bf16(dst, src, n);
    else x->ops->from_bf16(dst, src, n);
}

void strat_accumulate(strat_ctx *x, void *acc, size_t ae, const void *add, size_t adde, size_t n, float *wide,
                      size_t wide_numel)
{
    if (adde == 4) {
        if (ae == 4) x->ops->residual_forward(acc, acc, add, n, DT_F32);
        else x->ops->acc_bf16(acc, add, n);
        return;
    }
    for (size_t c = 0; c < n; c += wide_numel) {
        size_t k = n - c < wide_numel ? n - c : wide_numel;
        x->ops->from_bf16(wide, (const uint16_t *)add + c, k);
        if (ae == 4) x->ops->residual_forward((float *)acc + c, (float *)acc + c, wide, k, DT_F32);
        else x->ops->acc_bf16((uint16_t *)acc + c, wide, k);
    }
}

/* ---- expert parallelism's units ---- */

void strat_expert_range(const strat_ctx *x, int unit, size_t *lo, size_t *hi)
{
    *lo = *hi = 0;
    model *m = x->ep ? x->unit_model[unit] : NULL;
    if (!m) return;
    int any = 0;
    for (int i = 0; i < model_param_count(m); i++) {
        const param_spec *p = model_param(m, i);
        if (p->unit != unit || !param_is_expert(p)) continue;
        size_t a = p->offset, b = p->offset + p->local_numel;
        if (!any || a < *lo) *lo = a;
        if (!any || b > *hi) *hi = b;
        any = 1;
    }
}

int strat_expert_unit(const strat_ctx *x, int unit)
{
    size_t lo, hi;
    strat_expert_range(x, unit, &lo, &hi);
    return hi > lo;
}

comm *strat_unit_group(const strat_ctx *x, int unit, comm *dense)
{
    return strat_expert_unit(x, unit) ? x->edp : dense;
}

int strat_counts_rank(const strat_ctx *x, int sharded, int unit, int expert)
{
    if (!sharded) return comm_rank(expert ? x->edp : x->dp) == 0;
    return expert || !strat_expert_unit(x, unit) || comm_rank(x->ep) == 0;
}

void strat_ep_dense_sum(strat_ctx *x, void *const *gshard, const size_t *lo, const size_t *len)
{
    if (!x->ep || comm_size(x->ep) == 1) return;
    for (int u = 0; u < x->n_units && !x->failed; u++) {
        size_t ea, eb;
        if (!gshard[u] || !len[u]) continue;
        strat_expert_range(x, u, &ea, &eb);
        if (eb <= ea) continue;
        /* the shard's dense elements: before the experts, and after them */
        size_t a0 = lo[u], a1 = lo[u] + len[u];
        size_t piece[2][2] = {{a0, a1 < ea ? a1 : ea}, {a0 > eb ? a0 : eb, a1}};
        for (int k = 0; k < 2 && !x->failed; k++) {
            size_t a = piece[k][0], n = piece[k][1] > a ? piece[k][1] - a : 0;
            if (!n) continue;
            void *g = strat_at(gshard[u], a - lo[u], x->ge), *red = g;
            if (x->re != x->ge && !(red = x->ops->alloc(n * x->re))) {
                strat_fail(x, NULL, COMM_ESYS, "ep: out of memory");
                return;
            }
            if (red != g) strat_convert(x, red, x->re, g, x->ge, n);
            double t0 = clock_now_s();
            int rc = comm_all_reduce(x->ep, red, red, n, strat_dtype(x->re), COMM_SUM);
            strat_comm_done(x, t0, "ep all_reduce of an expert unit's dense gradient shard");
            strat_fail(x, x->ep, rc, "ep all_reduce of an expert unit's dense gradient shard");
            if (red != g) {
                if (!x->failed) strat_convert(x, g, x->ge, red, x->re, n);
                x->ops->free(red);
            }
        }
    }
}
