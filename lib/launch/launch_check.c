/* launch_check.c — the job against the launch, before anything is spawned
 * (launch_check.h). The rule itself is the worker's (lib/job/jobspec_layout.h). */
#include "lib/launch/launch_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec_layout.h"

/* "--nproc-per-node 2", "launch.nproc_per_node auto = 4", "--nproc-per-node 1 (the default)" */
static void describe_nproc(const launch_opts *o, unsigned cli_set, const job_spec *job, char *out, size_t n)
{
    const char *who = (cli_set & LAUNCH_SET_NPROC) ? "--nproc-per-node"
                      : job->launch.nproc_per_node[0] ? "launch.nproc_per_node"
                                                      : "--nproc-per-node";
    char value[48];
    if (atoi(o->nproc_spec) == o->nproc && strspn(o->nproc_spec, "0123456789") == strlen(o->nproc_spec))
        snprintf(value, sizeof value, "%d", o->nproc);
    else
        snprintf(value, sizeof value, "%s = %d", o->nproc_spec, o->nproc);
    int defaulted = !(cli_set & LAUNCH_SET_NPROC) && !job->launch.nproc_per_node[0];
    snprintf(out, n, "%s %s%s", who, value, defaulted ? " (the default)" : "");
}

static void describe_nnodes(const launch_opts *o, unsigned cli_set, const job_spec *job, char *out, size_t n)
{
    const char *who = (cli_set & LAUNCH_SET_NNODES) ? "--nnodes" : job->launch.nnodes[0] ? "launch.nnodes" : "--nnodes";
    if (o->nnodes_min == o->nnodes_max) snprintf(out, n, "%s %d", who, o->nnodes_max);
    else snprintf(out, n, "%s %d:%d", who, o->nnodes_min, o->nnodes_max);
}

int launch_check_world(const launch_opts *o, unsigned cli_set, const job_spec *job, char *err, size_t errlen)
{
    const job_parallel *par = &job->parallel;
    if (par->dp_auto) { /* the full-size round, as the dry-run plans it; the worker resolves the same */
        static job_spec resolved;
        resolved = *job;
        long long world = (long long)o->nproc * o->nnodes_max;
        return job_resolve_world(&resolved, world > 1000000000 ? 1000000000 : (int)world, err, errlen);
    }
    long long need = (long long)par->dp * par->tp * par->pp;
    int nodes = o->nnodes_max;
    /* elastic: the one node count in range that gives exactly `need` workers */
    if (o->nproc > 0 && need % o->nproc == 0 && need / o->nproc >= o->nnodes_min && need / o->nproc <= o->nnodes_max)
        return 0;
    char np[96], nn[64], from[200];
    describe_nproc(o, cli_set, job, np, sizeof np);
    describe_nnodes(o, cli_set, job, nn, sizeof nn);
    snprintf(from, sizeof from, "%s x %s", np, nn);
    long long world = (long long)o->nproc * nodes;
    return job_check_world(job, world > 1000000000 ? 1000000000 : (int)world, from, err, errlen);
}
