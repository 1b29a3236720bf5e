/* test_pp_exec.c — the pipeline executor against one process.
 *
 * For p = 2 and 4 the test forks p ranks (file store, shm transport) and runs one
 * step of every schedule — GPipe and 1F1B with m = 1, 2, 4, 8, interleaved (v = 2)
 * with every m in that set that p divides — on a tiny GPT, plus one ViT run each;
 * every rank writes its loss and its chunks' gradients to a file, and the parent
 * compares them with the whole model run micro-batch by micro-batch in this
 * process: loss within 1e-6 relative, each gradient tensor within 1e-5 (the two
 * copies of the tied wte summed first, as the engine's embedding group will). The
 * ranks also check their slot pools against the schedule's in-flight counts, the
 * engine's backward hooks, and that an evaluation (forward-only) step gives the
 * same loss and leaves the gradients alone. p = 1 with v = 2 and 4 runs in this
 * process (same-rank chunks hand tensors over in memory). A rank killed mid-step
 * must turn into an error line on every survivor well within the comm timeout.
 * Finally the measured bubble of GPipe / 1F1B is printed next to (p-1)/(m+p-1). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/store.h"
#include "runtime/model/model.h"
#include "runtime/parallel/pp_exec.h"
#include "runtime/parallel/pp_partition.h"
#include "runtime/parallel/pp_schedule.h"
#include "runtime/parallel/sizes.h"
#include "runtime/rng.h"
#include "test/unit/check.h"

static const dt_ops *ops = &dt_ops_cpu;

#ifdef __SANITIZE_ADDRESS__
enum { UNDER_ASAN = 1 };
#else
enum { UNDER_ASAN = 0 };
#endif

enum { MAXB = 4, MAXT = 64, MAXM = 8, SEED = 7 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static job_model gpt_spec(int L, int C, int T)
{
    job_model s;
    memset(&s, 0, sizeof s);
    s.kind = MODEL_GPT;
    s.n_layer = L; s.n_head = 2; s.d_model = C; s.d_ff = 4 * C;
    s.vocab_size = 32; s.seq_len = T;
    return s;
}

static job_model vit_spec(int L)
{
    job_model s;
    memset(&s, 0, sizeof s);
    s.kind = MODEL_VIT;
    s.n_layer = L; s.n_head = 2; s.d_model = 16; s.d_ff = 64;
    s.image_size = 8; s.patch_size = 4; s.channels = 1; s.n_classes = 3;
    return s;
}

/* ---- the data: micro-batch mb is a pure function of (SEED, mb) ---- */

typedef struct {
    int tokens[MAXB * MAXT], targets[MAXB * MAXT], labels[MAXB];
    float images[MAXB * 64];
} mb_data;

typedef struct {
    const job_model *spec;
    int B;
    mb_data d[MAXM];
} test_data;

static void make_data(test_data *t, const job_model *s, int B, int m)
{
    memset(t, 0, sizeof *t);
    t->spec = s;
    t->B = B;
    uint64_t V = s->vocab_size > 0 ? (uint64_t)s->vocab_size : 1;
    int T = s->kind == MODEL_GPT ? s->seq_len : 0;
    for (int mb = 0; mb < m; mb++) {
        uint64_t k = rng_key3(SEED, "pp-exec-batch", (uint64_t)mb, 0);
        mb_data *d = &t->d[mb];
        for (int i = 0; i < B * T; i++) {
            d->tokens[i] = (int)rng_below(k, (uint64_t)i, V);
            d->targets[i] = (int)rng_below(k, 100000 + (uint64_t)i, V);
        }
        for (int i = 0; i < B * 64; i++) d->images[i] = rng_normal(k, 200000 + (uint64_t)i);
        for (int b = 0; b < B; b++) d->labels[b] = (int)rng_below(k, 300000 + (uint64_t)b, 3);
    }
}

static void fill_batch(const test_data *t, int mb, model_batch *out)
{
    const mb_data *d = &t->d[mb];
    *out = (model_batch){.B = t->B, .tokens = d->tokens, .targets = d->targets, .images = d->images,
                         .labels = d->labels};
}

static int provide(void *ctx, int mb, model_batch *out, char *err, size_t errlen)
{
    fill_batch(ctx, mb, out);
    return 0;
}

static float loss_scale_of(const job_model *s, int B, int m)
{
    int per = s->kind == MODEL_GPT ? s->seq_len : 1;
    return 1.0f / (float)(B * m * per);
}

/* ---- the reference: the whole model, micro-batches one after the other ---- */

typedef struct {
    double loss;
    long correct;
    int n;          /* params of the whole model */
    float **grad;   /* [n] copies */
    const param_spec **spec;
    model *whole;
} reference;

static void reference_run(reference *r, const job_model *s, const test_data *t, int m)
{
    memset(r, 0, sizeof *r);
    model_shard sh = {0, 1, 0, model_n_units(s), 0, 0, 1, 0, 1};
    r->whole = model_create(s, &sh, ops, RECOMPUTE_NONE);
    model_init_params(r->whole, SEED);
    model_zero_grads(r->whole);
    model_acts *a = model_acts_create(r->whole, t->B);
    for (int mb = 0; mb < m; mb++) {
        model_batch b;
        fill_batch(t, mb, &b);
        int correct = 0;
        r->loss += model_forward(r->whole, a, &b, &correct);
        r->correct += correct;
        model_backward(r->whole, a, &b, loss_scale_of(s, t->B, m));
    }
    model_acts_destroy(a);
    r->n = model_param_count(r->whole);
    r->grad = calloc((size_t)r->n, sizeof *r->grad);
    r->spec = calloc((size_t)r->n, sizeof *r->spec);
    for (int i = 0; i < r->n; i++) {
        r->spec[i] = model_param(r->whole, i);
        r->grad[i] = model_param_grad(r->whole, i);
    }
}

static void reference_free(reference *r)
{
    free(r->grad);
    free(r->spec);
    model_destroy(r->whole);
}

static int reference_find(const reference *r, int unit, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (r->spec[i]->unit == unit && !strcmp(r->spec[i]->name, name)) return i;
    return -1;
}

/* ---- one rank's run of one configuration ---- */

typedef struct {
    pp_schedule_kind kind;
    int m, v;
    int vit;
    recompute_kind recompute; /* of the pipeline's chunks (the reference never recomputes) */
    int spare;                /* slots sized for B + spare samples: a short micro-batch */
    int naive;                /* model.attention naive (selective recompute then shares one
                                 set of probabilities in the working set) */
} config;

/* What the backward hooks saw. */
typedef struct {
    int before, after;            /* calls */
    int last_chunk_flags;         /* calls with last_of_chunk set (before) */
    int last_rank_flags;          /* calls with last_of_rank set (before) */
    int last_rank_was_final;      /* the last_of_rank call was the final one */
    int unpaired;                 /* after without a matching before */
    int open_chunk, open_mb;
} hook_log;

static void hook_before(void *ctx, int chunk, int mb, int last_chunk, int last_rank)
{
    hook_log *h = ctx;
    if (h->open_chunk >= 0) h->unpaired++;
    h->open_chunk = chunk, h->open_mb = mb;
    h->before++;
    h->last_chunk_flags += last_chunk;
    h->last_rank_flags += last_rank;
    h->last_rank_was_final = last_rank;
}

static void hook_after(void *ctx, int chunk, int mb, int last_chunk, int last_rank)
{
    hook_log *h = ctx;
    if (h->open_chunk != chunk || h->open_mb != mb) h->unpaired++;
    h->open_chunk = -1;
    h->after++;
}

/* Result of one rank: a header, then its gradient tensors. */
typedef struct {
    int rc;
    double loss, eval_loss;
    long correct, eval_correct;
    int slots_ok;       /* pool sizes == pp_schedule_peak_in_flight_chunk, and the
                           stash memory pp_stash_pool_bytes of them */
    int pooled;         /* the rank's chunks share one stash pool */
    int hooks_ok;
    int eval_grads_ok;  /* the forward-only step left the gradients alone */
    int counts_ok;      /* forwards / backwards done == the list's */
    double step_s, busy_s, idle_s, bubble;
    double elapsed;
    char err[400];
    int n_tensors;
} rank_header;

typedef struct {
    int unit;
    char name[PARAM_NAME_MAX];
    size_t numel;
} tensor_header;

typedef struct {
    job_model spec;
    test_data data;
    pp_schedule sched;
    int first_unit[17];
    model *chunks[8];
    int v;
    int capacity; /* samples each slot holds (>= the step's B) */
} rank_setup;

static int setup(rank_setup *rs, const job_model *s, const config *c, int p, int rank, int B)
{
    memset(rs, 0, sizeof *rs);
    rs->spec = *s;
    rs->v = c->v;
    rs->capacity = B + c->spare;
    make_data(&rs->data, &rs->spec, B, c->m);
    char err[300];
    if (pp_schedule_build(&rs->sched, c->kind, p, c->m, c->v, err, sizeof err)) {
        fprintf(stderr, "schedule: %s\n", err);
        return -1;
    }
    int n_units = model_n_units(s);
    double cost[64];
    for (int u = 0; u < n_units; u++) cost[u] = sizes_unit_flops(s, u, RECOMPUTE_NONE);
    if (pp_partition(cost, n_units, p, c->v, rs->first_unit, err, sizeof err)) {
        fprintf(stderr, "partition: %s\n", err);
        return -1;
    }
    for (int l = 0; l < c->v; l++) {
        int ch = pp_chunk_id(rank, l, p);
        model_shard sh = {0, 1, rs->first_unit[ch], rs->first_unit[ch + 1], 0, 0, 1, 0, 1};
        rs->chunks[l] = model_create(s, &sh, ops, c->recompute);
        model_init_params(rs->chunks[l], SEED);
        model_zero_grads(rs->chunks[l]);
    }
    return 0;
}

static void teardown(rank_setup *rs)
{
    for (int l = 0; l < rs->v; l++) model_destroy(rs->chunks[l]);
    pp_schedule_free(&rs->sched);
}

static size_t grad_floats(rank_setup *rs)
{
    size_t n = 0;
    for (int l = 0; l < rs->v; l++)
        for (int i = 0; i < model_param_count(rs->chunks[l]); i++)
            n += model_param(rs->chunks[l], i)->local_numel;
    return n;
}

static void copy_grads(rank_setup *rs, float *out)
{
    for (int l = 0; l < rs->v; l++)
        for (int i = 0; i < model_param_count(rs->chunks[l]); i++) {
            size_t n = model_param(rs->chunks[l], i)->local_numel;
            memcpy(out, model_param_grad(rs->chunks[l], i), n * sizeof(float));
            out += n;
        }
}

/* Runs one training step and one evaluation step on this rank; fills h. The
 * gradients stay in rs->chunks. */
static void run_rank(rank_setup *rs, comm *pp, int p, int rank, rank_header *h, int bubble_steps)
{
    memset(h, 0, sizeof *h);
    pp_exec_config cfg = {&rs->sched, rank, pp, rs->chunks, rs->capacity, ops};
    double t0 = now_s();
    pp_exec *ex = pp_exec_create(&cfg, h->err, sizeof h->err);
    if (!ex) {
        h->rc = -1;
        return;
    }
    /* as the engine does: the chunks compute one at a time, one scratch */
    if (model_share_scratch(rs->chunks, rs->v)) {
        snprintf(h->err, sizeof h->err, "chunks cannot share their scratch");
        h->rc = -1;
        pp_exec_destroy(ex);
        return;
    }
    h->slots_ok = 1;
    int slots[8];
    size_t stash[8], largest = 0;
    for (int l = 0; l < rs->v; l++) {
        slots[l] = pp_exec_slots(ex, l);
        stash[l] = model_acts_stash_bytes(rs->chunks[l], rs->capacity);
        if (stash[l] > largest) largest = stash[l];
        if (slots[l] != pp_schedule_peak_in_flight_chunk(&rs->sched, pp_chunk_id(rank, l, p))) h->slots_ok = 0;
    }
    /* the stashes: each slot's own, or (interleaved, when smaller) one pool of
     * as many as the rank's chunks hold at once, each the largest chunk's */
    int all = (int)pp_schedule_peak_in_flight(&rs->sched, rank, NULL);
    size_t want = pp_stash_pool_bytes(rs->v, slots, stash, all, &h->pooled);
    if (h->pooled ? pp_exec_pool_bytes(ex) != want || want != (size_t)all * largest : pp_exec_pool_bytes(ex) != 0)
        h->slots_ok = 0;
    hook_log hl = {0};
    hl.open_chunk = -1;
    pp_exec_hooks hooks = {&hl, hook_before, hook_after, NULL, NULL};
    pp_exec_set_hooks(ex, &hooks);
    pp_exec_step_args args = {1, rs->data.B, loss_scale_of(&rs->spec, rs->data.B, rs->sched.m), 0,
                              provide, &rs->data, 0};
    pp_exec_result res;
    /* Extra steps (for the bubble) start from zero gradients each time. */
    for (int k = 0; k < bubble_steps && h->rc == 0; k++) {
        h->rc = pp_exec_step(ex, &args, &res, h->err, sizeof h->err);
        for (int l = 0; l < rs->v; l++) model_zero_grads(rs->chunks[l]);
        args.step++;
    }
    memset(&hl, 0, sizeof hl);
    hl.open_chunk = -1;
    if (h->rc == 0) h->rc = pp_exec_step(ex, &args, &res, h->err, sizeof h->err);
    h->elapsed = now_s() - t0;
    h->loss = res.loss;
    h->correct = res.correct;
    h->step_s = res.step_s, h->busy_s = res.busy_s, h->idle_s = res.idle_s, h->bubble = res.bubble;
    /* backwards: BACKWARD or ZB-H1's B; the hooks go around every pass, W's too */
    int n_bwd = 0, n_fwd = 0, n_pass = 0;
    for (int i = 0; i < rs->sched.n_actions[rank]; i++) {
        n_fwd += rs->sched.actions[rank][i].op == PP_OP_FORWARD;
        n_bwd += pp_op_makes_dinput(rs->sched.actions[rank][i].op);
        n_pass += pp_op_is_backward(rs->sched.actions[rank][i].op);
    }
    h->counts_ok = res.forwards == n_fwd && res.backwards == n_bwd;
    h->hooks_ok = hl.before == n_pass && hl.after == n_pass && hl.unpaired == 0 &&
                  hl.last_chunk_flags == rs->v && hl.last_rank_flags == 1 && hl.last_rank_was_final;
    if (h->rc == 0 && rs->spec.kind == MODEL_GPT) {
        /* The embedding group: both wte copies end up with the whole gradient. */
        float *first = NULL, *last = NULL;
        size_t n = 0;
        for (int l = 0; l < rs->v; l++)
            for (int i = 0; i < model_param_count(rs->chunks[l]); i++) {
                const param_spec *ps = model_param(rs->chunks[l], i);
                if (strcmp(ps->name, "wte")) continue;
                n = ps->local_numel;
                if (ps->unit == 0) first = model_param_grad(rs->chunks[l], i);
                else last = model_param_grad(rs->chunks[l], i);
            }
        float *scratch = (first != NULL) != (last != NULL) ? ops->alloc(n * sizeof(float)) : NULL;
        h->rc = pp_exec_sum_tied(ex, first, last, scratch, n, args.step, h->err, sizeof h->err);
        if (scratch) ops->free(scratch);
    }
    if (h->rc == 0) {
        /* Evaluation: same loss, gradients untouched. */
        size_t n = grad_floats(rs);
        float *before = malloc(n * sizeof(float)), *after = malloc(n * sizeof(float));
        copy_grads(rs, before);
        pp_exec_step_args eval = args;
        eval.forward_only = 1;
        eval.step++;
        pp_exec_result er;
        h->rc = pp_exec_step(ex, &eval, &er, h->err, sizeof h->err);
        copy_grads(rs, after);
        h->eval_grads_ok = memcmp(before, after, n * sizeof(float)) == 0 && er.backwards == 0;
        h->eval_loss = er.loss;
        h->eval_correct = er.correct;
        free(before);
        free(after);
    }
    pp_exec_destroy(ex);
}

static int write_result(const char *path, rank_setup *rs, const rank_header *h)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    rank_header hh = *h;
    hh.n_tensors = 0;
    for (int l = 0; l < rs->v; l++) hh.n_tensors += model_param_count(rs->chunks[l]);
    fwrite(&hh, sizeof hh, 1, f);
    for (int l = 0; l < rs->v; l++)
        for (int i = 0; i < model_param_count(rs->chunks[l]); i++) {
            const param_spec *ps = model_param(rs->chunks[l], i);
            tensor_header th;
            memset(&th, 0, sizeof th);
            th.unit = ps->unit;
            snprintf(th.name, sizeof th.name, "%s", ps->name);
            th.numel = ps->local_numel;
            fwrite(&th, sizeof th, 1, f);
            fwrite(model_param_grad(rs->chunks[l], i), sizeof(float), th.numel, f);
        }
    return fclose(f);
}

/* ---- comparing a pipeline's gradients with the reference ---- */

typedef struct {
    reference *ref;
    float **got;    /* [ref->n]: summed pipeline gradient, NULL until seen */
    int *seen;
} gathered;

static void gathered_init(gathered *g, reference *ref)
{
    g->ref = ref;
    g->got = calloc((size_t)ref->n, sizeof *g->got);
    g->seen = calloc((size_t)ref->n, sizeof *g->seen);
}

static void gathered_free(gathered *g)
{
    for (int i = 0; i < g->ref->n; i++) free(g->got[i]);
    free(g->got);
    free(g->seen);
}

/* Adds one tensor. Both wte copies are compared whole: the ranks summed them with
 * pp_exec_sum_tied (or one chunk held both). */
static int gathered_add(gathered *g, int unit, const char *name, const float *x, size_t n)
{
    int i = reference_find(g->ref, unit, name);
    if (i < 0 || g->ref->spec[i]->local_numel != n || g->got[i]) return -1;
    g->got[i] = malloc(n * sizeof(float));
    memcpy(g->got[i], x, n * sizeof(float));
    g->seen[i]++;
    return 0;
}

static double rel_err(const float *a, const float *ref, size_t n)
{
    double diff = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    return scale > 0 ? diff / scale : diff;
}

/* Max relative error over every tensor; -1 when a tensor is missing or doubled. */
static double gathered_compare(const gathered *g)
{
    double worst = 0;
    for (int i = 0; i < g->ref->n; i++) {
        if (g->seen[i] != 1 || !g->got[i]) return -1;
        worst = fmax(worst, rel_err(g->got[i], g->ref->grad[i], g->ref->spec[i]->local_numel));
    }
    return worst;
}

static int gathered_add_file(gathered *g, const char *path, rank_header *h)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int bad = fread(h, sizeof *h, 1, f) != 1;
    for (int t = 0; !bad && t < h->n_tensors; t++) {
        tensor_header th;
        if (fread(&th, sizeof th, 1, f) != 1 || th.numel > (1u << 24)) { bad = 1; break; }
        float *x = malloc(th.numel * sizeof(float));
        bad = fread(x, sizeof(float), th.numel, f) != th.numel ||
              gathered_add(g, th.unit, th.name, x, th.numel) != 0;
        free(x);
    }
    fclose(f);
    return bad ? -1 : 0;
}

/* ---- the configurations ---- */

static int configs_for(int p, config *out)
{
    int n = 0;
    const int ms[] = {1, 2, 4, 8};
    for (int k = 0; k < 4; k++) out[n++] = (config){.kind = PP_GPIPE, .m = ms[k], .v = 1};
    for (int k = 0; k < 4; k++) out[n++] = (config){.kind = PP_1F1B, .m = ms[k], .v = 1};
    for (int k = 0; k < 4; k++)
        if (ms[k] % p == 0) out[n++] = (config){.kind = PP_INTERLEAVED, .m = ms[k], .v = 2};
    out[n++] = (config){.kind = PP_1F1B, .m = 4, .v = 1, .vit = 1};
    out[n++] = (config){.kind = PP_INTERLEAVED, .m = p, .v = 2, .vit = 1};
    out[n++] = (config){.kind = PP_1F1B, .m = 4, .v = 1, .recompute = RECOMPUTE_BLOCK};
    out[n++] = (config){.kind = PP_INTERLEAVED, .m = 2 * p, .v = 2, .spare = 2};
    /* the rank's stash pool and shared scratch under recompute (its buffers
     * in the scratch, the stash pointing into it) */
    out[n++] = (config){.kind = PP_INTERLEAVED, .m = 2 * p, .v = 2, .recompute = RECOMPUTE_BLOCK};
    out[n++] = (config){.kind = PP_INTERLEAVED, .m = 2 * p, .v = 2, .recompute = RECOMPUTE_SELECTIVE, .naive = 1};
    /* ZB-H1: split backward, slots held until the W */
    for (int k = 0; k < 4; k++) out[n++] = (config){.kind = PP_ZB_H1, .m = ms[k], .v = 1};
    out[n++] = (config){.kind = PP_ZB_H1, .m = 4, .v = 1, .vit = 1};
    out[n++] = (config){.kind = PP_ZB_H1, .m = 2 * p, .v = 1, .spare = 2};
    return n;
}

static job_model model_for(int p, const config *c)
{
    int L = p * c->v > 4 ? 8 : 4;
    job_model s = c->vit ? vit_spec(L) : gpt_spec(L, 16, 8);
    if (c->naive) s.attention = ATTN_NAIVE;
    return s;
}

static char config_name_buf[128];
static const char *config_name(int p, const config *c)
{
    snprintf(config_name_buf, sizeof config_name_buf, "%s %s p=%d v=%d m=%d%s%s%s",
             c->vit ? "vit" : "gpt", pp_schedule_kind_name(c->kind), p, c->v, c->m,
             c->recompute == RECOMPUTE_BLOCK       ? " recompute=block"
             : c->recompute == RECOMPUTE_SELECTIVE ? " recompute=selective"
                                                   : "",
             c->naive ? " attention=naive" : "",
             c->spare ? " (B=2 in slots of 4)" : "");
    return config_name_buf;
}

/* Ranks whose chunks shared one stash pool, over all the configurations run:
 * the pool must have been exercised, not only sized. */
static int pooled_ranks;

/* Compares every rank's file of one configuration with the reference. */
static void judge(int p, const config *c, const char *dir, int ci)
{
    job_model s = model_for(p, c);
    test_data *t = malloc(sizeof *t);
    make_data(t, &s, 2, c->m);
    reference ref;
    reference_run(&ref, &s, t, c->m);
    gathered g;
    gathered_init(&g, &ref);
    double loss = 0, eval_loss = 0;
    long correct = 0, eval_correct = 0;
    int files_ok = 1, rc_ok = 1, slots_ok = 1, hooks_ok = 1, eval_ok = 1, counts_ok = 1, pooled = 0;
    char first_err[400] = "";
    for (int r = 0; r < p; r++) {
        char path[512];
        snprintf(path, sizeof path, "%s/c%d.r%d", dir, ci, r);
        rank_header h;
        memset(&h, 0, sizeof h);
        if (gathered_add_file(&g, path, &h)) files_ok = 0;
        if (h.rc != 0) {
            rc_ok = 0;
            if (!*first_err) snprintf(first_err, sizeof first_err, "%s", h.err);
        }
        slots_ok &= h.slots_ok, hooks_ok &= h.hooks_ok, eval_ok &= h.eval_grads_ok;
        counts_ok &= h.counts_ok, pooled += h.pooled;
        loss += h.loss, correct += h.correct;
        eval_loss += h.eval_loss, eval_correct += h.eval_correct;
    }
    double gerr = files_ok ? gathered_compare(&g) : -1;
    const char *name = config_name(p, c);
    CHECK(rc_ok && files_ok, "%s: every rank ran the step%s%s", name, *first_err ? ": " : "", first_err);
    CHECK(fabs(loss - ref.loss) <= 1e-6 * fabs(ref.loss) && correct == ref.correct,
          "%s: summed loss %.9g equals one process's %.9g (correct %ld vs %ld)", name, loss,
          ref.loss, correct, ref.correct);
    CHECK(gerr >= 0 && gerr <= 1e-5, "%s: all %d gradient tensors match one process (max rel err %.2e)",
          name, ref.n, gerr);
    CHECK(slots_ok && counts_ok && hooks_ok,
          "%s: slots = schedule's in-flight peak per chunk, stashes as pp_stash_pool_bytes (%d of %d ranks "
          "pool them), every action ran, backward hooks (one last-of-chunk per chunk, one last-of-rank at the end)",
          name, pooled, p);
    pooled_ranks += pooled;
    CHECK(eval_ok && eval_loss == loss && eval_correct == correct,
          "%s: forward-only step gives the same loss (%.9g) and leaves the gradients alone", name,
          eval_loss);
    if (!c->vit) {
        int e = reference_find(&ref, 0, "wte"), hd = reference_find(&ref, s.n_layer + 1, "wte");
        CHECK(e >= 0 && hd >= 0 && g.got[e] && g.got[hd] &&
                  !memcmp(g.got[e], g.got[hd], ref.spec[e]->local_numel * sizeof(float)),
              "%s: after pp_exec_sum_tied the first and last stage's wte gradients are bit-identical",
              name);
    }
    gathered_free(&g);
    reference_free(&ref);
    free(t);
}

/* ---- forked worlds ---- */

typedef int (*child_fn)(comm *w, int rank, int p, const char *dir, void *arg);

static void child_main(int rank, int p, const char *dir, child_fn body, void *arg, double timeout)
{
    char err[600];
    char storedir[600];
    snprintf(storedir, sizeof storedir, "%s/store", dir);
    comm_store *st = store_file_open(storedir, err, sizeof err);
    if (!st) {
        fprintf(stderr, "rank %d: store: %s\n", rank, err);
        _exit(2);
    }
    comm *w = NULL;
    if (comm_world_init_with(&w, st, rank, p, "node0", err, sizeof err) != COMM_OK) {
        fprintf(stderr, "rank %d: world: %s\n", rank, err);
        store_close(st);
        _exit(2);
    }
    comm_set_timeout(w, timeout);
    int bad = body(w, rank, p, dir, arg);
    comm_destroy(w);
    store_close(st);
    exit(bad ? 1 : 0);
}

/* Forks p ranks running body; returns the number of ranks that failed, or -1
 * when the deadline passed (they are killed). expect_dead: a rank allowed to die. */
static int run_world(int p, const char *dir, child_fn body, void *arg, double timeout,
                     double deadline, int expect_dead)
{
    char storedir[600];
    snprintf(storedir, sizeof storedir, "%s/store", dir);
    if (mkdir(storedir, 0700) != 0) return -1;
    pid_t pids[8];
    fflush(NULL);
    for (int r = 0; r < p; r++) {
        pids[r] = fork();
        if (pids[r] == 0) child_main(r, p, dir, body, arg, timeout);
    }
    double t0 = now_s();
    int left = p, failed = 0, exited[8] = {0};
    while (left > 0) {
        for (int r = 0; r < p; r++) {
            int status;
            if (exited[r] || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
            exited[r] = 1;
            left--;
            if (r != expect_dead && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                failed++;
                printf("# rank %d %s %d\n", r, WIFEXITED(status) ? "exited" : "killed by signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            }
        }
        if (left > 0 && now_s() - t0 > deadline) {
            for (int r = 0; r < p; r++)
                if (!exited[r]) kill(pids[r], SIGKILL);
            for (int r = 0; r < p; r++)
                if (!exited[r]) waitpid(pids[r], NULL, 0);
            return -1;
        }
        if (left > 0) usleep(2000);
    }
    return failed;
}

static void rm_tree(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
}

/* Every configuration for p ranks, one after the other on the same world. */
static int body_matrix(comm *w, int rank, int p, const char *dir, void *arg)
{
    config cs[32];
    int n = configs_for(p, cs), bad = 0;
    for (int ci = 0; ci < n; ci++) {
        job_model s = model_for(p, &cs[ci]);
        rank_setup *rs = malloc(sizeof *rs);
        rank_header h;
        if (setup(rs, &s, &cs[ci], p, rank, 2)) {
            free(rs);
            return 1;
        }
        run_rank(rs, w, p, rank, &h, 0);
        char path[512];
        snprintf(path, sizeof path, "%s/c%d.r%d", dir, ci, rank);
        if (write_result(path, rs, &h)) bad = 1;
        teardown(rs);
        free(rs);
        if (h.rc) break; /* the world is broken now */
    }
    return bad;
}

static void matrix(int p)
{
    char dir[] = "/tmp/dtrun-test-ppexec.XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "p=%d: temp dir", p);
        return;
    }
    double t0 = now_s();
    int rc = run_world(p, dir, body_matrix, NULL, 20, 60, -1);
    CHECK(rc == 0, "p=%d: %d forked ranks ran every schedule and exited cleanly (%.1f s)", p, p,
          now_s() - t0);
    config cs[32];
    int n = configs_for(p, cs);
    for (int ci = 0; ci < n; ci++) judge(p, &cs[ci], dir, ci);
    rm_tree(dir);
}

/* p = 1: the chunks live in this process and hand tensors over in memory. */
static void single_rank(int v, int m, int vit)
{
    config c = {.kind = v > 1 ? PP_INTERLEAVED : PP_1F1B, .m = m, .v = v, .vit = vit};
    job_model s = vit ? vit_spec(4) : gpt_spec(4, 16, 8);
    rank_setup *rs = malloc(sizeof *rs);
    if (setup(rs, &s, &c, 1, 0, 2)) {
        CHECK(0, "p=1 v=%d setup", v);
        free(rs);
        return;
    }
    rank_header h;
    run_rank(rs, NULL, 1, 0, &h, 0);
    reference ref;
    reference_run(&ref, &s, &rs->data, m);
    gathered g;
    gathered_init(&g, &ref);
    for (int l = 0; l < v; l++)
        for (int i = 0; i < model_param_count(rs->chunks[l]); i++) {
            const param_spec *ps = model_param(rs->chunks[l], i);
            gathered_add(&g, ps->unit, ps->name, model_param_grad(rs->chunks[l], i), ps->local_numel);
        }
    double gerr = gathered_compare(&g);
    const char *name = config_name(1, &c);
    CHECK(h.rc == 0 && fabs(h.loss - ref.loss) <= 1e-6 * fabs(ref.loss) && h.correct == ref.correct &&
              gerr >= 0 && gerr <= 1e-5,
          "%s (in memory): loss %.9g vs %.9g, gradients max rel err %.2e%s%s", name, h.loss, ref.loss,
          gerr, *h.err ? ": " : "", h.err);
    CHECK(h.slots_ok && h.counts_ok && h.hooks_ok && h.eval_grads_ok && h.eval_loss == h.loss,
          "%s (in memory): slots, hooks, forward-only step", name);
    pooled_ranks += h.pooled;
    gathered_free(&g);
    reference_free(&ref);
    teardown(rs);
    free(rs);
}

/* ---- a rank killed mid-step ---- */

enum { KILLED_RANK_MB = 1 };
static int victim = -1;

static void die_before_backward(void *ctx, int chunk, int mb, int last_chunk, int last_rank)
{
    if (mb == KILLED_RANK_MB) raise(SIGKILL);
}

static int body_killed(comm *w, int rank, int p, const char *dir, void *arg)
{
    config c = {.kind = PP_1F1B, .m = 4, .v = 1};
    job_model s = gpt_spec(4, 16, 8);
    rank_setup *rs = malloc(sizeof *rs);
    if (setup(rs, &s, &c, p, rank, 2)) {
        free(rs);
        return 1;
    }
    rank_header h;
    memset(&h, 0, sizeof h);
    pp_exec_config cfg = {&rs->sched, rank, w, rs->chunks, 2, ops};
    pp_exec *ex = pp_exec_create(&cfg, h.err, sizeof h.err);
    if (ex) {
        if (rank == victim) {
            pp_exec_hooks hk = {NULL, die_before_backward, NULL, NULL, NULL};
            pp_exec_set_hooks(ex, &hk);
        }
        pp_exec_step_args args = {7, 2, loss_scale_of(&s, 2, 4), 0, provide, &rs->data, 0};
        pp_exec_result res;
        double t0 = now_s();
        h.rc = pp_exec_step(ex, &args, &res, h.err, sizeof h.err);
        h.elapsed = now_s() - t0;
        pp_exec_destroy(ex);
    } else {
        h.rc = -2;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/killed.r%d", dir, rank);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(&h, sizeof h, 1, f);
        fclose(f);
    }
    teardown(rs);
    free(rs);
    return 0;
}

static void killed_peer(int p, int dead)
{
    char dir[] = "/tmp/dtrun-test-ppexec.XXXXXX";
    if (!mkdtemp(dir)) return;
    victim = dead;
    double timeout = 10;
    double t0 = now_s();
    int rc = run_world(p, dir, body_killed, NULL, timeout, 40, dead);
    double took = now_s() - t0;
    int all_err = 1, max_ok = 1;
    double worst = 0;
    char line[400] = "";
    for (int r = 0; r < p; r++) {
        if (r == dead) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/killed.r%d", dir, r);
        rank_header h;
        memset(&h, 0, sizeof h);
        FILE *f = fopen(path, "rb");
        if (!f || fread(&h, sizeof h, 1, f) != 1) all_err = 0;
        if (f) fclose(f);
        if (h.rc != -1 || !strstr(h.err, "step 7") || !strstr(h.err, "pp rank") || strchr(h.err, '\n'))
            all_err = 0;
        if (h.elapsed >= timeout) max_ok = 0;
        worst = fmax(worst, h.elapsed);
        if (!*line || r == 0) snprintf(line, sizeof line, "%s", h.err);
    }
    CHECK(rc == 0 && all_err && max_ok,
          "p=%d, rank %d killed in its BACKWARD of mb %d: every survivor returns one error line "
          "within the %.0f s timeout (slowest %.2f s, world %.2f s): \"%s\"", p, dead,
          KILLED_RANK_MB, timeout, worst, took, line);
    rm_tree(dir);
}

/* ---- the measured bubble ---- */

typedef struct {
    pp_schedule_kind kind;
    int m;
} bubble_case;

static const bubble_case bubble_cases[] = {{PP_GPIPE, 2}, {PP_GPIPE, 8}, {PP_1F1B, 2}, {PP_1F1B, 8}, {PP_ZB_H1, 8}};
enum { N_BUBBLE = sizeof bubble_cases / sizeof bubble_cases[0] };

static int body_bubble(comm *w, int rank, int p, const char *dir, void *arg)
{
    /* Big enough that a micro-batch's compute outweighs a message's latency. */
    job_model s = gpt_spec(4, 128, 64);
    int bad = 0;
    for (int k = 0; k < N_BUBBLE; k++) {
        config c = {.kind = bubble_cases[k].kind, .m = bubble_cases[k].m, .v = 1};
        rank_setup *rs = malloc(sizeof *rs);
        if (setup(rs, &s, &c, p, rank, 4)) {
            free(rs);
            return 1;
        }
        rank_header h;
        run_rank(rs, w, p, rank, &h, 1);
        char path[512];
        snprintf(path, sizeof path, "%s/b%d.r%d", dir, k, rank);
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(&h, sizeof h, 1, f);
            fclose(f);
        } else {
            bad = 1;
        }
        teardown(rs);
        free(rs);
        if (h.rc) return 1;
    }
    return bad;
}

static void bubble(int p)
{
    char dir[] = "/tmp/dtrun-test-ppexec.XXXXXX";
    if (!mkdtemp(dir)) return;
    int rc = run_world(p, dir, body_bubble, NULL, 20, 60, -1);
    int sane = rc == 0;
    for (int k = 0; k < N_BUBBLE; k++) {
        double sum = 0, step = 0;
        char per[256] = "";
        for (int r = 0; r < p; r++) {
            char path[512];
            snprintf(path, sizeof path, "%s/b%d.r%d", dir, k, r);
            rank_header h;
            memset(&h, 0, sizeof h);
            FILE *f = fopen(path, "rb");
            if (!f || fread(&h, sizeof h, 1, f) != 1) sane = 0;
            if (f) fclose(f);
            /* busy and idle are parts of the step: they cannot add up to more */
            if (h.rc || h.bubble < 0 || h.bubble >= 1 || h.busy_s + h.idle_s > h.step_s * 1.001 + 1e-6)
                sane = 0;
            sum += h.bubble;
            step = fmax(step, h.step_s);
            size_t used = strlen(per);
            snprintf(per + used, sizeof per - used, " r%d %.3f", r, h.bubble);
        }
        const bubble_case *b = &bubble_cases[k];
        printf("# bubble %s p=%d m=%d: measured mean %.3f (%s ) vs ideal (pp_schedule_ideal_bubble) %.3f; "
               "step %.1f ms\n", pp_schedule_kind_name(b->kind), p, b->m, sum / p, per,
               pp_schedule_ideal_bubble(b->kind, p, b->m, 1), step * 1e3);
    }
    CHECK(sane, "p=%d: measured bubble reported per rank, 0 <= idle/step < 1, busy + idle <= step", p);
    rm_tree(dir);
}

/* ---- argument checks ---- */

static void bad_configs(void)
{
    job_model s = gpt_spec(4, 16, 8);
    config c = {.kind = PP_1F1B, .m = 2, .v = 1};
    rank_setup *rs = malloc(sizeof *rs);
    if (setup(rs, &s, &c, 1, 0, 2)) {
        free(rs);
        return;
    }
    char err[300] = "";
    pp_exec_config cfg = {&rs->sched, 1, NULL, rs->chunks, 2, ops};
    CHECK(!pp_exec_create(&cfg, err, sizeof err) && strstr(err, "pp rank 1"), "rank out of range: %s", err);
    /* a chunk that is not the whole model on a one-chunk pipeline */
    model_shard sh = {0, 1, 0, 3, 0, 0, 1, 0, 1};
    model *part = model_create(&s, &sh, ops, RECOMPUTE_NONE);
    model *one[1] = {part};
    pp_exec_config cfg2 = {&rs->sched, 0, NULL, one, 2, ops};
    CHECK(!pp_exec_create(&cfg2, err, sizeof err) && strstr(err, "head"), "chunk without the head: %s", err);
    model_destroy(part);
    pp_exec_config cfg3 = {&rs->sched, 0, NULL, rs->chunks, 2, ops};
    pp_exec *ex = pp_exec_create(&cfg3, err, sizeof err);
    pp_exec_step_args args = {3, 3, 1.0f, 0, provide, &rs->data, 0};
    pp_exec_result res;
    CHECK(ex && pp_exec_step(ex, &args, &res, err, sizeof err) == -1 && strstr(err, "step 3"),
          "micro-batch larger than the slots: %s", err);
    pp_exec_destroy(ex);
    teardown(rs);
    free(rs);
}

int main(void)
{
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    setvbuf(stdout, NULL, _IOLBF, 0);
    double t0 = now_s();
    bad_configs();
    single_rank(1, 3, 0);
    single_rank(2, 1, 0);
    single_rank(2, 4, 0);
    single_rank(4, 3, 0);
    single_rank(2, 3, 1);
    matrix(2);
    matrix(4);
    CHECK(pooled_ranks > 0, "the interleaved runs above include %d ranks whose chunks share one stash pool",
          pooled_ranks);
    killed_peer(2, 1);
    killed_peer(4, 2);
    if (!UNDER_ASAN) bubble(2); /* instrumented kernels would only time the sanitizer */
    printf("# test_pp_exec took %.1f s\n", now_s() - t0);
    CHECK_DONE();
}
