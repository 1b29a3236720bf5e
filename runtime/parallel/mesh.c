/* mesh.c — rank <-> (dp, pp, tp) coordinates, group member lists, the printout,
 * and the communicators of one rank's groups. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/parallel/mesh.h"

int mesh_init(mesh *m, int dp, int pp, int tp, char *err, size_t errlen)
{
    if (dp < 1 || pp < 1 || tp < 1) {
        snprintf(err, errlen, "mesh: dp=%d pp=%d tp=%d: every size must be >= 1", dp, pp, tp);
        return -1;
    }
    if ((long long)dp * pp * tp > INT_MAX / 2) {
        snprintf(err, errlen, "mesh: dp=%d pp=%d tp=%d: world too large", dp, pp, tp);
        return -1;
    }
    *m = (mesh){.dp = dp, .pp = pp, .tp = tp, .world = dp * pp * tp};
    return 0;
}

int mesh_from_parallel(mesh *m, const job_parallel *par, char *err, size_t errlen)
{
    return mesh_init(m, par->dp, par->pp, par->tp, err, errlen);
}

int mesh_rank(const mesh *m, mesh_coord c)
{
    return (c.pp * m->dp + c.dp) * m->tp + c.tp;
}

mesh_coord mesh_coords(const mesh *m, int rank)
{
    mesh_coord c;
    c.tp = rank % m->tp;
    c.dp = (rank / m->tp) % m->dp;
    c.pp = rank / (m->tp * m->dp);
    return c;
}

int mesh_group(const mesh *m, int rank, mesh_dim dim, int *members)
{
    mesh_coord me = mesh_coords(m, rank), c = me;
    int n = 0;
    switch (dim) {
    case MESH_TP:
        for (c.tp = 0; c.tp < m->tp; c.tp++)
            members[n++] = mesh_rank(m, c);
        break;
    case MESH_DP:
        for (c.dp = 0; c.dp < m->dp; c.dp++)
            members[n++] = mesh_rank(m, c);
        break;
    case MESH_PP:
        for (c.pp = 0; c.pp < m->pp; c.pp++)
            members[n++] = mesh_rank(m, c);
        break;
    case MESH_DP_TP:
        for (c.dp = 0; c.dp < m->dp; c.dp++)
            for (c.tp = 0; c.tp < m->tp; c.tp++)
                members[n++] = mesh_rank(m, c);
        break;
    }
    return n;
}

void mesh_print(const mesh *m, int ranks_per_node, FILE *out)
{
    if (ranks_per_node < 1)
        ranks_per_node = m->world;
    for (int r = 0; r < m->world; r++) {
        mesh_coord c = mesh_coords(m, r);
        fprintf(out, "rank %d node %d: dp=%d pp=%d tp=%d\n", r, r / ranks_per_node, c.dp, c.pp,
                c.tp);
    }
}

void mesh_comms_destroy(mesh_comms *mc)
{
    comm **all[] = {&mc->dp_tp, &mc->pp, &mc->dp, &mc->tp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        comm_destroy(*all[i]);
        *all[i] = NULL;
    }
}

int mesh_comms_create(const mesh *m, comm *world, mesh_comms *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (comm_size(world) != m->world) {
        snprintf(err, errlen, "mesh: dp=%d x pp=%d x tp=%d = %d ranks, but the world has %d",
                 m->dp, m->pp, m->tp, m->world, comm_size(world));
        return COMM_EINVAL;
    }
    int *members = malloc((size_t)m->world * sizeof(int));
    if (!members) {
        snprintf(err, errlen, "mesh: out of memory");
        return COMM_ESYS;
    }
    int rank = comm_rank(world);
    out->me = mesh_coords(m, rank);
    /* The same order on every rank, so that no two groups wait on each other. */
    const mesh_dim dims[] = {MESH_TP, MESH_DP, MESH_PP, MESH_DP_TP};
    comm **slots[] = {&out->tp, &out->dp, &out->pp, &out->dp_tp};
    int rc = COMM_OK;
    for (int i = 0; i < 4 && rc == COMM_OK; i++) {
        int n = mesh_group(m, rank, dims[i], members);
        rc = comm_group(world, members, n, slots[i], err, errlen);
    }
    free(members);
    if (rc != COMM_OK)
        mesh_comms_destroy(out);
    return rc;
}
