/* gpt.c — GPT's embedding (unit 0: wte vocab-parallel, wpe) and head (unit L+1:
 * final layernorm, LM head tied to wte, vocab-parallel cross-entropy).
 *
 * Vocab parallelism: tp rank r holds wte rows [v0, v0 + V_l). The embedding
 * looks up the tokens that live here (zeros elsewhere) and all-reduces; the head
 * computes logits for its vocab columns and the cross-entropy all-reduces the
 * row max (MAX), the sum of exponentials and the target logit (SUM), so no rank
 * ever holds a full [N, V] row. Batch arrays (tokens, targets) are host memory;
 * they are copied into the activations' device buffers here.
 *
 * Sequence parallelism (model.h): the embedding's lookup is reduce-scattered into
 * this rank's rows instead of all-reduced, and its backward gathers the rows'
 * gradient first. The head's final layernorm runs on the rank's rows, which are
 * then gathered into the whole lnf the vocab-parallel logits need; backward
 * reduce-scatters d(lnf) and sums the layernorm's weight gradients over tp. */
#include "runtime/model/model_internal.h"

void gpt_embedding_forward(model *m, model_acts *a, const model_batch *batch, float *out)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    int B = batch->B, N = B * d->seq;
    size_t NC = (size_t)N * (size_t)d->C;
    ops->from_host(a->tokens, batch->tokens, (size_t)N * sizeof(int));
    if (d->sp_size == 1) {
        ops->embedding_forward(out, a->tokens, unit_tensor(m, 0, GPT_EMB_WTE), d->v0, d->V_l, N, d->C);
        model_tp_allreduce(m, out, NC, TP_SUM);
        ops->posadd_forward(out, unit_tensor(m, 0, GPT_EMB_WPE), B, d->seq, d->C);
        return;
    }
    /* Each token's row is non-zero on one tp rank only, so adding wpe on rank 0
     * before the sum gives the same bits as adding it after: (e + wpe) + 0 or
     * (0 + wpe) + e. This rank receives its rows of that sum. */
    float *full = a->bs.full;
    ops->embedding_forward(full, a->tokens, unit_tensor(m, 0, GPT_EMB_WTE), d->v0, d->V_l, N, d->C);
    if (m->shard.tp_rank == 0) ops->posadd_forward(full, unit_tensor(m, 0, GPT_EMB_WPE), B, d->seq, d->C);
    model_tp_reduce_scatter(m, full, out, NC);
}

void gpt_embedding_backward(model *m, model_acts *a, const float *dres, int B)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    int N = B * d->seq;
    /* every token's gradient: its wte row may live on this rank */
    dres = model_rows_gathered(m, dres, a->bs.full, (size_t)N * (size_t)d->C);
    /* with the tied head in this object, the wte gradient collects in the
     * scratch that already holds the head's part (gpt_tied_grads_finish) */
    float *dwte = a->tied_dwte ? a->tied_dwte : unit_tensor_grad(m, 0, GPT_EMB_WTE);
    ops->embedding_backward(dwte, dres, a->tokens, d->v0, d->V_l, N, d->C);
    ops->posadd_backward(unit_tensor_grad(m, 0, GPT_EMB_WPE), dres, B, d->seq, d->C);
}

void gpt_tied_grads_finish(model *m, model_acts *a)
{
    int head = m->spec.n_layer + 1;
    size_t n = (size_t)m->d.V_l * (size_t)m->d.C;
    float *g0 = unit_tensor_grad(m, 0, GPT_EMB_WTE);
    float *gh = unit_tensor_grad(m, head, GPT_HEAD_WTE);
    m->ops->residual_forward(g0, g0, a->tied_dwte, n);
    m->ops->residual_forward(gh, gh, a->tied_dwte, n);
}

double gpt_head_forward(model *m, model_acts *a, const model_batch *batch, const float *x)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    int head = m->spec.n_layer + 1;
    int N = batch->B * d->seq, C = d->C, Vl = d->V_l, Nl = rows_local(d, batch->B);
    ops->from_host(a->targets, batch->targets, (size_t)N * sizeof(int));
    /* this rank's rows of lnf, then (SP) every rank's, in place */
    float *lnf_mine = a->lnf + rows_first(d, batch->B) * (size_t)C;
    ops->layernorm_forward(lnf_mine, a->lnf_mean, a->lnf_rstd, x, unit_tensor(m, head, GPT_HEAD_LNF_W),
                           unit_tensor(m, head, GPT_HEAD_LNF_B), Nl, C);
    if (d->sp_size > 1) model_tp_all_gather(m, lnf_mine, a->lnf, (size_t)N * (size_t)C);
    ops->matmul_forward(a->logits, a->lnf, unit_tensor(m, head, GPT_HEAD_WTE), NULL, N, C, Vl);
    ops->xent_rowmax(a->rowmax, a->logits, N, Vl);
    model_tp_allreduce(m, a->rowmax, (size_t)N, TP_MAX);
    ops->xent_sumexp(a->sumexp, a->logits, a->rowmax, N, Vl);
    model_tp_allreduce(m, a->sumexp, (size_t)N, TP_SUM);
    ops->xent_target(a->target, a->logits, a->targets, d->v0, N, Vl);
    model_tp_allreduce(m, a->target, (size_t)N, TP_SUM);
    ops->xent_loss(a->loss, a->rowmax, a->sumexp, a->target, a->targets, N);
    ops->to_host(a->host_loss, a->loss, (size_t)N * sizeof(float));
    double sum = 0;
    for (int i = 0; i < N; i++) sum += a->host_loss[i];
    return sum;
}

void gpt_head_backward(model *m, model_acts *a, const model_batch *batch, const float *x,
                       float *dres, float loss_scale)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    int head = m->spec.n_layer + 1;
    int T = d->seq, N = batch->B * T, C = d->C, Vl = d->V_l, Nl = rows_local(d, batch->B);
    size_t NC = (size_t)N * (size_t)C;
    for (int i = 0; i < N; i++) a->host_dloss[i] = batch->targets[i] >= 0 ? loss_scale : 0.0f;
    ops->from_host(a->dloss, a->host_dloss, (size_t)N * sizeof(float));

    const float *wte = unit_tensor(m, head, GPT_HEAD_WTE);
    float *dwte = unit_tensor_grad(m, head, GPT_HEAD_WTE);
    if (a->tied_dwte) {
        /* this micro-batch's head part, kept apart until the embedding adds its own */
        dwte = a->tied_dwte;
        ops->zero(dwte, (size_t)Vl * (size_t)C * sizeof(float));
    }
    float *dlnf = a->bs.dln;
    ops->zero(dlnf, NC * sizeof(float));
    /* one sample at a time: the logits' gradient never needs a second [N, V_l] */
    for (int b = 0; b < batch->B; b++) {
        size_t r = (size_t)b * (size_t)T;
        ops->xent_backward(a->dlogits, a->logits + r * (size_t)Vl, a->rowmax + r, a->sumexp + r,
                           a->targets + r, a->dloss + r, d->v0, T, Vl);
        ops->matmul_backward(dlnf + r * (size_t)C, dwte, NULL, a->dlogits, a->lnf + r * (size_t)C,
                             wte, T, C, Vl);
    }
    /* each rank's dlnf sums over its vocab columns only */
    const float *dlnf_mine = model_rows_reduce_in_place(m, dlnf, batch->B);
    float *lng = model_ln_grads_begin(m, &a->bs, 2);
    float *ln_dst[2] = {unit_tensor_grad(m, head, GPT_HEAD_LNF_W), unit_tensor_grad(m, head, GPT_HEAD_LNF_B)};
    ops->zero(dres, (size_t)Nl * (size_t)C * sizeof(float));
    ops->layernorm_backward(dres, lng ? lng : ln_dst[0], lng ? lng + C : ln_dst[1], dlnf_mine, x,
                            unit_tensor(m, head, GPT_HEAD_LNF_W), a->lnf_mean, a->lnf_rstd, Nl, C);
    model_ln_grads_finish(m, &a->bs, ln_dst, 2);
}
