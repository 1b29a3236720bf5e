/* test_slurm.c — launch options from a Slurm allocation's environment. */
#include <string.h>

#include "lib/launch/slurm.h"
#include "test/unit/check.h"

typedef struct { const char *const *vars; } fake_env; /* "NAME=VALUE", NULL-terminated */

static const char *fake_get(const char *name, void *ctx)
{
    const fake_env *f = ctx;
    size_t n = strlen(name);
    for (const char *const *v = f->vars; *v; v++)
        if (!strncmp(*v, name, n) && (*v)[n] == '=') return *v + n + 1;
    return NULL;
}

static launch_opts o;
static char note[512], err[512];

static int apply(const char *const *vars)
{
    fake_env f = {vars};
    note[0] = err[0] = 0;
    return slurm_apply(&o, fake_get, &f, note, sizeof note, err, sizeof err);
}

int main(void)
{
    launch_opts_defaults(&o);
    const char *none[] = {"HOME=/root", NULL};
    CHECK(apply(none) == 0 && o.nnodes_max == 1 && !o.rdzv_host[0], "outside Slurm nothing changes");

    const char *step[] = {"SLURM_JOB_ID=4242", "SLURM_NNODES=8", "SLURM_STEP_NUM_NODES=3",
                          "SLURM_STEP_NUM_TASKS=3", "SLURM_NODEID=2",
                          "SLURM_JOB_NODELIST=gpu[001-008]", "SLURM_STEP_NODELIST=gpu[004-006]", NULL};
    launch_opts_defaults(&o);
    CHECK(apply(step) == 1, "inside a step: %s", err);
    CHECK(o.nnodes_min == 3 && o.nnodes_max == 3, "nnodes from SLURM_STEP_NUM_NODES: %d", o.nnodes_max);
    CHECK(o.node_rank == 2, "node rank from SLURM_NODEID");
    CHECK(!strcmp(o.rdzv_host, "gpu004") && o.rdzv_port == 29400 + 242,
          "endpoint: first host of the step's nodes, port from the job id: %s:%d", o.rdzv_host, o.rdzv_port);
    CHECK(!strcmp(o.rdzv_id, "4242"), "rdzv id = SLURM_JOB_ID");
    CHECK(strstr(note, "node 2 of 3") && strstr(note, "gpu004:29642"), "note: %s", note);
    char e2[512];
    CHECK(launch_opts_finish(&o, e2, sizeof e2) == 0 || strstr(e2, "nothing to run"), "consistent: %s", e2);

    launch_opts_defaults(&o);
    o.set |= LAUNCH_SET_NNODES | LAUNCH_SET_ENDPOINT | LAUNCH_SET_RDZV_ID | LAUNCH_SET_NODE_RANK;
    o.nnodes_min = o.nnodes_max = 2;
    snprintf(o.rdzv_host, sizeof o.rdzv_host, "mine");
    snprintf(o.rdzv_id, sizeof o.rdzv_id, "myid");
    o.node_rank = 1;
    CHECK(apply(step) == 1 && o.nnodes_max == 2 && !strcmp(o.rdzv_host, "mine") && !strcmp(o.rdzv_id, "myid") &&
              o.node_rank == 1, "explicit options win over Slurm");

    const char *batch[] = {"SLURM_JOB_ID=7", "SLURM_NNODES=4", "SLURM_NODEID=0",
                           "SLURM_JOB_NODELIST=n[1-4]", NULL};
    launch_opts_defaults(&o);
    CHECK(apply(batch) == -1 && strstr(err, "outside an srun step") && strstr(err, "--ntasks-per-node=1"),
          "several nodes outside a step is an error that says what to do: %s", err);

    const char *one[] = {"SLURM_JOB_ID=7", "SLURM_JOB_NUM_NODES=1", "SLURM_JOB_NODELIST=n1", NULL};
    launch_opts_defaults(&o);
    CHECK(apply(one) == 1 && o.nnodes_max == 1 && !o.rdzv_host[0] && !strcmp(o.rdzv_id, "7"),
          "one node: no endpoint (a local daemon), rdzv id from the job");

    const char *tasks[] = {"SLURM_JOB_ID=7", "SLURM_STEP_NUM_NODES=2", "SLURM_STEP_NUM_TASKS=16",
                           "SLURM_NODEID=0", "SLURM_STEP_NODELIST=n[1-2]", NULL};
    launch_opts_defaults(&o);
    CHECK(apply(tasks) == -1 && strstr(err, "one task per node"), "8 tasks per node: %s", err);

    const char *badlist[] = {"SLURM_JOB_ID=7", "SLURM_STEP_NUM_NODES=2", "SLURM_NODEID=0",
                             "SLURM_STEP_NODELIST=n[3-1]", NULL};
    launch_opts_defaults(&o);
    CHECK(apply(badlist) == -1 && strstr(err, "SLURM_STEP_NODELIST"), "bad host list names the variable: %s", err);

    const char *badrank[] = {"SLURM_JOB_ID=7", "SLURM_STEP_NUM_NODES=2", "SLURM_NODEID=5",
                             "SLURM_STEP_NODELIST=n[1-2]", NULL};
    launch_opts_defaults(&o);
    CHECK(apply(badrank) == -1 && strstr(err, "SLURM_NODEID"), "node id out of range: %s", err);

    const char *badid[] = {"SLURM_JOB_ID=abc", NULL};
    launch_opts_defaults(&o);
    CHECK(apply(badid) == -1 && strstr(err, "SLURM_JOB_ID"), "bad job id: %s", err);

    launch_opts_defaults(&o);
    o.standalone = 1;
    CHECK(apply(batch) == 1 && o.nnodes_max == 1 && !strcmp(o.rdzv_id, "7"), "--standalone ignores the allocation's nodes");
    CHECK_DONE();
}
