/* dryrun.c — `dtrun --dry-run`: resolve the machine, estimate, print the report
 * (text here, JSON in dryrun_json.c). Layout of the text: man/dtrun-dryrun.txt. */
#include <stdio.h>
#include <string.h>

#include "runtime/model/model.h"
#include "runtime/plan/dryrun_report.h"
#include "runtime/plan/format.h"
#include "runtime/plan/machine.h"

const char *plan_group_name(plan_group g)
{
    static const char *const names[GROUP_COUNT] = {"dp", "dp-replica", "tp", "pp", "embed", "cp", "ep", "edp"};
    return g >= 0 && g < GROUP_COUNT ? names[g] : "?";
}

/* "0-20" or, interleaved, "0-10,41-50": the units pp rank p holds. */
void plan_stage_units(const plan_estimate *e, int p, char *out, size_t n)
{
    const int *first = sizes_first_unit(e->sizes);
    size_t at = 0;
    out[0] = 0;
    for (int local = 0; local < e->job.parallel.virtual_stages && at < n; local++) {
        int c = pp_chunk_id(p, local, e->job.parallel.pp);
        at += (size_t)snprintf(out + at, n - at, "%s%d-%d", local ? "," : "", first[c], first[c + 1] - 1);
    }
}

void plan_headroom_text(const hw_profile *hw, double device, char *out, size_t n)
{
    char a[FMT_LEN], b[FMT_LEN], origin[HW_TEXT_MAX + 64];
    double room = hw_headroom(hw, device);
    hw_headroom_origin(hw, origin, sizeof origin);
    snprintf(out, n, "%s free on each rank, %.3g %% of its %s (%s)", fmt_bytes(a, room),
             device > 0 ? 100 * room / device : 0.0, fmt_bytes(b, device), origin);
}

static void print_header(const plan_estimate *e, const plan_machine *pm, FILE *out)
{
    const job_spec *job = &e->job;
    const job_model *m = &job->model;
    const job_parallel *par = &job->parallel;
    char a[FMT_LEN], b[FMT_LEN], c[FMT_LEN], d[FMT_LEN];
    size_t distinct, held = sizes_model_numel(m, &distinct);
    fprintf(out, "dtrun dry-run: %s (nothing is started; GB = 1e9 bytes)\n\n", job->path[0] ? job->path : "job");
    if (m->kind == MODEL_GPT)
        fprintf(out, "model      gpt%s%s: %d layers, d_model %d, %d heads, d_ff %d, vocab %d, seq %d\n",
                m->preset[0] ? " " : "", m->preset, m->n_layer, m->d_model, m->n_head, m->d_ff, m->vocab_size,
                m->seq_len);
    else if (m->kind == MODEL_LLAMA)
        fprintf(out, "model      llama%s%s: %d layers, d_model %d, %d heads (%d kv), d_ff %d (SwiGLU), vocab %d, seq %d, "
                     "%s head\n",
                m->preset[0] ? " " : "", m->preset, m->n_layer, m->d_model, m->n_head, job_model_kv_heads(m), m->d_ff,
                m->vocab_size, m->seq_len, job_model_tied_head(m) ? "tied" : "untied");
    else
        fprintf(out, "model      vit%s%s: %d layers, d_model %d, %d heads, d_ff %d, image %d, patch %d, %d classes\n",
                m->preset[0] ? " " : "", m->preset, m->n_layer, m->d_model, m->n_head, m->d_ff, m->image_size,
                m->patch_size, m->n_classes);
    char active[160] = "";
    if (m->moe.experts > 0) {
        const job_moe *x = &m->moe;
        int moe = job_moe_layers(m);
        char shared[48] = "";
        if (x->shared_experts) snprintf(shared, sizeof shared, ", %d shared", x->shared_experts);
        snprintf(active, sizeof active, ", %s active per token (%d experts of d_ff %d, top-%d%s, %s router; %d of %d "
                                        "blocks MoE)",
                 fmt_count(c, (double)sizes_model_active_numel(m)), x->experts, x->d_ff_expert, x->top_k, shared,
                 job_router_name(x->router), moe, m->n_layer);
    }
    if (held != distinct)
        fprintf(out, "           %s parameters%s (%s held: the LM head keeps its own copy of the tied wte)\n",
                fmt_count(a, (double)distinct), active, fmt_count(b, (double)held));
    else
        fprintf(out, "           %s parameters%s\n", fmt_count(a, (double)distinct), active);
    if (job_lora_on(m)) { /* train.lora: what trains, what stays */
        size_t frozen = sizes_model_frozen_numel(m);
        char t[160] = "";
        for (int i = 0, n = 0; i < LORA_N_TARGETS; i++)
            if (m->lora.targets >> i & 1)
                n += snprintf(t + n, sizeof t - (size_t)n, "%s%s", n ? ", " : "", job_lora_target_name(i));
        fprintf(out, "lora       %s trainable (rank %d, alpha %g on %s), %s frozen: no gradients, no optimizer "
                     "state\n",
                fmt_count(a, (double)(held - frozen)), m->lora.rank, m->lora.alpha, t, fmt_count(b, (double)frozen));
    }
    fprintf(out, "batch      global %d = micro_batch %d x dp %d x microbatches %d; %s\n", job->train.global_batch,
            job->train.micro_batch, par->dp, par->microbatches,
            !e->mixed                                    ? "fp32"
            : sizes_grad_elem_bytes(e->sizes) == 4 ? "bf16 mixed precision (fp32 master weights, fp32 gradients)"
                                                   : "bf16 mixed precision (fp32 master weights)");
    char cp[96] = "";
    if (par->cp > 1) snprintf(cp, sizeof cp, " x cp %d (%s)", par->cp, job_cp_mode_name(par->cp_mode));
    if (sizes_ep(e->sizes) > 1)
        snprintf(cp + strlen(cp), sizeof cp - strlen(cp), " (ep %d folded into dp x cp)", sizes_ep(e->sizes));
    fprintf(out, "layout     dp %d x tp %d x pp %d%s = %d ranks on %d node%s x %d; mode %s; ", par->dp, par->tp, par->pp,
            cp, e->world, e->nnodes, e->nnodes == 1 ? "" : "s", e->ranks_per_node, job_shard_mode_name(par->mode));
    if (par->pp > 1) fprintf(out, "schedule %s", job_pp_schedule_name(par->pp_schedule));
    if (par->virtual_stages > 1) fprintf(out, " x %d virtual stages", par->virtual_stages);
    fprintf(out, "%srecompute %s%s\n", par->pp > 1 ? "; " : "", job_recompute_name(job->train.recompute),
            par->sequence_parallel ? "; sequence parallel" : "");
    const hw_profile *hw = &e->hw;
    fprintf(out, "hardware   %s%s: %s peak %.4g TFLOP/s, GEMMs at %.2f-%.2f of it by shape, memory %s at %s/s, links "
                 "%s/s in a node, %s/s across\n",
            hw->name, pm->hw_defaulted ? " (default; --hardware NAME to choose)" : "", e->mixed ? "bf16" : "fp32",
            hw_peak(hw, e->mixed) / 1e12, hw->gemm_eff[0], hw->achievable, fmt_bytes(a, hw->memory),
            fmt_bytes(b, hw->memory_bw),
            fmt_bytes(c, hw->intra_bw), fmt_bytes(d, hw->inter_bw));
}

static void range_text(char *out, size_t n, int lo, int hi)
{
    if (lo == hi) snprintf(out, n, "%d", lo);
    else snprintf(out, n, "%d-%d", lo, hi);
}

static void print_mesh(const plan_estimate *e, FILE *out)
{
    const mesh *m = &e->mesh;
    int cp = m->cp > 1;
    if (cp)
        fprintf(out, "\nmesh: rank = ((pp_i x dp + dp_i) x cp + cp_i) x tp + tp_i (tp fastest, then cp); node = rank / %d\n",
                e->ranks_per_node);
    else
        fprintf(out, "\nmesh: rank = (pp_i x dp + dp_i) x tp + tp_i (tp fastest); node = rank / %d\n", e->ranks_per_node);
    if (e->world <= 16) {
        for (int r = 0; r < e->world; r++) {
            mesh_coord c = mesh_coords(m, r);
            char cpc[16] = "", epc[32] = "";
            if (cp) snprintf(cpc, sizeof cpc, "cp %-3d ", c.cp);
            if (m->ep > 1) snprintf(epc, sizeof epc, "  ep %-3d edp %d", c.ep, c.edp);
            fprintf(out, "  rank %-3d node %-3d local %-3d  dp %-3d %spp %-3d tp %d%s\n", r, plan_node_of(e, r),
                    r % e->ranks_per_node, c.dp, cpc, c.pp, c.tp, epc);
        }
        return;
    }
    int nodes = (e->world + e->ranks_per_node - 1) / e->ranks_per_node;
    for (int n = 0; n < nodes; n++) {
        int lo = n * e->ranks_per_node, hi = lo + e->ranks_per_node - 1;
        if (hi >= e->world) hi = e->world - 1;
        mesh_coord mn = mesh_coords(m, lo), mx = mn;
        for (int r = lo; r <= hi; r++) {
            mesh_coord c = mesh_coords(m, r);
            if (c.dp < mn.dp) mn.dp = c.dp;
            if (c.pp < mn.pp) mn.pp = c.pp;
            if (c.tp < mn.tp) mn.tp = c.tp;
            if (c.dp > mx.dp) mx.dp = c.dp;
            if (c.pp > mx.pp) mx.pp = c.pp;
            if (c.tp > mx.tp) mx.tp = c.tp;
        }
        char dp[24], pp[24], tp[24];
        range_text(dp, sizeof dp, mn.dp, mx.dp);
        range_text(pp, sizeof pp, mn.pp, mx.pp);
        range_text(tp, sizeof tp, mn.tp, mx.tp);
        fprintf(out, "  node %-3d ranks %4d-%-4d  dp %-9s pp %-9s tp %s\n", n, lo, hi, dp, pp, tp);
    }
}

static void print_memory(const plan_estimate *e, FILE *out)
{
    char v[FMT_LEN];
    fprintf(out, "\nmemory per rank (dp rank 0 holds the largest shard; each pipeline stage differs; units: 0 = "
                 "embedding, 1-%d blocks, %d head)\n",
            e->job.model.n_layer, e->job.model.n_layer + 1);
    fprintf(out, "  %-6s %-12s", "stage", "units");
    static const char *const short_name[SIZES_COUNT] = {"params", "master", "grads", "optim",
                                                         "acts", "logits", "comm", "workspace"};
    for (int c = 0; c < SIZES_COUNT; c++) fprintf(out, " %9s", short_name[c]);
    fprintf(out, " %9s %9s %9s\n", "fixed", "total", "device");
    for (int p = 0; p < e->n_stages; p++) {
        const plan_stage *st = &e->stage[p];
        char units[64], name[16];
        plan_stage_units(e, p, units, sizeof units);
        snprintf(name, sizeof name, "pp %d", p);
        fprintf(out, "  %-6s %-12s", name, units);
        for (int c = 0; c < SIZES_COUNT; c++) fprintf(out, " %9s", fmt_bytes(v, (double)st->mem.bytes[c]));
        fprintf(out, " %9s", fmt_bytes(v, st->fixed));
        fprintf(out, " %9s", fmt_bytes(v, st->total));
        fprintf(out, " %9s%s\n", fmt_bytes(v, st->device), st->oom ? "  OOM" : "");
    }
    if (e->job.train.offload) {
        size_t most = 0;
        for (int p = 0; p < e->n_stages; p++)
            if (e->stage[p].mem.host > most) most = e->stage[p].mem.host;
        int off = e->job.train.offload;
        char what[256] = "";
        if (off & OFFLOAD_OPTIMIZER) strcat(what, "AdamW m, v and the fp32 master");
        if (off & OFFLOAD_PARAMS) strcat(what, ", the parameter shards (each unit crosses the host link before its gather)");
        if (off & OFFLOAD_ACTIVATIONS)
            strcat(what, *what ? ", the block inputs block recompute keeps" : "the block inputs block recompute keeps");
        fprintf(out, "  offloaded (train.offload): %s in host memory, up to %s per rank, not in total\n", what,
                fmt_bytes(v, (double)most));
    }
    if (e->job.parallel.tp > 1) fprintf(out, "  (the tp rank with the most memory is shown)\n");
    if (e->hw.gpu)
        fprintf(out, "  fixed = CUDA context %s + NCCL %s + cuBLAS workspace %s + the backend's buffers %s\n",
                fmt_bytes(v, e->hw.cuda_context), e->world > 1 ? fmt_bytes((char[FMT_LEN]){0}, e->hw.nccl) : "none (one process)",
                fmt_bytes((char[FMT_LEN]){0}, e->hw.cublas_workspace),
                fmt_bytes((char[FMT_LEN]){0}, e->stage[0].fixed - hw_fixed_overhead(&e->hw, e->world)));
    char room[512];
    plan_headroom_text(&e->hw, e->stage[0].device, room, sizeof room);
    fprintf(out, "  headroom: --plan keeps %s; the fullest stage leaves %s\n", room,
            fmt_bytes(v, e->stage[0].device - e->max_total));
}

/* model.moe: where the experts live, what a micro-batch routes through them
 * and what expert parallelism sends. */
static void print_moe(const plan_estimate *e, FILE *out)
{
    const job_model *m = &e->job.model;
    const job_parallel *par = &e->job.parallel;
    if (m->moe.experts < 1) return;
    const job_moe *x = &m->moe;
    int ep = sizes_ep(e->sizes), unit = 1;
    while (!job_moe_block(m, unit - 1)) unit++;
    char a[FMT_LEN], b[FMT_LEN], c[FMT_LEN];
    /* the ep strategy's rules (strategy.h): DDP's buckets reduce the experts
     * over their group, a sharded mode shards the whole expert unit there */
    static const char *const sharded[] = {
        [SHARD_NONE] = "the experts' gradients reduced over it",
        [SHARD_ZERO1] = "each MoE block's optimizer state sharded over it",
        [SHARD_ZERO2] = "each MoE block's gradients and optimizer state sharded over it",
        [SHARD_FSDP] = "each MoE block's parameters, gradients and optimizer state sharded over it",
        [SHARD_HSDP] = "hsdp"};
    fprintf(out, "\nexperts: %d per MoE block on each rank (%d / ep %d), %s of the block's %s parameters there; "
                 "their data-parallel group dp x cp / ep = %d (%s)\n",
            x->experts / ep, x->experts, ep, fmt_count(a, (double)sizes_unit_expert_numel(e->sizes, unit, 0)),
            fmt_count(b, (double)sizes_unit_numel(e->sizes, unit, 0)), sizes_expert_dp(e->sizes), sharded[par->mode]);
    int sp = par->sequence_parallel && par->tp > 1;
    double rows = sizes_moe_routed_rows(m, e->job.train.micro_batch, par->tp, sp, par->cp);
    double tokens = rows / x->top_k / (x->capacity_factor > 0 && x->capacity_factor < 1 ? x->capacity_factor : 1);
    fprintf(out, "  routed per micro-batch and MoE block: %.0f token rows x top-%d = %.0f rows to the experts on "
                 "each rank%s with the even load of a balanced router (the step time counts these); ",
            tokens, x->top_k, rows, par->tp > 1 ? (sp ? " (its tp rank's own rows)" : " (every tp rank all rows)") : "");
    if (x->capacity_factor > 0)
        fprintf(out, "capacity_factor %g: at most %d rows per expert and sample\n", x->capacity_factor,
                job_moe_capacity(x, model_seq_len(m)));
    else
        fprintf(out, "dropless\n");
    /* the engine allocates what arrives (moe.c, ep.c); the memory above
     * prices it (sizes_moe_priced_rows) */
    size_t priced = sizes_moe_priced_rows(e->sizes), even = sizes_moe_even_rows(e->sizes);
    size_t worst = sizes_moe_worst_rows(e->sizes);
    fprintf(out, "  the experts' buffers hold the rows that arrive; the memory above prices %zu a rank per MoE block and "
                 "micro-batch: ",
            priced);
    if (x->capacity_factor > 0)
        fprintf(out, "the capacity's bound (%.2f x the even load)", even ? (double)priced / (double)even : 0.0);
    else if (priced >= worst)
        fprintf(out, "all of them (every choice computed here)");
    else
        fprintf(out, "the even load x %.2f (a margin for an unbalanced router)", SIZES_MOE_MARGIN);
    if (priced < worst)
        fprintf(out, "; a dropless router may bring up to %zu (%.1f x the even load)", worst,
                even ? (double)worst / (double)even : 0.0);
    fprintf(out, "\n");
    if (ep > 1) {
        const plan_comm *ec = &e->stage[0].comm[GROUP_EP];
        fprintf(out, "  all-to-all per MoE block and micro-batch: %s leaves each rank per dispatch, combine and their "
                     "gradients (%s each), %d of %d peers off the node: %s forward, %s backward\n",
                fmt_bytes(a, plan_ep_a2a_bytes(e)), fmt_seconds(b, plan_ep_a2a_time(e, ec)), ec->peers_off_node,
                ep - 1, fmt_seconds(c, 2 * plan_ep_a2a_time(e, ec)),
                fmt_seconds((char[FMT_LEN]){0},
                            (e->job.train.recompute == RECOMPUTE_BLOCK ? 4 : 2) * plan_ep_a2a_time(e, ec)));
    }
}

static void print_compute_comm(const plan_estimate *e, FILE *out)
{
    char a[FMT_LEN], b[FMT_LEN], c[FMT_LEN];
    fprintf(out, "\ncompute per step: %s FLOPs model (%s + attention%s), %s executed%s\n", fmt_count(a, e->model_flops),
            /* train.lora: the frozen base computes no weight gradient */
            job_lora_on(&e->job.model) ? "4N of the frozen base + the adapters" : "6N",
            e->job.model.moe.experts > 0 ? "; N the active parameters" : "",
            fmt_count(b, e->exec_flops),
            !job_model_is_lm(&e->job.model) ? (e->job.train.recompute != RECOMPUTE_NONE ? " (recompute counted)" : "")
            : e->job.train.recompute != RECOMPUTE_NONE ? " (recompute and the LM head's logits again in backward)"
                                                       : " (the LM head's logits again in backward)");
    for (int p = 0; p < e->n_stages; p++)
        fprintf(out, "  pp %-3d %s FLOPs per rank, %s of compute\n", p, fmt_count(a, e->stage[p].flops),
                fmt_seconds(b, e->stage[p].compute));
    int any = 0;
    for (int p = 0; p < e->n_stages; p++)
        for (int g = 0; g < GROUP_COUNT; g++) any |= e->stage[p].comm[g].op != NULL;
    if (!any) {
        fprintf(out, "\ncommunication per step: none (a single rank)\n");
        return;
    }
    fprintf(out, "\ncommunication per step, per rank (volume = bytes this rank sends; exposed = not hidden "
                 "behind compute):\n");
    fprintf(out, "  %-6s %-10s %4s %10s %6s %11s %10s %10s  %s\n", "stage", "group", "size", "volume", "calls", "link",
            "time", "exposed", "what");
    for (int p = 0; p < e->n_stages; p++)
        for (int g = 0; g < GROUP_COUNT; g++) {
            const plan_comm *cm = &e->stage[p].comm[g];
            if (!cm->op) continue;
            char name[16];
            snprintf(name, sizeof name, "pp %d", p);
            fprintf(out, "  %-6s %-10s %4d %10s %6ld %11s %10s %10s  %s\n", name, plan_group_name((plan_group)g),
                    cm->size, fmt_bytes(a, cm->bytes), cm->calls, cm->inter_node ? "inter-node" : "intra-node",
                    fmt_seconds(b, cm->time), g == GROUP_PP ? "in bubble" : fmt_seconds(c, cm->exposed), cm->op);
        }
}

static void print_step(const plan_estimate *e, FILE *out)
{
    char a[FMT_LEN], b[FMT_LEN], c[FMT_LEN], d[FMT_LEN];
    if (e->has_sim) {
        fprintf(out, "\npipeline (time in ms; per-chunk costs = GEMMs at their shape's fraction of peak + "
                     "memory-bound ops, %.0f %% of peak together, + tp collectives + exposed sharding traffic; p2p %s "
                     "per message):\n",
                100 * e->compute_eff, fmt_seconds(a, e->p2p));
        pp_sim_print(out, sizes_schedule(e->sizes), &e->sim, 100);
    }
    double tail = e->step_time - e->makespan;
    fprintf(out, "\nstep       %s = %s %s (bubble %.1f %%) + %s after backward (exposed dp comm + optimizer)\n",
            fmt_seconds(a, e->step_time), e->has_sim ? "pipeline" : "microbatches", fmt_seconds(b, e->makespan),
            100 * e->bubble, fmt_seconds(c, tail));
    fprintf(out, "           MFU %.1f %%, HFU %.1f %% (of %s peak %.4g TFLOP/s per rank); compute alone %.1f %%\n",
            100 * e->mfu, 100 * e->hfu, e->mixed ? "bf16" : "fp32", e->peak / 1e12, 100 * e->compute_eff);
    if (job_model_is_lm(&e->job.model))
        fprintf(out, "           %s tokens/s, %s sequences/s\n", fmt_count(a, e->tokens_per_s), fmt_count(d, e->samples_per_s));
    else
        fprintf(out, "           %s images/s\n", fmt_count(a, e->samples_per_s));
}

void plan_print_warnings(const plan_estimate *e, FILE *out)
{
    if (!e->n_warnings) {
        fprintf(out, "\nwarnings: none\n");
        return;
    }
    fprintf(out, "\nwarnings:\n");
    for (int i = 0; i < e->n_warnings; i++) fprintf(out, "  ! %s\n", e->warnings[i]);
}

static void print_text(const plan_estimate *e, const plan_machine *pm, FILE *out)
{
    print_header(e, pm, out);
    print_mesh(e, out);
    print_memory(e, out);
    print_moe(e, out);
    print_compute_comm(e, out);
    print_step(e, out);
    plan_print_warnings(e, out);
}

int dryrun_run(const job_spec *job, const dryrun_opts *o, FILE *out, char *err, size_t errlen)
{
    if (job_validate(job, err, errlen)) return DT_EXIT_USAGE;
    plan_machine pm;
    if (plan_machine_resolve(&pm, job, o, 0, err, errlen)) return DT_EXIT_USAGE;
    plan_estimate e;
    int rc = plan_estimate_memory(&e, job, &pm.hw, pm.nnodes, pm.ranks_per_node, err, errlen);
    if (rc == 0) rc = plan_estimate_time(&e, err, errlen);
    if (rc == 0) {
        if (o->format == DRYRUN_JSON) rc = dryrun_print_json(&e, &pm, out, err, errlen);
        else print_text(&e, &pm, out);
    }
    plan_estimate_free(&e);
    return rc ? DT_EXIT_USAGE : 0;
}
