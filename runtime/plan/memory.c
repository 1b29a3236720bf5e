/* memory.c — per pipeline stage: what sizes.h says the worker allocates, plus the
 * fixed overheads a GPU process pays, against the memory one rank may use. */
#include <stdio.h>

#include "runtime/plan/estimate.h"
#include "runtime/plan/format.h"

/* On a GPU a rank has its device; on the CPU backend the ranks of a host share
 * its memory. */
static double rank_device_memory(const plan_estimate *e)
{
    if (e->hw.gpu) return e->hw.memory;
    return e->hw.memory / e->ranks_per_node;
}

/* train.offload on a GPU: the node's ranks' host pools (each as large as the
 * fullest stage's, to be safe) against the node's host memory. On the CPU
 * backend the host pool is the same memory as the rest: plan_memory adds it
 * to each stage's total instead. */
static void check_host_memory(plan_estimate *e, double host_max)
{
    if (!e->hw.gpu || host_max <= 0) return;
    double need = host_max * e->ranks_per_node;
    if (e->hw.host_memory > 0 && need <= e->hw.host_memory) return;
    e->fits = 0;
    char a[FMT_LEN], b[FMT_LEN], c[FMT_LEN];
    if (e->hw.host_memory > 0)
        plan_warn(e, "host memory: train.offload keeps %s per node in host memory (%d ranks x %s), the node has %s",
                  fmt_bytes(a, need), e->ranks_per_node, fmt_bytes(b, host_max), fmt_bytes(c, e->hw.host_memory));
    else
        plan_warn(e, "host memory: train.offload keeps %s per node in host memory and the hardware profile does "
                     "not say how much a node has (host_memory_mib)",
                  fmt_bytes(a, need));
}

void plan_memory(plan_estimate *e)
{
    e->fits = 1;
    e->max_total = 0;
    double device = rank_device_memory(e), host_max = 0;
    for (int p = 0; p < e->n_stages; p++) {
        plan_stage *st = &e->stage[p];
        st->pp_rank = p;
        st->tp_rank = sizes_worst_tp_rank(e->sizes, p);
        sizes_rank_memory(e->sizes, (sizes_at){0, p, st->tp_rank}, &st->mem);
        st->fixed = e->hw.gpu ? hw_fixed_overhead(&e->hw) : 0;
        st->total = (double)st->mem.total + st->fixed + (e->hw.gpu ? 0 : (double)st->mem.host);
        if ((double)st->mem.host > host_max) host_max = (double)st->mem.host;
        st->device = device;
        st->oom = st->total > device;
        if (st->total > e->max_total) e->max_total = st->total;
        if (st->oom) {
            e->fits = 0;
            char need[FMT_LEN], have[FMT_LEN], state[FMT_LEN], acts[FMT_LEN];
            plan_warn(e, "OOM on pipeline stage %d: %s needed, %s on the device (%s %s, activations %s)", p,
                      fmt_bytes(need, st->total), fmt_bytes(have, device),
                      e->job.parallel.mode == SHARD_NONE ? "model state" : "sharded state",
                      fmt_bytes(state, (double)(st->mem.bytes[SIZES_PARAMS] + st->mem.bytes[SIZES_MASTER] +
                                                st->mem.bytes[SIZES_GRADS] + st->mem.bytes[SIZES_OPTIM])),
                      fmt_bytes(acts, (double)(st->mem.bytes[SIZES_ACTS] + st->mem.bytes[SIZES_LOGITS])));
        }
    }
    check_host_memory(e, host_max);
}
