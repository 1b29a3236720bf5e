/* sizes.h — what a worker holds in memory, per category: THE sizing functions.
 *
 * One source of truth for costs (DESIGN.md): every parallel strategy allocates its
 * buffers by asking here, and `dtrun --dry-run` prints the very same numbers. A
 * strategy that allocates a buffer whose size does not come from one of these
 * functions breaks the dry-run's promise; add the function here first.
 *
 *   who allocates                 asks
 *   model_create (params, grads)  sizes_unit_numel            (full tp-local unit)
 *   FSDP / HSDP param shard       sizes_shard(PARAM)          (comm_chunk of the unit)
 *   FSDP gather buffers           sizes_gather_numel x sizes_gather_buffers
 *   train.lora's frozen base      sizes_unit_frozen_numel, sizes_frozen_shard (FSDP),
 *                                 sizes_frozen_gather_numel
 *   ZeRO-2 / FSDP grad shard      sizes_shard(GRAD)
 *   ZeRO-2 reduce buffers         sizes_reduce_numel x sizes_reduce_buffers
 *   optimizer state (optim_create lo/hi), fp32 master
 *                                 sizes_shard(OPTIM)
 *   DDP / ZeRO-1 buckets          sizes_bucket_numel
 *   pipeline engine               sizes_first_unit (its chunks), sizes_chunk_acts_bytes
 *                                 and one model_acts per (chunk, microbatch) alive
 *                                 from its FORWARD to its BACKWARD (at most
 *                                 sizes_acts_slots(chunk) of a chunk at once): a
 *                                 fixed pool of that many per local chunk, their
 *                                 stashes their own or lent by one pool of the
 *                                 rank (sizes_stash_bytes); one working set per
 *                                 chunk whose scratch part the chunks share
 *   model_acts host loss buffers  sizes_acts_host_bytes       (per model_acts)
 *   engine's host batch buffers   sizes_batch_samples         (sizes_batch_bytes)
 *   train.cuda_graphs' inputs and scalars (device)  sizes_graph_bytes
 *   tied wte scratch (GPT, pp>1)  sizes_tied_scratch_numel
 *   tp bf16 staging (tp>1, bf16)  sizes_tp_stage_numel
 *   MoE dispatcher (ep>1)         sizes_ep_stage_numel (at the priced rows)
 *
 * Precision. With train.precision fp32 everything is fp32: params 4 + grads 4 +
 * Adam m 4 + v 4 = 16 bytes per parameter. With train.precision bf16 (mixed
 * precision, on a GPU or the CPU backend): bf16 working params 2 + grads 2 (bf16)
 * or 4 (train.grad_dtype fp32) + fp32 master 4 + m 4 + v 4 = 16 or 18 bytes per
 * parameter, the master living with the optimizer state; under zero1 the master,
 * m and v are sharded: 6 + 12/dp with fp32 gradients, as Megatron's distributed
 * optimizer documents. Gradient collectives run in parallel.reduce_dtype: a DDP
 * bucket holds that type, and a ZeRO-2 / FSDP gradient buffer of another type
 * has a twin of it. The fp32 working copies the model computes from
 * (sizes_mixed_work_bytes) are workspace. Activations are what model_acts_bytes
 * says (the model owns their layout and element type).
 *
 * Sharding over data parallelism (per unit, so a strategy gathers or reduces one
 * unit with one call; the split is comm_chunk's: ceil(n / S) elements per rank,
 * the last ones short, so the same slice is what reduce_scatter hands a rank):
 *   none (DDP)  nothing sharded
 *   zero1       fp32 master + m + v over dp
 *   zero2       + gradients over dp
 *   fsdp        + working params over dp
 *   hsdp        like fsdp over the data-parallel ranks of one node (S = gcd(dp,
 *               ranks_per_node / tp)), replicated across nodes
 *
 * With pp = 1 the trainer runs the micro-batches one after the other with a single
 * model_acts: one slot whatever pp_schedule says. Pure: no device, no I/O. */
#ifndef DTRUN_SIZES_H
#define DTRUN_SIZES_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "runtime/parallel/pp_schedule.h"
#include "runtime/model/model.h"

/* Where the job runs. */
typedef struct {
    int gpu;            /* 1: CUDA backend (host buffers are not device memory) */
    int ranks_per_node; /* LOCAL_WORLD_SIZE; HSDP shards inside a node. < 1: world */
    int slots_only;     /* 1: do not build the pipeline's action lists, only count the
                           activation slots from the same generator (the planner's
                           memory pass); sizes_schedule is then NULL */
} sizes_env;

/* A worker's place in the mesh (runtime/parallel/mesh.h). */
typedef struct {
    int dp, pp, tp; /* ranks along each dimension */
} sizes_at;

typedef enum {
    SIZES_PARAMS = 0, /* working parameters (bf16 under mixed precision, else fp32) */
    SIZES_MASTER,     /* fp32 master weights (mixed precision only) */
    SIZES_GRADS,      /* gradients, working precision */
    SIZES_OPTIM,      /* Adam m and v, fp32 */
    SIZES_ACTS,       /* activations kept for backward + the model's scratch, all in-flight microbatches */
    SIZES_LOGITS,     /* what the head adds over a stage without it: its input and loss
                         statistics per micro-batch in flight, and (GPT) its one chunk of
                         logits (and their gradient) in the shared working set */
    SIZES_COMM,       /* DDP/ZeRO-1 bucket, ZeRO-2 reduce buffers, FSDP gather buffers, tied wte scratch */
    SIZES_WORKSPACE,  /* host loss buffers of every model_acts + the host batch buffers
                         (the same memory as the rest on the CPU backend; 0 on a GPU) */
    SIZES_COUNT
} sizes_category;

typedef struct {
    size_t bytes[SIZES_COUNT];
    size_t total; /* sum of the categories: what the worker allocates, fixed overheads aside */
    size_t host;  /* train.offload: host memory instead (AdamW m and v, the fp32
                     master, the step's host staging; with params the parameter
                     shards too); not in total */
    size_t host_params; /* of which the parameter shards (train.offload: params) */
} sizes_memory;

/* What is sharded: working params, grads, or master + optimizer state. */
typedef enum { SHARD_OF_PARAM = 0, SHARD_OF_GRAD, SHARD_OF_OPTIM } sizes_shard_of;

typedef struct sizes sizes;

/* Builds the stage split (pp_partition over per-unit FLOPs) and, with pp > 1, the
 * schedule. The job must be valid (job_validate). NULL with one line in err. */
sizes *sizes_create(const job_spec *job, const sizes_env *env, char *err, size_t errlen);
/* The same, sharing the stage split and the schedule with `donor` (may be NULL)
 * where they would come out identical: for searches over many layouts. The donor
 * may be destroyed first; what is shared lives on. */
sizes *sizes_create_reusing(const job_spec *job, const sizes_env *env, const sizes *donor, char *err,
                            size_t errlen);
void sizes_destroy(sizes *s);

const job_spec *sizes_job(const sizes *s);
int sizes_mixed(const sizes *s);             /* bf16 working copies + fp32 master */
size_t sizes_param_elem_bytes(const sizes *s); /* 2 or 4 */
size_t sizes_grad_elem_bytes(const sizes *s);  /* 2 or 4: train.grad_dtype */
size_t sizes_reduce_elem_bytes(const sizes *s); /* 2 or 4: parallel.reduce_dtype, what gradient collectives carry */
/* Mixed precision: what a rank's chunks hold in fp32 working copies besides
 * their state, once for all of them (the chunks share one set:
 * model_share_mixed_work, model_mixed_work_bytes): the largest unit of any of
 * its chunks widened (train.lora: with its frozen tensors) and, with bf16
 * gradients, the fp32 micro-batch gradient of the largest unit's trainable
 * tensors; and with bf16 gradients, per chunk, the optimizer's scratch that
 * widens them for the norm (its widest slice, at most OPTIM_SCRATCH_NUMEL
 * floats). 0 in fp32. */
size_t sizes_mixed_work_bytes(const sizes *s, sizes_at at);

/* ---- the pipeline split ---- */
int sizes_chunks(const sizes *s);                /* pp * virtual_stages */
const int *sizes_first_unit(const sizes *s);     /* [chunks + 1], as pp_partition */
const pp_schedule *sizes_schedule(const sizes *s); /* NULL when pp = 1 or slots_only */
/* FLOPs of one sample through `unit`, forward + backward (+ recompute's forward,
 * and the GPT head's logits computed again in its backward): the terms of
 * model_exec_flops_per_sample, unit by unit (they add up to it exactly). */
double sizes_unit_flops(const job_model *m, int unit, recompute_kind rc);

/* The work of one micro-batch through `unit` on one tp rank, for the step-time
 * model: its GEMMs by shape (each with its smallest dimension, which decides how
 * close to peak it runs) and the bytes its memory-bound ops move (layer norms,
 * softmax, GELU, residual adds, the head's cross-entropy). Forward and backward
 * apart; backward includes what recompute re-runs (the chunked GPT head's
 * logits always). The FLOPs of all the GEMMs of
 * a unit, times tp, are sizes_unit_flops x micro_batch exactly. */
#define SIZES_GEMM_MAX 8
typedef struct {
    double fwd_flops, bwd_flops; /* this tp rank, one micro-batch */
    double dim;                  /* the smallest of its m, n, k on this tp rank */
    double w_flops;              /* of bwd_flops, the weight gradient a zero-bubble
                                    pipeline's W pass runs (model.h: the blocks'
                                    four matmuls, fwd_flops each; else 0) */
    int attention;               /* a block's attention core (score and value
                                    products), its FLOPs counted whole as the
                                    model's are (no causal mask); dim is then the
                                    head size or the key block, if smaller */
    double keys;                 /* attention: the keys one call sees (seq, or the
                                    cp ring's block seq / (2 cp)) */
} sizes_gemm;
typedef struct {
    int n_gemm;
    sizes_gemm gemm[SIZES_GEMM_MAX];
    double fwd_bytes, bwd_bytes; /* memory-bound traffic, this tp rank, one micro-batch */
} sizes_unit_work;
/* elem_bytes: the working precision's element (2 under bf16, 4 in fp32); sp:
 * sequence parallelism (the replicated norms and residual adds run on 1/tp). */
void sizes_unit_work_of(const job_model *m, int unit, recompute_kind rc, int micro_batch, int tp, int sp,
                        double elem_bytes, sizes_unit_work *out);
/* The same on one of cp context-parallel ranks: its 1/cp of the tokens, its
 * 1/cp share of the (load-balanced) causal attention in key blocks of
 * seq / (2 cp), no selective recompute (nothing kept to redo, as with fused
 * attention, model_attention_lse). */
void sizes_unit_work_cp(const job_model *m, int unit, recompute_kind rc, int micro_batch, int tp, int sp, int cp,
                        double elem_bytes, sizes_unit_work *out);
/* The same with expert parallelism over ep ranks (parallel.ep; 1: none).
 * An MoE block (model.moe) runs, after its attention: the router [E, C],
 * the routed experts' two grouped GEMMs over the rows its top_k choices
 * send them (top_k x the rows it routes, or capacity_factor x that when
 * below 1: the even load a balanced router gives every expert, whatever ep;
 * with ep a rank's experts get their rows from its whole ep group, so each
 * local expert's GEMM has top_k x rows x ep / E rows: ep makes them larger,
 * not more), and the shared experts' MLP. Its GEMMs are, in this order:
 * qkv, proj, the experts' first and second GEMM, the attention core, the
 * router, the shared experts' first and second GEMM (when there are any).
 * The experts are replicated over tp (params.c moe_spec): under sequence
 * parallelism each tp rank routes its own rows, without it every tp rank
 * routes them all. Memory-bound: the dispatch's and the combine's copies of
 * the routed rows, the experts' activation, the router's softmax. The
 * all-to-all of expert parallelism is the planner's (comm_volume.c). */
void sizes_unit_work_ep(const job_model *m, int unit, recompute_kind rc, int micro_batch, int tp, int sp, int cp,
                        int ep, double elem_bytes, sizes_unit_work *out);
/* Rows an MoE block routes on one tp rank per micro-batch (the ones its
 * choices send to the experts: sizes_unit_work_ep's rows x top_k, times
 * capacity_factor below 1): what its dispatch and combine move. */
double sizes_moe_routed_rows(const job_model *m, int micro_batch, int tp, int sp, int cp);

/* Parameters of the whole model (tp = 1): every unit's, the head's own copy of
 * the tied wte included (it is allocated, reduced and updated like any other);
 * *distinct (may be NULL) counts wte once. */
size_t sizes_model_numel(const job_model *m, size_t *distinct);
/* Of those, train.lora's frozen base (0 without LoRA): the rest, the
 * adapters, is what trains. */
size_t sizes_model_frozen_numel(const job_model *m);
/* Of the distinct parameters (wte once), the ones one token computes with
 * (model.moe: its top_k routed experts of every MoE block, not all E; the
 * router and the shared experts are always active): what "active
 * parameters" means for Mixtral's 12.9B of 46.7B and DeepSeek-V3's 37B of
 * 671B. The model's FLOPs (model_flops_per_sample) count the same weights. */
size_t sizes_model_active_numel(const job_model *m);

/* ---- per unit, per rank ---- */
/* Elements of `unit` on tp rank tp_rank (= model_unit_numel; with
 * parallel.ep an MoE block holds E / ep of its routed experts:
 * model_unit_numel_ep). */
size_t sizes_unit_numel(const sizes *s, int unit, int tp_rank);
/* train.lora: elements of `unit`'s frozen base on tp rank tp_rank
 * (model_unit_frozen_numel; 0 without LoRA), and the slice of it a rank
 * keeps: sharded over the parameters' group (FSDP / HSDP), else whole. No
 * gradient, no optimizer state. */
size_t sizes_unit_frozen_numel(const sizes *s, int unit, int tp_rank);
size_t sizes_frozen_shard(const sizes *s, int unit, sizes_at at, size_t *lo);
/* Of those, the routed experts' (model_unit_expert_numel / ep): what DDP's
 * and ZeRO-1's buckets reduce over the experts' data-parallel group, the
 * rest over dp x cp (the sharded modes shard the whole expert unit over it:
 * sizes_shard). 0 for a unit without experts. */
size_t sizes_unit_expert_numel(const sizes *s, int unit, int tp_rank);
/* The experts' data-parallel group, dp x cp / ep ranks (mesh.h MESH_EDP). */
int sizes_expert_dp(const sizes *s);
/* Data-parallel group a category is sharded over (1 = not sharded), and this
 * dp rank's position in it. */
int sizes_shard_group(const sizes *s, sizes_shard_of what);
int sizes_shard_rank(const sizes *s, sizes_shard_of what, int dp_rank);
/* The slice of `unit` a rank keeps: elements [*lo, *lo + return value). */
size_t sizes_shard(const sizes *s, sizes_shard_of what, int unit, sizes_at at, size_t *lo);
/* FSDP / HSDP: elements of one gathered unit buffer (the largest unit the pp rank
 * holds, whole), and how many of them (2: the next unit is gathered while this one
 * computes). 0 without FSDP / HSDP, or with a shard group of one (DDP runs it)
 * unless train.offload has params (each unit then comes from the host). Params
 * and grads each get these. */
size_t sizes_gather_numel(const sizes *s, sizes_at at);
int sizes_gather_buffers(const sizes *s);
/* The same for train.lora's frozen base: elements of its gather buffers
 * (the largest frozen unit held; 0 when FSDP shards over one rank or
 * without LoRA), as many as sizes_gather_buffers. */
size_t sizes_frozen_gather_numel(const sizes *s, sizes_at at);
/* ZeRO-2: full-unit gradient buffers that backward writes into while the previous
 * unit's is reduce-scattered into the shard. 0 otherwise. */
size_t sizes_reduce_numel(const sizes *s, sizes_at at);
int sizes_reduce_buffers(const sizes *s);
/* DDP / ZeRO-1 with dp > 1: gradient elements of one bucket (bucket_mb MiB, never
 * more than the rank's gradients). 0 otherwise. */
size_t sizes_bucket_numel(const sizes *s, sizes_at at);
/* PyTorch DDP's smaller first bucket (1 MiB, or the whole bucket when that is
 * smaller): the gradients backward finishes first go out while the rest of
 * backward runs, even when the whole model fits one bucket. */
size_t sizes_first_bucket_numel(const sizes *s, sizes_at at);
/* The buckets a rank's gradients make: the first, then bucket_numel each. */
long sizes_bucket_count(const sizes *s, sizes_at at);

/* ---- activations ---- */
/* Activations of global chunk c (micro_batch samples) on tp rank, at the job's
 * precision: what each micro-batch in flight stashes, and the working set the
 * chunk shares among them (model_acts_sizes). */
model_acts_size sizes_chunk_acts(const sizes *s, int chunk, int tp_rank);
/* One micro-batch alone: stash + work. */
size_t sizes_chunk_acts_bytes(const sizes *s, int chunk, int tp_rank);
/* Most microbatches of chunk c alive at once (1 with pp = 1). */
int sizes_acts_slots(const sizes *s, int chunk);
/* Most microbatches of all pp rank pp_rank's chunks alive at once (1 with
 * pp = 1): fewer than the sum of its chunks' when they peak at different
 * times (interleaved schedules). */
int sizes_rank_acts_slots(const sizes *s, int pp_rank);
/* The stashes a rank's pipeline executor holds for the run (pp_exec.h): each
 * local chunk's sizes_acts_slots of its own, or one pool of the rank's
 * sizes_rank_acts_slots buffers of its largest chunk's stash, whichever is
 * smaller (pp_stash_pool_bytes; *pooled, may be NULL, says which). One
 * micro-batch's with pp = 1. */
size_t sizes_stash_bytes(const sizes *s, sizes_at at, int *pooled);
/* Host bytes next to each model_acts (model_acts_host_bytes of micro_batch). */
size_t sizes_acts_host_bytes(const sizes *s);
/* The engine's host input buffers: samples of one step it holds at once (one
 * micro-batch with pp = 1; every micro-batch of the step with pp > 1, which the
 * executor may ask for in any order), and their bytes (GPT: token and target ids;
 * ViT: images and labels). */
int sizes_batch_samples(const sizes *s);
size_t sizes_batch_bytes(const sizes *s);
/* train.cuda_graphs (runtime/worker/engine_graph.c): the device buffers a
 * replayed step reads its inputs from, every micro-batch of the step (GPT:
 * tokens and targets; ViT: images and labels), sizes_graph_input_bytes, and
 * its scalars (loss, norm, clipping factor, AdamW's lr and t),
 * SIZES_GRAPH_SCALARS_BYTES; both device memory on either backend, counted
 * as workspace. 0 without train.cuda_graphs. */
#define SIZES_GRAPH_SCALARS_BYTES 64
size_t sizes_graph_input_bytes(const sizes *s);
size_t sizes_graph_bytes(const sizes *s);
/* GPT split over pipeline stages: elements of the scratch buffer the first and
 * the last stage use to sum the tied wte gradient (their whole unit 0 / head, so
 * a sharded gradient can be gathered into it); 0 on other ranks and layouts. */
size_t sizes_tied_scratch_numel(const sizes *s, sizes_at at);
/* Tensor parallelism under mixed precision: bf16 elements of the buffer the
 * tp collectives of activations stage through (tp.h): one micro-batch's
 * [B, seq / cp, d_model] (the rows this rank computes); 0 with tp 1 or in
 * fp32. */
size_t sizes_tp_stage_numel(const sizes *s);

/* Context parallelism: floats of the ring's buffers (cp.c), in this order: two
 * [micro_batch x seq / cp, 4 C / tp] payloads (k, v and their gradient; one is
 * sent while the other receives), a block's partial output [micro_batch x
 * seq / cp, C / tp] and its log-sum-exp [micro_batch x n_head / tp x seq /
 * cp]. 0 with cp 1. */
size_t sizes_cp_ring_numel(const sizes *s);
/* The gradient-reduction group's size: dp, or dp x cp (cp folds into it). */
int sizes_grad_dp(const sizes *s);

/* Expert parallelism (parallel.ep; 1 without). An expert unit (an MoE block
 * with ep > 1) holds experts / ep of its routed experts (sizes_unit_numel) and
 * shards over the experts' data-parallel group, dp x cp / ep ranks, when its
 * category shards over dp x cp (sizes_shard). */
int sizes_ep(const sizes *s);
int sizes_expert_unit(const sizes *s, int unit);
/* model.moe: the rows an MoE block's experts are priced at on a rank, per
 * micro-batch. The engine allocates what arrives (moe.c, ep.c: the experts'
 * rows, their gradients and the dispatcher's staging, none sized for the
 * worst), which the dry-run cannot know: it prices the even load, every rank
 * getting micro_batch x seq / cp x top_k rows, times SIZES_MOE_MARGIN; with
 * model.moe.capacity_factor the capacity's bound instead (every expert of the
 * rank full from every ep rank: exact, no margin); never more than the worst a
 * dropless router may bring (micro_batch x seq / cp x min(top_k, experts /
 * ep) x ep), which is also what one process computes
 * (top_k of the experts, all local: exact). sizes_moe_even_rows: the even
 * load alone; sizes_moe_worst_rows: that bound. */
#define SIZES_MOE_MARGIN 1.10
size_t sizes_moe_priced_rows(const sizes *s);
size_t sizes_moe_even_rows(const sizes *s);
size_t sizes_moe_worst_rows(const sizes *s);
/* What a rank at `at` holds that follows the routing, were `rows` rows to
 * arrive at every MoE block's experts in every micro-batch (the dry-run's
 * figures move by it when the routing is not the priced one): activations
 * (the experts' rows of the micro-batches in flight at once on the rank,
 * from the schedule's action lists when built, else each chunk's
 * sizes_acts_slots added up; and one block's working set of them: what
 * sizes_rank_memory adds to SIZES_ACTS at the priced rows, besides the
 * stashes of sizes_chunk_acts), and the dispatcher's staging bytes for
 * `rows` experts' rows (ep.c; its token side included). */
void sizes_moe_rows_memory(const sizes *s, sizes_at at, size_t rows, size_t *acts, size_t *staging);
/* The MoE dispatcher's staging (ep.c), 0 with ep 1: the token side's rows
 * (micro_batch x seq / cp x top_k, each of d_model) and the experts' side's
 * (the priced rows, sizes_moe_priced_rows; under tp at least the token
 * side's, which it holds for a moment); their floats plus one int per expert
 * row (a reorder's indices). ep.c grows the experts' side to what arrives:
 * sizes_ep_stage_numel_at counts it for exp_rows. */
void sizes_ep_stage(const sizes *s, size_t *tok_rows, size_t *exp_rows);
size_t sizes_ep_stage_numel(const sizes *s);
size_t sizes_ep_stage_numel_at(const sizes *s, size_t exp_rows);
/* Under tp (ep.c): the rows of the tp group's slots for exp_rows experts'
 * rows' shares (0 with tp 1 or without ep). */
size_t sizes_ep_stage_tp_at(const sizes *s, size_t exp_rows);

/* ---- the whole rank ---- */
void sizes_rank_memory(const sizes *s, sizes_at at, sizes_memory *out);
/* The tp rank whose memory is largest on pp rank pp_rank (dp rank 0: the
 * largest shard); what the dry-run reports for the stage. */
int sizes_worst_tp_rank(const sizes *s, int pp_rank);

const char *sizes_category_name(sizes_category c); /* "params", "master", ... */

#endif
