/* sample.c — greedy and top-k / top-p sampling (sample.h). */
#include "runtime/infer/sample.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/rng.h"

static const double *g_prob; /* qsort's context: descending probability, then ascending id */
static int by_prob(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (g_prob[i] != g_prob[j]) return g_prob[i] > g_prob[j] ? -1 : 1;
    return i - j;
}

int sample_next(const float *logits, int V, const sample_opts *o, uint64_t draw, double *prob, int *order)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (o->temperature <= 0) return best;
    double mx = logits[best], sum = 0;
    for (int i = 0; i < V; i++) sum += prob[i] = exp((logits[i] - mx) / o->temperature);
    for (int i = 0; i < V; i++) prob[i] /= sum, order[i] = i;
    g_prob = prob;
    qsort(order, (size_t)V, sizeof *order, by_prob);
    int keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    if (o->top_p < 1) { /* the smallest prefix whose mass reaches top_p */
        double c = 0;
        for (int i = 0; i < keep; i++) {
            c += prob[order[i]];
            if (c >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double mass = 0;
    for (int i = 0; i < keep; i++) mass += prob[order[i]];
    double u = rng_uniform(rng_key(o->seed, "generate"), draw) * mass, c = 0;
    for (int i = 0; i < keep; i++) {
        c += prob[order[i]];
        if (u < c) return order[i];
    }
    return order[keep - 1];
}
