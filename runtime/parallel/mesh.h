/* mesh.h — the process mesh: world = dp x cp x pp x tp.
 *
 * tp varies fastest (a tp group is tp consecutive ranks, so it stays inside a
 * node), then cp (context parallel: a cp group's ring stays as close as it can),
 * then dp, then pp — Megatron-Core's order:
 *     rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i
 * Expert parallelism (parallel.ep) adds no dimension: it is folded into the
 * dp x cp ranks (Megatron-Core's MoE Parallel Folding). Position j of a rank
 * in its MESH_DP_CP group (dp, cp order) is ep rank j % ep of ep group j / ep:
 * an ep group is ep neighbouring ranks of one dp x cp group (so it stays
 * inside a node where it can: its all-to-all is the heaviest traffic), and
 * the experts' data-parallel group the dp x cp / ep ranks with the same ep
 * rank, which hold the same experts.
 * Everything here is a pure function of the shape and a rank, except
 * mesh_comms_create, which builds this rank's communicators. The dry-run prints
 * the same mesh that the run builds. */
#ifndef DTRUN_MESH_H
#define DTRUN_MESH_H

#include <stddef.h>
#include <stdio.h>

#include "lib/job/jobspec.h"
#include "runtime/comm/comm.h"

typedef struct {
    int dp, pp, tp;
    int world;               /* dp * cp * pp * tp */
    int cp;                  /* 1 without context parallelism */
    int ep;                  /* expert parallel, folded into dp x cp (0 or 1: none) */
} mesh;

typedef struct {
    int dp, pp, tp;
    int cp;
    int ep, edp;             /* this rank's ep rank and its ep group's index (its rank in
                                the experts' data-parallel group); 0 and its dp x cp
                                position without expert parallelism */
} mesh_coord;

/* The groups a rank belongs to, one per direction of the mesh:
 *   MESH_TP     the tp ranks with this rank's (dp, pp): tensor parallel;
 *   MESH_DP     the dp ranks with this rank's (pp, tp): data parallel;
 *   MESH_PP     the pp ranks with this rank's (dp, tp): pipeline stages;
 *   MESH_DP_TP  the dp * tp ranks with this rank's pp and cp (FSDP / HSDP shards);
 *   MESH_CP     the cp ranks with this rank's (dp, pp, tp): context parallel's ring;
 *   MESH_DP_CP  the dp * cp ranks with this rank's (pp, tp), in (dp, cp) order: the
 *               gradient reduction under context parallelism (Megatron folds cp
 *               into data parallelism there);
 *   MESH_EP     the ep ranks of this rank's MESH_DP_CP group that split the routed
 *               experts among them (places j / ep * ep .. + ep - 1): expert
 *               parallelism's all-to-all;
 *   MESH_EDP    the dp x cp / ep ranks of that group with this rank's ep rank
 *               (places j % ep, + ep, ...): the experts' data-parallel group, over
 *               which the expert parameters' gradients reduce (and shard). */
typedef enum { MESH_TP = 0, MESH_DP, MESH_PP, MESH_DP_TP, MESH_CP, MESH_DP_CP, MESH_EP, MESH_EDP } mesh_dim;

/* Sizes >= 1; -1 with one line in err otherwise (or when the product overflows). */
int mesh_init(mesh *m, int dp, int pp, int tp, char *err, size_t errlen);
/* The same with context parallelism (mesh_init is cp = 1). */
int mesh_init_cp(mesh *m, int dp, int cp, int pp, int tp, char *err, size_t errlen);
/* Expert parallelism over an initialized mesh: ep >= 1 dividing dp x cp, else
 * -1 with one line in err. */
int mesh_set_ep(mesh *m, int ep, char *err, size_t errlen);
/* dp, cp, pp, tp and ep from the job's parallel section. */
int mesh_from_parallel(mesh *m, const job_parallel *par, char *err, size_t errlen);

int mesh_rank(const mesh *m, mesh_coord c);
mesh_coord mesh_coords(const mesh *m, int rank);

/* Fills members (capacity >= the group's size; m->world always suffices) with
 * the world ranks of rank's group along dim, in increasing order, and returns
 * the group's size. Position i in the list is the rank in the group. */
int mesh_group(const mesh *m, int rank, mesh_dim dim, int *members);

/* One line per rank: "rank 5 node 0: dp=1 pp=0 tp=1" (" cp=1" after dp with
 * cp > 1, " ep=1 edp=0" at the end with ep > 1). Ranks fill nodes of
 * ranks_per_node in order (torchrun's RANK = node * nproc_per_node + local). */
void mesh_print(const mesh *m, int ranks_per_node, FILE *out);

/* This rank's communicators for each dimension (groups of one are "self"). */
typedef struct {
    mesh_coord me;
    comm *tp, *dp, *pp, *dp_tp;
    comm *cp, *dp_cp;        /* NULL with cp = 1 */
    comm *ep, *edp;          /* NULL with ep = 1 */
} mesh_comms;

/* Every rank of world calls it (collective over each group it belongs to).
 * COMM_OK, or a COMM_E* code with one line in err and nothing left allocated. */
int mesh_comms_create(const mesh *m, comm *world, mesh_comms *out, char *err, size_t errlen);
void mesh_comms_destroy(mesh_comms *mc);

#endif
