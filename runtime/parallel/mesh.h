/* mesh.h — the process mesh: world = dp x cp x pp x tp.
 *
 * tp varies fastest (a tp group is tp consecutive ranks, so it stays inside a
 * node), then cp (context parallel: a cp group's ring stays as close as it can),
 * then dp, then pp — Megatron-Core's order:
 *     rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i
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
} mesh;

typedef struct {
    int dp, pp, tp;
    int cp;
} mesh_coord;

/* The groups a rank belongs to, one per direction of the mesh:
 *   MESH_TP     the tp ranks with this rank's (dp, pp): tensor parallel;
 *   MESH_DP     the dp ranks with this rank's (pp, tp): data parallel;
 *   MESH_PP     the pp ranks with this rank's (dp, tp): pipeline stages;
 *   MESH_DP_TP  the dp * tp ranks with this rank's pp and cp (FSDP / HSDP shards);
 *   MESH_CP     the cp ranks with this rank's (dp, pp, tp): context parallel's ring;
 *   MESH_DP_CP  the dp * cp ranks with this rank's (pp, tp), in (dp, cp) order: the
 *               gradient reduction under context parallelism (Megatron folds cp
 *               into data parallelism there). */
typedef enum { MESH_TP = 0, MESH_DP, MESH_PP, MESH_DP_TP, MESH_CP, MESH_DP_CP } mesh_dim;

/* Sizes >= 1; -1 with one line in err otherwise (or when the product overflows). */
int mesh_init(mesh *m, int dp, int pp, int tp, char *err, size_t errlen);
/* The same with context parallelism (mesh_init is cp = 1). */
int mesh_init_cp(mesh *m, int dp, int cp, int pp, int tp, char *err, size_t errlen);
int mesh_from_parallel(mesh *m, const job_parallel *par, char *err, size_t errlen);

int mesh_rank(const mesh *m, mesh_coord c);
mesh_coord mesh_coords(const mesh *m, int rank);

/* Fills members (capacity >= the group's size; m->world always suffices) with
 * the world ranks of rank's group along dim, in increasing order, and returns
 * the group's size. Position i in the list is the rank in the group. */
int mesh_group(const mesh *m, int rank, mesh_dim dim, int *members);

/* One line per rank: "rank 5 node 0: dp=1 pp=0 tp=1" (" cp=1" after dp with
 * cp > 1). Ranks fill nodes of
 * ranks_per_node in order (torchrun's RANK = node * nproc_per_node + local). */
void mesh_print(const mesh *m, int ranks_per_node, FILE *out);

/* This rank's communicators for each dimension (groups of one are "self"). */
typedef struct {
    mesh_coord me;
    comm *tp, *dp, *pp, *dp_tp;
    comm *cp, *dp_cp;        /* NULL with cp = 1 */
} mesh_comms;

/* Every rank of world calls it (collective over each group it belongs to).
 * COMM_OK, or a COMM_E* code with one line in err and nothing left allocated. */
int mesh_comms_create(const mesh *m, comm *world, mesh_comms *out, char *err, size_t errlen);
void mesh_comms_destroy(mesh_comms *mc);

#endif
