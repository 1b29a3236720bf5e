/* moe_state.c — what a model object keeps for its MoE blocks besides their
 * parameters (model.h): which held blocks are MoE, DeepSeek-V3's routing
 * bias of each (device memory, updated between steps, never by the
 * optimizer: it is no parameter, it has no gradient), the statistics the
 * training forwards gather for the metrics, and the dispatcher. */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int moe_state_create(model *m)
{
    model_local_moe_dispatcher(m, &m->moe_disp);
    m->moe_rows_min = -1;
    if (m->spec.moe.experts < 1 || m->n_blocks == 0) return 0;
    int E = m->d.E;
    m->moe_slot = malloc((size_t)m->n_blocks * sizeof(int));
    if (!m->moe_slot) return -1;
    for (int k = 0; k < m->n_blocks; k++)
        m->moe_slot[k] = job_moe_block(&m->spec, m->first_block + k - 1) ? m->n_moe++ : -1;
    if (m->n_moe == 0) return 0;
    m->moe_stats = calloc((size_t)m->n_moe, sizeof *m->moe_stats);
    m->moe_chosen_mem = calloc((size_t)m->n_moe * (size_t)E, sizeof(double));
    m->moe_bias = m->ops->alloc((size_t)m->n_moe * (size_t)E * sizeof(float)); /* zeroed */
    if (!m->moe_stats || !m->moe_chosen_mem || !m->moe_bias) return -1;
    for (int k = 0; k < m->n_blocks; k++) {
        int i = m->moe_slot[k];
        if (i < 0) continue;
        m->moe_stats[i].layer = m->first_block + k - 1;
        m->moe_stats[i].chosen = m->moe_chosen_mem + (size_t)i * (size_t)E;
    }
    return 0;
}

void moe_state_destroy(model *m)
{
    if (m->moe_bias) m->ops->free(m->moe_bias);
    free(m->moe_slot);
    free(m->moe_stats);
    free(m->moe_chosen_mem);
    free(m->moe_host_scratch);
    free(m->moe_cp_host);
}

float *moe_cp_scratch(model *m, size_t n)
{
    if (n > m->moe_cp_cap) {
        float *p = realloc(m->moe_cp_host, n * sizeof(float));
        if (!p) {
            fprintf(stderr, "dtrun: model: out of host memory for the MoE blocks' context-parallel counts\n");
            abort();
        }
        m->moe_cp_host = p;
        m->moe_cp_cap = n;
    }
    return m->moe_cp_host;
}

int moe_slot_of(const model *m, int unit)
{
    int k = unit - m->first_block;
    return m->moe_slot && k >= 0 && k < m->n_blocks ? m->moe_slot[k] : -1;
}

void model_set_moe_dispatcher(model *m, const model_moe_dispatcher *dispatcher)
{
    m->moe_disp_set = dispatcher != NULL;
    if (dispatcher) m->moe_disp = *dispatcher;
    else model_local_moe_dispatcher(m, &m->moe_disp);
}

int model_moe_count(const model *m) { return m->n_moe; }

void model_set_mem_observer(model *m, void (*observer)(void *ctx, long long bytes), void *ctx)
{
    m->mem_observer = observer;
    m->mem_ctx = ctx;
}

void model_moe_rows(const model *m, int *fewest, int *most)
{
    *fewest = m->moe_rows_min < 0 ? 0 : m->moe_rows_min;
    *most = m->moe_rows_max;
}

const model_moe_stats *model_moe_stats_of(const model *m, int i)
{
    return i >= 0 && i < m->n_moe ? &m->moe_stats[i] : NULL;
}

void model_moe_stats_reset(model *m)
{
    for (int i = 0; i < m->n_moe; i++) {
        memset(m->moe_stats[i].chosen, 0, (size_t)m->d.E * sizeof(double));
        m->moe_stats[i].dropped = 0;
        m->moe_stats[i].aux = 0;
    }
}

void moe_stats_add(model *m, int slot, const int *chosen, int G, int M, double aux)
{
    model_moe_stats *st = &m->moe_stats[slot];
    int E = m->d.E;
    double all = 0;
    for (int g = 0; g < G; g++)
        for (int e = 0; e < E; e++) {
            st->chosen[e] += chosen[(size_t)g * E + e];
            all += chosen[(size_t)g * E + e];
        }
    st->dropped += all - M;
    st->aux += aux;
}

const float *moe_bias_of(const model *m, int slot)
{
    return slot >= 0 ? m->moe_bias + (size_t)slot * (size_t)m->d.E : NULL;
}

void model_moe_bias_get(const model *m, int i, float *out)
{
    m->ops->to_host(out, moe_bias_of(m, i), (size_t)m->d.E * sizeof(float));
}

void model_moe_bias_set(model *m, int i, const float *in)
{
    m->ops->from_host(m->moe_bias + (size_t)i * (size_t)m->d.E, in, (size_t)m->d.E * sizeof(float));
}

/* DeepSeek-V3 (Sec. 2.1.2): b_e += gamma * sign(mean load - load_e), in fp32
 * on the host from the same doubles on every rank: the same bits
 * everywhere. */
void model_moe_bias_update(model *m, int i, const double *load, double rate)
{
    int E = m->d.E;
    float *b = malloc((size_t)E * sizeof(float));
    if (!b) {
        fprintf(stderr, "dtrun: model: out of host memory for %d routing biases\n", E);
        abort();
    }
    model_moe_bias_get(m, i, b);
    double mean = 0;
    for (int e = 0; e < E; e++) mean += load[e];
    mean /= E;
    for (int e = 0; e < E; e++) {
        double d = mean - load[e];
        b[e] += (float)rate * (float)((d > 0) - (d < 0));
    }
    model_moe_bias_set(m, i, b);
    free(b);
}
