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
 *               parallelism will move them between ranks)
 *   experts     one grouped GEMM over every expert's rows, the activation
 *               (GELU, or a Llama's SwiGLU over the packed gate|up), another
 *               grouped GEMM; ops->moe_grouped_forward
 *   combine     each token's experts' outputs times their weights, summed;
 *               plus the shared experts (a dense MLP every token passes
 *               through, weight 1)
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
 * record that, and the job spec refuses it). */
#include "runtime/model/model_internal.h"

#include <stdlib.h>

moe_bufs moe_bufs_of(const block_acts *a, const block_scratch *s)
{
    moe_bufs b = {.scores = a->moe_scores, .w = a->moe_w, .idx = a->moe_idx, .dst = a->moe_dst, .src = a->moe_src,
                  .counts_dev = s->moe_counts, .chosen_dev = s->moe_chosen, .psum = s->moe_aux,
                  .counts = a->moe_counts, .chosen = a->moe_chosen, .host = s->moe_host, .xe = a->moe_x,
                  .h = a->moe_h, .g = a->moe_g, .y = a->moe_y, .sh_h = a->fch, .sh_g = a->fchg};
    return b;
}

static model_moe_route route_of(const model *m, const moe_bufs *b, int N)
{
    return (model_moe_route){.N = N, .k = m->d.k, .E = m->d.E, .dst = b->dst, .src = b->src, .counts = b->counts};
}

/* The rows this rank's experts compute (the dispatcher's counts). */
static int local_rows(const model *m, const moe_bufs *b)
{
    int M = 0;
    for (int e = 0; e < m->d.E; e++) M += b->counts[m->d.E + e];
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

/* The balance loss of the micro-batch's G samples (host, from the route's
 * per-sample choices and the router's sums of q), added to the statistics. */
static double balance_loss(const model *m, const moe_bufs *b, int G, int T)
{
    const model_dims *d = &m->d;
    m->ops->to_host(b->host, b->psum, (size_t)G * (size_t)d->E * sizeof(float));
    double sum = 0, scale = (double)d->E / ((double)T * (double)T * (double)d->k);
    for (size_t i = 0; i < (size_t)G * (size_t)d->E; i++) sum += (double)b->chosen[i] * (double)b->host[i];
    return sum * scale;
}

void moe_forward(model *m, int unit, const block_params *bp, const moe_bufs *b, const void *x, float *branch, int N,
                 int T, int count)
{
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    const job_moe *cfg = &m->spec.moe;
    dt_dtype t = m->act;
    int C = d->C, E = d->E, k = d->k, G = N / T, slot = moe_slot_of(m, unit);
    int sigmoid = cfg->router == ROUTER_SIGMOID;

    /* router: fp32 logits (the GEMM accumulates in fp32 and stores fp32),
     * turned into scores in place */
    ops->matmul_forward(b->scores, x, bp->w[BR_ROUTER_W], NULL, N, C, E, t, DT_F32);
    ops->moe_router_forward(b->scores, b->idx, b->w, b->psum, b->scores, moe_bias_of(m, slot), N, E, k, sigmoid,
                            cfg->norm_top_k, T, 0);
    ops->moe_route(b->dst, b->src, b->counts_dev, b->chosen_dev, b->idx, NULL, N, E, k, job_moe_capacity(cfg, T), T,
                   0);
    ops->to_host(b->counts, b->counts_dev, (size_t)E * sizeof(int));
    ops->to_host(b->chosen, b->chosen_dev, (size_t)G * (size_t)E * sizeof(int));
    model_moe_route r = route_of(m, b, N);

    /* dispatch, then the experts on their rows */
    int Ml = m->moe_disp.dispatch(m->moe_disp.ctx, b->xe, b->counts + E, x, &r, C, t);
    ops->moe_grouped_forward(b->h, b->xe, bp->w[BR_EXP_FC_W], b->counts + E, E, C, d->He, t, t);
    experts_act(m, b->g, b->h, Ml);
    ops->moe_grouped_forward(b->y, b->g, bp->w[BR_EXP_PROJ_W], b->counts + E, E, d->Fe, C, t, t);
    if (d->Fs > 0) block_mlp_in(m, b->sh_h, b->sh_g, x, NULL, bp->w[BR_SH_FC_W], NULL, N, d->Hs, d->Fs, NULL);
    if (count && b->psum) {
        int M = 0;
        for (int e = 0; e < E; e++) M += b->counts[e];
        moe_stats_add(m, slot, b->chosen, G, M, balance_loss(m, b, G, T));
    }
    if (!branch) return;

    /* combine: the shared experts' output, then every token's experts' */
    if (d->Fs > 0) L->row_forward(L->ctx, branch, NULL, b->sh_g, bp->w[BR_SH_PROJ_W], NULL, N, d->Fs, C, t, NULL);
    m->moe_disp.combine(m->moe_disp.ctx, branch, b->y, b->w, &r, C, t, d->Fs > 0);
}

void moe_backward(model *m, int unit, const block_params *bp, const moe_bufs *b, const block_scratch *s,
                  const void *x, const float *dbranch, float *dx, int N, int T)
{
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    const job_moe *cfg = &m->spec.moe;
    dt_dtype t = m->act;
    int C = d->C, E = d->E, k = d->k, G = N / T;
    model_moe_route r = route_of(m, b, N);
    int Ml = local_rows(m, b);

    /* the shared experts: a dense MLP's backward, whose first layer's input
     * gradient starts dx */
    if (d->Fs > 0) {
        block_mlp_out_backward(m, b->sh_h, b->sh_g, bp->w[BR_SH_PROJ_W], bp->g[BR_SH_PROJ_W], NULL, dbranch, NULL,
                               s->dB, s->dA, N, d->Hs, d->Fs, NULL);
        L->column_backward(L->ctx, dx, bp->g[BR_SH_FC_W], NULL, s->dB, x, NULL, bp->w[BR_SH_FC_W], N, C, d->Hs, t, NULL);
    } else {
        ops->zero(dx, (size_t)N * (size_t)C * sizeof(float));
    }

    /* combine, the experts' second GEMM, their activation, their first GEMM
     * (its input gradient in moe_dy again: the output gradient is used up) */
    ops->zero(s->moe_dw, (size_t)N * (size_t)k * sizeof(float));
    m->moe_disp.combine_backward(m->moe_disp.ctx, s->moe_dy, s->moe_dw, dbranch, b->y, b->w, &r, C, t);
    ops->zero(s->moe_dg, (size_t)Ml * (size_t)d->Fe * sizeof(float));
    ops->moe_grouped_backward(s->moe_dg, bp->g[BR_EXP_PROJ_W], s->moe_dy, b->g, bp->w[BR_EXP_PROJ_W], b->counts + E,
                              E, d->Fe, C, t);
    experts_act_backward(m, s->moe_dh, b->h, s->moe_dg, Ml);
    ops->zero(s->moe_dy, (size_t)Ml * (size_t)C * sizeof(float));
    ops->moe_grouped_backward(s->moe_dy, bp->g[BR_EXP_FC_W], s->moe_dh, b->xe, bp->w[BR_EXP_FC_W], b->counts + E, E,
                              C, d->He, t);
    m->moe_disp.dispatch_backward(m->moe_disp.ctx, dx, s->moe_dy, &r, C);

    /* the router: through the weights, and the balance loss's seed */
    const float *daux = NULL;
    if (cfg->aux_loss_coef > 0 && m->moe_aux_scale != 0) {
        double scale = (double)m->moe_aux_scale * E / ((double)T * (double)T * (double)k);
        for (size_t i = 0; i < (size_t)G * (size_t)E; i++) b->host[i] = (float)(scale * (double)b->chosen[i]);
        ops->from_host(s->moe_aux, b->host, (size_t)G * (size_t)E * sizeof(float));
        daux = s->moe_aux;
    }
    ops->zero(s->moe_dlogits, (size_t)N * (size_t)E * sizeof(float));
    ops->moe_router_backward(s->moe_dlogits, b->scores, b->idx, b->w, s->moe_dw, daux, N, E, k,
                             cfg->router == ROUTER_SIGMOID, cfg->norm_top_k, T, 0);
    ops->matmul_backward(dx, bp->g[BR_ROUTER_W], NULL, s->moe_dlogits, x, bp->w[BR_ROUTER_W], N, C, E, t);
}
