/* comm_volume.c — bytes each rank sends per step, per group, and the link it uses.
 *
 * Volumes are bus volumes (what one rank puts on its link), the standard ring
 * costs: all-reduce 2(n-1)/n x data, reduce-scatter and all-gather (n-1)/n x data.
 *   dp   none   all-reduce of the gradients once per step (buckets)
 *        zero1  reduce-scatter of the gradients + all-gather of the params, once
 *        zero2  reduce-scatter every microbatch (the full gradients are not kept)
 *               + all-gather of the params once
 *        fsdp   per microbatch: all-gather params in forward, again in backward
 *               (they were freed after forward), reduce-scatter gradients
 *        hsdp   fsdp inside the node's shard group + all-reduce of the gradient
 *               shard across the replica group once per step
 *   tp   per block and microbatch 2 all-reduces forward + 2 backward of the
 *        [B, T, C] activations (+2 when block recompute re-runs the forward;
 *        selective recompute re-runs only the attention core, tp-local); GPT's
 *        vocab-parallel embedding and head add one each and three small ones
 *        (of [N] floats, once per microbatch however many chunks of rows the
 *        head computes: tp.c).
 *        Sequence parallel: all-gathers and reduce-scatters of [B, T, C] instead,
 *        per block 4 forward, 6 backward (the layernorm outputs are gathered
 *        again), 3 more with recompute; GPT's embedding and head one each way,
 *        ViT's head forward and embedding backward; small all-reduces of the
 *        layernorm gradients (4 x C floats per block, 2 x C for GPT's head; a
 *        Llama's RMSNorms have no bias: 2 x C and C)
 *   pp   one activation forward and one gradient backward per microbatch and
 *        chunk boundary (with sequence parallelism the tp rank's 1/tp of it)
 *   embed GPT with pp > 1: the tied wte gradient, all-reduced between the first
 *        and the last stage once per step
 *   cp   context parallel's ring (cp.c), per block and microbatch: forward sends
 *        this rank's k and v on cp - 1 times ([B, T/cp, 2 x kv heads x head
 *        size / tp]: GQA's kv heads, replicated above tp), backward the same
 *        again (cp - 1) plus their gradient cp times, in fp32 (and block
 *        recompute the forward's once more). With cp the rank's activations are 1/cp of
 *        the samples' tokens: tp and pp volumes shrink with them, and dp's
 *        gradient reduction runs over dp x cp ranks.
 * Activations and their gradients travel at the working precision (bf16 under
 * mixed precision: tp.h), the head's statistics and layernorm gradients fp32;
 * gradients at parallel.reduce_dtype (fp32 with train.grad_dtype fp32 unless it
 * says bf16). */
#include <math.h>
#include <string.h>

#include "runtime/model/model.h"
#include "runtime/plan/estimate.h"

typedef struct {
    double params, grads;   /* bytes of the full tp-local stage: params, gradients as reduced */
    double frozen;          /* train.lora's frozen base: FSDP gathers it, nobody reduces it */
    int units, blocks, has_emb, has_head;
} stage_shape;

static stage_shape shape_of(const plan_estimate *e, int p, int tp_rank)
{
    stage_shape sh;
    memset(&sh, 0, sizeof sh);
    const sizes *s = e->sizes;
    const int *first = sizes_first_unit(s);
    int pp = e->job.parallel.pp, L = e->job.model.n_layer;
    for (int local = 0; local < e->job.parallel.virtual_stages; local++) {
        int c = pp_chunk_id(p, local, pp);
        for (int u = first[c]; u < first[c + 1]; u++) {
            double n = (double)sizes_unit_numel(s, u, tp_rank);
            sh.params += n * (double)sizes_param_elem_bytes(s);
            sh.frozen += (double)sizes_unit_frozen_numel(s, u, tp_rank) * (double)sizes_param_elem_bytes(s);
            sh.grads += n * (double)sizes_reduce_elem_bytes(s); /* what the gradient collectives carry */
            sh.units++;
            if (u == 0) sh.has_emb = 1;
            else if (u <= L) sh.blocks++;
            else sh.has_head = 1;
        }
    }
    return sh;
}

static int rank_at(const plan_estimate *e, int pp, int dp, int tp)
{
    return mesh_rank(&e->mesh, (mesh_coord){.dp = dp, .pp = pp, .tp = tp});
}

/* The rank at position g of the gradient group (dp x cp: g = dp * cp + cp rank). */
static int rank_at_g(const plan_estimate *e, int pp, int g, int tp)
{
    int cp = e->job.parallel.cp;
    return mesh_rank(&e->mesh, (mesh_coord){.dp = g / cp, .cp = g % cp, .pp = pp, .tp = tp});
}

static int crosses(const plan_estimate *e, int rank_a, int rank_b)
{
    return plan_node_of(e, rank_a) != plan_node_of(e, rank_b);
}

/* Fill size, link and time. steps = latency-bound steps of one call. */
static void finish(const plan_estimate *e, plan_comm *c, int inter, double steps_per_call)
{
    c->inter_node = inter;
    c->bandwidth = inter ? e->hw.inter_bw : e->hw.intra_bw;
    double lat = inter ? e->hw.inter_latency : e->hw.intra_latency;
    c->time = c->bytes / c->bandwidth + (double)c->calls * steps_per_call * lat;
}

static void dp_volume(const plan_estimate *e, int p, const stage_shape *sh, plan_stage *st)
{
    const job_parallel *par = &e->job.parallel;
    int m = par->microbatches;
    plan_comm *c = &st->comm[GROUP_DP];
    int n = sizes_shard_group(e->sizes, SHARD_OF_OPTIM);
    if (par->mode == SHARD_NONE) n = sizes_grad_dp(e->sizes);
    c->size = n;
    mesh_dim dpg = par->cp > 1 ? MESH_DP_CP : MESH_DP; /* cp folds into the gradient reduction */
    if (n > 1) {
        double f = (double)(n - 1) / n;
        long buckets = sizes_bucket_count(e->sizes, (sizes_at){0, p, st->tp_rank});
        switch (par->mode) {
        case SHARD_NONE:
            c->op = "all-reduce (grads)";
            c->bytes = 2 * f * sh->grads;
            c->calls = buckets;
            finish(e, c, plan_group_crosses(e, rank_at(e, p, 0, 0), dpg), 2.0 * (n - 1));
            break;
        case SHARD_ZERO1:
            c->op = "reduce-scatter (grads) + all-gather (params)";
            c->bytes = f * (sh->grads + sh->params);
            c->calls = buckets + sh->units;
            finish(e, c, plan_group_crosses(e, rank_at(e, p, 0, 0), dpg), n - 1);
            break;
        case SHARD_ZERO2:
            c->op = "reduce-scatter (grads, every microbatch) + all-gather (params)";
            c->bytes = f * (m * sh->grads + sh->params);
            c->calls = (long)(m + 1) * sh->units;
            finish(e, c, plan_group_crosses(e, rank_at(e, p, 0, 0), dpg), n - 1);
            break;
        default: /* fsdp, hsdp's shard group */
            c->op = "all-gather (params, forward + backward) + reduce-scatter (grads), every microbatch";
            c->bytes = m * f * (2 * (sh->params + sh->frozen) + sh->grads);
            c->calls = 3L * m * sh->units;
            finish(e, c, crosses(e, rank_at_g(e, p, 0, 0), rank_at_g(e, p, n - 1, par->tp - 1)), n - 1);
            break;
        }
    }
    if (par->mode != SHARD_HSDP) return;
    plan_comm *r = &st->comm[GROUP_DP_REPLICA];
    int R = sizes_grad_dp(e->sizes) / n;
    r->size = R;
    if (R < 2) return;
    r->op = "all-reduce (grad shard)";
    r->bytes = 2.0 * (R - 1) / R * sh->grads / n;
    r->calls = sh->units;
    finish(e, r, crosses(e, rank_at_g(e, p, 0, 0), rank_at_g(e, p, (R - 1) * n, 0)), 2.0 * (R - 1));
}

static void tp_volume(const plan_estimate *e, int p, const stage_shape *sh, plan_stage *st)
{
    const job_parallel *par = &e->job.parallel;
    int t = par->tp;
    plan_comm *c = &st->comm[GROUP_TP];
    c->size = t;
    if (t < 2) return;
    const job_model *md = &e->job.model;
    double act = (double)e->job.train.micro_batch * model_seq_len(md) / par->cp * md->d_model *
                 (double)sizes_param_elem_bytes(e->sizes);
    double small = (double)e->job.train.micro_batch * model_seq_len(md) / par->cp * 4.0;
    int per_block = 4 + (e->job.train.recompute == RECOMPUTE_BLOCK ? 2 : 0);
    double big = (double)per_block * sh->blocks, tiny = 0, tiny_calls = 0;
    if (job_model_is_lm(md)) {
        big += sh->has_emb + sh->has_head; /* embedding forward, head's input gradient */
        if (sh->has_head) {
            /* max, sum of exp, target logit: [N] floats each, one call each
             * after the last chunk of rows (tp.c's chunked head combines its
             * chunks' local statistics by the online softmax's rule) */
            tiny = 3;
            tiny_calls = 3;
        }
    }
    double f = 2.0 * (t - 1) / t;
    int crosses_tp = plan_group_crosses(e, rank_at(e, p, 0, 0), MESH_TP);
    if (par->sequence_parallel) {
        int gpt = job_model_is_lm(md), rc = e->job.train.recompute == RECOMPUTE_BLOCK;
        double halves = (10.0 + (rc ? 3.0 : 0.0)) * sh->blocks + (gpt ? 2.0 : 1.0) * (sh->has_emb + sh->has_head);
        double ln_calls = sh->blocks + (gpt ? sh->has_head : 0);
        /* the layernorm gradients' sums stay fp32 (tp.h) */
        /* per block two layernorms' weight and bias (GPT, ViT) or two RMSNorms' weight (Llama) */
        double per_norm = md->kind == MODEL_LLAMA ? 1.0 : 2.0;
        double ln = (2.0 * per_norm * sh->blocks + (gpt ? per_norm * sh->has_head : 0)) * md->d_model * 4.0;
        c->op = "all-gather + reduce-scatter (activations)";
        c->bytes = par->microbatches * (f / 2 * halves * act + f * (tiny * small + ln));
        c->calls = (long)par->microbatches * (long)(halves + tiny_calls + ln_calls);
        /* a ring all-gather or reduce-scatter takes t - 1 steps, an all-reduce 2(t - 1) */
        double steps = (halves * (t - 1) + (tiny_calls + ln_calls) * 2.0 * (t - 1)) / (halves + tiny_calls + ln_calls);
        finish(e, c, crosses_tp, steps);
        return;
    }
    c->op = "all-reduce (activations)";
    c->bytes = par->microbatches * f * (big * act + tiny * small);
    c->calls = (long)par->microbatches * (long)(big + tiny_calls);
    finish(e, c, crosses_tp, 2.0 * (t - 1));
}

static void pp_volume(const plan_estimate *e, int p, plan_stage *st)
{
    const job_parallel *par = &e->job.parallel;
    plan_comm *c = &st->comm[GROUP_PP];
    c->size = par->pp;
    if (par->pp < 2) return;
    const job_model *md = &e->job.model;
    double act = (double)e->job.train.micro_batch * model_seq_len(md) / par->cp * md->d_model *
                 (double)sizes_param_elem_bytes(e->sizes);
    if (par->sequence_parallel) act /= par->tp;
    int chunks = sizes_chunks(e->sizes), msgs = 0;
    for (int local = 0; local < par->virtual_stages; local++) {
        int ch = pp_chunk_id(p, local, par->pp);
        msgs += (ch < chunks - 1) + (ch > 0);
    }
    c->op = "send/recv (activations, their gradients)";
    c->bytes = (double)par->microbatches * msgs * act;
    c->calls = (long)par->microbatches * msgs;
    int me = rank_at(e, p, 0, 0);
    int next = rank_at(e, (p + 1) % par->pp, 0, 0), prev = rank_at(e, (p + par->pp - 1) % par->pp, 0, 0);
    finish(e, c, crosses(e, me, next) || crosses(e, me, prev), 1.0);
}

static void embed_volume(const plan_estimate *e, int p, int tp_rank, plan_stage *st)
{
    const job_parallel *par = &e->job.parallel;
    plan_comm *c = &st->comm[GROUP_EMBED];
    if (!job_model_tied_head(&e->job.model) || par->pp < 2 || (p != 0 && p != par->pp - 1)) return;
    long long V = e->job.model.vocab_size;
    double rows = (double)(V * (tp_rank + 1) / par->tp - V * tp_rank / par->tp);
    c->size = 2;
    c->op = "all-reduce (tied wte grads, first + last stage)";
    c->bytes = rows * e->job.model.d_model * (double)sizes_reduce_elem_bytes(e->sizes);
    c->calls = 1;
    finish(e, c, crosses(e, rank_at(e, 0, 0, 0), rank_at(e, par->pp - 1, 0, 0)), 2.0);
}

/* This rank's k and v of one micro-batch (what one ring step sends): its
 * tokens' rows of k then v for its kv heads (dt_kv_cols: 2 x kv heads x head
 * size, GQA's fewer), in the activations' type; their gradient travels in fp32
 * (cp.c). */
static double cp_kv_elems(const plan_estimate *e)
{
    const job_spec *j = &e->job;
    int tp = j->parallel.tp;
    return (double)j->train.micro_batch * (j->model.seq_len / j->parallel.cp) *
           dt_kv_cols(j->model.d_model / tp, j->model.n_head / tp, model_kv_heads_local(&j->model, tp));
}

double plan_cp_kv_bytes(const plan_estimate *e)
{
    return cp_kv_elems(e) * (double)sizes_param_elem_bytes(e->sizes);
}

double plan_cp_dkv_bytes(const plan_estimate *e)
{
    return cp_kv_elems(e) * sizeof(float);
}

static void cp_volume(const plan_estimate *e, int p, const stage_shape *sh, plan_stage *st)
{
    const job_parallel *par = &e->job.parallel;
    int cp = par->cp;
    plan_comm *c = &st->comm[GROUP_CP];
    c->size = cp;
    if (cp < 2) return;
    int rc = e->job.train.recompute == RECOMPUTE_BLOCK;
    double kv_sends = (double)(cp - 1) * (rc ? 3 : 2); /* forward, backward (+ the recompute's forward) */
    c->op = "send/recv ring (k, v forward; k, v and their gradients backward)";
    c->bytes = par->microbatches * sh->blocks * (kv_sends * plan_cp_kv_bytes(e) + cp * plan_cp_dkv_bytes(e));
    c->calls = (long)(par->microbatches * sh->blocks * (kv_sends + cp));
    finish(e, c, plan_group_crosses(e, rank_at(e, p, 0, 0), MESH_CP), 1.0);
}

void plan_comm_volume(plan_estimate *e)
{
    for (int p = 0; p < e->n_stages; p++) {
        plan_stage *st = &e->stage[p];
        memset(st->comm, 0, sizeof st->comm);
        stage_shape sh = shape_of(e, p, st->tp_rank);
        dp_volume(e, p, &sh, st);
        tp_volume(e, p, &sh, st);
        pp_volume(e, p, st);
        embed_volume(e, p, st->tp_rank, st);
        cp_volume(e, p, &sh, st);
    }
}
