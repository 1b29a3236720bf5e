/* moe.c — the mixture-of-experts MLP of an MoE block (model.moe), forward
 * and backward, in Megatron-Core's three parts (transformer/moe/: router.py,
 * token_dispatcher.py, experts.py):
 *
 *   router      logits = x Wr^T in fp32 (also under bf16), scores = softmax
 *               (Mixtral) or sigmoid (DeepSeek-V3) of them, the top_k experts
 *               of each token by score + the routing bias, their weights (the
 *               scores, normalised over the k with norm_top_k);
 *               ops->moe_router_forward
 *   route       which choices each expert keeps (all: dropless; or each
 *               sample's first `capacity` by position) and the permuted
 *               order, expert by expert; ops->moe_route
 *   dispatch    the kept choices' rows to their experts (model.h
 *               model_moe_dispatcher: the local one gathers them; expert
 *               parallelism, runtime/parallel/ep.c, moves them between
 *               ranks, where this rank's El = E / ep experts compute every
 *               rank's rows for them)
 *   experts     one grouped GEMM over every expert's rows, the activation
 *               (GELU, or a Llama's SwiGLU over the packed gate|up), another
 *               grouped GEMM; ops->moe_grouped_forward
 *   combine     each token's experts' outputs times their weights, summed;
 *               plus the shared experts (a dense MLP every token passes
 *               through, weight 1)
 *
 * Tensor parallelism (Megatron-Core's expert tensor parallelism equal to
 * tp): every tp rank routes the same N rows (gathered first under sequence
 * parallelism, as a column layer's input: model_layers.rows_gather), its
 * experts and shared experts hold their columns (fc / gate_up rows, proj /
 * down columns: params.c) and compute through the plain local layers
 * (model.local), and the partial outputs are summed over tp once
 * (model_layers.partial_sum: an all-reduce, or a reduce-scatter into the
 * rank's rows); the backward mirrors it, and the routing weights' gradient
 * (dot products with the partial outputs) is summed over tp too. The
 * router, its statistics and the balance loss are every tp rank's alike.
 *
 * The balance loss (Switch, GShard; per sample, DeepSeek-V3's sequence-wise
 * form): aux = E sum_e f_e P_e over each sample's T tokens, f_e its choices
 * of e over T k (before any drop: no gradient), P_e the mean over its tokens
 * of e's balance probability q (the softmax, or the sigmoid scores over
 * their sum). Its gradient seeds the router's backward: d aux / d q_te = E
 * f_e / T, times the backward's scale of a sample's aux (model.c:
 * aux_loss_coef * loss_scale * T, the mean over the global batch).
 *
 * What the backward reads is kept by the forward (block_acts): the scores,
 * choices, weights and route, the permuted input, the experts' hidden
 * activations and outputs (the weights' gradient dots the output gradient
 * with them). The token counts per expert are read back to the host after
 * the route: the host launches one GEMM per expert (train.cuda_graphs cannot
 * record that, and the job spec refuses it).
 *
 * Memory that follows the routing (Megatron-Core allocates what arrives):
 * the experts' rows (their input, first GEMM, activation) are allocated once
 * the dispatcher knows how many arrive (ep.c: after the exchange of counts),
 * exactly that many, kept until the block's backward, which frees them; the
 * backward's gradients of them and (expert parallelism) the outputs before
 * they travel back likewise, for as long as the call runs. Nothing is sized
 * for the worst a dropless router may bring (every token of every ep rank to
 * this rank's experts: sizes_moe_worst_rows, 4x the even load for Mixtral 8x22B at
 * ep 8); the dry-run prices the even load plus a margin, or the capacity
 * (sizes.c sizes_moe_priced_rows), from the same byte counts
 * (moe_rows_kept_bytes, model_moe_rows_sizes). */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>

moe_bufs moe_bufs_of(const block_acts *a, const block_scratch *s)
{
    moe_bufs b = {.scores = a->moe_scores, .w = a->moe_w, .idx = a->moe_idx, .dst = a->moe_dst, .src = a->moe_src,
                  .counts_dev = s->moe_counts, .chosen_dev = s->moe_chosen, .before_dev = s->moe_before,
                  .psum = s->moe_aux, .counts = a->moe_counts, .chosen = a->moe_chosen, .host = s->moe_host,
                  .y = a->moe_y, .sh_h = a->fch, .sh_g = a->fchg, .full = s->full, .held = a->moe_rows};
    return b;
}

void moe_release(model *m, moe_held *held)
{
    if (!held->mem) return;
    m->ops->free_ordered(held->mem);
    if (m->mem_observer) m->mem_observer(m->mem_ctx, -(long long)held->bytes);
    held->mem = NULL;
    held->bytes = 0;
}

void moe_hold(model *m, moe_held *held, size_t bytes)
{
    moe_release(m, held);
    if (bytes < 64) bytes = 64; /* no rows arrived: still a pointer the ops may be given */
    if (!(held->mem = m->ops->alloc_ordered(bytes))) {
        fprintf(stderr, "dtrun: model: out of memory for %zu bytes of an MoE block's expert rows\n", bytes);
        abort();
    }
    held->bytes = bytes;
    if (m->mem_observer) m->mem_observer(m->mem_ctx, (long long)bytes);
}

/* b's xe, h, g in its held memory for Ml rows (moe_rows_kept_bytes' pieces). */
static void place_rows(const model *m, moe_bufs *b, int Ml)
{
    const model_dims *d = &m->d;
    size_t e = dt_dtype_size(m->act), rows = (size_t)Ml;
    b->xe = b->held->mem;
    b->h = (char *)b->xe + acts_align(rows * (size_t)d->C * e);
    b->g = (char *)b->h + acts_align(rows * (size_t)d->He * e);
}

/* The rows that arrive at this rank's experts, once the dispatcher knows
 * them: its counts (ep.c, after the exchange of counts), or the route's. */
static int arrived_rows(const model *m, const moe_bufs *b)
{
    int Ml = 0;
    if (m->moe_disp.moves_rows)
        for (int e = 0; e < m->d.El; e++) Ml += b->counts[m->d.E + e];
    else
        for (int e = 0; e < m->d.E; e++) Ml += b->counts[e];
    return Ml;
}

static model_moe_route route_of(const model *m, const moe_bufs *b, int N)
{
    return (model_moe_route){.N = N, .k = m->d.k, .E = m->d.E, .El = m->d.El, .dst = b->dst, .src = b->src,
                             .counts = b->counts, .counts_l = b->counts + m->d.E};
}

/* The rows this rank's experts compute (the dispatcher's counts). */
static int local_rows(const model *m, const moe_bufs *b)
{
    int M = 0;
    for (int e = 0; e < m->d.El; e++) M += b->counts[m->d.E + e];
    return M;
}

/* The experts' activation of h [M, He] into g [M, Fe]: the model's GELU, or
 * a Llama's SwiGLU of the packed gate|up. */
static void experts_act(model *m, void *g, const void *h, int M)
{
    const model_dims *d = &m->d;
    if (m->spec.kind == MODEL_LLAMA) m->ops->swiglu_forward(g, h, M, d->Fe, m->act);
    else model_gelu_forward(m, g, h, (size_t)M * (size_t)d->Fe);
}

static void experts_act_backward(model *m, float *dh, const void *h, const float *dg, int M)
{
    const model_dims *d = &m->d;
    m->ops->zero(dh, (size_t)M * (size_t)d->He * sizeof(float));
    if (m->spec.kind == MODEL_LLAMA) m->ops->swiglu_backward(dh, h, dg, M, d->Fe, m->act);
    else model_gelu_backward(m, dh, h, dg, (size_t)M * (size_t)d->Fe);
}

/* Context parallelism: a sample's tokens sit on every rank of the cp group,
 * this rank's as two chunks of T / 2 rows (model_cp_chunk). The capacity
 * keeps a sample's first choices of an expert by position and the balance
 * loss counts all of its tokens, so both need the other ranks' counts: the
 * dispatcher's cp_gather brings them (the model itself never communicates). */
static int cp_routed(const model *m) { return m->d.cp_size > 1 && m->moe_disp.cp_gather; }

/* The route of the micro-batch's G samples of T rows into b (dst, src,
 * counts_dev, chosen_dev; under context parallelism per chunk, 2 G groups
 * of T / 2). Capacity under cp: each chunk starts with the choices of the
 * sample's chunks before it (by position) on every rank, gathered first. */
static void route(model *m, const moe_bufs *b, int N, int T, int cap)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    int E = d->E, k = d->k;
    if (!cp_routed(m)) {
        ops->moe_route(b->dst, b->src, b->counts_dev, b->chosen_dev, b->idx, NULL, N, E, k, cap, T, 0);
        return;
    }
    int Tc = T / 2, G2 = 2 * (N / T), cp = d->cp_size;
    const int *before = NULL;
    if (cap > 0) {
        size_t n = (size_t)G2 * (size_t)E;
        ops->moe_route(b->dst, b->src, b->counts_dev, b->chosen_dev, b->idx, NULL, N, E, k, 0, Tc, 0);
        ops->to_host(b->chosen, b->chosen_dev, n * sizeof(int));
        float *mine = moe_cp_scratch(m, n * (size_t)(cp + 1)), *all = mine + n;
        for (size_t i = 0; i < n; i++) mine[i] = (float)b->chosen[i]; /* exact below 2^24 */
        m->moe_disp.cp_gather(m->moe_disp.cp_ctx, all, mine, n);
        /* before[g, half, e]: the sample's choices of e in the chunks before
         * this one; chunk c is cp rank c's first half (c < cp), else cp rank
         * 2 cp - 1 - c's second */
        for (int g = 0; g < G2 / 2; g++)
            for (int half = 0; half < 2; half++) {
                int c = model_cp_chunk(d->cp_rank, cp, half);
                for (int e = 0; e < E; e++) {
                    int sum = 0;
                    for (int c2 = 0; c2 < c; c2++) {
                        int r = c2 < cp ? c2 : 2 * cp - 1 - c2, h = c2 < cp ? 0 : 1;
                        sum += (int)all[(size_t)r * n + ((size_t)(2 * g + h) * (size_t)E + (size_t)e)];
                    }
                    b->chosen[(size_t)(2 * g + half) * (size_t)E + (size_t)e] = sum;
                }
            }
        ops->from_host(b->before_dev, b->chosen, n * sizeof(int));
        before = b->before_dev;
    }
    ops->moe_route(b->dst, b->src, b->counts_dev, b->chosen_dev, b->idx, before, N, E, k, cap, Tc, 0);
}

/* Each of the G samples' choices per expert (before any drop) into
 * b->chosen [G, E] (host), from the route's per group ones: whole samples,
 * or under context parallelism both of this rank's chunks, then the sums of
 * every cp rank's (what the balance loss and its gradient count); *local_out
 * gets this rank's own [G2, E] first (the load statistics: every rank counts
 * its own tokens), local_n its groups. With psum (the router's [G, E] sums of
 * q, host) the same sums over the cp ranks replace it. */
static void sample_counts(model *m, const moe_bufs *b, int G, float *psum_host, int **local_out, int *local_n)
{
    const model_dims *d = &m->d;
    int E = d->E, cp = d->cp_size;
    size_t n = (size_t)G * (size_t)E;
    if (!cp_routed(m)) {
        m->ops->to_host(b->chosen, b->chosen_dev, n * sizeof(int));
        *local_out = b->chosen;
        *local_n = G;
        return;
    }
    size_t n2 = 2 * n;
    /* this rank's per chunk counts (kept for the statistics), then the
     * samples' over every cp rank (for the loss and its gradient) */
    float *mine = moe_cp_scratch(m, n2 * (size_t)(cp + 1) + n2), *all = mine + n2;
    int *local = (int *)(all + n2 * (size_t)cp);
    m->ops->to_host(local, b->chosen_dev, n2 * sizeof(int));
    for (size_t i = 0; i < n; i++) {
        size_t g = i / (size_t)E, e = i % (size_t)E;
        mine[i] = (float)(local[2 * g * (size_t)E + e] + local[(2 * g + 1) * (size_t)E + e]);
        mine[n + i] = psum_host ? psum_host[i] : 0.0f;
    }
    m->moe_disp.cp_gather(m->moe_disp.cp_ctx, all, mine, n2);
    for (size_t i = 0; i < n; i++) {
        double c = 0, q = 0;
        for (int r = 0; r < cp; r++) c += all[(size_t)r * n2 + i], q += all[(size_t)r * n2 + n + i];
        b->chosen[i] = (int)c;
        if (psum_host) psum_host[i] = (float)q;
    }
    *local_out = local;
    *local_n = 2 * G;
}

/* The balance loss of the micro-batch's G samples of Tf tokens each (host,
 * from their choices and the router's sums of q, both whole samples'). */
static double balance_loss(const model *m, const int *chosen, const float *psum_host, int G, int Tf)
{
    const model_dims *d = &m->d;
    double sum = 0, scale = (double)d->E / ((double)Tf * (double)Tf * (double)d->k);
    for (size_t i = 0; i < (size_t)G * (size_t)d->E; i++) sum += (double)chosen[i] * (double)psum_host[i];
    return sum * scale;
}

void moe_forward(model *m, int unit, const block_params *bp, const moe_bufs *bin, const void *x_rows, float *branch,
                 int N, int T, int count)
{
    moe_bufs buf = *bin, *b = &buf;
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers, *LL = &m->local;
    const model_dims *d = &m->d;
    const job_moe *cfg = &m->spec.moe;
    const model_moe_dispatcher *disp = &m->moe_disp;
    dt_dtype t = m->act;
    int C = d->C, E = d->E, El = d->El, k = d->k, G = N / T, slot = moe_slot_of(m, unit);
    int sigmoid = cfg->router == ROUTER_SIGMOID, Tf = T * (cp_routed(m) ? d->cp_size : 1);
    size_t NC = (size_t)N * (size_t)C;

    /* every tp rank routes the same N rows: under sequence parallelism
     * gathered first, as a column layer's input (into full, until the
     * experts' partial sums need it) */
    const void *x = L->rows_gather(L->ctx, x_rows, b->full, NC, t);

    /* router: fp32 logits (the GEMM accumulates in fp32 and stores fp32),
     * turned into scores in place */
    ops->matmul_forward(b->scores, x, bp->w[BR_ROUTER_W], NULL, N, C, E, t, DT_F32);
    ops->moe_router_forward(b->scores, b->idx, b->w, b->psum, b->scores, moe_bias_of(m, slot), N, E, k, sigmoid,
                            cfg->norm_top_k, T, 0);
    route(m, b, N, T, job_moe_capacity(cfg, Tf));
    ops->to_host(b->counts, b->counts_dev, (size_t)E * sizeof(int));
    int *local = NULL, n_local = 0;
    if (b->psum) ops->to_host(b->host, b->psum, (size_t)G * (size_t)E * sizeof(float));
    sample_counts(m, b, G, b->psum ? b->host : NULL, &local, &n_local);
    model_moe_route r = route_of(m, b, N);

    /* dispatch (the shared experts' first layer while the rows travel),
     * then the experts on their rows: this tp rank's columns of each (the
     * local layers: the sums over tp come once, below) */
    if (disp->dispatch_start) disp->dispatch_start(disp->ctx, x, &r, C, t);
    /* the experts' rows, as many as arrive (the outputs before they travel
     * back only for this call) */
    moe_held out = {0};
    if (b->held) {
        int arrived = arrived_rows(m, b);
        moe_hold(m, b->held, moe_rows_kept_bytes(d, dt_dtype_size(t), (size_t)arrived));
        place_rows(m, b, arrived);
        if (disp->moves_rows) {
            moe_hold(m, &out, moe_rows_out_bytes(d, dt_dtype_size(t), (size_t)arrived));
            b->ye = out.mem;
        }
        if (arrived > m->moe_rows_max) m->moe_rows_max = arrived;
        if (m->moe_rows_min < 0 || arrived < m->moe_rows_min) m->moe_rows_min = arrived;
    }
    if (d->Fs > 0) block_mlp_in(m, LL, b->sh_h, b->sh_g, x, NULL, bp->w[BR_SH_FC_W], NULL, N, d->Hs, d->Fs, NULL);
    int Ml = disp->dispatch(disp->ctx, b->xe, x, &r, C, t);
    void *ye = disp->moves_rows ? b->ye : b->y;
    ops->moe_grouped_forward(b->h, b->xe, bp->w[BR_EXP_FC_W], r.counts_l, El, C, d->He, t, t);
    experts_act(m, b->g, b->h, Ml);
    ops->moe_grouped_forward(ye, b->g, bp->w[BR_EXP_PROJ_W], r.counts_l, El, d->Fe, C, t, t);
    if (count && b->psum) {
        int M = 0;
        for (int e = 0; e < E; e++) M += b->counts[e];
        /* a sample's balance loss once: on cp rank 0 of its ranks */
        double aux = d->cp_rank == 0 ? balance_loss(m, b->chosen, b->host, G, Tf) : 0.0;
        moe_stats_add(m, slot, local, n_local, M, aux);
    }
    /* combine: the shared experts' output (while the experts' travel back),
     * then every token's experts' (without a branch only the output rows the
     * backward reads), all into the [N, C] partial of this tp rank's columns
     * (full under sequence parallelism: x is used up), summed over tp into
     * the branch's rows as a row-parallel layer's output */
    float *part = branch && d->sp_size > 1 ? (float *)b->full : branch;
    if (disp->combine_start) disp->combine_start(disp->ctx, b->y, ye, &r, C, t);
    if (part && d->Fs > 0) LL->row_forward(LL->ctx, part, NULL, b->sh_g, bp->w[BR_SH_PROJ_W], NULL, N, d->Fs, C, t,
                                            NULL);
    disp->combine(disp->ctx, part, b->y, ye, b->w, &r, C, t, d->Fs > 0);
    if (branch) L->partial_sum(L->ctx, branch, part, NC);
    moe_release(m, &out);
    /* block recompute: nothing keeps this forward's rows (the backward
     * computes the block again, and holds them then) */
    if (b->held && branch && m->recompute == RECOMPUTE_BLOCK) moe_release(m, b->held);
}

const float *moe_backward(model *m, int unit, const block_params *bp, const moe_bufs *bin, const block_scratch *s,
                          const void *x_rows, const float *dbranch, float *dx, int N, int T)
{
    moe_bufs buf = *bin, *b = &buf;
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers, *LL = &m->local;
    const model_dims *d = &m->d;
    const job_moe *cfg = &m->spec.moe;
    const model_moe_dispatcher *disp = &m->moe_disp;
    dt_dtype t = m->act;
    int C = d->C, E = d->E, El = d->El, k = d->k, G = N / T, Tf = T * (cp_routed(m) ? d->cp_size : 1);
    int Nl = N / d->sp_size;
    size_t NC = (size_t)N * (size_t)C, first = (size_t)Nl * (size_t)d->sp_rank;
    model_moe_route r = route_of(m, b, N);
    int Ml = local_rows(m, b);
    /* the rows the forward kept, and their gradients (this call's) */
    place_rows(m, b, Ml);
    moe_held grads = {0};
    moe_hold(m, &grads, moe_rows_grad_bytes(d, (size_t)Ml));
    float *dy = grads.mem, *dg = (float *)((char *)dy + acts_align((size_t)Ml * (size_t)C * sizeof(float)));
    float *dh = (float *)((char *)dg + acts_align((size_t)Ml * (size_t)d->Fe * sizeof(float)));

    /* the output gradient of every row (gathered under sequence
     * parallelism, as a row layer's) */
    const float *dout = L->rows_gather(L->ctx, dbranch, b->full, NC, DT_F32);

    /* the shared experts' second layer (while the experts' output gradient
     * travels), on this tp rank's columns */
    ops->zero(s->moe_dw, (size_t)N * (size_t)k * sizeof(float));
    if (disp->combine_backward_start) disp->combine_backward_start(disp->ctx, s->moe_dw, dout, b->y, b->w, &r, C, t);
    if (d->Fs > 0)
        block_mlp_out_backward(m, LL, b->sh_h, b->sh_g, bp->w[BR_SH_PROJ_W], bp->g[BR_SH_PROJ_W], NULL, dout, NULL,
                               s->dB, s->dA, N, d->Hs, d->Fs, NULL);

    /* combine, the experts' second GEMM, their activation, their first GEMM
     * (its input gradient in moe_dy again: the output gradient is used up).
     * A weight's gradient dots the output gradient with the experts' whole
     * output, of which this tp rank holds its columns' part: summed over tp */
    disp->combine_backward(disp->ctx, dy, s->moe_dw, dout, b->y, b->w, &r, C, t);
    L->rows_grad_sum(L->ctx, s->moe_dw, (size_t)N * (size_t)k);
    ops->zero(dg, (size_t)Ml * (size_t)d->Fe * sizeof(float));
    ops->moe_grouped_backward(dg, bp->g[BR_EXP_PROJ_W], dy, b->g, bp->w[BR_EXP_PROJ_W], r.counts_l,
                              El, d->Fe, C, t);
    experts_act_backward(m, dh, b->h, dg, Ml);
    ops->zero(dy, (size_t)Ml * (size_t)C * sizeof(float));
    ops->moe_grouped_backward(dy, bp->g[BR_EXP_FC_W], dh, b->xe, bp->w[BR_EXP_FC_W], r.counts_l, El,
                              C, d->He, t);
    /* every input row again (full is free: dout is used up), before the
     * exchange starts: one collective at a time */
    const void *x = L->rows_gather(L->ctx, x_rows, b->full, NC, t);
    if (disp->dispatch_backward_start) disp->dispatch_backward_start(disp->ctx, dy, &r, C);

    /* the router (while the experts' input gradient travels back): through
     * the weights, and the balance loss's seed (from each whole sample's
     * choices: b->chosen, as the forward left it); then the shared experts'
     * first layer, whose input gradient starts dx */
    const float *daux = NULL;
    if (cfg->aux_loss_coef > 0 && m->moe_aux_scale != 0) {
        double scale = (double)m->moe_aux_scale * E / ((double)Tf * (double)Tf * (double)k);
        for (size_t i = 0; i < (size_t)G * (size_t)E; i++) b->host[i] = (float)(scale * (double)b->chosen[i]);
        ops->from_host(s->moe_aux, b->host, (size_t)G * (size_t)E * sizeof(float));
        daux = s->moe_aux;
    }
    ops->zero(s->moe_dlogits, (size_t)N * (size_t)E * sizeof(float));
    ops->moe_router_backward(s->moe_dlogits, b->scores, b->idx, b->w, s->moe_dw, daux, N, E, k,
                             cfg->router == ROUTER_SIGMOID, cfg->norm_top_k, T, 0);
    ops->matmul_backward(NULL, bp->g[BR_ROUTER_W], NULL, s->moe_dlogits, x, NULL, N, C, E, t);
    if (d->Fs > 0) LL->column_backward(LL->ctx, dx, bp->g[BR_SH_FC_W], NULL, s->dB, x, NULL, bp->w[BR_SH_FC_W], N, C,
                                       d->Hs, t, NULL);
    else ops->zero(dx, NC * sizeof(float));
    /* the experts' input gradient, this tp rank's columns' part like the
     * shared experts': summed over tp into this rank's rows; then the
     * router's, whole on every tp rank, for those rows */
    disp->dispatch_backward(disp->ctx, dx, dy, &r, C);
    float *mine = dx + first * (size_t)C;
    L->partial_sum(L->ctx, mine, dx, NC);
    ops->matmul_backward(mine, NULL, NULL, s->moe_dlogits + first * (size_t)E, NULL, bp->w[BR_ROUTER_W], Nl, C, E,
                         t);
    /* the backward is the last to read the rows */
    moe_release(m, &grads);
    moe_release(m, b->held);
    return mine;
}
