/* pp_partition.c — balanced contiguous split of the model's units into chunks.
 *
 * Dynamic programming over prefixes, in two passes: the first finds the least
 * possible maximum chunk cost M; the second, among splits whose every chunk costs at
 * most M, picks the one with the least sum of squared chunk costs. The second pass
 * matters when one chunk dominates (a heavy LM head): many splits then share the same
 * maximum, and without it the other chunks could be arbitrarily lopsided, which costs
 * nothing in step time but skews activation memory and the bubble picture. Chunk
 * costs are always differences of the same prefix sums, so comparing against M is
 * exact. O(chunks * units^2), negligible for any real model. */
#include "runtime/parallel/pp_partition.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int n_units, n_blocks, n_chunks;
    const double *prefix; /* [n_units + 1] */
} split_problem;

/* Can chunk k (of n_chunks) be units [i, j)? It needs a block; only the last chunk
 * may hold the head and it must end at the last unit. Chunk 0 starts at unit 0 by
 * construction of the recursion, so it always holds the embedding. */
static int chunk_allowed(const split_problem *sp, int k, int i, int j) {
    int first_block = i > 1 ? i : 1;
    int end_block = j < sp->n_blocks + 1 ? j : sp->n_blocks + 1;
    if (end_block - first_block < 1) return 0;
    if (k == sp->n_chunks - 1) return j == sp->n_units;
    return j <= sp->n_blocks + 1;
}

static double range_cost(const split_problem *sp, int i, int j) {
    return sp->prefix[j] - sp->prefix[i];
}

/* Pass 1: the least achievable maximum chunk cost. best is (n_chunks+1) x (n_units+1). */
static double least_max_cost(const split_problem *sp, double *best) {
    int stride = sp->n_units + 1;
    for (int k = 0; k <= sp->n_chunks; k++)
        for (int j = 0; j <= sp->n_units; j++) best[k * stride + j] = INFINITY;
    best[0] = 0.0;
    for (int k = 0; k < sp->n_chunks; k++)
        for (int j = 1; j <= sp->n_units; j++)
            for (int i = 0; i < j; i++) {
                double before = best[k * stride + i];
                if (isinf(before) || !chunk_allowed(sp, k, i, j)) continue;
                double c = range_cost(sp, i, j);
                double cand = before > c ? before : c;
                if (cand < best[(k + 1) * stride + j]) best[(k + 1) * stride + j] = cand;
            }
    return best[sp->n_chunks * stride + sp->n_units];
}

/* Pass 2: among splits with every chunk <= max_cost, the least sum of squared costs,
 * then the least sum of squared block counts; writes the boundaries. */
static void most_even_split(const split_problem *sp, double max_cost, double *sumsq,
                            double *blocksq, int *from, int *first_unit) {
    int stride = sp->n_units + 1;
    for (int k = 0; k <= sp->n_chunks; k++)
        for (int j = 0; j <= sp->n_units; j++) {
            sumsq[k * stride + j] = INFINITY;
            blocksq[k * stride + j] = INFINITY;
            from[k * stride + j] = -1;
        }
    sumsq[0] = 0.0;
    blocksq[0] = 0.0;
    for (int k = 0; k < sp->n_chunks; k++)
        for (int j = 1; j <= sp->n_units; j++)
            for (int i = 0; i < j; i++) {
                int at = k * stride + i, to = (k + 1) * stride + j;
                if (isinf(sumsq[at]) || !chunk_allowed(sp, k, i, j)) continue;
                double c = range_cost(sp, i, j);
                if (c > max_cost) continue;
                int first_block = i > 1 ? i : 1;
                int end_block = j < sp->n_blocks + 1 ? j : sp->n_blocks + 1;
                double nb = (double)(end_block - first_block);
                double s = sumsq[at] + c * c, q = blocksq[at] + nb * nb;
                if (s < sumsq[to] || (s == sumsq[to] && q < blocksq[to])) {
                    sumsq[to] = s;
                    blocksq[to] = q;
                    from[to] = i;
                }
            }
    int j = sp->n_units;
    first_unit[sp->n_chunks] = j;
    for (int k = sp->n_chunks; k > 0; k--) {
        j = from[k * stride + j];
        first_unit[k - 1] = j;
    }
}

int pp_partition(const double *unit_cost, int n_units, int pp, int v, int *first_unit,
                 char *err, size_t errlen) {
    if (pp < 1 || v < 1) {
        snprintf(err, errlen, "pipeline partition: pp (%d) and virtual_stages (%d) must be >= 1", pp, v);
        return -1;
    }
    int n_blocks = n_units - 2;
    if ((long long)pp * v > n_blocks) {
        snprintf(err, errlen,
                 "pipeline partition: %d chunks (pp %d x virtual_stages %d) need at least as many "
                 "transformer blocks, the model has %d",
                 pp * v, pp, v, n_blocks < 0 ? 0 : n_blocks);
        return -1;
    }
    for (int u = 0; u < n_units; u++)
        if (!isfinite(unit_cost[u]) || unit_cost[u] < 0) {
            snprintf(err, errlen, "pipeline partition: cost of unit %d is %g (must be finite and >= 0)",
                     u, unit_cost[u]);
            return -1;
        }

    size_t cells = (size_t)(pp * v + 1) * (size_t)(n_units + 1);
    double *prefix = malloc((size_t)(n_units + 1) * sizeof *prefix);
    double *a = malloc(cells * sizeof *a);
    double *b = malloc(cells * sizeof *b);
    int *from = malloc(cells * sizeof *from);
    if (!prefix || !a || !b || !from) {
        free(prefix), free(a), free(b), free(from);
        snprintf(err, errlen, "pipeline partition: out of memory");
        return -1;
    }
    prefix[0] = 0.0;
    for (int u = 0; u < n_units; u++) prefix[u + 1] = prefix[u] + unit_cost[u];
    split_problem sp = {n_units, n_blocks, pp * v, prefix};

    double max_cost = least_max_cost(&sp, a);
    most_even_split(&sp, max_cost, a, b, from, first_unit);
    free(prefix), free(a), free(b), free(from);
    return 0;
}

double pp_partition_chunk_cost(const double *unit_cost, const int *first_unit, int chunk) {
    double sum = 0.0;
    for (int u = first_unit[chunk]; u < first_unit[chunk + 1]; u++) sum += unit_cost[u];
    return sum;
}
