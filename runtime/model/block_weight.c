/* block_weight.c — the W pass of a zero-bubble pipeline (Qi et al. 2023): a
 * block's four matmul weight and bias gradients, dw += dout^T in and
 * db += colsum(dout), from the output gradients its B pass kept (block_wkeep)
 * and the inputs its micro-batch keeps for backward anyway. The very products
 * block_backward computes inside its matmul_backward calls, in the same GEMMs
 * (ops.h: each part of matmul_backward is computed on its own), so the
 * gradients are bitwise the same; only when differs.
 *
 * No layer call: a weight gradient is local to the rank holding the weight for
 * column- and row-parallel layers alike, as long as the rows are whole (no
 * sequence parallelism, which a split backward refuses); except a Llama's kv
 * heads replicated over tp, whose replicas sum their parts
 * (llama_qkv_wgrad_finish). */
#include "runtime/model/model_internal.h"

void block_backward_weight(model *m, int unit, const block_acts *a, const block_wkeep *k, const block_scratch *s,
                           int B)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    int N = B * d->seq, C = d->C;
    block_params bp;
    block_bind(m, unit, &bp, BIND_GRADS); /* the parameters are not the working copy's here */
    ops->matmul_backward(NULL, bp.g[BR_MPROJ_W], bp.g[BR_MPROJ_B], k->dy, a->fchg, NULL, N, d->F_l, C, m->act);
    ops->matmul_backward(NULL, bp.g[BR_FC_W], bp.g[BR_FC_B], k->dfch, a->ln2, NULL, N, C, d->H_l, m->act);
    ops->matmul_backward(NULL, bp.g[BR_PROJ_W], bp.g[BR_PROJ_B], k->dr2, a->atty, NULL, N, d->C_l, C, m->act);
    /* replicated kv heads: their replicas' parts summed (a tp collective, in
     * the same order on every rank of the group: they run the same schedule) */
    int apart = d->kv_replicas > 1;
    float *dw = apart ? llama_qkv_wgrad_begin(m, s) : bp.g[BR_QKV_W];
    ops->matmul_backward(NULL, dw, bp.g[BR_QKV_B], k->dqkv, a->ln1, NULL, N, C, d->W_l, m->act);
    if (apart) llama_qkv_wgrad_finish(m, unit, s);
}
