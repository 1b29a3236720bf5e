/* pp_partition.h — which model units each pipeline chunk holds.
 *
 * A pipeline of pp ranks with v virtual stages per rank has pp * v chunks, each a
 * contiguous range of units (0 = embedding, 1..L = blocks, L+1 = head). Chunk c runs
 * on pp rank c % pp as its local chunk c / pp: Megatron's interleaving, so that with
 * v > 1 a microbatch visits every rank v times. With v = 1 chunk c is simply rank c.
 *
 * The split minimises the most expensive chunk under a per-unit cost the caller
 * gives (FLOPs, or measured times): the LM head's vocabulary matmul can weigh as much
 * as several blocks, so an even split of blocks would leave the last rank the
 * straggler that every other rank waits for. Pure and deterministic.
 */
#ifndef DTRUN_PP_PARTITION_H
#define DTRUN_PP_PARTITION_H

#include <stddef.h>

/* The chunk numbering, shared by the partition, the schedule and the engine. */
static inline int pp_chunk_rank(int chunk, int pp) { return chunk % pp; }
static inline int pp_chunk_local(int chunk, int pp) { return chunk / pp; }
static inline int pp_chunk_id(int rank, int local, int pp) { return local * pp + rank; }

/* Split units 0..n_units-1 (n_units = L + 2) into pp * v contiguous chunks.
 * On success writes first_unit[0..pp*v] (first_unit[c] is chunk c's first unit,
 * first_unit[pp*v] = n_units) and returns 0. Guarantees: the embedding is in chunk 0,
 * the head in the last chunk, every chunk holds at least one block; among such splits
 * the maximum chunk cost is minimal, ties broken towards the most even costs (least
 * sum of squares), then the most even block counts, then the earliest boundaries.
 * Returns -1 with one line in err when pp or v < 1, L < pp * v, or a cost is
 * negative or not finite. */
int pp_partition(const double *unit_cost, int n_units, int pp, int v, int *first_unit,
                 char *err, size_t errlen);

/* Sum of unit_cost over chunk c's units. */
double pp_partition_chunk_cost(const double *unit_cost, const int *first_unit, int chunk);

#endif
