/* engine_ckpt.c — this rank's slices to checkpoint pieces and back, and the
 * world-wide agreements around them (engine_ckpt.h). */
#include "runtime/worker/engine_ckpt.h"
#include "runtime/worker/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/util/exit_codes.h"

/* The three things a slice holds, in the order they are saved. */
enum { PART_PARAM = 0, PART_M, PART_V, N_PARTS };
static const char *const part_prefix[N_PARTS] = {"param", "adam_m", "adam_v"};

/* One held unit's slice on this rank: where its numbers live on the device.
 * The parameters saved are fp32: the slice's own (fp32 training) or the
 * optimizer's fp32 master (mixed precision, whose bf16 parameters are its
 * rounding), so a checkpoint loads into a run of either precision. */
typedef struct {
    model *m;
    optim *o;
    int slice;           /* index of the slice in o */
    int unit;
    size_t lo, hi;
    float *dev[N_PARTS]; /* the slice's parameters (fp32), AdamW m, AdamW v */
    int on_host;         /* dev[] is host memory (train.offload: the optimizer's) */
    void *param;         /* the strategy's parameters of the slice (the model's type) */
} held_slice;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* Every held unit's slice, chunk by chunk, unit by unit. */
static held_slice *held_slices(engine *e, int *n_out)
{
    int n = 0;
    for (int l = 0; l < e->n_chunks; l++) n += optim_slice_count(e->opt[l]);
    held_slice *hs = calloc((size_t)n + 1, sizeof *hs);
    if (!hs) return NULL;
    int k = 0;
    for (int l = 0; l < e->n_chunks; l++) {
        for (int i = 0; i < optim_slice_count(e->opt[l]); i++, k++) {
            held_slice *h = &hs[k];
            h->m = e->chunk[l];
            h->o = e->opt[l];
            h->slice = i;
            optim_slice_state(e->opt[l], i, &h->unit, &h->lo, &h->hi, &h->dev[PART_M], &h->dev[PART_V]);
            strat_slice sl;
            e->so->slice(e->ds, h->unit, &sl);
            h->param = sl.param;
            h->dev[PART_PARAM] = optim_slice_master(e->opt[l], i);
            if (!h->dev[PART_PARAM]) h->dev[PART_PARAM] = sl.param; /* fp32 */
            h->on_host = optim_state_on_host(e->opt[l]);
        }
    }
    *n_out = n;
    return hs;
}

/* The parameter specs of unit `unit` of model m; with `saved_only`, without the
 * copies another rank (or unit 0) writes: the tied wte, tp-replicated tensors
 * on tp ranks other than 0, and what the strategy says another rank of a
 * data-parallel group saves (its counts: DDP's copies but on rank 0, an
 * expert unit's dense shard but on ep rank 0). Returns how many were put in
 * out (cap >= count). */
static int unit_specs(engine *e, model *m, int unit, int tp_rank, int saved_only, param_spec *out)
{
    int n = 0;
    for (int i = 0; i < model_param_count(m); i++) {
        const param_spec *p = model_param(m, i);
        if (p->unit != unit || p->frozen) continue; /* train.lora's base: not in the slices */
        if (saved_only && (p->tied || param_tp_duplicate(p, tp_rank) ||
                           !e->so->counts(e->ds, unit, param_is_expert(p))))
            continue;
        out[n++] = *p;
    }
    return n;
}

void engine_ckpt_meta_layout(const engine *e, ckpt_meta *meta)
{
    const job_parallel *par = &e->job.parallel;
    meta->dp = par->dp;
    meta->tp = par->tp;
    meta->pp = par->pp;
    meta->cp = par->cp;
    meta->world = e->world_size;
    meta->mode = job_shard_mode_name(par->mode);
}

static int comm_error(engine *e, int rc, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "rank %d: %s failed: %s", e->rank, what, comm_last_error(e->world));
    (void)rc;
    return DT_EXIT_COMM;
}

int engine_any(engine *e, int mine, int *any, char *err, size_t errlen)
{
    float v = mine ? 1.0f : 0.0f, r = v;
    if (e->world_size > 1) {
        int rc = comm_all_reduce(e->world, &v, &r, 1, COMM_F32, COMM_MAX);
        if (rc != COMM_OK) return comm_error(e, rc, "all_reduce of a status", err, errlen);
    }
    *any = r != 0.0f;
    return DT_EXIT_OK;
}

int engine_gather_flags(engine *e, int mine, int *flags, char *err, size_t errlen)
{
    int W = e->world_size;
    float *all = malloc((size_t)W * sizeof(float)), v = mine ? 1.0f : 0.0f;
    if (!all) {
        snprintf(err, errlen, "rank %d: out of memory", e->rank);
        return DT_EXIT_FAIL;
    }
    all[0] = v;
    int rc = W > 1 ? comm_all_gather(e->world, &v, all, (size_t)W, COMM_F32) : COMM_OK;
    if (rc == COMM_OK)
        for (int r = 0; r < W; r++) flags[r] = all[r] != 0.0f;
    free(all);
    return rc == COMM_OK ? DT_EXIT_OK : comm_error(e, rc, "all_gather of flags", err, errlen);
}

double engine_local_loss(const engine *e) { return e->local_loss; }

/* ---- saving ---- */

/* This rank's pieces, their data copied to host buffers (*bufs, freed by the
 * caller). Returns the number of pieces, or -1 (out of memory). */
static int collect_pieces(engine *e, ckpt_piece **pieces_out, float ***bufs_out, int *n_bufs)
{
    int n_held = 0, tp_rank = e->mc.me.tp, tp = e->job.parallel.tp;
    held_slice *hs = held_slices(e, &n_held);
    int max_specs = 0;
    for (int l = 0; l < e->n_chunks; l++)
        if (model_param_count(e->chunk[l]) > max_specs) max_specs = model_param_count(e->chunk[l]);
    int n_moe = engine_moe_ckpt_count(e); /* model.moe's routing biases */
    int cap = N_PARTS * (max_specs + 1) * (n_held + 1) + n_moe;
    ckpt_piece *pieces = calloc((size_t)cap, sizeof *pieces);
    float **bufs = calloc((size_t)N_PARTS * (n_held + 1) + (size_t)n_moe, sizeof(float *));
    param_spec *specs = calloc((size_t)max_specs + 1, sizeof *specs);
    int n = 0, nb = 0;
    if (!hs || !pieces || !bufs || !specs) n = -1;
    for (int k = 0; k < n_held && n >= 0; k++) {
        held_slice *h = &hs[k];
        int ns = unit_specs(e, h->m, h->unit, tp_rank, 1, specs);
        if (ns == 0) continue;
        size_t len = h->hi - h->lo;
        for (int part = 0; part < N_PARTS && n >= 0; part++) {
            float *host = malloc((len ? len : 1) * sizeof(float));
            if (!host) {
                n = -1;
                break;
            }
            bufs[nb++] = host;
            if (h->on_host) memcpy(host, h->dev[part], len * sizeof(float));
            else e->ops->to_host(host, h->dev[part], len * sizeof(float));
            int got = ckpt_unit_slice_pieces(part_prefix[part], specs, ns, tp_rank, tp, h->lo, h->hi, host,
                                             pieces + n, cap - n);
            n = got < 0 ? -1 : n + got;
        }
    }
    if (n >= 0 && n_moe > 0) {
        int got = engine_moe_ckpt_pieces(e, pieces + n, bufs + nb);
        nb += n_moe; /* the buffers it made (NULL where it stopped) */
        n = got < 0 ? -1 : n + got;
    }
    free(specs);
    free(hs);
    *pieces_out = pieces;
    *bufs_out = bufs;
    *n_bufs = nb;
    return n;
}

/* A rank that only heard of another rank's failure exits a moment later, so
 * the first exit the agent sees (its root cause) is the rank with the reason. */
static void let_the_cause_exit_first(void) { sleep_ms(300); }

/* One line for every rank after a phase of the save: the failing rank keeps
 * its reason, the others point at it. */
static int save_failed(engine *e, int mine_failed, const char *why, long step, char *err, size_t errlen)
{
    if (mine_failed) {
        snprintf(err, errlen, "rank %d: checkpoint step %ld: %s", e->rank, step, why);
    } else {
        snprintf(err, errlen, "rank %d: checkpoint step %ld: failed on another rank (see its message)", e->rank,
                 step);
        let_the_cause_exit_first();
    }
    return DT_EXIT_CKPT;
}

/* ckpt_save's three phases, with the status all-reduced after the rank files
 * (so rank 0 commits only when every rank's file is durable) and after the
 * commit (so every rank knows whether `latest` moved). */
int engine_save_checkpoint(engine *e, const char *dir, const ckpt_meta *meta, int keep, int delay_ms,
                           int *already, char *err, size_t errlen)
{
    engine_graph_outside(e); /* ops outside the step (train.cuda_graphs) */
    *already = 0;
    ckpt_piece *pieces = NULL;
    float **bufs = NULL;
    int nb = 0, any = 0;
    char why[1024] = "";
    int n = collect_pieces(e, &pieces, &bufs, &nb);
    int rc = -1;
    if (n < 0) snprintf(why, sizeof why, "out of memory for the checkpoint");
    else rc = ckpt_write_rank(dir, meta->step, e->rank, pieces, n, why, sizeof why);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
    free(pieces);
    if (delay_ms > 0) sleep_ms(delay_ms);
    /* the barrier: every rank file is written (or some rank failed) */
    int arc = engine_any(e, rc < 0, &any, err, errlen);
    if (arc != DT_EXIT_OK) return arc;
    if (any) return save_failed(e, rc < 0, why, meta->step, err, errlen);
    if (rc == 1) { /* every rank saw the step already committed as latest */
        *already = 1;
        return DT_EXIT_OK;
    }
    int crc = e->rank == 0 ? ckpt_commit(dir, meta, keep, why, sizeof why) : 0;
    arc = engine_any(e, crc < 0, &any, err, errlen);
    if (arc != DT_EXIT_OK) return arc;
    if (any) return save_failed(e, crc < 0, why, meta->step, err, errlen);
    return DT_EXIT_OK;
}

/* ---- loading ---- */

/* Where a load reads a slice from: a dtrun checkpoint (parameters and both
 * AdamW moments) or a Hugging Face folder (parameters only). */
typedef struct {
    const ckpt *ck;
    hf_weights *hf;
    const job_model *model; /* hf: the model its names are read for */
    const char *path; /* for messages */
    int n_parts;
} slice_source;

static int source_read(const slice_source *src, int part, const param_spec *specs, int ns, int tp_rank, int tp,
                       size_t lo, size_t hi, float *host, char *why, size_t whylen)
{
    if (src->ck) return ckpt_read_unit_slice(src->ck, part_prefix[part], specs, ns, tp_rank, tp, lo, hi, host, why, whylen);
    return hf_weights_read_unit_slice(src->hf, src->model, specs, ns, tp_rank, tp, lo, hi, host, why, whylen);
}

/* Every held slice from src (its parts: parameters, then the moments when
 * it has them; a part it lacks keeps its value, the zeros of a fresh AdamW),
 * then the strategy makes the parameters every rank's view. */
static int load_slices(engine *e, const slice_source *src, char *err, size_t errlen)
{
    int n_held = 0, tp_rank = e->mc.me.tp, tp = e->job.parallel.tp;
    held_slice *hs = held_slices(e, &n_held);
    int max_specs = 0;
    size_t max_len = 1;
    for (int l = 0; l < e->n_chunks; l++)
        if (model_param_count(e->chunk[l]) > max_specs) max_specs = model_param_count(e->chunk[l]);
    for (int k = 0; hs && k < n_held; k++)
        if (hs[k].hi - hs[k].lo > max_len) max_len = hs[k].hi - hs[k].lo;
    param_spec *specs = calloc((size_t)max_specs + 1, sizeof *specs);
    float *host = malloc(max_len * sizeof(float));
    char why[1024] = "";
    int bad = !hs || !specs || !host;
    if (bad) snprintf(why, sizeof why, "rank %d: out of memory loading the checkpoint", e->rank);
    for (int k = 0; k < n_held && !bad; k++) {
        held_slice *h = &hs[k];
        int ns = unit_specs(e, h->m, h->unit, tp_rank, 0, specs);
        size_t len = h->hi - h->lo;
        for (int part = 0; part < src->n_parts && !bad; part++) {
            if (source_read(src, part, specs, ns, tp_rank, tp, h->lo, h->hi, host, why, sizeof why) != 0) {
                bad = 1;
                break;
            }
            if (h->on_host) memcpy(h->dev[part], host, len * sizeof(float));
            else e->ops->from_host(h->dev[part], host, len * sizeof(float));
        }
        /* mixed precision or offload: the parameters are the loaded master
         * (rounded to bf16 when they are bf16) */
        if (!bad) optim_master_to_params(h->o, h->slice, h->param);
    }
    free(host);
    free(specs);
    free(hs);
    int any = 0, rc = engine_any(e, bad, &any, err, errlen);
    if (rc != DT_EXIT_OK) return rc;
    if (any) {
        if (bad) {
            snprintf(err, errlen, "rank %d: %s", e->rank, why);
        } else {
            snprintf(err, errlen, "rank %d: %s: loading failed on another rank (see its message)", e->rank,
                     src->path);
            let_the_cause_exit_first();
        }
        return DT_EXIT_CKPT;
    }
    /* the slices hold the checkpoint's numbers: make them every rank's view */
    e->so->after_update(e->ds);
    if (e->x.failed) return engine_comm_failed(e, err, errlen);
    return DT_EXIT_OK;
}

int engine_load_checkpoint(engine *e, const ckpt *ck, char *err, size_t errlen)
{
    engine_graph_outside(e);
    slice_source src = {.ck = ck, .path = ckpt_path(ck), .n_parts = N_PARTS};
    int rc = load_slices(e, &src, err, errlen);
    if (rc != DT_EXIT_OK) return rc;
    /* model.moe's routing biases (every rank reads its blocks' own) */
    char why[1024] = "";
    int bad = engine_moe_ckpt_load(e, ck, why, sizeof why) != 0, any = 0;
    if ((rc = engine_any(e, bad, &any, err, errlen)) != DT_EXIT_OK) return rc;
    if (!any) return DT_EXIT_OK;
    if (bad) snprintf(err, errlen, "rank %d: %s", e->rank, why);
    else snprintf(err, errlen, "rank %d: %s: loading failed on another rank (see its message)", e->rank, ckpt_path(ck));
    return DT_EXIT_CKPT;
}

/* train.lora: this rank's slice of every held unit's frozen base (the
 * strategy's frozen_slice) from a model folder, in the parameters' type. */
static int load_frozen(engine *e, const slice_source *src, char *why, size_t whylen)
{
    int tp_rank = e->mc.me.tp, tp = e->job.parallel.tp, rc = 0;
    size_t pe = e->x.pe;
    for (int u = 0; u < e->x.n_units && rc == 0; u++) {
        model *m = e->unit_model[u];
        if (!m || !model_unit_frozen_local_numel(m, u)) continue;
        strat_slice sl;
        e->so->frozen_slice(e->ds, u, &sl);
        int np = model_param_count(m), ns = 0;
        param_spec *specs = calloc((size_t)np + 1, sizeof *specs);
        float *host = malloc((sl.len ? sl.len : 1) * sizeof(float));
        uint16_t *h16 = pe == 2 ? malloc((sl.len ? sl.len : 1) * 2) : NULL;
        if (!specs || !host || (pe == 2 && !h16)) {
            snprintf(why, whylen, "rank %d: out of memory loading the frozen base", e->rank);
            rc = -1;
        }
        for (int i = 0; rc == 0 && i < np; i++)
            if (model_param(m, i)->unit == u && model_param(m, i)->frozen) specs[ns++] = *model_param(m, i);
        if (rc == 0)
            rc = hf_weights_read_unit_slice(src->hf, src->model, specs, ns, tp_rank, tp, sl.lo, sl.lo + sl.len, host, why,
                                            whylen);
        if (rc == 0 && pe == 2) { /* the bf16 base: the loaded fp32 rounded as the kernels round */
            dt_ops_cpu.to_bf16(h16, host, sl.len);
            e->ops->from_host(sl.param, h16, sl.len * 2);
        } else if (rc == 0) {
            e->ops->from_host(sl.param, host, sl.len * sizeof(float));
        }
        free(h16), free(host), free(specs);
    }
    return rc;
}

int engine_load_hf(engine *e, hf_weights *hf, char *err, size_t errlen)
{
    engine_graph_outside(e);
    slice_source src = {.hf = hf, .model = &e->job.model, .path = hf_weights_dir(hf), .n_parts = 1};
    if (!job_lora_on(&e->job.model)) return load_slices(e, &src, err, errlen);
    /* train.lora: the folder is the frozen base; the adapters keep their start */
    char why[1024] = "";
    int bad = load_frozen(e, &src, why, sizeof why) != 0, any = 0, rc = engine_any(e, bad, &any, err, errlen);
    if (rc != DT_EXIT_OK) return rc;
    if (any) {
        if (bad) snprintf(err, errlen, "rank %d: %s", e->rank, why);
        else snprintf(err, errlen, "rank %d: %s: loading failed on another rank (see its message)", e->rank, src.path);
        if (!bad) let_the_cause_exit_first();
        return DT_EXIT_CKPT;
    }
    e->so->after_update(e->ds);
    return e->x.failed ? engine_comm_failed(e, err, errlen) : DT_EXIT_OK;
}

int engine_load_adapter(engine *e, hf_weights *peft, char *err, size_t errlen)
{
    engine_graph_outside(e);
    slice_source src = {.hf = peft, .model = &e->job.model, .path = hf_weights_dir(peft), .n_parts = 1};
    return load_slices(e, &src, err, errlen);
}
