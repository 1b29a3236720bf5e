/* ep.c — expert parallelism (parallel.ep): the MoE token dispatcher of a rank
 * whose ep group splits every MoE block's routed experts (model.h
 * model_moe_dispatcher; Megatron-Core's MoEAlltoAllTokenDispatcher).
 *
 * Each rank routes its own tokens over all E experts (the router is a dense,
 * replicated parameter), and ep rank j holds experts [j El, (j + 1) El), El =
 * E / ep. The route's permuted order is expert by expert, so the rows for rank
 * j's experts are one contiguous run of it, which makes the four exchanges
 * plain all-to-all(v)s over the ep group:
 *
 *   dispatch           permute the kept choices' rows (token side, expert
 *                      order); exchange the counts per (rank, expert) first
 *                      (all-to-all of El ints each); all-to-allv the rows;
 *                      they arrive rank by rank, each rank's expert by
 *                      expert, and are reordered expert by expert (one
 *                      gather) for the grouped GEMM
 *   combine            the experts' output rows reordered rank by rank and
 *                      all-to-allv'd back: they land in the token side's
 *                      permuted order (yt, which the backward keeps), then
 *                      the local weighted un-permute
 *   combine_backward   the local un-permute's backward (w dout per choice,
 *                      d(weights) from yt) and the rows' gradient sent to the
 *                      experts like the dispatch
 *   dispatch_backward  the experts' input gradient sent back like the
 *                      combine, then the local permute's backward
 *
 * Rows travel in the activations' type (bf16 under mixed precision: half the
 * bytes), gradients in fp32. The staging holds the token side's rows (the
 * micro-batch's choices) and the experts' side's as many as arrive: it grows
 * to the most that arrived so far (ensure_room), never sized up front for the
 * most a dropless router may bring (every ep rank's tokens to this rank's
 * experts); the model's own expert buffers follow the arrival exactly
 * (moe.c). The counts come back with the rows' route
 * (model_moe_route counts_l, kept with the block's activations), so the
 * backward and a block recompute's second forward need no exchange of counts.
 * All the ranks of an ep group run the same schedule (same pipeline stage,
 * same micro-batches), so their all-to-alls meet in the same order; the ep
 * group is a communicator of its own (comm.h: nothing else is in flight on
 * it).
 *
 * Overlap: each exchange is started by the call's first half (the
 * dispatcher's *_start), and the model computes meanwhile what does not
 * depend on it: the shared experts' first layer while the rows go to the
 * experts, their second while the outputs come back, their backward while
 * the output gradient goes, the router's weight gradient while the input
 * gradient comes back (moe.c). The exchange runs on the ep communicator's
 * own thread (CPU transports) or stream (NCCL).
 *
 * Context parallelism with model.moe (cp > 1): a sample's tokens sit on the
 * cp ranks, and the capacity and the balance loss count a whole sample's
 * choices; the dispatcher's cp_gather brings every cp rank's counts (an
 * all-gather over the cp group), with ep or without. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/parallel/strategy.h"

struct ep_disp {
    strat_ctx *x;
    const dt_ops *ops;
    comm *ep;             /* NULL: ep 1 (only the cp gather) */
    int size, E, El, C;
    size_t tok_rows, exp_rows; /* capacities (rows of C) of tok and exp */
    void *mem;            /* sizes_ep_stage_numel_at(exp_rows) floats: tok, exp, tpbuf, perm */
    size_t mem_bytes;
    float *tok;           /* the token side's rows on their way: [tok_rows, C] */
    float *exp;           /* the experts' side's, rank by rank: [exp_rows, C] */
    int *perm;            /* device [exp_rows + tp_rows]: a reorder's gather indices */
    void *tpbuf;          /* tp > 1: [tp_rows, C] the tp group's slots (tp_gather_shares); under
                             mixed precision the gradients' slots are bf16, in its first half,
                             the second holding their rows on the way (grad_half) */
    size_t tp_rows;
    int *perm_host;       /* [exp_rows] */
    size_t *send, *recv;  /* [ep] element counts of one all-to-allv */
    int *off;             /* [E]: where each (rank, expert) block arrives */
    int tp, tq;           /* tensor parallelism: the tp group's size and this rank's place */
    comm_req *req;        /* the exchange in flight (one at a time) */
    const char *pending;  /* which one, NULL: none */
};

/* The element counts of one exchange of rows of C (dir 0: to the experts,
 * dir 1: back): rows for rank j's experts (this rank's route), rows from
 * rank i for this rank's experts (the received counts). */
/* Tensor parallelism: of a block of c rows (one rank's rows of one expert),
 * tp rank q's share, rows [c q / tp, c (q + 1) / tp); the whole block at tp 1. */
static int share_lo(const ep_disp *d, int c) { return (int)((long long)c * d->tq / d->tp); }
static int share_len(const ep_disp *d, int c) { return (int)((long long)c * (d->tq + 1) / d->tp) - share_lo(d, c); }

static void counts_of(ep_disp *d, const model_moe_route *r, int dir)
{
    const int *from = r->counts_l + r->El; /* [ep][El] */
    for (int j = 0; j < d->size; j++) {
        size_t to = 0, in = 0;
        for (int e = 0; e < d->El; e++)
            to += (size_t)share_len(d, r->counts[j * d->El + e]), in += (size_t)share_len(d, from[j * d->El + e]);
        d->send[j] = (dir == 0 ? to : in) * (size_t)d->C;
        d->recv[j] = (dir == 0 ? in : to) * (size_t)d->C;
    }
}

/* The reorder between the rows as they arrive (rank i's, each expert by
 * expert) and as the experts compute them (expert e's, each rank by rank):
 * to_experts 1: perm[p] = the arrival row of expert order row p; 0: the
 * inverse. Uploaded to d->perm; returns the rows. */
static int reorder(ep_disp *d, const model_moe_route *r, int to_experts)
{
    const int *from = r->counts_l + r->El;
    int n = 0, B = d->size * d->El;
    for (int b = 0; b < B; b++) d->off[b] = n, n += from[b]; /* arrival offset of block (i, e) */
    int at = 0;
    for (int e = 0; e < d->El; e++)
        for (int i = 0; i < d->size; i++)
            for (int k = 0, o = d->off[i * d->El + e]; k < from[i * d->El + e]; k++, at++) {
                if (to_experts) d->perm_host[at] = o + k;
                else d->perm_host[o + k] = at;
            }
    d->ops->from_host(d->perm, d->perm_host, (size_t)n * sizeof(int));
    return n;
}

/* ---- tensor parallelism (tp > 1) ----
 * Every tp rank routes the same tokens (moe.c) and computes its columns of
 * every expert, so each needs every row its experts get, and the outputs are
 * partial sums over tp. Sending every row from every tp rank would repeat
 * the all-to-all tp times; instead tp rank q sends its share of each (rank,
 * expert) block of rows (share_lo) to the ep ranks of its own tp rank, and
 * the tp group completes the rest inside the node: the experts' input rows
 * (and their output gradient) arrive as this rank's shares placed among
 * zeros and are summed over tp (an all-gather of uneven parts, as a sum);
 * the experts' partial outputs (and their input gradient) are summed over
 * tp before this rank's share of them travels back (an all-gather and a
 * reduce-scatter of equal slots: tp_gather_shares, tp_scatter_shares). The token side then
 * holds the experts' outputs of its share of the choices, zeros elsewhere:
 * the combined output, the weights' and the input's gradients are partial
 * sums over tp, which the model sums with its shared experts' (moe.c). */

/* The token side's rows of this rank's shares, in send order (rank j by rank
 * j, each expert by expert): list[s] = its row in the permuted order (full 0),
 * or (full 1) for every permuted row the share row holding it, `zero` where
 * another tp rank's share holds it. Uploaded to d->perm; returns the rows. */
static int tok_list(ep_disp *d, const model_moe_route *r, int full, int zero)
{
    int n = 0, at = 0;
    for (int g = 0; g < r->E; g++) { /* the permuted order is expert by expert: rank j's El in a run */
        int c = r->counts[g], lo = share_lo(d, c), len = share_len(d, c);
        for (int k = 0; k < c; k++, at++) {
            int mine = k >= lo && k < lo + len;
            if (!full && mine) d->perm_host[n++] = at;
            else if (full) d->perm_host[at] = mine ? n++ : zero;
        }
    }
    int rows = full ? at : n;
    d->ops->from_host(d->perm, d->perm_host, (size_t)rows * sizeof(int));
    return rows;
}

/* Row `row` of buf (rows of C, elements of elem bytes) zeroed: the zero row
 * tok_list points the other shares at. */
static void zero_row(ep_disp *d, void *buf, int row, size_t elem)
{
    d->ops->zero((char *)buf + (size_t)row * (size_t)d->C * elem, (size_t)d->C * elem);
}

/* Rows [lo, lo + len) of a block of c that tp rank q's share is. */
static int part_lo(const ep_disp *d, int c, int q) { return (int)((long long)c * q / d->tp); }

/* The experts' side under tp: this rank's shares arrive rank i by rank i,
 * each expert by expert (d->off: where each (i, e) share starts); the tp
 * group exchanges them in slots of S rows, one per tp rank, each holding
 * its shares in the experts' order (expert e's, each rank i's), every block
 * padded to ceil(c / tp) rows so that the slots are equal (an all-gather,
 * a reduce-scatter). Returns S. */
static int slot_rows(ep_disp *d, const model_moe_route *r, int *arrived)
{
    const int *from = r->counts_l + r->El;
    int n = 0, S = 0, B = d->size * d->El;
    for (int b = 0; b < B; b++) d->off[b] = n, n += share_len(d, from[b]);
    for (int b = 0; b < B; b++) S += (from[b] + d->tp - 1) / d->tp;
    *arrived = n;
    return S;
}

static void tp_collective_of(ep_disp *d, int gather, void *buf, size_t n, size_t elem, const char *what)
{
    strat_ctx *x = d->x;
    if (x->failed) return;
    double t0 = clock_now_s();
    size_t at = (size_t)d->tq * (n / (size_t)d->tp) * elem;
    int rc = gather ? comm_all_gather(x->tp, (char *)buf + at, buf, n, strat_dtype(elem))
                    : comm_reduce_scatter(x->tp, buf, (char *)buf + at, n, strat_dtype(elem), COMM_SUM);
    strat_comm_done(x, t0, what);
    strat_fail(x, x->tp, rc, what);
}

/* out [Ml] (the experts' order) = every tp rank's shares, from this rank's
 * src (arrival order): its slot, all-gathered over tp, then each row from the
 * slot of the rank whose share holds it. */
static void tp_gather_shares(ep_disp *d, const model_moe_route *r, void *out, const void *src, dt_dtype t,
                             const char *what)
{
    const int *from = r->counts_l + r->El;
    int arrived, S = slot_rows(d, r, &arrived), El = d->El, C = d->C, s = 0, at = 0;
    size_t elem = dt_dtype_size(t);
    void *slot = (char *)d->tpbuf + (size_t)d->tq * (size_t)S * (size_t)C * elem;
    for (int e = 0; e < El; e++)
        for (int i = 0; i < d->size; i++) {
            int c = from[i * El + e], len = share_len(d, c), pad = (c + d->tp - 1) / d->tp;
            for (int j = 0; j < pad; j++, s++) d->perm_host[s] = j < len ? d->off[i * El + e] + j : 0;
        }
    d->ops->from_host(d->perm, d->perm_host, (size_t)S * sizeof(int));
    d->ops->moe_permute(slot, src, d->perm, S, C, t);
    tp_collective_of(d, 1, d->tpbuf, (size_t)d->tp * (size_t)S * (size_t)C, elem, what);
    int so = 0; /* the block's place in a slot */
    for (int e = 0; e < El; e++)
        for (int i = 0; i < d->size; i++) {
            int c = from[i * El + e], pad = (c + d->tp - 1) / d->tp;
            for (int k = 0, q = 0; k < c; k++, at++) {
                while (k >= part_lo(d, c, q + 1)) q++;
                d->perm_host[at] = q * S + so + k - part_lo(d, c, q);
            }
            so += pad;
        }
    d->ops->from_host(d->perm, d->perm_host, (size_t)at * sizeof(int));
    d->ops->moe_permute(out, d->tpbuf, d->perm, at, C, t);
}

/* out (this rank's shares, arrival order) = the sums over tp of src [Ml]
 * (the experts' order, partial): every slot filled from src (the padding
 * with any row: never read), reduce-scattered over tp, this rank's slot
 * read back. Returns the rows of out. */
static int tp_scatter_shares(ep_disp *d, const model_moe_route *r, void *out, const void *src, dt_dtype t,
                             const char *what)
{
    const int *from = r->counts_l + r->El;
    int arrived, S = slot_rows(d, r, &arrived), El = d->El, C = d->C, s = 0;
    size_t elem = dt_dtype_size(t);
    for (int q = 0; q < d->tp; q++)
        for (int e = 0, pos = 0; e < El; e++)
            for (int i = 0; i < d->size; i++) {
                int c = from[i * El + e], lo = part_lo(d, c, q), len = part_lo(d, c, q + 1) - lo;
                for (int j = 0; j < (c + d->tp - 1) / d->tp; j++, s++) d->perm_host[s] = j < len ? pos + lo + j : 0;
                pos += c;
            }
    d->ops->from_host(d->perm, d->perm_host, (size_t)s * sizeof(int));
    d->ops->moe_permute(d->tpbuf, src, d->perm, s, C, t);
    tp_collective_of(d, 0, d->tpbuf, (size_t)s * (size_t)C, elem, what);
    int so = 0;
    for (int e = 0; e < El; e++)
        for (int i = 0; i < d->size; i++) {
            int c = from[i * El + e];
            for (int j = 0; j < share_len(d, c); j++) d->perm_host[d->off[i * El + e] + j] = d->tq * S + so + j;
            so += (c + d->tp - 1) / d->tp;
        }
    d->ops->from_host(d->perm, d->perm_host, (size_t)arrived * sizeof(int));
    d->ops->moe_permute(out, d->tpbuf, d->perm, arrived, C, t);
    return arrived;
}

/* Under mixed precision the tp group's collectives carry bf16, gradients
 * included (tp.h): the second half of the slots' buffer, where the
 * gradients' rows wait in bf16 around their exchange (NULL in fp32). */
static uint16_t *grad_half(const ep_disp *d)
{
    if (d->x->pe != 2) return NULL;
    return (uint16_t *)((char *)d->tpbuf + d->tp_rows * (size_t)d->C * sizeof(uint16_t));
}

/* One all-to-allv of the rows over the ep group, started (d->req; the
 * call that finishes the exchange waits for it): timed and checked. */
static void exchange_start(ep_disp *d, const void *send, void *recv, size_t elem, const char *what)
{
    strat_ctx *x = d->x;
    d->pending = what;
    if (x->failed) return; /* the step is lost: nothing more on a broken group */
    double t0 = clock_now_s();
    int rc = comm_all_to_allv_async(d->ep, send, d->send, recv, d->recv, strat_dtype(elem), &d->req);
    strat_comm_done(x, t0, what);
    strat_fail(x, d->ep, rc, what);
}

/* Waits for the exchange `what` started; 0 when none was (the caller starts
 * it first: a dispatcher call without its start). */
static int exchange_finish(ep_disp *d, const char *what)
{
    if (d->pending != what) return 0;
    strat_wait(d->x, d->ep, d->req, what);
    d->req = NULL;
    d->pending = NULL;
    return 1;
}

static const char *const DISPATCH = "ep all_to_allv dispatch", *const COMBINE = "ep all_to_allv combine",
                  *const COMBINE_BWD = "ep all_to_allv combine backward",
                  *const DISPATCH_BWD = "ep all_to_allv dispatch backward";

/* The staging for exp_rows experts' rows (sizes_ep_stage_numel_at), the
 * old freed (nothing in it outlives a dispatcher call: no exchange is in
 * flight when a dispatch starts); the order sizes.c counts the parts in. */
static int stage_alloc(ep_disp *d, size_t exp_rows)
{
    strat_ctx *x = d->x;
    size_t tp_rows = sizes_ep_stage_tp_at(x->sz, exp_rows), bytes = sizes_ep_stage_numel_at(x->sz, exp_rows) * 4;
    int *host = realloc(d->perm_host, (exp_rows + tp_rows + 1) * sizeof(int));
    if (!host) return -1;
    d->perm_host = host;
    if (d->mem) {
        x->ops->free(d->mem);
        acct_add(x->acct, ACCT_BUFFERS, -(long long)d->mem_bytes);
    }
    if (!(d->mem = x->ops->alloc(bytes))) return -1;
    d->mem_bytes = bytes;
    acct_add(x->acct, ACCT_BUFFERS, (long long)bytes);
    d->exp_rows = exp_rows, d->tp_rows = tp_rows;
    d->tok = d->mem; /* each with a row more: tp's zero row */
    d->exp = d->tok + (d->tok_rows + 1) * (size_t)d->C;
    d->tpbuf = d->exp + (d->exp_rows + 1) * (size_t)d->C;
    d->perm = (int *)((float *)d->tpbuf + tp_rows * (size_t)d->C);
    return 0;
}

/* Room for M token rows (at most the micro-batch's choices, which tok is
 * sized for) and Ml experts' rows: the experts' side grows to what arrives
 * (under tp it also holds the M rows for a moment). */
static void ensure_room(ep_disp *d, size_t M, size_t Ml)
{
    size_t want = d->tp > 1 && M > Ml ? M : Ml;
    if (M <= d->tok_rows && want <= d->exp_rows) return;
    if (M <= d->tok_rows && stage_alloc(d, want) == 0) return;
    fprintf(stderr, "dtrun: ep: no room for %zu token rows (staging %zu) and %zu expert rows: out of memory\n", M,
            d->tok_rows, want);
    abort();
}

/* dispatch's first half: the counts (rank j gets this rank's counts of its
 * El experts), this rank's kept rows in expert order, their exchange started */
static void ep_dispatch_start(void *ctx, const void *xin, const model_moe_route *r, int C, dt_dtype t)
{
    ep_disp *d = ctx;
    strat_ctx *x = d->x;
    int M = 0, E = r->E, El = r->El;
    for (int e = 0; e < E; e++) M += r->counts[e];
    int *from = r->counts_l + El;
    if (!x->failed) {
        double t0 = clock_now_s();
        int rc = comm_all_to_all(d->ep, r->counts, from, (size_t)El, COMM_F32); /* ints: only sized */
        strat_comm_done(x, t0, "ep all_to_all of counts");
        if (strat_fail(x, d->ep, rc, "ep all_to_all of counts") != COMM_OK) memset(from, 0, (size_t)E * sizeof(int));
    } else {
        memset(from, 0, (size_t)E * sizeof(int));
    }
    int Ml = 0;
    for (int e = 0; e < El; e++) {
        r->counts_l[e] = 0;
        for (int i = 0; i < d->size; i++) r->counts_l[e] += from[i * El + e];
        Ml += r->counts_l[e];
    }
    ensure_room(d, (size_t)M, (size_t)Ml);
    if (d->tp > 1) { /* this rank's shares (the exp buffer holds every row meanwhile) */
        d->ops->moe_permute(d->exp, xin, r->src, M, C, t);
        int n = tok_list(d, r, 0, 0);
        d->ops->moe_permute(d->tok, d->exp, d->perm, n, C, t);
    } else {
        d->ops->moe_permute(d->tok, xin, r->src, M, C, t);
    }
    counts_of(d, r, 0);
    exchange_start(d, d->tok, d->exp, dt_dtype_size(t), DISPATCH);
}

static int ep_dispatch(void *ctx, void *xe, const void *xin, const model_moe_route *r, int C, dt_dtype t)
{
    ep_disp *d = ctx;
    if (!exchange_finish(d, DISPATCH)) {
        ep_dispatch_start(ctx, xin, r, C, t);
        exchange_finish(d, DISPATCH);
    }
    if (d->tp > 1) { /* every tp rank's shares */
        int Ml = 0;
        for (int e = 0; e < r->El; e++) Ml += r->counts_l[e];
        tp_gather_shares(d, r, xe, d->exp, t, "ep tp all_gather of the experts' rows");
        return Ml;
    }
    int Ml = reorder(d, r, 1);
    d->ops->moe_permute(xe, d->exp, d->perm, Ml, C, t);
    return Ml;
}

static void ep_combine_start(void *ctx, void *yt, const void *ye, const model_moe_route *r, int C, dt_dtype t)
{
    ep_disp *d = ctx;
    if (d->tp > 1) { /* this rank's shares of the partial outputs' sums over tp */
        tp_scatter_shares(d, r, d->exp, ye, t, "ep tp reduce_scatter of the experts' outputs");
        counts_of(d, r, 1);
        exchange_start(d, d->exp, d->tok, dt_dtype_size(t), COMBINE);
        return;
    }
    int Ml = reorder(d, r, 0);
    d->ops->moe_permute(d->exp, ye, d->perm, Ml, C, t);
    counts_of(d, r, 1);
    exchange_start(d, d->exp, yt, dt_dtype_size(t), COMBINE);
}

/* The token side's rows of this rank's shares, arrived in buf, into all M
 * rows of out (zeros where the other tp ranks' shares are). */
static void tok_unshare(ep_disp *d, const model_moe_route *r, void *out, void *buf, dt_dtype t)
{
    int n = tok_list(d, r, 0, 0);
    zero_row(d, buf, n, dt_dtype_size(t));
    int M = tok_list(d, r, 1, n);
    d->ops->moe_permute(out, buf, d->perm, M, d->C, t);
}

static void ep_combine(void *ctx, float *out, void *yt, const void *ye, const float *w, const model_moe_route *r,
                       int C, dt_dtype t, int accumulate)
{
    ep_disp *d = ctx;
    if (!exchange_finish(d, COMBINE)) {
        ep_combine_start(ctx, yt, ye, r, C, t);
        exchange_finish(d, COMBINE);
    }
    if (d->tp > 1) tok_unshare(d, r, yt, d->tok, t);
    if (out) d->ops->moe_unpermute(out, yt, r->dst, w, r->N, r->k, C, t, accumulate);
}

static void ep_combine_backward_start(void *ctx, float *dw, const float *dout, const void *yt, const float *w,
                                      const model_moe_route *r, int C, dt_dtype t)
{
    ep_disp *d = ctx;
    int M = 0;
    for (int e = 0; e < r->E; e++) M += r->counts[e];
    /* (tp > 1: every choice's row into exp, this rank's shares of them into tok) */
    float *all = d->tp > 1 ? d->exp : d->tok;
    d->ops->zero(all, (size_t)M * (size_t)C * sizeof(float));
    d->ops->moe_unpermute_backward(all, dw, dout, yt, r->dst, w, r->N, r->k, C, t);
    counts_of(d, r, 0);
    if (d->tp > 1) d->ops->moe_permute(d->tok, all, d->perm, tok_list(d, r, 0, 0), C, DT_F32);
    exchange_start(d, d->tok, d->exp, sizeof(float), COMBINE_BWD);
}

static void ep_combine_backward(void *ctx, float *dye, float *dw, const float *dout, const void *yt, const float *w,
                                const model_moe_route *r, int C, dt_dtype t)
{
    ep_disp *d = ctx;
    if (!exchange_finish(d, COMBINE_BWD)) {
        ep_combine_backward_start(ctx, dw, dout, yt, w, r, C, t);
        exchange_finish(d, COMBINE_BWD);
    }
    if (d->tp > 1) { /* every tp rank's shares */
        uint16_t *half = grad_half(d);
        const char *what = "ep tp all_gather of the experts' output gradient";
        if (!half) {
            tp_gather_shares(d, r, dye, d->exp, DT_F32, what);
            return;
        }
        int arrived, Ml = 0;
        for (int e = 0; e < r->El; e++) Ml += r->counts_l[e];
        slot_rows(d, r, &arrived);
        d->ops->to_bf16(half, d->exp, (size_t)arrived * (size_t)C);
        tp_gather_shares(d, r, d->exp, half, DT_BF16, what);
        d->ops->from_bf16(dye, (const uint16_t *)d->exp, (size_t)Ml * (size_t)C);
        return;
    }
    int Ml = reorder(d, r, 1);
    d->ops->moe_permute(dye, d->exp, d->perm, Ml, C, DT_F32);
}

static void ep_dispatch_backward_start(void *ctx, float *dxe, const model_moe_route *r, int C)
{
    ep_disp *d = ctx;
    if (d->tp > 1) { /* this rank's shares of the partial input gradient's sums over tp */
        uint16_t *half = grad_half(d);
        const char *what = "ep tp reduce_scatter of the experts' input gradient";
        if (half) {
            int Ml = 0;
            for (int e = 0; e < r->El; e++) Ml += r->counts_l[e];
            d->ops->to_bf16((uint16_t *)d->exp, dxe, (size_t)Ml * (size_t)C);
            int n = tp_scatter_shares(d, r, half, d->exp, DT_BF16, what);
            d->ops->from_bf16(d->exp, half, (size_t)n * (size_t)C);
        } else {
            tp_scatter_shares(d, r, d->exp, dxe, DT_F32, what);
        }
        counts_of(d, r, 1);
        exchange_start(d, d->exp, d->tok, sizeof(float), DISPATCH_BWD);
        return;
    }
    int Ml = reorder(d, r, 0);
    d->ops->moe_permute(d->exp, dxe, d->perm, Ml, C, DT_F32);
    counts_of(d, r, 1);
    exchange_start(d, d->exp, d->tok, sizeof(float), DISPATCH_BWD);
}

static void ep_dispatch_backward(void *ctx, float *dx, float *dxe, const model_moe_route *r, int C)
{
    ep_disp *d = ctx;
    if (!exchange_finish(d, DISPATCH_BWD)) {
        ep_dispatch_backward_start(ctx, dxe, r, C);
        exchange_finish(d, DISPATCH_BWD);
    }
    if (d->tp > 1) { /* this rank's shares of the choices' gradients, zeros elsewhere */
        tok_unshare(d, r, d->exp, d->tok, DT_F32);
        d->ops->moe_permute_backward(dx, d->exp, r->dst, r->N, r->k, C);
        return;
    }
    d->ops->moe_permute_backward(dx, d->tok, r->dst, r->N, r->k, C);
}

/* Context parallelism: every cp rank's n floats, in cp rank order. */
static void cp_gather(void *ctx, float *all, const float *mine, size_t n)
{
    ep_disp *d = ctx;
    strat_ctx *x = d->x;
    int cp = comm_size(x->cp);
    if (x->failed) {
        memset(all, 0, n * (size_t)cp * sizeof(float));
        return;
    }
    double t0 = clock_now_s();
    int rc = comm_all_gather(x->cp, mine, all, n * (size_t)cp, COMM_F32);
    strat_comm_done(x, t0, "moe cp all_gather of counts");
    if (strat_fail(x, x->cp, rc, "moe cp all_gather of counts") != COMM_OK) memset(all, 0, n * (size_t)cp * sizeof(float));
}

int ep_apply(strat_ctx *x, model *const *chunks, int n_chunks)
{
    const job_spec *job = x->job;
    int ep = job->parallel.ep > 1 ? job->parallel.ep : 1, cp = job->parallel.cp;
    if (job->model.moe.experts < 1 || (ep == 1 && cp == 1)) return 0;
    ep_disp *d = calloc(1, sizeof *d);
    if (!d) return -1;
    x->epd = d;
    d->x = x;
    d->ops = x->ops;
    if (ep > 1) {
        d->ep = x->ep;
        d->size = ep;
        d->E = job->model.moe.experts;
        d->El = d->E / ep;
        d->C = job->model.d_model;
        d->tp = x->tp ? comm_size(x->tp) : 1;
        d->tq = x->tp ? comm_rank(x->tp) : 0;
        /* the token side for the micro-batch's choices; the experts' side
         * for what arrives, grown as it does (ensure_room): none yet, or
         * under tp the token side's rows it holds for a moment */
        size_t priced;
        sizes_ep_stage(x->sz, &d->tok_rows, &priced);
        d->send = calloc((size_t)ep, sizeof(size_t));
        d->recv = calloc((size_t)ep, sizeof(size_t));
        d->off = calloc((size_t)d->E, sizeof(int));
        if (!d->send || !d->recv || !d->off || stage_alloc(d, d->tp > 1 ? d->tok_rows : 0)) return -1;
    }
    for (int i = 0; i < n_chunks; i++) {
        model_moe_dispatcher disp;
        if (ep > 1)
            disp = (model_moe_dispatcher){.ctx = d, .moves_rows = 1, .dispatch = ep_dispatch, .combine = ep_combine,
                                          .combine_backward = ep_combine_backward,
                                          .dispatch_backward = ep_dispatch_backward,
                                          .dispatch_start = ep_dispatch_start, .combine_start = ep_combine_start,
                                          .combine_backward_start = ep_combine_backward_start,
                                          .dispatch_backward_start = ep_dispatch_backward_start};
        else
            model_local_moe_dispatcher(chunks[i], &disp);
        if (cp > 1) disp.cp_ctx = d, disp.cp_gather = cp_gather;
        model_set_moe_dispatcher(chunks[i], &disp);
    }
    return 0;
}

void ep_release(strat_ctx *x)
{
    ep_disp *d = x->epd;
    if (!d) return;
    comm_wait(d->req); /* an exchange a failed step left in flight */
    if (d->mem) {
        acct_add(x->acct, ACCT_BUFFERS, -(long long)d->mem_bytes);
        x->ops->free(d->mem);
    }
    free(d->perm_host);
    free(d->send);
    free(d->recv);
    free(d->off);
    free(d);
    x->epd = NULL;
}

size_t ep_staged_rows(const strat_ctx *x) { return x->epd && x->epd->mem ? x->epd->exp_rows : 0; }
