/* planner.c — `dtrun --plan`: search the layouts of one job on one machine.
 *
 * For nnodes x ranks_per_node ranks it tries every dp x tp x pp with tp a divisor
 * of the ranks per node (a tp group never leaves its node), every sharding mode
 * that means something for that dp (hsdp only when a node holds some but not all
 * of the data-parallel ranks), micro_batch among the divisors of global_batch / dp
 * up to 64, every pipeline schedule (interleaved with 2 chunks per rank),
 * recompute none, selective (only with naive attention and no cp: elsewhere it keeps
 * what none keeps) and block, and with tp > 1 sequence parallelism off and on,
 * and for a GPT in fp32 context parallelism cp (a divisor of the ranks left after tp
 * and pp, with seq_len divisible by 2 cp; dp = the rest); for a mixture of
 * experts (model.moe) expert parallelism ep, every divisor of the experts
 * that divides dp x cp (folded into them: parallel.ep); a layout
 * that does not fit is tried again with the optimizer offloaded to host memory
 * (train.offload: optimizer, when the hardware profile says how fast the host
 * is), an FSDP / HSDP one that still does not fit with the parameter shards
 * too (train.offload: [optimizer, params]), and one with block recompute that
 * still does not fit with its block inputs too (activations): offload only
 * costs time, so it is worth trying only where it makes a layout fit (the
 * offload column says what). A layout fits when every stage leaves the headroom
 * free (hw_headroom: the profile's headroom_percent of a rank's memory, or
 * --headroom): the estimate counts what the worker allocates, not the
 * allocator's fragmentation or a library's own buffers. Each candidate is a job_spec that must pass job_validate
 * (the same rules a job file obeys); its estimate is the dry-run's, memory first
 * so that what does not fit is dropped before its pipeline is simulated.
 *
 * Branch and bound: every layout that fits gets a lower bound of its step time
 * (the pipeline's dependency bound instead of its simulation, step_time.c); then
 * layouts are taken cheapest bound first and simulated, until the top-th best
 * simulated step is below every remaining bound. The top list is exactly the one
 * an exhaustive search prints (test_plan.c checks it), at a fraction of the
 * simulations. Only layouts whose estimate fits within the headroom are ever
 * listed: one that does not is counted, never proposed. */
#include <cJSON.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/clock.h"
#include "lib/util/intmath.h"
#include "runtime/model/model.h"
#include "runtime/plan/dryrun_report.h"
#include "runtime/plan/format.h"
#include "runtime/plan/machine.h"
#include "runtime/plan/plan.h"

#define MAX_MICRO_BATCH 64
#define DONOR_POOL 32

typedef struct {
    int dp, tp, pp, micro_batch, microbatches, v;
    int cp;          /* context parallelism (parallel.cp), 1 without */
    int ep;          /* expert parallelism (parallel.ep), 1 without */
    int sp;          /* sequence parallelism (tp > 1 only) */
    shard_mode mode;
    pp_schedule_kind schedule;
    recompute_kind recompute;
    int offload;     /* train.offload's OFFLOAD_* bits (only where they make the layout fit) */
    double step, samples_per_s, tokens_per_s, mfu, bubble;
    double max_total, device;
    double compute, bubble_time, pipe_comm, tail; /* step = compute + bubble + pipe_comm + tail */
    int tp_crosses;
    int exact;       /* step and the rest simulated; else step is a lower bound */
    char reason[PLAN_WARN_LEN];
} candidate;

typedef struct {
    candidate *c;
    int n, cap;
    long searched, invalid, oom, simulated;
    /* why layouts were invalid: the commonest kind of message (digits aside) and
     * one example, so a user sees e.g. that the heads block every tp that does not divide them */
    struct {
        char shape[160], example[PLAN_WARN_LEN];
        long count;
    } why[8];
    int n_why;
    /* recent estimates' sizes: a new one borrows the split and schedule of one
     * with the same schedule key (sizes_create_reusing) */
    sizes *pool[DONOR_POOL];
    int pool_next;
    int no_floor;    /* estimate every offload retry (plan_offload_floor unused): exhaustive */
} candidates;

/* A donor whose schedule and stage split both match, else one whose schedule
 * matches (the schedule is the dearer to build), else any. */
static const sizes *pick_donor(const candidates *cs, const candidate *c)
{
    const sizes *same_schedule = NULL, *any = NULL;
    for (int i = 0; i < DONOR_POOL; i++) {
        const sizes *s = cs->pool[i];
        if (!s) continue;
        const job_parallel *par = &sizes_job(s)->parallel;
        int schedule_ok = par->pp == c->pp && (c->pp == 1 || (par->pp_schedule == c->schedule &&
                                                              par->microbatches == c->microbatches &&
                                                              par->virtual_stages == c->v));
        int split_ok = par->pp == c->pp && par->virtual_stages == c->v &&
                       sizes_job(s)->train.recompute == c->recompute;
        if (schedule_ok && split_ok) return s;
        if (schedule_ok) same_schedule = s;
        any = s;
    }
    return same_schedule ? same_schedule : any;
}

static void keep_donor(candidates *cs, sizes *s)
{
    sizes_destroy(cs->pool[cs->pool_next]);
    cs->pool[cs->pool_next] = s;
    cs->pool_next = (cs->pool_next + 1) % DONOR_POOL;
}

static int push(candidates *cs, const candidate *c)
{
    if (cs->n == cs->cap) {
        int cap = cs->cap ? cs->cap * 2 : 256;
        candidate *nc = realloc(cs->c, (size_t)cap * sizeof *nc);
        if (!nc) return -1;
        cs->c = nc;
        cs->cap = cap;
    }
    cs->c[cs->n++] = *c;
    return 0;
}

static job_spec candidate_job(const job_spec *base, const candidate *c)
{
    job_spec job = *base;
    job_parallel *par = &job.parallel;
    par->dp = c->dp, par->tp = c->tp, par->pp = c->pp, par->cp = c->cp, par->ep = c->ep;
    par->mode = c->mode;
    par->pp_schedule = c->schedule;
    par->virtual_stages = c->v;
    par->microbatches = c->microbatches;
    par->sequence_parallel = c->sp;
    job.train.micro_batch = c->micro_batch;
    job.train.grad_accum = c->microbatches;
    job.train.recompute = c->recompute;
    job.train.offload = c->offload;
    return job;
}

/* Counts err (job_validate's or the estimate's line) among the reasons. */
static void note_invalid(candidates *cs, const char *path, const char *err)
{
    cs->invalid++;
    size_t n = strlen(path);
    if (n && strncmp(err, path, n) == 0) { /* drop "FILE:LINE:COL: " */
        const char *after = strstr(err + n, ": ");
        if (after) err = after + 2;
    }
    char shape[160];
    size_t k = 0;
    for (const char *q = err; *q && k + 1 < sizeof shape; q++)
        if (!(*q >= '0' && *q <= '9') || k == 0 || shape[k - 1] != '#') shape[k++] = *q >= '0' && *q <= '9' ? '#' : *q;
    shape[k] = '\0';
    for (int i = 0; i < cs->n_why; i++)
        if (strcmp(cs->why[i].shape, shape) == 0) {
            cs->why[i].count++;
            return;
        }
    if (cs->n_why == (int)(sizeof cs->why / sizeof cs->why[0])) return;
    snprintf(cs->why[cs->n_why].shape, sizeof cs->why[0].shape, "%s", shape);
    snprintf(cs->why[cs->n_why].example, sizeof cs->why[0].example, "%s", err);
    cs->why[cs->n_why++].count = 1;
}

/* The commonest reason, or NULL when nothing was invalid. */
static const char *top_invalid(const candidates *cs, long *count)
{
    int best = -1;
    for (int i = 0; i < cs->n_why; i++)
        if (best < 0 || cs->why[i].count > cs->why[best].count) best = i;
    *count = best < 0 ? 0 : cs->why[best].count;
    return best < 0 ? NULL : cs->why[best].example;
}

/* The least a stage's device total can be once train.offload moves the
 * optimizer or the parameter shards to the host, from e (the same layout
 * without offload): each stage's total less all of its model state
 * (parameters, master, gradients, optimizer). Offloading these only moves
 * model state off the device (sizes_rank_memory) and never shrinks what else
 * a rank holds (activations, buffers, fixed overheads; the parameters'
 * gather buffers can only grow), so when this floor leaves less than the
 * headroom free the offloaded layout cannot fit and needs no estimate
 * (most of the retries of a search: test_plan checks the floor against the
 * offloaded estimates). Offloading activations changes what a stage stashes:
 * no floor for it. */
double plan_offload_floor(const plan_estimate *e)
{
    double least = 0;
    for (int p = 0; p < e->n_stages; p++) {
        const plan_stage *st = &e->stage[p];
        double state = (double)st->mem.bytes[SIZES_PARAMS] + (double)st->mem.bytes[SIZES_MASTER] +
                       (double)st->mem.bytes[SIZES_GRADS] + (double)st->mem.bytes[SIZES_OPTIM];
        if (st->total - state > least) least = st->total - state;
    }
    return least;
}

/* Estimate one layout: simulated (exact), or with its pipeline bounded below
 * (pp = 1 needs no simulation, so it is always exact). Returns 1 when it is valid
 * and fits (c filled in), 0 when not (counted), -1 on an internal failure. */
static int estimate(candidates *cs, const job_spec *base, const plan_machine *pm, candidate *c, int simulate)
{
    job_spec job = candidate_job(base, c);
    char err[512];
    if (job_validate(&job, err, sizeof err)) {
        note_invalid(cs, job.path, err);
        return 0;
    }
    plan_estimate e;
    c->exact = simulate || c->pp == 1;
    int rc = plan_estimate_memory_reusing(&e, &job, &pm->hw, pm->nnodes, pm->ranks_per_node, pick_donor(cs, c),
                                          !c->exact, err, sizeof err);
    /* does it fit with the optimizer in host memory? with the parameter shards
     * too (FSDP / HSDP)? with the block inputs as well (block recompute)? */
    int tries[3], n_tries = 0, sharded = c->mode == SHARD_FSDP || c->mode == SHARD_HSDP;
    tries[n_tries++] = OFFLOAD_OPTIMIZER;
    if (sharded) tries[n_tries++] = OFFLOAD_OPTIMIZER | OFFLOAD_PARAMS;
    if (c->recompute == RECOMPUTE_BLOCK) tries[n_tries] = tries[n_tries - 1] | OFFLOAD_ACTIVATIONS, n_tries++;
    /* a try the floor rules out is skipped (the next, with activations, may still fit) */
    int hopeless = !rc && !cs->no_floor && e.n_stages > 0 &&
                   plan_offload_floor(&e) > e.stage[0].device - e.headroom;
    for (int t = 0; t < n_tries; t++) {
        if (rc || e.fits_headroom || c->offload || !pm->hw.gpu ||
            !(pm->hw.host_link_bw > 0 && pm->hw.host_memory_bw > 0))
            break;
        if (hopeless && !(tries[t] & OFFLOAD_ACTIVATIONS)) continue;
        plan_estimate_free(&e);
        c->offload = tries[t];
        job = candidate_job(base, c);
        rc = plan_estimate_memory_reusing(&e, &job, &pm->hw, pm->nnodes, pm->ranks_per_node, pick_donor(cs, c),
                                          !c->exact, err, sizeof err);
        if (!rc && !e.fits_headroom) c->offload = 0;
    }
    int ok = 0;
    if (rc) {
        note_invalid(cs, job.path, err);
    } else if (!e.fits_headroom) {
        cs->oom++;
    } else if (c->exact ? plan_estimate_time(&e, err, sizeof err) : plan_estimate_time_bound(&e, err, sizeof err)) {
        note_invalid(cs, job.path, err);
    } else {
        if (c->exact && c->pp > 1) cs->simulated++;
        c->step = e.step_time;
        c->samples_per_s = e.samples_per_s;
        c->tokens_per_s = e.tokens_per_s;
        c->mfu = e.mfu;
        c->bubble = e.bubble;
        c->max_total = e.max_total;
        c->device = e.stage[0].device;
        c->compute = 0;
        for (int p = 0; p < e.n_stages; p++)
            if (e.stage[p].compute > c->compute) c->compute = e.stage[p].compute;
        c->bubble_time = e.bubble * e.makespan;
        c->pipe_comm = fmax(0, e.makespan - c->bubble_time - c->compute);
        c->tail = e.step_time - e.makespan;
        /* only a simulated layout can be listed (faster_first): a bound's
         * layout skips the walk over every tp group of the world */
        c->tp_crosses = 0;
        for (int r = 0; c->exact && r < e.world && !c->tp_crosses; r += c->tp)
            c->tp_crosses = plan_group_crosses(&e, r, MESH_TP);
        ok = 1;
    }
    if (e.sizes) {
        keep_donor(cs, e.sizes);
        e.sizes = NULL;
    }
    plan_estimate_free(&e);
    return ok;
}

/* Every (dp, tp, pp, schedule, micro_batch, mode, recompute) of the machine, into
 * all (not yet estimated). Schedules: GPipe, 1F1B, interleaved (2 chunks per rank),
 * and ZB-H1 where its split backward runs. */
static int enumerate(candidates *all, const job_spec *job, const plan_machine *pm)
{
    int G = pm->ranks_per_node, W = pm->nnodes * G, L = job->model.n_layer;
    for (int pp = 1; pp <= W && pp <= L; pp++) {
        if (W % pp) continue;
        for (int sched = PP_GPIPE; sched <= PP_ZB_H1; sched++) {
            /* one stage has no schedule to choose (and interleaving needs pp > 1:
             * job_validate refuses it): one candidate, 1F1B's single chunk */
            if (pp == 1 && sched != PP_1F1B) continue;
            for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_ELEMENTWISE; rc++)
                for (int tp = 1; tp <= G && tp <= W / pp; tp++)
                for (int cp = 1; cp <= W / pp / tp; cp++) {
                    if (G % tp || (W / pp) % tp || (W / pp / tp) % cp) continue;
                    /* context parallelism: a GPT in fp32 whose sequence splits into 2 cp chunks */
                    if (cp > 1 && (!job_model_is_lm(&job->model) || job->train.precision != PREC_FP32 ||
                                   job->model.seq_len % (2 * cp)))
                        continue;
                    /* selective recompute keeps what none keeps where the attention keeps only
                     * lse (fused, or cp: no probabilities): the same layout */
                    if (rc == RECOMPUTE_SELECTIVE && model_attention_lse(&job->model, cp)) continue;
                    /* a zero-bubble pipeline's W pass would need the rebuilt norms again */
                    if (rc == RECOMPUTE_ELEMENTWISE && sched == PP_ZB_H1 && pp > 1) continue;
                    int dp = W / tp / pp / cp;
                    if (job->train.global_batch % dp) continue;
                    int per_dp = job->train.global_batch / dp;
                    int shard_in_node = (int)gcd_l(dp, G / tp > 0 ? G / tp : 1);
                    for (int mb = 1; mb <= per_dp && mb <= MAX_MICRO_BATCH; mb++) {
                        if (per_dp % mb) continue;
                        int m = per_dp / mb;
                        if (sched == PP_INTERLEAVED && (m % pp || L < 2 * pp)) continue;
                        for (int mode = SHARD_NONE; mode <= SHARD_HSDP; mode++) {
                            if (dp == 1 && mode != SHARD_NONE) continue;
                            if (mode == SHARD_HSDP && (shard_in_node == 1 || shard_in_node == dp)) continue;
                            /* sequence parallelism where the tokens of a sample split over tp */
                            int max_sp = tp > 1 && model_seq_len(&job->model) / cp % tp == 0;
                            for (int sp = 0; sp <= max_sp; sp++)
                            for (int ep = 1; ep <= dp * cp; ep++) {
                                /* expert parallelism: a divisor of the experts and of dp x cp */
                                int E = job->model.moe.experts;
                                if (ep > 1 && (E < 1 || E % ep || (dp * cp) % ep)) continue;
                                /* zb-h1 only where its B / W split runs (the job checks' rule) */
                                job_parallel zp = {.dp = dp, .tp = tp, .pp = pp, .mode = (shard_mode)mode,
                                                   .sequence_parallel = sp};
                                char why[256];
                                int blame;
                                if (sched == PP_ZB_H1 &&
                                    job_layout_check_zero_bubble(&zp, (recompute_kind)rc, &blame,
                                                                 why, sizeof why))
                                    continue;
                                candidate c;
                                memset(&c, 0, sizeof c);
                                c.dp = dp, c.tp = tp, c.pp = pp, c.cp = cp, c.micro_batch = mb, c.microbatches = m;
                                c.mode = (shard_mode)mode;
                                c.schedule = (pp_schedule_kind)sched;
                                c.v = sched == PP_INTERLEAVED ? 2 : 1;
                                c.recompute = (recompute_kind)rc;
                                c.sp = sp;
                                c.ep = ep;
                                if (push(all, &c)) return -1;
                            }
                        }
                    }
                }
        }
    }
    return 0;
}

/* The order in which layouts share the most: one pipeline schedule (pp,
 * schedule, microbatches) at a time, so each is built once, then the stage split
 * (recompute), then the rest. */
static int schedule_order(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    int k[][2] = {{x->pp, y->pp}, {(int)x->schedule, (int)y->schedule}, {x->microbatches, y->microbatches},
                  {(int)x->recompute, (int)y->recompute}, {x->tp, y->tp}, {x->micro_batch, y->micro_batch},
                  {(int)x->mode, (int)y->mode}, {x->sp, y->sp}, {x->cp, y->cp}, {x->ep, y->ep}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i][0] != k[i][1]) return k[i][0] < k[i][1] ? -1 : 1;
    return 0;
}

static int bound_first(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return schedule_order(a, b);
}

static int faster_first(const void *a, const void *b);

/* Keeps the `top` fastest exact steps seen, ascending; returns the top-th, or
 * infinity while there are fewer. */
static double note_exact(double *best, int *n, int top, double step)
{
    if (*n == top && step >= best[top - 1]) return best[top - 1];
    int i = *n < top ? (*n)++ : top - 1; /* the free slot, or the one dropped */
    for (; i > 0 && best[i - 1] > step; i--) best[i] = best[i - 1];
    best[i] = step;
    return *n == top ? best[top - 1] : INFINITY;
}

/* Fills cs with every layout that fits, the best `top` of them (and any that
 * could tie with them) simulated; exhaustive: simulate all. */
static int search(candidates *cs, const job_spec *job, const plan_machine *pm, int top, int exhaustive)
{
    candidates all;
    memset(&all, 0, sizeof all);
    if (enumerate(&all, job, pm)) {
        free(all.c);
        return -1;
    }
    qsort(all.c, (size_t)all.n, sizeof *all.c, schedule_order);
    cs->searched = all.n;
    for (int i = 0; i < all.n; i++) {
        candidate c = all.c[i];
        int rc = estimate(cs, job, pm, &c, exhaustive);
        if (rc < 0 || (rc == 1 && push(cs, &c))) {
            free(all.c);
            return -1;
        }
    }
    free(all.c);
    if (exhaustive) return 0;
    /* cheapest bound first; stop when the top-th exact step beats every bound left */
    qsort(cs->c, (size_t)cs->n, sizeof *cs->c, bound_first);
    double *best = malloc((size_t)top * sizeof *best), kth = INFINITY;
    int n_best = 0;
    if (!best) return -1;
    for (int i = 0; i < cs->n && cs->c[i].step <= kth; i++) {
        if (!cs->c[i].exact && estimate(cs, job, pm, &cs->c[i], 1) != 1) {
            free(best); /* it fitted a moment ago: the same estimate cannot fail now */
            return -1;
        }
        kth = note_exact(best, &n_best, top, cs->c[i].step);
    }
    free(best);
    return 0;
}

/* Exact estimates first (only they can be printed), fastest first. */
static int faster_first(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->exact != y->exact) return x->exact ? -1 : 1;
    if (x->samples_per_s != y->samples_per_s) return x->samples_per_s > y->samples_per_s ? -1 : 1;
    if (x->max_total != y->max_total) return x->max_total < y->max_total ? -1 : 1;
    return 0;
}

/* How much of the forward a recompute mode re-runs: none < elementwise <
 * selective < block. */
static int recompute_work(recompute_kind r)
{
    return r == RECOMPUTE_BLOCK ? 3 : r == RECOMPUTE_SELECTIVE ? 2 : r == RECOMPUTE_ELEMENTWISE ? 1 : 0;
}

/* One line: why this candidate wins, or what it loses to the best. */
static void explain(candidate *c, const candidate *best, int is_best)
{
    char a[FMT_LEN], b[FMT_LEN];
    size_t at = 0, n = sizeof c->reason;
    double spare = c->device - c->max_total;
    if (is_best) {
        at += (size_t)snprintf(c->reason + at, n - at, "fastest; ");
    } else {
        double d_compute = c->compute - best->compute, d_bubble = c->bubble_time - best->bubble_time;
        double d_comm = c->pipe_comm - best->pipe_comm, d_tail = c->tail - best->tail;
        double worst = d_compute;
        const char *what = recompute_work(c->recompute) <= recompute_work(best->recompute)
                               ? "compute (smaller GEMMs per rank)"
                           : c->recompute == RECOMPUTE_BLOCK ? "compute (recompute re-runs forward)"
                                                             : "compute (recompute re-runs attention)";
        if (d_bubble > worst) worst = d_bubble, what = "pipeline bubble";
        if (d_comm > worst) worst = d_comm, what = c->tp > 1 ? "tp collectives / sharding traffic" : "sharding traffic";
        if (d_tail > worst) worst = d_tail, what = "dp comm + optimizer after backward";
        at += (size_t)snprintf(c->reason + at, n - at, "%.0f %% slower: %s +%s; ",
                               100.0 * (c->step / best->step - 1.0), what, fmt_seconds(a, worst));
    }
    if (at < n) at += (size_t)snprintf(c->reason + at, n - at, "fits with %s spare", fmt_bytes(b, spare));
    if (c->pp > 1 && at < n) at += (size_t)snprintf(c->reason + at, n - at, "; bubble %.1f %%", 100 * c->bubble);
    if (c->tp > 1 && at < n)
        at += (size_t)snprintf(c->reason + at, n - at, "; tp %s", c->tp_crosses ? "CROSSES nodes" : "inside node");
    if (c->tail > 0.05 * c->step && at < n)
        snprintf(c->reason + at, n - at, "; %.0f %% of step after backward", 100 * c->tail / c->step);
}

/* The job's own layout, priced like every candidate, so the plan says how
 * its best compares with what the job file asks for. */
typedef struct {
    int compared;             /* the layout has the plan's ranks and was estimated */
    char why[PLAN_WARN_LEN];  /* when not compared: why */
    char layout[256];
    double step, samples_per_s, tokens_per_s, mfu, max_total, device, headroom;
    int fits, fits_headroom;
} own_layout;

static void describe_layout(const job_spec *job, char *out, size_t n)
{
    const job_parallel *par = &job->parallel;
    char cp[48] = "", sched[96] = "";
    if (par->cp > 1) snprintf(cp, sizeof cp, " x cp %d", par->cp);
    if (par->ep > 1) snprintf(cp + strlen(cp), sizeof cp - strlen(cp), " (ep %d)", par->ep);
    if (par->pp > 1)
        snprintf(sched, sizeof sched, ", pp_schedule %s, virtual_stages %d, microbatches %d",
                 pp_schedule_kind_name(par->pp_schedule), par->virtual_stages, par->microbatches);
    snprintf(out, n, "dp %d x tp %d%s x pp %d%s, mode %s%s, micro_batch %d, recompute %s", par->dp, par->tp,
             par->sequence_parallel && par->tp > 1 ? " (sequence parallel)" : "", par->pp, cp,
             job_shard_mode_name(par->mode), sched, job->train.micro_batch, job_recompute_name(job->train.recompute));
}

static void estimate_own(const job_spec *job, const plan_machine *pm, own_layout *ow)
{
    memset(ow, 0, sizeof *ow);
    describe_layout(job, ow->layout, sizeof ow->layout);
    const job_parallel *par = &job->parallel;
    int world = par->dp * par->tp * par->pp * par->cp, W = pm->nnodes * pm->ranks_per_node;
    if (world != W) {
        snprintf(ow->why, sizeof ow->why, "its %d ranks are not the plan's %d", world, W);
        return;
    }
    char err[PLAN_WARN_LEN];
    plan_estimate e;
    int rc = job_validate(job, err, sizeof err);
    if (rc == 0) rc = plan_estimate_memory(&e, job, &pm->hw, pm->nnodes, pm->ranks_per_node, err, sizeof err);
    if (rc == 0 && plan_estimate_time(&e, err, sizeof err) == 0) {
        ow->compared = 1;
        ow->step = e.step_time, ow->samples_per_s = e.samples_per_s, ow->tokens_per_s = e.tokens_per_s;
        ow->mfu = e.mfu, ow->max_total = e.max_total, ow->device = e.stage[0].device, ow->headroom = e.headroom;
        ow->fits = e.fits, ow->fits_headroom = e.fits_headroom;
    } else {
        snprintf(ow->why, sizeof ow->why, "%s", err);
    }
    if (rc == 0) plan_estimate_free(&e);
}

/* "the best above is 12 % faster" and the like, against the job's layout. */
static void compare_text(const candidates *cs, const own_layout *ow, char *out, size_t n)
{
    if (!cs->n || !(ow->samples_per_s > 0)) {
        snprintf(out, n, "%s", cs->n ? "" : "nothing above to compare it with");
        return;
    }
    double r = cs->c[0].samples_per_s / ow->samples_per_s - 1;
    if (fabs(r) < 0.005) snprintf(out, n, "the best above is as fast");
    else snprintf(out, n, "the best above is %.0f %% %s", 100 * fabs(r), r > 0 ? "faster" : "slower");
}

/* train.offload as the job file writes it: "optimizer,params", "none". */
static void offload_text(int offload, char *out, size_t n)
{
    snprintf(out, n, "%s%s%s", offload & OFFLOAD_OPTIMIZER ? "optimizer" : "",
             offload & OFFLOAD_PARAMS ? ",params" : "", offload & OFFLOAD_ACTIVATIONS ? ",activations" : "");
    if (!offload) snprintf(out, n, "none");
}

/* The table's columns are the job file's own keys (parallel.dp ...,
 * train.micro_batch, parallel.microbatches, parallel.pp_schedule,
 * parallel.virtual_stages, train.recompute, train.offload), so a row reads as
 * the job it proposes; each column as wide as its widest cell. */
enum { COLS = 18, CELL = 48 };
enum { COL_EP = 5 }; /* parallel.ep: a column for a mixture of experts only */

/* the cells, then `why` (longer than a cell) */
static void print_row(FILE *out, char cells[COLS][CELL], const int *width, int moe, const char *why)
{
    /* words left-aligned, numbers right-aligned */
    static const int left[COLS] = {0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0};
    fprintf(out, " ");
    for (int k = 0; k < COLS; k++)
        if (k != COL_EP || moe) fprintf(out, " %*s", left[k] ? -width[k] : width[k], cells[k]);
    fprintf(out, "  %s\n", why);
}

static void print_own(const candidates *cs, const own_layout *ow, const job_spec *job, FILE *out)
{
    char a[FMT_LEN], b[FMT_LEN], c[FMT_LEN], d[FMT_LEN], cmp[96];
    if (!ow->compared) {
        fprintf(out, "\nthe job's own layout (%s): not compared, %s\n", ow->layout, ow->why);
        return;
    }
    compare_text(cs, ow, cmp, sizeof cmp);
    fprintf(out, "\nthe job's own layout (%s): %s a step, %s %s, MFU %.1f %%, %s on its fullest stage: ", ow->layout,
            fmt_seconds(a, ow->step), fmt_count(b, job_model_is_lm(&job->model) ? ow->tokens_per_s : ow->samples_per_s),
            job_model_is_lm(&job->model) ? "tokens/s" : "images/s", 100 * ow->mfu, fmt_bytes(c, ow->max_total));
    if (ow->fits_headroom) fprintf(out, "fits with the headroom");
    else if (ow->fits) fprintf(out, "fits the device but not with the headroom (%s)", fmt_bytes(d, ow->device - ow->headroom));
    else fprintf(out, "does not fit (%s on the device)", fmt_bytes(d, ow->device));
    fprintf(out, "%s%s\n", cmp[0] ? "; " : "", cmp);
}

static void print_text(const candidates *cs, int top, const job_spec *job, const plan_machine *pm, double secs,
                       const own_layout *ow, FILE *out)
{
    const job_model *m = &job->model;
    char a[FMT_LEN], room[512];
    double device = cs->n ? cs->c[0].device : pm->hw.gpu ? pm->hw.memory : pm->hw.memory / pm->ranks_per_node;
    fprintf(out, "dtrun plan: %s %s, global_batch %d, %s; %d node%s x %d %s = %d ranks (GB = 1e9 bytes)\n",
            job_model_kind_name(m->kind), m->preset[0] ? m->preset : "(custom)", job->train.global_batch,
            pm->hw.gpu && job->train.precision == PREC_BF16 ? "bf16 mixed precision" : "fp32", pm->nnodes,
            pm->nnodes == 1 ? "" : "s", pm->ranks_per_node, pm->hw.name, pm->nnodes * pm->ranks_per_node);
    plan_headroom_text(&pm->hw, device, room, sizeof room);
    fprintf(out, "headroom: every layout below keeps %s\n", room);
    fprintf(out, "searched %ld layouts: %d fit, %ld do not fit in %s less the headroom, %ld invalid for this model "
                 "and batch\n",
            cs->searched, cs->n, cs->oom, fmt_bytes(a, device), cs->invalid);
    long alike;
    const char *why = top_invalid(cs, &alike);
    if (why) fprintf(out, "%ld of the invalid layouts alike: %s\n", alike, why);
    /* the one line that differs from run to run: the time */
    fprintf(out, "(%ld pipelines simulated; every other layout's step time was bounded below by more than the "
                 "top %d's; %.3f s in all)\n\n",
            cs->simulated, top, secs);
    if (cs->n == 0) {
        fprintf(out, "  nothing fits: a bigger machine, more nodes, a smaller global_batch or a smaller headroom\n");
        print_own(cs, ow, job, out);
        return;
    }
    int rows = top < cs->n ? top : cs->n, width[COLS] = {0};
    char (*cell)[COLS][CELL] = calloc((size_t)rows + 1, sizeof *cell);
    if (!cell) return;
    static const char *const head[COLS] = {"#", "dp", "tp", "pp", "cp", "ep", "sequence_parallel", "mode",
                                           "micro_batch", "microbatches", "pp_schedule", "virtual_stages", "recompute",
                                           "offload", "step", "tokens/s", "MFU", "memory/rank"};
    int moe = m->moe.experts > 0;
    for (int k = 0; k < COLS; k++) snprintf(cell[0][k], CELL, "%s", head[k]);
    if (!job_model_is_lm(m)) snprintf(cell[0][15], CELL, "images/s");
    for (int i = 0; i < rows; i++) {
        const candidate *c = &cs->c[i];
        char (*r)[CELL] = cell[i + 1];
        snprintf(r[0], CELL, "%d", i + 1);
        snprintf(r[1], CELL, "%d", c->dp);
        snprintf(r[2], CELL, "%d", c->tp);
        snprintf(r[3], CELL, "%d", c->pp);
        snprintf(r[4], CELL, "%d", c->cp);
        snprintf(r[COL_EP], CELL, "%d", c->ep);
        snprintf(r[6], CELL, "%s", c->sp ? "yes" : "no");
        snprintf(r[7], CELL, "%s", job_shard_mode_name(c->mode));
        snprintf(r[8], CELL, "%d", c->micro_batch);
        snprintf(r[9], CELL, "%d", c->microbatches);
        snprintf(r[10], CELL, "%s", c->pp == 1 ? "none" : pp_schedule_kind_name(c->schedule));
        snprintf(r[11], CELL, "%d", c->v);
        snprintf(r[12], CELL, "%s", job_recompute_name(c->recompute));
        offload_text(c->offload, r[13], CELL);
        fmt_seconds(r[14], c->step);
        fmt_count(r[15], job_model_is_lm(m) ? c->tokens_per_s : c->samples_per_s);
        snprintf(r[16], CELL, "%.1f%%", 100 * c->mfu);
        fmt_bytes(r[17], c->max_total);
    }
    for (int i = 0; i <= rows; i++)
        for (int k = 0; k < COLS; k++)
            if ((int)strlen(cell[i][k]) > width[k]) width[k] = (int)strlen(cell[i][k]);
    print_row(out, cell[0], width, moe, "why");
    for (int i = 0; i < rows; i++) print_row(out, cell[i + 1], width, moe, cs->c[i].reason);
    free(cell);
    print_own(cs, ow, job, out);
}

static int print_json(const candidates *cs, int top, const plan_machine *pm, double secs, const own_layout *ow,
                      FILE *out, char *err, size_t errlen)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "hardware", pm->hw.name);
    cJSON_AddNumberToObject(root, "nnodes", pm->nnodes);
    cJSON_AddNumberToObject(root, "ranks_per_node", pm->ranks_per_node);
    cJSON_AddNumberToObject(root, "world", pm->nnodes * pm->ranks_per_node);
    cJSON_AddNumberToObject(root, "searched", (double)cs->searched);
    cJSON_AddNumberToObject(root, "fit", cs->n);
    cJSON_AddNumberToObject(root, "oom", (double)cs->oom); /* do not fit within the headroom */
    double device = cs->n ? cs->c[0].device : pm->hw.gpu ? pm->hw.memory : pm->hw.memory / pm->ranks_per_node;
    cJSON_AddNumberToObject(root, "device_bytes", device);
    cJSON_AddNumberToObject(root, "headroom_bytes", hw_headroom(&pm->hw, device));
    cJSON_AddNumberToObject(root, "invalid", (double)cs->invalid);
    cJSON_AddNumberToObject(root, "simulated", (double)cs->simulated);
    long alike;
    const char *why = top_invalid(cs, &alike);
    if (why) {
        cJSON_AddStringToObject(root, "invalid_example", why);
        cJSON_AddNumberToObject(root, "invalid_alike", (double)alike);
    }
    cJSON_AddNumberToObject(root, "seconds", secs);
    cJSON *arr = cJSON_AddArrayToObject(root, "top");
    for (int i = 0; i < top && i < cs->n; i++) {
        const candidate *c = &cs->c[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", i + 1);
        cJSON_AddNumberToObject(o, "dp", c->dp);
        cJSON_AddNumberToObject(o, "tp", c->tp);
        cJSON_AddBoolToObject(o, "sequence_parallel", c->sp);
        cJSON_AddNumberToObject(o, "cp", c->cp);
        cJSON_AddNumberToObject(o, "ep", c->ep);
        cJSON_AddNumberToObject(o, "pp", c->pp);
        cJSON_AddStringToObject(o, "mode", job_shard_mode_name(c->mode));
        cJSON_AddNumberToObject(o, "micro_batch", c->micro_batch);
        cJSON_AddNumberToObject(o, "microbatches", c->microbatches);
        cJSON_AddStringToObject(o, "pp_schedule", job_pp_schedule_name(c->schedule));
        cJSON_AddNumberToObject(o, "virtual_stages", c->v);
        cJSON_AddStringToObject(o, "recompute", job_recompute_name(c->recompute));
        cJSON_AddBoolToObject(o, "offload_optimizer", (c->offload & OFFLOAD_OPTIMIZER) != 0);
        cJSON_AddBoolToObject(o, "offload_params", (c->offload & OFFLOAD_PARAMS) != 0);
        cJSON_AddBoolToObject(o, "offload_activations", (c->offload & OFFLOAD_ACTIVATIONS) != 0);
        cJSON_AddNumberToObject(o, "step_s", c->step);
        cJSON_AddNumberToObject(o, "samples_per_s", c->samples_per_s);
        cJSON_AddNumberToObject(o, "tokens_per_s", c->tokens_per_s);
        cJSON_AddNumberToObject(o, "mfu", c->mfu);
        cJSON_AddNumberToObject(o, "bubble", c->bubble);
        cJSON_AddNumberToObject(o, "memory_bytes", c->max_total);
        cJSON_AddNumberToObject(o, "device_bytes", c->device);
        cJSON_AddNumberToObject(o, "headroom_bytes", hw_headroom(&pm->hw, c->device));
        cJSON_AddStringToObject(o, "reason", c->reason);
        cJSON_AddItemToArray(arr, o);
    }
    cJSON *jo = cJSON_AddObjectToObject(root, "job_layout");
    cJSON_AddStringToObject(jo, "layout", ow->layout);
    cJSON_AddBoolToObject(jo, "compared", ow->compared);
    if (!ow->compared) {
        cJSON_AddStringToObject(jo, "why", ow->why);
    } else {
        cJSON_AddNumberToObject(jo, "step_s", ow->step);
        cJSON_AddNumberToObject(jo, "samples_per_s", ow->samples_per_s);
        cJSON_AddNumberToObject(jo, "tokens_per_s", ow->tokens_per_s);
        cJSON_AddNumberToObject(jo, "mfu", ow->mfu);
        cJSON_AddNumberToObject(jo, "memory_bytes", ow->max_total);
        cJSON_AddBoolToObject(jo, "fits", ow->fits);
        cJSON_AddBoolToObject(jo, "fits_headroom", ow->fits_headroom);
        if (cs->n && ow->samples_per_s > 0)
            cJSON_AddNumberToObject(jo, "best_speedup", cs->c[0].samples_per_s / ow->samples_per_s);
    }
    return plan_json_write(root, "plan", out, err, errlen);
}

int plan_run(const job_spec *job, const dryrun_opts *o, FILE *out, char *err, size_t errlen)
{
    plan_machine pm;
    if (plan_machine_resolve(&pm, job, o, 1, err, errlen)) return DT_EXIT_USAGE;
    int top = o->top > 0 ? o->top : 10;
    candidates cs;
    memset(&cs, 0, sizeof cs);
    /* Thousands of layouts each build and free the same few schedule and
     * simulation buffers (up to megabytes with many microbatches). glibc would
     * hand the large ones back to the kernel every time and fault them in again
     * (measured: a third of --plan's time); keep them on the heap instead. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20); /* glibc's largest allowed value */
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    double t0 = clock_now_s();
    cs.no_floor = o->exhaustive;
    int failed = search(&cs, job, &pm, top, o->exhaustive);
    for (int i = 0; i < DONOR_POOL; i++) sizes_destroy(cs.pool[i]);
    if (failed) {
        free(cs.c);
        snprintf(err, errlen, "plan: out of memory");
        return 1;
    }
    qsort(cs.c, (size_t)cs.n, sizeof *cs.c, faster_first);
    for (int i = 0; i < cs.n && i < top; i++) explain(&cs.c[i], &cs.c[0], i == 0);
    double secs = clock_now_s() - t0;
    own_layout ow;
    estimate_own(job, &pm, &ow);
    int rc = 0;
    if (o->format == DRYRUN_JSON) rc = print_json(&cs, top, &pm, secs, &ow, out, err, errlen) ? 1 : 0;
    else print_text(&cs, top, job, &pm, secs, &ow, out);
    if (rc == 0 && cs.n == 0) {
        snprintf(err, errlen, "plan: no layout of %d ranks fits %s with the headroom kept free (%ld searched)",
                 pm.nnodes * pm.ranks_per_node, pm.hw.name, cs.searched);
        rc = DT_EXIT_USAGE;
    }
    free(cs.c);
    return rc;
}
