/* init.c — parameter initialization as a pure function of (seed, name, global
 * index): every tp shard, pipeline stage and the head's tied copy of wte draw
 * exactly the numbers of the single-process model. */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include "runtime/rng.h"

/* Host values of one tensor's local shard. */
static void draw_tensor(const param_spec *p, const model_shard *sh, unsigned long long seed,
                        float *out)
{
    long n = (long)p->local_numel;
    if (p->init != INIT_NORMAL) {
        float v = p->init == INIT_ONES ? 1.0f : 0.0f;
        for (long i = 0; i < n; i++) out[i] = v;
        return;
    }
    uint64_t key = rng_key(seed, p->name);
    float std = p->init_std;
    int r = sh->tp_rank, tp = sh->tp_size;
    /* one Philox block per element: cheap next to anything else, and parallel */
#pragma omp parallel for schedule(static) if (n > 65536)
    for (long i = 0; i < n; i++)
        out[i] = std * rng_normal(key, param_global_index(p, r, tp, (size_t)i));
}

void model_init_params(model *m, unsigned long long seed)
{
    size_t max_numel = 0;
    for (int i = 0; i < m->n_specs; i++)
        if (m->specs[i].local_numel > max_numel) max_numel = m->specs[i].local_numel;
    float *host = malloc(max_numel * sizeof(float));
    if (!host) {
        fprintf(stderr, "dtrun: out of memory initializing the model\n");
        abort();
    }
    for (int i = 0; i < m->n_specs; i++) {
        const param_spec *p = &m->specs[i];
        size_t bytes = p->local_numel * sizeof(float);
        if (p->tied && m->has_emb) {
            /* the same numbers as unit 0's wte by definition: copy, don't redraw
             * (38M draws for GPT-2 small) */
            m->ops->copy(model_param_data(m, i), unit_tensor(m, 0, GPT_EMB_WTE), bytes);
            continue;
        }
        draw_tensor(p, &m->shard, seed, host);
        m->ops->from_host(model_param_data(m, i), host, bytes);
    }
    free(host);
}
