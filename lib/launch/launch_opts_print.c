/* launch_opts_print.c — the resolved options as "name: value" lines, for
 * --print-config. */
#include <stdio.h>
#include <string.h>

#include "lib/launch/launch_opts.h"

static void print_std(FILE *out, const char *name, const launch_std_spec *s)
{
    fprintf(out, "%s: ", name);
    int any = 0;
    for (int r = 0; r < LAUNCH_MAX_LOCAL; r++) {
        if (!s->in_map[r]) continue;
        fprintf(out, "%s%d:%d", any ? "," : "", r, s->by_rank[r]);
        any = 1;
    }
    if (!any) fprintf(out, "%d", (int)s->all);
    fputc('\n', out);
}

void launch_opts_print(const launch_opts *o, FILE *out)
{
    fprintf(out, "nproc_per_node: %d  # %s\n", o->nproc, o->nproc_spec);
    if (o->nnodes_min == o->nnodes_max) fprintf(out, "nnodes: %d\n", o->nnodes_max);
    else fprintf(out, "nnodes: %d:%d\n", o->nnodes_min, o->nnodes_max);
    fprintf(out, "node_rank: %d\n", o->node_rank);
    fprintf(out, "rdzv_backend: %s\n", o->rdzv_backend);
    if (o->rdzv_host[0])
        fprintf(out, "rdzv_endpoint: %s%s%s:%d\n", strchr(o->rdzv_host, ':') ? "[" : "", o->rdzv_host,
                strchr(o->rdzv_host, ':') ? "]" : "", o->rdzv_port);
    else fprintf(out, "rdzv_endpoint: \"\"  # this node, a free port\n");
    fprintf(out, "rdzv_id: %s\n", o->rdzv_id);
    fprintf(out, "rdzv_conf: join_timeout=%g,last_call_timeout=%g,close_timeout=%g,"
            "heartbeat_timeout=%g,keep_alive_interval=%g,read_timeout=%g\n",
            o->rdzv_conf.join_timeout, o->rdzv_conf.last_call_timeout, o->rdzv_conf.close_timeout,
            o->rdzv_conf.heartbeat_timeout, o->rdzv_conf.keep_alive_interval, o->rdzv_conf.read_timeout);
    fprintf(out, "standalone: %d\n", o->standalone);
    fprintf(out, "master_addr: \"%s\"\nmaster_port: %d\n", o->master_addr, o->master_port);
    fprintf(out, "max_restarts: %d\n", o->max_restarts);
    fprintf(out, "monitor_interval: %g\nterm_timeout: %g\n", o->monitor_interval, o->term_timeout);
    fprintf(out, "log_dir: \"%s\"\n", o->log_dir);
    print_std(out, "redirects", &o->redirects);
    print_std(out, "tee", &o->tee);
    fprintf(out, "role: %s\n", o->role);
}

