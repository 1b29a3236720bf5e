/* moe_dispatch.c — the local MoE token dispatcher (model.h
 * model_moe_dispatcher): every expert lives on this rank, so dispatching is
 * gathering the kept choices' rows into expert order (ops->moe_permute) and
 * combining is gathering them back, weighted (ops->moe_unpermute), with no
 * one to talk to; the experts' output rows are the token side's (moves_rows
 * 0). Megatron-Core's token_dispatcher.py keeps the same split: the
 * expert-parallel dispatcher (runtime/parallel/ep.c) adds the all-to-all
 * between these gathers, and the router and the experts stay as they are. */
#include "runtime/model/model_internal.h"

#include <string.h>

static int dispatch(void *ctx, void *xe, const void *x, const model_moe_route *r, int C, dt_dtype t)
{
    const model *m = ctx;
    int M = 0;
    for (int e = 0; e < r->E; e++) M += r->counts[e];
    memcpy(r->counts_l, r->counts, (size_t)r->E * sizeof(int));
    m->ops->moe_permute(xe, x, r->src, M, C, t);
    return M;
}

static void combine(void *ctx, float *out, void *yt, const void *ye, const float *w, const model_moe_route *r,
                    int C, dt_dtype t, int accumulate)
{
    const model *m = ctx;
    (void)ye; /* yt itself */
    if (out) m->ops->moe_unpermute(out, yt, r->dst, w, r->N, r->k, C, t, accumulate);
}

static void combine_backward(void *ctx, float *dye, float *dw, const float *dout, const void *yt, const float *w,
                             const model_moe_route *r, int C, dt_dtype t)
{
    const model *m = ctx;
    int M = 0;
    for (int e = 0; e < r->E; e++) M += r->counts[e];
    m->ops->zero(dye, (size_t)M * (size_t)C * sizeof(float));
    m->ops->moe_unpermute_backward(dye, dw, dout, yt, r->dst, w, r->N, r->k, C, t);
}

static void dispatch_backward(void *ctx, float *dx, float *dxe, const model_moe_route *r, int C)
{
    const model *m = ctx;
    m->ops->moe_permute_backward(dx, dxe, r->dst, r->N, r->k, C);
}

void model_local_moe_dispatcher(model *m, model_moe_dispatcher *out)
{
    *out = (model_moe_dispatcher){.ctx = m, .moves_rows = 0, .dispatch = dispatch, .combine = combine,
                                  .combine_backward = combine_backward, .dispatch_backward = dispatch_backward};
}
