/* test_optim.c — bf16 mixed precision's weights and gradients (model.h,
 * optim.h): the optimizer's fp32 master starts from the fp32 model's exact
 * initial values and the bf16 parameters are their rounding; a mixed step is
 * AdamW on the master from the widened, scaled gradients, then the parameters
 * rounded to nearest even — bitwise what the fp32 kernels compute — on whole
 * units and on a ZeRO slice, and the fused op that does it
 * (adamw_mixed_multi) is bitwise those kernels one after the other; a bf16 model computes from its widened bf16
 * parameters exactly what an fp32 model holding those values computes, and
 * rounds the gradient where it is stored (bf16 gradients: once per
 * micro-batch, accumulating in bf16; fp32 gradients: not at all), the tied GPT
 * head's wte copy included. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "runtime/model/model.h"
#include "runtime/optim/optim.h"
#include "runtime/rng.h"
#include "test/unit/check.h"
#include "test/unit/tiny_models.h"

static const dt_ops *ops = &dt_ops_cpu;

static job_train train_cfg(void)
{
    job_train t;
    memset(&t, 0, sizeof t);
    t.beta1 = 0.9; t.beta2 = 0.95; t.eps = 1e-8; t.weight_decay = 0.1; t.seed = 11;
    return t;
}

static model *make(const job_model *s, int bf16, int grad_bf16)
{
    model_shard sh = {.tp_rank = 0, .tp_size = 1, .unit_begin = 0, .unit_end = model_n_units(s)};
    model_precision p = {.bf16 = bf16, .grad_bf16 = grad_bf16};
    model *m = model_create_prec(s, &sh, ops, RECOMPUTE_NONE, &p);
    if (m) model_init_params(m, 11);
    return m;
}

static uint16_t bf16_of(float f)
{
    uint16_t h;
    ops->to_bf16(&h, &f, 1);
    return h;
}

/* 1. the master is the fp32 init; the bf16 parameters its rounding */
static void master_init(const job_model *s, const char *what)
{
    job_train t = train_cfg();
    model *m32 = make(s, 0, 0), *mb = make(s, 1, 1);
    int nu = model_n_units(s);
    size_t *lo = calloc((size_t)nu, sizeof(size_t)), *hi = calloc((size_t)nu, sizeof(size_t));
    for (int u = 0; u < nu; u++) { /* the second half of every unit: ZeRO's slice of dp rank 1 */
        lo[u] = model_unit_local_numel(mb, u) / 2;
        hi[u] = model_unit_local_numel(mb, u);
    }
    optim *whole = optim_create(mb, ops, &t, NULL, NULL), *half = optim_create(mb, ops, &t, lo, hi);
    int master_ok = 1, params_ok = 1, half_ok = 1;
    size_t bytes = 0, numel = 0;
    for (int u = 0; u < nu; u++) {
        size_t n = model_unit_local_numel(mb, u);
        const float *p32 = model_unit_params(m32, u);
        const uint16_t *pb = model_unit_params(mb, u);
        master_ok &= !memcmp(optim_slice_master(whole, u), p32, n * sizeof(float));
        half_ok &= !memcmp(optim_slice_master(half, u), p32 + lo[u], (hi[u] - lo[u]) * sizeof(float));
        for (size_t i = 0; i < n; i++) params_ok &= pb[i] == bf16_of(p32[i]);
        numel += n;
    }
    bytes = optim_master_bytes(whole);
    optim *o32 = optim_create(m32, ops, &t, NULL, NULL);
    CHECK(master_ok && half_ok, "%s: the fp32 master (whole units and a ZeRO half) is the fp32 model's init, bitwise",
          what);
    CHECK(params_ok, "%s: the bf16 parameters are the fp32 init rounded to nearest even", what);
    CHECK(bytes == 4 * numel && optim_state_bytes(whole) == 8 * numel && model_param_elem_bytes(mb) == 2 &&
              model_grad_elem_bytes(mb) == 2 && model_param_elem_bytes(m32) == 4 && optim_master_bytes(o32) == 0,
          "%s: master 4 + m, v 8 bytes per parameter; bf16 params and grads 2 bytes, fp32 4, no master in fp32",
          what);
    optim_destroy(whole), optim_destroy(half), optim_destroy(o32);
    model_destroy(m32), model_destroy(mb);
    free(lo), free(hi);
}

/* 2. a mixed step against the fp32 kernels applied by hand */
static void mixed_step(int grad_bf16, int sliced, float scale, const char *what)
{
    job_model s = tiny_gpt_spec();
    job_train t = train_cfg();
    model *mb = make(&s, 1, grad_bf16);
    int nu = model_n_units(&s);
    size_t *lo = calloc((size_t)nu, sizeof(size_t)), *hi = calloc((size_t)nu, sizeof(size_t));
    for (int u = 0; u < nu; u++) {
        size_t n = model_unit_local_numel(mb, u);
        lo[u] = sliced ? n / 3 : 0; /* cuts tensors in the middle */
        hi[u] = sliced ? 2 * n / 3 : n;
    }
    optim *o = optim_create(mb, ops, &t, lo, hi);
    /* the reference: master, m, v by hand */
    float **ref = calloc((size_t)nu, sizeof(float *)), **rm = calloc((size_t)nu, sizeof(float *)),
          **rv = calloc((size_t)nu, sizeof(float *));
    uint16_t **before = calloc((size_t)nu, sizeof(uint16_t *));
    for (int u = 0; u < nu; u++) {
        size_t n = hi[u] - lo[u], whole = model_unit_local_numel(mb, u);
        ref[u] = malloc(n * sizeof(float));
        rm[u] = calloc(n, sizeof(float));
        rv[u] = calloc(n, sizeof(float));
        memcpy(ref[u], optim_slice_master(o, u), n * sizeof(float));
        before[u] = malloc(whole * 2);
        memcpy(before[u], model_unit_params(mb, u), whole * 2);
    }
    float *g = NULL;
    size_t gcap = 0;
    int master_ok = 1, params_ok = 1, outside_ok = 1;
    /* the scratch widens bf16 gradients for the norm; the step needs none */
    size_t widest = 0;
    for (int u = 0; u < nu; u++)
        if (hi[u] - lo[u] > widest) widest = hi[u] - lo[u];
    size_t want_scratch = grad_bf16 ? (widest < OPTIM_SCRATCH_NUMEL ? widest : OPTIM_SCRATCH_NUMEL) * 4 : 0;
    CHECK(optim_scratch_bytes(o) == want_scratch, "%s: optimizer scratch %zu B (want %zu: %s)", what,
          optim_scratch_bytes(o), want_scratch, grad_bf16 ? "the widest slice's floats" : "none");
    for (int step = 1; step <= 3; step++) {
        for (int u = 0; u < nu; u++) { /* gradients of the model's type, some tiny, some large */
            size_t n = model_unit_local_numel(mb, u);
            if (n > gcap) g = realloc(g, (gcap = n) * sizeof(float));
            uint64_t k = rng_key((uint64_t)step, "mixed-grads");
            for (size_t i = 0; i < n; i++)
                g[i] = rng_normal(k, (uint64_t)u * 100000 + i) * (i % 7 == 0 ? 1e-6f : 0.3f);
            if (grad_bf16) ops->to_bf16(model_unit_grads(mb, u), g, n);
            else memcpy(model_unit_grads(mb, u), g, n * sizeof(float));
            /* the reference widens what is stored, scales, AdamW per tensor (decay or not) */
            if (grad_bf16) ops->from_bf16(g, model_unit_grads(mb, u), n);
            if (scale != 1.0f) ops->scale(g, scale, n);
            for (int pi = 0; pi < model_param_count(mb); pi++) {
                const param_spec *p = model_param(mb, pi);
                if (p->unit != u) continue;
                size_t a = p->offset, b = p->offset + p->local_numel;
                if (a < lo[u]) a = lo[u];
                if (b > hi[u]) b = hi[u];
                if (a >= b) continue;
                size_t off = a - lo[u];
                ops->adamw(ref[u] + off, g + a, rm[u] + off, rv[u] + off, b - a, 1e-3f, (float)t.beta1,
                           (float)t.beta2, (float)t.eps, p->decay ? (float)t.weight_decay : 0.0f, step);
            }
        }
        optim_step(o, 1e-3, step, NULL, NULL, scale);
        for (int u = 0; u < nu; u++) {
            size_t n = hi[u] - lo[u], whole = model_unit_local_numel(mb, u);
            const uint16_t *pb = model_unit_params(mb, u);
            master_ok &= !memcmp(optim_slice_master(o, u), ref[u], n * sizeof(float));
            for (size_t i = 0; i < n; i++) params_ok &= pb[lo[u] + i] == bf16_of(ref[u][i]);
            for (size_t i = 0; i < whole; i++)
                if (i < lo[u] || i >= hi[u]) outside_ok &= pb[i] == before[u][i];
        }
    }
    CHECK(master_ok, "%s: 3 steps: the master is AdamW of the widened gradients x %g, bitwise", what, scale);
    CHECK(params_ok, "%s: the bf16 parameters are the master rounded to nearest even", what);
    CHECK(outside_ok, "%s: elements outside the slice are untouched", what);
    for (int u = 0; u < nu; u++) free(ref[u]), free(rm[u]), free(rv[u]), free(before[u]);
    free(ref), free(rm), free(rv), free(before), free(g), free(lo), free(hi);
    optim_destroy(o);
    model_destroy(mb);
}

/* 2b. the op itself: adamw_mixed_multi over several tensors of odd sizes (one
 * empty, one past the CPU's threading threshold) against the sequence it
 * replaces — the gradient widened (from_bf16) or copied, scaled (scale, only
 * when the scale is not 1), adamw on the master, to_bf16 — bitwise in the
 * master, m, v and the bf16 parameters, over 3 steps. */
static void fused_kernel(int grad_bf16, float grad_scale, int threads)
{
    enum { K = 5 };
    const size_t n[K] = {17, 0, 1, 40009, 4099};
    const float wd[K] = {0.1f, 0.1f, 0.0f, 0.1f, 0.0f};
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    dt_ops_set_threads(threads);
    float *w[K], *m[K], *v[K], *rw[K], *rm[K], *rv[K], *gf[K], *wide[K];
    uint16_t *p[K], *rp[K], *gh[K];
    dt_adamw_mixed_tensor list[K];
    uint64_t key = rng_key(7, "fused-adamw");
    for (int k = 0; k < K; k++) {
        size_t b = (n[k] ? n[k] : 1) * sizeof(float);
        w[k] = malloc(b), m[k] = calloc(1, b), v[k] = calloc(1, b), gf[k] = malloc(b), wide[k] = malloc(b);
        rw[k] = malloc(b), rm[k] = calloc(1, b), rv[k] = calloc(1, b);
        p[k] = malloc(b / 2), rp[k] = malloc(b / 2), gh[k] = malloc(b / 2);
        for (size_t i = 0; i < n[k]; i++) w[k][i] = rng_normal(key, (uint64_t)k << 32 | i) * 0.05f;
        memcpy(rw[k], w[k], n[k] * sizeof(float));
        list[k] = (dt_adamw_mixed_tensor){w[k], grad_bf16 ? (const void *)gh[k] : (const void *)gf[k], m[k],
                                          v[k], p[k], n[k], wd[k]};
    }
    int ok_w = 1, ok_m = 1, ok_v = 1, ok_p = 1;
    for (int t = 1; t <= 3; t++) {
        uint64_t gk = rng_key((uint64_t)t, "fused-adamw-grads");
        for (int k = 0; k < K; k++) {
            for (size_t i = 0; i < n[k]; i++) /* some tiny (the update's eps matters), most unit-sized */
                gf[k][i] = rng_normal(gk, (uint64_t)k << 32 | i) * (i % 5 == 0 ? 1e-7f : 1.0f);
            ops->to_bf16(gh[k], gf[k], n[k]);
            /* the old sequence, op by op (runtime/optim before adamw_mixed_multi) */
            if (grad_bf16) ops->from_bf16(wide[k], gh[k], n[k]);
            else ops->copy(wide[k], gf[k], n[k] * sizeof(float));
            if (grad_scale != 1.0f) ops->scale(wide[k], grad_scale, n[k]);
            ops->adamw(rw[k], wide[k], rm[k], rv[k], n[k], lr, b1, b2, eps, wd[k], t);
            ops->to_bf16(rp[k], rw[k], n[k]);
        }
        ops->adamw_mixed_multi(list, K, grad_bf16, grad_scale, lr, b1, b2, eps, t);
        for (int k = 0; k < K; k++) {
            ok_w &= !memcmp(w[k], rw[k], n[k] * sizeof(float));
            ok_m &= !memcmp(m[k], rm[k], n[k] * sizeof(float));
            ok_v &= !memcmp(v[k], rv[k], n[k] * sizeof(float));
            ok_p &= !memcmp(p[k], rp[k], n[k] * 2);
        }
    }
    size_t moved = 0, total = 0; /* bf16 parameters the 3 steps moved off their start */
    for (int k = 0; k < K; k++)
        for (size_t i = 0; i < n[k]; i++, total++)
            moved += p[k][i] != bf16_of(rng_normal(key, (uint64_t)k << 32 | i) * 0.05f);
    CHECK(ok_w && ok_m && ok_v && ok_p && moved > 0,
          "adamw_mixed_multi, %s gradients x %g, %d thread%s, 5 tensors (n 17, 0, 1, 40009, 4099), 3 steps: "
          "bitwise the op-by-op sequence (master %s, m %s, v %s, bf16 params %s; %zu of %zu params moved)",
          grad_bf16 ? "bf16" : "fp32", grad_scale, threads, threads > 1 ? "s" : "", ok_w ? "=" : "DIFFERS",
          ok_m ? "=" : "DIFFERS", ok_v ? "=" : "DIFFERS", ok_p ? "=" : "DIFFERS", moved, total);
    for (int k = 0; k < K; k++)
        free(w[k]), free(m[k]), free(v[k]), free(rw[k]), free(rm[k]), free(rv[k]), free(gf[k]), free(wide[k]),
            free(p[k]), free(rp[k]), free(gh[k]);
}

/* 2c. The step on device scalars (train.cuda_graphs, optim_step_dev): two
 * copies of one model, the same gradients, one stepped with host scalars
 * (optim_step, the norm by optim_grad_sumsq, the clipping factor by the
 * engine's formula), the other with the scalars in ops memory (the norm by
 * optim_grad_sumsq_dev, the factor by ops->clip_scale, lr and t from a
 * dt_adamw_hyper): the norms, the factors and the parameters (and the fp32
 * master) agree bit for bit over 3 steps, with clipping on and off. The GPT's
 * vocabulary of 1100 x d 64 makes wte a tensor of 70400 elements: a bf16
 * gradient's norm is summed in two chunks (OPTIM_SCRATCH_NUMEL), whose
 * association the device version must keep. */
static void device_scalars(int bf16, int grad_bf16, const char *what)
{
    job_model s = tiny_gpt_spec();
    s.vocab_size = 1100;
    s.d_model = 64;
    s.d_ff = 128;
    job_train t = train_cfg();
    model *mh = make(&s, bf16, grad_bf16), *md = make(&s, bf16, grad_bf16);
    optim *oh = optim_create(mh, ops, &t, NULL, NULL), *od = optim_create(md, ops, &t, NULL, NULL);
    int nu = model_n_units(&s);
    size_t ge = model_grad_elem_bytes(mh), pe = model_param_elem_bytes(mh), widest = 0;
    for (int u = 0; u < nu; u++)
        if (model_unit_local_numel(mh, u) > widest) widest = model_unit_local_numel(mh, u);
    CHECK(widest > OPTIM_SCRATCH_NUMEL, "%s: a unit of %zu elements spans more than one optimizer chunk", what,
          widest);
    float *g = malloc(widest * sizeof(float));
    /* the device scalars: ops memory (host memory on the CPU backend) */
    double *dev = ops->alloc(2 * sizeof(double));
    float *clip = ops->alloc(sizeof(float));
    dt_adamw_hyper *hyper = ops->alloc(sizeof *hyper);
    int norm_ok = 1, scale_ok = 1, params_ok = 1, clipped = 0, unclipped = 0;
    for (int step = 1; step <= 3; step++) {
        for (int u = 0; u < nu; u++) {
            size_t n = model_unit_local_numel(mh, u);
            uint64_t k = rng_key((uint64_t)step, "device-scalar-grads");
            for (size_t i = 0; i < n; i++) g[i] = rng_normal(k, (uint64_t)u * 1000000 + i) * (step == 2 ? 1e-3f : 0.5f);
            if (ge == 2) ops->to_bf16(model_unit_grads(mh, u), g, n);
            else memcpy(model_unit_grads(mh, u), g, n * sizeof(float));
            memcpy(model_unit_grads(md, u), model_unit_grads(mh, u), n * ge);
        }
        /* the engine's host arithmetic: the norm tensor by tensor (tied wte once), the factor */
        double sq = 0;
        ops->zero(dev, 2 * sizeof(double));
        for (int i = 0; i < model_param_count(mh); i++) {
            const param_spec *p = model_param(mh, i);
            if (p->tied) continue;
            size_t off = p->offset * ge;
            sq += optim_grad_sumsq(oh, (const char *)model_unit_grads(mh, p->unit) + off, p->local_numel);
            optim_grad_sumsq_dev(od, (const char *)model_unit_grads(md, p->unit) + off, p->local_numel, &dev[0],
                                 &dev[1]);
        }
        norm_ok &= memcmp(&sq, &dev[0], sizeof sq) == 0;
        double norm = sqrt(sq), max_norm = 1.0;
        float sh = norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
        ops->clip_scale(clip, &dev[0], max_norm);
        scale_ok &= memcmp(&sh, clip, sizeof sh) == 0;
        clipped += sh != 1.0f, unclipped += sh == 1.0f;
        double lr = 1e-3 * step;
        *hyper = optim_hyper(od, lr, step);
        optim_step(oh, lr, step, NULL, NULL, sh);
        CHECK(optim_step_dev(od, hyper, NULL, NULL, clip) == 0, "%s: step %d on device scalars", what, step);
        for (int u = 0; u < nu; u++) {
            size_t n = model_unit_local_numel(mh, u);
            params_ok &= !memcmp(model_unit_params(mh, u), model_unit_params(md, u), n * pe);
            if (bf16) params_ok &= !memcmp(optim_slice_master(oh, u), optim_slice_master(od, u), n * sizeof(float));
        }
    }
    CHECK(norm_ok, "%s: the squared norm summed on device scalars equals the host's bit for bit", what);
    CHECK(scale_ok && clipped && unclipped, "%s: clip_scale gives the engine's factor bit for bit (%d steps clipped, "
          "%d not)", what, clipped, unclipped);
    CHECK(params_ok, "%s: 3 steps of optim_step_dev give optim_step's parameters%s bit for bit", what,
          bf16 ? " and master" : "");
    if (grad_bf16) {
        /* the association, where it shows: each of two chunks sums to 0.625 ulp(1) (squares of 2^-27 and
         * 2^-28); the host adds their sum, 1.25 ulp, to 1 (-> 1 + ulp), adding them one by one would
         * give 1 + 2 ulp */
        size_t n = OPTIM_SCRATCH_NUMEL + 8;
        uint16_t *b16 = calloc(n, sizeof *b16);
        const size_t at[2] = {0, OPTIM_SCRATCH_NUMEL};
        for (int c = 0; c < 2; c++) {
            b16[at[c]] = b16[at[c] + 1] = bf16_of(ldexpf(1.0f, -27));
            b16[at[c] + 2] = b16[at[c] + 3] = bf16_of(ldexpf(1.0f, -28));
        }
        double host = 1.0;
        host += optim_grad_sumsq(oh, b16, n);
        dev[0] = 1.0;
        optim_grad_sumsq_dev(od, b16, n, &dev[0], &dev[1]);
        CHECK(host == 1.0 + ldexp(1.0, -52) && memcmp(&host, &dev[0], sizeof host) == 0,
              "%s: two chunks' sums are added as one, as the host does (1 + %.3g ulp, host 1 + %.3g ulp)", what,
              (dev[0] - 1.0) / ldexp(1.0, -52), (host - 1.0) / ldexp(1.0, -52));
        free(b16);
    }
    ops->free(dev), ops->free(clip), ops->free(hyper);
    free(g);
    optim_destroy(oh), optim_destroy(od);
    model_destroy(mh), model_destroy(md);
}

/* 3. rounding of master -> params: to nearest, ties to even */
static void rounding(void)
{
    job_model s = tiny_gpt_spec();
    job_train t = train_cfg();
    model *mb = make(&s, 1, 1);
    optim *o = optim_create(mb, ops, &t, NULL, NULL);
    float *master = optim_slice_master(o, 1);
    const float v[5] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 1.0f + 0x1p-8f + 0x1p-20f, 0x1p-140f};
    const uint16_t want[5] = {0x3F80, 0x3F82, 0xBF80, 0x3F81, 0x0000};
    memcpy(master, v, sizeof v);
    optim_master_to_params(o, 1, model_unit_params(mb, 1));
    const uint16_t *pb = model_unit_params(mb, 1);
    CHECK(!memcmp(pb, want, sizeof want),
          "a loaded master's rounding: 1+2^-8 -> 1 (tie to even), 1+3*2^-8 -> 1+2^-6, sign kept, above the tie "
          "up, 2^-140 (under bf16's least subnormal 2^-133) -> 0 (got %04x %04x %04x %04x %04x)", pb[0], pb[1],
          pb[2], pb[3], pb[4]);
    optim_destroy(o);
    model_destroy(mb);
}

/* 4. the model: bf16 weights computed from in fp32, gradients rounded where stored */
typedef struct {
    int tokens[16], targets[16], labels[2];
    float images[128];
    model_batch mb;
} batch;

static void make_batch(batch *b, const job_model *s, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    uint64_t k = rng_key(seed, "optim-batch");
    for (int i = 0; i < 16; i++) {
        b->tokens[i] = (int)rng_below(k, (uint64_t)i, (uint64_t)(s->vocab_size > 0 ? s->vocab_size : 1));
        b->targets[i] = (int)rng_below(k, 100 + (uint64_t)i, (uint64_t)(s->vocab_size > 0 ? s->vocab_size : 1));
    }
    for (int i = 0; i < 128; i++) b->images[i] = rng_normal(k, 200 + (uint64_t)i);
    b->labels[0] = 1, b->labels[1] = 2;
    b->mb = (model_batch){.B = 2, .tokens = b->tokens, .targets = b->targets, .images = b->images,
                          .labels = b->labels};
}

/* A bf16 model against references that compute exactly what it does: mz has
 * fp32 gradients zeroed every micro-batch (the micro-batch's own fp32
 * gradient g), mf fp32 gradients that accumulate (Megatron's main_grad), mb
 * bf16 gradients. All three hold the same bf16 weights and round activations
 * at the same points, so their losses are bitwise equal and mb's gradients are
 * g rounded once, then bf16(bf16(g1) + g2). An fp32 model holding the same
 * values differs only by the activations' rounding: close, not equal. */
static void model_mixed(const job_model *s, recompute_kind rc, const char *what)
{
    int nu = model_n_units(s);
    model_shard sh = {.tp_rank = 0, .tp_size = 1, .unit_begin = 0, .unit_end = nu};
    model_precision pb = {.bf16 = 1, .grad_bf16 = 1}, pf = {.bf16 = 1, .grad_bf16 = 0};
    model *m32 = model_create_prec(s, &sh, ops, rc, NULL), *mb = model_create_prec(s, &sh, ops, rc, &pb),
          *mf = model_create_prec(s, &sh, ops, rc, &pf), *mz = model_create_prec(s, &sh, ops, rc, &pf);
    model_init_params(mb, 5);
    model_init_params(mf, 5);
    model_init_params(mz, 5);
    for (int u = 0; u < nu; u++) /* the fp32 model holds the bf16 values */
        ops->from_bf16(model_unit_params(m32, u), model_unit_params(mb, u), model_unit_local_numel(mb, u));
    model_acts *a32 = model_acts_create(m32, 2), *ab = model_acts_create(mb, 2), *af = model_acts_create(mf, 2),
               *az = model_acts_create(mz, 2);
    batch b1, b2;
    make_batch(&b1, s, 1);
    make_batch(&b2, s, 2);
    int loss_ok = 1, g1_ok = 1, g2_ok = 1, f_ok = 1, tied_ok = 1;
    double lerr = 0;
    size_t work = 0;
    for (int u = 0; u < nu; u++)
        if (model_unit_local_numel(mb, u) > work) work = model_unit_local_numel(mb, u);
    float **g1 = calloc((size_t)nu, sizeof(float *)), **gsum = calloc((size_t)nu, sizeof(float *));
    for (int mbi = 0; mbi < 2; mbi++) {
        const model_batch *in = mbi ? &b2.mb : &b1.mb;
        model_zero_grads(mz);
        double l32 = model_forward(m32, a32, in, NULL), lb = model_forward(mb, ab, in, NULL),
               lf = model_forward(mf, af, in, NULL), lz = model_forward(mz, az, in, NULL);
        loss_ok &= lb == lf && lb == lz;
        lerr = fmax(lerr, fabs(lb - l32) / fabs(l32));
        model_backward(mb, ab, in, 0.0625f);
        model_backward(mf, af, in, 0.0625f);
        model_backward(mz, az, in, 0.0625f);
        for (int u = 0; u < nu; u++) {
            size_t n = model_unit_local_numel(mb, u);
            const float *g = model_unit_grads(mz, u), *gf = model_unit_grads(mf, u);
            const uint16_t *gb = model_unit_grads(mb, u);
            if (mbi == 0) {
                g1[u] = malloc(n * sizeof(float));
                gsum[u] = malloc(n * sizeof(float));
                memcpy(g1[u], g, n * sizeof(float));
                for (size_t i = 0; i < n; i++) g1_ok &= gb[i] == bf16_of(g[i]);
                memcpy(gsum[u], g, n * sizeof(float));
            } else {
                /* bf16 accumulation: bf16(bf16(g1) + g2), the sum formed in fp32 */
                for (size_t i = 0; i < n; i++) {
                    float prev;
                    uint16_t h = bf16_of(g1[u][i]);
                    ops->from_bf16(&prev, &h, 1);
                    g2_ok &= gb[i] == bf16_of(prev + g[i]);
                }
                for (size_t i = 0; i < n; i++) gsum[u][i] += g[i];
            }
            /* fp32 gradients: not rounded; after two micro-batches within fp32 summation order */
            for (size_t i = 0; i < n; i++) {
                float want = mbi ? gsum[u][i] : g[i];
                f_ok &= mbi ? fabsf(gf[i] - want) <= 1e-6f * (1.0f + fabsf(want)) : gf[i] == want;
            }
        }
    }
    if (s->kind == MODEL_GPT) { /* the two wte copies' gradients stay equal */
        size_t n = (size_t)s->vocab_size * (size_t)s->d_model;
        const param_spec *p0 = NULL, *ph = NULL;
        int i0 = -1, ih = -1;
        for (int i = 0; i < model_param_count(mb); i++) {
            const param_spec *p = model_param(mb, i);
            if (!strcmp(p->name, "wte")) {
                if (p->tied) ph = p, ih = i;
                else p0 = p, i0 = i;
            }
        }
        tied_ok = p0 && ph && !memcmp(model_param_grad(mb, i0), model_param_grad(mb, ih), n * 2) &&
                  !memcmp(model_param_grad(mf, i0), model_param_grad(mf, ih), n * 4);
        CHECK(tied_ok, "%s: the tied wte copies' bf16 and fp32 gradients are equal after two micro-batches", what);
    }
    CHECK(loss_ok, "%s: bf16 models with bf16 and fp32 gradients give bitwise the same loss", what);
    /* the activations' roundings (2^-9 relative each) move the loss a little */
    CHECK(lerr > 0 && lerr < 1e-2, "%s: the loss is within %.1e of an fp32 model's holding the same weights", what,
          lerr);
    CHECK(g1_ok, "%s: bf16 gradients of one micro-batch are the fp32 gradients rounded once", what);
    CHECK(g2_ok, "%s: the second micro-batch accumulates in bf16: bf16(bf16(g1) + g2)", what);
    CHECK(f_ok, "%s: fp32 gradients (grad_dtype fp32) are not rounded", what);
    CHECK(model_mixed_work_bytes(mb) == 2 * work * 4 && model_mixed_work_bytes(mf) == work * 4 &&
              model_mixed_work_bytes(m32) == 0,
          "%s: fp32 working copies: the largest unit (%zu) widened, + its gradient with bf16 gradients", what, work);
    for (int u = 0; u < nu; u++) free(g1[u]), free(gsum[u]);
    free(g1), free(gsum);
    model_acts_destroy(a32), model_acts_destroy(ab), model_acts_destroy(af), model_acts_destroy(az);
    model_destroy(m32), model_destroy(mb), model_destroy(mf), model_destroy(mz);
}

int main(void)
{
    dt_ops_set_threads(1);
    job_model g = tiny_gpt_spec(), v = tiny_vit_spec();
    master_init(&g, "gpt");
    master_init(&v, "vit");
    mixed_step(1, 0, 0.37f, "bf16 grads, whole units");
    mixed_step(1, 1, 0.37f, "bf16 grads, a ZeRO slice");
    mixed_step(0, 1, 0.37f, "fp32 grads, a ZeRO slice");
    mixed_step(1, 1, 1.0f, "bf16 grads, a ZeRO slice, unscaled");
    mixed_step(0, 0, 1.0f, "fp32 grads, whole units, unscaled");
    for (int threads = 1; threads <= 2; threads++)
        for (int grad_bf16 = 0; grad_bf16 <= 1; grad_bf16++) {
            fused_kernel(grad_bf16, 1.0f, threads);
            fused_kernel(grad_bf16, 0.37f, threads);
        }
    dt_ops_set_threads(1);
    device_scalars(0, 0, "device scalars, fp32");
    device_scalars(1, 0, "device scalars, bf16 with fp32 grads");
    device_scalars(1, 1, "device scalars, bf16 with bf16 grads");
    rounding();
    model_mixed(&g, RECOMPUTE_NONE, "gpt");
    model_mixed(&g, RECOMPUTE_BLOCK, "gpt, block recompute");
    model_mixed(&v, RECOMPUTE_SELECTIVE, "vit, selective recompute");
    CHECK_DONE();
}
