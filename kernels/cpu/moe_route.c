/* moe_route.c — a mixture of experts' dispatch plan on the CPU (ops.h
 * moe_route): which choices each expert keeps (all, or per sample the first
 * `cap` by position), and the permuted order, expert by expert, each
 * expert's rows in row order. Two passes over the choices in row order: the
 * counts, then the places. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

void cpu_moe_route(int *dst, int *src, int *counts, int *chosen, const int *idx, const int *before, int N, int E,
                   int k, int cap, int T, int row0)
{
    int G = N > 0 ? (row0 + N - 1) / T + 1 : 0;
    memset(chosen, 0, (size_t)G * (size_t)E * sizeof(int));
    memset(counts, 0, (size_t)E * sizeof(int));
    /* pass 1: kept or dropped, in row order per group (chosen counts as it goes) */
    for (int n = 0; n < N; n++) {
        int g = (row0 + n) / T;
        for (int j = 0; j < k; j++) {
            int e = idx[(size_t)n * k + j];
            int *c = &chosen[(size_t)g * E + e];
            int earlier = *c + (before ? before[(size_t)g * E + e] : 0);
            (*c)++;
            int keep = cap == 0 || earlier < cap;
            dst[(size_t)n * k + j] = keep ? counts[e]++ : -1; /* the rank within the expert, for now */
        }
    }
    /* pass 2: each expert's first row, then the places */
    int *first = malloc((size_t)E * sizeof(int));
    if (!first) abort(); /* E ints: as the caller's own arrays, a failure here is the machine's */
    int o = 0;
    for (int e = 0; e < E; e++) first[e] = o, o += counts[e];
    for (int n = 0; n < N; n++)
        for (int j = 0; j < k; j++) {
            int *d = &dst[(size_t)n * k + j];
            if (*d < 0) continue;
            *d += first[idx[(size_t)n * k + j]];
            src[*d] = n;
        }
    free(first);
}
