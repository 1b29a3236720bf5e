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
 *        selective recompute re-runs only the attention core, tp-local; an
 *        MoE block's as many, and [B, T, top_k] floats backward); GPT's
 *        vocab-parallel embedding and head add one each and three small ones
 *        (of [N] floats, once per microbatch however many chunks of rows the
 *        head computes: tp.c).
 *        Sequence parallel: all-gathers and reduce-scatters of [B, T, C] instead,
 *        per block 4 forward, 6 backward (the layernorm outputs are gathered
 *        again), 3 more with recompute (an MoE block as many); GPT's embedding and head one each way,
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
 *   ep   expert parallel's all-to-all (parallel.ep), per MoE block and
 *        microbatch: the dispatch sends each routed row (sizes_moe_routed_rows:
 *        top_k choices per row, the even load of a balanced router; dropless
 *        routing sends more to a busy expert's rank in a real step) to its
 *        expert's rank and the combine brings the outputs back, (ep - 1) / ep
 *        of them leaving the rank; backward the same two of their gradients;
 *        block recompute's forward runs the pair again. Under tp each tp
 *        rank sends its 1/tp share (ep.c), the tp group summing the shares
 *        (tp's entry). All in the
 *        activations' type, as the tp collectives carry them (tp.h). Its peers on the rank's node go over the node's link,
 *        the others over the inter-node one, at the same time.
 *   edp  the routed experts' gradients (parallel.ep > 1): reduced as dp's are
 *        (the mode's collectives), over the experts' data-parallel group of dp
 *        x cp / ep ranks instead of dp x cp (dp's entry then carries the
 *        rest). Under tp each rank holds its columns of every expert, whose
 *        gradients are complete there (every tp rank routes the same rows).
 * Activations and their gradients travel at the working precision (bf16 under
 * mixed precision: tp.h), the head's statistics and layernorm gradients fp32;
 * gradients at parallel.reduce_dtype (fp32 with train.grad_dtype fp32 unless it
 * says bf16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/model.h"
#include "runtime/plan/estimate.h"

typedef struct {
    double params, grads;   /* bytes of the full tp-local stage: params, gradients as reduced */
    double frozen;          /* train.lora's frozen base: FSDP gathers it, nobody reduces it */
    double exp_params, exp_grads; /* of which edp's (plan_edp_numel), with parallel.ep > 1 */
    double exp_dense;       /* of those (sharded modes), the expert units' dense part, bytes as reduced */
    int units, blocks, has_emb, has_head;
    int moe_blocks;         /* of the blocks, MoE ones (model.moe) */
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
            if (sizes_ep(s) > 1) {
                double x = plan_edp_numel(e, u, tp_rank), routed = (double)sizes_unit_expert_numel(s, u, tp_rank);
                sh.exp_params += x * (double)sizes_param_elem_bytes(s);
                sh.exp_grads += x * (double)sizes_reduce_elem_bytes(s);
                if (x > routed) sh.exp_dense += (x - routed) * (double)sizes_reduce_elem_bytes(s);
            }
            sh.units++;
            if (u == 0) sh.has_emb = 1;
            else if (u <= L) sh.blocks++, sh.moe_blocks += job_moe_block(&e->job.model, u - 1);
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

/* The mode's collectives of `params` and `grads` bytes over a group of n
 * ranks (dp's, or the experts' edp), op and volume into c (its link is the
 * caller's). */
/* frozen: train.lora's frozen base, which FSDP gathers and nobody reduces */
static void shard_collectives(const plan_estimate *e, plan_comm *c, int n, double params, double frozen, double grads,
                              long buckets, int units)
{
    const job_parallel *par = &e->job.parallel;
    int m = par->microbatches;
    double f = (double)(n - 1) / n;
    switch (par->mode) {
    case SHARD_NONE:
        c->op = "all-reduce (grads)";
        c->bytes = 2 * f * grads;
        c->calls = buckets;
        break;
    case SHARD_ZERO1:
        c->op = "reduce-scatter (grads) + all-gather (params)";
        c->bytes = f * (grads + params);
        c->calls = buckets + units;
        break;
    case SHARD_ZERO2:
        c->op = "reduce-scatter (grads, every microbatch) + all-gather (params)";
        c->bytes = f * (m * grads + params);
        c->calls = (long)(m + 1) * units;
        break;
    default: /* fsdp, hsdp's shard group */
        c->op = "all-gather (params, forward + backward) + reduce-scatter (grads), every microbatch";
        c->bytes = m * f * (2 * (params + frozen) + grads);
        c->calls = 3L * m * units;
        break;
    }
}

/* Latency-bound steps of one call of the mode's collectives over n ranks. */
static double shard_steps(const plan_estimate *e, int n)
{
    return e->job.parallel.mode == SHARD_NONE ? 2.0 * (n - 1) : n - 1;
}

static void dp_volume(const plan_estimate *e, int p, const stage_shape *sh, plan_stage *st)
{
    const job_parallel *par = &e->job.parallel;
    plan_comm *c = &st->comm[GROUP_DP];
    int n = sizes_shard_group(e->sizes, SHARD_OF_OPTIM);
    if (par->mode == SHARD_NONE) n = sizes_grad_dp(e->sizes);
    c->size = n;
    mesh_dim dpg = par->cp > 1 ? MESH_DP_CP : MESH_DP; /* cp folds into the gradient reduction */
    /* the routed experts' part goes to edp (edp_volume) */
    double params = sh->params - sh->exp_params, grads = sh->grads - sh->exp_grads;
    if (n > 1) {
        long buckets = sizes_bucket_count(e->sizes, (sizes_at){0, p, st->tp_rank});
        shard_collectives(e, c, n, params, sh->frozen, grads, buckets, sh->units);
        if (par->mode == SHARD_FSDP || par->mode == SHARD_HSDP)
            finish(e, c, crosses(e, rank_at_g(e, p, 0, 0), rank_at_g(e, p, n - 1, par->tp - 1)), n - 1);
        else
            finish(e, c, plan_group_crosses(e, rank_at(e, p, 0, 0), dpg), shard_steps(e, n));
    }
    if (par->mode != SHARD_HSDP) return;
    plan_comm *r = &st->comm[GROUP_DP_REPLICA];
    int R = sizes_grad_dp(e->sizes) / n;
    r->size = R;
    if (R < 2) return;
    r->op = "all-reduce (grad shard)";
    r->bytes = 2.0 * (R - 1) / R * grads / n;
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
    /* an MoE block's MLP splits over tp as a dense one does (moe.c: its
     * input gathered once, its experts' and shared experts' outputs summed
     * once, the mirror in backward), plus the sum of the choices' weight
     * gradients, [N, top_k] floats, in backward */
    int rc_blk = e->job.train.recompute == RECOMPUTE_BLOCK;
    double big = (4.0 + 2.0 * rc_blk) * sh->blocks, tiny = (double)md->moe.top_k * sh->moe_blocks;
    double tiny_calls = sh->moe_blocks;
    if (job_model_is_lm(md)) {
        big += sh->has_emb + sh->has_head; /* embedding forward, head's input gradient */
        if (sh->has_head) {
            /* max, sum of exp, target logit: [N] floats each, one call each
             * after the last chunk of rows (tp.c's chunked head combines its
             * chunks' local statistics by the online softmax's rule) */
            tiny += 3;
            tiny_calls += 3;
        }
    }
    /* expert parallelism (ep.c): each tp rank sends its share of the rows,
     * the tp group exchanges the shares: per MoE block and micro-batch the
     * experts' rows all-gathered and their outputs reduce-scattered (the
     * activations' type; again under block recompute), their gradients the
     * same way (bf16 under mixed precision, as every tp collective): half an
     * all-reduce each (counted as such below) */
    double exp_bytes = 0, exp_calls = 0;
    if (sizes_ep(e->sizes) > 1 && sh->moe_blocks > 0) {
        double rows = sizes_moe_routed_rows(md, e->job.train.micro_batch, t, par->sequence_parallel, par->cp);
        double C = md->d_model, el = (double)sizes_param_elem_bytes(e->sizes);
        exp_bytes = sh->moe_blocks * rows * C * (2.0 * (1.0 + rc_blk) * el + 2.0 * el) / 2.0;
        exp_calls = sh->moe_blocks * (4.0 + 2.0 * rc_blk);
    }
    tiny_calls += exp_calls;
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
        c->bytes = par->microbatches * (f / 2 * halves * act + f * (tiny * small + ln + exp_bytes));
        c->calls = (long)par->microbatches * (long)(halves + tiny_calls + ln_calls);
        /* a ring all-gather or reduce-scatter takes t - 1 steps, an all-reduce 2(t - 1) */
        double steps = (halves * (t - 1) + (tiny_calls + ln_calls) * 2.0 * (t - 1)) / (halves + tiny_calls + ln_calls);
        finish(e, c, crosses_tp, steps);
        return;
    }
    c->op = "all-reduce (activations)";
    c->bytes = par->microbatches * f * (big * act + tiny * small + exp_bytes);
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

double plan_edp_numel(const plan_estimate *e, int unit, int tp_rank)
{
    const sizes *s = e->sizes;
    if (!sizes_expert_unit(s, unit)) return 0;
    return e->job.parallel.mode == SHARD_NONE ? (double)sizes_unit_expert_numel(s, unit, tp_rank)
                                              : (double)sizes_unit_numel(s, unit, tp_rank);
}

int plan_edp_group(const plan_estimate *e)
{
    int dense = e->job.parallel.mode == SHARD_NONE ? sizes_grad_dp(e->sizes)
                                                   : sizes_shard_group(e->sizes, SHARD_OF_OPTIM);
    return dense > 1 ? sizes_expert_dp(e->sizes) : 1;
}

static void edp_volume(const plan_estimate *e, int p, const stage_shape *sh, plan_stage *st)
{
    const job_parallel *par = &e->job.parallel;
    plan_comm *c = &st->comm[GROUP_EDP];
    int n = plan_edp_group(e), ep = sizes_ep(e->sizes);
    c->size = n;
    if (ep < 2 || sh->exp_grads <= 0) return;
    if (n > 1) {
        /* one bucket per unit's experts at most: they are reduced unit by unit */
        long buckets = par->mode == SHARD_NONE || par->mode == SHARD_ZERO1 ? sh->moe_blocks : 0;
        shard_collectives(e, c, n, sh->exp_params, 0, sh->exp_grads, buckets, sh->moe_blocks);
        finish(e, c, plan_group_crosses(e, rank_at(e, p, 0, 0), MESH_EDP), shard_steps(e, n));
    }
    if (sh->exp_dense > 0 && n > 1) {
        /* sharded: the expert units' dense shard, repeated on the ep ranks,
         * summed over ep once a step (strategy.h strat_ep_dense_sum) */
        double bytes = 2.0 * (ep - 1) / ep * sh->exp_dense / n;
        int off = plan_group_crosses(e, rank_at(e, p, 0, 0), MESH_EP);
        c->op = "the mode's collectives + all-reduce over ep (the expert units' dense gradient shard)";
        c->bytes += bytes;
        c->calls += sh->moe_blocks;
        c->time += bytes / (off ? e->hw.inter_bw : e->hw.intra_bw) +
                   sh->moe_blocks * 2.0 * (ep - 1) * (off ? e->hw.inter_latency : e->hw.intra_latency);
    }
}

/* The all-to-all's peers of pp rank p's first ep group off its node. */
static int ep_peers_off_node(const plan_estimate *e, int p)
{
    int *g = malloc((size_t)e->world * sizeof *g), off = 0;
    if (!g) return 0;
    int me = rank_at(e, p, 0, 0), n = mesh_group(&e->mesh, me, MESH_EP, g);
    for (int i = 0; i < n; i++) off += crosses(e, me, g[i]);
    free(g);
    return off;
}

double plan_ep_a2a_bytes(const plan_estimate *e)
{
    int ep = sizes_ep(e->sizes);
    const job_spec *j = &e->job;
    const job_parallel *par = &j->parallel;
    /* a tp rank sends its share of the rows (ep.c) */
    double rows = sizes_moe_routed_rows(&j->model, j->train.micro_batch, par->tp,
                                        par->sequence_parallel && par->tp > 1, par->cp) / par->tp;
    double elem = (double)sizes_param_elem_bytes(e->sizes);
    return ep > 1 ? rows * j->model.d_model * elem * (ep - 1) / ep : 0;
}

/* Each peer gets 1 / (ep - 1) of what leaves: the node's over its link, the
 * rest over the inter-node one, at once; then a message per peer. */
double plan_ep_a2a_time(const plan_estimate *e, const plan_comm *c)
{
    int ep = sizes_ep(e->sizes), off = c->peers_off_node;
    if (ep < 2) return 0;
    double b = plan_ep_a2a_bytes(e), per = b / (ep - 1);
    double t_in = per * (ep - 1 - off) / e->hw.intra_bw, t_out = off ? per * off / e->hw.inter_bw : 0;
    return (t_in > t_out ? t_in : t_out) + (ep - 1) * (off ? e->hw.inter_latency : e->hw.intra_latency);
}

static void ep_volume(const plan_estimate *e, int p, const stage_shape *sh, plan_stage *st)
{
    const job_parallel *par = &e->job.parallel;
    plan_comm *c = &st->comm[GROUP_EP];
    int ep = sizes_ep(e->sizes);
    c->size = ep;
    if (ep < 2 || sh->moe_blocks == 0) return;
    double pairs = e->job.train.recompute == RECOMPUTE_BLOCK ? 3 : 2; /* recompute dispatches again */
    double per_block = 2 * pairs * plan_ep_a2a_bytes(e);
    c->op = "all-to-all (routed tokens: dispatch + combine, forward and backward)";
    c->peers_off_node = ep_peers_off_node(e, p);
    c->inter_node = c->peers_off_node > 0;
    c->bandwidth = c->inter_node ? e->hw.inter_bw : e->hw.intra_bw;
    long per = (long)par->microbatches * sh->moe_blocks;
    c->bytes = (double)per * per_block;
    c->calls = per * (long)(2 * pairs);
    c->time = (double)per * 2 * pairs * plan_ep_a2a_time(e, c);
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
        ep_volume(e, p, &sh, st);
        edp_volume(e, p, &sh, st);
    }
}
