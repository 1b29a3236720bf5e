/* dryrun_json.c — the dry-run report as one JSON document (--format json).
 *
 * The same numbers as the text, unrounded and in base units (bytes, FLOPs,
 * seconds), so a script can compare them with a run's measured peaks. cJSON
 * builds the tree; a failed allocation anywhere leaves a NULL that cJSON's add
 * functions ignore, and the final print then fails as a whole. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/util/errline.h"
#include "runtime/model/model.h"
#include "runtime/plan/dryrun_report.h"

/* model.moe and where its experts are: per MoE block on each rank, what a
 * micro-batch routes through them, what expert parallelism sends. */
static cJSON *moe_json(const plan_estimate *e)
{
    const job_model *m = &e->job.model;
    const job_moe *x = &m->moe;
    const job_parallel *par = &e->job.parallel;
    cJSON *o = cJSON_CreateObject();
    int unit = 1, ep = sizes_ep(e->sizes);
    while (!job_moe_block(m, unit - 1)) unit++;
    cJSON_AddNumberToObject(o, "experts", x->experts);
    cJSON_AddNumberToObject(o, "top_k", x->top_k);
    cJSON_AddNumberToObject(o, "d_ff_expert", x->d_ff_expert);
    cJSON_AddNumberToObject(o, "shared_experts", x->shared_experts);
    cJSON_AddNumberToObject(o, "moe_blocks", job_moe_layers(m));
    cJSON_AddStringToObject(o, "router", job_router_name(x->router));
    cJSON_AddNumberToObject(o, "capacity_factor", x->capacity_factor); /* 0: dropless */
    cJSON_AddNumberToObject(o, "ep", ep);
    cJSON_AddNumberToObject(o, "expert_dp", sizes_expert_dp(e->sizes));
    cJSON_AddNumberToObject(o, "experts_per_rank", x->experts / ep);
    cJSON_AddNumberToObject(o, "expert_parameters_per_block_per_rank", (double)sizes_unit_expert_numel(e->sizes, unit, 0));
    cJSON_AddNumberToObject(o, "routed_rows_per_microbatch",
                            sizes_moe_routed_rows(m, e->job.train.micro_batch, par->tp,
                                                  par->sequence_parallel && par->tp > 1, par->cp));
    if (ep > 1) {
        size_t tok, exp;
        sizes_ep_stage(e->sizes, &tok, &exp); /* the priced rows (stages[].moe_rows), the staging's */
        cJSON_AddNumberToObject(o, "expert_rows_staged_per_microbatch", (double)exp);
        const plan_comm *c = &e->stage[0].comm[GROUP_EP];
        cJSON_AddNumberToObject(o, "all_to_all_bytes", plan_ep_a2a_bytes(e)); /* one, leaving a rank */
        cJSON_AddNumberToObject(o, "all_to_all_s", plan_ep_a2a_time(e, c));
        cJSON_AddNumberToObject(o, "peers_off_node", c->peers_off_node);
    }
    return o;
}

static cJSON *model_json(const plan_estimate *e)
{
    const job_model *m = &e->job.model;
    cJSON *o = cJSON_CreateObject();
    size_t distinct, held = sizes_model_numel(m, &distinct);
    cJSON_AddStringToObject(o, "kind", job_model_kind_name(m->kind));
    cJSON_AddStringToObject(o, "preset", m->preset);
    cJSON_AddNumberToObject(o, "n_layer", m->n_layer);
    cJSON_AddNumberToObject(o, "n_head", m->n_head);
    cJSON_AddNumberToObject(o, "d_model", m->d_model);
    cJSON_AddNumberToObject(o, "d_ff", m->d_ff);
    if (job_model_is_lm(m)) {
        cJSON_AddNumberToObject(o, "vocab_size", m->vocab_size);
        cJSON_AddNumberToObject(o, "seq_len", m->seq_len);
    } else {
        cJSON_AddNumberToObject(o, "image_size", m->image_size);
        cJSON_AddNumberToObject(o, "patch_size", m->patch_size);
        cJSON_AddNumberToObject(o, "n_classes", m->n_classes);
    }
    cJSON_AddNumberToObject(o, "parameters", (double)distinct);
    cJSON_AddNumberToObject(o, "parameters_held", (double)held);
    /* model.moe: a token's top_k experts; the FLOPs below count these */
    cJSON_AddNumberToObject(o, "parameters_active", (double)sizes_model_active_numel(m));
    if (job_lora_on(m)) { /* train.lora: the frozen base and the adapters that train */
        size_t frozen = sizes_model_frozen_numel(m);
        cJSON_AddNumberToObject(o, "parameters_trainable", (double)(held - frozen));
        cJSON_AddNumberToObject(o, "parameters_frozen", (double)frozen);
    }
    cJSON_AddNumberToObject(o, "flops_per_sample", model_flops_per_sample(m, RECOMPUTE_NONE));
    if (m->moe.experts > 0) cJSON_AddItemToObject(o, "moe", moe_json(e));
    return o;
}

static cJSON *hardware_json(const plan_estimate *e, const plan_machine *pm)
{
    const hw_profile *hw = &e->hw;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", hw->name);
    cJSON_AddStringToObject(o, "source", hw->source);
    cJSON_AddBoolToObject(o, "defaulted", pm->hw_defaulted);
    cJSON_AddStringToObject(o, "device", hw->gpu ? "gpu" : "cpu");
    cJSON_AddNumberToObject(o, "peak_bf16_flops", hw->peak_bf16);
    cJSON_AddNumberToObject(o, "peak_fp32_flops", hw->peak_fp32);
    cJSON_AddNumberToObject(o, "achievable_fraction", hw->achievable); /* the largest GEMMs' */
    cJSON *tab = cJSON_AddArrayToObject(o, "gemm_efficiency");
    for (int i = 0; i < hw->n_gemm; i++) {
        cJSON *pt = cJSON_CreateObject();
        cJSON_AddNumberToObject(pt, "dim", hw->gemm_dim[i]);
        cJSON_AddNumberToObject(pt, "fraction", hw->gemm_eff[i]);
        cJSON_AddItemToArray(tab, pt);
    }
    if (hw->n_attn > 0) {
        cJSON *at = cJSON_AddArrayToObject(o, "attention_efficiency");
        for (int i = 0; i < hw->n_attn; i++) {
            cJSON *pt = cJSON_CreateObject();
            cJSON_AddNumberToObject(pt, "keys", hw->attn_keys[i]);
            cJSON_AddNumberToObject(pt, "fraction", hw->attn_eff[i]);
            cJSON_AddItemToArray(at, pt);
        }
    }
    cJSON_AddNumberToObject(o, "memory_efficiency", hw->memory_eff);
    cJSON_AddNumberToObject(o, "memory_bytes", hw->memory);
    cJSON_AddNumberToObject(o, "memory_bandwidth", hw->memory_bw);
    cJSON_AddNumberToObject(o, "intra_node_bandwidth", hw->intra_bw);
    cJSON_AddNumberToObject(o, "inter_node_bandwidth", hw->inter_bw);
    cJSON_AddNumberToObject(o, "gpus_per_node", hw->gpus_per_node);
    cJSON_AddNumberToObject(o, "headroom_fraction", hw->headroom_bytes > 0 ? 0 : hw->headroom_fraction);
    if (hw->calibrated[0]) cJSON_AddStringToObject(o, "calibrated", hw->calibrated);
    return o;
}

static cJSON *layout_json(const plan_estimate *e)
{
    const job_spec *job = &e->job;
    const job_parallel *par = &job->parallel;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "dp", par->dp);
    cJSON_AddNumberToObject(o, "tp", par->tp);
    cJSON_AddNumberToObject(o, "pp", par->pp);
    cJSON_AddNumberToObject(o, "cp", par->cp);
    cJSON_AddNumberToObject(o, "ep", sizes_ep(e->sizes));
    cJSON_AddNumberToObject(o, "world", e->world);
    cJSON_AddNumberToObject(o, "nnodes", e->nnodes);
    cJSON_AddNumberToObject(o, "ranks_per_node", e->ranks_per_node);
    cJSON_AddStringToObject(o, "mode", job_shard_mode_name(par->mode));
    cJSON_AddStringToObject(o, "pp_schedule", job_pp_schedule_name(par->pp_schedule));
    cJSON_AddNumberToObject(o, "virtual_stages", par->virtual_stages);
    cJSON_AddBoolToObject(o, "sequence_parallel", par->sequence_parallel);
    cJSON_AddNumberToObject(o, "microbatches", par->microbatches);
    cJSON_AddNumberToObject(o, "micro_batch", job->train.micro_batch);
    cJSON_AddNumberToObject(o, "global_batch", job->train.global_batch);
    cJSON_AddStringToObject(o, "recompute", job_recompute_name(job->train.recompute));
    cJSON_AddStringToObject(o, "precision", job_precision_name(job->train.precision));
    cJSON_AddBoolToObject(o, "mixed_precision", e->mixed);
    return o;
}

static cJSON *mesh_json(const plan_estimate *e)
{
    cJSON *a = cJSON_CreateArray();
    for (int r = 0; r < e->world; r++) {
        mesh_coord c = mesh_coords(&e->mesh, r);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        cJSON_AddNumberToObject(o, "node", plan_node_of(e, r));
        cJSON_AddNumberToObject(o, "local_rank", r % e->ranks_per_node);
        cJSON_AddNumberToObject(o, "dp", c.dp);
        cJSON_AddNumberToObject(o, "pp", c.pp);
        cJSON_AddNumberToObject(o, "tp", c.tp);
        if (e->mesh.cp > 1) cJSON_AddNumberToObject(o, "cp", c.cp);
        if (e->mesh.ep > 1) {
            cJSON_AddNumberToObject(o, "ep", c.ep);
            cJSON_AddNumberToObject(o, "edp", c.edp);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static cJSON *stage_json(const plan_estimate *e, int p)
{
    const plan_stage *st = &e->stage[p];
    cJSON *o = cJSON_CreateObject();
    char units[64];
    plan_stage_units(e, p, units, sizeof units);
    cJSON_AddNumberToObject(o, "pp_rank", p);
    cJSON_AddNumberToObject(o, "tp_rank", st->tp_rank);
    cJSON_AddStringToObject(o, "units", units);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory");
    for (int c = 0; c < SIZES_COUNT; c++)
        cJSON_AddNumberToObject(mem, sizes_category_name((sizes_category)c), (double)st->mem.bytes[c]);
    cJSON_AddNumberToObject(mem, "allocated", (double)st->mem.total);
    cJSON_AddNumberToObject(mem, "host", (double)st->mem.host);
    cJSON_AddNumberToObject(mem, "fixed", st->fixed);
    cJSON_AddNumberToObject(mem, "total", st->total);
    cJSON_AddNumberToObject(mem, "device", st->device);
    /* tp ranks of a stage can differ (a vocabulary that tp does not divide
     * leaves some a row more): each one's bytes, as its worker will count them */
    cJSON *by_tp = cJSON_AddArrayToObject(o, "memory_by_tp_rank");
    for (int t = 0; t < e->job.parallel.tp; t++) {
        sizes_memory m;
        sizes_rank_memory(e->sizes, (sizes_at){0, p, t}, &m);
        cJSON *x = cJSON_CreateObject();
        for (int c = 0; c < SIZES_COUNT; c++)
            cJSON_AddNumberToObject(x, sizes_category_name((sizes_category)c), (double)m.bytes[c]);
        cJSON_AddNumberToObject(x, "allocated", (double)m.total);
        cJSON_AddNumberToObject(x, "host", (double)m.host);
        cJSON_AddItemToArray(by_tp, x);
    }
    if (e->job.model.moe.experts > 0) {
        /* model.moe: the rows the memory above prices an MoE block's experts
         * at, and what a row more or less moves it by (per MoE block and
         * micro-batch: the run holds what arrives) */
        size_t rows = sizes_moe_priced_rows(e->sizes), a1, s1, a0, s0, tok, staged;
        sizes_moe_rows_memory(e->sizes, (sizes_at){0, p, st->tp_rank}, rows, &a1, &s1);
        sizes_moe_rows_memory(e->sizes, (sizes_at){0, p, st->tp_rank}, 0, &a0, &s0);
        sizes_ep_stage(e->sizes, &tok, &staged);
        cJSON *mr = cJSON_AddObjectToObject(o, "moe_rows");
        cJSON_AddNumberToObject(mr, "priced", (double)rows);
        cJSON_AddNumberToObject(mr, "even", (double)sizes_moe_even_rows(e->sizes));
        cJSON_AddNumberToObject(mr, "worst", (double)sizes_moe_worst_rows(e->sizes));
        cJSON_AddNumberToObject(mr, "staged", (double)staged);
        cJSON_AddNumberToObject(mr, "activations_per_row", rows ? (double)(a1 - a0) / (double)rows : 0.0);
        cJSON_AddNumberToObject(mr, "buffers_per_row", rows ? (double)(s1 - s0) / (double)rows : 0.0);
    }
    cJSON_AddBoolToObject(o, "oom", st->oom);
    cJSON_AddNumberToObject(o, "flops", st->flops);
    cJSON_AddNumberToObject(o, "compute_s", st->compute);
    cJSON_AddNumberToObject(o, "optimizer_s", st->optimizer);
    cJSON_AddNumberToObject(o, "exposed_after_backward_s", st->exposed_once);
    if (e->has_sim) {
        cJSON_AddNumberToObject(o, "pipeline_busy_s", e->sim.busy[p] / 1e3);
        cJSON_AddNumberToObject(o, "pipeline_idle_s", e->sim.idle[p] / 1e3);
    }
    cJSON *groups = cJSON_AddArrayToObject(o, "comm");
    for (int g = 0; g < GROUP_COUNT; g++) {
        const plan_comm *c = &st->comm[g];
        if (!c->op) continue;
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "group", plan_group_name((plan_group)g));
        cJSON_AddStringToObject(x, "op", c->op);
        cJSON_AddNumberToObject(x, "size", c->size);
        cJSON_AddNumberToObject(x, "bytes", c->bytes);
        cJSON_AddNumberToObject(x, "calls", (double)c->calls);
        cJSON_AddStringToObject(x, "link", c->inter_node ? "inter-node" : "intra-node");
        cJSON_AddNumberToObject(x, "bandwidth", c->bandwidth);
        cJSON_AddNumberToObject(x, "time_s", c->time);
        if (g == GROUP_EP) cJSON_AddNumberToObject(x, "peers_off_node", c->peers_off_node);
        if (g == GROUP_PP) cJSON_AddStringToObject(x, "exposed", "in the pipeline bubble");
        else cJSON_AddNumberToObject(x, "exposed_s", c->exposed);
        cJSON_AddItemToArray(groups, x);
    }
    return o;
}

static cJSON *step_json(const plan_estimate *e)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "model_flops", e->model_flops);
    cJSON_AddNumberToObject(o, "executed_flops", e->exec_flops);
    cJSON_AddNumberToObject(o, "peak_flops_per_rank", e->peak);
    cJSON_AddNumberToObject(o, "pipeline_s", e->makespan);
    cJSON_AddNumberToObject(o, "bubble", e->bubble);
    cJSON_AddNumberToObject(o, "p2p_s", e->p2p);
    cJSON_AddNumberToObject(o, "time_s", e->step_time);
    cJSON_AddNumberToObject(o, "mfu", e->mfu);
    cJSON_AddNumberToObject(o, "hfu", e->hfu);
    cJSON_AddNumberToObject(o, "compute_efficiency", e->compute_eff);
    cJSON_AddNumberToObject(o, "samples_per_s", e->samples_per_s);
    if (job_model_is_lm(&e->job.model)) cJSON_AddNumberToObject(o, "tokens_per_s", e->tokens_per_s);
    else cJSON_AddNumberToObject(o, "images_per_s", e->samples_per_s);
    return o;
}

/* The picture's data: each rank's compute actions with start and end (ms). */
static cJSON *pipeline_json(const plan_estimate *e)
{
    const pp_schedule *s = sizes_schedule(e->sizes);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schedule", pp_schedule_kind_name(s->kind));
    cJSON_AddNumberToObject(o, "pp", s->p);
    cJSON_AddNumberToObject(o, "microbatches", s->m);
    cJSON_AddNumberToObject(o, "virtual_stages", s->v);
    cJSON_AddNumberToObject(o, "bubble", e->sim.bubble);
    cJSON_AddNumberToObject(o, "ideal_bubble", pp_schedule_ideal_bubble(s->kind, s->p, s->m, s->v));
    cJSON_AddNumberToObject(o, "makespan_ms", e->sim.makespan);
    cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
    for (int r = 0; r < s->p; r++) {
        cJSON *acts = cJSON_CreateArray();
        for (int i = 0; i < s->n_actions[r]; i++) {
            const pp_action *a = &s->actions[r][i];
            if (a->op != PP_OP_FORWARD && !pp_op_is_backward(a->op)) continue;
            cJSON *x = cJSON_CreateObject();
            /* ZB-H1's input-gradient pass is its B, the weight-gradient pass W */
            cJSON_AddStringToObject(x, "op", a->op == PP_OP_FORWARD ? "F" : a->op == PP_OP_BACKWARD_W ? "W" : "B");
            cJSON_AddNumberToObject(x, "chunk", a->chunk);
            cJSON_AddNumberToObject(x, "mb", a->mb);
            cJSON_AddNumberToObject(x, "start_ms", e->sim.start[r][i]);
            cJSON_AddNumberToObject(x, "end_ms", e->sim.end[r][i]);
            cJSON_AddItemToArray(acts, x);
        }
        cJSON_AddItemToArray(ranks, acts);
    }
    return o;
}

int dryrun_print_json(const plan_estimate *e, const plan_machine *pm, FILE *out, char *err, size_t errlen)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "job", e->job.path);
    cJSON_AddItemToObject(root, "model", model_json(e));
    cJSON_AddItemToObject(root, "hardware", hardware_json(e, pm));
    cJSON_AddItemToObject(root, "layout", layout_json(e));
    cJSON_AddItemToObject(root, "mesh", mesh_json(e));
    cJSON *stages = cJSON_AddArrayToObject(root, "stages");
    for (int p = 0; p < e->n_stages; p++) cJSON_AddItemToArray(stages, stage_json(e, p));
    cJSON_AddItemToObject(root, "step", step_json(e));
    if (e->has_sim) cJSON_AddItemToObject(root, "pipeline", pipeline_json(e));
    cJSON_AddBoolToObject(root, "fits", e->fits);
    cJSON_AddNumberToObject(root, "headroom_bytes", e->headroom);
    cJSON_AddBoolToObject(root, "fits_headroom", e->fits_headroom);
    cJSON *warn = cJSON_AddArrayToObject(root, "warnings");
    for (int i = 0; i < e->n_warnings; i++) cJSON_AddItemToArray(warn, cJSON_CreateString(e->warnings[i]));
    return plan_json_write(root, "dry-run", out, err, errlen);
}

int plan_json_write(cJSON *root, const char *who, FILE *out, char *err, size_t errlen)
{
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return errline(err, errlen, "%s: out of memory building the JSON report", who);
    fputs(text, out);
    fputc('\n', out);
    cJSON_free(text);
    return 0;
}
