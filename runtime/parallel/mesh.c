/* mesh.c — rank <-> (dp, pp, tp) coordinates, group member lists, the printout,
 * and the communicators of one rank's groups. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/parallel/mesh.h"

int mesh_init_cp(mesh *m, int dp, int cp, int pp, int tp, char *err, size_t errlen)
{
    if (dp < 1 || pp < 1 || tp < 1 || cp < 1) {
        snprintf(err, errlen, "mesh: dp=%d cp=%d pp=%d tp=%d: every size must be >= 1", dp, cp, pp, tp);
        return -1;
    }
    if ((long long)dp * cp * pp * tp > INT_MAX / 2) {
        snprintf(err, errlen, "mesh: dp=%d cp=%d pp=%d tp=%d: world too large", dp, cp, pp, tp);
        return -1;
    }
    *m = (mesh){.dp = dp, .pp = pp, .tp = tp, .cp = cp, .world = dp * cp * pp * tp};
    return 0;
}

int mesh_init(mesh *m, int dp, int pp, int tp, char *err, size_t errlen)
{
    return mesh_init_cp(m, dp, 1, pp, tp, err, errlen);
}

int mesh_from_parallel(mesh *m, const job_parallel *par, char *err, size_t errlen)
{
    /* a job_parallel filled by hand may leave cp 0: no context parallelism */
    return mesh_init_cp(m, par->dp, par->cp > 1 ? par->cp : 1, par->pp, par->tp, err, errlen);
}

/* A mesh filled by hand (tests, older callers) may leave cp 0: it means 1. */
static int cp_of(const mesh *m) { return m->cp > 1 ? m->cp : 1; }

int mesh_rank(const mesh *m, mesh_coord c)
{
    int cp = cp_of(m), ci = cp > 1 ? c.cp : 0;
    return ((c.pp * m->dp + c.dp) * cp + ci) * m->tp + c.tp;
}

mesh_coord mesh_coords(const mesh *m, int rank)
{
    mesh_coord c;
    int cp = cp_of(m);
    c.tp = rank % m->tp;
    c.cp = (rank / m->tp) % cp;
    c.dp = (rank / (m->tp * cp)) % m->dp;
    c.pp = rank / (m->tp * cp * m->dp);
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
    case MESH_CP:
        for (c.cp = 0; c.cp < cp_of(m); c.cp++)
            members[n++] = mesh_rank(m, c);
        break;
    case MESH_DP_CP:
        for (c.dp = 0; c.dp < m->dp; c.dp++)
            for (c.cp = 0; c.cp < cp_of(m); c.cp++)
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
        if (cp_of(m) > 1)
            fprintf(out, "rank %d node %d: dp=%d cp=%d pp=%d tp=%d\n", r, r / ranks_per_node, c.dp, c.cp, c.pp,
                    c.tp);
        else
            fprintf(out, "rank %d node %d: dp=%d pp=%d tp=%d\n", r, r / ranks_per_node, c.dp, c.pp, c.tp);
    }
}

void mesh_comms_destroy(mesh_comms *mc)
{
    comm **all[] = {&mc->dp_cp, &mc->cp, &mc->dp_tp, &mc->pp, &mc->dp, &mc->tp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        comm_destroy(*all[i]);
        *all[i] = NULL;
    }
}

int mesh_comms_create(const mesh *m, comm *world, mesh_comms *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (comm_size(world) != m->world) {
        snprintf(err, errlen, "mesh: dp=%d x cp=%d x pp=%d x tp=%d = %d ranks, but the world has %d",
                 m->dp, cp_of(m), m->pp, m->tp, m->world, comm_size(world));
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
    const mesh_dim dims[] = {MESH_TP, MESH_DP, MESH_PP, MESH_DP_TP, MESH_CP, MESH_DP_CP};
    comm **slots[] = {&out->tp, &out->dp, &out->pp, &out->dp_tp, &out->cp, &out->dp_cp};
    int n_dims = cp_of(m) > 1 ? 6 : 4;
    int rc = COMM_OK;
    for (int i = 0; i < n_dims && rc == COMM_OK; i++) {
        int n = mesh_group(m, rank, dims[i], members);
        rc = comm_group(world, members, n, slots[i], err, errlen);
    }
    free(members);
    if (rc != COMM_OK)
        mesh_comms_destroy(out);
    return rc;
}
