/* step_time.c — how long one optimizer step takes, and why.
 *
 *   step = pipeline makespan + max over stages (exposed once-per-step comm + AdamW)
 *
 * Compute. Each chunk's forward and backward cost its GEMMs, each at the fraction
 * of peak that its smallest dimension reaches (sizes_unit_work_of says which
 * GEMMs a unit runs and their shapes on a tp rank; the hardware profile's
 * gemm_efficiency table says how fast such a GEMM runs), plus its memory-bound
 * ops (norms, softmax, GELU, residual adds) at the profile's memory bandwidth.
 * So a wider model, or a smaller tp, runs closer to peak, and the attention core
 * (head-sized GEMMs, s^2 softmax traffic) weighs on small models: the MFU trend
 * across model sizes of the published tables (test_published.c).
 *
 * The makespan is pp_sim_run on the very schedule the engine executes, with each
 * chunk's forward and backward cost (ZB-H1: the backward's B and W, W being the
 * blocks' weight-gradient GEMMs) = its compute + its tensor-parallel
 * collectives (on the critical path as the tp layers issue them, but for the
 * column layers' backward, runtime/parallel/tp.c: there the input's gather
 * (SP) runs beside the input-gradient GEMM and the input gradient's sum beside
 * the weight-gradient GEMM, so each costs only what its GEMM does not cover;
 * not with parallel.tp_overlap off, nor under ZB-H1, whose B pass has no
 * weight gradient to hide behind; and under SP with parallel.tp_split > 1
 * for the forward's: a column
 * layer's gather runs beside the GEMM of its own rows, 1/tp of the GEMM, and
 * a row layer's reduce-scatter in parallel.tp_split pieces, each beside the next
 * piece's share of the GEMM, the last piece exposed and each piece paying
 * the ring's latency again; the recompute's forward is counted in line)
 * + the part of FSDP's gathers / ZeRO-2's reduce-scatters that
 * the unit's compute cannot hide (at least one unit's worth: the first gather has
 * nothing to overlap with); pipeline sends cost a p2p message between dependent
 * actions. Its idle share is the bubble ((p - 1) / (m v) with equal chunks and no
 * p2p, more when the head makes the last chunk longer). With pp = 1 it is
 * m x (forward + backward).
 *
 * Once-per-step gradient traffic (DDP, ZeRO-1, HSDP's replica all-reduce) overlaps
 * the last microbatch's backward bucket by bucket: exposed is what exceeds that
 * backward, and never less than the last bucket. Its volume is in
 * parallel.reduce_dtype. ZeRO's parameter all-gather and the tied-embedding
 * all-reduce run after backward, fully exposed. The AdamW step is memory bound
 * (adam_bytes_per_elem); offloaded (train.offload: optimizer) it runs at the
 * host's memory bandwidth with an fp32 master, after the gradients crossed the
 * host link and before the parameters cross back, one after the other, as
 * optim.c does them (offload_step_s). With train.offload: params the
 * parameters stay on the host (the step writes them there) and each unit's
 * shard crosses the host link before its gather instead, in forward and again
 * in backward: fsdp.c copies it before it starts the gather, so the chunk's
 * compute waits for it. With train.offload: activations the block inputs a
 * micro-batch keeps cross the host link the same way, out in forward and back
 * in backward.
 *
 * Context parallelism (cp ranks): every rank computes 1/cp of each micro-batch's
 * work (its tokens' matmuls, its share of the load-balanced causal attention),
 * its tp traffic is that of its tokens, and per block its ring sends k and v
 * (its kv heads: GQA sends fewer) cp - 1 times in forward, overlapped with that
 * block's compute (exposed: what exceeds it), and in backward k and v again
 * (overlapped) plus their fp32 gradient cp times after each step's compute
 * (exposed, as cp.c waits for it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/model.h"
#include "runtime/plan/estimate.h"

#define MS 1e3 /* the simulation runs in milliseconds so its picture reads in ms */

/* The AdamW step moves, per element of its shard: the gradient read, m and v
 * read and written (16), the fp32 master read and written (8) and the working
 * copy written, or without a master the fp32 parameter read and written (8). */
static double adam_bytes_per_elem(const plan_estimate *e)
{
    double ge = (double)sizes_grad_elem_bytes(e->sizes), pe = (double)sizes_param_elem_bytes(e->sizes);
    return e->mixed ? ge + 16 + 8 + pe : ge + 16 + 8;
}

typedef struct {
    double fwd, bwd;           /* one microbatch, with tp and exposed sharding comm */
    double bwd_w;              /* of bwd, the weight-gradient GEMMs a zero-bubble W pass runs */
    double fwd_flop, bwd_flop; /* s: compute alone (GEMMs + memory-bound ops) */
    double fwd_count, bwd_count; /* FLOPs executed (this tp rank) */
    double tp, shard;          /* of which tp all-reduces, exposed FSDP / ZeRO-2 traffic */
    double shard_edp;          /* of shard, the experts' data-parallel group's share */
    double cp;                 /* exposed context-parallel ring traffic */
    double ep;                 /* expert parallelism's all-to-alls (all exposed) */
    double params, grads;      /* bytes of the tp-local chunk */
    double frozen;             /* train.lora's frozen base: FSDP gathers it, nobody reduces it */
    double exp_params, exp_grads; /* of which edp's (plan_edp_numel, parallel.ep > 1) */
    int units, moe_units;
} chunk_cost;

/* Per rank: a GPU has its own; the CPU backend's ranks share the host. */
static double per_rank(const plan_estimate *e, double host_value)
{
    return e->hw.gpu ? host_value : host_value / e->ranks_per_node;
}

/* Offload: per element of the shard, the gradient to the host and the
 * parameter back (the host link, one direction each) and AdamW on the host
 * with an fp32 master (g 4 + m, v 16 + master 8 + the parameter written). */
static double offload_step_s(const plan_estimate *e, double elems)
{
    double ge = (double)sizes_grad_elem_bytes(e->sizes), pe = (double)sizes_param_elem_bytes(e->sizes);
    double link = per_rank(e, e->hw.host_link_bw), host = per_rank(e, e->hw.host_memory_bw) * e->hw.memory_eff;
    double back = e->job.train.offload & OFFLOAD_PARAMS ? 0 : pe; /* the parameters stay on the host */
    return elems * (ge + back) / link + elems * (4 + 16 + 8 + pe) / host;
}

static double ring_time(double bytes, double bw, double lat, int steps)
{
    return bytes / bw + steps * lat;
}

static double link_latency(const plan_estimate *e, const plan_comm *c)
{
    return c->inter_node ? e->hw.inter_latency : e->hw.intra_latency;
}

/* The attention core computed blockwise (fused attention, or the cp ring:
 * model_attention_lse) runs other FLOPs than the model counts: a causal
 * model's tiles past the diagonal are skipped, (seq + 1) / (2 seq) of the
 * score-value pairs (cp: each rank's load-balanced share of the same), and
 * the backward computes the scores again (a fifth product beside the four:
 * 2.5x the forward where the model counts 2x). Its rate: the profile's
 * attention_efficiency at the keys one call sees, else a GEMM whose smallest
 * dimension is the head size. The materialised (naive) attention computes
 * every pair and keeps its probabilities: the model's count, at the GEMM rate. */
static void attention_time(const plan_estimate *e, const sizes_gemm *g, double *fwd, double *bwd)
{
    const job_model *md = &e->job.model;
    double rate = e->peak * hw_gemm_efficiency(&e->hw, g->dim);
    if (!model_attention_lse(md, e->job.parallel.cp)) {
        *fwd += g->fwd_flops / rate;
        *bwd += g->bwd_flops / rate;
        return;
    }
    double seq = model_seq_len(md), share = job_model_is_lm(md) ? (seq + 1.0) / (2.0 * seq) : 1.0;
    double eff = hw_attention_efficiency(&e->hw, g->keys);
    if (eff > 0) rate = e->peak * eff;
    *fwd += share * g->fwd_flops / rate;
    *bwd += share * (g->bwd_flops + 0.5 * g->fwd_flops) / rate;
}

/* Seconds of one micro-batch's work on this rank: every GEMM at the fraction of
 * peak its smallest dimension reaches (the profile's gemm_efficiency), the
 * attention core as attention_time says, the memory-bound ops at the profile's
 * memory bandwidth. FLOPs are counted as the model counts them. */
static void work_time(const plan_estimate *e, const sizes_unit_work *w, double *fwd, double *bwd, double *fwd_fl,
                      double *bwd_fl, double *bwd_w)
{
    double bw = per_rank(e, e->hw.memory_bw) * e->hw.memory_eff;
    for (int i = 0; i < w->n_gemm; i++) {
        const sizes_gemm *g = &w->gemm[i];
        if (g->attention) {
            attention_time(e, g, fwd, bwd);
        } else {
            double rate = e->peak * hw_gemm_efficiency(&e->hw, g->dim);
            *fwd += g->fwd_flops / rate;
            *bwd += g->bwd_flops / rate;
            *bwd_w += g->w_flops / rate;
        }
        *fwd_fl += g->fwd_flops;
        *bwd_fl += g->bwd_flops;
    }
    *fwd += w->fwd_bytes / bw;
    *bwd += w->bwd_bytes / bw;
}

/* FSDP / ZeRO-2 traffic of `units` units of params and grads bytes over a
 * shard group of n: their all-gathers and reduce-scatters, one per unit. */
static void shard_times(const plan_estimate *e, const plan_comm *c, int n, double params, double grads, int units,
                        double *ag, double *rs)
{
    if (n < 2 || units < 1 || (params <= 0 && grads <= 0)) return;
    double f = (double)(n - 1) / n, lat = link_latency(e, c);
    *ag += units * ring_time(f * params / units, c->bandwidth, lat, n - 1);
    *rs += units * ring_time(f * grads / units, c->bandwidth, lat, n - 1);
}

static chunk_cost cost_of_chunk(const plan_estimate *e, int c)
{
    chunk_cost k;
    memset(&k, 0, sizeof k);
    const job_spec *job = &e->job;
    const job_model *md = &job->model;
    const job_parallel *par = &job->parallel;
    const int *first = sizes_first_unit(e->sizes);
    int p = pp_chunk_rank(c, par->pp), L = md->n_layer;
    const plan_stage *st = &e->stage[p];
    double B = job->train.micro_batch;
    int blocks = 0, moe = 0, emb = 0, head = 0, ep = sizes_ep(e->sizes);
    int sp = par->sequence_parallel && par->tp > 1;
    double elem = (double)sizes_param_elem_bytes(e->sizes);
    /* a block's qkv and fc GEMM, one pass (what a column backward hides behind),
     * and its proj and mproj GEMM (what a row forward's pieces hide behind):
     * [0] of a dense block, [1] of an MoE block (its attention's only: its
     * MLP's collectives wait, moe.c) */
    double col_gemm[2][2] = {{0, 0}, {0, 0}}, row_gemm[2][2] = {{0, 0}, {0, 0}};
    for (int u = first[c]; u < first[c + 1]; u++) {
        sizes_unit_work w;
        sizes_unit_work_ep(md, u, job->train.recompute, (int)B, par->tp, sp, par->cp, ep, elem, &w);
        work_time(e, &w, &k.fwd_flop, &k.bwd_flop, &k.fwd_count, &k.bwd_count, &k.bwd_w);
        int is_moe = u >= 1 && u <= L && job_moe_block(md, u - 1);
        if (u >= 1 && u <= L && w.n_gemm >= 3) /* sizes.c's block order: qkv, proj, fc, mproj, core */
            for (int i = 0; i < (is_moe ? 1 : 2); i++) {
                col_gemm[is_moe][i] = w.gemm[2 * i].fwd_flops /
                                      (e->peak * hw_gemm_efficiency(&e->hw, w.gemm[2 * i].dim));
                row_gemm[is_moe][i] = w.gemm[2 * i + 1].fwd_flops /
                                      (e->peak * hw_gemm_efficiency(&e->hw, w.gemm[2 * i + 1].dim));
            }
        double n = (double)sizes_unit_numel(e->sizes, u, st->tp_rank);
        k.params += n * (double)sizes_param_elem_bytes(e->sizes);
        k.frozen += (double)sizes_unit_frozen_numel(e->sizes, u, st->tp_rank) * (double)sizes_param_elem_bytes(e->sizes);
        k.grads += n * (double)sizes_reduce_elem_bytes(e->sizes);
        if (ep > 1) {
            double x = plan_edp_numel(e, u, st->tp_rank);
            k.exp_params += x * (double)sizes_param_elem_bytes(e->sizes);
            k.exp_grads += x * (double)sizes_reduce_elem_bytes(e->sizes);
        }
        k.units++;
        k.moe_units += is_moe;
        if (u == 0) emb = 1;
        else if (u <= L) blocks++, moe += is_moe;
        else head = 1;
    }
    int dense = blocks - moe, rc_blk = job->train.recompute == RECOMPUTE_BLOCK;
    if (ep > 1 && moe > 0) {
        /* the dispatch and combine wait for their all-to-alls: forward one
         * pair, backward their gradients' pair (and recompute's forward pair) */
        double a2a = plan_ep_a2a_time(e, &st->comm[GROUP_EP]);
        double f = 2.0 * a2a, b = (rc_blk ? 4.0 : 2.0) * a2a;
        k.fwd += moe * f;
        k.bwd += moe * b;
        k.ep = moe * (f + b);
    }
    int cp = par->cp;
    k.fwd += k.fwd_flop;
    k.bwd += k.bwd_flop;
    if (cp > 1 && blocks > 0) {
        const plan_comm *cc = &st->comm[GROUP_CP];
        double kv = ring_time(plan_cp_kv_bytes(e), cc->bandwidth, link_latency(e, cc), 1);
        double dkv = ring_time(plan_cp_dkv_bytes(e), cc->bandwidth, link_latency(e, cc), 1);
        double per_f = k.fwd_flop / k.units, per_b = k.bwd_flop / k.units; /* one unit's compute, about a block's */
        double rf = fmax(0.0, (cp - 1) * kv - per_f);
        double rb = fmax(0.0, (cp - 1) * kv - per_b) + cp * dkv;
        if (job->train.recompute == RECOMPUTE_BLOCK) rb += rf;
        k.fwd += blocks * rf;
        k.bwd += blocks * rb;
        k.cp = blocks * (rf + rb);
    }

    if (par->tp > 1) {
        const plan_comm *tc = &st->comm[GROUP_TP];
        int t = par->tp, gpt = job_model_is_lm(md);
        double tokens = B * model_seq_len(md) / par->cp; /* this rank's */
        double act = tokens * md->d_model * (double)sizes_param_elem_bytes(e->sizes);
        double small = tokens * 4.0, f = 2.0 * (t - 1) / t, lat = link_latency(e, tc);
        /* an MoE block as many as a dense one (moe.c: one gather and one
         * sum each way), and in backward the sum of its choices' weight
         * gradients ([tokens, top_k] floats) */
        double big_f = 2.0 * blocks + (gpt ? emb : 0);
        double big_b = (2.0 + 2.0 * rc_blk) * blocks + (gpt ? head : 0);
        double tiny_f = gpt ? 3.0 * head : 0;
        double tf = big_f * ring_time(f * act, tc->bandwidth, lat, 2 * (t - 1)) +
                    tiny_f * ring_time(f * small, tc->bandwidth, lat, 2 * (t - 1));
        double moe_dw = moe * ring_time(f * small * md->moe.top_k, tc->bandwidth, lat, 2 * (t - 1));
        double tb = big_b * ring_time(f * act, tc->bandwidth, lat, 2 * (t - 1)) + moe_dw;
        /* expert parallelism: the experts' rows' shares over tp (ep.c;
         * comm_volume.c): the rows all-gathered and the outputs
         * reduce-scattered forward (again under block recompute), their
         * gradients the same way backward (bf16 under mixed precision, as
         * every tp collective) */
        double xf = 0, xb = 0;
        if (ep > 1 && moe > 0) {
            double rows = sizes_moe_routed_rows(md, (int)B, t, sp, par->cp) * md->d_model;
            double el = (double)sizes_param_elem_bytes(e->sizes);
            double fx = 2.0 * ring_time(f / 2 * rows * el, tc->bandwidth, lat, t - 1);
            xf = moe * fx;
            xb = moe * (rc_blk * fx + 2.0 * ring_time(f / 2 * rows * el, tc->bandwidth, lat, t - 1));
        }
        if (par->sequence_parallel) {
            /* all-gathers and reduce-scatters instead, half an all-reduce each (what
             * comm_volume.c counts), and the blocks' and GPT head's small all-reduces
             * of layernorm gradients (4 x C floats at most) in backward */
            double half_f = 4.0 * blocks + head + (gpt ? emb : 0);
            double half_b = (6.0 + 3.0 * rc_blk) * blocks + emb + (gpt ? head : 0);
            double ln_b = blocks + (gpt ? head : 0), ln_bytes = (md->kind == MODEL_LLAMA ? 2.0 : 4.0) * md->d_model * 4.0;
            tf = half_f * ring_time(f / 2 * act, tc->bandwidth, lat, t - 1) +
                 tiny_f * ring_time(f * small, tc->bandwidth, lat, 2 * (t - 1));
            tb = half_b * ring_time(f / 2 * act, tc->bandwidth, lat, t - 1) +
                 ln_b * ring_time(f * ln_bytes, tc->bandwidth, lat, 2 * (t - 1)) + moe_dw;
        }
        tf += xf;
        tb += xb;
        /* the column layers' backward collectives, overlapped (tp.c) */
        double hidden[2] = {0, 0}; /* per dense block, per MoE block */
        if (par->tp_overlap && par->pp_schedule != PP_ZB_H1) {
            double whole = ring_time(f * act, tc->bandwidth, lat, 2 * (t - 1));
            double half = ring_time(f / 2 * act, tc->bandwidth, lat, t - 1);
            for (int x = 0; x < 2; x++)
                for (int i = 0; i < 2; i++)
                    hidden[x] += sp ? fmin(half, col_gemm[x][i]) + fmin(half, col_gemm[x][i])
                                    : fmin(whole, col_gemm[x][i]);
        }
        tb -= dense * hidden[0] + moe * hidden[1];
        /* the forward's under SP (tp.c column_any_forward, row_forward): the
         * gather behind the own rows' GEMM; the reduce-scatter's S pieces
         * queue one after the other, the first once the first piece's GEMM
         * is done, so what is left after the GEMM is the last piece, or all
         * pieces less the GEMM's later S - 1 shares when they take longer */
        double hidden_f[2] = {0, 0};
        if (par->tp_overlap && sp && par->tp_split > 1) {
            double half = ring_time(f / 2 * act, tc->bandwidth, lat, t - 1), S = par->tp_split;
            double piece = ring_time(f / 2 * act / S, tc->bandwidth, lat, t - 1);
            for (int x = 0; x < 2; x++)
                for (int i = 0; i < (x ? 1 : 2); i++)
                    hidden_f[x] += fmin(half, col_gemm[x][i] / t) + half -
                                   (S * piece - (S - 1) * fmin(piece, row_gemm[x][i] / S));
        }
        tf -= dense * hidden_f[0] + moe * hidden_f[1];
        k.fwd += tf;
        k.bwd += tb;
        k.tp = tf + tb;
    }

    const plan_comm *dc = &st->comm[GROUP_DP];
    int n = dc->size;
    if (n > 1 && (par->mode == SHARD_FSDP || par->mode == SHARD_HSDP || par->mode == SHARD_ZERO2)) {
        /* the dense part (and LoRA's frozen base, gathered, never reduced)
         * over dp's group, the routed experts over theirs (edp) */
        double ag = 0, rs = 0, ag_e = 0, rs_e = 0;
        shard_times(e, dc, n, k.params - k.exp_params + k.frozen, k.grads - k.exp_grads, k.units, &ag, &rs);
        shard_times(e, &st->comm[GROUP_EDP], plan_edp_group(e), k.exp_params, k.exp_grads, k.moe_units, &ag_e, &rs_e);
        double share_e = ag + rs + ag_e + rs_e > 0 ? (ag_e + rs_e) / (ag + rs + ag_e + rs_e) : 0;
        ag += ag_e, rs += rs_e;
        double xf = 0, xb;
        if (par->mode == SHARD_ZERO2) {
            xb = fmax(rs / k.units, rs - k.bwd_flop);
        } else {
            xf = fmax(ag / k.units, ag - k.fwd_flop);
            xb = fmax(ag / k.units, ag + rs - k.bwd_flop);
        }
        k.fwd += xf;
        k.bwd += xb;
        k.shard = xf + xb;
        k.shard_edp = share_e * k.shard;
    }
    if (job->train.offload & OFFLOAD_PARAMS) {
        int S = sizes_shard_group(e->sizes, SHARD_OF_PARAM);
        double h2d = k.params / S / per_rank(e, e->hw.host_link_bw);
        k.fwd += h2d;
        k.bwd += h2d;
    }
    if (job->train.offload & OFFLOAD_ACTIVATIONS) {
        /* the block inputs a micro-batch keeps cross to the host after their
         * blocks' forward and back before the recompute, synchronously */
        double moved = (double)sizes_chunk_acts(e->sizes, c, st->tp_rank).host / per_rank(e, e->hw.host_link_bw);
        k.fwd += moved;
        k.bwd += moved;
    }
    return k;
}

/* Once-per-step communication of stage p left after the last backward; adds each
 * group's share to its `exposed`. */
static double exposed_once(const plan_estimate *e, plan_stage *st, double params, double grads, double exp_params,
                           double exp_grads, int moe_units, double last_backward)
{
    const job_parallel *par = &e->job.parallel;
    const plan_comm *dc = &st->comm[GROUP_DP];
    double bucket = (double)par->bucket_mb * 1048576.0, exposed = 0;
    int n = dc->size;
    /* the routed experts' part is edp's (below) */
    double all_grads = grads;
    params -= exp_params, grads -= exp_grads;
    if (n > 1) {
        double f = (double)(n - 1) / n, lat = link_latency(e, dc);
        double frac = grads > 0 ? fmin(1.0, bucket / grads) : 0;
        double rs = ring_time(f * grads, dc->bandwidth, lat, n - 1);
        double ag = ring_time(f * params, dc->bandwidth, lat, n - 1);
        switch (par->mode) {
        case SHARD_NONE: exposed = fmax(dc->time * frac, dc->time - last_backward); break;
        case SHARD_ZERO1: exposed = fmax(rs * frac, rs - last_backward) + ag; break;
        case SHARD_ZERO2: exposed = ag; break;
        default: break; /* FSDP's traffic is per microbatch, inside the chunk costs */
        }
        st->comm[GROUP_DP].exposed += exposed;
    }
    plan_comm *rc = &st->comm[GROUP_DP_REPLICA];
    if (rc->size > 1 && rc->op) {
        double frac = grads > 0 ? fmin(1.0, bucket * n / grads) : 0;
        rc->exposed = fmax(rc->time * frac, rc->time - last_backward);
        exposed += rc->exposed;
    }
    /* the experts' gradients overlap what of the last backward dp's left */
    plan_comm *xc = &st->comm[GROUP_EDP];
    if (xc->op) {
        int ne = plan_edp_group(e);
        double left = fmax(0.0, last_backward - (n > 1 ? dc->time : 0.0));
        double frac = all_grads > 0 ? fmin(1.0, bucket / all_grads) : 0, x = 0;
        double ag = ne > 1 ? ring_time((double)(ne - 1) / ne * exp_params, xc->bandwidth, link_latency(e, xc), ne - 1)
                           : 0;
        switch (par->mode) {
        case SHARD_NONE: x = fmax(xc->time * frac, xc->time - left); break;
        case SHARD_ZERO1: x = fmax((xc->time - ag) * frac, xc->time - ag - left) + ag; break;
        case SHARD_ZERO2: x = ag; break;
        default: break; /* FSDP's traffic is per microbatch, inside the chunk costs */
        }
        xc->exposed += x;
        exposed += x;
    }
    plan_comm *ec = &st->comm[GROUP_EMBED];
    if (ec->op) {
        ec->exposed = ec->time;
        exposed += ec->exposed;
    }
    return exposed;
}

/* A lower bound of the pipeline's makespan without simulating it: rank r can
 * compute nothing before micro-batch 0 has gone forward through chunks 0..r-1
 * (each hop a p2p), and after its last backward (of a chunk >= r) the backward
 * must still run down through chunks r-1..0 (ZB-H1: their B's). So makespan >=
 * fill_r + busy_r + drain_r for every rank; with equal chunks and one chunk per rank (GPipe,
 * 1F1B) that is the simulated makespan itself. ZB-H1's W passes (deferred[c],
 * NULL for the others) need not come before the drain: the drain then follows
 * only the rest of the rank's work, and fill_r + busy_r bounds it too. */
static double makespan_bound(const job_parallel *par, const double *fwd, const double *bwd, const double *drain_bwd,
                             const double *deferred, double p2p)
{
    int pp = par->pp, v = par->virtual_stages, m = par->microbatches;
    double fill = 0, drain = 0, bound = 0;
    for (int r = 0; r < pp; r++) {
        double busy = 0, later = 0;
        for (int local = 0; local < v; local++) {
            int c = pp_chunk_id(r, local, pp);
            busy += m * (fwd[c] + bwd[c]);
            if (deferred) later += m * deferred[c];
        }
        double t = fill + busy > fill + busy - later + drain ? fill + busy : fill + busy - later + drain;
        if (t > bound) bound = t;
        fill += fwd[r] + p2p;
        drain += drain_bwd[r] + p2p;
    }
    return bound;
}

int plan_step_time(plan_estimate *e, int simulate, char *err, size_t errlen)
{
    const job_spec *job = &e->job;
    const job_parallel *par = &job->parallel;
    int chunks = sizes_chunks(e->sizes), m = par->microbatches;
    e->peak = per_rank(e, hw_peak(&e->hw, e->mixed));
    if (!(e->peak > 0 && e->hw.achievable > 0)) {
        snprintf(err, errlen, "hardware %s: no peak FLOP/s for %s compute", e->hw.name, e->mixed ? "bf16" : "fp32");
        return -1;
    }
    if (job->train.offload && !(e->hw.host_link_bw > 0 && e->hw.host_memory_bw > 0)) {
        snprintf(err, errlen, "hardware %s: train.offload needs host_link_gbs and host_memory_gbs in the profile "
                              "(%s)", e->hw.name, e->hw.source);
        return -1;
    }
    chunk_cost *k = calloc((size_t)chunks, sizeof *k);
    double *fwd = calloc((size_t)chunks, sizeof *fwd), *bwd = calloc((size_t)chunks, sizeof *bwd);
    double *bwd_b = calloc((size_t)chunks, sizeof *bwd_b), *bwd_w = calloc((size_t)chunks, sizeof *bwd_w);
    if (!k || !fwd || !bwd || !bwd_b || !bwd_w) {
        free(k), free(fwd), free(bwd), free(bwd_b), free(bwd_w);
        snprintf(err, errlen, "estimate: out of memory");
        return -1;
    }
    for (int c = 0; c < chunks; c++) {
        k[c] = cost_of_chunk(e, c);
        fwd[c] = k[c].fwd * MS;
        bwd[c] = k[c].bwd * MS;
        /* ZB-H1: W is the blocks' weight-gradient GEMMs; B the rest, the tp
         * collectives and exposed sharding traffic included */
        bwd_w[c] = k[c].bwd_w * MS;
        bwd_b[c] = bwd[c] - bwd_w[c];
    }
    const job_model *md = &job->model;
    double act = (double)job->train.micro_batch * model_seq_len(md) / par->cp * md->d_model *
                 (double)sizes_param_elem_bytes(e->sizes);
    if (par->sequence_parallel) act /= par->tp; /* a stage sends its tp rank's rows (of its cp rank's tokens) */
    e->p2p = 0;
    int rc = 0;
    if (par->pp > 1) {
        for (int p = 0; p < par->pp; p++) {
            const plan_comm *pc = &e->stage[p].comm[GROUP_PP];
            double t = ring_time(act, pc->bandwidth, link_latency(e, pc), 1);
            if (t > e->p2p) e->p2p = t;
        }
        if (simulate) {
            pp_sim_costs costs = {fwd, bwd, e->p2p * MS, bwd_b, bwd_w};
            /* sizes validated the schedule when it built it */
            rc = pp_sim_run_validated(sizes_schedule(e->sizes), &costs, &e->sim, err, errlen);
            e->has_sim = 1;
            if (rc == 0) {
                e->makespan = e->sim.makespan / MS;
                e->bubble = e->sim.bubble;
            }
        } else {
            /* ZB-H1: only the B's carry the gradient down */
            int zb = par->pp_schedule == PP_ZB_H1;
            e->makespan = makespan_bound(par, fwd, bwd, zb ? bwd_b : bwd, zb ? bwd_w : NULL, e->p2p * MS) / MS;
            e->bubble = 0; /* unknown: only the simulation tells */
        }
    } else {
        e->makespan = m * (k[0].fwd + k[0].bwd);
        e->bubble = 0;
    }
    double tail = 0, eff_rate = 0;
    for (int p = 0; rc == 0 && p < par->pp; p++) {
        plan_stage *st = &e->stage[p];
        double params = 0, grads = 0, exp_params = 0, exp_grads = 0, last_bwd = 0, flops = 0, compute = 0;
        int moe_units = 0;
        for (int g = 0; g < GROUP_COUNT; g++) st->comm[g].exposed = 0;
        for (int local = 0; local < par->virtual_stages; local++) {
            int c = pp_chunk_id(p, local, par->pp);
            params += k[c].params, grads += k[c].grads;
            exp_params += k[c].exp_params, exp_grads += k[c].exp_grads, moe_units += k[c].moe_units;
            last_bwd += k[c].bwd_flop;
            compute += m * (k[c].fwd_flop + k[c].bwd_flop);
            flops += m * (k[c].fwd_count + k[c].bwd_count);
            st->comm[GROUP_TP].exposed += m * k[c].tp;
            st->comm[GROUP_DP].exposed += m * (k[c].shard - k[c].shard_edp);
            st->comm[GROUP_EDP].exposed += m * k[c].shard_edp;
            st->comm[GROUP_CP].exposed += m * k[c].cp;
            st->comm[GROUP_EP].exposed += m * k[c].ep;
        }
        st->flops = flops;
        if (compute > 0 && flops / compute > eff_rate) eff_rate = flops / compute;
        st->compute = compute;
        st->exposed_once = exposed_once(e, st, params, grads, exp_params, exp_grads, moe_units, last_bwd);
        double optim_elems = (double)st->mem.bytes[SIZES_OPTIM] / 8.0;
        st->optimizer = optim_elems * adam_bytes_per_elem(e) / (per_rank(e, e->hw.memory_bw) * e->hw.memory_eff);
        if (job->train.offload & OFFLOAD_OPTIMIZER)
            st->optimizer = offload_step_s(e, (double)(st->mem.host - st->mem.host_params) / 12.0);
        if (st->exposed_once + st->optimizer > tail) tail = st->exposed_once + st->optimizer;
    }
    free(k), free(fwd), free(bwd), free(bwd_b), free(bwd_w);
    if (rc) return -1;
    double G = job->train.global_batch;
    e->model_flops = model_flops_per_sample(md, RECOMPUTE_NONE) * G;
    /* executed: recompute counted, the chunked GPT head's second logits GEMM
     * too; selective recompute redoes nothing where the attention keeps only lse */
    e->exec_flops = model_exec_flops_per_sample(md, model_attention_lse(md, par->cp) &&
                                                            job->train.recompute == RECOMPUTE_SELECTIVE
                                                        ? RECOMPUTE_NONE : job->train.recompute) * G;
    e->step_time = e->makespan + tail;
    e->compute_eff = e->peak > 0 ? eff_rate / e->peak : 0;
    double capacity = e->step_time * e->world * e->peak;
    e->mfu = capacity > 0 ? e->model_flops / capacity : 0;
    e->hfu = capacity > 0 ? e->exec_flops / capacity : 0;
    e->samples_per_s = e->step_time > 0 ? G / e->step_time : 0;
    e->tokens_per_s = e->samples_per_s * model_seq_len(md);
    return 0;
}
