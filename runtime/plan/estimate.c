/* estimate.c — one job on one machine: the two phases and the warnings that do
 * not belong to a single part (layout against nodes, microbatches, world size). */
#include "runtime/plan/estimate.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void plan_warn(plan_estimate *e, const char *fmt, ...)
{
    if (e->n_warnings >= PLAN_WARN_MAX) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->warnings[e->n_warnings++], PLAN_WARN_LEN, fmt, ap);
    va_end(ap);
}

int plan_node_of(const plan_estimate *e, int rank)
{
    return rank / e->ranks_per_node;
}

/* Members of a group are increasing world ranks and nodes hold consecutive ranks,
 * so the group crosses nodes exactly when its first and last member do. */
int plan_group_crosses(const plan_estimate *e, int rank, mesh_dim dim)
{
    const mesh *m = &e->mesh;
    mesh_coord lo = mesh_coords(m, rank), hi = lo;
    switch (dim) {
    case MESH_TP: lo.tp = 0, hi.tp = m->tp - 1; break;
    case MESH_DP: lo.dp = 0, hi.dp = m->dp - 1; break;
    case MESH_PP: lo.pp = 0, hi.pp = m->pp - 1; break;
    case MESH_DP_TP: lo.dp = 0, lo.tp = 0, hi.dp = m->dp - 1, hi.tp = m->tp - 1; break;
    case MESH_CP: lo.cp = 0, hi.cp = m->cp - 1; break;
    case MESH_DP_CP: lo.dp = 0, lo.cp = 0, hi.dp = m->dp - 1, hi.cp = m->cp - 1; break;
    case MESH_EP: case MESH_EDP: { /* folded into dp x cp: their first and last members */
        int *g = malloc((size_t)m->world * sizeof *g);
        if (!g) return 0;
        int n = mesh_group(m, rank, dim, g), crosses = plan_node_of(e, g[0]) != plan_node_of(e, g[n - 1]);
        free(g);
        return crosses;
    }
    }
    return plan_node_of(e, mesh_rank(m, lo)) != plan_node_of(e, mesh_rank(m, hi));
}

static void layout_warnings(plan_estimate *e)
{
    const job_parallel *par = &e->job.parallel;
    int tp_crosses = 0;
    for (int r = 0; r < e->world && !tp_crosses; r += par->tp)
        tp_crosses = plan_group_crosses(e, r, MESH_TP);
    if (tp_crosses)
        plan_warn(e, "tp %d crosses nodes of %d ranks: its per-layer all-reduces run on the inter-node link "
                     "(keep tp a divisor of the ranks per node)",
                  par->tp, e->ranks_per_node);
    if (par->pp > 1 && par->microbatches < 4 * par->pp)
        plan_warn(e, "microbatches %d < 4 x pp %d: the pipeline bubble is large; more (smaller) microbatches "
                     "shrink it",
                  par->microbatches, par->pp);
    long long per_step = (long long)e->job.train.micro_batch * par->dp * par->microbatches;
    if (per_step != e->job.train.global_batch)
        plan_warn(e, "global_batch %d is not micro_batch %d x dp %d x microbatches %d: the batch does not divide",
                  e->job.train.global_batch, e->job.train.micro_batch, par->dp, par->microbatches);
    if (par->mode == SHARD_HSDP && sizes_shard_group(e->sizes, SHARD_OF_OPTIM) == sizes_grad_dp(e->sizes))
        plan_warn(e, "hsdp: all %d data-parallel ranks share a node, so it is plain fsdp", sizes_grad_dp(e->sizes));
    if (par->mode == SHARD_HSDP && sizes_shard_group(e->sizes, SHARD_OF_OPTIM) == 1)
        plan_warn(e, "hsdp: no two data-parallel ranks share a node, so nothing is sharded (it is plain DDP)");
}

int plan_estimate_memory(plan_estimate *e, const job_spec *job, const hw_profile *hw, int nnodes,
                         int ranks_per_node, char *err, size_t errlen)
{
    return plan_estimate_memory_reusing(e, job, hw, nnodes, ranks_per_node, NULL, 0, err, errlen);
}

int plan_estimate_memory_reusing(plan_estimate *e, const job_spec *job, const hw_profile *hw, int nnodes,
                                 int ranks_per_node, const sizes *donor, int slots_only, char *err,
                                 size_t errlen)
{
    memset(e, 0, sizeof *e);
    e->job = *job;
    e->hw = *hw;
    const job_parallel *par = &job->parallel;
    if (mesh_from_parallel(&e->mesh, par, err, errlen)) return -1;
    e->world = e->mesh.world;
    e->ranks_per_node = ranks_per_node >= 1 ? ranks_per_node : e->world;
    e->nnodes = nnodes >= 1 ? nnodes : (e->world + e->ranks_per_node - 1) / e->ranks_per_node;
    if (e->nnodes * e->ranks_per_node != e->world)
        plan_warn(e, "world %d (dp %d x tp %d x pp %d x cp %d) != nnodes %d x nproc_per_node %d = %d: the run would not "
                     "start",
                  e->world, par->dp, par->tp, par->pp, par->cp, e->nnodes, e->ranks_per_node,
                  e->nnodes * e->ranks_per_node);
    sizes_env env = {hw->gpu, e->ranks_per_node, slots_only};
    e->sizes = sizes_create_reusing(job, &env, donor, err, errlen);
    if (!e->sizes) return -1;
    e->mixed = sizes_mixed(e->sizes);
    if (hw->gpu && job->train.precision == PREC_FP32)
        plan_warn(e, "train.precision fp32 on %s: fp32 everywhere at the fp32 peak (%.3g TFLOP/s); bf16 "
                     "mixed precision is %.0fx faster",
                  hw->name, hw->peak_fp32 / 1e12, hw->peak_bf16 / hw->peak_fp32);
    e->n_stages = par->pp;
    e->stage = calloc((size_t)par->pp, sizeof *e->stage);
    if (!e->stage) {
        snprintf(err, errlen, "estimate: out of memory");
        return -1;
    }
    plan_memory(e);
    layout_warnings(e);
    return 0;
}

int plan_estimate_time(plan_estimate *e, char *err, size_t errlen)
{
    plan_comm_volume(e);
    if (plan_step_time(e, 1, err, errlen)) return -1;
    e->timed = 1;
    return 0;
}

int plan_estimate_time_bound(plan_estimate *e, char *err, size_t errlen)
{
    plan_comm_volume(e);
    return plan_step_time(e, 0, err, errlen);
}

void plan_estimate_free(plan_estimate *e)
{
    if (e->has_sim) pp_sim_free(&e->sim);
    sizes_destroy(e->sizes);
    free(e->stage);
    e->sizes = NULL;
    e->stage = NULL;
    e->has_sim = 0;
}
