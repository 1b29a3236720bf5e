/* init.c — parameter initialization as a pure function of (seed, name, global
 * index): every tp shard, pipeline stage and the head's tied copy of wte draw
 * exactly the numbers of the single-process model. */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/rng.h"

/* Host values of one tensor's local shard. */
static void draw_tensor(const param_spec *p, const model_shard *sh, unsigned long long seed,
                        float *out)
{
    long n = (long)p->local_numel;
    if (p->init != INIT_NORMAL && p->init != INIT_UNIFORM) {
        float v = p->init == INIT_ONES ? 1.0f : 0.0f;
        for (long i = 0; i < n; i++) out[i] = v;
        return;
    }
    uint64_t key = rng_key(seed, p->name);
    float std = p->init_std;
    int r = sh->tp_rank, tp = sh->tp_size;
    if (p->init == INIT_UNIFORM) { /* [-bound, bound) */
#pragma omp parallel for schedule(static) if (n > 65536)
        for (long i = 0; i < n; i++)
            out[i] = std * (2.0f * rng_uniform(key, param_global_index(p, r, tp, (size_t)i)) - 1.0f);
        return;
    }
    /* one Philox block per element: cheap next to anything else, and parallel */
#pragma omp parallel for schedule(static) if (n > 65536)
    for (long i = 0; i < n; i++)
        out[i] = std * rng_normal(key, param_global_index(p, r, tp, (size_t)i));
}

void model_init_tensor(const param_spec *p, int tp_rank, int tp_size, unsigned long long seed, float *out)
{
    model_shard sh = {.tp_rank = tp_rank, .tp_size = tp_size};
    draw_tensor(p, &sh, seed, out);
}

void model_init_params(model *m, unsigned long long seed)
{
    m->seed = seed; /* train.lora's dropout draws from it too */
    size_t max_numel = 0, pe = model_param_elem_bytes(m);
    for (int i = 0; i < m->n_specs; i++)
        if (m->specs[i].local_numel > max_numel) max_numel = m->specs[i].local_numel;
    float *host = malloc(max_numel * sizeof(float));
    /* bf16: the fp32 draws rounded on the device (the kernels' rounding) */
    float *dev = m->prec.bf16 ? m->ops->alloc(max_numel * sizeof(float)) : NULL;
    if (!host || (m->prec.bf16 && !dev)) {
        fprintf(stderr, "dtrun: out of memory initializing the model\n");
        abort();
    }
    for (int i = 0; i < m->n_specs; i++) {
        const param_spec *p = &m->specs[i];
        size_t bytes = p->local_numel * pe;
        if (p->tied && m->has_emb) {
            /* the same numbers as unit 0's wte by definition: copy, don't redraw
             * (38M draws for GPT-2 small) */
            m->ops->copy(model_param_data(m, i), model_param_data(m, m->unit_first_spec[0] + GPT_EMB_WTE), bytes);
            continue;
        }
        draw_tensor(p, &m->shard, seed, host);
        if (!m->prec.bf16) {
            m->ops->from_host(model_param_data(m, i), host, bytes);
            continue;
        }
        m->ops->from_host(dev, host, p->local_numel * sizeof(float));
        m->ops->to_bf16(model_param_data(m, i), dev, p->local_numel);
    }
    if (dev) m->ops->free(dev);
    free(host);
}

void model_init_unit_slice(const model *m, int unit, size_t lo, size_t hi, unsigned long long seed, float *out)
{
    int k = unit - m->shard.unit_begin;
    size_t max_numel = 0;
    for (int i = m->unit_first_spec[k]; i < m->unit_first_spec[k + 1]; i++)
        if (m->specs[i].local_numel > max_numel) max_numel = m->specs[i].local_numel;
    float *host = malloc((max_numel ? max_numel : 1) * sizeof(float));
    if (!host) {
        fprintf(stderr, "dtrun: out of memory initializing the master weights\n");
        abort();
    }
    for (int i = m->unit_first_spec[k]; i < m->unit_first_spec[k + 1]; i++) {
        const param_spec *p = &m->specs[i];
        if (p->frozen) continue; /* no master: the optimizer never sees it */
        size_t a = p->offset, b = p->offset + p->local_numel;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a >= b) continue;
        /* the head's tied wte draws what unit 0's does: same name, same indices */
        draw_tensor(p, &m->shard, seed, host);
        memcpy(out + (a - lo), host + (a - p->offset), (b - a) * sizeof(float));
    }
    free(host);
}
