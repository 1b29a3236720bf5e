/* test_mesh.c — the process mesh as pure functions: rank <-> (dp, pp, tp) round
 * trips, the documented order (tp fastest, then dp, then pp), group member lists
 * for every dimension, and the printout the dry-run shows. Communicators of the
 * groups are exercised with real processes in test_comm.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/parallel/mesh.h"
#include "test/unit/check.h"

static int contains(const int *a, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (a[i] == x)
            return 1;
    return 0;
}

static void check_shape(int dp, int pp, int tp)
{
    mesh m;
    char err[256];
    CHECK(mesh_init(&m, dp, pp, tp, err, sizeof err) == 0 && m.world == dp * pp * tp,
          "mesh dp=%d pp=%d tp=%d has %d ranks", dp, pp, tp, dp * pp * tp);
    int ok_round = 1, ok_formula = 1, ok_groups = 1, ok_partition = 1;
    int *members = malloc((size_t)m.world * sizeof(int));
    int *seen = calloc((size_t)m.world, sizeof(int));
    for (int r = 0; r < m.world; r++) {
        mesh_coord c = mesh_coords(&m, r);
        if (mesh_rank(&m, c) != r || c.dp < 0 || c.dp >= dp || c.pp < 0 || c.pp >= pp ||
            c.tp < 0 || c.tp >= tp)
            ok_round = 0;
        if (r != (c.pp * dp + c.dp) * tp + c.tp)
            ok_formula = 0;
        /* Each group: right size, sorted, contains r, and its members differ
         * from r only along the group's dimensions. */
        const mesh_dim dims[] = {MESH_TP, MESH_DP, MESH_PP, MESH_DP_TP};
        const int sizes[] = {tp, dp, pp, dp * tp};
        for (int k = 0; k < 4; k++) {
            int n = mesh_group(&m, r, dims[k], members);
            if (n != sizes[k] || !contains(members, n, r))
                ok_groups = 0;
            for (int i = 0; i < n; i++) {
                mesh_coord o = mesh_coords(&m, members[i]);
                if (i > 0 && members[i] <= members[i - 1])
                    ok_groups = 0;
                if ((dims[k] != MESH_DP && dims[k] != MESH_DP_TP && o.dp != c.dp) ||
                    (dims[k] != MESH_TP && dims[k] != MESH_DP_TP && o.tp != c.tp) ||
                    (dims[k] != MESH_PP && o.pp != c.pp))
                    ok_groups = 0;
                /* group position == coordinate along that dimension */
                if ((dims[k] == MESH_TP && i != o.tp) || (dims[k] == MESH_DP && i != o.dp) ||
                    (dims[k] == MESH_PP && i != o.pp))
                    ok_groups = 0;
            }
        }
        /* tp groups partition the world: count each rank once via its group's
         * first member. */
        int n = mesh_group(&m, r, MESH_TP, members);
        if (members[0] == r)
            for (int i = 0; i < n; i++)
                seen[members[i]]++;
    }
    for (int r = 0; r < m.world; r++)
        if (seen[r] != 1)
            ok_partition = 0;
    CHECK(ok_round, "dp=%d pp=%d tp=%d: rank -> coords -> rank round-trips", dp, pp, tp);
    CHECK(ok_formula, "dp=%d pp=%d tp=%d: rank = (pp * dp + dp_i) * tp + tp_i", dp, pp, tp);
    CHECK(ok_groups, "dp=%d pp=%d tp=%d: tp/dp/pp/dp_tp groups hold the right members in order",
          dp, pp, tp);
    CHECK(ok_partition, "dp=%d pp=%d tp=%d: tp groups partition the world", dp, pp, tp);
    free(members);
    free(seen);
}

int main(void)
{
    check_shape(1, 1, 1);
    check_shape(8, 1, 1);
    check_shape(1, 1, 8);
    check_shape(1, 4, 1);
    check_shape(2, 2, 2);
    check_shape(3, 2, 4);
    check_shape(4, 8, 8);

    mesh m;
    char err[256];
    CHECK(mesh_init(&m, 2, 0, 2, err, sizeof err) != 0 && strstr(err, "pp=0"),
          "pp=0 is refused: %s", err);
    CHECK(mesh_init(&m, 1 << 16, 1 << 16, 2, err, sizeof err) != 0, "overflowing world refused");

    /* Known coordinates of the design example: dp2 pp2 tp2. */
    mesh_init(&m, 2, 2, 2, err, sizeof err);
    mesh_coord c = mesh_coords(&m, 5);
    CHECK(c.dp == 0 && c.pp == 1 && c.tp == 1, "rank 5 of dp2 pp2 tp2 is dp=0 pp=1 tp=1");
    int g[8];
    int n = mesh_group(&m, 5, MESH_TP, g);
    CHECK(n == 2 && g[0] == 4 && g[1] == 5, "rank 5's tp group is {4,5}");
    n = mesh_group(&m, 5, MESH_DP, g);
    CHECK(n == 2 && g[0] == 5 && g[1] == 7, "rank 5's dp group is {5,7}");
    n = mesh_group(&m, 5, MESH_PP, g);
    CHECK(n == 2 && g[0] == 1 && g[1] == 5, "rank 5's pp group is {1,5}");
    n = mesh_group(&m, 5, MESH_DP_TP, g);
    CHECK(n == 4 && g[0] == 4 && g[3] == 7, "rank 5's dp x tp group is {4..7}");

    /* The printout. */
    mesh_init(&m, 2, 1, 2, err, sizeof err);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mesh_print(&m, 2, f);
    fclose(f);
    CHECK(strcmp(buf, "rank 0 node 0: dp=0 pp=0 tp=0\n"
                      "rank 1 node 0: dp=0 pp=0 tp=1\n"
                      "rank 2 node 1: dp=1 pp=0 tp=0\n"
                      "rank 3 node 1: dp=1 pp=0 tp=1\n") == 0,
          "mesh_print: one line per rank with its node and coordinates");
    free(buf);

    job_parallel par = {.dp = 4, .tp = 2, .pp = 1};
    CHECK(mesh_from_parallel(&m, &par, err, sizeof err) == 0 && m.world == 8 && m.dp == 4,
          "mesh from the job's parallel section");

    /* context parallelism: tp fastest, then cp, then dp, then pp (Megatron-Core) */
    CHECK(mesh_init_cp(&m, 2, 2, 2, 2, err, sizeof err) == 0 && m.world == 16, "mesh dp2 x cp2 x pp2 x tp2");
    int ok_cp = 1;
    for (int r = 0; r < m.world; r++) {
        mesh_coord q = mesh_coords(&m, r);
        ok_cp = ok_cp && mesh_rank(&m, q) == r && q.tp == r % 2 && q.cp == r / 2 % 2 && q.dp == r / 4 % 2 &&
                q.pp == r / 8;
    }
    CHECK(ok_cp, "cp mesh: rank = ((pp * dp + dp_i) * cp + cp_i) * tp + tp_i, round trip");
    n = mesh_group(&m, 5, MESH_CP, g);
    CHECK(n == 2 && g[0] == 5 && g[1] == 7, "rank 5's cp group is {5, 7}");
    n = mesh_group(&m, 5, MESH_DP_CP, g);
    CHECK(n == 4 && g[0] == 1 && g[1] == 3 && g[2] == 5 && g[3] == 7,
          "rank 5's dp x cp group (the gradient reduction) is {1, 3, 5, 7} in (dp, cp) order");
    n = mesh_group(&m, 5, MESH_DP, g);
    CHECK(n == 2 && g[0] == 1 && g[1] == 5, "rank 5's dp group keeps its cp rank: {1, 5}");

    /* expert parallelism folded into dp x cp (MoE Parallel Folding): an ep
     * group is ep neighbours of a dp x cp group, the experts' data-parallel
     * group the ranks of that group with the same ep rank */
    CHECK(mesh_set_ep(&m, 3, err, sizeof err) != 0 && strstr(err, "ep=3"), "ep 3 does not divide dp x cp 4: %s", err);
    CHECK(mesh_set_ep(&m, 2, err, sizeof err) == 0 && m.ep == 2, "ep 2 over dp 2 x cp 2");
    n = mesh_group(&m, 5, MESH_EP, g);
    CHECK(n == 2 && g[0] == 5 && g[1] == 7, "rank 5 (dp x cp place 2) is in ep group {5, 7} (places 2, 3)");
    n = mesh_group(&m, 5, MESH_EDP, g);
    CHECK(n == 2 && g[0] == 1 && g[1] == 5, "rank 5's expert data-parallel group is {1, 5} (places 0, 2)");
    c = mesh_coords(&m, 7);
    CHECK(c.ep == 1 && c.edp == 1, "rank 7 is ep rank 1 of ep group 1");
    /* every rank: its ep group and its edp group meet in it alone, both inside
     * its dp x cp group, and its ep rank is its place in its ep group */
    int ok_ep = 1;
    for (int r = 0; r < m.world; r++) {
        int ge[16], gd[16], gc[16];
        int ne = mesh_group(&m, r, MESH_EP, ge), nd = mesh_group(&m, r, MESH_EDP, gd);
        int nc = mesh_group(&m, r, MESH_DP_CP, gc);
        mesh_coord q = mesh_coords(&m, r);
        int both = 0;
        for (int i = 0; i < ne; i++) both += contains(gd, nd, ge[i]);
        for (int i = 0; i < ne; i++) ok_ep = ok_ep && contains(gc, nc, ge[i]) && mesh_coords(&m, ge[i]).edp == q.edp;
        for (int i = 0; i < nd; i++) ok_ep = ok_ep && contains(gc, nc, gd[i]) && mesh_coords(&m, gd[i]).ep == q.ep;
        ok_ep = ok_ep && ne == 2 && nd == 2 && both == 1 && ge[q.ep] == r && gd[q.edp] == r;
    }
    CHECK(ok_ep, "ep x edp partitions every dp x cp group; the ep rank is the place in the ep group");
    /* without cp: ep 4 over dp 8, the ep groups are 4 consecutive ranks */
    par = (job_parallel){.dp = 8, .tp = 1, .pp = 2, .cp = 1, .ep = 4};
    CHECK(mesh_from_parallel(&m, &par, err, sizeof err) == 0 && m.ep == 4 && m.world == 16, "ep from the job");
    n = mesh_group(&m, 13, MESH_EP, g);
    CHECK(n == 4 && g[0] == 12 && g[3] == 15, "rank 13's ep group is {12..15}");
    n = mesh_group(&m, 13, MESH_EDP, g);
    CHECK(n == 2 && g[0] == 9 && g[1] == 13, "rank 13's expert data-parallel group is {9, 13}");
    par.ep = 16;
    CHECK(mesh_from_parallel(&m, &par, err, sizeof err) != 0, "ep 16 over dp 8 refused");
    mesh_init(&m, 4, 1, 1, err, sizeof err);
    mesh_set_ep(&m, 2, err, sizeof err);
    buf = NULL;
    f = open_memstream(&buf, &len);
    mesh_print(&m, 4, f);
    fclose(f);
    CHECK(strstr(buf, "rank 3 node 0: dp=3 pp=0 tp=0 ep=1 edp=1\n") != NULL, "mesh_print shows ep and edp");
    free(buf);
    CHECK_DONE();
}
