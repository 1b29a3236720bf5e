/* engine_moe.c — the engine's side of model.moe (engine.h engine_moe_last):
 * each step's routing gathered over the world into the global batch's
 * numbers (the loads per expert of every MoE block, the dropped choices, the
 * balance loss), the auxiliary-loss-free bias update from those loads
 * (DeepSeek-V3: the same global numbers on every rank, so the same biases),
 * and the biases in checkpoints ("state/h.N.moe.bias": no parameter, no
 * optimizer state; written once, by the ranks at dp, tp and cp 0 of the stage
 * holding the block).
 *
 * Who counts. Every rank routes its own tokens of its own blocks: the dp
 * ranks' samples are disjoint, the cp ranks' tokens of a sample too, and the
 * pipeline stages' blocks too, so the world's sum is the global batch's (a
 * sample split over cp ranks counts its balance loss on its cp rank 0:
 * moe.c). Expert parallelism changes nothing here: the routing stays with
 * the tokens, only the rows travel. Tensor parallelism routes the same
 * tokens on every tp rank (moe.c): a tp rank other than 0 adds nothing, as
 * for the loss, and every tp rank takes the same sums, so the same biases. */
#include "runtime/worker/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/exit_codes.h"

int engine_moe_init(engine *e)
{
    const job_model *m = &e->job.model;
    engine_moe *s = &e->moe;
    memset(s, 0, sizeof *s);
    if (m->moe.experts < 1) return 0;
    s->experts = m->moe.experts;
    s->layers = job_moe_layers(m);
    s->layer = calloc((size_t)s->layers, sizeof(int));
    s->chosen = calloc((size_t)s->layers * (size_t)s->experts, sizeof(double));
    s->dropped = calloc((size_t)s->layers, sizeof(double));
    if (!s->layer || !s->chosen || !s->dropped) return -1;
    for (int i = 0, j = 0; i < m->n_layer; i++)
        if (job_moe_block(m, i)) s->layer[j++] = i;
    return 0;
}

void engine_moe_free(engine *e)
{
    free(e->moe.layer);
    free(e->moe.chosen);
    free(e->moe.dropped);
}

const engine_moe *engine_moe_last(const engine *e) { return e->moe.layers > 0 ? &e->moe : NULL; }

int engine_moe_values(const engine *e) { return e->moe.layers > 0 ? e->moe.layers * (e->moe.experts + 1) + 1 : 0; }

void engine_moe_reset(engine *e)
{
    for (int l = 0; l < e->n_chunks; l++) model_moe_stats_reset(e->chunk[l]);
}

/* The MoE block's place in e->moe.layer. */
static int layer_index(const engine *e, int layer)
{
    for (int j = 0; j < e->moe.layers; j++)
        if (e->moe.layer[j] == layer) return j;
    return -1;
}

void engine_moe_mine(const engine *e, double *v)
{
    const engine_moe *s = &e->moe;
    int n = engine_moe_values(e), E = s->experts;
    memset(v, 0, (size_t)n * sizeof(double));
    if (n == 0 || e->mc.me.tp != 0) return;
    for (int l = 0; l < e->n_chunks; l++)
        for (int i = 0; i < model_moe_count(e->chunk[l]); i++) {
            const model_moe_stats *st = model_moe_stats_of(e->chunk[l], i);
            int j = layer_index(e, st->layer);
            for (int x = 0; x < E; x++) v[(size_t)j * (E + 1) + x] = st->chosen[x];
            v[(size_t)j * (E + 1) + E] = st->dropped;
            v[n - 1] += st->aux;
        }
}

void engine_moe_take(engine *e, const double *sum, double samples)
{
    engine_moe *s = &e->moe;
    int n = engine_moe_values(e), E = s->experts;
    if (n == 0) return;
    for (int j = 0; j < s->layers; j++) {
        memcpy(s->chosen + (size_t)j * E, sum + (size_t)j * (E + 1), (size_t)E * sizeof(double));
        s->dropped[j] = sum[(size_t)j * (E + 1) + E];
    }
    s->aux_loss = samples > 0 ? sum[n - 1] / samples : 0;
}

void engine_moe_update_bias(engine *e)
{
    double rate = e->job.model.moe.bias_update_rate;
    if (!(rate > 0) || e->moe.layers == 0) return;
    for (int l = 0; l < e->n_chunks; l++)
        for (int i = 0; i < model_moe_count(e->chunk[l]); i++) {
            int j = layer_index(e, model_moe_stats_of(e->chunk[l], i)->layer);
            model_moe_bias_update(e->chunk[l], i, e->moe.chosen + (size_t)j * e->moe.experts, rate);
        }
}

static void bias_name(char *buf, size_t n, int layer) { snprintf(buf, n, "state/h.%d.moe.bias", layer); }

int engine_moe_ckpt_count(const engine *e)
{
    if (e->mc.me.dp != 0 || e->mc.me.tp != 0 || e->mc.me.cp != 0) return 0;
    int n = 0;
    for (int l = 0; l < e->n_chunks; l++) n += model_moe_count(e->chunk[l]);
    return n;
}

int engine_moe_ckpt_pieces(engine *e, ckpt_piece *out, float **bufs)
{
    int n = 0, E = e->moe.experts;
    if (engine_moe_ckpt_count(e) == 0) return 0;
    for (int l = 0; l < e->n_chunks; l++)
        for (int i = 0; i < model_moe_count(e->chunk[l]); i++, n++) {
            float *host = malloc((size_t)E * sizeof(float));
            if (!host) return -1;
            bufs[n] = host;
            model_moe_bias_get(e->chunk[l], i, host);
            ckpt_piece *p = &out[n];
            memset(p, 0, sizeof *p);
            bias_name(p->name, sizeof p->name, model_moe_stats_of(e->chunk[l], i)->layer);
            p->place = (ckpt_place){.ndim = 1, .shape = {E, 1}, .split = CKPT_SPLIT_NONE, .groups = 1,
                                    .tp_rank = 0, .tp_size = 1, .lo = 0, .hi = (uint64_t)E};
            p->data = host;
        }
    return n;
}

int engine_moe_ckpt_load(engine *e, const ckpt *ck, char *why, size_t n)
{
    int E = e->moe.experts;
    float *host = malloc((size_t)(E > 0 ? E : 1) * sizeof(float));
    if (!host) return snprintf(why, n, "out of memory for the routing biases"), -1;
    int rc = 0;
    for (int l = 0; l < e->n_chunks && rc == 0; l++)
        for (int i = 0; i < model_moe_count(e->chunk[l]) && rc == 0; i++) {
            char name[64];
            int64_t shape[2];
            bias_name(name, sizeof name, model_moe_stats_of(e->chunk[l], i)->layer);
            if (ckpt_tensor_shape(ck, name, shape) < 0) continue; /* saved without biases: they start at 0 */
            if (shape[0] != E) {
                snprintf(why, n, "%s: %s holds %lld experts' biases, the model has %d", ckpt_path(ck), name,
                         (long long)shape[0], E);
                rc = -1;
            } else if ((rc = ckpt_read_global(ck, name, host, why, n)) == 0) {
                model_moe_bias_set(e->chunk[l], i, host);
            }
        }
    free(host);
    return rc;
}

void engine_moe_rows(const engine *e, int *fewest, int *most, size_t *staged)
{
    *fewest = *most = 0;
    for (int l = 0; l < e->n_chunks; l++) {
        int lo, hi;
        model_moe_rows(e->chunk[l], &lo, &hi);
        if (hi == 0) continue; /* no MoE block in it */
        if (*most == 0 || lo < *fewest) *fewest = lo;
        if (hi > *most) *most = hi;
    }
    *staged = ep_staged_rows(&e->x);
}
