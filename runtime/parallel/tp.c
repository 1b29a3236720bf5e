/* tp.c — tensor parallelism (Megatron): the model's tp hooks.
 *
 * The model does the Megatron math itself (column-parallel qkv and fc,
 * row-parallel projections, vocab-parallel embedding and cross-entropy: see
 * model.h) and asks for a reduction across the tensor-parallel group at the two
 * points per block in forward and in backward, and around the vocabulary. This
 * file answers that call over the mesh's tp communicator: SUM for partial sums,
 * MAX for the cross-entropy's row maximum. With sequence parallelism it also
 * answers the all-gathers and reduce-scatters of the residual stream's rows:
 * comm_chunk's cut of a [N, C] tensor whose N the tp size divides is exactly
 * tp rank r's rows. Blocking, since the very next op needs the result. */
#include "runtime/parallel/strategy.h"

void tp_allreduce(strat_ctx *x, float *buf, size_t n, tp_op op)
{
    if (x->failed) return; /* the step is lost; do not wait on a broken group */
    double t0 = strat_now();
    int rc = comm_all_reduce(x->tp, buf, buf, n, COMM_F32, op == TP_MAX ? COMM_MAX : COMM_SUM);
    strat_comm_done(x, t0, op == TP_MAX ? "tp all_reduce (max)" : "tp all_reduce");
    strat_fail(x, x->tp, rc, op == TP_MAX ? "tp all_reduce (max)" : "tp all_reduce");
}

void tp_all_gather(strat_ctx *x, const float *local, float *full, size_t full_count)
{
    if (x->failed) return;
    double t0 = strat_now();
    int rc = comm_all_gather(x->tp, local, full, full_count, COMM_F32);
    strat_comm_done(x, t0, "tp all_gather");
    strat_fail(x, x->tp, rc, "tp all_gather");
}

void tp_reduce_scatter(strat_ctx *x, const float *full, float *local, size_t full_count)
{
    if (x->failed) return;
    double t0 = strat_now();
    int rc = comm_reduce_scatter(x->tp, full, local, full_count, COMM_F32, COMM_SUM);
    strat_comm_done(x, t0, "tp reduce_scatter");
    strat_fail(x, x->tp, rc, "tp reduce_scatter");
}
