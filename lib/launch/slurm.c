/* slurm.c — derive launch options from SLURM_* variables. */
#include "lib/launch/slurm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/launch/hostlist.h"
#include "lib/util/errline.h"
#include "lib/util/range.h"

const char *slurm_getenv(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

/* The first of the names that is set, and which one it was. */
static const char *first_set(slurm_getenv_fn get, void *ctx, const char **which, const char *a,
                             const char *b, const char *c)
{
    const char *names[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        if (!names[i]) continue;
        const char *v = get(names[i], ctx);
        if (v && *v) {
            *which = names[i];
            return v;
        }
    }
    *which = a;
    return NULL;
}

static int parse_count(const char *name, const char *v, long lo, long hi, long *out, char *err,
                       size_t errlen)
{
    if (range_parse_long(v, lo, hi, out, NULL, 0))
        return errline(err, errlen, "Slurm: %s='%s' is not a number in %ld..%ld", name, v, lo, hi);
    return 0;
}

int slurm_apply(launch_opts *o, slurm_getenv_fn get, void *ctx, char *note, size_t notelen,
                char *err, size_t errlen)
{
    const char *job_id = get("SLURM_JOB_ID", ctx);
    if (!job_id || !*job_id) job_id = get("SLURM_JOBID", ctx);
    if (!job_id || !*job_id) return 0;
    if (note && notelen) note[0] = 0;
    long jid;
    if (parse_count("SLURM_JOB_ID", job_id, 0, 0x7fffffffL, &jid, err, errlen)) return -1;

    if (!(o->set & LAUNCH_SET_RDZV_ID)) {
        snprintf(o->rdzv_id, sizeof o->rdzv_id, "%ld", jid);
        o->set |= LAUNCH_SET_RDZV_ID;
    }
    if (o->standalone) return 1; /* the user asked for one node on its own */

    const char *step_nodes = get("SLURM_STEP_NUM_NODES", ctx);
    int in_step = step_nodes && *step_nodes;
    const char *which;
    const char *nn = first_set(get, ctx, &which, in_step ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES",
                               in_step ? NULL : "SLURM_JOB_NUM_NODES", NULL);
    long nnodes = o->nnodes_max;
    if (!(o->set & LAUNCH_SET_NNODES) && nn) {
        if (parse_count(which, nn, 1, LAUNCH_MAX_NODES, &nnodes, err, errlen)) return -1;
        if (nnodes > 1 && !in_step)
            return errline(err, errlen,
                           "Slurm job %ld has %ld nodes but dtrun runs outside an srun step, so only "
                           "this node would join; start one dtrun per node with `srun --ntasks-per-node=1 "
                           "dtrun ...` (see scripts/slurm/train.sbatch) or pass --nnodes=1",
                           jid, nnodes);
        o->nnodes_min = o->nnodes_max = (int)nnodes;
        o->set |= LAUNCH_SET_NNODES;
    }
    if (o->nnodes_max <= 1) {
        if (note) snprintf(note, notelen, "Slurm job %ld: one node", jid);
        return 1;
    }
    if (in_step) {
        /* Compare with Slurm's own node count: several tasks per node would
         * start several agents that all claim the same SLURM_NODEID. */
        long step_n, ntasks;
        const char *tasks = first_set(get, ctx, &which, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", NULL);
        if (parse_count("SLURM_STEP_NUM_NODES", step_nodes, 1, LAUNCH_MAX_NODES, &step_n, err, errlen))
            return -1;
        if (tasks) {
            if (parse_count(which, tasks, 1, 1L << 30, &ntasks, err, errlen)) return -1;
            if (ntasks > step_n)
                return errline(err, errlen,
                               "Slurm step runs %ld tasks on %ld nodes; dtrun must be one task per node "
                               "(srun --ntasks-per-node=1), it starts the workers itself",
                               ntasks, step_n);
        }
    }
    if (!(o->set & LAUNCH_SET_NODE_RANK)) {
        const char *nid = get("SLURM_NODEID", ctx);
        long r;
        if (nid && *nid) {
            if (parse_count("SLURM_NODEID", nid, 0, o->nnodes_max - 1, &r, err, errlen)) return -1;
            o->node_rank = (int)r;
            o->set |= LAUNCH_SET_NODE_RANK;
        }
    }
    if (!(o->set & LAUNCH_SET_ENDPOINT)) {
        const char *list = first_set(get, ctx, &which, in_step ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST",
                                     "SLURM_JOB_NODELIST", "SLURM_NODELIST");
        if (!list)
            return errline(err, errlen, "Slurm job %ld: SLURM_JOB_NODELIST is not set; give --rdzv-endpoint",
                           jid);
        char first[HOSTLIST_MAX_NAME + 1], why[512];
        if (hostlist_first(list, first, sizeof first, why, sizeof why) != 0)
            return errline(err, errlen, "Slurm: %s: %s", which, why);
        if (strlen(first) >= sizeof o->rdzv_host)
            return errline(err, errlen, "Slurm: %s: host '%s' is too long", which, first);
        snprintf(o->rdzv_host, sizeof o->rdzv_host, "%s", first);
        o->rdzv_port = LAUNCH_DEFAULT_RDZV_PORT + (int)(jid % 1000);
        snprintf(o->rdzv_endpoint, sizeof o->rdzv_endpoint, "%s:%d", o->rdzv_host, o->rdzv_port);
        o->set |= LAUNCH_SET_ENDPOINT;
    }
    if (note)
        snprintf(note, notelen, "Slurm job %ld: node %d of %d, rendezvous at %s:%d", jid, o->node_rank,
                 o->nnodes_max, o->rdzv_host, o->rdzv_port);
    return 1;
}
