/* optim.c — see optim.h. Weight decay is decoupled (AdamW) and applies only to
 * the elements of parameters whose spec says decay; a slice can cut a parameter,
 * so each step walks the unit's parameters and intersects them with the slice. */
#include "runtime/optim/optim.h"

#include <stdlib.h>

typedef struct {
    int unit;
    size_t lo, hi;        /* slice of the unit's flat buffer */
    float *m, *v;         /* hi - lo elements each */
} optim_slice;

struct optim {
    model *mdl;
    const dt_ops *ops;
    job_train t;
    int n;
    optim_slice *s;
};

optim *optim_create(model *m, const dt_ops *ops, const job_train *t,
                    const size_t *lo, const size_t *hi)
{
    const model_shard *sh = model_get_shard(m);
    optim *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->mdl = m;
    o->ops = ops;
    o->t = *t;
    o->n = sh->unit_end - sh->unit_begin;
    o->s = calloc((size_t)o->n, sizeof *o->s);
    if (!o->s) { free(o); return NULL; }
    for (int i = 0; i < o->n; i++) {
        int u = sh->unit_begin + i;
        optim_slice *s = &o->s[i];
        s->unit = u;
        s->lo = lo ? lo[i] : 0;
        s->hi = hi ? hi[i] : model_unit_local_numel(m, u);
        size_t bytes = (s->hi - s->lo) * sizeof(float);
        s->m = ops->alloc(bytes ? bytes : 1);
        s->v = ops->alloc(bytes ? bytes : 1);
        if (!s->m || !s->v) { optim_destroy(o); return NULL; }
    }
    return o;
}

void optim_destroy(optim *o)
{
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        o->ops->free(o->s[i].m);
        o->ops->free(o->s[i].v);
    }
    free(o->s);
    free(o);
}

void optim_step(optim *o, double lr, int t, float *const *params, float *const *grads)
{
    int np = model_param_count(o->mdl);
    for (int i = 0; i < o->n; i++) {
        optim_slice *s = &o->s[i];
        float *p = params ? params[i] : model_unit_params(o->mdl, s->unit) + s->lo;
        float *g = grads ? grads[i] : model_unit_grads(o->mdl, s->unit) + s->lo;
        for (int k = 0; k < np; k++) {
            const param_spec *ps = model_param(o->mdl, k);
            if (ps->unit != s->unit) continue;
            size_t a = ps->offset, b = ps->offset + ps->local_numel;
            if (a < s->lo) a = s->lo;
            if (b > s->hi) b = s->hi;
            if (a >= b) continue;
            size_t off = a - s->lo;
            o->ops->adamw(p + off, g + off, s->m + off, s->v + off, b - a, (float)lr,
                          (float)o->t.beta1, (float)o->t.beta2, (float)o->t.eps,
                          ps->decay ? (float)o->t.weight_decay : 0.0f, t);
        }
    }
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

size_t optim_state_bytes(const optim *o)
{
    size_t b = 0;
    for (int i = 0; i < o->n; i++) b += 2 * (o->s[i].hi - o->s[i].lo) * sizeof(float);
    return b;
}
