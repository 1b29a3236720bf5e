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
 * sequence parallelism, which a split backward refuses). */
#include "runtime/model/model_internal.h"

void block_backward_weight(model *m, int unit, const block_acts *a, const block_wkeep *k, int B)
{
    const dt_ops *ops = m->ops;
    const model_dims *d = &m->d;
    int N = B * d->seq, C = d->C;
    ops->matmul_backward(NULL, unit_tensor_grad(m, unit, BLK_MPROJ_W), unit_tensor_grad(m, unit, BLK_MPROJ_B),
                         k->dy, a->fchg, NULL, N, d->F_l, C, m->act);
    ops->matmul_backward(NULL, unit_tensor_grad(m, unit, BLK_FC_W), unit_tensor_grad(m, unit, BLK_FC_B), k->dfch,
                         a->ln2, NULL, N, C, d->F_l, m->act);
    ops->matmul_backward(NULL, unit_tensor_grad(m, unit, BLK_PROJ_W), unit_tensor_grad(m, unit, BLK_PROJ_B),
                         k->dr2, a->atty, NULL, N, d->C_l, C, m->act);
    ops->matmul_backward(NULL, unit_tensor_grad(m, unit, BLK_QKV_W), unit_tensor_grad(m, unit, BLK_QKV_B),
                         k->dqkv, a->ln1, NULL, N, C, 3 * d->C_l, m->act);
}
