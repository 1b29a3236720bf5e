/* block.c — the pre-LN transformer block, forward and backward, on local
 * tensor-parallel shards (Megatron):
 *
 *   r2 = x  + proj(attn(qkv(ln1(x))))     qkv column-parallel, proj row-parallel
 *   y  = r2 + mproj(gelu(fc(ln2(r2))))    fc column-parallel, mproj row-parallel
 *
 * The four matmuls go through the model's layers (model_layers: plain local
 * ones, or a tp strategy's, which add the collectives their kind needs);
 * everything else is local to this rank's heads, ffn columns and rows.
 *
 * With sequence parallelism (model.h) x, r2, y, the layernorm outputs and the
 * residual gradient hold this rank's rows only (N_l of the N); the layers take
 * those rows and the shared [N, C] scratch (block_scratch.full) to gather into
 * or reduce from. In backward the layernorm outputs are passed as rows again
 * where a weight gradient needs them (keeping them whole would spend the
 * memory SP saves). */
#include "runtime/model/model_internal.h"

typedef struct {
    const float *p[BLK_COUNT]; /* tensors (fp32: the vectors are read so) */
    const void *w[BLK_COUNT];  /* the weight matrices as the GEMMs read them (unit_weight) */
    float *g[BLK_COUNT];       /* their gradients */
} block_params;

/* From the unit's current buffers: a strategy may have rebound them in before(). */
static void bind_params(model *m, int unit, block_params *bp, int with_grads)
{
    for (int i = 0; i < BLK_COUNT; i++) {
        bp->p[i] = unit_tensor(m, unit, i);
        bp->w[i] = unit_weight(m, unit, i);
        bp->g[i] = with_grads ? unit_tensor_grad(m, unit, i) : NULL;
    }
}

void block_forward(model *m, int unit, const void *x, void *y, block_acts *a,
                   const block_scratch *s, int B, int recomputing)
{
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int N = B * d->seq, C = d->C, T = d->seq, Nl = rows_local(d, B);
    int causal = m->spec.kind == MODEL_GPT;
    size_t NlC = (size_t)Nl * (size_t)C, NF = (size_t)N * (size_t)d->F_l;
    dt_dtype t = m->act;
    block_params bp;
    bind_params(m, unit, &bp, 0);

    /* Every tensor the backward reads is written in the activations' type
     * (bf16: rounded once, where it is written, so the matmuls read bf16
     * inputs and the backward what the stash keeps); statistics are fp32.
     * The row layers' output is fp32 (summed over the group first): in fp32
     * it is written in place of its residual sum, in bf16 into the scratch,
     * and the residual add rounds the sum. */
    ops->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, bp.p[BLK_LN1_W], bp.p[BLK_LN1_B], Nl, C,
                           model_norm_eps(m), t);
    L->column_forward(L->ctx, a->qkv, a->ln1, s->full, bp.w[BLK_QKV_W], bp.p[BLK_QKV_B], N, C, 3 * d->C_l, t);
    m->attn.forward(m->attn.ctx, a->atty, a->att, s->att_scratch, a->qkv, B, T, d->C_l, d->NH_l, causal, t);
    float *branch = t == DT_F32 ? (float *)a->r2 : s->dln;
    L->row_forward(L->ctx, branch, s->full, a->atty, bp.w[BLK_PROJ_W], bp.p[BLK_PROJ_B], N, d->C_l, C, t);
    /* r2 = x + the attention branch, and ln2 of it, in one pass where the
     * backend fuses them (the same bits as the two ops on the CPU) */
    ops->residual_layernorm_forward(a->r2, a->ln2, a->ln2_mean, a->ln2_rstd, branch, x, bp.p[BLK_LN2_W],
                                    bp.p[BLK_LN2_B], Nl, C, model_norm_eps(m), t);
    if (m->spec.activation == ACT_GELU) {
        /* The exact GELU: no GEMM epilogue computes it. */
        L->column_forward(L->ctx, a->fch, a->ln2, s->full, bp.w[BLK_FC_W], bp.p[BLK_FC_B], N, C, d->F_l, t);
        model_gelu_forward(m, a->fchg, a->fch, NF);
    } else {
        /* GPT-2's tanh GELU in the fc GEMM's epilogue (same bits on the CPU).
         * bf16: the GELU reads the fp32 pre-activation, as cuBLASLt's
         * GELU_AUX_BIAS epilogue reads its accumulator, and both outputs are
         * rounded once where they are stored; a different rounding point than
         * the two ops', a different trajectory, not a different accuracy (the
         * quickstart_bf16 test compares smoothed curves against fp32's
         * seed-to-seed spread). */
        L->column_gelu_forward(L->ctx, a->fchg, a->fch, a->ln2, s->full, bp.w[BLK_FC_W], bp.p[BLK_FC_B], N, C,
                               d->F_l, t);
    }
    if (recomputing) return; /* the backward reads nothing past this point */
    branch = t == DT_F32 ? (float *)y : s->dln;
    L->row_forward(L->ctx, branch, s->full, a->fchg, bp.w[BLK_MPROJ_W], bp.p[BLK_MPROJ_B], N, d->F_l, C, t);
    ops->residual_forward(y, branch, a->r2, NlC, t);
}

void block_backward(model *m, int unit, float *dres, const void *x, const block_acts *a,
                    const block_scratch *s, int B, const block_wkeep *keep)
{
    dt_dtype t = m->act;
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int N = B * d->seq, C = d->C, T = d->seq, Nl = rows_local(d, B);
    int causal = m->spec.kind == MODEL_GPT;
    size_t NF = (size_t)N * (size_t)d->F_l;
    block_params bp;
    bind_params(m, unit, &bp, 1);
    if (keep) /* the matmuls' weight gradients wait for the W pass (block_backward_weight) */
        for (int i = 0; i < BLK_COUNT; i++)
            if (i != BLK_LN1_W && i != BLK_LN1_B && i != BLK_LN2_W && i != BLK_LN2_B) bp.g[i] = NULL;
    /* layernorm gradients: straight into the unit's, or (SP) this rank's part of
     * them into the scratch, in the order of ln_dst */
    float *lng = model_ln_grads_begin(m, s, 4);
    float *ln_dst[4] = {bp.g[BLK_LN1_W], bp.g[BLK_LN1_B], bp.g[BLK_LN2_W], bp.g[BLK_LN2_B]};
    float *ln1_dw = lng ? lng : ln_dst[0], *ln1_db = lng ? lng + C : ln_dst[1];
    float *ln2_dw = lng ? lng + 2 * (size_t)C : ln_dst[2], *ln2_db = lng ? lng + 3 * (size_t)C : ln_dst[3];

    /* dres = dL/dy. y = r2 + mlp(r2): the MLP branch sees dy; dL/dr2 = dy + (MLP's
     * input gradient), accumulated into dres in place by the ln2 backward. */
    float *dfchg = s->dA, *dfch = s->dB;
    /* (keep's tensors may be kept ones this block reads: each is written once dead) */
    if (keep) ops->copy(keep->dy, dres, (size_t)N * (size_t)C * sizeof(float));
    if (m->spec.activation == ACT_GELU) {
        L->row_backward(L->ctx, dfchg, bp.g[BLK_MPROJ_W], bp.g[BLK_MPROJ_B], dres, s->full, a->fchg,
                        bp.w[BLK_MPROJ_W], N, d->F_l, C, t);
        ops->zero(dfch, NF * sizeof(float));
        model_gelu_backward(m, dfch, a->fch, dfchg, NF);
    } else {
        /* GPT-2's tanh GELU in the mlp projection's input-gradient GEMM (a
         * DGELU epilogue on cuda; the same bits as the two steps on the CPU).
         * It reads the kept pre-activation, rounded under bf16 as the GELU's
         * backward always has, so both precisions take it. */
        L->row_dgelu_backward(L->ctx, dfch, dfchg, bp.g[BLK_MPROJ_W], bp.g[BLK_MPROJ_B], dres, s->full, a->fchg,
                              bp.w[BLK_MPROJ_W], a->fch, N, d->F_l, C, t);
    }
    if (keep) ops->copy(keep->dfch, dfch, NF * sizeof(float));
    /* s->full is free again: dy is used up */
    const float *dln2 = L->column_backward(L->ctx, s->dln, bp.g[BLK_FC_W], bp.g[BLK_FC_B], dfch, a->ln2,
                                           s->full, bp.w[BLK_FC_W], N, C, d->F_l, t);
    ops->layernorm_backward(dres, ln2_dw, ln2_db, dln2, a->r2, bp.p[BLK_LN2_W], a->ln2_mean,
                            a->ln2_rstd, Nl, C, t);

    /* dres = dL/dr2. r2 = x + attn(x): same pattern. */
    float *datty = s->dB, *dqkv = s->dA;
    size_t NCl = (size_t)N * (size_t)d->C_l;
    if (keep) ops->copy(keep->dr2, dres, (size_t)N * (size_t)C * sizeof(float));
    L->row_backward(L->ctx, datty, bp.g[BLK_PROJ_W], bp.g[BLK_PROJ_B], dres, s->full, a->atty,
                    bp.w[BLK_PROJ_W], N, d->C_l, C, t);
    if (s->att_shared) { /* selective recompute, naive attention (the lse kinds keep no probabilities) */
        /* att_shared holds whichever block's probabilities were computed last:
         * rebuild this block's from its kept qkv (same kernel, same inputs, so
         * the same bits as its forward's). The attention output is not needed
         * again (atty is kept); dA, free until it becomes dqkv below, takes it. */
        ops->attention_forward(dqkv, s->att_shared, a->qkv, B, T, d->C_l, d->NH_l, d->NH_l, causal, t);
    }
    ops->zero(dqkv, 3 * NCl * sizeof(float));
    m->attn.backward(m->attn.ctx, dqkv, s->att_scratch, datty, a->qkv, a->atty, a->att, B, T, d->C_l, d->NH_l,
                     causal, t);
    if (keep) ops->copy(keep->dqkv, dqkv, 3 * NCl * sizeof(float));
    /* s->full is free again: dr2 is used up */
    const float *dln1 = L->column_backward(L->ctx, s->dln, bp.g[BLK_QKV_W], bp.g[BLK_QKV_B], dqkv, a->ln1,
                                           s->full, bp.w[BLK_QKV_W], N, C, 3 * d->C_l, t);
    ops->layernorm_backward(dres, ln1_dw, ln1_db, dln1, x, bp.p[BLK_LN1_W], a->ln1_mean,
                            a->ln1_rstd, Nl, C, t);
    /* before after(BACKWARD): the strategies take the unit's gradients as final there */
    model_ln_grads_finish(m, s, ln_dst, 4);
}
