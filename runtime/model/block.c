/* block.c — the pre-LN transformer block, forward and backward, on local
 * tensor-parallel shards (Megatron):
 *
 *   r2 = x  + proj(attn(qkv(ln1(x))))     qkv column-parallel, proj row-parallel
 *   y  = r2 + mproj(gelu(fc(ln2(r2))))    fc column-parallel, mproj row-parallel
 *
 * A row-parallel matmul's output is a partial sum: all-reduced before it joins
 * the residual stream, with its (replicated) bias passed on tp rank 0 only so it
 * is added once. A column-parallel matmul's input gradient is partial: all-reduced
 * before the layernorm backward. Everything else is local. */
#include "runtime/model/model_internal.h"

typedef struct {
    const float *p[BLK_COUNT]; /* tensors */
    float *g[BLK_COUNT];       /* their gradients */
} block_params;

/* From the unit's current buffers: a strategy may have rebound them in before(). */
static void bind_params(model *m, int unit, block_params *bp, int with_grads)
{
    for (int i = 0; i < BLK_COUNT; i++) {
        bp->p[i] = unit_tensor(m, unit, i);
        bp->g[i] = with_grads ? unit_tensor_grad(m, unit, i) : NULL;
    }
}

void block_forward(model *m, int unit, const float *x, float *y, block_acts *a, int B,
                   int recomputing)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    int N = B * d->seq, C = d->C, T = d->seq;
    int causal = m->spec.kind == MODEL_GPT;
    int rank0 = m->shard.tp_rank == 0;
    size_t NC = (size_t)N * (size_t)C;
    block_params bp;
    bind_params(m, unit, &bp, 0);

    ops->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, bp.p[BLK_LN1_W], bp.p[BLK_LN1_B], N, C);
    ops->matmul_forward(a->qkv, a->ln1, bp.p[BLK_QKV_W], bp.p[BLK_QKV_B], N, C, 3 * d->C_l);
    ops->attention_forward(a->atty, a->att, a->qkv, B, T, d->C_l, d->NH_l, causal);
    ops->matmul_forward(a->r2, a->atty, bp.p[BLK_PROJ_W], rank0 ? bp.p[BLK_PROJ_B] : NULL,
                        N, d->C_l, C);
    model_tp_allreduce(m, a->r2, NC, TP_SUM);
    ops->residual_forward(a->r2, a->r2, x, NC);

    ops->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->r2, bp.p[BLK_LN2_W], bp.p[BLK_LN2_B], N, C);
    ops->matmul_forward(a->fch, a->ln2, bp.p[BLK_FC_W], bp.p[BLK_FC_B], N, C, d->F_l);
    ops->gelu_forward(a->fchg, a->fch, (size_t)N * (size_t)d->F_l);
    if (recomputing) return; /* the backward reads nothing past this point */
    ops->matmul_forward(y, a->fchg, bp.p[BLK_MPROJ_W], rank0 ? bp.p[BLK_MPROJ_B] : NULL,
                        N, d->F_l, C);
    model_tp_allreduce(m, y, NC, TP_SUM);
    ops->residual_forward(y, y, a->r2, NC);
}

void block_backward(model *m, int unit, float *dres, const float *x, const block_acts *a,
                    const block_scratch *s, int B)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    int N = B * d->seq, C = d->C, T = d->seq;
    int causal = m->spec.kind == MODEL_GPT;
    size_t NC = (size_t)N * (size_t)C, NF = (size_t)N * (size_t)d->F_l;
    block_params bp;
    bind_params(m, unit, &bp, 1);
    /* dres = dL/dy. y = r2 + mlp(r2): the MLP branch sees dy; dL/dr2 = dy + (MLP's
     * input gradient), accumulated into dres in place by the ln2 backward. */
    float *dfchg = s->dA, *dfch = s->dB;
    ops->zero(dfchg, NF * sizeof(float));
    ops->matmul_backward(dfchg, bp.g[BLK_MPROJ_W], bp.g[BLK_MPROJ_B], dres, a->fchg,
                         bp.p[BLK_MPROJ_W], N, d->F_l, C);
    ops->zero(dfch, NF * sizeof(float));
    ops->gelu_backward(dfch, a->fch, dfchg, NF);
    ops->zero(s->dln, NC * sizeof(float));
    ops->matmul_backward(s->dln, bp.g[BLK_FC_W], bp.g[BLK_FC_B], dfch, a->ln2, bp.p[BLK_FC_W],
                         N, C, d->F_l);
    model_tp_allreduce(m, s->dln, NC, TP_SUM);
    ops->layernorm_backward(dres, bp.g[BLK_LN2_W], bp.g[BLK_LN2_B], s->dln, a->r2,
                            bp.p[BLK_LN2_W], a->ln2_mean, a->ln2_rstd, N, C);

    /* dres = dL/dr2. r2 = x + attn(x): same pattern. */
    float *datty = s->dB, *dqkv = s->dA;
    size_t NCl = (size_t)N * (size_t)d->C_l;
    ops->zero(datty, NCl * sizeof(float));
    ops->matmul_backward(datty, bp.g[BLK_PROJ_W], bp.g[BLK_PROJ_B], dres, a->atty,
                         bp.p[BLK_PROJ_W], N, d->C_l, C);
    ops->zero(dqkv, 3 * NCl * sizeof(float));
    ops->attention_backward(dqkv, s->att_scratch, datty, a->qkv, a->att, B, T, d->C_l, d->NH_l,
                            causal);
    ops->zero(s->dln, NC * sizeof(float));
    ops->matmul_backward(s->dln, bp.g[BLK_QKV_W], bp.g[BLK_QKV_B], dqkv, a->ln1, bp.p[BLK_QKV_W],
                         N, C, 3 * d->C_l);
    model_tp_allreduce(m, s->dln, NC, TP_SUM);
    ops->layernorm_backward(dres, bp.g[BLK_LN1_W], bp.g[BLK_LN1_B], s->dln, x, bp.p[BLK_LN1_W],
                            a->ln1_mean, a->ln1_rstd, N, C);
}
