/* test_model.c — the GPT and ViT models: gradients against finite differences,
 * layout independence of the init, tensor-parallel (two threads), pipeline
 * splits, recompute and rebinding give the single-process numbers, the
 * activation sizes are what gets allocated, preset parameter counts, and a tiny
 * GPT learns a fixed batch. Tiny models keep it well under a second. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "runtime/model/model.h"
#include "runtime/parallel/tp.h"
#include "runtime/rng.h"
#include "test/unit/check.h"
#include "test/unit/tiny_models.h"

static const dt_ops *ops = &dt_ops_cpu;
enum { LLAMA_K_TEST = 2 }; /* the k tensor's index in a llama block (q 1, k 2, v 3) */

enum { TB = 2 }; /* samples per test micro-batch */

typedef struct {
    int tokens[TB * 8], targets[TB * 8], labels[TB];
    float images[TB * 144]; /* up to 12 x 12 x 1 */
    model_batch mb;
} test_batch;

static void make_batch(test_batch *t, const job_model *s, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    uint64_t k = rng_key(seed, "test-batch");
    uint64_t V = s->vocab_size > 0 ? (uint64_t)s->vocab_size : 1;
    for (int i = 0; i < TB * 8; i++) {
        t->tokens[i] = (int)rng_below(k, (uint64_t)i, V);
        t->targets[i] = (int)rng_below(k, 1000 + (uint64_t)i, V);
    }
    for (int i = 0; i < TB * 144; i++) t->images[i] = rng_normal(k, 2000 + (uint64_t)i);
    for (int b = 0; b < TB; b++) t->labels[b] = (int)rng_below(k, 3000 + (uint64_t)b, 3);
    t->mb.B = TB;
    t->mb.tokens = t->tokens;
    t->mb.targets = t->targets;
    t->mb.images = t->images;
    t->mb.labels = t->labels;
}

/* Layout-independent values with more spread than the real init, so gradients
 * are large enough for finite differences and comparisons to mean something. */
static void test_init(model *m, uint64_t seed)
{
    const model_shard *sh = model_get_shard(m);
    for (int i = 0; i < model_param_count(m); i++) {
        const param_spec *p = model_param(m, i);
        /* a bf16 model holds the rounding of the same draws */
        int bf16 = model_param_elem_bytes(m) == 2;
        float *d = bf16 ? malloc(p->local_numel * sizeof(float)) : model_param_data(m, i);
        uint64_t k = rng_key(seed, p->name);
        for (size_t j = 0; j < p->local_numel; j++) {
            float n = rng_normal(k, param_global_index(p, sh->tp_rank, sh->tp_size, j));
            d[j] = p->init == INIT_ONES ? 1.0f + 0.1f * n : p->init == INIT_ZEROS ? 0.1f * n : 0.3f * n;
        }
        if (bf16) {
            ops->to_bf16(model_param_data(m, i), d, p->local_numel);
            free(d);
        }
    }
}

static model *make_model(const job_model *s, int tp_rank, int tp, int ub, int ue, recompute_kind rc)
{
    model_shard sh = {.tp_rank = tp_rank, .tp_size = tp, .unit_begin = ub, .unit_end = ue};
    return model_create(s, &sh, ops, rc);
}

/* Index of the param with this name in this unit, or -1. */
static int find_param(const model *m, int unit, const char *name)
{
    for (int i = 0; i < model_param_count(m); i++) {
        const param_spec *p = model_param(m, i);
        if (p->unit == unit && strcmp(p->name, name) == 0) return i;
    }
    return -1;
}

/* |a - b| relative to the larger magnitude of the reference tensor (norm-wise). */
static double tensor_rel_err(const float *a, const float *ref, size_t n)
{
    double maxdiff = 0, maxref = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d > maxdiff) maxdiff = d;
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    return maxdiff / maxref;
}

/* ---------- 1. finite differences ---------- */

/* The objective a backward with loss_scale 1 differentiates: the summed
 * token losses, plus (model.moe) aux_loss_coef * seq * each sample's balance
 * loss of every MoE block (model.c: the aux's seed is coef * loss_scale *
 * seq a sample). *route: a fingerprint of what the MoE blocks routed (the
 * choices per expert and the drops; 0 without MoE), so that a finite
 * difference whose step moved a token to another expert (top-k is not
 * differentiable there) can be told apart. */
static double objective(model *m, model_acts *a, const model_batch *mb, double *route)
{
    model_moe_stats_reset(m);
    double l = model_forward(m, a, mb, NULL), fp = 0;
    const job_model *s = model_get_spec(m);
    for (int b = 0; b < model_moe_count(m); b++) {
        const model_moe_stats *st = model_moe_stats_of(m, b);
        l += s->moe.aux_loss_coef * s->seq_len * st->aux;
        for (int e = 0; e < s->moe.experts; e++) fp += st->chosen[e] * (1.0 + e + 101.0 * b) * (1.0 + e);
        fp += 1e6 * st->dropped * (1.0 + b);
    }
    if (route) *route = fp;
    return l;
}

/* Loss of the whole model with element j of param i (and of its tied twin)
 * moved by delta; *route as objective's. */
static double loss_moved(model *m, model_acts *a, const model_batch *mb, int i, int twin,
                         const size_t *idx, const float *delta, size_t n, double *route)
{
    float *d = model_param_data(m, i), *dt = twin >= 0 ? model_param_data(m, twin) : NULL;
    float *saved = malloc(n * sizeof(float));
    for (size_t t = 0; t < n; t++) {
        saved[t] = d[idx[t]];
        d[idx[t]] += delta[t];
        if (dt) dt[idx[t]] = d[idx[t]];
    }
    double l = objective(m, a, mb, route);
    for (size_t t = 0; t < n; t++) {
        d[idx[t]] = saved[t];
        if (dt) dt[idx[t]] = saved[t];
    }
    free(saved);
    return l;
}

/* fp32 forward noise (~1e-6 on a summed loss of ~50) divided by 2 eps = 2e-3 makes
 * single-element differences good to ~1e-3 absolute; hence two checks:
 *  - element-wise on >= 200 sampled elements, relative error with a floor of 0.05
 *    (gradients here are 0.01..1), tolerance 5e-2;
 *  - directional, per tensor: every element moved by +-eps (random signs) at once,
 *    so the signal scales with sum |g| while the noise stays the same: error
 *    relative to sum |g|, tolerance 2e-3. */
static void grad_check(const job_model *s, const char *what)
{
    int L = s->n_layer;
    model *m = make_model(s, 0, 1, 0, L + 2, RECOMPUTE_NONE);
    model_acts *a = model_acts_create(m, TB);
    test_batch tb;
    make_batch(&tb, s, 7);
    test_init(m, 11);
    model_zero_grads(m);
    double route0;
    objective(m, a, &tb.mb, &route0);
    model_backward(m, a, &tb.mb, 1.0f);

    /* MoE: a step that reroutes a token is no derivative: skipped and counted.
     * A token whose k-th and (k+1)-th experts score within what a step of
     * eps moves (the tiny Llama's first block has one) reroutes under every
     * tensor upstream of its router: at most a tenth of the element steps
     * and a third of the directional ones may be skipped, and at least 180
     * elements are checked. */
    const float eps = 1e-3f;
    int checked = 0, tensors = 0, tied_ok = 1, rerouted = 0, dir_rerouted = 0;
    double max_err = 0, max_dir = 0;
    char worst[PARAM_NAME_MAX] = "", worst_dir[PARAM_NAME_MAX] = "";
    uint64_t key = rng_key(3, "signs");
    for (int i = 0; i < model_param_count(m); i++) {
        const param_spec *p = model_param(m, i);
        if (p->tied) continue; /* moved together with unit 0's wte */
        int twin = strcmp(p->name, "wte") == 0 ? find_param(m, L + 1, "wte") : -1;
        const float *g = model_param_grad(m, i);
        if (twin >= 0)
            for (size_t j = 0; j < p->local_numel; j++)
                if (((const float *)model_param_grad(m, twin))[j] != g[j]) tied_ok = 0;
        tensors++;
        size_t k = p->local_numel < 10 ? p->local_numel : 10;
        for (size_t t = 0; t < k; t++) {
            size_t j = (t * 7919 + (size_t)i * 31) % p->local_numel;
            float up = eps, down = -eps;
            double rp, rm;
            double lp = loss_moved(m, a, &tb.mb, i, twin, &j, &up, 1, &rp);
            double lm = loss_moved(m, a, &tb.mb, i, twin, &j, &down, 1, &rm);
            if (rp != route0 || rm != route0) {
                rerouted++;
                continue;
            }
            double num = (lp - lm) / (2.0 * eps), ana = g[j];
            double err = fabs(num - ana) / fmax(fmax(fabs(num), fabs(ana)), 0.05);
            if (err > max_err) { max_err = err; snprintf(worst, sizeof worst, "%s", p->name); }
            checked++;
        }
        size_t n = p->local_numel;
        size_t *idx = malloc(n * sizeof(size_t));
        float *up = malloc(n * sizeof(float)), *down = malloc(n * sizeof(float));
        double ana = 0, mag = 0;
        for (size_t j = 0; j < n; j++) {
            float sign = rng_below(key, (uint64_t)i * 100000 + j, 2) ? 1.0f : -1.0f;
            idx[j] = j;
            up[j] = sign * eps;
            down[j] = -sign * eps;
            ana += (double)sign * g[j];
            mag += fabs(g[j]);
        }
        double rp, rm;
        double num = (loss_moved(m, a, &tb.mb, i, twin, idx, up, n, &rp) -
                      loss_moved(m, a, &tb.mb, i, twin, idx, down, n, &rm)) / (2.0 * eps);
        /* relative to sum |g|, the scale of the directional derivative (the signed
         * sum itself can cancel to ~0 by chance) */
        double err = fabs(num - ana) / fmax(mag, 0.05);
        if (rp != route0 || rm != route0) dir_rerouted++;
        else if (err > max_dir) { max_dir = err; snprintf(worst_dir, sizeof worst_dir, "%s", p->name); }
        free(idx); free(up); free(down);
    }
    CHECK(checked >= 180 && rerouted * 10 <= checked + rerouted && max_err < 5e-2,
          "%s: finite differences (eps 1e-3, fp32) on %d elements of %d tensors (%d rerouting steps skipped): max "
          "rel err %.2e (at %s) < 5e-2", what, checked, tensors, rerouted, max_err, worst);
    CHECK(max_dir < 2e-3 && dir_rerouted * 3 <= tensors,
          "%s: directional finite differences, every element of each of %d tensors (%d rerouted, skipped: at most a "
          "third): max rel err %.2e (at %s) < 2e-3", what, tensors, dir_rerouted, max_dir, worst_dir);
    if (job_model_tied_head(s))
        CHECK(tied_ok, "%s: both wte copies carry the whole tied gradient", what);
    model_acts_destroy(a);
    model_destroy(m);
}

/* ---------- 2. init layout independence ---------- */

static void init_layout(const job_model *s, const char *what)
{
    int L = s->n_layer;
    model *whole = make_model(s, 0, 1, 0, L + 2, RECOMPUTE_NONE);
    model_init_params(whole, 1234);
    int bad_tp = 0, bad_pp = 0, tensors = 0;
    for (int r = 0; r < 2; r++) {
        model *sh = make_model(s, r, 2, 0, L + 2, RECOMPUTE_NONE);
        model_init_params(sh, 1234);
        for (int i = 0; i < model_param_count(sh); i++) {
            const param_spec *p = model_param(sh, i);
            int w = find_param(whole, p->unit, p->name);
            const float *ref = model_param_data(whole, w), *loc = model_param_data(sh, i);
            tensors++;
            for (size_t j = 0; j < p->local_numel; j++)
                if (loc[j] != ref[param_global_index(p, r, 2, j)]) { bad_tp++; break; }
        }
        model_destroy(sh);
    }
    CHECK(bad_tp == 0, "%s: tp=2 shards equal the tp=1 slices (%d tensors, %d differ)", what,
          tensors, bad_tp);
    model *stage = make_model(s, 0, 1, 2, L + 2, RECOMPUTE_NONE);
    model_init_params(stage, 1234);
    for (int i = 0; i < model_param_count(stage); i++) {
        const param_spec *p = model_param(stage, i);
        int w = find_param(whole, p->unit, p->name);
        if (memcmp(model_param_data(stage, i), model_param_data(whole, w), p->local_numel * 4)) bad_pp++;
    }
    CHECK(bad_pp == 0, "%s: pipeline stage [2,%d) params equal the whole model's", what, L + 2);
    if (s->kind == MODEL_GPT) {
        int e = find_param(whole, 0, "wte"), h = find_param(whole, L + 1, "wte");
        const param_spec *pe = model_param(whole, e), *ph = model_param(whole, h);
        CHECK(h >= 0 && ph->tied && !pe->tied &&
                  !memcmp(model_param_data(whole, e), model_param_data(whole, h), pe->local_numel * 4),
              "%s: the head's tied wte equals unit 0's", what);
        /* the init draws the real GPT-2 statistics */
        const float *wte = model_param_data(whole, e);
        double sq = 0;
        for (size_t j = 0; j < pe->local_numel; j++) sq += (double)wte[j] * wte[j];
        double std = sqrt(sq / pe->local_numel);
        int pj = find_param(whole, 1, "h.0.attn.proj.w"), lw = find_param(whole, 1, "h.0.ln1.w");
        CHECK(fabs(std - 0.02) < 0.003 && fabsf(model_param(whole, pj)->init_std - 0.01f) < 1e-6f &&
                  ((const float *)model_param_data(whole, lw))[3] == 1.0f,
              "%s: wte std %.4f ~ 0.02, proj std 0.02/sqrt(2L) = %.4f, ln weights 1", what, std,
              model_param(whole, pj)->init_std);
    }
    model_destroy(stage);
    model_destroy(whole);
}

/* ---------- reference run: loss and grads of one model ---------- */

typedef struct {
    double loss;
    int correct;
    float **grads; /* per param, copies */
    size_t *numel;
    int n;
} run_result;

static void run_once(model *m, const test_batch *tb, float loss_scale, run_result *r)
{
    model_acts *a = model_acts_create(m, TB);
    model_zero_grads(m);
    r->loss = model_forward(m, a, &tb->mb, &r->correct);
    model_backward(m, a, &tb->mb, loss_scale);
    r->n = model_param_count(m);
    r->grads = calloc((size_t)r->n, sizeof(float *));
    r->numel = calloc((size_t)r->n, sizeof(size_t));
    for (int i = 0; i < r->n; i++) {
        size_t n = r->numel[i] = model_param(m, i)->local_numel;
        r->grads[i] = malloc(n * sizeof(float));
        memcpy(r->grads[i], model_param_grad(m, i), n * sizeof(float));
    }
    model_acts_destroy(a);
}

static void run_free(run_result *r)
{
    for (int i = 0; i < r->n; i++) free(r->grads[i]);
    free(r->grads);
    free(r->numel);
}

/* ---------- 3. tensor parallel in two threads ---------- */

typedef struct {
    pthread_barrier_t bar;
    float *bufs[2];
    const float *parts[2];
} thread_group;

typedef struct {
    thread_group *g;
    int rank;
    const job_model *spec;
    const test_batch *tb;
    int sp;               /* sequence parallel */
    recompute_kind rc;
    model *m;
    run_result res;
    long reduces, gathers, scatters;
    long max_reduces;     /* of the reduces, TP_MAX ones (the LM head's row max) */
} tp_worker;

/* Both ranks publish, both compute the same reduction in the same order into a
 * private copy, then write back (the barrier in between keeps reads and writes apart). */
static void tp_allreduce(void *ctx, float *buf, size_t n, tp_op op)
{
    tp_worker *w = ctx;
    thread_group *g = w->g;
    g->bufs[w->rank] = buf;
    pthread_barrier_wait(&g->bar);
    float *tmp = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float x = g->bufs[0][i], y = g->bufs[1][i];
        tmp[i] = op == TP_SUM ? x + y : (x > y ? x : y);
    }
    pthread_barrier_wait(&g->bar);
    memcpy(buf, tmp, n * sizeof(float));
    free(tmp);
    w->reduces++;
    w->max_reduces += op == TP_MAX;
}

/* Sequence parallelism: rank r's part of an n-element tensor is its r-th half. */
static void tp_all_gather(void *ctx, const float *local, float *full, size_t n)
{
    tp_worker *w = ctx;
    thread_group *g = w->g;
    size_t half = n / 2;
    g->parts[w->rank] = local;
    pthread_barrier_wait(&g->bar);
    float *tmp = malloc(n * sizeof(float));
    memcpy(tmp, g->parts[0], half * sizeof(float));
    memcpy(tmp + half, g->parts[1], half * sizeof(float));
    pthread_barrier_wait(&g->bar);
    memcpy(full, tmp, n * sizeof(float));
    free(tmp);
    w->gathers++;
}

static void tp_reduce_scatter(void *ctx, const float *full, float *local, size_t n)
{
    tp_worker *w = ctx;
    thread_group *g = w->g;
    size_t half = n / 2, at = (size_t)w->rank * half;
    g->parts[w->rank] = full;
    pthread_barrier_wait(&g->bar);
    float *tmp = malloc(half * sizeof(float));
    for (size_t i = 0; i < half; i++) tmp[i] = g->parts[0][at + i] + g->parts[1][at + i];
    pthread_barrier_wait(&g->bar);
    memcpy(local, tmp, half * sizeof(float));
    free(tmp);
    w->scatters++;
}

static void *tp_thread(void *arg)
{
    tp_worker *w = arg;
    dt_ops_set_threads(1);
    model_shard sh = {.tp_rank = w->rank, .tp_size = 2, .unit_begin = 0, .unit_end = w->spec->n_layer + 2,
                      .sp = w->sp};
    w->m = model_create(w->spec, &sh, ops, w->rc);
    /* tp.c's layers, over the threads' collectives */
    tp_group g = {.ops = ops, .rank = w->rank, .size = 2, .sp = w->sp, .ctx = w, .all_reduce = tp_allreduce};
    if (w->sp) g.all_gather = tp_all_gather, g.reduce_scatter = tp_reduce_scatter;
    model_layers layers;
    tp_layers(&g, &layers);
    model_set_layers(w->m, &layers);
    test_init(w->m, 11);
    run_once(w->m, w->tb, 1.0f, &w->res);
    return NULL;
}

/* tp = 2 against tp = 1 on a batch of B samples; sp: with sequence parallelism
 * (and rc: recompute), where B = 1 splits a sample between the two ranks. */
typedef struct {
    long reduces, max_reduces; /* rank 0's all-reduces, and its TP_MAX ones */
} tp_counts;

static tp_counts tp_equivalence_with(const job_model *s, int B, int sp, recompute_kind rc, const char *what)
{
    test_batch tb;
    make_batch(&tb, s, 5);
    tb.mb.B = B;
    model *ref = make_model(s, 0, 1, 0, s->n_layer + 2, RECOMPUTE_NONE);
    test_init(ref, 11);
    run_result rr;
    run_once(ref, &tb, 1.0f, &rr);

    thread_group g;
    pthread_barrier_init(&g.bar, NULL, 2);
    tp_worker w[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        w[r] = (tp_worker){.g = &g, .rank = r, .spec = s, .tb = &tb, .sp = sp, .rc = rc};
        pthread_create(&th[r], NULL, tp_thread, &w[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&g.bar);

    double loss_err = 0, grad_err = 0;
    char worst[PARAM_NAME_MAX] = "";
    int sharded = 0;
    for (int r = 0; r < 2; r++) {
        loss_err = fmax(loss_err, fabs(w[r].res.loss - rr.loss) / fabs(rr.loss));
        for (int i = 0; i < model_param_count(w[r].m); i++) {
            const param_spec *p = model_param(w[r].m, i);
            int k = find_param(ref, p->unit, p->name);
            sharded += p->local_numel != model_param(ref, k)->local_numel;
            /* the slice of the reference this rank holds */
            float *slice = malloc(p->local_numel * sizeof(float));
            for (size_t j = 0; j < p->local_numel; j++)
                slice[j] = rr.grads[k][param_global_index(p, r, 2, j)];
            double e = tensor_rel_err(w[r].res.grads[i], slice, p->local_numel);
            if (e > grad_err) { grad_err = e; snprintf(worst, sizeof worst, "%s", p->name); }
            free(slice);
        }
    }
    CHECK(w[0].reduces > 0 && sharded > 0 && loss_err < 1e-5 && (sp ? w[0].gathers > 0 && w[0].scatters > 0 : 1),
          "%s: tp=2 (2 threads, %ld all-reduces, %ld all-gathers, %ld reduce-scatters each) loss %.6f vs "
          "tp=1 %.6f: rel err %.1e < 1e-5",
          what, w[0].reduces, w[0].gathers, w[0].scatters, w[0].res.loss, rr.loss, loss_err);
    CHECK(grad_err < 1e-4, "%s: tp=2 grads (%d sharded tensors) equal tp=1's slices: max rel err "
          "%.1e (at %s) < 1e-4", what, sharded / 2, grad_err, worst);
    if (sp) {
        /* replicated tensors (layernorms above all) must come out the same on both ranks */
        int same = 1;
        for (int i = 0; i < model_param_count(w[0].m); i++)
            if (model_param(w[0].m, i)->split == SPLIT_NONE &&
                memcmp(w[0].res.grads[i], w[1].res.grads[i], w[0].res.numel[i] * sizeof(float)))
                same = 0;
        CHECK(same, "%s: replicated gradients are bitwise equal on both tp ranks", what);
    }
    for (int r = 0; r < 2; r++) {
        run_free(&w[r].res);
        model_destroy(w[r].m);
    }
    run_free(&rr);
    model_destroy(ref);
    return (tp_counts){w[0].reduces, w[0].max_reduces};
}

static void tp_equivalence(const job_model *s, const char *what)
{
    tp_equivalence_with(s, TB, 0, RECOMPUTE_NONE, what);
}

/* GPT-2's 50257 vocabulary rows over tp 2, 3, 4, 8: wte and its tied head copy
 * get the same rows on each rank, the ranks' rows tile [0, V) in order, and no
 * two ranks differ by more than one row (no padding anywhere). */
static void vocab_split(void)
{
    job_model s = tiny_gpt_spec();
    s.vocab_size = 50257;
    static const int tps[] = {2, 3, 4, 8};
    int ok = 1, uneven = 0;
    for (size_t t = 0; t < sizeof tps / sizeof tps[0]; t++) {
        int tp = tps[t], next = 0, lo = 1 << 30, hi = 0;
        for (int r = 0; r < tp; r++) {
            param_spec e, h;
            model_unit_param_spec(&s, 0, 0, r, tp, &e);                /* wte */
            model_unit_param_spec(&s, s.n_layer + 1, 2, r, tp, &h);    /* the head's tied copy */
            int rows = e.local_shape[0];
            ok &= !strcmp(e.name, "wte") && !strcmp(h.name, "wte") && h.tied && e.shape[0] == 50257 &&
                  h.local_shape[0] == rows && e.local_shape[1] == s.d_model &&
                  e.local_numel == (size_t)rows * (size_t)s.d_model &&
                  param_global_index(&e, r, tp, 0) == (size_t)next * (size_t)s.d_model;
            next += rows;
            lo = rows < lo ? rows : lo;
            hi = rows > hi ? rows : hi;
        }
        ok &= next == 50257 && hi - lo <= 1;
        uneven += hi != lo;
    }
    CHECK(ok && uneven == 4, "vocab 50257 over tp 2, 3, 4, 8: ranks hold contiguous rows differing by at most one, "
                             "wte and its tied copy alike, no padding");
}

/* ---------- 3b. the chunked LM head ---------- */

/* The head (final layernorm, LM head tied to wte, cross-entropy) of a B-sample
 * micro-batch computed once with the ops directly, the whole [N, V] logits at
 * once: the unchunked computation the model's chunked head must reproduce. */
typedef struct {
    double loss;
    float *dx, *dlnw, *dlnb, *dwte; /* [N, C], [C], [C], [V, C] */
} head_ref;

static head_ref head_direct(const job_model *s, const float *x, const float *lnw, const float *lnb,
                            const float *wte, const int *targets, int N, float scale)
{
    int C = s->d_model, V = s->vocab_size;
    size_t NC = (size_t)N * C, NV = (size_t)N * V;
    float *lnf = malloc(NC * sizeof(float)), *mean = malloc(N * sizeof(float)), *rstd = malloc(N * sizeof(float));
    float *logits = malloc(NV * sizeof(float)), *dlogits = malloc(NV * sizeof(float));
    float *rowmax = malloc(N * sizeof(float)), *sumexp = malloc(N * sizeof(float)), *target = malloc(N * sizeof(float));
    float *loss = malloc(N * sizeof(float)), *dloss = malloc(N * sizeof(float)), *dlnf = calloc(NC, sizeof(float));
    head_ref r = {.dx = calloc(NC, sizeof(float)), .dlnw = calloc((size_t)C, sizeof(float)),
                  .dlnb = calloc((size_t)C, sizeof(float)), .dwte = calloc((size_t)V * C, sizeof(float))};
    ops->layernorm_forward(lnf, mean, rstd, x, lnw, lnb, N, C, (float)job_model_norm_eps(s), DT_F32);
    ops->matmul_forward(logits, lnf, wte, NULL, N, C, V, DT_F32, DT_F32);
    ops->xent_stats(rowmax, sumexp, target, logits, targets, 0, N, V);
    ops->xent_loss(loss, rowmax, sumexp, target, targets, N);
    for (int i = 0; i < N; i++) {
        r.loss += loss[i];
        dloss[i] = targets[i] >= 0 ? scale : 0.0f;
    }
    ops->xent_backward(dlogits, logits, rowmax, sumexp, targets, dloss, 0, N, V);
    ops->matmul_backward(dlnf, r.dwte, NULL, dlogits, lnf, wte, N, C, V, DT_F32);
    ops->layernorm_backward(r.dx, r.dlnw, r.dlnb, dlnf, x, lnw, mean, rstd, N, C, DT_F32);
    free(lnf), free(mean), free(rstd), free(logits), free(dlogits), free(rowmax), free(sumexp), free(target);
    free(loss), free(dloss), free(dlnf);
    return r;
}

/* A head-only model (unit L+1) whose logits come in chunks of `rows` rows (0:
 * the default, here one chunk) against head_direct on the same input: the
 * loss, the input gradient and the three weight gradients. Tolerance: the
 * chunks change only the GEMMs' row counts and how d(wte)'s sum over the rows
 * is grouped (one GEMM per chunk), fp32 rounding: 1e-6 of each tensor's
 * largest element (a missed or doubled chunk, a wrong row offset or a stale
 * chunk moves them by far more). */
static void chunked_head(int rows, int B, const char *what)
{
    job_model s = tiny_gpt_spec();
    s.head_chunk_rows = rows;
    int L = s.n_layer, N = B * s.seq_len, C = s.d_model, V = s.vocab_size;
    model *m = make_model(&s, 0, 1, L + 1, L + 2, RECOMPUTE_NONE);
    test_init(m, 11);
    model_acts *a = model_acts_create(m, B);
    uint64_t k = rng_key(3, "chunked-head");
    int *tokens = malloc((size_t)N * sizeof(int)), *targets = malloc((size_t)N * sizeof(int));
    float *x = model_acts_input(a), *x0 = malloc((size_t)N * C * sizeof(float));
    for (int i = 0; i < N; i++) {
        tokens[i] = (int)rng_below(k, (uint64_t)i, (uint64_t)V);
        targets[i] = i % 7 == 3 ? -1 : (int)rng_below(k, 100000 + (uint64_t)i, (uint64_t)V); /* some ignored */
    }
    for (size_t i = 0; i < (size_t)N * C; i++) x0[i] = x[i] = rng_normal(k, 200000 + i);
    model_batch mb = {.B = B, .tokens = tokens, .targets = targets};
    const float scale = 1.0f / (float)N;
    model_zero_grads(m);
    double loss = model_forward(m, a, &mb, NULL);
    model_backward(m, a, &mb, scale);
    int iw = find_param(m, L + 1, "lnf.w"), ib = find_param(m, L + 1, "lnf.b"), ie = find_param(m, L + 1, "wte");
    head_ref r = head_direct(&s, x0, model_param_data(m, iw), model_param_data(m, ib), model_param_data(m, ie),
                             targets, N, scale);
    double e_loss = fabs(loss - r.loss) / fabs(r.loss);
    double e_dx = tensor_rel_err(model_acts_dinput(a), r.dx, (size_t)N * C);
    double e_w = fmax(tensor_rel_err(model_param_grad(m, iw), r.dlnw, (size_t)C),
                      tensor_rel_err(model_param_grad(m, ib), r.dlnb, (size_t)C));
    double e_wte = tensor_rel_err(model_param_grad(m, ie), r.dwte, (size_t)V * C);
    int n_rows = model_head_chunk_rows(&s), chunks = (N + n_rows - 1) / n_rows;
    CHECK(e_loss < 1e-6 && e_dx < 1e-6 && e_w < 1e-6 && e_wte < 1e-6,
          "%s: the head in %d chunk(s) of %d row(s) (N %d) = the whole [N, V] head by the ops: loss %.7g vs %.7g "
          "(rel %.1e), d(x) %.1e, d(lnf) %.1e, d(wte) %.1e (< 1e-6)",
          what, chunks, n_rows, N, loss, r.loss, e_loss, e_dx, e_w, e_wte);
    free(r.dx), free(r.dlnw), free(r.dlnb), free(r.dwte);
    free(tokens), free(targets), free(x0);
    model_acts_destroy(a);
    model_destroy(m);
}

/* The head's activation bytes, from the layout the allocation uses: a
 * head-only shard of B samples keeps [N] targets, lnf [N, C] and its two [N]
 * statistics, five [N] loss statistics and the [N, C] stream entering it, and
 * works in the residual gradient and d(lnf) ([N, C] each) and one chunk of
 * logits, [min(rows, N), V] (sizes chosen so that every buffer is whole cache
 * lines: the alignment adds nothing). The unchunked head kept [N, V] logits in
 * the stash and [seq, V] of their gradient in the working set instead. */
static void head_chunk_bytes(void)
{
    job_model s = tiny_gpt_spec();
    int L = s.n_layer, B = 4;
    size_t N = (size_t)B * s.seq_len, C = (size_t)s.d_model, V = (size_t)s.vocab_size, T = (size_t)s.seq_len;
    model_shard head = {.tp_size = 1, .unit_begin = L + 1, .unit_end = L + 2};
    size_t fixed = 4 * (N + 2 * N + 5 * N + 4 * N * C);
    size_t old = fixed + 4 * (N * V + T * V);
    int ok = 1, drops = 1;
    const int rows[] = {0, 1, 5, 16, (int)N, 1000};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        s.head_chunk_rows = rows[i];
        size_t r = (size_t)model_head_chunk_rows(&s), chunk = (r < N ? r : N) * V * 4;
        model_acts_size z = model_acts_sizes(&s, &head, B, RECOMPUTE_NONE, NULL);
        ok &= z.stash + z.work == fixed + chunk && model_acts_head_chunk_bytes(&s, &head, B) == chunk &&
              model_acts_bytes(&s, &head, B, RECOMPUTE_NONE) == z.stash + z.work;
        drops &= old - (z.stash + z.work) == 4 * (N * V + T * V) - chunk;
        printf("# head_chunk_rows %d (%zu rows): %zu bytes, %zu less than the unchunked head's %zu\n", rows[i],
               r < N ? r : N, z.stash + z.work, old - (z.stash + z.work), old);
    }
    CHECK(ok && drops, "a head-only shard (N %zu, V %zu) holds one chunk of logits, [min(rows, N), V] fp32, in "
          "place of the [N, V] logits and [seq, V] gradient (the stash keeps no logits)", N, V);
    /* the shared working set holds the chunk once, however many micro-batches
     * a pipeline stage keeps in flight: the stash of the last stage has no V */
    s.head_chunk_rows = 5;
    model_acts_size z5 = model_acts_sizes(&s, &head, B, RECOMPUTE_NONE, NULL);
    s.vocab_size = 64;
    model_acts_size z64 = model_acts_sizes(&s, &head, B, RECOMPUTE_NONE, NULL);
    CHECK(z5.stash == z64.stash && z64.work - z5.work == 5 * 32 * 4,
          "the head's stash does not grow with the vocabulary; its working set by one chunk's columns "
          "(%zu bytes for 32 more)", z64.work - z5.work);
}

/* tp = 2 with the head in chunks: the same loss and gradients as tp = 1, and
 * no collective per chunk. Each chunk's rows keep this rank's (max, sum of
 * exps) pair (xent_stats); after the last chunk the pairs combine over the
 * group: one MAX all-reduce of the maxima, the sums rescaled to it locally,
 * then the sums and the target logits (SUM). So 6 chunks make as many
 * all-reduces as 1 (the per-chunk row-max all-reduce is gone), and one of
 * them, per forward, is a MAX. */
static void chunked_head_tp(void)
{
    job_model g = tiny_gpt_spec(), g3 = tiny_gpt_spec(), g33 = tiny_gpt_spec();
    g3.head_chunk_rows = 3;    /* N = 16: chunks of 3, 3, 3, 3, 3, 1 */
    g33.vocab_size = 33;       /* 16 + 17 vocabulary rows */
    g33.head_chunk_rows = 5;
    tp_counts one = tp_equivalence_with(&g, TB, 0, RECOMPUTE_NONE, "gpt, head in one chunk");
    tp_counts six = tp_equivalence_with(&g3, TB, 0, RECOMPUTE_NONE, "gpt, head in chunks of 3 rows");
    tp_counts sp5 = tp_equivalence_with(&g33, TB, 1, RECOMPUTE_NONE, "gpt V=33 sp, head in chunks of 5 rows");
    CHECK(six.reduces == one.reduces && one.max_reduces == 1 && six.max_reduces == 1 && sp5.max_reduces == 1,
          "the tp head all-reduces its row max once per forward, not per chunk: %ld collectives (%ld MAX) with 6 "
          "chunks, %ld (%ld MAX) with 1; %ld MAX with sp and 4 chunks",
          six.reduces, six.max_reduces, one.reduces, one.max_reduces, sp5.max_reduces);
}

/* ---------- 4. pipeline splits ---------- */

static void pipeline_split(const job_model *s, const int *cuts, int nstages, const char *what)
{
    test_batch tb;
    make_batch(&tb, s, 9);
    int L = s->n_layer;
    model *whole = make_model(s, 0, 1, 0, L + 2, RECOMPUTE_NONE);
    test_init(whole, 11);
    run_result rr;
    run_once(whole, &tb, 0.5f, &rr);

    model *st[4];
    model_acts *ac[4];
    for (int k = 0; k < nstages; k++) {
        st[k] = make_model(s, 0, 1, cuts[k], cuts[k + 1], RECOMPUTE_NONE);
        test_init(st[k], 11);
        model_zero_grads(st[k]);
        ac[k] = model_acts_create(st[k], TB);
    }
    size_t io = model_acts_io_numel(st[0], TB);
    double loss = 0;
    int sent_ok = 1;
    for (int k = 0; k < nstages; k++) {
        if (k > 0) memcpy(model_acts_input(ac[k]), model_acts_output(ac[k - 1]), io * sizeof(float));
        double l = model_forward(st[k], ac[k], &tb.mb, NULL);
        if (k < nstages - 1 && l != 0) sent_ok = 0;
        loss += l;
    }
    for (int k = nstages - 1; k >= 0; k--) {
        if (k < nstages - 1)
            memcpy(model_acts_doutput(ac[k]), model_acts_dinput(ac[k + 1]), io * sizeof(float));
        model_backward(st[k], ac[k], &tb.mb, 0.5f);
    }
    /* the embedding group's all-reduce of the two wte copies */
    int e = find_param(st[0], 0, "wte"), h = find_param(st[nstages - 1], L + 1, "wte");
    if (e >= 0 && h >= 0) {
        float *ge = model_param_grad(st[0], e), *gh = model_param_grad(st[nstages - 1], h);
        for (size_t j = 0; j < model_param(st[0], e)->local_numel; j++) ge[j] = gh[j] = ge[j] + gh[j];
    }
    double grad_err = 0;
    int compared = 0;
    for (int k = 0; k < nstages; k++)
        for (int i = 0; i < model_param_count(st[k]); i++) {
            const param_spec *p = model_param(st[k], i);
            int w = find_param(whole, p->unit, p->name);
            grad_err = fmax(grad_err, tensor_rel_err(model_param_grad(st[k], i), rr.grads[w], p->local_numel));
            compared++;
        }
    CHECK(sent_ok && fabs(loss - rr.loss) <= 1e-6 * fabs(rr.loss) && grad_err < 1e-5 &&
              compared == model_param_count(whole),
          "%s: %d pipeline stages give the whole model's loss (%.6f vs %.6f) and grads "
          "(%d tensors, max rel err %.1e < 1e-5)", what, nstages, loss, rr.loss, compared, grad_err);
    for (int k = 0; k < nstages; k++) {
        model_acts_destroy(ac[k]);
        model_destroy(st[k]);
    }
    run_free(&rr);
    model_destroy(whole);
}

/* ---------- 5. recompute ---------- */

static void recompute_same(const job_model *s, const char *what)
{
    test_batch tb;
    make_batch(&tb, s, 3);
    run_result r[3];
    recompute_kind kinds[3] = {RECOMPUTE_NONE, RECOMPUTE_BLOCK, RECOMPUTE_SELECTIVE};
    for (int k = 0; k < 3; k++) {
        model *m = make_model(s, 0, 1, 0, s->n_layer + 2, kinds[k]);
        test_init(m, 11);
        run_once(m, &tb, 1.0f, &r[k]);
        model_destroy(m);
    }
    double err = 0;
    for (int i = 0; i < r[0].n; i++)
        err = fmax(err, tensor_rel_err(r[1].grads[i], r[0].grads[i], r[0].numel[i]));
    CHECK(r[0].loss == r[1].loss && err <= 1e-6,
          "%s: recompute gives the same loss (%.6f, bitwise) and grads (max rel err %.1e <= 1e-6)",
          what, r[1].loss, err);
    /* selective rebuilds the probabilities with the same kernel from the same
     * qkv: the same bits, so every gradient is bitwise the none run's */
    int same = r[2].loss == r[0].loss;
    for (int i = 0; i < r[0].n; i++)
        same &= !memcmp(r[2].grads[i], r[0].grads[i], r[0].numel[i] * sizeof(float));
    CHECK(same, "%s: selective recompute gives bitwise the same loss (%.6f) and grads as none", what, r[2].loss);
    for (int k = 0; k < 3; k++) run_free(&r[k]);
}

/* bf16 mixed precision (model_precision.bf16: bf16 weights and activations,
 * fp32 gradients here): every recompute mode rounds at the same points, so all
 * three give bitwise the same loss and gradients; and the rounding moves them
 * only a little from the fp32 run of the same (bf16-rounded) weights. Bound:
 * bf16 keeps 8 significant bits, so each rounding errs by at most 2^-9 (2e-3)
 * relative; a gradient of this 2-block model passes about 20 roundings (8
 * stored tensors a block, the stream and its gradient at each boundary) and
 * Jacobians of a few (the norms' 1/std, softmax, SwiGLU's product), so a few
 * percent of the whole gradient's L2 norm is the expected size: 5e-2. How
 * much a model amplifies a rounding is its own: its fp32 gradient moves by
 * about as much when only its weights are rounded to bf16 (the same inputs'
 * rounding, no bf16 compute), so the compute's error must also stay within
 * twice that sensitivity. Measured (compute; weights only): GPT 1.5e-2;
 * 1.1e-2, ViT 1.2e-2; 1.1e-2, the tiny Llama (GQA, SwiGLU) 3.6e-2; 3.6e-2. */
static void bf16_acts(const job_model *s, const char *what)
{
    test_batch tb;
    make_batch(&tb, s, 3);
    run_result r[5];
    recompute_kind kinds[3] = {RECOMPUTE_NONE, RECOMPUTE_BLOCK, RECOMPUTE_SELECTIVE};
    model_precision bf = {.bf16 = 1};
    for (int k = 0; k < 5; k++) {
        model_shard sh = {.tp_rank = 0, .tp_size = 1, .unit_begin = 0, .unit_end = s->n_layer + 2};
        model *m = model_create_prec(s, &sh, ops, k < 3 ? kinds[k] : RECOMPUTE_NONE, k < 3 ? &bf : NULL);
        test_init(m, 11);
        for (int i = 0; k == 3 && i < model_param_count(m); i++) { /* fp32 of the bf16 weights */
            float *d = model_param_data(m, i);
            size_t n = model_param(m, i)->local_numel;
            uint16_t *h = malloc(n * sizeof *h);
            ops->to_bf16(h, d, n);
            ops->from_bf16(d, h, n);
            free(h);
        }
        run_once(m, &tb, 1.0f, &r[k]);
        model_destroy(m);
    }
    int same = 1;
    for (int k = 1; k < 3; k++) {
        same &= r[k].loss == r[0].loss;
        for (int i = 0; i < r[0].n; i++) same &= !memcmp(r[k].grads[i], r[0].grads[i], r[0].numel[i] * sizeof(float));
    }
    CHECK(same, "%s bf16: none, block and selective recompute give bitwise the same loss (%.6f) and grads", what,
          r[0].loss);
    /* the whole gradient's relative L2 distance: single tensors whose sum
     * cancels (a bias, the class token) can lose more, relative to their size */
    double d2 = 0, w2 = 0, n2 = 0, lerr = fabs(r[0].loss - r[3].loss) / fabs(r[3].loss);
    for (int i = 0; i < r[0].n; i++)
        for (size_t j = 0; j < r[0].numel[i]; j++) {
            double d = (double)r[0].grads[i][j] - r[3].grads[i][j], w = (double)r[3].grads[i][j] - r[4].grads[i][j];
            d2 += d * d, w2 += w * w, n2 += (double)r[3].grads[i][j] * r[3].grads[i][j];
        }
    double err = sqrt(d2 / n2), sens = sqrt(w2 / n2);
    CHECK(lerr < 1e-2 && err < 5e-2 && err < 2 * sens && lerr > 0,
          "%s bf16: loss within %.1e and the gradient within %.1e (relative L2) of fp32's on the same weights, and "
          "not equal to them; rounding only the weights moves fp32's by %.1e", what, lerr, err, sens);
    for (int k = 0; k < 5; k++) run_free(&r[k]);
}

/* model.attention: fused (the blockwise ops, lse kept) and naive (the
 * probabilities kept) compute the same function; only the order of the
 * softmax's sums differs (the online softmax's running max and rescaling, the
 * backward's recomputed probabilities), so fp32 loss and gradients agree to a
 * few fp32 ulps: 1e-6 relative on the loss, 1e-5 relative L2 on the whole
 * gradient. Under bf16 naive rounds its probabilities where it stores them and
 * fused has none to round, so the two differ by the bf16 rounding of the
 * probabilities: within the bf16 bound of bf16_acts (5e-2). */
static void fused_vs_naive(const job_model *s, const char *what)
{
    test_batch tb;
    make_batch(&tb, s, 5);
    run_result r[4];
    model_precision bf = {.bf16 = 1};
    for (int k = 0; k < 4; k++) {
        job_model sk = *s;
        sk.attention = k % 2 ? ATTN_NAIVE : ATTN_FUSED;
        model_shard sh = {.tp_rank = 0, .tp_size = 1, .unit_begin = 0, .unit_end = s->n_layer + 2};
        model *m = model_create_prec(&sk, &sh, ops, RECOMPUTE_NONE, k < 2 ? NULL : &bf);
        test_init(m, 11);
        run_once(m, &tb, 1.0f, &r[k]);
        model_destroy(m);
    }
    for (int p = 0; p < 2; p++) {
        const run_result *f = &r[2 * p], *n = &r[2 * p + 1];
        double d2 = 0, n2 = 0, lerr = fabs(f->loss - n->loss) / fabs(n->loss);
        for (int i = 0; i < n->n; i++)
            for (size_t j = 0; j < n->numel[i]; j++) {
                double d = (double)f->grads[i][j] - n->grads[i][j];
                d2 += d * d, n2 += (double)n->grads[i][j] * n->grads[i][j];
            }
        double err = sqrt(d2 / n2), ltol = p ? 1e-2 : 1e-6, gtol = p ? 5e-2 : 1e-5;
        CHECK(lerr <= ltol && err <= gtol,
              "%s %s: fused attention = naive: loss %.6f vs %.6f (rel %.1e <= %.0e), gradient rel L2 %.1e <= %.0e",
              what, p ? "bf16" : "fp32", f->loss, n->loss, lerr, ltol, err, gtol);
    }
    for (int k = 0; k < 4; k++) run_free(&r[k]);
}

/* ---------- the backward in two passes (zero-bubble pipelines) ---------- */

typedef struct {
    int ev[64], n;
} hook_log;

static void log_before(void *ctx, int unit, model_phase ph)
{
    hook_log *l = ctx;
    if (ph == PHASE_BACKWARD && l->n < 64) l->ev[l->n++] = unit;
}

static void log_after(void *ctx, int unit, model_phase ph)
{
    hook_log *l = ctx;
    if (ph == PHASE_BACKWARD && l->n < 64) l->ev[l->n++] = -1 - unit;
}

/* Two micro-batches through a whole model, or a pipeline chunk of it: plain,
 * F(0) B(0) F(1) B(1); split, F(0) F(1) B(0) B(1) W(0) W(1) (a W as late as ZB-H1
 * puts one). The gradients must be bitwise the same, the after(BACKWARD) hooks
 * all in the W's, in model_backward's order, the before hooks all in the B's. */
static void split_backward(const job_model *s, int ub, int ue, const model_precision *prec, recompute_kind rc,
                           const char *what)
{
    test_batch tb[2];
    make_batch(&tb[0], s, 5);
    make_batch(&tb[1], s, 6);
    int U = s->n_layer + 2;
    float *dout[2] = {NULL, NULL};
    model *mm[2];
    hook_log log[2] = {{{0}, 0}, {{0}, 0}};
    for (int k = 0; k < 2; k++) {
        model_shard sh = {.tp_rank = 0, .tp_size = 1, .unit_begin = ub, .unit_end = ue};
        mm[k] = model_create_prec(s, &sh, ops, rc, prec);
        test_init(mm[k], 13);
        model_hooks h = {.ctx = &log[k], .before = log_before, .after = log_after};
        model_set_hooks(mm[k], &h);
        model_zero_grads(mm[k]);
    }
    model_acts *a[2], *b[2];
    size_t n_io = model_acts_io_numel(mm[0], TB), io = n_io * model_acts_io_elem_size(mm[0]);
    float *vals = malloc(n_io * sizeof(float));
    /* a chunk without the embedding or the head: its input and output gradient,
     * in the activations' precision */
    for (int i = 0; i < 2; i++) {
        a[i] = model_acts_create(mm[0], TB);
        b[i] = model_acts_create_split(mm[1], TB);
        for (size_t j = 0; j < n_io; j++) vals[j] = sinf(0.37f * (float)j + (float)i);
        if (ub > 0 && io == n_io * 2) ops->to_bf16(model_acts_input(a[i]), vals, n_io);
        else if (ub > 0) memcpy(model_acts_input(a[i]), vals, io);
        if (ub > 0) memcpy(model_acts_input(b[i]), model_acts_input(a[i]), io);
        if (ue == U) continue;
        dout[i] = malloc(io);
        for (size_t j = 0; j < n_io; j++) vals[j] = 0.01f * cosf(0.23f * (float)j + (float)i);
        if (io == n_io * 2) ops->to_bf16((uint16_t *)dout[i], vals, n_io);
        else memcpy(dout[i], vals, io);
    }
    free(vals);
    for (int i = 0; i < 2; i++) {
        model_forward(mm[0], a[i], &tb[i].mb, NULL);
        if (dout[i]) memcpy(model_acts_doutput(a[i]), dout[i], io);
        model_backward(mm[0], a[i], &tb[i].mb, 0.5f);
    }
    int befores_in_b = 1, afters_in_w = 1;
    for (int i = 0; i < 2; i++) model_forward(mm[1], b[i], &tb[i].mb, NULL);
    for (int i = 0; i < 2; i++) {
        if (dout[i]) memcpy(model_acts_doutput(b[i]), dout[i], io);
        int n0 = log[1].n;
        model_backward_input(mm[1], b[i], &tb[i].mb, 0.5f);
        for (int e = n0; e < log[1].n; e++) befores_in_b &= log[1].ev[e] >= 0;
    }
    for (int i = 0; i < 2; i++) {
        int n0 = log[1].n;
        model_backward_weight(mm[1], b[i], &tb[i].mb);
        for (int e = n0; e < log[1].n; e++) afters_in_w &= log[1].ev[e] < 0;
    }
    /* the order of each kind of hook, micro-batch by micro-batch, as the plain run's */
    int order = 1, na = 0, nb = 0;
    int plain_after[64], split_after[64];
    for (int e = 0; e < log[0].n; e++)
        if (log[0].ev[e] < 0) plain_after[na++] = log[0].ev[e];
    for (int e = 0; e < log[1].n; e++)
        if (log[1].ev[e] < 0 && nb < 64) split_after[nb++] = log[1].ev[e];
    order = na == nb && na == 2 * (ue - ub) && !memcmp(plain_after, split_after, (size_t)na * sizeof(int));
    int same = 1;
    for (int i = 0; i < model_param_count(mm[0]); i++)
        same &= !memcmp(model_param_grad(mm[0], i), model_param_grad(mm[1], i),
                        model_param(mm[0], i)->local_numel * model_grad_elem_bytes(mm[0]));
    /* and the input gradient B hands to the previous stage */
    if (ub > 0) same &= !memcmp(model_acts_dinput(a[1]), model_acts_dinput(b[1]), io);
    CHECK(same && befores_in_b && afters_in_w && order,
          "%s: B then W (W two micro-batches late) gives bitwise model_backward's gradients (%d); before hooks in B "
          "(%d), after hooks in W (%d), in model_backward's order (%d)",
          what, same, befores_in_b, afters_in_w, order);
    for (int i = 0; i < 2; i++) {
        model_acts_destroy(a[i]);
        model_acts_destroy(b[i]);
        free(dout[i]);
    }
    model_destroy(mm[0]);
    model_destroy(mm[1]);
}

static void split_backward_all(const job_model *s, const char *what)
{
    char line[128];
    model_precision bf = {.bf16 = 1};
    int L = s->n_layer;
    snprintf(line, sizeof line, "%s whole", what);
    split_backward(s, 0, L + 2, NULL, RECOMPUTE_NONE, line);
    snprintf(line, sizeof line, "%s chunk [0,2)", what);
    split_backward(s, 0, 2, NULL, RECOMPUTE_NONE, line);
    snprintf(line, sizeof line, "%s chunk [1,2) selective", what);
    split_backward(s, 1, 2, NULL, RECOMPUTE_SELECTIVE, line);
    snprintf(line, sizeof line, "%s chunk [2,4) bf16", what);
    split_backward(s, 2, L + 2, &bf, RECOMPUTE_NONE, line);
    snprintf(line, sizeof line, "%s whole bf16", what);
    split_backward(s, 0, L + 2, &bf, RECOMPUTE_NONE, line);
    /* fp32 keeps the W-pending gradients in stash tensors B is done with: only
     * the last block of a stage without the head needs its [N, C] output gradient
     * apart; bf16 keeps all four of every block apart */
    model_shard whole = {.tp_size = 1, .unit_end = L + 2}, first = {.tp_size = 1, .unit_end = 2};
    size_t NC = (size_t)TB * (size_t)model_seq_len(s) * (size_t)s->d_model;
    size_t per_block16 = (2 * NC + (size_t)TB * model_seq_len(s) * (size_t)(s->d_ff + 3 * s->d_model)) * 4;
    CHECK(model_acts_wkeep_bytes(s, &whole, TB, NULL) == 0 && model_acts_wkeep_bytes(s, &first, TB, NULL) == NC * 4 &&
              model_acts_wkeep_bytes(s, &whole, TB, &bf) >= (size_t)L * per_block16,
          "%s: W-pending bytes: fp32 whole %zu (0), fp32 stage without the head %zu (N x C x 4 = %zu), bf16 whole %zu "
          "(>= %zu)", what, model_acts_wkeep_bytes(s, &whole, TB, NULL), model_acts_wkeep_bytes(s, &first, TB, NULL),
          NC * 4, model_acts_wkeep_bytes(s, &whole, TB, &bf), (size_t)L * per_block16);
    /* what it cannot split: one line why, no activations */
    model *m = make_model(s, 0, 1, 0, L + 2, RECOMPUTE_BLOCK);
    model_acts *a = model_acts_create_split(m, TB);
    CHECK(!a && model_split_unsupported(model_get_shard(m), RECOMPUTE_BLOCK, NULL),
          "%s: no split backward under block recompute", what);
    model_acts_destroy(a);
    model_destroy(m);
}

/* ---------- hooks: order, and rebinding inside them (the FSDP contract) ---------- */

typedef struct {
    model *m;
    int events[64][2];
    int n;
    float *good[8], *poison[8], *gbuf[8];
} hook_rec;

static void rec_before(void *ctx, int unit, model_phase ph)
{
    hook_rec *r = ctx;
    if (r->n < 64) { r->events[r->n][0] = unit; r->events[r->n][1] = ph; }
    r->n++;
    /* "gather": point the unit at the good copy; in backward, fresh grads */
    model_unit_bind(r->m, unit, r->good[unit], ph == PHASE_BACKWARD ? r->gbuf[unit] : NULL);
}

static void rec_after(void *ctx, int unit, model_phase ph)
{
    hook_rec *r = ctx;
    if (r->n < 64) { r->events[r->n][0] = -1 - unit; r->events[r->n][1] = ph; }
    r->n++;
    /* "free": anything the model kept would now read NaNs */
    model_unit_bind(r->m, unit, r->poison[unit], NULL);
}

static void hooks_and_rebind(const job_model *s, const char *what)
{
    test_batch tb;
    make_batch(&tb, s, 4);
    int L = s->n_layer, U = L + 2;
    model *m = make_model(s, 0, 1, 0, U, RECOMPUTE_BLOCK);
    test_init(m, 11);
    run_result ref;
    run_once(m, &tb, 1.0f, &ref);

    hook_rec r = {.m = m};
    for (int u = 0; u < U; u++) {
        size_t n = model_unit_local_numel(m, u);
        r.good[u] = malloc(n * sizeof(float));
        memcpy(r.good[u], model_unit_params(m, u), n * sizeof(float));
        r.poison[u] = malloc(n * sizeof(float));
        for (size_t j = 0; j < n; j++) r.poison[u][j] = NAN;
        r.gbuf[u] = calloc(n, sizeof(float));
        model_unit_bind(m, u, r.poison[u], r.gbuf[u]);
    }
    model_hooks h = {.ctx = &r, .before = rec_before, .after = rec_after};
    model_set_hooks(m, &h);
    model_acts *a = model_acts_create(m, TB);
    double loss = model_forward(m, a, &tb.mb, NULL);
    model_backward(m, a, &tb.mb, 1.0f);

    /* expected order */
    int exp[64][2], ne = 0;
    for (int u = 0; u < U; u++) {
        exp[ne][0] = u; exp[ne++][1] = PHASE_FORWARD;
        exp[ne][0] = -1 - u; exp[ne++][1] = PHASE_FORWARD;
    }
    int tied = job_model_tied_head(s);
    for (int u = U - 1; u >= 0; u--) {
        exp[ne][0] = u; exp[ne++][1] = PHASE_BACKWARD;
        if (!(tied && u == U - 1)) { exp[ne][0] = -1 - u; exp[ne++][1] = PHASE_BACKWARD; }
    }
    if (tied) { exp[ne][0] = -U; exp[ne++][1] = PHASE_BACKWARD; }
    int order_ok = r.n == ne;
    for (int i = 0; order_ok && i < ne; i++)
        order_ok = r.events[i][0] == exp[i][0] && r.events[i][1] == exp[i][1];
    CHECK(order_ok, "%s: hooks run in unit order around each unit (%d events%s)", what, r.n,
          tied ? ", tied head's after(BACKWARD) last" : "");

    double err = 0;
    for (int i = 0; i < model_param_count(m); i++) {
        const param_spec *p = model_param(m, i);
        err = fmax(err, tensor_rel_err(r.gbuf[p->unit] + p->offset, ref.grads[i], p->local_numel));
    }
    CHECK(loss == ref.loss && err == 0,
          "%s: units rebound in every hook (recompute on) give the same loss and grads (err %.1e)",
          what, err);
    model_acts_destroy(a);
    /* releasing the model's own buffers keeps the foreign bindings */
    int kept = 1;
    for (int u = 0; u < U; u++) {
        model_unit_release(m, u);
        kept &= model_unit_params(m, u) == r.poison[u] && model_unit_grads(m, u) == r.gbuf[u];
    }
    CHECK(kept, "%s: model_unit_release frees the own buffers and keeps the bound ones", what);
    for (int u = 0; u < U; u++) { free(r.good[u]); free(r.poison[u]); free(r.gbuf[u]); }
    run_free(&ref);
    model_destroy(m);
}

/* ---------- 6. activation bytes, parameter counts, FLOPs ---------- */

/* An ops table that counts live bytes, to see what model_acts_create allocates. */
static dt_ops counting;
static size_t live_bytes;
#define HDR 64 /* keeps the returned pointer 64-byte aligned like the CPU backend's */

static void *count_alloc(size_t bytes)
{
    char *p = dt_ops_cpu.alloc(bytes + HDR);
    if (!p) return NULL;
    *(size_t *)p = bytes;
    live_bytes += bytes;
    return p + HDR;
}

static void count_free(void *q)
{
    if (!q) return;
    char *p = (char *)q - HDR;
    live_bytes -= *(size_t *)p;
    dt_ops_cpu.free(p);
}

static size_t measured_acts(const job_model *s, int ub, int ue, int tp_rank, int tp, int sp, recompute_kind rc,
                           int B, const model_precision *prec)
{
    model_shard sh = {.tp_rank = tp_rank, .tp_size = tp, .unit_begin = ub, .unit_end = ue, .sp = sp};
    model *m = model_create_prec(s, &sh, &counting, rc, prec);
    size_t before = live_bytes;
    model_acts *a = model_acts_create(m, B);
    size_t got = live_bytes - before;
    model_acts_destroy(a);
    model_destroy(m);
    return got;
}

static void acts_sizes(void)
{
    counting = dt_ops_cpu;
    counting.alloc = count_alloc;
    counting.free = count_free;
    /* each shape with fused attention (the default) and naive; the last also
     * with the head's logits in chunks of 5 of the 24 rows */
    job_model specs[10] = {tiny_gpt_spec(), tiny_vit_spec(), tiny_vit_spec(), tiny_gpt_spec(), tiny_gpt_spec()};
    specs[2].image_size = 12; /* 10 tokens: sequence parallel over 2 */
    specs[3].vocab_size = 33; /* tp 2's ranks hold 16 and 17 vocab rows */
    specs[4].head_chunk_rows = 5;
    for (int k = 5; k < 10; k++) specs[k] = specs[k - 5], specs[k].attention = ATTN_NAIVE;
    int all_equal = 1, cases = 0, bf16_smaller = 1;
    for (int k = 0; k < 10; k++) {
        int L = specs[k].n_layer;
        int shards[5][2] = {{0, L + 2}, {0, 2}, {2, L + 2}, {1, 2}, {L + 1, L + 2}};
        for (int j = 0; j < 5; j++)
            for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_ELEMENTWISE; rc++)
                for (int v = 0; v < 3; v++) { /* tp 1, tp 2, tp 2 + sequence parallel */
                    int tp = v ? 2 : 1, sp = v == 2;
                    if (sp && model_seq_len(&specs[k]) % 2) continue;
                    for (int r = 0; r < tp; r++) {
                        model_shard sh = {.tp_rank = r, .tp_size = tp, .unit_begin = shards[j][0],
                                          .unit_end = shards[j][1], .sp = sp};
                        size_t want = model_acts_bytes(&specs[k], &sh, 3, (recompute_kind)rc);
                        size_t got = measured_acts(&specs[k], shards[j][0], shards[j][1], r, tp, sp,
                                                   (recompute_kind)rc, 3, NULL);
                        all_equal &= want == got && got > 0;
                        model_precision bf = {.bf16 = 1};
                        model_acts_size z = model_acts_sizes(&specs[k], &sh, 3, (recompute_kind)rc, &bf),
                                        z32 = model_acts_sizes(&specs[k], &sh, 3, (recompute_kind)rc, NULL);
                        got = measured_acts(&specs[k], shards[j][0], shards[j][1], r, tp, sp, (recompute_kind)rc,
                                            3, &bf);
                        all_equal &= z.stash + z.work == got && z32.stash + z32.work == want;
                        /* a stash holding block tensors shrinks under bf16 */
                        if (shards[j][1] - shards[j][0] > 1 || shards[j][0] == 1) bf16_smaller &= z.stash < z32.stash;
                        cases += 2;
                    }
                }
    }
    CHECK(all_equal && live_bytes == 0,
          "model_acts_sizes (stash + work) == bytes model_acts_create allocates (%d shard/tp/sp/recompute/"
          "precision/attention cases)", cases);
    CHECK(bf16_smaller, "a bf16 micro-batch stashes fewer bytes than an fp32 one");

    /* recompute drops all but one block's saved tensors: with L = 4 the saving
     * is 3 block sets, with L = 2 one set, and one set is what the block keeps;
     * its attention stat is the probabilities [B, NH, T, T] (naive) or the
     * rows' log-sum-exp [B, NH, T] (fused) */
    for (int naive = 0; naive < 2; naive++) {
        const char *kind = naive ? "naive" : "fused";
        job_model g2 = tiny_gpt_spec(), g4 = tiny_gpt_spec();
        g4.n_layer = 4;
        g2.attention = g4.attention = naive ? ATTN_NAIVE : ATTN_FUSED;
        model_shard w2 = {0, 1, 0, 4, 0, 0, 1, 0, 1}, w4 = {0, 1, 0, 6, 0, 0, 1, 0, 1};
        size_t s2 = model_acts_bytes(&g2, &w2, TB, RECOMPUTE_NONE) - model_acts_bytes(&g2, &w2, TB, RECOMPUTE_BLOCK);
        size_t s4 = model_acts_bytes(&g4, &w4, TB, RECOMPUTE_NONE) - model_acts_bytes(&g4, &w4, TB, RECOMPUTE_BLOCK);
        size_t N = TB * 8, C = 16, F = 64, att = naive ? TB * 2 * 8 * 8 : TB * 2 * 8;
        /* ln1, r2, ln2 [N,C]; qkv [N,3C]; atty [N,C]; 2 means + 2 rstds [N]; att; fc, gelu [N,F] */
        size_t set_floats = 3 * N * C + 3 * N * C + N * C + 4 * N + att + 2 * N * F;
        CHECK(s4 == 3 * s2 && s2 >= set_floats * 4 && s2 < set_floats * 4 + 12 * 64,
              "%s attention: recompute saves (L-1) block sets: %zu bytes at L=4 = 3 x %zu at L=2 (%zu floats per "
              "set)", kind, s4, s2, set_floats);
        /* naive: selective keeps one [B, heads, seq, seq] of probabilities for
         * all blocks, exactly L-1 of them fewer than none (a multiple of the
         * 64-byte alignment); fused keeps no probabilities: selective = none */
        size_t sel4 = model_acts_bytes(&g4, &w4, TB, RECOMPUTE_NONE) -
                      model_acts_bytes(&g4, &w4, TB, RECOMPUTE_SELECTIVE);
        size_t sel2 = model_acts_bytes(&g2, &w2, TB, RECOMPUTE_NONE) -
                      model_acts_bytes(&g2, &w2, TB, RECOMPUTE_SELECTIVE);
        if (naive)
            CHECK(sel4 == 3 * att * 4 && sel2 == att * 4 && sel4 < s4,
                  "naive attention: selective recompute saves (L-1) attention probabilities: %zu bytes at L=4, %zu "
                  "at L=2 (%zu floats each)", sel4, sel2, att);
        else
            CHECK(sel4 == 0 && sel2 == 0, "fused attention: selective recompute keeps what none keeps (%zu, %zu "
                  "bytes less at L=4, 2)", sel4, sel2);
    }
    /* fused against naive on a GPT of 64 tokens, whole model (L blocks): each
     * block keeps lse [B, NH, T] instead of [B, NH, T, T], and the working set
     * holds k, v and their gradient [N, 4 C_l] instead of a [B, NH, T, T]
     * backward scratch (every size here a whole number of cache lines) */
    for (int v = 0; v < 3; v++) { /* tp 1, tp 2, tp 2 + sp */
        job_model lf = tiny_gpt_spec();
        lf.seq_len = 64;
        job_model ln = lf;
        ln.attention = ATTN_NAIVE;
        int tp = v ? 2 : 1;
        model_shard wh = {.tp_rank = tp - 1, .tp_size = tp, .unit_begin = 0, .unit_end = lf.n_layer + 2, .sp = v == 2};
        for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_ELEMENTWISE; rc++) {
            long long Bn = TB, NHl = 2 / tp, T = 64, Cl = 16 / tp, L = lf.n_layer;
            long long tt = Bn * NHl * T * T, lse = Bn * NHl * T, kv = Bn * T * 4 * Cl;
            long long kept = rc == RECOMPUTE_BLOCK ? 1 : L; /* sets holding a stat (block: the working one) */
            long long want = rc == RECOMPUTE_SELECTIVE ? tt - L * lse + tt - kv /* naive: one shared [T, T] */
                                                       : kept * (tt - lse) + tt - kv;
            long long got = (long long)model_acts_bytes(&ln, &wh, TB, (recompute_kind)rc) -
                            (long long)model_acts_bytes(&lf, &wh, TB, (recompute_kind)rc);
            CHECK(got == want * 4, "seq 64, tp %d%s, recompute %s: naive - fused attention = %lld bytes (want %lld: "
                  "%s + a [T, T] backward scratch - the [N, 4 C_l] kv scratch)", tp, v == 2 ? " + sp" : "",
                  job_recompute_name((recompute_kind)rc), got, want * 4,
                  rc == RECOMPUTE_SELECTIVE ? "naive's one shared [T, T] - fused's L lse"
                  : rc == RECOMPUTE_BLOCK   ? "the working set's [T, T] - its lse"
                                            : "L x ([T, T] - lse)");
        }
    }
    job_model g2 = tiny_gpt_spec();
    size_t N = TB * 8, C = 16;
    size_t s2 = model_acts_bytes(&g2, &(model_shard){0, 1, 0, 4, 0, 0, 1, 0, 1}, TB, RECOMPUTE_NONE) -
                model_acts_bytes(&g2, &(model_shard){0, 1, 0, 4, 0, 0, 1, 0, 1}, TB, RECOMPUTE_BLOCK);
    /* one more block held = one more saved set + one more residual-stream buffer */
    model_shard b1 = {0, 1, 1, 2, 0, 0, 1, 0, 1}, b2 = {0, 1, 1, 3, 0, 0, 1, 0, 1};
    size_t d = model_acts_bytes(&g2, &b2, TB, RECOMPUTE_NONE) - model_acts_bytes(&g2, &b1, TB, RECOMPUTE_NONE);
    CHECK(d == s2 + N * C * 4, "a stage with one more block needs %zu more bytes (a set + a stream)", d);
    model_shard tp1 = {0, 1, 0, 4, 0, 0, 1, 0, 1}, tp2 = {0, 2, 0, 4, 0, 0, 1, 0, 1};
    CHECK(model_acts_bytes(&g2, &tp2, TB, RECOMPUTE_NONE) < model_acts_bytes(&g2, &tp1, TB, RECOMPUTE_NONE),
          "a tp=2 shard keeps fewer activation bytes than tp=1");
    /* sequence parallelism halves each block's ln1, r2, ln2 (and their means and
     * rstds) and the stream buffers, and adds one [N,C] scratch and 4 x C floats */
    model_shard b1sp = {.tp_rank = 1, .tp_size = 2, .unit_begin = 1, .unit_end = 2, .sp = 1};
    model_shard b1tp = b1sp;
    b1tp.sp = 0;
    size_t N4 = 4 * 8, Nl = N4 / 2; /* 4 samples: every [Nl] buffer a whole number of cache lines */
    size_t saved = (3 * (N4 - Nl) * C + 4 * (N4 - Nl)) + 4 * (N4 - Nl) * C; /* set; stream x 2, dres, doutput */
    size_t added = N4 * C + 4 * C;
    size_t tpb = model_acts_bytes(&g2, &b1tp, 4, RECOMPUTE_NONE), spb = model_acts_bytes(&g2, &b1sp, 4, RECOMPUTE_NONE);
    CHECK(tpb - spb == (saved - added) * 4, "sequence parallel: a one-block stage keeps %zu bytes less than "
          "tp=2 alone (%zu floats saved, %zu added)", tpb - spb, saved, added);
}

static void preset_counts(void)
{
    job_model g;
    memset(&g, 0, sizeof g);
    g.kind = MODEL_GPT;
    g.n_layer = 12; g.n_head = 12; g.d_model = 768; g.d_ff = 3072; g.vocab_size = 50257; g.seq_len = 1024;
    size_t total = 0;
    for (int u = 0; u < model_n_units(&g); u++) total += model_unit_numel(&g, u, 0, 1);
    param_spec wte;
    model_unit_param_spec(&g, g.n_layer + 1, 2, 0, 1, &wte);
    CHECK(wte.tied && total - wte.local_numel == 124439808,
          "gpt2-124m: %zu params with the tied head counted once (124,439,808)", total - wte.local_numel);
    /* tp shards add up: sharded tensors split, replicated ones repeat */
    size_t t0 = 0, t1 = 0;
    for (int u = 0; u < model_n_units(&g); u++) {
        t0 += model_unit_numel(&g, u, 0, 4);
        t1 += model_unit_numel(&g, u, 3, 4);
    }
    param_spec q0, q3;
    model_unit_param_spec(&g, 1, 2, 0, 4, &q0);
    model_unit_param_spec(&g, 1, 2, 3, 4, &q3);
    CHECK(q0.local_shape[0] == 576 && q3.local_numel == 576 * 768 && t0 != t1 &&
              param_global_index(&q3, 3, 4, 0) == (size_t)576 * 768 &&
              param_global_index(&q3, 3, 4, 192 * 768) == (size_t)(768 + 576) * 768,
          "qkv under tp=4: each rank holds 3 x 192 rows, q/k/v split separately (vocab 50257 "
          "splits unevenly: rank 0 %zu vs rank 3 %zu params)", t0, t1);

    job_model v;
    memset(&v, 0, sizeof v);
    v.kind = MODEL_VIT;
    v.n_layer = 12; v.n_head = 12; v.d_model = 768; v.d_ff = 3072;
    v.image_size = 224; v.patch_size = 16; v.channels = 3; v.n_classes = 1000;
    total = 0;
    for (int u = 0; u < model_n_units(&v); u++) total += model_unit_numel(&v, u, 0, 1);
    CHECK(total == 86567656 && model_seq_len(&v) == 197,
          "vit-b16 (224px, 1000 classes): %zu params (timm: 86,567,656), seq 197", total);

    /* 6 * matmul weights * T + 12 L T^2 C; recompute adds the blocks' forward to the MLP proj */
    double C = 768, T = 1024, F = 3072, L = 12;
    double matmul_w = L * (4 * C * C + 2 * C * F) + 50257 * C;
    double want = 6 * matmul_w * T + 12 * L * T * T * C;
    double want_rc = want + 2 * T * L * (4 * C * C + C * F) + 4 * L * T * T * C;
    double want_sel = want + 4 * L * T * T * C; /* QK^T and AV of every block again */
    job_model gn = g;
    gn.attention = ATTN_NAIVE;
    CHECK(fabs(model_flops_per_sample(&gn, RECOMPUTE_NONE) - want) < 1 &&
              fabs(model_flops_per_sample(&gn, RECOMPUTE_BLOCK) - want_rc) < 1 &&
              fabs(model_flops_per_sample(&gn, RECOMPUTE_SELECTIVE) - want_sel) < 1,
          "gpt2-124m, naive attention: %.4g FLOPs per sequence (%.4g with block recompute, %.4g with selective)",
          want, want_rc, want_sel);
    /* fused attention keeps no probabilities: selective recomputes nothing */
    CHECK(fabs(model_flops_per_sample(&g, RECOMPUTE_NONE) - want) < 1 &&
              fabs(model_flops_per_sample(&g, RECOMPUTE_BLOCK) - want_rc) < 1 &&
              fabs(model_flops_per_sample(&g, RECOMPUTE_SELECTIVE) - want) < 1,
          "gpt2-124m, fused attention: %.4g FLOPs per sequence (%.4g with block recompute, the same with selective)",
          want, want_rc);
}

/* Llama: parameter counts of published models, names and shapes, the tp
 * split of q and kv heads (replicated above n_kv_head), and its FLOPs (GQA's
 * smaller k and v, SwiGLU's three matrices, the untied head). */
static void llama_specs(void)
{
    job_model l;
    memset(&l, 0, sizeof l);
    l.kind = MODEL_LLAMA;
    l.n_layer = 32; l.n_head = 32; l.n_kv_head = 8; l.d_model = 4096; l.d_ff = 14336;
    l.vocab_size = 128256; l.seq_len = 8192; l.rope_theta = 500000;
    size_t total = 0;
    for (int u = 0; u < model_n_units(&l); u++) total += model_unit_numel(&l, u, 0, 1);
    CHECK(total == 8030261248ull && model_unit_param_count(&l, 0) == 1 && model_unit_param_count(&l, 1) == 9 &&
              model_unit_param_count(&l, 33) == 2,
          "llama3-8b: %zu parameters (Meta-Llama-3-8B: 8,030,261,248): wte; 9 tensors a block; norm, lm_head", total);
    static const char *const names[9] = {"h.4.attn_norm.w", "h.4.attn.q.w", "h.4.attn.k.w", "h.4.attn.v.w",
                                         "h.4.attn.o.w", "h.4.mlp_norm.w", "h.4.mlp.gate.w", "h.4.mlp.up.w",
                                         "h.4.mlp.down.w"};
    static const int rows[9] = {4096, 4096, 1024, 1024, 4096, 4096, 14336, 14336, 4096};
    static const int cols[9] = {1, 4096, 4096, 4096, 4096, 1, 4096, 4096, 14336};
    int shapes = 1;
    size_t off = 0;
    for (int i = 0; i < 9; i++) {
        param_spec p;
        model_unit_param_spec(&l, 5, i, 0, 1, &p);
        shapes &= !strcmp(p.name, names[i]) && p.shape[0] == rows[i] && p.shape[1] == cols[i] && p.offset == off &&
                  p.decay == (cols[i] > 1) && (p.init == INIT_ONES) == (cols[i] == 1);
        off += p.local_numel;
    }
    param_spec e, n, h;
    model_unit_param_spec(&l, 0, 0, 0, 1, &e);
    model_unit_param_spec(&l, 33, 0, 0, 1, &n);
    model_unit_param_spec(&l, 33, 1, 0, 1, &h);
    CHECK(shapes && !strcmp(e.name, "wte") && !strcmp(n.name, "norm.w") && !strcmp(h.name, "lm_head.w") && !h.tied &&
              h.split == SPLIT_ROWS && h.shape[0] == 128256,
          "llama3-8b names, shapes, packing (q, k, v then gate, up adjacent) and an untied, vocab-split head");

    /* tp 4 over 8 kv heads: each rank 8 q heads, 2 kv heads */
    param_spec k2;
    model_unit_param_spec(&l, 1, LLAMA_K_TEST, 2, 4, &k2);
    CHECK(k2.local_shape[0] == 256 && k2.tp_replicas == 1 && param_global_index(&k2, 2, 4, 0) == 512 * 4096u &&
              !param_tp_duplicate(&k2, 2),
          "tp 4 splits 8 kv heads: rank 2 holds k rows 512..767");
    /* tp 16 over 8 kv heads: ranks 2k and 2k+1 hold kv head k */
    param_spec kr, vr, qr;
    model_unit_param_spec(&l, 1, LLAMA_K_TEST, 11, 16, &kr);
    model_unit_param_spec(&l, 1, LLAMA_K_TEST + 1, 10, 16, &vr);
    model_unit_param_spec(&l, 1, LLAMA_K_TEST - 1, 11, 16, &qr);
    int part, parts;
    param_tp_part(&kr, 11, 16, &part, &parts);
    CHECK(kr.local_shape[0] == 128 && kr.tp_replicas == 2 && part == 5 && parts == 8 &&
              param_global_index(&kr, 11, 16, 0) == 5 * 128 * 4096u &&
              param_global_index(&vr, 10, 16, 4096) == (5 * 128 + 1) * 4096u && param_tp_duplicate(&kr, 11) &&
              !param_tp_duplicate(&vr, 10) && qr.local_shape[0] == 256 && qr.tp_replicas == 1,
          "tp 16 over 8 kv heads: ranks 10 and 11 both hold kv head 5 (rank 10 counts it), q split 16 ways");

    /* tied: SmolLM-135M */
    job_model sm = l;
    sm.n_layer = 30; sm.n_head = 9; sm.n_kv_head = 3; sm.d_model = 576; sm.d_ff = 1536; sm.vocab_size = 49152;
    sm.seq_len = 2048; sm.tie_embeddings = 1;
    total = 0;
    for (int u = 0; u < model_n_units(&sm); u++) total += model_unit_numel(&sm, u, 0, 1);
    param_spec t;
    model_unit_param_spec(&sm, 31, 1, 0, 1, &t);
    CHECK(t.tied && !strcmp(t.name, "wte") && total - t.local_numel == 134515008,
          "smollm-135m: %zu parameters with the tied head counted once (134,515,008)", total - t.local_numel);

    /* 6 x matmul weights x T + 12 L T^2 C; GQA: k, v are C x Ckv */
    double C = 4096, T = 8192, F = 14336, L = 32, Ckv = 1024, V = 128256;
    double blk = 2 * C * C + 2 * C * Ckv + 3 * C * F;
    double want = 6 * (L * blk + V * C) * T + 12 * L * T * T * C;
    double want_rc = want + 2 * T * L * (2 * C * C + 2 * C * Ckv + 2 * C * F) + 4 * L * T * T * C;
    CHECK(fabs(model_flops_per_sample(&l, RECOMPUTE_NONE) / want - 1) < 1e-12 &&
              fabs(model_flops_per_sample(&l, RECOMPUTE_BLOCK) / want_rc - 1) < 1e-12 &&
              fabs(model_exec_flops_per_sample(&l, RECOMPUTE_NONE) - want - 2 * V * C * T) < 1e3,
          "llama3-8b: %.5g FLOPs a sequence of 8192 (%.5g with block recompute)", want, want_rc);
}

/* ---------- training sanity ---------- */

static void train_sanity(const job_model *s, const char *what)
{
    model *m = make_model(s, 0, 1, 0, s->n_layer + 2, RECOMPUTE_NONE);
    model_init_params(m, 42);
    model_acts *a = model_acts_create(m, TB);
    test_batch tb;
    make_batch(&tb, s, 1);
    int U = model_n_units(s);
    float *mom[8], *var[8];
    for (int u = 0; u < U; u++) {
        mom[u] = calloc(model_unit_local_numel(m, u), sizeof(float));
        var[u] = calloc(model_unit_local_numel(m, u), sizeof(float));
    }
    float scale = 1.0f / (job_model_is_lm(s) ? TB * s->seq_len : TB);
    double first = 0, last = 0;
    int correct = 0;
    for (int step = 1; step <= 50; step++) {
        model_zero_grads(m);
        double l = model_forward(m, a, &tb.mb, &correct) * scale;
        model_backward(m, a, &tb.mb, scale);
        for (int u = 0; u < U; u++)
            ops->adamw(model_unit_params(m, u), model_unit_grads(m, u), mom[u], var[u],
                       model_unit_local_numel(m, u), 1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, step);
        if (step == 1) first = l;
        last = l;
    }
    CHECK(last < 0.5 * first, "%s: 50 AdamW steps on a fixed batch: loss %.3f -> %.3f (> 50%% down)",
          what, first, last);
    if (job_model_tied_head(s)) {
        int e = find_param(m, 0, "wte"), h = find_param(m, s->n_layer + 1, "wte");
        CHECK(!memcmp(model_param_data(m, e), model_param_data(m, h), model_param(m, e)->local_numel * 4),
              "%s: the two wte copies are still identical after 50 steps", what);
    } else if (s->kind == MODEL_VIT) {
        CHECK(correct == TB, "%s: after fitting, %d of %d images counted correct", what, correct, TB);
    }
    for (int u = 0; u < U; u++) { free(mom[u]); free(var[u]); }
    model_acts_destroy(a);
    model_destroy(m);
}

/* A batch smaller than the activations' capacity (an evaluation's last one). */
static void smaller_batch(const job_model *s, const char *what)
{
    test_batch tb;
    make_batch(&tb, s, 8);
    model *m = make_model(s, 0, 1, 0, s->n_layer + 2, RECOMPUTE_NONE);
    test_init(m, 11);
    model_acts *exact = model_acts_create(m, TB), *big = model_acts_create(m, TB + 3);
    double l1 = model_forward(m, exact, &tb.mb, NULL);
    double l2 = model_forward(m, big, &tb.mb, NULL);
    CHECK(l1 == l2 && (float *)model_acts_output(big) == (float *)model_acts_input(big) + model_acts_io_numel(m, TB + 3) * 2,
          "%s: a batch of %d in activations sized for %d gives the same loss (%.6f)", what, TB, TB + 3, l2);
    model_acts_destroy(exact);
    model_acts_destroy(big);
    model_destroy(m);
}

/* The Llama (tiny_llama_spec: GQA 4 over 2): finite differences (RoPE,
 * RMSNorm, SwiGLU, GQA, the untied head), its layouts against one process
 * (tp splitting kv heads, tp replicating them: n_kv_head 1 under tp 2, with
 * and without SP; pipeline stages, recompute, bf16, split backward), tied and
 * multi-query variants, and training. */
static void llama_layouts(void)
{
    job_model l = tiny_llama_spec(), ln = l, mq = l, tied = l, mha = l;
    ln.attention = ATTN_NAIVE;
    mq.n_kv_head = 1;
    tied.tie_embeddings = 1;
    mha.n_kv_head = 4;
    grad_check(&l, "llama");
    grad_check(&ln, "llama, naive attention");
    grad_check(&mq, "llama, multi-query");
    grad_check(&tied, "llama, tied head");
    fused_vs_naive(&l, "llama");
    init_layout(&l, "llama");
    init_layout(&mq, "llama, multi-query");
    tp_equivalence(&l, "llama tp 2 over 2 kv heads");
    tp_equivalence(&mq, "llama tp 2 over 1 kv head (replicated)");
    tp_equivalence(&mha, "llama tp 2, 4 kv heads");
    tp_equivalence(&tied, "llama tied");
    tp_equivalence_with(&l, TB, 1, RECOMPUTE_NONE, "llama sp");
    tp_equivalence_with(&mq, 1, 1, RECOMPUTE_BLOCK, "llama multi-query sp, B=1, recompute");
    tp_equivalence_with(&ln, TB, 1, RECOMPUTE_SELECTIVE, "llama sp, naive attention, selective recompute");
    int two[3] = {0, 2, 4}, three[4] = {0, 1, 3, 4};
    pipeline_split(&l, two, 2, "llama [0,2)+[2,4)");
    pipeline_split(&tied, three, 3, "llama tied [0,1)+[1,3)+[3,4)");
    recompute_same(&l, "llama");
    recompute_same(&ln, "llama, naive attention");
    bf16_acts(&l, "llama");
    bf16_acts(&ln, "llama, naive attention");
    hooks_and_rebind(&l, "llama");
    hooks_and_rebind(&tied, "llama tied");
    split_backward_all(&l, "llama");
    smaller_batch(&l, "llama");
    train_sanity(&l, "llama");
    train_sanity(&tied, "llama tied");
}

/* ---------- packed samples: the document mask ---------- */

/* Sum of the losses (and the gradients, into r) of B rows with per-token
 * positions and segments, on model m (job_model.packed). */
static void run_packed(model *m, int B, const int *tok, const int *tgt, const int *pos, const int *seg,
                       run_result *r)
{
    model_batch mb = {.B = B, .tokens = tok, .targets = tgt, .positions = pos, .segments = seg};
    model_acts *a = model_acts_create(m, B);
    model_zero_grads(m);
    r->loss = model_forward(m, a, &mb, NULL);
    model_backward(m, a, &mb, 1.0f);
    r->n = model_param_count(m);
    r->grads = calloc((size_t)r->n, sizeof(float *));
    r->numel = calloc((size_t)r->n, sizeof(size_t));
    for (int i = 0; i < r->n; i++) {
        size_t n = r->numel[i] = model_param(m, i)->local_numel;
        r->grads[i] = malloc(n * sizeof(float));
        memcpy(r->grads[i], model_param_grad(m, i), n * sizeof(float));
    }
    model_acts_destroy(a);
}

static double grads_rel_l2(const run_result *a, const run_result *b)
{
    double d2 = 0, n2 = 0;
    for (int i = 0; i < b->n; i++)
        for (size_t j = 0; j < b->numel[i]; j++) {
            double d = (double)a->grads[i][j] - b->grads[i][j];
            d2 += d * d, n2 += (double)b->grads[i][j] * b->grads[i][j];
        }
    return sqrt(d2 / n2);
}

/* One row of seq_len 8 packing samples of 3, 1 and 4 tokens (data.kind sft:
 * targets within a sample only, positions restarting, one segment each)
 * gives the loss and the gradients of the three samples run alone, each in
 * a row of its own at positions 0.. (the rest of that row ignored): the
 * attention sees no other sample and the positions (wpe rows, RoPE angles)
 * are each sample's own. The same row as one sample gives another loss. */
static void packed_alone(const job_model *s, const char *what)
{
    enum { PT = 8, NS = 3 };
    static const int lens[NS] = {3, 1, 4};
    int tok[PT], tgt[PT], pos[PT], seg[PT], one_pos[PT], one_seg[PT];
    int atok[NS * PT], atgt[NS * PT], apos[NS * PT], aseg[NS * PT];
    uint64_t k = rng_key(17, "packed-samples");
    for (int i = 0, t = 0; i < NS; i++)
        for (int j = 0; j < lens[i]; j++, t++)
            tok[t] = (int)rng_below(k, (uint64_t)t, (uint64_t)s->vocab_size), pos[t] = j, seg[t] = i;
    for (int t = 0; t < PT; t++) {
        tgt[t] = t + 1 < PT && seg[t + 1] == seg[t] ? tok[t + 1] : -1;
        one_pos[t] = t, one_seg[t] = 0;
    }
    for (int i = 0, t0 = 0; i < NS; t0 += lens[i], i++)
        for (int j = 0; j < PT; j++) {
            int in = j < lens[i];
            atok[i * PT + j] = in ? tok[t0 + j] : 0;
            atgt[i * PT + j] = in ? tgt[t0 + j] : -1;
            apos[i * PT + j] = j, aseg[i * PT + j] = 0;
        }
    job_model sp = *s;
    sp.packed = 1;
    sp.seq_len = PT;
    if (sp.max_positions) sp.max_positions = PT;
    model_shard sh = {.tp_rank = 0, .tp_size = 1, .unit_begin = 0, .unit_end = sp.n_layer + 2};
    model *m = model_create(&sp, &sh, ops, RECOMPUTE_NONE);
    test_init(m, 11);
    run_result packed, alone, one;
    run_packed(m, 1, tok, tgt, pos, seg, &packed);
    run_packed(m, NS, atok, atgt, apos, aseg, &alone);
    run_packed(m, 1, tok, tgt, one_pos, one_seg, &one);
    double lerr = fabs(packed.loss - alone.loss) / fabs(alone.loss), gerr = grads_rel_l2(&packed, &alone);
    CHECK(lerr <= 1e-6 && gerr <= 1e-5,
          "%s: packed samples (3 + 1 + 4 tokens in a row of 8) = each alone: loss %.6f vs %.6f (rel %.1e), "
          "gradients rel L2 %.1e", what, packed.loss, alone.loss, lerr, gerr);
    CHECK(fabs(one.loss - alone.loss) / fabs(alone.loss) > 1e-3,
          "%s: the same row without the document mask differs (loss %.6f): the check can fail", what, one.loss);
    run_free(&packed), run_free(&alone), run_free(&one);
    model_destroy(m);
}

/* ---------- mixture of experts (model.moe) ---------- */

/* One expert, top 1, normalised (its weight is always 1), no balance loss:
 * an MoE block is the dense block whose MLP is that expert (without
 * biases). The dense model's MLP weights copied into the expert (a Llama's
 * gate and up stacked into the expert's gate_up), everything else drawn
 * alike: the same loss, and the same gradients of every shared tensor and of
 * the expert's. */
static void moe_one_expert_is_dense(job_model dense, const char *what)
{
    int L = dense.n_layer, llama = dense.kind == MODEL_LLAMA;
    job_model moe = dense;
    moe.moe = tiny_moe();
    moe.moe.experts = 1, moe.moe.top_k = 1, moe.moe.d_ff_expert = dense.d_ff, moe.moe.aux_loss_coef = 0;
    test_batch tb;
    make_batch(&tb, &dense, 4);
    model *md = make_model(&dense, 0, 1, 0, L + 2, RECOMPUTE_NONE), *mm = make_model(&moe, 0, 1, 0, L + 2, RECOMPUTE_NONE);
    test_init(md, 11);
    test_init(mm, 11);
    for (int i = 0; i < model_param_count(md); i++) { /* the dense MLP biases out: the experts have none */
        const param_spec *p = model_param(md, i);
        if (strstr(p->name, "mlp.fc.b") || strstr(p->name, "mlp.proj.b"))
            memset(model_param_data(md, i), 0, p->local_numel * sizeof(float));
    }
    for (int l = 0; l < L; l++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "h.%d.%s", l, llama ? "mlp.gate.w" : "mlp.fc.w");
        snprintf(b, sizeof b, "h.%d.%s", l, llama ? "moe.experts.gate_up.w" : "moe.experts.fc.w");
        int di = find_param(md, l + 1, a), mi = find_param(mm, l + 1, b);
        size_t n = model_param(md, di)->local_numel;
        memcpy(model_param_data(mm, mi), model_param_data(md, di), n * sizeof(float));
        if (llama) { /* up follows gate in the expert's rows */
            snprintf(a, sizeof a, "h.%d.mlp.up.w", l);
            memcpy((float *)model_param_data(mm, mi) + n, model_param_data(md, find_param(md, l + 1, a)),
                   n * sizeof(float));
        }
        snprintf(a, sizeof a, "h.%d.%s", l, llama ? "mlp.down.w" : "mlp.proj.w");
        snprintf(b, sizeof b, "h.%d.%s", l, llama ? "moe.experts.down.w" : "moe.experts.proj.w");
        memcpy(model_param_data(mm, find_param(mm, l + 1, b)), model_param_data(md, find_param(md, l + 1, a)),
               model_param(md, find_param(md, l + 1, a))->local_numel * sizeof(float));
    }
    run_result rd, rm;
    run_once(md, &tb, 1.0f, &rd);
    run_once(mm, &tb, 1.0f, &rm);
    double err = 0;
    int compared = 0;
    for (int i = 0; i < model_param_count(mm); i++) {
        const param_spec *p = model_param(mm, i);
        if (strstr(p->name, "moe.router")) continue; /* the weight is 1 whatever it scores: no gradient */
        char name[PARAM_NAME_MAX];
        snprintf(name, sizeof name, "%s", p->name);
        char *at = strstr(name, "moe.experts.");
        if (at) { /* its dense twin: fc (a Llama's gate, then up) or proj */
            int l = atoi(name + 2);
            int is_in = strstr(at, "fc.w") || strstr(at, "gate_up.w");
            snprintf(name, sizeof name, "h.%d.%s", l, is_in ? (llama ? "mlp.gate.w" : "mlp.fc.w")
                                                            : (llama ? "mlp.down.w" : "mlp.proj.w"));
        }
        int j = find_param(md, p->unit, name);
        size_t n = model_param(md, j)->local_numel;
        err = fmax(err, tensor_rel_err(rm.grads[i], rd.grads[j], n));
        if (llama && strstr(p->name, "gate_up.w")) {
            snprintf(name, sizeof name, "h.%d.mlp.up.w", atoi(p->name + 2));
            int u = find_param(md, p->unit, name);
            err = fmax(err, tensor_rel_err(rm.grads[i] + n, rd.grads[u], n));
        }
        compared++;
    }
    CHECK(fabs(rm.loss - rd.loss) <= 1e-6 * fabs(rd.loss) && err < 1e-5,
          "%s: one expert, top 1, is the dense block: loss %.6f vs %.6f, %d tensors' gradients within %.1e < 1e-5",
          what, rm.loss, rd.loss, compared, err);
    run_free(&rd);
    run_free(&rm);
    model_destroy(md);
    model_destroy(mm);
}

/* What the statistics say after one forward: the choices per expert sum to
 * N k, the capacity's drops are counted (capacity_factor 0.5: 2 of each
 * sample's 16 choices an expert keeps, so some drop), and a large routing
 * bias on expert 0 sends every token there (it moves the choice, not the
 * weights: the loss changes, the model still computes). The bias step: loads
 * [6, 2, 0, 0] over a mean of 2 move the biases by -r, 0, +r, +r. */
static void moe_stats_and_bias(void)
{
    job_model s = tiny_moe_gpt_spec();
    s.moe.capacity_factor = 0.5;
    int L = s.n_layer, N = TB * s.seq_len, E = s.moe.experts;
    test_batch tb;
    make_batch(&tb, &s, 2);
    model *m = make_model(&s, 0, 1, 0, L + 2, RECOMPUTE_NONE);
    test_init(m, 11);
    model_acts *a = model_acts_create(m, TB);
    double route;
    double l0 = objective(m, a, &tb.mb, &route);
    int sums = 1;
    double dropped = 0;
    for (int b = 0; b < model_moe_count(m); b++) {
        const model_moe_stats *st = model_moe_stats_of(m, b);
        double all = 0;
        for (int e = 0; e < E; e++) all += st->chosen[e];
        sums &= all == N * s.moe.top_k && st->layer == b && st->aux > 0;
        dropped += st->dropped;
    }
    CHECK(model_moe_count(m) == L && sums && dropped > 0,
          "moe stats: %d MoE blocks, each block's choices sum to N k = %d, %.0f dropped by capacity 0.5",
          model_moe_count(m), N * s.moe.top_k, dropped);
    float *bias = calloc((size_t)E, sizeof(float));
    bias[0] = 100.0f;
    model_moe_bias_set(m, 0, bias);
    double l1 = objective(m, a, &tb.mb, &route);
    const model_moe_stats *st0 = model_moe_stats_of(m, 0);
    CHECK(st0->chosen[0] == N && l1 != l0 && isfinite(l1),
          "moe bias: a +100 bias on expert 0 makes every one of the %d tokens choose it (%.0f), loss %.4f -> %.4f", N,
          st0->chosen[0], l0, l1);
    double load[4] = {6, 2, 0, 0};
    memset(bias, 0, (size_t)E * sizeof(float));
    model_moe_bias_set(m, 1, bias);
    model_moe_bias_update(m, 1, load, 0.25);
    model_moe_bias_get(m, 1, bias);
    CHECK(bias[0] == -0.25f && bias[1] == 0.0f && bias[2] == 0.25f && bias[3] == 0.25f,
          "moe bias update: loads 6, 2, 0, 0 move the biases by -0.25, 0, +0.25, +0.25: %g %g %g %g", bias[0], bias[1],
          bias[2], bias[3]);
    free(bias);
    model_acts_destroy(a);
    model_destroy(m);
}

/* The experts' rows follow the routing (moe.c): a forward holds, per MoE
 * block, exactly the rows its experts kept (model_moe_rows_sizes' bytes for
 * them: the rule the dry-run prices with), the observer hears of every byte,
 * the backward lets them all go, and model_moe_rows reports the fewest and
 * most. Capacity 0.5 keeps fewer than N k rows, and a +100 bias on expert 0
 * fewer still (its capacity drops the rest); under block recompute nothing
 * stays held after the forward. */
static long long moe_held_bytes;
static void moe_count_bytes(void *ctx, long long bytes)
{
    (void)ctx;
    moe_held_bytes += bytes;
}

static void moe_rows_follow_routing(recompute_kind rc, const char *what)
{
    job_model s = tiny_moe_gpt_spec();
    s.moe.capacity_factor = 0.5;
    int L = s.n_layer, N = TB * s.seq_len, k = s.moe.top_k, E = s.moe.experts;
    test_batch tb;
    make_batch(&tb, &s, 2);
    model *m = make_model(&s, 0, 1, 0, L + 2, rc);
    test_init(m, 11);
    model_set_mem_observer(m, moe_count_bytes, NULL);
    model_acts *a = model_acts_create(m, TB);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            float *bias = calloc((size_t)E, sizeof(float));
            bias[0] = 100.0f;
            for (int b = 0; b < L; b++) model_moe_bias_set(m, b, bias);
            free(bias);
        }
        moe_held_bytes = 0;
        model_moe_stats_reset(m);
        model_forward(m, a, &tb.mb, NULL);
        long long want = 0;
        int lo = N * k, hi = 0;
        for (int b = 0; b < L; b++) {
            const model_moe_stats *st = model_moe_stats_of(m, b);
            int kept = N * k - (int)st->dropped;
            want += (long long)(model_moe_rows_sizes(&s, model_get_shard(m), TB, RECOMPUTE_NONE, NULL, (size_t)kept)
                                    .stash /
                                (size_t)L);
            if (kept < lo) lo = kept;
            if (kept > hi) hi = kept;
        }
        long long after_fwd = moe_held_bytes;
        model_backward(m, a, &tb.mb, 1.0f);
        int fewest, most;
        model_moe_rows(m, &fewest, &most);
        int ok = after_fwd == (rc == RECOMPUTE_BLOCK ? 0 : want) && moe_held_bytes == 0 && hi < N * k &&
                 most >= hi && fewest <= lo && (pass == 1 || (fewest == lo && most == hi));
        CHECK(ok,
              "%s, %s: the forward holds %lld bytes of experts' rows (%d..%d kept of N k = %d a block: %lld by "
              "model_moe_rows_sizes), %lld after the backward; model_moe_rows %d..%d",
              what, pass ? "every token's first choice expert 0" : "capacity 0.5", after_fwd, lo, hi, N * k, want,
              moe_held_bytes, fewest, most);
    }
    model_acts_destroy(a);
    model_destroy(m);
}

/* Decoding with the KV cache routes each new token as the forward routes it
 * (dropless): the per-token losses of one sample fed a token at a time sum to
 * the forward's loss of that sample. */
static void moe_decode(const job_model *s, const char *what)
{
    test_batch tb;
    make_batch(&tb, s, 6);
    tb.mb.B = 1;
    model *m = make_model(s, 0, 1, 0, s->n_layer + 2, RECOMPUTE_NONE);
    test_init(m, 11);
    model_acts *a = model_acts_create(m, 1);
    double fwd = model_forward(m, a, &tb.mb, NULL), dec = 0;
    model_kv *kv = model_kv_create(m, s->seq_len);
    int V = s->vocab_size;
    float *logits = malloc((size_t)V * sizeof(float));
    for (int t = 0; t < s->seq_len && kv; t++) {
        model_decode_step(m, kv, tb.tokens[t], logits);
        double mx = logits[0], sum = 0;
        for (int v = 1; v < V; v++) mx = fmax(mx, logits[v]);
        for (int v = 0; v < V; v++) sum += exp(logits[v] - mx);
        dec += mx + log(sum) - logits[tb.targets[t]];
    }
    CHECK(kv && fabs(dec - fwd) <= 1e-5 * fabs(fwd), "%s: decoding token by token gives the forward's loss (%.6f vs %.6f)",
          what, dec, fwd);
    free(logits);
    model_kv_destroy(kv);
    model_acts_destroy(a);
    model_destroy(m);
}

/* The MoE blocks of both language models: finite differences through the
 * router (softmax and sigmoid, normalised or not, top 1 and 2), the
 * dispatch, the grouped experts, the combine, the shared experts, the
 * capacity's drops and the balance loss; dense and MoE blocks mixed
 * (first_dense, every); pipeline stages, recompute, rebinding, bf16,
 * training, decoding. */
static void moe_models(void)
{
    job_model g = tiny_moe_gpt_spec(), l = tiny_moe_llama_spec();
    job_model gs = g, gc = g, g1 = g, ls = l, lm = l;
    gs.moe.router = ROUTER_SIGMOID, gs.moe.shared_experts = 1, gs.moe.first_dense = 1; /* DeepSeek-V3's */
    gc.moe.capacity_factor = 0.75; /* some choices dropped */
    g1.moe.top_k = 1, g1.moe.norm_top_k = 0; /* Switch: the weight is the score */
    ls.moe.router = ROUTER_SIGMOID, ls.moe.shared_experts = 2, ls.moe.norm_top_k = 0;
    lm.moe.every = 2; /* block 0 MoE, block 1 dense */
    grad_check(&g, "moe gpt (softmax top 2)");
    grad_check(&gs, "moe gpt (sigmoid, shared expert, first block dense)");
    grad_check(&gc, "moe gpt (capacity 0.75: drops)");
    grad_check(&g1, "moe gpt (top 1, unnormalised)");
    grad_check(&l, "moe llama (softmax top 2)");
    grad_check(&ls, "moe llama (sigmoid unnormalised, 2 shared experts)");
    grad_check(&lm, "moe llama (every other block: the second dense)");
    moe_one_expert_is_dense(tiny_gpt_spec(), "moe gpt");
    moe_one_expert_is_dense(tiny_llama_spec(), "moe llama");
    moe_stats_and_bias();
    moe_rows_follow_routing(RECOMPUTE_NONE, "moe rows");
    moe_rows_follow_routing(RECOMPUTE_BLOCK, "moe rows, block recompute");
    init_layout(&g, "moe gpt");
    int two[3] = {0, 2, 4};
    pipeline_split(&g, two, 2, "moe gpt [0,2)+[2,4)");
    pipeline_split(&gs, two, 2, "moe gpt sigmoid shared [0,2)+[2,4)");
    pipeline_split(&l, two, 2, "moe llama [0,2)+[2,4)");
    recompute_same(&g, "moe gpt");
    recompute_same(&gc, "moe gpt, capacity");
    recompute_same(&ls, "moe llama shared");
    bf16_acts(&g, "moe gpt");
    bf16_acts(&l, "moe llama");
    hooks_and_rebind(&g, "moe gpt");
    smaller_batch(&g, "moe gpt");
    smaller_batch(&lm, "moe llama, a dense block");
    train_sanity(&g, "moe gpt");
    train_sanity(&ls, "moe llama");
    moe_decode(&g, "moe gpt");
    moe_decode(&ls, "moe llama shared");
}

int main(void)
{
    dt_ops_set_threads(1);
    job_model g = tiny_gpt_spec(), v = tiny_vit_spec();
    grad_check(&g, "gpt");
    grad_check(&v, "vit");
    job_model gn = g, vn = v; /* model.attention naive: the materialised softmax */
    gn.attention = vn.attention = ATTN_NAIVE;
    grad_check(&gn, "gpt, naive attention");
    grad_check(&vn, "vit, naive attention");
    fused_vs_naive(&g, "gpt");
    fused_vs_naive(&v, "vit");
    /* Hugging Face ViT's function (model.activation gelu, model.norm_eps 1e-12) */
    job_model vh = tiny_vit_spec();
    vh.activation = ACT_GELU;
    vh.norm_eps = 1e-12;
    grad_check(&vh, "vit, exact gelu, eps 1e-12");
    tp_equivalence(&vh, "vit, exact gelu, eps 1e-12");
    init_layout(&g, "gpt");
    init_layout(&v, "vit");
    tp_equivalence(&g, "gpt");
    tp_equivalence(&v, "vit");
    job_model g33 = tiny_gpt_spec();
    g33.vocab_size = 33; /* vocab rows split unevenly: 16 + 17 */
    tp_equivalence(&g33, "gpt V=33");
    init_layout(&g33, "gpt V=33");
    vocab_split();
    /* sequence parallelism: seq 8 and (ViT, 12x12 images) 9 patches + 1 split in
     * two; one sample splits mid-sample, the class token on rank 0 only */
    job_model v10 = tiny_vit_spec();
    v10.image_size = 12;
    tp_equivalence_with(&g, TB, 1, RECOMPUTE_NONE, "gpt sp");
    tp_equivalence_with(&g33, 1, 1, RECOMPUTE_BLOCK, "gpt V=33 sp, B=1, recompute");
    tp_equivalence_with(&v10, TB, 1, RECOMPUTE_BLOCK, "vit sp, recompute");
    tp_equivalence_with(&g, TB, 1, RECOMPUTE_SELECTIVE, "gpt sp, selective recompute");
    tp_equivalence_with(&v10, TB, 0, RECOMPUTE_SELECTIVE, "vit tp, selective recompute");
    tp_equivalence_with(&v10, 1, 1, RECOMPUTE_NONE, "vit sp, B=1");
    int two[3] = {0, 2, 4}, three[4] = {0, 1, 3, 4};
    pipeline_split(&g, two, 2, "gpt [0,2)+[2,4)");
    pipeline_split(&g, three, 3, "gpt [0,1)+[1,3)+[3,4)");
    pipeline_split(&v, two, 2, "vit [0,2)+[2,4)");
    pipeline_split(&v, three, 3, "vit [0,1)+[1,3)+[3,4)");
    recompute_same(&g, "gpt");
    recompute_same(&v, "vit");
    recompute_same(&gn, "gpt, naive attention");
    recompute_same(&vn, "vit, naive attention");
    tp_equivalence_with(&gn, TB, 1, RECOMPUTE_SELECTIVE, "gpt sp, naive attention, selective recompute");
    bf16_acts(&g, "gpt");
    bf16_acts(&v, "vit");
    bf16_acts(&gn, "gpt, naive attention");
    bf16_acts(&vn, "vit, naive attention");
    hooks_and_rebind(&g, "gpt");
    hooks_and_rebind(&v, "vit");
    split_backward_all(&g, "gpt");
    split_backward_all(&v, "vit");
    chunked_head(0, TB, "default rows");
    chunked_head(5, TB, "5 rows");
    chunked_head(16, 3, "16 rows, 3 samples");
    chunked_head(1, 1, "1 row");
    chunked_head_tp();
    head_chunk_bytes();
    acts_sizes();
    preset_counts();
    llama_specs();
    smaller_batch(&g, "gpt");
    smaller_batch(&v, "vit");
    train_sanity(&g, "gpt");
    train_sanity(&v, "vit");
    llama_layouts();
    job_model l = tiny_llama_spec();
    packed_alone(&g, "gpt");
    packed_alone(&l, "llama");
    moe_models();
    CHECK_DONE();
}
