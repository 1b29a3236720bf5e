/* mesh.c — rank <-> (dp, cp, pp, tp) coordinates (and the ep ranks folded
 * into dp x cp), group member lists, the printout, and the communicators of
 * one rank's groups: every group of the run is made here (Megatron-Core's
 * parallel_state keeps them in one place too). */
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
    *m = (mesh){.dp = dp, .pp = pp, .tp = tp, .cp = cp, .ep = 1, .world = dp * cp * pp * tp};
    return 0;
}

int mesh_set_ep(mesh *m, int ep, char *err, size_t errlen)
{
    int dpcp = m->dp * (m->cp > 1 ? m->cp : 1);
    if (ep < 1 || dpcp % ep) {
        snprintf(err, errlen, "mesh: ep=%d must be >= 1 and divide dp x cp = %d (expert parallelism is folded into "
                 "the data-parallel ranks)", ep, dpcp);
        return -1;
    }
    m->ep = ep;
    return 0;
}

int mesh_init(mesh *m, int dp, int pp, int tp, char *err, size_t errlen)
{
    return mesh_init_cp(m, dp, 1, pp, tp, err, errlen);
}

int mesh_from_parallel(mesh *m, const job_parallel *par, char *err, size_t errlen)
{
    /* a job_parallel filled by hand may leave cp or ep 0: none */
    if (mesh_init_cp(m, par->dp, par->cp > 1 ? par->cp : 1, par->pp, par->tp, err, errlen)) return -1;
    return mesh_set_ep(m, par->ep > 1 ? par->ep : 1, err, errlen);
}

/* A mesh filled by hand (tests, older callers) may leave cp or ep 0: it means 1. */
static int cp_of(const mesh *m) { return m->cp > 1 ? m->cp : 1; }
static int ep_of(const mesh *m) { return m->ep > 1 ? m->ep : 1; }

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
    int j = c.dp * cp + c.cp; /* the place in the dp x cp group */
    c.ep = j % ep_of(m);
    c.edp = j / ep_of(m);
    return c;
}

/* The world rank at place j of rank c's dp x cp group. */
static int dp_cp_member(const mesh *m, mesh_coord c, int j)
{
    c.dp = j / cp_of(m);
    c.cp = j % cp_of(m);
    return mesh_rank(m, c);
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
    case MESH_EP:
        for (int i = 0; i < ep_of(m); i++)
            members[n++] = dp_cp_member(m, me, me.edp * ep_of(m) + i);
        break;
    case MESH_EDP:
        for (int i = 0; i < m->dp * cp_of(m) / ep_of(m); i++)
            members[n++] = dp_cp_member(m, me, i * ep_of(m) + me.ep);
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
        char cp[24] = "", ep[40] = "";
        if (cp_of(m) > 1) snprintf(cp, sizeof cp, " cp=%d", c.cp);
        if (ep_of(m) > 1) snprintf(ep, sizeof ep, " ep=%d edp=%d", c.ep, c.edp);
        fprintf(out, "rank %d node %d: dp=%d%s pp=%d tp=%d%s\n", r, r / ranks_per_node, c.dp, cp, c.pp, c.tp, ep);
    }
}

void mesh_comms_destroy(mesh_comms *mc)
{
    comm **all[] = {&mc->edp, &mc->ep, &mc->dp_cp, &mc->cp, &mc->dp_tp, &mc->pp, &mc->dp, &mc->tp};
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
    const mesh_dim dims[] = {MESH_TP, MESH_DP, MESH_PP, MESH_DP_TP, MESH_CP, MESH_DP_CP, MESH_EP, MESH_EDP};
    comm **slots[] = {&out->tp, &out->dp, &out->pp, &out->dp_tp, &out->cp, &out->dp_cp, &out->ep, &out->edp};
    int rc = COMM_OK;
    for (int i = 0; i < (int)(sizeof dims / sizeof dims[0]) && rc == COMM_OK; i++) {
        if ((dims[i] == MESH_CP || dims[i] == MESH_DP_CP) && cp_of(m) == 1) continue;
        if ((dims[i] == MESH_EP || dims[i] == MESH_EDP) && ep_of(m) == 1) continue;
        int n = mesh_group(m, rank, dims[i], members);
        rc = comm_group(world, members, n, slots[i], err, errlen);
    }
    free(members);
    if (rc != COMM_OK)
        mesh_comms_destroy(out);
    return rc;
}
