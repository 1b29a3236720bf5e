/* slurm.h — launch options from a Slurm allocation.
 *
 * Inside an allocation (SLURM_JOB_ID set), options that neither the command line
 * nor the job file gave come from Slurm:
 *   --nnodes         SLURM_STEP_NUM_NODES inside an srun step, else SLURM_NNODES
 *                    (or SLURM_JOB_NUM_NODES)
 *   --node-rank      SLURM_NODEID
 *   --rdzv-endpoint  the first host of SLURM_STEP_NODELIST (in a step) or
 *                    SLURM_JOB_NODELIST, port 29400 + SLURM_JOB_ID mod 1000 so two
 *                    jobs that share a node do not meet at the same port
 *   --rdzv-id        SLURM_JOB_ID
 * dtrun runs as one agent per node (srun --ntasks-per-node=1, see
 * scripts/slurm/train.sbatch). Several nodes outside an srun step, or several
 * tasks per node, is an error that says so: only one node would ever join. */
#ifndef DTRUN_SLURM_H
#define DTRUN_SLURM_H

#include <stddef.h>

#include "lib/launch/launch_opts.h"

/* Looks a variable up; NULL when unset. getenv-like, for tests. */
typedef const char *(*slurm_getenv_fn)(const char *name, void *ctx);

/* 0: not inside Slurm, nothing changed. 1: options filled from Slurm (what
 * was derived is one line in note, e.g. "Slurm job 42: node 1 of 4, rendezvous
 * at node001:29442"). -1: bad or inconsistent Slurm environment, one line in err. */
int slurm_apply(launch_opts *o, slurm_getenv_fn get, void *ctx, char *note, size_t notelen,
                char *err, size_t errlen);

/* getenv(3) as a slurm_getenv_fn. */
const char *slurm_getenv(const char *name, void *ctx);

#endif
