/* rdzv_round.h — the pure decisions of a rendezvous round (no I/O): rank
 * assignment and the join-timeout message. lib/rdzv/rdzv_server_round.c drives them. */
#ifndef DTRUN_RDZV_ROUND_H
#define DTRUN_RDZV_ROUND_H

#include <stddef.h>

typedef struct {
    const char *name;
    int hint;          /* --node-rank, -1 = none */
    int local_world;
} rdzv_round_node;

/* Nodes in join order → rank[i] (hinted nodes keep their rank, the others take
 * the free ranks in join order) and offset[i] (sum of the local world sizes of
 * lower ranks); *world = the sum of all. 0, or -1 with err when a hint is out
 * of range for n nodes or taken twice. */
int rdzv_round_assign(const rdzv_round_node *nodes, int n, int *rank, int *offset, int *world,
                      char *err, size_t errlen);

/* The largest hint + 1: the fewest nodes that can satisfy the hints (0 if none). */
int rdzv_round_min_for_hints(const rdzv_round_node *nodes, int n);

/* "rendezvous timed out after 30.0 s: 2 of min 3 nodes joined (nodeA, nodeB); 1 missing"
 * (the names list is cut with "… and K more" to fit). */
void rdzv_round_timeout_message(char *out, size_t outlen, double secs, const rdzv_round_node *nodes,
                                int n, int min_nodes, int needed);

#endif
