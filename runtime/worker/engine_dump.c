/* engine_dump.c — the whole model's parameters to one file, whatever the layout
 * (engine_dump_params, engine.h): what the equivalence tests compare. Every rank
 * makes its tp-local units whole (FSDP gathers them over its shard group), the
 * data-parallel rank 0 of every (pp, tp) sends them to world rank 0, which puts
 * the tp shards back together with param_global_index and writes unit by unit.
 * Expert parallelism: an MoE block's experts come from every ep rank of the
 * first ep group (dp x cp places 0 .. ep - 1), its dense tensors with them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/worker/engine_internal.h"
#include "lib/util/exit_codes.h"

/* A unit's elements on tp rank r of tp (ep rank of ep): its trainable
 * buffer, then (train.lora) its frozen one. */
static size_t unit_all_numel(const job_model *spec, int u, int r, int tp, int ep)
{
    return model_unit_numel_ep(spec, u, r, tp, ep) + model_unit_frozen_numel(spec, u, r, tp);
}

/* Rank 0 places tp rank r's (ep rank q's) local buffer of unit u into the
 * whole unit (tp = 1 layout: tensors one after the other, whole; train.lora's
 * frozen ones after the trainable ones). */
static void place_unit(const job_model *spec, int u, int r, int tp, int q, int ep, const float *local, float *whole)
{
    int np = model_unit_param_count(spec, u);
    size_t lt = model_unit_numel_ep(spec, u, r, tp, ep), gt = model_unit_numel(spec, u, 0, 1);
    for (int i = 0; i < np; i++) {
        param_spec lp, gp;
        model_unit_param_spec_ep(spec, u, i, r, tp, q, ep, &lp);
        model_unit_param_spec(spec, u, i, 0, 1, &gp);
        size_t lo = lp.offset + (lp.frozen ? lt : 0), go = gp.offset + (gp.frozen ? gt : 0);
        for (size_t j = 0; j < lp.local_numel; j++)
            whole[go + param_global_index(&lp, r, tp, j)] = local[lo + j];
    }
}

/* The pp rank holding unit u. */
static int unit_owner(const engine *e, int u)
{
    int pp = e->job.parallel.pp;
    if (pp == 1) return 0;
    const int *first = sizes_first_unit(e->sz);
    int c = 0;
    while (c + 1 < sizes_chunks(e->sz) && first[c + 1] <= u) c++;
    return pp_chunk_rank(c, pp);
}

/* Rank 0: unit u whole, from its own copy or received from the (dp 0) ranks
 * holding its tp shards, appended to f. */
/* The ep ranks whose copy of unit u differs: every one of an ep group for an
 * expert unit, else the first alone. */
static int unit_ep(const engine *e, int u) { return sizes_expert_unit(e->sz, u) ? sizes_ep(e->sz) : 1; }

static int write_unit(engine *e, FILE *f, int u, float *const *host, char *err, size_t errlen)
{
    const job_model *spec = &e->job.model;
    int tp = e->job.parallel.tp, ep = unit_ep(e, u), cp = e->job.parallel.cp;
    size_t whole_n = unit_all_numel(spec, u, 0, 1, 1), max_n = 0;
    for (int r = 0; r < tp; r++)
        if (unit_all_numel(spec, u, r, tp, ep) > max_n) max_n = unit_all_numel(spec, u, r, tp, ep);
    float *whole = malloc(whole_n * sizeof(float)), *local = malloc((max_n ? max_n : 1) * sizeof(float));
    int rc = whole && local ? DT_EXIT_OK : DT_EXIT_FAIL;
    if (rc != DT_EXIT_OK) snprintf(err, errlen, "rank 0: out of memory dumping parameters");
    for (int q = 0; q < ep && rc == DT_EXIT_OK && !e->x.failed; q++)
        for (int r = 0; r < tp && rc == DT_EXIT_OK && !e->x.failed; r++) {
            /* ep rank q of the first ep group: dp x cp place q */
            int src = mesh_rank(&e->mesh, (mesh_coord){.dp = q / cp, .cp = q % cp, .pp = unit_owner(e, u), .tp = r});
            if (src == 0) {
                place_unit(spec, u, r, tp, q, ep, host[u], whole);
            } else if (strat_fail(&e->x, e->world,
                                  comm_recv(e->world, local, unit_all_numel(spec, u, r, tp, ep), COMM_F32, src),
                                  "receive of parameters") == COMM_OK) {
                place_unit(spec, u, r, tp, q, ep, local, whole);
            }
        }
    if (rc == DT_EXIT_OK && !e->x.failed && fwrite(whole, sizeof(float), whole_n, f) != whole_n) {
        snprintf(err, errlen, "write failed (%s)", strerror(errno));
        rc = DT_EXIT_FAIL;
    }
    free(whole), free(local);
    return rc;
}

int engine_dump_params(engine *e, const char *path, char *err, size_t errlen)
{
    engine_graph_outside(e); /* ops outside the step (train.cuda_graphs) */
    strat_ctx *x = &e->x;
    int n_units = x->n_units;
    /* 1. every rank: its tp-local units, whole (FSDP gathers them over dp) */
    float **host = calloc((size_t)n_units, sizeof(float *));
    size_t max_local = 1;
    for (int u = 0; u < n_units; u++)
        if (e->unit_model[u] && unit_all_numel(&e->job.model, u, e->mc.me.tp, e->job.parallel.tp, unit_ep(e, u)) > max_local)
            max_local = unit_all_numel(&e->job.model, u, e->mc.me.tp, e->job.parallel.tp, unit_ep(e, u));
    float *dev = e->ops->alloc(max_local * sizeof(float));
    int rc = host && dev ? DT_EXIT_OK : DT_EXIT_FAIL;
    for (int u = 0; u < n_units && rc == DT_EXIT_OK && !x->failed; u++) {
        if (!e->unit_model[u]) continue;
        size_t n = model_unit_local_numel(e->unit_model[u], u), f = model_unit_frozen_local_numel(e->unit_model[u], u);
        if (!(host[u] = malloc((n + f ? n + f : 1) * sizeof(float)))) {
            rc = DT_EXIT_FAIL;
            break;
        }
        e->so->gather_unit(e->ds, u, dev);
        e->ops->to_host(host[u], dev, n * sizeof(float));
        if (!f) continue;
        e->so->gather_frozen(e->ds, u, dev); /* train.lora's base */
        e->ops->to_host(host[u] + n, dev, f * sizeof(float));
    }
    if (rc != DT_EXIT_OK) snprintf(err, errlen, "rank %d: out of memory dumping parameters", e->rank);
    /* 2. dp rank 0 of every (pp, tp) sends its units to rank 0, in unit order
     * (the other ranks of the first ep group their expert units) */
    int place = e->mc.me.dp * e->job.parallel.cp + e->mc.me.cp;
    if (rc == DT_EXIT_OK && e->rank != 0 && place < sizes_ep(e->sz)) {
        for (int u = 0; u < n_units && !x->failed; u++)
            if (e->unit_model[u] && (place == 0 || place < unit_ep(e, u)))
                strat_fail(x, e->world,
                           comm_send(e->world, host[u],
                                     unit_all_numel(&e->job.model, u, e->mc.me.tp, e->job.parallel.tp, unit_ep(e, u)),
                                     COMM_F32, 0),
                           "send of parameters");
    }
    /* 3. rank 0 assembles every unit whole, in unit order, and writes it */
    if (rc == DT_EXIT_OK && !x->failed && e->rank == 0) {
        FILE *f = fopen(path, "wb");
        if (!f) {
            snprintf(err, errlen, "%s: cannot write parameters (%s)", path, strerror(errno));
            rc = DT_EXIT_FAIL;
        }
        char why[256];
        for (int u = 0; u < n_units && rc == DT_EXIT_OK && !x->failed; u++)
            if ((rc = write_unit(e, f, u, host, why, sizeof why)) != DT_EXIT_OK)
                snprintf(err, errlen, "%s: %s", path, why);
        if (f && fclose(f) != 0 && rc == DT_EXIT_OK) {
            snprintf(err, errlen, "%s: write failed (%s)", path, strerror(errno));
            rc = DT_EXIT_FAIL;
        }
    }
    for (int u = 0; host && u < n_units; u++) free(host[u]);
    free(host);
    if (dev) e->ops->free(dev);
    if (x->failed) return engine_comm_failed(e, err, errlen);
    return rc;
}
