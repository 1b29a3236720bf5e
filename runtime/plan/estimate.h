/* estimate.h — everything the dry-run prints about one job on one machine.
 *
 * An estimate is computed in two phases so the planner can drop a layout that does
 * not fit before it pays for the pipeline simulation:
 *   plan_estimate_memory  the mesh, the stage split (sizes.h) and, per pipeline
 *                         stage, memory by category + fixed overheads vs device;
 *   plan_estimate_time    FLOPs, communication per group and its link, the
 *                         simulated pipeline (pp_sim on the real schedule with
 *                         per-chunk costs), step time, MFU, throughput.
 * Warnings are collected on the way. Memory numbers come from sizes.h unchanged,
 * so a run's measured peak per category can be compared against them directly.
 *
 * Units: bytes, FLOPs, seconds, all per step (one optimizer step over
 * global_batch samples) and per rank unless a name says otherwise. */
#ifndef DTRUN_PLAN_ESTIMATE_H
#define DTRUN_PLAN_ESTIMATE_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "runtime/parallel/mesh.h"
#include "runtime/parallel/pp_sim.h"
#include "runtime/parallel/sizes.h"
#include "runtime/plan/hardware.h"

/* Communication groups. HSDP splits dp into a shard group inside a node and a
 * replica group across nodes; EMBED is GPT's tied-embedding all-reduce between the
 * first and the last pipeline stage. */
typedef enum {
    GROUP_DP = 0,  /* dp (or HSDP's shard part) */
    GROUP_DP_REPLICA,
    GROUP_TP,
    GROUP_PP,
    GROUP_EMBED,
    GROUP_CP,      /* context parallel's ring (parallel.cp) */
    GROUP_EP,      /* expert parallel's all-to-all (parallel.ep): the routed tokens */
    GROUP_EDP,     /* the experts' data-parallel group: their gradients (parallel.ep) */
    GROUP_COUNT
} plan_group;

typedef struct {
    const char *op;   /* what runs, e.g. "all-reduce", "reduce-scatter + all-gather"; NULL: none */
    int size;         /* ranks in the group */
    double bytes;     /* sent per rank per step (bus volume: 2(n-1)/n x data for an all-reduce) */
    long calls;       /* collectives or messages per step */
    int inter_node;   /* the group crosses nodes: the slower link */
    double bandwidth; /* bytes/s of that link, per rank */
    double time;      /* seconds on the link per step */
    double exposed;   /* of which not hidden behind compute */
    int peers_off_node; /* GROUP_EP: of its ep - 1 peers, those on other nodes */
} plan_comm;

typedef struct {
    int pp_rank;
    int tp_rank;          /* the tp rank reported: the one with the most memory */
    sizes_memory mem;     /* sizes_rank_memory at (dp 0, pp_rank, tp_rank) */
    double fixed;         /* CUDA context + NCCL (world > 1) + cuBLAS workspace + the backend's scratch
                             and (bf16) GEMM operand buffers: plan_memory */
    double total;         /* mem.total + fixed */
    double device;        /* memory one rank may use */
    int oom;              /* total > device */
    double flops;         /* executed per step (recompute counted) */
    double compute;       /* s: forward + backward compute per step */
    double optimizer;     /* s: the AdamW step (memory bound) */
    double exposed_once;  /* s: once-per-step communication not hidden (dp, embed) */
    plan_comm comm[GROUP_COUNT];
} plan_stage;

#define PLAN_WARN_MAX 16
#define PLAN_WARN_LEN 256

typedef struct {
    job_spec job;
    hw_profile hw;
    int nnodes, ranks_per_node, world;
    int mixed;               /* bf16 compute + fp32 master */
    mesh mesh;
    sizes *sizes;
    int n_stages;
    plan_stage *stage;       /* [pp] */
    int fits;                /* no stage OOM */
    double max_total;        /* the largest stage total, bytes */
    double headroom;         /* bytes a rank keeps free for what no estimate counts (hw_headroom) */
    int fits_headroom;       /* fits, and every stage leaves the headroom free: what --plan proposes */
    /* time (plan_estimate_time) */
    int timed;
    double peak;             /* FLOP/s per rank */
    double model_flops;      /* per step, whole job: model_flops_per_sample(none) x global_batch */
    double exec_flops;       /* what runs: with recompute, and the chunked GPT head's
                                second logits GEMM (model_exec_flops_per_sample) */
    double makespan;         /* s: the pipeline (or the micro-batch loop) */
    double bubble;           /* idle / makespan, mean over pp ranks (0 with pp = 1) */
    double p2p;              /* s per pipeline message */
    double step_time;        /* s */
    double mfu, hfu;         /* model / executed FLOPs per second over world x peak */
    double compute_eff;      /* executed FLOPs over compute time (GEMMs at their efficiency + memory-bound
                                ops), of peak: the best stage's */
    double samples_per_s, tokens_per_s;
    int has_sim;
    pp_sim_result sim;       /* with pp > 1: time unit = milliseconds */
    int n_warnings;
    char warnings[PLAN_WARN_MAX][PLAN_WARN_LEN];
} plan_estimate;

/* nnodes and ranks_per_node as the run will have them (the caller resolves flags,
 * the job's launch section and the profile). The job must pass job_validate.
 * 0, or -1 with one line in err; plan_estimate_free in both cases. */
int plan_estimate_memory(plan_estimate *e, const job_spec *job, const hw_profile *hw, int nnodes,
                         int ranks_per_node, char *err, size_t errlen);
/* The same, sharing what it can with an earlier estimate's sizes (sizes.h's
 * sizes_create_reusing); donor may be NULL. slots_only: the pipeline's action
 * lists are not built (sizes_env.slots_only), so only plan_estimate_time_bound
 * may follow. */
int plan_estimate_memory_reusing(plan_estimate *e, const job_spec *job, const hw_profile *hw, int nnodes,
                                 int ranks_per_node, const sizes *donor, int slots_only, char *err,
                                 size_t errlen);
int plan_estimate_time(plan_estimate *e, char *err, size_t errlen);
/* The same without simulating the pipeline: makespan, step time and throughput
 * are bounds (step time never above the simulated one, bubble left 0), enough for
 * the planner to drop a layout that cannot reach its top list. */
int plan_estimate_time_bound(plan_estimate *e, char *err, size_t errlen);
void plan_estimate_free(plan_estimate *e);
/* planner.c: from e, a layout without train.offload, the least any stage's device
 * total can be with the optimizer and / or the parameter shards offloaded (each
 * stage's total less its model state): --plan skips the offload retries this
 * rules out. */
double plan_offload_floor(const plan_estimate *e);

/* Node of a world rank: nodes hold ranks_per_node consecutive ranks. */
int plan_node_of(const plan_estimate *e, int rank);

void plan_warn(plan_estimate *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the parts (memory.c, comm_volume.c, step_time.c) ---- */
/* Per stage memory, fixed overheads, device size, OOM flags. */
void plan_memory(plan_estimate *e);
/* Per stage communication volume, link and time (exposure is step_time's). */
void plan_comm_volume(plan_estimate *e);
/* Context parallelism: bytes of one rank's k and v of a micro-batch, what one
 * step of the ring sends (its kv heads, the activations' type), and of their
 * gradient (fp32) (comm_volume.c). */
double plan_cp_kv_bytes(const plan_estimate *e);
double plan_cp_dkv_bytes(const plan_estimate *e);
/* Expert parallelism: the bytes of one all-to-all of an MoE block's routed
 * rows per micro-batch that leave this rank ((ep - 1) / ep of them:
 * sizes_moe_routed_rows x d_model, in the activations' type, forward and
 * backward alike, as tp's collectives carry them), and the seconds one
 * takes on the links of c (GROUP_EP's: its peers on and off the node)
 * (comm_volume.c). */
double plan_ep_a2a_bytes(const plan_estimate *e);
double plan_ep_a2a_time(const plan_estimate *e, const plan_comm *c);
/* Expert parallelism's data-parallel side (the ep strategy's rules,
 * strategy.h): the elements of `unit` on tp rank tp_rank that go over the
 * experts' data-parallel group instead of dp's: with DDP (its buckets keep
 * them apart) the routed experts alone, with a sharded mode the whole expert
 * unit, whose dense part's shard is then summed over ep; 0 for other units
 * and with ep 1. And the size of that group (1 when nothing is reduced). */
double plan_edp_numel(const plan_estimate *e, int unit, int tp_rank);
int plan_edp_group(const plan_estimate *e);
/* Chunk costs, the pipeline simulation (or with simulate = 0 its lower bound),
 * exposure, step time, MFU. */
int plan_step_time(plan_estimate *e, int simulate, char *err, size_t errlen);
/* Does group `g` of world rank `rank` cross nodes? */
int plan_group_crosses(const plan_estimate *e, int rank, mesh_dim dim);

#endif
