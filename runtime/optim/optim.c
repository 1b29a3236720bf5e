/* optim.c — see optim.h. Weight decay is decoupled (AdamW) and applies only to
 * the elements of parameters whose spec says decay; a slice can cut a parameter,
 * so each step walks the unit's parameters and intersects them with the slice. */
#include "runtime/optim/optim.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>


typedef struct {
    int unit;
    size_t lo, hi;        /* slice of the unit's flat buffer */
    float *m, *v;         /* hi - lo elements each */
    float *master;        /* mixed precision: hi - lo fp32 master weights */
} optim_slice;

struct optim {
    model *mdl;
    const dt_ops *ops;
    job_train t;
    int n;
    optim_slice *s;
    int mixed;            /* bf16 parameters with an fp32 master */
    size_t ge;            /* gradient element bytes */
    float *scratch;       /* bf16 gradients: scratch_numel of them widened, for the norm */
    size_t scratch_numel; /* mixed or offload: the chunk of the norm and of offload's step */
    /* offload: the host's ops, the state's allocator; two chunks of gradients
     * coming down and (bf16) two of parameters going up, so that one crosses
     * while the host steps the other, and (bf16 gradients) a chunk of them
     * widened (host memory; optim_host_scratch_bytes) */
    const dt_ops *host;
    float *hscratch;
    void *gin[2], *pout[2];
    size_t pe;            /* parameter element bytes */
    dt_adamw_tensor *list; /* fp32 on the device: a step's tensors, one adamw_multi */
    dt_adamw_mixed_tensor *mlist; /* mixed on the device: one adamw_mixed_multi */
    int list_cap;
};

/* The state's memory: the device's, or under offload the host memory the
 * device backend copies to fastest (page-locked on cuda). */
static void *state_alloc(const optim *o, size_t bytes)
{
    return o->host ? o->ops->host_alloc(bytes ? bytes : 1) : o->ops->alloc(bytes ? bytes : 1);
}

static void state_free(const optim *o, void *p)
{
    if (!p) return;
    if (o->host) o->ops->host_free(p);
    else o->ops->free(p);
}

static int init_master(optim *o, optim_slice *s)
{
    size_t n = s->hi - s->lo;
    float *host = malloc((n ? n : 1) * sizeof(float));
    if (!host) return -1;
    model_init_unit_slice(o->mdl, s->unit, s->lo, s->hi, o->t.seed, host);
    if (o->host) memcpy(s->master, host, n * sizeof(float));
    else o->ops->from_host(s->master, host, n * sizeof(float));
    free(host);
    return 0;
}

optim *optim_create(model *m, const dt_ops *ops, const job_train *t,
                    const size_t *lo, const size_t *hi)
{
    return optim_create_offload(m, ops, NULL, t, lo, hi);
}

optim *optim_create_offload(model *m, const dt_ops *ops, const dt_ops *host, const job_train *t,
                            const size_t *lo, const size_t *hi)
{
    const model_shard *sh = model_get_shard(m);
    optim *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->mdl = m;
    o->ops = ops;
    o->t = *t;
    o->mixed = model_get_precision(m)->bf16;
    o->ge = model_grad_elem_bytes(m);
    o->pe = model_param_elem_bytes(m);
    o->host = host;
    o->n = sh->unit_end - sh->unit_begin;
    o->s = calloc((size_t)o->n, sizeof *o->s);
    if (!o->s) { free(o); return NULL; }
    size_t widest = 0;
    for (int i = 0; i < o->n; i++) {
        int u = sh->unit_begin + i;
        optim_slice *s = &o->s[i];
        s->unit = u;
        s->lo = lo ? lo[i] : 0;
        s->hi = hi ? hi[i] : model_unit_local_numel(m, u);
        size_t bytes = (s->hi - s->lo) * sizeof(float);
        if (s->hi - s->lo > widest) widest = s->hi - s->lo;
        s->m = state_alloc(o, bytes);
        s->v = state_alloc(o, bytes);
        if (!s->m || !s->v) { optim_destroy(o); return NULL; }
        if ((o->mixed || o->host) && (!(s->master = state_alloc(o, bytes)) || init_master(o, s) != 0)) {
            optim_destroy(o);
            return NULL;
        }
    }
    /* at most one tensor per (slice, parameter) */
    o->list_cap = o->n * model_param_count(m);
    size_t cap = (size_t)(o->list_cap ? o->list_cap : 1);
    if (!(o->list = malloc(cap * sizeof *o->list)) || !(o->mlist = malloc(cap * sizeof *o->mlist))) {
        optim_destroy(o);
        return NULL;
    }
    if (o->mixed || o->host)
        o->scratch_numel = widest < OPTIM_SCRATCH_NUMEL ? (widest ? widest : 1) : OPTIM_SCRATCH_NUMEL;
    /* the device's, for the gradient norm of bf16 gradients (the step reads
     * them where they are: adamw_mixed_multi widens each in a register) */
    if (o->mixed && o->ge == 2 && !(o->scratch = ops->alloc(o->scratch_numel * sizeof(float)))) {
        optim_destroy(o);
        return NULL;
    }
    for (int i = 0; o->host && i < 2; i++) {
        if (!(o->gin[i] = state_alloc(o, o->scratch_numel * o->ge)) ||
            (o->pe == 2 && !(o->pout[i] = state_alloc(o, o->scratch_numel * 2)))) {
            optim_destroy(o);
            return NULL;
        }
    }
    if (o->host && o->ge == 2 && !(o->hscratch = state_alloc(o, o->scratch_numel * sizeof(float)))) {
        optim_destroy(o);
        return NULL;
    }
    return o;
}

void optim_destroy(optim *o)
{
    if (!o) return;
    for (int i = 0; o->s && i < o->n; i++) {
        state_free(o, o->s[i].m);
        state_free(o, o->s[i].v);
        state_free(o, o->s[i].master);
    }
    if (o->scratch) o->ops->free(o->scratch);
    state_free(o, o->hscratch);
    for (int i = 0; i < 2; i++) state_free(o, o->gin[i]), state_free(o, o->pout[i]);
    free(o->list);
    free(o->mlist);
    free(o->s);
    free(o);
}

/* A step's scalars: from the host (optim_step), or where the ops read them
 * at run time (optim_step_dev: dev and scale_dev set). */
typedef struct {
    double lr;
    int t;
    float grad_scale;
    const dt_adamw_hyper *dev;
    const float *scale_dev;
} step_scalars;

/* g *= the gradient scale: the host's when it is not 1, or the device's */
static void scale_grads(optim *o, const step_scalars *sc, float *g, size_t n)
{
    if (sc->scale_dev) o->ops->scale_dev(g, sc->scale_dev, n);
    else if (sc->grad_scale != 1.0f) o->ops->scale(g, sc->grad_scale, n);
}

/* Offload: k parameters (the model's type) from the host's master + at into
 * p + at: rounded to bf16 when they are, then sent to the device, or written
 * in place when the parameters live on the host too (train.offload: params). */
static void put_params(optim *o, void *p, const float *master, size_t at, size_t k)
{
    const dt_ops *h = o->host;
    int on_host = (o->t.offload & OFFLOAD_PARAMS) != 0;
    if (o->pe == 2) {
        uint16_t *dst = (uint16_t *)p + at;
        h->to_bf16(on_host ? dst : o->pout[0], master, k);
        if (!on_host) o->ops->from_host(dst, o->pout[0], k * 2);
    } else if (on_host) {
        memcpy((float *)p + at, master, k * sizeof(float));
    } else {
        o->ops->from_host((float *)p + at, master, k * sizeof(float));
    }
}

/* Offload: the same as the mixed step (adamw_mixed_multi: widen, scale,
 * AdamW, round; or fp32's scale + AdamW) with the state on the host, in
 * separate ops a chunk at a time: chunk c + 1's gradients come down on the
 * copy queue (ops->copy_start) while the host steps chunk c, and chunk c's
 * parameters go up while it steps chunk c + 1. Every copy has finished when
 * this returns. The same arithmetic in the same order as without the queue. */
static void step_offload(optim *o, optim_slice *s, size_t off, size_t n, void *p, const void *g,
                         float grad_scale, double lr, int t, float wd)
{
    const dt_ops *h = o->host, *d = o->ops;
    const size_t S = o->scratch_numel;
    const int params_on_host = (o->t.offload & OFFLOAD_PARAMS) != 0;
    void *down[2] = {NULL, NULL}, *up[2] = {NULL, NULL};
    if (n) down[0] = d->copy_start(o->gin[0], (const char *)g + off * o->ge, (n < S ? n : S) * o->ge);
    for (size_t c = 0, i = 0; c < n; c += S, i ^= 1) {
        size_t k = n - c < S ? n - c : S, at = off + c;
        if (c + S < n) {
            size_t k1 = n - c - S < S ? n - c - S : S;
            down[i ^ 1] = d->copy_start(o->gin[i ^ 1], (const char *)g + (at + S) * o->ge, k1 * o->ge);
        }
        d->copy_finish(down[i]);
        down[i] = NULL;
        float *grad = o->gin[i];
        if (o->ge == 2) h->from_bf16(grad = o->hscratch, o->gin[i], k);
        if (grad_scale != 1.0f) h->scale(grad, grad_scale, k);
        h->adamw(s->master + at, grad, s->m + at, s->v + at, k, (float)lr, (float)o->t.beta1,
                 (float)o->t.beta2, (float)o->t.eps, wd, t);
        if (params_on_host) {
            put_params(o, p, s->master + at, at, k);
            continue;
        }
        d->copy_finish(up[i]); /* pout[i] is free again */
        if (o->pe == 2) {
            h->to_bf16(o->pout[i], s->master + at, k);
            up[i] = d->copy_start((uint16_t *)p + at, o->pout[i], k * 2);
        } else { /* straight from the master: nothing writes it before the next step */
            up[i] = d->copy_start((float *)p + at, s->master + at, k * sizeof(float));
        }
    }
    d->copy_finish(up[0]);
    d->copy_finish(up[1]);
}

static void step(optim *o, const step_scalars *sc, void *const *params, void *const *grads)
{
    double lr = sc->lr;
    int t = sc->t;
    float grad_scale = sc->grad_scale;
    int np = model_param_count(o->mdl);
    size_t pe = model_param_elem_bytes(o->mdl);
    int count = 0; /* o->list's (fp32) or o->mlist's (mixed) tensors, not offloaded */
    for (int i = 0; i < o->n; i++) {
        optim_slice *s = &o->s[i];
        void *p = params ? params[i] : (char *)model_unit_params(o->mdl, s->unit) + s->lo * pe;
        void *g = grads ? grads[i] : (char *)model_unit_grads(o->mdl, s->unit) + s->lo * o->ge;
        if (!o->mixed && !o->host) scale_grads(o, sc, g, s->hi - s->lo);
        for (int k = 0; k < np; k++) {
            const param_spec *ps = model_param(o->mdl, k);
            if (ps->unit != s->unit || ps->frozen) continue; /* train.lora's base: not in the slices */
            size_t a = ps->offset, b = ps->offset + ps->local_numel;
            if (a < s->lo) a = s->lo;
            if (b > s->hi) b = s->hi;
            if (a >= b) continue;
            size_t off = a - s->lo;
            float wd = ps->decay ? (float)o->t.weight_decay : 0.0f;
            if (o->host) {
                step_offload(o, s, off, b - a, p, g, grad_scale, lr, t, wd);
                continue;
            }
            if (o->mixed) {
                o->mlist[count++] = (dt_adamw_mixed_tensor){s->master + off, (const char *)g + off * o->ge,
                                                            s->m + off, s->v + off, (uint16_t *)p + off, b - a, wd};
                continue;
            }
            o->list[count++] = (dt_adamw_tensor){(float *)p + off, (float *)g + off, s->m + off, s->v + off,
                                                 b - a, wd};
        }
    }
    /* on the device: every tensor of the step in one pass (one launch on cuda);
     * mixed: the gradients widened and scaled, the master stepped and the bf16
     * parameters written in that pass; the scalars from the host, or (dev)
     * read by the op where it runs */
    if (o->host) return;
    float b1 = (float)o->t.beta1, b2 = (float)o->t.beta2, eps = (float)o->t.eps;
    if (o->mixed && sc->dev)
        o->ops->adamw_mixed_multi_dev(o->mlist, count, o->ge == 2, sc->scale_dev, sc->dev, b1, b2, eps);
    else if (o->mixed)
        o->ops->adamw_mixed_multi(o->mlist, count, o->ge == 2, grad_scale, (float)lr, b1, b2, eps, t);
    else if (sc->dev)
        o->ops->adamw_multi_dev(o->list, count, sc->dev, b1, b2, eps);
    else
        o->ops->adamw_multi(o->list, count, (float)lr, b1, b2, eps, t);
}

void optim_step(optim *o, double lr, int t, void *const *params, void *const *grads, float grad_scale)
{
    step_scalars sc = {.lr = lr, .t = t, .grad_scale = grad_scale};
    step(o, &sc, params, grads);
}

dt_adamw_hyper optim_hyper(const optim *o, double lr, int t)
{
    return dt_adamw_hyper_of((float)lr, (float)o->t.beta1, (float)o->t.beta2, t);
}

int optim_step_dev(optim *o, const dt_adamw_hyper *hyper, void *const *params, void *const *grads,
                   const float *grad_scale)
{
    if (o->host) return -1; /* the host steps offloaded state: no device scalars there */
    step_scalars sc = {.grad_scale = 1.0f, .dev = hyper, .scale_dev = grad_scale};
    step(o, &sc, params, grads);
    return 0;
}

double optim_grad_sumsq(optim *o, const void *grad, size_t n)
{
    if (o->ge != 2) return o->ops->sumsq(grad, n);
    double sq = 0;
    for (size_t c = 0; c < n; c += o->scratch_numel) {
        size_t k = n - c < o->scratch_numel ? n - c : o->scratch_numel;
        o->ops->from_bf16(o->scratch, (const uint16_t *)grad + c, k);
        sq += o->ops->sumsq(o->scratch, k);
    }
    return sq;
}

void optim_grad_sumsq_dev(optim *o, const void *grad, size_t n, double *acc, double *tmp)
{
    if (o->ge != 2) {
        o->ops->sumsq_add(acc, grad, n);
        return;
    }
    /* optim_grad_sumsq's chunks summed apart, then added: the same association */
    o->ops->zero(tmp, sizeof *tmp);
    for (size_t c = 0; c < n; c += o->scratch_numel) {
        size_t k = n - c < o->scratch_numel ? n - c : o->scratch_numel;
        o->ops->from_bf16(o->scratch, (const uint16_t *)grad + c, k);
        o->ops->sumsq_add(tmp, o->scratch, k);
    }
    o->ops->scalar_add(acc, tmp);
}

int optim_slice_count(const optim *o) { return o->n; }

void optim_slice_state(optim *o, int i, int *unit, size_t *lo, size_t *hi, float **m, float **v)
{
    const optim_slice *s = &o->s[i];
    *unit = s->unit;
    *lo = s->lo;
    *hi = s->hi;
    *m = s->m;
    *v = s->v;
}

float *optim_slice_master(optim *o, int i) { return o->s[i].master; }

void optim_master_to_params(optim *o, int i, void *param)
{
    const optim_slice *s = &o->s[i];
    size_t n = s->hi - s->lo;
    if (!o->host) {
        if (o->mixed) o->ops->to_bf16(param, s->master, n);
        return;
    }
    for (size_t c = 0; c < n; c += o->scratch_numel) {
        size_t k = n - c < o->scratch_numel ? n - c : o->scratch_numel;
        put_params(o, param, s->master + c, c, k);
    }
}

int optim_state_on_host(const optim *o) { return o->host != NULL; }

size_t optim_state_bytes(const optim *o)
{
    size_t b = 0;
    for (int i = 0; i < o->n; i++) b += 2 * (o->s[i].hi - o->s[i].lo) * sizeof(float);
    return b;
}

size_t optim_master_bytes(const optim *o)
{
    size_t b = 0;
    for (int i = 0; (o->mixed || o->host) && i < o->n; i++) b += (o->s[i].hi - o->s[i].lo) * sizeof(float);
    return b;
}

size_t optim_scratch_bytes(const optim *o) { return o->scratch ? o->scratch_numel * sizeof(float) : 0; }

size_t optim_host_scratch_bytes(const optim *o)
{
    if (!o->host) return 0;
    return o->scratch_numel * (2 * o->ge + (o->pe == 2 ? 2 * 2 : 0) + (o->ge == 2 ? sizeof(float) : 0));
}
